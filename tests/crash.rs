//! Crash consistency: the `batch` workflow (a step that fails once and is
//! retried, a durable pause, a signal, fan-out, a last step) is killed with
//! SIGKILL at every write of every command that moves it (`run`, `signal`,
//! `resume`): before the write, half-way through it, and after it. Each time
//! it is recovered as an operator and a client would (`resume`, then the
//! client's `run` again with its run id, the signal sent when the run waits
//! for it), and must then:
//!
//! * complete with the output of an uninterrupted run;
//! * have a journal of seqs 0..n, no gap, no duplicate, n as uninterrupted;
//! * have left every entry that was stored at the kill byte for byte;
//! * hold the approval once, though the user may have sent it twice;
//! * not have run again any step whose entry was stored at the kill, nor
//!   repeated an attempt whose failure was stored.
//!
//! Journal snapshots are written at every suspension here, so a kill
//! before, during or after one must leave the run recoverable from its
//! entries too.
//!
//! The kill points come from the host's `STEPSTONE_CRASH_AT` decorator
//! (`host/src/store/crash_points.rs`), which numbers every write of a
//! command, markers it overwrites included; a phase's writes are tried
//! until the next number is never reached.
//!
//! The suite runs on each kind of store, a fresh one for each host: the
//! local file system (the data directory's), where a put killed half-way
//! leaves a staging file beside its key, the same through its write-ahead
//! log (`--durability log`), and S3 (the harness's SeaweedFS), where it
//! leaves a multipart upload never completed. On either, the key
//! must still hold what it held before. What was stored is read as a
//! client of the store reads it ([`Host::stored`]).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use serde_json::Value;
use stepstone_e2e::{Host, ReliabilityResult, Run, arg, guest, record_reliability};

const RUN: &str = "batch-1";
const INPUT: &str = r#"{"batch":"b1","items":["a","b","c"],"pause_ms":100}"#;
const APPROVAL: &str = r#"{"by":"ops"}"#;
const CRASH_AT: &str = "STEPSTONE_CRASH_AT";
const MODES: [&str; 3] = ["before", "during", "after"];
const PHASES: [Phase; 3] = [Phase::Start, Phase::Signal, Phase::Resume];
/// More writes than any phase makes (`run`, the most, makes 10): a bound
/// on the search for a phase's last one.
const MAX_WRITES: u64 = 50;

/// Where a suite's hosts keep their store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    /// The data directory's, on the local file system.
    Local,
    /// The same, written through the local store's write-ahead log
    /// (`--durability log`), where a killed host may leave records of
    /// writes it never made.
    LocalLog,
    /// A fresh prefix of the harness's SeaweedFS, over S3.
    S3,
}

impl Store {
    /// A host over a store of this kind that no other host uses.
    fn host(self) -> Host {
        match self {
            Store::Local => Host::new(),
            Store::LocalLog => Host::new().with_env("STEPSTONE_DURABILITY", "log"),
            Store::S3 => Host::on_s3(),
        }
    }
}

/// The command of the uninterrupted sequence that a trial kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// `run` until the run waits for its signal and detaches.
    Start,
    /// `signal`, sent while the run is suspended.
    Signal,
    /// `resume`, which finishes the run.
    Resume,
}

/// Flags every host command of this test shares: short waits are evicted,
/// so the pause and the signal wait replay the run; every suspension that
/// journaled a call since the last writes a journal snapshot, so snapshot
/// writes are kill points too; logs are JSON, so step executions can be
/// read with the seq of their attempt.
fn command(args: &[&str]) -> Vec<String> {
    let mut full = vec!["--evict-after", "50ms", "--snapshot-every", "1", "--log-format", "json"];
    full.extend_from_slice(args);
    full.into_iter().map(str::to_owned).collect()
}

fn phase_args(phase: Phase, wasm: &Path) -> Vec<String> {
    match phase {
        Phase::Start => command(&[
            "run",
            arg(wasm),
            "process-batch",
            "--run-id",
            RUN,
            "--input",
            INPUT,
            "--detach-after",
            "2s",
        ]),
        // With an id, so the user's resend after a crash stores it once.
        Phase::Signal => command(&["signal", RUN, "approve", APPROVAL, "--id", "approval-1"]),
        Phase::Resume => command(&["resume", "--detach-after", "2s"]),
    }
}

