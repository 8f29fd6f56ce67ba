//! A batch job that uses every kind of durable call, for the crash tests:
//! `fetch` (fails its first attempt, retried), a durable pause, signal
//! `approve`, one `transform` per item started together and awaited
//! together (fan-out), then `publish`.
//!
//! Every step logs `executed step=NAME key=KEY attempt=N` as it starts, so a
//! test reading the host's log across restarts can count how often each
//! step call ran. Outputs derive from the input alone, so every run of the
//! same batch gives the same output.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use stepstone_guest::{Error, Step, StepFailure, StepOptions, Workflow, export};

#[derive(Deserialize)]
struct Batch {
    batch: String,
    items: Vec<String>,
    #[serde(default = "default_pause_ms")]
    pause_ms: u64,
    #[serde(default = "default_approval_timeout_ms")]
    approval_timeout_ms: u64,
}

fn default_pause_ms() -> u64 {
    100
}

fn default_approval_timeout_ms() -> u64 {
    60_000
}

/// What every step takes: the key that names the call.
#[derive(Serialize, Deserialize)]
struct Keyed {
    key: String,
}

#[derive(Serialize, Deserialize)]
struct Publication {
    key: String,
    parts: Vec<String>,
}

#[derive(Deserialize)]
struct Approval {
    by: String,
}

#[derive(Serialize)]
struct Processed {
    batch: String,
    fetched: String,
    approved_by: String,
    parts: Vec<String>,
    published: String,
}

fn process_batch(ctx: &Workflow, batch: Batch) -> Result<Processed, Error> {
    let retry = StepOptions::new()
        .max_attempts(3)
        .initial_backoff(Duration::from_millis(50));
    let key = |key: &str| Keyed { key: key.to_owned() };
    let fetched: String = ctx.step_with("fetch", &key(&batch.batch), retry)?;
    ctx.sleep(Duration::from_millis(batch.pause_ms));
    let timeout = Duration::from_millis(batch.approval_timeout_ms);
    let Some(approval) = ctx.signal::<Approval>("approve", timeout)? else {
        return Err(format!("no approval within {} ms", batch.approval_timeout_ms).into());
    };
    let pending = batch
        .items
        .iter()
        .map(|item| ctx.start("transform", &key(item)))
        .collect::<Result<Vec<_>, _>>()?;
    let parts = ctx.all(pending).into_iter().collect::<Result<Vec<String>, _>>()?;
    let publication = Publication {
        key: batch.batch.clone(),
        parts: parts.clone(),
    };
    let published: String = ctx.step("publish", &publication)?;
    Ok(Processed {
        batch: batch.batch,
        fetched,
        approved_by: approval.by,
        parts,
        published,
    })
}

/// Says that this call of `step` runs, in the form the crash tests count.
fn announce(ctx: &Step, step: &str, key: &str) {
    ctx.info(&format!("executed step={step} key={key} attempt={}", ctx.attempt()));
}

fn fetch(ctx: &Step, input: Keyed) -> Result<String, StepFailure> {
    announce(ctx, "fetch", &input.key);
    if ctx.attempt() == 1 {
        return Err("the source is not ready (the first attempt always fails)".into());
    }
    Ok(format!("rows-of-{}", input.key))
}

fn transform(ctx: &Step, input: Keyed) -> Result<String, StepFailure> {
    announce(ctx, "transform", &input.key);
    Ok(input.key.to_uppercase())
}

fn publish(ctx: &Step, input: Publication) -> Result<String, StepFailure> {
    announce(ctx, "publish", &input.key);
    Ok(format!("{}:{}", input.key, input.parts.join("+")))
}

export! {
    workflows: {
        "process-batch" => process_batch,
    },
    steps: {
        "fetch" => fetch,
        "transform" => transform,
        "publish" => publish,
    },
}
