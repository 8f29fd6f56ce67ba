//! The shapes `make bench` measures (host/benches): workflows of 0, 1, 3 and
//! N sequential trivial steps, N steps started together, a run that waits
//! for a signal, and a CPU-bound step. Every step's logic is also written
//! natively in the benchmark, as the baseline. `relay` is the simulation's
//! (sim/): every durable call there is in one run.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::Duration;
use stepstone_guest::http::Request;
use stepstone_guest::{Error, Step, StepFailure, StepOptions, Workflow, export};

#[derive(Deserialize)]
struct Count {
    n: u32,
}

/// Returns its input unchanged: the cheapest step there is.
fn noop(_ctx: &Step, n: u32) -> Result<u32, StepFailure> {
    Ok(n)
}

/// GETs `url` through wasi:http; the answer's size.
fn fetch(_ctx: &Step, url: String) -> Result<usize, StepFailure> {
    Ok(Request::get(&url).send()?.bytes()?.len())
}

/// The SHA-256 of `n` MiB of the bytes 0, 1, 2, … 255, 0, …, as hex, by
/// RustCrypto's `sha2`: natively it takes the CPU's SHA extensions where
/// there are any, in wasm32 its portable code.
fn sha256(_ctx: &Step, mebibytes: u32) -> Result<String, StepFailure> {
    let block = mebibyte();
    let mut hasher = Sha256::new();
    for _ in 0..mebibytes {
        hasher.update(&block);
    }
    Ok(hex(&hasher.finalize()))
}

/// The same digest by `hmac-sha256`, portable code on every target: the
/// benchmark compiles the same code natively, so the two differ only by
/// what running as WebAssembly costs.
fn sha256_portable(_ctx: &Step, mebibytes: u32) -> Result<String, StepFailure> {
    let block = mebibyte();
    let mut hasher = hmac_sha256::Hash::new();
    for _ in 0..mebibytes {
        hasher.update(&block);
    }
    Ok(hex(&hasher.finalize()))
}

fn mebibyte() -> Vec<u8> {
    (0..=255u8).cycle().take(1 << 20).collect()
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Calls no step: the cost of a run itself.
fn zero_steps(_ctx: &Workflow, count: Count) -> Result<u32, Error> {
    Ok(count.n)
}

/// `n` calls of `noop`, one after another.
fn sequential(ctx: &Workflow, count: Count) -> Result<u32, Error> {
    let mut sum = 0u32;
    for i in 0..count.n {
        sum = sum.wrapping_add(ctx.step::<_, u32>("noop", &i)?);
    }
    Ok(sum)
}

#[derive(Serialize)]
struct Streamed {
    value: u32,
}

/// Appends `{"value": i}` for each `i` below `n` to the run's stream
/// `values`: a stream's cost per value.
fn streaming(ctx: &Workflow, count: Count) -> Result<u32, Error> {
    for value in 0..count.n {
        ctx.append_to_stream("values", &Streamed { value })?;
    }
    Ok(count.n)
}

/// One call of `noop` whose answer is a string (a stand-in's, in the
/// benchmarks: one large output); returns its length.
fn one_large_step(ctx: &Workflow, _count: Count) -> Result<u32, Error> {
    let output: String = ctx.step("noop", &0)?;
    Ok(u32::try_from(output.len()).unwrap_or(u32::MAX))
}

fn one_step(ctx: &Workflow, _count: Count) -> Result<u32, Error> {
    sequential(ctx, Count { n: 1 })
}

fn three_steps(ctx: &Workflow, _count: Count) -> Result<u32, Error> {
    sequential(ctx, Count { n: 3 })
}

/// `n` calls of `noop` started together, then awaited together.
fn parallel(ctx: &Workflow, count: Count) -> Result<u32, Error> {
    let pending = (0..count.n)
        .map(|i| ctx.start::<_, u32>("noop", &i))
        .collect::<Result<Vec<_>, _>>()?;
    let results = ctx.all(pending).into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(results.into_iter().fold(0, u32::wrapping_add))
}

/// Waits a day for the signal `go`: a suspended run.
fn wait_for_go(ctx: &Workflow, _count: Count) -> Result<u32, Error> {
    let go: Option<u32> = ctx.signal("go", Duration::from_secs(24 * 3600))?;
    Ok(go.unwrap_or(0))
}

/// `n` sequential calls of `noop`, then waits for `go`: a suspended run with
/// a journal of `n` steps to replay.
fn sequential_then_wait(ctx: &Workflow, count: Count) -> Result<u32, Error> {
    let sum = sequential(ctx, count)?;
    Ok(sum.wrapping_add(wait_for_go(ctx, Count { n: 0 })?))
}

/// Where a relay is: `n` legs to go, the sum so far, and how long each leg
/// sleeps (a minute unless said).
#[derive(Clone, Copy, Serialize, Deserialize)]
struct Leg {
    n: u32,
    #[serde(default)]
    sum: u32,
    #[serde(default = "a_minute")]
    nap_s: u64,
}

fn a_minute() -> u64 {
    60
}

/// Each leg runs a step that may fail (retried), starts a child of `n`
/// sequential steps, sleeps `nap_s` on a durable timer, awaits the child
/// (long ended by then: the parent still needs its outcome), and continues
/// as new with one leg less; the last generation returns the sum of every
/// leg's step and child.
fn relay(ctx: &Workflow, leg: Leg) -> Result<u32, Error> {
    if leg.n == 0 {
        return Ok(leg.sum);
    }
    let retried = StepOptions::new().max_attempts(3).initial_backoff(Duration::from_secs(1));
    let mut sum = leg.sum.wrapping_add(ctx.step_with::<_, u32>("flaky", &leg.n, retried)?);
    let child = ctx.start_child::<_, u32>("sequential", &Leg { n: leg.n, ..leg }, None)?;
    ctx.sleep(Duration::from_secs(leg.nap_s));
    sum = sum.wrapping_add(child.join()?);
    ctx.continue_as_new(&Leg { n: leg.n - 1, sum, ..leg })
}

export! {
    workflows: {
        "zero-steps" => zero_steps,
        "one-step" => one_step,
        "one-large-step" => one_large_step,
        "three-steps" => three_steps,
        "sequential" => sequential,
        "streaming" => streaming,
        "parallel" => parallel,
        "wait-for-go" => wait_for_go,
        "sequential-then-wait" => sequential_then_wait,
        "relay" => relay,
    },
    steps: {
        "noop" => noop,
        "flaky" => noop,
        "sha256" => sha256,
        "sha256-portable" => sha256_portable,
        "fetch" => fetch,
    },
}
