//! Retention: a tenant's finished runs are kept for its `retention`, then
//! a sweeper deletes every object of theirs (run record, journal,
//! snapshots, attempts, timers, signals, outcome), oldest first, in batches;
//! and a component nothing refers to any more can be deleted.
//!
//! Invariants: a finished run is found through the ledger's segments of
//! runs ended, by hour (`ledger/ended/{hour}/…`, see
//! [`crate::journal::ledger`]), or, stored before the ledger, through its
//! marker in the index of finished runs (`finished/{hour}/{finished-at}-{run}`).
//! A run noted open whose end was never noted is noted ended by recovery,
//! so no finished run is missed for long. The run record goes last and
//! the segment (or marker) after it, rewritten without the runs deleted,
//! so a sweep cut short is finished by the next, and a run submitted again
//! under the id (which can only be created once the record is gone, and
//! is noted with its own creation time) loses nothing to a sweep of its
//! predecessor. Deleting is
//! idempotent: hosts sweeping the same tenant at once only repeat deletes.
//! A finished child run (or a generation of a chain a parent started) is
//! kept while its parent is unfinished: the parent may await it any time,
//! and would otherwise wait for ever. A component is deleted only while no
//! name, schedule or stored run refers to it, and stored again if a run another host started meanwhile
//! turns out to (see [`Components::delete`](crate::component::Components::delete)).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::RunError;
use super::recently_ended::RecentlyEnded;
use crate::clock::{BootInstant, now_ms};
use crate::cluster::{ClaimError, Cluster, Deleting, deleted_by};
use crate::journal::incarnations::Retired;
use crate::journal::ledger::{self, Ledger, NotedRun, created};
use crate::journal::{JournalError, Outcome, RunRecord, RunRecords};
use crate::metrics::Metrics;
use crate::policy::Policies;
use crate::shared_map::lock;
use crate::store::{
    RunId, Storage, StoreKey, TenantId, TenantStore, chain_key, finished_key, keys_of, parse_finished_marker,
};
use crate::task::{Seam, seam};

/// Runs one pass deletes per tenant, at most: the rest wait for the next.
pub const SWEEP_BATCH: usize = 100;
/// How long after it was sent a write may still land (a request delayed in
/// the network, its reply lost and a retry answered first): a run's id is
/// held this long after the last of its deletes was sent, so that no such
/// delete lands on what a new run of the id stored.
pub const LATE_WRITES_LAND_WITHIN: Duration = Duration::from_secs(30);
/// How often the sweeper looks, within these bounds: a quarter of the
/// shortest retention.
const SWEEP_EVERY: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));

/// What one pass deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Runs deleted.
    pub runs: u64,
    /// Stored objects deleted, over all those runs.
    pub objects: u64,
}

/// The sweeper of runs past their tenant's retention: it sees the store,
/// the tenants' policies, the statuses kept of runs just ended (which a
/// deleted run's must leave) and the metrics, nothing else.
pub struct Retention {
    storage: Storage,
    /// Whose lease and claims a deletion is made under.
    cluster: Arc<Cluster>,
    /// Compacted before a sweep, which reads only what compactions wrote.
    ledger: Ledger,
    policies: Arc<Policies>,
    ended: Arc<RecentlyEnded>,
    metrics: Arc<Metrics>,
    /// The ids held after their run was deleted, and since when on this
    /// host's boot clock: since it sent its own last delete, or first
    /// found another sweeper's claim gone.
    held: Mutex<HashMap<(TenantId, RunId), BootInstant>>,
    /// Since when this host has seen each segment of runs taken off the
    /// listing, which goes once seen so for long enough.
    dropped: created::DropSightings,
}

