//! Sandbox limits: a guest that loops, allocates or traps ends with a typed
//! error the workflow sees, and the host stays up.

use serde_json::{Value, json};
use stepstone_e2e::{Host, arg, guest, order_input};

/// Runs `call-limited` on `step` with `options`, returning what the workflow saw.
fn limited(step: &str, options: Value) -> Value {
    let host = Host::new();
    let wasm = guest("hostile");
    let input = json!({"step": step, "options": options}).to_string();
    host.run(&["run", arg(&wasm), "call-limited", "--input", &input])
        .success()
        .json_line()
}

#[test]
fn a_step_that_loops_forever_runs_out_of_fuel() {
    let seen = limited("spin", json!({"fuel": 10_000_000}));
    assert_eq!(seen["error_kind"], "fuel-exhausted", "{seen}");
    assert_eq!(seen["attempts"], 1);
}

#[test]
fn a_step_with_ample_fuel_is_stopped_by_its_timeout() {
    let seen = limited("spin", json!({"timeout_ms": 300}));
    assert_eq!(seen["error_kind"], "timed-out", "{seen}");
}

#[test]
fn a_step_that_allocates_without_bound_hits_the_memory_limit() {
    let seen = limited("hog", json!({}));
    assert_eq!(seen["error_kind"], "memory-limit", "{seen}");
}

#[test]
fn a_panicking_step_traps_and_is_retried_as_asked() {
    let seen = limited("boom", json!({"max_attempts": 2}));
    assert_eq!(seen["error_kind"], "trapped", "{seen}");
    assert_eq!(seen["attempts"], 2, "{seen}");
}

#[test]
fn a_workflow_that_loops_without_a_durable_call_fails_its_run() {
    let host = Host::new();
    let wasm = guest("hostile");
    let stderr = host
        .run(&[
            "--activation-fuel",
            "50000000",
            "run",
            arg(&wasm),
            "spin-workflow",
            "--run-id",
            "spinner",
        ])
        .failure();
    assert!(
        stderr.contains("budget of 50000000 fuel between two durable calls"),
        "{stderr}"
    );
    let status = host.status("spinner").expect("the run exists");
    assert_eq!(status["state"], "failed");
    assert_eq!(status["kind"], "fuel-exhausted", "{status}");
}

#[test]
fn awaiting_a_step_does_not_count_against_the_workflow_budget() {
    let host = Host::new();
    let wasm = guest("hostile");
    // The step runs until its 1.5 s timeout, three times the workflow's
    // budget, and the workflow awaits it in one instance.
    let input = json!({"step": "spin", "options": {"timeout_ms": 1500}}).to_string();
    let args = [
        "--activation-timeout",
        "500ms",
        "--evict-after",
        "60s",
        "run",
        arg(&wasm),
        "call-limited",
        "--input",
        &input,
    ];
    let seen = host.run(&args).success().json_line();
    assert_eq!(seen["error_kind"], "timed-out", "the step's own timeout: {seen}");
}

#[test]
fn a_step_output_over_the_limit_is_refused() {
    let host = Host::new();
    let wasm = guest("hostile");
    let input = json!({"step": "big", "input": {"bytes": 2_000_000}}).to_string();
    let seen = host
        .run(&["run", arg(&wasm), "call-limited", "--input", &input])
        .success()
        .json_line();
    assert_eq!(seen["error_kind"], "output-too-large", "{seen}");
    let small = json!({"step": "big", "input": {"bytes": 10}}).to_string();
    let seen = host
        .run(&["run", arg(&wasm), "call-limited", "--input", &small])
        .success()
        .json_line();
    assert_eq!(seen["output"], "xxxxxxxxxx");
}

#[test]
fn a_run_past_the_journal_limit_fails_with_a_host_limit() {
    let host = Host::new();
    let wasm = guest("fanout");
    let args = [
        "--max-journal-entries",
        "3",
        "run",
        arg(&wasm),
        "fan-out",
        "--run-id",
        "long",
        "--input",
        r#"{"items":[1,2,3,4,5]}"#,
    ];
    let stderr = host.run(&args).failure();
    assert!(
        stderr.contains("(host-limit)") && stderr.contains("limit of 3 durable calls"),
        "{stderr}"
    );
}

#[test]
fn a_run_holds_only_so_many_untaken_signals() {
    let host = Host::new();
    let wasm = guest("order");
    let input = order_input("s", 60_000, json!({})).to_string();
    let detach = [
        "run",
        arg(&wasm),
        "place-order",
        "--run-id",
        "s",
        "--input",
        &input,
        "--detach-after",
        "1s",
    ];
    host.run(&detach).success();
    for _ in 0..2 {
        host.run(&["--max-buffered-signals", "2", "signal", "s", "approve", "true"])
            .success();
    }
    let refused = host
        .run(&["--max-buffered-signals", "2", "signal", "s", "approve", "true"])
        .failure();
    assert!(
        refused.contains("already holds 2 signals it has not taken"),
        "{refused}"
    );
}

#[test]
fn guest_logs_past_the_run_allowance_are_dropped_with_one_warning() {
    let host = Host::new();
    let wasm = guest("order");
    let input = order_input("l", 0, json!({"approval_timeout_ms": 0})).to_string();
    let run = host.run(&[
        "--max-log-bytes",
        "30",
        "run",
        arg(&wasm),
        "place-order",
        "--input",
        &input,
    ]);
    let stderr = run.failure();
    assert!(stderr.contains("reserving book for l"), "{stderr}");
    assert_eq!(stderr.matches("log allowance is used up").count(), 1, "{stderr}");
    assert!(!stderr.contains("charging 1200 cents"), "{stderr}");
    assert!(!stderr.contains("refunding"), "{stderr}");
}
