//! Cron schedules through the API and the CLI: each fire a run named by its
//! fire time, pause and resume, the three overlap policies, catch-up after a
//! host was down, and the refusals of bad schedules and of other tenants.

use std::time::{Duration, Instant, UNIX_EPOCH};

use serde_json::{Value, json};
use stepstone_e2e::{Host, ReliabilityResult, Server, order_input, record_reliability, tenants_file, token_hash};

const TOKEN: &str = "sst_schedules";
const OTHER: &str = "sst_schedules_other";
const EVERY_SECOND: &str = "* * * * * *";

fn server() -> Server {
    let server = Server::start(&tenants_file(&[("acme", TOKEN), ("globex", OTHER)]));
    server.upload(TOKEN, "hello");
    server.upload(TOKEN, "order");
    server
}

/// A schedule of `hello`'s `greet` every second, with the fields of `extra`.
fn greeting(name: &str, extra: Value) -> Value {
    let mut body = json!({"name": name, "component": "hello", "workflow": "greet",
        "input": {"name": "Ada"}, "cron": EVERY_SECOND});
    body.as_object_mut()
        .expect("an object")
        .extend(extra.as_object().cloned().unwrap_or_default());
    body
}

/// The runs `schedule` has started, with their fire times (ms), in order.
fn fired(server: &Server, schedule: &str) -> Vec<(u64, Value)> {
    let page = server.get("/v1/runs?limit=1000", TOKEN).expect(200);
    let prefix = format!("{schedule}-");
    let mut runs: Vec<(u64, Value)> = page["runs"]
        .as_array()
        .expect("a page of runs")
        .iter()
        .filter_map(|run| {
            let stamp = run["run_id"].as_str()?.strip_prefix(&prefix)?;
            Some((fire_ms(stamp), run.clone()))
        })
        .collect();
    runs.sort_by_key(|(fire, _)| *fire);
    runs
}

/// `20261224T180000Z` in ms since 1970.
fn fire_ms(stamp: &str) -> u64 {
    let b = stamp.as_bytes();
    let text = |range: std::ops::Range<usize>| std::str::from_utf8(&b[range]).expect("ASCII");
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}Z",
        text(0..4),
        text(4..6),
        text(6..8),
        text(9..11),
        text(11..13),
        text(13..15)
    );
    let time = humantime::parse_rfc3339(&rfc3339).unwrap_or_else(|e| panic!("{stamp}: {e}"));
    u64::try_from(time.duration_since(UNIX_EPOCH).expect("after 1970").as_millis()).expect("fits")
}

fn now_ms() -> u64 {
    u64::try_from(UNIX_EPOCH.elapsed().expect("after 1970").as_millis()).expect("fits")
}

/// Waits until `ready` holds of `schedule`'s runs, for at most a minute.
fn await_fired(
    server: &Server,
    schedule: &str,
    what: &str,
    ready: impl Fn(&[(u64, Value)]) -> bool,
) -> Vec<(u64, Value)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let runs = fired(server, schedule);
        if ready(&runs) {
            return runs;
        }
        assert!(Instant::now() < deadline, "{schedule}: never {what}; fired {runs:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn all_finished(runs: &[(u64, Value)]) -> bool {
    runs.iter()
        .all(|(_, run)| matches!(run["state"].as_str(), Some("completed" | "failed" | "cancelled")))
}

/// The fire times as seconds after the first, to compare as a whole.
fn seconds_after_first(runs: &[(u64, Value)]) -> Vec<u64> {
    let first = runs.first().map_or(0, |(fire, _)| *fire);
    runs.iter().map(|(fire, _)| (fire - first) / 1000).collect()
}