impl Retention {
    pub(super) fn new(
        storage: Storage,
        cluster: Arc<Cluster>,
        ledger: Ledger,
        policies: Arc<Policies>,
        ended: Arc<RecentlyEnded>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            storage,
            cluster,
            ledger,
            policies,
            ended,
            metrics,
            held: Mutex::default(),
            dropped: created::DropSightings::default(),
        }
    }

    /// Sweeps every tenant with a retention, from a background task, for
    /// as long as the process lives.
    pub fn sweep_forever(self: &Arc<Self>) {
        let retention = self.clone();
        crate::task::spawn(async move {
            loop {
                let kept = retention.policies.retentions();
                for (tenant, kept_for) in &kept {
                    if let Err(e) = retention.sweep(tenant, *kept_for).await {
                        tracing::warn!(%tenant, "the retention sweep stopped; it goes on at the next: {e}");
                    }
                }
                let shortest = kept.iter().map(|(_, kept_for)| *kept_for / 4).min();
                let every = shortest.unwrap_or(SWEEP_EVERY.1).clamp(SWEEP_EVERY.0, SWEEP_EVERY.1);
                tokio::time::sleep(every).await;
            }
        });
    }

    /// Deletes up to [`SWEEP_BATCH`] of the tenant's runs that finished
    /// over `retention` ago, oldest first, and takes them off the listing
    /// (tidying the hours whose runs dropped are due to go: see
    /// [`Ledger::tidy`]).
    pub async fn sweep(&self, tenant: &TenantId, retention: Duration) -> Result<Swept, RunError> {
        let store = self.storage.tenant(tenant);
        let cutoff = now_ms().saturating_sub(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX));
        let mut swept = Swept::default();
        self.ledger.ensure_listed(&store).await?;
        self.ledger.compact(&store).await?;
        let mut retired = Retired::read(&store).await?;
        self.sweep_ended(&store, cutoff, &mut swept, &mut retired).await?;
        self.sweep_finished_markers(&store, cutoff, &mut swept, &mut retired)
            .await?;
        retired.keep_highest(&store).await?;
        self.ledger.tidy(&store, &self.dropped).await?;
        if swept.runs > 0 {
            tracing::info!(%tenant, runs = swept.runs, objects = swept.objects, "deleted runs past their retention");
            self.metrics.swept(tenant, swept.runs, swept.objects);
        }
        Ok(swept)
    }

    /// Deletes the runs stored before the ledger that finished by `cutoff`,
    /// found by their markers (`finished/{hour}/…`), oldest first, up to
    /// what `swept` leaves of a batch; takes them off the listing, then
    /// deletes their markers.
    async fn sweep_finished_markers(
        &self,
        store: &TenantStore,
        cutoff: u64,
        swept: &mut Swept,
        retired: &mut Retired,
    ) -> Result<(), RunError> {
        let (mut markers, mut deleted) = (Vec::new(), BTreeSet::new());
        'hours: for hour in store.children(&finished_key()).await? {
            let Ok(hour_number) = hour.parse::<u64>() else { continue };
            if hour_number.saturating_mul(3_600_000) > cutoff {
                break;
            }
            for marker in store.list(&StoreKey::from_iter(["finished", hour.as_str()])).await? {
                let Some((finished_at_ms, run)) = marker.filename().and_then(parse_finished_marker) else {
                    continue;
                };
                if finished_at_ms > cutoff || swept.runs as usize == SWEEP_BATCH {
                    break 'hours;
                }
                let Some(gone) = self.delete_run(store, &run, finished_at_ms, None, retired).await? else {
                    continue;
                };
                swept.objects += gone.objects;
                swept.runs += gone.runs;
                if gone.runs > 0 {
                    self.ended.forget(store.tenant(), &run);
                    deleted.extend(gone.created_at_ms.map(|created_at_ms| NotedRun { run, created_at_ms }));
                }
                if gone.freed {
                    markers.push(marker);
                }
            }
        }
        self.ledger.unlist(store, &deleted, &self.dropped).await?;
        Ok(store.delete_all(&markers).await?)
    }

    /// Deletes the runs the ledger's ended segments list as finished by
    /// `cutoff`, oldest hour first, up to what `swept` leaves of a batch;
    /// takes them off the listing; a segment is rewritten without those
    /// deleted, then goes.
    async fn sweep_ended(
        &self,
        store: &TenantStore,
        cutoff: u64,
        swept: &mut Swept,
        retired: &mut Retired,
    ) -> Result<(), RunError> {
        for hour in store.children(&ledger::ended_key()).await? {
            let Ok(hour_number) = hour.parse::<u64>() else { continue };
            if hour_number.saturating_mul(3_600_000) > cutoff || swept.runs as usize == SWEEP_BATCH {
                return Ok(());
            }
            let folder = ledger::ended_folder(&hour);
            for segment in store.list(&folder).await? {
                let ended = ledger::ended_runs(store, &segment).await?;
                let (mut kept, mut deleted) = (Vec::new(), BTreeSet::new());
                for (noted, finished_at_ms) in &ended {
                    let gone = match *finished_at_ms > cutoff || swept.runs as usize == SWEEP_BATCH {
                        true => None,
                        false => {
                            let created_at_ms = Some(noted.created_at_ms);
                            self.delete_run(store, &noted.run, *finished_at_ms, created_at_ms, retired)
                                .await?
                        }
                    };
                    let Some(gone) = gone else {
                        kept.push((noted.clone(), *finished_at_ms));
                        continue;
                    };
                    swept.objects += gone.objects;
                    swept.runs += gone.runs;
                    if gone.runs > 0 {
                        self.ended.forget(store.tenant(), &noted.run);
                    }
                    // Not this run's (another under the id, or none), or
                    // deleted now: off the listing; its note goes once
                    // the id is free.
                    if gone.runs > 0 || gone.objects == 0 {
                        deleted.insert(noted.clone());
                    }
                    if !gone.freed {
                        kept.push((noted.clone(), *finished_at_ms));
                    }
                }
                if kept.len() < ended.len() {
                    self.ledger.unlist(store, &deleted, &self.dropped).await?;
                    ledger::rewrite_ended(store, &folder, &segment, &kept).await?;
                }
            }
        }
        Ok(())
    }
}

/// What deleting a run did.
struct Deleted {
    /// The objects deleted: none for a run under the id that is not the
    /// one asked for, or for no run.
    objects: u64,
    /// Runs deleted now (their records): 1, or 0 for one held since.
    runs: u64,
    /// When the run deleted was created, if its record was stored.
    created_at_ms: Option<u64>,
    /// Whether its id is free: its deletion claim gone (see
    /// [`LATE_WRITES_LAND_WITHIN`]).
    freed: bool,
}

impl Deleted {
    const NOTHING: Self = Self {
        objects: 0,
        runs: 0,
        created_at_ms: None,
        freed: true,
    };
}

