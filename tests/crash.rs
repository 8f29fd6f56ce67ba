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
//! * have left every entry that was on disk at the kill byte for byte;
//! * hold the approval once, though the user may have sent it twice;
//! * not have run again any step whose entry was on disk at the kill, nor
//!   repeated an attempt whose failure was on disk.
//!
//! Journal snapshots are written at every suspension here, so a kill
//! before, during or after one must leave the run recoverable from its
//! entries too.
//!
//! The kill points come from the host's `STEPSTONE_CRASH_AT` decorator
//! (`host/src/store/crash_points.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use serde_json::Value;
use stepstone_e2e::{Host, ReliabilityResult, Run, arg, guest, record_reliability};

const RUN: &str = "batch-1";
const INPUT: &str = r#"{"batch":"b1","items":["a","b","c"],"pause_ms":100}"#;
const APPROVAL: &str = r#"{"by":"ops"}"#;
const CRASH_AT: &str = "STEPSTONE_CRASH_AT";
const MODES: [&str; 3] = ["before", "during", "after"];

/// The command of the uninterrupted sequence that a trial kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// Files under the object store, published ones apart from the staging
/// files a put in progress leaves (`key#N`).
fn objects(host: &Host) -> (Vec<PathBuf>, Vec<PathBuf>) {
    host.stored_objects().into_iter().partition(|path| {
        !path
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| name.contains('#'))
    })
}

/// The journal entries on disk, by seq, as bytes.
fn journal_on_disk(host: &Host) -> BTreeMap<u64, Vec<u8>> {
    let dir = host
        .data_dir()
        .join("objects/tenants/default/runs")
        .join(RUN)
        .join("journal");
    let mut entries = BTreeMap::new();
    for file in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if let Some(seq) = file.file_name().to_str().and_then(|name| name.parse().ok()) {
            entries.insert(seq, std::fs::read(file.path()).expect("a journal entry is readable"));
        }
    }
    entries
}

/// The failed attempts on disk, by seq: how many of each step call.
fn failed_attempts_on_disk(host: &Host) -> BTreeMap<u64, u32> {
    let dir = host
        .data_dir()
        .join("objects/tenants/default/runs")
        .join(RUN)
        .join("attempts");
    let mut failed = BTreeMap::new();
    for seq_dir in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Some(seq) = seq_dir.file_name().to_str().and_then(|name| name.parse().ok()) else {
            continue;
        };
        let attempts = std::fs::read_dir(seq_dir.path()).expect("an attempts folder is readable");
        let numbers = attempts
            .flatten()
            .filter_map(|file| file.file_name().to_str()?.parse::<u32>().ok());
        failed.insert(seq, numbers.max().unwrap_or(0));
    }
    failed
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
    /// Store writes of each phase.
    writes: Vec<(Phase, u64)>,
}

fn baseline(wasm: &Path) -> Baseline {
    let host = Host::new();
    let mut writes = Vec::new();
    let mut stderr = String::new();
    let mut last = None;
    for phase in [Phase::Start, Phase::Signal, Phase::Resume] {
        let before = objects(&host).0.len() as u64;
        let done = run(&host, &phase_args(phase, wasm), "the uninterrupted run");
        writes.push((phase, objects(&host).0.len() as u64 - before));
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
        writes,
    }
}

/// Where a trial killed the host, as the host said just before it died.
struct Kill {
    phase: Phase,
    mode: &'static str,
    write: u64,
    key: String,
}

