//! The errors of the workflow side: [`StepError`], what a step call reports
//! when it fails for good, and [`Error`], what a workflow returns.

use std::fmt;

use serde::Serialize;

use crate::bindings::stepstone::workflow::types as wit;

/// Why a step call failed; mirrors the contract's `step-error-kind`, so a
/// workflow can tell "the step said no" from "the step was stopped".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum StepErrorKind {
    /// The step returned a failure (or, see [`StepError`], returned an output
    /// that does not decode into the type the workflow asked for).
    Failed,
    /// An attempt burnt all its fuel.
    FuelExhausted,
    /// An attempt ran past its wall-clock limit.
    TimedOut,
    /// An attempt tried to grow memory or tables past its limit.
    MemoryLimit,
    /// An attempt trapped: a panic, an `unreachable`, a stack overflow...
    Trapped,
    /// An attempt's output was larger than the host allows.
    OutputTooLarge,
    /// No component linked to the run exports a step of that name.
    UnknownStep,
    /// The run was cancelled while the workflow awaited the step. Steps
    /// called after this still run, so a workflow can compensate.
    Cancelled,
    /// An attempt returned an output that is not JSON text.
    InvalidOutput,
}

impl StepErrorKind {
    /// The contract's name for this kind, e.g. `fuel-exhausted`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Failed => "failed",
            Self::FuelExhausted => "fuel-exhausted",
            Self::TimedOut => "timed-out",
            Self::MemoryLimit => "memory-limit",
            Self::Trapped => "trapped",
            Self::OutputTooLarge => "output-too-large",
            Self::UnknownStep => "unknown-step",
            Self::Cancelled => "cancelled",
            Self::InvalidOutput => "invalid-output",
        }
    }

    fn from_wit(kind: wit::StepErrorKind) -> Self {
        match kind {
            wit::StepErrorKind::Failed => Self::Failed,
            wit::StepErrorKind::FuelExhausted => Self::FuelExhausted,
            wit::StepErrorKind::TimedOut => Self::TimedOut,
            wit::StepErrorKind::MemoryLimit => Self::MemoryLimit,
            wit::StepErrorKind::Trapped => Self::Trapped,
            wit::StepErrorKind::OutputTooLarge => Self::OutputTooLarge,
            wit::StepErrorKind::UnknownStep => Self::UnknownStep,
            wit::StepErrorKind::Cancelled => Self::Cancelled,
            wit::StepErrorKind::InvalidOutput => Self::InvalidOutput,
        }
    }
}

impl fmt::Display for StepErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A step call that failed for good, after its retry policy gave up.
///
/// Besides the host's verdicts, the SDK reports two payload problems as a
/// [`StepErrorKind::Failed`] error, because to the workflow they mean the
/// same thing, "this call gave me nothing usable": an input that cannot be
/// encoded as JSON (the step never ran: 0 attempts), and an output that does
/// not decode into the requested type (counted as 1 attempt, since the host
/// reports attempts only for failed calls).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepError {
    step: String,
    kind: StepErrorKind,
    message: String,
    attempts: u32,
}

impl StepError {
    pub(crate) fn from_wit(step: &str, error: wit::StepError) -> Self {
        Self {
            step: step.to_owned(),
            kind: StepErrorKind::from_wit(error.kind),
            message: error.message,
            attempts: error.attempts,
        }
    }

    pub(crate) fn unencodable_input(step: &str, error: &serde_json::Error) -> Self {
        Self {
            step: step.to_owned(),
            kind: StepErrorKind::Failed,
            message: format!("its input cannot be encoded as JSON: {error}"),
            attempts: 0,
        }
    }

    pub(crate) fn undecodable_output(step: &str, error: &serde_json::Error) -> Self {
        Self {
            step: step.to_owned(),
            kind: StepErrorKind::Failed,
            message: format!("its output does not have the type the workflow expects: {error}"),
            attempts: 1,
        }
    }

    /// The step's name, as the workflow called it.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// Why the call failed.
    pub fn kind(&self) -> StepErrorKind {
        self.kind
    }

    /// The step's failure message, or the host's explanation of a limit.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// How many attempts ran.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.attempts == 1 { "" } else { "s" };
        write!(
            f,
            "step `{}` failed ({}, {} attempt{plural}): {}",
            self.step, self.kind, self.attempts, self.message
        )
    }
}

impl std::error::Error for StepError {}

