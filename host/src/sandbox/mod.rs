//! The sandbox: how guest code is confined. It owns the wasmtime engines (one
//! per role), the resource limits every store carries, the classification of
//! a stopped guest into a typed error, and running one step attempt.
//!
//! Invariant: no guest, whatever it does, can crash or hang the host. Every
//! store built here has fuel, a [`Deadline`] enforced in guest code and
//! around host calls, and a memory limiter, and every way a guest can stop
//! maps to a [`StepErrorKind`].

mod attempt;
mod deadline;
mod describe;
mod engine;
mod limiter;
mod link;
mod outbound;
pub mod policy;
mod scratch;
mod scratch_budget;
mod slots;
mod wasi;

pub use attempt::{
    AttemptFailure, AttemptReport, Reach, Serving, StepProgram, StepState, checked_output, idempotency_key, run_attempt,
};
pub use deadline::{Deadline, instant_after};
pub use describe::describe;
pub use engine::{Engines, Role};
pub use limiter::{MemoryGuard, Sandboxed, classify, kind_name, new_store};
pub use link::link;
pub use outbound::HttpUsage;
pub use scratch_budget::{ENTRY_BYTES, NEW_PLACE_BYTES, ScratchBudget};
pub use slots::Slot;
pub use wasi::{Guest, GuestWasi, JournalClock, SCRATCH_GUEST_PATH, Stdio};

pub use crate::contract::bindings::StepErrorKind;

/// Why the sandbox itself could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// wasmtime refused the engine configuration the host's settings make.
    #[error("cannot configure the {role} engine: {reason}")]
    Engine {
        /// The role whose engine could not be built.
        role: Role,
        /// wasmtime's error, with its causes.
        reason: String,
    },
    /// The thread that advances the epochs could not be spawned; holds the
    /// OS error.
    #[error("cannot start the epoch thread that enforces wall-clock limits: {0}")]
    Ticker(String),
}
