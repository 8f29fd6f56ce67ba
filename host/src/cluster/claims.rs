//! Which host drives a run: the claims of each epoch, and making the next.
//!
//! The epochs of a run are those of its incarnation ([`epochs_of`]): a run
//! id used again once retention deleted its run is a new incarnation
//! (`journal::incarnations`), whose epochs lie above every earlier
//! one's. So a fencing token never goes below one an earlier run of the id
//! had, and a claim made for an earlier incarnation (by a sweeper late to
//! it) never falls among a later one's.

use std::ops::Range;
use std::sync::Arc;


use super::claim_text::{Claimed, claim_bytes, claimed};
use super::lease::{Lease, LeaseLapsed};
use super::twins::Found;
use super::{Cluster, HostId, Incarnation, LiveError};
use crate::journal::{JournalError, RunRecord, RunRecords};
use crate::shared_map::lock;
use crate::store::{RunId, StoreError, TenantId, TenantStore, keys_of};

/// Claims tried in a row before giving up on a run others keep claiming.
pub(super) const CLAIM_TRIES: usize = 3;

/// Bits of an epoch that count one incarnation's claims (its creator's,
/// then one per takeover); the bits above them are the incarnation.
pub const CLAIM_BITS: u32 = 20;

/// The epochs of a run's incarnation `incarnation`: its creator holds the
/// first, each takeover makes the next.
pub fn epochs_of(incarnation: u64) -> Range<u64> {
    let first = incarnation.saturating_mul(1 << CLAIM_BITS);
    first..first.saturating_add(1 << CLAIM_BITS)
}

/// The incarnation whose claims count `epoch` (see [`epochs_of`]).
pub fn incarnation_of(epoch: u64) -> u64 {
    epoch >> CLAIM_BITS
}

/// The host of a run's highest claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The highest claim's epoch; 0 if the run has never been claimed.
    pub epoch: u64,
    /// `None` for a run stored before hosts claimed runs, or whose claim
    /// cannot be read: anyone may claim it.
    pub host: Option<HostId>,
    /// The process of `host` that made the claim; `None` for a claim
    /// stored before claims named one.
    pub incarnation: Option<Incarnation>,
    /// Retention is deleting the run: no host may claim it.
    pub deleting: bool,
}

/// This host's right to drive one run, for as long as its lease holds.
#[derive(Debug, Clone)]
pub struct Claim {
    lease: Arc<Lease>,
    generation: u64,
    /// The epoch this claim made or holds: the run's fencing token, which
    /// every later claim raises.
    pub epoch: u64,
    /// The run's creator's epoch: a claim above it took the run over.
    first: u64,
}

impl Claim {
    /// Whether this claim took the run over from another (or an earlier)
    /// claim, rather than being its creator's.
    pub fn took_over(&self) -> bool {
        self.epoch > self.first
    }

    /// Whether the claim still holds by this host's own lease: check before
    /// every write for the run.
    pub fn check(&self) -> Result<(), ClaimLost> {
        Ok(self.lease.check(self.generation)?)
    }

    /// Whether another host has claimed the run since this claim was made,
    /// which it does only once it judged this host dead: one read of the
    /// next epoch's claim (epochs are made one after another, so any later
    /// one means that one exists). Read before work another host could be
    /// starting too: a step attempt.
    pub async fn overtaken(&self, store: &TenantStore, run: &RunId) -> Result<Option<ClaimLost>, StoreError> {
        overtaken_at(store, run, self.epoch).await
    }
}

/// Whether another host has claimed `run` after the claim at `epoch`: see
/// [`Claim::overtaken`]. The first epoch of an incarnation is the run's
/// creator's, whose claim is the run record itself.
pub async fn overtaken_at(store: &TenantStore, run: &RunId, epoch: u64) -> Result<Option<ClaimLost>, StoreError> {
    let next = epoch.saturating_add(1);
    let claimed = store.version(&keys_of(run).owner(next)).await?;
    Ok(claimed.map(|_| ClaimLost::Overtaken { epoch: next }))
}

