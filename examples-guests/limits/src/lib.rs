//! Guests that misbehave on purpose, for the host's sandbox tests: steps
//! that burn fuel, memory and time or panic, a workflow that never yields,
//! and a workflow that shows the typed error a limited step call returns.
//!
//! Every loop feeds its state through `black_box`, so the optimiser can
//! neither delete it nor compute its result ahead of time.

use std::hint::black_box;
use std::time::Duration;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stepstone_guest::{Error, Step, StepErrorKind, StepFailure, StepOptions, Workflow, export};

/// Loops forever: stopped by running out of fuel (or time).
fn spin(_ctx: &Step, _input: IgnoredAny) -> Result<(), StepFailure> {
    spin_forever()
}

/// Allocates and touches 1 MiB after 1 MiB, never freeing: stopped by the
/// memory limit.
fn hog(_ctx: &Step, _input: IgnoredAny) -> Result<(), StepFailure> {
    const CHUNK: usize = 1 << 20;
    let mut chunks = Vec::new();
    loop {
        // `vec![1; ..]` writes every byte, so the pages are really used.
        chunks.push(black_box(vec![1_u8; CHUNK]));
        black_box(&chunks);
    }
}

#[derive(Deserialize)]
struct Busy {
    ms: u64,
}

/// Iterations of `slow`'s loop per millisecond, measured under wasmtime with
/// fuel metering on one core of a current x86-64 machine. Only a rough size:
/// a test must leave ample margin either way.
const ITERATIONS_PER_MS: u64 = 800_000;

/// Busy for about `ms` milliseconds of pure arithmetic, reading no clock:
/// with ample fuel and a shorter timeout it is stopped by the timeout.
fn slow(_ctx: &Step, busy: Busy) -> Result<u64, StepFailure> {
    let mut state = 0_u64;
    for i in 0..busy.ms.saturating_mul(ITERATIONS_PER_MS) {
        state = black_box(state.wrapping_mul(31).wrapping_add(i));
    }
    Ok(state)
}

/// Panics, which traps: reported as `trapped`.
fn boom(_ctx: &Step, _input: IgnoredAny) -> Result<(), StepFailure> {
    panic!("boom: this step panics on purpose");
}

/// Loops forever without a durable call, so only the host's limits on the
/// workflow itself can stop it.
#[derive(Deserialize)]
struct Size {
    bytes: usize,
}

/// Returns a string of `bytes` characters: past the host's output limit,
/// the call fails with `output-too-large`.
fn big(_ctx: &Step, size: Size) -> Result<String, StepFailure> {
    Ok("x".repeat(size.bytes))
}

fn spin_workflow(_ctx: &Workflow, _input: IgnoredAny) -> Result<(), Error> {
    spin_forever()
}

fn spin_forever() -> ! {
    let mut counter = 0_u64;
    loop {
        counter = black_box(counter.wrapping_add(1));
    }
}

#[derive(Deserialize)]
struct LimitedCall {
    step: String,
    #[serde(default)]
    input: Value,
    #[serde(default)]
    options: Limits,
}

/// The subset of step options the limit tests vary.
#[derive(Deserialize, Default)]
struct Limits {
    fuel: Option<u64>,
    timeout_ms: Option<u64>,
    max_attempts: Option<u32>,
}

impl Limits {
    fn to_step_options(&self) -> StepOptions {
        let mut options = StepOptions::new();
        if let Some(fuel) = self.fuel {
            options = options.fuel(fuel);
        }
        if let Some(timeout_ms) = self.timeout_ms {
            options = options.timeout(Duration::from_millis(timeout_ms));
        }
        if let Some(attempts) = self.max_attempts {
            options = options.max_attempts(attempts);
        }
        options
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum CallOutcome {
    Output {
        output: Value,
    },
    Failed {
        error_kind: StepErrorKind,
        message: String,
        attempts: u32,
    },
}

/// `{"step": "spin", "options": {"fuel": 1000}}` →
/// `{"error_kind": "fuel-exhausted", "message": "...", "attempts": 1}`, or
/// `{"output": ...}` if the step succeeded: the run succeeds either way, so
/// a test reads the typed error the workflow saw.
fn call_limited(ctx: &Workflow, call: LimitedCall) -> Result<CallOutcome, Error> {
    let options = call.options.to_step_options();
    Ok(match ctx.step_with(&call.step, &call.input, options) {
        Ok(output) => CallOutcome::Output { output },
        Err(error) => CallOutcome::Failed {
            error_kind: error.kind(),
            message: error.message().to_owned(),
            attempts: error.attempts(),
        },
    })
}

export! {
    workflows: {
        "spin-workflow" => spin_workflow,
        "call-limited" => call_limited,
    },
    steps: {
        "spin" => spin,
        "hog" => hog,
        "slow" => slow,
        "boom" => boom,
        "big" => big,
    },
}