impl Retention {
    /// Deletes the objects of `run`, which finished at `finished_at_ms`,
    /// and says what it deleted; `None` if it is kept for now: its parent
    /// unfinished, another live host deleting it, or no outcome stored (a
    /// run never deleted unfinished, whatever the ledger says). A run
    /// started anew under the id since (its record younger than the
    /// marker, or created at another time than the ledger noted,
    /// `created_at_ms`) is another run, and is left alone; so is what a run
    /// the ledger noted but never created left (a submission under the id
    /// may be writing it), unless a sweep of that run's this host takes
    /// over left it. The run's incarnation is marked retired in `retired`
    /// before the id can be used again.
    async fn delete_run(
        &self,
        store: &TenantStore,
        run: &RunId,
        finished_at_ms: u64,
        created_at_ms: Option<u64>,
        retired: &mut Retired,
    ) -> Result<Option<Deleted>, RunError> {
        let records = RunRecords::new(store.clone(), run.clone());
        let (record, outcome) = futures::try_join!(records.stored_record(), records.outcome())?;
        let Some(record) = record else {
            return self.finish_a_sweep_left(store, run, created_at_ms).await;
        };
        // The ledger names the run by its creation; a marker of before the
        // ledger only by when it finished, so a record younger than that is
        // another run's. Two hosts' clocks are never compared otherwise (found
        // by the simulation, seed 2 with offsets=120: a run created on a clock
        // an hour ahead and finished on one an hour behind was taken for
        // another under its id, left undeleted and taken off the listing).
        let another = match created_at_ms {
            Some(created_at_ms) => created_at_ms != record.created_at_ms,
            None => record.created_at_ms > finished_at_ms,
        };
        if another {
            return Ok(Some(Deleted::NOTHING));
        }
        // A sweep of the run that stopped after deleting its outcome left
        // its deletion claim: that run has ended, any other has not.
        if outcome.is_none() && record.abandoned.is_none() && !self.cluster.is_being_deleted(store, &record).await? {
            tracing::error!(%run, "the run is noted ended but has no outcome: it is kept, never deleted unfinished");
            return Ok(None);
        }
        if let Some(parent) = &record.parent
            && is_unfinished(store, parent).await?
        {
            return Ok(None);
        }
        // A chain's last generation takes the chain's pointer with it;
        // one that continued leaves it to the generations after, and so
        // does one whose outcome an earlier pass deleted before it failed
        // (the simulation's seed 332: a continued generation swept again
        // took the pointer, and its chain, its root deleted, could no
        // longer be found to resume).
        if let Some(link) = &record.chain
            && matches!(outcome, Some(outcome) if !matches!(outcome, Outcome::Continued { .. }))
        {
            store.delete(&chain_key(&link.root)).await?;
        }
        // Claimed past every host first: a driver late to the run stands
        // down at its next fence instead of running it again from a
        // journal half deleted, no host claims it again, and no other host
        // deletes it meanwhile (found by the simulation, seed 2085: a
        // clone's drive retried after an outage started a step of a run
        // retention was deleting).
        let Some(deleting) = self.claim_for_deletion(store, &record).await? else {
            return Ok(None);
        };
        seam(Seam::BetweenDeletionClaimAndListing).await;
        // The record read again after the claim: one read before it may
        // have been deleted since by another sweep, and the id used again.
        if !is_stored(&records, &record).await? {
            if self.cluster.holds_for_deletion(store, &record, &deleting).await? {
                store.delete(&deleting.key).await?;
            }
            return Ok(Some(Deleted::NOTHING));
        }
        let objects = self
            .delete_objects(store, &records, &record, &deleting, retired)
            .await?;
        Ok(Some(Deleted {
            objects,
            runs: 1,
            created_at_ms: Some(record.created_at_ms),
            freed: false,
        }))
    }

    /// Sweeps at once the record a recovery stored as abandoned under
    /// `record`'s id (see `RunRecords::settle_phantom`), as it sweeps a
    /// finished run: claimed for deletion, read again, deleted, the id held
    /// [`LATE_WRITES_LAND_WITHIN`]. A submission under the id may then
    /// create the run anew. (Before, the id stayed given up until the
    /// tenant's retention came to the tombstone, days later, and a parent
    /// whose child's creation had stalled past `PHANTOM_AFTER` failed:
    /// found by the simulation, seed 1373.)
    pub(super) async fn sweep_abandoned(&self, store: &TenantStore, record: &RunRecord) -> Result<(), RunError> {
        let mut retired = Retired::read(store).await?;
        let created_at_ms = record.created_at_ms;
        (self.delete_run(store, &record.run_id, created_at_ms, Some(created_at_ms), &mut retired)).await?;
        Ok(())
    }

    /// Deletes at once the run `record`, which a submission stored too
    /// late to keep (see `Runs::create`): claimed for deletion past every
    /// host, so a drive begun meanwhile stands down at its next fence,
    /// read again, deleted, its incarnation retired again and the id held
    /// [`LATE_WRITES_LAND_WITHIN`], as a swept run's. It has no outcome:
    /// no one was told it exists.
    pub(super) async fn take_back(&self, store: &TenantStore, record: &RunRecord) -> Result<(), RunError> {
        let records = RunRecords::new(store.clone(), record.run_id.clone());
        let Some(deleting) = self.claim_for_deletion(store, record).await? else {
            return Ok(());
        };
        if is_stored(&records, record).await? {
            let mut retired = Retired::read(store).await?;
            (self.delete_objects(store, &records, record, &deleting, &mut retired)).await?;
        }
        tracing::warn!(run = %record.run_id, incarnation = record.incarnation, "a run record stored after its incarnation was retired was taken back");
        Ok(())
    }

    /// Deletes what `record`'s run stores, under the deletion claim
    /// `deleting`, checking this host's lease before each delete. The
    /// record goes after all but the claims: until it is gone no run of
    /// this id can be created, so nothing deleted belongs to a newer run;
    /// it is read again right before, and the outcome goes just before it,
    /// so the run never looks unfinished for longer than one delete. Its
    /// incarnation is then marked retired. The claims stay, holding the id
    /// (a fence fails, and a submission under the id waits) until
    /// [`LATE_WRITES_LAND_WITHIN`] has passed: a later pass frees it
    /// ([`free`](Self::free)). Says how many objects were deleted.
    async fn delete_objects(
        &self,
        store: &TenantStore,
        records: &RunRecords,
        record: &RunRecord,
        deleting: &Deleting,
        retired: &mut Retired,
    ) -> Result<u64, RunError> {
        let keys = keys_of(&record.run_id);
        let outcome_key = keys.of(record.incarnation).outcome();
        let (record_key, claims) = (keys.run(), keys.owners());
        let stored = store.list(&keys.root()).await?;
        let (earlier_claims, rest): (Vec<StoreKey>, Vec<StoreKey>) = stored
            .iter()
            .filter(|key| **key != record_key && **key != outcome_key && **key != deleting.key)
            .cloned()
            .partition(|key| key.prefix_matches(&claims));
        let lapsed = |why| JournalError::StoodDown {
            run: record.run_id.clone(),
            why,
        };
        deleting.check().map_err(lapsed)?;
        store.delete_all(&rest).await?;
        deleting.check().map_err(lapsed)?;
        store.delete(&outcome_key).await?;
        if is_stored(records, record).await? {
            deleting.check().map_err(lapsed)?;
            store.delete(&record_key).await?;
        }
        retired.retire(store, record.incarnation).await?;
        let held = (store.tenant().clone(), record.run_id.clone());
        lock(&self.held).insert(held, BootInstant::now());
        Ok((stored.len() - earlier_claims.len() - 1) as u64)
    }

