//! Continue-as-new end to end, through the `stepstone` binary and its HTTP
//! API: a chain of generations (examples-guests/counter) keeps each journal
//! small, its root's id follows it to its latest generation (status,
//! `wait`, signals, cancellation, a parent awaiting it), it survives a
//! SIGKILL mid-chain and a crash at every write with exactly one run per
//! generation, the tenant's rate holds it back without failing it, and an
//! input or id that cannot make a generation fails the run saying why.

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stepstone_e2e::{Host, Origin, Server, arg, guest, token_hash};

const ACME: &str = "sst_acme_token";

/// One tenant, acme, with the quota table given as TOML.
fn tenant(quotas: &str) -> String {
    format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\n{quotas}\n",
        token_hash(ACME)
    )
}

fn start(server: &Server, workflow: &str, input: Value, run: &str) {
    server.upload(ACME, "counter");
    let body = json!({"component": "counter", "workflow": workflow, "input": input, "run_id": run});
    server.post_json("/v1/runs", ACME, &body).expect(202);
}

fn status(server: &Server, run: &str) -> Value {
    server.get(&format!("/v1/runs/{run}"), ACME).expect(200)
}

/// Polls `run`'s status until `ready` holds, for at most `within`.
fn await_status(server: &Server, run: &str, within: Duration, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let status = status(server, run);
        if ready(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "{run} never got there: {status}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn generation(status: &Value) -> u64 {
    status["chain"]["generation"].as_u64().unwrap_or(0)
}

/// Every run of acme's, each as it is (a generation that continued shows
/// `continued`), by id.
fn listing(server: &Server) -> Vec<Value> {
    let page = server.get("/v1/runs?limit=1000", ACME).expect(200);
    page["runs"].as_array().expect("a list").clone()
}

fn journal_len(server: &Server, run: &str) -> usize {
    let journal = server.get(&format!("/v1/runs/{run}/journal"), ACME).expect(200);
    journal
        .as_array()
        .map_or_else(|| panic!("no journal list: {journal}"), Vec::len)
}

/// Asserts acme's runs are exactly the chain `root`, `root.g1` ..
/// `root.g{last}`, each generation continued as the next (the last
/// completed), and that each journal holds at most `per_generation`
/// entries.
fn assert_one_run_per_generation(server: &Server, root: &str, last: u64, per_generation: usize) {
    let ids: Vec<String> = std::iter::once(root.to_owned())
        .chain((1..=last).map(|g| format!("{root}.g{g}")))
        .collect();
    let runs = listing(server);
    let listed: BTreeSet<&str> = runs.iter().filter_map(|r| r["run_id"].as_str()).collect();
    assert_eq!(listed, ids.iter().map(String::as_str).collect(), "{runs:?}");
    for (g, id) in ids.iter().enumerate() {
        let run = runs.iter().find(|r| r["run_id"] == id.as_str()).expect("listed");
        if g < ids.len() - 1 {
            assert_eq!(run["state"], "continued", "{run}");
            assert_eq!(run["continued_as"], ids[g + 1].as_str(), "{run}");
        } else {
            assert_eq!(run["state"], "completed", "{run}");
        }
        if g > 0 {
            assert_eq!(
                run["chain"],
                json!({"root": root, "generation": g, "previous": ids[g - 1]})
            );
        }
        let entries = journal_len(server, id);
        assert!(entries <= per_generation, "{id} journaled {entries} calls");
        assert_eq!(run["journaled_calls"], entries, "{run}");
    }
}

#[test]
fn a_counting_chain_ends_with_its_final_output_on_the_root_id_and_small_journals() {
    let server = Server::start(&tenant(""));
    start(&server, "count", json!({"n": 0, "until": 5}), "cnt");
    let done = server.get("/v1/runs/cnt/wait?timeout=60s", ACME).expect(200);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["output"], json!({"n": 5, "until": 5}));
    assert_eq!(done["run_id"], "cnt.g5", "the status is the latest generation's");
    assert_eq!(generation(&done), 5);
    assert_eq!(status(&server, "cnt.g2"), done, "any generation's id follows the chain");
    // One step a generation, and none in the last: the journal never grows.
    assert_one_run_per_generation(&server, "cnt", 5, 1);
    for g in 0..5 {
        let id = if g == 0 { "cnt".to_owned() } else { format!("cnt.g{g}") };
        assert_eq!(journal_len(&server, &id), 1, "{id}");
    }
    // The OpenAPI document describes what the status showed.
    let openapi = server.get("/v1/openapi.json", ACME).expect(200);
    let link = &openapi["components"]["schemas"]["ChainLink"]["properties"];
    assert!(
        ["root", "generation", "previous"]
            .iter()
            .all(|field| link[field].is_object()),
        "{link}"
    );
    let text = openapi.to_string();
    assert!(
        text.contains("continued_as") && text.contains("\"continued\""),
        "no continued state documented"
    );
}

