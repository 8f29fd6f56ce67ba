//! Stand-ins for steps: what a test harness puts in place of step
//! attempts, so a workflow can be tested against steps that answer as told.
//!
//! A stand-in is asked about every attempt of every step call (its step,
//! seq, input and attempt number) before the attempt would run, and either
//! answers it or lets the real step run; either way the attempt may take
//! time (virtual time, in a scenario). Everything around the attempt stays
//! the host's: the retry policy and its backoffs, failed attempts' records,
//! the journal entry. So a stubbed step retries, fails and replays exactly
//! as a real one would.

use std::time::Duration;

use crate::sandbox::AttemptFailure;

/// Answers step attempts in a runtime's place (see [`Runtime::with_step_stand_in`](super::Runtime::with_step_stand_in)).
pub trait StepStandIn: Send + Sync {
    /// What becomes of `attempt`.
    fn attempt(&self, attempt: &AttemptCall<'_>) -> StandIn;
}

/// One attempt of a step call, as a stand-in sees it.
#[derive(Debug, Clone, Copy)]
pub struct AttemptCall<'a> {
    /// The run that called the step.
    pub run: &'a str,
    /// The step's name as the workflow called it (`component/step` included).
    pub step: &'a str,
    /// The call's seq in its run's journal.
    pub seq: u64,
    /// The call's input, as JSON.
    pub input: &'a str,
    /// The attempt's number, from 1.
    pub attempt: u32,
    /// The attempt's fencing token: the epoch of the claim its run is
    /// driven under (see `step-support.fencing-token`).
    pub fencing_token: u64,
}

/// What a stand-in makes of an attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct StandIn {
    /// The attempt's result; `None` runs the real step.
    pub answer: Option<Result<String, AttemptFailure>>,
    /// How long the attempt takes: waited before the answer, or after the
    /// real step ran.
    pub takes: Duration,
}

impl StandIn {
    /// The real step runs, taking only its own time.
    pub fn real() -> Self {
        Self {
            answer: None,
            takes: Duration::ZERO,
        }
    }
}

/// Waits while an attempt takes `takes`.
pub(super) async fn taking(takes: Duration) {
    if !takes.is_zero() {
        tokio::time::sleep(takes).await;
    }
}
