//! Checking a finished run against a scenario's expectations: its outcome,
//! its output, and the step calls its journal holds. Each mismatch is one
//! line saying what was expected and what the run did.

use std::collections::BTreeMap;

use serde_json::Value;

use super::scenario::{Expectations, ExpectedStep};
use crate::contract::bindings::StepError;
use crate::journal::Outcome;
use crate::sandbox::kind_name;

/// A step call as the journal holds it, with the input it was made with.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCallRecord {
    /// The run that made it: the scenario's, or a later generation of it.
    pub run: String,
    /// The call's place in its run's journal.
    pub seq: u64,
    /// The step called, by name.
    pub step: String,
    /// `None` when no attempt was made (the step is unknown).
    pub input: Option<Value>,
    /// How many attempts the call took, retries included.
    pub attempts: u32,
    /// The call's output as a JSON string, or the error it failed with after its retries.
    pub result: Result<String, StepError>,
}

/// Every way `outcome`, `steps` and `streams` (each stream's values, as
/// JSON text) fall short of `expect`.
pub fn mismatches(
    expect: &Expectations,
    outcome: &Outcome,
    steps: &[StepCallRecord],
    streams: &BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    let mut found = Vec::new();
    check_outcome(expect, outcome, &mut found);
    if let Some(expected) = &expect.steps {
        check_steps(expected, steps, &mut found);
    }
    for (name, expected) in expect.streams.iter().flatten() {
        let got: Vec<Value> = streams
            .get(name)
            .into_iter()
            .flatten()
            .map(|value| serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.clone())))
            .collect();
        if got != *expected {
            found.push(format!(
                "expected stream `{name}` to hold {}, got {}",
                Value::Array(expected.clone()),
                Value::Array(got)
            ));
        }
    }
    found
}

fn check_outcome(expect: &Expectations, outcome: &Outcome, found: &mut Vec<String>) {
    let (state, output, error) = match outcome {
        // Read back already, if it was stored apart (see `Review::finished`).
        Outcome::Completed { output } => ("completed", output.inline(), None),
        Outcome::Failed { kind, message } => ("failed", None, Some((Some(kind.as_str()), message.as_str()))),
        Outcome::Cancelled { reason } => ("cancelled", None, Some((None, reason.as_str()))),
        Outcome::Continued { .. } => ("continued", None, None),
    };
    let ended = describe(outcome);
    if let Some(expected) = expect.outcome.as_deref().filter(|expected| *expected != state) {
        found.push(format!("expected the run to end {expected}, but it {ended}"));
    }
    let wants_output = expect.output.is_some() || expect.output_contains.is_some();
    match (wants_output, output.map(serde_json::from_str::<Value>)) {
        (false, _) => {}
        (true, None) => found.push(format!("expected an output, but the run {ended}")),
        (true, Some(Err(e))) => found.push(format!("the run's output is not JSON ({e})")),
        (true, Some(Ok(output))) => {
            if let Some(expected) = expect.output.as_ref().filter(|expected| **expected != output) {
                found.push(format!("expected the output {expected}, got {output}"));
            }
            if let Some(expected) = expect
                .output_contains
                .as_ref()
                .filter(|expected| !contains(&output, expected))
            {
                found.push(format!("expected the output to contain {expected}, got {output}"));
            }
        }
    }
    let wants_error = expect.error_kind.is_some() || expect.error_contains.is_some();
    match error {
        None if wants_error => found.push(format!("expected the run to fail, but it {ended}")),
        None => {}
        Some((kind, message)) => {
            if let Some(expected) = expect.error_kind.as_deref().filter(|expected| Some(*expected) != kind) {
                found.push(format!("expected a failure of kind `{expected}`, but the run {ended}"));
            }
            if let Some(expected) = expect.error_contains.as_deref().filter(|text| !message.contains(text)) {
                found.push(format!(
                    "expected the failure to say \"{expected}\", but the run {ended}"
                ));
            }
        }
    }
}

