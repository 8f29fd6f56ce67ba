//! The hostile-guest corpus (`tests/hostile-guests/`) against a shared
//! server: tenant mallory runs each attack, as a step and as a workflow,
//! while tenant alice runs the order saga at the same time. Each attack must
//! end with its exact typed outcome, naming the limit it hit; alice's run
//! must finish with the right output, and the server must stay healthy.

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};
use stepstone_e2e::{Host, ReliabilityResult, Server, arg, guest, order_input, record_reliability, token_hash};

const ALICE: &str = "sst_alice_token";
const MALLORY: &str = "sst_mallory_token";

/// Mallory's step quotas, lowered so that the attacks end quickly and the
/// limits they hit are recognisable in the messages.
const MALLORY_STEP_MEMORY: u64 = 32 << 20;
const MALLORY_STEP_OUTPUT: u64 = 100_000;
const MALLORY_MAX_ATTEMPTS: u32 = 5;
/// Mallory's run quotas: how many runs at once, and how deep children nest.
const MALLORY_ACTIVE_RUNS: u32 = 40;
const MALLORY_CHILD_DEPTH: u32 = 4;
/// The server's log allowance per run execution.
const MAX_LOG_BYTES: usize = 65_536;

/// A server with tenants alice (default quotas) and mallory, started with
/// `args` besides its tenants file.
fn arena(args: &[&str]) -> Server {
    let host = Host::new();
    let config = host.data_dir().join("stepstone.toml");
    let tenants = format!(
        "[[tenants]]\nid = \"alice\"\ntoken_sha256 = [\"{}\"]\n\n\
         [[tenants]]\nid = \"mallory\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\n\
         step_memory_bytes = {MALLORY_STEP_MEMORY}\nstep_output_bytes = {MALLORY_STEP_OUTPUT}\n\
         step_max_attempts = {MALLORY_MAX_ATTEMPTS}\nstep_min_backoff_ms = 20\n\
         max_active_runs = {MALLORY_ACTIVE_RUNS}\nmax_child_depth = {MALLORY_CHILD_DEPTH}\n",
        token_hash(ALICE),
        token_hash(MALLORY)
    );
    std::fs::write(&config, tenants).expect("the tenants file is written");
    let max_log_bytes = MAX_LOG_BYTES.to_string();
    let mut full = vec!["--config", arg(&config), "--max-log-bytes", &max_log_bytes];
    full.extend_from_slice(args);
    let server = Server::start_with(host, &full);
    server.upload(ALICE, "order");
    server
}

fn start(server: &Server, token: &str, body: Value) -> String {
    let started = server.post_json("/v1/runs", token, &body).expect(202);
    started["run_id"].as_str().expect("a run id").to_owned()
}

/// Waits for `run` to end and returns its status.
fn finished(server: &Server, token: &str, run: &str) -> Value {
    let status = server
        .get(&format!("/v1/runs/{run}/wait?timeout=60s"), token)
        .expect(200);
    assert!(
        ["completed", "failed", "cancelled"].contains(&status["state"].as_str().unwrap_or_default()),
        "{run} did not end: {status}"
    );
    status
}

/// Runs `attack` (mallory's part) while alice's order saga is in flight, then
/// checks that alice's run completed with its tracking number and that the
/// server still answers; returns what `attack` returned.
fn beside_alice<T>(server: &Server, attack: impl FnOnce() -> T) -> T {
    beside_alice_timed(server, attack).0
}

/// Alice's run, as its journal tells it.
struct AliceRun {
    /// From its creation to its last entry, in ms.
    took_ms: u64,
    /// The longest any of its steps took, queueing for a slot included.
    longest_step_ms: u64,
}