/// Why a claim no longer holds.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClaimLost {
    /// This host's lease lapsed, so another host may have taken the run
    /// over: stop driving it.
    #[error(transparent)]
    Lapsed(#[from] LeaseLapsed),
    /// Another host has claimed the run since: stop driving it.
    #[error("another host claimed the run at epoch {epoch}, after this host's claim (it judged this host dead)")]
    Overtaken {
        /// The epoch of the other host's claim.
        epoch: u64,
    },
}

/// Why this host may not drive a run.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// Another host drives the run: it is alive, or it claimed the run each
    /// time this host tried. Leave the run to it.
    #[error("it is driven by host {host}, which is alive (its heartbeat changed within the lease TTL)")]
    Owned {
        /// The host that drives the run.
        host: HostId,
    },
    /// Retention is deleting the run (it finished long ago).
    #[error("it finished, and is being deleted by retention")]
    Deleting,
    /// Every epoch of the run's incarnation was claimed: it was taken over
    /// a million times, and is left alone.
    #[error("it was claimed {claims} times, every epoch its incarnation has; it is left alone")]
    Exhausted {
        /// How many claims an incarnation has.
        claims: u64,
    },
    /// This host may claim no run (see [`LiveError`]).
    #[error(transparent)]
    Live(#[from] LiveError),
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run's record, read again after a first claim, could not be used.
    #[error(transparent)]
    Record(JournalError),
}

/// The newest epoch claimed of `run` among `epochs`, if any.
pub(super) async fn newest_epoch(
    store: &TenantStore,
    run: &RunId,
    epochs: &Range<u64>,
) -> Result<Option<u64>, StoreError> {
    Ok(store
        .list(&keys_of(run).owners())
        .await?
        .iter()
        .filter_map(|key| key.filename()?.parse::<u64>().ok())
        .filter(|epoch| epochs.contains(epoch))
        .max())
}

/// The next epoch after `epoch` among `epochs`, or why none is left.
pub(super) fn next_epoch(epoch: u64, epochs: &Range<u64>) -> Result<u64, ClaimError> {
    Some(epoch.saturating_add(1))
        .filter(|next| epochs.contains(next))
        .ok_or(ClaimError::Exhausted {
            claims: epochs.end - epochs.start,
        })
}

impl Cluster {
    /// The host that drives `record`'s run now (which may be dead).
    pub async fn owner(&self, store: &TenantStore, record: &RunRecord) -> Result<Owner, StoreError> {
        let keys = keys_of(&record.run_id);
        let epochs = epochs_of(record.incarnation);
        let Some(epoch) = newest_epoch(store, &record.run_id, &epochs).await? else {
            return Ok(Owner {
                epoch: epochs.start,
                host: record.host.clone(),
                incarnation: record.host_incarnation,
                deleting: false,
            });
        };
        let bytes = store.get(&keys.owner(epoch)).await?.unwrap_or_default();
        let (host, incarnation, deleting) = match claimed(&bytes) {
            Claimed::Host(host, incarnation) => (Some(host), incarnation, false),
            Claimed::Deleting(_) => (None, None, true),
            Claimed::Unreadable => {
                tracing::warn!(run = %record.run_id, epoch, "a claim names no host, so the run may be claimed again: {}", String::from_utf8_lossy(&bytes));
                (None, None, false)
            }
        };
        Ok(Owner {
            epoch,
            host,
            incarnation,
            deleting,
        })
    }

