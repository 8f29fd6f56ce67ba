//! Priorities and concurrency keys through the API and the CLI: runs that
//! share a key execute at most its limit at once, the others wait `queued`
//! in priority order, across a host's death; a queued run can be cancelled;
//! values out of range are refused.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stepstone_e2e::{Server, token_hash};

const TOKEN: &str = "sst_concurrency";

fn server() -> Server {
    let tenants = format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n",
        token_hash(TOKEN)
    );
    let server = Server::start(&tenants);
    server.upload(TOKEN, "hello");
    server
}

/// A run of `await-go` (it waits for the signal `go`) with the fields of `queueing`.
fn waiting_run(run: &str, queueing: Value) -> Value {
    let mut body = json!({"component": "hello", "workflow": "await-go", "input": {}, "run_id": run});
    body.as_object_mut()
        .expect("an object")
        .extend(queueing.as_object().cloned().unwrap_or_default());
    body
}

fn state(server: &Server, run: &str) -> Value {
    server.get(&format!("/v1/runs/{run}"), TOKEN).expect(200)
}

fn await_state(server: &Server, run: &str, wanted: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = state(server, run);
        if now["state"] == wanted {
            return now;
        }
        assert!(Instant::now() < deadline, "{run} is not {wanted} within 30 s: {now}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn go(server: &Server, run: &str) {
    server
        .post_json(&format!("/v1/runs/{run}/signals/go"), TOKEN, &json!({"ok": true}))
        .expect(202);
}

/// Asserts each of `runs` is queued for `key`, having journaled nothing.
fn assert_queued(server: &Server, runs: &[&str], key: &str) {
    for run in runs {
        let now = state(server, run);
        assert_eq!(now["state"], "queued", "{run}: {now}");
        assert_eq!(now["concurrency_key"], key, "{run}: {now}");
        assert_eq!(now["journaled_calls"], 0, "a queued run ran nothing: {now}");
    }
}

#[test]
fn runs_sharing_a_key_execute_one_at_a_time_in_priority_order_even_across_a_restart() {
    let server = server();
    let key = json!({"concurrency_key": "customer-42", "concurrency_limit": 1});
    server
        .post_json("/v1/runs", TOKEN, &waiting_run("holder", key.clone()))
        .expect(202);
    await_state(&server, "holder", "awaiting-signal");
    for (run, priority) in [("low", 9), ("mid", 5), ("urgent", 1)] {
        let mut asked = key.clone();
        asked["priority"] = json!(priority);
        server
            .post_json("/v1/runs", TOKEN, &waiting_run(run, asked))
            .expect(202);
        await_state(&server, run, "queued");
    }
    assert_eq!(state(&server, "urgent")["priority"], 1);
    // Another key is not held up by this one's line.
    let other = json!({"concurrency_key": "customer-7", "concurrency_limit": 1});
    server
        .post_json("/v1/runs", TOKEN, &waiting_run("elsewhere", other))
        .expect(202);
    await_state(&server, "elsewhere", "awaiting-signal");

    // The holder keeps its place through its host's death; the line waits.
    let server = server.restart_after("KILL");
    await_state(&server, "holder", "awaiting-signal");
    assert_queued(&server, &["low", "mid", "urgent"], "customer-42");
    let queued = r#"stepstone_runs_queued{tenant="acme"}"#;
    server.await_metric(queued, 3.0, Duration::from_secs(30));

    let mut line = vec!["holder", "urgent", "mid", "low"];
    while let Some(running) = (!line.is_empty()).then(|| line.remove(0)) {
        await_state(&server, running, "awaiting-signal");
        assert_queued(&server, &line, "customer-42");
        go(&server, running);
        let done = server
            .get(&format!("/v1/runs/{running}/wait?timeout=30s"), TOKEN)
            .expect(200);
        assert_eq!(done["state"], "completed", "{done}");
    }
    assert_eq!(server.metric(queued), 0.0);
    let left = server.host.stored("tenants/acme/queues/customer-42/waiting/");
    assert!(left.is_empty(), "tickets are left: {:?}", left.keys());
}

#[test]
fn a_key_lets_its_limit_run_at_once_and_a_cancelled_queued_run_ends_having_run_nothing() {
    let server = server();
    // A limit without a key limits the workflow. The runs are created one
    // after another, often within one millisecond, and wait in that order,
    // not their ids' ("fourth" sorts before "second").
    let limit = json!({"concurrency_limit": 2});
    for run in ["first", "second", "third", "fourth"] {
        server
            .post_json("/v1/runs", TOKEN, &waiting_run(run, limit.clone()))
            .expect(202);
    }
    await_state(&server, "first", "awaiting-signal");
    await_state(&server, "second", "awaiting-signal");
    assert_queued(&server, &["third", "fourth"], "await-go");

    server
        .post_json("/v1/runs/third/cancel", TOKEN, &json!({"reason": "not needed"}))
        .expect(202);
    let cancelled = server.get("/v1/runs/third/wait?timeout=30s", TOKEN).expect(200);
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["journaled_calls"], 0, "{cancelled}");
    assert_queued(&server, &["fourth"], "await-go");

    go(&server, "first");
    await_state(&server, "fourth", "awaiting-signal");
    assert_eq!(state(&server, "second")["state"], "awaiting-signal");
    let listed = server.get("/v1/runs?status=queued", TOKEN).expect(200);
    assert_eq!(listed["runs"], json!([]), "{listed}");
}

