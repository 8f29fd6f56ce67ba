//! Bells: a [`Notify`] per key, kept while someone listens, so that what
//! happens on this host (a place freed, a value appended) wakes its
//! waiters here at once instead of at their next look at the store.
//!
//! A ring with no listener is dropped: a bell only shortens a wait that
//! has a poll of the store as its backstop.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

use crate::shared_map::lock;

/// The bells of keys `K`, each alive while a listener holds it.
pub(super) struct Bells<K>(Mutex<HashMap<K, Weak<Notify>>>);

impl<K> Default for Bells<K> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<K: Eq + Hash> Bells<K> {
    /// The bell of `key`, to listen to; bells no one holds any longer are
    /// dropped meanwhile.
    pub(super) fn of(&self, key: K) -> Arc<Notify> {
        let mut bells = lock(&self.0);
        bells.retain(|_, bell| bell.strong_count() > 0);
        if let Some(bell) = bells.get(&key).and_then(Weak::upgrade) {
            return bell;
        }
        let bell = Arc::new(Notify::new());
        bells.insert(key, Arc::downgrade(&bell));
        bell
    }

    /// Wakes every listener of `key` waiting now.
    pub(super) fn ring(&self, key: &K) {
        let bell = lock(&self.0).get(key).and_then(Weak::upgrade);
        if let Some(bell) = bell {
            bell.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_ring_wakes_the_listeners_of_its_key_only_and_unheld_bells_go() {
        let bells = Bells::<u32>::default();
        let (one, two) = (bells.of(1), bells.of(2));
        {
            let (heard_one, heard_two) = (one.notified(), two.notified());
            tokio::pin!(heard_one, heard_two);
            heard_one.as_mut().enable();
            heard_two.as_mut().enable();
            bells.ring(&1);
            assert!(futures::poll!(heard_one).is_ready(), "key 1's listener is woken");
            assert!(futures::poll!(heard_two.as_mut()).is_pending(), "key 2's is not");
        }
        assert!(Arc::ptr_eq(&one, &bells.of(1)), "a held bell is the same bell");
        drop((one, two));
        let _three = bells.of(3);
        assert_eq!(lock(&bells.0).len(), 1, "the bells no one held are gone");
    }
}
