//! Child workflows: a workflow starts another workflow of its tenant as a
//! run of its own, linked to it, and awaits how it ends.
//!
//! A child's run id is its parent's id and the seq of the `start-child`
//! call, so replaying the parent finds the same child instead of starting
//! another; submitting it again is idempotent. A child that continues as
//! new is awaited through its chain: its parent gets how the chain's last
//! generation ended.

use std::time::Duration;

use tokio::time::Instant;

use super::interruption::{Interruption, Suspension};
use super::retention::LATE_WRITES_LAND_WITHIN;
use super::workflow::WorkflowState;
use super::{Refusal, RunContext, RunError, Runs, Submission};
use crate::clock::{millis, now_ms};
use crate::component::ComponentError;
use crate::journal::{Call, CallKind, JournalError, Outcome, Payload, Recorded};
use crate::store::{ComponentName, RunId, StoreError};

/// What an execution may do with runs other than its own: start its
/// children. It holds the runtime, which no other part of an execution
/// reaches.
#[derive(Clone)]
pub struct ChildRuns {
    runtime: Runs,
}

impl ChildRuns {
    pub(super) fn new(runtime: Runs) -> Self {
        Self { runtime }
    }
}

impl RunContext {
    /// Starts child run `id` of workflow `workflow`, from `component` (a
    /// link of this run or a component name of the tenant; none for this
    /// run's own), and drives it in the background.
    async fn start_child(
        &self,
        id: RunId,
        workflow: &str,
        input: &str,
        component: Option<&str>,
    ) -> Result<RunId, RunError> {
        let runtime = &self.host.children.runtime;
        let tenant = self.records.store().tenant().clone();
        let component = match component {
            None => self.own.clone(),
            Some(link) if self.links.contains_key(link) => self.links[link].clone(),
            Some(name) => {
                runtime
                    .catalog()
                    .component(&tenant, ComponentName::new(name)?.as_str())
                    .await?
            }
        };
        let mut submission = Submission::new(component, workflow, input);
        submission.run_id = Some(id);
        submission.links = self.links.clone();
        submission.parent = Some((self.records.run_id().clone(), self.depth));
        // A child is in line where its parent is, as in Temporal.
        submission.priority = self.priority.into();
        runtime.start(&tenant, submission).await
    }
}

impl WorkflowState {
    pub(super) async fn start_child_run(
        &mut self,
        workflow: String,
        input: String,
        component: Option<String>,
    ) -> Result<u32, Interruption> {
        let mut identity = input.clone().into_bytes();
        identity.extend(component.iter().flat_map(|c| [b"\0".as_slice(), c.as_bytes()].concat()));
        let call = Call::new(CallKind::StartChild, &workflow, &identity);
        let (seq, recorded) = self.next_call(&call)?;
        let handle = u32::try_from(seq).map_err(|_| Interruption::InvalidCall("journal too long".into()))?;
        let child = match recorded {
            Some(Recorded::Child { run }) => run,
            Some(other) => return Err(Interruption::mismatch(seq, other)),
            None => {
                let tenant = self.run.records.store().tenant();
                self.run
                    .host
                    .admission
                    .admit_child(tenant, self.run.depth, self.children.len())
                    .map_err(|refusal| Interruption::HostLimit(refusal.to_string()))?;
                let started_at_ms = now_ms();
                let id = format!("{}.{seq}", self.run.records.run_id());
                let child = match RunId::new(&id) {
                    // A run being cancelled starts no more children, so
                    // its tree stops growing while it is cancelled.
                    Ok(_) if self.run.control.is_cancelled() => Err(Refusal::Cancelling.into()),
                    Ok(id) => self.run.start_child(id, &workflow, &input, component.as_deref()).await,
                    Err(e) => Err(RunError::from(e)),
                };
                // A refusal is the child's result and is journaled; a store
                // that failed decided nothing, so the run stops unrecorded.
                let child = match child {
                    Ok(child) => Ok(child),
                    Err(RunError::Journal(e)) => return Err(Interruption::Journal(e)),
                    // The child's id is held by a sweep (its creation, by
                    // a host that lost this run, stalled and was given up):
                    // asked again once the hold has passed.
                    Err(RunError::BeingDeleted { .. }) => {
                        let retry_at_ms = now_ms().saturating_add(millis(LATE_WRITES_LAND_WITHIN));
                        return Err(Interruption::Suspend(Suspension::until(retry_at_ms)));
                    }
                    Err(RunError::Component(ComponentError::Store(e @ StoreError::Unavailable { .. }))) => {
                        return Err(JournalError::Store(e).into());
                    }
                    Err(refused) => Err(refused.to_string()),
                };
                self.append(seq, call, Recorded::Child { run: child.clone() }, started_at_ms)
                    .await?;
                child
            }
        };
        self.children.insert(handle, child);
        Ok(handle)
    }

