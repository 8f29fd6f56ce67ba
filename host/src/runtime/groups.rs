//! Run groups: many runs submitted at once under one id, their states
//! counted, their ends streamed as they come, and cancelled together.
//!
//! Invariants: a group's record (`groups/{group}`, create-only) lists its
//! run ids before any of them is submitted, so a group is never partly
//! unknown; submitting it again with the same runs submits what is missing
//! (each run id is an idempotency key), and with other runs is refused. A
//! group holds at most [`MAX_GROUP_RUNS`] runs.

use std::time::Duration;

use bytes::Bytes;
use futures::stream::{FuturesUnordered, Stream};
use serde::{Deserialize, Serialize};

use super::background::driving_ended;
use super::{RunError, RunStatus, Runs, Submission};
use crate::clock::now_ms;
use crate::journal::{JournalError, decode, encode};
use crate::store::{GroupId, RunId, StoreError, TenantId, group_key};

/// The most runs one group holds.
pub const MAX_GROUP_RUNS: usize = 1000;
/// How often a run of a group driven by another host is looked for.
const ELSEWHERE_POLL: Duration = Duration::from_secs(2);

/// A group as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// The group's id, as given or generated.
    pub group_id: GroupId,
    /// Its runs, in order; one submitted without an id is `{group}-{index:04}`.
    pub run_ids: Vec<RunId>,
    /// When the group was first stored, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
}

/// The runtime's run groups (see [`Runtime::groups`](super::Runtime::groups)): over its runs,
/// which it submits, reads, cancels and waits for.
#[derive(Clone)]
pub struct Groups {
    runs: Runs,
}

impl Groups {
    pub(super) fn new(runs: Runs) -> Self {
        Self { runs }
    }

    /// Submits `runs` as one group: every input checked first (the rest by
    /// the caller, who built them), the group stored, then each run
    /// admitted, submitted and driven. A refusal by the tenant's quotas stops it part-way:
    /// submitting the group again goes on from there.
    pub async fn submit(
        &self,
        tenant: &TenantId,
        group_id: Option<GroupId>,
        mut runs: Vec<Submission>,
    ) -> Result<GroupRecord, RunError> {
        if runs.is_empty() || runs.len() > MAX_GROUP_RUNS {
            return Err(RunError::GroupSize {
                size: runs.len(),
                limit: MAX_GROUP_RUNS,
            });
        }
        for run in &runs {
            self.runs.check_input(tenant, "the input", &run.input)?;
        }
        let group_id = group_id.unwrap_or_else(GroupId::generate);
        for (index, run) in runs.iter_mut().enumerate() {
            if run.run_id.is_none() {
                let id = format!("{group_id}-{index:04}");
                run.run_id = Some(RunId::new(&id).expect("a group id and an index make a valid run id"));
            }
        }
        let record = GroupRecord {
            group_id: group_id.clone(),
            run_ids: runs.iter().filter_map(|run| run.run_id.clone()).collect(),
            created_at_ms: now_ms(),
        };
        let store = self.runs.host.storage.tenant(tenant);
        let record = match store.create(&group_key(&group_id), Bytes::from(encode(&record))).await {
            Ok(()) => record,
            Err(StoreError::AlreadyExists { .. }) => {
                let existing = self.get(tenant, &group_id).await?;
                if existing.run_ids != record.run_ids {
                    return Err(RunError::GroupMismatch { group: group_id });
                }
                existing
            }
            Err(e) => return Err(e.into()),
        };
        for run in runs {
            self.runs.start(tenant, run).await?;
        }
        Ok(record)
    }

    /// The tenant's group `id`.
    pub async fn get(&self, tenant: &TenantId, id: &GroupId) -> Result<GroupRecord, RunError> {
        let key = group_key(id);
        let bytes = self.runs.host.storage.tenant(tenant).get(&key).await?;
        let bytes = bytes.ok_or_else(|| RunError::UnknownGroup { group: id.clone() })?;
        decode(&bytes).map_err(|reason| {
            JournalError::Corrupt {
                key: key.to_string(),
                reason,
            }
            .into()
        })
    }

    /// Where each run of the group stands, in the group's order; a run
    /// whose submission was refused part-way is absent.
    pub async fn statuses(&self, tenant: &TenantId, record: &GroupRecord) -> Result<Vec<RunStatus>, RunError> {
        let mut statuses = Vec::with_capacity(record.run_ids.len());
        for run in &record.run_ids {
            match self.runs.status(tenant, run).await {
                Ok(status) => statuses.push(status),
                Err(RunError::UnknownRun { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(statuses)
    }

    /// Cancels every unfinished run of the group (and their children).
    pub async fn cancel(&self, tenant: &TenantId, record: &GroupRecord, reason: &str) -> Result<(), RunError> {
        for run in &record.run_ids {
            match self.runs.cancel(tenant, run, reason).await {
                Ok(()) | Err(RunError::Finished { .. } | RunError::UnknownRun { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Each run of the group as it finishes (those finished already first).
    pub fn ends(
        &self,
        tenant: &TenantId,
        record: &GroupRecord,
    ) -> impl Stream<Item = Result<RunStatus, RunError>> + use<> {
        record
            .run_ids
            .iter()
            .map(|run| {
                let (groups, tenant, run) = (self.clone(), tenant.clone(), run.clone());
                async move { groups.finished(&tenant, &run).await }
            })
            .collect::<FuturesUnordered<_>>()
    }

    /// The run's status once it has finished: waited for if driven here,
    /// looked for every [`ELSEWHERE_POLL`] otherwise.
    async fn finished(&self, tenant: &TenantId, run: &RunId) -> Result<RunStatus, RunError> {
        loop {
            match self.runs.driven_here(tenant, run) {
                Some(driving) => {
                    if let Some(status) = driving_ended(driving).await {
                        return Ok(self.runs.checked_against_store(tenant, &status).await);
                    }
                }
                None => {
                    let status = self.runs.status(tenant, run).await?;
                    if status.state.is_finished() {
                        return Ok(status);
                    }
                    tokio::time::sleep(ELSEWHERE_POLL).await;
                    continue;
                }
            }
            let status = self.runs.status(tenant, run).await?;
            if status.state.is_finished() {
                return Ok(status);
            }
        }
    }
}