/// Like [`beside_alice`], also returning how alice's run went.
fn beside_alice_timed<T>(server: &Server, attack: impl FnOnce() -> T) -> (T, AliceRun) {
    static ORDERS: AtomicU32 = AtomicU32::new(1);
    let order = format!("alice-{}", ORDERS.fetch_add(1, Ordering::Relaxed));
    let input = order_input(&order, 300, json!({"approval_timeout_ms": 60_000}));
    let run = start(
        server,
        ALICE,
        json!({"component": "order", "workflow": "place-order", "input": input, "run_id": order}),
    );
    server
        .post_bytes(
            &format!("/v1/runs/{run}/signals/approve"),
            ALICE,
            br#"{"approved":true}"#.to_vec(),
        )
        .expect(202);
    let outcome = attack();
    let alice = finished(server, ALICE, &run);
    assert_eq!(alice["state"], "completed", "alice's run: {alice}");
    assert_eq!(alice["output"]["tracking"], format!("trk-{order}"), "{alice}");
    assert_eq!(server.get("/healthz", "").expect(200), "ok");
    let journal = server.get(&format!("/v1/runs/{run}/journal"), ALICE).expect(200);
    let entries = journal.as_array().expect("alice's run journaled its calls");
    let at = |entry: &Value, field: &str| entry[field].as_u64().expect("a time");
    let last = entries
        .iter()
        .map(|e| at(e, "finished_at_ms"))
        .max()
        .unwrap_or_default();
    let longest_step_ms = entries
        .iter()
        .filter(|e| e["kind"] == "step")
        .map(|e| at(e, "finished_at_ms") - at(e, "started_at_ms"))
        .max()
        .unwrap_or_default();
    let took_ms = last - alice["created_at_ms"].as_u64().expect("a creation time");
    (
        outcome,
        AliceRun {
            took_ms,
            longest_step_ms,
        },
    )
}

/// Mallory's `call-limited` run on `step` (`bombs/...` for the WAT bombs,
/// `blocker/...` for the guest that blocks in WASI): what the workflow saw
/// the step call return.
fn step_attack(server: &Server, step: &str, input: Value, options: Value) -> Value {
    step_attack_run(server, step, input, options).1
}

/// Like [`step_attack`], also returning the id of mallory's run.
fn step_attack_run(server: &Server, step: &str, input: Value, options: Value) -> (String, Value) {
    for component in ["hostile", "bombs", "blocker"] {
        server.upload(MALLORY, component);
    }
    beside_alice(server, || {
        let call = json!({"step": step, "input": input, "options": options});
        let links = json!({"bombs": "bombs", "blocker": "blocker"});
        let body = json!({"component": "hostile", "workflow": "call-limited", "input": call, "links": links});
        let run = start(server, MALLORY, body);
        let status = finished(server, MALLORY, &run);
        assert_eq!(
            status["state"], "completed",
            "the workflow sees the step's error: {status}"
        );
        (run, status["output"].clone())
    })
}

/// Mallory's run's journal entry at `seq`.
fn entry(server: &Server, run: &str, seq: usize) -> Value {
    let journal = server.get(&format!("/v1/runs/{run}/journal"), MALLORY).expect(200);
    journal[seq].clone()
}

/// How long the call journaled at `seq` of mallory's `run` took, in ms.
fn took_ms(server: &Server, run: &str, seq: usize) -> u64 {
    let entry = entry(server, run, seq);
    entry["finished_at_ms"].as_u64().expect("finished") - entry["started_at_ms"].as_u64().expect("started")
}

/// Mallory's runs, as the API lists them.
fn mallory_runs(server: &Server) -> Vec<Value> {
    let page = server.get("/v1/runs?limit=1000", MALLORY).expect(200);
    page["runs"].as_array().expect("a list").clone()
}

/// Whether every run of mallory's is in one of `states`.
fn all_mallory_runs_in(server: &Server, states: &[&str]) -> bool {
    mallory_runs(server)
        .iter()
        .all(|run| states.contains(&run["state"].as_str().unwrap_or_default()))
}

