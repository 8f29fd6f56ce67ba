//! Many hosts on one bucket: `stepstone serve` processes sharing one
//! SeaweedFS store over S3, each with a data directory of its own, as on
//! machines of their own. Any host takes any request; a run is driven by one
//! host at a time; a signal or cancellation sent to another host reaches the
//! owner at once; a host that dies has its runs taken over, and one that was
//! only paused stands down when it wakes; a run's stream reads the same
//! through any host, across a failover.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stepstone_e2e::{Host, ReliabilityResult, Server, StoreProxy, arg, order_input, record_reliability, token_hash};

const TOKEN: &str = "sst_cluster_token";

/// The tests take turns: each measures a latency (a wake-up, a takeover, a
/// timer) that the others' load on this machine's two cores would blur.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `count` servers sharing one fresh store, each with `args` (global flags
/// before `serve`'s own).
fn cluster(count: usize, args: &[&str]) -> Vec<Server> {
    let first = Host::on_s3();
    let others: Vec<Host> = (1..count).map(|_| Host::sharing_store_with(&first)).collect();
    std::iter::once(first)
        .chain(others)
        .map(|host| start(host, args))
        .collect()
}

/// `stepstone ARGS serve` with the one tenant's token, logging JSON.
fn start(host: Host, args: &[&str]) -> Server {
    start_allowing(host, args, &[])
}

/// `start`, the tenant's steps allowed to reach `origins`.
fn start_allowing(host: Host, args: &[&str], origins: &[String]) -> Server {
    let config = host.data_dir().join("stepstone.toml");
    let tenants = format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\nallowed_outbound_hosts = {:?}\n",
        token_hash(TOKEN),
        origins
    );
    std::fs::write(&config, tenants).expect("the tenants file is written");
    let mut full = vec!["--log-format", "json", "--config", arg(&config)];
    full.extend_from_slice(args);
    Server::start_with(host, &full)
}

fn begin(server: &Server, component: &str, workflow: &str, input: &Value, run_id: &str) {
    let body = json!({"component": component, "workflow": workflow, "input": input, "run_id": run_id});
    server.post_json("/v1/runs", TOKEN, &body).expect(202);
}

fn status(server: &Server, run: &str) -> Value {
    server.get(&format!("/v1/runs/{run}"), TOKEN).expect(200)
}

