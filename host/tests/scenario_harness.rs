//! The scenario harness as a Rust library, the way a guest crate's
//! `cargo test` uses it: `stepstone::testing` drives a host in-process, on
//! virtual time, against the built order saga.

use std::time::Duration;

use serde_json::{Value, json};
use stepstone::journal::Outcome;
use stepstone::testing::{Answer, Expectations, ExpectedStep, Harness, Scenario, StepErrorKind, Stub};
use stepstone_e2e::{guest, root};

const DAY: Duration = Duration::from_secs(24 * 3600);

fn harness() -> Harness {
    let order = std::fs::read(guest("order")).expect("the order saga is built");
    Harness::new(order)
        .labelled("order.wasm")
        .cache_dir(&root().join("target/test-code-cache"))
}

fn order(id: &str) -> Value {
    json!({"order_id": id, "item": "book", "amount_cents": 1200,
           "sleep_ms": 86_400_000, "approval_timeout_ms": 3_600_000})
}

fn step(name: &str) -> ExpectedStep {
    ExpectedStep {
        step: name.into(),
        ..ExpectedStep::default()
    }
}

#[test]
fn a_day_long_saga_approved_half_an_hour_into_its_window_ships() {
    let scenario = Scenario::new("place-order", order("o-1"))
        .signal_at(DAY + Duration::from_secs(1800), "approve", json!({"approved": true}))
        .expect(Expectations {
            outcome: Some("completed".into()),
            output_contains: Some(json!({"status": "shipped", "tracking": "trk-o-1"})),
            steps: Some(vec![step("reserve"), step("charge"), step("ship")]),
            ..Expectations::default()
        });
    let report = harness().run(&scenario).expect("the scenario runs");
    assert!(report.passed(), "{report}");
    assert!(report.virtual_elapsed >= DAY + Duration::from_secs(1800), "{report}");
    assert_eq!(report.steps[1].attempts, 2, "the real charge fails its first attempt");
    assert_eq!(report.replays.len(), 1, "{report}");
}

/// Paused an hour into its day-long sleep for two days, the saga starts
/// nothing while paused: its sleep ends on time, but its next step starts
/// only once it is resumed, and it ships as it would have.
#[test]
fn a_saga_paused_for_two_days_ships_only_once_resumed() {
    let scenario = Scenario::new("place-order", order("o-9"))
        .paused(Duration::from_secs(3600), 2 * DAY)
        .signal_at(DAY + Duration::from_secs(1800), "approve", json!({"approved": true}))
        .expect(Expectations {
            outcome: Some("completed".into()),
            output_contains: Some(json!({"status": "shipped", "tracking": "trk-o-9"})),
            ..Expectations::default()
        });
    let report = harness().run(&scenario).expect("the scenario runs");
    assert!(report.passed(), "{report}");
    assert!(
        report.virtual_elapsed >= 2 * DAY + Duration::from_secs(3600),
        "nothing ran while it was paused: {report}"
    );
}

/// Advanced an hour into its day-long sleep, and again half an hour into
/// its hour-long approval wait, the saga times its approval out then: it
/// compensates an hour and a half in, not a day and an hour.
#[test]
fn a_saga_advanced_twice_times_its_approval_out_an_hour_and_a_half_in() {
    let scenario = Scenario::new("place-order", order("o-10"))
        .advanced_at(Duration::from_secs(3600))
        .advanced_at(Duration::from_secs(5400))
        .expect(Expectations {
            outcome: Some("failed".into()),
            error_contains: Some("no approval within 3600000 ms".into()),
            steps: Some(vec![step("reserve"), step("charge"), step("refund"), step("release")]),
            ..Expectations::default()
        });
    let report = harness().run(&scenario).expect("the scenario runs");
    assert!(report.passed(), "{report}");
    assert!(
        report.virtual_elapsed >= Duration::from_secs(5400) && report.virtual_elapsed < Duration::from_secs(7200),
        "both waits were cut short, no sooner than asked: {report}"
    );
}

#[test]
fn a_permanent_stubbed_decline_is_not_retried_and_is_compensated() {
    let declined = Stub::answers(vec![Answer::Failure {
        kind: StepErrorKind::Failed,
        message: "card declined".into(),
        permanent: true,
    }]);
    let scenario = Scenario::new("place-order", order("o-2")).stub("charge", declined);
    let report = harness().run(&scenario).expect("the scenario runs");
    assert!(report.passed(), "no expectation, no failure: {report}");
    let Some(Outcome::Failed { message, .. }) = &report.outcome else {
        panic!("the order fails: {report}");
    };
    assert!(
        message.contains("card declined; compensated: release res-o-2"),
        "{message}"
    );
    let called: Vec<(&str, u32)> = report.steps.iter().map(|s| (s.step.as_str(), s.attempts)).collect();
    assert_eq!(called, [("reserve", 1), ("charge", 1), ("release", 1)]);
}

#[test]
fn an_expectation_the_run_misses_is_a_failure_not_a_panic() {
    let scenario = Scenario::new("place-order", order("o-3"))
        .stub(
            "charge",
            Stub::failing(StepErrorKind::TimedOut, "slow").taking(Duration::from_secs(30)),
        )
        .expect(Expectations {
            outcome: Some("completed".into()),
            ..Expectations::default()
        });
    let report = harness().run(&scenario).expect("the scenario runs");
    assert!(!report.passed());
    assert_eq!(report.steps[1].attempts, 3, "the saga's retry policy: {report}");
    assert!(
        report.failures[0].starts_with("expected the run to end completed, but it failed (workflow-error)"),
        "{report}"
    );
    assert!(
        report.virtual_elapsed >= Duration::from_secs(90),
        "three attempts of 30 s: {report}"
    );
}