/// How many times its time alone alice's saga took beside an attack;
/// asserts it stayed under a generous bound, and returns it for the report.
fn slowdown(flooded: &AliceRun, idle: &AliceRun) -> f64 {
    let ratio = flooded.took_ms as f64 / idle.took_ms.max(1) as f64;
    assert!(
        ratio < 5.0,
        "alice's saga took {} ms beside the attack, {} ms alone",
        flooded.took_ms,
        idle.took_ms
    );
    ratio
}

/// Runs in a full binary tree of mallory's child runs.
const TREE: usize = (1 << (MALLORY_CHILD_DEPTH + 1)) - 1;

/// Polls until `ready` holds, for at most 60 s.
fn eventually(what: &str, ready: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Mallory's run of `workflow` of `component`: its final status.
fn workflow_attack(server: &Server, component: &str, workflow: &str, input: Value) -> Value {
    server.upload(MALLORY, component);
    beside_alice(server, || {
        let run = start(
            server,
            MALLORY,
            json!({"component": component, "workflow": workflow, "input": input}),
        );
        finished(server, MALLORY, &run)
    })
}

/// Asserts a step call failed with `kind`, its message containing `detail`.
fn assert_step_error(seen: &Value, kind: &str, detail: &str) {
    assert_eq!(seen["error_kind"], kind, "{seen}");
    let message = seen["message"].as_str().unwrap_or_default();
    assert!(message.contains(detail), "{kind}: {message:?} lacks {detail:?}");
}

/// Asserts a run failed with `kind`, its message containing `detail`.
fn assert_run_failed(status: &Value, kind: &str, detail: &str) {
    assert_eq!(status["state"], "failed", "{status}");
    assert_eq!(status["kind"], kind, "{status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(message.contains(detail), "{kind}: {message:?} lacks {detail:?}");
}

/// Files the case for docs/RELIABILITY.md (called once its assertions passed).
fn record(fault: &str, outcome: &str) {
    record_reliability(&ReliabilityResult {
        suite: "hostile",
        fault,
        trials: 1,
        outcome,
        lost: 0,
    });
}

#[test]
fn an_endless_step_runs_out_of_fuel() {
    let server = arena(&[]);
    let seen = step_attack(&server, "spin", json!(null), json!({"fuel": 10_000_000}));
    assert_step_error(&seen, "fuel-exhausted", "fuel limit is 10000000");
    assert_eq!(seen["attempts"], 1);
    record(
        "infinite loop, step",
        "step error fuel-exhausted; the other tenant's run completed",
    );
}

#[test]
fn an_endless_step_with_ample_fuel_times_out() {
    let server = arena(&[]);
    let seen = step_attack(&server, "spin", json!(null), json!({"timeout_ms": 300}));
    assert_step_error(&seen, "timed-out", "timeout is 300ms");
    record(
        "infinite loop with ample fuel, step",
        "step error timed-out; the other tenant's run completed",
    );
}

#[test]
fn an_endless_workflow_runs_out_of_fuel() {
    let server = arena(&["--activation-fuel", "50000000"]);
    let status = workflow_attack(&server, "hostile", "spin-workflow", json!(null));
    assert_run_failed(
        &status,
        "fuel-exhausted",
        "budget of 50000000 fuel between two durable calls",
    );
    record(
        "infinite loop, workflow",
        "run failed fuel-exhausted; the other tenant's run completed",
    );
}

#[test]
fn an_endless_workflow_with_ample_fuel_times_out() {
    // Alice's saga awaits steps (a retried charge) longer than 1 s in one
    // instance: the wait must not count against her activation budget.
    let server = arena(&["--activation-fuel", "1000000000000000", "--activation-timeout", "1s"]);
    let status = workflow_attack(&server, "hostile", "spin-workflow", json!(null));
    assert_run_failed(&status, "timed-out", "budget of 1s between two durable calls");
    record(
        "infinite loop with ample fuel, workflow",
        "run failed timed-out; the other tenant's run completed",
    );
}

#[test]
fn memory_bombs_in_a_step_hit_the_tenants_memory_limit() {
    let server = arena(&[]);
    let limit = format!("the limit is {MALLORY_STEP_MEMORY} bytes");
    let grow = step_attack(&server, "bombs/memory-bomb", json!(null), json!({}));
    assert_step_error(&grow, "memory-limit", &limit);
    let allocate = step_attack(&server, "hog", json!(null), json!({}));
    assert_step_error(&allocate, "memory-limit", &limit);
    record(
        "memory bomb (memory.grow, allocator), step",
        "step error memory-limit naming the limit; the other tenant's run completed",
    );
}

#[test]
fn memory_bombs_in_a_workflow_hit_the_workflow_memory_limit() {
    let server = arena(&[]);
    let limit = format!("the limit is {} bytes", 256 << 20);
    let grow = workflow_attack(&server, "bombs", "memory-bomb", json!(null));
    assert_run_failed(&grow, "memory-limit", &limit);
    let allocate = workflow_attack(&server, "hostile", "hog-workflow", json!(null));
    assert_run_failed(&allocate, "memory-limit", &limit);
    record(
        "memory bomb (memory.grow, allocator), workflow",
        "run failed memory-limit naming the limit; the other tenant's run completed",
    );
}

#[test]
fn a_table_bomb_step_hits_the_table_limit() {
    let server = arena(&[]);
    let seen = step_attack(&server, "bombs/table-bomb", json!(null), json!({}));
    assert_step_error(
        &seen,
        "memory-limit",
        "table growth to 100001 elements refused: the limit is 100000 elements",
    );
    record(
        "table bomb, step",
        "step error memory-limit naming the table limit; the other tenant's run completed",
    );
}

#[test]
fn a_table_bomb_workflow_hits_the_table_limit() {
    let server = arena(&[]);
    let status = workflow_attack(&server, "bombs", "table-bomb", json!(null));
    assert_run_failed(
        &status,
        "memory-limit",
        "table growth to 100001 elements refused: the limit is 100000 elements",
    );
    record(
        "table bomb, workflow",
        "run failed memory-limit naming the table limit; the other tenant's run completed",
    );
}

#[test]
fn unbounded_recursion_in_a_step_overflows_its_stack() {
    let server = arena(&[]);
    let seen = step_attack(&server, "recurse", json!(null), json!({}));
    assert_step_error(&seen, "trapped", "call stack exhausted");
    record(
        "unbounded recursion, step",
        "step error trapped (call stack exhausted); the other tenant's run completed",
    );
}

#[test]
fn unbounded_recursion_in_a_workflow_overflows_its_stack() {
    let server = arena(&[]);
    let status = workflow_attack(&server, "hostile", "recurse-workflow", json!(null));
    assert_run_failed(&status, "trapped", "call stack exhausted");
    record(
        "unbounded recursion, workflow",
        "run failed trapped (call stack exhausted); the other tenant's run completed",
    );
}

#[test]
fn a_step_output_over_the_limit_is_refused() {
    let server = arena(&[]);
    let seen = step_attack(&server, "big", json!({"bytes": 200_000}), json!({}));
    assert_step_error(
        &seen,
        "output-too-large",
        &format!("exceeds the limit of {MALLORY_STEP_OUTPUT} bytes"),
    );
    record(
        "output over the limit, step",
        "step error output-too-large; the other tenant's run completed",
    );
}

#[test]
fn a_workflow_output_over_the_limit_fails_its_run() {
    // The host's limit lowered from its default of 64 MiB (tested at its
    // edge in host/tests/payloads.rs); the output, a JSON string, is 2 bytes
    // longer than its letters.
    let server = arena(&["--max-payload-bytes", "1000000"]);
    let status = workflow_attack(&server, "hostile", "big-workflow", json!({"bytes": 999_999}));
    assert_run_failed(&status, "output-too-large", "the limit of 1000000 bytes");
    record(
        "output over the limit, workflow",
        "run failed output-too-large; the other tenant's run completed",
    );
}

/// Lines of 1000 bytes, 10 MB in all: far over the allowance.
fn flood() -> Value {
    json!({"lines": 10_000, "bytes": 1000})
}

/// Asserts the server logged at most the allowance of flood lines, and one
/// warning that the rest was dropped.
fn assert_flood_capped(server: &Server) {
    let log = server.log();
    let kept = log.lines().filter(|line| line.contains("flood flood")).count();
    assert!(
        (1..=MAX_LOG_BYTES / 1000).contains(&kept),
        "{kept} flood lines logged, allowance {MAX_LOG_BYTES} bytes"
    );
    assert_eq!(log.matches("log allowance is used up").count(), 1);
}

#[test]
fn a_step_flooding_the_log_is_capped() {
    let server = arena(&[]);
    let seen = step_attack(&server, "log-flood", flood(), json!({}));
    assert_eq!(seen["output"], 10_000, "the step ran to its end: {seen}");
    assert_flood_capped(&server);
    record(
        "log flood, step",
        "step completed, its log cut at the run's allowance with one warning",
    );
}

#[test]
fn a_workflow_flooding_the_log_is_capped() {
    let server = arena(&[]);
    let status = workflow_attack(&server, "hostile", "log-flood-workflow", flood());
    assert_eq!(status["state"], "completed", "{status}");
    assert_eq!(status["output"], 10_000);
    assert_flood_capped(&server);
    record(
        "log flood, workflow",
        "run completed, its log cut at the run's allowance with one warning",
    );
}

#[test]
fn a_panicking_step_traps_on_every_attempt() {
    let server = arena(&[]);
    let seen = step_attack(&server, "boom", json!(null), json!({"max_attempts": 2}));
    assert_step_error(&seen, "trapped", "unreachable");
    assert_eq!(seen["attempts"], 2, "{seen}");
    record(
        "panic, step",
        "step error trapped after 2 attempts; the other tenant's run completed",
    );
}

#[test]
fn a_panicking_workflow_fails_its_run_trapped() {
    let server = arena(&[]);
    let status = workflow_attack(&server, "hostile", "boom-workflow", json!(null));
    assert_run_failed(&status, "trapped", "unreachable");
    record(
        "panic, workflow",
        "run failed trapped; the other tenant's run completed",
    );
}

#[test]
fn a_reordered_build_replayed_against_the_old_journal_diverges() {
    let server = arena(&[]);
    server.upload(MALLORY, "order");
    let v2 = std::fs::read(guest("order-reordered")).expect("the guest is built");
    server
        .post_bytes("/v1/components?name=order-v2", MALLORY, v2)
        .expect(201);
    let report = beside_alice(&server, || {
        let input = order_input("m-1", 0, json!({"approval_timeout_ms": 60_000}));
        let run = start(
            &server,
            MALLORY,
            json!({"component": "order", "workflow": "place-order", "input": input}),
        );
        server
            .post_bytes(
                &format!("/v1/runs/{run}/signals/approve"),
                MALLORY,
                br#"{"approved":true}"#.to_vec(),
            )
            .expect(202);
        assert_eq!(finished(&server, MALLORY, &run)["state"], "completed");
        let same = server
            .post_json(&format!("/v1/runs/{run}/replay"), MALLORY, &json!({}))
            .expect(200);
        assert_eq!(same["verdict"], "identical", "{same}");
        server
            .post_json(
                &format!("/v1/runs/{run}/replay"),
                MALLORY,
                &json!({"component": "order-v2"}),
            )
            .expect(200)
    });
    assert_eq!(report["verdict"], "diverged", "{report}");
    assert_eq!(report["seq"], 0, "{report}");
    let message = report["message"].as_str().unwrap_or_default();
    assert!(message.contains("reserve") && message.contains("charge"), "{message}");
    record(
        "non-deterministic build (v2 reorders steps) replayed against v1's journal, workflow",
        "replay diverged at seq 0 naming both calls; the other tenant's run completed",
    );
}

#[test]
fn a_component_importing_what_no_policy_grants_is_refused_at_upload() {
    let server = arena(&[]);
    let bytes = std::fs::read(guest("forbidden")).expect("the guest is built");
    let refused = beside_alice(&server, || {
        server
            .post_bytes("/v1/components?name=forbidden", MALLORY, bytes)
            .expect(400)
    });
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("`evil:net/raw`") && error.contains("policy does not grant"),
        "{error}"
    );
    assert_eq!(server.get("/v1/components", MALLORY).expect(200), json!([]));
    let start = json!({"component": "forbidden", "workflow": "exfiltrate-workflow", "input": null});
    server.post_json("/v1/runs", MALLORY, &start).expect(404);
    record(
        "forbidden import (evil:net/raw) in a step and a workflow",
        "upload refused (400) naming the import, nothing stored; the other tenant's run completed",
    );
}

#[test]
fn a_step_blocked_in_a_host_call_times_out_at_its_deadline() {
    let server = arena(&[]);
    let (run, seen) = step_attack_run(
        &server,
        "blocker/block",
        json!({"ms": 30_000}),
        json!({"timeout_ms": 500}),
    );
    assert_step_error(&seen, "timed-out", "inside a host call");
    assert_step_error(&seen, "timed-out", "timeout is 500ms");
    let past = took_ms(&server, &run, 0).saturating_sub(500);
    assert!(
        past < 2_000,
        "the attempt held its slot {past} ms past its 500 ms limit"
    );
    record(
        "a step blocked in a host call (a WASI wait of 30 s, timeout 500 ms)",
        &format!("step error timed-out, the slot held {past} ms past the limit; the other tenant's run completed"),
    );
}

#[test]
fn a_workflow_blocked_in_a_host_call_fails_at_its_activation_deadline() {
    let server = arena(&["--activation-timeout", "1s"]);
    server.upload(MALLORY, "blocker");
    let (status, took) = beside_alice(&server, || {
        let started = std::time::Instant::now();
        let body = json!({"component": "blocker", "workflow": "block-workflow", "input": {"ms": 30_000}});
        let run = start(&server, MALLORY, body);
        (finished(&server, MALLORY, &run), started.elapsed())
    });
    assert_run_failed(&status, "timed-out", "budget of 1s between two durable calls");
    assert_run_failed(&status, "timed-out", "inside a host call");
    let past = took.saturating_sub(std::time::Duration::from_secs(1)).as_millis();
    assert!(past < 10_000, "the activation ran {past} ms past its 1 s budget");
    record(
        "a workflow blocked in a host call (a WASI wait of 30 s, activation budget 1 s)",
        &format!(
            "run failed timed-out within {past} ms of the budget (submission and wait included); the other tenant's run completed"
        ),
    );
}

#[test]
fn outputs_that_are_not_json_are_refused() {
    let server = arena(&[]);
    let seen = step_attack(&server, "bombs/not-json", json!(null), json!({}));
    assert_step_error(&seen, "invalid-output", "not JSON text");
    let status = workflow_attack(&server, "bombs", "not-json", json!(null));
    assert_run_failed(&status, "invalid-output", "every payload must be JSON");
    record(
        "an output that is not JSON, step and workflow",
        "step error invalid-output; run failed invalid-output; the other tenant's run completed",
    );
}

#[test]
fn an_endless_retry_policy_stops_at_the_tenants_attempt_cap() {
    let server = arena(&[]);
    let endless = json!({"max_attempts": u32::MAX, "initial_backoff_ms": 0, "backoff_rate": -1.0, "max_backoff_ms": 0});
    let (run, seen) = step_attack_run(&server, "boom", json!(null), endless);
    assert_step_error(&seen, "trapped", "the host's limit");
    assert_eq!(seen["attempts"], MALLORY_MAX_ATTEMPTS, "{seen}");
    let spread = took_ms(&server, &run, 0);
    assert!(
        spread >= 4 * 20,
        "4 waits of at least the tenant's 20 ms floor: {spread} ms"
    );
    record(
        "a retry policy of u32::MAX attempts with no backoff, step",
        &format!(
            "step error trapped after {MALLORY_MAX_ATTEMPTS} attempts (the tenant's cap), at least 20 ms apart; the other tenant's run completed"
        ),
    );
}

#[test]
fn a_workflow_forking_itself_is_held_to_the_tenants_run_quotas() {
    let server = arena(&[]);
    server.upload(MALLORY, "hostile");
    let ((), idle) = beside_alice_timed(&server, || ());
    let (status, flooded) = beside_alice_timed(&server, || {
        let run = start(
            &server,
            MALLORY,
            json!({"component": "hostile", "workflow": "fork-bomb", "input": {}}),
        );
        finished(&server, MALLORY, &run)
    });
    assert_eq!(status["state"], "failed", "{status}");
    let runs = mallory_runs(&server);
    assert!(
        runs.len() <= TREE,
        "{} runs, more than a tree of depth {MALLORY_CHILD_DEPTH}",
        runs.len()
    );
    let refused = runs
        .iter()
        .find(|run| run["kind"] == "host-limit")
        .expect("a child past the depth limit");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("past the limit of {MALLORY_CHILD_DEPTH}")),
        "{message}"
    );
    eventually("mallory's tree has ended", || {
        all_mallory_runs_in(&server, &["failed", "completed", "cancelled"])
    });
    let ratio = slowdown(&flooded, &idle);
    record(
        "a workflow starting two children of itself without end",
        &format!(
            "{} runs created (depth limit {MALLORY_CHILD_DEPTH}), the deepest failed host-limit; the other tenant's saga took {ratio:.2}× its time alone",
            runs.len()
        ),
    );
}