    /// This host's deletion claim on `record`'s run (see
    /// [`Cluster::claim_for_deletion`]).
    async fn claim_for_deletion(&self, store: &TenantStore, record: &RunRecord) -> Result<Option<Deleting>, RunError> {
        self.cluster
            .claim_for_deletion(store, record)
            .await
            .map_err(|e| match e {
                ClaimError::Store(e) => e.into(),
                ClaimError::Live(e) => e.into(),
                ClaimError::Record(e) => e.into(),
                ClaimError::Exhausted { claims } => RunError::ClaimedTooOften {
                    run: record.run_id.clone(),
                    claims,
                },
                ClaimError::Owned { .. } | ClaimError::Deleting => RunError::BeingDeleted {
                    run: record.run_id.clone(),
                },
            })
    }

    /// What to make of a run noted ended whose record is gone: a sweep of
    /// it, by this host or one gone since, holds the id until it may be
    /// freed ([`free`](Self::free)), and then its note goes; a live host's
    /// holds it still; otherwise the note alone goes.
    async fn finish_a_sweep_left(
        &self,
        store: &TenantStore,
        run: &RunId,
        created_at_ms: Option<u64>,
    ) -> Result<Option<Deleted>, RunError> {
        match self.held_by_a_sweep(store, run, created_at_ms).await? {
            Some(true) => Ok(self.free(store, run).await?.then_some(Deleted::NOTHING)),
            Some(false) => Ok(None),
            None => Ok(Some(Deleted::NOTHING)),
        }
    }

    /// Whether `run`'s id is held by a deletion claim of the run created at
    /// `created_at_ms` (of any, without it), its record gone: `Some(true)`
    /// if this host may free it (its sweeper is this process, or gone, or
    /// names none), `Some(false)` if a live host's sweep holds it, `None`
    /// if no sweep holds it.
    async fn held_by_a_sweep(
        &self,
        store: &TenantStore,
        run: &RunId,
        created_at_ms: Option<u64>,
    ) -> Result<Option<bool>, RunError> {
        let keys = keys_of(run);
        let newest = (store.list(&keys.owners()).await?)
            .iter()
            .filter_map(|key| key.filename()?.parse::<u64>().ok())
            .max();
        let Some(epoch) = newest else { return Ok(None) };
        let bytes = store.get(&keys.owner(epoch)).await?.unwrap_or_default();
        Ok(match deleted_by(&bytes) {
            Some(Some(sweeper)) if created_at_ms.is_none_or(|created| created == sweeper.created_at_ms) => {
                let mine = sweeper.host == *self.cluster.me() && sweeper.incarnation == self.cluster.incarnation();
                Some(mine || self.cluster.is_gone(&sweeper).await?)
            }
            Some(None) => Some(true),
            _ => None,
        })
    }

    /// Frees the id of `records` if a sweep this host may free it for holds
    /// it and the while has passed (see [`free`](Self::free)). Whether it
    /// was freed here (not if a live host's sweep holds it, nor if none
    /// does: then the caller looks again).
    pub(super) async fn free_if_left(&self, records: &RunRecords) -> Result<bool, RunError> {
        let (store, run) = (records.store(), records.run_id());
        match self.held_by_a_sweep(store, run, None).await? {
            Some(true) => self.free(store, run).await,
            Some(false) | None => Ok(false),
        }
    }

    /// Frees `run`'s id, held by a sweep whose record is gone, once
    /// [`LATE_WRITES_LAND_WITHIN`] has passed since this host deleted the
    /// record (or first found the sweep's sweeper gone, or another process
    /// of its id's sweep held: either sent its deletes before): what landed
    /// late under the id, and the claims, are deleted, the newest claim
    /// last. `false` while it is held still.
    pub(super) async fn free(&self, store: &TenantStore, run: &RunId) -> Result<bool, RunError> {
        let held = (store.tenant().clone(), run.clone());
        let since = *lock(&self.held).entry(held.clone()).or_insert_with(BootInstant::now);
        if since.elapsed() < LATE_WRITES_LAND_WITHIN {
            return Ok(false);
        }
        let keys = keys_of(run);
        let (mut claims, rest): (Vec<StoreKey>, Vec<StoreKey>) = (store.list(&keys.root()).await?)
            .into_iter()
            .partition(|key| key.prefix_matches(&keys.owners()));
        store.delete_all(&rest).await?;
        claims.sort_by_key(|key| key.filename().and_then(|name| name.parse::<u64>().ok()));
        if let Some(newest) = claims.pop() {
            store.delete_all(&claims).await?;
            store.delete(&newest).await?;
        }
        lock(&self.held).remove(&held);
        tracing::debug!(%run, "the run's id is free again");
        Ok(true)
    }
}

/// Whether `record`'s run, this very creation of it, is what `records`
/// stores now.
async fn is_stored(records: &RunRecords, record: &RunRecord) -> Result<bool, RunError> {
    Ok(records.stored_record().await?.is_some_and(|stored| {
        (stored.created_at_ms, stored.incarnation, stored.abandoned.is_some())
            == (record.created_at_ms, record.incarnation, record.abandoned.is_some())
    }))
}

/// Whether `run` is stored and has not ended.
async fn is_unfinished(store: &TenantStore, run: &RunId) -> Result<bool, RunError> {
    let records = RunRecords::new(store.clone(), run.clone());
    Ok(records.run().await?.is_some() && records.outcome().await?.is_none())
}

#[cfg(test)]
mod tests {
    use crate::runtime::Runtime;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use futures::FutureExt;

    use super::*;
    use crate::clock::VirtualTime;
    use crate::component::CodeCache;
    use crate::config::HostConfig;
    use crate::journal::ledger::{ListedRun, NotedRun, created};
    use crate::journal::{ChainLink, RunRecord, SignalRecord};
    use crate::journal::{Vacancy, incarnations};
    use crate::shared_map::lock;
    use crate::store::{Storage, finished_marker, seams};

    /// Submits run `r0001` again, with a signal, the first time its id is
    /// free; not from inside its own deletes.
    #[derive(Default)]
    struct Resubmission {
        storage: std::sync::OnceLock<Storage>,
        busy: AtomicBool,
        created: Mutex<Option<RunRecords>>,
    }