fn await_state(server: &Server, run: &str, state: &str, timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let now = status(server, run);
        if now["state"] == state {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{run} is not {state} within {timeout:?}: {now}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(server: &Server, run: &str, name: &str, payload: &Value) {
    server
        .post_json(&format!("/v1/runs/{run}/signals/{name}"), TOKEN, payload)
        .expect(202);
}

/// The seqs of a run's journal, which must be 0..n.
fn assert_contiguous(server: &Server, run: &str) -> usize {
    let journal = server.get(&format!("/v1/runs/{run}/journal"), TOKEN).expect(200);
    let seqs: Vec<u64> = journal
        .as_array()
        .expect("a journal is a list")
        .iter()
        .map(|entry| entry["seq"].as_u64().expect("an entry has a seq"))
        .collect();
    let expected: Vec<u64> = (0..seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "run {run}: the journal has a gap or a duplicate");
    seqs.len()
}

/// Each guest log line `announcement` a server logged, with its run.
fn announced(server: &Server, announcement: &str) -> Vec<(String, String)> {
    server
        .log()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|log| {
            let message = log["fields"]["message"].as_str()?;
            if !message.starts_with(announcement) {
                return None;
            }
            let run = log["spans"]
                .as_array()?
                .iter()
                .find_map(|span| span["run"].as_str())
                .unwrap_or_else(|| panic!("a step ran outside a run's span: {log}"));
            Some((run.to_owned(), message.to_owned()))
        })
        .collect()
}

/// A signal or a cancellation sent to a host that does not drive the run
/// reaches the host that does through a wake-up in the store, polled four
/// times a second; without it, only the owner's 30 s backstop would.
#[test]
fn signals_and_cancels_sent_to_another_host_reach_the_owner_within_a_second() {
    let _turn = one_at_a_time();
    let servers = cluster(2, &[]);
    let (owner, other) = (&servers[0], &servers[1]);
    owner.upload(TOKEN, "hello");
    for run in ["signalled", "cancelled"] {
        begin(owner, "hello", "await-go", &json!(null), run);
        await_state(owner, run, "awaiting-signal", Duration::from_secs(30));
    }
    let sent = Instant::now();
    signal(other, "signalled", "go", &json!({"via": "the other host"}));
    let done = await_state(other, "signalled", "completed", Duration::from_secs(5));
    let signal_took = sent.elapsed();
    assert_eq!(done["output"], json!({"via": "the other host"}));

    let sent = Instant::now();
    other
        .post_json("/v1/runs/cancelled/cancel", TOKEN, &json!({"reason": "sent elsewhere"}))
        .expect(202);
    let cancelled = await_state(other, "cancelled", "cancelled", Duration::from_secs(5));
    let cancel_took = sent.elapsed();
    assert!(
        cancelled["reason"]
            .as_str()
            .is_some_and(|r| r.contains("sent elsewhere")),
        "{cancelled}"
    );
    eprintln!("a signal through another host took {signal_took:?}, a cancellation {cancel_took:?}");
    for took in [signal_took, cancel_took] {
        assert!(took < Duration::from_secs(1), "{took:?}: not within a second");
    }
    assert!(
        !other.log().contains("claimed the run"),
        "the host the messages were sent to took no run over"
    );
}

/// A run paused through a host that does not drive it is paused on its
/// owner (a wake-up carries it), takes no signal while paused, and is not
/// driven by the host that takes it over once its owner is killed; resumed
/// there, it goes on where it stopped.
#[test]
fn a_run_paused_through_another_host_is_driven_by_none_until_resumed() {
    let _turn = one_at_a_time();
    let mut servers = cluster(2, &["--lease-ttl", "2s"]);
    let (owner, other) = (&servers[0], &servers[1]);
    owner.upload(TOKEN, "hello");
    begin(owner, "hello", "await-go", &json!(null), "held");
    let waiting = await_state(owner, "held", "awaiting-signal", Duration::from_secs(30));
    other
        .post_json("/v1/runs/held/pause", TOKEN, &json!({"reason": "elsewhere"}))
        .expect(202);
    signal(other, "held", "go", &json!({"via": "the other host"}));
    // Unpaused, the signal would end the run within a second.
    let paused = other.get("/v1/runs/held/wait?timeout=3s", TOKEN).expect(200);
    assert_eq!(paused["state"], "awaiting-signal", "{paused}");
    assert_eq!(paused["paused"]["reason"], "elsewhere", "{paused}");

    servers[0].kill();
    let other = &servers[1];
    other.await_log("claimed the run", Duration::from_secs(30));
    let still = other.get("/v1/runs/held/wait?timeout=3s", TOKEN).expect(200);
    assert_eq!(still["state"], "awaiting-signal", "taken over, still paused: {still}");
    assert_eq!(still["journaled_calls"], waiting["journaled_calls"], "{still}");

    other.post_json("/v1/runs/held/resume", TOKEN, &json!({})).expect(202);
    let done = await_state(other, "held", "completed", Duration::from_secs(30));
    assert_eq!(done["output"], json!({"via": "the other host"}));
    assert_contiguous(other, "held");
}

/// A large payload on two hosts over SeaweedFS: an order whose 600 KiB
/// gift note (its input, then its `ship` output and its own output, each
/// stored apart) is placed through one host, which is killed (SIGKILL)
/// while the order waits for its approval; the other host takes it over,
/// is sent the approval, ends the order, serves its stored output whole,
/// and replays it identically.
#[test]
fn a_large_payload_round_trips_through_the_order_saga_across_a_failover() {
    let _turn = one_at_a_time();
    let mut servers = cluster(2, &["--lease-ttl", "2s"]);
    servers[0].upload(TOKEN, "order");
    let note = "ship with care ♥ ".repeat(600 * 1024 / 19);
    let input = order_input("big", 10, json!({ "gift_note": note }));
    begin(&servers[0], "order", "place-order", &input, "big");
    await_state(&servers[0], "big", "awaiting-signal", Duration::from_secs(30));
    servers[0].kill();
    let other = &servers[1];
    other.await_log("claimed the run", Duration::from_secs(30));
    signal(other, "big", "approve", &json!({"approved": true}));
    let done = await_state(other, "big", "completed", Duration::from_secs(60));
    let sha256 = done["output_stored"]["sha256"]
        .as_str()
        .expect("the output stored apart");
    let placed = other.get(&format!("/v1/runs/big/payloads/{sha256}"), TOKEN).expect(200);
    assert!(placed["packing_slip"] == note, "the note came back whole");
    let replay = other.post_json("/v1/runs/big/replay", TOKEN, &json!({})).expect(200);
    assert_eq!(replay["verdict"], "identical", "{replay}");
    assert_contiguous(other, "big");
}

/// A stream read through a host that does not drive its run, from before
/// the run's first value, gets every value once, in order, though the
/// owner is killed (SIGKILL) a few values in and the reading host takes
/// the run over, replays its appends and goes on; then the run's end.
#[test]
fn a_stream_read_through_another_host_sees_every_value_once_in_order_across_a_failover() {
    let _turn = one_at_a_time();
    let mut servers = cluster(2, &["--lease-ttl", "2s"]);
    let (owners, readers) = servers.split_at_mut(1);
    let (owner, reader) = (&mut owners[0], &readers[0]);
    owner.upload(TOKEN, "hello");
    let input = json!({"ticks": 12, "every_ms": 250});
    begin(owner, "hello", "stream-ticks", &input, "ticker");
    let (third_read, third) = std::sync::mpsc::channel();
    let events = std::thread::scope(|scope| {
        let reading = scope.spawn(|| {
            let request = reader.request(reqwest::Method::GET, "/v1/runs/ticker/streams/ticks", TOKEN);
            reader.events(request, |event| {
                if event.id.as_deref() == Some("2") {
                    let _ = third_read.send(());
                }
                true
            })
        });
        third
            .recv_timeout(Duration::from_secs(30))
            .expect("three values through the other host");
        owner.kill();
        reading.join().expect("the reader ends")
    });
    let values: Vec<(Option<&str>, Value)> = events
        .iter()
        .filter(|event| event.event == "value")
        .map(|event| (event.id.as_deref(), serde_json::from_str(&event.data).expect("JSON")))
        .collect();
    let ids: Vec<String> = (0..12).map(|tick| tick.to_string()).collect();
    let expected: Vec<(Option<&str>, Value)> = (0..12)
        .map(|tick| (Some(ids[tick].as_str()), json!({ "tick": tick })))
        .collect();
    assert_eq!(values, expected, "every value once, in order");
    let end = events.last().expect("events");
    assert_eq!(end.event, "end", "{events:?}");
    let ended: Value = serde_json::from_str(&end.data).expect("JSON");
    assert_eq!(ended["state"], "completed", "{ended}");
    reader.await_log("claimed the run", Duration::from_secs(1));
    assert_contiguous(reader, "ticker");
    record_reliability(&ReliabilityResult {
        suite: "cluster",
        fault: "the owner of a run streaming 12 values SIGKILLed after the third, read through the other host",
        trials: 1,
        outcome: "the reader got each value once, in order, and the end; the other host took the run over",
        lost: 0,
    });
}

/// A run restarted through a host killed at once (SIGKILL) is driven by
/// the other host, which completes its prefix if the first did not: the
/// kept calls are the old run's entries as recorded, only the calls after
/// the restart point run, and the approval the old run was sent and never
/// took is taken by the new run. The old run ends cancelled.
#[test]
fn a_run_restarted_through_a_host_killed_at_once_keeps_its_calls_on_the_other() {
    const HOUR_MS: u64 = 3_600_000;
    let _turn = one_at_a_time();
    let mut servers = cluster(2, &["--lease-ttl", "2s"]);
    let first = &servers[0];
    first.upload(TOKEN, "order");
    let input = stepstone_e2e::order_input("saga", HOUR_MS, json!({"approval_timeout_ms": HOUR_MS}));
    begin(first, "order", "place-order", &input, "saga");
    await_state(first, "saga", "sleeping", Duration::from_secs(30));
    signal(first, "saga", "approve", &json!({"approved": true}));
    let old = first.get("/v1/runs/saga/journal", TOKEN).expect(200);
    let entries = old.as_array().expect("entries").clone();
    let charge = entries
        .iter()
        .position(|entry| entry["name"] == "charge")
        .expect("a charge");
    let restarted = first
        .post_json("/v1/runs/saga/restart", TOKEN, &json!({"seq": charge}))
        .expect(201);
    servers[0].kill();
    let new = restarted["run_id"].as_str().expect("a run id");
    let other = &servers[1];
    await_state(other, new, "sleeping", Duration::from_secs(30));
    other
        .post_json(&format!("/v1/runs/{new}/advance"), TOKEN, &json!({}))
        .expect(200);
    let done = await_state(other, new, "completed", Duration::from_secs(30));
    assert_eq!(done["output"]["charge"], "ch-saga", "{done}");
    assert_eq!(done["restarted_from"], json!({"run": "saga", "seq": charge}), "{done}");
    let journal = other.get(&format!("/v1/runs/{new}/journal"), TOKEN).expect(200);
    assert_eq!(
        journal.as_array().expect("entries")[..charge],
        entries[..charge],
        "kept as recorded"
    );
    let steps: Vec<&str> = journal
        .as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry["kind"] == "step")
        .filter_map(|entry| entry["name"].as_str())
        .collect();
    assert_eq!(steps, ["reserve", "charge", "ship"]);
    let logs = other.get(&format!("/v1/runs/{new}/logs"), TOKEN).expect(200);
    assert!(
        !logs.to_string().contains("reserving"),
        "the kept reservation ran again: {logs}"
    );
    assert_contiguous(other, new);
    await_state(other, "saga", "cancelled", Duration::from_secs(30));
}

