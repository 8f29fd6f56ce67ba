//! Steps that reach the world: outgoing HTTP through `wasi:http`, only to
//! the origins the tenant allows, within each attempt's limits. Every
//! request goes to a server this test starts on loopback ([`Origin`]); each
//! hostile case ends with a clear error and the server seeing no request it
//! should not have.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stepstone_e2e::{
    FullBacklog, Host, Origin, ReliabilityResult, Run, Server, arg, guest, record_reliability, token_hash,
};

/// `stepstone run fetcher.wasm WORKFLOW`, steps allowed to reach `allowed`.
fn run(workflow: &str, input: &Value, allowed: &[String]) -> Run {
    let host = Host::new();
    let wasm = guest("fetcher");
    let input = input.to_string();
    let mut args: Vec<&str> = Vec::new();
    for origin in allowed {
        args.extend(["--allow-outbound", origin]);
    }
    args.extend(["run", arg(&wasm), workflow, "--input", &input]);
    host.run(&args)
}

/// Files a hostile case's result for docs/RELIABILITY.md, once its
/// assertions passed.
fn record(fault: &str, outcome: &str) {
    record_reliability(&ReliabilityResult {
        suite: "outbound",
        fault,
        trials: 1,
        outcome,
        lost: 0,
    });
}

/// What the step `fetch` gave, called once by the workflow `fetch-once`.
fn fetch_once(fetch: Value, allowed: &[String]) -> (Value, String) {
    let done = run("fetch-once", &json!({"fetch": fetch}), allowed).success();
    (done.json_line(), done.stderr())
}

#[test]
fn a_step_reaches_an_allowed_origin_and_nothing_else_before_any_connection() {
    let origin = Origin::start();
    let allowed = [origin.url()];
    let (fetched, _) = fetch_once(json!({"url": format!("{}/ok", origin.url())}), &allowed);
    assert_eq!(fetched, json!({"status": 200, "body": "hello", "bytes": 5}));

    // The same server, written as another origin: no lookup makes it allowed.
    let elsewhere = format!("http://localhost:{}", origin.port());
    let (refused, log) = fetch_once(json!({"url": format!("{elsewhere}/ok")}), &allowed);
    assert_eq!(refused["error_kind"], "Failed", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("HttpRequestDenied")),
        "{refused}"
    );
    assert!(log.contains(&format!("{elsewhere} is not among the origins")), "{log}");
    // With no allowlist at all, not even the allowed one.
    let (denied, _) = fetch_once(json!({"url": format!("{}/ok", origin.url())}), &[]);
    assert!(
        denied["message"]
            .as_str()
            .is_some_and(|m| m.contains("HttpRequestDenied")),
        "{denied}"
    );
    assert_eq!(
        origin.received().len(),
        1,
        "only the allowed request reached the server"
    );
    record(
        "a request to an origin not on the tenant's list (the allowed server, written as localhost)",
        "refused in the guest with HTTP-request-denied before any connection, the origin named in the run's log; the server saw nothing",
    );
}

#[test]
fn a_redirect_is_handed_to_the_step_and_not_followed() {
    let origin = Origin::start();
    let (fetched, _) = fetch_once(json!({"url": format!("{}/redirect", origin.url())}), &[origin.url()]);
    assert_eq!(fetched["status"], 302, "{fetched}");
    let paths: Vec<String> = origin.received().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/redirect"], "the host followed the redirect");
    record(
        "a redirect to an origin off the list",
        "the 302 handed to the step, not followed; the server saw only the first request",
    );
}

#[test]
fn an_attempt_sends_at_most_its_limit_of_requests() {
    let origin = Origin::start();
    let fetch = json!({"url": format!("{}/ok", origin.url()), "times": 10_000});
    let (refused, log) = fetch_once(fetch, &[origin.url()]);
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("request 101 of 10000") && message.contains("HttpRequestDenied"),
        "{refused}"
    );
    assert!(
        log.contains("the attempt has made its limit of 100 HTTP requests"),
        "{log}"
    );
    assert_eq!(origin.received().len(), 100);
    record(
        "10,000 requests in one attempt",
        "the first 100 (the limit) sent, the 101st refused with HTTP-request-denied and the limit named",
    );
}

