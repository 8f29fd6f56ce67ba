//! A run's status, projected from its records: never stored on its own, so it
//! cannot disagree with the history.

use serde::Serialize;

use super::{RunError, RunListing, Runs};
use crate::clock::now_ms;
use crate::journal::ledger::ListedRun;
use crate::journal::{Outcome, Payload, RunRecord, RunRecords, is_payload_name};
use crate::store::{RunId, TenantId};

/// Where a run stands.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum RunState {
    /// Submitted to start later, at `start_at_ms` (milliseconds since the
    /// Unix epoch); nothing has run.
    Scheduled {
        /// When it starts, in milliseconds since the Unix epoch.
        start_at_ms: u64,
    },
    /// Waiting for a place of its concurrency key: as many runs of the key
    /// as its limit execute now. Nothing has run.
    Queued {
        /// The concurrency key it waits on.
        concurrency_key: String,
    },
    /// Submitted; no durable call recorded yet.
    Pending,
    /// Between durable calls (or its host stopped there: `resume` picks it up).
    Running,
    /// A step failed and waits for its next attempt.
    Retrying {
        /// The seq of the step call that failed.
        seq: u64,
        /// How many of its attempts have failed so far.
        failed_attempts: usize,
    },
    /// In a durable sleep, until `until_ms`.
    Sleeping {
        /// The seq of the sleep call.
        seq: u64,
        /// When the sleep ends, in milliseconds since the Unix epoch.
        until_ms: u64,
    },
    /// Waiting for signal `signal`, until it comes or the wait times out at
    /// `until_ms`.
    AwaitingSignal {
        /// The seq of the signal wait.
        seq: u64,
        /// The name of the signal awaited.
        signal: String,
        /// When the wait times out, in milliseconds since the Unix epoch.
        until_ms: u64,
    },
    /// Ended with the workflow's output: `output`, or, for an output stored
    /// apart, `output_stored`.
    Completed {
        /// The workflow's output; shown as JSON, not as a string of JSON.
        /// Absent when it is stored apart.
        #[serde(serialize_with = "as_json", skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<Object>)]
        output: Option<String>,
        /// Where an output past the host's offload threshold is:
        /// `GET /v1/runs/{id}/payloads/{sha256}` reads it.
        #[serde(skip_serializing_if = "Option::is_none")]
        output_stored: Option<StoredPayload>,
    },
    /// Ended in failure: the workflow returned an error, a step failed for
    /// good, or the run hit a limit or its deadline.
    Failed {
        /// The kind of failure, in kebab-case (e.g. `workflow-error`,
        /// `deadline-exceeded`).
        kind: String,
        /// What went wrong, for a person to read.
        message: String,
    },
    /// Ended by a cancellation.
    Cancelled {
        /// Why it was cancelled, as the request said.
        reason: String,
    },
    /// This generation continued as new: the run goes on as run
    /// `continued_as`. Seen only in listings, which show each generation
    /// as it is; a run's status shows its chain's latest generation.
    Continued {
        /// The run this generation's successor is.
        #[schema(value_type = String)]
        continued_as: RunId,
    },
}

impl RunState {
    /// The state of a run that ended with `outcome`.
    pub fn ended(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Completed { output } => match output {
                Payload::Inline(text) => Self::Completed {
                    output: Some(text),
                    output_stored: None,
                },
                Payload::Stored { sha256, bytes } => Self::Completed {
                    output: None,
                    output_stored: Some(StoredPayload { sha256, bytes }),
                },
            },
            Outcome::Failed { kind, message } => Self::Failed { kind, message },
            Outcome::Cancelled { reason } => Self::Cancelled { reason },
            Outcome::Continued { next } => Self::Continued { continued_as: next },
        }
    }

    /// Whether the run has ended, one way or another (a generation that
    /// continued as new has, though its chain goes on).
    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            Self::Completed { .. } | Self::Failed { .. } | Self::Cancelled { .. } | Self::Continued { .. }
        )
    }

    /// The state's name, as serialized (`sleeping`, `completed`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            RunState::Scheduled { .. } => "scheduled",
            RunState::Queued { .. } => "queued",
            RunState::Pending => "pending",
            RunState::Running => "running",
            RunState::Retrying { .. } => "retrying",
            RunState::Sleeping { .. } => "sleeping",
            RunState::AwaitingSignal { .. } => "awaiting-signal",
            RunState::Completed { .. } => "completed",
            RunState::Failed { .. } => "failed",
            RunState::Cancelled { .. } => "cancelled",
            RunState::Continued { .. } => "continued",
        }
    }
}

