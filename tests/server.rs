//! The HTTP API over real HTTP on loopback, as a client would use it.

use std::time::Duration;

use serde_json::{Value, json};
use stepstone_e2e::{Host, Server, token_hash as hash};

const ACME: &str = "sst_acme_token";
const GLOBEX: &str = "sst_globex_token";

/// Two tenants, each with the quota table given as TOML.
fn two_tenants(acme_quotas: &str, globex_quotas: &str) -> String {
    format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\n{acme_quotas}\n\n\
         [[tenants]]\nid = \"globex\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\n{globex_quotas}\n",
        hash(ACME),
        hash(GLOBEX)
    )
}

/// Two tenants with the default quotas.
fn default_tenants() -> String {
    two_tenants("", "")
}

fn order(id: &str, sleep_ms: u64) -> Value {
    stepstone_e2e::order_input(id, sleep_ms, json!({"approval_timeout_ms": 60_000}))
}

fn start(server: &Server, token: &str, component: &str, workflow: &str, input: Value, run_id: &str) -> Value {
    let body = json!({"component": component, "workflow": workflow, "input": input, "run_id": run_id});
    server.post_json("/v1/runs", token, &body).expect(202)
}

/// Polls a run of acme's until it is in `state`, for at most 30 s.
fn await_state(server: &Server, run: &str, state: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while server.get(&format!("/v1/runs/{run}"), ACME).body["state"] != state {
        assert!(std::time::Instant::now() < deadline, "{run} never became {state}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait(server: &Server, token: &str, run: &str) -> Value {
    server
        .get(&format!("/v1/runs/{run}/wait?timeout=60s"), token)
        .expect(200)
}

#[test]
fn upload_start_wait_journal_signal_and_replay_over_http() {
    let server = api_round_trip(Server::start(&default_tenants()));
    let signals = server.host.stored_objects();
    let signals = signals
        .iter()
        .filter(|p| p.to_string_lossy().contains("/signals/approve/"));
    assert_eq!(signals.count(), 1, "the approval was stored once");
}

#[test]
fn the_api_round_trip_runs_the_same_on_s3() {
    api_round_trip(Server::start_on(Host::on_s3(), &default_tenants()));
}

/// Uploads, starts, signals (twice with one id), waits, reads the journal,
/// replays and lists a run over HTTP; returns the server for more checks.
fn api_round_trip(server: Server) -> Server {
    let info = server.upload(ACME, "order");
    assert_eq!(
        info["steps"],
        json!(["reserve", "charge", "fraud-check", "ship", "refund", "release"])
    );
    assert_eq!(
        server.upload(ACME, "order")["digest"],
        info["digest"],
        "re-uploading is idempotent"
    );
    let listed = server.get("/v1/components", ACME).expect(200);
    assert_eq!(listed, json!([{"name": "order", "digest": info["digest"]}]));

    start(&server, ACME, "order", "place-order", order("h-1", 200), "h-1");
    // Sent twice with one signal id (a client retrying): stored once.
    let approve = |query: &str| {
        server
            .post_bytes(
                &format!("/v1/runs/h-1/signals/approve{query}"),
                ACME,
                br#"{"approved":true}"#.to_vec(),
            )
            .status
    };
    assert_eq!([approve("?signal_id=ok-1"), approve("?signal_id=ok-1")], [202, 202]);
    let finished = wait(&server, ACME, "h-1");
    assert_eq!(finished["state"], "completed", "{finished}");
    assert_eq!(finished["output"]["tracking"], "trk-h-1");
    assert_eq!(
        [approve("?signal_id=ok-1"), approve("")],
        [202, 409],
        "a resend of a stored signal succeeds after the run ended; a new one does not"
    );

    let journal = server.get("/v1/runs/h-1/journal", ACME).expect(200);
    let kinds: Vec<&str> = journal
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["step", "step", "sleep", "signal", "step"]);
    assert_eq!(journal[1]["attempts"], 2);

    let replay = server.post_json("/v1/runs/h-1/replay", ACME, &json!({})).expect(200);
    assert_eq!(replay, json!({"verdict": "identical", "calls": 5}));

    let metrics = server.metrics_text();
    // Metrics name every tenant: the operator's address serves them, the
    // tenants' does not.
    assert_eq!(server.get("/metrics", "").status, 404);
    for line in [
        r#"stepstone_step_attempts_total{tenant="acme",outcome="failed"} 1"#,
        r#"stepstone_step_attempts_total{tenant="acme",outcome="ok"} 3"#,
        r#"stepstone_runs_finished_total{tenant="acme",outcome="completed"} 1"#,
        r#"stepstone_replays_total{tenant="acme"} 1"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} missing from:\n{metrics}");
    }

    let page = server.get("/v1/runs?status=completed&limit=10", ACME).expect(200);
    assert_eq!(page["runs"].as_array().unwrap().len(), 1);
    let openapi = server.get("/v1/openapi.json", ACME).expect(200);
    assert!(
        openapi["paths"]["/v1/runs/{id}/signals/{name}"]["post"].is_object(),
        "{openapi}"
    );
    assert_eq!(server.get("/healthz", "").expect(200), "ok");
    server
}

#[test]
fn a_client_run_id_is_an_idempotency_key() {
    let server = Server::start(&default_tenants());
    server.upload(ACME, "hello");
    let first = start(&server, ACME, "hello", "greet", json!({"name": "Ada"}), "greet-1");
    let again = start(&server, ACME, "hello", "greet", json!({"name": "Ada"}), "greet-1");
    assert_eq!(first, again);
    let body = json!({"component": "hello", "workflow": "greet", "input": {"name": "Bob"}, "run_id": "greet-1"});
    let conflict = server.post_json("/v1/runs", ACME, &body).expect(409);
    assert!(
        conflict["error"].as_str().unwrap().contains("already exists"),
        "{conflict}"
    );
    assert_eq!(
        wait(&server, ACME, "greet-1")["output"],
        json!({"greeting": "Hello, Ada!"})
    );
}

#[test]
fn a_start_that_waits_answers_with_the_runs_status_in_one_request() {
    let server = Server::start(&default_tenants());
    server.upload(ACME, "hello");
    let greet = json!({"component": "hello", "workflow": "greet", "input": {"name": "Ada"}, "run_id": "sync-1"});
    let done = server.post_json("/v1/runs?wait=60s", ACME, &greet).expect(200);
    assert_eq!(done["run_id"], "sync-1", "{done}");
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["output"], json!({"greeting": "Hello, Ada!"}));
    // Sent again (a client retrying), it answers with the same run, run once.
    let again = server.post_json("/v1/runs?wait=60s", ACME, &greet).expect(200);
    assert_eq!(again, done);
    assert_eq!(wait(&server, ACME, "sync-1"), done);

    // A run that cannot end in time answers where it stands when the wait
    // runs out: any state short of an end (its `charge` step fails its first
    // attempt by design, so a slow host may find it retrying).
    server.upload(ACME, "order");
    let unapproved =
        json!({"component": "order", "workflow": "place-order", "input": order("sync-2", 0), "run_id": "sync-2"});
    let waiting = server.post_json("/v1/runs?wait=0s", ACME, &unapproved).expect(200);
    assert_eq!(waiting["run_id"], "sync-2", "{waiting}");
    assert!(
        ["pending", "running", "retrying", "sleeping", "awaiting-signal"].contains(&waiting["state"].as_str().unwrap()),
        "{waiting}"
    );
    // The longest wait a request can ask for holds it no longer than the run takes.
    let longest = format!("/v1/runs?wait={}", ["999999999years"; 10].join("%20"));
    assert_eq!(server.post_json(&longest, ACME, &greet).expect(200), done);
    let refused = server.post_json("/v1/runs?wait=forever", ACME, &greet).expect(400);
    assert!(
        refused["error"].as_str().unwrap().contains("is not a duration"),
        "{refused}"
    );
}