/// Runs a host command that must succeed; a failure names `point`.
fn run(host: &Host, args: &[String], point: &str) -> Run {
    let done = host.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        done.0.status.success(),
        "{point}: `stepstone {}` failed:\nstdout: {}\nstderr: {}",
        args.join(" "),
        done.stdout(),
        done.stderr()
    );
    done
}

/// What the run has stored.
struct Stored {
    /// The journal entries, by seq, as bytes.
    journal: BTreeMap<u64, Vec<u8>>,
    /// The failed attempts, by seq: how many of each step call.
    failed_attempts: BTreeMap<u64, u32>,
    /// How many approvals are stored.
    approvals: usize,
}

/// What the run has stored, as a client of the host's store reads it.
fn stored_run(host: &Host) -> Stored {
    let prefix = format!("tenants/default/runs/{RUN}/");
    let mut stored = Stored {
        journal: BTreeMap::new(),
        failed_attempts: BTreeMap::new(),
        approvals: 0,
    };
    for (key, bytes) in host.stored(&prefix) {
        let parts: Vec<&str> = key
            .strip_prefix(&prefix)
            .expect("listed under the prefix")
            .split('/')
            .collect();
        match parts[..] {
            ["journal", seq] => {
                if let Ok(seq) = seq.parse() {
                    stored.journal.insert(seq, bytes);
                }
            }
            ["attempts", seq, attempt] => {
                if let (Ok(seq), Ok(attempt)) = (seq.parse(), attempt.parse::<u32>()) {
                    let failed = stored.failed_attempts.entry(seq).or_default();
                    *failed = attempt.max(*failed);
                }
            }
            ["signals", "approve", _] => stored.approvals += 1,
            _ => {}
        }
    }
    stored
}

/// A step attempt as the host logged it.
struct Execution {
    seq: u64,
    /// What the step said it was: `step=NAME key=KEY`.
    call: String,
    attempt: u32,
}

/// Each step attempt the host logged.
fn executions(stderr: &str) -> Vec<Execution> {
    stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|log| {
            let message = log["fields"]["message"].as_str()?.strip_prefix("executed ")?.to_owned();
            let seq = log["span"]["seq"]
                .as_u64()
                .unwrap_or_else(|| panic!("a step execution outside an attempt span: {log}"));
            let (call, attempt) = message.rsplit_once(" attempt=").expect("the batch steps' format");
            let attempt = attempt.parse().expect("an attempt number");
            Some(Execution {
                seq,
                call: call.to_owned(),
                attempt,
            })
        })
        .collect()
}

/// What an uninterrupted run did.
struct Baseline {
    output: Value,
    journal_len: u64,
    /// The call at each step's seq, as the step names itself.
    steps: BTreeMap<u64, String>,
}

/// Runs the phases uninterrupted on a host over `store`.
fn baseline(wasm: &Path, store: Store) -> Baseline {
    let host = store.host();
    let mut stderr = String::new();
    let mut last = None;
    for phase in PHASES {
        let done = run(&host, &phase_args(phase, wasm), "the uninterrupted run");
        stderr.push_str(&done.stderr());
        last = Some(done);
    }
    let resumed = last.expect("three phases ran").stdout();
    let output = resumed
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{RUN} completed ")))
        .unwrap_or_else(|| panic!("the uninterrupted run did not complete: {resumed}"));
    let steps: BTreeMap<u64, String> = executions(&stderr).into_iter().map(|e| (e.seq, e.call)).collect();
    assert_eq!(steps.len(), 5, "fetch, three transforms and publish ran: {steps:?}");
    let journal_len = host.history(RUN).len() as u64;
    Baseline {
        output: serde_json::from_str(output).expect("the output is JSON"),
        journal_len,
        steps,
    }
}

/// Where a trial killed the host, as the host said just before it died.
struct Kill {
    phase: Phase,
    mode: &'static str,
    write: u64,
    key: String,
}