/// Where a run that has journaled nothing stands: before its start time,
/// waiting for a place of its concurrency key, or about to run.
async fn unstarted(runtime: &Runs, records: &RunRecords, record: &RunRecord) -> Result<RunState, RunError> {
    if let Some(start_at_ms) = record.start_at_ms.filter(|at| *at > now_ms()) {
        return Ok(RunState::Scheduled { start_at_ms });
    }
    match &record.concurrency {
        Some(concurrency) if runtime.is_queued(records.store(), record).await? => Ok(RunState::Queued {
            concurrency_key: concurrency.key.to_string(),
        }),
        _ => Ok(RunState::Pending),
    }
}

/// A payload stored apart, as a status names it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct StoredPayload {
    /// The SHA-256 of its bytes, 64 hex digits: its name.
    pub sha256: String,
    /// Its size in bytes.
    pub bytes: u64,
}

/// Writes a JSON payload as the JSON it holds (never called for `None`,
/// which is skipped).
fn as_json<S: serde::Serializer>(payload: &Option<String>, serializer: S) -> Result<S::Ok, S::Error> {
    let payload = payload.as_deref().unwrap_or("null");
    match serde_json::from_str::<serde_json::Value>(payload) {
        Ok(value) => value.serialize(serializer),
        Err(_) => serializer.serialize_str(payload),
    }
}

/// A run's status and where it stands in its journal.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RunStatus {
    /// The run's id; for a chain, the generation this status is of.
    #[schema(value_type = String)]
    pub run_id: RunId,
    /// The workflow the run executes.
    pub workflow: String,
    /// The digest of the component the run was submitted with (an upgrade may
    /// since have moved it to another build).
    pub component: String,
    /// When the run was created, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Its place in line when slots or its concurrency key's places are
    /// scarce: 1 goes first, 9 last.
    pub priority: u8,
    /// How many durable calls the journal records.
    pub journaled_calls: usize,
    /// Where the run stands; flattened, so its `state` tag and fields sit
    /// beside the others.
    #[serde(flatten)]
    pub state: RunState,
    /// The run's place in its chain, when it is a generation a run
    /// continued as new (absent for a run that was started).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain: Option<crate::journal::ChainLink>,
    /// The run this one restarts, and the first seq it executed anew
    /// (absent for a run that was not restarted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restarted_from: Option<crate::journal::RestartPoint>,
    /// Since when, and why, an unfinished run is paused (absent unless it
    /// is): it stays in its state, and starts nothing until resumed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<crate::journal::PauseRecord>,
}

impl RunStatus {
    /// The status of the run `record` starts, its journal holding
    /// `journaled_calls` entries, in `state`.
    pub fn of(record: RunRecord, journaled_calls: usize, state: RunState) -> Self {
        Self {
            run_id: record.run_id,
            workflow: record.workflow,
            component: record.component,
            created_at_ms: record.created_at_ms,
            priority: record.priority,
            journaled_calls,
            state,
            chain: record.chain,
            restarted_from: record.restarted_from,
            paused: None,
        }
    }
}

