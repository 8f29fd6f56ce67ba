//! Pausing or resuming many runs at once: the tenant's unfinished runs a
//! [`RunSelector`] picks (all of them, or those of one component, workflow
//! or tag), a page of at most [`BATCH_PAGE`] runs looked at a call, in run
//! id order.
//!
//! As Temporal's batch operations do, a batch acts on the runs there are
//! when it is asked: a run started after is not paused. Each run is paused
//! or resumed as [`Runs::pause`] and [`Runs::resume`] do, so a batch asked
//! again does nothing twice; a run that ended meanwhile is passed over.

use std::collections::BTreeSet;

use futures::StreamExt;

use super::{AttemptUnderWay, RunError, Runs};
use crate::journal::RunRecord;
use crate::store::{RunId, RunTag, TenantId};

/// Runs a batch looks at, at most, in one call: the rest are the next
/// page's, from the cursor it answers with.
pub const BATCH_PAGE: usize = 1_000;

/// Runs paused or resumed at once within a page.
const AT_ONCE: usize = 16;

/// Which of the tenant's unfinished runs a batch acts on: those that pass
/// every filter given (none given: all of them).
#[derive(Debug, Clone, Default)]
pub struct RunSelector {
    /// Only runs on one of these builds, by digest: every version of a
    /// component name, or one build.
    pub builds: Option<BTreeSet<String>>,
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// Only runs given this tag.
    pub tag: Option<RunTag>,
    /// Only runs after this one, in id order: the previous page's `next`.
    pub after: Option<RunId>,
}

impl RunSelector {
    fn selects(&self, record: &RunRecord) -> bool {
        self.builds
            .as_ref()
            .is_none_or(|builds| builds.contains(&record.component))
            && self
                .workflow
                .as_ref()
                .is_none_or(|workflow| &record.workflow == workflow)
            && self.tag.as_ref().is_none_or(|tag| record.tags.contains(tag))
    }
}

/// What one call of a batch did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct BatchPage {
    /// The runs paused (or resumed) by this call.
    pub runs: Vec<RunId>,
    /// Given as `after`, the next page; none once every run was looked at.
    pub next: Option<RunId>,
}

/// What a batch does to each run it selects.
#[derive(Debug, Clone, Copy)]
pub enum BatchAction<'a> {
    /// Pause it, saying why, and what becomes of a step attempt under way.
    Pause(&'a str, AttemptUnderWay),
    /// Resume it.
    Resume,
}

