//! The ledger's listing of a tenant's runs by the hour they were created:
//! what a compaction folds of the runs noted created (and moved to another
//! build), in segments per hour merged in tiers so an hour is a few reads
//! however many compactions wrote to it; and the runs retention deleted,
//! in segments of their own, taken out of the hour once they are a
//! quarter of it.
//!
//! ```text
//! ledger/created/{hour:08}/{level:02}-{runs:08}-{name}         runs created in that hour: id, creation time, workflow, builds, tags
//! ledger/created/{hour:08}/gone-{level:02}-{runs:08}-{name}    runs of that hour retention deleted
//! ledger/created/{hour:08}/dropped-{ms:016}-{runs:08}-{name}   runs gone that a rewrite at that ms took out of the hour
//! ledger/tidy/{hour:08}                                        an hour holding runs dropped, to rewrite once they are old
//! ```
//!
//! A compaction writes a segment of level 0 for each hour it noted runs
//! created in. Once an hour has [`MERGE_AT`] segments of one kind and
//! level, they are merged into one of the next level: written first,
//! under a name of its writer's ([`Names`]), then the merged ones deleted.
//! Two hosts merging the same segments at once write the same runs twice,
//! which readers merge. So an hour of `n`
//! compactions is at most `MERGE_AT` segments a level, `log(n)` levels,
//! and each run is written once a level. Retention writes the runs it
//! deleted as a segment of runs gone ([`unlist`]); once those name a
//! quarter as many runs as the hour lists (counted from the names, with
//! no read), the hour is rewritten without them. So each run deleted
//! costs a few runs' bytes rewritten, whatever the hour's size.
//!
//! A merge or a compaction on another host may have read a deleted run
//! listed (in a segment, or a batch of the ledger) before the rewrite, and
//! write it back after. So the runs gone outlive the rewrite, as runs
//! dropped, subtracted still for [`DROPPED_KEPT_FOR`]; the hour is marked
//! for [`tidy`], which retention calls, and which rewrites it again once
//! they are that old, taking out any run written back meanwhile, and
//! deleting them. How old a segment of runs dropped is, a host judges by
//! its own boot clock, from when it first saw the segment
//! ([`DropSightings`]), never by the time in the segment's name: that is
//! the writer's wall clock, and a writer hours behind made its segments
//! look due at once to a host whose clock was right, which deleted them
//! while a merge that had read the runs listed was still to write them
//! back (simulation seed 3, issue 55). A merge, rewrite or compaction whose reads are older
//! than [`STALE_AFTER`], half that, writes nothing ([`too_late`]), and one
//! whose writes landed later than that (its host paused inside them)
//! deletes what it created and nothing it read ([`create_in_time`]): what
//! it created is its alone, named by its writer, so no other writer
//! relies on it.
//!
//! Invariants: a run listed is, at every moment, in some segment of its
//! hour (a merge or a rewrite writes before it deletes, and deletes only
//! what it read); a reader that finds a listed segment gone lists the hour
//! again. A run may be listed more than once (by two merges at once, or
//! noted again by an upgrade): readers merge what is listed of one run.
//! A run deleted is listed no more: it is subtracted (gone, then dropped)
//! from the moment it is unlisted until the rewrite after it is dropped,
//! and no writer that read it listed writes later than that.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::try_join_all;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::{NotedRun, below, decoded, reread_while_gone};
use crate::clock::Sightings;
use crate::journal::envelope::encode;
use crate::journal::{JournalError, RunRecord, RunRecords};
use crate::store::{RunId, RunTag, StoreError, StoreKey, TenantId, TenantStore, runs_key};

/// Segments of one kind and level an hour holds before they are merged
/// into one.
pub const MERGE_AT: usize = 16;

/// How long the runs a rewrite took out of an hour are still subtracted
/// from it, as dropped: far longer than a merge or a compaction takes
/// between its reads and its writes (see [`STALE_AFTER`]).
pub const DROPPED_KEPT_FOR: Duration = Duration::from_secs(600);

/// A merge, rewrite or compaction whose reads began longer ago than this
/// writes nothing (a host paused meanwhile, say): it could write back runs
/// whose drop is over. Half of [`DROPPED_KEPT_FOR`].
pub const STALE_AFTER: Duration = Duration::from_secs(300);

/// Merges one call makes in an hour, at most: a level per merge.
const MERGES_AT_ONCE: usize = 8;

/// Run records a store listed before the ledger is read at once, at most.
const LISTED_AT_ONCE: usize = 16;
/// Run records whose listing is written together (see [`ensure_listed`]):
/// so each write follows its reads within [`STALE_AFTER`], however many
/// runs a store holds.
const LISTED_IN_ONE_WRITE: usize = 1024;

const HOUR_MS: u64 = 3_600_000;

/// A run as a listing finds it: its note, the microsecond of its creation
/// (which orders a millisecond's runs), its workflow, builds and tags.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedRun {
    pub noted: NotedRun,
    pub created_at_us: Option<u64>,
    pub workflow: String,
    /// The builds it ran on, in no set order: an upgrade notes the run
    /// again under the build it moved to.
    pub builds: Vec<String>,
    pub tags: Vec<RunTag>,
}

impl ListedRun {
    /// `record`'s run, as a listing finds it.
    pub fn of(record: &RunRecord) -> Self {
        Self {
            noted: NotedRun::of(record),
            created_at_us: record.created_at_us,
            workflow: record.workflow.clone(),
            builds: std::iter::once(&record.component)
                .chain(&record.earlier_builds)
                .cloned()
                .collect(),
            tags: record.tags.clone(),
        }
    }

    /// The hour the run was created in.
    pub fn hour(&self) -> u64 {
        self.noted.created_at_ms / HOUR_MS
    }
}