    impl Resubmission {
        async fn try_once(&self) {
            // Unset while the old run is being stored.
            let Some(storage) = self.storage.get() else { return };
            if lock(&self.created).is_some() || self.busy.swap(true, Ordering::SeqCst) {
                return;
            }
            let again = RunRecords::new(storage.tenant(&TenantId::default_tenant()), run(1));
            if again.vacancy().await.expect("a listing") == Vacancy::Free {
                let incarnation = incarnations::next(again.store()).await.expect("a listing");
                let record = RunRecord {
                    incarnation,
                    ..RunRecord::example("r0001", now_ms())
                };
                again.create_run(&record).await.expect("the id is free");
                let go = "go".parse().expect("a name");
                again.send_signal(&go, &signal(), None).await.expect("stored");
                *lock(&self.created) = Some(again);
            }
            self.busy.store(false, Ordering::SeqCst);
        }
    }

    /// A run submitted again under the id of a run being swept, between
    /// any two of the sweep's deletes, is either refused (as existing, or
    /// as being deleted) or created whole, as a new incarnation: the sweep
    /// never deletes what the new run stored, the new run finds nothing of
    /// the old one, and its epochs lie above the old one's. The id is held
    /// for LATE_WRITES_LAND_WITHIN after the sweep's deletes.
    #[tokio::test(start_paused = true)]
    async fn a_run_submitted_under_the_id_being_swept_keeps_everything_it_stored() -> Result<(), RunError> {
        let _virtual = VirtualTime::start(1_800_000_000_000);
        let long_ago = now_ms() - 7_200_000;
        let tenant = TenantId::default_tenant();
        let resubmission = Arc::new(Resubmission::default());
        let before: seams::Before = {
            let resubmission = resubmission.clone();
            Arc::new(move |call, _| {
                let resubmission = resubmission.clone();
                async move {
                    if matches!(call, seams::Call::Delete | seams::Call::List) {
                        resubmission.try_once().await
                    }
                    Ok(())
                }
                .boxed()
            })
        };
        let storage = Storage::new(Arc::new(seams::Seams::before(before)));
        let old = RunRecords::new(storage.tenant(&tenant), run(1));
        old.create_run(&RunRecord::example("r0001", long_ago)).await?;
        old.send_signal(&"old".parse().expect("a name"), &signal(), None)
            .await?;
        old.finish(&Outcome::Completed { output: "1".into() }).await?;
        old.unlist(long_ago).await;
        resubmission.storage.set(storage.clone()).expect("set once");

        let runtime = runtime(storage.clone());
        let swept = runtime.retention().sweep(&tenant, Duration::from_secs(3600)).await?;
        assert_eq!(swept.runs, 1);
        assert!(lock(&resubmission.created).is_none(), "the id is held after the sweep");
        tokio::time::sleep(LATE_WRITES_LAND_WITHIN).await;
        runtime.retention().sweep(&tenant, Duration::from_secs(3600)).await?;

        let again = lock(&resubmission.created)
            .take()
            .expect("the id was free once the old run was gone");
        let stored = again.run().await?.expect("the new run's record survives the sweep");
        assert!(stored.created_at_ms > long_ago);
        assert_eq!(stored.incarnation, 1, "above the deleted run's incarnation");
        assert_eq!(again.outcome().await?, None, "the new run has not finished");
        let signals: Vec<_> = storage.tenant(&tenant).list(&keys_of(&run(1)).all_signals()).await?;
        assert_eq!(signals.len(), 1, "the new run's signal alone: {signals:?}");
        assert!(signals[0].as_ref().contains("/go/"), "{signals:?}");
        Ok(())
    }

    /// Retention claims a run past every host before it deletes anything:
    /// a driver late to the run finds its claim overtaken at its next
    /// fence, and no host may claim the run again; a second pass finds
    /// that claim again; the claims hold the id for LATE_WRITES_LAND_WITHIN
    /// after the deletes, then go, this one last, leaving nothing.
    #[tokio::test(start_paused = true)]
    async fn a_run_being_deleted_is_claimed_past_every_host_first() -> Result<(), RunError> {
        use crate::cluster::ClaimError;
        let _virtual = VirtualTime::start(1_800_000_000_000);
        let storage = Storage::in_memory();
        let tenant = TenantId::default_tenant();
        let store = storage.tenant(&tenant);
        let runtime = runtime(storage);
        let (retention, cluster) = (runtime.retention(), &runtime.runs().host.cluster);
        let record = RunRecord::example("r0001", 1);
        let records = RunRecords::new(store.clone(), run(1));
        records.create_run(&record).await?;
        let late = cluster.claim(&store, &record).await.expect("claimed");
        let deleting = retention
            .claim_for_deletion(&store, &record)
            .await?
            .expect("claimed for deletion");
        assert_eq!(deleting.key, keys_of(&run(1)).owner(late.epoch + 1));
        assert!(
            late.overtaken(&store, &run(1)).await?.is_some(),
            "the late driver's fence fails"
        );
        cluster.release(&tenant, &run(1));
        assert!(matches!(
            cluster.claim(&store, &record).await,
            Err(ClaimError::Deleting)
        ));
        let again = retention
            .claim_for_deletion(&store, &record)
            .await?
            .map(|again| again.key);
        assert_eq!(again.as_ref(), Some(&deleting.key), "found again");
        records.finish(&Outcome::Completed { output: "1".into() }).await?;
        assert_eq!(
            delete(retention, &store, &run(1)).await?.map(|gone| gone.objects),
            Some(2),
            "record and outcome"
        );
        let id = run(1);
        let keys = keys_of(&id);
        let claims = vec![keys.owner(late.epoch), deleting.key];
        assert_eq!(store.list(&keys.root()).await?, claims, "the claims hold the id");
        assert!(!retention.free(&store, &run(1)).await?, "for a while");
        tokio::time::sleep(LATE_WRITES_LAND_WITHIN).await;
        assert!(retention.free(&store, &run(1)).await?);
        assert_eq!(store.list(&keys.root()).await?, Vec::<StoreKey>::new());
        Ok(())
    }