    /// A claim on `record`'s run for this host: the one it holds, or a new
    /// epoch if the run's owner is dead (or this process, in an earlier
    /// generation of its lease). Fails if a live host owns the run, and
    /// stops this host for good if the owner is a live twin of it (another
    /// process under its id: see `twins`).
    pub async fn claim(self: &Arc<Self>, store: &TenantStore, record: &RunRecord) -> Result<Claim, ClaimError> {
        let run_key = (store.tenant().clone(), record.run_id.clone());
        if let Some(held) = lock(&self.held).get(&run_key)
            && held.check().is_ok()
        {
            return Ok(held.clone());
        }
        let generation = self.live().await?;
        let (epochs, first) = (epochs_of(record.incarnation), record.first_epoch());
        let mut owner = self.owner(store, record).await?;
        for _ in 0..CLAIM_TRIES {
            if owner.deleting {
                return Err(ClaimError::Deleting);
            }
            if let Some(host) = &owner.host
                && !self.is_mine(host, owner.incarnation)
                && !self.is_dead_owner(host).await?
            {
                return Err(ClaimError::Owned { host: host.clone() });
            }
            let epoch = next_epoch(owner.epoch, &epochs)?;
            let key = keys_of(&record.run_id).owner(epoch);
            match store.create(&key, claim_bytes(&self.me, self.incarnation)).await {
                Ok(()) if owner.epoch == first && !self.still_stored(store, record).await? => {
                    store.delete(&key).await?;
                    return Err(ClaimError::Deleting);
                }
                Ok(()) => {
                    tracing::info!(run = %record.run_id, epoch, from = owner.host.as_ref().map(HostId::as_str), "claimed the run");
                    return Ok(self.hold(&run_key.0, record, generation, epoch));
                }
                Err(StoreError::AlreadyExists { .. }) => owner = self.owner(store, record).await?,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ClaimError::Owned {
            host: owner.host.unwrap_or_else(|| self.me.clone()),
        })
    }

    /// Whether a claim by `host`'s process `incarnation` is this process's.
    fn is_mine(&self, host: &HostId, incarnation: Option<Incarnation>) -> bool {
        *host == self.me && incarnation == Some(self.incarnation)
    }

    /// Whether the process that made a claim, not this one, is dead: for
    /// another host, as [`is_dead`](Self::is_dead) judges; for another
    /// process under this host's id, if the heartbeat is this process's
    /// (that one no longer renews it: it stopped, or stops at its next
    /// renewal, as this one would). A heartbeat of that other process's
    /// means two processes live under the id: this one stops for good
    /// before it claims anything.
    async fn is_dead_owner(&self, host: &HostId) -> Result<bool, ClaimError> {
        if *host != self.me {
            return Ok(self.is_dead(host).await?);
        }
        match self.heartbeat_holds().await? {
            Found::Its | Found::Deleted => Ok(true),
            Found::Another => Err(self.stop_for_twin().await.into()),
        }
    }

    /// Whether `record` is still the run stored under its id, read after a
    /// first claim: retention deletes a run's record before its claims, so
    /// a claim made once they are all gone (by a driver that read the
    /// record just before) finds the record gone, or another run's
    /// (found by the simulation, seed 4993: a step of a deleted run ran
    /// again from an empty journal).
    async fn still_stored(&self, store: &TenantStore, record: &RunRecord) -> Result<bool, ClaimError> {
        let stored = RunRecords::new(store.clone(), record.run_id.clone())
            .run()
            .await
            .map_err(|e| match e {
                JournalError::Store(e) => ClaimError::Store(e),
                e => ClaimError::Record(e),
            })?;
        Ok(stored.is_some_and(|stored| {
            (stored.created_at_ms, stored.incarnation) == (record.created_at_ms, record.incarnation)
        }))
    }

    /// Holds the claim of `epoch` on `record`'s run, made in `generation`
    /// of the lease.
    pub fn hold(&self, tenant: &TenantId, record: &RunRecord, generation: u64, epoch: u64) -> Claim {
        let claim = self.hold_for_deletion(record, generation, epoch);
        lock(&self.held).insert((tenant.clone(), record.run_id.clone()), claim.clone());
        claim
    }

    /// The claim of `epoch` on `record`'s run, made in `generation` of the
    /// lease, not held for driving the run: a deletion's.
    pub(super) fn hold_for_deletion(&self, record: &RunRecord, generation: u64, epoch: u64) -> Claim {
        Claim {
            lease: self.lease.clone(),
            generation,
            epoch,
            first: record.first_epoch(),
        }
    }

    /// Whether this host holds a claim on the run that still holds.
    pub fn holds(&self, tenant: &TenantId, run: &RunId) -> bool {
        lock(&self.held)
            .get(&(tenant.clone(), run.clone()))
            .is_some_and(|claim| claim.check().is_ok())
    }

    /// Lets go of the run: this host no longer drives it (it finished, or
    /// stopped). The claim stays in the store until another takes over.
    pub fn release(&self, tenant: &TenantId, run: &RunId) {
        lock(&self.held).remove(&(tenant.clone(), run.clone()));
    }
}