/// What a segment holds: runs listed, runs gone from the listing, or runs
/// gone that a rewrite took out (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Listed,
    Gone,
    Dropped,
}

/// A segment of an hour, as its key names it.
#[derive(Debug, Clone)]
pub(super) struct Segment {
    key: StoreKey,
    kind: Kind,
    level: u8,
    runs: u64,
}

impl Segment {
    /// The segment at `key`; `None` for a key of no segment.
    fn at(key: StoreKey) -> Option<Self> {
        let name = key.filename()?;
        let (kind, name) = match (name.strip_prefix("gone-"), name.strip_prefix("dropped-")) {
            (Some(rest), _) => (Kind::Gone, rest),
            (_, Some(rest)) => (Kind::Dropped, rest),
            _ => (Kind::Listed, name),
        };
        let mut parts = name.splitn(3, '-');
        let first: u64 = parts.next()?.parse().ok()?;
        let runs = parts.next()?.parse().ok()?;
        // A segment of runs dropped is named by the writer's wall clock:
        // a name, not an age (see `DropSightings`).
        let level = match kind {
            Kind::Dropped => 0,
            _ => u8::try_from(first).ok()?,
        };
        Some(Self { key, kind, level, runs })
    }
}

/// When this host first saw each segment of runs dropped, by tenant, on
/// its own boot clock: a segment is due to go once this host has seen it
/// for [`DROPPED_KEPT_FOR`] (see the module doc).
///
/// Invariant: it holds only segments of runs dropped that the latest look
/// at their hour found, so never more than the store holds; a host started
/// again sees each afresh, which only keeps a segment longer.
#[derive(Default)]
pub struct DropSightings(Sightings<(TenantId, u64), StoreKey>);

impl DropSightings {
    /// Notes the segments of runs dropped among `segments`, all that
    /// `hour` of `store` holds as just listed (each keeping its first
    /// sight, those gone forgotten); returns those seen for
    /// [`DROPPED_KEPT_FOR`].
    fn due(&self, store: &TenantStore, hour: u64, segments: &[Segment]) -> BTreeSet<StoreKey> {
        let dropped = segments.iter().filter(|segment| segment.kind == Kind::Dropped);
        let keys = dropped.map(|segment| segment.key.clone());
        let scope = (store.tenant().clone(), hour);
        self.0.look(scope, keys, DROPPED_KEPT_FOR).into_iter().collect()
    }

    /// Notes `key`, a segment of runs dropped this host just wrote to
    /// `hour` of `store`, seen from now.
    fn wrote(&self, store: &TenantStore, hour: u64, key: StoreKey) {
        self.0.note((store.tenant().clone(), hour), key);
    }
}

/// Makes a name for a segment that no other writer's segment has (see
/// `Ledger::name`: the time, the host and a count), so that a writer whose
/// writes landed too late takes back only its own ([`create_in_time`]).
pub type Names<'a> = &'a (dyn Fn() -> String + Send + Sync);

/// Whether writes made of reads begun at `read_at` come too late to be
/// made ([`STALE_AFTER`]); says so in the log.
pub(super) fn too_late(read_at: Instant, what: &str) -> bool {
    let late = read_at.elapsed() > STALE_AFTER;
    if late {
        tracing::warn!("{what} read over {STALE_AFTER:?} ago writes nothing; the next one does its work");
    }
    late
}

