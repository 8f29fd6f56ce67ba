//! The run lifecycle beyond start, signal and cancel: runs scheduled to
//! start later (`start_at`, `delay`) and runs with a deadline (`deadline`,
//! `timeout`), through the API and the CLI, across a host's death; and
//! what operators and authors reach a run with: pausing, restarting,
//! advancing, hooks, groups, and the streams a run appends to.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use stepstone_e2e::{
    Host, Origin, ReliabilityResult, Server, ServerEvent, arg, guest, order_input, record_reliability, tenants_file,
    token_hash,
};

const TOKEN: &str = "sst_lifecycle";

fn server() -> Server {
    let server = Server::start(&tenants_file(&[("acme", TOKEN)]));
    server.upload(TOKEN, "hello");
    server.upload(TOKEN, "order");
    server
}

fn greet(run: &str, when: Value) -> Value {
    with_times(
        json!({"component": "hello", "workflow": "greet", "input": {"name": "Ada"}, "run_id": run}),
        when,
    )
}

/// A `POST /v1/runs` body with the fields of `when` (`delay`, `timeout`, ...).
fn with_times(mut body: Value, when: Value) -> Value {
    body.as_object_mut()
        .expect("an object")
        .extend(when.as_object().cloned().unwrap_or_default());
    body
}

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970");
    u64::try_from(since.as_millis()).expect("ms fit u64")
}

#[test]
fn a_delayed_run_waits_in_the_store_and_starts_on_time_after_a_restart() {
    let server = server();
    server
        .post_json("/v1/runs", TOKEN, &greet("later", json!({"delay": "3s"})))
        .expect(202);
    let scheduled = server.get("/v1/runs/later", TOKEN).expect(200);
    assert_eq!(scheduled["state"], "scheduled", "{scheduled}");
    let start_at_ms = scheduled["start_at_ms"].as_u64().expect("a start time");
    let created_at_ms = scheduled["created_at_ms"].as_u64().expect("a creation time");
    assert_eq!(start_at_ms - created_at_ms, 3_000, "{scheduled}");

    let server = server.restart_after("KILL");
    let done = server.get("/v1/runs/later/wait?timeout=60s", TOKEN).expect(200);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["output"]["greeting"], "Hello, Ada!");
    let journal = server.get("/v1/runs/later/journal", TOKEN).expect(200);
    let first = journal[0]["started_at_ms"].as_u64().expect("a journaled step");
    assert!(
        first >= start_at_ms,
        "its first step started at {first}, before {start_at_ms}"
    );
    record_reliability(&ReliabilityResult {
        suite: "lifecycle",
        fault: "a host SIGKILLed while a run waited for its start time (delay 3 s)",
        trials: 1,
        outcome: "the restarted host started it at its time, not before, and it completed",
        lost: 0,
    });
}

#[test]
fn a_run_cancelled_before_its_start_ends_cancelled_having_run_nothing() {
    let server = server();
    server
        .post_json("/v1/runs", TOKEN, &greet("never", json!({"delay": "1h"})))
        .expect(202);
    server
        .post_json("/v1/runs/never/cancel", TOKEN, &json!({"reason": "changed my mind"}))
        .expect(202);
    let done = server.get("/v1/runs/never/wait?timeout=30s", TOKEN).expect(200);
    assert_eq!(done["state"], "cancelled", "{done}");
    assert_eq!(done["reason"], "changed my mind");
    assert_eq!(done["journaled_calls"], 0, "nothing ran: {done}");
}

#[test]
fn a_start_time_that_makes_no_sense_is_refused_and_one_passed_starts_at_once() {
    let server = server();
    let refused = |when: Value| {
        let reply = server.post_json("/v1/runs", TOKEN, &greet("bad", when));
        assert_eq!(reply.status, 400, "{}", reply.body);
        reply.body["error"].as_str().unwrap_or_default().to_owned()
    };
    let both = refused(json!({"delay": "4s", "start_at": "2030-01-01T00:00:00Z"}));
    assert!(both.contains("not both"), "{both}");
    let garbled = refused(json!({"start_at": "tomorrow at noon"}));
    assert!(garbled.contains("not an RFC 3339 time"), "{garbled}");
    let far = refused(json!({"delay": "400days"}));
    assert!(far.contains("at most 366 days ahead"), "{far}");
    let huge = refused(json!({"delay": "18446744073709551615s"}));
    assert!(huge.contains("at most 366 days ahead"), "{huge}");
    assert_eq!(server.get("/v1/runs/bad", TOKEN).status, 404, "nothing was stored");

    server
        .post_json(
            "/v1/runs",
            TOKEN,
            &greet("passed", json!({"start_at": "2001-09-09T01:46:40Z"})),
        )
        .expect(202);
    let done = server.get("/v1/runs/passed/wait?timeout=30s", TOKEN).expect(200);
    assert_eq!(done["state"], "completed", "{done}");
}

#[test]
fn the_cli_schedules_a_run_and_shows_it_waiting() {
    let host = Host::new();
    let wasm = guest("hello");
    let input = json!({"name": "Ada"}).to_string();
    let started = now_ms();
    let run = host
        .run(&["run", arg(&wasm), "greet", "--input", &input, "--delay", "1s"])
        .success();
    assert_eq!(run.json_line()["greeting"], "Hello, Ada!");
    let first = host.history(&run_id_of(&run.stderr()))[0]["started_at_ms"]
        .as_u64()
        .expect("a journaled step");
    assert!(
        first >= started + 1_000,
        "started {} ms after submission",
        first - started
    );

    host.run(&["upload", arg(&wasm), "--name", "hello"]).success();
    let at = "2099-01-01T00:00:00+01:00";
    let args = [
        "start",
        "hello",
        "greet",
        "--input",
        &input,
        "--run-id",
        "y2099",
        "--start-at",
        at,
    ];
    let refused = host.run(&args).failure();
    assert!(refused.contains("at most 366 days ahead"), "{refused}");
    let args = [
        "start", "hello", "greet", "--input", &input, "--run-id", "soon", "--delay", "10m",
    ];
    host.run(&args).success();
    let status = host.run(&["status", "soon"]).success().stdout();
    assert!(status.contains("scheduled to start at"), "{status}");
    let both = host
        .run(&["start", "hello", "greet", "--delay", "1s", "--start-at", at])
        .failure();
    assert!(both.contains("cannot be used with"), "{both}");
}

/// The run id a `stepstone run` logged as it started.
fn run_id_of(log: &str) -> String {
    log.lines()
        .find_map(|line| line.split("run started run=").nth(1))
        .map(|rest| rest.split_whitespace().next().unwrap_or_default().to_owned())
        .unwrap_or_else(|| panic!("no run id in {log}"))
}

/// An order that sleeps a minute before asking for approval.
fn slow_order(run: &str, when: Value) -> Value {
    let input = order_input(run, 60_000, json!({"approval_timeout_ms": 60_000}));
    with_times(
        json!({"component": "order", "workflow": "place-order", "input": input, "run_id": run}),
        when,
    )
}