/// Why a workflow failed; its `Display` text becomes the run's error.
///
/// `?` converts into it from [`StepError`], [`serde_json::Error`], `String`
/// and `&str`, so a workflow can give up with `Err("out of stock".into())`.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A step call failed for good.
    Step(StepError),
    /// A value could not be encoded or decoded as JSON.
    Json(serde_json::Error),
    /// The workflow's own reason.
    Message(String),
}

impl Error {
    /// The failed step call behind this error, if that is what it is.
    pub fn step_error(&self) -> Option<&StepError> {
        match self {
            Self::Step(error) => Some(error),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Step(error) => error.fmt(f),
            Self::Json(error) => write!(f, "invalid JSON: {error}"),
            Self::Message(message) => f.write_str(message),
        }
    }
}

// No `source()`: `Display` already includes the inner error's text, and the
// run's error is that text alone.
impl std::error::Error for Error {}

impl From<StepError> for Error {
    fn from(error: StepError) -> Self {
        Self::Step(error)
    }
}

impl From<serde_json::Error> for Error {
    fn from(error: serde_json::Error) -> Self {
        Self::Json(error)
    }
}

impl From<String> for Error {
    fn from(message: String) -> Self {
        Self::Message(message)
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Self::Message(message.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed_out(attempts: u32) -> StepError {
        StepError::from_wit(
            "charge",
            wit::StepError {
                kind: wit::StepErrorKind::TimedOut,
                message: "attempt ran past 100 ms".to_owned(),
                attempts,
            },
        )
    }

    #[test]
    fn step_error_keeps_what_the_host_reported() {
        let error = timed_out(3);
        assert_eq!(error.step(), "charge");
        assert_eq!(error.kind(), StepErrorKind::TimedOut);
        assert_eq!(error.message(), "attempt ran past 100 ms");
        assert_eq!(error.attempts(), 3);
    }

    #[test]
    fn step_error_displays_step_kind_and_attempts() {
        assert_eq!(
            timed_out(3).to_string(),
            "step `charge` failed (timed-out, 3 attempts): attempt ran past 100 ms"
        );
        assert_eq!(
            timed_out(1).to_string(),
            "step `charge` failed (timed-out, 1 attempt): attempt ran past 100 ms"
        );
    }

    #[test]
    fn every_kind_maps_to_its_contract_name() {
        let kinds = [
            (wit::StepErrorKind::Failed, "failed"),
            (wit::StepErrorKind::FuelExhausted, "fuel-exhausted"),
            (wit::StepErrorKind::TimedOut, "timed-out"),
            (wit::StepErrorKind::MemoryLimit, "memory-limit"),
            (wit::StepErrorKind::Trapped, "trapped"),
            (wit::StepErrorKind::OutputTooLarge, "output-too-large"),
            (wit::StepErrorKind::UnknownStep, "unknown-step"),
            (wit::StepErrorKind::Cancelled, "cancelled"),
            (wit::StepErrorKind::InvalidOutput, "invalid-output"),
        ];
        for (wit_kind, name) in kinds {
            let kind = StepErrorKind::from_wit(wit_kind);
            assert_eq!(kind.as_str(), name);
            assert_eq!(serde_json::to_value(kind).unwrap(), name);
        }
    }

    #[test]
    fn payload_problems_are_failed_calls() {
        let json_error = serde_json::from_str::<u32>("\"x\"").unwrap_err();
        let input = StepError::unencodable_input("quote", &json_error);
        assert_eq!((input.kind(), input.attempts()), (StepErrorKind::Failed, 0));
        let output = StepError::undecodable_output("quote", &json_error);
        assert_eq!((output.kind(), output.attempts()), (StepErrorKind::Failed, 1));
        assert!(output.message().contains("does not have the type"), "{output}");
    }

    #[test]
    fn error_converts_from_what_workflows_meet() {
        let from_step = Error::from(timed_out(2));
        assert_eq!(from_step.step_error(), Some(&timed_out(2)));
        assert_eq!(from_step.to_string(), timed_out(2).to_string());

        let json_error = serde_json::from_str::<u32>("{").unwrap_err();
        let from_json = Error::from(json_error);
        assert!(from_json.to_string().starts_with("invalid JSON: "), "{from_json}");
        assert_eq!(from_json.step_error(), None);

        assert_eq!(Error::from("out of stock").to_string(), "out of stock");
        assert_eq!(Error::from(String::from("denied")).to_string(), "denied");
    }

    #[test]
    fn question_mark_lifts_step_errors() {
        fn workflow() -> Result<(), Error> {
            Err(timed_out(1))?
        }
        assert!(matches!(workflow(), Err(Error::Step(_))));
    }
}
