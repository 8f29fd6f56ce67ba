//! WASI for guests, through the `stepstone` binary: a workflow's clocks and
//! random numbers are deterministic, so a replay gives the same output; a
//! step's scratch directory exists only when granted and only for its
//! attempt; imports no policy grants are refused at load; steps of other
//! components are called by qualified name.

use serde_json::{Value, json};
use stepstone_e2e::{Host, arg, guest};

#[test]
fn a_workflow_reading_wasi_clocks_and_random_replays_identically() {
    let host = Host::new();
    let probe = guest("wasi_probe");
    let run = host
        .run(&["run", arg(&probe), "read-wasi", "--run-id", "clocks"])
        .success();
    let readings = run.json_line();
    let (before, after) = (&readings[0], &readings[1]);
    let ms = |reading: &Value, field: &str| reading[field].as_u64().expect("a number");
    // The clock is the run's journal time: it starts at 0 on the monotonic
    // clock and moves only with the durable sleep, by at least its 20 ms.
    assert_eq!(ms(before, "monotonic_ns"), 0, "{readings}");
    let slept = ms(after, "wall_ms") - ms(before, "wall_ms");
    assert!(slept >= 20, "{readings}");
    assert_eq!(ms(after, "monotonic_ns"), slept * 1_000_000, "{readings}");
    assert_ne!(before["random"], after["random"]);
    let line = format!("wasi-probe: random {} then {}", before["random"], after["random"]);
    assert_eq!(
        run.stderr().matches(&line).count(),
        1,
        "stdout goes to the run's log once: {}",
        run.stderr()
    );

    let replay = host.run(&["replay", "clocks"]).success();
    assert!(
        replay.stdout().contains("deterministic: output identical"),
        "{}{}",
        replay.stdout(),
        replay.stderr()
    );
    assert!(
        !replay.stderr().contains(&line),
        "a replay logs nothing again: {}",
        replay.stderr()
    );

    let other = host
        .run(&["run", arg(&probe), "read-wasi", "--run-id", "other-clocks"])
        .success();
    assert_ne!(
        other.json_line()[0]["random"],
        before["random"],
        "each run has its own seed"
    );
}

