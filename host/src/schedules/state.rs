//! How far a schedule has fired, and the decision, free of any I/O, of what
//! becomes of the fires that fell due.

use serde::{Deserialize, Serialize};

use super::Overlap;

/// A schedule's progress, stored beside it after each fire.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleState {
    /// Every fire up to this time has been decided: started, buffered or dropped.
    pub fired_until_ms: u64,
    /// The fire whose run was started last.
    pub last_started_ms: Option<u64>,
    /// A fire kept until the last run ends (`buffer-one`).
    pub buffered_ms: Option<u64>,
}

/// What becomes of one fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fire {
    /// Start the run of the fire at this time (ms since the Unix epoch).
    Start(u64),
    /// Keep the fire at this time (ms) until the last run ends (`buffer-one`).
    Buffer(u64),
    /// Drop the fire at this time (ms): the last run is unfinished.
    Skip(u64),
}

impl ScheduleState {
    /// Decides a buffered fire and the `due` ones (oldest first, all after
    /// `fired_until_ms`), given whether the last run is unfinished
    /// (`busy`). Returns each fire's fate, in order, and the state after.
    pub fn advance(&self, overlap: Overlap, busy: bool, due: &[u64]) -> (Self, Vec<Fire>) {
        let mut next = self.clone();
        let mut busy = busy && overlap != Overlap::Allow;
        let mut fates = Vec::with_capacity(due.len() + 1);
        if let Some(buffered) = next.buffered_ms.filter(|_| !busy) {
            fates.push(Fire::Start(buffered));
            next.buffered_ms = None;
            busy = overlap != Overlap::Allow;
        }
        for &fire in due {
            let fate = match overlap {
                _ if !busy => Fire::Start(fire),
                Overlap::BufferOne if next.buffered_ms.is_none() => Fire::Buffer(fire),
                _ => Fire::Skip(fire),
            };
            match fate {
                Fire::Start(_) => busy = overlap != Overlap::Allow,
                Fire::Buffer(fire) => next.buffered_ms = Some(fire),
                Fire::Skip(_) => {}
            }
            fates.push(fate);
            next.fired_until_ms = next.fired_until_ms.max(fire);
        }
        if let Some(started) = fates.iter().rev().find_map(|fate| match fate {
            Fire::Start(fire) => Some(*fire),
            _ => None,
        }) {
            next.last_started_ms = Some(started);
        }
        (next, fates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle() -> ScheduleState {
        ScheduleState::default()
    }

    #[test]
    fn skip_starts_the_first_due_fire_and_drops_the_rest_while_it_runs() {
        let (next, fates) = idle().advance(Overlap::Skip, false, &[10, 20, 30]);
        assert_eq!(fates, vec![Fire::Start(10), Fire::Skip(20), Fire::Skip(30)]);
        assert_eq!((next.fired_until_ms, next.last_started_ms), (30, Some(10)));
        let (_, fates) = next.advance(Overlap::Skip, true, &[40]);
        assert_eq!(fates, vec![Fire::Skip(40)]);
    }

    #[test]
    fn buffer_one_keeps_the_first_fire_and_starts_it_once_the_run_ended() {
        let (next, fates) = idle().advance(Overlap::BufferOne, true, &[10, 20]);
        assert_eq!(fates, vec![Fire::Buffer(10), Fire::Skip(20)]);
        assert_eq!(next.buffered_ms, Some(10));
        let (still, fates) = next.advance(Overlap::BufferOne, true, &[]);
        assert_eq!(
            (fates, &still),
            (vec![], &next),
            "nothing changes while the run goes on"
        );
        let (after, fates) = still.advance(Overlap::BufferOne, false, &[30]);
        assert_eq!(fates, vec![Fire::Start(10), Fire::Buffer(30)]);
        assert_eq!(
            (after.buffered_ms, after.last_started_ms, after.fired_until_ms),
            (Some(30), Some(10), 30)
        );
    }

    #[test]
    fn allow_starts_every_fire_however_busy() {
        let (next, fates) = idle().advance(Overlap::Allow, true, &[10, 20]);
        assert_eq!(fates, vec![Fire::Start(10), Fire::Start(20)]);
        assert_eq!(next.last_started_ms, Some(20));
    }
}
