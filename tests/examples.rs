//! The examples, run through the `stepstone` binary as a user would.

use serde_json::{Value, json};
use stepstone_e2e::{Host, arg, guest};

#[test]
fn hello_greets_through_its_step() {
    let host = Host::new();
    let hello = guest("hello");
    let run = host
        .run(&["run", arg(&hello), "greet", "--input", r#"{"name":"Ada"}"#])
        .success();
    assert_eq!(run.json_line(), json!({"greeting": "Hello, Ada!"}));
    assert!(
        run.stderr().contains("step finished"),
        "no step shown on stderr: {}",
        run.stderr()
    );
}

/// A component of a workflow and its step is compiled once, for both
/// engines, and cached as one file; the next run compiles nothing.
#[test]
fn a_first_compile_says_it_is_compiling_and_cached_and_the_next_run_compiles_nothing() {
    let host = Host::with_own_cache();
    let hello = guest("hello");
    let greet = |host: &Host| {
        host.run(&["run", arg(&hello), "greet", "--input", r#"{"name":"Ada"}"#])
            .success()
            .stderr()
    };
    let first = greet(&host);
    assert!(
        first.contains("compiling the component to native code") && first.contains("the result is cached"),
        "{first}"
    );
    assert_eq!(
        first.matches("compiling the component to native code").count(),
        1,
        "once for the workflow and its step: {first}"
    );
    let cached: Vec<_> = std::fs::read_dir(host.data_dir().join("cache"))
        .expect("the cache")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".cwasm"))
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    let again = greet(&host);
    assert!(
        !again.contains("compiling"),
        "the cached code was compiled again: {again}"
    );
}

#[test]
fn a_rust_workflow_calls_a_step_written_in_wat() {
    let host = Host::new();
    let (hello, wat) = (guest("hello"), guest("wat-step"));
    let link = format!("wat={}", arg(&wat));
    let input = r#"{"n":[1,2,"three"]}"#;
    let run = host
        .run(&["run", arg(&hello), "wrap-with-wat", "--link", &link, "--input", input])
        .success();
    assert_eq!(run.json_line(), json!({"from": "wat", "value": {"n": [1, 2, "three"]}}));
}

#[test]
fn fanout_runs_steps_in_parallel_and_combines_them() {
    let host = Host::new();
    let fanout = guest("fanout");
    let run = host
        .run(&["run", arg(&fanout), "fan-out", "--input", r#"{"items":[1,2,3,4,5]}"#])
        .success();
    assert_eq!(run.json_line(), json!({"squares": [1, 4, 9, 16, 25], "sum": 55}));

    let run = host
        .run(&[
            "run",
            arg(&fanout),
            "first-of",
            "--input",
            r#"{"items":[3,4]}"#,
            "--run-id",
            "first",
        ])
        .success();
    let first = run.json_line();
    let index = first["index"].as_u64().expect("an index");
    assert_eq!(first["square"], json!([9, 16][index as usize]));
    // The loser may have been dropped unrecorded when the run ended; replay
    // must not call that a divergence, so make sure it is missing.
    let loser = 1 - index;
    let _ = std::fs::remove_file(
        host.data_dir()
            .join(format!("objects/tenants/default/runs/first/journal/{loser:010}")),
    );
    let replay = host.run(&["replay", "first"]).success();
    assert!(
        replay.stdout().contains("deterministic: output identical"),
        "{}",
        replay.stdout()
    );
}

fn order(id: &str, extra: Value) -> String {
    stepstone_e2e::order_input(id, 1000, extra).to_string()
}

/// What an uninterrupted, approved order returns.
pub fn shipped(id: &str) -> Value {
    json!({
        "order_id": id,
        "status": "shipped",
        "reservation": format!("res-{id}"),
        "charge": format!("ch-{id}"),
        "tracking": format!("trk-{id}"),
    })
}

#[test]
fn order_saga_retries_sleeps_takes_a_buffered_signal_and_replays_deterministically() {
    order_saga_on(Host::new());
}

#[test]
fn the_order_saga_runs_the_same_on_s3() {
    order_saga_on(Host::on_s3());
}

fn order_saga_on(host: Host) {
    let wasm = guest("order");
    let input = order("o-1", json!({}));
    let child = host.spawn(&["run", arg(&wasm), "place-order", "--run-id", "o-1", "--input", &input]);
    // The signal goes out while the run sleeps, before it waits for it.
    host.wait_for("o-1", "sleeping", |s| s["state"] == "sleeping");
    host.run(&["signal", "o-1", "approve", r#"{"approved":true}"#])
        .success();
    let output = child.wait_with_output().expect("the run ends");
    let run = stepstone_e2e::Run(output).success();
    assert_eq!(run.json_line(), shipped("o-1"));

    let history = host.history("o-1");
    let steps: Vec<(&str, u64)> = history
        .iter()
        .filter(|e| e["call"]["kind"] == "Step")
        .map(|e| (e["call"]["name"].as_str().unwrap(), e["attempts"].as_u64().unwrap()))
        .collect();
    assert_eq!(steps, [("reserve", 1), ("charge", 2), ("ship", 1)]);

    let replay = host.run(&["replay", "o-1"]).success();
    assert!(
        replay.stdout().contains("deterministic: output identical"),
        "{}",
        replay.stdout()
    );

    let reordered = guest("order-reordered");
    let replay = host.run(&["replay", "o-1", "--component", arg(&reordered)]);
    let report = replay.stdout();
    assert!(!replay.0.status.success());
    assert!(
        report.contains("divergence at seq 0") && report.contains("`reserve`") && report.contains("`charge`"),
        "{report}"
    );
}

#[test]
fn a_signal_wait_that_times_out_gets_none_and_the_saga_compensates() {
    let host = Host::new();
    let wasm = guest("order");
    let input = order("o-2", json!({"sleep_ms": 0, "approval_timeout_ms": 300}));
    let stderr = host
        .run(&["run", arg(&wasm), "place-order", "--input", &input])
        .failure();
    assert!(stderr.contains("no approval within 300 ms"), "{stderr}");
    assert!(
        stderr.contains("compensated: refund ch-o-2, release res-o-2"),
        "{stderr}"
    );
}

#[test]
fn a_permanent_step_failure_is_not_retried_and_compensates() {
    let host = Host::new();
    let wasm = guest("order");
    let input = order("o-3", json!({"sleep_ms": 0, "fail_shipping": true}));
    let child = host.spawn(&["run", arg(&wasm), "place-order", "--run-id", "o-3", "--input", &input]);
    host.wait_for("o-3", "awaiting the approval", |s| s["state"] == "awaiting-signal");
    host.run(&["signal", "o-3", "approve", r#"{"approved":true}"#])
        .success();
    let stderr = stepstone_e2e::Run(child.wait_with_output().unwrap()).failure();
    assert!(stderr.contains("no carrier takes book"), "{stderr}");
    assert!(
        stderr.contains("compensated: refund ch-o-3, release res-o-3"),
        "{stderr}"
    );
    let ship = host
        .history("o-3")
        .into_iter()
        .find(|e| e["call"]["name"] == "ship")
        .expect("ship recorded");
    assert_eq!(ship["attempts"], 1);
}

#[test]
fn time_randomness_and_memos_are_recorded_once_and_replayed() {
    let host = Host::new();
    let hello = guest("hello");
    let stamp = host
        .run(&["run", arg(&hello), "stamp", "--run-id", "stamp"])
        .success()
        .json_line();
    assert_eq!(stamp["memo"], stamp["random"], "the memo reads back what was set");
    let now_ms = stamp["now_ms"].as_u64().unwrap();
    assert!(now_ms > 1_700_000_000_000, "a plausible wall-clock time: {now_ms}");
    let kinds: Vec<String> = host
        .history("stamp")
        .iter()
        .map(|e| e["call"]["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds, ["Now", "Random", "MemoSet"]);
    // Replay re-executes the workflow: different clock, same recorded values.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let replay = host.run(&["replay", "stamp"]).success();
    assert!(
        replay
            .stdout()
            .contains("deterministic: output identical (3 calls replayed)"),
        "{}",
        replay.stdout()
    );
    // Running the same run id again continues the finished run: same output.
    let again = host
        .run(&["run", arg(&hello), "stamp", "--run-id", "stamp"])
        .success()
        .json_line();
    assert_eq!(again, stamp);
}

#[test]
fn upload_start_resume_and_wait_on_the_embedded_store() {
    let host = Host::new();
    let hello = guest("hello");
    let uploaded = host.run(&["upload", arg(&hello), "--name", "hello"]).success().json();
    assert_eq!(
        uploaded["workflows"],
        json!([
            "greet",
            "wrap-with-wat",
            "stamp",
            "await-go",
            "greet-all",
            "await-go-child",
            "echo",
            "stream-ticks"
        ])
    );
    let started = host
        .run(&[
            "start",
            "hello",
            "greet",
            "--input",
            r#"{"name":"Lin"}"#,
            "--run-id",
            "s-1",
        ])
        .success();
    assert_eq!(started.stdout().trim(), "s-1");
    let pending = host.run(&["wait", "s-1", "--timeout", "100ms"]);
    assert_eq!(pending.0.status.code(), Some(2), "still pending: {}", pending.stdout());
    host.run(&["resume"]).success();
    let finished = host.run(&["wait", "s-1"]).success().json();
    assert_eq!(finished["output"], json!({"greeting": "Hello, Lin!"}));
}

#[test]
fn child_workflows_are_runs_of_their_own_linked_to_their_parent() {
    let host = Host::new();
    let hello = guest("hello");
    let input = r#"{"names":["Ada","Lin","Kai"]}"#;
    let run = host
        .run(&["run", arg(&hello), "greet-all", "--run-id", "family", "--input", input])
        .success();
    assert_eq!(run.json_line(), json!(["Hello, Ada!", "Hello, Lin!", "Hello, Kai!"]));
    for (seq, name) in [(0, "Ada"), (1, "Lin"), (2, "Kai")] {
        let child = host.status(&format!("family.{seq}")).expect("each child is a run");
        assert_eq!(child["output"], json!({"greeting": format!("Hello, {name}!")}));
    }
    let kinds: Vec<String> = host
        .history("family")
        .iter()
        .map(|e| e["call"]["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        [
            "StartChild",
            "StartChild",
            "StartChild",
            "AwaitChild",
            "AwaitChild",
            "AwaitChild"
        ]
    );
    let replay = host.run(&["replay", "family"]).success();
    assert!(
        replay.stdout().contains("deterministic: output identical"),
        "{}",
        replay.stdout()
    );
}
