//! The incarnations of run ids: a run id used again once retention deleted
//! its run names a new incarnation of it, above every incarnation
//! retention deleted, whatever the hosts' clocks say. Its claims' epochs
//! (the fencing tokens its steps get) lie above every earlier
//! incarnation's ([`crate::cluster::epochs_of`]), so a downstream service
//! never sees a token go down, and its steps' idempotency keys name it, so
//! a service never answers it with an earlier run's result.
//!
//! ```text
//! retired/{incarnation:020}   retention deleted a run of this incarnation (or of a lower one); empty, create-only
//! ```
//!
//! Invariants: retention marks a run's incarnation retired before the id
//! can be used again (before it deletes the run's last claim, while a
//! submission under the id still waits: see `RunRecords::vacancy`); a
//! submission under an id it found free reads the marks after that, and
//! takes the next incarnation. A sweep keeps the highest mark alone, so
//! the marks stay few. An id never used, or generated, is incarnation 0.

use bytes::Bytes;

use crate::store::{StoreError, StoreKey, TenantStore};

fn retired_key() -> StoreKey {
    StoreKey::from("retired")
}

/// The highest incarnation marked retired in `store`, if any.
async fn highest_retired(store: &TenantStore) -> Result<Option<u64>, StoreError> {
    Ok(store
        .list(&retired_key())
        .await?
        .iter()
        .filter_map(|key| key.filename()?.parse::<u64>().ok())
        .max())
}

/// The incarnation a run of an id found free is created as: one above
/// every incarnation retention deleted.
pub async fn next(store: &TenantStore) -> Result<u64, StoreError> {
    Ok(highest_retired(store)
        .await?
        .map_or(0, |highest| highest.saturating_add(1)))
}

/// The marks of one sweep of a tenant: read once, raised as it deletes.
pub struct Retired {
    highest: Option<u64>,
}

impl Retired {
    /// The marks as a sweep starts.
    pub async fn read(store: &TenantStore) -> Result<Self, StoreError> {
        Ok(Self {
            highest: highest_retired(store).await?,
        })
    }

    /// Marks `incarnation` retired, if no mark at or above it is known: call
    /// before the last claim of a run of it is deleted.
    pub async fn retire(&mut self, store: &TenantStore, incarnation: u64) -> Result<(), StoreError> {
        if self.highest.is_some_and(|highest| highest >= incarnation) {
            return Ok(());
        }
        let mark = StoreKey::from_iter(["retired".to_owned(), format!("{incarnation:020}")]);
        match store.create(&mark, Bytes::new()).await {
            Ok(()) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
        self.highest = Some(incarnation);
        Ok(())
    }

    /// Deletes every mark below the highest: what the sweep ends with.
    pub async fn keep_highest(&self, store: &TenantStore) -> Result<(), StoreError> {
        let listed = store.list(&retired_key()).await?;
        let highest = listed
            .iter()
            .filter_map(|key| key.filename()?.parse::<u64>().ok())
            .max();
        let lower: Vec<StoreKey> = listed
            .into_iter()
            .filter(|key| key.filename().and_then(|name| name.parse::<u64>().ok()) < highest)
            .collect();
        store.delete_all(&lower).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Storage, TenantId};

    /// An id is incarnation 0 until retention retires one; then one above
    /// the highest retired, however many sweeps marked what; a sweep keeps
    /// the highest mark alone, and another tenant's marks are its own.
    #[tokio::test]
    async fn a_new_incarnation_is_above_every_retired_one() -> Result<(), StoreError> {
        let storage = Storage::in_memory();
        let (store, other) = (
            storage.tenant(&TenantId::default_tenant()),
            storage.tenant(&TenantId::new("other").expect("an id")),
        );
        assert_eq!(next(&store).await?, 0);
        let mut sweep = Retired::read(&store).await?;
        sweep.retire(&store, 0).await?;
        assert_eq!(next(&store).await?, 1);
        let mut late = Retired::read(&store).await?;
        sweep.retire(&store, 3).await?;
        late.retire(&store, 2).await?;
        assert_eq!(next(&store).await?, 4, "a lower mark made late changes nothing");
        late.keep_highest(&store).await?;
        assert_eq!(store.list(&retired_key()).await?.len(), 1);
        assert_eq!(next(&store).await?, 4);
        assert_eq!(next(&other).await?, 0);
        Ok(())
    }
}
