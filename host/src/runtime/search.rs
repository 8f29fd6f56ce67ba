//! The index of runs by creation time, which listings and searches page
//! through: one empty marker per run in each tree that can select it, in a
//! folder per hour, so a page reads the hours it needs, never every run.
//!
//! ```text
//! index/all/{hour}/{created-at}-{run}            created-at: {ms:016}.{µs:03}, or
//! index/workflow/{workflow}/{hour}/{created-at}-{run}   {ms:016} for runs stored
//! index/component/{digest}/{hour}/{created-at}-{run}    before records kept µs
//! index/tag/{tag}/{hour}/{created-at}-{run}
//! index/.complete                     every run stored before the index was kept has its markers
//! ```
//!
//! Invariants: a run's markers are written before its run record, so no
//! run lacks them; a marker without a run record (a submission that
//! crashed between the two) is passed over. Retention deletes a run's
//! markers before its record. A search walks the narrowest tree its
//! filters allow (a tag, else the workflow, else the component, else all)
//! and checks its other filters on the runs it reads.

use std::collections::BTreeSet;

use bytes::Bytes;
use futures::future::try_join_all;

use super::{RunCursor, RunError, RunListing, RunQuery, RunStatus, Runs};
use crate::journal::RunRecord;
use crate::store::{RunId, StoreKey, TenantId, TenantStore};

/// Tags one run may carry, at most.
pub const MAX_TAGS: usize = 16;
const HOUR_MS: u64 = 3_600_000;

fn complete_key() -> StoreKey {
    StoreKey::from_iter(["index", ".complete"])
}

/// The tree a search walks: the narrowest its filters name.
fn tree(query: &RunQuery) -> StoreKey {
    match (&query.tag, &query.workflow, &query.component) {
        (Some(tag), _, _) => StoreKey::from_iter(["index", "tag", tag.as_str()]),
        (None, Some(workflow), _) => StoreKey::from_iter(["index", "workflow", workflow.as_str()]),
        (None, None, Some(component)) => StoreKey::from_iter(["index", "component", component.as_str()]),
        (None, None, None) => StoreKey::from_iter(["index", "all"]),
    }
}

/// The key `parts` below `tree`.
fn below(tree: &StoreKey, parts: impl IntoIterator<Item = String>) -> StoreKey {
    StoreKey::from_iter(tree.parts().map(|part| part.as_ref().to_owned()).chain(parts))
}

fn marker(tree: StoreKey, record: &RunRecord) -> StoreKey {
    let hour = format!("{:08}", record.created_at_ms / HOUR_MS);
    below(&tree, [hour, RunCursor::of(record).marker_name()])
}

/// Every marker of `record`'s run.
pub fn markers(record: &RunRecord) -> Vec<StoreKey> {
    let mut trees = vec![
        StoreKey::from_iter(["index", "all"]),
        StoreKey::from_iter(["index", "workflow", record.workflow.as_str()]),
        StoreKey::from_iter(["index", "component", record.component.as_str()]),
    ];
    trees.extend(
        (record.earlier_builds.iter()).map(|build| StoreKey::from_iter(["index", "component", build.as_str()])),
    );
    trees.extend(
        record
            .tags
            .iter()
            .map(|tag| StoreKey::from_iter(["index", "tag", tag.as_str()])),
    );
    trees.into_iter().map(|tree| marker(tree, record)).collect()
}

/// Writes the markers of `record`'s run.
pub async fn index(store: &TenantStore, record: &RunRecord) -> Result<(), RunError> {
    let markers = markers(record);
    try_join_all(markers.iter().map(|key| store.overwrite(key, Bytes::new()))).await?;
    Ok(())
}

impl RunQuery {
    /// Whether `record` passes the filters its tree did not apply.
    fn selects(&self, record: &RunRecord) -> bool {
        self.workflow.as_ref().is_none_or(|w| &record.workflow == w)
            && self.component.as_ref().is_none_or(|c| &record.component == c)
            && self.tag.as_ref().is_none_or(|tag| record.tags.contains(tag))
    }

    /// Whether a run created at `cursor` is after the page's start, in the
    /// listing's order, and within the time range.
    fn admits(&self, cursor: &RunCursor) -> bool {
        let past_start = |after: &RunCursor| match self.newest_first {
            true => cursor < after,
            false => cursor > after,
        };
        self.after.as_ref().is_none_or(past_start)
            && self.created_from_ms.is_none_or(|from| cursor.created_at_ms >= from)
            && self
                .created_before_ms
                .is_none_or(|before| cursor.created_at_ms < before)
    }

    /// The first and last hour folders a page may need, in time order.
    fn hours(&self) -> (u64, u64) {
        let mut first = self.created_from_ms.unwrap_or(0);
        let mut last = self.created_before_ms.unwrap_or(u64::MAX);
        if let Some(after) = &self.after {
            match self.newest_first {
                true => last = last.min(after.created_at_ms),
                false => first = first.max(after.created_at_ms),
            }
        }
        (first / HOUR_MS, last / HOUR_MS)
    }
}

