//! Guests that misbehave on purpose, for the host's sandbox tests: each
//! attack exists as a step and as a workflow (`<attack>-workflow`), plus
//! `slow` (arithmetic for a given time), `marked` (logs each attempt's
//! start, then is slow), `call-limited`, a workflow that reports the typed
//! error a limited step call returned, `fork-bomb`, a workflow that starts
//! two children of itself, `start-then-wait`, which starts a step and
//! waits for a signal before awaiting it, `marked-in-turn`, which runs
//! `marked` steps one after another, `patch-ids`, which asks `patched`
//! about the change ids it is given, and `stream-hostile`, which floods a
//! stream or appends what the host must refuse.
//!
//! Every loop feeds its state through `black_box`, so the optimiser can
//! neither delete it nor compute its result ahead of time.

use std::hint::black_box;
use std::time::Duration;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stepstone_guest::{Error, Level, Step, StepErrorKind, StepFailure, StepOptions, Workflow, export};
use stepstone_guest::bindings::stepstone::workflow::durable;

/// Loops forever: stopped by running out of fuel (or time).
fn spin(_ctx: &Step, _input: IgnoredAny) -> Result<(), StepFailure> {
    spin_forever()
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

/// Allocates and touches 1 MiB after 1 MiB, never freeing: stopped by the
/// memory limit.
fn hog(_ctx: &Step, _input: IgnoredAny) -> Result<(), StepFailure> {
    hog_forever()
}

fn hog_workflow(_ctx: &Workflow, _input: IgnoredAny) -> Result<(), Error> {
    hog_forever()
}

fn hog_forever() -> ! {
    const CHUNK: usize = 1 << 20;
    let mut chunks = Vec::new();
    loop {
        // `vec![1; ..]` writes every byte, so the pages are really used.
        chunks.push(black_box(vec![1_u8; CHUNK]));
        black_box(&chunks);
    }
}

/// Recurses without end: stopped by the host's wasm stack limit.
fn recurse(_ctx: &Step, _input: IgnoredAny) -> Result<u64, StepFailure> {
    Ok(depth(0))
}

fn recurse_workflow(_ctx: &Workflow, _input: IgnoredAny) -> Result<u64, Error> {
    Ok(depth(0))
}

/// Not a tail call (the result is used after the call returns) and a frame
/// with a buffer in it, so each level takes stack.
fn depth(level: u64) -> u64 {
    let mut frame = [0_u8; 64];
    frame[0] = level as u8;
    black_box(&mut frame);
    // Never true, but the compiler cannot know: no "cannot return" lint.
    if black_box(level) == u64::MAX {
        return level;
    }
    depth(black_box(level + 1)).wrapping_add(u64::from(frame[0]))
}

/// Panics, which traps: reported as `trapped`.
fn boom(_ctx: &Step, _input: IgnoredAny) -> Result<(), StepFailure> {
    panic!("boom: this step panics on purpose");
}

fn boom_workflow(_ctx: &Workflow, _input: IgnoredAny) -> Result<(), Error> {
    panic!("boom: this workflow panics on purpose");
}

#[derive(Deserialize)]
struct Size {
    bytes: usize,
}

/// Returns a string of `bytes` characters: past the host's output limit,
/// the call fails with `output-too-large`.
fn big(_ctx: &Step, size: Size) -> Result<String, StepFailure> {
    Ok("x".repeat(size.bytes))
}

fn big_workflow(_ctx: &Workflow, size: Size) -> Result<String, Error> {
    Ok("x".repeat(size.bytes))
}

#[derive(Deserialize)]
struct Flood {
    lines: u64,
    bytes: usize,
}

/// Writes `lines` log lines of `bytes` bytes each and returns how many it
/// wrote: the host keeps the run's allowance and drops the rest.
fn log_flood(ctx: &Step, flood: Flood) -> Result<u64, StepFailure> {
    Ok(flood_with(&flood, |line| ctx.log(Level::Info, line)))
}

fn log_flood_workflow(ctx: &Workflow, flood: Flood) -> Result<u64, Error> {
    Ok(flood_with(&flood, |line| ctx.log(Level::Info, line)))
}

fn flood_with(flood: &Flood, log: impl Fn(&str)) -> u64 {
    let line = "flood ".repeat(flood.bytes.div_ceil(6))[..flood.bytes].to_owned();
    for _ in 0..flood.lines {
        log(black_box(&line));
    }
    flood.lines
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

#[derive(Deserialize)]
struct LimitedCall {
    step: String,
    #[serde(default)]
    input: Value,
    #[serde(default)]
    options: Limits,
}

/// The step options the limit tests vary.
#[derive(Deserialize, Default)]
struct Limits {
    fuel: Option<u64>,
    timeout_ms: Option<u64>,
    max_attempts: Option<u32>,
    initial_backoff_ms: Option<u64>,
    backoff_rate: Option<f64>,
    max_backoff_ms: Option<u64>,
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
        if let Some(initial) = self.initial_backoff_ms {
            options = options.initial_backoff(Duration::from_millis(initial));
        }
        if let Some(rate) = self.backoff_rate {
            options = options.backoff_rate(rate);
        }
        if let Some(max) = self.max_backoff_ms {
            options = options.max_backoff(Duration::from_millis(max));
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

#[derive(Deserialize, Serialize)]
struct Marked {
    key: String,
    ms: u64,
}

/// Logs `marked-start {key} attempt {n}` as it starts, then is busy for
/// about `ms`: a test counts how often an attempt started.
fn marked(ctx: &Step, marked: Marked) -> Result<String, StepFailure> {
    ctx.log(Level::Info, &format!("marked-start {} attempt {}", marked.key, ctx.attempt()));
    slow(ctx, Busy { ms: marked.ms })?;
    Ok(marked.key)
}

#[derive(Deserialize, Default)]
struct Fork {
    /// Wait this long for a signal `release` after starting the children,
    /// so the whole tree stays alive (0: join them at once).
    #[serde(default)]
    hold_ms: u64,
}

/// Starts two children of itself, then joins them: without limits, a tree
/// that doubles with every level.
fn fork_bomb(ctx: &Workflow, fork: Fork) -> Result<u64, Error> {
    let input = json!({"hold_ms": fork.hold_ms});
    let left = ctx.start_child::<_, u64>("fork-bomb", &input, None)?;
    let right = ctx.start_child::<_, u64>("fork-bomb", &input, None)?;
    if fork.hold_ms > 0 {
        ctx.signal::<Value>("release", Duration::from_millis(fork.hold_ms))?;
    }
    Ok(1 + left.join()? + right.join()?)
}

#[derive(Deserialize)]
struct StartThenWait {
    key: String,
    step_ms: u64,
    signal_timeout_ms: u64,
}

/// Starts `marked`, waits for signal `go` (long enough to be evicted), then
/// awaits the step: it must have run once, whatever the eviction did.
#[derive(Deserialize)]
struct InTurn {
    key: String,
    count: u32,
    ms: u64,
}

/// Runs `marked` for `{key}-0` to `{key}-{count - 1}`, one after another,
/// and returns their keys.
fn marked_in_turn(ctx: &Workflow, turn: InTurn) -> Result<Vec<String>, Error> {
    (0..turn.count)
        .map(|n| {
            let marked = Marked {
                key: format!("{}-{n}", turn.key),
                ms: turn.ms,
            };
            Ok(ctx.step::<_, String>("marked", &marked)?)
        })
        .collect()
}

fn start_then_wait(ctx: &Workflow, wait: StartThenWait) -> Result<Value, Error> {
    let step = ctx.start::<_, String>("marked", &Marked { key: wait.key, ms: wait.step_ms })?;
    let signal = ctx.signal::<Value>("go", Duration::from_millis(wait.signal_timeout_ms))?;
    let mut results = ctx.all(vec![step]);
    let step = results.remove(0)?;
    Ok(json!({"step": step, "signal": signal}))
}

#[derive(Deserialize)]
struct Changes {
    ids: Vec<String>,
}

/// Asks `patched` about each of `ids` in turn, then about the first again,
/// and returns the answers: ids that are empty, too long or too many are
/// the host's to refuse.
fn patch_ids(ctx: &Workflow, changes: Changes) -> Result<Vec<bool>, Error> {
    let mut answers: Vec<bool> = changes.ids.iter().map(|id| ctx.patched(id)).collect();
    answers.extend(changes.ids.first().map(|id| ctx.patched(id)));
    Ok(answers)
}

#[derive(Deserialize)]
struct Streamed {
    /// `flood` (tiny values until the host stops the run), `name` (a
    /// stream name the host refuses) or `not-json` (a value that is no
    /// JSON, through the raw import).
    how: String,
}

/// Streams as the host must refuse.
fn stream_hostile(ctx: &Workflow, streamed: Streamed) -> Result<u64, Error> {
    match streamed.how.as_str() {
        "flood" => {
            for n in 0_u64.. {
                ctx.append_to_stream("flood", &n)?;
            }
            Ok(0)
        }
        "name" => ctx.append_to_stream(&"x".repeat(129), &0).map(|()| 0),
        "not-json" => {
            durable::append_to_stream("s", "{\"open\": ");
            Ok(0)
        }
        other => Err(Error::Message(format!("no such stream attack: `{other}`"))),
    }
}

export! {
    workflows: {
        "spin-workflow" => spin_workflow,
        "hog-workflow" => hog_workflow,
        "recurse-workflow" => recurse_workflow,
        "boom-workflow" => boom_workflow,
        "big-workflow" => big_workflow,
        "log-flood-workflow" => log_flood_workflow,
        "call-limited" => call_limited,
        "fork-bomb" => fork_bomb,
        "start-then-wait" => start_then_wait,
        "marked-in-turn" => marked_in_turn,
        "patch-ids" => patch_ids,
        "stream-hostile" => stream_hostile,
    },
    steps: {
        "spin" => spin,
        "hog" => hog,
        "recurse" => recurse,
        "boom" => boom,
        "big" => big,
        "log-flood" => log_flood,
        "slow" => slow,
        "marked" => marked,
    },
}
