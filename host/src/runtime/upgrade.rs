//! Upgrades: moving the unfinished runs of one build to another. Each run is
//! replayed against the new build first (running nothing), and moves only if
//! the new build makes every call its journal records; the others stay, and
//! the report names each one's first divergence.
//!
//! Invariants: a run's build record (`runs/{run}/build`) names the build it
//! runs on after a move and those before it; the run record, as written at
//! submission, is never changed. A moved run's next execution loads the new
//! build and replays its whole journal on it, so an activation running
//! while it moved (its entries written after the check) that the new build
//! does not replay fails the run as non-determinism, never silently.

use std::sync::Arc;

use serde::Serialize;
use tracing::Instrument;

use super::{ReplayReport, RunError, Runs};
use crate::clock::now_ms;
use crate::component::Loaded;
use crate::journal::ledger::ListedRun;
use crate::journal::{RunRecord, RunRecords};
use crate::store::{RunId, TenantId};

/// The most runs one call checks, so a request stays well within its time
/// limit however many runs a build has; the report says where to go on.
pub const UPGRADE_PAGE: usize = 100;

/// What an upgrade found, and did.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct UpgradeReport {
    /// The build the runs ran on, and the one they move to.
    pub from: String,
    /// The build the runs move to.
    pub to: String,
    /// Whether the runs that replay identically were moved (not on a dry run).
    pub moved: bool,
    /// The runs the new build replays identically so far.
    #[schema(value_type = Vec<String>)]
    pub identical: Vec<RunId>,
    /// The runs it does not, with the first divergence of each: they stay.
    pub diverged: Vec<Divergence>,
    /// More runs are left to check: call again with `after` set to this.
    #[schema(value_type = Option<String>)]
    pub next_after: Option<RunId>,
}

/// Where a run's journal and the new build part ways.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Divergence {
    /// The run that diverges.
    #[schema(value_type = String)]
    pub run_id: RunId,
    /// The seq of the first call that differs, if it is one call.
    pub seq: Option<u64>,
    /// How it diverges, for a person to read.
    pub message: String,
}

/// The runtime's upgrades (see [`Runtime::upgrades`](super::Runtime::upgrades)): over its runs,
/// which it replays against a new build and moves there.
#[derive(Clone)]
pub struct Upgrades {
    runs: Runs,
}

impl Upgrades {
    pub(super) fn new(runs: Runs) -> Self {
        Self { runs }
    }

    /// Replays every unfinished run of build `from` (after `after`, by run
    /// id, at most [`UPGRADE_PAGE`]) against `to`, and unless `dry_run`
    /// moves those it replays identically so far to `to`.
    pub async fn build(
        &self,
        tenant: &TenantId,
        from: &str,
        to: Arc<Loaded>,
        dry_run: bool,
        after: Option<&RunId>,
    ) -> Result<UpgradeReport, RunError> {
        let mut report = UpgradeReport {
            from: from.to_owned(),
            to: to.digest.clone(),
            moved: !dry_run,
            identical: Vec::new(),
            diverged: Vec::new(),
            next_after: None,
        };
        let mut runs = self.runs.unfinished(tenant).await?.runs;
        runs.sort();
        runs.retain(|run| after.is_none_or(|after| run > after));
        let (mut checked, mut last_checked) = (0, None);
        for run in runs {
            if checked == UPGRADE_PAGE {
                // `after` is exclusive: the next call starts past the last run checked.
                report.next_after = last_checked;
                break;
            }
            let records = self.runs.records(tenant, &run);
            let Some(record) = records.run().await? else { continue };
            if record.component != from {
                continue;
            }
            checked += 1;
            last_checked = Some(run.clone());
            match self.check_and_move(&records, &record, &to, dry_run).await? {
                ReplayReport::ConsistentSoFar { .. } => report.identical.push(run),
                // It finished meanwhile: nothing left to move.
                ReplayReport::Identical { .. } => {}
                ReplayReport::Diverged { seq, message } => report.diverged.push(Divergence {
                    run_id: run,
                    seq,
                    message,
                }),
            }
        }
        Ok(report)
    }

    /// Replays the unfinished run `run` against build `to` and, unless
    /// `dry_run`, moves it there if the build replays it identically so
    /// far: what a build's upgrade does for each of its runs. Says what the
    /// check found (a run that has finished is not moved).
    pub async fn run(
        &self,
        tenant: &TenantId,
        run: &RunId,
        to: &Arc<Loaded>,
        dry_run: bool,
    ) -> Result<ReplayReport, RunError> {
        let records = self.runs.records(tenant, run);
        let record = records
            .run()
            .await?
            .ok_or_else(|| RunError::UnknownRun { run: run.clone() })?;
        self.check_and_move(&records, &record, to, dry_run).await
    }

    /// Replays `record`'s run against `to`, and moves it there if it replays
    /// identically so far, unless `dry_run`.
    async fn check_and_move(
        &self,
        records: &RunRecords,
        record: &RunRecord,
        to: &Arc<Loaded>,
        dry_run: bool,
    ) -> Result<ReplayReport, RunError> {
        let run = &record.run_id;
        let span = tracing::info_span!("upgrade", run = %run, to = %to.digest);
        let tenant = records.store().tenant();
        let replayed = self
            .runs
            .replay(tenant, run, Some(to.clone()))
            .instrument(span.clone())
            .await?;
        if matches!(replayed, ReplayReport::ConsistentSoFar { .. }) && !dry_run {
            self.move_run(records, record, to).instrument(span).await?;
        }
        Ok(replayed)
    }

    /// Moves `record`'s run to build `to`, lists it under that build, and
    /// wakes it wherever it waits, so it goes on there on the new build.
    async fn move_run(&self, records: &RunRecords, record: &RunRecord, to: &Loaded) -> Result<(), RunError> {
        records.move_to(record, &to.digest, now_ms()).await?;
        let mut moved = record.clone();
        moved.component = to.digest.clone();
        let listed = ListedRun::of(&moved);
        self.runs.host.ledger.moved(records.store(), listed).await?;
        self.runs.wake(records.store().tenant(), &record.run_id).await;
        tracing::info!("run moved to the new build");
        Ok(())
    }
}