/// Searching the runs (see the module doc) through the index;
/// [`Runtime::search`](super::Runtime::search) gives it.
#[derive(Clone)]
pub struct Search {
    runs: Runs,
}

impl Search {
    pub(super) fn new(runs: Runs) -> Self {
        Self { runs }
    }

    /// A page of the tenant's runs, oldest first (by creation time, then
    /// id; newest first if `query` asks), that `query` selects, and the
    /// cursor of the next page, read through the index. A page can be shorter than the limit when
    /// filtering by state: only a missing next cursor means the end.
    pub async fn page(
        &self,
        tenant: &TenantId,
        query: &RunQuery,
    ) -> Result<(RunListing<RunStatus>, Option<RunCursor>), RunError> {
        self.ensure_indexed(tenant).await?;
        let store = self.runs.host.storage.tenant(tenant);
        let tree = tree(query);
        let (first, last) = query.hours();
        let mut hours: Vec<String> = store
            .children(&tree)
            .await?
            .into_iter()
            .filter(|hour| hour.parse::<u64>().is_ok_and(|number| (first..=last).contains(&number)))
            .collect();
        if query.newest_first {
            hours.reverse();
        }
        let mut listing = RunListing::default();
        let mut examined: Option<RunCursor> = None;
        let mut read = 0;
        for hour in hours {
            let folder = below(&tree, [hour]);
            let mut keys = store.list(&folder).await?;
            if query.newest_first {
                keys.reverse();
            }
            for key in keys {
                let Some(cursor) = key.filename().and_then(|name| name.parse::<RunCursor>().ok()) else {
                    continue;
                };
                if !query.admits(&cursor) {
                    continue;
                }
                if listing.runs.len() == query.limit || read == query.examine_at_most {
                    return Ok((listing, examined));
                }
                read += 1;
                if let Some(status) = self.selected(tenant, &cursor.run_id, query, &mut listing).await? {
                    listing.runs.push(status);
                }
                examined = Some(cursor);
            }
        }
        Ok((listing, None))
    }

    /// The status of `run` if `query` selects it; `None` for a marker with
    /// no run (noted in `listing` if its records are corrupt).
    async fn selected(
        &self,
        tenant: &TenantId,
        run: &RunId,
        query: &RunQuery,
        listing: &mut RunListing<RunStatus>,
    ) -> Result<Option<RunStatus>, RunError> {
        let record = self.runs.records(tenant, run).run().await.map_err(RunError::from);
        let Some(Some(record)) = listing.read(run, record)? else {
            return Ok(None);
        };
        if !query.selects(&record) {
            return Ok(None);
        }
        let Some(status) = listing.read(run, self.runs.generation_status(tenant, run).await)? else {
            return Ok(None);
        };
        Ok(query
            .state
            .as_ref()
            .is_none_or(|state| status.state.name() == state)
            .then_some(status))
    }

