//! The ledger's listing of a tenant's runs by the hour they were created:
//! what a compaction folds of the runs noted created (and moved to another
//! build), in segments per hour, merged in tiers so an hour is a few reads
//! however many compactions wrote to it.
//!
//! ```text
//! ledger/created/{hour:08}/{level:02}-{name}   runs created in that hour: id, creation time, workflow, builds, tags
//! ```
//!
//! A compaction writes a segment of level 0 for each hour it noted runs
//! created in. Once an hour has [`MERGE_AT`] segments of one level, they
//! are merged into one of the next level: written first, under a name of
//! its content (so hosts merging the same segments at once write one
//! object), then the merged ones deleted. So an hour of `n` compactions is
//! at most `MERGE_AT` segments per level, `log(n)` levels, and each run is
//! written once per level.
//!
//! Invariants: a run listed is, at every moment, in some segment of its
//! hour (a merge or a rewrite writes before it deletes, and deletes only
//! what it read); a reader that finds a listed segment gone lists the hour
//! again. A run may be listed more than once (by two merges at once, or
//! noted again by an upgrade): readers merge what is listed of one run.
//! Retention rewrites an hour without the runs it deleted
//! ([`rewrite_without`]); a merge that read a segment the rewrite deleted
//! may write a deleted run back, and a listing passes over a run with no
//! record.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use futures::StreamExt;
use futures::future::try_join_all;
use serde::{Deserialize, Serialize};

use super::{NotedRun, below, read, read_listed};
use crate::journal::envelope::encode;
use crate::journal::payload::sha256_hex;
use crate::journal::{JournalError, RunRecord, RunRecords};
use crate::store::{RunId, RunTag, StoreError, StoreKey, TenantStore, runs_key};

/// Segments of one level an hour holds before they are merged into one.
pub const MERGE_AT: usize = 16;

/// Merges one compaction makes in an hour, at most: a level per merge.
const MERGES_AT_ONCE: usize = 8;

/// Run records a store listed before the ledger is read at once, at most.
const LISTED_AT_ONCE: usize = 16;

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

fn created_key() -> StoreKey {
    StoreKey::from_iter(["ledger", "created"])
}

fn folder(hour: u64) -> StoreKey {
    below(&created_key(), format!("{hour:08}"))
}

