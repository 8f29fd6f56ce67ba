//! Crash recovery: a host killed with SIGKILL mid-run loses nothing, and
//! `stepstone resume` finishes the run without running finished steps again.

use std::time::Duration;

use serde_json::{Value, json};
use stepstone_e2e::{Host, arg, guest};

#[test]
fn a_run_killed_while_sleeping_resumes_to_the_same_output_without_rerunning_steps() {
    let host = Host::new();
    let wasm = guest("order");
    let input = json!({"order_id": "o-9", "item": "book", "amount_cents": 1200, "sleep_ms": 3000}).to_string();
    let mut child = host.spawn(&["run", arg(&wasm), "place-order", "--run-id", "o-9", "--input", &input]);
    host.wait_for("o-9", "sleeping", |s| s["state"] == "sleeping");
    host.run(&["signal", "o-9", "approve", r#"{"approved":true}"#]).success();
    let before: Vec<Value> = host.history("o-9");
    child.kill().expect("SIGKILL");
    child.wait().expect("the killed host is reaped");
    std::thread::sleep(Duration::from_millis(100));

    let resumed = host.run(&["resume"]).success();
    let line = resumed.stdout().lines().find(|l| l.starts_with("o-9 completed ")).map(str::to_owned);
    let line = line.unwrap_or_else(|| panic!("o-9 not completed by resume: {}\n{}", resumed.stdout(), resumed.stderr()));
    let output: Value = serde_json::from_str(line.trim_start_matches("o-9 completed ")).unwrap();
    let uninterrupted = json!({
        "order_id": "o-9", "status": "shipped", "reservation": "res-o-9", "charge": "ch-o-9", "tracking": "trk-o-9"
    });
    assert_eq!(output, uninterrupted);

    let after = host.history("o-9");
    let seqs: Vec<u64> = after.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..after.len() as u64).collect::<Vec<_>>(), "gap or duplicate in the journal");
    assert!(before.len() >= 2, "reserve and charge had finished before the kill: {before:?}");
    // Entries written before the kill are untouched: same attempts, same
    // timestamps, so those steps did not run again.
    assert_eq!(after[..before.len()], before[..]);
    assert!(!resumed.stderr().contains("step=reserve") && !resumed.stderr().contains("step=charge"), "{}", resumed.stderr());
}
