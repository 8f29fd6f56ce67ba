//! In-memory caches held to a budget of bytes: the loaded components and
//! the workflow programs linked from them. Without a bound, every upload
//! and every component a run touched would stay in memory for the life of
//! the host.
//!
//! Eviction is `quick_cache`'s (S3-FIFO: recently and often used entries
//! stay), by weight; an evicted entry is loaded again from the store on its
//! next use. Callers holding an entry keep it alive until they drop it.

use std::hash::Hash;

use quick_cache::Weighter;
use quick_cache::sync::Cache;

/// A value with what it costs to keep.
#[derive(Clone)]
pub struct Weighed<V> {
    pub value: V,
    pub bytes: u64,
}

/// Weighs an entry by its bytes (at least 1, so every entry can be evicted).
#[derive(Clone, Copy)]
pub struct ByBytes;

impl<K, V> Weighter<K, Weighed<V>> for ByBytes {
    fn weight(&self, _key: &K, weighed: &Weighed<V>) -> u64 {
        weighed.bytes.max(1)
    }
}

/// A cache holding at most its budget of bytes.
pub struct ByteBudgetCache<K, V>(Cache<K, Weighed<V>, ByBytes>);

impl<K: Eq + Hash + Clone, V: Clone> ByteBudgetCache<K, V> {
    /// A cache of at most `budget` bytes, sized for about `entries` entries.
    pub fn new(budget: u64, entries: usize) -> Self {
        Self(Cache::with_weighter(entries.max(1), budget.max(1), ByBytes))
    }

    pub fn get(&self, key: &K) -> Option<V> {
        self.0.get(key).map(|weighed| weighed.value)
    }

    pub fn insert(&self, key: K, value: V, bytes: u64) {
        self.0.insert(key, Weighed { value, bytes });
    }

    pub fn remove(&self, key: &K) {
        self.0.remove(key);
    }

    /// The bytes the cache holds now.
    #[cfg(test)]
    pub fn weight(&self) -> u64 {
        self.0.weight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_stays_within_its_budget_whatever_is_inserted() {
        let cache = ByteBudgetCache::new(1_000, 8);
        for key in 0..100_u32 {
            cache.insert(key, key, 300);
            assert!(cache.weight() <= 1_000, "{} bytes held", cache.weight());
        }
        assert!(cache.get(&99).is_some(), "the newest entry is kept");
        assert!(cache.get(&0).is_none(), "old entries were evicted");
        cache.insert(1_000, 1_000, u64::from(u32::MAX));
        assert!(cache.weight() <= 1_000, "an entry over the whole budget is not kept");
    }
}