fn check_steps(expected: &[ExpectedStep], steps: &[StepCallRecord], found: &mut Vec<String>) {
    if expected.len() != steps.len() {
        let names = |names: Vec<&str>| format!("[{}]", names.join(", "));
        found.push(format!(
            "expected {} step calls {}, the journal has {} {}",
            expected.len(),
            names(expected.iter().map(|step| step.step.as_str()).collect()),
            steps.len(),
            names(steps.iter().map(|step| step.step.as_str()).collect()),
        ));
    }
    for (index, (expected, call)) in expected.iter().zip(steps).enumerate() {
        let at = format!("step call {} (seq {} of run {})", index + 1, call.seq, call.run);
        if expected.step != call.step {
            found.push(format!(
                "{at}: expected step `{}`, the run called `{}`",
                expected.step, call.step
            ));
            continue;
        }
        if let Some(input) = expected
            .input
            .as_ref()
            .filter(|input| call.input.as_ref() != Some(*input))
        {
            let got = call
                .input
                .as_ref()
                .map_or_else(|| "no attempt".to_owned(), Value::to_string);
            found.push(format!("{at}: expected `{}` with input {input}, got {got}", call.step));
        }
        if let Some(attempts) = expected.attempts.filter(|attempts| *attempts != call.attempts) {
            found.push(format!(
                "{at}: expected `{}` to take {attempts} attempts, it took {}",
                call.step, call.attempts
            ));
        }
        check_step_result(expected, call, &at, found);
    }
}

fn check_step_result(expected: &ExpectedStep, call: &StepCallRecord, at: &str, found: &mut Vec<String>) {
    let step = &call.step;
    match (&call.result, &expected.output, &expected.error_kind) {
        (Ok(output), Some(expected), _) => match serde_json::from_str::<Value>(output) {
            Ok(output) if output == *expected => {}
            _ => found.push(format!(
                "{at}: expected `{step}` to return {expected}, it returned {output}"
            )),
        },
        (Err(error), Some(expected), _) => found.push(format!(
            "{at}: expected `{step}` to return {expected}, it failed ({}): {}",
            kind_name(error.kind),
            error.message
        )),
        (Ok(output), None, Some(kind)) => found.push(format!(
            "{at}: expected `{step}` to fail ({kind}), it returned {output}"
        )),
        (Err(error), None, Some(kind)) if kind_name(error.kind) != kind => found.push(format!(
            "{at}: expected `{step}` to fail ({kind}), it failed ({}): {}",
            kind_name(error.kind),
            error.message
        )),
        _ => {}
    }
}

/// Whether `actual` has every member `expected` has, at any depth (arrays
/// and other values must be equal).
pub fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(actual), Value::Object(expected)) => expected
            .iter()
            .all(|(key, value)| actual.get(key).is_some_and(|actual| contains(actual, value))),
        _ => actual == expected,
    }
}