/// A host paused (SIGSTOP) mid-step past its lease: another host judges it
/// dead, takes the run over and runs the step again; the paused host, once
/// resumed, finds its lease lapsed and writes nothing (no entry, no
/// outcome), so no entry of its contradicts the new owner's journal.
#[test]
fn a_paused_owner_stands_down_once_another_host_took_its_run_over() {
    let _turn = one_at_a_time();
    let servers = cluster(2, &["--lease-ttl", "2s"]);
    let (paused, taker) = (&servers[0], &servers[1]);
    paused.upload(TOKEN, "hostile");
    let input = json!({"step": "marked", "input": {"key": "k", "ms": 3000}});
    begin(paused, "hostile", "call-limited", &input, "paused-1");
    paused.await_log("marked-start k attempt 1", Duration::from_secs(30));
    paused.send("STOP");
    let stopped = Instant::now();
    taker.await_log("marked-start k attempt 1", Duration::from_secs(30));
    let takeover = stopped.elapsed();
    paused.send("CONT");
    eprintln!("the run was taken over {takeover:?} after its owner stopped, with a lease TTL of 2s");
    // Judged dead a TTL after the last heartbeat seen, which is at most a
    // quarter TTL old (renewals) and seen at most a quarter TTL late (looks).
    assert!(takeover < Duration::from_secs(4), "taken over only after {takeover:?}");
    let finished = await_state(taker, "paused-1", "completed", Duration::from_secs(60));
    assert_eq!(finished["output"], json!({"output": "k"}));
    paused.await_log("this host's lease lapsed", Duration::from_secs(30));
    // Its attempt ended, and the entry it would have written was refused.
    paused.await_log(
        "this host stood down from run `paused-1`, writing nothing",
        Duration::from_secs(30),
    );
    assert_contiguous(taker, "paused-1");
    assert!(
        !taker.log().contains("wrote run `paused-1`'s journal first"),
        "the paused host's entry reached the journal before the new owner's"
    );
    let starts = |server: &Server| announced(server, "marked-start k").len();
    assert_eq!(
        (starts(paused), starts(taker)),
        (1, 1),
        "each host started the step once"
    );
}