#[test]
fn a_schedule_fires_a_run_per_fire_named_by_its_time_and_pauses_and_resumes() {
    let server = server();
    // `allow`, so that a run slowed past a second by a loaded machine
    // skips no fire (the overlap policies have a test of their own).
    let tick = greeting("tick", json!({"overlap": "allow"}));
    let added = server.post_json("/v1/schedules", TOKEN, &tick).expect(201);
    assert_eq!(added["description"], "Every second.", "{added}");
    assert!(added["next_fire"].is_string(), "{added}");
    let again = server.post_json("/v1/schedules", TOKEN, &tick).expect(201);
    assert_eq!(
        again["created_at_ms"], added["created_at_ms"],
        "the same schedule is kept, not replaced"
    );

    let runs = await_fired(&server, "tick", "fired three finished runs", |runs| {
        runs.len() >= 3 && all_finished(runs)
    });
    assert_eq!(
        seconds_after_first(&runs[..3]),
        vec![0, 1, 2],
        "one run a second: {runs:?}"
    );
    for (fire, run) in &runs {
        assert_eq!(run["output"]["greeting"], "Hello, Ada!", "{run}");
        let created = run["created_at_ms"].as_u64().expect("a creation time");
        assert!(created >= *fire, "run {run} was created before its fire time");
    }

    let paused = server
        .post_json("/v1/schedules/tick/pause", TOKEN, &json!({}))
        .expect(200);
    assert_eq!(
        (paused["paused"].as_bool(), paused["next_fire"].as_str()),
        (Some(true), None)
    );
    let paused_at = now_ms();
    // Time must pass for a pause to show: two fires' worth.
    std::thread::sleep(Duration::from_millis(2_500));
    let resumed = server
        .post_json("/v1/schedules/tick/resume", TOKEN, &json!({}))
        .expect(200);
    let resumed_at = now_ms();
    assert_eq!(resumed["paused"], false);
    let runs = await_fired(&server, "tick", "fired after the resume", |runs| {
        runs.last().is_some_and(|(fire, _)| *fire > resumed_at)
    });
    let while_paused: Vec<_> = runs
        .iter()
        .filter(|(fire, _)| *fire > paused_at + 1_000 && *fire < resumed_at)
        .collect();
    assert!(while_paused.is_empty(), "fired while paused: {while_paused:?}");
    let view = server.get("/v1/schedules/tick", TOKEN).expect(200);
    assert!(
        view["last_run"].as_str().is_some_and(|run| run.starts_with("tick-")),
        "{view}"
    );

    let listed = server.get("/v1/schedules", TOKEN).expect(200);
    assert_eq!(listed["schedules"].as_array().map(Vec::len), Some(1), "{listed}");
    server
        .request(reqwest::Method::DELETE, "/v1/schedules/tick", TOKEN)
        .send()
        .map(|r| assert_eq!(r.status(), 204))
        .expect("sent");
    server.get("/v1/schedules/tick", TOKEN).expect(404);
    let kept = fired(&server, "tick").len();
    assert!(kept >= 4, "the runs a deleted schedule started stay: {kept}");
}

