//! The components a tenant may store: how large one may be, how many, how
//! many bytes in all, and how long validating and compiling one may take;
//! and [`OverQuota`], the refusal of anything past a tenant's quota.
//!
//! Invariant: one tenant's uploads are checked and compiled one at a time
//! ([`Uploads::queue`]), so the count and bytes a check sees include every
//! upload before it, and one tenant's huge uploads queue behind each other
//! instead of taking every core from the others; a component already
//! stored is never refused (uploads are idempotent).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::shared_map::lock;
use crate::store::TenantId;

/// What components one tenant may store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComponentQuotas {
    /// Bytes of one component.
    pub max_bytes: usize,
    /// Components stored.
    pub max_count: usize,
    /// Bytes of every component stored.
    pub max_stored_bytes: u64,
    /// How long validating and compiling one upload may take.
    pub compile_timeout: Duration,
}

impl Default for ComponentQuotas {
    fn default() -> Self {
        Self {
            max_bytes: 64 << 20,
            max_count: 1_000,
            max_stored_bytes: 4 << 30,
            compile_timeout: Duration::from_secs(60),
        }
    }
}

/// Something past a tenant's quota: what, and by how much.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverQuota {
    /// An input, signal payload or schedule input is larger than the tenant may send.
    #[error(
        "{what} is {size} bytes; this tenant's quota allows at most {limit}: send less, or ask the operator for a larger quota"
    )]
    Payload {
        /// What was sent, e.g. "the input"; the message starts with it.
        what: String,
        /// Its size, in bytes.
        size: usize,
        /// Bytes of one payload the tenant may send.
        limit: usize,
    },
    /// The component is larger than one the tenant may upload.
    #[error(
        "the component is {size} bytes; this tenant's quota allows at most {limit}: upload a smaller component, or ask the operator for a larger quota"
    )]
    ComponentSize {
        /// Its size, in bytes.
        size: usize,
        /// Bytes one component may have.
        limit: usize,
    },
    /// The tenant has as many components stored as it may: delete one first.
    #[error("this tenant has {limit} components stored, its quota: delete one, or ask the operator for a larger quota")]
    ComponentCount {
        /// Components the tenant may have stored.
        limit: usize,
    },
    /// Storing the component would take the tenant past its stored bytes: delete one first.
    #[error(
        "this tenant's components take {used} bytes; {size} more would pass its quota of {limit} bytes: delete one, or ask the operator for a larger quota"
    )]
    ComponentBytes {
        /// Bytes of the components the tenant has stored.
        used: u64,
        /// Bytes of the new component.
        size: usize,
        /// Bytes of components the tenant may have stored.
        limit: u64,
    },
    /// Validating and compiling the component took longer than the tenant's limit.
    #[error(
        "validating and compiling the component took over {limit:?}, this tenant's limit: upload a smaller component"
    )]
    CompileTime {
        /// How long validating and compiling one upload may take.
        limit: Duration,
    },
}

impl ComponentQuotas {
    /// Refuses an upload of `size` bytes before it is read further.
    pub fn check_size(&self, size: usize) -> Result<(), OverQuota> {
        if size > self.max_bytes {
            return Err(OverQuota::ComponentSize {
                size,
                limit: self.max_bytes,
            });
        }
        Ok(())
    }

    /// Refuses a new component of `size` bytes beside the `stored` ones
    /// (digest and bytes of each), unless it is one of them.
    pub fn check_store(&self, stored: &[(String, u64)], digest: &str, size: usize) -> Result<(), OverQuota> {
        if stored.iter().any(|(stored, _)| stored == digest) {
            return Ok(());
        }
        let used: u64 = stored.iter().map(|(_, size)| size).sum();
        if stored.len() >= self.max_count {
            return Err(OverQuota::ComponentCount { limit: self.max_count });
        }
        if used.saturating_add(size as u64) > self.max_stored_bytes {
            return Err(OverQuota::ComponentBytes {
                used,
                size,
                limit: self.max_stored_bytes,
            });
        }
        Ok(())
    }
}

/// Uploads being checked, one at a time per tenant.
#[derive(Default)]
pub struct Uploads(Mutex<HashMap<TenantId, Arc<Semaphore>>>);

impl Uploads {
    /// Waits for `tenant`'s earlier uploads; the permit lets the next go.
    pub async fn queue(&self, tenant: &TenantId) -> Option<OwnedSemaphorePermit> {
        let semaphore = lock(&self.0)
            .entry(tenant.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(1)))
            .clone();
        semaphore.acquire_owned().await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_component_is_refused_at_the_count_and_past_the_bytes_and_one_stored_never() {
        let quotas = ComponentQuotas {
            max_bytes: 100,
            max_count: 2,
            max_stored_bytes: 150,
            ..ComponentQuotas::default()
        };
        assert!(quotas.check_size(100).is_ok());
        assert_eq!(
            quotas.check_size(101),
            Err(OverQuota::ComponentSize { size: 101, limit: 100 })
        );
        let one = vec![("a".to_owned(), 100)];
        assert!(quotas.check_store(&one, "b", 50).is_ok(), "exactly at the bytes");
        assert_eq!(
            quotas.check_store(&one, "b", 51),
            Err(OverQuota::ComponentBytes {
                used: 100,
                size: 51,
                limit: 150
            })
        );
        let two = vec![("a".to_owned(), 10), ("b".to_owned(), 10)];
        assert_eq!(
            quotas.check_store(&two, "c", 1),
            Err(OverQuota::ComponentCount { limit: 2 })
        );
        assert!(quotas.check_store(&two, "b", 10).is_ok(), "already stored");
    }
}
