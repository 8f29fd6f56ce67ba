//! Faults in the store: a corrupt record is reported as corrupt, naming its
//! key, and other runs go on; a store that fails calls (`STEPSTONE_FAULTS`)
//! is retried through, and one that keeps failing stops a run without
//! losing it.

use serde_json::{Value, json};
use stepstone_e2e::{Host, ReliabilityResult, Run, Server, arg, guest, order_input, record_reliability};

/// The local store makes every write durable unless told not to, through
/// its write-ahead log by default (kept in the store's directory) or by
/// syncing each write's file: the host says which at debug level and runs
/// alike whichever it is; a durability it does not know is refused, naming
/// those it does.
#[test]
fn the_local_store_syncs_its_writes_unless_told_not_to() {
    let host = Host::new();
    let hello = guest("hello");
    let run = |id: &str, durability: &[&str]| {
        let mut args = vec![
            "run",
            arg(&hello),
            "greet",
            "--run-id",
            id,
            "--input",
            r#"{"name":"Ada"}"#,
        ];
        args.extend_from_slice(durability);
        let mut command = host.command(&args);
        command
            .env_remove("STEPSTONE_DURABILITY")
            .env("RUST_LOG", "stepstone=debug");
        Run(command.output().expect("stepstone starts"))
    };
    let logged = run("logged", &[]).success();
    assert!(logged.stderr().contains("durability=log"), "{}", logged.stderr());
    let log = host.data_dir().join("objects/write-log#0");
    assert!(
        log.metadata().is_ok_and(|log| log.len() > 0),
        "{} holds the log",
        log.display()
    );
    let synced = run("synced", &["--durability", "fsync"]).success();
    assert!(synced.stderr().contains("durability=fsync"), "{}", synced.stderr());
    let unsynced = run("unsynced", &["--durability", "no-fsync"]).success();
    assert!(
        unsynced.stderr().contains("durability=no-fsync"),
        "{}",
        unsynced.stderr()
    );
    assert_eq!(synced.stdout(), unsynced.stdout());
    assert_eq!(host.history("synced").len(), host.history("unsynced").len());
    assert_eq!(synced.stdout(), logged.stdout());
    assert_eq!(host.history("synced").len(), host.history("logged").len());
    let refused = run("refused", &["--durability", "sync"]).failure();
    assert!(
        refused.contains("unknown durability `sync`") && refused.contains("no-fsync") && refused.contains("log"),
        "{refused}"
    );
}

#[test]
fn a_flipped_byte_in_a_journal_entry_stops_that_run_only() {
    let host = Host::new();
    let wasm = guest("order");
    for run in ["healthy", "damaged"] {
        let input = order_input(run, 60_000, json!({})).to_string();
        let detached = host.run_detached(&wasm, "place-order", run, &input);
        assert!(detached.stdout().contains("suspended"), "{}", detached.stdout());
    }
    let entry = host
        .data_dir()
        .join("objects/tenants/default/runs/damaged/journal/0000000000");
    let mut bytes = std::fs::read(&entry).expect("the first entry is on disk");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&entry, bytes).unwrap();

    host.run(&["cancel", "healthy"]).success();
    let resumed = host.run(&["resume"]);
    let stderr = resumed.failure();
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: run damaged"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        error.contains("runs/damaged/journal/0000000000") && error.contains("checksum mismatch"),
        "{error}"
    );
    assert_eq!(
        host.status("healthy").unwrap()["state"],
        "cancelled",
        "the other run went on"
    );
    let damaged = host.run(&["history", "damaged"]).failure();
    assert!(damaged.contains("checksum mismatch"), "{damaged}");
}

/// A host whose every command sees the store fail as `faults` says (see
/// `STEPSTONE_FAULTS`), and what the injector and the retries reported.
struct Flaky<'a> {
    host: &'a Host,
    /// The fault config, with `{seed}` replaced by a new seed per command.
    faults: &'a str,
    commands: u64,
    injected: u64,
    retries: u64,
}

impl<'a> Flaky<'a> {
    fn new(host: &'a Host, faults: &'a str) -> Self {
        Self {
            host,
            faults,
            commands: 0,
            injected: 0,
            retries: 0,
        }
    }

