//! The run lifecycle beyond start, signal and cancel: runs scheduled to
//! start later (`start_at`, `delay`), through the API and the CLI, waiting
//! in the store across a host's death.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use stepstone_e2e::{Host, ReliabilityResult, Server, arg, guest, record_reliability, token_hash};

const TOKEN: &str = "sst_lifecycle";

fn server() -> Server {
    let tenants = format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n",
        token_hash(TOKEN)
    );
    let server = Server::start(&tenants);
    server.upload(TOKEN, "hello");
    server
}

fn greet(run: &str, when: Value) -> Value {
    let mut body = json!({"component": "hello", "workflow": "greet", "input": {"name": "Ada"}, "run_id": run});
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
