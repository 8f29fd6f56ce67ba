//! A guest that reaches the host through WASI, as the Python and JavaScript
//! runtimes do: a workflow that reads WASI's clocks and random numbers and
//! writes to stdout (all deterministic for a workflow, so a replay gives
//! the same output), a step that writes and reads a file in its attempt's
//! scratch directory, and one that fills that directory each way WASI
//! allows, to find its limit.

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
use wasi_bindings::wasi::filesystem::types::{DescriptorFlags, ErrorCode, OpenFlags, PathFlags, filesystem_error_code};
use wasi_bindings::wasi::io::streams::{OutputStream, StreamError};
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

/// How `scratch-fill` writes: `how` is `positional` (one file, writes at
/// increasing offsets), `sparse` (one file, each chunk a gibibyte further),
/// `stream` (one file, through an output stream), `files` (an empty file a
/// chunk) or `dirs` (a directory a chunk); `symlink` tries one link.
#[derive(Deserialize)]
struct Fill {
    how: String,
    /// Bytes (or, for `files` and `dirs`, entries) to write at most.
    bytes: u64,
    /// Bytes a write, at most 4096 for a stream.
    chunk: u64,
}

/// How far `scratch-fill` got: what it wrote, and the error that stopped it.
#[derive(Serialize)]
struct Filled {
    written: u64,
    stopped: Option<String>,
}

/// Fills the attempt's scratch directory as `fill` says, until it has
/// written `fill.bytes` or a write fails.
fn scratch_fill(_ctx: &Step, fill: Fill) -> Result<Filled, StepFailure> {
    let fail = |what: &str, e: &dyn std::fmt::Debug| StepFailure::permanent(format!("{what}: {e:?}"));
    let (dir, _) = preopens::get_directories()
        .into_iter()
        .next()
        .ok_or_else(|| StepFailure::permanent("no preopened directory: this step was granted no scratch directory"))?;
    let open = || {
        dir.open_at(PathFlags::empty(), "fill", OpenFlags::CREATE, DescriptorFlags::WRITE)
            .map_err(|e| fail("open fill", &e))
    };
    let size = fill.chunk.clamp(1, 1 << 20);
    let chunk = vec![b'x'; size as usize];
    Ok(match fill.how.as_str() {
        "positional" => {
            let file = open()?;
            filled(fill.bytes, size, |at, len| file.write(&chunk[..len], at))
        }
        "sparse" => {
            let file = open()?;
            filled(fill.bytes, size, |at, len| file.write(&chunk[..len], (at / size) << 30))
        }
        "stream" => match open()?.write_via_stream(0) {
            Ok(stream) => filled(fill.bytes, size, |_, len| stream_write(&stream, &chunk[..len])),
            Err(code) => Filled {
                written: 0,
                stopped: Some(code.name().to_owned()),
            },
        },
        "files" => filled(fill.bytes, 1, |n, _| {
            let name = format!("f{n}");
            let created = dir.open_at(PathFlags::empty(), &name, OpenFlags::CREATE, DescriptorFlags::WRITE);
            created.map(|_| 1)
        }),
        "dirs" => filled(fill.bytes, 1, |n, _| {
            dir.create_directory_at(&format!("d{n}")).map(|()| 1)
        }),
        "symlink" => filled(1, 1, |_, _| dir.symlink_at("fill", "link").map(|()| 1)),
        other => return Err(StepFailure::permanent(format!("no way to fill `{other}`"))),
    })
}

/// Calls `write` with what was written so far and how much to write next
/// (at most `chunk`), adding what it wrote, until `bytes` are written or it
/// fails.
fn filled(bytes: u64, chunk: u64, mut write: impl FnMut(u64, usize) -> Result<u64, ErrorCode>) -> Filled {
    let mut written = 0;
    while written < bytes {
        let len = chunk.min(bytes - written) as usize;
        match write(written, len) {
            Ok(n) => written += n,
            Err(code) => {
                return Filled {
                    written,
                    stopped: Some(code.name().to_owned()),
                };
            }
        }
    }
    Filled { written, stopped: None }
}

/// Writes `chunk` (at most 4096 bytes) to `stream`: its error code if it
/// fails.
fn stream_write(stream: &OutputStream, chunk: &[u8]) -> Result<u64, ErrorCode> {
    match stream.blocking_write_and_flush(chunk) {
        Ok(()) => Ok(chunk.len() as u64),
        Err(StreamError::LastOperationFailed(error)) => Err(filesystem_error_code(&error).unwrap_or(ErrorCode::Io)),
        Err(StreamError::Closed) => Err(ErrorCode::Io),
    }
}

/// Hands `fill` to `scratch-fill` and returns how far it got.
fn fill_scratch(ctx: &Workflow, fill: Value) -> Result<Value, Error> {
    Ok(ctx.step("scratch-fill", &fill)?)
}

/// Hands its input to `scratch-roundtrip` and returns what the step read.
fn scratch(ctx: &Workflow, text: String) -> Result<Roundtrip, Error> {
    Ok(ctx.step("scratch-roundtrip", &text)?)
}

export! {
    workflows: {
        "read-wasi" => read_wasi,
        "scratch" => scratch,
        "fill-scratch" => fill_scratch,
    },
    steps: {
        "scratch-roundtrip" => scratch_roundtrip,
        "scratch-fill" => scratch_fill,
    },
}