/// The names of the steps a run's journal records, in order.
fn steps_of(journal: &Value) -> Vec<String> {
    journal
        .as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry["kind"] == "step")
        .filter_map(|entry| entry["name"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn a_run_past_its_deadline_compensates_and_ends_deadline_exceeded_after_a_restart() {
    let server = server();
    server
        .post_json("/v1/runs", TOKEN, &slow_order("late", json!({"timeout": "3s"})))
        .expect(202);
    let deadline_ms = server.get("/v1/runs/late", TOKEN).expect(200)["created_at_ms"]
        .as_u64()
        .expect("a creation time")
        + 3_000;
    while server.get("/v1/runs/late", TOKEN).expect(200)["state"] != "sleeping" {
        std::thread::sleep(Duration::from_millis(20));
    }
    let server = server.restart_after("KILL");
    let done = server.get("/v1/runs/late/wait?timeout=60s", TOKEN).expect(200);
    assert_eq!(done["state"], "failed", "{done}");
    assert_eq!(done["kind"], "deadline-exceeded", "{done}");
    assert!(
        done["message"].as_str().is_some_and(|m| m.contains("deadline")),
        "{done}"
    );
    let journal = server.get("/v1/runs/late/journal", TOKEN).expect(200);
    assert_eq!(
        steps_of(&journal),
        ["reserve", "charge", "refund", "release"],
        "compensated"
    );
    let ended = journal
        .as_array()
        .and_then(|entries| entries.last())
        .and_then(|entry| entry["finished_at_ms"].as_u64())
        .expect("a last entry");
    assert!(
        ended >= deadline_ms,
        "compensated at {ended}, before the deadline {deadline_ms}"
    );
    assert!(now_ms() < deadline_ms + 30_000, "the minute's sleep was cut short");
    record_reliability(&ReliabilityResult {
        suite: "lifecycle",
        fault: "a host SIGKILLed while a run with a 3 s timeout slept for a minute",
        trials: 1,
        outcome: "the restarted host cancelled it at its deadline; it refunded and released, and ended deadline-exceeded",
        lost: 0,
    });
}

#[test]
fn a_deadline_cancels_the_runs_children_too() {
    let server = server();
    let body =
        json!({"component": "hello", "workflow": "await-go-child", "input": {}, "run_id": "parent", "timeout": "2s"});
    server.post_json("/v1/runs", TOKEN, &body).expect(202);
    let done = server.get("/v1/runs/parent/wait?timeout=60s", TOKEN).expect(200);
    assert_eq!(done["kind"], "deadline-exceeded", "{done}");
    let journal = server.get("/v1/runs/parent/journal", TOKEN).expect(200);
    let child = journal
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|entry| entry["recorded"]["Child"]["run"]["Ok"].as_str())
        .unwrap_or_else(|| panic!("no child in {journal}"))
        .to_owned();
    let child = server
        .get(&format!("/v1/runs/{child}/wait?timeout=30s"), TOKEN)
        .expect(200);
    assert_eq!(child["state"], "cancelled", "{child}");
}

#[test]
fn a_deadline_that_makes_no_sense_is_refused() {
    let server = server();
    let refused = |when: Value| {
        let reply = server.post_json("/v1/runs", TOKEN, &greet("bad", when));
        assert_eq!(reply.status, 400, "{}", reply.body);
        reply.body["error"].as_str().unwrap_or_default().to_owned()
    };
    let both = refused(json!({"timeout": "4s", "deadline": "2030-01-01T00:00:00Z"}));
    assert!(both.contains("a deadline or a timeout, not both"), "{both}");
    let passed = refused(json!({"deadline": "2001-09-09T01:46:40Z"}));
    assert!(passed.contains("is not after its start"), "{passed}");
    let before_start = refused(json!({"delay": "1h", "deadline": chrono_in(60)}));
    assert!(before_start.contains("is not after its start"), "{before_start}");
    let zero = refused(json!({"timeout": "0s"}));
    assert!(zero.contains("a timeout above 0"), "{zero}");
    let far = refused(json!({"timeout": "400days"}));
    assert!(far.contains("deadline may be at most 366 days ahead"), "{far}");
    assert_eq!(server.get("/v1/runs/bad", TOKEN).status, 404, "nothing was stored");
}

/// An RFC 3339 time `seconds` from now.
fn chrono_in(seconds: u64) -> String {
    humantime::format_rfc3339_seconds(SystemTime::now() + Duration::from_secs(seconds)).to_string()
}

#[test]
fn the_cli_runs_with_a_timeout_to_its_deadline() {
    let host = Host::new();
    let wasm = guest("order");
    let input = order_input("cli-late", 60_000, json!({"approval_timeout_ms": 60_000})).to_string();
    let args = [
        "run",
        arg(&wasm),
        "place-order",
        "--input",
        &input,
        "--run-id",
        "cli-late",
        "--timeout",
        "2s",
    ];
    let failed = host.run(&args).failure();
    assert!(failed.contains("(deadline-exceeded)"), "{failed}");
    let steps: Vec<Value> = host
        .history("cli-late")
        .into_iter()
        .map(|entry| entry["call"]["name"].clone())
        .collect();
    assert_eq!(steps[..2], [json!("reserve"), json!("charge")], "{steps:?}");
    assert_eq!(
        steps[steps.len() - 2..],
        [json!("refund"), json!("release")],
        "{steps:?}"
    );
}

#[test]
fn finished_runs_past_their_tenants_retention_are_deleted_whole_even_across_a_restart() {
    const KEEPER: &str = "sst_lifecycle_keeper";
    let tenants = format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\nretention_ms = 2000\n\
         [[tenants]]\nid = \"keeper\"\ntoken_sha256 = [\"{}\"]\n",
        token_hash(TOKEN),
        token_hash(KEEPER)
    );
    let server = Server::start(&tenants);
    for token in [TOKEN, KEEPER] {
        let output = server.run_to_end(token, "hello", "greet", &json!({"name": "Ada"}), "done");
        assert_eq!(output["greeting"], "Hello, Ada!");
    }
    let waiting = json!({"component": "hello", "workflow": "await-go", "input": {}, "run_id": "waiting"});
    server.post_json("/v1/runs", TOKEN, &waiting).expect(202);
    assert!(!server.host.stored("tenants/acme/runs/done/").is_empty());
    // Killed before the 2 s are up: the restarted host finds the run by its
    // marker in the store, and deletes it on time.
    let server = server.restart_after("KILL");
    server.await_gone("/v1/runs/done", TOKEN);
    // Its claims hold the id a while after (late writes may land), then go.
    let left = server.host.stored("tenants/acme/runs/done/");
    assert!(
        left.keys().all(|key| key.starts_with("tenants/acme/runs/done/owners/")),
        "objects of a deleted run are left: {:?}",
        left.keys()
    );

    let still = server.get("/v1/runs/waiting", TOKEN).expect(200);
    assert_eq!(still["state"], "awaiting-signal", "an unfinished run is kept: {still}");
    server.get("/v1/runs/done", KEEPER).expect(200);
    server
        .post_json("/v1/runs/waiting/signals/go", TOKEN, &json!({"ok": true}))
        .expect(202);
    let ended = server.get("/v1/runs/waiting/wait?timeout=30s", TOKEN).expect(200);
    assert_eq!(ended["state"], "completed", "{ended}");
    server.await_gone("/v1/runs/waiting", TOKEN);
    assert!(
        server.host.stored("tenants/acme/finished/").is_empty(),
        "markers go with their runs"
    );
    server.get("/v1/runs/done", KEEPER).expect(200);
    assert!(server.metric(r#"stepstone_retention_deleted_runs_total{tenant="acme"}"#) >= 1.0);
}

/// `component` with a custom section `name` holding `data` appended, as
/// any tool could write it.
fn with_custom_section(component: &[u8], name: &str, data: &[u8]) -> Vec<u8> {
    let mut out = component.to_vec();
    let section = wasm_encoder::CustomSection {
        name: name.into(),
        data: data.into(),
    };
    wasm_encoder::ComponentSection::append_to_component(&section, &mut out);
    out
}

#[test]
fn a_signal_that_breaks_its_declared_schema_is_refused_at_send_naming_the_path() {
    let server = server();
    let dir = tempfile::tempdir().expect("a scratch directory");
    let schemas = dir.path().join("schemas.json");
    let schema = json!({"go": {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}});
    std::fs::write(&schemas, schema.to_string()).expect("written");
    let typed = dir.path().join("typed.wasm");
    let hello = guest("hello");
    server
        .host
        .run(&["signal-schemas", arg(&hello), arg(&schemas), "-o", arg(&typed)])
        .success();
    let uploaded = server
        .post_bytes("/v1/components?name=typed", TOKEN, std::fs::read(&typed).expect("read"))
        .expect(201);
    assert_eq!(uploaded["signal_schemas"], schema, "{uploaded}");

    let run = json!({"component": "typed", "workflow": "await-go", "input": {}, "run_id": "typed-go"});
    server.post_json("/v1/runs", TOKEN, &run).expect(202);
    for (payload, says) in [
        (json!({"ok": "yes"}), "at `/ok`"),
        (json!({}), "at the payload"),
        (json!([1]), "at the payload"),
    ] {
        let refused = server
            .post_json("/v1/runs/typed-go/signals/go", TOKEN, &payload)
            .expect(400);
        let error = refused["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("signal `go`") && error.contains(says),
            "{payload}: {error}"
        );
    }
    let stored = server.host.stored("tenants/acme/runs/typed-go/signals/");
    assert!(
        stored.is_empty(),
        "a refused signal is stored nowhere: {:?}",
        stored.keys()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while server.get("/v1/runs/typed-go", TOKEN).expect(200)["state"] != "awaiting-signal" {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never came to wait for `go`"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server
        .post_json("/v1/runs/typed-go/signals/go", TOKEN, &json!({"ok": true}))
        .expect(202);
    let done = server.get("/v1/runs/typed-go/wait?timeout=30s", TOKEN).expect(200);
    assert_eq!(done["output"], json!({"ok": true}), "{done}");

    let bad = json!({"go": {"type": "sometimes"}}).to_string();
    std::fs::write(&schemas, &bad).expect("written");
    let refused = server
        .host
        .run(&["signal-schemas", arg(&hello), arg(&schemas), "-o", arg(&typed)])
        .failure();
    assert!(
        refused.contains("the schema of signal `go` does not compile"),
        "{refused}"
    );
    let smuggled = with_custom_section(
        &std::fs::read(&hello).expect("read"),
        "stepstone:signal-schemas",
        bad.as_bytes(),
    );
    let refused = server
        .post_bytes("/v1/components?name=smuggled", TOKEN, smuggled)
        .expect(400);
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("declares signal schemas") && error.contains("`go`"),
        "{error}"
    );
}

#[test]
fn a_component_is_deleted_only_once_no_name_schedule_or_run_refers_to_it() {
    let tenants = format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\nretention_ms = 5000\n",
        token_hash(TOKEN)
    );
    let server = Server::start(&tenants);
    let digest = server.upload(TOKEN, "hello")["digest"]
        .as_str()
        .expect("a digest")
        .to_owned();
    server.run_to_end(TOKEN, "hello", "greet", &json!({"name": "Ada"}), "uses");
    let path = format!("/v1/components/{digest}");
    let delete = || {
        server
            .request(reqwest::Method::DELETE, &path, TOKEN)
            .send()
            .expect("sent")
    };
    let refused = |by: &str| {
        let reply = delete();
        assert_eq!(reply.status(), 409);
        let error = reply.text().expect("a body");
        assert!(error.contains(by), "refused for {by}? {error}");
    };
    refused("the name `hello`");
    let order = std::fs::read(guest("order")).expect("the order guest");
    server.post_bytes("/v1/components?name=hello", TOKEN, order).expect(201);
    let pinned = json!({"name": "pinned", "component": digest, "workflow": "greet", "input": {}, "cron": "0 0 1 1 *"});
    server.post_json("/v1/schedules", TOKEN, &pinned).expect(201);
    refused("schedule `pinned`");
    let unpinned = server
        .request(reqwest::Method::DELETE, "/v1/schedules/pinned", TOKEN)
        .send()
        .expect("sent");
    assert_eq!(unpinned.status(), 204);
    refused("run `uses`");

    server.await_gone("/v1/runs/uses", TOKEN);
    assert_eq!(delete().status(), 204);
    server.get(&path, TOKEN).expect(404);
    let key = format!("tenants/acme/components/{digest}.wasm");
    assert!(server.host.stored(&key).is_empty(), "the bytes are gone");
    let start = json!({"component": digest, "workflow": "greet", "input": {}});
    server.post_json("/v1/runs", TOKEN, &start).expect(404);
    assert_eq!(delete().status(), 404, "deleting twice finds nothing");
}

/// The notifications `origin` received for run `id`, as (body, signature).
fn notifications(origin: &Origin, id: &str) -> Vec<(Vec<u8>, String)> {
    origin
        .received()
        .into_iter()
        .filter(|request| request.path == "/hooks" && request.header("stepstone-delivery") == Some(id))
        .map(|request| {
            let signature = request.header("stepstone-signature").unwrap_or_default().to_owned();
            (request.body, signature)
        })
        .collect()
}

fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).expect("a JSON notification")
}