    /// Gives every run stored before the index was kept its markers, once:
    /// the first listing of such a store reads every run record.
    async fn ensure_indexed(&self, tenant: &TenantId) -> Result<(), RunError> {
        let store = self.runs.host.storage.tenant(tenant);
        if store.get(&complete_key()).await?.is_some() {
            return Ok(());
        }
        let runs = self.runs.run_ids(tenant).await?;
        let indexed: BTreeSet<String> = store
            .list(&StoreKey::from_iter(["index", "all"]))
            .await?
            .iter()
            .filter_map(|key| Some(key.filename()?.split_once('-')?.1.to_owned()))
            .collect();
        for run in runs.iter().filter(|run| !indexed.contains(run.as_str())) {
            if let Ok(Some(record)) = self.runs.records(tenant, run).run().await {
                index(&store, &record).await?;
            }
        }
        if !runs.is_empty() {
            store.overwrite(&complete_key(), Bytes::new()).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::CodeCache;
    use crate::config::HostConfig;
    use crate::journal::RunRecords;
    use crate::runtime::Runtime;
    use crate::store::Storage;

    #[tokio::test]
    async fn runs_stored_before_the_index_are_indexed_at_the_first_listing_once() -> Result<(), RunError> {
        let storage = Storage::in_memory();
        let tenant = TenantId::default_tenant();
        let store = storage.tenant(&tenant);
        for (run, at) in [("old-1", 10), ("old-2", 4_000_000)] {
            RunRecords::new(store.clone(), RunId::new(run).expect("valid"))
                .create_run(&RunRecord::example(run, at))
                .await?;
        }
        let runtime = Runtime::new(HostConfig::new(), storage, CodeCache::disabled())?;
        let (listing, next) = runtime.search().page(&tenant, &RunQuery::default()).await?;
        let ids: Vec<&str> = listing.runs.iter().map(|status| status.run_id.as_str()).collect();
        assert_eq!((ids, next), (vec!["old-1", "old-2"], None));
        assert!(
            store.get(&complete_key()).await?.is_some(),
            "the index is marked complete"
        );
        assert_eq!(store.list(&StoreKey::from_iter(["index", "all"])).await?.len(), 2);
        Ok(())
    }

    /// Every run `query` lists, page after page of `limit`.
    async fn every_page(runtime: &Runtime, tenant: &TenantId, mut query: RunQuery) -> Result<Vec<String>, RunError> {
        let mut ids = Vec::new();
        loop {
            let (listing, next) = runtime.search().page(tenant, &query).await?;
            assert!(listing.runs.len() <= query.limit);
            ids.extend(listing.runs.iter().map(|status| status.run_id.to_string()));
            match next {
                Some(next) => query.after = Some(next),
                None => return Ok(ids),
            }
        }
    }

    /// A runtime on an empty in-memory store, with that store's default tenant.
    fn runtime() -> Result<(Runtime, TenantId, TenantStore), RunError> {
        let storage = Storage::in_memory();
        let tenant = TenantId::default_tenant();
        let store = storage.tenant(&tenant);
        let runtime = Runtime::new(HostConfig::new(), storage, CodeCache::disabled())?;
        Ok((runtime, tenant, store))
    }

    /// Stores `record`'s run as a submission does: its markers, then its record.
    async fn store_run(store: &TenantStore, record: &RunRecord) -> Result<(), RunError> {
        index(store, record).await?;
        RunRecords::new(store.clone(), record.run_id.clone())
            .create_run(record)
            .await?;
        Ok(())
    }

    #[tokio::test]
    async fn runs_created_within_one_millisecond_list_in_the_order_they_were_created() -> Result<(), RunError> {
        let (runtime, tenant, store) = runtime()?;
        // Created in this order within millisecond 7, their ids the other
        // way round; "zz-old" was stored before records kept microseconds.
        let created = [
            ("zz-old", None),
            ("z", Some(7_005)),
            ("m", Some(7_010)),
            ("a", Some(7_999)),
        ];
        for (run, micros) in created {
            let record = RunRecord {
                created_at_us: micros,
                ..RunRecord::example(run, 7)
            };
            store_run(&store, &record).await?;
        }
        let oldest = RunQuery {
            limit: 1,
            ..RunQuery::default()
        };
        assert_eq!(every_page(&runtime, &tenant, oldest).await?, ["zz-old", "z", "m", "a"]);
        let newest = RunQuery {
            limit: 3,
            newest_first: true,
            ..RunQuery::default()
        };
        assert_eq!(every_page(&runtime, &tenant, newest).await?, ["a", "m", "z", "zz-old"]);
        for cursor in ["7.005-z", "7-zz-old", "18446744073709551615.999-a"] {
            let parsed: RunCursor = cursor.parse().expect("a cursor");
            assert_eq!(parsed.to_string(), cursor);
        }
        Ok(())
    }

    #[tokio::test]
    async fn newest_first_pages_walk_the_hours_backwards_within_the_time_range() -> Result<(), RunError> {
        let (runtime, tenant, store) = runtime()?;
        let times = [
            ("a", 10),
            ("b", 20),
            ("c", HOUR_MS + 5),
            ("d", HOUR_MS + 5),
            ("e", 3 * HOUR_MS),
        ];
        for (run, at) in times {
            store_run(&store, &RunRecord::example(run, at)).await?;
        }
        let newest = |limit| RunQuery {
            newest_first: true,
            limit,
            ..RunQuery::default()
        };
        for limit in [1, 2, 5, 10] {
            assert_eq!(
                every_page(&runtime, &tenant, newest(limit)).await?,
                ["e", "d", "c", "b", "a"]
            );
        }
        let within = RunQuery {
            created_from_ms: Some(20),
            created_before_ms: Some(3 * HOUR_MS),
            ..newest(2)
        };
        assert_eq!(every_page(&runtime, &tenant, within).await?, ["d", "c", "b"]);
        let oldest = RunQuery {
            limit: 2,
            ..RunQuery::default()
        };
        assert_eq!(every_page(&runtime, &tenant, oldest).await?, ["a", "b", "c", "d", "e"]);
        let none_match = RunQuery {
            state: Some("failed".into()),
            examine_at_most: 2,
            ..newest(50)
        };
        let (first, next) = runtime.search().page(&tenant, &none_match).await?;
        assert!(first.runs.is_empty());
        assert_eq!(
            next.map(|n| n.run_id.to_string()).as_deref(),
            Some("d"),
            "two runs read"
        );
        assert!(every_page(&runtime, &tenant, none_match).await?.is_empty());
        Ok(())
    }
}