/// How a run ended, in words.
pub fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Completed { output } => format!("completed with {output}"),
        Outcome::Failed { kind, message } => format!("failed ({kind}): {message}"),
        Outcome::Cancelled { reason } => format!("was cancelled: {reason}"),
        Outcome::Continued { next } => format!("continued as {next}"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::contract::bindings::StepErrorKind;

    fn call(step: &str, input: Value, attempts: u32, result: Result<&str, StepErrorKind>) -> StepCallRecord {
        StepCallRecord {
            run: "r".into(),
            seq: 0,
            step: step.into(),
            input: Some(input),
            attempts,
            result: result.map(str::to_owned).map_err(|kind| StepError {
                kind,
                message: "no".into(),
                attempts,
            }),
        }
    }

    fn completed(output: &str) -> Outcome {
        Outcome::Completed { output: output.into() }
    }

    #[test]
    fn a_run_as_expected_has_no_mismatch() {
        let expect = Expectations {
            outcome: Some("completed".into()),
            output: Some(json!({"a": 1, "b": [1, 2]})),
            output_contains: Some(json!({"b": [1, 2]})),
            steps: Some(vec![ExpectedStep {
                step: "s".into(),
                input: Some(json!({"x": 1})),
                attempts: Some(2),
                output: Some(json!(true)),
                error_kind: None,
            }]),
            ..Expectations::default()
        };
        let steps = [call("s", json!({"x": 1}), 2, Ok("true"))];
        assert_eq!(
            mismatches(&expect, &completed(r#"{"b":[1,2],"a":1}"#), &steps, &BTreeMap::new()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn each_difference_is_named() {
        let expect = Expectations {
            outcome: Some("failed".into()),
            output_contains: Some(json!({"a": {"deep": 2}})),
            error_contains: Some("boom".into()),
            steps: Some(vec![
                ExpectedStep {
                    step: "s".into(),
                    input: Some(json!({"x": 2})),
                    attempts: Some(1),
                    error_kind: Some("timed-out".into()),
                    ..ExpectedStep::default()
                },
                ExpectedStep {
                    step: "t".into(),
                    ..ExpectedStep::default()
                },
            ]),
            ..Expectations::default()
        };
        let steps = [call("s", json!({"x": 1}), 3, Err(StepErrorKind::Failed))];
        let found = mismatches(&expect, &completed(r#"{"a":{"deep":1}}"#), &steps, &BTreeMap::new());
        let said = found.join("\n");
        for expected in [
            "expected the run to end failed, but it completed with",
            "expected the output to contain {\"a\":{\"deep\":2}}",
            "expected the run to fail, but it completed",
            "expected 2 step calls [s, t], the journal has 1 [s]",
            "expected `s` with input {\"x\":2}, got {\"x\":1}",
            "expected `s` to take 1 attempts, it took 3",
            "expected `s` to fail (timed-out), it failed (failed): no",
        ] {
            assert!(said.contains(expected), "missing {expected:?} in:\n{said}");
        }
        assert_eq!(found.len(), 7, "{said}");
    }

    #[test]
    fn containment_follows_objects_and_compares_the_rest_whole() {
        assert!(contains(
            &json!({"a": {"b": 1, "c": 2}, "d": 3}),
            &json!({"a": {"b": 1}})
        ));
        assert!(!contains(&json!({"a": [1, 2]}), &json!({"a": [1]})));
        assert!(!contains(&json!({"a": 1}), &json!({"b": null})));
        assert!(contains(&json!(null), &json!(null)));
    }

    #[test]
    fn a_cancellation_reason_is_what_error_contains_reads() {
        let expect = Expectations {
            outcome: Some("cancelled".into()),
            error_contains: Some("by the test".into()),
            error_kind: Some("workflow-error".into()),
            ..Expectations::default()
        };
        let cancelled = Outcome::Cancelled {
            reason: "cancelled by the test".into(),
        };
        let found = mismatches(&expect, &cancelled, &[], &BTreeMap::new());
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("expected a failure of kind `workflow-error`"));
    }

    #[test]
    fn each_expected_stream_must_hold_exactly_its_values_in_order() {
        let expect = Expectations {
            streams: Some(BTreeMap::from([
                ("progress".to_owned(), vec![json!({"done": 1}), json!({"done": 2})]),
                ("tokens".to_owned(), vec![json!("hi")]),
                ("none".to_owned(), vec![]),
            ])),
            ..Expectations::default()
        };
        let streamed = |progress: &[&str]| {
            BTreeMap::from([
                ("progress".to_owned(), progress.iter().map(|v| v.to_string()).collect()),
                ("tokens".to_owned(), vec!["\"hi\"".to_owned()]),
            ])
        };
        let outcome = completed("null");
        let held = streamed(&[r#"{"done": 1}"#, r#"{"done":2}"#]);
        assert_eq!(mismatches(&expect, &outcome, &[], &held), Vec::<String>::new());
        let found = mismatches(&expect, &outcome, &[], &streamed(&[r#"{"done":2}"#, r#"{"done":1}"#]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .contains(r#"expected stream `progress` to hold [{"done":1},{"done":2}], got [{"done":2},{"done":1}]"#),
            "{found:?}"
        );
        let found = mismatches(&expect, &outcome, &[], &BTreeMap::new());
        assert!(
            found.iter().any(|f| f.contains("`tokens` to hold [\"hi\"], got []")),
            "{found:?}"
        );
    }
}