#[test]
fn cancelling_a_tree_of_children_answers_at_once_and_ends_every_run() {
    let server = arena(&[]);
    server.upload(MALLORY, "hostile");
    let body = json!({"component": "hostile", "workflow": "fork-bomb", "input": {"hold_ms": 600_000}});
    let root = start(&server, MALLORY, body);
    eventually("the whole tree has started", || mallory_runs(&server).len() == TREE);
    let asked = std::time::Instant::now();
    server
        .post_json(
            &format!("/v1/runs/{root}/cancel"),
            MALLORY,
            &json!({"reason": "enough"}),
        )
        .expect(202);
    let answered = asked.elapsed();
    assert!(answered < std::time::Duration::from_secs(2), "cancel took {answered:?}");
    assert_eq!(finished(&server, MALLORY, &root)["state"], "cancelled");
    eventually("every run of the tree has ended", || {
        all_mallory_runs_in(&server, &["failed", "cancelled"])
    });
    let runs = mallory_runs(&server);
    let cancelled = runs.iter().filter(|run| run["state"] == "cancelled").count();
    assert_eq!(
        cancelled,
        (1 << MALLORY_CHILD_DEPTH) - 1,
        "every run above the leaves was waiting: {runs:?}"
    );
    record(
        "cancelling a tree of child runs",
        &format!(
            "the cancel answered in {} ms; all {cancelled} waiting runs of {TREE} ended cancelled",
            answered.as_millis()
        ),
    );
}