/// Creates `writes`, made of reads begun at `read_at` and named for this
/// writer alone ([`Names`]), unless that is [`too_late`]; whether they
/// stand. A write may also land too late: its host paused inside it
/// (simulation seed 897, issue 55: a rewrite's host paused 1.7 hours in
/// the write, and its segment listed runs retention had deleted
/// meanwhile). So the writer looks again once they landed and, if late,
/// deletes what it created and leaves the reads they were to replace to
/// the next writer: until it deleted them, they are still listed, so no
/// run drops out. Only for keys no other writer makes: when merges and
/// rewrites named their segments by content, another host may have
/// written the same one in time and deleted its reads, relying on it
/// (taking it back lost runs from the listing: simulation seed 7232).
pub(super) async fn create_in_time(
    store: &TenantStore,
    writes: &[(StoreKey, Bytes)],
    read_at: Instant,
    what: &str,
) -> Result<bool, JournalError> {
    if too_late(read_at, what) {
        return Ok(false);
    }
    let created = try_join_all(writes.iter().map(|(key, bytes)| async move {
        match store.create(key, bytes.clone()).await {
            Ok(()) => Ok(Some(key.clone())),
            Err(StoreError::AlreadyExists { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }))
    .await?;
    if too_late(read_at, what) {
        store
            .delete_all(&created.into_iter().flatten().collect::<Vec<_>>())
            .await?;
        return Ok(false);
    }
    Ok(true)
}

fn created_key() -> StoreKey {
    StoreKey::from_iter(["ledger", "created"])
}

fn folder(hour: u64) -> StoreKey {
    below(&created_key(), format!("{hour:08}"))
}

fn segment_key(hour: u64, kind: Kind, level: u8, runs: usize, name: &str) -> StoreKey {
    let prefix = match kind {
        Kind::Listed => "",
        Kind::Gone => "gone-",
        Kind::Dropped => "dropped-",
    };
    below(&folder(hour), format!("{prefix}{level:02}-{runs:08}-{name}"))
}

fn dropped_key(hour: u64, dropped_at_ms: u64, runs: usize, name: &str) -> StoreKey {
    below(&folder(hour), format!("dropped-{dropped_at_ms:016}-{runs:08}-{name}"))
}

fn tidy_key() -> StoreKey {
    StoreKey::from_iter(["ledger", "tidy"])
}

fn tidy_marker(hour: u64) -> StoreKey {
    below(&tidy_key(), format!("{hour:08}"))
}

/// What is listed of each run once, the builds of its notes together,
/// in the order of the runs' notes.
pub fn merged(listed: impl IntoIterator<Item = ListedRun>) -> Vec<ListedRun> {
    let mut runs: BTreeMap<NotedRun, ListedRun> = BTreeMap::new();
    for run in listed {
        match runs.get_mut(&run.noted) {
            Some(known) => {
                for build in run.builds {
                    if !known.builds.contains(&build) {
                        known.builds.push(build);
                    }
                }
            }
            None => {
                runs.insert(run.noted.clone(), run);
            }
        }
    }
    runs.into_values().collect()
}

fn by_hour(listed: impl IntoIterator<Item = ListedRun>) -> BTreeMap<u64, Vec<ListedRun>> {
    let mut hours: BTreeMap<u64, Vec<ListedRun>> = BTreeMap::new();
    for run in listed {
        hours.entry(run.hour()).or_default().push(run);
    }
    hours
}

/// The segments of level 0 a compaction named `name` writes of `listed`:
/// one per hour.
pub(super) fn level_zero(listed: Vec<ListedRun>, name: &str) -> Vec<(StoreKey, Bytes)> {
    by_hour(listed)
        .into_iter()
        .map(|(hour, runs)| {
            let runs = merged(runs);
            let key = segment_key(hour, Kind::Listed, 0, runs.len(), name);
            (key, Bytes::from(encode(&runs)))
        })
        .collect()
}

/// `runs` (of `kind`) as one segment of `hour` at `level` named `name`:
/// its key and bytes.
fn segment<R: Serialize>(hour: u64, kind: Kind, level: u8, runs: &[R], name: &str) -> (StoreKey, Bytes) {
    (
        segment_key(hour, kind, level, runs.len(), name),
        Bytes::from(encode(&runs)),
    )
}

/// The segments of `hour`.
async fn segments(store: &TenantStore, hour: u64) -> Result<Vec<Segment>, JournalError> {
    Ok(store
        .list(&folder(hour))
        .await?
        .into_iter()
        .filter_map(Segment::at)
        .collect())
}

/// What segments hold, read: the runs listed (each once), those gone and
/// those dropped.
#[derive(Default)]
struct Contents {
    listed: Vec<ListedRun>,
    gone: BTreeSet<NotedRun>,
    dropped: BTreeSet<NotedRun>,
}

impl Contents {
    /// The runs listed and neither gone nor dropped.
    fn left(&self) -> Vec<ListedRun> {
        let out = |run: &&ListedRun| self.gone.contains(&run.noted) || self.dropped.contains(&run.noted);
        self.listed.iter().filter(|run| !out(run)).cloned().collect()
    }
}

/// Reads `segments`; `None` if one is gone (merged or rewritten meanwhile).
async fn read(store: &TenantStore, segments: &[Segment]) -> Result<Option<Contents>, JournalError> {
    let read = try_join_all(segments.iter().map(|segment| store.get(&segment.key))).await?;
    let Some(read) = read.into_iter().collect::<Option<Vec<Bytes>>>() else {
        return Ok(None);
    };
    let mut contents = Contents::default();
    for (segment, bytes) in segments.iter().zip(read) {
        match segment.kind {
            Kind::Listed => contents.listed.extend(decoded::<Vec<ListedRun>>(&segment.key, &bytes)?),
            Kind::Gone => contents.gone.extend(decoded::<Vec<NotedRun>>(&segment.key, &bytes)?),
            Kind::Dropped => contents.dropped.extend(decoded::<Vec<NotedRun>>(&segment.key, &bytes)?),
        }
    }
    contents.listed = merged(contents.listed);
    Ok(Some(contents))
}

/// Every segment of `hour`, read (see [`reread_while_gone`]).
async fn read_hour(store: &TenantStore, hour: u64) -> Result<(Vec<Segment>, Contents), JournalError> {
    reread_while_gone(&folder(hour), || async move {
        let segments = segments(store, hour).await?;
        Ok(read(store, &segments).await?.map(|contents| (segments, contents)))
    })
    .await
}

/// Merges the segments of `hour` (listed or gone) while a kind and level
/// holds [`MERGE_AT`] or more, naming each merged segment from `names`;
/// the segments it then holds. A segment gone before it is read (another
/// host merged it), or a merge whose write lands too late, ends the
/// merging: another host, or the next merge, goes on with it.
pub(super) async fn merge(store: &TenantStore, hour: u64, names: Names<'_>) -> Result<Vec<Segment>, JournalError> {
    for _ in 0..MERGES_AT_ONCE {
        let listed = segments(store, hour).await?;
        let mut tiers: BTreeMap<(Kind, u8), Vec<Segment>> = BTreeMap::new();
        for segment in listed.iter().filter(|segment| segment.kind != Kind::Dropped) {
            tiers
                .entry((segment.kind, segment.level))
                .or_default()
                .push(segment.clone());
        }
        let Some(((kind, level), tier)) = tiers.into_iter().find(|(_, tier)| tier.len() >= MERGE_AT) else {
            return Ok(listed);
        };
        let read_at = Instant::now();
        let Some(contents) = read(store, &tier).await? else {
            break;
        };
        let (next, name) = (level.saturating_add(1), names());
        let merged = match kind {
            Kind::Listed => segment(hour, kind, next, &contents.listed, &name),
            _ => segment(hour, kind, next, &Vec::from_iter(contents.gone), &name),
        };
        if !create_in_time(store, &[merged], read_at, "a merge of the listing").await? {
            break;
        }
        let keys: Vec<StoreKey> = tier.into_iter().map(|segment| segment.key).collect();
        store.delete_all(&keys).await?;
    }
    segments(store, hour).await
}

/// The hours some run was listed created in, in time order.
pub async fn hours(store: &TenantStore) -> Result<Vec<u64>, JournalError> {
    let names = store.children(&created_key()).await?;
    Ok(names.iter().filter_map(|name| name.parse().ok()).collect())
}

/// What the segments of `hour` list: each run once, none gone or dropped.
pub async fn hour(store: &TenantStore, hour: u64) -> Result<Vec<ListedRun>, JournalError> {
    let (_, contents) = read_hour(store, hour).await?;
    Ok(contents.left())
}

/// Takes the runs `deleted` off the listing: a segment of runs gone in
/// each hour they were created in, and the hour rewritten without them
/// once they are a quarter of it (deleting the segments of runs dropped
/// `sightings` finds due); each segment named from `names`.
pub(super) async fn unlist(
    store: &TenantStore,
    deleted: &BTreeSet<NotedRun>,
    sightings: &DropSightings,
    names: Names<'_>,
) -> Result<(), JournalError> {
    let mut hours: BTreeMap<u64, Vec<NotedRun>> = BTreeMap::new();
    for run in deleted {
        hours.entry(run.created_at_ms / HOUR_MS).or_default().push(run.clone());
    }
    for (hour, gone) in hours {
        // A segment of runs gone that lands late subtracts runs already
        // deleted: it is kept.
        let (key, bytes) = segment(hour, Kind::Gone, 0, &gone, &names());
        match store.create(&key, bytes).await {
            Ok(()) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let segments = merge(store, hour, names).await?;
        let counted = |kind| -> u64 {
            let of_kind = |segment: &&Segment| segment.kind == kind;
            segments.iter().filter(of_kind).map(|segment| segment.runs).sum()
        };
        if counted(Kind::Gone).saturating_mul(4) >= counted(Kind::Listed) {
            rewrite(store, hour, sightings, names).await?;
        }
    }
    Ok(())
}

/// Rewrites `hour` without the runs gone from it: one segment of the runs
/// left (at the highest level read), and the runs gone as dropped, both
/// named from `names` and taken back if they land too late; then the
/// segments read deleted, but those of runs dropped, which go once
/// `sightings` finds them due. An hour left holding runs dropped is
/// marked for [`tidy`].
async fn rewrite(
    store: &TenantStore,
    hour: u64,
    sightings: &DropSightings,
    names: Names<'_>,
) -> Result<(), JournalError> {
    let read_at = Instant::now();
    let (segments, contents) = read_hour(store, hour).await?;
    let due = sightings.due(store, hour, &segments);
    let mut deleted: Vec<StoreKey> = due.iter().cloned().collect();
    let left = contents.left();
    let dropping = !contents.gone.is_empty();
    if dropping || left.len() < contents.listed.len() {
        let mut writes = Vec::new();
        if !left.is_empty() {
            let top = segments.iter().map(|segment| segment.level).max().unwrap_or(0);
            writes.push(segment(hour, Kind::Listed, top, &left, &names()));
        }
        if dropping {
            let gone = Vec::from_iter(contents.gone);
            let key = dropped_key(hour, crate::clock::now_ms(), gone.len(), &names());
            writes.push((key, Bytes::from(encode(&gone))));
        }
        if !create_in_time(store, &writes, read_at, "a rewrite of the listing").await? {
            return Ok(());
        }
        if dropping && let Some((dropped, _)) = writes.last() {
            sightings.wrote(store, hour, dropped.clone());
        }
        let read = segments.iter().filter(|segment| segment.kind != Kind::Dropped);
        deleted.extend(read.map(|segment| segment.key.clone()));
    } else if too_late(read_at, "a rewrite of the listing") {
        return Ok(());
    }
    store.delete_all(&deleted).await?;
    let dropped_left = segments
        .iter()
        .any(|segment| segment.kind == Kind::Dropped && !due.contains(&segment.key));
    if dropping || dropped_left {
        store.overwrite(&tidy_marker(hour), Bytes::new()).await?;
    }
    Ok(())
}

/// Rewrites each hour marked as holding runs dropped once `sightings` finds
/// some due (see [`rewrite`]; its segments named from `names`), and
/// unmarks an hour that holds none.
pub(super) async fn tidy(store: &TenantStore, sightings: &DropSightings, names: Names<'_>) -> Result<(), JournalError> {
    let holds_dropped = |segments: &[Segment]| segments.iter().any(|segment| segment.kind == Kind::Dropped);
    for marker in store.list(&tidy_key()).await? {
        let Some(hour) = marker.filename().and_then(|name| name.parse::<u64>().ok()) else {
            continue;
        };
        let mut held = segments(store, hour).await?;
        if !sightings.due(store, hour, &held).is_empty() {
            rewrite(store, hour, sightings, names).await?;
            held = segments(store, hour).await?;
        }
        if !holds_dropped(&held) {
            store.delete(&marker).await?;
            // A rewrite that dropped runs meanwhile marked it before this delete.
            if holds_dropped(&segments(store, hour).await?) {
                store.overwrite(&marker, Bytes::new()).await?;
            }
        }
    }
    Ok(())
}

fn listed_key() -> StoreKey {
    StoreKey::from_iter(["ledger", ".listed"])
}

/// Lists every run stored before the ledger listed runs, once: the first
/// call on such a store reads every run record, [`LISTED_IN_ONE_WRITE`] at
/// a time, writes what each part read in segments of their hours (named
/// from `names`; taken back if they land over [`STALE_AFTER`] after the
/// part's reads, and then the next call starts again), merges the hours,
/// deletes the markers of the index kept before (`index/`), and marks the
/// store listed (`ledger/.listed`). A store with no run is left unwritten.
/// A folder without a record is no run (see `Runs::run_ids`); a corrupt
/// record is left unlisted. (Its writes once stood however late: a host
/// stalled 1.8 hours between its reads and its writes listed runs
/// retention had deleted meanwhile again; simulation seed 897.)
pub(super) async fn ensure_listed(store: &TenantStore, names: Names<'_>) -> Result<(), JournalError> {
    if store.get(&listed_key()).await?.is_some() {
        return Ok(());
    }
    let folders = store.children(&runs_key()).await?;
    if folders.is_empty() {
        return Ok(());
    }
    let ids: Vec<RunId> = folders.iter().filter_map(|name| RunId::new(name).ok()).collect();
    let mut hours = BTreeSet::new();
    for part in ids.chunks(LISTED_IN_ONE_WRITE) {
        let read_at = Instant::now();
        let listed = records_of(store, part).await?;
        hours.extend(listed.iter().map(ListedRun::hour));
        let writes = level_zero(listed, &names());
        if !create_in_time(
            store,
            &writes,
            read_at,
            "a first listing of the runs stored before the ledger",
        )
        .await?
        {
            return Ok(());
        }
    }
    for hour in hours {
        merge(store, hour, names).await?;
    }
    let old_index = store.list(&StoreKey::from_iter(["index"])).await?;
    store.delete_all(&old_index).await?;
    Ok(store.overwrite(&listed_key(), Bytes::new()).await?)
}

/// The runs `ids` name as a listing finds them, read from their records,
/// [`LISTED_AT_ONCE`] at once.
async fn records_of(store: &TenantStore, ids: &[RunId]) -> Result<Vec<ListedRun>, JournalError> {
    let mut records = futures::stream::iter(ids.iter().cloned())
        .map(|run| RunRecords::new(store.clone(), run))
        .map(|records| async move { records.run().await })
        .buffer_unordered(LISTED_AT_ONCE);
    let mut listed = Vec::new();
    while let Some(record) = records.next().await {
        match record {
            Ok(record) => listed.extend(record.as_ref().map(ListedRun::of)),
            // Nothing to list it by; the other runs go on being listed.
            Err(JournalError::Corrupt { key, reason }) => {
                tracing::warn!(%key, "a run record stored before the ledger is corrupt, and left unlisted: {reason}")
            }
            Err(e) => return Err(e),
        }
    }
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::VirtualTime;
    use crate::store::{FaultConfig, Faults, Storage, TenantId};

    fn listed(n: usize, created_at_ms: u64, build: &str) -> ListedRun {
        ListedRun {
            noted: NotedRun {
                run: RunId::new(&format!("r{n:04}")).expect("a valid id"),
                created_at_ms,
            },
            created_at_us: None,
            workflow: "w".into(),
            builds: vec![build.into()],
            tags: Vec::new(),
        }
    }

    /// Names a test's segments apart, as `Ledger::name` does a host's.
    fn next_name() -> String {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        format!("test-{:08}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    fn tenant_store() -> TenantStore {
        Storage::in_memory().tenant(&TenantId::default_tenant())
    }

    /// The kind and level of each segment of `hour`, in key order.
    async fn tiers(store: &TenantStore, hour: u64) -> Result<Vec<(Kind, u8)>, JournalError> {
        let segments = segments(store, hour).await?;
        Ok(segments.iter().map(|segment| (segment.kind, segment.level)).collect())
    }

    /// Writes what a compaction named `name` writes of `runs`.
    async fn compacted(store: &TenantStore, runs: Vec<ListedRun>, name: &str) -> Result<(), JournalError> {
        let written = level_zero(runs, name);
        try_join_all(written.iter().map(|(key, bytes)| store.create(key, bytes.clone()))).await?;
        Ok(())
    }

    /// Each level of an hour holds fewer than `MERGE_AT` segments once
    /// merged, and the hour lists every run once, with every build it was
    /// noted under.
    #[tokio::test]
    async fn an_hour_merges_in_tiers_and_lists_each_run_once() -> Result<(), JournalError> {
        let store = tenant_store();
        let compactions = MERGE_AT * MERGE_AT + 3;
        for n in 0..compactions {
            compacted(&store, vec![listed(n, 7, "a")], &format!("{n:08}")).await?;
            merge(&store, 0, &next_name).await?;
        }
        let levels: Vec<u8> = tiers(&store, 0).await?.into_iter().map(|(_, level)| level).collect();
        assert_eq!(levels, [0, 0, 0, 2], "256 merged twice, 3 left at level 0");
        // Moved to another build: noted again, listed once with both.
        compacted(&store, vec![listed(5, 7, "b")], "moved").await?;
        let runs = hour(&store, 0).await?;
        assert_eq!(runs.len(), compactions);
        let mut builds = runs[5].builds.clone();
        builds.sort();
        assert_eq!(builds, ["a", "b"]);
        Ok(())
    }

    /// A corrupt segment is an error naming its key, never an hour read
    /// as listing fewer runs.
    #[tokio::test]
    async fn a_corrupt_segment_is_an_error_naming_its_key() -> Result<(), JournalError> {
        let store = tenant_store();
        compacted(&store, vec![listed(1, 7, "a")], "good").await?;
        let corrupt = segment_key(0, Kind::Listed, 0, 1, "bad");
        store.create(&corrupt, Bytes::from_static(b"not a segment")).await?;
        match hour(&store, 0).await {
            Err(JournalError::Corrupt { key, .. }) => assert_eq!(key, corrupt.to_string()),
            other => panic!("read as {other:?}"),
        }
        Ok(())
    }

    /// Runs unlisted are gone from the hour at once; the hour is rewritten
    /// without them once they are a quarter of it, and they are kept as
    /// dropped until this host has seen them so for [`DROPPED_KEPT_FOR`],
    /// when `tidy` deletes them: an hour left with no run then has no
    /// segment, and is unmarked.
    #[tokio::test(start_paused = true)]
    async fn runs_unlisted_leave_the_hour_which_is_rewritten_at_a_quarter_gone() -> Result<(), JournalError> {
        let _virtual = VirtualTime::start(1_000);
        let (store, sightings) = (tenant_store(), DropSightings::default());
        let runs: Vec<ListedRun> = (0..8).map(|n| listed(n, HOUR_MS + n as u64, "a")).collect();
        compacted(&store, runs[..4].to_vec(), "first").await?;
        compacted(&store, runs[4..].to_vec(), "second").await?;
        let left = |store: TenantStore| async move {
            let runs = hour(&store, 1).await?;
            Ok::<_, JournalError>(runs.into_iter().map(|run| run.noted).collect::<Vec<_>>())
        };

        unlist(&store, &BTreeSet::from([runs[1].noted.clone()]), &sightings, &next_name).await?;
        assert_eq!(left(store.clone()).await?.len(), 7);
        let (listed, gone, dropped) = (Kind::Listed, Kind::Gone, Kind::Dropped);
        assert_eq!(tiers(&store, 1).await?, [(listed, 0), (listed, 0), (gone, 0)]);

        unlist(&store, &BTreeSet::from([runs[6].noted.clone()]), &sightings, &next_name).await?;
        let kept: Vec<NotedRun> = [0, 2, 3, 4, 5, 7].iter().map(|&n| runs[n].noted.clone()).collect();
        assert_eq!(left(store.clone()).await?, kept);
        assert_eq!(
            tiers(&store, 1).await?,
            [(listed, 0), (dropped, 0)],
            "rewritten at 2 of 8"
        );

        unlist(&store, &kept.into_iter().collect(), &sightings, &next_name).await?;
        // A run unlisted from an hour that lists nothing is dropped too.
        unlist(&store, &BTreeSet::from([runs[0].noted.clone()]), &sightings, &next_name).await?;
        assert!(left(store.clone()).await?.is_empty());
        let kinds: BTreeSet<Kind> = tiers(&store, 1).await?.into_iter().map(|(kind, _)| kind).collect();
        assert_eq!(
            kinds,
            BTreeSet::from([dropped]),
            "the runs gone outlive the listing a while"
        );

        let newest = segments(&store, 1).await?.pop().expect("a segment").key;
        tokio::time::sleep(DROPPED_KEPT_FOR - Duration::from_millis(1)).await;
        tidy(&store, &sightings, &next_name).await?;
        let keys: Vec<StoreKey> = segments(&store, 1).await?.into_iter().map(|s| s.key).collect();
        assert!(keys.contains(&newest), "kept until it is due");
        tokio::time::sleep(Duration::from_millis(1)).await;
        tidy(&store, &sightings, &next_name).await?;
        assert!(store.list(&folder(1)).await?.is_empty());
        assert!(store.list(&tidy_key()).await?.is_empty(), "the hour is unmarked");
        Ok(())
    }

    /// A run written back into its hour by a compaction (or a merge) that
    /// read it listed before it was deleted stays off the listing while it
    /// is dropped, and the rewrite that ends its drop takes it out for good.
    #[tokio::test(start_paused = true)]
    async fn a_run_written_back_after_its_deletion_stays_unlisted() -> Result<(), JournalError> {
        let _virtual = VirtualTime::start(1_000);
        let (store, sightings) = (tenant_store(), DropSightings::default());
        let runs: Vec<ListedRun> = (0..2).map(|n| listed(n, 7, "a")).collect();
        compacted(&store, runs.clone(), "first").await?;
        unlist(&store, &BTreeSet::from([runs[0].noted.clone()]), &sightings, &next_name).await?;
        compacted(&store, vec![runs[0].clone()], "late").await?;
        let listed_now = || async {
            Ok::<_, JournalError>(
                hour(&store, 0)
                    .await?
                    .into_iter()
                    .map(|run| run.noted)
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(listed_now().await?, [runs[1].noted.clone()]);

        tokio::time::sleep(DROPPED_KEPT_FOR).await;
        tidy(&store, &sightings, &next_name).await?;
        assert_eq!(listed_now().await?, [runs[1].noted.clone()]);
        assert_eq!(
            tiers(&store, 0).await?,
            [(Kind::Listed, 0)],
            "written back, then out for good"
        );
        Ok(())
    }

    /// A segment of runs dropped named by a writer whose wall clock is
    /// hours behind (its name says it was written at 0) is kept until this
    /// host has seen it for [`DROPPED_KEPT_FOR`] of its own clock: a run a
    /// merge writes back meanwhile stays off the listing. Judged by the
    /// name, the segment went at once and the run was listed again
    /// (simulation seed 3).
    #[tokio::test(start_paused = true)]
    async fn runs_dropped_by_a_host_whose_clock_is_behind_are_kept_for_their_time() -> Result<(), JournalError> {
        let _virtual = VirtualTime::start(10 * HOUR_MS);
        let (store, sightings) = (tenant_store(), DropSightings::default());
        let runs: Vec<ListedRun> = (0..2).map(|n| listed(n, 7, "a")).collect();
        compacted(&store, vec![runs[1].clone()], "first").await?;
        let gone = [runs[0].noted.clone()];
        store
            .create(&dropped_key(0, 0, gone.len(), "behind"), Bytes::from(encode(&gone)))
            .await?;
        store.overwrite(&tidy_marker(0), Bytes::new()).await?;
        let listed_now = || async {
            let listed = hour(&store, 0).await?.into_iter().map(|run| run.noted);
            Ok::<_, JournalError>(listed.collect::<Vec<_>>())
        };

        tidy(&store, &sightings, &next_name).await?;
        compacted(&store, vec![runs[0].clone()], "written back").await?;
        assert_eq!(listed_now().await?, [runs[1].noted.clone()], "still dropped");
        tokio::time::sleep(DROPPED_KEPT_FOR - Duration::from_millis(1)).await;
        tidy(&store, &sightings, &next_name).await?;
        assert_eq!(listed_now().await?, [runs[1].noted.clone()], "a moment short");
        tokio::time::sleep(Duration::from_millis(1)).await;
        tidy(&store, &sightings, &next_name).await?;
        assert_eq!(listed_now().await?, [runs[1].noted.clone()], "taken out for good");
        assert_eq!(tiers(&store, 0).await?, [(Kind::Listed, 0)]);
        Ok(())
    }

    /// A merge, rewrite or compaction writes nothing of reads begun over
    /// [`STALE_AFTER`] ago.
    #[tokio::test(start_paused = true)]
    async fn writes_of_reads_older_than_stale_after_are_too_late() {
        let read_at = Instant::now();
        tokio::time::advance(STALE_AFTER).await;
        assert!(!too_late(read_at, "a test"));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(too_late(read_at, "a test"));
    }

    /// A tenant's store whose calls can be slowed, as a paused host's are.
    fn slowable_store() -> (TenantStore, Arc<Faults>) {
        let (storage, faults) = Storage::in_memory().with_faults(FaultConfig::default());
        (storage.tenant(&TenantId::default_tenant()), faults)
    }

    /// Every call `faults` sees takes longer than [`STALE_AFTER`]: a read
    /// begun in one is stale by the time it returns.
    fn stall(faults: &Faults) {
        faults.set_config(FaultConfig {
            latency: STALE_AFTER + Duration::from_secs(1),
            ..FaultConfig::default()
        });
    }

    /// Issue 55, simulation seed 897: a writer paused inside its write
    /// (every call slowed past [`STALE_AFTER`] once the reads are done)
    /// deletes what it created once it finds it landed too late, and
    /// leaves what another writer had created the same; writes in time stand.
    #[tokio::test(start_paused = true)]
    async fn a_write_that_lands_too_late_is_taken_back() -> Result<(), JournalError> {
        let (store, faults) = slowable_store();
        let key = |name: &str| below(&folder(0), name.to_owned());
        let (theirs, mine) = ((key("theirs"), Bytes::from("a")), (key("mine"), Bytes::from("b")));
        store.create(&theirs.0, theirs.1.clone()).await?;
        stall(&faults);
        let stood = create_in_time(&store, &[mine.clone(), theirs.clone()], Instant::now(), "a test").await?;
        faults.set_config(FaultConfig::default());
        assert!(!stood);
        assert_eq!(store.list(&folder(0)).await?, [theirs.0.clone()]);

        let later = (key("later"), Bytes::from("c"));
        assert!(create_in_time(&store, &[later.clone(), theirs.clone()], Instant::now(), "a test").await?);
        assert_eq!(store.list(&folder(0)).await?, [later.0, theirs.0]);
        Ok(())
    }

    /// Issue 55, simulation seed 897: a rewrite whose host pauses inside
    /// its write of the runs left, past [`STALE_AFTER`], while another
    /// host deletes one of those runs and its drop runs out, takes its
    /// writes back once they land: the run deleted is not listed again.
    /// (Written, it was: the late segment listed it, and nothing
    /// subtracted it any more.)
    #[tokio::test(start_paused = true)]
    async fn a_rewrite_landing_too_late_lists_no_run_deleted_meanwhile() -> Result<(), JournalError> {
        use crate::store::seams::{Before, Call, Seams};
        use futures::FutureExt;
        use std::sync::atomic::{AtomicBool, Ordering};
        let _virtual = VirtualTime::start(10 * HOUR_MS);
        let (armed, reached, released) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let before: Before = {
            let (armed, reached, released) = (armed.clone(), reached.clone(), released.clone());
            Arc::new(move |call, key| {
                let listed_segment = key.filename().is_some_and(|name| name.starts_with("00-"));
                let stall = call == Call::Put && listed_segment && armed.swap(false, Ordering::SeqCst);
                let (reached, released) = (reached.clone(), released.clone());
                async move {
                    if stall {
                        reached.notify_one();
                        released.notified().await;
                    }
                    Ok(())
                }
                .boxed()
            })
        };
        let store = Storage::new(Arc::new(Seams::before(before))).tenant(&TenantId::default_tenant());
        let runs: Vec<ListedRun> = (0..3).map(|n| listed(n, 7, "a")).collect();
        compacted(&store, runs.clone(), "first").await?;
        let (key, bytes) = segment(0, Kind::Gone, 0, &[runs[0].noted.clone()], "gone");
        store.create(&key, bytes).await?;

        armed.store(true, Ordering::SeqCst);
        let late = tokio::spawn({
            let store = store.clone();
            async move { rewrite(&store, 0, &DropSightings::default(), &next_name).await }
        });
        reached.notified().await;
        let other = DropSightings::default();
        unlist(&store, &BTreeSet::from([runs[1].noted.clone()]), &other, &next_name).await?;
        tidy(&store, &other, &next_name).await?;
        tokio::time::sleep(DROPPED_KEPT_FOR).await;
        tidy(&store, &other, &next_name).await?;
        released.notify_one();
        late.await.expect("the late rewrite ends")?;

        let listed: Vec<NotedRun> = hour(&store, 0).await?.into_iter().map(|run| run.noted).collect();
        assert_eq!(
            listed,
            [runs[2].noted.clone()],
            "the run deleted meanwhile stays unlisted"
        );
        Ok(())
    }

    /// Simulation seed 897: a first listing of the runs stored before the
    /// ledger whose host pauses in its write past [`STALE_AFTER`], while
    /// the run it read is deleted, takes its write back and does not mark
    /// the store listed: the run deleted meanwhile is not listed again.
    #[tokio::test(start_paused = true)]
    async fn a_first_listing_landing_too_late_lists_no_run_deleted_meanwhile() -> Result<(), JournalError> {
        use crate::store::keys_of;
        use crate::store::seams::{Before, Call, Seams};
        use futures::FutureExt;
        let _virtual = VirtualTime::start(10 * HOUR_MS);
        let (reached, released) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let before: Before = {
            let (reached, released) = (reached.clone(), released.clone());
            Arc::new(move |call, key| {
                let stall = call == Call::Put && key.as_ref().contains("/ledger/created/");
                let (reached, released) = (reached.clone(), released.clone());
                async move {
                    if stall {
                        reached.notify_one();
                        released.notified().await;
                    }
                    Ok(())
                }
                .boxed()
            })
        };
        let store = Storage::new(Arc::new(Seams::before(before))).tenant(&TenantId::default_tenant());
        let run = RunId::new("r0001").expect("a valid id");
        let records = RunRecords::new(store.clone(), run.clone());
        records.create_run(&RunRecord::example("r0001", 7)).await?;

        let late = tokio::spawn({
            let store = store.clone();
            async move { ensure_listed(&store, &next_name).await }
        });
        reached.notified().await;
        tokio::time::sleep(STALE_AFTER + Duration::from_secs(1)).await;
        store.delete(&keys_of(&run).run()).await?;
        released.notify_one();
        late.await.expect("the late listing ends")?;

        assert!(
            hour(&store, 0).await?.is_empty(),
            "the run deleted meanwhile is not listed"
        );
        assert_eq!(
            store.get(&listed_key()).await?,
            None,
            "not marked listed: the next call lists again"
        );
        Ok(())
    }

    /// A merge whose reads of a full tier end past [`STALE_AFTER`] writes
    /// nothing and deletes nothing; the next merge does its work.
    #[tokio::test(start_paused = true)]
    async fn a_merge_of_stale_reads_writes_nothing() -> Result<(), JournalError> {
        let (store, faults) = slowable_store();
        for n in 0..MERGE_AT {
            compacted(&store, vec![listed(n, 7, "a")], &format!("{n:08}")).await?;
        }
        let before = tiers(&store, 0).await?;
        stall(&faults);
        merge(&store, 0, &next_name).await?;
        faults.set_config(FaultConfig::default());
        assert_eq!(tiers(&store, 0).await?, before, "nothing written or deleted");
        merge(&store, 0, &next_name).await?;
        assert_eq!(tiers(&store, 0).await?, [(Kind::Listed, 1)]);
        Ok(())
    }

    /// A rewrite whose read of the hour ends past [`STALE_AFTER`] writes
    /// nothing and deletes nothing, and the run unlisted stays off the
    /// listing all along; the next rewrite does its work.
    #[tokio::test(start_paused = true)]
    async fn a_rewrite_of_stale_reads_writes_nothing() -> Result<(), JournalError> {
        let (store, faults) = slowable_store();
        let runs: Vec<ListedRun> = (0..2).map(|n| listed(n, 7, "a")).collect();
        compacted(&store, runs.clone(), "first").await?;
        stall(&faults);
        unlist(
            &store,
            &BTreeSet::from([runs[0].noted.clone()]),
            &DropSightings::default(),
            &next_name,
        )
        .await?;
        faults.set_config(FaultConfig::default());
        assert_eq!(
            tiers(&store, 0).await?,
            [(Kind::Listed, 0), (Kind::Gone, 0)],
            "the runs gone written, the rewrite not"
        );
        let left: Vec<NotedRun> = hour(&store, 0).await?.into_iter().map(|run| run.noted).collect();
        assert_eq!(left, [runs[1].noted.clone()]);
        rewrite(&store, 0, &DropSightings::default(), &next_name).await?;
        assert_eq!(tiers(&store, 0).await?, [(Kind::Listed, 0), (Kind::Dropped, 0)]);
        Ok(())
    }

    /// A compaction whose reads of the ledger end past [`STALE_AFTER`]
    /// writes nothing and deletes nothing: the runs stay open in their
    /// batches, and the next compaction folds them.
    #[tokio::test(start_paused = true)]
    async fn a_compaction_of_stale_reads_writes_nothing() -> Result<(), JournalError> {
        use crate::cluster::HostId;
        use crate::journal::ledger::Ledger;
        let (store, faults) = slowable_store();
        let ledger = Ledger::new(HostId::fresh());
        let runs: Vec<ListedRun> = (0..2).map(|n| listed(n, 7, "a")).collect();
        for run in &runs {
            ledger.opened(&store, run.clone()).await?;
        }
        let everything = StoreKey::from("ledger");
        let before = store.list(&everything).await?;
        stall(&faults);
        ledger.compact(&store).await?;
        faults.set_config(FaultConfig::default());
        assert_eq!(store.list(&everything).await?, before, "nothing written or deleted");
        ledger.compact(&store).await?;
        assert_eq!(hours(&store).await?, [0], "folded into the hour's listing");
        let listed: Vec<NotedRun> = hour(&store, 0).await?.into_iter().map(|run| run.noted).collect();
        assert_eq!(listed, [runs[0].noted.clone(), runs[1].noted.clone()]);
        Ok(())
    }
}
