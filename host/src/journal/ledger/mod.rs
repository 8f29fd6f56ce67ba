//! The ledger of a tenant's runs: which are unfinished, when each one
//! finished, and what listings find them by (when each was created, its
//! workflow, builds and tags), noted in batches many runs share instead
//! of in markers of their own, so a run writes no object for them.
//!
//! ```text
//! ledger/batches/{ms:016}-{host}-{n:08}         runs created, moved and ended, as a host noted them together (create-only)
//! ledger/open/{ms:016}-{host}-{n:08}            the runs a compaction found open
//! ledger/ended/{hour:08}/{ms:016}-{host}-{n:08} the runs a compaction found ended in that hour, and when
//! ledger/created/{hour:08}/{level:02}-{name}    the runs created in that hour, for listings (see [`created`])
//! ```
//!
//! A submission notes its run opened before it creates the run's record,
//! and waits for the note to be stored: the notes of runs submitted while
//! a batch is being written share the next one ([`Ledger::opened`]). So no
//! run record is stored unnoted, and recovery finds every unfinished run
//! without listing `runs/`. A crash between the note and the record leaves
//! the note of a run that never was: recovery passes over it, and notes it
//! ended once it is [`PHANTOM_AFTER`] old. The note that opens a run lists
//! it too ([`ListedRun`]); an upgrade notes a run again under the build
//! it moved to, awaited likewise. A run's end is noted after its
//! outcome, in the next batch, unawaited ([`Ledger::ended`]): a crash
//! before the batch is stored leaves the run noted open, and recovery,
//! finding its outcome, notes its end again.
//!
//! Invariants: a run noted opened and not noted ended is, at every moment,
//! in a batch or an open segment; a run noted created, in a batch or a
//! segment of its hour. A compaction writes what it read, folded (the
//! open segment, the ended ones, the created ones), before it deletes what it read, and
//! deletes nothing it did not read; compactions on many hosts at once are
//! safe. A run that ended may then stay in one of their open segments: it
//! is noted ended again by recovery, as above. A compaction whose reads
//! are over [`created::STALE_AFTER`] old writes nothing (a run it read
//! listed may have been deleted since: see [`created`]). A reader reads the batches
//! before it lists the open segments, and starts again if an object it
//! listed is gone (compacted meanwhile); a listing likewise reads the
//! batches before the created segments. A run is noted by its id and its
//! creation time, so the end of a run deleted long ago never closes a new
//! run under the same id.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::try_join_all;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, oneshot};

use super::JournalError;
use super::envelope::{decode, encode};
use crate::clock::now_ms;
use crate::cluster::HostId;
use crate::shared_map::lock;
use crate::store::{RunId, StoreError, StoreKey, TenantId, TenantStore};

pub mod created;

pub use created::ListedRun;

/// A note of a run opened with no record after this long is of a
/// submission that crashed before creating it: recovery notes it ended.
pub const PHANTOM_AFTER: Duration = Duration::from_secs(3600);

/// Batches a compaction waits for: fewer are left to the next.
pub const COMPACT_AT: usize = 16;

/// Notes one batch holds at most; more wait for the next.
const BATCH_NOTES: usize = 1_000;

/// Times a reader starts again when compactions keep moving what it listed.
const READ_ATTEMPTS: usize = 8;

const HOUR_MS: u64 = 3_600_000;

/// A run as the ledger knows it: its id and when it was created.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NotedRun {
    /// Its id.
    pub run: RunId,
    /// When it was created: a submission under the id at another time
    /// is another run.
    pub created_at_ms: u64,
}

/// What a batch notes of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Note {
    /// Opened, unlisted: as batches noted runs before the ledger listed them.
    Opened(NotedRun),
    Ended {
        run: NotedRun,
        finished_at_ms: u64,
    },
    /// Opened and listed.
    Created(ListedRun),
    /// Listed again, under the build an upgrade moved it to.
    Moved(ListedRun),
}