#[test]
fn tenants_cannot_see_or_touch_each_others_runs_and_components() {
    let server = Server::start(&default_tenants());
    let digest = server.upload(ACME, "hello")["digest"].as_str().unwrap().to_owned();
    start(&server, ACME, "hello", "greet", json!({"name": "Ada"}), "mine");
    wait(&server, ACME, "mine");

    for path in [
        "/v1/runs/mine",
        "/v1/runs/mine/wait?timeout=1s",
        "/v1/runs/mine/journal",
        "/v1/components/hello",
        &format!("/v1/components/{digest}"),
    ] {
        let refused = server.get(path, GLOBEX).expect(404);
        assert!(refused["error"].is_string(), "{path}: {refused}");
        let missing = server.get(&path.replace("mine", "nobody").replace("hello", "nothing"), GLOBEX);
        assert_eq!(
            missing.status, 404,
            "{path}: another tenant's must look like a missing one"
        );
    }
    server
        .post_bytes("/v1/runs/mine/signals/go", GLOBEX, b"{}".to_vec())
        .expect(404);
    server.post_json("/v1/runs/mine/replay", GLOBEX, &json!({})).expect(404);
    server.post_json("/v1/runs/mine/cancel", GLOBEX, &json!({})).expect(404);
    let by_digest = json!({"component": digest, "workflow": "greet", "input": {"name": "Eve"}});
    server.post_json("/v1/runs", GLOBEX, &by_digest).expect(404);
    assert_eq!(server.get("/v1/components", GLOBEX).expect(200), json!([]));
    assert_eq!(server.get("/v1/runs", GLOBEX).expect(200)["runs"], json!([]));

    let wrong = server.get("/v1/runs/mine", "sst_wrong");
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.headers["www-authenticate"], "Bearer");
    assert_eq!(server.get("/v1/runs", "").status, 401);
}

#[test]
fn quotas_refuse_with_413_and_429_and_cap_step_fuel() {
    let server = Server::start(&two_tenants(
        "max_component_bytes = 50000",
        "max_active_runs = 1\nstep_fuel = 10000000",
    ));
    let too_big = std::fs::read(stepstone_e2e::guest("order")).unwrap();
    assert!(too_big.len() > 50_000);
    let refused = server
        .post_bytes("/v1/components?name=order", ACME, too_big)
        .expect(413);
    assert!(
        refused["error"].as_str().unwrap().contains("limit of 50000 bytes"),
        "{refused}"
    );
    server.upload(ACME, "wat-step");

    // A step asking for more fuel than the quota gets the quota's fuel.
    server.upload(GLOBEX, "hostile");
    let spin = json!({"step": "spin", "options": {"fuel": 1_000_000_000_000u64}});
    start(&server, GLOBEX, "hostile", "call-limited", spin, "capped");
    let capped = wait(&server, GLOBEX, "capped");
    assert_eq!(capped["output"]["error_kind"], "fuel-exhausted", "{capped}");

    // While one run is active (waiting for its approval), a second is
    // refused until it ends.
    server.upload(GLOBEX, "order");
    start(&server, GLOBEX, "order", "place-order", order("q-1", 0), "waiting");
    let body = json!({"component": "hostile", "workflow": "call-limited", "input": {"step": "boom"}});
    let reply = server.post_json("/v1/runs", GLOBEX, &body);
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert!(reply.headers.contains_key("retry-after"));
}

