//! Routes the component's exports to the user's functions: the
//! [`export!`](crate::export) macro, the name-to-function tables it builds,
//! and the JSON decoding and encoding around each call.
//!
//! Public only because `export!` expands in the user's crate; nothing here
//! is meant to be called by hand.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::bindings::stepstone::workflow::types as wit;
use crate::panic_log::route_panics_to;
use crate::{Error, Level, Step, StepFailure, Workflow};

/// A workflow behind its JSON boundary: input payload in, output payload or
/// the run's error text out.
pub type WorkflowFn = fn(&Workflow, &str) -> Result<String, String>;

/// A step behind its JSON boundary.
pub type StepFn = fn(&Step, &str) -> Result<String, StepFailure>;

/// The functions a component exports under one interface, by name.
pub struct Exports<F: 'static> {
    /// What the functions are, for messages: "workflow" or "step".
    kind: &'static str,
    entries: &'static [(&'static str, F)],
}

impl<F> Exports<F> {
    pub const fn new(kind: &'static str, entries: &'static [(&'static str, F)]) -> Self {
        Self { kind, entries }
    }

    fn names(&self) -> Vec<String> {
        self.entries.iter().map(|(name, _)| (*name).to_owned()).collect()
    }
}

impl<F: Copy> Exports<F> {
    fn find(&self, name: &str) -> Result<F, String> {
        match self.entries.iter().find(|(exported, _)| *exported == name) {
            Some((_, function)) => Ok(*function),
            None => Err(self.unknown(name)),
        }
    }

    fn unknown(&self, name: &str) -> String {
        let kind = self.kind;
        if self.entries.is_empty() {
            return format!("unknown {kind} `{name}`: this component exports no {kind}s");
        }
        let known: Vec<_> = self.entries.iter().map(|(known, _)| format!("`{known}`")).collect();
        format!(
            "unknown {kind} `{name}`: this component exports the {kind}s {}",
            known.join(", ")
        )
    }
}

/// The `describe` export.
pub fn describe(workflows: &Exports<WorkflowFn>, steps: &Exports<StepFn>) -> wit::Manifest {
    wit::Manifest {
        workflows: workflows.names(),
        steps: steps.names(),
    }
}

/// The `workflow.run` export.
pub fn run_workflow(workflows: &Exports<WorkflowFn>, name: &str, input: &str) -> Result<String, String> {
    let workflow = workflows.find(name)?;
    workflow(&Workflow::new(), input)
}

/// The `step.run-step` export. An unknown name fails permanently: no retry
/// will make it exist.
pub fn run_step(steps: &Exports<StepFn>, name: &str, input: &str) -> Result<String, wit::StepFailure> {
    let step = steps
        .find(name)
        .map_err(|message| StepFailure::permanent(message).into_wit())?;
    step(&Step::new(), input).map_err(StepFailure::into_wit)
}

/// Calls a typed workflow on a JSON payload: becomes a [`WorkflowFn`] in the
/// table `export!` builds.
pub fn call_workflow<I, O, E>(
    ctx: &Workflow,
    name: &str,
    input: &str,
    workflow: impl FnOnce(&Workflow, I) -> Result<O, E>,
) -> Result<String, String>
where
    I: DeserializeOwned,
    O: Serialize,
    E: Into<Error>,
{
    let input = serde_json::from_str(input)
        .map_err(|error| format!("the input of workflow `{name}` does not have the type it expects: {error}"))?;
    // Set here, not in `run_workflow`, so that only components with
    // workflows reference (and so import) the workflow's log.
    route_panics_to(|message| Workflow::new().log(Level::Error, message));
    let output = workflow(ctx, input).map_err(|error| error.into().to_string())?;
    serde_json::to_string(&output)
        .map_err(|error| format!("the output of workflow `{name}` cannot be encoded as JSON: {error}"))
}

/// Calls a typed step on a JSON payload: becomes a [`StepFn`] in the table
/// `export!` builds. Payloads that do not fit fail permanently, since
/// running the same code on the same payload again would fail the same way.
pub fn call_step<I, O, E>(
    ctx: &Step,
    name: &str,
    input: &str,
    step: impl FnOnce(&Step, I) -> Result<O, E>,
) -> Result<String, StepFailure>
where
    I: DeserializeOwned,
    O: Serialize,
    E: Into<StepFailure>,
{
    let input = serde_json::from_str(input).map_err(|error| {
        StepFailure::permanent(format!(
            "the input of step `{name}` does not have the type it expects: {error}"
        ))
    })?;
    // As in `call_workflow`: only components with steps import their log.
    route_panics_to(|message| Step::new().log(Level::Error, message));
    let output = step(ctx, input).map_err(Into::into)?;
    serde_json::to_string(&output).map_err(|error| {
        StepFailure::permanent(format!(
            "the output of step `{name}` cannot be encoded as JSON: {error}"
        ))
    })
}

/// Exports workflows and steps, each under a name, from this component.
///
/// ```
/// use stepstone_guest::{export, Error, Step, StepFailure, Workflow};
///
/// fn greet(ctx: &Workflow, name: String) -> Result<String, Error> {
///     Ok(ctx.step("shout", &name)?)
/// }
///
/// fn shout(_ctx: &Step, text: String) -> Result<String, StepFailure> {
///     Ok(text.to_uppercase())
/// }
///
/// export! {
///     workflows: { "greet" => greet },
///     steps: { "shout" => shout },
/// }
/// # fn main() {}
/// ```
///
/// A workflow is a `fn(&Workflow, I) -> Result<O, E>` and a step a
/// `fn(&Step, I) -> Result<O, E>`, where `I` is any deserializable type, `O`
/// any serializable one, and `E` converts into [`Error`] or [`StepFailure`].
/// Either section may be left out, so a steps-only component reads:
///
/// ```
/// # use stepstone_guest::{export, Step, StepFailure};
/// # fn shout(_ctx: &Step, text: String) -> Result<String, StepFailure> { Ok(text) }
/// export! {
///     steps: { "shout" => shout },
/// }
/// # fn main() {}
/// ```
///
/// Use it once per component. The component always exports all three
/// interfaces (`describe`, `workflow`, `step`); an unknown name gets an
/// error that lists the known ones, and so does `run` on a component that
/// exports no workflows. A component whose workflows are never called does
/// not import `durable` at all, since unused imports are dropped when the
/// module becomes a component.
#[macro_export]
macro_rules! export {
    (
        $( workflows: { $( $workflow:literal => $workflow_fn:path ),* $(,)? } $(,)? )?
        $( steps: { $( $step:literal => $step_fn:path ),* $(,)? } $(,)? )?
    ) => {
        const _: () = {
            const WORKFLOWS: $crate::dispatch::Exports<$crate::dispatch::WorkflowFn> =
                $crate::dispatch::Exports::new("workflow", &[$($((
                    $workflow,
                    |ctx: &$crate::Workflow, input: &str| {
                        $crate::dispatch::call_workflow(ctx, $workflow, input, $workflow_fn)
                    },
                ),)*)?]);

            const STEPS: $crate::dispatch::Exports<$crate::dispatch::StepFn> =
                $crate::dispatch::Exports::new("step", &[$($((
                    $step,
                    |ctx: &$crate::Step, input: &str| {
                        $crate::dispatch::call_step(ctx, $step, input, $step_fn)
                    },
                ),)*)?]);

            struct Component;

            impl $crate::bindings::exports::stepstone::workflow::describe::Guest for Component {
                fn describe() -> $crate::bindings::stepstone::workflow::types::Manifest {
                    $crate::dispatch::describe(&WORKFLOWS, &STEPS)
                }
            }

            impl $crate::bindings::exports::stepstone::workflow::workflow::Guest for Component {
                fn run(name: String, input: String) -> Result<String, String> {
                    $crate::dispatch::run_workflow(&WORKFLOWS, &name, &input)
                }
            }

            impl $crate::bindings::exports::stepstone::workflow::step::Guest for Component {
                fn run_step(
                    name: String,
                    input: String,
                ) -> Result<String, $crate::bindings::stepstone::workflow::types::StepFailure> {
                    $crate::dispatch::run_step(&STEPS, &name, &input)
                }
            }

            $crate::bindings::export_bindings!(Component with_types_in $crate::bindings);
        };
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn double(_ctx: &Workflow, n: i64) -> Result<i64, Error> {
        Ok(2 * n)
    }

    fn refuse(_ctx: &Workflow, _input: serde_json::Value) -> Result<(), Error> {
        Err("no, thank you".into())
    }

    fn halve(_ctx: &Step, n: i64) -> Result<i64, StepFailure> {
        if n % 2 == 0 {
            Ok(n / 2)
        } else {
            Err(format!("{n} is odd").into())
        }
    }

    const WORKFLOWS: Exports<WorkflowFn> = Exports::new(
        "workflow",
        &[
            ("double", |ctx: &Workflow, input: &str| {
                call_workflow(ctx, "double", input, double)
            }),
            ("refuse", |ctx: &Workflow, input: &str| {
                call_workflow(ctx, "refuse", input, refuse)
            }),
        ],
    );

    const STEPS: Exports<StepFn> = Exports::new(
        "step",
        &[("halve", |ctx: &Step, input: &str| call_step(ctx, "halve", input, halve))],
    );

    const NO_STEPS: Exports<StepFn> = Exports::new("step", &[]);

    #[test]
    fn describe_lists_every_name() {
        let manifest = describe(&WORKFLOWS, &STEPS);
        assert_eq!(manifest.workflows, ["double", "refuse"]);
        assert_eq!(manifest.steps, ["halve"]);
    }

    #[test]
    fn workflows_run_on_json() {
        assert_eq!(run_workflow(&WORKFLOWS, "double", "21"), Ok("42".to_owned()));
        assert_eq!(
            run_workflow(&WORKFLOWS, "refuse", "null"),
            Err("no, thank you".to_owned())
        );
    }

    #[test]
    fn unknown_workflow_names_the_known_ones() {
        assert_eq!(
            run_workflow(&WORKFLOWS, "triple", "1"),
            Err("unknown workflow `triple`: this component exports the workflows `double`, `refuse`".to_owned())
        );
    }

    #[test]
    fn workflow_input_of_the_wrong_type_is_reported() {
        let error = run_workflow(&WORKFLOWS, "double", "\"two\"").unwrap_err();
        assert!(
            error.starts_with("the input of workflow `double` does not have the type it expects"),
            "{error}"
        );
    }

    #[test]
    fn steps_run_on_json_and_keep_their_retry_verdict() {
        assert_eq!(run_step(&STEPS, "halve", "8").ok(), Some("4".to_owned()));
        let odd = run_step(&STEPS, "halve", "3").unwrap_err();
        assert_eq!((odd.message.as_str(), odd.permanent), ("3 is odd", false));
    }

    #[test]
    fn step_input_of_the_wrong_type_fails_permanently() {
        let failure = run_step(&STEPS, "halve", "[1]").unwrap_err();
        assert!(failure.permanent);
        assert!(
            failure
                .message
                .starts_with("the input of step `halve` does not have the type"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn unknown_step_fails_permanently() {
        let failure = run_step(&STEPS, "quarter", "8").unwrap_err();
        assert!(failure.permanent);
        assert_eq!(
            failure.message,
            "unknown step `quarter`: this component exports the steps `halve`"
        );
        let failure = run_step(&NO_STEPS, "halve", "8").unwrap_err();
        assert_eq!(failure.message, "unknown step `halve`: this component exports no steps");
    }
}
