//! Testing a workflow on virtual time (`stepstone test`): the order saga
//! over a day (a 24-hour sleep, then an approval half an hour into its
//! hour-long window) as a scenario, against the same scenario with its
//! waits cut to nothing. Their ratio is what a day of virtual waiting costs.

use std::time::Duration;

use anyhow::bail;
use serde_json::json;
use stepstone::testing::{Expectations, Harness, Scenario};

use crate::fixtures::{Backend, guest, scratch_dir};
use crate::measure::{Samples, millis};
use crate::report::{Bound, Row, Section};

const SAMPLES: usize = 21;

/// The saga sleeping `sleep_ms`, approved `approve_after` into the run.
fn saga(sleep_ms: u64, approve_after: Duration) -> Scenario {
    let order = json!({"order_id": "o-1", "item": "book", "amount_cents": 1200,
                       "sleep_ms": sleep_ms, "approval_timeout_ms": 3_600_000});
    Scenario::new("place-order", order)
        .signal_at(approve_after, "approve", json!({"approved": true}))
        .expect(Expectations {
            outcome: Some("completed".into()),
            ..Expectations::default()
        })
}

/// The median real time of `scenario`, failing if it does not pass.
fn median(harness: &Harness, scenario: &Scenario) -> anyhow::Result<Duration> {
    let mut samples = Samples::default();
    for _ in 0..SAMPLES {
        let report = harness.run(scenario)?;
        if !report.passed() {
            bail!("the scenario failed: {report}");
        }
        samples.push(report.real_elapsed);
    }
    Ok(samples.median())
}

pub fn day_long_saga() -> anyhow::Result<Section> {
    let harness = Harness::new(guest("order")?).cache_dir(&scratch_dir(Backend::LocalFs)?.join("code-cache"));
    let day = saga(86_400_000, Duration::from_secs(24 * 3600 + 1800));
    let no_wait = saga(0, Duration::ZERO);
    // The first run compiles the component into the cache; it is not a sample.
    harness.run(&no_wait)?;
    let waited = median(&harness, &day)?;
    let baseline = median(&harness, &no_wait)?;
    let mut section = Section::new(
        "Testing on virtual time",
        format!(
            "`stepstone::testing::Harness::run` (what `stepstone test` runs per scenario) of the order saga \
             with its real steps (`charge` fails once and is retried after 100 ms): reserve, charge, a 24-hour \
             durable sleep (the instance evicted, the run replayed when it ends), an approval 30 minutes into \
             its 1-hour window, ship; then the replay check. Each run is a fresh host on an in-memory store, \
             the component loaded from the compiled-code cache. Median real time of {SAMPLES} runs, against \
             the same scenario with no sleep and the approval sent at once."
        ),
    );
    section.rows.push(
        Row::new(
            "a day-long saga, 24 h 30 m of virtual time (real ms)",
            millis(waited),
            "ms",
        )
        .against("the same saga with no waiting", millis(baseline))
        .target("well under a second (≤ 1,000 ms)", Bound::AtMost(1_000.0)),
    );
    Ok(section)
}