/// Which runs a listing shows.
#[derive(Debug, Clone)]
pub struct RunQuery {
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// Only runs of this component digest.
    pub component: Option<String>,
    /// Only runs given this tag.
    pub tag: Option<crate::store::RunTag>,
    /// Only runs created at or after this time, and before that one.
    pub created_from_ms: Option<u64>,
    /// Only runs created before this time (milliseconds since the Unix epoch).
    pub created_before_ms: Option<u64>,
    /// Only runs in this state (its [`RunState::name`]).
    pub state: Option<String>,
    /// Only runs after this one in the listing's order (the previous
    /// page's last).
    pub after: Option<RunCursor>,
    /// At most this many runs.
    pub limit: usize,
    /// Newest first (by creation time, then id, both descending) instead
    /// of oldest first.
    pub newest_first: bool,
    /// Read at most this many runs' records for the page, matching or not:
    /// a page whose filters match few runs then ends early, with a cursor
    /// to go on from, so no one page reads every run.
    pub examine_at_most: usize,
}

impl Default for RunQuery {
    fn default() -> Self {
        Self {
            workflow: None,
            component: None,
            tag: None,
            created_from_ms: None,
            created_before_ms: None,
            state: None,
            after: None,
            limit: usize::MAX,
            newest_first: false,
            examine_at_most: usize::MAX,
        }
    }
}

/// A run's place in a listing: ordered by creation time, then id, so a
/// page always continues after the last run shown, whatever changed since.
/// Written `{ms}-{run}`, or `{ms}.{µs}-{run}` for a run whose record keeps
/// its creation's microseconds, which order the runs of one millisecond.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunCursor {
    /// When the run was created, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// The microsecond within `created_at_ms` (0 to 999); `None` for runs
    /// stored before records kept it, which come first in their millisecond.
    pub micros: Option<u16>,
    /// The run's id, which orders runs created at the same time.
    pub run_id: RunId,
}

impl RunCursor {
    /// Where a run, listed by the ledger, stands in a listing.
    pub(crate) fn listed(run: &ListedRun) -> Self {
        Self {
            created_at_ms: run.noted.created_at_ms,
            micros: run
                .created_at_us
                .map(|us| u16::try_from(us % 1_000).expect("below 1,000")),
            run_id: run.noted.run.clone(),
        }
    }
}

impl std::fmt::Display for RunCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.created_at_ms)?;
        if let Some(micros) = self.micros {
            write!(f, ".{micros:03}")?;
        }
        write!(f, "-{}", self.run_id)
    }
}

impl std::str::FromStr for RunCursor {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || format!("`{text}` is not a cursor: pass the `next_cursor` of the previous page");
        let (created, run) = text.split_once('-').ok_or_else(invalid)?;
        let (ms, micros) = match created.split_once('.') {
            Some((ms, micros)) if micros.len() == 3 && micros.bytes().all(|b| b.is_ascii_digit()) => {
                (ms, Some(micros.parse().map_err(|_| invalid())?))
            }
            Some(_) => return Err(invalid()),
            None => (created, None),
        };
        Ok(Self {
            created_at_ms: ms.parse().map_err(|_| invalid())?,
            micros,
            run_id: RunId::new(run).map_err(|_| invalid())?,
        })
    }
}

impl Runs {
    /// Where a run stands: for a run that continued as new, where its
    /// chain's latest generation stands (its `run_id` and `chain` say which
    /// it is), so a chain's status ends with its final output.
    pub async fn status(&self, tenant: &TenantId, run: &RunId) -> Result<RunStatus, RunError> {
        let own = self.generation_status(tenant, run).await;
        // An unknown run may be a chain's root whose records retention
        // deleted while the chain went on.
        let continued = match &own {
            Ok(status) => matches!(status.state, RunState::Continued { .. }),
            Err(RunError::UnknownRun { .. }) => true,
            Err(_) => false,
        };
        if !continued {
            return own;
        }
        let latest = self.latest_generation(tenant, run).await?;
        if latest == *run {
            return own;
        }
        self.generation_status(tenant, &latest).await
    }