    /// Issue 55, path 1: a sweeper that read a run's record and stalled
    /// while another sweeper deleted the run whole, and a client submitted
    /// the id again, claims among the old incarnation's epochs when it
    /// comes back, finds another run's record and takes its claim back:
    /// the new run, a new incarnation, keeps everything it stored, and its
    /// fence sees no claim. (It claimed the new run's next epoch and
    /// deleted its records.)
    #[tokio::test(start_paused = true)]
    async fn a_sweeper_late_to_a_run_deleted_and_created_again_deletes_nothing_of_the_new_one() -> Result<(), RunError>
    {
        let _virtual = VirtualTime::start(1_800_000_000_000);
        let inner = Arc::new(object_store::memory::InMemory::new());
        let (reached, stalled) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let before: seams::Before = {
            let (reached, stalled, once) = (reached.clone(), stalled.clone(), Arc::new(AtomicBool::new(true)));
            Arc::new(move |call, key| {
                let stall =
                    call == seams::Call::Put && key.as_ref().contains("/owners/") && once.swap(false, Ordering::SeqCst);
                let (reached, stalled) = (reached.clone(), stalled.clone());
                async move {
                    if stall {
                        reached.notify_one();
                        stalled.notified().await;
                    }
                    Ok(())
                }
                .boxed()
            })
        };
        let (plain, late) = (
            Storage::new(inner.clone()),
            Storage::new(Arc::new(seams::Seams::before_on(inner, before))),
        );
        let tenant = TenantId::default_tenant();
        let (store, late_store) = (plain.tenant(&tenant), late.tenant(&tenant));
        let old = RunRecords::new(store.clone(), run(1));
        old.create_run(&RunRecord::example("r0001", 1)).await?;
        old.finish(&Outcome::Completed { output: "1".into() }).await?;
        let (first, second) = (runtime(plain.clone()), runtime(late.clone()));

        let sweeping_late = tokio::spawn({
            let (retention, late_store) = (second.retention().clone(), late_store.clone());
            async move { delete(&retention, &late_store, &run(1)).await }
        });
        reached.notified().await;
        assert_eq!(
            delete(first.retention(), &store, &run(1))
                .await?
                .map(|gone| gone.objects),
            Some(2)
        );
        assert_eq!(old.vacancy().await?, Vacancy::Sweeping, "the id held");
        tokio::time::sleep(LATE_WRITES_LAND_WITHIN).await;
        assert!(first.retention().free(&store, &run(1)).await?);
        assert_eq!(old.vacancy().await?, Vacancy::Free);
        let anew = RunRecord {
            incarnation: incarnations::next(&store).await?,
            ..RunRecord::example("r0001", 5)
        };
        old.create_run(&anew).await?;
        old.send_signal(&"go".parse().expect("a name"), &signal(), None).await?;
        stalled.notify_one();
        let late_sweep = sweeping_late.await.expect("the late sweep ends")?;

        assert_eq!(late_sweep.map(|gone| gone.objects), Some(0), "it deleted nothing");
        assert_eq!(anew.incarnation, 1);
        let stored = old.run().await?.expect("the new run stands");
        assert_eq!((stored.created_at_ms, stored.incarnation), (5, 1));
        assert_eq!(
            store.list(&keys_of(&run(1)).all_signals()).await?.len(),
            1,
            "its signal stands"
        );
        let fence = crate::cluster::overtaken_at(&store, &run(1), anew.first_epoch()).await?;
        assert!(fence.is_none(), "no claim among the new run's epochs: {fence:?}");
        Ok(())
    }

    /// A run noted ended that has no outcome, nor a sweep of it begun, is
    /// kept whole: retention never deletes a run unfinished, whatever the
    /// ledger says (issue 55, path 2: a live run noted ended was deleted).
    #[tokio::test]
    async fn a_run_without_an_outcome_is_never_deleted() -> Result<(), RunError> {
        let storage = Storage::in_memory();
        let store = storage.tenant(&TenantId::default_tenant());
        let records = RunRecords::new(store.clone(), run(1));
        records.create_run(&RunRecord::example("r0001", 1)).await?;
        let kept = delete(runtime(storage).retention(), &store, &run(1)).await?;
        assert!(kept.is_none(), "kept for now");
        assert!(records.run().await?.is_some(), "the record stands");
        assert_eq!(
            store.list(&keys_of(&run(1)).owners()).await?,
            Vec::<StoreKey>::new(),
            "not even claimed"
        );
        Ok(())
    }

    /// While a live host's sweep of an id is under way (its deletion claim
    /// the newest, the record gone already), a submission under the id is
    /// refused, saying so; a sweep whose sweeper is gone (another process
    /// of this host's id) is cleared, and the id free, once
    /// LATE_WRITES_LAND_WITHIN has passed since it was found gone.
    #[tokio::test(start_paused = true)]
    async fn a_run_is_not_created_under_an_id_a_live_host_is_deleting() -> Result<(), RunError> {
        let _virtual = VirtualTime::start(1_800_000_000_000);
        let storage = Storage::in_memory();
        let store = storage.tenant(&TenantId::default_tenant());
        let (sweeping, submitting) = (runtime(storage.clone()), runtime(storage.clone()));
        submitting.runs().live().await?;
        let record = RunRecord::example("r0001", 1);
        let records = RunRecords::new(store.clone(), run(1));
        records.create_run(&record).await?;
        records.finish(&Outcome::Completed { output: "1".into() }).await?;
        let deleting = sweeping
            .retention()
            .claim_for_deletion(&store, &record)
            .await?
            .expect("claimed");
        store.delete(&keys_of(&run(1)).run()).await?;

        let refused = submitting.runs().vacant(&records).await;
        assert!(matches!(refused, Err(RunError::BeingDeleted { .. })), "{refused:?}");
        assert!(
            refused
                .err()
                .is_some_and(|e| e.to_string().contains("is being deleted"))
        );

        let cluster = &submitting.runs().host.cluster;
        let gone = format!("deleting 1 {} {}", cluster.me(), crate::cluster::Incarnation::draw());
        store.delete(&deleting.key).await?;
        store.create(&deleting.key, Bytes::from(gone)).await?;
        let held = submitting.runs().vacant(&records).await;
        assert!(matches!(held, Err(RunError::BeingDeleted { .. })), "{held:?}");
        tokio::time::sleep(LATE_WRITES_LAND_WITHIN).await;
        assert!(
            submitting.runs().vacant(&records).await?,
            "a gone sweeper's sweep is cleared"
        );
        assert_eq!(store.list(&keys_of(&run(1)).root()).await?, Vec::<StoreKey>::new());
        Ok(())
    }