/// Runs `phase` with the crash point armed, after the phases before it
/// ran uninterrupted; asserts the process died by SIGKILL at that write.
/// `None` if the command succeeded without reaching it: `phase` makes
/// fewer writes.
fn kill(host: &Host, wasm: &Path, phase: Phase, mode: &'static str, write: u64) -> Option<Kill> {
    let args = phase_args(phase, wasm);
    let killed = host
        .command(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .env(CRASH_AT, format!("{mode}:{write}"))
        .output()
        .expect("stepstone starts");
    let stderr = String::from_utf8_lossy(&killed.stderr);
    if killed.status.success() {
        return None;
    }
    assert_eq!(
        killed.status.signal(),
        Some(9),
        "{phase:?} {mode}:{write} did not die by SIGKILL ({}): {stderr}",
        killed.status
    );
    let said = stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|log| log["fields"]["message"] == "crash point reached: SIGKILL")
        .unwrap_or_else(|| panic!("no crash point logged: {stderr}"));
    let key = said["fields"]["key"].as_str().expect("the key written").to_owned();
    Some(Kill {
        phase,
        mode,
        write,
        key,
    })
}

/// Brings the run to its end as people would after a crash: the user whose
/// `signal` died sends it again; the operator runs `resume`; the client
/// repeats its `run` with the same run id, sending the signal when the run
/// waits for it. Returns the output and everything the host logged.
fn recover(host: &Host, wasm: &Path, killed: Phase, point: &str) -> (Value, String) {
    let mut signal_sent = killed == Phase::Resume;
    if killed == Phase::Signal {
        run(host, &phase_args(Phase::Signal, wasm), point);
        signal_sent = true;
    }
    let resumed = run(host, &phase_args(Phase::Resume, wasm), point);
    let mut stderr = resumed.stderr();
    for _ in 0..3 {
        let again = run(host, &phase_args(Phase::Start, wasm), point);
        stderr.push_str(&again.stderr());
        let stdout = again.stdout();
        let last = stdout.lines().last().unwrap_or_default();
        if last.starts_with(&format!("run {RUN} suspended")) {
            assert!(
                !signal_sent && last.contains("awaiting-signal"),
                "{point}: suspended again after the signal: {last}"
            );
            run(host, &phase_args(Phase::Signal, wasm), point);
            signal_sent = true;
        } else {
            let output =
                serde_json::from_str(last).unwrap_or_else(|e| panic!("{point}: not an output ({e}): {stdout}"));
            return (output, stderr);
        }
    }
    panic!("{point}: the run did not complete after three client retries")
}

/// One kill and recovery on a fresh host over `store`, with every check;
/// returns where it killed, or `None` if `phase` has no write `write`.
fn trial(baseline: &Baseline, wasm: &Path, store: Store, phase: Phase, mode: &'static str, write: u64) -> Option<Kill> {
    let host = store.host();
    for earlier in PHASES.into_iter().take_while(|p| *p != phase) {
        run(&host, &phase_args(earlier, wasm), "before the kill");
    }
    // Markers are overwritten (`unfinished/RUN`): a key killed half-way
    // through its write must hold what it held before.
    let before_kill = (mode == "during").then(|| host.stored("tenants/"));
    let killed = kill(&host, wasm, phase, mode, write)?;
    let point = format!("{store:?} {phase:?} {mode}:{write} at {}", killed.key);
    let at_kill = stored_run(&host);
    if let Some(before_kill) = before_kill {
        assert_eq!(
            host.stored(&killed.key).get(&killed.key),
            before_kill.get(&killed.key),
            "{point}: the half-written object was published at the key"
        );
        // On S3 the half sent is in an upload of its own, which no listing
        // shows; the local store stages it in a file beside the key.
        if host.is_local() {
            let files = host.stored_objects();
            let staging = format!("{}#", killed.key);
            assert!(
                files.iter().any(|path| path.to_string_lossy().contains(&staging)),
                "{point}: no half-written staging file beside the key: {files:?}"
            );
        }
    }
    // What the crash left is readable: no torn record, no half-made run.
    run(&host, &command(&["list", "--json"]), &point);

    let (output, stderr) = recover(&host, wasm, phase, &point);
    assert_eq!(output, baseline.output, "{point}: another output");
    let seqs: Vec<u64> = host
        .history(RUN)
        .iter()
        .map(|e| e["seq"].as_u64().expect("an entry has a seq"))
        .collect();
    assert_eq!(
        seqs,
        (0..baseline.journal_len).collect::<Vec<_>>(),
        "{point}: gap or duplicate"
    );
    let after = stored_run(&host);
    assert_eq!(
        after.approvals, 1,
        "{point}: the approval was stored {} times",
        after.approvals
    );
    let lost = at_kill
        .journal
        .iter()
        .filter(|(seq, bytes)| after.journal.get(seq) != Some(bytes))
        .count();
    assert_eq!(lost, 0, "{point}: entries stored at the kill were changed or lost");
    for Execution { seq, call, attempt } in executions(&stderr) {
        assert_eq!(
            baseline.steps.get(&seq),
            Some(&call),
            "{point}: seq {seq} is another call"
        );
        assert!(
            !at_kill.journal.contains_key(&seq),
            "{point}: {call} (seq {seq}) ran again although its entry was written"
        );
        let failed = at_kill.failed_attempts.get(&seq).copied().unwrap_or(0);
        assert!(
            attempt > failed,
            "{point}: {call} made attempt {attempt} again, after {failed} failed attempts were stored"
        );
    }
    Some(killed)
}