    /// Where this one run stands, a generation that continued as new
    /// included (`continued`), without following its chain.
    pub async fn generation_status(&self, tenant: &TenantId, run: &RunId) -> Result<RunStatus, RunError> {
        let records = self.records(tenant, run);
        // The seqs are enough: reading every entry made each status (and
        // each `wait` poll) cost one read per journaled call. They are read
        // beside the run record, but before the outcome, which is written
        // after the last entry: a finished run shows its every call.
        let (record, entries) = futures::try_join!(records.run(), records.entry_seqs())?;
        let record = record.ok_or_else(|| RunError::UnknownRun { run: run.clone() })?;
        let mut paused = None;
        let state = match records.outcome().await? {
            Some(outcome) => RunState::ended(outcome),
            None => {
                let (timers, retries, pause) =
                    futures::try_join!(records.timers(), records.retries(), records.pause_request())?;
                paused = pause;
                let open_wait = timers.into_iter().rev().find(|(seq, _)| !entries.contains(seq));
                let open_retry = retries.into_iter().rev().find(|(seq, _)| !entries.contains(seq));
                match (open_wait, open_retry) {
                    (Some((seq, timer)), _) => match timer.signal {
                        Some(signal) => RunState::AwaitingSignal {
                            seq,
                            signal,
                            until_ms: timer.deadline_ms,
                        },
                        None => RunState::Sleeping {
                            seq,
                            until_ms: timer.deadline_ms,
                        },
                    },
                    (None, Some((seq, failed_attempts))) => RunState::Retrying { seq, failed_attempts },
                    (None, None) if entries.is_empty() => unstarted(self, &records, &record).await?,
                    (None, None) => RunState::Running,
                }
            }
        };
        Ok(RunStatus {
            paused,
            ..RunStatus::of(record, entries.len(), state)
        })
    }

    /// Whether `run` exists and has not finished; for a run that
    /// continued as new, whether its chain goes on.
    pub async fn is_unfinished(&self, tenant: &TenantId, run: &RunId) -> Result<bool, RunError> {
        let records = self.records(tenant, &self.latest_generation(tenant, run).await?);
        Ok(records.outcome().await?.is_none() && records.run().await?.is_some())
    }

    /// The status of every run of the tenant, oldest first. A run whose
    /// records are corrupt is passed over and named in the listing's
    /// `unreadable`.
    pub async fn list(&self, tenant: &TenantId) -> Result<RunListing<RunStatus>, RunError> {
        Ok(super::Search::new(self.clone())
            .page(tenant, &RunQuery::default())
            .await?
            .0)
    }

    /// How `run` was started, on the build it runs on now.
    pub async fn run_record(&self, tenant: &TenantId, run: &RunId) -> Result<RunRecord, RunError> {
        (self.records(tenant, run).run().await?).ok_or_else(|| RunError::UnknownRun { run: run.clone() })
    }

    /// The failed attempts of the step `run` called at `seq`, oldest first.
    pub async fn failed_attempts(
        &self,
        tenant: &TenantId,
        run: &RunId,
        seq: u64,
    ) -> Result<Vec<crate::journal::AttemptRecord>, RunError> {
        Ok(self.records(tenant, run).attempts(seq).await?)
    }

    /// The text of a payload `run`'s records hold: a stored one read from
    /// its object, checked against its name.
    pub async fn payload_text(&self, tenant: &TenantId, run: &RunId, payload: Payload) -> Result<String, RunError> {
        Ok(self.records(tenant, run).payload_text(payload).await?)
    }

    /// The payload `run` stored apart under `sha256` (a name its journal
    /// gives); `None` if it has none so named.
    pub async fn stored_payload(
        &self,
        tenant: &TenantId,
        run: &RunId,
        sha256: &str,
    ) -> Result<Option<String>, RunError> {
        let records = self.records(tenant, run);
        if records.run().await?.is_none() {
            return Err(RunError::UnknownRun { run: run.clone() });
        }
        if !is_payload_name(sha256) {
            return Ok(None);
        }
        Ok(records.stored_payload(sha256).await?)
    }

    /// The run's journal, by seq.
    pub async fn history(&self, tenant: &TenantId, run: &RunId) -> Result<Vec<crate::journal::Entry>, RunError> {
        let records = self.records(tenant, run);
        if records.run().await?.is_none() {
            return Err(RunError::UnknownRun { run: run.clone() });
        }
        records
            .entries()
            .await
            .map_err(|e| RunError::from(e).deleted_meanwhile(run))
    }
}