#[test]
fn the_cli_runs_a_chain_to_its_end_and_status_and_wait_follow_it() {
    let host = Host::new();
    let counter = guest("counter");
    let input = json!({"n": 0, "until": 3}).to_string();
    let run = host
        .run(&["run", arg(&counter), "count", "--run-id", "c", "--input", &input])
        .success();
    assert_eq!(run.json_line(), json!({"n": 3, "until": 3}));
    let status = host.status("c").expect("the run exists");
    assert_eq!(
        (status["state"].as_str(), status["run_id"].as_str()),
        (Some("completed"), Some("c.g3"))
    );
    let waited = host.run(&["wait", "c"]).success().json();
    assert_eq!(waited["output"], json!({"n": 3, "until": 3}));
    let listed = host.run(&["list"]).success().stdout();
    assert!(
        listed.contains("continued as c.g1") && listed.contains("generation 3 of c"),
        "{listed}"
    );
    // A generation replays to the same continuation, naming the same next run.
    for generation in ["c", "c.g1", "c.g3"] {
        let replay = host.run(&["replay", generation]).success().stdout();
        assert!(
            replay.contains("deterministic: output identical"),
            "{generation}: {replay}"
        );
    }
}

#[test]
fn signals_and_cancellation_sent_to_the_root_reach_the_current_generation() {
    let server = Server::start(&tenant(""));
    start(&server, "tally", json!({"total": 0, "target": 7}), "t");
    for (g, add) in [(0, 1), (1, 1), (2, 5)] {
        await_status(&server, "t", Duration::from_secs(30), |s| {
            s["state"] == "awaiting-signal" && generation(s) == g
        });
        server
            .post_json("/v1/runs/t/signals/add", ACME, &json!(add))
            .expect(202);
    }
    let done = server.get("/v1/runs/t/wait?timeout=60s", ACME).expect(200);
    assert_eq!(done["output"], json!({"total": 7, "signals": 3}), "{done}");
    assert_eq!(done["run_id"], "t.g2");

    start(&server, "tally", json!({"total": 0, "target": 7}), "t2");
    await_status(&server, "t2", Duration::from_secs(30), |s| {
        s["state"] == "awaiting-signal"
    });
    server.post_json("/v1/runs/t2/signals/add", ACME, &json!(1)).expect(202);
    await_status(&server, "t2", Duration::from_secs(30), |s| {
        s["state"] == "awaiting-signal" && generation(s) == 1
    });
    server.post_json("/v1/runs/t2/cancel", ACME, &json!({})).expect(202);
    let cancelled = server.get("/v1/runs/t2/wait?timeout=60s", ACME).expect(200);
    assert_eq!(
        (cancelled["state"].as_str(), cancelled["run_id"].as_str()),
        (Some("cancelled"), Some("t2.g1"))
    );
    server.get("/v1/runs/t2.g2", ACME).expect(404);
}

#[test]
fn a_chain_killed_mid_way_completes_after_a_restart_with_one_run_per_generation() {
    let server = Server::start(&tenant(""));
    start(&server, "count", json!({"n": 0, "until": 6, "sleep_ms": 300}), "k");
    await_status(&server, "k", Duration::from_secs(30), |s| generation(s) >= 2);
    let server = server.restart_after("KILL");
    let done = server.get("/v1/runs/k/wait?timeout=60s", ACME).expect(200);
    assert_eq!(done["output"], json!({"n": 6, "until": 6}), "{done}");
    // A step and a sleep a generation.
    assert_one_run_per_generation(&server, "k", 6, 2);
}

#[test]
fn a_crash_at_any_write_of_a_chain_leaves_one_run_per_generation() {
    let counter = guest("counter");
    let input = json!({"n": 0, "until": 2}).to_string();
    let run_args = ["run", arg(&counter), "count", "--run-id", "x", "--input", &input];
    let mut trials = 0;
    for mode in ["before", "after"] {
        for write in 1.. {
            let host = Host::new();
            let killed = host
                .command(&run_args)
                .env("STEPSTONE_CRASH_AT", format!("{mode}:{write}"))
                .output()
                .expect("stepstone starts");
            if killed.status.success() {
                break;
            }
            let point = format!("{mode}:{write}");
            assert_eq!(killed.status.signal(), Some(9), "{point}: {killed:?}");
            trials += 1;
            host.run(&["resume", "--detach-after", "2s"]).success();
            let again = host.run(&run_args).success();
            assert_eq!(again.json_line(), json!({"n": 2, "until": 2}), "{point}");
            let records: BTreeSet<String> = host
                .stored("tenants/default/runs/")
                .into_keys()
                .filter_map(|key| Some(key.strip_suffix("/run")?.rsplit('/').next()?.to_owned()))
                .collect();
            let expected: BTreeSet<String> = ["x", "x.g1", "x.g2"].map(String::from).into();
            assert_eq!(records, expected, "{point}: one run per generation");
        }
    }
    assert!(trials > 10, "the chain's writes were crashed at: {trials}");
}