/// Waits until `origin` answered run `id`'s notification 200.
fn await_delivered(origin: &Origin, id: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !origin.delivered().iter().any(|delivered| delivered == id) {
        assert!(std::time::Instant::now() < deadline, "{id}'s end was never delivered");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn hmac_sha256(key: &[u8], body: &[u8]) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[test]
fn a_runs_end_is_posted_signed_to_its_notify_url_at_least_once_even_across_a_restart() {
    const SIGNING_KEY: &str = "whsec_lifecycle_7c1";
    let origin = Origin::start();
    let tenants = format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\nallowed_outbound_hosts = [\"{}\"]\n",
        token_hash(TOKEN),
        origin.url()
    );
    let host = Host::new().with_env("STEPSTONE_SECRET_KEY", &"5a".repeat(32));
    let server = Server::start_on(host, &tenants);
    server.upload(TOKEN, "hello");
    let hooks = format!("{}/hooks", origin.url());
    let told = |run: &str, input: Value, notify: &str| json!({"component": "hello", "workflow": "greet", "input": input, "run_id": run, "notify": notify});
    let refused = |body: Value, says: &str| {
        let error = server.post_json("/v1/runs", TOKEN, &body).expect(400);
        assert!(error["error"].as_str().is_some_and(|e| e.contains(says)), "{error}");
    };
    refused(told("unsigned", json!({"name": "Ada"}), &hooks), "notify-signing-key");
    server
        .request(reqwest::Method::PUT, "/v1/secrets/notify-signing-key", TOKEN)
        .body(SIGNING_KEY)
        .send()
        .map(|reply| assert_eq!(reply.status(), 204))
        .expect("sent");
    refused(
        told("elsewhere", json!({"name": "Ada"}), "http://127.0.0.1:9/hooks"),
        "allowed_outbound_hosts",
    );
    refused(told("nonsense", json!({"name": "Ada"}), "not a url"), "not a URL");
    let long = format!("{hooks}?{}", "x".repeat(2048 - hooks.len()));
    refused(told("long", json!({"name": "Ada"}), &long), "over 2048 bytes");
    // A run of the longest URL is taken; it waits, so it notifies nothing here.
    let longest = json!({"component": "hello", "workflow": "await-go", "input": {}, "run_id": "longest", "notify": &long[..long.len() - 1]});
    server.post_json("/v1/runs", TOKEN, &longest).expect(202);

    server
        .post_json("/v1/runs", TOKEN, &told("told", json!({"name": "Ada"}), &hooks))
        .expect(202);
    server
        .post_json("/v1/runs", TOKEN, &told("broken", json!(5), &hooks))
        .expect(202);
    await_delivered(&origin, "told");
    await_delivered(&origin, "broken");
    let sent = notifications(&origin, "told");
    assert_eq!(sent.len(), 2, "answered 503 once, then sent again: {sent:?}");
    assert_eq!(sent[0], sent[1], "every try sends the same message");
    let (raw, signature) = &sent[0];
    let body = json_of(raw);
    assert_eq!(
        (body["id"].as_str(), body["state"].as_str()),
        (Some("told"), Some("completed")),
        "{body}"
    );
    assert_eq!(body["output"]["greeting"], "Hello, Ada!");
    assert_eq!(
        *signature,
        hmac_sha256(SIGNING_KEY.as_bytes(), raw),
        "signed with the tenant's key"
    );
    let failed = json_of(&notifications(&origin, "broken")[0].0);
    assert_eq!(failed["state"], "failed", "{failed}");
    assert!(failed["error"]["kind"].is_string(), "{failed}");

    // The receiver holds the next message unanswered and the host dies: the
    // outbox survives, and the restarted host delivers it.
    origin.hold_answers(true);
    server
        .post_json("/v1/runs", TOKEN, &told("held", json!({"name": "Bo"}), &hooks))
        .expect(202);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while notifications(&origin, "held").is_empty() {
        assert!(std::time::Instant::now() < deadline, "the held message was never sent");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut server = server;
    server.kill();
    origin.hold_answers(false);
    let server = server.restart();
    await_delivered(&origin, "held");
    assert!(
        notifications(&origin, "held").len() >= 3,
        "held, refused once, delivered"
    );
    assert!(server.metric(r#"stepstone_notifications_total{tenant="acme",outcome="delivered"}"#) >= 1.0);
}

/// The events of `GET /v1/groups/{group}/events`, read to the stream's end,
/// as (event, data).
fn group_events(server: &Server, group: &str) -> Vec<(String, Value)> {
    let request = server.request(reqwest::Method::GET, &format!("/v1/groups/{group}/events"), TOKEN);
    let events = server.events(request, |_| true);
    let data = |event: &ServerEvent| serde_json::from_str(&event.data).expect("JSON data");
    events.iter().map(|event| (event.event.clone(), data(event))).collect()
}

#[test]
fn a_group_of_runs_starts_at_once_counts_its_states_streams_each_end_and_cancels_together() {
    let server = server();
    let greet = |input: Value| json!({"component": "hello", "workflow": "greet", "input": input});
    let runs = vec![
        greet(json!({"name": "Ada"})),
        greet(json!({"name": "Bo"})),
        greet(json!(5)),
    ];
    let group = json!({"group_id": "batch", "runs": runs});
    let started = server.post_json("/v1/groups", TOKEN, &group).expect(202);
    assert_eq!(started["run_ids"], json!(["batch-0000", "batch-0001", "batch-0002"]));
    let events = group_events(&server, "batch");
    let names: Vec<&str> = events.iter().map(|(event, _)| event.as_str()).collect();
    assert_eq!(names, ["run", "run", "run", "end"], "{events:?}");
    let mut states: Vec<&str> = events[..3]
        .iter()
        .filter_map(|(_, run)| run["state"].as_str())
        .collect();
    states.sort_unstable();
    assert_eq!(states, ["completed", "completed", "failed"]);
    let status = server.get("/v1/groups/batch", TOKEN).expect(200);
    assert_eq!(status["counts"], json!({"completed": 2, "failed": 1}), "{status}");
    assert_eq!(
        (status["runs"].as_u64(), status["finished"].as_u64()),
        (Some(3), Some(3))
    );
    server.post_json("/v1/groups", TOKEN, &group).expect(202);
    let other = json!({"group_id": "batch", "runs": [greet(json!({"name": "Cy"}))]});
    server.post_json("/v1/groups", TOKEN, &other).expect(409);

    let wait = json!({"component": "hello", "workflow": "await-go", "input": {}});
    let waiters = json!({"group_id": "waiters", "runs": [wait, wait]});
    server.post_json("/v1/groups", TOKEN, &waiters).expect(202);
    server
        .post_json("/v1/groups/waiters/cancel", TOKEN, &json!({"reason": "enough"}))
        .expect(202);
    let ends = group_events(&server, "waiters");
    assert!(ends[..2].iter().all(|(_, run)| run["state"] == "cancelled"), "{ends:?}");

    let dir = tempfile::tempdir().expect("a scratch directory");
    let file = dir.path().join("group.json");
    let cli = json!({"group_id": "from-cli", "runs": [greet(json!({"name": "Di"}))]});
    std::fs::write(&file, cli.to_string()).expect("written");
    let remote = |args: &[&str]| through_server(&server, &[&["group"][..], args].concat());
    assert_eq!(
        remote(&["start", arg(&file)]).json()["run_ids"],
        json!(["from-cli-0000"])
    );
    let followed = remote(&["events", "from-cli"]).stdout();
    let ended: Value = serde_json::from_str(followed.trim()).expect("one JSON line");
    assert_eq!(ended["output"]["greeting"], "Hello, Di!", "{followed}");
    assert_eq!(
        remote(&["status", "from-cli"]).json()["counts"],
        json!({"completed": 1})
    );

    let empty = server.post_json("/v1/groups", TOKEN, &json!({"runs": []})).expect(400);
    assert!(
        empty["error"].as_str().is_some_and(|e| e.contains("1 to 1000 runs")),
        "{empty}"
    );
    let many: Vec<Value> = (0..1001).map(|_| greet(json!({"name": "Ada"}))).collect();
    let refused = server
        .post_json("/v1/groups", TOKEN, &json!({"runs": many}))
        .expect(400);
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("1 to 1000 runs, not 1001")),
        "{refused}"
    );
    let full = server
        .post_json("/v1/groups", TOKEN, &json!({"group_id": "full", "runs": many[..1000]}))
        .expect(202);
    assert_eq!(full["run_ids"].as_array().map(Vec::len), Some(1000));
    let broken = json!({"group_id": "broken", "runs": [greet(json!({})), {"component": "nothing", "workflow": "greet", "input": {}}]});
    server.post_json("/v1/groups", TOKEN, &broken).expect(404);
    server.get("/v1/groups/broken", TOKEN).expect(404);
    server.get("/v1/runs/broken-0000", TOKEN).expect(404);
}

#[test]
fn a_tenants_fuel_is_metered_per_day_and_past_its_budget_new_runs_are_refused_even_after_a_restart() {
    let tenants = format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\nfuel_per_day = 1\n",
        token_hash(TOKEN)
    );
    let server = Server::start(&tenants);
    let output = server.run_to_end(TOKEN, "hello", "greet", &json!({"name": "Ada"}), "first");
    assert_eq!(
        output["greeting"], "Hello, Ada!",
        "a run starts while the budget is unspent"
    );
    let report = server.get("/v1/usage", TOKEN).expect(200);
    let today = &report["days"][0];
    assert!(today["fuel"].as_u64().is_some_and(|fuel| fuel > 1), "{report}");
    assert_eq!(
        (today["runs"].as_u64(), today["step_attempts"].as_u64()),
        (Some(1), Some(1)),
        "{report}"
    );
    assert!(
        report["stored_bytes"].as_u64().is_some_and(|bytes| bytes > 0),
        "{report}"
    );

    let refused = |server: &Server| {
        let start = json!({"component": "hello", "workflow": "greet", "input": {"name": "Bo"}});
        let reply = server.post_json("/v1/runs", TOKEN, &start);
        assert_eq!(reply.status, 429, "{}", reply.body);
        let wait: u64 = reply.headers["retry-after"]
            .to_str()
            .expect("text")
            .parse()
            .expect("seconds");
        assert!((1..=86_400).contains(&wait), "retry after {wait} s");
        assert!(
            reply.body["error"].as_str().is_some_and(|e| e.contains("fuel")),
            "{}",
            reply.body
        );
    };
    refused(&server);
    // A clean stop stores the count; the restarted host reads it back.
    let server = server.restart_after("TERM");
    refused(&server);
    let days = server.get("/v1/usage?days=3", TOKEN).expect(200);
    assert_eq!(days["days"].as_array().map(Vec::len), Some(3), "{days}");
    assert_eq!(days["days"][0]["fuel"], today["fuel"], "{days}");
    let month = server.get("/v1/usage?days=31", TOKEN).expect(200);
    assert_eq!(month["days"].as_array().map(Vec::len), Some(31), "31 days are the most");
    for bad in ["0", "32", "4294967296"] {
        server.get(&format!("/v1/usage?days={bad}"), TOKEN).expect(400);
    }
}

/// The ids of the runs `GET /v1/runs?{query}` lists, over every page.
fn listed(server: &Server, query: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page_query = match &cursor {
            Some(cursor) => format!("{query}&limit=2&cursor={cursor}"),
            None => format!("{query}&limit=2"),
        };
        let page = server.get(&format!("/v1/runs?{page_query}"), TOKEN).expect(200);
        let runs = page["runs"].as_array().cloned().unwrap_or_default();
        ids.extend(runs.iter().filter_map(|run| run["run_id"].as_str().map(str::to_owned)));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return ids,
        }
    }
}

