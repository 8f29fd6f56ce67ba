//! Typed access to the stored records of one run; the journal is read
//! through its newest snapshot when one is sound.
//!
//! Invariant: what a handle remembers of the journal (for the next
//! snapshot) is only what the store holds: entries read from it, or written
//! to it create-only.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::ledger::NotedRun;
use super::payload::{Payload, sha256_hex};
use super::read_ahead::ReadAhead;
use super::records::{
    Abandoned, AdvanceRecord, AttemptRecord, BuildRecord, CancelRecord, Entry, Outcome, PauseRecord, RunRecord,
    SignalRecord, TimerRecord,
};
use super::snapshot::{self, Snapshot};
use super::{JournalError, decode, encode};
use crate::clock::BootInstant;
use crate::cluster::{Claim, ClaimLost, overtaken_at};
use crate::config::SnapshotPolicy;
use crate::shared_map::lock;
use crate::store::{
    IncarnationKeys, RunId, SignalId, SignalName, StoreError, StoreKey, TenantStore, finished_marker, keys_of,
    unfinished_marker,
};
use crate::task::{Seam, seam};

/// How many records are read from the store at once.
const READ_AHEAD: usize = 32;
/// How long after it came back a fence read with a step's entry (or with a
/// fresh run's record) stands for the next attempt (see
/// [`RunRecords::append_step`] and [`RunRecords::create_record_fenced`]):
/// an attempt that waited longer (for a slot, for fuel, for a slow write
/// beside the read) reads the fence again.
pub const FENCE_READ_AHEAD_FOR: Duration = Duration::from_millis(5);

/// How long after it was sent a fence read ahead stands, at most: one that
/// took longer to come back (the store layer's retries, a pause) is read
/// again. With [`FENCE_READ_AHEAD_FOR`], the bound that holds: an attempt
/// starts within this of sending the read it stands on, so a claim stored
/// longer than this before an attempt is always seen by it.
pub const FENCE_STANDS_FOR: Duration = Duration::from_millis(250);

/// The records of one run, in one tenant's store.
#[derive(Clone, Debug)]
pub struct RunRecords {
    store: TenantStore,
    run: RunId,
    /// Shared by the clones of a handle (a run's execution and its step
    /// tasks), so a snapshot sees every entry any of them read or wrote.
    seen: Arc<Mutex<SeenJournal>>,
    /// The claim the run's driver writes under; `None` for a handle that
    /// only reads, or writes what anyone may (signals, cancellations).
    claim: Option<Claim>,
    /// The fence read with the last step's entry, for the attempt after it.
    fence_ahead: Arc<Mutex<Option<FenceAhead>>>,
    /// What was read of the run at once when it was woken, if it was.
    read_ahead: Arc<Mutex<Option<Arc<ReadAhead>>>>,
    /// Which run of the id this handle's journal, outcome, attempts and
    /// timers are of, once a record created or read said so (a claim
    /// says so first: see [`RunRecords::incarnation`]).
    incarnation: Arc<OnceLock<u64>>,
}

/// The run's next claim found absent, read while the entry before `seq`
/// was written (with no `seq`: while the run record was created, for the
/// run's first attempt).
#[derive(Debug, Clone, Copy)]
struct FenceAhead {
    seq: Option<u64>,
    read: FenceRead,
}

/// A read of the run's next claim that found it absent: when it was sent,
/// and when it came back (not when the write beside it did).
#[derive(Debug, Clone, Copy)]
struct FenceRead {
    sent: BootInstant,
    returned: BootInstant,
}

impl FenceRead {
    /// Reads whether a claim after `epoch` exists: the read, if it found
    /// none; `None` if it found one or failed.
    async fn of(store: &TenantStore, run: &RunId, epoch: u64) -> Option<Self> {
        let sent = BootInstant::now();
        let found = overtaken_at(store, run, epoch).await;
        matches!(found, Ok(None)).then(|| Self {
            sent,
            returned: BootInstant::now(),
        })
    }

    /// Whether an attempt starting now may stand on this read: see
    /// [`FENCE_READ_AHEAD_FOR`] and [`FENCE_STANDS_FOR`].
    fn stands(&self) -> bool {
        self.returned.elapsed() <= FENCE_READ_AHEAD_FOR && self.sent.elapsed() <= FENCE_STANDS_FOR
    }
}

/// The fence for a fresh run's first attempt, read while its record was
/// created ([`RunRecords::create_record_fenced`]).
#[derive(Debug, Clone, Copy)]
pub struct FirstFence(FenceRead);

/// The journal as far as this handle has read or written it, as stored.
#[derive(Debug, Default)]
struct SeenJournal {
    /// Entries `0..n`, entry `seq` at index `seq`: what a snapshot covers.
    gapless: Vec<Bytes>,
    /// Entries past the first gap, by seq.
    beyond: BTreeMap<u64, Bytes>,
    /// How many entries the newest snapshot known to exist covers.
    snapshot: u64,
}

impl SeenJournal {
    /// Keeps `stored` as the entry at `seq`, in place of any kept before.
    fn insert(&mut self, seq: u64, stored: Bytes) {
        let next = self.gapless.len() as u64;
        if seq < next {
            self.gapless[seq as usize] = stored;
        } else if seq > next {
            self.beyond.insert(seq, stored);
        } else {
            self.gapless.push(stored);
            while let Some(closed) = self.beyond.remove(&(self.gapless.len() as u64)) {
                self.gapless.push(closed);
            }
        }
    }

    fn len(&self) -> usize {
        self.gapless.len() + self.beyond.len()
    }
}

/// `entries` in seq order, the one read last kept of any that claim the
/// same seq. Listings need not come in order; the sort is stable.
fn one_per_seq(mut entries: Vec<Entry>) -> Vec<Entry> {
    entries.sort_by_key(|entry| entry.seq);
    entries.dedup_by(|later, earlier| {
        let same = later.seq == earlier.seq;
        if same {
            std::mem::swap(later, earlier);
        }
        same
    });
    entries
}

/// Whether a run of an id may be created ([`RunRecords::vacancy`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vacancy {
    /// A run of the id is stored (or a record saying one was abandoned).
    Taken,
    /// None is: one may be created.
    Free,
    /// Retention is deleting the id's last run, or holds the id after it:
    /// wait until it is free.
    Sweeping,
}

/// The snapshots of a run's journal, as listed by
/// [`RunRecords::snapshots`]: listed beside other reads, they spare
/// [`RunRecords::entries_from`] the round trip of listing them first.
/// Snapshots are derived and never the only copy of an entry, so a listing
/// made before the run was claimed is sound: a snapshot written since is
/// passed over and the entries after the newest one listed are read, and
/// one a newer snapshot replaced since is found gone, with a warning, and
/// the entries read instead.
#[derive(Debug)]
pub struct SnapshotListing(Vec<u64>);

/// Where a journal is read from: a sound snapshot, if any, and the keys of
/// the entries it does not hold.
struct JournalView {
    snapshot: Option<Snapshot>,
    rest: Vec<StoreKey>,
}

impl RunRecords {
    /// The records of `run` in `store`, for a handle that only reads, or
    /// writes what anyone may (signals, cancellations); the run's driver
    /// takes [`RunRecords::driven_under`] instead.
    pub fn new(store: TenantStore, run: RunId) -> Self {
        Self {
            store,
            run,
            seen: Arc::default(),
            claim: None,
            fence_ahead: Arc::default(),
            read_ahead: Arc::default(),
            incarnation: Arc::default(),
        }
    }

    /// Which run of its id this handle reads and writes the journal of:
    /// the incarnation its claim counts, for a driver (so one paused past
    /// its run's deletion writes where the id's next run never reads);
    /// else the one its record said when this handle created or read it,
    /// or, if neither has happened, says now (one read). An id with no
    /// record is read as its first incarnation, and asked again next time.
    pub async fn incarnation(&self) -> Result<u64, JournalError> {
        if let Some(claim) = &self.claim {
            return Ok(crate::cluster::incarnation_of(claim.epoch));
        }
        if let Some(known) = self.incarnation.get() {
            return Ok(*known);
        }
        let stored = self.read::<RunRecord>(&keys_of(&self.run).run()).await?;
        let run = stored.filter(|record| record.abandoned.is_none());
        Ok(run.map_or(0, |record| self.learn(&record)))
    }

