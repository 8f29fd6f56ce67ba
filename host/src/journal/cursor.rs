//! The replay cursor: hands out sequence numbers in call order and, for each
//! call already in the journal, the recorded entry — after checking that the
//! workflow is making the same call it made the first time. Patch markers
//! are notes rather than calls: the cursor looks ahead for one without
//! taking a seq, and passes over the markers a workflow no longer asks for.

use std::collections::VecDeque;

use super::records::{Call, CallKind, Entry};

/// A workflow asked for something other than what its journal recorded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("non-determinism at seq {seq}: the journal recorded {recorded}, but the workflow now asks for {asked}")]
pub struct NonDeterminism {
    /// The seq at which the calls differ.
    pub seq: u64,
    /// The call the journal holds at that seq.
    pub recorded: Call,
    /// The call the workflow makes there now.
    pub asked: Call,
}

/// What the journal says, where the workflow stands, about a change the
/// workflow asks `patched` of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchMark {
    /// The next entry (past markers of other changes) marks this change:
    /// the run took the changed code here.
    Marked,
    /// The journal goes on with other calls: the code that recorded it
    /// came before the change.
    Unmarked,
    /// The journal holds nothing from here on: the run is past its
    /// recorded history.
    Unrecorded,
}

/// Where a (re-)execution of a workflow stands in its journal.
///
/// Invariant: `ahead` holds the entries at `next_seq` and after, in seq
/// order; an entry leaves it, to its caller, when its seq is taken, so a
/// replayed call costs no lookup and no copy of its result.
#[derive(Debug, Default)]
pub struct Cursor {
    ahead: VecDeque<Entry>,
    next_seq: u64,
    /// The journal's last seq, if it has any entry.
    last_seq: Option<u64>,
}

impl Cursor {
    /// A cursor at seq 0 of `entries`, given in seq order, one per seq (as
    /// [`RunRecords::entries`](super::RunRecords::entries) reads them).
    pub fn new(entries: Vec<Entry>) -> Self {
        debug_assert!(entries.windows(2).all(|pair| pair[0].seq < pair[1].seq));
        Self {
            last_seq: entries.last().map(|entry| entry.seq),
            ahead: entries.into(),
            next_seq: 0,
        }
    }

    /// Gives `call` the next seq and returns it with the recorded entry, if
    /// the journal has one. A recorded entry for a different call is a
    /// [`NonDeterminism`] error. Patch markers the call is not are passed
    /// over first: code that no longer asks `patched` (the patch retired)
    /// goes on as the run did.
    pub fn next(&mut self, call: &Call) -> Result<(u64, Option<Entry>), NonDeterminism> {
        self.pass_markers(|marker| marker != call);
        let seq = self.next_seq;
        self.next_seq += 1;
        match self.ahead.front() {
            Some(entry) if entry.seq == seq && entry.call != *call => Err(NonDeterminism {
                seq,
                recorded: entry.call.clone(),
                asked: call.clone(),
            }),
            Some(entry) if entry.seq == seq => Ok((seq, self.ahead.pop_front())),
            _ => Ok((seq, None)),
        }
    }

    /// Looks for the marker of change `change` where the workflow stands,
    /// without taking a seq: an answer of [`PatchMark::Unmarked`] leaves
    /// the journal's next call for the code before the change to make.
    pub fn patch_mark(&self, change: &str) -> PatchMark {
        let mut markers = self
            .ahead
            .iter()
            .zip(self.next_seq..)
            .map_while(|(entry, seq)| Self::marker(entry, seq));
        if markers.any(|marker| marker.name == change) {
            PatchMark::Marked
        } else if self.ahead.is_empty() {
            PatchMark::Unrecorded
        } else {
            PatchMark::Unmarked
        }
    }

    /// The seq the workflow reached when it returned: patch markers it did
    /// not ask for at the journal's end count as reached, as they would
    /// have been passed over by a next call.
    pub fn end(&mut self) -> u64 {
        self.pass_markers(|_| true);
        self.next_seq
    }

    /// Passes over the markers at the cursor that `unasked` says the
    /// workflow is not asking for.
    fn pass_markers(&mut self, unasked: impl Fn(&Call) -> bool) {
        while let Some(entry) = self.ahead.front()
            && Self::marker(entry, self.next_seq).is_some_and(&unasked)
        {
            self.ahead.pop_front();
            self.next_seq += 1;
        }
    }

    /// The call of `entry` if it is a patch marker at `seq`.
    fn marker(entry: &Entry, seq: u64) -> Option<&Call> {
        (entry.seq == seq && entry.call.kind == CallKind::Patch).then_some(&entry.call)
    }

    /// The entries the workflow has not reached yet: at a new cursor, all.
    pub fn ahead(&self) -> impl Iterator<Item = &Entry> {
        self.ahead.iter()
    }

    /// Whether the workflow is still re-executing recorded calls: it has
    /// not passed the journal's last seq.
    pub fn replaying(&self) -> bool {
        self.last_seq.is_some_and(|last| self.next_seq <= last)
    }