#[test]
fn runs_are_searched_by_tag_workflow_component_state_and_time_through_the_index() {
    let server = server();
    let tagged = |run: &str, workflow: &str, input: Value, tags: Value| {
        let body = json!({"component": "hello", "workflow": workflow, "input": input, "run_id": run, "tags": tags});
        server.post_json("/v1/runs", TOKEN, &body).expect(202);
        server
            .get(&format!("/v1/runs/{run}/wait?timeout=30s"), TOKEN)
            .expect(200);
    };
    let before_all = rfc3339_now();
    tagged("t1", "greet", json!({"name": "Ada"}), json!(["customer-42", "eu"]));
    tagged("t2", "greet", json!(5), json!(["customer-42"]));
    let between = rfc3339_now();
    tagged("t3", "greet", json!({"name": "Bo"}), json!(["eu"]));
    let order = order_input("o-search", 0, json!({}));
    let body = json!({"component": "order", "workflow": "place-order", "input": order, "run_id": "t4", "tags": ["customer-42"]});
    server.post_json("/v1/runs", TOKEN, &body).expect(202);
    server.get("/v1/runs/t4/wait?timeout=60s", TOKEN).expect(200);

    assert_eq!(listed(&server, "tag=customer-42"), ["t1", "t2", "t4"]);
    assert_eq!(listed(&server, "tag=eu"), ["t1", "t3"]);
    assert_eq!(listed(&server, "tag=customer-42&workflow=greet"), ["t1", "t2"]);
    assert_eq!(listed(&server, "tag=customer-42&workflow=greet&status=failed"), ["t2"]);
    assert_eq!(listed(&server, "tag=eu&status=completed"), ["t1", "t3"]);
    assert_eq!(listed(&server, "component=order"), ["t4"]);
    assert_eq!(
        listed(&server, &format!("created_after={before_all}&created_before={between}")),
        ["t1", "t2"]
    );
    assert_eq!(listed(&server, &format!("tag=eu&created_after={between}")), ["t3"]);
    assert!(listed(&server, "tag=nobody").is_empty());
    server.get("/v1/runs?created_after=yesterday", TOKEN).expect(400);
    let tags = |count: usize| (0..count).map(|i| format!("t{i}")).collect::<Vec<_>>();
    let most = json!({"component": "hello", "workflow": "greet", "input": {}, "run_id": "t16", "tags": tags(16)});
    server.post_json("/v1/runs", TOKEN, &most).expect(202);
    assert_eq!(listed(&server, "tag=t15"), ["t16"], "16 tags are taken and searchable");
    let refused = json!({"component": "hello", "workflow": "greet", "input": {}, "tags": tags(17)});
    server.post_json("/v1/runs", TOKEN, &refused).expect(400);

    // A search reads only the runs its tree holds: a corrupt record of a
    // run it does not select stops nothing, where a full listing notes it.
    let record = server.host.data_dir().join("objects/tenants/acme/runs/t3/run");
    std::fs::write(&record, b"not a record").expect("the record is overwritten");
    assert_eq!(listed(&server, "tag=customer-42"), ["t1", "t2", "t4"]);
    let all = server.get("/v1/runs?limit=1000", TOKEN).expect(200);
    let over = server.get("/v1/runs?limit=1001", TOKEN).expect(400);
    assert!(
        over["error"].as_str().is_some_and(|e| e.contains("1 to 1000 runs")),
        "{over}"
    );
    assert_eq!(all["unreadable"][0]["run_id"], "t3", "{all}");
}

fn rfc3339_now() -> String {
    let now = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    // A millisecond apart from the runs around it.
    std::thread::sleep(Duration::from_millis(2));
    now
}

/// A paused run starts nothing: a signal sent to it while paused is kept,
/// not taken, and the pause outlives a SIGKILL of its host; resumed, it
/// takes the signal and ends as it would have. Pausing twice keeps the
/// first reason; another tenant's run answers 404 as an unknown one does,
/// and a finished run 409; the CLI pauses (stopping any attempt under way)
/// and resumes through the API; a paused run is cancelled as any other.
#[test]
fn a_paused_run_starts_nothing_keeps_its_signal_across_a_restart_and_resumes_where_it_stopped() {
    const OTHER: &str = "sst_lifecycle_other";
    let server = Server::start(&tenants_file(&[("acme", TOKEN), ("globex", OTHER)]));
    server.upload(TOKEN, "hello");
    let held = json!({"component": "hello", "workflow": "await-go", "input": {}, "run_id": "held"});
    server.post_json("/v1/runs", TOKEN, &held).expect(202);
    let waiting = server.await_state(TOKEN, "held", "awaiting-signal");
    let pause = |reason: &str| server.post_json("/v1/runs/held/pause", TOKEN, &json!({"reason": reason}));
    pause("a bad deploy").expect(202);
    pause("again").expect(202);
    server.post_json("/v1/runs/held/pause", OTHER, &json!({})).expect(404);
    server
        .post_json("/v1/runs/nothing/pause", TOKEN, &json!({}))
        .expect(404);
    server
        .post_json("/v1/runs/held/signals/go", TOKEN, &json!({"n": 7}))
        .expect(202);
    // Unpaused, the signal would end the run at once.
    let paused = server.get("/v1/runs/held/wait?timeout=2s", TOKEN).expect(200);
    assert_eq!(paused["state"], "awaiting-signal", "{paused}");
    assert_eq!(paused["journaled_calls"], waiting["journaled_calls"], "{paused}");
    assert_eq!(
        paused["paused"]["reason"], "a bad deploy",
        "the first pause stands: {paused}"
    );

    let server = server.restart_after("KILL");
    let still = server.get("/v1/runs/held/wait?timeout=2s", TOKEN).expect(200);
    assert_eq!(still["state"], "awaiting-signal", "{still}");
    assert_eq!(still["journaled_calls"], waiting["journaled_calls"], "{still}");
    assert!(still["paused"].is_object(), "paused after the restart: {still}");

    through_server(&server, &["resume", "held"]);
    let done = server.get("/v1/runs/held/wait?timeout=30s", TOKEN).expect(200);
    assert_eq!(
        (done["state"].as_str(), &done["output"]),
        (Some("completed"), &json!({"n": 7})),
        "{done}"
    );
    assert!(done.get("paused").is_none(), "{done}");
    server.post_json("/v1/runs/held/pause", TOKEN, &json!({})).expect(409);
    server.post_json("/v1/runs/held/resume", TOKEN, &json!({})).expect(409);

    let again = json!({"component": "hello", "workflow": "await-go", "input": {}, "run_id": "again"});
    server.post_json("/v1/runs", TOKEN, &again).expect(202);
    through_server(&server, &["pause", "again", "--reason", "from the CLI", "--interrupt"]);
    let paused = server.get("/v1/runs/again", TOKEN).expect(200);
    assert_eq!(paused["paused"]["reason"], "from the CLI", "{paused}");
    assert_eq!(paused["paused"]["interrupt"], true, "{paused}");
    // A cancellation goes through the pause.
    server
        .post_json("/v1/runs/again/cancel", TOKEN, &json!({"reason": "enough"}))
        .expect(202);
    let cancelled = server.get("/v1/runs/again/wait?timeout=30s", TOKEN).expect(200);
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
}

