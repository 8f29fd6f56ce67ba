//! The journal: what is recorded about a run, how records are encoded, and
//! the replay cursor that serves recorded results back to a re-executed
//! workflow; snapshots compact a long journal into one object.
//!
//! Invariants: every record is written whole, with a format version and a
//! checksum, and a record that fails either check is reported as corrupt —
//! never treated as missing. Journal entries and outcomes are create-only, so
//! two hosts driving one run cannot fork its history. A snapshot is derived
//! from the entries and only ever speeds up reading them: the entries stay
//! the truth.

mod cursor;
mod envelope;
pub(crate) mod incarnations;
pub(crate) mod ledger;
mod payload;
mod read_ahead;
mod records;
mod run_records;
mod snapshot;

pub use crate::cluster::{ClaimLost, LeaseLapsed};
pub use cursor::NonDeterminism;
internal_use!(cursor::{Cursor, PatchMark});
internal_use!(envelope::{FORMAT_VERSION, decode, encode});
pub use records::{
    Abandoned, AdvanceRecord, AttemptRecord, BuildRecord, Call, CallKind, CancelRecord, ChainLink, ConcurrencyLimit,
    DEFAULT_PRIORITY, Entry, FIRST_PRIORITY, LAST_PRIORITY, Outcome, PauseRecord, Recorded, RestartPoint, RunRecord,
    SignalRecord, TimerRecord, digest,
};
internal_use!(run_records::{FENCE_STANDS_FOR, FirstFence, RunRecords, SnapshotListing, Vacancy, taken_signals});
internal_use!(ledger::NotedRun);
internal_use!(ledger::created::{hour as listed_in_hour, hours as listed_hours});
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use ledger::{is_listed, noted_ended};
pub use payload::{Payload, is_payload_name, sha256_hex};

use crate::store::StoreError;

/// A journal read or write that failed.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The store failed to read or write the record (see [`StoreError`]).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored record failed its checks or did not decode: it was not
    /// used, and is never treated as missing.
    #[error("corrupt record at {key}: {reason}; the record was not used")]
    Corrupt {
        /// The store key of the record.
        key: String,
        /// What was wrong with it: a bad header, a format version this build
        /// does not read, a checksum that does not match, or a body that does
        /// not decode.
        reason: String,
    },
    /// Every read of a folder of the ledger found an object it had just
    /// listed gone: compactions on other hosts kept moving what it holds.
    /// Nothing is wrong with the store: read again.
    #[error(
        "the ledger's {folder} kept changing while it was read ({reads} listings, each finding an object gone before it was read, compacted by another host); read it again"
    )]
    Unsettled {
        /// The folder, relative to the tenant's prefix.
        folder: String,
        /// How many times it was listed and read.
        reads: usize,
    },
    /// The task running a step ended without a result (it panicked or was
    /// cancelled); nothing was recorded, so the step runs again on replay.
    #[error("a step task ended without recording a result: {0}")]
    TaskFailed(String),
    /// This host's claim on the run no longer holds, so it wrote nothing
    /// more and started no attempt: the run goes on on whichever host
    /// holds the newest claim.
    #[error("this host stood down from run `{run}`, writing nothing and starting no attempt: {why}")]
    StoodDown {
        /// The run this host stood down from.
        run: crate::store::RunId,
        /// Why the claim no longer holds.
        why: crate::cluster::ClaimLost,
    },
}
