//! Searching a tenant's runs by creation time, through the ledger's
//! listing ([`crate::journal::ledger::created`]): the runs created in each
//! hour, with their workflow, builds and tags, so a page reads the hours
//! it needs, never every run.
//!
//! Invariants: a run is listed before its run record is stored (the note
//! that opens it lists it); a listed run with no record, or whose record
//! was created at another time (a submission that crashed before the
//! record, or lost the id to another), is passed over. A page reads the
//! ledger's batches before the created segments, so no run compacted
//! meanwhile is missed. Retention takes a run off the listing once it has
//! deleted it. A store written before the ledger listed runs is listed
//! at its first listing or sweep ([`ledger::Ledger::ensure_listed`]).

use super::{RunCursor, RunError, RunListing, RunQuery, RunStatus, Runs};
use crate::journal::RunRecord;
use crate::journal::ledger::{self, ListedRun, created};
use crate::store::{RunId, TenantId};

/// Tags one run may carry, at most.
pub const MAX_TAGS: usize = 16;
const HOUR_MS: u64 = 3_600_000;

impl RunQuery {
    /// Whether `run`, as listed, may pass the filters (its record, read
    /// next, is checked again: see [`Self::selects`]).
    fn lists(&self, run: &ListedRun) -> bool {
        self.workflow.as_ref().is_none_or(|w| &run.workflow == w)
            && self.component.as_ref().is_none_or(|c| run.builds.contains(c))
            && self.tag.as_ref().is_none_or(|tag| run.tags.contains(tag))
    }

    /// Whether `record` passes the filters.
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

