//! Sandbox limits: a guest that loops, allocates or traps ends with a typed
//! error the workflow sees, and the host stays up.

use serde_json::{Value, json};
use stepstone_e2e::{Host, Server, arg, guest, order_input, token_hash};

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

/// A step's output over its limit fails the step, one at it does not: here
/// the run's own limit (`options.max_output_bytes`), lowered from the
/// default 64 MiB, whose edge `host/tests/payloads.rs` tests. The output
/// is a JSON string, two bytes longer than its letters.
#[test]
fn a_step_output_over_the_limit_is_refused() {
    const TOKEN: &str = "sst_limits";
    let tenants = format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n",
        token_hash(TOKEN)
    );
    let server = Server::start(&tenants);
    server.upload(TOKEN, "hostile");
    let seen = |bytes: u64| {
        let call = json!({"step": "big", "input": {"bytes": bytes}});
        let body = json!({
            "component": "hostile",
            "workflow": "call-limited",
            "input": call,
            "options": {"max_output_bytes": 1000},
        });
        let done = server.post_json("/v1/runs?wait=60s", TOKEN, &body).expect(200);
        assert_eq!(done["state"], "completed", "{done}");
        done["output"].clone()
    };
    let over = seen(999);
    assert_eq!(over["error_kind"], "output-too-large", "{over}");
    assert!(
        over["message"]
            .as_str()
            .unwrap_or_default()
            .contains("the limit of 1000 bytes"),
        "{over}"
    );
    let at = seen(998);
    assert_eq!(at["output"].as_str().map(str::len), Some(998), "{at}");
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

/// Runs the hostile guest's `patch-ids` on `ids` as run `run`: it asks
/// `patched` about each, then about the first again.
fn patch_ids(host: &Host, run: &str, ids: &[String]) -> stepstone_e2e::Run {
    let input = json!({ "ids": ids }).to_string();
    host.run(&[
        "run",
        arg(&guest("hostile")),
        "patch-ids",
        "--run-id",
        run,
        "--input",
        &input,
    ])
}

#[test]
fn a_change_id_is_1_to_256_bytes_and_an_execution_asks_about_at_most_1000() {
    let host = Host::new();
    // At the edges: 256 bytes (in two-byte characters), 1 byte; asked
    // again, the first answers as before and journals nothing.
    let edges = ["é".repeat(128), "x".to_owned()];
    let answers = patch_ids(&host, "edges", &edges).success().json_line();
    assert_eq!(answers, json!([true, true, true]));
    let markers: Vec<Value> = host.history("edges").iter().map(|e| e["call"].clone()).collect();
    assert_eq!(markers.len(), 2, "one marker a change: {markers:?}");
    assert_eq!(
        (markers[0]["kind"].clone(), markers[0]["name"].clone()),
        (json!("Patch"), json!(edges[0]))
    );
    for (run, ids, refusal) in [
        ("long", vec!["x".repeat(257)], "257 bytes, over the limit of 256 bytes"),
        ("empty", vec![String::new()], "an empty change id"),
    ] {
        let stderr = patch_ids(&host, run, &ids).failure();
        assert!(
            stderr.contains("(invalid-call)") && stderr.contains(refusal),
            "{stderr}"
        );
        assert!(host.history(run).is_empty(), "{run}: nothing journaled");
    }
    let ids: Vec<String> = (0..1001).map(|i| format!("change-{i}")).collect();
    let answers = patch_ids(&host, "most", &ids[..1000]).success().json_line();
    assert_eq!(answers.as_array().map(Vec::len), Some(1001));
    let stderr = patch_ids(&host, "too-many", &ids).failure();
    assert!(
        stderr.contains("(invalid-call)") && stderr.contains("the host's limit of 1000 changes"),
        "{stderr}"
    );
}

/// Runs the hostile guest's `stream-hostile` attack `how` as run `run`,
/// under the global flags `flags`; it must fail, and its stderr is given.
fn stream_attack(host: &Host, flags: &[&str], run: &str, how: &str) -> String {
    let input = json!({ "how": how }).to_string();
    let wasm = guest("hostile");
    let args = ["run", arg(&wasm), "stream-hostile", "--run-id", run, "--input", &input];
    host.run(&[flags, &args[..]].concat()).failure()
}