/// A server that finds its heartbeat written by another process under its
/// id (a machine cloned while it ran; here, bytes written into its store
/// every 100 ms, as a twin renewing would) stops driving runs and exits,
/// saying why and what to do.
#[test]
fn a_server_whose_heartbeat_another_process_writes_exits_saying_why() {
    let _turn = one_at_a_time();
    let mut server = start(Host::new(), &["--lease-ttl", "2s"]);
    let heartbeats = server.host.stored("cluster/hosts/");
    let key = heartbeats
        .keys()
        .next()
        .expect("the server wrote its heartbeat at its start");
    let path = server.host.data_dir().join("objects").join(key);
    let deadline = Instant::now() + Duration::from_secs(20);
    let exited = loop {
        std::fs::write(&path, br#"{"renewal":1,"nonce":"another process"}"#).expect("the heartbeat is written");
        if let Some(status) = server.try_exit() {
            break status;
        }
        assert!(Instant::now() < deadline, "the server went on beside another process");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!exited.success(), "{exited}");
    let log = server.log();
    assert!(
        log.contains("another process wrote its heartbeat under the same id")
            && log.contains("restart it under a fresh id"),
        "{log}"
    );
}

/// An owner paused for 2.5 TTLs while two other hosts run: its run is
/// taken over once; its heartbeat, judged dead, is cleaned up by a peer
/// about when it resumes; and a run it starts once resumed stays its own:
/// no peer takes it for gone (a heartbeat missing counts as dead only a
/// TTL after it was first missed, and the host writes it again well
/// before).
#[test]
fn an_owner_paused_for_two_and_a_half_ttls_keeps_the_runs_it_starts_after() {
    let _turn = one_at_a_time();
    let servers = cluster(3, &["--lease-ttl", "2s"]);
    let paused = &servers[0];
    paused.upload(TOKEN, "hello");
    begin(paused, "hello", "await-go", &json!({}), "before");
    await_state(paused, "before", "awaiting-signal", Duration::from_secs(30));
    paused.send("STOP");
    // The fault itself: 2.5 TTLs of silence, then the host runs again.
    std::thread::sleep(Duration::from_secs(5));
    paused.send("CONT");
    begin(paused, "hello", "await-go", &json!({}), "after");
    await_state(paused, "after", "awaiting-signal", Duration::from_secs(30));
    // Three TTLs in which a peer that took it for gone would claim it.
    std::thread::sleep(Duration::from_secs(6));
    for (server, run) in [(&servers[1], "before"), (&servers[2], "after")] {
        signal(server, run, "go", &json!({"from": run}));
    }
    for run in ["before", "after"] {
        let done = await_state(&servers[1], run, "completed", Duration::from_secs(30));
        assert_eq!(done["output"], json!({"from": run}), "{done}");
    }
    let claimed_after = |server: &Server| {
        server
            .log()
            .lines()
            .filter(|line| line.contains("claimed the run") && line.contains("\"after\""))
            .count()
    };
    // The owner may claim it again itself (its hold was of the generation
    // before its heartbeat was cleaned up): that is no peer taking it.
    assert_eq!(
        servers[1..].iter().map(claimed_after).sum::<usize>(),
        0,
        "a peer took the resumed host's new run for a dead host's"
    );
    record_reliability(&ReliabilityResult {
        suite: "cluster",
        fault: "an owner SIGSTOPped for 2.5 lease TTLs beside two other hosts, then resumed",
        trials: 1,
        outcome: "its run taken over once and completed; a run it started once resumed stayed its own (no claim on it) and completed",
        lost: 0,
    });
}

/// The fencing token closes what no lease can: an attempt a host started
/// before it was paused acts after its run was taken over. The paused
/// host's step waits inside a host call, is stopped, and sends its write
/// only after the new owner's attempt sent the same write: the service,
/// keeping the highest token it saw for the idempotency key, refuses the
/// late one. Without the token it would have done the write twice, the
/// second undoing the first.
#[test]
fn a_paused_hosts_late_write_is_fenced_off_by_its_token() {
    let _turn = one_at_a_time();
    let origin = stepstone_e2e::Origin::start();
    let first = Host::on_s3();
    let second = Host::sharing_store_with(&first);
    let allowed = [origin.url()];
    let args = ["--lease-ttl", "2s"];
    let paused = start_allowing(first, &args, &allowed);
    let taker = start_allowing(second, &args, &allowed);
    let (paused, taker) = (&paused, &taker);
    paused.upload(TOKEN, "fetcher");
    let write = json!({"url": format!("{}/fenced-write", origin.url()), "method": "POST",
        "idempotent": true, "fenced": true, "wait_ms": 3000});
    begin(paused, "fetcher", "fetch-once", &json!({"fetch": write}), "fenced-1");
    paused.await_log("fetch waiting 3000 ms, attempt 1", Duration::from_secs(30));
    paused.send("STOP");
    taker.await_log("fetch waiting 3000 ms, attempt 1", Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(30);
    while origin.fenced_writes().is_empty() {
        assert!(Instant::now() < deadline, "the new owner's write never came");
        std::thread::sleep(Duration::from_millis(20));
    }
    paused.send("CONT");
    while origin.fenced_writes().len() < 2 {
        assert!(Instant::now() < deadline, "the paused host's late write never came");
        std::thread::sleep(Duration::from_millis(20));
    }
    let writes = origin.fenced_writes();
    let tokens: Vec<(u64, bool)> = writes.iter().map(|w| (w.fencing_token, w.accepted)).collect();
    assert_eq!(tokens, [(1, true), (0, false)], "{writes:?}");
    assert!(
        writes.iter().all(|w| w.idempotency_key == "acme/fenced-1/0"),
        "{writes:?}"
    );
    let finished = await_state(taker, "fenced-1", "completed", Duration::from_secs(60));
    assert_eq!(finished["output"]["status"], 200, "{finished}");
    assert_contiguous(taker, "fenced-1");
    record_reliability(&ReliabilityResult {
        suite: "cluster",
        fault: "an owner SIGSTOPped inside a step attempt, resumed after the new owner's attempt wrote to a service",
        trials: 1,
        outcome: "the late write carried fencing token 0 after the new owner's 1, and the service refused it; one write done, the run completed once",
        lost: 0,
    });
}

/// Two hosts with a 2 s lease, the first reaching the store through a
/// proxy, and run `run` of four `marked` steps (`{key}-0` to `{key}-3`,
/// 1.5 s each) begun on the first, its first step started.
fn four_steps_behind_a_proxy(key: &str, run: &str) -> (StoreProxy, Server, Server) {
    let proxy = StoreProxy::start(stepstone_e2e::seaweedfs().endpoint());
    let first = Host::on_s3().with_env("AWS_ENDPOINT", &proxy.url());
    let second = Host::sharing_store_with(&first);
    let args = ["--lease-ttl", "2s"];
    let (behind, other) = (start(first, &args), start(second, &args));
    behind.upload(TOKEN, "hostile");
    let input = json!({"key": key, "count": 4, "ms": 1500});
    begin(&behind, "hostile", "marked-in-turn", &input, run);
    behind.await_log(&format!("marked-start {key}-0 attempt 1"), Duration::from_secs(30));
    (proxy, behind, other)
}

/// A host cut off from the store in the middle of a step (a TCP proxy
/// between it and SeaweedFS drops its connections and refuses new ones):
/// the other host takes its run over and finishes it; the cut-off host,
/// reconnected, finds its lease lapsed and stands down. Of the run's four
/// steps only the one in flight at the cut ran on both hosts; every later
/// step ran once, and the journal is whole.
#[test]
fn a_host_cut_off_from_the_store_stands_down_and_starts_no_new_step() {
    let _turn = one_at_a_time();
    let (proxy, cut_off, taker) = four_steps_behind_a_proxy("cut", "cut-1");
    proxy.cut();
    // The taker has gone past the step in flight: the run is its own.
    taker.await_log("marked-start cut-1 attempt 1", Duration::from_secs(60));
    proxy.mend();
    let finished = await_state(&taker, "cut-1", "completed", Duration::from_secs(60));
    assert_eq!(finished["output"], json!(["cut-0", "cut-1", "cut-2", "cut-3"]));
    cut_off.await_log("this host's lease lapsed", Duration::from_secs(30));
    assert_eq!(assert_contiguous(&taker, "cut-1"), 4);
    let started = |server: &Server| -> Vec<String> {
        let starts = announced(server, "marked-start cut-");
        starts.into_iter().map(|(_, message)| message).collect()
    };
    assert_eq!(started(&cut_off), ["marked-start cut-0 attempt 1"]);
    assert_eq!(
        started(&taker),
        (0..4)
            .map(|n| format!("marked-start cut-{n} attempt 1"))
            .collect::<Vec<_>>()
    );
    record_reliability(&ReliabilityResult {
        suite: "cluster",
        fault: "an owner cut off from the store (a TCP proxy dropping its connections) in the middle of a step, reconnected after the takeover",
        trials: 1,
        outcome: "the run taken over and completed; the cut-off host stood down; only the step in flight at the cut ran on both hosts, every later step once; the journal whole",
        lost: 0,
    });
}

/// A host whose heartbeats reach the store 1.5 TTLs late while its journal
/// writes pass at once (a proxy holds back its requests for
/// `cluster/hosts/`): its peer judges it dead and takes its run over, and
/// the slow host, whose lease counts from the sending of its last renewal
/// that landed, has stopped before: it starts no step after the peer's
/// first. The run completes once, its journal whole.
#[test]
fn a_host_whose_heartbeats_are_late_starts_no_step_after_its_peer_took_over() {
    let _turn = one_at_a_time();
    let (proxy, slow, taker) = four_steps_behind_a_proxy("late", "late-1");
    proxy.delay("/cluster/hosts/", Duration::from_secs(3));
    let finished = await_state(&taker, "late-1", "completed", Duration::from_secs(90));
    proxy.undelay();
    assert_eq!(finished["output"], json!(["late-0", "late-1", "late-2", "late-3"]));
    slow.await_log("this host's lease lapsed", Duration::from_secs(30));
    assert_eq!(assert_contiguous(&taker, "late-1"), 4);
    let (slow_starts, taker_starts) = (timed_starts(&slow, "late-"), timed_starts(&taker, "late-"));
    assert!(!slow_starts.is_empty(), "the slow host started the run's first step");
    let taken_over_at = &taker_starts.first().expect("the peer took the run over").0;
    let late: Vec<_> = slow_starts.iter().filter(|(at, _)| at >= taken_over_at).collect();
    assert!(
        late.is_empty(),
        "the slow host started steps after its peer took over at {taken_over_at}: {late:?}"
    );
    record_reliability(&ReliabilityResult {
        suite: "cluster",
        fault: "an owner's heartbeats held back 1.5 lease TTLs by a proxy while its journal writes passed",
        trials: 1,
        outcome: "the run taken over and completed once, its journal whole; the slow host started no step after its peer's first",
        lost: 0,
    });
}

/// When a server logged each `marked-start {prefix}...` line (RFC 3339,
/// UTC: in order as text), with the line.
fn timed_starts(server: &Server, prefix: &str) -> Vec<(String, String)> {
    let announcement = format!("marked-start {prefix}");
    server
        .log()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|log| {
            let message = log["fields"]["message"].as_str()?;
            let at = log["timestamp"].as_str()?;
            message
                .starts_with(&announcement)
                .then(|| (at.to_owned(), message.to_owned()))
        })
        .collect()
}

/// The shapes of the load, each with the output an uninterrupted run of it
/// gives, taken from a run of it before any host is harmed.
struct Shape {
    component: &'static str,
    workflow: &'static str,
    input: Value,
    /// Sends the approval the batch waits for.
    approve: bool,
}

fn shapes() -> Vec<Shape> {
    let batch = json!({"batch": "b", "items": ["x", "y"], "pause_ms": 300, "approval_timeout_ms": 600_000});
    vec![
        Shape {
            component: "batch",
            workflow: "process-batch",
            input: batch,
            approve: true,
        },
        Shape {
            component: "hello",
            workflow: "greet-all",
            input: json!({"names": ["Ada", "Lin"]}),
            approve: false,
        },
        Shape {
            component: "hello",
            workflow: "greet",
            input: json!({"name": "Ada"}),
            approve: false,
        },
    ]
}

const RUNS: usize = 1000;

/// Three hosts share a load of a thousand runs of mixed shapes (steps with
/// a retry, durable sleeps, signals sent through a host that does not own
/// the run, fan-out, children). Mid-load one host is SIGKILLed and another
/// restarted: every run completes with its uninterrupted output, every
/// journal is contiguous, and no step whose result was journaled ran again:
/// an attempt ran twice only if the first was on the killed host, which
/// died before journaling it.
#[test]
fn three_hosts_finish_a_thousand_runs_though_one_is_killed_and_another_restarted() {
    let _turn = one_at_a_time();
    let mut servers = cluster(3, &["--lease-ttl", "3s"]);
    for component in ["batch", "hello"] {
        servers[0].upload(TOKEN, component);
    }
    let shapes = shapes();
    let uninterrupted: Vec<Value> = shapes
        .iter()
        .enumerate()
        .map(|(n, shape)| {
            let run = format!("baseline-{n}");
            begin(&servers[0], shape.component, shape.workflow, &shape.input, &run);
            if shape.approve {
                signal(&servers[0], &run, "approve", &json!({"by": "ops"}));
            }
            let done = await_state(&servers[0], &run, "completed", Duration::from_secs(60));
            done["output"].clone()
        })
        .collect();
    // Every host gets every shape: run i goes to host i mod 3, shapes
    // change every third run.
    let runs: Vec<(String, usize)> = (0..RUNS)
        .map(|i| (format!("load-{i}"), (i / 3) % shapes.len()))
        .collect();
    let started = Instant::now();
    let mut hosts = 3;
    for (i, (run, shape)) in runs.iter().enumerate() {
        let shape = &shapes[*shape];
        begin(&servers[i % hosts], shape.component, shape.workflow, &shape.input, run);
        // The approval goes through a host that did not take the run: the
        // owner, while it lives, is reached by a wake-up.
        if shape.approve {
            signal(&servers[(i + 1) % hosts], run, "approve", &json!({"by": "ops"}));
        }
        if i == RUNS / 3 {
            servers[2].kill();
            hosts = 2;
        }
        if i == RUNS / 2 {
            let restarting = servers.remove(1);
            servers.insert(1, restarting.restart_after("TERM"));
        }
    }
    let killed = servers.remove(2);
    let alive = &servers[..];
    let mut journaled = 0;
    for (i, (run, shape)) in runs.iter().enumerate() {
        let server = &alive[i % 2];
        let done = server
            .get(&format!("/v1/runs/{run}/wait?timeout=120s"), TOKEN)
            .expect(200);
        assert_eq!(done["state"], "completed", "{run}: {done}");
        assert_eq!(done["output"], uninterrupted[*shape], "{run}");
        journaled += assert_contiguous(server, run);
    }
    eprintln!(
        "{RUNS} runs ({journaled} journal entries) finished in {:?} on 3 hosts, one killed and one restarted",
        started.elapsed()
    );

    let mut executions: BTreeMap<(String, String), Vec<&str>> = BTreeMap::new();
    let logs = [(&alive[0], "alive"), (&alive[1], "restarted"), (&killed, "killed")];
    for (server, which) in logs {
        for execution in announced(server, "executed ") {
            executions.entry(execution).or_default().push(which);
        }
    }
    let repeated: Vec<_> = executions.iter().filter(|(_, hosts)| hosts.len() > 1).collect();
    for (execution, hosts) in &repeated {
        assert!(
            hosts.len() == 2 && hosts.contains(&"killed"),
            "{execution:?} ran on {hosts:?}: a journaled step ran again"
        );
    }
    // Each batch (and its uninterrupted baseline) makes 5 attempts: fetch
    // twice (it fails once), 2 transforms, publish.
    let batches = 1 + runs.iter().filter(|(_, shape)| shapes[*shape].approve).count();
    assert_eq!(executions.len(), batches * 5, "step attempts logged");
    eprintln!(
        "{} step attempts; {} repeated, each first begun on the killed host",
        executions.len(),
        repeated.len()
    );
    assert!(
        !announced(&killed, "executed ").is_empty(),
        "the killed host ran steps before it died"
    );
    record_reliability(&ReliabilityResult {
        suite: "cluster",
        fault: "3 hosts on one S3 bucket (SeaweedFS): one SIGKILLed, another restarted (SIGTERM) mid-load",
        trials: RUNS as u64,
        outcome: &format!(
            "every run completed with its uninterrupted output and a contiguous journal; {} attempts in flight on the killed host ran again, no journaled step did",
            repeated.len()
        ),
        lost: 0,
    });
}

/// A host killed half-way through a run's durable sleep: the host that
/// takes the run over wakes it at the deadline recorded when the sleep
/// began, not a whole sleep after the takeover.
#[test]
fn a_killed_hosts_timer_fires_on_the_new_owner_at_its_deadline() {
    let _turn = one_at_a_time();
    let mut servers = cluster(2, &[]);
    servers[0].upload(TOKEN, "batch");
    let input = json!({"batch": "t", "items": ["x"], "pause_ms": 4000});
    begin(&servers[0], "batch", "process-batch", &input, "timed");
    signal(&servers[1], "timed", "approve", &json!({"by": "ops"}));
    let sleeping = await_state(&servers[1], "timed", "sleeping", Duration::from_secs(30));
    let deadline = sleeping["until_ms"].as_u64().expect("a sleep has a deadline");
    while now_ms() + 2000 < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    servers[0].kill();
    let killed_at = now_ms();
    await_state(&servers[1], "timed", "completed", Duration::from_secs(30));
    let journal = servers[1].get("/v1/runs/timed/journal", TOKEN).expect(200);
    let sleep = journal
        .as_array()
        .and_then(|entries| entries.iter().find(|entry| entry["kind"] == "sleep"))
        .unwrap_or_else(|| panic!("no sleep in {journal}"));
    let woke = sleep["finished_at_ms"].as_u64().expect("an entry has its end");
    assert!(killed_at < deadline, "the host was killed after the deadline");
    assert!(
        (deadline..deadline + 1500).contains(&woke),
        "the sleep due at {deadline} ended at {woke} (the host was killed at {killed_at})"
    );
}

fn now_ms() -> u64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970");
    u64::try_from(since_epoch.as_millis()).expect("milliseconds fit in 64 bits")
}