fn batches_key() -> StoreKey {
    StoreKey::from_iter(["ledger", "batches"])
}

fn open_key() -> StoreKey {
    StoreKey::from_iter(["ledger", "open"])
}

/// Where the runs that ended are kept, by hour.
pub fn ended_key() -> StoreKey {
    StoreKey::from_iter(["ledger", "ended"])
}

/// The folder of the segments of runs that ended in `hour` (`{hour:08}`).
pub fn ended_folder(hour: &str) -> StoreKey {
    below(&ended_key(), hour.to_owned())
}

/// What the ledger says is open: every run noted opened and not ended (some
/// of which may have ended since, or never been created), and how many
/// batches await compaction.
#[derive(Debug, Default)]
pub struct OpenRuns {
    pub runs: BTreeSet<NotedRun>,
    pub batches: usize,
}

/// Notes runs opened and ended in a tenant's ledger, for this host: see the
/// module doc. Clones share the batches being formed.
#[derive(Clone)]
pub struct Ledger {
    inner: Arc<Inner>,
}

struct Inner {
    host: HostId,
    /// Names this host's objects apart from each other.
    next: AtomicU64,
    forming: Mutex<HashMap<TenantId, Forming>>,
    /// Told each time a tenant's writer has no batch left.
    idle: Notify,
    /// The tenants this host found listed ([`Ledger::ensure_listed`]).
    listed: Mutex<HashSet<TenantId>>,
}

/// The notes waiting for a tenant's next batch, and who waits for them.
#[derive(Default)]
struct Forming {
    notes: Vec<Note>,
    waiting: Vec<oneshot::Sender<bool>>,
    writing: bool,
    written: u64,
}

