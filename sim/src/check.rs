//! The invariants a seed must keep, each a named check over what the
//! service saw and what landed in the store over the whole seed (its
//! history, not its end state): every claim, entry, record and outcome
//! ever created, and every record ever deleted, with when and by whom.
//!
//! The oracles of "started twice" judge a step's starts against that
//! history: no start under a claim another claim of the run had overtaken
//! (by more than [`FENCE_STANDS_FOR`], the most a fence read may stand
//! before its attempt) before it, so of two starts of one call under two
//! claims the first was in flight at the takeover; no start of a call whose
//! entry had ever been stored in that incarnation of the run; no two
//! processes under one token. An attempt a host decided on and then was
//! stalled before starting (between its last check and the act) is in
//! flight at the takeover, as a paused process's attempt is: the fencing
//! token, not the fence, keeps the service from acting on it after the new
//! owner's; it is judged by the checks that concern tokens alone.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use stepstone::cluster::epochs_of;
use stepstone::journal::{FENCE_STANDS_FOR, Outcome};
use stepstone::store::{ConcurrencyKey, RunId};

use crate::history::{Ended, Runs};
use crate::steps::Started;
use crate::world::{PlannedRun, RestartedRun, RunKey};

/// What one seed left, to check.
pub struct Checked<'a> {
    /// The runs planned, those operators restarted and those submitted
    /// again under their id.
    pub runs: &'a [PlannedRun],
    pub restarted: &'a [RestartedRun],
    pub ended: &'a BTreeMap<RunKey, Ended>,
    /// Of the runs not ended, those a live host drives still.
    pub driven: &'a BTreeSet<RunKey>,
    /// Each run a listing missed when it ended, or found once retention
    /// had deleted it, said so.
    pub unlisted: &'a [String],
    pub started: Vec<Started>,
    /// The attempts in flight across a stall after their claim was checked,
    /// by host and start: decided before the stall, started after it (as a
    /// paused process's attempt lands after its run was taken over).
    pub in_flight: &'a BTreeSet<(usize, Duration)>,
    /// What landed under `runs/`, indexed by run.
    pub history: &'a Runs,
    /// The incarnation each run was created as.
    pub incarnations: &'a BTreeMap<RunKey, u64>,
}