/// The operator's controls on the embedded store, with no server: the CLI
/// pauses a run waiting for a signal (stopping any attempt under way),
/// advances its wait's timeout, and `resume` lifts the pause and drives
/// it on, past the advanced timeout, to its end; a restart from its first
/// call then starts a new run linked to it, which waits again.
#[test]
fn the_cli_pauses_advances_resumes_and_restarts_a_run_on_the_local_store() {
    let host = Host::new();
    host.run(&["upload", arg(&guest("hello")), "--name", "hello"]).success();
    host.run(&["start", "hello", "await-go", "--input", "{}", "--run-id", "held"])
        .success();
    host.run(&["resume"]).success();
    let status = |run: &str| host.run(&["status", run, "--json"]).success().json();
    assert_eq!(status("held")["state"], "awaiting-signal", "{}", status("held"));

    host.run(&["pause", "held", "--reason", "a look", "--interrupt"])
        .success();
    let paused = status("held");
    assert_eq!(
        (&paused["paused"]["reason"], &paused["paused"]["interrupt"]),
        (&json!("a look"), &json!(true)),
        "{paused}"
    );
    let advanced = host.run(&["advance", "held"]).success().stdout();
    assert!(advanced.contains("held"), "{advanced}");
    host.run(&["resume", "held"]).success();
    let done = status("held");
    assert_eq!(
        (done["state"].as_str(), &done["output"]),
        (Some("completed"), &Value::Null),
        "the advanced timeout ended the wait with no signal: {done}"
    );
    assert!(done.get("paused").is_none(), "{done}");

    let restarted = host
        .run(&["restart", "held", "--seq", "0", "--run-id", "again"])
        .success()
        .stdout();
    assert!(restarted.contains("again"), "{restarted}");
    host.run(&["resume"]).success();
    let again = status("again");
    assert_eq!(again["state"], "awaiting-signal", "{again}");
    assert_eq!(again["restarted_from"]["run"], "held", "{again}");
}

/// A batch pauses the unfinished runs of one component, every version of
/// its name, and none of another component's or another tenant's: a
/// signal sent to a paused run is kept; the CLI resumes the batch through
/// `--server`, and the runs end as they would have. An unknown component
/// is not found, and a field the batch does not know is refused. With no
/// filter, a batch pauses (and resumes) every unfinished run of the tenant.
#[test]
fn a_batch_pauses_one_components_runs_alone_and_the_cli_resumes_them() {
    const OTHER: &str = "sst_lifecycle_other";
    let server = Server::start(&tenants_file(&[("acme", TOKEN), ("globex", OTHER)]));
    server.upload(TOKEN, "hello");
    server.upload(TOKEN, "order");
    server.upload(OTHER, "hello");
    let awaiting = |token: &str, run: &str| {
        let body = json!({"component": "hello", "workflow": "await-go", "input": {}, "run_id": run});
        server.post_json("/v1/runs", token, &body).expect(202);
        server.await_state(token, run, "awaiting-signal");
    };
    awaiting(TOKEN, "b1");
    awaiting(TOKEN, "b2");
    awaiting(OTHER, "g1");
    let input = order_input("o1", 3_600_000, json!({}));
    let order = json!({"component": "order", "workflow": "place-order", "input": input, "run_id": "o1"});
    server.post_json("/v1/runs", TOKEN, &order).expect(202);
    server.await_state(TOKEN, "o1", "sleeping");

    let batch = json!({"component": "hello", "reason": "a bad deploy"});
    let page = server.post_json("/v1/batch/pause", TOKEN, &batch).expect(200);
    assert_eq!(page, json!({"runs": ["b1", "b2"], "next": null}));
    for (token, run) in [(TOKEN, "o1"), (OTHER, "g1")] {
        let status = server.get(&format!("/v1/runs/{run}"), token).expect(200);
        assert!(status.get("paused").is_none(), "{status}");
    }
    let paused = server.get("/v1/runs/b2", TOKEN).expect(200);
    assert_eq!(paused["paused"]["reason"], "a bad deploy", "{paused}");
    server
        .post_json("/v1/batch/pause", TOKEN, &json!({"component": "nothing"}))
        .expect(404);
    server
        .post_json("/v1/batch/pause", TOKEN, &json!({"run": "b1"}))
        .expect(422);
    server
        .post_json("/v1/runs/b1/signals/go", TOKEN, &json!({"n": 1}))
        .expect(202);
    let kept = server.get("/v1/runs/b1/wait?timeout=2s", TOKEN).expect(200);
    assert_eq!(kept["state"], "awaiting-signal", "paused, the signal is kept: {kept}");

    let cli = through_server(&server, &["batch", "resume", "--component", "hello"]);
    let resumed: Value = serde_json::from_str(&cli.stdout()).expect("JSON");
    assert_eq!(resumed, json!({"count": 2, "runs": ["b1", "b2"]}));
    let done = server.get("/v1/runs/b1/wait?timeout=30s", TOKEN).expect(200);
    assert_eq!(
        (done["state"].as_str(), &done["output"]),
        (Some("completed"), &json!({"n": 1})),
        "{done}"
    );
    let waiting = server.get("/v1/runs/b2", TOKEN).expect(200);
    assert!(waiting.get("paused").is_none(), "{waiting}");

    // With no filter, every unfinished run of the tenant, and no other's.
    let page = (server.post_json("/v1/batch/pause", TOKEN, &json!({"interrupt": true}))).expect(200);
    assert_eq!(page, json!({"runs": ["b2", "o1"], "next": null}));
    let other = server.get("/v1/runs/g1", OTHER).expect(200);
    assert!(other.get("paused").is_none(), "{other}");
    let paused = server.get("/v1/runs/o1", TOKEN).expect(200);
    assert_eq!(paused["paused"]["interrupt"], true, "{paused}");
    let page = server.post_json("/v1/batch/resume", TOKEN, &json!({})).expect(200);
    assert_eq!(page, json!({"runs": ["b2", "o1"], "next": null}));
}

/// Sets the tenant's `hook-signing-key` to `whsec_acme`.
fn set_signing_key(server: &Server) {
    let key = server
        .request(reqwest::Method::PUT, "/v1/secrets/hook-signing-key", TOKEN)
        .body("whsec_acme")
        .send()
        .expect("sent");
    assert_eq!(key.status(), 204);
}