    pub(super) async fn await_child_run(&mut self, handle: u32) -> Result<Result<Payload, String>, Interruption> {
        let child = self
            .children
            .get(&handle)
            .cloned()
            .ok_or_else(|| Interruption::InvalidCall(format!("no child was started with handle {handle}")))?;
        let name = child.as_ref().map_or_else(|_| String::new(), RunId::to_string);
        let call = Call::new(CallKind::AwaitChild, &name, &handle.to_le_bytes());
        let (seq, recorded) = self.next_call(&call)?;
        match (recorded, child) {
            (Some(Recorded::ChildEnded { result }), _) => Ok(result),
            (Some(Recorded::Cancelled { reason }), _) => Ok(Err(format!("cancelled: {reason}"))),
            (Some(other), _) => Err(Interruption::mismatch(seq, other)),
            (None, Err(refused)) => {
                self.append(
                    seq,
                    call,
                    Recorded::ChildEnded {
                        result: Err(refused.clone()),
                    },
                    now_ms(),
                )
                .await?;
                Ok(Err(refused))
            }
            (None, Ok(child)) => self.await_child_live(seq, call, child).await,
        }
    }

    /// Waits for `child` to end, in this instance up to the eviction
    /// threshold, then suspended (its end rings this run's bell); a child
    /// that continued as new, for its next generation.
    async fn await_child_live(
        &mut self,
        seq: u64,
        call: Call,
        mut child: RunId,
    ) -> Result<Result<Payload, String>, Interruption> {
        let started_at_ms = now_ms();
        let store = self.run.records.store().clone();
        let wait = self.run.host.wait;
        let waiting_since = Instant::now();
        loop {
            // A pause evicts the run at once, before it takes its child's
            // end: it waits, suspended, to be resumed.
            if self.run.control.is_paused() {
                return Err(Interruption::Suspend(Suspension {
                    child: Some(child),
                    ..Suspension::until(u64::MAX)
                }));
            }
            let records = crate::journal::RunRecords::new(store.clone(), child.clone());
            match records.outcome().await? {
                Some(Outcome::Continued { next }) => {
                    child = next;
                    continue;
                }
                Some(outcome) => {
                    let result = outcome.as_result();
                    // The entry names an object of this run's: the child's
                    // may be deleted before this run replays.
                    if let Ok(Payload::Stored { sha256, .. }) = &result {
                        self.run.records.copy_payload(&records, sha256).await?;
                    }
                    self.append(
                        seq,
                        call,
                        Recorded::ChildEnded { result: result.clone() },
                        started_at_ms,
                    )
                    .await?;
                    return Ok(result);
                }
                None => {}
            }
            let Some(until_eviction) = wait.until_eviction(waiting_since) else {
                return Err(Interruption::Suspend(Suspension {
                    child: Some(child),
                    ..Suspension::until(u64::MAX)
                }));
            };
            self.run
                .control
                .nap(
                    until_eviction
                        .min(wait.signal_poll_interval)
                        .min(Duration::from_secs(1)),
                )
                .await;
            if self.run.control.is_cancelled() {
                let reason = self.record_cancelled(seq, call, started_at_ms).await?;
                return Ok(Err(format!("cancelled: {reason}")));
            }
        }
    }
}