/// A run scheduled on a host that then dies starts on another host at its
/// time (once that host has found the first dead), not before, once.
#[test]
fn a_killed_hosts_scheduled_run_starts_on_the_new_owner_at_its_time() {
    let _turn = one_at_a_time();
    let mut servers = cluster(2, &[]);
    servers[0].upload(TOKEN, "hello");
    let body =
        json!({"component": "hello", "workflow": "greet", "input": {"name": "Ada"}, "run_id": "later", "delay": "4s"});
    servers[0].post_json("/v1/runs", TOKEN, &body).expect(202);
    let scheduled = await_state(&servers[1], "later", "scheduled", Duration::from_secs(30));
    let start_at = scheduled["start_at_ms"].as_u64().expect("a start time");
    servers[0].kill();
    let done = await_state(&servers[1], "later", "completed", Duration::from_secs(60));
    assert_eq!(done["output"]["greeting"], "Hello, Ada!");
    assert_eq!(assert_contiguous(&servers[1], "later"), 1, "its one step ran once");
    let journal = servers[1].get("/v1/runs/later/journal", TOKEN).expect(200);
    let began = journal[0]["started_at_ms"].as_u64().expect("a journaled step");
    assert!(began >= start_at, "it began at {began}, before its time {start_at}");
}

/// Every host sharing the store fires every schedule: each fire is one run,
/// whose one step ran once on one host, and when a host dies the others
/// go on firing.
#[test]
fn hosts_sharing_a_store_fire_a_schedule_once_per_fire_and_go_on_when_one_dies() {
    let _turn = one_at_a_time();
    let mut servers = cluster(2, &[]);
    servers[0].upload(TOKEN, "hello");
    let body = json!({"name": "tick", "component": "hello", "workflow": "greet",
        "input": {"name": "Ada"}, "cron": "* * * * * *"});
    servers[0].post_json("/v1/schedules", TOKEN, &body).expect(201);
    let fires = r#"stepstone_schedule_fires_total{tenant="acme",outcome="started"}"#;
    // Host 1 reads the schedule at its next reload, and fires it too.
    servers[1].await_metric(fires, 3.0, Duration::from_secs(30));
    for server in &servers {
        server
            .post_json("/v1/schedules/tick/pause", TOKEN, &json!({}))
            .expect(200);
    }
    let fired = |server: &Server| -> Vec<String> {
        let page = server.get("/v1/runs?limit=1000", TOKEN).expect(200);
        let runs = page["runs"].as_array().cloned().unwrap_or_default();
        runs.iter()
            .filter_map(|run| {
                run["run_id"]
                    .as_str()
                    .filter(|id| id.starts_with("tick-"))
                    .map(str::to_owned)
            })
            .collect()
    };
    let runs = fired(&servers[1]);
    for run in &runs {
        await_state(&servers[1], run, "completed", Duration::from_secs(30));
    }
    let attempts = r#"stepstone_step_attempts_total{tenant="acme",outcome="ok"}"#;
    let ran: f64 = servers.iter().map(|server| server.metric(attempts)).sum();
    assert_eq!(
        ran,
        runs.len() as f64,
        "steps ran on the two hosts for {} fires: {runs:?}",
        runs.len()
    );

    servers[1]
        .post_json("/v1/schedules/tick/resume", TOKEN, &json!({}))
        .expect(200);
    servers[0].kill();
    let before = runs.len();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fired(&servers[1]).len() < before + 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "host 1 fired nothing after host 0 died"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let newest = fired(&servers[1]).pop().expect("a run");
    await_state(&servers[1], &newest, "completed", Duration::from_secs(30));
}

