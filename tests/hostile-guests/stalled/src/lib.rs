//! A component whose `describe` never answers: it blocks in a WASI wait
//! the moment the host asks what it exports, the first guest code an
//! upload runs. The host must give up at describe's deadline, refuse the
//! upload naming why, and store nothing.
//!
//! Written against the raw bindings, not the SDK, whose `describe` only
//! ever returns the manifest.

wit_bindgen::generate!({
    world: "steps",
    path: "../../../wit",
    // The WASI the world imports (wasi:http and what it uses): its
    // monotonic clock is what this guest blocks on.
    generate_all,
});

use exports::stepstone::workflow::{describe, step};
use stepstone::workflow::types::{Manifest, StepFailure};

/// Ten minutes: far past any deadline a host gives `describe`.
const STALL_NS: u64 = 600 * 1_000_000_000;

struct Stalled;

impl describe::Guest for Stalled {
    fn describe() -> Manifest {
        wasi::clocks::monotonic_clock::subscribe_duration(STALL_NS).block();
        Manifest {
            workflows: Vec::new(),
            steps: vec!["never".into()],
        }
    }
}

impl step::Guest for Stalled {
    fn run_step(_name: String, _input: String) -> Result<String, StepFailure> {
        Ok("null".into())
    }
}

export!(Stalled);