#[test]
fn priorities_and_limits_out_of_range_are_refused_naming_the_range() {
    let server = server();
    // A value of the wrong type is refused as any malformed body is: 422.
    for (asked, status, says) in [
        (json!({"priority": 0}), 400, "1 (first) to 9 (last)"),
        (json!({"priority": 10}), 400, "1 (first) to 9 (last)"),
        (
            json!({"priority": 4_294_967_296u64}),
            400,
            "priority 4294967296 is out of range",
        ),
        (json!({"priority": 1.5}), 422, "priority"),
        (json!({"priority": -1}), 422, "priority"),
        (json!({"concurrency_limit": 0}), 400, "1 to 1000 runs"),
        (json!({"concurrency_limit": 1001}), 400, "1 to 1000 runs"),
        (json!({"concurrency_limit": 4_294_967_297u64}), 400, "not 4294967297"),
        (json!({"concurrency_key": "../x"}), 422, "concurrency key"),
        (json!({"concurrency_key": "k".repeat(129)}), 422, "concurrency key"),
    ] {
        let refused = server
            .post_json("/v1/runs", TOKEN, &waiting_run("refused", asked.clone()))
            .expect(status);
        let message = refused["error"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{asked}: {refused}");
    }
    assert_eq!(server.get("/v1/runs/refused", TOKEN).status, 404);
    for asked in [
        json!({"priority": 1, "concurrency_limit": 1000, "concurrency_key": "k".repeat(128)}),
        json!({"priority": 9.0, "concurrency_limit": 2.0}),
    ] {
        let run = format!("edge-{}", asked["priority"]);
        server
            .post_json("/v1/runs", TOKEN, &waiting_run(&run, asked))
            .expect(202);
        await_state(&server, &run, "awaiting-signal");
    }
}

#[test]
fn the_cli_queues_a_run_behind_the_key_it_shares_and_shows_it_queued() {
    let server = server();
    let url = server.url.as_str();
    let cli = |run: &str| {
        server.host.run(&[
            "--server",
            url,
            "--token",
            TOKEN,
            "start",
            "hello",
            "await-go",
            "--input",
            "{}",
            "--run-id",
            run,
            "--concurrency-key",
            "nightly",
            "--priority",
            "2",
        ])
    };
    cli("cli-first").success();
    await_state(&server, "cli-first", "awaiting-signal");
    cli("cli-second").success();
    let shown = server
        .host
        .run(&["--server", url, "--token", TOKEN, "status", "cli-second"])
        .success()
        .json();
    assert_eq!(shown["state"], "queued", "{shown}");
    assert_eq!(shown["concurrency_key"], "nightly", "{shown}");
    assert_eq!(shown["priority"], 2, "{shown}");

    // On the embedded store, the CLI says so in words.
    let host = stepstone_e2e::Host::new();
    let wasm = stepstone_e2e::guest("hello");
    host.run(&["upload", stepstone_e2e::arg(&wasm), "--name", "hello"])
        .success();
    let local = |run: &str| {
        let args = [
            "start",
            "hello",
            "await-go",
            "--input",
            "{}",
            "--run-id",
            run,
            "--concurrency-limit",
            "1",
        ];
        host.run(&args).success();
    };
    local("local-first");
    local("local-second");
    let status = host.run(&["status", "local-second"]).success().stdout();
    assert!(
        status.contains("queued for a place of concurrency key `await-go`"),
        "{status}"
    );
}

#[test]
fn when_instance_slots_are_scarce_a_first_priority_run_goes_before_its_tenants_backlog() {
    let tenants = format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n",
        token_hash(TOKEN)
    );
    // One instance of each role: every activation and step attempt waits in line.
    let host = stepstone_e2e::Host::new().with_env("STEPSTONE_INSTANCES", "1");
    let server = Server::start_on(host, &tenants);
    server.upload(TOKEN, "hello");
    server.upload(TOKEN, "blocker");
    const BACKLOG: u64 = 300;
    let greet = |name: String, priority: u32| json!({"component": "hello", "workflow": "greet", "input": {"name": name}, "priority": priority});
    // The group's first run holds the one workflow instance for 8 s (it
    // blocks in a WASI wait), so the others queue behind it.
    let blocker = json!({"component": "blocker", "workflow": "block-workflow", "input": {"ms": 8000}});
    let backlog: Vec<Value> = std::iter::once(blocker)
        .chain((0..BACKLOG).map(|i| greet(format!("n{i}"), 9)))
        .collect();
    server
        .post_json("/v1/groups", TOKEN, &json!({"group_id": "backlog", "runs": backlog}))
        .expect(202);
    eprintln!(
        "after submit: {} {}",
        server.get("/v1/groups/backlog", TOKEN).expect(200),
        server.get("/v1/runs/backlog-0000", TOKEN).expect(200)
    );
    let mut urgent = greet("Ada".into(), 1);
    urgent["run_id"] = json!("urgent");
    server.post_json("/v1/runs", TOKEN, &urgent).expect(202);
    let done = server.get("/v1/runs/urgent/wait?timeout=60s", TOKEN).expect(200);
    assert_eq!(done["state"], "completed", "{done}");
    // The runs go through in about a millisecond each once the instance is
    // free, so their order shows in when their steps started: in arrival
    // order, the urgent run's step would have started after every other.
    let step_started = |run: &str| -> u64 {
        let journal = server.get(&format!("/v1/runs/{run}/journal"), TOKEN).expect(200);
        journal[0]["started_at_ms"].as_u64().expect("a journaled step")
    };
    let urgent_at = step_started("urgent");
    let mut before = 0;
    for i in 1..=BACKLOG {
        let run = format!("backlog-{i:04}");
        server
            .get(&format!("/v1/runs/{run}/wait?timeout=60s"), TOKEN)
            .expect(200);
        before += u64::from(step_started(&run) < urgent_at);
    }
    assert!(
        before < BACKLOG / 3,
        "{before} of the {BACKLOG} runs of priority 9 started their step before the one of priority 1"
    );
}

#[test]
fn a_key_is_the_tenants_own_so_another_tenants_runs_of_that_key_are_not_held() {
    const GLOBEX: &str = "sst_concurrency_globex";
    let tenants = format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n[[tenants]]\nid = \"globex\"\ntoken_sha256 = [\"{}\"]\n",
        token_hash(TOKEN),
        token_hash(GLOBEX)
    );
    let server = Server::start(&tenants);
    let key = json!({"concurrency_key": "shared-name"});
    for token in [TOKEN, GLOBEX] {
        server.upload(token, "hello");
        server
            .post_json("/v1/runs", token, &waiting_run("holder", key.clone()))
            .expect(202);
    }
    await_state(&server, "holder", "awaiting-signal");
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.get("/v1/runs/holder", GLOBEX).expect(200)["state"] != "awaiting-signal" {
        assert!(
            Instant::now() < deadline,
            "globex's run of the same key name was held by acme's"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server
        .post_json("/v1/runs", TOKEN, &waiting_run("second", key))
        .expect(202);
    await_state(&server, "second", "queued");
    assert!(
        server
            .host
            .stored("tenants/globex/queues/shared-name/waiting/")
            .is_empty()
    );
}