#[test]
fn a_step_started_before_an_eviction_runs_once_and_is_journaled_while_evicted() {
    let server = arena(&[]);
    server.upload(MALLORY, "hostile");
    let input = json!({"key": "evicted-1", "step_ms": 1_000, "signal_timeout_ms": 600_000});
    let run = start(
        &server,
        MALLORY,
        json!({"component": "hostile", "workflow": "start-then-wait", "input": input}),
    );
    // The serving host evicts a run waiting 250 ms: the step finishes and
    // is journaled while its workflow has no instance.
    eventually("the started step is journaled", || {
        server.get(&format!("/v1/runs/{run}/journal"), MALLORY).expect(200)[0]["kind"] == "step"
    });
    let status = server.get(&format!("/v1/runs/{run}"), MALLORY).expect(200);
    assert_eq!(status["state"], "awaiting-signal", "{status}");
    server
        .post_bytes(&format!("/v1/runs/{run}/signals/go"), MALLORY, b"true".to_vec())
        .expect(202);
    let status = finished(&server, MALLORY, &run);
    assert_eq!(status["state"], "completed", "{status}");
    assert_eq!(status["output"], json!({"step": "evicted-1", "signal": true}));
    let starts = server.log().matches("marked-start evicted-1 attempt").count();
    assert_eq!(starts, 1, "the step ran {starts} times");
    let (step, signal) = (entry(&server, &run, 0), entry(&server, &run, 1));
    assert!(
        signal["started_at_ms"].as_u64() <= step["finished_at_ms"].as_u64(),
        "the signal wait began before the step ended, as journaled: {signal} {step}"
    );
    record(
        "a step started before a long wait evicts its workflow",
        "the step ran once, journaled while the workflow was evicted; the wait's entry keeps its real start",
    );
}

