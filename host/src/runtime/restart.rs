//! Restarting a run from a point (Temporal's reset, Restate's restart from a
//! journal prefix): a new run, linked to the old, whose journal begins with
//! the old run's entries before a chosen seq, and which executes from there
//! on the same build or another. How an operator recovers runs after
//! fixing a bug in a step.
//!
//! The new run's record is written first, naming the old run and the seq
//! ([`RestartPoint`]); then the restart copies the kept entries from the
//! old run (and first the signals to deliver again) before it answers, so
//! that from then on the new run needs nothing of the old. A driver that
//! finds kept entries missing (a crash cut the copy short) copies the rest,
//! under its claim, before it executes anything. So a crash anywhere
//! leaves either no new run or one that completes its own prefix: the kept
//! calls are replayed, never executed.
//!
//! Invariants: a restart point is refused unless every seq before it has an
//! entry (none is a step still running), none of them records the old
//! run's cancellation, and every child started before it is awaited before
//! it (cancelling the old run cancels the children it did not await); a
//! new build must replay the kept entries as recorded. The signals the kept
//! entries did not take, sent before the restart, are delivered again to
//! the new run: at most as many as a run may hold untaken.

use std::collections::HashSet;
use std::sync::Arc;

use serde::Serialize;

use super::interruption::Interruption;
use super::workflow::Mode;
use super::{Ended, RunError, Runs, Submission, failed};
use crate::component::Loaded;
use crate::journal::{
    CallKind, Cursor, Entry, JournalError, Outcome, Payload, Recorded, RestartPoint, RunRecord, RunRecords,
    taken_signals,
};
use crate::store::{RunId, StoreError, TenantId};

/// Kept entries a restarted run's driver copies at once: each is a round
/// trip to the store.
const COPIES_AT_ONCE: usize = 16;

/// How to restart a run.
#[derive(Default)]
pub struct Restart {
    /// The first seq to execute anew: the entries before it are kept.
    pub seq: u64,
    /// The build to run on; `None` keeps the old run's (after any upgrade).
    pub component: Option<Arc<Loaded>>,
    /// The new run's id, which makes restarting idempotent; `None`
    /// generates one.
    pub run_id: Option<RunId>,
    /// Leaves an unfinished old run going; by default it is cancelled.
    pub keep_old: bool,
}

/// A run restarted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Restarted {
    /// The new run.
    #[schema(value_type = String)]
    pub run_id: RunId,
    /// The run it restarts, and the first seq it executes anew.
    pub restarted_from: RestartPoint,
    /// How many signals the old run had not taken by the restart point,
    /// delivered again to the new run.
    pub signals_again: usize,
    /// Whether the old run was cancelled (it had not finished, and was not
    /// kept).
    pub old_cancelled: bool,
}

/// What the journal of a restarted run comes to before it executes.
pub(super) enum KeptPrefix {
    /// Its entries, the kept ones among them.
    Whole(Vec<Entry>),
    /// The old run no longer holds them (retention deleted it): why.
    Gone(String),
}

