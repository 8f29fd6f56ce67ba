//! Workflows that loop by continuing as new, so that each generation's
//! journal stays a few entries long however long the loop runs: one that
//! counts, one that adds up signals (one generation per signal), one that
//! awaits a counting child, and one that continues on input the host must
//! refuse.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stepstone_guest::bindings::stepstone::workflow::durable;
use stepstone_guest::{Error, Step, StepFailure, Workflow, export};

#[derive(Serialize, Deserialize)]
struct Count {
    n: u64,
    until: u64,
    /// A durable timer each generation sleeps on, in milliseconds.
    #[serde(default)]
    sleep_ms: u64,
}

/// `{"n": 0, "until": 5}` → `{"n": 5, "until": 5}`, one generation per
/// number: each takes the next number from a step (and sleeps, with
/// `sleep_ms`), then continues as new on it.
fn count(ctx: &Workflow, count: Count) -> Result<Value, Error> {
    if count.n >= count.until {
        return Ok(json!({"n": count.n, "until": count.until}));
    }
    let n: u64 = ctx.step("next", &count.n)?;
    if count.sleep_ms > 0 {
        ctx.sleep(Duration::from_millis(count.sleep_ms));
    }
    ctx.continue_as_new(&Count { n, ..count })
}

fn next(_ctx: &Step, n: u64) -> Result<u64, StepFailure> {
    Ok(n + 1)
}

#[derive(Serialize, Deserialize)]
struct Tally {
    total: i64,
    target: i64,
    #[serde(default)]
    signals: u64,
}

/// Adds the payload of each `add` signal to `total`, one generation per
/// signal, until it reaches `target`.
fn tally(ctx: &Workflow, tally: Tally) -> Result<Value, Error> {
    let add: Option<i64> = ctx.signal("add", Duration::from_secs(3600))?;
    let total = tally.total + add.unwrap_or(0);
    let signals = tally.signals + 1;
    if total >= tally.target {
        return Ok(json!({"total": total, "signals": signals}));
    }
    ctx.continue_as_new(&Tally {
        total,
        signals,
        ..tally
    })
}

/// Runs `count` on its input as a child and returns the child's output:
/// the end of the child's chain.
fn count_in_child(ctx: &Workflow, input: Value) -> Result<Value, Error> {
    ctx.child("count", &input)
}

#[derive(Deserialize)]
struct Refused {
    /// `not-json`, or `huge` for a JSON string of `bytes` bytes.
    how: String,
    #[serde(default)]
    bytes: usize,
}

/// Continues as new on an input the host must refuse, through the raw
/// import (the SDK's call encodes only JSON).
fn continue_refused(_ctx: &Workflow, refused: Refused) -> Result<Value, Error> {
    let input = match refused.how.as_str() {
        "not-json" => "{\"n\": 1,".to_owned(),
        "huge" => format!("\"{}\"", "x".repeat(refused.bytes)),
        other => return Err(Error::Message(format!("no such refusal: `{other}`"))),
    };
    durable::continue_as_new(&input);
    unreachable!("the host ends the instance at continue-as-new")
}

export! {
    workflows: {
        "count" => count,
        "tally" => tally,
        "count-in-child" => count_in_child,
        "continue-refused" => continue_refused,
    },
    steps: {
        "next" => next,
    },
}
