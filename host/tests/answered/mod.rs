//! A step stand-in that answers every attempt at once with its input, as
//! the bench guest's `noop` does, and counts the attempts: for suites about
//! what a run does around its steps, not what the steps do.

use std::sync::Mutex;
use std::time::Duration;

use stepstone::runtime::{AttemptCall, StandIn, StepStandIn};

#[derive(Default)]
pub struct AnsweredAtOnce(Mutex<u32>);

impl AnsweredAtOnce {
    /// How many attempts were made so far.
    pub fn attempts(&self) -> u32 {
        *self.0.lock().expect("unpoisoned")
    }
}

impl StepStandIn for AnsweredAtOnce {
    fn attempt(&self, call: &AttemptCall<'_>) -> StandIn {
        *self.0.lock().expect("unpoisoned") += 1;
        StandIn {
            answer: Some(Ok(call.input.to_owned())),
            takes: Duration::ZERO,
        }
    }
}