#[test]
fn a_concurrency_key_holds_across_hosts_and_a_dead_hosts_run_keeps_its_place() {
    let _turn = one_at_a_time();
    let mut servers = cluster(2, &[]);
    servers[0].upload(TOKEN, "hello");
    let keyed = |run: &str| {
        json!({"component": "hello", "workflow": "await-go", "input": {}, "run_id": run,
            "concurrency_key": "ledger"})
    };
    servers[0].post_json("/v1/runs", TOKEN, &keyed("first")).expect(202);
    await_state(&servers[0], "first", "awaiting-signal", Duration::from_secs(30));
    servers[1].post_json("/v1/runs", TOKEN, &keyed("second")).expect(202);
    await_state(&servers[1], "second", "queued", Duration::from_secs(30));

    // The holder's host dies: its run goes on on the survivor, still
    // holding the place, so the other waits until it ends.
    servers[0].kill();
    signal(&servers[1], "first", "go", &json!({"ok": true}));
    assert_eq!(status(&servers[1], "second")["state"], "queued");
    await_state(&servers[1], "first", "completed", Duration::from_secs(60));
    let second = await_state(&servers[1], "second", "awaiting-signal", Duration::from_secs(30));
    assert_eq!(second["journaled_calls"], 0, "{second}");
    signal(&servers[1], "second", "go", &json!({"ok": true}));
    await_state(&servers[1], "second", "completed", Duration::from_secs(30));
}