/// A run that floods a stream with tiny values stops at the quota of
/// values (10,000 by default), failing `host-limit` and naming it, having
/// streamed exactly that many; one that names a stream the host refuses,
/// or appends no JSON, fails `invalid-call` having streamed nothing.
#[test]
fn a_stream_flood_stops_at_the_runs_quota_and_a_bad_append_is_refused() {
    let host = Host::new();
    for (flags, run, quota) in [
        (&[][..], "flood", 10_000),
        (&["--max-stream-values", "5"][..], "five", 5),
    ] {
        let stderr = stream_attack(&host, flags, run, "flood");
        assert!(
            stderr.contains("(host-limit)") && stderr.contains(&format!("quota of {quota} values")),
            "{stderr}"
        );
        let streamed = host.run(&["stream", run, "flood"]).success();
        assert_eq!(
            streamed.stdout().lines().count(),
            quota,
            "{run}: exactly the quota streamed"
        );
        assert_eq!(streamed.stdout().lines().last(), Some((quota - 1).to_string().as_str()));
    }
    for (how, refusal) in [
        ("name", "invalid stream name"),
        ("not-json", "the value appended to stream `s` is not JSON"),
    ] {
        let stderr = stream_attack(&host, &[], how, how);
        assert!(
            stderr.contains("(invalid-call)") && stderr.contains(refusal),
            "{stderr}"
        );
        assert!(host.history(how).is_empty(), "{how}: nothing journaled");
    }
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
    // Each line costs its length plus 64: "reserving book for l" (84) fits,
    // "charging 1200 cents for l" (89) would pass 100.
    let run = host.run(&[
        "--max-log-bytes",
        "100",
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

#[test]
fn an_endless_retry_policy_stops_at_the_hosts_attempt_cap() {
    let host = Host::new();
    let wasm = guest("hostile");
    // Every attempt fails at once (no fuel), with no wait between attempts
    // asked for: the host caps the attempts and floors the waits.
    let options = json!({"max_attempts": u32::MAX, "fuel": 0, "initial_backoff_ms": 0, "backoff_rate": -1.0, "max_backoff_ms": 0});
    let input = json!({"step": "boom", "options": options}).to_string();
    let args = [
        "--max-attempts",
        "10",
        "--min-backoff",
        "50ms",
        "run",
        arg(&wasm),
        "call-limited",
    ];
    let seen = host
        .run(&[&args[..], &["--run-id", "storm", "--input", &input]].concat())
        .success()
        .json_line();
    assert_eq!(seen["error_kind"], "fuel-exhausted", "{seen}");
    assert_eq!(seen["attempts"], 10, "the host's cap: {seen}");
    let message = seen["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("stopped after 10 attempts, the host's limit"),
        "{message}"
    );
    let attempts = host
        .stored_objects()
        .iter()
        .filter(|path| path.to_string_lossy().contains("/attempts/"))
        .count();
    assert_eq!(attempts, 9, "one record per failed attempt before the last");
    let entry = &host.history("storm")[0];
    let spread = entry["finished_at_ms"].as_u64().unwrap() - entry["started_at_ms"].as_u64().unwrap();
    assert!(spread >= 9 * 50, "9 waits of at least 50 ms: {spread} ms");
}

#[test]
fn a_backoff_of_u64_max_neither_panics_the_host_nor_holds_recovery() {
    let host = Host::new();
    let wasm = guest("hostile");
    let options = json!({"max_attempts": 2, "initial_backoff_ms": u64::MAX, "max_backoff_ms": u64::MAX});
    let input = json!({"step": "boom", "options": options}).to_string();
    let run = [
        "run",
        arg(&wasm),
        "call-limited",
        "--run-id",
        "patient",
        "--input",
        &input,
    ];
    let detached = host.run(&[&run[..], &["--detach-after", "1s"]].concat());
    assert!(detached.stdout().contains("suspended"), "{}", detached.stderr());
    let status = host.status("patient").expect("the run exists");
    assert_eq!(status["state"], "retrying", "{status}");
    // Another run, started and left for `resume`.
    let hello = guest("hello");
    host.run(&["upload", arg(&hello), "--name", "hello"]).success();
    host.run(&[
        "start",
        "hello",
        "greet",
        "--input",
        r#"{"name":"Ada"}"#,
        "--run-id",
        "other",
    ])
    .success();
    let resumed = host.run(&["resume", "--detach-after", "1s"]).success();
    let stdout = resumed.stdout();
    assert!(stdout.contains("other completed"), "{stdout}");
    assert!(stdout.contains("patient suspended until"), "{stdout}");
    let stored = host.history("patient");
    assert!(
        stored.is_empty(),
        "the step is not journaled before its retry: {stored:?}"
    );
}

#[test]
fn a_step_blocked_in_a_host_call_ends_at_its_timeout() {
    let host = Host::new();
    let wasm = guest("hostile");
    let blocker = guest("blocker");
    let input = json!({"step": "blocker/block", "input": {"ms": 30_000}, "options": {"timeout_ms": 500}}).to_string();
    let link = format!("blocker={}", arg(&blocker));
    let seen = host
        .run(&[
            "run",
            arg(&wasm),
            "call-limited",
            "--run-id",
            "blocked",
            "--link",
            &link,
            "--input",
            &input,
        ])
        .success()
        .json_line();
    assert_eq!(seen["error_kind"], "timed-out", "{seen}");
    let message = seen["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("inside a host call") && message.contains("timeout is 500ms"),
        "{message}"
    );
    let entry = &host.history("blocked")[0];
    let held = entry["finished_at_ms"].as_u64().unwrap() - entry["started_at_ms"].as_u64().unwrap();
    assert!(held < 5_000, "the attempt held its slot {held} ms for a 500 ms limit");
}

#[test]
fn a_zero_timeout_or_zero_fuel_fails_each_attempt_at_once() {
    let timed = limited("spin", json!({"timeout_ms": 0}));
    assert_eq!(timed["error_kind"], "timed-out", "{timed}");
    assert!(
        timed["message"].as_str().unwrap_or_default().contains("timeout is 0ns"),
        "{timed}"
    );
    let fuelless = limited("spin", json!({"fuel": 0}));
    assert_eq!(fuelless["error_kind"], "fuel-exhausted", "{fuelless}");
    let huge = limited("spin", json!({"timeout_ms": u64::MAX, "fuel": 10_000_000}));
    assert_eq!(
        huge["error_kind"], "fuel-exhausted",
        "a huge timeout is the host's: {huge}"
    );
}