/// `Stepstone-Signature` for a POST of `body` to `target` (path and
/// query) at `t` under `key`, as a sender signs it.
fn hook_signature(key: &str, t: u64, target: &str, body: &str) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).expect("any key");
    mac.update(format!("{t}.POST {target}\n{body}").as_bytes());
    format!("t={t},sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A signed request to a tenant's hook starts a run of its workflow with
/// the request as its input (the method, the header the hook names and no
/// other, the query, the body, and which of them are signed); the same
/// request again answers the same run. A forged, unsigned or stale
/// request, one signed for another of the tenant's hooks or another
/// query (issue 56), an unknown hook or tenant, and a tenant without a
/// signing key start nothing.
#[test]
fn a_signed_request_to_a_hook_starts_one_run_and_a_forged_or_stale_one_none() {
    const OTHER: &str = "sst_lifecycle_other";
    let host = Host::new().with_env("STEPSTONE_SECRET_KEY", &"5a".repeat(32));
    let server = Server::start_on(host, &tenants_file(&[("acme", TOKEN), ("globex", OTHER)]));
    server.upload(TOKEN, "hello");
    server.upload(OTHER, "hello");
    let hook = json!({"component": "hello", "workflow": "echo", "headers": ["X-Event"]});
    let stored = server
        .request(reqwest::Method::PUT, "/v1/hooks/orders", OTHER)
        .json(&hook)
        .send()
        .expect("sent");
    assert_eq!(stored.status(), 200);
    let put = through_server(
        &server,
        &["hook", "put", "orders", "hello", "echo", "--header", "X-Event"],
    );
    assert!(put.stdout().contains("\"x-event\""), "{}", put.stdout());
    set_signing_key(&server);
    let client = reqwest::blocking::Client::new();
    let call = |path: &str, signature: Option<String>, body: &str| {
        let mut request = client
            .post(format!("{}{path}", server.url))
            .header("x-event", "push")
            .header("x-secret", "not passed")
            .body(body.to_owned());
        if let Some(signature) = signature {
            request = request.header("stepstone-signature", signature);
        }
        let reply = request.send().expect("an answer");
        (reply.status().as_u16(), reply.json::<Value>().expect("JSON"))
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let body = r#"{"order":7}"#;
    let signed = hook_signature("whsec_acme", now, "/hooks/acme/orders?ref=main", body);
    let (status, started) = call("/hooks/acme/orders?ref=main", Some(signed.clone()), body);
    assert_eq!(status, 202, "{started}");
    let run = started["run_id"].as_str().expect("a run id").to_owned();
    assert!(run.starts_with("orders-") && run.len() == "orders-".len() + 20, "{run}");
    let done = server
        .get(&format!("/v1/runs/{run}/wait?timeout=30s"), TOKEN)
        .expect(200);
    assert_eq!(
        done["output"],
        json!({"method": "POST", "headers": {"x-event": "push"}, "query": {"ref": "main"}, "body": {"order": 7},
            "signed": ["method", "query", "body"]}),
        "{done}"
    );
    let (status, again) = call("/hooks/acme/orders?ref=main", Some(signed.clone()), body);
    assert_eq!(
        (status, &again["run_id"]),
        (202, &json!(run)),
        "the same request, the same run"
    );
    // With `wait`, the answer is the run's end.
    let waited = r#"{"order":9}"#;
    let (status, ended) = call(
        "/hooks/acme/orders?wait=30s",
        Some(hook_signature("whsec_acme", now, "/hooks/acme/orders?wait=30s", waited)),
        waited,
    );
    assert_eq!((status, &ended["state"]), (200, &json!("completed")), "{ended}");
    assert_eq!(ended["output"]["body"], json!({"order": 9}), "{ended}");
    assert_eq!(ended["output"]["query"], json!({"wait": "30s"}), "{ended}");
    let (status, _) = call(
        "/hooks/acme/orders?wait=soon",
        Some(hook_signature(
            "whsec_acme",
            now,
            "/hooks/acme/orders?wait=soon",
            waited,
        )),
        waited,
    );
    assert_eq!(status, 400, "a wait that is no duration");

    let refused = |path: &str, signature: Option<String>, body: &str, status: u16, says: &str| {
        let (answered, reply) = call(path, signature, body);
        assert_eq!(answered, status, "{path}: {reply}");
        let error = reply["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{path}: {error}");
    };
    let forged = hook_signature("whsec_guess", now, "/hooks/acme/orders", body);
    refused("/hooks/acme/orders", Some(forged), body, 401, "does not match");
    refused(
        "/hooks/acme/orders?ref=main",
        Some(signed.clone()),
        r#"{"order":8}"#,
        401,
        "does not match",
    );
    // Replayed to another hook of the tenant, or with another query.
    let refunds = json!({"component": "hello", "workflow": "echo"});
    let stored = server
        .request(reqwest::Method::PUT, "/v1/hooks/refunds", TOKEN)
        .json(&refunds)
        .send()
        .expect("sent");
    assert_eq!(stored.status(), 200);
    refused(
        "/hooks/acme/refunds?ref=main",
        Some(signed.clone()),
        body,
        401,
        "does not match",
    );
    refused(
        "/hooks/acme/orders?ref=evil",
        Some(signed.clone()),
        body,
        401,
        "does not match",
    );
    refused("/hooks/acme/orders", Some(signed.clone()), body, 401, "does not match");
    refused("/hooks/acme/orders", None, body, 401, "no `Stepstone-Signature`");
    let stale = hook_signature("whsec_acme", now - 301, "/hooks/acme/orders", body);
    refused("/hooks/acme/orders", Some(stale), body, 401, "300 s");
    refused("/hooks/acme/orders", Some("t=1,sha256=zz".into()), body, 401, "is not");
    refused("/hooks/globex/orders", Some(signed.clone()), body, 404, "no hook");
    refused("/hooks/acme/nothing", Some(signed.clone()), body, 404, "no hook");
    refused("/hooks/initech/orders", Some(signed), body, 404, "no hook");
    let listed = server.get("/v1/runs?workflow=echo", TOKEN).expect(200);
    assert_eq!(listed["runs"].as_array().map(Vec::len), Some(2), "{listed}");
    let others = server.get("/v1/runs?workflow=echo", OTHER).expect(200);
    assert_eq!(others["runs"].as_array().map(Vec::len), Some(0), "{others}");

    let hooks = server.get("/v1/hooks", TOKEN).expect(200);
    assert_eq!(
        hooks,
        json!({"hooks": [
            {"name": "orders", "hook": {"component": "hello", "workflow": "echo", "headers": ["x-event"]}},
            {"name": "refunds", "hook": {"component": "hello", "workflow": "echo", "headers": []}},
        ]})
    );
    for (bad, status) in [
        (
            json!({"component": "hello", "workflow": "echo", "headers": ["no spaces"]}),
            400,
        ),
        (json!({"component": "hello", "workflow": "nothing"}), 404),
        (json!({"component": "nothing", "workflow": "echo"}), 404),
        (json!({"component": "hello", "workflow": "echo", "extra": 1}), 422),
    ] {
        let reply = server
            .request(reqwest::Method::PUT, "/v1/hooks/bad", TOKEN)
            .json(&bad)
            .send()
            .expect("sent");
        assert_eq!(reply.status().as_u16(), status, "{bad}");
    }
    let deleted = server
        .request(reqwest::Method::DELETE, "/v1/hooks/orders", TOKEN)
        .send()
        .expect("sent");
    assert_eq!(deleted.status(), 204);
    let signed = hook_signature("whsec_acme", now, "/hooks/acme/orders", "{}");
    refused("/hooks/acme/orders", Some(signed), "{}", 404, "no hook");
}

/// Advancing a run ends its current wait now: an hour's sleep, after the
/// host was SIGKILLed during it, then through the CLI the approval wait's
/// hour-long timeout, so the order compensates at once. Another tenant's
/// run is not found, and a run in no wait, or finished, is refused.
#[test]
fn advancing_a_run_ends_its_sleep_then_its_signal_timeout_now_across_a_restart() {
    const OTHER: &str = "sst_lifecycle_other";
    const HOUR_MS: u64 = 3_600_000;
    let server = Server::start(&tenants_file(&[("acme", TOKEN), ("globex", OTHER)]));
    server.upload(TOKEN, "order");
    let order = |run: &str| {
        let input = order_input(run, HOUR_MS, json!({"approval_timeout_ms": HOUR_MS}));
        json!({"component": "order", "workflow": "place-order", "input": input, "run_id": run})
    };
    server.post_json("/v1/runs", TOKEN, &order("adv")).expect(202);
    server
        .post_json("/v1/runs", TOKEN, &with_times(order("later"), json!({"delay": "1h"})))
        .expect(202);
    server.await_state(TOKEN, "adv", "sleeping");
    server.post_json("/v1/runs/adv/advance", OTHER, &json!({})).expect(404);
    server.post_json("/v1/runs/none/advance", TOKEN, &json!({})).expect(404);
    let idle = server
        .post_json("/v1/runs/later/advance", TOKEN, &json!({}))
        .expect(409);
    assert!(
        idle["error"].as_str().is_some_and(|e| e.contains("nothing to advance")),
        "{idle}"
    );

    let server = server.restart_after("KILL");
    let advanced = server.post_json("/v1/runs/adv/advance", TOKEN, &json!({})).expect(200);
    assert_eq!(advanced["signal"], Value::Null, "a sleep: {advanced}");
    let deadline = advanced["deadline_ms"].as_u64().expect("a deadline");
    let at = advanced["advanced_at_ms"].as_u64().expect("a time");
    assert!(deadline > at + HOUR_MS - 60_000, "{advanced}");
    server.await_state(TOKEN, "adv", "awaiting-signal");

    let cli = through_server(&server, &["advance", "adv"]);
    assert!(
        cli.stdout().contains("\"approve\""),
        "the approval wait: {}",
        cli.stdout()
    );
    let done = server.get("/v1/runs/adv/wait?timeout=30s", TOKEN).expect(200);
    assert_eq!(done["state"], "failed", "{done}");
    assert!(
        done["message"]
            .as_str()
            .is_some_and(|m| m.contains("no approval within 3600000 ms")),
        "{done}"
    );
    let journal = server.get("/v1/runs/adv/journal", TOKEN).expect(200);
    assert_eq!(steps_of(&journal), ["reserve", "charge", "refund", "release"]);
    assert!(now_ms() < at + 60_000, "the hour's waits were cut short");
    server.post_json("/v1/runs/adv/advance", TOKEN, &json!({})).expect(409);
}

/// `stepstone --server URL --token TOKEN ARGS`, which must succeed.
fn through_server(server: &Server, args: &[&str]) -> stepstone_e2e::Run {
    let remote = ["--server", server.url.as_str(), "--token", TOKEN];
    server.host.run(&[&remote[..], args].concat()).success()
}

fn restart(server: &Server, token: &str, run: &str, body: Value) -> stepstone_e2e::Reply {
    server.post_json(&format!("/v1/runs/{run}/restart"), token, &body)
}

/// The steps whose code ran for `run`: those that logged.
fn steps_logged(server: &Server, run: &str) -> Vec<String> {
    let logs = server.get(&format!("/v1/runs/{run}/logs"), TOKEN).expect(200);
    let mut steps: Vec<String> = logs["lines"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|line| line["source"] == "guest")
        .filter_map(|line| line["step"].as_str().map(str::to_owned))
        .collect();
    steps.dedup();
    steps
}

/// A run restarted from before its charge keeps its earlier calls (its
/// entries byte for byte, their steps not run again), runs the charge and
/// the rest, takes the approval its old run was sent and had not taken,
/// and goes on after a SIGKILL; the old run is cancelled. A point past the
/// journal, another tenant, or a build that does not replay the kept calls
/// is refused; a chosen id makes restarting idempotent; the CLI restarts
/// through the API.
#[test]
fn a_run_restarted_from_a_point_keeps_the_calls_before_it_and_executes_the_rest_across_a_restart() {
    const OTHER: &str = "sst_lifecycle_other";
    const HOUR_MS: u64 = 3_600_000;
    let server = Server::start(&tenants_file(&[("acme", TOKEN), ("globex", OTHER)]));
    server.upload(TOKEN, "order");
    let reordered = std::fs::read(guest("order-reordered")).expect("the guest is built");
    server
        .post_bytes("/v1/components?name=order-v2", TOKEN, reordered)
        .expect(201);
    let input = order_input("saga", HOUR_MS, json!({"approval_timeout_ms": HOUR_MS}));
    let order = json!({"component": "order", "workflow": "place-order", "input": input, "run_id": "saga"});
    server.post_json("/v1/runs", TOKEN, &order).expect(202);
    server.await_state(TOKEN, "saga", "sleeping");
    server
        .post_bytes("/v1/runs/saga/signals/approve", TOKEN, br#"{"approved":true}"#.to_vec())
        .expect(202);
    let old_journal = server.get("/v1/runs/saga/journal", TOKEN).expect(200);
    let entries = old_journal.as_array().expect("entries");
    let charge = entries
        .iter()
        .position(|entry| entry["name"] == "charge")
        .expect("a charge") as u64;
    let calls = entries.len() as u64;

    restart(&server, OTHER, "saga", json!({"seq": charge})).expect(404);
    restart(&server, TOKEN, "none", json!({"seq": 0})).expect(404);
    let past = restart(&server, TOKEN, "saga", json!({"seq": calls + 1})).expect(409);
    let expected = format!("restart from {calls} or earlier");
    assert!(past["error"].as_str().is_some_and(|e| e.contains(&expected)), "{past}");
    let diverged = restart(&server, TOKEN, "saga", json!({"seq": charge, "component": "order-v2"})).expect(409);
    assert!(
        diverged["error"]
            .as_str()
            .is_some_and(|e| e.contains("does not replay the kept calls")),
        "{diverged}"
    );
    restart(&server, TOKEN, "saga", json!({"seq": charge, "bogus": 1})).expect(422);
    // Another tenant's build, by its name or its digest, is not the tenant's.
    let bytes = std::fs::read(guest("order-patched")).expect("the guest is built");
    let theirs = server
        .post_bytes("/v1/components?name=order-theirs", OTHER, bytes.clone())
        .expect(201);
    for component in [json!("order-theirs"), theirs["digest"].clone()] {
        let body = json!({"seq": charge, "component": component});
        restart(&server, TOKEN, "saga", body).expect(404);
    }

    let restarted = restart(&server, TOKEN, "saga", json!({"seq": charge})).expect(201);
    assert_eq!(
        restarted["restarted_from"],
        json!({"run": "saga", "seq": charge}),
        "{restarted}"
    );
    assert_eq!(restarted["signals_again"], 1, "the approval: {restarted}");
    assert_eq!(restarted["old_cancelled"], true, "{restarted}");
    let new = restarted["run_id"].as_str().expect("a run id").to_owned();
    server.await_state(TOKEN, "saga", "cancelled");
    let sleeping = server.await_state(TOKEN, &new, "sleeping");
    assert_eq!(sleeping["restarted_from"]["run"], "saga", "{sleeping}");

    let server = server.restart_after("KILL");
    server
        .post_json(&format!("/v1/runs/{new}/advance"), TOKEN, &json!({}))
        .expect(200);
    let done = server
        .get(&format!("/v1/runs/{new}/wait?timeout=30s"), TOKEN)
        .expect(200);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["output"]["charge"], "ch-saga", "{done}");
    let new_journal = server.get(&format!("/v1/runs/{new}/journal"), TOKEN).expect(200);
    let kept = usize::try_from(charge).expect("a small seq");
    assert_eq!(
        new_journal.as_array().expect("entries")[..kept],
        entries[..kept],
        "kept as recorded"
    );
    assert_eq!(steps_of(&new_journal), ["reserve", "charge", "ship"]);
    assert_eq!(
        steps_logged(&server, &new),
        ["charge", "ship"],
        "the kept reserve did not run again"
    );

    let again = json!({"seq": 0, "run_id": "again", "keep_old": true});
    let first = restart(&server, TOKEN, "saga", again.clone()).expect(201);
    assert_eq!(
        restart(&server, TOKEN, "saga", again).expect(201),
        first,
        "idempotent by its id"
    );
    restart(&server, TOKEN, "saga", json!({"seq": 1, "run_id": "again"})).expect(409);
    let cli = through_server(&server, &["restart", &new, "--seq", "1", "--keep-old"]);
    let answer: Value = serde_json::from_str(&cli.stdout()).expect("JSON");
    assert_eq!(answer["restarted_from"], json!({"run": new, "seq": 1}), "{answer}");
    assert_eq!(answer["old_cancelled"], false, "a finished run: {answer}");

    // On a new build that replays the kept calls alike (the patched order,
    // whose fraud check new runs make): the new run executes the new code.
    let patched = server
        .post_bytes("/v1/components?name=order-patched", TOKEN, bytes)
        .expect(201);
    let body = json!({"seq": charge, "component": "order-patched", "run_id": "patched"});
    let moved = restart(&server, TOKEN, &new, body).expect(201);
    assert_eq!(moved["signals_again"], 1, "the approval: {moved}");
    server.await_state(TOKEN, "patched", "sleeping");
    server
        .post_json("/v1/runs/patched/advance", TOKEN, &json!({}))
        .expect(200);
    let done = server.get("/v1/runs/patched/wait?timeout=30s", TOKEN).expect(200);
    assert_eq!(
        (done["state"].as_str(), &done["component"]),
        (Some("completed"), &patched["digest"]),
        "{done}"
    );
    assert_eq!(
        steps_logged(&server, "patched"),
        ["fraud-check", "charge", "ship"],
        "the kept reserve did not run again; the new build's fraud check, past the point, did"
    );
}

/// A flood of signed requests to a hook meets the tenant's run quotas as
/// any start does: past its rate, 429 with a time to retry, and no run;
/// so does a restart.
#[test]
fn a_flood_of_hook_requests_or_restarts_meets_the_tenants_start_rate() {
    let host = Host::new().with_env("STEPSTONE_SECRET_KEY", &"5a".repeat(32));
    let tenants = format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\nmax_new_runs_per_minute = 2\n",
        token_hash(TOKEN)
    );
    let server = Server::start_on(host, &tenants);
    server.upload(TOKEN, "hello");
    through_server(&server, &["hook", "put", "flood", "hello", "echo"]);
    set_signing_key(&server);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let client = reqwest::blocking::Client::new();
    let answers: Vec<(u16, Option<String>)> = (0..6)
        .map(|n| {
            let body = format!(r#"{{"n":{n}}}"#);
            let reply = client
                .post(format!("{}/hooks/acme/flood", server.url))
                .header(
                    "stepstone-signature",
                    hook_signature("whsec_acme", now, "/hooks/acme/flood", &body),
                )
                .body(body)
                .send()
                .expect("an answer");
            let retry = reply
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            (reply.status().as_u16(), retry)
        })
        .collect();
    let statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    assert_eq!(statuses, [202, 202, 429, 429, 429, 429], "{answers:?}");
    assert!(answers[2].1.is_some(), "a time to retry: {answers:?}");
    let listed = server.get("/v1/runs?workflow=echo", TOKEN).expect(200);
    assert_eq!(listed["runs"].as_array().map(Vec::len), Some(2), "{listed}");
    let first = listed["runs"][0]["run_id"].as_str().expect("a run id").to_owned();
    let refused = server.post_json(&format!("/v1/runs/{first}/restart"), TOKEN, &json!({"seq": 0}));
    assert_eq!(refused.status, 429, "{}", refused.body);
}

/// `GET /v1/runs/{run}/streams/ticks` as `token`, with `query` and
/// `last_event_id`, read to the response's end: each value's offset and
/// value, then the state the `end` event gives if it came. `on_value` sees
/// each value as it comes.
fn ticks_read(
    server: &Server,
    token: &str,
    run: &str,
    query: &str,
    last_event_id: Option<&str>,
    mut on_value: impl FnMut(u64),
) -> (Vec<(u64, Value)>, Option<Value>) {
    let path = format!("/v1/runs/{run}/streams/ticks{query}");
    let mut request = server.request(reqwest::Method::GET, &path, token);
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id);
    }
    let offset = |event: &ServerEvent| {
        event
            .id
            .as_deref()
            .and_then(|id| id.parse().ok())
            .expect("an offset as id")
    };
    let events = server.events(request, |event| {
        if event.event == "value" {
            on_value(offset(event));
        }
        true
    });
    let (mut values, mut end) = (Vec::new(), None);
    for event in events {
        let data: Value = serde_json::from_str(&event.data).expect("JSON data");
        match event.event.as_str() {
            "value" => values.push((offset(&event), data)),
            "end" => end = Some(data["state"].clone()),
            other => panic!("an unexpected event `{other}`: {data}"),
        }
    }
    (values, end)
}

