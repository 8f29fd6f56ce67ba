//! Crash recovery: a host killed with SIGKILL mid-run loses nothing, and
//! `stepstone resume` finishes the run without running finished steps again.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use stepstone_e2e::{Host, arg, guest, order_input};

#[test]
fn a_run_killed_while_sleeping_resumes_to_the_same_output_without_rerunning_steps() {
    let host = Host::new();
    let wasm = guest("order");
    let input = order_input("o-9", 4000, json!({})).to_string();
    let mut child = host.spawn(&["run", arg(&wasm), "place-order", "--run-id", "o-9", "--input", &input]);
    host.wait_for("o-9", "sleeping", |s| s["state"] == "sleeping");
    host.run(&["signal", "o-9", "approve", r#"{"approved":true}"#])
        .success();
    let before: Vec<Value> = host.history("o-9");
    child.kill().expect("SIGKILL");
    child.wait().expect("the killed host is reaped");
    std::thread::sleep(Duration::from_millis(100));

    let resumed = host.run(&["resume"]).success();
    let line = resumed
        .stdout()
        .lines()
        .find(|l| l.starts_with("o-9 completed "))
        .map(str::to_owned);
    let line = line.unwrap_or_else(|| {
        panic!(
            "o-9 not completed by resume: {}\n{}",
            resumed.stdout(),
            resumed.stderr()
        )
    });
    let output: Value = serde_json::from_str(line.trim_start_matches("o-9 completed ")).unwrap();
    let uninterrupted = json!({
        "order_id": "o-9", "status": "shipped", "reservation": "res-o-9", "charge": "ch-o-9", "tracking": "trk-o-9"
    });
    assert_eq!(output, uninterrupted);

    let after = host.history("o-9");
    let seqs: Vec<u64> = after.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (0..after.len() as u64).collect::<Vec<_>>(),
        "gap or duplicate in the journal"
    );
    assert!(
        before.len() >= 2,
        "reserve and charge had finished before the kill: {before:?}"
    );
    // Entries written before the kill are untouched: same attempts, same
    // timestamps, so those steps did not run again.
    assert_eq!(after[..before.len()], before[..]);
    assert!(
        !resumed.stderr().contains("step=reserve") && !resumed.stderr().contains("step=charge"),
        "{}",
        resumed.stderr()
    );
}

#[test]
fn a_long_wait_evicts_the_instance_and_the_run_is_replayed_when_woken() {
    let host = Host::new();
    let wasm = guest("order");
    let input = order_input("o-8", 800, json!({})).to_string();
    let args = place_order(&wasm, "o-8", &input, &[]);
    let child = host.spawn(&args);
    host.wait_for("o-8", "awaiting the approval", |s| s["state"] == "awaiting-signal");
    // Long enough for the signal wait to be evicted too.
    std::thread::sleep(Duration::from_millis(500));
    host.run(&["signal", "o-8", "approve", r#"{"approved":true}"#])
        .success();
    let run = stepstone_e2e::Run(child.wait_with_output().unwrap()).success();
    assert_eq!(run.json_line()["tracking"], "trk-o-8");
    let evictions = run.stderr().matches("instance dropped").count();
    assert!(
        evictions >= 2,
        "the sleep and the signal wait should each evict: {}",
        run.stderr()
    );
    let history = host.history("o-8");
    let names: Vec<&str> = history.iter().map(|e| e["call"]["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["reserve", "charge", "", "approve", "ship"],
        "each call journaled once"
    );
}

#[test]
fn detach_leaves_a_long_wait_in_the_store_for_resume() {
    let host = Host::new();
    let wasm = guest("order");
    let input = order_input("o-7", 1500, json!({})).to_string();
    let args = place_order(&wasm, "o-7", &input, &["--detach-after", "500ms"]);
    let detached = host.run(&args).success();
    assert!(
        detached.stdout().contains("run o-7 suspended") && detached.stdout().contains("sleeping"),
        "{}",
        detached.stdout()
    );
    host.run(&["signal", "o-7", "approve", r#"{"approved":true}"#])
        .success();
    let resumed = host.run(&["resume", "--detach-after", "1m"]).success();
    assert!(
        resumed
            .stdout()
            .contains(r#"o-7 completed {"order_id":"o-7","status":"shipped""#),
        "{}",
        resumed.stdout()
    );
}

/// Two processes on one run: the second finds the first's claim, made
/// by a live host, and neither drives the run nor runs any step of it.
#[test]
fn a_second_host_on_the_same_run_stands_down() {
    let host = Host::new();
    let wasm = guest("order");
    let input = order_input("o-6", 1500, json!({})).to_string();
    let args = ["run", arg(&wasm), "place-order", "--run-id", "o-6", "--input", &input];
    let first = host.spawn(&args);
    host.wait_for("o-6", "sleeping", |s| s["state"] == "sleeping");
    let second = host.spawn(&args);
    let (first, second) = (first.wait_with_output().unwrap(), second.wait_with_output().unwrap());
    let (first, second) = (stepstone_e2e::Run(first), stepstone_e2e::Run(second));
    assert!(
        second.stderr().contains("run `o-6` is driven by host") && second.stderr().contains("which is alive"),
        "{}",
        second.stderr()
    );
    assert!(!second.stderr().contains("step finished"), "{}", second.stderr());
    assert!(first.stderr().contains("run finished"), "{}", first.stderr());
    let history = host.history("o-6");
    let seqs: Vec<u64> = history.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..history.len() as u64).collect::<Vec<_>>());
    assert_eq!(history[2]["call"]["kind"], "Sleep");
}

/// Two `stepstone resume` at once on one data directory: of the two, one
/// claims the run and drives it; the other leaves it alone, so no step
/// runs twice.
#[test]
fn two_resumes_at_once_never_both_run_a_step() {
    let host = Host::new();
    let wasm = guest("order");
    let input = order_input("o-9", 1000, json!({})).to_string();
    host.run(&place_order(&wasm, "o-9", &input, &["--detach-after", "200ms"]))
        .success();
    host.run(&["signal", "o-9", "approve", r#"{"approved":true}"#])
        .success();
    let resume = ["resume", "--detach-after", "1m"];
    let resumes = [host.spawn(&resume), host.spawn(&resume)];
    let resumed: Vec<stepstone_e2e::Run> = resumes
        .into_iter()
        .map(|resume| stepstone_e2e::Run(resume.wait_with_output().expect("resume exits")).success())
        .collect();
    let shipped = resumed
        .iter()
        .map(|run| run.stderr().matches("step=ship attempts=").count())
        .sum::<usize>();
    let logs = || format!("{}\n---\n{}", resumed[0].stderr(), resumed[1].stderr());
    assert_eq!(shipped, 1, "ship ran {shipped} times: {}", logs());
    assert!(
        resumed.iter().any(|run| run.stdout().contains("o-9 completed")),
        "{}",
        logs()
    );
    assert_eq!(host.status("o-9").expect("the run exists")["state"], "completed");
}

#[test]
fn a_run_cancelled_from_another_shell_ends_cancelled() {
    let host = Host::new();
    let wasm = guest("order");
    let input = order_input("o-5", 30_000, json!({})).to_string();
    let child = host.spawn(&["run", arg(&wasm), "place-order", "--run-id", "o-5", "--input", &input]);
    host.wait_for("o-5", "sleeping", |s| s["state"] == "sleeping");
    host.run(&["cancel", "o-5", "--reason", "out of stock"]).success();
    let stderr = stepstone_e2e::Run(child.wait_with_output().unwrap()).failure();
    assert!(stderr.contains("run o-5 was cancelled: out of stock"), "{stderr}");
    assert_eq!(host.status("o-5").unwrap()["state"], "cancelled");
    // The sleep ended early, so did the approval wait; the saga then ran
    // its compensations, and the run still ended cancelled.
    let history = host.history("o-5");
    let calls: Vec<(&str, &str)> = history
        .iter()
        .map(|e| {
            (
                e["call"]["name"].as_str().unwrap(),
                e["recorded"].as_object().unwrap().keys().next().unwrap().as_str(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("reserve", "Step"),
            ("charge", "Step"),
            ("", "Cancelled"),
            ("approve", "Cancelled"),
            ("refund", "Step"),
            ("release", "Step")
        ],
        "{history:?}"
    );
    let replay = host.run(&["replay", "o-5"]).success();
    assert!(replay.stdout().contains("deterministic"), "{}", replay.stdout());
    let again = host.run(&["cancel", "o-5"]).failure();
    assert!(again.contains("has already finished"), "{again}");
}

/// `stepstone run` of the order saga as run `run`, with short waits evicted,
/// then `more` arguments.
fn place_order<'a>(wasm: &'a Path, run: &'a str, input: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--evict-after",
        "100ms",
        "run",
        arg(wasm),
        "place-order",
        "--run-id",
        run,
        "--input",
        input,
    ];
    args.extend_from_slice(more);
    args
}
