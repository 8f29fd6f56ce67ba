//! The invariants a seed must keep, each a named check over what the
//! store holds and what the service saw.

use std::collections::BTreeMap;

use std::time::Duration;

use stepstone::journal::Outcome;
use stepstone::store::{ConcurrencyKey, RunId};

use crate::steps::Started;
use crate::world::{Ended, PlannedRun, RestartedRun};

/// What one seed left, to check.
pub struct Checked<'a> {
    /// The runs planned, and those operators restarted.
    pub runs: &'a [PlannedRun],
    pub restarted: &'a [RestartedRun],
    pub ended: &'a BTreeMap<RunId, Ended>,
    /// Each run a listing missed when it ended, or found once retention
    /// had deleted it, said so.
    pub unlisted: &'a [String],
    pub started: Vec<Started>,
}

impl Checked<'_> {
    /// Every invariant broken, named, with what broke it.
    pub fn violations(&self) -> Vec<String> {
        let mut broken = Vec::new();
        self.every_run_ends_as_without_faults(&mut broken);
        self.journals_are_whole(&mut broken);
        self.no_attempt_of_a_journaled_call(&mut broken);
        self.tokens_never_go_back(&mut broken);
        self.a_key_has_one_holder_at_a_time(&mut broken);
        self.a_restarted_run_executes_no_call_it_kept(&mut broken);
        // Every run is listed while it is kept, and not once deleted:
        // checked as each ended, before retention, and at the seed's end.
        broken.extend(self.unlisted.iter().cloned());
        broken
    }

    /// A restarted run starts no attempt of a call before its restart
    /// point: those it kept from the run it restarts.
    fn a_restarted_run_executes_no_call_it_kept(&self, broken: &mut Vec<String>) {
        for restarted in self.restarted {
            let again = self
                .started
                .iter()
                .filter(|start| start.run == restarted.run.id.as_str() && start.seq < restarted.kept);
            for start in again {
                broken.push(format!(
                    "restart: host {} started {} seq {} at {:?}, a call it kept (it restarted from seq {})",
                    start.host, start.run, start.seq, start.at, restarted.kept
                ));
            }
        }
    }

    /// Every run ends with the output it would have had without faults.
    fn every_run_ends_as_without_faults(&self, broken: &mut Vec<String>) {
        for run in self.runs {
            match self.ended.get(&run.id).map(|ended| &ended.outcome) {
                Some(Outcome::Completed { output }) if output.holds(&run.expected) => {}
                Some(other) => broken.push(format!(
                    "outputs: run {} ended {other:?}, not with {}",
                    run.id, run.expected
                )),
                None => broken.push(format!("liveness: run {} did not end in the time allowed", run.id)),
            }
        }
    }

    /// Each journal holds one entry at each seq from 0, as many as the
    /// run made calls: its signal, sent with an id and maybe sent again,
    /// taken once.
    fn journals_are_whole(&self, broken: &mut Vec<String>) {
        for run in self.runs {
            let (Some(calls), Some(ended)) = (run.calls, self.ended.get(&run.id)) else {
                continue;
            };
            match &ended.seqs {
                Ok(seqs) => {
                    let expected: Vec<u64> = (0..calls).collect();
                    if *seqs != expected {
                        broken.push(format!("journal: run {} holds seqs {seqs:?}, not {expected:?}", run.id));
                    }
                }
                Err(e) => broken.push(format!("journal: run {} cannot be read: {e}", run.id)),
            }
        }
    }

    /// No attempt of a call starts once the call's result is journaled.
    fn no_attempt_of_a_journaled_call(&self, broken: &mut Vec<String>) {
        for start in self.started.iter().filter(|start| start.journaled) {
            broken.push(format!(
                "executed twice: host {} started {} seq {} attempt {} at {:?}, its entry already stored",
                start.host, start.run, start.seq, start.attempt, start.at
            ));
        }
    }

    /// The service never sees an attempt of a run with an older fencing
    /// token after one with a newer: no two hosts start new steps of one
    /// run in overlapping claims.
    fn tokens_never_go_back(&self, broken: &mut Vec<String>) {
        let mut newest: BTreeMap<&str, &Started> = BTreeMap::new();
        for start in &self.started {
            match newest.get(start.run.as_str()) {
                Some(seen) if start.fencing_token < seen.fencing_token => broken.push(format!(
                    "fencing: host {} started {} seq {} with token {} at {:?}, after host {} had with token {} at {:?}",
                    start.host,
                    start.run,
                    start.seq,
                    start.fencing_token,
                    start.at,
                    seen.host,
                    seen.fencing_token,
                    seen.at
                )),
                _ => {
                    newest.insert(&start.run, start);
                }
            }
        }
    }
    /// Runs queued on one key (limit 1) never overlap: each run's attempts
    /// start, from its first to its last, while no other run of the key
    /// starts one.
    fn a_key_has_one_holder_at_a_time(&self, broken: &mut Vec<String>) {
        let mut held: BTreeMap<&ConcurrencyKey, Vec<(Duration, Duration, &RunId)>> = BTreeMap::new();
        for run in self.runs {
            let Some(key) = &run.key else { continue };
            let mut starts = self
                .started
                .iter()
                .filter(|start| start.run == run.id.as_str())
                .map(|start| start.at);
            let Some(first) = starts.next() else { continue };
            let last = starts.fold(first, Duration::max);
            held.entry(key).or_default().push((first, last, &run.id));
        }
        for (key, mut spans) in held {
            spans.sort();
            let mut holder: Option<(Duration, &RunId)> = None;
            for (begins, ends, run) in spans {
                if let Some((held_until, by)) = holder
                    && begins <= held_until
                {
                    broken.push(format!(
                        "concurrency: runs {by} and {run} of key {key} held it at once: {run} started an attempt at {begins:?}, {by} at {held_until:?}"
                    ));
                }
                if holder.is_none_or(|(held_until, _)| ends > held_until) {
                    holder = Some((ends, run));
                }
            }
        }
    }
}