impl Ledger {
    pub fn new(host: HostId) -> Self {
        Self {
            inner: Arc::new(Inner {
                host,
                next: AtomicU64::new(0),
                forming: Mutex::new(HashMap::new()),
                idle: Notify::new(),
                listed: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// Notes `run` opened and lists it, once stored: with the notes of
    /// the runs submitted meanwhile, in one batch.
    pub async fn opened(&self, store: &TenantStore, run: ListedRun) -> Result<(), JournalError> {
        self.noted(store, Note::Created(run)).await
    }

    /// Lists `run` under the build it moved to (its first), once stored.
    pub async fn moved(&self, store: &TenantStore, run: ListedRun) -> Result<(), JournalError> {
        self.noted(store, Note::Moved(run)).await
    }

    /// Adds `note` to the next batch, and waits for the batch to be stored.
    async fn noted(&self, store: &TenantStore, note: Note) -> Result<(), JournalError> {
        let (sent, stored) = oneshot::channel();
        self.add(store, note.clone(), Some(sent));
        if stored.await.unwrap_or(false) {
            return Ok(());
        }
        // The shared batch failed: this note alone, to get its own error.
        self.write(store, &[note]).await
    }

    /// Lists the tenant's runs stored before the ledger listed runs, once
    /// ([`created::ensure_listed`]). A store once listed stays listed, so
    /// this host then stops asking it.
    pub async fn ensure_listed(&self, store: &TenantStore) -> Result<(), JournalError> {
        if lock(&self.inner.listed).contains(store.tenant()) {
            return Ok(());
        }
        created::ensure_listed(store, &|| self.name()).await?;
        lock(&self.inner.listed).insert(store.tenant().clone());
        Ok(())
    }

    /// Returns once every note made so far is stored (or its batch failed):
    /// a host stopping cleanly leaves no run noted open that ended.
    pub async fn settle(&self) {
        loop {
            // Made before the check: it hears a writer that ends after it.
            let idle = self.inner.idle.notified();
            if !lock(&self.inner.forming).values().any(|batch| batch.writing) {
                return;
            }
            idle.await;
        }
    }

    /// Notes `run` ended at `finished_at_ms`, in the next batch; not waited
    /// for (see the module doc).
    pub fn ended(&self, store: &TenantStore, run: NotedRun, finished_at_ms: u64) {
        self.add(store, Note::Ended { run, finished_at_ms }, None);
    }

    fn add(&self, store: &TenantStore, note: Note, waiting: Option<oneshot::Sender<bool>>) {
        let mut forming = lock(&self.inner.forming);
        let batch = forming.entry(store.tenant().clone()).or_default();
        batch.notes.push(note);
        batch.waiting.extend(waiting);
        if !batch.writing {
            batch.writing = true;
            crate::task::spawn(self.clone().write_batches(store.clone()));
        }
    }

    /// Writes the tenant's forming batch, and the next, until none is left;
    /// compacts the ledger every [`COMPACT_AT`] batches.
    async fn write_batches(self, store: TenantStore) {
        loop {
            let (notes, waiting, written) = {
                let mut forming = lock(&self.inner.forming);
                let batch = forming.entry(store.tenant().clone()).or_default();
                if batch.notes.is_empty() {
                    batch.writing = false;
                    self.inner.idle.notify_waiters();
                    return;
                }
                let take = batch.notes.len().min(BATCH_NOTES);
                let waiting = match take == batch.notes.len() {
                    true => std::mem::take(&mut batch.waiting),
                    false => Vec::new(),
                };
                batch.written += 1;
                (batch.notes.drain(..take).collect::<Vec<_>>(), waiting, batch.written)
            };
            let stored = self.write(&store, &notes).await;
            if let Err(e) = &stored {
                tracing::warn!(tenant = %store.tenant(), notes = notes.len(), "a batch of the ledger was not stored: {e}");
            }
            for sent in waiting {
                // A submission that stopped waiting needs no answer.
                let _ = sent.send(stored.is_ok());
            }
            if written.is_multiple_of(COMPACT_AT as u64)
                && let Err(e) = self.compact(&store).await
            {
                tracing::warn!(tenant = %store.tenant(), "the ledger was not compacted: {e}");
            }
        }
    }

    /// A name no other object of the ledger has: the time, this host, and
    /// a count (a clone of this host under its id meets `AlreadyExists`).
    fn name(&self) -> String {
        let n = self.inner.next.fetch_add(1, Ordering::Relaxed);
        format!("{:016}-{}-{n:08}", now_ms(), self.inner.host)
    }

    async fn write(&self, store: &TenantStore, notes: &[Note]) -> Result<(), JournalError> {
        let bytes = Bytes::from(encode(&notes));
        loop {
            let key = below(&batches_key(), self.name());
            match store.create(&key, bytes.clone()).await {
                Err(StoreError::AlreadyExists { .. }) => continue,
                written => return Ok(written?),
            }
        }
    }

    /// Folds every batch there is into the open segments, the ended ones
    /// and the created ones, then merges the hours it listed runs in (see
    /// the module doc).
    pub async fn compact(&self, store: &TenantStore) -> Result<(), JournalError> {
        let read_at = tokio::time::Instant::now();
        let (batch_keys, batches) = read_listed::<Vec<Note>>(store, &batches_key()).await?;
        if batch_keys.is_empty() {
            return Ok(());
        }
        let (open_keys, segments) = read_listed::<Vec<NotedRun>>(store, &open_key()).await?;
        let folded = fold(batches.into_iter().flatten(), segments.into_iter().flatten().collect());
        let mut ended: BTreeMap<u64, Vec<(NotedRun, u64)>> = BTreeMap::new();
        for (run, at) in folded.ended {
            ended.entry(at / HOUR_MS).or_default().push((run, at));
        }
        let hours: BTreeSet<u64> = folded.listed.iter().map(ListedRun::hour).collect();
        let name = self.name();
        let mut writes: Vec<(StoreKey, Bytes)> = ended
            .iter()
            .map(|(hour, runs)| (ended_folder(&format!("{hour:08}")), runs))
            .map(|(folder, runs)| (below(&folder, name.clone()), Bytes::from(encode(runs))))
            .collect();
        if !folded.open.is_empty() {
            writes.push((below(&open_key(), name.clone()), Bytes::from(encode(&folded.open))));
        }
        writes.extend(created::level_zero(folded.listed, &name));
        if !created::create_in_time(store, &writes, read_at, "a compaction of the ledger").await? {
            return Ok(());
        }
        let read: Vec<StoreKey> = batch_keys.into_iter().chain(open_keys).collect();
        store.delete_all(&read).await?;
        for hour in hours {
            created::merge(store, hour, &|| self.name()).await?;
        }
        Ok(())
    }

    /// Takes the runs `deleted` off the listing (see [`created::unlist`]).
    pub async fn unlist(
        &self,
        store: &TenantStore,
        deleted: &BTreeSet<NotedRun>,
        sightings: &created::DropSightings,
    ) -> Result<(), JournalError> {
        created::unlist(store, deleted, sightings, &|| self.name()).await
    }

    /// Rewrites the hours holding runs dropped that are due (see
    /// [`created::tidy`]).
    pub async fn tidy(&self, store: &TenantStore, sightings: &created::DropSightings) -> Result<(), JournalError> {
        created::tidy(store, sightings, &|| self.name()).await
    }
}

/// What notes fold into: the runs open, those ended (and when), and
/// those listed.
struct Folded {
    open: BTreeSet<NotedRun>,
    ended: Vec<(NotedRun, u64)>,
    listed: Vec<ListedRun>,
}

/// Applies `notes` to the runs `open`.
fn fold(notes: impl Iterator<Item = Note>, open: BTreeSet<NotedRun>) -> Folded {
    let mut folded = Folded {
        open,
        ended: Vec::new(),
        listed: Vec::new(),
    };
    for note in notes {
        match note {
            Note::Opened(run) => {
                folded.open.insert(run);
            }
            Note::Created(run) => {
                folded.open.insert(run.noted.clone());
                folded.listed.push(run);
            }
            Note::Moved(run) => folded.listed.push(run),
            Note::Ended { run, finished_at_ms } => folded.ended.push((run, finished_at_ms)),
        }
    }
    // An end wins over its run's opening, in whichever batch each is.
    for (run, _) in &folded.ended {
        folded.open.remove(run);
    }
    folded
}

/// The runs the ledger has open (see the module doc for how it reads).
pub async fn open_runs(store: &TenantStore) -> Result<OpenRuns, JournalError> {
    let (batch_keys, batches) = read_listed::<Vec<Note>>(store, &batches_key()).await?;
    let (_, segments) = read_listed::<Vec<NotedRun>>(store, &open_key()).await?;
    let folded = fold(batches.into_iter().flatten(), segments.into_iter().flatten().collect());
    Ok(OpenRuns {
        runs: folded.open,
        batches: batch_keys.len(),
    })
}

/// The runs the batches list, not yet compacted into created segments: a
/// listing reads them before it lists the segments (see the module doc).
pub async fn listed_in_batches(store: &TenantStore) -> Result<Vec<ListedRun>, JournalError> {
    let (_, batches) = read_listed::<Vec<Note>>(store, &batches_key()).await?;
    Ok(fold(batches.into_iter().flatten(), BTreeSet::new()).listed)
}

/// Whether a listing finds `run`: in a batch, or in a segment of its hour.
/// Only the simulation asks it of a run from outside (through the
/// `internals` build).
#[cfg(feature = "internals")]
pub async fn is_listed(store: &TenantStore, run: &NotedRun) -> Result<bool, JournalError> {
    let listed = |found: &[ListedRun]| found.iter().any(|listed| listed.noted == *run);
    if listed(&listed_in_batches(store).await?) {
        return Ok(true);
    }
    Ok(listed(&created::hour(store, run.created_at_ms / HOUR_MS).await?))
}

/// Every run the ended segments hold: the ends compacted, which retention
/// deletes runs from, and drops from them once it has taken the runs it
/// deleted off the listing. Only the simulation asks it (through the
/// `internals` build).
#[cfg(feature = "internals")]
pub async fn noted_ended(store: &TenantStore) -> Result<BTreeSet<NotedRun>, JournalError> {
    let mut noted = BTreeSet::new();
    for hour in store.children(&ended_key()).await? {
        let (_, segments) = read_listed::<Vec<(NotedRun, u64)>>(store, &ended_folder(&hour)).await?;
        noted.extend(segments.into_iter().flatten().map(|(run, _)| run));
    }
    Ok(noted)
}

/// The runs the ended segment at `key` holds, and when each finished.
pub async fn ended_runs(store: &TenantStore, key: &StoreKey) -> Result<Vec<(NotedRun, u64)>, JournalError> {
    Ok(read(store, key).await?.unwrap_or_default())
}

/// Every object under `prefix`, read (see [`reread_while_gone`]).
async fn read_listed<R: for<'de> Deserialize<'de>>(
    store: &TenantStore,
    prefix: &StoreKey,
) -> Result<(Vec<StoreKey>, Vec<R>), JournalError> {
    reread_while_gone(prefix, || async move {
        let keys = store.list(prefix).await?;
        let read: Vec<Option<R>> = try_join_all(keys.iter().map(|key| read(store, key))).await?;
        Ok(read
            .into_iter()
            .collect::<Option<Vec<R>>>()
            .map(|records| (keys, records)))
    })
    .await
}

/// What `attempt` lists under `folder` and reads: listed and read again
/// while something listed is gone before it is read (a compaction, merge
/// or rewrite took it; `attempt` then finds `None`), at most
/// [`READ_ATTEMPTS`] times.
async fn reread_while_gone<T, F>(folder: &StoreKey, attempt: impl Fn() -> F) -> Result<T, JournalError>
where
    F: Future<Output = Result<Option<T>, JournalError>>,
{
    for _ in 0..READ_ATTEMPTS {
        if let Some(found) = attempt().await? {
            return Ok(found);
        }
    }
    Err(JournalError::Unsettled {
        folder: folder.to_string(),
        reads: READ_ATTEMPTS,
    })
}

async fn read<R: for<'de> Deserialize<'de>>(store: &TenantStore, key: &StoreKey) -> Result<Option<R>, JournalError> {
    let Some(bytes) = store.get(key).await? else {
        return Ok(None);
    };
    decoded(key, &bytes).map(Some)
}

/// The record `bytes`, read at `key`, hold; corrupt ones are an error naming the key.
fn decoded<R: for<'de> Deserialize<'de>>(key: &StoreKey, bytes: &[u8]) -> Result<R, JournalError> {
    decode(bytes).map_err(|reason| JournalError::Corrupt {
        key: key.to_string(),
        reason,
    })
}

fn below(folder: &StoreKey, name: String) -> StoreKey {
    StoreKey::from_iter(folder.parts().map(|part| part.as_ref().to_owned()).chain([name]))
}

/// Replaces the ended segment at `key`, in `folder`, with one of `kept`
/// alone (none if empty): written first, under a name of its content, so
/// hosts sweeping it at once write the same one, or each a segment of what
/// it kept.
pub async fn rewrite_ended(
    store: &TenantStore,
    folder: &StoreKey,
    key: &StoreKey,
    kept: &[(NotedRun, u64)],
) -> Result<(), JournalError> {
    if !kept.is_empty() {
        let bytes = encode(&kept);
        let name = super::payload::sha256_hex(&bytes);
        match store.create(&below(folder, name), Bytes::from(bytes)).await {
            Ok(()) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(store.delete(key).await?)
}

impl NotedRun {
    /// `record`'s run, as the ledger notes it.
    pub fn of(record: &super::RunRecord) -> Self {
        Self {
            run: record.run_id.clone(),
            created_at_ms: record.created_at_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Storage;

    fn noted(n: usize, created_at_ms: u64) -> NotedRun {
        NotedRun {
            run: RunId::new(&format!("r{n:04}")).expect("a valid id"),
            created_at_ms,
        }
    }

    /// `run` as a submission lists it.
    fn listed(run: NotedRun) -> ListedRun {
        ListedRun {
            noted: run,
            created_at_us: None,
            workflow: "w".into(),
            builds: vec!["c".into()],
            tags: Vec::new(),
        }
    }

    fn tenant_store() -> TenantStore {
        Storage::in_memory().tenant(&TenantId::default_tenant())
    }

    /// A store's run stored before the ledger listed runs, whose record
    /// a listing reads (and passes over: it is not a record).
    async fn store_a_run_from_before(store: &TenantStore, n: usize) -> Result<(), JournalError> {
        let run = noted(n, 0).run;
        store
            .overwrite(&crate::store::keys_of(&run).run(), Bytes::from_static(b"not a record"))
            .await?;
        Ok(())
    }

    #[tokio::test]
    async fn a_host_asks_a_store_whether_it_is_listed_until_it_is() -> Result<(), JournalError> {
        let (store, ledger) = (tenant_store(), Ledger::new(HostId::fresh()));
        store_a_run_from_before(&store, 1).await?;
        ledger.ensure_listed(&store).await?;
        let listed = StoreKey::from_iter(["ledger", ".listed"]);
        assert!(store.get(&listed).await?.is_some(), "the first call lists the store");
        // Were it asked again, it would find the mark gone and list anew.
        store.delete(&listed).await?;
        ledger.ensure_listed(&store).await?;
        assert!(store.get(&listed).await?.is_none(), "a listed store is not asked again");
        Ledger::new(HostId::fresh()).ensure_listed(&store).await?;
        assert!(store.get(&listed).await?.is_some(), "another host asks it");
        // What this host learnt of one tenant's runs says nothing of another's.
        let other = Storage::in_memory().tenant(&TenantId::new("other").expect("a valid tenant"));
        store_a_run_from_before(&other, 2).await?;
        ledger.ensure_listed(&other).await?;
        assert!(other.get(&listed).await?.is_some(), "another tenant is asked");
        Ok(())
    }

    #[tokio::test]
    async fn runs_opened_at_once_share_a_batch_and_are_all_open() -> Result<(), JournalError> {
        let (store, ledger) = (tenant_store(), Ledger::new(HostId::fresh()));
        let opened = (0..50).map(|n| {
            let (store, ledger) = (store.clone(), ledger.clone());
            tokio::spawn(async move { ledger.opened(&store, listed(noted(n, 1))).await })
        });
        for done in futures::future::join_all(opened).await {
            done.expect("the task")?;
        }
        let batches = store.list(&batches_key()).await?.len();
        assert!(batches <= 2, "50 runs in {batches} batches");
        let open = open_runs(&store).await?;
        assert_eq!(open.runs.len(), 50);
        Ok(())
    }

    #[tokio::test]
    async fn a_compaction_folds_the_batches_into_what_is_open_and_what_ended_by_hour() -> Result<(), JournalError> {
        let (store, ledger) = (tenant_store(), Ledger::new(HostId::fresh()));
        for n in 0..5 {
            ledger.opened(&store, listed(noted(n, 1))).await?;
        }
        ledger.ended(&store, noted(1, 1), 10);
        ledger.ended(&store, noted(3, 1), HOUR_MS + 10);
        // The end of another run under a reused id closes nothing.
        ledger.ended(&store, noted(4, 0), 10);
        ledger.settle().await;
        ledger.compact(&store).await?;

        assert!(store.list(&batches_key()).await?.is_empty(), "every batch folded");
        assert_eq!(store.list(&open_key()).await?.len(), 1);
        let open: Vec<NotedRun> = open_runs(&store).await?.runs.into_iter().collect();
        assert_eq!(open, [noted(0, 1), noted(2, 1), noted(4, 1)]);
        let hours = store.children(&ended_key()).await?;
        assert_eq!(hours, ["00000000", "00000001"]);
        let folder = ended_folder(&hours[0]);
        let first = &store.list(&folder).await?[0];
        assert_eq!(ended_runs(&store, first).await?, [(noted(1, 1), 10), (noted(4, 0), 10)]);

        // Rewritten without what a sweep deleted, then gone.
        rewrite_ended(&store, &folder, first, &[(noted(4, 0), 10)]).await?;
        let rewritten = store.list(&folder).await?;
        assert_eq!(rewritten.len(), 1);
        assert_eq!(ended_runs(&store, &rewritten[0]).await?, [(noted(4, 0), 10)]);
        rewrite_ended(&store, &folder, &rewritten[0], &[]).await?;
        assert!(store.list(&folder).await?.is_empty());
        Ok(())
    }

    /// A batch holds at most [`BATCH_NOTES`] notes: one more waits for the next.
    #[tokio::test]
    async fn a_batch_holds_at_most_its_limit_of_notes() -> Result<(), JournalError> {
        let (store, ledger) = (tenant_store(), Ledger::new(HostId::fresh()));
        // Noted before the writer first runs, so all are forming at once.
        for n in 0..=BATCH_NOTES {
            ledger.ended(&store, noted(n, 1), 5);
        }
        ledger.settle().await;
        let (_, batches) = read_listed::<Vec<Note>>(&store, &batches_key()).await?;
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [BATCH_NOTES, 1]);
        Ok(())
    }

    /// Every run a listing finds: in the batches, then in the created
    /// segments (see the module doc).
    async fn listed_runs(store: &TenantStore) -> Result<BTreeSet<NotedRun>, JournalError> {
        let mut listed: BTreeSet<NotedRun> = listed_in_batches(store)
            .await?
            .into_iter()
            .map(|run| run.noted)
            .collect();
        for hour in created::hours(store).await? {
            listed.extend(created::hour(store, hour).await?.into_iter().map(|run| run.noted));
        }
        Ok(listed)
    }

    /// Hosts compacting at once while runs open and end: no run open is
    /// ever missing from a read, no run created from a listing (60
    /// compactions of one hour, so its segments merge meanwhile).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn compactions_at_once_on_many_hosts_never_lose_an_open_run() -> Result<(), JournalError> {
        let store = tenant_store();
        let hosts: Vec<Ledger> = (0..3).map(|_| Ledger::new(HostId::fresh())).collect();
        let (mut open, mut created) = (BTreeSet::new(), BTreeSet::new());
        for round in 0..20 {
            let work = hosts.iter().enumerate().map(|(h, ledger)| {
                let (store, ledger) = (store.clone(), ledger.clone());
                async move {
                    let run = noted(round * 10 + h, 1);
                    ledger.opened(&store, listed(run.clone())).await?;
                    ledger.compact(&store).await?;
                    Ok::<_, JournalError>(run)
                }
            });
            for run in try_join_all(work).await? {
                created.insert(run.clone());
                open.insert(run);
            }
            if round % 4 == 3 {
                let ended = open.pop_first().expect("an open run");
                hosts[round % 3].ended(&store, ended, 5);
            }
            let read = open_runs(&store).await?.runs;
            assert!(
                read.is_superset(&open),
                "round {round}: {:?} missing",
                open.difference(&read)
            );
            let listed = listed_runs(&store).await?;
            assert!(
                listed.is_superset(&created),
                "round {round}: {:?} unlisted",
                created.difference(&listed)
            );
        }
        let segments = store
            .list(&StoreKey::from_iter(["ledger", "created", "00000000"]))
            .await?;
        let merged = segments
            .iter()
            .filter(|key| !key.filename().is_some_and(|name| name.starts_with("00-")));
        assert!(merged.count() > 0, "merged: {segments:?}");
        Ok(())
    }
}