#[test]
fn a_huge_answer_is_cut_off_at_the_limit() {
    let origin = Origin::start();
    let started = Instant::now();
    let (refused, _) = fetch_once(json!({"url": format!("{}/big", origin.url())}), &[origin.url()]);
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("response body size exceeds limit: 16777216 bytes"),
        "{refused}"
    );
    let read: u64 = message
        .split("after ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|bytes| bytes.parse().ok())
        .unwrap_or_else(|| panic!("no byte count in {message}"));
    assert!(read <= 16 << 20, "{read} bytes read, past the 16 MiB limit");
    eprintln!(
        "a 1 GiB answer was cut off after {read} bytes, in {:?}",
        started.elapsed()
    );
    record(
        "a 1 GiB response",
        &format!("cut off at the 16 MiB limit ({read} bytes read), the step told the body was too large"),
    );
}

#[test]
fn a_server_that_never_answers_holds_the_attempt_only_to_its_deadline() {
    let origin = Origin::start();
    let input = json!({"fetch": {"url": format!("{}/hang", origin.url())}, "timeout_ms": 1000});
    let started = Instant::now();
    let done = run("fetch-once", &input, &[origin.url()]).success();
    let took = started.elapsed();
    let outcome = done.json_line();
    assert_eq!(outcome["error_kind"], "TimedOut", "{outcome}");
    assert!(
        took < Duration::from_secs(20),
        "the attempt lasted {took:?} with a 1 s timeout"
    );
    assert_eq!(origin.received().len(), 1);
    record(
        "a server that never answers",
        &format!(
            "the attempt ended timed-out at its 1 s deadline ({} ms for the whole run)",
            took.as_millis()
        ),
    );
}

#[test]
fn a_workflow_cannot_make_http_requests() {
    let origin = Origin::start();
    let done = run(
        "fetch-in-workflow",
        &json!({"url": format!("{}/ok", origin.url())}),
        &[origin.url()],
    );
    let error = done.failure();
    assert!(error.contains("HttpRequestDenied"), "{error}");
    assert!(error.contains("a workflow may not make HTTP requests"), "{error}");
    assert!(origin.received().is_empty());
    record(
        "a workflow making an HTTP request",
        "refused with HTTP-request-denied (workflows must replay what they saw); the run failed saying to use a step",
    );
}

#[test]
fn each_tenant_reaches_only_the_origins_its_quota_allows() {
    let origin = Origin::start();
    let tenants = format!(
        "[[tenants]]\nid = \"open\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\nallowed_outbound_hosts = [\"{}\"]\n\n\
         [[tenants]]\nid = \"closed\"\ntoken_sha256 = [\"{}\"]\n",
        token_hash("sst_open"),
        origin.url(),
        token_hash("sst_closed")
    );
    let server = Server::start(&tenants);
    let fetch = json!({"fetch": {"url": format!("{}/ok", origin.url())}});
    let seen: Vec<Value> = [("sst_open", "open-1"), ("sst_closed", "closed-1")]
        .iter()
        .map(|(token, run)| server.run_to_end(token, "fetcher", "fetch-once", &fetch, run))
        .collect();
    assert_eq!(seen[0]["status"], 200, "{}", seen[0]);
    assert!(
        seen[1]["message"]
            .as_str()
            .is_some_and(|m| m.contains("HttpRequestDenied")),
        "{}",
        seen[1]
    );
    assert_eq!(origin.received().len(), 1);
    let requests = server.metric("stepstone_http_requests_total{tenant=\"open\",outcome=\"sent\"}");
    let refused = server.metric("stepstone_http_requests_total{tenant=\"closed\",outcome=\"refused\"}");
    assert_eq!((requests, refused), (1.0, 1.0));
    record(
        "a tenant without an allowlist calling another tenant's allowed origin",
        "refused; the other tenant's request went through; each counted in its own tenant's metrics",
    );
}

