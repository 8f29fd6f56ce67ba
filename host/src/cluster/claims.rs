//! Which host drives a run: the claims of each epoch, and making the next.

use std::sync::Arc;

use bytes::Bytes;

use super::lease::{Lease, LeaseLapsed};
use super::twins::Found;
use super::{Cluster, HostId, Incarnation, LiveError};
use crate::journal::{JournalError, RunRecord, RunRecords};
use crate::shared_map::lock;
use crate::store::{RunId, StoreError, StoreKey, TenantId, TenantStore, keys_of};

/// Claims tried in a row before giving up on a run others keep claiming.
const CLAIM_TRIES: usize = 3;

/// What the claim retention makes before it deletes a run says: an epoch
/// past every host's, so that a driver late to the run (a retry after an
/// outage's backoff, a clone's stale claim) stands down at its next fence
/// instead of running it again from a journal half deleted, and no host
/// claims it again.
const DELETING: &[u8] = b"deleting";

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

/// What a claim holds: the host and the process of it that made it, so
/// that no two processes ever write the same bytes (a create retried
/// after a lost reply takes a claim it finds for its own only if it holds
/// these very bytes).
pub(super) fn claim_bytes(host: &HostId, incarnation: Incarnation) -> Bytes {
    Bytes::from(format!("{host} {incarnation}"))
}

/// The host and process a claim names; `None` for bytes that name no host
/// (then anyone may claim the run again).
fn claimed_by(bytes: &[u8]) -> Option<(HostId, Option<Incarnation>)> {
    let text = String::from_utf8_lossy(bytes);
    let (host, incarnation) = match text.split_once(' ') {
        Some((host, incarnation)) => (host, Some(incarnation.parse().ok()?)),
        None => (&*text, None),
    };
    Some((HostId::try_from(host.to_owned()).ok()?, incarnation))
}

/// This host's right to drive one run, for as long as its lease holds.
#[derive(Debug, Clone)]
pub struct Claim {
    lease: Arc<Lease>,
    generation: u64,
    /// The epoch this claim made or holds: the run's fencing token, which
    /// every later claim raises.
    pub epoch: u64,
}

impl Claim {
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
/// [`Claim::overtaken`]. Epoch 0 is the run's creator's, whose claim is
/// the run record itself.
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

/// The newest epoch claimed of `run`, if any.
async fn newest_epoch(store: &TenantStore, run: &RunId) -> Result<Option<u64>, StoreError> {
    Ok(store
        .list(&keys_of(run).owners())
        .await?
        .iter()
        .filter_map(|key| key.filename()?.parse::<u64>().ok())
        .max())
}

/// Whether the claim at `key` is still the one retention made: a run
/// created anew under the id after the old one's record was deleted may
/// have taken the key since.
pub async fn is_claimed_for_deletion(store: &TenantStore, key: &StoreKey) -> Result<bool, StoreError> {
    Ok(store.get(key).await?.as_deref() == Some(DELETING))
}

/// Claims `run` for its deletion, past every host's claim (or finds that
/// claim made by an earlier pass), and says its key, to delete last; `None`
/// if hosts kept claiming the run first.
pub async fn claim_for_deletion(store: &TenantStore, run: &RunId) -> Result<Option<StoreKey>, StoreError> {
    let keys = keys_of(run);
    for _ in 0..CLAIM_TRIES {
        let newest = newest_epoch(store, run).await?;
        if let Some(epoch) = newest
            && is_claimed_for_deletion(store, &keys.owner(epoch)).await?
        {
            return Ok(Some(keys.owner(epoch)));
        }
        let key = keys.owner(newest.unwrap_or(0) + 1);
        match store.create(&key, Bytes::from_static(DELETING)).await {
            Ok(()) => return Ok(Some(key)),
            Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

impl Cluster {
    /// The host that drives `record`'s run now (which may be dead).
    pub async fn owner(&self, store: &TenantStore, record: &RunRecord) -> Result<Owner, StoreError> {
        let keys = keys_of(&record.run_id);
        let Some(epoch) = newest_epoch(store, &record.run_id).await? else {
            return Ok(Owner {
                epoch: 0,
                host: record.host.clone(),
                incarnation: record.host_incarnation,
                deleting: false,
            });
        };
        let claim = store.get(&keys.owner(epoch)).await?;
        let deleting = claim.as_deref() == Some(DELETING);
        let claimed = claim.filter(|_| !deleting).and_then(|bytes| {
            let claimed = claimed_by(&bytes);
            if claimed.is_none() {
                tracing::warn!(run = %record.run_id, epoch, "a claim names no host, so the run may be claimed again: {}", String::from_utf8_lossy(&bytes));
            }
            claimed
        });
        let (host, incarnation) = claimed.map_or((None, None), |(host, incarnation)| (Some(host), incarnation));
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
            let epoch = owner.epoch + 1;
            let key = keys_of(&record.run_id).owner(epoch);
            match store.create(&key, claim_bytes(&self.me, self.incarnation)).await {
                Ok(()) if owner.epoch == 0 && !self.still_stored(store, record).await? => {
                    store.delete(&key).await?;
                    return Err(ClaimError::Deleting);
                }
                Ok(()) => {
                    tracing::info!(run = %record.run_id, epoch, from = owner.host.as_ref().map(HostId::as_str), "claimed the run");
                    return Ok(self.hold(&run_key.0, &run_key.1, generation, epoch));
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
        Ok(stored.is_some_and(|stored| stored.created_at_ms == record.created_at_ms))
    }

    /// Holds the claim of `epoch`, made in `generation` of the lease.
    pub fn hold(&self, tenant: &TenantId, run: &RunId, generation: u64, epoch: u64) -> Claim {
        let claim = Claim {
            lease: self.lease.clone(),
            generation,
            epoch,
        };
        lock(&self.held).insert((tenant.clone(), run.clone()), claim.clone());
        claim
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
