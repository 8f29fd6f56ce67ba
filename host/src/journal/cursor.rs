//! The replay cursor: hands out sequence numbers in call order and, for each
//! call already in the journal, the recorded entry — after checking that the
//! workflow is making the same call it made the first time.

use std::collections::BTreeMap;

use super::records::{Call, Entry};

/// A workflow asked for something other than what its journal recorded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("non-determinism at seq {seq}: the journal recorded {recorded}, but the workflow now asks for {asked}")]
pub struct NonDeterminism {
    pub seq: u64,
    pub recorded: Call,
    pub asked: Call,
}

/// Where a (re-)execution of a workflow stands in its journal.
#[derive(Debug, Default)]
pub struct Cursor {
    entries: BTreeMap<u64, Entry>,
    next_seq: u64,
}

impl Cursor {
    pub fn new(entries: BTreeMap<u64, Entry>) -> Self {
        Self { entries, next_seq: 0 }
    }

    /// Gives `call` the next seq and returns it with the recorded entry, if
    /// the journal has one. A recorded entry for a different call is a
    /// [`NonDeterminism`] error.
    pub fn next(&mut self, call: &Call) -> Result<(u64, Option<&Entry>), NonDeterminism> {
        let seq = self.next_seq;
        self.next_seq += 1;
        match self.entries.get(&seq) {
            Some(entry) if entry.call != *call => Err(NonDeterminism {
                seq,
                recorded: entry.call.clone(),
                asked: call.clone(),
            }),
            found => Ok((seq, found)),
        }
    }

    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &Entry> {
        self.entries.values()
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
        }
    }

    #[test]
    fn replays_matching_calls_then_runs_live() {
        let reserve = Call::new(CallKind::Step, "reserve", b"{}");
        let mut cursor = Cursor::new(BTreeMap::from([(0, entry(0, reserve.clone()))]));
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
            let mut cursor = Cursor::new(BTreeMap::from([(0, entry(0, recorded.clone()))]));
            let err = cursor.next(&asked).unwrap_err();
            assert_eq!(err.seq, 0);
            assert!(err.to_string().contains("step `reserve`"), "{err}");
        }
    }
}