/// Every attempt of a step call has the same idempotency key: a service
/// that got the first attempt's request (whose answer was lost) sees the
/// retry as the same request, and can do the work once.
#[test]
fn every_attempt_of_a_call_sends_the_same_idempotency_key() {
    let origin = Origin::start();
    let host = Host::new();
    let wasm = guest("fetcher");
    let charge = json!({
        "url": format!("{}/ok", origin.url()),
        "method": "POST",
        "body": r#"{"amount_cents":1200}"#,
        "idempotent": true,
        "fail_first": true,
    });
    let input = json!({"fetch": charge, "attempts": 3}).to_string();
    let allowed = origin.url();
    let args = [
        "--allow-outbound",
        &allowed,
        "run",
        arg(&wasm),
        "fetch-once",
        "--run-id",
        "pay-1",
        "--input",
        &input,
    ];
    let done = host.run(&args).success();
    assert_eq!(done.json_line()["status"], 200, "{}", done.stdout());
    let received = origin.received();
    let keys: Vec<Option<&str>> = received.iter().map(|r| r.header("idempotency-key")).collect();
    assert_eq!(keys, [Some("default/pay-1/0"), Some("default/pay-1/0")]);
    assert!(
        received
            .iter()
            .all(|r| r.method == "POST" && r.body == br#"{"amount_cents":1200}"#)
    );
}

/// A request body of exactly the limit (1 MiB) is sent whole; one byte more
/// is refused as too large, and the server never reads it whole.
#[test]
fn a_request_body_is_sent_up_to_its_limit_and_no_further() {
    let origin = Origin::start();
    let post = |bytes: usize| {
        let fetch = json!({"url": format!("{}/ok", origin.url()), "method": "POST", "body_bytes": bytes});
        fetch_once(fetch, &[origin.url()]).0
    };
    assert_eq!(post(1 << 20)["status"], 200);
    let over = post((1 << 20) + 1);
    // hyper reports a body cut off short of its announced length as a
    // protocol error; the request fails in the guest either way.
    assert_eq!(over["error_kind"], "Failed", "{over}");
    assert!(
        over["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("request 1 of 1")),
        "{over}"
    );
    let whole: Vec<usize> = origin.received().iter().map(|r| r.body.len()).collect();
    assert_eq!(whole, [1 << 20], "only the request within the limit arrived whole");
}

/// A step call lowers its attempts' HTTP limits below the tenant's (to no
/// request at all, a 1 KiB answer, a 300 ms wait for the first byte) and
/// cannot raise them: asking for more than the tenant's 100 requests still
/// stops at 100.
#[test]
fn a_step_call_lowers_its_http_limits_and_cannot_raise_them() {
    let origin = Origin::start();
    let allowed = [origin.url()];
    let bounded = |path: &str, times: u32, http: Value| {
        let fetch = json!({"url": format!("{}{path}", origin.url()), "times": times});
        run("fetch-once", &json!({"fetch": fetch, "http": http}), &allowed)
            .success()
            .json_line()
    };
    let message = |outcome: &Value| outcome["message"].as_str().unwrap_or_default().to_owned();

    let none = bounded("/ok", 1, json!({"max_requests": 0}));
    assert!(message(&none).contains("HttpRequestDenied"), "{none}");
    assert!(origin.received().is_empty(), "a call allowed no request sent none");

    let small = bounded("/big", 1, json!({"max_response_bytes": 1024}));
    assert!(
        message(&small).contains("response body size exceeds limit: 1024 bytes"),
        "{small}"
    );

    let started = Instant::now();
    let waited = bounded("/hang", 1, json!({"first_byte_timeout_ms": 300}));
    assert!(message(&waited).contains("ConnectionReadTimeout"), "{waited}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the attempt waited {:?} for a first byte it gave 300 ms",
        started.elapsed()
    );

    let raised = bounded("/ok", 101, json!({"max_requests": u32::MAX}));
    assert!(message(&raised).starts_with("request 101 of 101"), "{raised}");
    record(
        "a step call lowering its HTTP limits to 0 requests, a 1 KiB answer and a 300 ms first byte, and raising them past the tenant's",
        "each lowered limit held (no request sent, the answer cut at 1 KiB, the wait ended at 300 ms); the raise counted as the tenant's 100 requests",
    );
}

/// A server whose connections never open holds a request only to the
/// call's connect timeout, not to the attempt's deadline.
#[test]
fn a_connection_that_never_opens_ends_at_the_connect_timeout() {
    let down = FullBacklog::start();
    let started = Instant::now();
    let fetch = json!({"url": format!("{}/ok", down.url())});
    let outcome = run(
        "fetch-once",
        &json!({"fetch": fetch, "timeout_ms": 60_000, "http": {"connect_timeout_ms": 300}}),
        &[down.url()],
    )
    .success()
    .json_line();
    let took = started.elapsed();
    assert!(
        outcome["message"]
            .as_str()
            .is_some_and(|m| m.contains("ConnectionTimeout")),
        "{outcome}"
    );
    assert!(took < Duration::from_secs(20), "the request waited {took:?} to connect");
    record(
        "a server whose connections never open (a full accept queue), connect timeout lowered to 300 ms",
        "the request failed with ConnectionTimeout and the run went on, long before the attempt's 60 s deadline",
    );
}
