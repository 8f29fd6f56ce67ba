//! Why a workflow's activation ended without a result. A durable call raises
//! one of these as a trap; the driver reads it back to decide what happens
//! to the run.

use std::sync::Arc;

use crate::journal::{JournalError, NonDeterminism, Recorded};
use crate::store::{RunId, SignalName};

/// What a run waits for once its instance has been evicted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspension {
    /// When the run must wake at the latest (a timer, a signal's timeout).
    pub wake_at_ms: u64,
    /// The signal that wakes it earlier, with how many signals of that name
    /// the run had already taken: one more means a new one arrived.
    pub signal: Option<(SignalName, usize)>,
    /// The child run whose end wakes it.
    pub child: Option<RunId>,
    /// The step (by seq) whose end wakes it: it was evicted while awaiting
    /// a step, which runs on without it.
    pub step: Option<u64>,
    /// It was paused: only its resumption (or its cancellation, or its
    /// deadline) wakes it.
    pub paused: bool,
    /// The wait (by seq) whose timer `wake_at_ms` is: advancing it wakes
    /// the run at once.
    pub timer: Option<u64>,
}

impl Suspension {
    /// A suspension until `wake_at_ms`, woken by nothing else.
    pub fn until(wake_at_ms: u64) -> Self {
        Self {
            wake_at_ms,
            signal: None,
            child: None,
            step: None,
            paused: false,
            timer: None,
        }
    }

    /// A suspension until the timer of the wait at `seq` ends, at
    /// `deadline_ms` or once it is advanced.
    pub fn timer(seq: u64, deadline_ms: u64) -> Self {
        Self {
            timer: Some(seq),
            ..Self::until(deadline_ms)
        }
    }

    /// The suspension of a paused run.
    pub fn paused() -> Self {
        Self {
            paused: true,
            ..Self::until(u64::MAX)
        }
    }

    /// This suspension, woken at `deadline_ms` at the latest (when that is
    /// still ahead: a deadline passed has cancelled the run already).
    pub fn no_later_than(mut self, deadline_ms: Option<u64>, now_ms: u64) -> Self {
        if let Some(deadline_ms) = deadline_ms.filter(|deadline| *deadline > now_ms) {
            self.wake_at_ms = self.wake_at_ms.min(deadline_ms);
        }
        self
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum Interruption {
    /// The run waits longer than the eviction threshold: drop the instance.
    #[error("run suspended until {}", .0.wake_at_ms)]
    Suspend(Suspension),
    #[error(transparent)]
    NonDeterminism(#[from] NonDeterminism),
    /// Verify mode reached a call the journal does not have.
    #[error("the journal has no entry for seq {seq}")]
    JournalEnd { seq: u64 },
    /// The journal could not be read or written; the run is not failed, it
    /// stops here and resumes from the journal later.
    #[error(transparent)]
    Journal(Arc<JournalError>),
    /// The run reached one of the host's own limits.
    #[error("{0}")]
    HostLimit(String),
    /// The workflow called the host wrongly (a bad handle, a payload too big).
    #[error("{0}")]
    InvalidCall(String),
    /// The workflow called `continue-as-new` with this input: its
    /// generation ends, and the driver starts the next (see
    /// `runtime::continuation`), which checks the input.
    #[error("the run continues as new")]
    ContinueAsNew(String),
}

impl From<JournalError> for Interruption {
    fn from(error: JournalError) -> Self {
        Self::Journal(Arc::new(error))
    }
}

impl Interruption {
    /// The journal entry at `seq` is corrupt: its call and its result
    /// (`recorded`) disagree.
    pub fn mismatch(seq: u64, recorded: Recorded) -> Self {
        Self::from(JournalError::Corrupt {
            key: format!("journal seq {seq}"),
            reason: format!("the entry's call and result disagree: {recorded:?}"),
        })
    }

    /// As the trap a host function returns.
    pub fn trap(self) -> wasmtime::Error {
        wasmtime::Error::new(self)
    }
}