    /// Takes `record`'s incarnation as this handle's, unless it knows one.
    fn learn(&self, record: &RunRecord) -> u64 {
        *self.incarnation.get_or_init(|| record.incarnation)
    }

    /// The keys of what this handle's incarnation of the run writes.
    pub async fn incarnation_keys(&self) -> Result<IncarnationKeys<'_>, JournalError> {
        Ok(keys_of(&self.run).of(self.incarnation().await?))
    }

    /// Lists the run's keys and starts reading the records a woken
    /// execution reads first, so that this handle and its clones answer
    /// those reads without another round trip (see
    /// [`read_ahead`](super::read_ahead)). A run with too many keys is read
    /// record by record.
    pub async fn read_ahead(&self) -> Result<(), JournalError> {
        let ahead = ReadAhead::of(&self.store, &self.run).await?;
        *lock(&self.read_ahead) = ahead.map(Arc::new);
        Ok(())
    }

    /// The read-ahead, while it may answer; an expired one is dropped.
    fn current_read_ahead(&self) -> Option<Arc<ReadAhead>> {
        let mut slot = lock(&self.read_ahead);
        if slot.as_ref().is_some_and(|ahead| !ahead.is_current()) {
            *slot = None;
        }
        slot.clone()
    }

    /// The bytes at `key`, from the read-ahead if it has them.
    async fn get(&self, key: &StoreKey) -> Result<Option<Bytes>, StoreError> {
        if let Some(ahead) = self.current_read_ahead()
            && let Some(answer) = ahead.get(key).await
        {
            return Ok(answer);
        }
        self.store.get(key).await
    }

    /// The keys under `prefix` after `after` (all without it), from the
    /// read-ahead if it has them.
    async fn list(&self, prefix: &StoreKey, after: Option<&StoreKey>) -> Result<Vec<StoreKey>, StoreError> {
        if let Some(ahead) = self.current_read_ahead()
            && let Some(listed) = ahead.list(prefix, after)
        {
            return Ok(listed);
        }
        match after {
            Some(after) => self.store.list_after(prefix, after).await,
            None => self.store.list(prefix).await,
        }
    }

    /// The same records, for the host driving the run under `claim`: every
    /// write a driver makes (entries, attempts, timers, snapshots, the
    /// outcome) checks the claim first, and fails once it has lapsed.
    pub(crate) fn driven_under(self, claim: Claim) -> Self {
        Self {
            claim: Some(claim),
            ..self
        }
    }

    /// Fails, and says so in the log, if the claim this handle writes
    /// under has lapsed.
    pub fn check_claim(&self) -> Result<(), JournalError> {
        match self.claim.as_ref().map(Claim::check) {
            Some(Err(why)) => Err(self.stood_down(why)),
            _ => Ok(()),
        }
    }

    /// Whether an attempt of the call at `seq` may start now: fails as
    /// [`check_claim`](Self::check_claim) does, and also if another host
    /// has claimed the run since (one read of the store), or, on a run this
    /// host took over, if the call's entry is stored after all (its last
    /// owner's write, checked before that host was paused, landed after
    /// this host read the journal): then as a conflicting write does, so
    /// the run is driven again from the journal. The lease is checked
    /// after the reads, not before: a host paused while they were under
    /// way finds its lease lapsed when it wakes, whatever they said then.
    pub async fn confirm_start(&self, seq: u64) -> Result<(), JournalError> {
        let Some(claim) = &self.claim else {
            return Ok(());
        };
        let read_ahead = lock(&self.fence_ahead)
            .take()
            .is_some_and(|fence| fence.seq.is_none_or(|ahead| ahead == seq) && fence.read.stands());
        if !read_ahead && let Some(why) = claim.overtaken(&self.store, &self.run).await? {
            return Err(self.stood_down(why));
        }
        seam(Seam::AfterFenceRead).await;
        // Read last, right before the attempt: a late write landing while
        // the other read was under way is still seen.
        let entry = self.incarnation_keys().await?.entry(seq);
        if claim.took_over() && self.store.version(&entry).await?.is_some() {
            let key = entry.to_string();
            tracing::warn!(run = %self.run, seq, "the call's entry was written by the run's last owner after this host read the journal; driving the run again from it");
            return Err(JournalError::Store(StoreError::AlreadyExists { key }));
        }
        self.check_claim()?;
        seam(Seam::AfterClaimCheck).await;
        Ok(())
    }

    /// The epoch of the claim this handle writes under (0 for none, as for
    /// the creator of a run's first incarnation).
    pub fn epoch(&self) -> u64 {
        self.claim.as_ref().map_or(0, |claim| claim.epoch)
    }

    fn stood_down(&self, why: ClaimLost) -> JournalError {
        let refused = JournalError::StoodDown {
            run: self.run.clone(),
            why,
        };
        tracing::warn!(run = %self.run, "{refused}");
        refused
    }

    /// The run these records are of.
    pub fn run_id(&self) -> &RunId {
        &self.run
    }

    /// The tenant store the records are in.
    pub fn store(&self) -> &TenantStore {
        &self.store
    }

    async fn read<R: DeserializeOwned>(&self, key: &StoreKey) -> Result<Option<R>, JournalError> {
        Ok(self.read_stored(key).await?.map(|(record, _)| record))
    }

    /// The record at `key`, with the bytes it is stored as.
    async fn read_stored<R: DeserializeOwned>(&self, key: &StoreKey) -> Result<Option<(R, Bytes)>, JournalError> {
        let Some(bytes) = self.get(key).await? else {
            return Ok(None);
        };
        match decode(&bytes) {
            Ok(record) => Ok(Some((record, bytes))),
            Err(reason) => Err(JournalError::Corrupt {
                key: key.to_string(),
                reason,
            }),
        }
    }

    async fn create<R: Serialize>(&self, key: &StoreKey, record: &R) -> Result<(), JournalError> {
        Ok(self.store.create(key, Bytes::from(encode(record))).await?)
    }

    /// Creates `record` at `key` unless one is there: the first stands.
    async fn create_first<R: Serialize>(&self, key: &StoreKey, record: &R) -> Result<(), JournalError> {
        match self.create(key, record).await {
            Err(JournalError::Store(StoreError::AlreadyExists { .. })) => Ok(()),
            other => other,
        }
    }

    /// How the run was started, or `None` for an unknown run (one never
    /// created, whose record a recovery stored as abandoned included).
    /// The run record, on the build the run runs on now: the one an
    /// upgrade moved it to, if one did.
    /// Both are read at once: on object storage each read is a round trip.
    pub async fn run(&self) -> Result<Option<RunRecord>, JournalError> {
        let keys = keys_of(&self.run);
        let (run, build) = (keys.run(), keys.build());
        let (record, build) = futures::try_join!(self.read::<RunRecord>(&run), self.read::<BuildRecord>(&build))?;
        let Some(mut record) = record.filter(|record| record.abandoned.is_none()) else {
            return Ok(None);
        };
        self.learn(&record);
        if let Some(build) = build {
            record.component = build.component;
            record.earlier_builds = build.earlier;
        }
        Ok(Some(record))
    }

    /// The record stored under the run's id as it is: a run's, or one a
    /// recovery stored as abandoned ([`RunRecord::abandoned`]).
    pub async fn stored_record(&self) -> Result<Option<RunRecord>, JournalError> {
        self.read(&keys_of(&self.run).run()).await
    }

    /// Makes sure the run `noted` names, which the ledger notes open and
    /// has no record, is never created: stores a record saying it was
    /// abandoned, create-only, so that its submission, were it still to
    /// store the record, fails instead. `true` if that run never was (this
    /// record, or one an earlier recovery stored, or another run's under
    /// the id stands); `false` if its record was stored after all.
    pub async fn settle_phantom(&self, noted: &NotedRun, abandoned: Abandoned) -> Result<bool, JournalError> {
        let tombstone = RunRecord::abandoned(self.run.clone(), noted.created_at_ms, abandoned);
        match self.create_record(&tombstone).await {
            Ok(()) => Ok(true),
            Err(JournalError::Store(StoreError::AlreadyExists { .. })) => Ok(self
                .stored_record()
                .await?
                .is_none_or(|stored| stored.abandoned.is_some() || stored.created_at_ms != noted.created_at_ms)),
            Err(e) => Err(e),
        }
    }

    /// Moves the run to build `component`, from the one `record` runs on:
    /// its next execution loads it.
    pub async fn move_to(&self, record: &RunRecord, component: &str, moved_at_ms: u64) -> Result<(), JournalError> {
        let mut earlier = record.earlier_builds.clone();
        earlier.push(record.component.clone());
        let build = BuildRecord {
            component: component.to_owned(),
            earlier,
            moved_at_ms,
        };
        Ok(self
            .store
            .overwrite(&keys_of(&self.run).build(), Bytes::from(encode(&build)))
            .await?)
    }

    /// Whether a run of this id may be created now. What is stored under
    /// the id without a record is deleted first: what reached an earlier
    /// run of the id after retention's sweep listed it (a late signal),
    /// which a new run must not take for its own; unless the newest claim
    /// is a deletion claim: of a sweep under way, or holding the id after
    /// it, which the caller waits out.
    /// One listing, and a read of the newest claim if there is one.
    ///
    /// Stored payloads are kept: a record names one only by its digest, so
    /// an old one is never taken for another's, and the run being created
    /// here, or by another host at once, may have written its input's.
    pub async fn vacancy(&self) -> Result<Vacancy, JournalError> {
        let keys = keys_of(&self.run);
        let stored = self.store.list(&keys.root()).await?;
        if stored.contains(&keys.run()) {
            return Ok(Vacancy::Taken);
        }
        let owners = keys.owners();
        let newest = stored
            .iter()
            .filter(|key| key.prefix_matches(&owners))
            .filter_map(|key| key.filename()?.parse::<u64>().ok())
            .max();
        if let Some(epoch) = newest
            && let Some(bytes) = self.store.get(&keys.owner(epoch)).await?
            && crate::cluster::deleted_by(&bytes).is_some()
        {
            return Ok(Vacancy::Sweeping);
        }
        self.clear_listed(stored).await?;
        Ok(Vacancy::Free)
    }

    async fn clear_listed(&self, mut stored: Vec<StoreKey>) -> Result<(), JournalError> {
        let payloads = keys_of(&self.run).payloads();
        stored.retain(|key| !key.prefix_matches(&payloads));
        if !stored.is_empty() {
            tracing::info!(run = %self.run, objects = stored.len(), "deleting what an earlier run of this id left behind");
            self.store.delete_all(&stored).await?;
        }
        Ok(())
    }

    /// Records how the run starts, listed as unfinished first, as runs
    /// stored before the ledger were (see `Runs::unfinished`); fails with
    /// `AlreadyExists` if it has started. For tests that store a run.
    #[cfg(test)]
    pub async fn create_run(&self, record: &RunRecord) -> Result<(), JournalError> {
        self.store
            .overwrite(&unfinished_marker(&self.run), Bytes::new())
            .await?;
        self.create_record(record).await
    }

    /// Records how the run starts, once the ledger notes it open (see
    /// `journal::ledger`); fails with `AlreadyExists` if it has started.
    pub async fn create_record(&self, record: &RunRecord) -> Result<(), JournalError> {
        self.create(&keys_of(&self.run).run(), record).await?;
        if record.abandoned.is_none() {
            self.learn(record);
        }
        Ok(())
    }

    /// Creates the run record as [`create_record`](Self::create_record)
    /// does, and meanwhile reads the fence for the run's first attempt
    /// under its creator's claim: both are round trips, and the
    /// creator drives the run at once, so a fresh run's first step starts
    /// one round trip sooner ([`stand_on`](Self::stand_on)). `None` if the
    /// read failed or found the run claimed: the attempt reads it again.
    pub async fn create_record_fenced(&self, record: &RunRecord) -> Result<Option<FirstFence>, JournalError> {
        let first = record.first_epoch();
        let (created, fence) = futures::join!(self.create_record(record), FenceRead::of(&self.store, &self.run, first));
        created?;
        Ok(fence.map(FirstFence))
    }

    /// Lets the run's next attempt, whatever its seq, start on `fence` as
    /// it would on one read with a step's entry: only under the creator's
    /// claim, and only within [`FENCE_READ_AHEAD_FOR`] of the read's return
    /// and [`FENCE_STANDS_FOR`] of its sending.
    pub fn stand_on(&self, fence: FirstFence) {
        if self.claim.as_ref().is_some_and(|claim| !claim.took_over()) {
            *lock(&self.fence_ahead) = Some(FenceAhead {
                seq: None,
                read: fence.0,
            });
        }
    }

    /// Moves a run stored before the ledger from the list of unfinished
    /// runs to that of runs finished (at `finished_at_ms`), which the
    /// retention sweeper reads. A failure is only logged: the run stays
    /// listed unfinished, and recovery, finding it finished, moves it then.
    pub async fn unlist(&self, finished_at_ms: u64) {
        let moved = async {
            self.store
                .overwrite(&finished_marker(finished_at_ms, &self.run), Bytes::new())
                .await?;
            self.store.delete(&unfinished_marker(&self.run)).await
        };
        if let Err(e) = moved.await {
            tracing::warn!(run = %self.run, "the finished run is still listed as unfinished: {e}");
        }
    }

    /// How the run ended, or `None` while it has not.
    pub async fn outcome(&self) -> Result<Option<Outcome>, JournalError> {
        self.read(&self.incarnation_keys().await?.outcome()).await
    }

    /// Records how the run ended and returns the outcome that stands: if
    /// an outcome was already recorded (a retry after a crash, another
    /// host), that one, never a second.
    pub async fn finish(&self, outcome: &Outcome) -> Result<Outcome, JournalError> {
        self.check_claim()?;
        let stands = match self.create(&self.incarnation_keys().await?.outcome(), outcome).await {
            Ok(()) => outcome.clone(),
            Err(JournalError::Store(StoreError::AlreadyExists { key })) => self
                .outcome()
                .await?
                .ok_or(JournalError::Store(StoreError::NotFound { key }))?,
            Err(e) => return Err(e),
        };
        Ok(stands)
    }

    /// The request to cancel the run, if one was made.
    pub async fn cancel_request(&self) -> Result<Option<CancelRecord>, JournalError> {
        self.read(&keys_of(&self.run).cancel()).await
    }

    /// Records a request to cancel the run; the first request stands.
    pub async fn request_cancel(&self, request: &CancelRecord) -> Result<(), JournalError> {
        self.create_first(&keys_of(&self.run).cancel(), request).await
    }

    /// The request to pause the run, if it is paused.
    pub async fn pause_request(&self) -> Result<Option<PauseRecord>, JournalError> {
        self.read(&keys_of(&self.run).pause()).await
    }

    /// Pauses the run, and answers the pause that stands: pausing a paused
    /// run keeps the first request.
    pub async fn request_pause(&self, request: &PauseRecord) -> Result<PauseRecord, JournalError> {
        let key = keys_of(&self.run).pause();
        match self.create(&key, request).await {
            Ok(()) => Ok(request.clone()),
            // Resumed meanwhile: a paused driver reads the store again anyway.
            Err(JournalError::Store(StoreError::AlreadyExists { .. })) => {
                Ok(self.read(&key).await?.unwrap_or_else(|| request.clone()))
            }
            Err(e) => Err(e),
        }
    }

    /// Resumes the run: its pause request goes (none is fine).
    pub async fn resume(&self) -> Result<(), JournalError> {
        Ok(self.store.delete(&keys_of(&self.run).pause()).await?)
    }

    /// Every journal entry, in seq order, one per seq: the newest sound
    /// snapshot's, then the entries after it (an entry stored at a seq wins
    /// over a snapshot's).
    pub async fn entries(&self) -> Result<Vec<Entry>, JournalError> {
        self.entries_from(self.snapshots().await?).await
    }

    /// [`entries`](Self::entries), from the snapshots `listed` earlier.
    pub async fn entries_from(&self, listed: SnapshotListing) -> Result<Vec<Entry>, JournalError> {
        let view = self.view(listed).await?;
        let rest = self.read_entries(view.rest).await?;
        let mut seen = lock(&self.seen);
        let mut entries = match view.snapshot {
            Some(snapshot) => {
                seen.snapshot = seen.snapshot.max(snapshot.covers());
                for (seq, stored) in (0..).zip(snapshot.stored) {
                    seen.insert(seq, stored);
                }
                snapshot.entries
            }
            None => Vec::new(),
        };
        entries.reserve(rest.len());
        for (entry, stored) in rest {
            seen.insert(entry.seq, stored);
            entries.push(entry);
        }
        Ok(one_per_seq(entries))
    }

    /// The entries stored at seqs past `seq`, in seq order: what a reader
    /// that has read the journal through `seq` has yet to see. Entries are
    /// never deleted, so a snapshot hides none of them.
    pub async fn entries_after(&self, seq: u64) -> Result<Vec<Entry>, JournalError> {
        let keys = self.incarnation_keys().await?;
        let listed = self.store.list_after(&keys.journal(), &keys.entry(seq)).await?;
        let read = self.read_entries(listed).await?;
        Ok(one_per_seq(read.into_iter().map(|(entry, _)| entry).collect()))
    }

    /// The entries stored under `keys`, read a few at a time.
    async fn read_entries(&self, keys: Vec<StoreKey>) -> Result<Vec<(Entry, Bytes)>, JournalError> {
        futures::stream::iter(keys)
            .map(|key| async move {
                self.read_stored::<Entry>(&key)
                    .await?
                    .ok_or_else(|| JournalError::from(StoreError::NotFound { key: key.to_string() }))
            })
            .buffered(READ_AHEAD)
            .try_collect()
            .await
    }

    /// `text` as a record holds it: itself, or, over `offload_above`
    /// bytes, a reference to an object of its own, written now (again, if
    /// an earlier try or another host wrote it: the same bytes).
    pub async fn payload(&self, text: String, offload_above: usize) -> Result<Payload, JournalError> {
        if text.len() <= offload_above {
            return Ok(Payload::Inline(text));
        }
        let (sha256, bytes) = (sha256_hex(text.as_bytes()), text.len() as u64);
        match self
            .store
            .create(&keys_of(&self.run).payload(&sha256), Bytes::from(text))
            .await
        {
            Ok(()) | Err(StoreError::AlreadyExists { .. }) => Ok(Payload::Stored { sha256, bytes }),
            Err(e) => Err(e.into()),
        }
    }

    /// The text of `payload`: a stored one read from its object and
    /// checked against its name.
    pub async fn payload_text(&self, payload: Payload) -> Result<String, JournalError> {
        match payload {
            Payload::Inline(text) => Ok(text),
            Payload::Stored { sha256, .. } => {
                (self.stored_payload(&sha256).await?).ok_or_else(|| JournalError::Corrupt {
                    key: keys_of(&self.run).payload(&sha256).to_string(),
                    reason: "the payload a record names is missing".into(),
                })
            }
        }
    }

    /// Copies the payload the run `from` stored apart under `sha256` into
    /// this run's: a restarted run's kept entries name it.
    pub async fn copy_payload(&self, from: &RunRecords, sha256: &str) -> Result<(), JournalError> {
        let text = from.payload_text(Payload::Stored {
            sha256: sha256.to_owned(),
            bytes: 0,
        });
        let key = keys_of(&self.run).payload(sha256);
        match self.store.create(&key, Bytes::from(text.await?)).await {
            Ok(()) | Err(StoreError::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The payload the run stored apart under `sha256`, checked against
    /// that name; `None` if it has none so named.
    pub async fn stored_payload(&self, sha256: &str) -> Result<Option<String>, JournalError> {
        let key = keys_of(&self.run).payload(sha256);
        let Some(stored) = self.store.get(&key).await? else {
            return Ok(None);
        };
        let corrupt = |reason: &str| JournalError::Corrupt {
            key: key.to_string(),
            reason: reason.to_owned(),
        };
        if sha256_hex(&stored) != sha256 {
            return Err(corrupt("the payload's bytes do not match its name"));
        }
        String::from_utf8(stored.to_vec())
            .map(Some)
            .map_err(|_| corrupt("the payload is not UTF-8"))
    }

    /// The seqs the journal holds, without reading any entry: for questions
    /// that do not need the entries themselves (how many, which are open),
    /// asked at every status. Entries are never deleted, so the newest
    /// snapshot's key says which seqs it covers once its last entry is
    /// there: its body is not read either.
    pub async fn entry_seqs(&self) -> Result<BTreeSet<u64>, JournalError> {
        let keys = self.incarnation_keys().await?;
        let journal = keys.journal();
        if let Some(covers) = self.snapshots().await?.0.pop() {
            let last = keys.entry(covers - 1);
            let (boundary, rest) = futures::try_join!(self.store.get(&last), self.store.list_after(&journal, &last))?;
            if boundary.is_some() {
                return Ok((0..covers).chain(rest.iter().filter_map(seq_of)).collect());
            }
        }
        Ok(self.store.list(&journal).await?.iter().filter_map(seq_of).collect())
    }

    /// How many entries each stored snapshot covers, oldest first.
    pub async fn snapshots(&self) -> Result<SnapshotListing, JournalError> {
        let listed = self.list(&self.incarnation_keys().await?.snapshots(), None).await?;
        Ok(SnapshotListing(
            listed.iter().filter_map(seq_of).filter(|covers| *covers > 0).collect(),
        ))
    }

    /// The newest sound snapshot and the keys of the entries after it, or
    /// every entry's key when no snapshot is sound. A snapshot is passed
    /// over, with a warning, when it is gone, fails its checks, or its last
    /// entry is not the one stored at that seq.
    async fn view(&self, listed: SnapshotListing) -> Result<JournalView, JournalError> {
        let keys = self.incarnation_keys().await?;
        let journal = keys.journal();
        let SnapshotListing(mut snapshots) = listed;
        while let Some(covers) = snapshots.pop() {
            let (key, last) = (keys.snapshot(covers), keys.entry(covers - 1));
            // Decoded as soon as it is read, while the listing, the longer
            // read of a long journal, goes on on a thread of its own.
            let decoded = async {
                let stored = self.get(&key).await?;
                Ok::<_, StoreError>(stored.map(|bytes| snapshot::decode(&bytes, covers)))
            };
            let (decoded, boundary, rest) =
                futures::try_join!(decoded, self.get(&last), self.list(&journal, Some(&last)))?;
            match decoded {
                Some(Ok(snapshot)) if boundary.as_ref() == snapshot.last_stored() => {
                    return Ok(JournalView {
                        snapshot: Some(snapshot),
                        rest,
                    });
                }
                Some(Ok(_)) => tracing::warn!(
                    %key, seq = covers - 1,
                    "journal snapshot disagrees with the entry stored at its last seq; reading the entries instead"
                ),
                Some(Err(reason)) => tracing::warn!(
                    %key, %reason,
                    "journal snapshot is corrupt; reading the entries instead"
                ),
                None => tracing::warn!(%key, "journal snapshot vanished; reading the entries instead"),
            }
        }
        Ok(JournalView {
            snapshot: None,
            rest: self.list(&journal, None).await?,
        })
    }

    /// How many entries this handle and its clones have read or written.
    /// For the handle that drove a run to its end, having read its journal
    /// first, that is every entry: the run's claim keeps other writers out.
    pub fn entries_known(&self) -> usize {
        lock(&self.seen).len()
    }

    /// Appends an entry; fails with `AlreadyExists` if its seq is taken.
    pub async fn append(&self, entry: &Entry) -> Result<(), JournalError> {
        self.check_claim()?;
        seam(Seam::AfterClaimCheck).await;
        let stored = Bytes::from(entry.encode());
        self.store
            .create(&self.incarnation_keys().await?.entry(entry.seq), stored.clone())
            .await?;
        lock(&self.seen).insert(entry.seq, stored);
        Ok(())
    }

    /// Appends a step's entry as [`append`](Self::append) does, and reads
    /// the fence for the attempt of the next seq meanwhile (the run's next
    /// claim, as [`confirm_start`](Self::confirm_start) reads it): both are
    /// round trips, and a workflow usually asks for its next step at once,
    /// so that attempt starts one round trip sooner. The fence read ahead
    /// stands only for that seq, and only within [`FENCE_READ_AHEAD_FOR`]
    /// of its return and [`FENCE_STANDS_FOR`] of its sending (stamped as
    /// the read itself went, not as the write beside it did), so it is at
    /// most a round trip older than one read right before the attempt; a
    /// peer that claims the run needs three to start an attempt (its claim,
    /// the journal's listing, its own fence).
    pub async fn append_step(&self, entry: &Entry) -> Result<(), JournalError> {
        let Some(claim) = &self.claim else {
            return self.append(entry).await;
        };
        let (appended, fence) = futures::join!(self.append(entry), FenceRead::of(&self.store, &self.run, claim.epoch));
        appended?;
        if let Some(read) = fence {
            *lock(&self.fence_ahead) = Some(FenceAhead {
                seq: Some(entry.seq.saturating_add(1)),
                read,
            });
        }
        Ok(())
    }

    /// Compacts the journal into a new snapshot if `policy` says it has grown
    /// enough since the newest: of the entries this handle has read or
    /// written, those from seq 0 up to the first gap. Returns how many
    /// entries the new snapshot covers. A snapshot only speeds up reading
    /// the journal, so failing to write one is a warning, not an error.
    pub async fn snapshot(&self, policy: &SnapshotPolicy) -> Option<u64> {
        let (covers, body) = {
            let seen = lock(&self.seen);
            let covers = seen.gapless.len() as u64;
            if !policy.is_due(seen.snapshot, covers) {
                return None;
            }
            (covers, snapshot::encode(seen.gapless.iter()))
        };
        if self.check_claim().is_err() {
            return None;
        }
        let key = self.incarnation_keys().await.ok()?.snapshot(covers);
        match self.store.create(&key, Bytes::from(body)).await {
            Ok(()) => {
                tracing::debug!(run = %self.run, covers, "journal snapshot written");
                let mut seen = lock(&self.seen);
                seen.snapshot = seen.snapshot.max(covers);
                Some(covers)
            }
            // Written from the same entries by another execution: as good.
            Err(StoreError::AlreadyExists { .. }) => None,
            Err(error) => {
                tracing::warn!(run = %self.run, covers, %error, "could not write a journal snapshot; the entries stand");
                None
            }
        }
    }

    /// The failed attempts of the step at `seq`, oldest first.
    pub async fn attempts(&self, seq: u64) -> Result<Vec<AttemptRecord>, JournalError> {
        let keys = self.store.list(&self.incarnation_keys().await?.attempts(seq)).await?;
        let mut attempts = Vec::with_capacity(keys.len());
        for key in keys {
            attempts.extend(self.read::<AttemptRecord>(&key).await?);
        }
        Ok(attempts)
    }

    /// Records `attempt`, a failed attempt of the step at `seq`, create-only;
    /// fails if this handle's claim has lapsed.
    pub async fn record_attempt(&self, seq: u64, attempt: &AttemptRecord) -> Result<(), JournalError> {
        self.check_claim()?;
        self.create(&self.incarnation_keys().await?.attempt(seq, attempt.attempt), attempt)
            .await
    }

    /// The timer of the wait at `seq`: the one recorded when the wait first
    /// began, or a new one from `started_at_ms` waiting `wait_ms`.
    pub async fn timer(
        &self,
        seq: u64,
        started_at_ms: u64,
        wait_ms: u64,
        signal: Option<&str>,
    ) -> Result<TimerRecord, JournalError> {
        let key = self.incarnation_keys().await?.timer(seq);
        if let Some(timer) = self.read::<TimerRecord>(&key).await? {
            // Only a wait resumed before its deadline may have been advanced:
            // one that ran its course costs no further read.
            if timer.deadline_ms <= started_at_ms {
                return Ok(timer);
            }
            return Ok(match self.advance_request(seq).await? {
                Some(advance) => TimerRecord {
                    deadline_ms: advance.advanced_at_ms.min(timer.deadline_ms),
                    ..timer
                },
                None => timer,
            });
        }
        let timer = TimerRecord {
            deadline_ms: started_at_ms.saturating_add(wait_ms),
            started_at_ms,
            signal: signal.map(str::to_owned),
        };
        self.check_claim()?;
        match self.create(&key, &timer).await {
            Err(JournalError::Store(StoreError::AlreadyExists { .. })) => Ok(self.read(&key).await?.unwrap_or(timer)),
            other => other.map(|()| timer),
        }
    }

    /// The wait the run is in (a sleep, or a signal wait with its timeout),
    /// by seq: the newest timer, if its call has no entry yet (waits come
    /// one after another, and entries are never deleted).
    pub async fn open_timer(&self) -> Result<Option<(u64, TimerRecord)>, JournalError> {
        let keys = self.incarnation_keys().await?;
        let Some(seq) = self.store.list(&keys.timers()).await?.iter().filter_map(seq_of).max() else {
            return Ok(None);
        };
        let (timer_key, entry_key) = (keys.timer(seq), keys.entry(seq));
        let (timer, entry) = futures::try_join!(self.read::<TimerRecord>(&timer_key), async {
            Ok(self.store.version(&entry_key).await?)
        })?;
        Ok(timer.filter(|_| entry.is_none()).map(|timer| (seq, timer)))
    }

    /// The request to end the wait at `seq` at once, if one was made.
    pub async fn advance_request(&self, seq: u64) -> Result<Option<AdvanceRecord>, JournalError> {
        self.read(&keys_of(&self.run).advance(seq)).await
    }

    /// Ends the wait at `seq` at once; the first request stands.
    pub async fn request_advance(&self, seq: u64, request: &AdvanceRecord) -> Result<(), JournalError> {
        self.create_first(&keys_of(&self.run).advance(seq), request).await
    }

    /// The waits (sleeps and signal waits) ever begun, by seq.
    pub async fn timers(&self) -> Result<Vec<(u64, TimerRecord)>, JournalError> {
        let keys = self.store.list(&self.incarnation_keys().await?.timers()).await?;
        let mut timers = Vec::with_capacity(keys.len());
        for key in keys {
            if let (Some(seq), Some(timer)) = (seq_of(&key), self.read::<TimerRecord>(&key).await?) {
                timers.push((seq, timer));
            }
        }
        Ok(timers)
    }

    /// The seqs of steps with failed attempts, and how many failed.
    pub async fn retries(&self) -> Result<Vec<(u64, usize)>, JournalError> {
        let keys = self.list(&self.incarnation_keys().await?.all_attempts(), None).await?;
        let mut retries: Vec<(u64, usize)> = Vec::new();
        for seq in keys
            .iter()
            .filter_map(|key| key.parts().nth_back(1))
            .filter_map(|p| p.as_ref().parse().ok())
        {
            match retries.last_mut() {
                Some((last, count)) if *last == seq => *count += 1,
                _ => retries.push((seq, 1)),
            }
        }
        Ok(retries)
    }

    /// Signals sent under `name`, oldest first, with their keys.
    pub async fn signals(&self, name: &SignalName) -> Result<Vec<(String, SignalRecord)>, JournalError> {
        let keys = self.list(&keys_of(&self.run).signals(name), None).await?;
        let read: Vec<Option<SignalRecord>> = futures::stream::iter(keys.iter().cloned())
            .map(|key| async move { self.read(&key).await })
            .buffered(READ_AHEAD)
            .try_collect()
            .await?;
        Ok((keys.iter().zip(read))
            .filter_map(|(key, signal)| Some((key.to_string(), signal?)))
            .collect())
    }

    /// How many signals were sent to the run and not yet taken by it.
    pub async fn buffered_signals(&self) -> Result<usize, JournalError> {
        let taken = taken_signals(&self.entries().await?);
        Ok(self.untaken_signals(&taken, u64::MAX).await?.len())
    }

    /// The keys of the signals sent to the run, at or before `sent_by_ms`,
    /// that `taken` does not hold, oldest first: one listing.
    pub async fn untaken_signals(
        &self,
        taken: &HashSet<String>,
        sent_by_ms: u64,
    ) -> Result<Vec<StoreKey>, JournalError> {
        let sent = self.store.list(&keys_of(&self.run).all_signals()).await?;
        Ok(sent
            .into_iter()
            .filter(|key| !taken.contains(key.as_ref()))
            .filter(|key| signal_sent_at_ms(key).is_none_or(|at| at <= sent_by_ms))
            .collect())
    }

    /// Sends the signals stored at `keys`, which were sent to `from`, to
    /// this run, under the same names and times: copying again is harmless.
    pub async fn copy_signals(&self, from: &RunRecords, keys: &[StoreKey]) -> Result<(), JournalError> {
        let (source, target) = (keys_of(&from.run).all_signals(), keys_of(&self.run).all_signals());
        for key in keys {
            let Some(rest) = key.prefix_match(&source) else {
                continue;
            };
            let copy = StoreKey::from_iter(target.parts().chain(rest));
            let Some((signal, bytes)) = from.read_stored::<SignalRecord>(key).await? else {
                continue;
            };
            if let Payload::Stored { sha256, .. } = &signal.payload {
                self.copy_payload(from, sha256).await?;
            }
            match self.store.create(&copy, bytes).await {
                Ok(()) | Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Stores a signal for the run; it waits there until the run takes it.
    /// With the sender's `id`, at most once per id, however many sends race:
    /// a claim holding the signal is created first (create-only: one send
    /// wins), then the signal, under the winner's time.
    pub async fn send_signal(
        &self,
        name: &SignalName,
        signal: &SignalRecord,
        id: Option<&SignalId>,
    ) -> Result<(), JournalError> {
        let keys = keys_of(&self.run);
        let Some(id) = id else {
            return self
                .create(&keys.new_signal(name, signal.sent_at_ms, None), signal)
                .await;
        };
        let claimed = match self.create(&keys.signal_claim(name, id), signal).await {
            Ok(()) => signal.clone(),
            Err(JournalError::Store(StoreError::AlreadyExists { .. })) => self
                .read(&keys.signal_claim(name, id))
                .await?
                .unwrap_or_else(|| signal.clone()),
            Err(e) => return Err(e),
        };
        self.store_claimed(name, id, &claimed).await
    }

    /// Whether a signal called `name` was sent with the sender's `id`. If
    /// its claim is stored but a crash came before the signal itself was,
    /// this stores it, so a resend finding the claim delivers it.
    pub async fn signal_stored(&self, name: &SignalName, id: &SignalId) -> Result<bool, JournalError> {
        let Some(claimed) = self.read(&keys_of(&self.run).signal_claim(name, id)).await? else {
            return Ok(false);
        };
        self.store_claimed(name, id, &claimed).await?;
        Ok(true)
    }

    async fn store_claimed(
        &self,
        name: &SignalName,
        id: &SignalId,
        claimed: &SignalRecord,
    ) -> Result<(), JournalError> {
        let key = keys_of(&self.run).new_signal(name, claimed.sent_at_ms, Some(id));
        match self.create(&key, claimed).await {
            Ok(()) | Err(JournalError::Store(StoreError::AlreadyExists { .. })) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// The seq a key ends with.
fn seq_of(key: &StoreKey) -> Option<u64> {
    key.filename()?.parse().ok()
}

/// The keys of the signals `entries` took.
pub fn taken_signals(entries: &[Entry]) -> HashSet<String> {
    entries
        .iter()
        .filter_map(|entry| match &entry.recorded {
            super::Recorded::Signal { key, .. } => key.clone(),
            _ => None,
        })
        .collect()
}

/// When the signal stored at `key` was sent: its name begins with the
/// time (see `RunKeys::new_signal`).
fn signal_sent_at_ms(key: &StoreKey) -> Option<u64> {
    key.filename()?.split('-').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;
    use crate::journal::{Call, CallKind, Recorded};
    use crate::store::{Storage, TenantId};

    fn records() -> RunRecords {
        let store = Storage::in_memory().tenant(&TenantId::default_tenant());
        RunRecords::new(store, RunId::new("r1").expect("a valid run id"))
    }

    fn entry(seq: u64) -> Entry {
        Entry {
            seq,
            call: Call::new(CallKind::Now, "", b""),
            recorded: Recorded::Value(seq * 10),
            attempts: 1,
            started_at_ms: 0,
            finished_at_ms: 1,
            last_attempt_started_at_ms: None,
        }
    }

    /// A host of its own, on a store of its own, for the fence's tests.
    fn fencing_host() -> Arc<crate::cluster::Cluster> {
        use crate::cluster::{Cluster, HostId, LeasePolicy};
        let storage = Storage::in_memory();
        Cluster::new(
            &storage,
            HostId::fresh(),
            &LeasePolicy::default(),
            Duration::from_secs(60),
        )
    }

    /// Whether an attempt was refused because another host claimed the run.
    fn overtaken(result: Result<(), JournalError>) -> bool {
        matches!(result, Err(JournalError::StoodDown { .. }))
    }

    /// Run `run`'s records, stored, as this host drives them under its
    /// first claim.
    async fn driven(
        cluster: &Arc<crate::cluster::Cluster>,
        run: &str,
    ) -> Result<RunRecords, Box<dyn std::error::Error>> {
        driven_on(cluster, Storage::in_memory().tenant(&TenantId::default_tenant()), run).await
    }

    /// Run `run`'s records, stored in `store`, as `driven` gives them.
    async fn driven_on(
        cluster: &Arc<crate::cluster::Cluster>,
        store: TenantStore,
        run: &str,
    ) -> Result<RunRecords, Box<dyn std::error::Error>> {
        let record = RunRecord {
            host: Some(cluster.me().clone()),
            ..RunRecord::example(run, 1)
        };
        let records = RunRecords::new(store.clone(), record.run_id.clone());
        records.create_run(&record).await?;
        let claim = cluster.claim(&store, &record).await?;
        Ok(records.driven_under(claim))
    }

    /// Another host's claim of the run, at the epoch after `records`'.
    async fn taken_over(records: &RunRecords) -> Result<(), StoreError> {
        let next = keys_of(&records.run).owner(records.epoch() + 1);
        records.store.create(&next, Bytes::from_static(b"elsewhere")).await
    }

    /// The fence read with a step's entry stands for the attempt of the
    /// next seq alone, once, and only if it starts at once: a claim another
    /// host made after the read is seen by any later start, by a start of
    /// another seq, and by a start that came after a wait.
    #[tokio::test]
    async fn a_fence_read_with_a_steps_entry_stands_for_the_next_attempt_only_at_once() -> TestResult {
        let cluster = fencing_host();
        cluster.live().await?;

        let records = driven(&cluster, "at-once").await?;
        records.append_step(&entry(0)).await?;
        taken_over(&records).await?;
        records.confirm_start(1).await?;
        assert!(overtaken(records.confirm_start(1).await), "read ahead once only");

        let records = driven(&cluster, "another-seq").await?;
        records.append_step(&entry(0)).await?;
        taken_over(&records).await?;
        assert!(overtaken(records.confirm_start(2).await), "read ahead for seq 1 only");

        let records = driven(&cluster, "after-a-wait").await?;
        records.append_step(&entry(0)).await?;
        taken_over(&records).await?;
        tokio::time::sleep(FENCE_READ_AHEAD_FOR * 2).await;
        assert!(overtaken(records.confirm_start(1).await), "read ahead stands no longer");

        let records = driven(&cluster, "taken-before").await?;
        taken_over(&records).await?;
        records.append_step(&entry(0)).await?;
        assert!(
            overtaken(records.confirm_start(1).await),
            "a read ahead that saw the claim stands for nothing"
        );
        Ok(())
    }

    /// A fence read ahead is stamped as the read itself went, not as the
    /// write beside it did: a read that came back at once beside an entry
    /// written slowly (a second) stands for no attempt after that write,
    /// which sees a claim made meanwhile; nor does a read that was slow to
    /// come back itself, past [`FENCE_STANDS_FOR`] from its sending.
    #[tokio::test(start_paused = true)]
    async fn a_fence_read_ahead_is_as_old_as_its_read_not_as_the_write_beside_it() -> TestResult {
        use crate::clock::VirtualTime;
        use crate::store::seams::{Before, Call, Seams};
        use futures::FutureExt;
        let _virtual = VirtualTime::start(1_000);
        let slow_entries: Before = Arc::new(|call, key| {
            let entry = call == Call::Put && key.as_ref().contains("/journal/");
            async move {
                if entry {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Ok(())
            }
            .boxed()
        });
        let cluster = fencing_host();
        cluster.live().await?;
        let store = Storage::new(Arc::new(Seams::before(slow_entries))).tenant(&TenantId::default_tenant());
        let records = driven_on(&cluster, store.clone(), "slow-write").await?;
        let claimed_meanwhile = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            taken_over(&records).await
        };
        let first = entry(0);
        let (appended, claimed) = futures::join!(records.append_step(&first), claimed_meanwhile);
        (appended?, claimed?);
        assert!(
            overtaken(records.confirm_start(1).await),
            "a claim stored while the entry was written is seen"
        );

        let read = FenceRead::of(&store, &RunId::new("unclaimed")?, 0)
            .await
            .expect("no claim");
        assert!(read.stands(), "at once");
        let slow = FenceRead {
            sent: read.sent,
            returned: read.sent.after(FENCE_STANDS_FOR + Duration::from_millis(1)),
        };
        tokio::time::sleep(FENCE_STANDS_FOR + Duration::from_millis(1)).await;
        assert!(!slow.stands(), "a read that took longer than the bound to come back");
        Ok(())
    }

    /// The fence read as a run record is created stands for the creator's
    /// first attempt, whatever its seq, once, and only if it starts at
    /// once; one that saw the run claimed stands for nothing, and none
    /// stands under a later claim than the creator's.
    #[tokio::test]
    async fn a_fence_read_with_the_run_record_stands_for_the_first_attempt_only_at_once() -> TestResult {
        let cluster = fencing_host();
        let store = Storage::in_memory().tenant(&TenantId::default_tenant());
        let generation = cluster.live().await?;
        // A run this host created, held at `epoch` as a submission holds it.
        let created = |run: &str, epoch: u64| {
            let (store, cluster) = (store.clone(), cluster.clone());
            let record = RunRecord::example(run, 1);
            async move {
                let records = RunRecords::new(store.clone(), record.run_id.clone());
                let fence = records.create_record_fenced(&record).await?;
                let claim = cluster.hold(store.tenant(), &record, generation, epoch);
                Ok::<_, JournalError>((records.driven_under(claim), fence))
            }
        };

        let (records, fence) = created("at-once", 0).await?;
        records.stand_on(fence.expect("no claim to see"));
        taken_over(&records).await?;
        records.confirm_start(2).await?;
        assert!(overtaken(records.confirm_start(2).await), "read ahead once only");

        let (records, fence) = created("after-a-wait", 0).await?;
        records.stand_on(fence.expect("no claim to see"));
        taken_over(&records).await?;
        tokio::time::sleep(FENCE_READ_AHEAD_FOR * 2).await;
        assert!(overtaken(records.confirm_start(0).await), "read ahead stands no longer");

        let (records, fence) = created("later-claim", 1).await?;
        records.stand_on(fence.expect("no claim to see"));
        taken_over(&records).await?;
        assert!(overtaken(records.confirm_start(0).await), "the creator's fence only");

        let taken = RunRecords::new(store.clone(), RunId::new("taken-before")?);
        taken_over(&taken).await?;
        let (_, fence) = created("taken-before", 0).await?;
        assert!(fence.is_none(), "a read that saw the run claimed stands for nothing");
        Ok(())
    }

    /// A late signal left under an id whose run was deleted is cleared by
    /// the next submission of the id, but not a stored payload, which the
    /// submission may have written; a stored run is left alone.
    #[tokio::test]
    async fn an_id_is_vacant_without_a_record_and_loses_what_an_earlier_run_left() -> TestResult {
        let run = records();
        let signal = SignalRecord {
            payload: "{}".into(),
            sent_at_ms: 1,
        };
        run.send_signal(&"late".parse()?, &signal, None).await?;
        let input = run.payload("[1]".into(), 0).await?;
        assert_eq!(run.vacancy().await?, Vacancy::Free);
        let left = run.store().list(&keys_of(&run.run).root()).await?;
        assert_eq!(left, vec![keys_of(&run.run).payload(&sha256_hex(b"[1]"))]);
        assert_eq!(run.payload_text(input).await?, "[1]");

        run.create_run(&RunRecord::example("r1", 1)).await?;
        run.send_signal(&"kept".parse()?, &signal, None).await?;
        assert_eq!(run.vacancy().await?, Vacancy::Taken);
        assert_eq!(run.store().list(&keys_of(&run.run).all_signals()).await?.len(), 1);
        Ok(())
    }

    /// Issue 55 (simulation seeds 1730 and 1736): a driver of a run, paused
    /// past the run's deletion and the id's use again, wrote its entry and
    /// outcome into the new run, which found its journal non-deterministic
    /// or itself ended. Each incarnation's drivers write in a folder of
    /// their own, and what the new run's handles read is its own.
    #[tokio::test]
    async fn a_late_write_of_an_ids_earlier_run_never_reaches_the_runs_created_after() -> TestResult {
        let late = records();
        late.create_record(&RunRecord::example("r1", 1)).await?;
        late.store().delete(&keys_of(late.run_id()).run()).await?;
        let new = reopened(&late);
        let again = RunRecord {
            incarnation: 1,
            ..RunRecord::example("r1", 2)
        };
        new.create_record(&again).await?;

        let stale = Entry {
            recorded: Recorded::Value(7),
            ..entry(0)
        };
        late.append(&stale).await?;
        late.finish(&Outcome::Cancelled { reason: "late".into() }).await?;
        new.append(&entry(0)).await?;
        for reader in [new.clone(), reopened(&new)] {
            assert_eq!(reader.incarnation().await?, 1);
            assert_eq!(reader.entries().await?, [entry(0)]);
            assert_eq!(reader.outcome().await?, None);
        }
        let stored = late.store().list(&keys_of(late.run_id()).root()).await?;
        let stored: Vec<String> = stored.iter().map(ToString::to_string).collect();
        assert_eq!(
            stored,
            [
                "runs/r1/incarnations/1/journal/0000000000",
                "runs/r1/journal/0000000000",
                "runs/r1/outcome",
                "runs/r1/run",
            ],
        );
        Ok(())
    }

    /// Appends the entries of `seqs` to `run`'s journal, in that order.
    async fn append_all(run: &RunRecords, seqs: impl IntoIterator<Item = u64>) -> Result<(), JournalError> {
        for seq in seqs {
            run.append(&entry(seq)).await?;
        }
        Ok(())
    }

    /// Another handle on `run`'s records, which has read and written nothing.
    fn reopened(run: &RunRecords) -> RunRecords {
        RunRecords::new(run.store().clone(), run.run_id().clone())
    }

    #[test]
    fn the_seen_journal_closes_its_gaps_and_keeps_the_last_bytes_of_a_seq() {
        let mut seen = SeenJournal::default();
        for seq in [2, 0, 5] {
            seen.insert(seq, Bytes::from(seq.to_string()));
        }
        assert_eq!((seen.gapless.len(), seen.len()), (1, 3));
        seen.insert(1, Bytes::from_static(b"1"));
        assert_eq!(seen.gapless, ["0", "1", "2"].map(Bytes::from));
        assert_eq!(seen.beyond.keys().collect::<Vec<_>>(), [&5]);
        seen.insert(1, Bytes::from_static(b"again"));
        assert_eq!((seen.gapless[1].as_ref(), seen.len()), (&b"again"[..], 4));
        // A foreign record's seq grows the map by one, never the vector.
        seen.insert(u64::MAX, Bytes::new());
        assert_eq!((seen.gapless.len(), seen.len()), (3, 5));
    }

    #[test]
    fn entries_come_in_seq_order_and_the_last_read_of_a_seq_stands() {
        let later = Entry {
            attempts: 2,
            ..entry(1)
        };
        let sorted = one_per_seq(vec![entry(2), entry(1), entry(0), later.clone()]);
        assert_eq!(sorted, [entry(0), later, entry(2)]);
    }

    #[tokio::test]
    async fn entries_come_back_by_seq_and_a_seq_is_written_once() -> TestResult {
        let run = records();
        append_all(&run, [2, 0, 1]).await?;
        let entries = run.entries().await?;
        assert_eq!(entries, [entry(0), entry(1), entry(2)]);
        let again = run.append(&entry(1)).await.unwrap_err();
        assert!(
            matches!(again, JournalError::Store(StoreError::AlreadyExists { .. })),
            "{again}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_corrupt_entry_is_reported_with_its_key() -> TestResult {
        let run = records();
        let mut bytes = encode(&entry(0));
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let key = keys_of(run.run_id()).of(0).entry(0);
        run.store().create(&key, Bytes::from(bytes)).await?;
        let err = run.entries().await.unwrap_err().to_string();
        assert!(
            err.contains("runs/r1/journal/0000000000") && err.contains("checksum mismatch"),
            "{err}"
        );
        Ok(())
    }

    /// A run whose store counts the calls made of it.
    fn counted() -> (RunRecords, Arc<crate::store::Faults>) {
        let (storage, counts) = Storage::in_memory().with_faults("errors=0".parse().expect("a fault config"));
        let records = RunRecords::new(
            storage.tenant(&TenantId::default_tenant()),
            RunId::new("r1").expect("valid in this test"),
        );
        (records, counts)
    }

    const EVERY_4: SnapshotPolicy = SnapshotPolicy { every: 4 };

    #[tokio::test]
    async fn a_snapshot_replaces_the_reads_of_the_entries_it_covers() -> TestResult {
        let (run, counts) = counted();
        run.create_run(&RunRecord::example("r1", 1)).await?;
        append_all(&run, 0..10).await?;
        assert_eq!(run.snapshot(&EVERY_4).await, Some(10));
        append_all(&run, 10..12).await?;
        let fresh = reopened(&run);
        // Which run of the id: one read of the record, as any reader's first.
        fresh.incarnation().await?;
        let before = counts.operations();
        let entries = fresh.entries().await?;
        assert_eq!(entries, (0..12).map(entry).collect::<Vec<_>>());
        // The snapshots listed, the snapshot, its last entry, the journal
        // after it listed, and the 2 entries after it: not 1 + 12.
        assert_eq!(counts.operations() - before, 6);
        let before = counts.operations();
        assert_eq!(fresh.entry_seqs().await?, (0..12).collect());
        // The snapshots listed, the snapshot's last entry, the journal after
        // it listed: no snapshot body, no entry after it.
        assert_eq!(counts.operations() - before, 3);
        Ok(())
    }

    #[tokio::test]
    async fn a_snapshot_covers_entries_up_to_the_first_gap_and_is_written_when_due() -> TestResult {
        let run = records();
        append_all(&run, [0, 1, 2, 4, 5, 6, 7]).await?;
        // 3 entries from seq 0 without a gap: fewer than 4.
        assert_eq!(run.snapshot(&EVERY_4).await, None);
        run.append(&entry(3)).await?;
        assert_eq!(run.snapshot(&EVERY_4).await, Some(8));
        run.append(&entry(8)).await?;
        assert_eq!(run.snapshot(&EVERY_4).await, None, "one entry since the last");
        assert_eq!(run.snapshot(&SnapshotPolicy { every: 0 }).await, None);
        let keys = run.store().list(&keys_of(run.run_id()).of(0).snapshots()).await?;
        assert_eq!(keys, [keys_of(run.run_id()).of(0).snapshot(8)]);
        Ok(())
    }

    #[tokio::test]
    async fn a_snapshot_counts_what_was_read_and_a_later_entry_in_a_gap_is_found() -> TestResult {
        let run = records();
        append_all(&run, (0..6).chain(7..9)).await?;
        assert_eq!(run.snapshot(&EVERY_4).await, Some(6));
        // A step task that was still running lands its entry in the gap.
        run.append(&entry(6)).await?;
        let reader = reopened(&run);
        assert_eq!(reader.entries().await?.len(), 9);
        // The reader knows the snapshot of 6 it read: 9 is not enough more.
        assert_eq!(reader.snapshot(&SnapshotPolicy { every: 4 }).await, None);
        assert_eq!(reader.snapshot(&SnapshotPolicy { every: 3 }).await, Some(9));
        Ok(())
    }

    #[tokio::test]
    async fn the_seqs_come_from_a_snapshots_key_once_its_last_entry_is_stored() -> TestResult {
        let run = records();
        append_all(&run, 0..6).await?;
        let keys = keys_of(run.run_id());
        // A body that does not decode: the seqs do not depend on it.
        run.store()
            .create(&keys.of(0).snapshot(6), Bytes::from_static(b"STP"))
            .await?;
        assert_eq!(run.entry_seqs().await?, (0..6).collect());
        // A snapshot naming entries that are not stored is passed over.
        run.store()
            .create(&keys.of(0).snapshot(20), Bytes::from_static(b"STP"))
            .await?;
        assert_eq!(run.entry_seqs().await?, (0..6).collect());
        Ok(())
    }

    #[tokio::test]
    async fn a_snapshot_written_twice_is_no_error() -> TestResult {
        let run = records();
        append_all(&run, 0..4).await?;
        let other = reopened(&run);
        other.entries().await?;
        assert_eq!(run.snapshot(&EVERY_4).await, Some(4));
        assert_eq!(other.snapshot(&EVERY_4).await, None, "already written");
        assert_eq!(other.entries().await?.len(), 4);
        Ok(())
    }

    #[tokio::test]
    async fn outcome_is_recorded_once() -> TestResult {
        let run = records();
        let first = Outcome::Completed { output: "1".into() };
        assert_eq!(run.finish(&first).await?, first);
        let second = Outcome::Completed { output: "2".into() };
        assert_eq!(run.finish(&second).await?, first);
        Ok(())
    }

    #[tokio::test]
    async fn a_signal_sent_with_an_id_is_found_by_that_id_only() -> TestResult {
        let run = records();
        let name = SignalName::new("go")?;
        let id = SignalId::new("x-once")?;
        assert!(!run.signal_stored(&name, &id).await?);
        let signal = SignalRecord {
            payload: "1".into(),
            sent_at_ms: 5,
        };
        run.send_signal(&name, &signal, Some(&id)).await?;
        assert!(run.signal_stored(&name, &id).await?);
        for other in ["once", "x"] {
            assert!(!run.signal_stored(&name, &SignalId::new(other)?).await?, "{other}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_timer_keeps_its_first_deadline() -> TestResult {
        let run = records();
        assert_eq!(run.timer(3, 60, 40, None).await?.deadline_ms, 100);
        let again = run.timer(3, 900, 99, None).await?;
        assert_eq!((again.deadline_ms, again.started_at_ms), (100, 60));
        Ok(())
    }

    /// The signals a run had not taken, sent by a time, are copied to
    /// another run under the same names, to be taken there in the same
    /// order; copying again adds none, and a later signal stays behind.
    #[tokio::test]
    async fn untaken_signals_sent_by_a_time_are_copied_once_to_another_run() -> TestResult {
        let old = records();
        let new = RunRecords::new(old.store.clone(), RunId::new("r2")?);
        let name = SignalName::new("go")?;
        for (payload, sent_at_ms) in [("1", 10), ("2", 20), ("3", 30)] {
            let signal = SignalRecord {
                payload: payload.into(),
                sent_at_ms,
            };
            old.send_signal(&name, &signal, None).await?;
        }
        let sent = old.signals(&name).await?;
        let took_first = Entry {
            recorded: Recorded::Signal {
                payload: Some("1".into()),
                key: Some(sent[0].0.clone()),
            },
            ..entry(0)
        };
        let taken = taken_signals(&[took_first, entry(1)]);
        let untaken = old.untaken_signals(&taken, 20).await?;
        assert_eq!(untaken.len(), 1, "the second only: the third came after 20 ms");
        new.copy_signals(&old, &untaken).await?;
        new.copy_signals(&old, &untaken).await?;
        let copied = new.signals(&name).await?;
        let payloads: Vec<&str> = copied
            .iter()
            .map(|(_, signal)| signal.payload.inline().unwrap())
            .collect();
        assert_eq!(payloads, ["2"]);
        assert!(copied[0].0.starts_with("runs/r2/signals/go/"), "{}", copied[0].0);
        assert_eq!(new.buffered_signals().await?, 1);
        assert_eq!(old.untaken_signals(&taken, u64::MAX).await?.len(), 2);
        Ok(())
    }
}