impl Checked<'_> {
    /// The starts but those in flight across a stall after their check.
    fn decided_in_time(&self) -> impl Iterator<Item = &Started> {
        (self.started.iter()).filter(|start| !self.in_flight.contains(&(start.host, start.at)))
    }

    /// Every invariant broken, named, with what broke it.
    pub fn violations(&self) -> Vec<String> {
        let mut broken = Vec::new();
        self.every_run_ends_as_without_faults(&mut broken);
        self.journals_are_whole(&mut broken);
        self.no_start_of_a_call_once_journaled(&mut broken);
        self.no_start_under_an_overtaken_claim(&mut broken);
        self.no_token_started_by_two_processes(&mut broken);
        self.tokens_never_go_back(&mut broken);
        self.no_key_shared_by_two_incarnations(&mut broken);
        self.no_record_deleted_without_an_outcome(&mut broken);
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

    /// Every run ends with the output it would have had without faults, or
    /// is driven still by a live host at the seed's end (late: a timer set
    /// on one host's wall clock fires on another's).
    fn every_run_ends_as_without_faults(&self, broken: &mut Vec<String>) {
        for run in self.runs {
            match self.ended.get(&run.key()).map(|ended| &ended.outcome) {
                Some(Outcome::Completed { output }) if output.holds(&run.expected) => {}
                Some(other) => broken.push(format!(
                    "outputs: run {} ended {other:?}, not with {}",
                    run.id, run.expected
                )),
                None if self.driven.contains(&run.key()) => {}
                None => broken.push(format!(
                    "liveness: run {}{} did not end in the time allowed, and no live host drives it",
                    run.id,
                    match run.again {
                        0 => String::new(),
                        again => format!(" (submitted again, {again})"),
                    }
                )),
            }
        }
    }

    /// Each journal holds one entry at each seq from 0, as many as the
    /// run made calls: its signal, sent with an id and maybe sent again,
    /// taken once.
    fn journals_are_whole(&self, broken: &mut Vec<String>) {
        for run in self.runs {
            let (Some(calls), Some(ended)) = (run.calls, self.ended.get(&run.key())) else {
                continue;
            };
            let expected: Vec<u64> = (0..calls).collect();
            if ended.seqs != expected {
                broken.push(format!(
                    "journal: run {} holds seqs {:?}, not {expected:?}",
                    run.id, ended.seqs
                ));
            }
        }
    }

    /// No attempt of a call starts once its entry was stored in that
    /// incarnation of the run, however briefly (retention may have deleted
    /// it since).
    fn no_start_of_a_call_once_journaled(&self, broken: &mut Vec<String>) {
        for start in self.decided_in_time() {
            let journaled = (self.history.incarnations(&start.run).iter())
                .filter(|incarnation| incarnation.record.incarnation == start.incarnation)
                .find_map(|incarnation| incarnation.entries.get(&start.seq));
            if let Some(at) = journaled
                && *at < start.at
            {
                broken.push(format!(
                    "executed twice: host {} started {} seq {} attempt {} at {:?}, its entry stored at {at:?}",
                    start.host, start.run, start.seq, start.attempt, start.at
                ));
            }
        }
    }

    /// No attempt starts under a claim that another claim of the run's
    /// incarnation (a takeover, or retention's deletion claim) overtook
    /// more than [`FENCE_STANDS_FOR`] before: a fence read right before the
    /// attempt, or within that of it, sees such a claim. So two starts of
    /// one call under two claims are never both made once the later claim
    /// stood: the earlier was in flight when it was made.
    fn no_start_under_an_overtaken_claim(&self, broken: &mut Vec<String>) {
        for start in self.decided_in_time() {
            let epochs = epochs_of(start.incarnation);
            let overtaking = self.history.claims(&start.run).iter().find(|(epoch, at)| {
                *epoch > start.fencing_token && epochs.contains(epoch) && *at + FENCE_STANDS_FOR < start.at
            });
            if let Some((epoch, at)) = overtaking {
                broken.push(format!(
                    "started overtaken: host {} started {} seq {} under token {} at {:?}, though the claim of epoch {epoch} stood from {at:?}",
                    start.host, start.run, start.seq, start.fencing_token, start.at
                ));
            }
        }
    }

    /// No two processes start attempts of one run under one token: each
    /// claim is one process's.
    fn no_token_started_by_two_processes(&self, broken: &mut Vec<String>) {
        let mut by: BTreeMap<(&str, u64), BTreeSet<usize>> = BTreeMap::new();
        for start in &self.started {
            by.entry((&start.run, start.fencing_token))
                .or_default()
                .insert(start.host);
        }
        for ((run, token), hosts) in by.into_iter().filter(|(_, hosts)| hosts.len() > 1) {
            broken.push(format!(
                "one token, two processes: hosts {hosts:?} started attempts of {run} under token {token}"
            ));
        }
    }

    /// The service never sees an attempt of a run with an older fencing
    /// token after one with a newer: no two hosts start new steps of one
    /// run in overlapping claims, and a run of an id used again starts
    /// above every token an earlier one had.
    fn tokens_never_go_back(&self, broken: &mut Vec<String>) {
        let mut newest: BTreeMap<&str, &Started> = BTreeMap::new();
        for start in self.decided_in_time() {
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

    /// No idempotency key reaches the service from two incarnations of a
    /// run: the service would answer the later with the earlier's result.
    fn no_key_shared_by_two_incarnations(&self, broken: &mut Vec<String>) {
        let mut by: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
        for start in &self.started {
            by.entry(&start.key).or_default().insert(start.incarnation);
        }
        for (key, incarnations) in by.into_iter().filter(|(_, seen)| seen.len() > 1) {
            broken.push(format!(
                "idempotency: key {key} was sent by incarnations {incarnations:?} of its run"
            ));
        }
    }

    /// No run's record is deleted before its outcome was stored, but one a
    /// recovery stored as abandoned (a run never created), or one that ran
    /// nothing and whose incarnation was marked retired before the delete:
    /// a submission's that found it retired once its record landed (it
    /// stalled past a whole run of the id, or read the marks stale), taken
    /// back before it was accepted. Retention marks a run's incarnation
    /// retired only after it deleted the record.
    fn no_record_deleted_without_an_outcome(&self, broken: &mut Vec<String>) {
        for deleted in self.history.deleted() {
            let incarnation = (self.history.incarnations(&deleted.run).iter())
                .rev()
                .find(|incarnation| {
                    incarnation.at <= deleted.at && incarnation.record.created_at_ms == deleted.record.created_at_ms
                });
            let ended = incarnation.is_some_and(|incarnation| {
                let taken_back = deleted.retired && incarnation.entries.is_empty();
                taken_back || incarnation.outcome.as_ref().is_some_and(|(at, _)| *at <= deleted.at)
            });
            if deleted.record.abandoned.is_none() && !ended {
                broken.push(format!(
                    "deleted unfinished: host {} deleted the record of {} (created at {} ms) at {:?}, no outcome stored",
                    deleted.host, deleted.run, deleted.record.created_at_ms, deleted.at
                ));
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
            let incarnation = self.incarnations.get(&run.key());
            let mut starts = self
                .decided_in_time()
                .filter(|start| start.run == run.id.as_str() && incarnation.is_none_or(|i| *i == start.incarnation))
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

#[cfg(test)]
mod tests {
    //! Each oracle of a step started twice, or of a run lost, shown to
    //! fire on the history it guards against, and to stay quiet on the
    //! one beside it that is legal.

    use bytes::Bytes;
    use stepstone::cluster::HostId;
    use stepstone::journal::{Abandoned, RunRecord, encode};

    use super::*;
    use crate::network::{Change, Landed};

    const RUN: &str = "r001";

    fn record(created_at_ms: u64, incarnation: u64) -> RunRecord {
        let run = RunId::new(RUN).expect("an id");
        let by = HostId::try_from("sim.1.h0".to_owned()).expect("an id");
        RunRecord {
            abandoned: None,
            incarnation,
            ..RunRecord::abandoned(run, created_at_ms, Abandoned { by, at_ms: 0 })
        }
    }

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// What landed at `ms` under the run's `object`.
    fn landed(ms: u64, object: &str, change: Change) -> Landed {
        Landed {
            at: at(ms),
            host: 0,
            key: format!("tenants/default/runs/{RUN}/{object}"),
            change,
        }
    }

    fn created(ms: u64, object: &str, bytes: Vec<u8>) -> Landed {
        landed(ms, object, Change::Created(Bytes::from(bytes)))
    }

    fn outcome() -> Vec<u8> {
        encode(&Outcome::Completed { output: "1".into() })
    }

    fn start(ms: u64, host: usize, seq: u64, fencing_token: u64, incarnation: u64) -> Started {
        Started {
            at: at(ms),
            host,
            run: RUN.into(),
            seq,
            attempt: 1,
            fencing_token,
            incarnation,
            key: format!("default/{RUN}/{seq}"),
            fenced: false,
        }
    }

    /// The violations of a seed that started `started` over `landed`, an
    /// attempt of `host` at `ms` in flight across a stall for each of
    /// `in_flight`.
    fn violations(landed: &[Landed], started: Vec<Started>, in_flight: &[(usize, u64)]) -> Vec<String> {
        let mut history = Runs::default();
        history.absorb(landed);
        let in_flight = in_flight.iter().map(|(host, ms)| (*host, at(*ms))).collect();
        Checked {
            runs: &[],
            restarted: &[],
            ended: &BTreeMap::new(),
            driven: &BTreeSet::new(),
            unlisted: &[],
            started,
            in_flight: &in_flight,
            history: &history,
            incarnations: &BTreeMap::new(),
        }
        .violations()
    }

    fn one_named(violations: &[String], name: &str) {
        assert!(
            violations.len() == 1 && violations[0].starts_with(name),
            "expected one `{name}`: {violations:?}"
        );
    }

    #[test]
    fn a_start_after_its_calls_entry_was_ever_stored_is_executed_twice() {
        let history = [
            created(0, "run", encode(&record(1, 0))),
            created(1_000, "journal/0000000000", Vec::new()),
        ];
        one_named(
            &violations(&history, vec![start(2_000, 1, 0, 0, 0)], &[]),
            "executed twice",
        );
        assert_eq!(
            violations(&history, vec![start(500, 1, 0, 0, 0)], &[]),
            Vec::<String>::new()
        );
        let again = [
            &history[..],
            &[
                created(1_400, "outcome", outcome()),
                landed(1_500, "run", Change::Deleted(Some(encode(&record(1, 0)).into()))),
                created(1_600, "run", encode(&record(2, 1))),
            ],
        ]
        .concat();
        let anew = start(2_000, 1, 0, epochs_of(1).start, 1);
        assert_eq!(
            violations(&again, vec![anew.clone()], &[]),
            Vec::<String>::new(),
            "the id's next incarnation starts its own seq 0"
        );
        let late = [&again[..], &[created(1_700, "journal/0000000000", Vec::new())]].concat();
        assert_eq!(
            violations(&late, vec![anew.clone()], &[]),
            Vec::<String>::new(),
            "an entry landing late in the first incarnation's folder is not the next's"
        );
        let own = [
            &again[..],
            &[created(1_700, "incarnations/1/journal/0000000000", Vec::new())],
        ]
        .concat();
        one_named(&violations(&own, vec![anew], &[]), "executed twice");
    }

    #[test]
    fn a_start_under_a_claim_overtaken_past_the_fence_bound_is_found() {
        let history = [
            created(0, "run", encode(&record(1, 0))),
            created(1_000, "owners/0000000001", Vec::new()),
        ];
        let bound = 1_000 + u64::try_from(FENCE_STANDS_FOR.as_millis()).expect("small");
        let late = start(bound + 1, 0, 3, 0, 0);
        one_named(&violations(&history, vec![late.clone()], &[]), "started overtaken");
        assert_eq!(
            violations(&history, vec![start(bound, 0, 3, 0, 0)], &[]),
            Vec::<String>::new()
        );
        assert_eq!(
            violations(&history, vec![late], &[(0, bound + 1)]),
            Vec::<String>::new(),
            "an attempt decided before a stall is in flight across it"
        );
    }

    #[test]
    fn one_token_in_two_processes_is_found() {
        let started = vec![start(0, 0, 0, 4, 0), start(10, 1, 1, 4, 0)];
        one_named(&violations(&[], started, &[]), "one token, two processes");
    }

    #[test]
    fn a_token_lower_than_one_seen_before_is_found() {
        let started = vec![start(0, 0, 0, 2, 0), start(10, 1, 1, 1, 0)];
        one_named(&violations(&[], started, &[]), "fencing");
        let rising = vec![start(0, 0, 0, 1, 0), start(10, 1, 1, 2, 0)];
        assert_eq!(violations(&[], rising, &[]), Vec::<String>::new());
    }

    #[test]
    fn a_key_sent_by_two_incarnations_of_a_run_is_found() {
        let first = epochs_of(1).start;
        let started = vec![start(0, 0, 0, 0, 0), start(10, 0, 0, first, 1)];
        one_named(&violations(&[], started, &[]), "idempotency");
    }

    #[test]
    fn a_record_deleted_before_its_outcome_is_found_and_one_landing_again_is_the_same_run() {
        let deleted = || landed(5_000, "run", Change::Deleted(Some(encode(&record(1, 0)).into())));
        let unfinished = [created(0, "run", encode(&record(1, 0))), deleted()];
        one_named(&violations(&unfinished, Vec::new(), &[]), "deleted unfinished");
        let finished = [
            created(0, "run", encode(&record(1, 0))),
            created(4_000, "outcome", outcome()),
            deleted(),
            created(6_000, "run", encode(&record(1, 0))),
            landed(7_000, "run", Change::Deleted(Some(encode(&record(1, 0)).into()))),
        ];
        assert_eq!(
            violations(&finished, Vec::new(), &[]),
            Vec::<String>::new(),
            "a write of the record landing late is the run that ended, deleted again"
        );
    }

    #[test]
    fn only_a_record_that_ran_nothing_and_was_retired_before_its_delete_may_be_taken_back() {
        let mark = |ms| Landed {
            key: "tenants/default/retired/00000000000000000001".into(),
            ..created(ms, "", Vec::new())
        };
        let anew = || created(2_000, "run", encode(&record(1, 1)));
        let taken_back = || landed(3_000, "run", Change::Deleted(Some(encode(&record(1, 1)).into())));
        let late = [anew(), mark(2_500), taken_back()];
        assert_eq!(violations(&late, Vec::new(), &[]), Vec::<String>::new());
        let swept_unfinished = [anew(), taken_back(), mark(3_500)];
        one_named(&violations(&swept_unfinished, Vec::new(), &[]), "deleted unfinished");
        let ran = created(2_200, "incarnations/1/journal/0000000000", Vec::new());
        let started = [anew(), ran, mark(2_500), taken_back()];
        one_named(&violations(&started, Vec::new(), &[]), "deleted unfinished");
    }
}
