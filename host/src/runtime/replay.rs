//! Replay as a check: re-execute a run against its journal, running nothing,
//! and say whether the workflow (or a new build of it) makes the same calls
//! and reaches the same outcome.

use std::sync::Arc;

use serde::Serialize;
use tracing::Instrument;

use super::interruption::Interruption;
use super::workflow::Mode;
use super::{Ended, RunError, Runs, Stored, failed, recorded_calls};
use crate::component::Loaded;
use crate::journal::{Cursor, Outcome};
use crate::sandbox::kind_name;
use crate::store::{RunId, TenantId};
use crate::telemetry::spans;

/// What a replay found.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum ReplayReport {
    /// Every recorded call was made again, and the outcome is identical.
    Identical {
        /// How many calls the workflow made, each as recorded.
        calls: u64,
    },
    /// The run has not finished; every call it has recorded so far was made again.
    ConsistentSoFar {
        /// How many recorded calls were made again.
        calls: u64,
    },
    /// The first divergence.
    Diverged {
        /// The seq of the first call that differs; `None` when no one call does
        /// (the outcome differs, or the build lacks the workflow).
        seq: Option<u64>,
        /// How the replay diverged, for a person to read.
        message: String,
    },
}

impl Runs {
    /// Replays a run against its journal; with `component`, against that
    /// build instead of the one the run started with.
    pub async fn replay(
        &self,
        tenant: &TenantId,
        run: &RunId,
        component: Option<Arc<Loaded>>,
    ) -> Result<ReplayReport, RunError> {
        // The outcome is read before the journal, so a run that ends
        // meanwhile is at worst consistent so far.
        let records = self.records(tenant, run);
        let (record, stored, recorded) = self.record(&records).await?;
        let context = self.context(records, &record, stored.is_fresh()).await?;
        let context = match component {
            Some(own) if !own.has_workflow(&record.workflow) => {
                return Ok(ReplayReport::Diverged {
                    seq: None,
                    message: format!("the new build has no workflow `{}`", record.workflow),
                });
            }
            Some(own) => Arc::new(super::RunContext {
                host: context.host.clone(),
                records: context.records.clone(),
                own,
                links: context.links.clone(),
                control: context.control.clone(),
                step_limits: context.step_limits,
                outbound: context.outbound.clone(),
                secrets: context.secrets.clone(),
                log: context.log.clone(),
                started_at_ms: context.started_at_ms,
                depth: context.depth,
                priority: context.priority,
                retried: context.retried.clone(),
            }),
            None => context,
        };
        let entries = match stored {
            Stored::Read(snapshots) => context.records.entries_from(snapshots).await?,
            Stored::RunRecordOnly(_) => context.records.entries().await?,
        };
        let recorded_calls = recorded_calls(&entries);
        let span = tracing::info_span!("replay", run = %run, workflow = %record.workflow);
        spans::join_run_trace(&span, tenant, run, self.host.cluster.me());
        let (ended, calls) = self
            .execute(context, &record, Cursor::new(entries), Mode::Verify)
            .instrument(span)
            .await?;
        self.host.metrics.replayed(tenant);
        let replayed = match ended {
            Ended::Returned(Ok(output)) => Outcome::Completed { output: output.into() },
            Ended::Returned(Err(message)) => failed("workflow-error", message),
            Ended::Stopped(kind, message) => failed(kind_name(kind), message),
            Ended::Interrupted(Interruption::NonDeterminism(nd)) => {
                self.host.metrics.non_determinism(tenant);
                return Ok(ReplayReport::Diverged {
                    seq: Some(nd.seq),
                    message: nd.to_string(),
                });
            }
            Ended::Interrupted(Interruption::JournalEnd { seq })
                if matches!(recorded, None | Some(Outcome::Cancelled { .. })) =>
            {
                return Ok(ReplayReport::ConsistentSoFar { calls: seq });
            }
            Ended::Interrupted(Interruption::ContinueAsNew(_)) => {
                match super::continuation::generation_id(&super::continuation::next_link(&record)) {
                    Ok(next) => Outcome::Continued { next },
                    Err(e) => failed("invalid-continuation", e.to_string()),
                }
            }
            Ended::Interrupted(Interruption::JournalEnd { seq }) => {
                return Ok(ReplayReport::Diverged {
                    seq: Some(seq),
                    message: format!("the workflow makes a call at seq {seq} that the finished run never made"),
                });
            }
            Ended::Interrupted(other) => {
                return Ok(ReplayReport::Diverged {
                    seq: None,
                    message: other.to_string(),
                });
            }
        };
        Ok(match recorded {
            _ if calls < recorded_calls => ReplayReport::Diverged {
                seq: Some(calls),
                message: format!("the workflow finished after {calls} calls, but the journal records {recorded_calls}"),
            },
            // A cancelled run ends cancelled whatever its workflow returned.
            Some(Outcome::Cancelled { .. }) => ReplayReport::Identical { calls },
            Some(outcome) if outcome.replayed_as(&replayed) => ReplayReport::Identical { calls },
            Some(outcome) => ReplayReport::Diverged {
                seq: None,
                message: format!("the outcome differs: recorded {outcome}; replay {replayed}"),
            },
            None => ReplayReport::Diverged {
                seq: None,
                message: format!("replay finished ({replayed}) but the run has not"),
            },
        })
    }
}