#[test]
fn a_component_that_compiles_too_long_is_refused_and_run_options_lower_the_quota() {
    let server = Server::start_on(Host::with_own_cache(), &two_tenants("compile_timeout_ms = 1", ""));
    let refused = server
        .post_bytes(
            "/v1/components?name=order",
            ACME,
            std::fs::read(stepstone_e2e::guest("order")).unwrap(),
        )
        .expect(400);
    assert!(
        refused["error"].as_str().unwrap().contains("took over 1ms"),
        "{refused}"
    );
    assert!(
        server.host.stored_objects().is_empty(),
        "{:?}",
        server.host.stored_objects()
    );

    server.upload(GLOBEX, "hostile");
    let body = json!({
        "component": "hostile", "workflow": "call-limited", "run_id": "lowered",
        "input": {"step": "spin", "options": {"fuel": 1_000_000_000_000u64}},
        "options": {"fuel": 1_000_000},
    });
    server.post_json("/v1/runs", GLOBEX, &body).expect(202);
    let lowered = wait(&server, GLOBEX, "lowered");
    assert_eq!(lowered["output"]["error_kind"], "fuel-exhausted", "{lowered}");
    let fuel = server.metric(r#"stepstone_fuel_consumed_total{tenant="globex"}"#);
    assert!(fuel <= 1_000_000.0, "the run's limit held: {fuel}");
}

#[test]
fn bad_uploads_are_400_with_a_reason_and_store_nothing() {
    let server = Server::start(&default_tenants());
    let empty_component = b"\0asm\x0d\x00\x01\x00".to_vec();
    let core_module = b"\0asm\x01\0\0\0".to_vec();
    let valid = std::fs::read(stepstone_e2e::guest("hello")).unwrap();
    // A name must not read as a digest: references to it would mean that digest.
    let digest_like = "aB".repeat(32);
    let cases: [(&str, Vec<u8>, &str); 5] = [
        ("random", b"definitely not wasm".to_vec(), "not a WebAssembly component"),
        ("core", core_module, "core WebAssembly module"),
        ("no-world", empty_component, "does not export"),
        ("empty", Vec::new(), "body is empty"),
        (
            &digest_like,
            valid,
            "is 64 hex digits, which is how a digest is written",
        ),
    ];
    for (name, bytes, reason) in cases {
        let refused = server
            .post_bytes(&format!("/v1/components?name={name}"), ACME, bytes)
            .expect(400);
        assert!(refused["error"].as_str().unwrap().contains(reason), "{name}: {refused}");
    }
    assert!(
        server.host.stored_objects().is_empty(),
        "{:?}",
        server.host.stored_objects()
    );
}

#[test]
fn a_killed_server_finishes_every_run_after_restart_without_rerunning_steps() {
    let server = Server::start(&default_tenants());
    server.upload(ACME, "order");
    start(
        &server,
        ACME,
        "order",
        "place-order",
        order("k-sleep", 2_500),
        "k-sleep",
    );
    start(&server, ACME, "order", "place-order", order("k-signal", 0), "k-signal");
    for run in ["k-sleep", "k-signal"] {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while server
            .get(&format!("/v1/runs/{run}/journal"), ACME)
            .expect(200)
            .as_array()
            .unwrap()
            .len()
            < 2
        {
            assert!(std::time::Instant::now() < deadline, "{run} never charged");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let before: Vec<Value> = ["k-sleep", "k-signal"]
        .iter()
        .map(|run| server.get(&format!("/v1/runs/{run}/journal"), ACME).expect(200))
        .collect();

    let server = server.restart_after("KILL");
    for run in ["k-sleep", "k-signal"] {
        server
            .post_bytes(
                &format!("/v1/runs/{run}/signals/approve"),
                ACME,
                br#"{"approved":true}"#.to_vec(),
            )
            .expect(202);
    }
    for (run, before) in ["k-sleep", "k-signal"].iter().zip(before) {
        let finished = wait(&server, ACME, run);
        assert_eq!(finished["output"]["tracking"], format!("trk-{run}"), "{finished}");
        let after = server.get(&format!("/v1/runs/{run}/journal"), ACME).expect(200);
        let before = before.as_array().unwrap();
        assert_eq!(
            after.as_array().unwrap()[..before.len()],
            before[..],
            "{run}: a finished step ran again"
        );
    }
}

#[test]
fn cancelling_interrupts_a_running_step_and_ends_the_run_cancelled() {
    let server = Server::start(&default_tenants());
    server.upload(ACME, "hostile");
    let slow = json!({"step": "slow", "input": {"ms": 60_000}});
    start(&server, ACME, "hostile", "call-limited", slow, "long");
    std::thread::sleep(Duration::from_millis(500));
    let started = std::time::Instant::now();
    let body = json!({"reason": "changed my mind"});
    server.post_json("/v1/runs/long/cancel", ACME, &body).expect(202);
    let finished = wait(&server, ACME, "long");
    assert_eq!(finished["state"], "cancelled", "{finished}");
    assert_eq!(finished["reason"], "changed my mind");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the step was not interrupted: {:?}",
        started.elapsed()
    );
    let journal = server.get("/v1/runs/long/journal", ACME).expect(200);
    assert_eq!(journal[0]["name"], "slow");
    assert_eq!(
        journal[0]["recorded"],
        json!({"Cancelled": {"reason": "changed my mind"}}),
        "the interrupted step is journaled as cancelled, not as its result"
    );
    let again = server.post_json("/v1/runs/long/cancel", ACME, &body).expect(409);
    assert!(again["error"].as_str().unwrap().contains("already finished"), "{again}");
    server.post_json("/v1/runs/nobody/cancel", ACME, &body).expect(404);
}

#[test]
fn the_cli_drives_a_server_with_a_token() {
    let server = Server::start(&default_tenants());
    let cli = |args: &[&str]| {
        let mut full = vec!["--server", server.url.as_str(), "--token", ACME];
        full.extend_from_slice(args);
        server.host.run(&full)
    };
    let wasm = stepstone_e2e::guest("order");
    let uploaded = cli(&["upload", stepstone_e2e::arg(&wasm), "--name", "order"])
        .success()
        .json();
    assert_eq!(uploaded["name"], "order");
    let input = order("c-1", 0).to_string();
    let run = cli(&["start", "order", "place-order", "--input", &input, "--run-id", "c-1"]).success();
    assert_eq!(run.stdout().trim(), "c-1");
    cli(&["signal", "c-1", "approve", r#"{"approved":true}"#]).success();
    let finished = cli(&["wait", "c-1", "--timeout", "60s"]).success().json();
    assert_eq!(finished["output"]["tracking"], "trk-c-1", "{finished}");
    assert_eq!(cli(&["status", "c-1"]).success().json()["state"], "completed");
    assert_eq!(cli(&["history", "c-1"]).success().json().as_array().unwrap().len(), 5);
    assert_eq!(cli(&["replay", "c-1"]).success().json()["verdict"], "identical");
    let refused = cli(&["cancel", "c-1"]).failure();
    assert!(
        refused.contains("already finished") && refused.contains("409"),
        "{refused}"
    );

    let mut wrong = server
        .host
        .command(&["--server", &server.url, "--token", "sst_wrong", "status", "c-1"]);
    let stderr = String::from_utf8_lossy(&wrong.output().unwrap().stderr).into_owned();
    assert!(stderr.contains("refused the token"), "{stderr}");
}

/// Runs that wait for a signal hold no instance: 10,000 of them fit in
/// 500 MiB, and all complete once signalled.
#[test]
fn ten_thousand_waiting_runs_stay_small_and_all_complete() {
    const RUNS: usize = 10_000;
    let server = Server::start(&default_tenants());
    server.upload(ACME, "hello");
    let in_parallel = |job: &(dyn Fn(usize) + Sync)| {
        std::thread::scope(|scope| {
            for worker in 0..8 {
                scope.spawn(move || (worker..RUNS).step_by(8).for_each(job));
            }
        });
    };
    in_parallel(&|i| {
        let body = json!({"component": "hello", "workflow": "await-go", "input": {}, "run_id": format!("w-{i}")});
        server.post_json("/v1/runs", ACME, &body).expect(202);
    });
    let patience = Duration::from_secs(300);
    server.await_metric(r#"stepstone_runs_evicted{tenant="acme"}"#, RUNS as f64, patience);
    let rss = server.rss_bytes();
    eprintln!("RSS with {RUNS} runs waiting for a signal: {} MiB", rss >> 20);
    assert!(rss < 500 << 20, "{} MiB", rss >> 20);

    in_parallel(&|i| {
        server
            .post_bytes(&format!("/v1/runs/w-{i}/signals/go"), ACME, format!("{i}").into_bytes())
            .expect(202);
    });
    let completed = r#"stepstone_runs_finished_total{tenant="acme",outcome="completed"}"#;
    server.await_metric(completed, RUNS as f64, patience);
    for i in [0, 4_321, RUNS - 1] {
        assert_eq!(wait(&server, ACME, &format!("w-{i}"))["output"], json!(i));
    }
}

#[test]
fn cancelling_a_parent_cancels_its_children() {
    let server = Server::start(&default_tenants());
    server.upload(ACME, "hello");
    start(&server, ACME, "hello", "await-go-child", json!({}), "parent");
    await_state(&server, "parent.0", "awaiting-signal");
    server
        .post_json("/v1/runs/parent/cancel", ACME, &json!({"reason": "stop all"}))
        .expect(202);
    assert_eq!(wait(&server, ACME, "parent")["state"], "cancelled");
    let child = wait(&server, ACME, "parent.0");
    assert_eq!(child["state"], "cancelled", "{child}");
    assert!(
        child["reason"]
            .as_str()
            .unwrap()
            .contains("its parent parent was cancelled"),
        "{child}"
    );
}

#[test]
fn a_child_signalled_through_the_api_ends_its_parent() {
    let server = Server::start(&default_tenants());
    server.upload(ACME, "hello");
    start(&server, ACME, "hello", "await-go-child", json!({}), "p2");
    await_state(&server, "p2.0", "awaiting-signal");
    // Long enough for the parent to have been evicted while it awaits the child.
    std::thread::sleep(Duration::from_millis(600));
    server
        .post_bytes("/v1/runs/p2.0/signals/go", ACME, br#"{"done":true}"#.to_vec())
        .expect(202);
    assert_eq!(wait(&server, ACME, "p2")["output"], json!({"done": true}));
}

#[test]
fn a_terminated_server_lets_the_running_step_finish_and_journal_it() {
    let server = Server::start(&default_tenants());
    server.upload(ACME, "hostile");
    let slow = json!({"step": "slow", "input": {"ms": 1_500}});
    start(&server, ACME, "hostile", "call-limited", slow, "graceful");
    let running = r#"stepstone_step_attempts_running{tenant="acme"}"#;
    server.await_metric(running, 1.0, Duration::from_secs(30));

    let server = server.restart_after("TERM");
    let journal = server.get("/v1/runs/graceful/journal", ACME).expect(200);
    assert_eq!(
        journal[0]["name"], "slow",
        "the step in flight finished and was journaled before the exit: {journal}"
    );
    let finished = wait(&server, ACME, "graceful");
    assert_eq!(finished["state"], "completed", "{finished}");
    assert_eq!(
        server.get("/v1/runs/graceful/journal", ACME).expect(200),
        journal,
        "the step did not run again"
    );
}

#[test]
fn without_a_config_one_default_tenant_gets_a_token_printed_at_start() {
    let server = Server::start_with(stepstone_e2e::Host::new(), &["--log-format", "json"]);
    let log = server.log();
    let token = &server.printed_token();
    assert!(log.contains("stepstone tenant add default"), "{log}");
    assert_eq!(server.upload(token, "hello")["name"], "hello");
    assert_eq!(server.get("/v1/components", "sst_other").status, 401);
    // Logs are JSON lines, one event each.
    let events: Vec<Value> = log.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert!(
        events
            .iter()
            .any(|e| e["fields"]["message"] == "recovered unfinished runs"),
        "{log}"
    );
}

#[test]
fn payload_and_start_rate_quotas_answer_413_and_429() {
    let server = Server::start(&two_tenants("max_payload_bytes = 100\nmax_new_runs_per_minute = 1", ""));
    server.upload(ACME, "hello");
    let big = json!({"component": "hello", "workflow": "greet", "input": {"name": "x".repeat(200)}});
    let refused = server.post_json("/v1/runs", ACME, &big).expect(413);
    assert!(refused["error"].as_str().unwrap().contains("at most 100"), "{refused}");
    start(&server, ACME, "hello", "greet", json!({"name": "Ada"}), "first");
    let second = json!({"component": "hello", "workflow": "greet", "input": {"name": "Bob"}});
    let limited = server.post_json("/v1/runs", ACME, &second);
    assert_eq!(limited.status, 429, "{}", limited.body);
    let retry_after: u64 = limited.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let signal = server.post_bytes("/v1/runs/first/signals/s", ACME, vec![b'1'; 200]);
    assert_eq!(signal.status, 413, "{}", signal.body);
}

#[test]
fn a_name_points_at_the_newest_upload_and_a_digest_pins_a_build() {
    let server = Server::start(&default_tenants());
    let hello = server.upload(ACME, "hello")["digest"].clone();
    let order = std::fs::read(stepstone_e2e::guest("order")).unwrap();
    let newer = server.post_bytes("/v1/components?name=hello", ACME, order).expect(201)["digest"].clone();
    assert_ne!(hello, newer);
    assert_eq!(server.get("/v1/components/hello", ACME).expect(200)["digest"], newer);
    let pinned = server
        .get(&format!("/v1/components/{}", hello.as_str().unwrap()), ACME)
        .expect(200);
    assert_eq!(pinned["workflows"][0], "greet", "{pinned}");
}

#[test]
fn a_name_keeps_every_build_it_pointed_at_as_a_version_a_run_can_start_on() {
    let server = Server::start(&default_tenants());
    let hello = server.upload(ACME, "hello")["digest"].clone();
    let order = std::fs::read(stepstone_e2e::guest("order")).expect("built");
    let newer = server.post_bytes("/v1/components?name=hello", ACME, order).expect(201)["digest"].clone();
    server.upload(ACME, "hello");
    // The build the name points at already: no new version.
    server.upload(ACME, "hello");
    let described = server.get("/v1/components/hello", ACME).expect(200);
    let versions: Vec<(u64, Value)> = described["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| (v["version"].as_u64().expect("a number"), v["digest"].clone()))
        .collect();
    assert_eq!(versions, [(1, hello.clone()), (2, newer), (3, hello)], "{described}");

    let on = |version: u64, run: &str| {
        let body = json!({"component": "hello", "version": version, "workflow": "greet",
            "input": {"name": "Ada"}, "run_id": run});
        server.post_json("/v1/runs", ACME, &body)
    };
    on(1, "on-v1").expect(202);
    assert_eq!(wait(&server, ACME, "on-v1")["output"]["greeting"], "Hello, Ada!");
    let no_greet = on(2, "on-v2").expect(404);
    assert!(
        no_greet["error"]
            .as_str()
            .unwrap_or_default()
            .contains("no workflow `greet`"),
        "{no_greet}"
    );
    let past = on(4, "on-v4").expect(404);
    assert!(
        past["error"].as_str().unwrap_or_default().contains("has 1 to 3"),
        "{past}"
    );
    on(0, "on-v0").expect(404);
    server.get("/v1/components/hello", GLOBEX).expect(404);

    let url = server.url.as_str();
    let cli = |args: &[&str]| {
        let mut full = vec!["--server", url, "--token", ACME];
        full.extend_from_slice(args);
        server.host.run(&full)
    };
    let listed = cli(&["versions", "hello"]).success().json();
    assert_eq!(listed.as_array().map(Vec::len), Some(3), "{listed}");
    let run = cli(&["start", "hello@3", "greet", "--input", r#"{"name":"Bo"}"#]).success();
    let run = run.stdout().trim().to_owned();
    assert_eq!(wait(&server, ACME, &run)["output"]["greeting"], "Hello, Bo!");
    let refused = cli(&["start", "hello@0", "greet"]).failure();
    assert!(refused.contains("a number from 1"), "{refused}");
}

/// A valid step component with `functions` extra functions, so that
/// compiling it takes seconds: the WAT step padded with dead code.
fn huge_component(server: &Server, functions: usize) -> Vec<u8> {
    let wat = std::fs::read_to_string(stepstone_e2e::root().join("examples-guests/wat-step/step.wat")).unwrap();
    let end = wat.trim_end().rfind(')').expect("the module's closing paren");
    let padding: String = (0..functions)
        .map(|k| {
            format!(
                "(func $pad{k} (param i32) (result i32) (local i32) \
                 (local.set 1 (i32.mul (local.get 0) (i32.const {k}))) \
                 (i32.add (i32.xor (local.get 1) (i32.const 7)) (i32.rotl (local.get 0) (local.get 1))))\n"
            )
        })
        .collect();
    let dir = server.host.data_dir();
    std::fs::write(dir.join("huge.wat"), format!("{}{padding}{}", &wat[..end], &wat[end..])).unwrap();
    let (wat, wasm) = (dir.join("huge.wat"), dir.join("huge.wasm"));
    let args = ["componentize", stepstone_e2e::arg(&wat), "--world", "steps", "-o"];
    server
        .host
        .run(&[&args[..], &[stepstone_e2e::arg(&wasm)]].concat())
        .success();
    std::fs::read(wasm).unwrap()
}

#[test]
fn one_tenants_huge_upload_does_not_stall_another_tenants_runs() {
    let server = Server::start_on(Host::with_own_cache(), &default_tenants());
    server.upload(GLOBEX, "hello");
    let huge = huge_component(&server, 40_000);
    let compiling = r#"stepstone_uploads_compiling{tenant="acme"}"#;
    std::thread::scope(|scope| {
        let upload = scope.spawn(|| server.post_bytes("/v1/components?name=huge", ACME, huge).expect(201));
        server.await_metric(compiling, 1.0, Duration::from_secs(30));
        for n in 0..5 {
            let run = format!("while-acme-compiles-{n}");
            start(&server, GLOBEX, "hello", "greet", json!({"name": n.to_string()}), &run);
            let done = wait(&server, GLOBEX, &run);
            assert_eq!(done["output"], json!({"greeting": format!("Hello, {n}!")}), "{done}");
        }
        assert_eq!(
            server.metric(compiling),
            1.0,
            "globex's five runs finished while acme's upload was still compiling"
        );
        let stored = upload.join().expect("the upload thread");
        assert_eq!(stored["steps"], json!(["wrap"]), "{stored}");
    });
}

#[test]
fn stored_components_are_held_to_the_tenants_count_and_bytes_quotas() {
    let hello_bytes = std::fs::metadata(stepstone_e2e::guest("hello")).unwrap().len();
    let server = Server::start(&two_tenants(
        "max_components = 2",
        &format!("max_component_storage_bytes = {}", hello_bytes + 10),
    ));
    server.upload(ACME, "hello");
    server.upload(ACME, "order");
    let third = std::fs::read(stepstone_e2e::guest("fanout")).unwrap();
    let refused = server
        .post_bytes("/v1/components?name=fanout", ACME, third.clone())
        .expect(403);
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("2 components stored, its quota"),
        "{refused}"
    );
    server.upload(ACME, "hello");
    assert_eq!(
        server.get("/v1/components/fanout", ACME).status,
        404,
        "nothing was stored"
    );

    server.upload(GLOBEX, "hello");
    let over = server.post_bytes("/v1/components", GLOBEX, third).expect(403);
    assert!(
        over["error"].as_str().unwrap().contains("would pass its quota"),
        "{over}"
    );
}

#[test]
fn concurrent_sends_of_one_signal_id_store_it_once() {
    let server = Server::start(&default_tenants());
    server.upload(ACME, "order");
    start(&server, ACME, "order", "place-order", order("once", 0), "once");
    await_state(&server, "once", "awaiting-signal");
    // The run awaits `approve`: `other` is never taken, so every stored
    // copy stays in the store to be counted.
    std::thread::scope(|scope| {
        for _ in 0..20 {
            scope.spawn(|| {
                server
                    .post_bytes("/v1/runs/once/signals/other?signal_id=dup-1", ACME, b"1".to_vec())
                    .expect(202)
            });
        }
    });
    let stored = server
        .host
        .stored_objects()
        .into_iter()
        .filter(|path| path.to_string_lossy().contains("/runs/once/signals/other/"))
        .count();
    assert_eq!(stored, 1, "20 sends of one id stored {stored} signals");
}

#[test]
fn run_pages_continue_after_the_last_run_shown_and_name_unreadable_runs() {
    let server = Server::start(&default_tenants());
    server.upload(ACME, "hello");
    for n in 0..5 {
        start(
            &server,
            ACME,
            "hello",
            "greet",
            json!({"name": format!("n{n}")}),
            &format!("p-{n}"),
        );
        wait(&server, ACME, &format!("p-{n}"));
    }
    let first = server.get("/v1/runs?limit=2", ACME).expect(200);
    let cursor = first["next_cursor"].as_str().expect("more pages").to_owned();
    let names = |page: &Value| -> Vec<String> {
        page["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&first), ["p-0", "p-1"]);
    let record = server.host.data_dir().join("objects/tenants/acme/runs/p-1/run");
    std::fs::write(&record, b"garbage").unwrap();
    // The run the cursor names is now unreadable: the next page still
    // starts after it, reading no run before it.
    let second = server
        .get(&format!("/v1/runs?limit=2&cursor={cursor}"), ACME)
        .expect(200);
    assert_eq!(names(&second), ["p-2", "p-3"]);
    assert_eq!(second["unreadable"], json!([]), "{second}");
    // A page that reaches it names it, and goes on past it.
    let all = server.get("/v1/runs?limit=3", ACME).expect(200);
    assert_eq!(names(&all), ["p-0", "p-2", "p-3"]);
    assert_eq!(all["unreadable"][0]["run_id"], "p-1", "{all}");
    assert!(
        all["unreadable"][0]["error"].as_str().unwrap().contains("runs/p-1/run"),
        "{all}"
    );
    let bad = server.get("/v1/runs?cursor=nonsense", ACME).expect(400);
    assert!(bad["error"].as_str().unwrap().contains("next_cursor"), "{bad}");
}

#[test]
fn upload_refusals_name_the_upload_once_and_say_what_to_do() {
    let server = Server::start(&default_tenants());
    let module = b"\0asm\x01\0\0\0".to_vec();
    let refused = server.post_bytes("/v1/components?name=plain", ACME, module).expect(400);
    let message = refused["error"].as_str().unwrap();
    assert!(
        message.starts_with("component `plain` is a core WebAssembly module"),
        "{message}"
    );
    assert!(message.contains("stepstone componentize MODULE.wasm"), "{message}");
    let mut torn = std::fs::read(stepstone_e2e::guest("hello")).unwrap();
    torn.truncate(torn.len() / 2);
    let refused = server.post_bytes("/v1/components?name=torn", ACME, torn).expect(400);
    let message = refused["error"].as_str().unwrap();
    assert!(
        message.starts_with("component `torn` is not a valid WebAssembly component"),
        "{message}"
    );
    assert!(!message.contains("component component"), "{message}");
}

#[test]
fn a_component_whose_describe_blocks_is_refused_at_describes_deadline() {
    let server = Server::start(&default_tenants());
    let stalled = std::fs::read(stepstone_e2e::guest("stalled")).unwrap();
    let asked = std::time::Instant::now();
    let refused = server
        .post_bytes("/v1/components?name=stalled", ACME, stalled)
        .expect(400);
    let took = asked.elapsed();
    let message = refused["error"].as_str().unwrap();
    assert!(message.contains("`describe` failed (timed-out)"), "{message}");
    assert!(message.contains("inside a host call"), "{message}");
    assert!(
        took < Duration::from_secs(30),
        "describe blocked the upload for {took:?}"
    );
    assert_eq!(
        server.get("/v1/components/stalled", ACME).status,
        404,
        "nothing was stored"
    );
}

#[test]
fn an_upgrade_moves_the_runs_that_replay_identically_and_names_where_the_others_diverge() {
    let server = Server::start(&default_tenants());
    let hello = server.upload(ACME, "hello")["digest"].clone();
    let order_build = server.upload(ACME, "order")["digest"].clone();
    for run in ["wait-a", "wait-b"] {
        start(&server, ACME, "hello", "await-go", json!({}), run);
        await_state(&server, run, "awaiting-signal");
    }
    start(&server, ACME, "order", "place-order", order("o-up", 0), "saga");
    await_state(&server, "saga", "awaiting-signal");

    // The same code with a schema for `go`: a build of its own, which
    // shows itself by refusing a `go` that breaks the schema.
    let dir = tempfile::tempdir().expect("a scratch directory");
    let (schemas, typed) = (dir.path().join("schemas.json"), dir.path().join("typed.wasm"));
    let schema = json!({"go": {"type": "object", "properties": {"ok": {"type": "boolean"}}}});
    std::fs::write(&schemas, schema.to_string()).expect("written");
    let hello_wasm = stepstone_e2e::guest("hello");
    let paths = [hello_wasm.as_path(), schemas.as_path(), typed.as_path()].map(stepstone_e2e::arg);
    (server.host)
        .run(&["signal-schemas", paths[0], paths[1], "-o", paths[2]])
        .success();
    let typed_bytes = std::fs::read(&typed).expect("read");
    let new = server.post_bytes("/v1/components", ACME, typed_bytes).expect(201)["digest"].clone();
    let upgrade = |dry_run: bool| {
        let body = json!({"to": new, "dry_run": dry_run});
        server
            .post_json("/v1/components/hello/upgrade", ACME, &body)
            .expect(200)
    };
    let component_of = |run: &str| server.get(&format!("/v1/runs/{run}"), ACME).expect(200)["component"].clone();

    let dry = upgrade(true);
    assert_eq!(dry["identical"], json!(["wait-a", "wait-b"]), "{dry}");
    assert_eq!(
        (dry["moved"].clone(), dry["diverged"].clone()),
        (json!(false), json!([]))
    );
    assert_eq!(component_of("wait-a"), hello, "a dry run moves nothing");
    let moved = upgrade(false);
    assert_eq!(
        (moved["identical"].clone(), moved["moved"].clone()),
        (json!(["wait-a", "wait-b"]), json!(true))
    );
    assert_eq!(component_of("wait-a"), new);
    assert_eq!(component_of("saga"), order_build, "another build's run is left alone");
    server
        .post_json("/v1/runs/wait-a/signals/go", ACME, &json!({"ok": "yes"}))
        .expect(400);

    // It goes on on the new build after a restart, from where it waited.
    let server = server.restart_after("KILL");
    server
        .post_json("/v1/runs/wait-a/signals/go", ACME, &json!({"ok": true}))
        .expect(202);
    assert_eq!(wait(&server, ACME, "wait-a")["state"], "completed");
    assert_eq!(server.get("/v1/runs/wait-a", ACME).expect(200)["journaled_calls"], 1);
    let resubmitted = json!({"component": "hello", "workflow": "await-go", "input": {}, "run_id": "wait-b"});
    server.post_json("/v1/runs", ACME, &resubmitted).expect(202);

    // A build that orders the saga's steps otherwise diverges at its first
    // call: through the CLI, nothing moves and the exit code says so.
    let reordered = stepstone_e2e::guest("order-reordered");
    let url = server.url.as_str();
    let args = ["--server", url, "--token", ACME, "upgrade", "--from", "order", "--to"];
    let mut full = args.to_vec();
    full.extend([stepstone_e2e::arg(&reordered), "--dry-run"]);
    let run = server.host.run(&full);
    assert!(!run.0.status.success(), "a divergence is a failure: {}", run.stdout());
    let report = run.json();
    assert_eq!(report["diverged"][0]["run_id"], "saga", "{report}");
    assert_eq!(report["diverged"][0]["seq"], 0, "{report}");
    full.pop();
    server.host.run(&full).failure();
    assert_eq!(server.get("/v1/runs/saga", ACME).expect(200)["component"], order_build);
    let other = json!({"to": new});
    server
        .post_json("/v1/components/hello/upgrade", GLOBEX, &other)
        .expect(404);
}

#[test]
fn an_upgrade_checks_at_most_a_page_of_runs_a_call_and_says_where_to_go_on() {
    let server = Server::start(&default_tenants());
    server.upload(ACME, "hello");
    let new = server.upload(ACME, "bench")["digest"].clone();
    // One run past a page of 100: each waits for `go` (a different build's
    // workflows diverge at once, so the check is quick and moves nothing).
    let runs: Vec<Value> = (0..101)
        .map(|_| json!({"component": "hello", "workflow": "await-go", "input": {}}))
        .collect();
    let group = json!({"group_id": "page", "runs": runs});
    server.post_json("/v1/groups", ACME, &group).expect(202);
    for i in 0..101 {
        await_state(&server, &format!("page-{i:04}"), "awaiting-signal");
    }
    let page = |after: Value| {
        let body = json!({"to": new, "dry_run": true, "after": after});
        server
            .post_json("/v1/components/hello/upgrade", ACME, &body)
            .expect(200)
    };
    let first = page(Value::Null);
    let checked = |report: &Value| {
        report["identical"].as_array().map_or(0, Vec::len) + report["diverged"].as_array().map_or(0, Vec::len)
    };
    assert_eq!(checked(&first), 100, "{first}");
    assert_eq!(first["next_after"], "page-0099", "{first}");
    let rest = page(first["next_after"].clone());
    assert_eq!(checked(&rest), 1, "{rest}");
    assert_eq!(rest["next_after"], Value::Null, "{rest}");
}

#[test]
fn a_runs_log_is_served_a_page_at_a_time_to_its_tenant_only() {
    let server = Server::start(&default_tenants());
    server.upload(ACME, "order");
    start(&server, ACME, "order", "place-order", order("l-1", 1), "l-1");
    // It waits for the approval past the eviction: its first execution has
    // ended, and stored its lines, by the time the second begins.
    await_state(&server, "l-1", "awaiting-signal");
    let approve = server.post_bytes("/v1/runs/l-1/signals/approve", ACME, br#"{"approved":true}"#.to_vec());
    assert_eq!(approve.status, 202);
    assert_eq!(wait(&server, ACME, "l-1")["state"], "completed");

    let all = server.get("/v1/runs/l-1/logs", ACME).expect(200);
    assert_eq!(all["next_cursor"], Value::Null, "{all}");
    let lines = all["lines"].as_array().unwrap();
    let shown: Vec<(String, String, Value, Value, String)> = lines
        .iter()
        .map(|l| {
            let text = |field: &str| l[field].as_str().unwrap().to_owned();
            (
                text("source"),
                text("level"),
                l["step"].clone(),
                l["attempt"].clone(),
                text("message"),
            )
        })
        .collect();
    let expected = [
        ("guest", "info", json!("reserve"), json!(1), "reserving book for l-1"),
        (
            "host",
            "warn",
            json!("charge"),
            json!(1),
            "attempt 1 failed (failed): payment service unavailable (the first attempt always fails); retrying in 100ms",
        ),
        (
            "guest",
            "info",
            json!("charge"),
            json!(2),
            "charging 1200 cents for l-1",
        ),
        ("guest", "info", json!("ship"), json!(1), "shipping book for l-1"),
    ];
    let expected: Vec<(String, String, Value, Value, String)> = expected
        .into_iter()
        .map(|(s, l, step, a, m)| (s.to_owned(), l.to_owned(), step, a, m.to_owned()))
        .collect();
    assert_eq!(shown, expected);
    let seqs: Vec<&Value> = lines.iter().map(|l| &l["seq"]).collect();
    assert_eq!(seqs, [&json!(0), &json!(1), &json!(1), &json!(4)]);
    assert!(lines.iter().all(|l| l["at_ms"].as_u64().unwrap() > 1_700_000_000_000));

    // A page of one line at a time walks the same lines, each once.
    let mut walked = Vec::new();
    let mut path = "/v1/runs/l-1/logs?limit=1".to_owned();
    loop {
        let page = server.get(&path, ACME).expect(200);
        let page_lines = page["lines"].as_array().unwrap();
        assert!(page_lines.len() <= 1);
        walked.extend(page_lines.iter().map(|l| l["message"].clone()));
        match page["next_cursor"].as_str() {
            Some(next) => path = format!("/v1/runs/l-1/logs?limit=1&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(walked, lines.iter().map(|l| l["message"].clone()).collect::<Vec<_>>());
    let last = lines.last().unwrap()["cursor"].as_str().unwrap();
    let after_last = server
        .get(&format!("/v1/runs/l-1/logs?cursor={last}"), ACME)
        .expect(200);
    assert_eq!(after_last, json!({"lines": [], "next_cursor": null}));

    for refused in [
        "limit=0",
        "limit=1001",
        "limit=-1",
        "cursor=12-run",
        "cursor=",
        &format!("cursor={last}x"),
    ] {
        let reply = server.get(&format!("/v1/runs/l-1/logs?{refused}"), ACME);
        assert_eq!(reply.status, 400, "{refused}: {}", reply.body);
    }
    assert_eq!(server.get("/v1/runs/l-1/logs?limit=1000", ACME).status, 200);
    assert_eq!(
        server.get("/v1/runs/l-1/logs", GLOBEX).status,
        404,
        "another tenant's run"
    );
    assert_eq!(server.get("/v1/runs/nope/logs", ACME).status, 404);
    assert_eq!(server.get("/v1/runs/l-1/logs", "sst_wrong").status, 401);
}
