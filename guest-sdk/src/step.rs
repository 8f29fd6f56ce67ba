//! The step side: the [`Step`] context a step function receives, and the
//! [`StepFailure`] it returns to say it did not succeed.

use std::fmt;

use crate::Level;
use crate::bindings::stepstone::workflow::step_support;
use crate::bindings::stepstone::workflow::types as wit;
use crate::bindings::wasi::config::store;
use crate::log::level_shortcuts;

/// What a running step may ask of the host: which call and attempt this
/// is, its tenant's secrets, and a log. Steps may otherwise do as they
/// please (outgoing HTTP is [`crate::http`]); the host memoizes their
/// output, so they need not be deterministic.
#[derive(Debug)]
pub struct Step {
    // Only the SDK creates contexts, so a step cannot fake one.
    _private: (),
}

impl Step {
    pub(crate) fn new() -> Self {
        Self { _private: () }
    }

    /// Which attempt of this call this is, starting at 1.
    pub fn attempt(&self) -> u32 {
        step_support::attempt()
    }

    /// The run this call belongs to.
    pub fn run_id(&self) -> String {
        step_support::context().run_id
    }

    /// The call's place in its run's journal.
    pub fn seq(&self) -> u64 {
        step_support::context().seq
    }

    /// A key naming this call, the same for each of its attempts on any
    /// host and for no other call of any tenant: pass it to a service as
    /// its `Idempotency-Key`, so a retried request does the work once.
    /// `{tenant}/{run}/{seq}`, or `{tenant}/{run}/{incarnation}/{seq}` for a
    /// run whose id was used before (retention deleted an earlier run of
    /// it): a service never answers it with the earlier run's result.
    pub fn idempotency_key(&self) -> String {
        step_support::context().idempotency_key
    }

    /// A number that only rises as the run passes from host to host, and
    /// from one incarnation of its id to the next: send
    /// it with the idempotency key (say as `Fencing-Token`) to a service
    /// that keeps the highest it saw for each key and refuses a lower one,
    /// so an attempt of a host that lost the run cannot act after the new
    /// owner's.
    pub fn fencing_token(&self) -> u64 {
        step_support::fencing_token()
    }

    /// The tenant's secret `name` (set with `stepstone secret set`), or
    /// `None` when it has none. Never journaled or logged by the host; keep
    /// it out of the step's output and log lines too.
    pub fn secret(&self, name: &str) -> Result<Option<String>, StepFailure> {
        store::get(name).map_err(|e| StepFailure::retryable(format!("reading secret `{name}`: {e:?}")))
    }

    /// Writes to the run's log, attributed to this step.
    pub fn log(&self, level: Level, message: &str) {
        step_support::log(level.to_wit(), message);
    }
}

level_shortcuts!(Step);

/// A step's own failure. A retryable one is retried under the caller's
/// policy; a permanent one is not, whatever the policy says.
///
/// `?` and `.into()` turn a `String` or `&str` into a retryable failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFailure {
    message: String,
    permanent: bool,
}

impl StepFailure {
    /// A failure worth another attempt, e.g. a service that did not answer.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            permanent: false,
        }
    }

    /// A failure that no retry will fix, e.g. an invalid request.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            permanent: true,
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    pub(crate) fn into_wit(self) -> wit::StepFailure {
        wit::StepFailure {
            message: self.message,
            permanent: self.permanent,
        }
    }
}

impl fmt::Display for StepFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StepFailure {}

impl From<String> for StepFailure {
    fn from(message: String) -> Self {
        Self::retryable(message)
    }
}

impl From<&str> for StepFailure {
    fn from(message: &str) -> Self {
        Self::retryable(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_say_whether_to_retry() {
        assert!(!StepFailure::retryable("busy").is_permanent());
        assert!(StepFailure::permanent("no such card").is_permanent());
    }

    #[test]
    fn strings_become_retryable_failures() {
        assert_eq!(StepFailure::from("busy"), StepFailure::retryable("busy"));
        assert_eq!(StepFailure::from(String::from("busy")), StepFailure::retryable("busy"));
    }

    #[test]
    fn failure_reaches_the_host_unchanged() {
        let failure = StepFailure::permanent("no such card").into_wit();
        assert_eq!(failure.message, "no such card");
        assert!(failure.permanent);
    }
}