fn tick_values(offsets: std::ops::Range<u64>) -> Vec<(u64, Value)> {
    offsets.map(|tick| (tick, json!({ "tick": tick }))).collect()
}

/// A run's stream is read live over the API, each value as the run appends
/// it, then its end; from an offset, or after the `Last-Event-ID` a client
/// reconnects with; without following; through the CLI, locally and with
/// --server. Another tenant's read is a 404; a malformed one a 400.
#[test]
fn a_runs_stream_is_read_live_from_any_offset_through_the_api_and_the_cli() {
    const OTHER: &str = "sst_lifecycle_other";
    let server = Server::start(&tenants_file(&[("acme", TOKEN), ("other", OTHER)]));
    server.upload(TOKEN, "hello");
    let body = json!({"component": "hello", "workflow": "stream-ticks", "input": {"ticks": 5, "every_ms": 300}, "run_id": "ticker"});
    server.post_json("/v1/runs", TOKEN, &body).expect(202);
    let mut states_at_values = Vec::new();
    let read = ticks_read(&server, TOKEN, "ticker", "", None, |_| {
        states_at_values.push(server.get("/v1/runs/ticker", TOKEN).expect(200)["state"].clone());
    });
    assert_eq!(read, (tick_values(0..5), Some(json!("completed"))));
    assert_ne!(
        states_at_values[0], "completed",
        "the first value came while the run went on"
    );
    let completed = Some(json!("completed"));
    assert_eq!(
        ticks_read(&server, TOKEN, "ticker", "", Some("2"), |_| {}),
        (tick_values(3..5), completed.clone())
    );
    assert_eq!(
        ticks_read(&server, TOKEN, "ticker", "?offset=4&follow=false", None, |_| {}),
        (tick_values(4..5), completed)
    );
    let lines = |run: stepstone_e2e::Run| run.stdout().lines().map(str::to_owned).collect::<Vec<_>>();
    let remote = lines(through_server(&server, &["stream", "ticker", "ticks", "--follow"]));
    assert_eq!(
        remote,
        (0..5).map(|tick| format!(r#"{{"tick":{tick}}}"#)).collect::<Vec<_>>()
    );
    let hello = guest("hello");
    let local_run = [
        "run",
        arg(&hello),
        "stream-ticks",
        "--run-id",
        "here",
        "--input",
        r#"{"ticks":5}"#,
    ];
    server.host.run(&local_run).success();
    let local = lines(server.host.run(&["stream", "here", "ticks", "--offset", "3"]).success());
    assert_eq!(local, [r#"{"tick":3}"#, r#"{"tick":4}"#]);

    server.get("/v1/runs/ticker/streams/ticks", OTHER).expect(404);
    let bad = server
        .request(reqwest::Method::GET, "/v1/runs/ticker/streams/ticks", TOKEN)
        .header("Last-Event-ID", "two")
        .send()
        .expect("answered");
    assert_eq!(bad.status(), 400);
    assert!(bad.text().expect("a body").contains("Last-Event-ID `two`"));
    server.get("/v1/runs/ticker/streams/.hidden", TOKEN).expect(400);
    server
        .get(&format!("/v1/runs/ticker/streams/{}", "s".repeat(129)), TOKEN)
        .expect(400);
}

/// An order whose gift note is 600 KiB round-trips through the saga: its
/// input, past the 256 KiB threshold, is stored apart; `ship` returns the
/// note on its packing slip, so its output is stored apart and its journal
/// entry names it by SHA-256; the placed order carries it back, stored
/// apart too, which the status names; the API and `stepstone payload`
/// serve the stored payloads; and after a SIGKILL a replay reads them back
/// and finds the run as it ran.
#[test]
fn a_large_payload_round_trips_through_the_order_saga_and_a_replay() {
    let server = server();
    let note = "ship with care ♥ ".repeat(600 * 1024 / 19);
    let input = order_input("big", 10, json!({ "gift_note": note }));
    let order = json!({"component": "order", "workflow": "place-order", "input": input, "run_id": "big"});
    server.post_json("/v1/runs", TOKEN, &order).expect(202);
    server.await_state(TOKEN, "big", "awaiting-signal");
    server
        .post_json("/v1/runs/big/signals/approve", TOKEN, &json!({"approved": true}))
        .expect(202);
    let done = server.get("/v1/runs/big/wait?timeout=60s", TOKEN).expect(200);
    assert_eq!(done["state"], "completed", "{}", done["state"]);
    assert!(done.get("output").is_none(), "named, not shown");
    let placed = &done["output_stored"];
    let placed_sha256 = placed["sha256"].as_str().expect("the output's name");
    let order = server
        .get(&format!("/v1/runs/big/payloads/{placed_sha256}"), TOKEN)
        .expect(200);
    assert!(order["packing_slip"] == note, "the note came back whole");
    assert_eq!(placed["bytes"].as_u64(), Some(order.to_string().len() as u64));
    let printed = through_server(&server, &["payload", "big", placed_sha256]).stdout();
    assert_eq!(serde_json::from_str::<Value>(&printed).ok(), Some(order.clone()));
    let refused = server.host.run(&[
        "--server",
        server.url.as_str(),
        "--token",
        TOKEN,
        "payload",
        "big",
        &"0".repeat(64),
    ]);
    assert!(!refused.0.status.success(), "no such payload");

    let journal = server.get("/v1/runs/big/journal", TOKEN).expect(200);
    let entries = journal.as_array().expect("entries");
    let output = |step: &str| {
        let entry = entries.iter().find(|e| e["name"] == step).expect("the step's entry");
        entry["recorded"]["Step"]["result"]["Ok"].clone()
    };
    assert!(output("reserve").is_string(), "a small output stays in its entry");
    let shipped = output("ship");
    let sha256 = shipped["sha256"].as_str().expect("stored apart, named by its SHA-256");
    let slip = server
        .get(&format!("/v1/runs/big/payloads/{sha256}"), TOKEN)
        .expect(200);
    assert_eq!(slip["tracking"], "trk-big");
    assert!(slip["packing_slip"] == note);
    assert_eq!(
        shipped["bytes"].as_u64(),
        Some(slip.to_string().len() as u64),
        "{shipped}"
    );
    server
        .get(&format!("/v1/runs/big/payloads/{}", "0".repeat(64)), TOKEN)
        .expect(404);
    // The console links the stored output from the call, and opens it only then.
    let cookie = server.console_session(TOKEN);
    let console = |path: &str| {
        let answer = reqwest::blocking::Client::new()
            .get(format!("{}{path}", server.url))
            .header("cookie", &cookie)
            .send()
            .expect("an answer");
        (answer.status().as_u16(), answer.text().expect("a body"))
    };
    let (status, page) = console("/ui/runs/big");
    assert_eq!(status, 200);
    let link = format!("/ui/runs/big/payloads/{sha256}");
    assert!(page.contains(&link), "the call links its stored output");
    let (status, opened) = console(&link);
    assert_eq!(
        (status, serde_json::from_str::<Value>(&opened).ok()),
        (200, Some(slip.clone()))
    );
    let stored: Vec<String> = server
        .host
        .stored_objects()
        .iter()
        .filter_map(|path| path.to_str().map(str::to_owned))
        .filter(|path| path.ends_with(sha256))
        .collect();
    assert_eq!(stored.len(), 1, "one object, under the run: {stored:?}");

    let server = server.restart_after("KILL");
    let replay = server.post_json("/v1/runs/big/replay", TOKEN, &json!({})).expect(200);
    assert_eq!(replay["verdict"], "identical", "{replay}");

    // On the local store: `run` prints the output stored apart whole, and
    // `payload` prints it by the name `status` gives.
    let name = "n".repeat(200);
    let input = json!({ "name": name }).to_string();
    let hello = guest("hello");
    let local_run = [
        "--offload-payloads-above",
        "100",
        "run",
        arg(&hello),
        "greet",
        "--run-id",
        "local-big",
        "--input",
        &input,
    ];
    let output = server.host.run(&local_run).success().stdout();
    let greeting = json!({ "greeting": format!("Hello, {name}!") });
    assert_eq!(serde_json::from_str::<Value>(&output).ok(), Some(greeting.clone()));
    let status = server.host.run(&["status", "local-big", "--json"]).success().stdout();
    let status: Value = serde_json::from_str(&status).expect("a status");
    let sha256 = status["output_stored"]["sha256"].as_str().expect("stored apart");
    let printed = server.host.run(&["payload", "local-big", sha256]).success().stdout();
    assert_eq!(serde_json::from_str::<Value>(&printed).ok(), Some(greeting));
    let missing = server.host.run(&["payload", "local-big", &"0".repeat(64)]);
    assert!(
        missing.stderr().contains("stored no payload named"),
        "{}",
        missing.stderr()
    );
}