#[test]
fn each_overlap_policy_treats_a_fire_during_a_long_run_as_documented() {
    let server = server();
    for overlap in ["skip", "buffer-one", "allow"] {
        let body = json!({"name": overlap, "component": "order", "workflow": "place-order",
            "input": order_input("o", 2_500, json!({})), "cron": EVERY_SECOND, "overlap": overlap});
        server.post_json("/v1/schedules", TOKEN, &body).expect(201);
    }
    let enough = |runs: &[(u64, Value)]| runs.len() >= 2 && all_finished(&runs[..2]);
    let skip = await_fired(&server, "skip", "started a second run", enough);
    let buffered = await_fired(&server, "buffer-one", "started a second run", enough);
    let allow = await_fired(&server, "allow", "started three runs", |runs| runs.len() >= 3);

    let gap = skip[1].0 - skip[0].0;
    assert!(
        gap >= 3_000,
        "skip: the next run fired {gap} ms after one that takes 2.5 s"
    );
    let first_done = |runs: &[(u64, Value)]| runs[0].0 + 2_500;
    assert_eq!(
        buffered[1].0 - buffered[0].0,
        1_000,
        "buffer-one keeps the very next fire: {buffered:?}"
    );
    let started = buffered[1].1["created_at_ms"].as_u64().expect("a creation time");
    assert!(
        started >= first_done(&buffered),
        "the buffered fire started at {started}, before the first run ended"
    );
    assert_eq!(
        seconds_after_first(&allow[..3]),
        vec![0, 1, 2],
        "allow starts every fire: {allow:?}"
    );
    assert!(server.metric(r#"stepstone_schedule_fires_total{tenant="acme",outcome="skipped"}"#) >= 2.0);
    assert!(server.metric(r#"stepstone_schedule_fires_total{tenant="acme",outcome="buffered"}"#) >= 1.0);
}

#[test]
fn fires_missed_while_the_host_was_down_are_made_up_within_the_catch_up_window() {
    let server = server();
    // `allow`, so that no made-up fire is skipped for overlapping a run the
    // kill interrupted (the overlap policies have a test of their own).
    let allowed = |name: &str, catch_up: &str| greeting(name, json!({"catch_up": catch_up, "overlap": "allow"}));
    server
        .post_json("/v1/schedules", TOKEN, &allowed("hour", "1h"))
        .expect(201);
    server
        .post_json("/v1/schedules", TOKEN, &allowed("none", "0s"))
        .expect(201);
    await_fired(&server, "none", "fired", |runs| !runs.is_empty());
    let mut server = server;
    server.kill();
    let killed_at = now_ms();
    // The downtime is what is tested: six fires pass with no host.
    std::thread::sleep(Duration::from_secs(6));
    let server = server.restart();
    let restarted_at = now_ms();
    let settled =
        |runs: &[(u64, Value)]| runs.last().is_some_and(|(fire, _)| *fire > restarted_at + 1_000) && all_finished(runs);
    let hour = await_fired(&server, "hour", "fired after the restart", settled);
    let none = await_fired(&server, "none", "fired after the restart", settled);

    let seconds = seconds_after_first(&hour);
    let contiguous: Vec<u64> = (0..seconds.len() as u64).collect();
    assert_eq!(
        seconds, contiguous,
        "with catch_up 1h every fire ran once, the missed ones too"
    );
    let made_up = |runs: &[(u64, Value)]| {
        runs.iter()
            .filter(|(fire, _)| *fire > killed_at && *fire + 1_000 < restarted_at)
            .count()
    };
    assert!(made_up(&hour) >= 5, "{hour:?}");
    let too_old: Vec<_> = none
        .iter()
        .filter(|(fire, _)| *fire > killed_at + 1_000 && *fire + 3_000 < restarted_at)
        .collect();
    assert!(
        too_old.is_empty(),
        "catch_up 0s made up fires older than the 2 s it tolerates as late: {too_old:?}"
    );
    assert!(made_up(&none) < made_up(&hour), "{none:?}");
    record_reliability(&ReliabilityResult {
        suite: "lifecycle",
        fault: "a host SIGKILLed for 6 s under a schedule firing every second",
        trials: 1,
        outcome: "the restarted host made up every missed fire within the catch-up window, each once",
        lost: 0,
    });
}

#[test]
fn bad_schedules_are_refused_saying_what_is_wrong() {
    let server = server();
    let refused = |body: Value, status: u16, says: &str| {
        let error = server.post_json("/v1/schedules", TOKEN, &body).expect(status);
        let message = error["error"].as_str().unwrap_or_default().to_owned();
        assert!(message.contains(says), "{body}: {message}");
    };
    refused(
        greeting("bad", json!({"cron": "61 * * * *"})),
        400,
        "invalid cron pattern `61 * * * *`",
    );
    refused(
        greeting("bad", json!({"cron": "0 0 31 2 *"})),
        400,
        "matches no time to come",
    );
    refused(
        greeting("bad", json!({"cron": "* ".repeat(200)})),
        400,
        "over 256 bytes",
    );
    refused(greeting("bad", json!({"catch_up": "8days"})), 400, "the longest");
    refused(
        greeting("bad", json!({"catch_up": "soon"})),
        400,
        "invalid catch_up `soon`",
    );
    refused(greeting("bad", json!({"component": "nothing"})), 404, "nothing");
    refused(
        greeting("bad", json!({"workflow": "absent"})),
        404,
        "no workflow `absent`",
    );
    refused(greeting("bad", json!({"overlap": "sometimes"})), 422, "overlap");
    refused(greeting(&"n".repeat(101), json!({})), 422, "schedule name");
    let yearly = |name: &str| greeting(name, json!({"cron": "0 0 1 1 *"}));
    let added = |body: Value| server.post_json("/v1/schedules", TOKEN, &body).expect(201);
    added(yearly(&"n".repeat(100)));
    added(yearly("yearly"));
    refused(
        greeting("yearly", json!({"cron": "0 0 2 1 *"})),
        409,
        "orders other runs",
    );
    let huge = json!({"input": "x".repeat(1 << 20)});
    refused(greeting("huge", huge), 413, "over the limit of 1048576 bytes");
    for i in 2..100 {
        added(yearly(&format!("s{i}")));
    }
    refused(yearly("one-too-many"), 403, "100 schedules");
    added(yearly("yearly"));

    // Another tenant sees none of them, and can touch none.
    let theirs = server.get("/v1/schedules", OTHER).expect(200);
    assert_eq!(theirs["schedules"], json!([]));
    server.get("/v1/schedules/yearly", OTHER).expect(404);
    server
        .post_json("/v1/schedules/yearly/pause", OTHER, &json!({}))
        .expect(404);
    let deleted = server
        .request(reqwest::Method::DELETE, "/v1/schedules/yearly", OTHER)
        .send()
        .expect("sent");
    assert_eq!(deleted.status(), 404);
    assert_eq!(server.get("/v1/schedules/yearly", TOKEN).expect(200)["paused"], false);
}

#[test]
fn the_cli_manages_schedules_on_the_embedded_store_and_over_the_server() {
    let host = Host::new();
    let hello = stepstone_e2e::guest("hello");
    host.run(&["upload", stepstone_e2e::arg(&hello), "--name", "hello"])
        .success();
    let added = host
        .run(&[
            "schedule",
            "add",
            "nightly",
            "hello",
            "greet",
            "--cron",
            "0 2 * * *",
            "--input",
            r#"{"name":"Ada"}"#,
            "--overlap",
            "buffer-one",
        ])
        .success()
        .json();
    assert_eq!(
        (added["overlap"].as_str(), added["catch_up"].as_str()),
        (Some("buffer-one"), Some("1h"))
    );
    let next = added["next_fire"].as_str().expect("a next fire");
    assert!(next.ends_with("T02:00:00.000Z"), "{next}");
    let refused = host
        .run(&["schedule", "add", "x", "hello", "greet", "--cron", "nope"])
        .failure();
    assert!(refused.contains("invalid cron pattern `nope`"), "{refused}");
    let refused = host
        .run(&[
            "schedule",
            "add",
            "x",
            "hello",
            "greet",
            "--cron",
            "* * * * *",
            "--overlap",
            "maybe",
        ])
        .failure();
    assert!(refused.contains("none of skip, buffer-one, allow"), "{refused}");
    host.run(&["schedule", "pause", "nightly"]).success();
    let listed = host.run(&["schedule", "list"]).success().json();
    assert_eq!(listed["schedules"][0]["paused"], true, "{listed}");

    let tenants = format!(
        "[[tenants]]\nid = \"default\"\ntoken_sha256 = [\"{}\"]\n",
        token_hash(TOKEN)
    );
    let server = Server::start_on(host, &tenants);
    let remote = |args: &[&str]| {
        let mut full = vec!["--server", server.url.as_str(), "--token", TOKEN, "schedule"];
        full.extend_from_slice(args);
        server.host.run(&full)
    };
    let resumed = remote(&["resume", "nightly"]).success().json();
    assert_eq!(resumed["paused"], false, "{resumed}");
    remote(&[
        "add",
        "tick",
        "hello",
        "greet",
        "--cron",
        EVERY_SECOND,
        "--input",
        r#"{"name":"Bo"}"#,
    ])
    .success();
    let runs = await_fired(&server, "tick", "fired", |runs| !runs.is_empty() && all_finished(runs));
    assert_eq!(runs[0].1["output"]["greeting"], "Hello, Bo!");
    remote(&["rm", "tick"]).success();
    let gone = remote(&["rm", "tick"]).failure();
    assert!(gone.contains("no schedule `tick`"), "{gone}");
    let listed = remote(&["list"]).success().json();
    assert_eq!(listed["schedules"].as_array().map(Vec::len), Some(1), "{listed}");
}