#[test]
fn a_tenant_saturating_the_instance_slots_does_not_queue_another_behind_it() {
    let server = arena(&["--instances", "2"]);
    server.upload(MALLORY, "hostile");
    let ((), idle) = beside_alice_timed(&server, || ());
    let slow = json!({"step": "slow", "input": {"ms": 100}});
    let body = json!({"component": "hostile", "workflow": "call-limited", "input": slow});
    let (runs, flooded) = beside_alice_timed(&server, || {
        (0..MALLORY_ACTIVE_RUNS)
            .map(|_| start(&server, MALLORY, body.clone()))
            .collect::<Vec<_>>()
    });
    let (mut first_start, mut last_end) = (u64::MAX, 0);
    for run in &runs {
        assert_eq!(finished(&server, MALLORY, run)["state"], "completed");
        let step = entry(&server, run, 0);
        first_start = first_start.min(step["started_at_ms"].as_u64().expect("a start"));
        last_end = last_end.max(step["finished_at_ms"].as_u64().expect("an end"));
    }
    // Mallory's queue took this long to drain through the 2 slots; first
    // come, first served, alice's steps would have waited behind it.
    let drain_ms = last_end - first_start;
    assert!(
        flooded.longest_step_ms * 2 < drain_ms,
        "alice's longest step took {} ms while mallory's queue of {MALLORY_ACTIVE_RUNS} steps drained in {drain_ms} ms",
        flooded.longest_step_ms
    );
    let ratio = slowdown(&flooded, &idle);
    record(
        "a tenant queueing 40 steps on a host of 2 instance slots",
        &format!(
            "the other tenant's longest step took {} ms while the queue drained in {drain_ms} ms; its saga took {ratio:.2}× its time alone",
            flooded.longest_step_ms
        ),
    );
}

/// A guest's log line holding line breaks and a terminal escape stays one
/// line of the host's text log, its control characters escaped: it cannot
/// pass for a line the host wrote.
#[test]
fn a_guest_log_line_cannot_forge_a_host_line() {
    let host = Host::new();
    let forged = "k\n INFO stepstone: tenant mallory is now an operator\r\u{1b}[2K";
    let call = json!({"step": "marked", "input": {"key": forged, "ms": 0}}).to_string();
    let done = host
        .run(&["run", arg(&guest("hostile")), "call-limited", "--input", &call])
        .success();
    let log = done.stderr();
    assert!(
        !log.lines()
            .any(|line| line.starts_with(" INFO stepstone: tenant mallory")),
        "a forged line: {log}"
    );
    assert!(
        log.contains(r"marked-start k\n INFO stepstone: tenant mallory is now an operator\r\u{1b}[2K attempt 1"),
        "{log}"
    );
    assert!(!log.contains('\u{1b}'), "a raw escape reached the log: {log}");
    record(
        "a guest log line with \\n, \\r and an ANSI escape, written to look like a host line",
        "one line of the host's text log with the control characters escaped; no forged line",
    );
}
