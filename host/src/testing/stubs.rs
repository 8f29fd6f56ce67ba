//! The scenario's stand-in for steps: it answers the attempts of stubbed
//! steps, lets the others run, notes every call's input for the
//! expectations, and, when completions are shuffled, makes each attempt
//! take a pseudo-random extra moment so that steps started together finish
//! in another order.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::scenario::{Answer, Stub};
use crate::runtime::{AttemptCall, StandIn, StepStandIn};
use crate::sandbox::AttemptFailure;
use crate::shared_map::lock;

/// The longest extra time a shuffled attempt takes.
const SHUFFLE_SPREAD_MS: u64 = 1_000;

pub struct Stubs {
    stubs: BTreeMap<String, Stub>,
    /// Seeds the extra time each attempt takes, when completions are shuffled.
    shuffle: Option<u64>,
    /// The input of each step call, by run and seq.
    inputs: Mutex<HashMap<(String, u64), String>>,
}

impl Stubs {
    pub fn new(stubs: BTreeMap<String, Stub>, shuffle: Option<u64>) -> Self {
        Self {
            stubs,
            shuffle,
            inputs: Mutex::default(),
        }
    }

    /// The input step call `seq` of `run` was made with, if it was attempted.
    pub fn input(&self, run: &str, seq: u64) -> Option<String> {
        lock(&self.inputs).get(&(run.to_owned(), seq)).cloned()
    }

    /// The extra time an attempt takes when completions are shuffled: the
    /// same for the same seed and attempt, so a shuffled order is repeatable.
    fn shuffled(&self, attempt: &AttemptCall<'_>) -> Duration {
        let Some(seed) = self.shuffle else {
            return Duration::ZERO;
        };
        let digest = Sha256::new()
            .chain_update(seed.to_le_bytes())
            .chain_update(attempt.run.as_bytes())
            .chain_update(attempt.seq.to_le_bytes())
            .chain_update(attempt.attempt.to_le_bytes())
            .finalize();
        let draw = u64::from_le_bytes(digest[..8].try_into().unwrap_or_default());
        Duration::from_millis(1 + draw % SHUFFLE_SPREAD_MS)
    }
}

impl StepStandIn for Stubs {
    fn attempt(&self, attempt: &AttemptCall<'_>) -> StandIn {
        lock(&self.inputs)
            .entry((attempt.run.to_owned(), attempt.seq))
            .or_insert_with(|| attempt.input.to_owned());
        let stub = self.stubs.get(attempt.step);
        let answer = stub
            .and_then(|stub| stub.answer(attempt.attempt))
            .map(|answer| match answer {
                Answer::Output(output) => Ok(output.to_string()),
                Answer::Failure {
                    kind,
                    message,
                    permanent,
                } => Err(AttemptFailure {
                    kind: *kind,
                    message: message.clone(),
                    permanent: *permanent,
                }),
            });
        let takes = stub.map_or(Duration::ZERO, |stub| stub.takes);
        StandIn {
            answer,
            takes: takes.saturating_add(self.shuffled(attempt)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::bindings::StepErrorKind;

    fn call(step: &str, seq: u64, attempt: u32) -> AttemptCall<'_> {
        AttemptCall {
            run: "run-1",
            step,
            seq,
            input: "{\"n\":1}",
            attempt,
            fencing_token: 0,
        }
    }

    #[test]
    fn stubbed_steps_answer_and_others_run_for_real_and_every_input_is_noted() {
        let stubs = Stubs::new(
            BTreeMap::from([(
                "charge".to_owned(),
                Stub::answers(vec![
                    Answer::failure(StepErrorKind::TimedOut, "slow"),
                    Answer::Output(serde_json::json!({"ok": true})),
                ])
                .taking(Duration::from_secs(3)),
            )]),
            None,
        );
        let first = stubs.attempt(&call("charge", 4, 1));
        assert_eq!(
            first.answer.map(|a| a.map_err(|f| f.kind)),
            Some(Err(StepErrorKind::TimedOut))
        );
        assert_eq!(first.takes, Duration::from_secs(3));
        let second = stubs.attempt(&call("charge", 4, 2));
        assert_eq!(second.answer, Some(Ok("{\"ok\":true}".to_owned())));
        assert_eq!(stubs.attempt(&call("ship", 5, 1)), StandIn::real());
        assert_eq!(stubs.input("run-1", 5).as_deref(), Some("{\"n\":1}"));
        assert_eq!(stubs.input("run-2", 5), None);
    }

    #[test]
    fn a_shuffle_delays_attempts_repeatably_and_differently_per_seed() {
        let delays = |seed| {
            let stubs = Stubs::new(BTreeMap::new(), Some(seed));
            (0..8)
                .map(|seq| stubs.attempt(&call("s", seq, 1)).takes)
                .collect::<Vec<_>>()
        };
        assert_eq!(delays(1), delays(1));
        assert_ne!(delays(1), delays(2));
        assert!(
            delays(3)
                .iter()
                .all(|d| (1..=SHUFFLE_SPREAD_MS).contains(&(d.as_millis() as u64)))
        );
    }
}
