//! What a host tells its operators: traces of runs, exported over OTLP/HTTP
//! to a collector this test starts (and decoded as a collector would), log
//! lines in words and JSON fields, and the step latency histogram.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use stepstone_e2e::{Collector, FullBacklog, Host, ReceivedSpan, Server, arg, guest, order_input, token_hash};

const ACME: &str = "sst_acme_token";

fn acme_only() -> String {
    format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n",
        token_hash(ACME)
    )
}

/// A host exporting its traces to `collector`, in batches sent every
/// 100 ms rather than every 5 s.
fn traced_host(collector: &Collector) -> Host {
    Host::new()
        .with_env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint())
        .with_env("OTEL_BSP_SCHEDULE_DELAY", "100")
}

/// The trace id and root span id of run `run` of `tenant`, as the README
/// documents them: SHA-256 of `{tenant}/{run}`, its first 16 bytes and the
/// next 8.
fn documented_ids(tenant: &str, run: &str) -> (String, String) {
    let digest = hex::encode(Sha256::digest(format!("{tenant}/{run}")));
    (digest[..32].to_owned(), digest[32..48].to_owned())
}

fn await_state(server: &Server, run: &str, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.get(&format!("/v1/runs/{run}"), ACME).body["state"] != state {
        assert!(Instant::now() < deadline, "{run} never became {state}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|span| span.name == name).collect()
}

fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    match named(spans, name)[..] {
        [span] => span,
        ref others => panic!("expected one span `{name}`, found {}: {spans:#?}", others.len()),
    }
}

/// The order saga, started over HTTP, suspended by its sleep (so replayed
/// when it wakes), and, while it awaits its approval, carried over to
/// another server process: every execution of it, on either process,
/// lands in the one trace its tenant and id make, under the run's root span,
/// with a span per durable call and per step attempt — the first attempt of
/// `charge` failed, the second not — and the request that started it
/// links to that trace.
#[test]
fn a_runs_trace_holds_every_execution_call_and_attempt_across_an_eviction_and_a_restart() {
    let collector = Collector::start();
    let server = Server::start_on(traced_host(&collector), &acme_only());
    server.upload(ACME, "order");
    let input = order_input("traced", 1_000, json!({"approval_timeout_ms": 60_000}));
    let body = json!({"component": "order", "workflow": "place-order", "input": input, "run_id": "traced"});
    server.post_json("/v1/runs", ACME, &body).expect(202);
    await_state(&server, "traced", "awaiting-signal");
    let server = server.restart_after("TERM");
    server
        .post_bytes(
            "/v1/runs/traced/signals/approve",
            ACME,
            br#"{"approved":true}"#.to_vec(),
        )
        .expect(202);
    let done = server.get("/v1/runs/traced/wait?timeout=60s", ACME).expect(200);
    assert_eq!(done["state"], "completed", "{done}");

    let spans = collector.await_spans("the run's root span", Duration::from_secs(30), |spans| {
        spans
            .iter()
            .any(|span| span.name == "run" && span.text("run") == "traced")
    });
    let (trace_id, root_id) = documented_ids("acme", "traced");
    let root = one(&spans, "run");
    assert_eq!((&root.trace_id, &root.span_id), (&trace_id, &root_id), "{root:#?}");
    assert_eq!(root.parent_span_id, None, "{root:#?}");
    assert_eq!(root.service, "stepstone");
    assert_eq!(
        (root.text("tenant"), root.text("workflow"), root.text("outcome")),
        ("acme", "place-order", "completed")
    );

    let runs: Vec<&ReceivedSpan> = spans.iter().filter(|span| span.text("run") == "traced").collect();
    let strays: Vec<_> = runs.iter().filter(|span| span.trace_id != trace_id).collect();
    assert!(strays.is_empty(), "spans of the run outside its trace: {strays:#?}");

    let executions = named(&spans, "execution");
    let hosts: BTreeSet<&str> = executions.iter().map(|span| span.text("host")).collect();
    assert!(
        executions.len() >= 3 && hosts.len() == 2,
        "the first execution, its replay after the sleep, and the other process's: {executions:#?}"
    );
    for execution in &executions {
        assert_eq!(
            execution.parent_span_id.as_deref(),
            Some(root_id.as_str()),
            "{execution:#?}"
        );
        assert_eq!(execution.text("tenant"), "acme");
        // Evicted, ended, or dropped by the server's shutdown mid-wait.
        let ended = ["suspended", "completed", "abandoned"];
        assert!(ended.contains(&execution.text("outcome")), "{execution:#?}");
    }
    assert!(executions.iter().any(|span| span.text("outcome") == "suspended"));
    assert_eq!(
        executions
            .iter()
            .filter(|span| span.text("outcome") == "completed")
            .count(),
        1
    );

    let execution_ids: BTreeSet<&str> = executions.iter().map(|span| span.span_id.as_str()).collect();
    for (name, seq) in [("step reserve", 0), ("step charge", 1), ("step ship", 4)] {
        let step = one(&spans, name);
        assert!(
            execution_ids.contains(step.parent_span_id.as_deref().unwrap_or_default()),
            "{step:#?}"
        );
        assert_eq!(
            (
                step.text("tenant"),
                step.text("run"),
                step.number("seq"),
                step.text("outcome")
            ),
            ("acme", "traced", Some(seq), "ok"),
            "{step:#?}"
        );
    }
    let charge = one(&spans, "step charge");
    let mut attempts: Vec<&ReceivedSpan> = named(&spans, "attempt")
        .into_iter()
        .filter(|span| span.parent_span_id.as_deref() == Some(charge.span_id.as_str()))
        .collect();
    attempts.sort_by_key(|span| span.number("attempt"));
    let seen: Vec<(Option<i64>, &str)> = attempts
        .iter()
        .map(|span| (span.number("attempt"), span.text("outcome")))
        .collect();
    assert_eq!(seen, [(Some(1), "failed"), (Some(2), "ok")], "{attempts:#?}");
    assert!(
        attempts[0]
            .error
            .as_deref()
            .is_some_and(|why| why.contains("payment service unavailable")),
        "{:#?}",
        attempts[0]
    );
    assert_eq!(attempts[1].error, None);
    assert!(
        attempts[1]
            .events
            .iter()
            .any(|line| line == "charging 1200 cents for traced"),
        "the guest's log line is an event of its attempt: {:#?}",
        attempts[1]
    );
    assert!(
        charge.events.iter().any(|line| line.starts_with("attempt failed")),
        "the host's warning is an event of the call: {charge:#?}"
    );
    for attempt in &attempts {
        assert_eq!(
            (
                attempt.text("tenant"),
                attempt.text("run"),
                attempt.number("seq"),
                attempt.text("step")
            ),
            ("acme", "traced", Some(1), "charge"),
            "{attempt:#?}"
        );
        assert!(attempt.number("fuel").is_some_and(|fuel| fuel > 0), "{attempt:#?}");
    }

    let sleep = one(&spans, "sleep");
    assert_eq!((sleep.number("seq"), sleep.text("outcome")), (Some(2), "ok"));
    let took_ms = (sleep.end_unix_nanos - sleep.start_unix_nanos) / 1_000_000;
    assert!(
        took_ms >= 1_000,
        "the sleep's span covers the whole sleep, across the eviction: {sleep:#?}"
    );
    let approval = one(&spans, "signal approve");
    assert_eq!(
        (approval.number("seq"), approval.text("outcome")),
        (Some(3), "received")
    );

    let started = one(&spans, "POST /v1/runs");
    assert_ne!(started.trace_id, trace_id, "a request has its own trace");
    assert_eq!(started.links, [(trace_id.clone(), root_id.clone())], "{started:#?}");
    assert_eq!(started.number("http.response.status_code"), Some(202));
    let signalled = one(&spans, "POST /v1/runs/{id}/signals/{name}");
    assert_eq!(signalled.links, [(trace_id.clone(), root_id.clone())], "{signalled:#?}");
}

/// An attempt's span says how much linear memory it used. A Rust step whose
/// allocations fit the SDK's arena (`guest-sdk/src/allocator.rs`) runs in
/// the memory its module starts with, however much of the arena it takes
/// (Rust's own allocator grew memory on the first allocation and then as it
/// went); one that allocates past it grows memory by at least as much.
#[test]
fn an_attempts_span_holds_its_memory_and_a_rust_step_within_the_arena_never_grows_it() {
    let collector = Collector::start();
    let host = traced_host(&collector);
    let hostile = guest("hostile");
    let runs = [("ten-bytes", 10), ("fifty-kb", 50_000), ("half-a-mb", 500_000)];
    for (run, bytes) in runs {
        let input = json!({"step": "big", "input": {"bytes": bytes}}).to_string();
        let seen = host
            .run(&["run", arg(&hostile), "call-limited", "--input", &input, "--run-id", run])
            .success()
            .json_line();
        assert_eq!(seen["output"].as_str().map(str::len), Some(bytes), "{run}");
    }
    let spans = collector.await_spans("an attempt of each run", Duration::from_secs(30), |spans| {
        runs.iter().all(|(run, _)| {
            spans
                .iter()
                .any(|span| span.name == "attempt" && span.text("run") == *run)
        })
    });
    let memory = |run: &str| {
        let attempt = spans
            .iter()
            .find(|span| span.name == "attempt" && span.text("run") == run);
        let attempt = attempt.expect("the run's attempt");
        attempt.number("memory_bytes").expect("an attempt's memory_bytes")
    };
    assert!(memory("ten-bytes") > 0);
    assert_eq!(
        memory("ten-bytes"),
        memory("fifty-kb"),
        "10 bytes of output and 50 KB (100 KB with its JSON copy) fit the arena alike"
    );
    assert!(
        memory("half-a-mb") >= memory("ten-bytes") + 500_000,
        "half a megabyte of output grows memory: {} against {}",
        memory("half-a-mb"),
        memory("ten-bytes")
    );
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    listener.local_addr().expect("a bound address").port()
}

/// A collector that refuses connections costs a warning: the run completes
/// as without traces.
#[test]
fn a_collector_that_refuses_connections_costs_a_warning_and_the_run_completes() {
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let host = Host::new().with_env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
    let hello = guest("hello");
    let run = host
        .run(&["run", arg(&hello), "greet", "--input", r#"{"name":"Ada"}"#])
        .success();
    assert_eq!(run.json_line(), json!({"greeting": "Hello, Ada!"}));
    let stderr = run.stderr();
    assert!(stderr.contains("cannot export traces"), "{stderr}");
    assert!(stderr.contains(&endpoint), "the warning names the collector: {stderr}");
}

/// A collector that never answers holds neither the run nor, longer than
/// the flush at exit's 5 s, the process's exit, even with a 60 s export
/// timeout.
#[test]
fn a_collector_gone_quiet_holds_the_exit_for_at_most_the_flush_limit() {
    let quiet = FullBacklog::start();
    let host = Host::new()
        .with_env("OTEL_EXPORTER_OTLP_ENDPOINT", &quiet.url())
        .with_env("OTEL_EXPORTER_OTLP_TIMEOUT", "60000")
        .with_env("OTEL_BSP_SCHEDULE_DELAY", "10");
    let hello = guest("hello");
    let began = Instant::now();
    let run = host
        .run(&["run", arg(&hello), "greet", "--input", r#"{"name":"Ada"}"#])
        .success();
    let took = began.elapsed();
    assert_eq!(run.json_line(), json!({"greeting": "Hello, Ada!"}));
    assert!(took < Duration::from_secs(20), "the exit waited {took:?}");
    assert!(
        run.stderr().contains("traces still queued at exit are dropped"),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_protocol_other_than_http_protobuf_is_refused_at_start() {
    let host = Host::new()
        .with_env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
        .with_env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    let hello = guest("hello");
    let refused = host.run(&["run", arg(&hello), "greet"]).failure();
    assert!(
        refused.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc") && refused.contains("http/protobuf"),
        "{refused}"
    );
}

/// Every line of `stderr`, each a JSON object.
fn json_lines(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .inspect(|line| assert!(line.is_object(), "{line}"))
        .collect()
}

/// The fields of the one `run finished` line.
fn finished_fields(lines: &[Value]) -> &Value {
    let finished: Vec<&Value> = lines
        .iter()
        .filter(|line| line["fields"]["message"] == "run finished")
        .collect();
    assert_eq!(finished.len(), 1, "{lines:#?}");
    &finished[0]["fields"]
}

#[test]
fn with_log_format_json_each_line_is_a_json_object_and_a_runs_end_is_in_fields() {
    let host = Host::new();
    let hello = guest("hello");
    let completed = host
        .run(&[
            "--log-format",
            "json",
            "run",
            arg(&hello),
            "greet",
            "--input",
            r#"{"name":"Ada"}"#,
        ])
        .success();
    let lines = json_lines(&completed.stderr());
    let fields = finished_fields(&lines);
    assert_eq!(fields["outcome"], "completed", "{fields}");
    assert_eq!(fields["output"], r#"{"greeting":"Hello, Ada!"}"#, "{fields}");

    let order = guest("order");
    let input = order_input("unapproved", 0, json!({"approval_timeout_ms": 0})).to_string();
    let failed = host
        .run(&[
            "--log-format",
            "json",
            "run",
            arg(&order),
            "place-order",
            "--input",
            &input,
        ])
        .failure();
    let lines = json_lines(&failed);
    let fields = finished_fields(&lines);
    assert_eq!(
        (&fields["outcome"], &fields["kind"]),
        (&json!("failed"), &json!("workflow-error")),
        "{fields}"
    );
    let reason = fields["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("no approval within 0 ms"), "{fields}");
    assert!(fields.get("output").is_none(), "{fields}");
}

#[test]
fn text_log_lines_say_how_a_run_ended_in_fields_not_debug_output() {
    let host = Host::new();
    let hello = guest("hello");
    let stderr = host
        .run(&["run", arg(&hello), "greet", "--input", r#"{"name":"Ada"}"#])
        .success()
        .stderr();
    let finished = stderr
        .lines()
        .find(|line| line.contains("run finished"))
        .unwrap_or_else(|| panic!("no run finished line: {stderr}"));
    assert!(
        finished.contains(r#"outcome="completed" output={"greeting":"Hello, Ada!"}"#),
        "{finished}"
    );
    assert!(!stderr.contains("Completed {"), "Debug output in the log: {stderr}");
}

#[test]
fn the_step_latency_histogram_is_labelled_by_tenant_and_step() {
    let server = Server::start(&acme_only());
    server.run_to_end(
        ACME,
        "order",
        "place-order",
        &order_input("timed", 0, json!({"approval_timeout_ms": 0})),
        "timed",
    );
    let text = server.metrics_text();
    for (step, attempts) in [("reserve", 1), ("charge", 2), ("refund", 1), ("release", 1)] {
        let count = format!(r#"stepstone_step_attempt_seconds_count{{tenant="acme",step="{step}"}} {attempts}"#);
        assert!(text.lines().any(|line| line == count), "no `{count}` in:\n{text}");
    }
    let bucket = r#"stepstone_step_attempt_seconds_bucket{le="+Inf",tenant="acme",step="charge"} 2"#;
    assert!(text.lines().any(|line| line == bucket), "no `{bucket}` in:\n{text}");
}