    /// Where the runs `query` lists of `hour` stand, in the listing's
    /// order: those of its segments, `listed`, and those the batches list
    /// in it, of `pending`.
    fn cursors(&self, listed: Vec<ListedRun>, pending: &[ListedRun], hour: u64) -> Vec<RunCursor> {
        let in_batches = pending.iter().filter(|run| run.hour() == hour).cloned();
        let mut cursors: Vec<RunCursor> = created::merged(listed.into_iter().chain(in_batches))
            .iter()
            .filter(|run| self.lists(run))
            .map(RunCursor::listed)
            .filter(|cursor| self.admits(cursor))
            .collect();
        cursors.sort_unstable();
        if self.newest_first {
            cursors.reverse();
        }
        cursors
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

/// Searching the runs (see the module doc) through the ledger's listing;
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
    /// cursor of the next page, read through the ledger's listing. A page
    /// can be shorter than the limit when filtering by state: only a
    /// missing next cursor means the end.
    pub async fn page(
        &self,
        tenant: &TenantId,
        query: &RunQuery,
    ) -> Result<(RunListing<RunStatus>, Option<RunCursor>), RunError> {
        let store = self.runs.host.storage.tenant(tenant);
        self.runs.host.ledger.ensure_listed(&store).await?;
        // Before the segments: see the module doc.
        let pending = ledger::listed_in_batches(&store).await?;
        let (first, last) = query.hours();
        let mut hours: Vec<u64> = created::hours(&store).await?;
        hours.extend(pending.iter().map(ListedRun::hour));
        hours.retain(|hour| (first..=last).contains(hour));
        hours.sort_unstable();
        hours.dedup();
        if query.newest_first {
            hours.reverse();
        }
        let mut listing = RunListing::default();
        let mut examined: Option<RunCursor> = None;
        let mut read = 0;
        for hour in hours {
            for cursor in query.cursors(created::hour(&store, hour).await?, &pending, hour) {
                if listing.runs.len() == query.limit || read == query.examine_at_most {
                    return Ok((listing, examined));
                }
                read += 1;
                if let Some(status) = self.selected(tenant, &cursor, query, &mut listing).await? {
                    listing.runs.push(status);
                }
                examined = Some(cursor);
            }
        }
        Ok((listing, None))
    }

    /// The status of the run at `cursor` if `query` selects it; `None` for
    /// a listed run with no record, or another creation time (noted in
    /// `listing` if its records are corrupt).
    async fn selected(
        &self,
        tenant: &TenantId,
        cursor: &RunCursor,
        query: &RunQuery,
        listing: &mut RunListing<RunStatus>,
    ) -> Result<Option<RunStatus>, RunError> {
        let run: &RunId = &cursor.run_id;
        let record = self.runs.records(tenant, run).run().await.map_err(RunError::from);
        let Some(Some(record)) = listing.read(run, record)? else {
            return Ok(None);
        };
        if record.created_at_ms != cursor.created_at_ms || !query.selects(&record) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::CodeCache;
    use crate::config::HostConfig;
    use crate::journal::RunRecords;
    use crate::runtime::Runtime;
    use crate::store::{Storage, StoreKey, TenantStore};
    use bytes::Bytes;

    /// Runs stored before the ledger listed runs (some with the old
    /// index's markers) are listed at the first listing, from their
    /// records, once, but for a corrupt one; the old markers go.
    #[tokio::test]
    async fn runs_stored_before_the_ledger_listed_them_are_listed_at_the_first_listing_once() -> Result<(), RunError> {
        let storage = Storage::in_memory();
        let tenant = TenantId::default_tenant();
        let store = storage.tenant(&tenant);
        for (run, at) in [("old-1", 10), ("old-2", 4_000_000)] {
            RunRecords::new(store.clone(), RunId::new(run).expect("valid"))
                .create_run(&RunRecord::example(run, at))
                .await?;
        }
        // A corrupt record stored before is left unlisted; the others are listed.
        let corrupt = crate::store::keys_of(&RunId::new("old-bad").expect("valid")).run();
        store.overwrite(&corrupt, Bytes::from_static(b"not a record")).await?;
        let old_marker = StoreKey::from_iter(["index", "all", "00000000", "0000000000000010-old-1"]);
        store.overwrite(&old_marker, Bytes::new()).await?;
        let runtime = Runtime::new(HostConfig::new(), storage, CodeCache::disabled())?;
        let (listing, next) = runtime.search().page(&tenant, &RunQuery::default()).await?;
        let ids: Vec<&str> = listing.runs.iter().map(|status| status.run_id.as_str()).collect();
        assert_eq!((ids, next), (vec!["old-1", "old-2"], None));
        assert!(
            store.list(&StoreKey::from_iter(["index"])).await?.is_empty(),
            "the old index is gone"
        );

        // Listed once: a record stored unnoted now is not found.
        RunRecords::new(store.clone(), RunId::new("unnoted").expect("valid"))
            .create_record(&RunRecord::example("unnoted", 20))
            .await?;
        assert_eq!(runtime.runs().list(&tenant).await?.runs.len(), 2);
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

    /// Stores `record`'s run as a submission does: its note, then its record.
    async fn store_run(runtime: &Runtime, store: &TenantStore, record: &RunRecord) -> Result<(), RunError> {
        let listed = ListedRun::of(record);
        runtime.runs().host.ledger.opened(store, listed).await?;
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
            store_run(&runtime, &store, &record).await?;
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
            store_run(&runtime, &store, &RunRecord::example(run, at)).await?;
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

    /// A run an upgrade moved is found by its new build, as the upgrade
    /// lists it (the records moved, the run noted again), and no longer
    /// by its first; a note whose creation time is not its record's is
    /// passed over.
    #[tokio::test]
    async fn a_run_moved_to_another_build_is_found_by_it() -> Result<(), RunError> {
        let (runtime, tenant, store) = runtime()?;
        let record = RunRecord::example("moved", 10);
        store_run(&runtime, &store, &record).await?;
        let lost = RunRecord::example("moved", 11);
        runtime.runs().host.ledger.opened(&store, ListedRun::of(&lost)).await?;
        let records = RunRecords::new(store.clone(), record.run_id.clone());
        records.move_to(&record, "d", 20).await?;
        let moved = records.run().await?.expect("the run");
        runtime.runs().host.ledger.moved(&store, ListedRun::of(&moved)).await?;
        let on = |build: &str| RunQuery {
            component: Some(build.into()),
            ..RunQuery::default()
        };
        assert_eq!(every_page(&runtime, &tenant, on("d")).await?, ["moved"]);
        assert!(every_page(&runtime, &tenant, on("c")).await?.is_empty());
        assert_eq!(every_page(&runtime, &tenant, RunQuery::default()).await?, ["moved"]);
        Ok(())
    }
}