impl Runs {
    /// Starts a new run that keeps `run`'s journal before `restart.seq` and
    /// executes from there (see the [module](self)), and cancels `run` if
    /// it has not finished, unless asked to keep it. `run` is taken as
    /// named, not as its chain's latest generation: its journal is the one
    /// the seq points into. The new run is admitted like any other, and
    /// submitted for the caller to drive, as [`submit`](Self::submit)'s.
    pub async fn restart(&self, tenant: &TenantId, run: &RunId, restart: Restart) -> Result<Restarted, RunError> {
        let records = self.records(tenant, run);
        let record = records
            .run()
            .await?
            .ok_or_else(|| RunError::UnknownRun { run: run.clone() })?;
        // What the old run stores is deleted only with it, by retention,
        // which deletes its record last: something listed, then gone when
        // read, is of a run being deleted (found by the simulation, seed
        // 178: an entry so gone).
        let gone = |e: RunError| e.deleted_meanwhile(run);
        let (entries, outcome) =
            futures::try_join!(records.entries(), records.outcome()).map_err(|e| gone(e.into()))?;
        let point = RestartPoint {
            run: run.clone(),
            seq: restart.seq,
        };
        let kept = kept_entries(&point, &entries)?;
        let signals_again = self.untaken_signals(&records, kept, &point).await.map_err(gone)?;
        let build = match restart.component {
            Some(build) => {
                self.check_build(tenant, &record, &build, kept, &point).await?;
                build
            }
            None => self.host.components.get(records.store(), &record.component).await?,
        };
        let input = (records.payload_text(record.input.clone()).await).map_err(|e| gone(e.into()))?;
        let mut submission = Submission::new(build, &record.workflow, &input);
        for (name, digest) in &record.links {
            let linked = self.host.components.get(records.store(), digest).await?;
            submission.links.insert(name.clone(), linked);
        }
        submission.run_id = restart.run_id;
        submission.limits = record.limits;
        submission.notify = record.notify.clone();
        submission.tags = record.tags.clone();
        submission.priority = record.priority.into();
        submission.concurrency = record.concurrency.clone();
        submission.restarted_from = Some(point.clone());
        let new_run = self.submit(tenant, submission).await?;
        // The kept calls copied now: once this answers, the new run needs
        // nothing of the old, which retention may delete before any host
        // drives the new one (found by the simulation). A driver copies
        // what a crash here left uncopied.
        let new_records = self.records(tenant, &new_run);
        let (new_record, present) = futures::try_join!(new_records.run(), new_records.entries())?;
        if let Some(new_record) = new_record {
            // The old run deleted meanwhile (retention, since it was read
            // above): the new run ends failed, saying so, and the restart
            // is refused rather than answered with a run doomed to fail
            // (found by the simulation, seed 47).
            if let KeptPrefix::Gone(why) = self.kept_prefix(&new_records, &new_record, present).await? {
                self.end_without_prefix(&new_records, &new_record, why).await?;
                let reason = format!(
                    "the run was deleted (its retention ended) while it was restarted; run `{new_run}` ended failed, `restart-point-gone`"
                );
                return Err(refused(&point, reason));
            }
            // Its journal holds the kept calls now: its driver must read it.
            self.host.fresh.take(tenant, &new_run);
        }
        let old_cancelled = !restart.keep_old && outcome.is_none();
        if old_cancelled {
            let reason = format!("restarted from seq {} as run {new_run}", point.seq);
            match self.cancel_in_background(tenant, run, &reason).await {
                Ok(()) | Err(RunError::Finished { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        tracing::info!(%run, %new_run, seq = point.seq, "run restarted");
        Ok(Restarted {
            run_id: new_run,
            restarted_from: point,
            signals_again,
            old_cancelled,
        })
    }

    /// How many signals the old run had not taken in the `kept` entries,
    /// refused if more than a run may hold untaken.
    async fn untaken_signals(
        &self,
        records: &RunRecords,
        kept: &[Entry],
        point: &RestartPoint,
    ) -> Result<usize, RunError> {
        let count = records.untaken_signals(&taken_signals(kept), u64::MAX).await?.len();
        let limit = self.host.config.run.max_buffered_signals;
        if count > limit {
            return Err(refused(
                point,
                format!(
                    "the run had not taken {count} signals by then, more than the {limit} a run may hold untaken; restart from a later seq"
                ),
            ));
        }
        Ok(count)
    }

    /// Refuses `build` unless it has `record`'s workflow and replays the
    /// `kept` entries as recorded (running nothing).
    async fn check_build(
        &self,
        tenant: &TenantId,
        record: &RunRecord,
        build: &Arc<Loaded>,
        kept: &[Entry],
        point: &RestartPoint,
    ) -> Result<(), RunError> {
        if !build.has_workflow(&record.workflow) {
            return Err(RunError::UnknownWorkflow {
                workflow: record.workflow.clone(),
                digest: build.digest.clone(),
                available: build.manifest.workflows.join(", "),
            });
        }
        let on_build = RunRecord {
            component: build.digest.clone(),
            ..record.clone()
        };
        let context = self
            .context(self.records(tenant, &record.run_id), &on_build, true)
            .await?;
        let (ended, calls) = self
            .execute(context, &on_build, Cursor::new(kept.to_vec()), Mode::Verify)
            .await?;
        let diverged = match ended {
            Ended::Interrupted(Interruption::NonDeterminism(divergence)) => Some(divergence.to_string()),
            _ if calls < point.seq => Some(format!(
                "the build's workflow finishes after {calls} calls, before the restart point"
            )),
            _ => None,
        };
        match diverged {
            Some(how) => Err(refused(
                point,
                format!("build {} does not replay the kept calls: {how}", build.digest),
            )),
            None => Ok(()),
        }
    }

    /// The journal of `record`'s run, its kept entries copied from the run
    /// it restarts if any are missing, and first the signals that run had
    /// not taken by the restart point and was sent before the restart.
    pub(super) async fn kept_prefix(
        &self,
        records: &RunRecords,
        record: &RunRecord,
        entries: Vec<Entry>,
    ) -> Result<KeptPrefix, RunError> {
        let Some(point) = &record.restarted_from else {
            return Ok(KeptPrefix::Whole(entries));
        };
        let present: HashSet<u64> = entries.iter().map(|entry| entry.seq).collect();
        if (0..point.seq).all(|seq| present.contains(&seq)) {
            return Ok(KeptPrefix::Whole(entries));
        }
        let old = self.records(records.store().tenant(), &point.run);
        // Something listed and gone when read: retention is deleting the old
        // run (found by the simulation, seed 1 with a mutation of
        // retention's: a restart's copy failed on an entry so gone).
        match copy_kept_prefix(&old, records, record, point, entries, &present).await {
            Err(JournalError::Store(StoreError::NotFound { key })) => Ok(KeptPrefix::Gone(format!(
                "{key} was deleted as the run's kept calls were copied; was the run deleted?"
            ))),
            copied => Ok(copied?),
        }
    }

    /// Ends a restarted run whose kept calls are gone, failed.
    pub(super) async fn end_without_prefix(
        &self,
        records: &RunRecords,
        record: &RunRecord,
        why: String,
    ) -> Result<Outcome, RunError> {
        let outcome = records.finish(&failed("restart-point-gone", why)).await?;
        self.ended(records, record, &outcome).await;
        Ok(outcome)
    }
}

/// Copies into `records` (of the restarted run `record`) the kept entries
/// of `old` that `entries` (its journal) lacks, first the signals `old` had
/// not taken by the restart `point` and was sent before the restart.
async fn copy_kept_prefix(
    old: &RunRecords,
    records: &RunRecords,
    record: &RunRecord,
    point: &RestartPoint,
    mut entries: Vec<Entry>,
    present: &HashSet<u64>,
) -> Result<KeptPrefix, JournalError> {
    let old_entries = old.entries().await?;
    let kept = match kept_entries(point, &old_entries) {
        Ok(kept) => kept,
        Err(e) => return Ok(KeptPrefix::Gone(format!("{e}; was it deleted?"))),
    };
    let untaken = old.untaken_signals(&taken_signals(kept), record.created_at_ms).await?;
    records.copy_signals(old, &untaken).await?;
    let missing: Vec<&Entry> = kept.iter().filter(|entry| !present.contains(&entry.seq)).collect();
    for some in missing.chunks(COPIES_AT_ONCE) {
        futures::future::try_join_all(some.iter().map(|entry| copy_kept(old, records, entry))).await?;
    }
    entries.extend(missing.into_iter().cloned());
    entries.sort_by_key(|entry| entry.seq);
    tracing::info!(from = %point.run, kept = point.seq, signals = untaken.len(), "restarted run: kept calls copied");
    Ok(KeptPrefix::Whole(entries))
}

/// Copies a kept entry of `old` into the restarted run's journal, after
/// the payload it stored apart, if any. One already there is the same copy,
/// made by a driver before (this host's view of a fresh run does not hold
/// it): left as it is.
async fn copy_kept(old: &RunRecords, records: &RunRecords, entry: &Entry) -> Result<(), JournalError> {
    if let Some(Payload::Stored { sha256, .. }) = entry.recorded.payload() {
        records.copy_payload(old, sha256).await?;
    }
    match records.append(entry).await {
        Err(JournalError::Store(StoreError::AlreadyExists { .. })) => Ok(()),
        copied => copied,
    }
}

/// The entries of `entries` (a run's journal, in seq order) before
/// `point.seq`, if the run may be restarted there.
fn kept_entries<'a>(point: &RestartPoint, entries: &'a [Entry]) -> Result<&'a [Entry], RunError> {
    let in_a_row = entries
        .iter()
        .enumerate()
        .take_while(|(index, entry)| entry.seq == *index as u64)
        .count();
    let kept = usize::try_from(point.seq)
        .ok()
        .filter(|seq| *seq <= in_a_row)
        .ok_or_else(|| {
            let gap = match in_a_row == entries.len() {
                true => "the journal ends there",
                false => "the call there has no entry yet (a step still running)",
            };
            refused(
                point,
                format!(
                    "the journal holds {in_a_row} calls in a row from seq 0 ({gap}); restart from {in_a_row} or earlier"
                ),
            )
        })?;
    let kept = &entries[..kept];
    for (index, entry) in kept.iter().enumerate() {
        match &entry.recorded {
            Recorded::Cancelled { .. } => {
                return Err(refused(
                    point,
                    format!(
                        "seq {} records the run's cancellation; restart from {} or earlier",
                        entry.seq, entry.seq
                    ),
                ));
            }
            Recorded::Child { run: Ok(child) } if !awaited(child, &kept[index..]) => {
                return Err(refused(
                    point,
                    format!(
                        "the child run `{child}` started at seq {} is not awaited before it, and cancelling the old run cancels it; restart from {} or earlier, or after the child is awaited",
                        entry.seq, entry.seq
                    ),
                ));
            }
            _ => {}
        }
    }
    Ok(kept)
}

/// Whether `entries` await the child run `child`.
fn awaited(child: &RunId, entries: &[Entry]) -> bool {
    entries
        .iter()
        .any(|entry| entry.call.kind == CallKind::AwaitChild && entry.call.name == child.as_str())
}

fn refused(point: &RestartPoint, reason: String) -> RunError {
    RunError::RestartRefused {
        run: point.run.clone(),
        seq: point.seq,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Call;

    fn entry(seq: u64, kind: CallKind, name: &str, recorded: Recorded) -> Entry {
        Entry {
            seq,
            call: Call::new(kind, name, b""),
            recorded,
            attempts: 1,
            started_at_ms: 0,
            finished_at_ms: 1,
            last_attempt_started_at_ms: None,
        }
    }

    fn now(seq: u64) -> Entry {
        entry(seq, CallKind::Now, "", Recorded::Value(seq))
    }

    fn at(seq: u64) -> RestartPoint {
        RestartPoint {
            run: RunId::new("old").expect("a valid id"),
            seq,
        }
    }

    fn reason(result: Result<&[Entry], RunError>) -> String {
        match result {
            Err(RunError::RestartRefused { reason, .. }) => reason,
            other => panic!("not refused: {other:?}"),
        }
    }

    /// Any point from 0 to the journal's end keeps the entries before it;
    /// past the end, or past a step still running, is refused, naming the
    /// last point there is.
    #[test]
    fn a_restart_keeps_the_calls_before_its_point_and_none_past_a_gap() {
        let journal: Vec<Entry> = (0..3).map(now).collect();
        for seq in 0..=3 {
            let kept = kept_entries(&at(seq), &journal).expect("a point within the journal");
            assert_eq!(kept.len() as u64, seq);
        }
        let past = reason(kept_entries(&at(4), &journal));
        assert!(
            past.contains("3 calls in a row from seq 0 (the journal ends there); restart from 3 or earlier"),
            "{past}"
        );
        assert!(reason(kept_entries(&at(u64::MAX), &journal)).contains("from 3 or earlier"));
        let running = vec![now(0), now(2)];
        let gap = reason(kept_entries(&at(2), &running));
        assert!(
            gap.contains("a step still running") && gap.contains("restart from 1 or earlier"),
            "{gap}"
        );
        assert!(kept_entries(&at(0), &[]).is_ok_and(<[Entry]>::is_empty));
    }

    /// A point after the run's cancellation, or after a child started and
    /// not yet awaited, is refused; after the child is awaited it is not.
    #[test]
    fn a_restart_keeps_no_cancellation_and_no_child_it_has_not_awaited() {
        let cancelled = vec![
            now(0),
            entry(1, CallKind::Sleep, "", Recorded::Cancelled { reason: "no".into() }),
        ];
        assert!(kept_entries(&at(1), &cancelled).is_ok());
        let after = reason(kept_entries(&at(2), &cancelled));
        assert!(after.contains("seq 1 records the run's cancellation"), "{after}");

        let child = RunId::new("kid").expect("a valid id");
        let journal = vec![
            entry(0, CallKind::StartChild, "greet", Recorded::Child { run: Ok(child) }),
            now(1),
            entry(
                2,
                CallKind::AwaitChild,
                "kid",
                Recorded::ChildEnded { result: Ok("1".into()) },
            ),
        ];
        assert!(kept_entries(&at(0), &journal).is_ok());
        for inside in [1, 2] {
            let open = reason(kept_entries(&at(inside), &journal));
            assert!(
                open.contains("the child run `kid` started at seq 0 is not awaited"),
                "{open}"
            );
        }
        assert!(kept_entries(&at(3), &journal).is_ok());
        let refused_child = vec![entry(
            0,
            CallKind::StartChild,
            "greet",
            Recorded::Child { run: Err("no".into()) },
        )];
        assert!(
            kept_entries(&at(1), &refused_child).is_ok(),
            "a child never started is no child to await"
        );
    }
}