    /// How many seqs the workflow has taken so far.
    pub fn position(&self) -> u64 {
        self.next_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{CallKind, Recorded};

    fn entry(seq: u64, call: Call) -> Entry {
        Entry {
            seq,
            call,
            recorded: Recorded::Slept,
            attempts: 1,
            started_at_ms: 0,
            finished_at_ms: 0,
            last_attempt_started_at_ms: None,
        }
    }

    #[test]
    fn replays_matching_calls_then_runs_live() {
        let reserve = Call::new(CallKind::Step, "reserve", b"{}");
        let mut cursor = Cursor::new(vec![entry(0, reserve.clone())]);
        let (seq, found) = cursor.next(&reserve).expect("valid in this test");
        assert_eq!((seq, found.is_some()), (0, true));
        let (seq, found) = cursor
            .next(&Call::new(CallKind::Step, "charge", b"{}"))
            .expect("valid in this test");
        assert_eq!((seq, found.is_none()), (1, true));
    }

    #[test]
    fn a_different_name_or_input_is_non_determinism_at_its_seq() {
        let recorded = Call::new(CallKind::Step, "reserve", b"{}");
        for asked in [
            Call::new(CallKind::Step, "charge", b"{}"),
            Call::new(CallKind::Step, "reserve", b"[]"),
        ] {
            let mut cursor = Cursor::new(vec![entry(0, recorded.clone())]);
            let err = cursor.next(&asked).unwrap_err();
            assert_eq!(err.seq, 0);
            assert!(err.to_string().contains("step `reserve`"), "{err}");
        }
    }

    fn journal(calls: &[Call]) -> Vec<Entry> {
        (0..).zip(calls).map(|(seq, call)| entry(seq, call.clone())).collect()
    }

    fn step(name: &str) -> Call {
        Call::new(CallKind::Step, name, b"{}")
    }

    fn marker(change: &str) -> Call {
        Call::new(CallKind::Patch, change, b"")
    }

    #[test]
    fn a_patch_mark_is_marked_unmarked_or_unrecorded_and_looking_takes_no_seq() {
        let mut cursor = Cursor::new(journal(&[step("reserve"), marker("fraud-check"), step("charge")]));
        assert_eq!(cursor.patch_mark("fraud-check"), PatchMark::Unmarked, "reserve is next");
        assert_eq!(cursor.position(), 0);
        cursor.next(&step("reserve")).expect("recorded");
        assert_eq!(cursor.patch_mark("fraud-check"), PatchMark::Marked);
        assert_eq!(
            cursor.patch_mark("other-change"),
            PatchMark::Unmarked,
            "charge follows the marker"
        );
        assert_eq!(cursor.position(), 1);
        let (seq, found) = cursor.next(&marker("fraud-check")).expect("its marker");
        assert_eq!((seq, found.is_some()), (1, true));
        cursor.next(&step("charge")).expect("recorded");
        assert_eq!(cursor.patch_mark("fraud-check"), PatchMark::Unrecorded);
    }

    #[test]
    fn a_journal_with_a_gap_ahead_is_recorded_history_not_the_end() {
        let mut calls = journal(&[step("a"), step("b")]);
        calls.remove(0);
        let cursor = Cursor::new(calls);
        assert_eq!(cursor.patch_mark("x"), PatchMark::Unmarked);
    }

    #[test]
    fn a_seq_missing_inside_the_journal_runs_live_and_the_entries_after_it_replay() {
        let mut calls = journal(&[step("a"), step("b"), step("c")]);
        calls.remove(1);
        let mut cursor = Cursor::new(calls);
        assert!(cursor.replaying());
        assert_eq!(cursor.next(&step("a")).expect("recorded").1.map(|e| e.seq), Some(0));
        // Any call may take the gap: nothing recorded it.
        assert_eq!(cursor.next(&step("other")).expect("unrecorded").1, None);
        assert!(cursor.replaying(), "seq 2 is still ahead");
        assert_eq!(cursor.next(&step("c")).expect("recorded").1.map(|e| e.seq), Some(2));
        assert!(!cursor.replaying());
        assert_eq!(cursor.next(&step("d")).expect("past the journal").1, None);
        assert_eq!(cursor.ahead().count(), 0);
    }

    #[test]
    fn stacked_patches_each_find_their_own_marker_or_none() {
        // Recorded by a build with patch `x` only; the build now asking
        // `patched("y")` first and then `patched("x")`.
        let cursor = Cursor::new(journal(&[marker("x"), step("new-x")]));
        assert_eq!(cursor.patch_mark("y"), PatchMark::Unmarked);
        assert_eq!(cursor.patch_mark("x"), PatchMark::Marked);
        // Recorded with both; a build that retired `x` asks `y` alone: its
        // marker is found past `x`'s, which is passed over.
        let mut cursor = Cursor::new(journal(&[marker("x"), marker("y"), step("new-y")]));
        assert_eq!(cursor.patch_mark("y"), PatchMark::Marked);
        let (seq, _) = cursor.next(&marker("y")).expect("its marker, past x's");
        assert_eq!(seq, 1);
        cursor.next(&step("new-y")).expect("recorded");
    }

    #[test]
    fn a_marker_the_code_no_longer_asks_for_is_passed_over() {
        // The patch retired: the call removed, its new code kept.
        let mut cursor = Cursor::new(journal(&[step("reserve"), marker("fraud-check"), step("fraud-check")]));
        cursor.next(&step("reserve")).expect("recorded");
        let (seq, found) = cursor.next(&step("fraud-check")).expect("the marker passed over");
        assert_eq!((seq, found.is_some()), (2, true));
        // Code that dropped the new code too diverges past the marker.
        let mut cursor = Cursor::new(journal(&[step("reserve"), marker("fraud-check"), step("fraud-check")]));
        cursor.next(&step("reserve")).expect("recorded");
        let err = cursor.next(&step("charge")).unwrap_err();
        assert_eq!(err.seq, 2);
    }

    #[test]
    fn markers_at_the_journals_end_count_as_reached_but_calls_do_not() {
        let mut cursor = Cursor::new(journal(&[step("a"), marker("x"), marker("y")]));
        cursor.next(&step("a")).expect("recorded");
        assert_eq!(cursor.end(), 3);
        let mut cursor = Cursor::new(journal(&[step("a"), marker("x"), step("b")]));
        cursor.next(&step("a")).expect("recorded");
        assert_eq!(cursor.end(), 2, "step b was never made again");
    }
}