#[test]
fn the_tenants_rate_holds_a_tight_loop_back_without_failing_it() {
    let server = Server::start(&tenant("max_new_runs_per_minute = 3"));
    let started = Instant::now();
    start(&server, "count", json!({"n": 0, "until": 3}), "tight");
    // The root and two generations fit the minute's rate; the third waits.
    let held = await_status(&server, "tight", Duration::from_secs(30), |s| generation(s) == 2);
    assert!(
        !held["state"]
            .as_str()
            .is_some_and(|s| ["failed", "completed"].contains(&s)),
        "{held}"
    );
    let done = await_status(&server, "tight", Duration::from_secs(120), |s| {
        s["state"] == "completed"
    });
    assert_eq!(done["output"], json!({"n": 3, "until": 3}));
    assert!(
        started.elapsed() >= Duration::from_secs(50),
        "the third generation started within the minute: {:?}",
        started.elapsed()
    );
}

#[test]
fn a_parent_awaiting_a_child_that_continues_gets_the_chains_final_output() {
    let server = Server::start(&tenant(""));
    start(&server, "count-in-child", json!({"n": 0, "until": 3}), "p");
    let done = server.get("/v1/runs/p/wait?timeout=60s", ACME).expect(200);
    assert_eq!(done["output"], json!({"n": 3, "until": 3}), "{done}");
    assert_eq!(status(&server, "p.0")["run_id"], "p.0.g3");
}

#[test]
fn a_continuation_on_input_that_is_no_json_or_too_big_fails_the_run_saying_so() {
    // The tenant's payload quota, lowered from its default of 64 MiB.
    let server = Server::start(&tenant("max_payload_bytes = 1048576"));
    for (run, input, says) in [
        ("bad", json!({"how": "not-json"}), "is not valid JSON"),
        (
            "big",
            json!({"how": "huge", "bytes": 1 << 20}),
            "quota allows at most 1048576",
        ),
    ] {
        start(&server, "continue-refused", input, run);
        let done = server
            .get(&format!("/v1/runs/{run}/wait?timeout=60s"), ACME)
            .expect(200);
        assert_eq!(done["state"], "failed", "{done}");
        assert_eq!(done["kind"], "invalid-continuation", "{done}");
        let message = done["message"].as_str().expect("a message");
        assert!(
            message.contains(says) && message.contains(&format!("run `{run}`")),
            "{message}"
        );
        server.get(&format!("/v1/runs/{run}.g1"), ACME).expect(404);
    }
}

#[test]
fn a_root_id_with_no_room_for_a_generation_fails_at_continue_as_new_saying_so() {
    let host = Host::new();
    let root = "r".repeat(126);
    let input = json!({"n": 0, "until": 1}).to_string();
    let failed = host
        .run(&[
            "run",
            arg(&guest("counter")),
            "count",
            "--run-id",
            &root,
            "--input",
            &input,
        ])
        .failure();
    assert!(
        failed.contains("invalid-continuation") && failed.contains("over the 128 characters"),
        "{failed}"
    );
}

#[test]
fn only_the_chains_last_generation_posts_its_end_to_the_notify_url() {
    let origin = Origin::start();
    let quotas = format!("allowed_outbound_hosts = [\"{}\"]", origin.url());
    let host = Host::new().with_env("STEPSTONE_SECRET_KEY", &"5a".repeat(32));
    let server = Server::start_on(host, &tenant(&quotas));
    server
        .request(reqwest::Method::PUT, "/v1/secrets/notify-signing-key", ACME)
        .body("whsec_chain")
        .send()
        .map(|reply| assert_eq!(reply.status(), 204))
        .expect("sent");
    server.upload(ACME, "counter");
    let hooks = format!("{}/hooks", origin.url());
    let body = json!({"component": "counter", "workflow": "count", "input": {"n": 0, "until": 2}, "run_id": "told", "notify": hooks});
    server.post_json("/v1/runs", ACME, &body).expect(202);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !origin.delivered().iter().any(|id| id == "told.g2") {
        assert!(
            Instant::now() < deadline,
            "the chain's end was never delivered: {:?}",
            origin.delivered()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let told: Vec<(String, Value)> = origin
        .received()
        .into_iter()
        .filter(|request| request.path == "/hooks")
        .map(|request| {
            let id = request.header("stepstone-delivery").unwrap_or_default().to_owned();
            (id, serde_json::from_slice(&request.body).expect("a JSON message"))
        })
        .collect();
    assert!(
        told.iter().all(|(id, _)| id == "told.g2"),
        "a generation that continued notified: {told:?}"
    );
    let (_, message) = told.last().expect("delivered");
    assert_eq!(message["state"], "completed");
    assert_eq!(message["output"], json!({"n": 2, "until": 2}));
    assert_eq!(message["chain"]["root"], "told", "{message}");
    // The entry is deleted once its delivery is answered, just after.
    while !server.host.stored("tenants/acme/outbox/").is_empty() {
        assert!(
            Instant::now() < deadline,
            "an entry is left behind: {:?}",
            server.host.stored("tenants/acme/outbox/").keys()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
