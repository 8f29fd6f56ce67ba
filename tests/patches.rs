//! Patch markers (`patched`): one build serves the runs recorded before a
//! change to a workflow's code and the runs after it. The order saga's
//! `patched` build checks for fraud between `reserve` and `charge` behind
//! the marker `fraud-check`; its `fraud-check` build makes the same change
//! without the marker (which is also the patch retired, once no run from
//! before the change is left).

use serde_json::{Value, json};
use stepstone_e2e::{Host, Run, arg, guest, order_input};

/// An order whose approval the test sends: the run waits for it (long
/// enough to be suspended), after a sleep of 0 ms.
fn order(id: &str) -> String {
    order_input(id, 0, json!({"approval_timeout_ms": 600_000})).to_string()
}

/// What an approved order returns.
fn shipped(id: &str) -> Value {
    json!({
        "order_id": id,
        "status": "shipped",
        "reservation": format!("res-{id}"),
        "charge": format!("ch-{id}"),
        "tracking": format!("trk-{id}"),
    })
}

/// The calls of `run`'s journal, in order, as `[kind, name]`.
fn calls(host: &Host, run: &str) -> Vec<Value> {
    host.history(run)
        .iter()
        .map(|e| json!([e["call"]["kind"], e["call"]["name"]]))
        .collect()
}

fn step(name: &str) -> Value {
    json!(["Step", name])
}

/// `stepstone replay RUN`, against `build` if given.
fn replay(host: &Host, run: &str, build: Option<&std::path::Path>) -> Run {
    let mut args = vec!["replay", run];
    if let Some(build) = build {
        args.extend(["--component", arg(build)]);
    }
    host.run(&args)
}

fn assert_identical(replayed: Run, what: &str) {
    assert!(
        replayed.0.status.success() && replayed.stdout().contains("deterministic: output identical"),
        "{what}: {}\n{}",
        replayed.stdout(),
        replayed.stderr()
    );
}

fn assert_diverged_at(replayed: Run, seq: u64, what: &str) {
    let report = replayed.stdout();
    assert!(!replayed.0.status.success(), "{what}: {report}");
    assert!(
        report.contains(&format!("divergence at seq {seq}:")),
        "{what}: {report}"
    );
}

#[test]
fn an_old_run_and_a_new_run_of_one_workflow_finish_on_one_build_with_a_patch() {
    let host = Host::new();
    let (before, patched, unguarded) = (guest("order"), guest("order-patched"), guest("order-fraud-check"));

    // Run `old` starts on the build before the change and waits for its approval.
    host.run_detached(&before, "place-order", "old", &order("old"));
    let status = host.wait_for("old", "awaiting the approval", |s| s["state"] == "awaiting-signal");
    let before_build = status["component"].as_str().expect("a build").to_owned();
    let upgrade = |to: &std::path::Path, dry_run: bool| {
        let mut args = vec!["upgrade", "--from", &before_build, "--to", arg(to)];
        args.extend(dry_run.then_some("--dry-run"));
        host.run(&args)
    };

    // The change made without the marker: the new build checks for fraud
    // where `old`'s journal has `charge`, so the run cannot move.
    let refused = upgrade(&unguarded, true);
    assert!(!refused.0.status.success(), "{}", refused.stdout());
    let report = refused.json();
    assert_eq!(report["diverged"][0]["run_id"], "old", "{report}");
    assert_eq!(report["diverged"][0]["seq"], 1, "{report}");
    let message = report["diverged"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("step `charge`") && message.contains("step `fraud-check`"),
        "{message}"
    );

    // Behind the marker: `patched` answers false against `old`'s journal,
    // which the build replays identically, so the run moves to it.
    let moved = upgrade(&patched, false).success().json();
    assert_eq!(moved["identical"], json!(["old"]), "{moved}");
    assert_eq!(moved["diverged"], json!([]), "{moved}");
    let patched_build = moved["to"].clone();
    assert_eq!(host.status("old").expect("the run")["component"], patched_build);

    // Run `new` starts on the same build and takes the change.
    host.run_detached(&patched, "place-order", "new", &order("new"));
    assert_eq!(host.status("new").expect("the run")["component"], patched_build);
    for run in ["old", "new"] {
        host.run(&["signal", run, "approve", r#"{"approved":true}"#]).success();
    }
    host.run(&["resume", "--detach-after", "1m"]).success();
    for run in ["old", "new"] {
        let status = host.status(run).expect("the run");
        assert_eq!(status["state"], "completed", "{run}: {status}");
        assert_eq!(status["output"], shipped(run), "{run}");
    }
    let waits = [json!(["Sleep", ""]), json!(["Signal", "approve"]), step("ship")];
    let mut before_change = vec![step("reserve"), step("charge")];
    before_change.extend(waits.iter().cloned());
    assert_eq!(calls(&host, "old"), before_change, "no marker, no fraud check");
    let mut after_change = vec![
        step("reserve"),
        json!(["Patch", "fraud-check"]),
        step("fraud-check"),
        step("charge"),
    ];
    after_change.extend(waits.iter().cloned());
    assert_eq!(calls(&host, "new"), after_change, "the marker, then the fraud check");
    let table = host.run(&["history", "new"]).success().stdout();
    assert!(
        table
            .lines()
            .any(|line| line.contains("patch") && line.contains("fraud-check") && line.contains("takes the change")),
        "{table}"
    );
    for run in ["old", "new"] {
        assert_identical(replay(&host, run, None), run);
    }

    // Retired: a build that checks for fraud without asking passes over
    // the marker of `new`, and would diverge on `old`, which is why a patch
    // is retired only once no run from before the change is left.
    assert_identical(replay(&host, "new", Some(&unguarded)), "new on the retired patch");
    assert_diverged_at(replay(&host, "old", Some(&unguarded)), 1, "old on the retired patch");
    // The build before the change cannot take `new` back: past the marker
    // its journal checked for fraud.
    assert_diverged_at(replay(&host, "new", Some(&before)), 2, "new on the build before");
}