    /// Runs `stepstone ARGS` under faults and tallies what its log says.
    fn run(&mut self, args: &[&str]) -> Run {
        self.commands += 1;
        let faults = self.faults.replace("{seed}", &self.commands.to_string());
        let output = self
            .host
            .command(args)
            .env("STEPSTONE_FAULTS", faults)
            .output()
            .expect("stepstone starts");
        let run = Run(output);
        let stderr = run.stderr();
        let summary = stderr
            .lines()
            .find(|l| l.contains("storage faults injected"))
            .unwrap_or_else(|| panic!("no fault summary at exit: {stderr}"));
        let injected: u64 = summary
            .split("injected=")
            .nth(1)
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no count in {summary:?}"));
        self.injected += injected;
        self.retries += stderr.matches("storage call failed; retrying").count() as u64;
        run
    }
}

/// Order sagas `order-N` (reserve, a charge that fails once, a sleep, an
/// approval signal, ship) and a fan-out, each command run by `runner`: their
/// outputs by run, once every journal was checked for gaps and duplicates.
fn order_and_fanout_runs(host: &Host, mut runner: impl FnMut(&[&str]) -> Run, orders: usize) -> Vec<(String, Value)> {
    let order = guest("order");
    runner(&["upload", arg(&order), "--name", "order"]).success();
    let ids: Vec<String> = (0..orders).map(|i| format!("order-{i}")).collect();
    for id in &ids {
        let input = order_input(id, 200, json!({})).to_string();
        runner(&["start", "order", "place-order", "--run-id", id, "--input", &input]).success();
        runner(&["signal", id, "approve", r#"{"approved":true}"#]).success();
    }
    let resumed = runner(&["resume"]).success().stdout();
    let mut outputs: Vec<(String, Value)> = ids
        .iter()
        .map(|id| {
            let line = resumed
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{id} completed ")))
                .unwrap_or_else(|| panic!("{id} did not complete: {resumed}"));
            (id.clone(), serde_json::from_str(line).expect("JSON output"))
        })
        .collect();
    let fanout = guest("fanout");
    let args = [
        "run",
        arg(&fanout),
        "fan-out",
        "--input",
        r#"{"items":[1,2,3,4,5,6]}"#,
        "--run-id",
        "fan",
    ];
    outputs.push(("fan".into(), runner(&args).success().json_line()));
    for (run, _) in &outputs {
        let seqs: Vec<u64> = host.history(run).iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert_eq!(
            seqs,
            (0..seqs.len() as u64).collect::<Vec<_>>(),
            "{run}: a gap or a duplicate seq"
        );
    }
    outputs
}

/// What a journal entry says, less what differs between two hosts (times,
/// the stored signal's key).
fn shape(entry: &Value) -> Value {
    let mut recorded = entry["recorded"].clone();
    if let Some(signal) = recorded.get_mut("Signal").and_then(Value::as_object_mut) {
        signal.remove("key");
    }
    json!([entry["seq"], entry["call"], entry["attempts"], recorded])
}

#[test]
fn runs_end_as_without_faults_while_a_tenth_of_store_calls_fail() {
    faults_are_hidden_on(Host::new(), "the local store");
}

#[test]
fn runs_end_as_without_faults_on_s3_while_a_tenth_of_its_calls_fail() {
    faults_are_hidden_on(Host::on_s3(), "S3 (SeaweedFS)");
}

/// Runs orders and fan-outs on a calm host and on `host`, whose store fails
/// one call in ten: the outputs and journals must be the same.
fn faults_are_hidden_on(host: Host, store: &str) {
    const ORDERS: usize = 6;
    let calm = Host::new();
    let expected = order_and_fanout_runs(&calm, |args| calm.run(args), ORDERS);

    let mut flaky = Flaky::new(&host, "errors=0.1,latency=1ms,seed={seed}");
    let outputs = order_and_fanout_runs(&host, |args| flaky.run(args), ORDERS);
    assert_eq!(outputs, expected);
    let mut lost = 0;
    for (run, _) in &expected {
        let want: Vec<Value> = calm.history(run).iter().map(shape).collect();
        let got: Vec<Value> = host.history(run).iter().map(shape).collect();
        lost += want.iter().filter(|entry| !got.contains(entry)).count() as u64;
        assert_eq!(got, want, "{run}: the journal differs from the fault-free one");
    }
    assert!(flaky.injected >= 10, "only {} faults injected", flaky.injected);
    // Every injected fault was retried (none exhausted the retries).
    assert_eq!(flaky.retries, flaky.injected);
    eprintln!(
        "{} runs, {} commands: {} faults injected, {} retries",
        expected.len(),
        flaky.commands,
        flaky.injected,
        flaky.retries
    );
    record_reliability(&ReliabilityResult {
        suite: "storage_faults",
        fault: &format!("10% of store calls fail (half of the failed writes land first), on {store}"),
        trials: expected.len() as u64,
        outcome: &format!(
            "every run completed with the fault-free output and journal; {} faults injected, all retried",
            flaky.injected
        ),
        lost,
    });
}

#[test]
fn a_store_refusing_every_write_stops_the_run_intact_and_resume_finishes_it() {
    let host = Host::new();
    let order = guest("order");
    host.run(&["upload", arg(&order), "--name", "order"]).success();
    let input = order_input("down", 200, json!({})).to_string();
    host.run(&["start", "order", "place-order", "--run-id", "down", "--input", &input])
        .success();
    host.run(&["signal", "down", "approve", r#"{"approved":true}"#])
        .success();

    let mut down = Flaky::new(&host, "errors=1,on=writes,landed=0,seed={seed}");
    let stderr = down.run(&["resume"]).failure();
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: run down"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        error.contains("storage failed at runs/down/owners/0000000001 after 8 attempt(s)")
            && error.contains("injected fault")
            && error.contains("`stepstone resume` continues it"),
        "{error}"
    );
    // 8 tries of the claim on the run (its first write: `start` made the
    // run on a host now gone), and 8 of the marker that would have indexed
    // the unfinished run (the first resume on a store scans it).
    assert_eq!((down.injected, down.retries), (16, 14));
    // Not failed: as it was before the outage, nothing recorded.
    let status = host.status("down").expect("the run is there");
    assert_eq!(status["state"], "pending", "{status}");

    let resumed = host.run(&["resume"]).success().stdout();
    let output = resumed
        .lines()
        .find_map(|l| l.strip_prefix("down completed "))
        .unwrap_or_else(|| panic!("{resumed}"));
    let output: Value = serde_json::from_str(output).unwrap();
    assert_eq!(
        (&output["status"], &output["tracking"]),
        (&json!("shipped"), &json!("trk-down"))
    );
    let steps: Vec<Value> = host
        .history("down")
        .iter()
        .map(|e| json!([e["call"]["kind"], e["call"]["name"]]))
        .collect();
    assert_eq!(
        steps,
        [
            json!(["Step", "reserve"]),
            json!(["Step", "charge"]),
            json!(["Sleep", ""]),
            json!(["Signal", "approve"]),
            json!(["Step", "ship"])
        ]
    );
    record_reliability(&ReliabilityResult {
        suite: "storage_faults",
        fault: "every store write fails",
        trials: 1,
        outcome: "the run stopped naming the key and 8 attempts, stayed unfinished, and `resume` completed it once writes worked",
        lost: 0,
    });
}

#[test]
fn a_server_whose_store_takes_no_write_answers_503_naming_the_key() {
    let server = Server::start_with(Host::new(), &["--faults", "errors=1,on=writes,landed=0"]);
    let log = server.log();
    let token = &server.printed_token();
    assert!(log.contains("storage fault injection is ON"), "{log}");
    let bytes = std::fs::read(guest("hello")).expect("the guest is built");
    let refused = server.post_bytes("/v1/components?name=hello", token, bytes).expect(503);
    let error = refused["error"].as_str().expect("an error message");
    assert!(
        error.starts_with("storage failed at components/") && error.contains("after 8 attempt(s)"),
        "{error}"
    );
}
