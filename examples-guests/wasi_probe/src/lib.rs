//! A guest that reaches the host through WASI, as the Python and JavaScript
//! runtimes do: a workflow that reads WASI's clocks and random numbers and
//! writes to stdout (all deterministic for a workflow, so a replay gives
//! the same output), and a step that writes and reads a file in its
//! attempt's scratch directory.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use stepstone_guest::{Error, Step, StepFailure, Workflow, export};

mod wasi_bindings {
    wit_bindgen::generate!({
        world: "stepstone:wasi-probe/wasi-imports",
        path: "wit",
        generate_all,
    });
}

use wasi_bindings::wasi::cli::stdout;
use wasi_bindings::wasi::clocks::{monotonic_clock, wall_clock};
use wasi_bindings::wasi::filesystem::preopens;
use wasi_bindings::wasi::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags};
use wasi_bindings::wasi::random::random;

#[derive(Serialize)]
struct Reading {
    wall_ms: u64,
    monotonic_ns: u64,
    random: u64,
}

fn read() -> Reading {
    let wall = wall_clock::now();
    Reading {
        wall_ms: wall.seconds * 1_000 + u64::from(wall.nanoseconds) / 1_000_000,
        monotonic_ns: monotonic_clock::now(),
        random: random::get_random_u64(),
    }
}

/// Reads the clocks and a random number through WASI, sleeps durably, reads
/// them again, and says so on stdout.
fn read_wasi(ctx: &Workflow, _input: Value) -> Result<Vec<Reading>, Error> {
    let before = read();
    ctx.sleep(Duration::from_millis(20));
    let after = read();
    let line = format!("wasi-probe: random {} then {}\n", before.random, after.random);
    stdout::get_stdout()
        .blocking_write_and_flush(line.as_bytes())
        .map_err(|e| e.to_string())?;
    Ok(vec![before, after])
}

#[derive(Serialize, Deserialize)]
struct Roundtrip {
    dir: String,
    read: String,
}

/// Writes its input to `note.txt` in the first preopened directory (the
/// attempt's scratch directory, if the tenant grants one) and reads it back.
fn scratch_roundtrip(_ctx: &Step, input: String) -> Result<Roundtrip, StepFailure> {
    let fail = |what: &str, e: &dyn std::fmt::Debug| StepFailure::permanent(format!("{what}: {e:?}"));
    let (dir, path) = preopens::get_directories()
        .into_iter()
        .next()
        .ok_or_else(|| StepFailure::permanent("no preopened directory: this step was granted no scratch directory"))?;
    let file = dir
        .open_at(
            PathFlags::empty(),
            "note.txt",
            OpenFlags::CREATE,
            DescriptorFlags::READ | DescriptorFlags::WRITE,
        )
        .map_err(|e| fail("open note.txt", &e))?;
    file.write(input.as_bytes(), 0).map_err(|e| fail("write", &e))?;
    let (bytes, _) = file.read(1 << 16, 0).map_err(|e| fail("read", &e))?;
    Ok(Roundtrip {
        dir: path,
        read: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

/// Hands its input to `scratch-roundtrip` and returns what the step read.
fn scratch(ctx: &Workflow, text: String) -> Result<Roundtrip, Error> {
    Ok(ctx.step("scratch-roundtrip", &text)?)
}

export! {
    workflows: {
        "read-wasi" => read_wasi,
        "scratch" => scratch,
    },
    steps: {
        "scratch-roundtrip" => scratch_roundtrip,
    },
}