#[test]
fn sigkill_at_every_write_then_recovery_gives_the_uninterrupted_run() {
    sigkill_at_every_write_of(Store::Local);
}

/// The same trials, every write of every phase, with the local store
/// writing through its write-ahead log.
#[test]
fn sigkill_at_every_write_through_the_write_log_then_recovery_gives_the_uninterrupted_run() {
    sigkill_at_every_write_of(Store::LocalLog);
}

/// The same trials, every write of every phase, with each host's store a
/// prefix of the harness's SeaweedFS, over S3.
#[test]
fn sigkill_at_every_write_on_s3_then_recovery_gives_the_uninterrupted_run() {
    sigkill_at_every_write_of(Store::S3);
}

/// Kills hosts over `store` before, during and after every write of every
/// phase, a fresh host each time, checks each recovery ([`trial`]) and that
/// the kills hit the writes that matter, then files the results.
fn sigkill_at_every_write_of(store: Store) {
    let wasm = guest("batch");
    let baseline = baseline(&wasm, store);

    // The writes are counted by the crash points themselves: a phase has
    // written all it writes when the one after its last is never reached.
    // (Counting the objects a phase adds would miss the markers it
    // overwrites and deletes.)
    let mut kills = Vec::new();
    let mut writes = BTreeMap::new();
    for phase in PHASES {
        'writes: for write in 1..=MAX_WRITES {
            for mode in MODES {
                match trial(&baseline, &wasm, store, phase, mode, write) {
                    Some(killed) => kills.push(killed),
                    None if mode == "before" => {
                        writes.insert(phase, write - 1);
                        break 'writes;
                    }
                    None => panic!("{phase:?} reached its write {write} before it, but not {mode} it"),
                }
            }
        }
        assert!(writes.contains_key(&phase), "{phase:?} made over {MAX_WRITES} writes");
    }
    let total: u64 = writes.values().sum();
    assert!(total >= 10, "the workflow writes at every durable call: {writes:?}");

    let points: BTreeSet<(Phase, &str, u64)> = kills.iter().map(|k| (k.phase, k.mode, k.write)).collect();
    assert!(points.len() >= 25, "only {} distinct kill points", points.len());
    let step_entry = |kill: &&Kill| {
        let seq = kill
            .key
            .rsplit_once("/journal/")
            .and_then(|(_, seq)| seq.parse::<u64>().ok());
        seq.is_some_and(|seq| baseline.steps.contains_key(&seq))
    };
    for mode in ["before", "during"] {
        assert!(
            kills.iter().filter(|k| k.mode == mode).any(|k| step_entry(&k)),
            "no kill {mode} a step's journal entry"
        );
    }
    for mode in MODES {
        assert!(
            kills.iter().any(|k| k.mode == mode && k.key.contains("/snapshots/")),
            "no kill {mode} a journal snapshot's write"
        );
    }

    let outcome = format!(
        "at each of the {total} writes of run, signal and resume: the run completed with the uninterrupted output, a journal \
         0..n without gap or duplicate, no journaled step run again"
    );
    for mode in MODES {
        let trials = kills.iter().filter(|k| k.mode == mode).count() as u64;
        let fault = match mode {
            "before" => "SIGKILL before a store write (a step finished, its entry unwritten)",
            "during" => "SIGKILL during a store write (half written, unpublished)",
            _ => "SIGKILL after a store write (stored, unacknowledged)",
        };
        let fault = match store {
            Store::Local => fault.to_owned(),
            Store::LocalLog => format!("{fault}, through the local store's write log"),
            Store::S3 => format!("{fault}, on S3 (SeaweedFS)"),
        };
        record_reliability(&ReliabilityResult {
            suite: "crash",
            fault: &fault,
            trials,
            outcome: &outcome,
            lost: 0,
        });
    }
}