/// Runs the phases before `phase`, then `phase` with the crash point armed;
/// asserts the process died by SIGKILL at that write.
fn kill(host: &Host, wasm: &Path, phase: Phase, mode: &'static str, write: u64) -> Kill {
    let earlier = [Phase::Start, Phase::Signal, Phase::Resume]
        .into_iter()
        .take_while(|p| *p != phase);
    for earlier in earlier {
        run(host, &phase_args(earlier, wasm), "before the kill");
    }
    let args = phase_args(phase, wasm);
    let killed = host
        .command(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .env(CRASH_AT, format!("{mode}:{write}"))
        .output()
        .expect("stepstone starts");
    let stderr = String::from_utf8_lossy(&killed.stderr);
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
    Kill {
        phase,
        mode,
        write,
        key,
    }
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

/// One kill and recovery, with every check; returns where it killed.
fn trial(baseline: &Baseline, wasm: &Path, phase: Phase, mode: &'static str, write: u64) -> Kill {
    let host = Host::new();
    let killed = kill(&host, wasm, phase, mode, write);
    let point = format!("{phase:?} {mode}:{write} at {}", killed.key);
    let at_kill = journal_on_disk(&host);
    let failed_at_kill = failed_attempts_on_disk(&host);
    if mode == "during" {
        let staged = objects(&host).1;
        assert!(
            staged
                .iter()
                .any(|path| path.to_string_lossy().contains(&format!("{}#", killed.key))),
            "{point}: no half-written staging file beside the key: {staged:?}"
        );
    }
    // What the crash left is readable: no torn record, no half-made run.
    run(&host, &command(&["list", "--json"]), &point);

    let (output, stderr) = recover(&host, wasm, phase, &point);
    assert_eq!(output, baseline.output, "{point}: another output");
    let seqs: Vec<u64> = host.history(RUN).iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (0..baseline.journal_len).collect::<Vec<_>>(),
        "{point}: gap or duplicate"
    );
    let signals = objects(&host)
        .0
        .iter()
        .filter(|path| path.to_string_lossy().contains("/signals/approve/"))
        .count();
    assert_eq!(signals, 1, "{point}: the approval was stored {signals} times");
    let after = journal_on_disk(&host);
    let lost = at_kill
        .iter()
        .filter(|(seq, bytes)| after.get(seq) != Some(bytes))
        .count();
    assert_eq!(lost, 0, "{point}: entries on disk at the kill were changed or lost");
    for Execution { seq, call, attempt } in executions(&stderr) {
        assert_eq!(
            baseline.steps.get(&seq),
            Some(&call),
            "{point}: seq {seq} is another call"
        );
        assert!(
            !at_kill.contains_key(&seq),
            "{point}: {call} (seq {seq}) ran again although its entry was written"
        );
        let failed = failed_at_kill.get(&seq).copied().unwrap_or(0);
        assert!(
            attempt > failed,
            "{point}: {call} made attempt {attempt} again, after {failed} failed attempts were stored"
        );
    }
    killed
}

#[test]
fn sigkill_at_every_write_then_recovery_gives_the_uninterrupted_run() {
    let wasm = guest("batch");
    let baseline = baseline(&wasm);
    let total: u64 = baseline.writes.iter().map(|(_, n)| n).sum();
    assert!(
        total >= 10,
        "the workflow writes at every durable call: {:?}",
        baseline.writes
    );

    let mut kills = Vec::new();
    for &(phase, writes) in &baseline.writes {
        for write in 1..=writes {
            for mode in MODES {
                kills.push(trial(&baseline, &wasm, phase, mode, write));
            }
        }
    }

    let points: BTreeSet<(String, &str, u64)> = kills
        .iter()
        .map(|k| (format!("{:?}", k.phase), k.mode, k.write))
        .collect();
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
    for mode in MODES {
        let trials = kills.iter().filter(|k| k.mode == mode).count() as u64;
        let fault = match mode {
            "before" => "SIGKILL before a store write (a step finished, its entry unwritten)",
            "during" => "SIGKILL during a store write (half written, unpublished)",
            _ => "SIGKILL after a store write (stored, unacknowledged)",
        };
        let outcome = format!(
            "at each of the {total} writes of run, signal and resume: the run completed with the uninterrupted \
             output, a journal 0..n without gap or duplicate, no journaled step run again"
        );
        record_reliability(&ReliabilityResult {
            suite: "crash",
            fault,
            trials,
            outcome: &outcome,
            lost: 0,
        });
    }
}