    /// A run the ledger noted is known by its creation, never by comparing
    /// two hosts' clocks: one created on a clock an hour ahead of the one it
    /// finished on (finished "before" it was created) is deleted, not taken
    /// for another run under its id.
    #[tokio::test]
    async fn a_run_created_on_a_clock_ahead_of_the_one_it_ended_on_is_deleted() -> Result<(), RunError> {
        let storage = Storage::in_memory();
        let store = storage.tenant(&TenantId::default_tenant());
        let created_at_ms = 10_000_000;
        let records = RunRecords::new(store.clone(), run(1));
        records.create_run(&RunRecord::example("r0001", created_at_ms)).await?;
        records.finish(&Outcome::Completed { output: "1".into() }).await?;
        let runtime = runtime(storage);
        let mut retired = Retired::read(&store).await?;
        let finished_at_ms = created_at_ms - 3_600_000;
        let gone = runtime
            .retention()
            .delete_run(&store, &run(1), finished_at_ms, Some(created_at_ms), &mut retired)
            .await?;
        assert_eq!(gone.map(|gone| gone.runs), Some(1));
        assert!(records.run().await?.is_none(), "deleted");
        Ok(())
    }

    /// Deletes `run`, finished at 2 ms, as a sweep would.
    async fn delete(retention: &Retention, store: &TenantStore, run: &RunId) -> Result<Option<Deleted>, RunError> {
        let mut retired = Retired::read(store).await?;
        retention.delete_run(store, run, 2, None, &mut retired).await
    }

    /// A driver that read the run's record just before retention deleted
    /// it, and claims the run once every claim is gone too, makes the first
    /// claim again: it finds the record gone, takes its claim back and
    /// drives nothing (the simulation's seed 4993 ran step 0 again).
    #[tokio::test]
    async fn a_driver_claiming_a_run_retention_deleted_finds_it_gone() -> Result<(), RunError> {
        use crate::cluster::{ClaimError, Cluster, HostId, LeasePolicy};
        let storage = Storage::in_memory();
        let tenant = TenantId::default_tenant();
        let store = storage.tenant(&tenant);
        let record = RunRecord::example("r0001", 1);
        let records = RunRecords::new(store.clone(), run(1));
        records.create_run(&record).await?;
        records.finish(&Outcome::Completed { output: "1".into() }).await?;
        let read_before = records.run().await?.expect("stored");

        assert!(
            delete(runtime(storage.clone()).retention(), &store, &run(1))
                .await?
                .is_some()
        );
        let cluster = Cluster::new(
            &storage,
            HostId::fresh(),
            &LeasePolicy::default(),
            Duration::from_secs(60),
        );
        assert!(matches!(
            cluster.claim(&store, &read_before).await,
            Err(ClaimError::Deleting)
        ));
        assert_eq!(
            store.list(&keys_of(&run(1)).root()).await?,
            [keys_of(&run(1)).owner(1)],
            "the driver's claim taken back, the sweep's holding the id"
        );

        let anew = RunRecord {
            incarnation: 1,
            ..RunRecord::example("r0001", 3)
        };
        records.create_run(&anew).await?;
        assert!(
            matches!(cluster.claim(&store, &read_before).await, Err(ClaimError::Deleting)),
            "a run created anew under the id is another run"
        );
        assert!(
            cluster.claim(&store, &anew).await.is_ok(),
            "which its own record claims"
        );
        Ok(())
    }

    /// A generation swept again after a pass that claimed it, deleted its
    /// outcome and then failed is deleted (a run without an outcome is
    /// deleted only so) and leaves the chain's pointer: it may have
    /// continued.
    #[tokio::test]
    async fn a_generation_whose_outcome_a_failed_pass_deleted_leaves_the_chains_pointer() -> Result<(), RunError> {
        let store = Storage::in_memory().tenant(&TenantId::default_tenant());
        let (generation, last) = (run(2), run(3));
        let mut record = RunRecord::example("r0002", 1);
        record.chain = Some(ChainLink {
            root: run(1),
            generation: 1,
            previous: run(1),
        });
        let records = RunRecords::new(store.clone(), generation.clone());
        records.create_run(&record).await?;
        records.finish(&Outcome::Continued { next: last }).await?;
        let pointer = chain_key(&run(1));
        store.overwrite(&pointer, Bytes::from_static(b"the pointer")).await?;
        let runtime = runtime(Storage::in_memory());
        runtime.retention().claim_for_deletion(&store, &record).await?;
        store.delete(&keys_of(&generation).of(0).outcome()).await?;
        assert!(delete(runtime.retention(), &store, &generation).await?.is_some());
        assert!(store.get(&pointer).await?.is_some(), "the pointer stays");
        Ok(())
    }

    fn signal() -> SignalRecord {
        SignalRecord {
            payload: "{}".into(),
            sent_at_ms: 1,
        }
    }

    fn runtime(storage: Storage) -> Runtime {
        Runtime::new(HostConfig::new(), storage, CodeCache::disabled()).expect("a runtime")
    }

    fn run(n: usize) -> RunId {
        RunId::new(&format!("r{n:04}")).expect("a valid id")
    }

