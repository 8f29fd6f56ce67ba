//! What a cancelled run's workflow sees. A cancellation ends the wait in
//! progress — a sleep returns, a signal wait gets none, a child wait an
//! error — and interrupts the step being awaited, which fails with kind
//! `cancelled`; each such call is journaled as `Cancelled`. Steps called
//! after that run as usual, so the workflow can compensate, and whatever
//! the workflow then returns, the run ends `cancelled`.

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use super::interruption::Interruption;
use super::workflow::{StartedStep, StepDone, StepResult, WorkflowState};
use crate::clock::now_ms;
use crate::contract::bindings::{StepError, StepErrorKind};
use crate::journal::{Call, JournalError, Recorded};
use crate::store::StoreError;

/// The error a workflow sees for the step its cancellation interrupted.
pub fn cancelled_step(reason: String) -> StepError {
    StepError {
        kind: StepErrorKind::Cancelled,
        message: reason,
        attempts: 0,
    }
}

impl WorkflowState {
    /// Journals that the call at `seq` ended because the run was cancelled,
    /// and returns why it was.
    pub(super) async fn record_cancelled(
        &mut self,
        seq: u64,
        call: Call,
        started_at_ms: u64,
    ) -> Result<String, Interruption> {
        let reason = self
            .run
            .records
            .cancel_request()
            .await?
            .map_or_else(String::new, |request| request.reason);
        self.append(seq, call, Recorded::Cancelled { reason: reason.clone() }, started_at_ms)
            .await?;
        self.cancellation_seen = true;
        Ok(reason)
    }

    /// Interrupts the awaited step `handle`: its task is aborted (a step run
    /// on the workflow's task is simply no longer polled) and the
    /// cancellation journaled in its place — unless the step journaled its
    /// own result first, which then stands.
    pub(super) async fn interrupt_step(
        &mut self,
        handle: u32,
        step: Shared<BoxFuture<'static, StepResult>>,
    ) -> Result<Result<String, StepError>, Interruption> {
        if let Some(task) = self.running.remove(&handle) {
            task.abort();
        }
        let Some(StartedStep::Running { call, .. }) = self.steps.get(&handle) else {
            return Err(Interruption::InvalidCall(format!(
                "no step was started with handle {handle}"
            )));
        };
        let call = call.clone();
        match self.record_cancelled(u64::from(handle), call.clone(), now_ms()).await {
            Ok(reason) => {
                let cancelled = StepDone {
                    result: Err(cancelled_step(reason)),
                    finished_at_ms: now_ms(),
                };
                // Replacing the step drops one running on the workflow's
                // task, and the sandbox and step slot it holds.
                let result = futures::future::ready(Ok(cancelled.clone())).boxed().shared();
                self.steps.insert(handle, StartedStep::Running { result, call });
                Ok(cancelled.result)
            }
            Err(Interruption::Journal(e)) if matches!(&*e, JournalError::Store(StoreError::AlreadyExists { .. })) => {
                self.cancellation_seen = true;
                let done = step.await;
                self.received(done)
            }
            Err(other) => Err(other),
        }
    }
}