/// The level of the segment at `key`.
fn level(key: &StoreKey) -> Option<u8> {
    key.filename()?.get(..2)?.parse().ok()
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

/// The segments of level 0 a compaction named `name` writes of `listed`:
/// one per hour.
pub(super) fn level_zero(listed: Vec<ListedRun>, name: &str) -> Vec<(StoreKey, Bytes)> {
    let mut hours: BTreeMap<u64, Vec<ListedRun>> = BTreeMap::new();
    for run in listed {
        hours.entry(run.hour()).or_default().push(run);
    }
    hours
        .into_iter()
        .map(|(hour, runs)| {
            let key = below(&folder(hour), format!("00-{name}"));
            (key, Bytes::from(encode(&merged(runs))))
        })
        .collect()
}

/// Writes `runs` as one segment of `hour` at `level`, named by its
/// content, and gives its key.
async fn write(store: &TenantStore, hour: u64, level: u8, runs: &[ListedRun]) -> Result<StoreKey, JournalError> {
    let bytes = encode(&runs);
    let key = below(&folder(hour), format!("{level:02}-{}", sha256_hex(&bytes)));
    match store.create(&key, Bytes::from(bytes)).await {
        Ok(()) | Err(StoreError::AlreadyExists { .. }) => Ok(key),
        Err(e) => Err(e.into()),
    }
}

/// Merges the segments of `hour` while a level holds [`MERGE_AT`] or more.
/// A segment gone before it is read (another host merged it) ends the
/// merging: that host goes on with it.
pub(super) async fn merge(store: &TenantStore, hour: u64) -> Result<(), JournalError> {
    for _ in 0..MERGES_AT_ONCE {
        let mut levels: BTreeMap<u8, Vec<StoreKey>> = BTreeMap::new();
        for key in store.list(&folder(hour)).await? {
            levels.entry(level(&key).unwrap_or(0)).or_default().push(key);
        }
        let Some((level, keys)) = levels.into_iter().find(|(_, keys)| keys.len() >= MERGE_AT) else {
            return Ok(());
        };
        let read: Vec<Option<Vec<ListedRun>>> = try_join_all(keys.iter().map(|key| read(store, key))).await?;
        let Some(segments) = read.into_iter().collect::<Option<Vec<_>>>() else {
            return Ok(());
        };
        let runs = merged(segments.into_iter().flatten());
        write(store, hour, level.saturating_add(1), &runs).await?;
        store.delete_all(&keys).await?;
    }
    Ok(())
}

/// The hours some run was listed created in, in time order.
pub async fn hours(store: &TenantStore) -> Result<Vec<u64>, JournalError> {
    let names = store.children(&created_key()).await?;
    Ok(names.iter().filter_map(|name| name.parse().ok()).collect())
}

/// What the segments of `hour` list: each run once.
pub async fn hour(store: &TenantStore, hour: u64) -> Result<Vec<ListedRun>, JournalError> {
    let (_, segments) = read_listed::<Vec<ListedRun>>(store, &folder(hour)).await?;
    Ok(merged(segments.into_iter().flatten()))
}

/// Takes the runs `deleted` off the listing: each hour they were created
/// in rewritten without them.
pub async fn unlist(store: &TenantStore, deleted: &BTreeSet<NotedRun>) -> Result<(), JournalError> {
    let hours: BTreeSet<u64> = deleted.iter().map(|run| run.created_at_ms / HOUR_MS).collect();
    for hour in hours {
        rewrite_without(store, hour, deleted).await?;
    }
    Ok(())
}

/// Rewrites `hour` as one segment without the runs `deleted` names: the
/// new segment written first (at the highest level read), then the ones
/// read deleted. An hour that lists none of them is left as it is.
async fn rewrite_without(store: &TenantStore, hour: u64, deleted: &BTreeSet<NotedRun>) -> Result<(), JournalError> {
    let (keys, segments) = read_listed::<Vec<ListedRun>>(store, &folder(hour)).await?;
    let listed = merged(segments.into_iter().flatten());
    if !listed.iter().any(|run| deleted.contains(&run.noted)) {
        return Ok(());
    }
    let kept: Vec<ListedRun> = listed.into_iter().filter(|run| !deleted.contains(&run.noted)).collect();
    let mut read = keys;
    if !kept.is_empty() {
        let top = read.iter().filter_map(level).max().unwrap_or(0);
        let written = write(store, hour, top, &kept).await?;
        read.retain(|key| *key != written);
    }
    Ok(store.delete_all(&read).await?)
}

fn listed_key() -> StoreKey {
    StoreKey::from_iter(["ledger", ".listed"])
}

/// Lists every run stored before the ledger listed runs, once: the first
/// call on such a store reads every run record, writes what it read in
/// segments of their hours (named by their content, so two hosts at once
/// write the same), deletes the markers of the index kept before
/// (`index/`), and marks the store listed (`ledger/.listed`). A store
/// with no run is left unwritten.
pub async fn ensure_listed(store: &TenantStore) -> Result<(), JournalError> {
    if store.get(&listed_key()).await?.is_some() {
        return Ok(());
    }
    let names = store.children(&runs_key()).await?;
    if names.is_empty() {
        return Ok(());
    }
    let ids: Vec<RunId> = names.iter().filter_map(|name| RunId::new(name).ok()).collect();
    let mut records = futures::stream::iter(ids)
        .map(|run| RunRecords::new(store.clone(), run))
        .map(|records| async move { records.run().await })
        .buffer_unordered(LISTED_AT_ONCE);
    let mut hours: BTreeMap<u64, Vec<ListedRun>> = BTreeMap::new();
    while let Some(record) = records.next().await {
        // A folder without a record is no run (see `Runs::run_ids`).
        if let Some(run) = record?.as_ref().map(ListedRun::of) {
            hours.entry(run.hour()).or_default().push(run);
        }
    }
    for (hour, runs) in &hours {
        write(store, *hour, 0, &merged(runs.iter().cloned())).await?;
        merge(store, *hour).await?;
    }
    let old_index = store.list(&StoreKey::from_iter(["index"])).await?;
    store.delete_all(&old_index).await?;
    Ok(store.overwrite(&listed_key(), Bytes::new()).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Storage, TenantId};

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

    fn tenant_store() -> TenantStore {
        Storage::in_memory().tenant(&TenantId::default_tenant())
    }

    async fn levels(store: &TenantStore, hour: u64) -> Result<Vec<u8>, JournalError> {
        let keys = store.list(&folder(hour)).await?;
        Ok(keys.iter().filter_map(level).collect())
    }

    /// Each level of an hour holds fewer than `MERGE_AT` segments once
    /// merged, and the hour lists every run once, with every build it was
    /// noted under.
    #[tokio::test]
    async fn an_hour_merges_in_tiers_and_lists_each_run_once() -> Result<(), JournalError> {
        let store = tenant_store();
        let compactions = MERGE_AT * MERGE_AT + 3;
        for n in 0..compactions {
            let written = level_zero(vec![listed(n, 7, "a")], &format!("{n:08}"));
            try_join_all(written.iter().map(|(key, bytes)| store.create(key, bytes.clone()))).await?;
            merge(&store, 0).await?;
        }
        let segments = levels(&store, 0).await?;
        assert_eq!(segments, [0, 0, 0, 2], "256 merged twice, 3 left at level 0");
        // Moved to another build: noted again, listed once with both.
        let moved = level_zero(vec![listed(5, 7, "b")], "moved");
        store.create(&moved[0].0, moved[0].1.clone()).await?;
        let runs = hour(&store, 0).await?;
        assert_eq!(runs.len(), compactions);
        let mut builds = runs[5].builds.clone();
        builds.sort();
        assert_eq!(builds, ["a", "b"]);
        Ok(())
    }

    #[tokio::test]
    async fn a_rewrite_drops_the_runs_deleted_and_leaves_an_hour_without_them_alone() -> Result<(), JournalError> {
        let store = tenant_store();
        for n in 0..3 {
            let written = level_zero(vec![listed(n, HOUR_MS + n as u64, "a")], &format!("{n:08}"));
            store.create(&written[0].0, written[0].1.clone()).await?;
        }
        let untouched = store.list(&folder(1)).await?;
        let elsewhere = BTreeSet::from([listed(9, 7, "a").noted]);
        rewrite_without(&store, 1, &elsewhere).await?;
        assert_eq!(store.list(&folder(1)).await?, untouched);

        let deleted = BTreeSet::from([listed(1, HOUR_MS + 1, "a").noted]);
        rewrite_without(&store, 1, &deleted).await?;
        let left: Vec<NotedRun> = hour(&store, 1).await?.into_iter().map(|run| run.noted).collect();
        assert_eq!(left, [listed(0, HOUR_MS, "a").noted, listed(2, HOUR_MS + 2, "a").noted]);
        assert_eq!(store.list(&folder(1)).await?.len(), 1, "one segment");

        let all: BTreeSet<NotedRun> = left.into_iter().collect();
        rewrite_without(&store, 1, &all).await?;
        assert!(store.list(&folder(1)).await?.is_empty());
        Ok(())
    }
}