    /// Runs noted ended in the ledger are swept once past their retention,
    /// those within it kept: the segment of their hour rewritten with the
    /// runs kept, then gone with the last of them.
    #[tokio::test(start_paused = true)]
    async fn runs_the_ledger_noted_ended_are_swept_past_their_retention() -> Result<(), RunError> {
        let _virtual = VirtualTime::start(1_800_000_000_000);
        let storage = Storage::in_memory();
        let tenant = TenantId::default_tenant();
        let store = storage.tenant(&tenant);
        let runtime = runtime(storage);
        let ledger = runtime.runs().host.ledger.clone();
        let hour = Duration::from_secs(3600);
        let now = now_ms();
        let (old, recent) = (now - 2 * 3_600_000, now - 60_000);
        for (n, finished_at) in [(1, old), (2, old + 1), (3, recent)] {
            let record = RunRecord::example(run(n).as_str(), old - 10);
            ledger.opened(&store, ListedRun::of(&record)).await?;
            let records = RunRecords::new(store.clone(), run(n));
            records.create_record(&record).await?;
            records.finish(&Outcome::Completed { output: "1".into() }).await?;
            ledger.ended(&store, NotedRun::of(&record), finished_at);
        }
        let noted_ended = || async { ledger::open_runs(&store).await.map(|open| open.runs.is_empty()) };
        ledger.settle().await;
        assert!(noted_ended().await?, "every run noted ended");

        // A note of a submission whose run another submission of the id
        // created (the simulation's seed 184: its end, noted by recovery,
        // swept the run that stood).
        let standing = RunRecord::example(run(4).as_str(), old);
        RunRecords::new(store.clone(), run(4)).create_record(&standing).await?;
        let lost = ListedRun::of(&RunRecord {
            created_at_ms: old - 1,
            ..standing.clone()
        });
        ledger.opened(&store, lost.clone()).await?;
        ledger.ended(&store, lost.noted, old);
        ledger.settle().await;
        assert!(noted_ended().await?, "every run noted ended");

        assert_eq!(runtime.retention().sweep(&tenant, hour).await?.runs, 2);
        let stood = RunRecords::new(store.clone(), run(4)).run().await?;
        assert_eq!(stood, Some(standing), "the run under the id stands");
        // Off the listing: the runs deleted, and the note that lost the id.
        let mut listed = Vec::new();
        for hour in created::hours(&store).await? {
            let runs = created::hour(&store, hour).await?;
            listed.extend(
                runs.into_iter()
                    .map(|run| (run.noted.run.to_string(), run.noted.created_at_ms)),
            );
        }
        assert_eq!(listed, [("r0003".into(), old - 10), ("r0004".into(), old)]);
        for (n, kept) in [(1, false), (2, false), (3, true)] {
            let stored = RunRecords::new(store.clone(), run(n)).run().await?;
            assert_eq!(stored.is_some(), kept, "run {n}");
        }
        let later = Duration::from_secs(30);
        assert_eq!(runtime.retention().sweep(&tenant, later).await?.runs, 1);
        assert!(RunRecords::new(store.clone(), run(3)).run().await?.is_none());
        tokio::time::sleep(LATE_WRITES_LAND_WITHIN).await;
        assert_eq!(
            runtime.retention().sweep(&tenant, later).await?.runs,
            0,
            "the ids freed"
        );
        assert!(store.list(&ledger::ended_key()).await?.is_empty(), "every segment gone");
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_deletes_at_most_a_batch_oldest_first_and_keeps_runs_within_retention() -> Result<(), RunError> {
        let _virtual = VirtualTime::start(1_800_000_000_000);
        let storage = Storage::in_memory();
        let tenant = TenantId::default_tenant();
        let store = storage.tenant(&tenant);
        let long_ago = now_ms() - 7_200_000;
        let finished = |n: usize, at: u64| {
            let store = store.clone();
            async move {
                store.overwrite(&finished_marker(at, &run(n)), Bytes::new()).await?;
                let records = RunRecords::new(store.clone(), run(n));
                records
                    .create_record(&RunRecord::example(run(n).as_str(), at - 10))
                    .await?;
                records.finish(&Outcome::Completed { output: "1".into() }).await?;
                Ok::<_, RunError>(())
            }
        };
        for n in 0..SWEEP_BATCH + 20 {
            finished(n, long_ago + n as u64).await?;
        }
        let recent = run(9_999);
        finished(9_999, now_ms()).await?;
        let runtime = runtime(storage);
        let hour = Duration::from_secs(3600);

        let first = runtime.retention().sweep(&tenant, hour).await?;
        assert_eq!(first.runs as usize, SWEEP_BATCH);
        assert!(
            store
                .get(&keys_of(&run(SWEEP_BATCH - 1)).of(0).outcome())
                .await?
                .is_none()
        );
        assert!(
            store.get(&keys_of(&run(SWEEP_BATCH)).of(0).outcome()).await?.is_some(),
            "the oldest go first"
        );
        let second = runtime.retention().sweep(&tenant, hour).await?;
        assert_eq!(second.runs, 20);
        assert_eq!(
            runtime.retention().sweep(&tenant, hour).await?,
            Swept::default(),
            "nothing is left past retention"
        );
        assert!(
            store.get(&keys_of(&recent).of(0).outcome()).await?.is_some(),
            "a run within retention stays"
        );
        tokio::time::sleep(LATE_WRITES_LAND_WITHIN).await;
        runtime.retention().sweep(&tenant, hour).await?;
        assert_eq!(
            store.list(&finished_key()).await?.len(),
            1,
            "the markers go once the ids are free"
        );
        Ok(())
    }

    /// A parent may await its child long after the child ended: a finished
    /// child past retention is kept while its parent is unfinished, and
    /// swept once the parent has ended.
    #[tokio::test]
    async fn a_finished_child_is_kept_while_its_parent_is_unfinished() -> Result<(), RunError> {
        let storage = Storage::in_memory();
        let tenant = TenantId::default_tenant();
        let store = storage.tenant(&tenant);
        let long_ago = now_ms() - 7_200_000;
        let parent = RunRecords::new(store.clone(), run(1));
        parent.create_run(&RunRecord::example("r0001", long_ago)).await?;
        let mut child_record = RunRecord::example("r0001.0", long_ago);
        child_record.parent = Some(run(1));
        child_record.depth = 1;
        let child = RunRecords::new(store.clone(), child_record.run_id.clone());
        child.create_run(&child_record).await?;
        let ended = Outcome::Completed { output: "1".into() };
        child.finish(&ended).await?;
        child.unlist(long_ago).await;
        let runtime = runtime(storage);
        let hour = Duration::from_secs(3600);

        assert_eq!(runtime.retention().sweep(&tenant, hour).await?, Swept::default());
        assert_eq!(
            child.outcome().await?,
            Some(ended.clone()),
            "the child its parent may await"
        );
        parent.finish(&ended).await?;
        parent.unlist(long_ago + 1).await;
        assert_eq!(runtime.retention().sweep(&tenant, hour).await?.runs, 2);
        assert_eq!(child.outcome().await?, None);
        assert_eq!(parent.run().await?, None);
        Ok(())
    }
}
