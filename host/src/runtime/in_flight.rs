//! Steps that outlive their workflow's instance: a step started with
//! `start-step` keeps running when its run is evicted (a long wait drops
//! the instance), journals its result as usual, and the run's next
//! execution takes it over instead of starting it again.
//!
//! Invariant: on this host, one step call (a run's seq) is executed by at
//! most one task, so an eviction never makes a step run twice; a step is
//! taken over only by the incarnation of the run that started it (a run
//! created again under the id is another run, whose seq 1 is not the old
//! one's: seed 966 took the old run's step, and its entry was never
//! written). A run's
//! steps are aborted only when the run stops executing for good (it
//! finished, or its execution failed), never when it is merely evicted.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::future::{BoxFuture, Shared};
use tokio::task::AbortHandle;

use super::workflow::{StepResult, StepUnfinished};
use crate::journal::Call;
use crate::shared_map::lock;
use crate::store::{RunId, TenantId};

/// A step running on a task of its own: the call it executes, its result
/// to come, and a way to stop it.
#[derive(Clone)]
pub struct RunningStep {
    pub call: Call,
    /// The incarnation of the run it was started for.
    pub incarnation: u64,
    pub result: Shared<BoxFuture<'static, StepResult>>,
    pub task: AbortHandle,
}

/// The steps running on tasks of their own, by run and seq.
#[derive(Default)]
pub struct InFlightSteps {
    runs: Mutex<HashMap<(TenantId, RunId), HashMap<u64, RunningStep>>>,
}

impl InFlightSteps {
    pub fn insert(&self, tenant: &TenantId, run: &RunId, seq: u64, step: RunningStep) {
        lock(&self.runs)
            .entry((tenant.clone(), run.clone()))
            .or_default()
            .insert(seq, step);
    }

    /// The step an earlier execution of the run's `incarnation` started at
    /// `seq`, still running or finished since, if it was the same call; it
    /// stays here until journaled, for an execution after this one. One
    /// started for another call (the workflow changed), or for another
    /// incarnation under the id, is stopped: its result would not be this
    /// call's.
    pub fn take_over(
        &self,
        tenant: &TenantId,
        run: &RunId,
        seq: u64,
        (call, incarnation): (&Call, u64),
    ) -> Option<RunningStep> {
        let mut runs = lock(&self.runs);
        let steps = runs.get_mut(&(tenant.clone(), run.clone()))?;
        match steps.get(&seq) {
            // A call that ended waiting for a long retry starts again.
            Some(step)
                if step.call == *call
                    && step.incarnation == incarnation
                    && !matches!(step.result.peek(), Some(Err(StepUnfinished::RetryAt(_)))) =>
            {
                Some(step.clone())
            }
            Some(_) => {
                steps.remove(&seq).inspect(|stale| stale.task.abort());
                None
            }
            None => None,
        }
    }

    /// Whether the step at `seq` of the run is still running here: by its
    /// task, not its shared result, which holds a value only once someone
    /// polled it (no one does while the run waits, evicted, for the step).
    pub fn is_running(&self, tenant: &TenantId, run: &RunId, seq: u64) -> bool {
        lock(&self.runs)
            .get(&(tenant.clone(), run.clone()))
            .and_then(|steps| steps.get(&seq))
            .is_some_and(|step| !step.task.is_finished())
    }

    /// Forgets the steps at `journaled` seqs: their results are in the
    /// journal the run's next execution reads, so nothing takes them over.
    pub fn forget_journaled(&self, tenant: &TenantId, run: &RunId, journaled: impl Iterator<Item = u64>) {
        let mut runs = lock(&self.runs);
        let key = (tenant.clone(), run.clone());
        if let Some(steps) = runs.get_mut(&key) {
            journaled.for_each(|seq| {
                steps.remove(&seq);
            });
            if steps.is_empty() {
                runs.remove(&key);
            }
        }
    }

    /// Stops every step of the run: it will not execute again on this host
    /// (a step that had not journaled runs again if the run is replayed).
    /// Says whether any was still running: its entry may yet land in the
    /// journal, from a write the abort cannot call back.
    pub fn abort_run(&self, tenant: &TenantId, run: &RunId) -> bool {
        let Some(steps) = lock(&self.runs).remove(&(tenant.clone(), run.clone())) else {
            return false;
        };
        let cut_short = steps.values().any(|step| !step.task.is_finished());
        steps.values().for_each(|step| step.task.abort());
        cut_short
    }

    /// How many runs have steps in flight here.
    #[cfg(test)]
    pub fn runs(&self) -> usize {
        lock(&self.runs).len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;

    use super::*;
    use crate::journal::CallKind;

    fn running(call: &Call) -> (RunningStep, tokio::task::JoinHandle<()>) {
        let task = tokio::spawn(tokio::time::sleep(Duration::from_secs(30)));
        let result = futures::future::pending().boxed().shared();
        let step = RunningStep {
            call: call.clone(),
            incarnation: 0,
            result,
            task: task.abort_handle(),
        };
        (step, task)
    }

    #[tokio::test]
    async fn a_step_is_taken_over_by_the_same_call_of_the_same_run_only_and_aborted_with_it() {
        let steps = InFlightSteps::default();
        let (tenant, run) = (TenantId::default_tenant(), RunId::new("r").expect("a valid id"));
        let call = Call::new(CallKind::Step, "charge", b"{}");
        let (step, _task) = running(&call);
        steps.insert(&tenant, &run, 3, step);
        assert!(steps.take_over(&tenant, &run, 3, (&call, 0)).is_some());
        assert!(
            steps.take_over(&tenant, &run, 3, (&call, 0)).is_some(),
            "kept for a later execution"
        );
        assert!(steps.take_over(&tenant, &run, 2, (&call, 0)).is_none());

        let (step, task) = running(&call);
        steps.insert(&tenant, &run, 4, step);
        let other = Call::new(CallKind::Step, "refund", b"{}");
        assert!(steps.take_over(&tenant, &run, 4, (&other, 0)).is_none());
        assert!(task.await.expect_err("aborted").is_cancelled());

        // The id's next run (its incarnation 1) makes the same call at the
        // same seq: another run's step, stopped, never its result.
        let (step, task) = running(&call);
        steps.insert(&tenant, &run, 1, step);
        assert!(steps.take_over(&tenant, &run, 1, (&call, 1)).is_none());
        assert!(task.await.expect_err("aborted").is_cancelled());

        let (step, task) = running(&call);
        steps.insert(&tenant, &run, 5, step);
        assert!(steps.abort_run(&tenant, &run), "a step was still running");
        assert!(task.await.expect_err("aborted").is_cancelled());
        assert_eq!(steps.runs(), 0);
        assert!(!steps.abort_run(&tenant, &run), "no step is left");
    }

    #[tokio::test]
    async fn journaled_steps_are_forgotten_without_being_stopped() {
        let steps = InFlightSteps::default();
        let (tenant, run) = (TenantId::default_tenant(), RunId::new("r").expect("a valid id"));
        let call = Call::new(CallKind::Step, "charge", b"{}");
        let (step, task) = running(&call);
        steps.insert(&tenant, &run, 0, step);
        steps.forget_journaled(&tenant, &run, [0].into_iter());
        assert_eq!(steps.runs(), 0);
        assert!(!task.is_finished());
        task.abort();
    }
}