#[test]
fn a_step_granted_a_scratch_dir_writes_and_reads_there_and_it_is_gone_after() {
    let host = Host::new();
    let probe = guest("wasi_probe");
    let run = host
        .run(&[
            "--step-scratch-dir",
            "run",
            arg(&probe),
            "scratch",
            "--input",
            r#""kept for one attempt""#,
        ])
        .success();
    assert_eq!(
        run.json_line(),
        json!({"dir": "/scratch", "read": "kept for one attempt"})
    );
    let root = host.data_dir().join("scratch");
    let left: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{} was never made: {e}", root.display()))
        .collect();
    assert!(left.is_empty(), "scratch directories outlived their attempt: {left:?}");

    let refused = host
        .run(&["run", arg(&probe), "scratch", "--input", r#""no grant""#])
        .failure();
    assert!(refused.contains("no preopened directory"), "{refused}");
}

/// The scratch limit of the test below, and what it costs to create a file
/// or directory and to write at a new place (host/src/sandbox/scratch_budget.rs).
const SCRATCH_LIMIT: u64 = 256 << 10;
const ENTRY_BYTES: u64 = 4 << 10;
const NEW_PLACE_BYTES: u64 = 8 << 10;

/// Writes into a step's scratch directory stop at the limit however the
/// guest writes (offsets, a stream, sparse offsets, many files, many
/// directories), exactly at its edge, as on a full disk; links are
/// refused; a Python step's write fails with an `OSError` and its failure
/// names the limit.
#[test]
fn a_scratch_directory_holds_no_more_than_its_limit_however_it_is_filled() {
    let host = Host::new();
    let probe = guest("wasi_probe");
    let limit = SCRATCH_LIMIT.to_string();
    let granted = ["--step-scratch-dir", "--step-scratch-bytes", &limit];
    let fill = |how: &str, bytes: u64, chunk: u64| -> Value {
        let input = json!({"how": how, "bytes": bytes, "chunk": chunk}).to_string();
        let mut args = granted.to_vec();
        args.extend(["run", arg(&probe), "fill-scratch", "--input", &input]);
        host.run(&args).success().json_line()
    };
    let full = json!("insufficient-space");
    // One file (4 KiB) and its first write (8 KiB) leave the rest for data.
    let room = SCRATCH_LIMIT - ENTRY_BYTES - NEW_PLACE_BYTES;
    assert_eq!(
        fill("positional", room, room),
        json!({"written": room, "stopped": null})
    );
    assert_eq!(
        fill("positional", room + 1, room),
        json!({"written": room, "stopped": full})
    );
    assert_eq!(
        fill("stream", room + 1, 4096),
        json!({"written": room, "stopped": full})
    );
    // Each byte a gibibyte further pays for the blocks it allocates.
    let sparse = (SCRATCH_LIMIT - ENTRY_BYTES) / (NEW_PLACE_BYTES + 1);
    assert_eq!(fill("sparse", 1 << 20, 1), json!({"written": sparse, "stopped": full}));
    let entries = SCRATCH_LIMIT / ENTRY_BYTES;
    assert_eq!(fill("files", 1 << 20, 1), json!({"written": entries, "stopped": full}));
    assert_eq!(fill("dirs", 1 << 20, 1), json!({"written": entries, "stopped": full}));
    assert_eq!(fill("symlink", 1, 1), json!({"written": 0, "stopped": "not-permitted"}));

    let python = json!({"step": "py-steps/fill-scratch", "input": {"bytes": 1 << 20, "chunk": 64 << 10}}).to_string();
    let hostile = guest("hostile");
    let link = format!("py-steps={}", arg(&guest("py-steps")));
    let mut args = granted.to_vec();
    args.extend([
        "run",
        arg(&hostile),
        "call-limited",
        "--link",
        &link,
        "--input",
        &python,
    ]);
    let failed = host.run(&args).success().json_line();
    let message = failed["message"].as_str().unwrap_or_default();
    // wasi-libc (under Python) reads a failed stream write as EIO; the
    // failure says which limit it was.
    assert!(message.contains("then: [Errno"), "{failed}");
    assert!(
        message.contains(&format!("scratch directory reached its limit of {SCRATCH_LIMIT} bytes")),
        "{failed}"
    );
    let left: Vec<_> = std::fs::read_dir(host.data_dir().join("scratch"))
        .expect("the scratch root")
        .collect();
    assert!(left.is_empty(), "scratch directories outlived their attempt: {left:?}");
    stepstone_e2e::record_reliability(&stepstone_e2e::ReliabilityResult {
        suite: "wasi",
        fault: "a step filling a 256 KiB scratch directory by offsets, a stream, sparse offsets a GiB apart, 1M files, 1M directories, a symlink, and from Python",
        trials: 1,
        outcome: "each stopped at the limit with insufficient-space (ENOSPC), exactly at its edge; the link refused; Python's write failed with an OSError (EIO: wasi-libc does not read a stream error's code) and the step's failure named the limit",
        lost: 0,
    });
}

/// A step component that imports `wasi:http`'s incoming side, which no
/// policy grants (a step is called, never served requests). It exports a
/// `describe` instance so that validation reaches its imports.
const HTTP_STEP: &str = r#"(component
    (import "wasi:http/incoming-handler@0.2.0" (instance (export "handle" (func))))
    (core module $m (func (export "describe") (result i32) (i32.const 0)))
    (core instance $i (instantiate $m))
    (func $describe (result u32) (canon lift (core func $i "describe")))
    (instance $d (export "describe" (func $describe)))
    (export "stepstone:workflow/describe@0.1.0" (instance $d)))"#;

#[test]
fn an_import_the_policy_does_not_grant_is_refused_at_load_with_the_import_named() {
    let host = Host::new();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("http-step.wasm");
    std::fs::write(&path, wat::parse_str(HTTP_STEP).expect("valid WAT")).expect("written");
    let refused = host.run(&["upload", arg(&path), "--name", "http-step"]).failure();
    assert!(
        refused.contains("imports `wasi:http/incoming-handler@0.2.0`, which the step policy does not grant"),
        "{refused}"
    );
    assert!(
        host.stored_objects().is_empty(),
        "nothing is stored: {:?}",
        host.stored_objects()
    );
}

#[test]
fn workflows_call_steps_of_other_components_by_qualified_name() {
    let host = Host::new();
    let wat_step = guest("wat-step");
    host.run(&["upload", arg(&wat_step), "--name", "wat-step"]).success();

    let polyglot = guest("polyglot");
    let input = r#"{"value": {"n": 7}, "via": ["wat-step"]}"#;
    let run = host
        .run(&["run", arg(&polyglot), "polyglot", "--input", input])
        .success();
    assert_eq!(run.json_line(), json!({"wat-step": {"from": "wat", "value": {"n": 7}}}));

    let relay = guest("wat-workflow");
    let run = host.run(&["run", arg(&relay), "relay", "--input", "[1,2]"]).success();
    assert_eq!(run.json_line(), json!({"from": "wat", "value": [1, 2]}));

    let unknown = host
        .run(&[
            "run",
            arg(&polyglot),
            "polyglot",
            "--input",
            r#"{"value": 1, "via": ["pricing"]}"#,
        ])
        .failure();
    assert!(
        unknown.contains(
            "unknown step `pricing/wrap`: no component `pricing` is linked to this run or named by its tenant"
        ),
        "{unknown}"
    );
}
