//! A guest that blocks inside a host call instead of computing: it waits on
//! a WASI monotonic-clock pollable, where no epoch interruption can reach
//! it. The host must still end its attempt (as a step) or its activation
//! (as a workflow) at the deadline, report it `timed-out`, and free its
//! instance slot then, not when the wait would have ended.

use serde::Deserialize;
// The SDK's bindings of the WASI a step imports (wasi:http uses the clock).
use stepstone_guest::bindings::wasi::clocks::monotonic_clock;
use stepstone_guest::{Error, Step, StepFailure, Workflow, export};

#[derive(Deserialize)]
struct Wait {
    ms: u64,
}

/// Blocks in the host for `ms` milliseconds, then returns how long.
fn block_for(wait: &Wait) -> u64 {
    monotonic_clock::subscribe_duration(wait.ms.saturating_mul(1_000_000)).block();
    wait.ms
}

fn block(_ctx: &Step, wait: Wait) -> Result<u64, StepFailure> {
    Ok(block_for(&wait))
}

fn block_workflow(_ctx: &Workflow, wait: Wait) -> Result<u64, Error> {
    Ok(block_for(&wait))
}

export! {
    workflows: { "block-workflow" => block_workflow },
    steps: { "block" => block },
}