#[test]
fn a_chain_whose_host_dies_is_finished_by_another_with_one_run_per_generation() {
    let _turn = one_at_a_time();
    let mut servers = cluster(2, &[]);
    servers[0].upload(TOKEN, "counter");
    let input = json!({"n": 0, "until": 6, "sleep_ms": 300});
    begin(&servers[0], "counter", "count", &input, "chain");
    let deadline = Instant::now() + Duration::from_secs(30);
    while status(&servers[1], "chain")["chain"]["generation"]
        .as_u64()
        .unwrap_or(0)
        < 2
    {
        assert!(Instant::now() < deadline, "the chain never reached generation 2");
        std::thread::sleep(Duration::from_millis(20));
    }
    servers[0].kill();
    let done = await_state(&servers[1], "chain", "completed", Duration::from_secs(60));
    assert_eq!(done["output"], json!({"n": 6, "until": 6}), "{done}");
    let page = servers[1].get("/v1/runs?limit=1000", TOKEN).expect(200);
    let mut ids: Vec<&str> = page["runs"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|run| run["run_id"].as_str())
        .collect();
    ids.sort_unstable();
    let expected = [
        "chain", "chain.g1", "chain.g2", "chain.g3", "chain.g4", "chain.g5", "chain.g6",
    ];
    assert_eq!(ids, expected, "one run per generation across the two hosts");
}