impl Runs {
    /// Pauses or resumes a page of the runs `selector` picks (see the
    /// module doc).
    pub async fn batch(
        &self,
        tenant: &TenantId,
        selector: &RunSelector,
        action: BatchAction<'_>,
    ) -> Result<BatchPage, RunError> {
        if let BatchAction::Pause(reason, _) = action {
            super::control::check_pause_reason(reason)?;
        }
        let mut candidates = self.unfinished_ids(tenant).await?;
        candidates.sort();
        candidates.retain(|run| selector.after.as_ref().is_none_or(|after| run > after));
        let next = (candidates.len() > BATCH_PAGE).then(|| candidates[BATCH_PAGE - 1].clone());
        candidates.truncate(BATCH_PAGE);
        let acted = futures::stream::iter(candidates)
            .map(|run| async move { self.act_if_selected(tenant, run, selector, action).await })
            .buffered(AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        let mut runs = Vec::new();
        for run in acted {
            runs.extend(run?);
        }
        Ok(BatchPage { runs, next })
    }

    /// Acts on `run` if `selector` picks it; `None` if it does not, or the
    /// run ended (or went) meanwhile.
    async fn act_if_selected(
        &self,
        tenant: &TenantId,
        run: RunId,
        selector: &RunSelector,
        action: BatchAction<'_>,
    ) -> Result<Option<RunId>, RunError> {
        let Some(record) = self.records(tenant, &run).run().await? else {
            return Ok(None);
        };
        if !selector.selects(&record) {
            return Ok(None);
        }
        let acted = match action {
            BatchAction::Pause(reason, under_way) => self.pause(tenant, &run, reason, under_way).await,
            BatchAction::Resume => self.resume(tenant, &run).await,
        };
        match acted {
            Ok(()) => Ok(Some(run)),
            Err(RunError::Finished { .. } | RunError::UnknownRun { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The ids of the tenant's unfinished runs, from the ledger and the
    /// index of those stored before it (or by every run's records, the
    /// first time, on a store from before both); some may have ended.
    async fn unfinished_ids(&self, tenant: &TenantId) -> Result<Vec<RunId>, RunError> {
        let Some(mut listed) = self.indexed_unfinished(tenant).await? else {
            return Ok(self.unfinished(tenant).await?.runs);
        };
        let noted = crate::journal::ledger::open_runs(&self.host.storage.tenant(tenant)).await?;
        listed.extend(noted.runs.into_iter().map(|noted| noted.run));
        listed.sort();
        listed.dedup();
        Ok(listed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::CodeCache;
    use crate::config::HostConfig;
    use crate::journal::{Outcome, RunRecords};
    use crate::runtime::Runtime;
    use crate::store::{Storage, TenantStore, unfinished_index_complete, unfinished_marker};

    fn run(n: usize) -> RunId {
        RunId::new(&format!("r{n:04}")).expect("a valid id")
    }

    async fn paused(store: &TenantStore, n: usize) -> Option<String> {
        let records = RunRecords::new(store.clone(), run(n));
        records
            .pause_request()
            .await
            .expect("readable")
            .map(|pause| pause.reason)
    }

    /// A batch looks at 1,000 runs a call, in id order, acts on those its
    /// filters pick and passes over a finished run; the page's cursor
    /// leads to the rest, and the last page has none. Another tenant's
    /// batch touches none of them.
    #[tokio::test]
    async fn a_batch_acts_a_page_at_a_time_on_the_unfinished_runs_its_filters_pick() -> Result<(), RunError> {
        let storage = Storage::in_memory();
        let runtime = Runtime::new(HostConfig::new(), storage.clone(), CodeCache::disabled())?;
        let tenant = TenantId::default_tenant();
        let store = storage.tenant(&tenant);
        for n in 0..=BATCH_PAGE {
            let record = RunRecord {
                workflow: if n % 2 == 0 { "w" } else { "other" }.into(),
                ..RunRecord::example(run(n).as_str(), 1)
            };
            RunRecords::new(store.clone(), run(n)).create_run(&record).await?;
        }
        // Ended, though still listed unfinished (its host died between the two).
        let finished = RunRecords::new(store.clone(), run(2));
        finished.finish(&Outcome::Completed { output: "1".into() }).await?;
        store
            .overwrite(&unfinished_marker(&run(2)), bytes::Bytes::new())
            .await?;
        store
            .overwrite(&unfinished_index_complete(), bytes::Bytes::new())
            .await?;
        let runs = runtime.runs();
        let other = TenantId::new("globex").expect("a valid id");
        let everything = RunSelector::default();
        let elsewhere = runs
            .batch(
                &other,
                &everything,
                BatchAction::Pause("not theirs", AttemptUnderWay::Finishes),
            )
            .await?;
        assert_eq!(
            elsewhere,
            BatchPage {
                runs: vec![],
                next: None
            }
        );

        let of_w = RunSelector {
            workflow: Some("w".into()),
            ..RunSelector::default()
        };
        let too_long = "x".repeat(crate::runtime::MAX_PAUSE_REASON + 1);
        let refused = runs
            .batch(&tenant, &of_w, BatchAction::Pause(&too_long, AttemptUnderWay::Finishes))
            .await;
        assert!(
            matches!(refused, Err(RunError::TooLarge { size: 1025, .. })),
            "{refused:?}"
        );
        assert_eq!(paused(&store, 0).await, None, "nothing paused");
        let longest = &too_long[1..];
        runs.pause(&tenant, &run(1), longest, AttemptUnderWay::Finishes).await?;
        assert_eq!(
            paused(&store, 1).await.as_deref(),
            Some(longest),
            "a reason at the limit"
        );
        runs.resume(&tenant, &run(1)).await?;

        let first = runs
            .batch(
                &tenant,
                &of_w,
                BatchAction::Pause("a bad deploy", AttemptUnderWay::Finishes),
            )
            .await?;
        let evens: Vec<RunId> = (0..BATCH_PAGE).step_by(2).filter(|&n| n != 2).map(run).collect();
        assert_eq!(
            first.runs, evens,
            "the first page's runs of `w`, the finished one passed over"
        );
        assert_eq!(first.next, Some(run(BATCH_PAGE - 1)));
        let rest = RunSelector {
            after: first.next,
            ..of_w
        };
        let second = runs
            .batch(
                &tenant,
                &rest,
                BatchAction::Pause("a bad deploy", AttemptUnderWay::Finishes),
            )
            .await?;
        assert_eq!(
            second,
            BatchPage {
                runs: vec![run(BATCH_PAGE)],
                next: None
            }
        );
        assert_eq!(paused(&store, 0).await.as_deref(), Some("a bad deploy"));
        assert_eq!(paused(&store, 1).await, None, "another workflow's run");
        assert_eq!(paused(&store, BATCH_PAGE).await.as_deref(), Some("a bad deploy"));

        let resumed = runs.batch(&tenant, &everything, BatchAction::Resume).await?;
        assert_eq!(resumed.runs.len(), BATCH_PAGE - 1, "every unfinished run of the page");
        assert_eq!(paused(&store, 0).await, None);
        Ok(())
    }
}
