//! Retention's claims on the runs it deletes: one past every host's claim
//! of the run's incarnation, so that a driver late to the run (a retry
//! after an outage's backoff, a clone's stale claim) stands down at its
//! next fence instead of running it again from a journal half deleted, and
//! no host claims it again.
//!
//! Invariants:
//! - A run's deletion is one host's at a time: a host finding another live
//!   host's deletion claim leaves the run to it, and takes over only from
//!   a host it judged dead, at the next epoch. So no two sweepers delete one
//!   run at once, and none deletes after another finished and the id was
//!   used again, unless its lease ran out in between (checked before each
//!   delete: [`Deleting::check`]).
//! - A deletion claim falls among the epochs of the incarnation of the
//!   record its sweeper read: a sweeper late to a run deleted already, whose
//!   id was used again since, claims among the old incarnation's epochs,
//!   which no claim of the new one reads. It names the run's creation, and
//!   the sweeper reads the record again after making it.

use std::sync::Arc;

use super::claim_text::{Claimed, Sweeper, claimed, deletion_bytes};
use super::claims::{CLAIM_TRIES, Claim, ClaimError, ClaimLost, epochs_of, newest_epoch, next_epoch};
use super::Cluster;
use crate::journal::RunRecord;
use crate::store::{StoreError, StoreKey, TenantStore, keys_of};

/// A deletion claim this host holds: its key, to delete last, and the
/// lease it was made under.
#[derive(Debug)]
pub struct Deleting {
    /// The claim's key.
    pub key: StoreKey,
    claim: Claim,
}

impl Deleting {
    /// Whether this host's lease still holds: checked before each delete,
    /// since a host judged dead may have had its sweep taken over.
    pub fn check(&self) -> Result<(), ClaimLost> {
        self.claim.check()
    }
}

impl Cluster {
    /// Claims `record`'s run for its deletion, past every host's claim of
    /// its incarnation, or finds that this process claimed it already;
    /// `None` if a live host is deleting it (the sweep is its), or hosts
    /// kept claiming the run first.
    pub async fn claim_for_deletion(
        self: &Arc<Self>,
        store: &TenantStore,
        record: &RunRecord,
    ) -> Result<Option<Deleting>, ClaimError> {
        let generation = self.live().await?;
        let (keys, epochs) = (keys_of(&record.run_id), epochs_of(record.incarnation));
        let mine = deletion_bytes(record.created_at_ms, &self.me, self.incarnation);
        let holding = |epoch| Deleting {
            key: keys.owner(epoch),
            claim: self.hold_for_deletion(record, generation, epoch),
        };
        for _ in 0..CLAIM_TRIES {
            let newest = newest_epoch(store, &record.run_id, &epochs).await?;
            if let Some(epoch) = newest {
                let bytes = store.get(&keys.owner(epoch)).await?.unwrap_or_default();
                if bytes == mine {
                    return Ok(Some(holding(epoch)));
                }
                if let Claimed::Deleting(Some(sweeper)) = claimed(&bytes)
                    && !self.is_gone(&sweeper).await?
                {
                    return Ok(None);
                }
            }
            let epoch = next_epoch(newest.unwrap_or(epochs.start), &epochs)?;
            match store.create(&keys.owner(epoch), mine.clone()).await {
                Ok(()) => return Ok(Some(holding(epoch))),
                Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }

    /// Whether `sweeper` deletes no more: another host judged dead, or
    /// another process under this host's id (which stopped, or stops at
    /// its next renewal). This process is not gone.
    pub async fn is_gone(&self, sweeper: &Sweeper) -> Result<bool, StoreError> {
        match sweeper.host == self.me {
            true => Ok(sweeper.incarnation != self.incarnation),
            false => self.is_dead(&sweeper.host).await,
        }
    }

    /// Whether the newest claim of `record`'s run is a deletion claim of
    /// it, by any sweeper: a sweep of it began.
    pub async fn is_being_deleted(&self, store: &TenantStore, record: &RunRecord) -> Result<bool, StoreError> {
        let epochs = epochs_of(record.incarnation);
        let Some(epoch) = newest_epoch(store, &record.run_id, &epochs).await? else {
            return Ok(false);
        };
        let bytes = store.get(&keys_of(&record.run_id).owner(epoch)).await?.unwrap_or_default();
        Ok(matches!(claimed(&bytes), Claimed::Deleting(sweeper)
            if sweeper.as_ref().is_none_or(|sweeper| sweeper.created_at_ms == record.created_at_ms)))
    }

    /// Whether `deleting` is still this process's claim on `record`'s run.
    pub async fn holds_for_deletion(
        &self,
        store: &TenantStore,
        record: &RunRecord,
        deleting: &Deleting,
    ) -> Result<bool, StoreError> {
        let mine = deletion_bytes(record.created_at_ms, &self.me, self.incarnation);
        Ok(store.get(&deleting.key).await?.as_ref() == Some(&mine))
    }
}
