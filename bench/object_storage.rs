//! Journaled steps on object storage, where each request takes a round
//! trip: an in-memory store behind 20 ms of injected latency per request
//! (object_store's `ThrottledStore`), and SeaweedFS over S3 on this
//! machine, side by side; with the store requests a step and a run cost
//! (object stores bill per request).

use std::time::Duration;

use stepstone::config::SnapshotPolicy;

use crate::fixtures::{Backend, Host, INJECTED_LATENCY, served_config};
use crate::measure::{Samples, rate, time};
use crate::recovery::SuspendedRun;
use crate::report::{Bound, Row, Section};

/// Steps of the sequential run timed on each store.
const SEQUENTIAL_STEPS: u32 = 25;
/// Runs driven at once, and the steps of each, for the throughput figure.
const CONCURRENT_RUNS: usize = 100;
const STEPS_PER_RUN: u32 = 20;
/// Steps of the run whose requests are counted.
const COUNTED_STEPS: u32 = 200;
/// Steps of the suspended run that is woken.
const WOKEN_STEPS: u32 = 3;

/// What one store gave.
struct Figures {
    step: Duration,
    /// A run of no steps: its fixed round trips (submission, outcome).
    empty_run: Duration,
    /// Waking a suspended run: replaying its journal to its wait.
    wake: Duration,
    steps_per_second: f64,
    /// Puts, gets and lists per journaled step.
    per_step: [f64; 3],
    /// Puts, gets and lists of a run of three steps.
    per_run: [u64; 3],
    /// Puts per run of three steps, over runs at once: its own objects,
    /// and its share of the ledger's (batches and compactions).
    puts_per_run_together: (f64, f64),
    /// The host's upkeep requests a second (heartbeats, wake-ups), whatever
    /// it drives.
    upkeep_per_second: f64,
}

async fn measure(backend: Backend) -> anyhow::Result<Figures> {
    let host = Host::new(backend, served_config()).await?;
    host.run("sequential", 2).await?;
    // A step's own cost: a run of steps less a run of none, which costs
    // the run's fixed requests (its record, its outcome).
    let (mut runs, mut empty) = (Samples::default(), Samples::default());
    for _ in 0..3 {
        let (took, result) = time(host.run("sequential", SEQUENTIAL_STEPS)).await;
        result?;
        runs.push(took);
        let (took, result) = time(host.run("zero-steps", 0)).await;
        result?;
        empty.push(took);
    }
    let step = runs.median().saturating_sub(empty.median()) / SEQUENTIAL_STEPS;
    let together = host
        .run_many("sequential", STEPS_PER_RUN, CONCURRENT_RUNS, CONCURRENT_RUNS)
        .await?;
    let before = host.requests.counts();
    let upkeep_before = host.requests.upkeep.load(std::sync::atomic::Ordering::Relaxed);
    let (counting, counted_run) = time(host.run("sequential", COUNTED_STEPS)).await;
    counted_run?;
    let counted = host.requests.counts();
    let upkeep = host.requests.upkeep.load(std::sync::atomic::Ordering::Relaxed) - upkeep_before;
    let per_step = [0, 1, 2].map(|i| (counted[i] - before[i]) as f64 / f64::from(COUNTED_STEPS));
    host.run("three-steps", 0).await?;
    let after = host.requests.counts();
    let ledger_puts = || host.requests.ledger_puts.load(std::sync::atomic::Ordering::Relaxed);
    let ledger_before = ledger_puts();
    host.run_many("three-steps", 0, CONCURRENT_RUNS, CONCURRENT_RUNS)
        .await?;
    let together_puts = host.requests.counts()[0] - after[0];
    let together_ledger_puts = ledger_puts() - ledger_before;
    let suspended = SuspendedRun::new(backend, WOKEN_STEPS, SnapshotPolicy::default().every).await?;
    let mut wakes = Samples::default();
    for _ in 0..3 {
        wakes.push(suspended.recover().await?);
    }
    Ok(Figures {
        step,
        empty_run: empty.median(),
        wake: wakes.median(),
        steps_per_second: rate(CONCURRENT_RUNS * STEPS_PER_RUN as usize, together),
        per_step,
        per_run: [0, 1, 2].map(|i| after[i] - counted[i]),
        puts_per_run_together: (
            (together_puts - together_ledger_puts) as f64 / CONCURRENT_RUNS as f64,
            together_ledger_puts as f64 / CONCURRENT_RUNS as f64,
        ),
        upkeep_per_second: upkeep as f64 / counting.as_secs_f64(),
    })
}

pub async fn object_storage() -> anyhow::Result<Section> {
    let throttled = measure(Backend::InMemoryWith20ms).await?;
    let seaweed = measure(Backend::SeaweedFs).await?;
    let mut section = Section::new(
        "Journaled steps on object storage",
        format!(
            "The bench guest's `sequential` workflow (trivial `noop` steps, one after another, each \
             journaled before the workflow sees its result) on two stores: an in-memory store behind \
             {latency} ms of injected latency on every request (`ThrottledStore`), and SeaweedFS \
             4.48 over S3 on this machine (`weed mini`). Per step: the median of 3 runs of \
             {SEQUENTIAL_STEPS} steps, less the median of 3 runs of the `zero-steps` workflow (the \
             run's fixed cost), divided by {SEQUENTIAL_STEPS}. That fixed cost is a row of its own: how \
             many round trips deep a run of no steps is, submitted (its note in the ledger, its record) \
             and driven to its end (its outcome). Across runs: {CONCURRENT_RUNS} runs of {STEPS_PER_RUN} steps \
             at once. Requests: counted by a decorator under the host, over one run of \
             {COUNTED_STEPS} steps, one run of the `three-steps` workflow (a run's fixed cost \
             included: its record and its outcome), and {CONCURRENT_RUNS} runs of it at once: \
             its own objects (record, entries, outcome), and apart its share of the ledger's \
             (`ledger/`: the batches noting runs created and ended, which runs share, and their \
             compactions; the end of the last runs may be noted after the count); the host's upkeep (its heartbeat, the other \
             hosts', its wake-ups, under `cluster/`) apart, per second of that run. Waking: a run of \
             `sequential-then-wait` over {WOKEN_STEPS} steps, suspended at its wait, driven again \
             (`Runtime::drive`: its records read, the run claimed, its journal replayed to the wait, \
             where it suspends again), median of 3; its ratio to one request's latency is how many \
             round trips deep a wake-up is, the CPU of the replay and the instance included (the \
             target allows it 0.15 of a round trip, as for a step).",
            latency = INJECTED_LATENCY.as_millis()
        ),
    );
    let latency_ms = INJECTED_LATENCY.as_secs_f64() * 1e3;
    let step_ms = throttled.step.as_secs_f64() * 1e3;
    section.rows.push(
        Row::new("one sequential step, 20 ms per request", step_ms, "ms")
            .against("one request's latency", latency_ms)
            .ratio_target("≤ 1.15 × 20 ms", Bound::AtMost(1.15)),
    );
    section.rows.push(
        Row::new(
            "a run of no steps, submitted and driven to its end, 20 ms per request",
            throttled.empty_run.as_secs_f64() * 1e3,
            "ms",
        )
        .against("one request's latency", latency_ms),
    );
    section.rows.push(
        Row::new(
            format!("wake a suspended run of {WOKEN_STEPS} steps, 20 ms per request"),
            throttled.wake.as_secs_f64() * 1e3,
            "ms",
        )
        .against("one request's latency", latency_ms)
        .ratio_target("≤ 2.15 × 20 ms: two round trips", Bound::AtMost(2.15)),
    );
    section.rows.push(
        Row::new(
            "journaled steps across concurrent runs, 20 ms per request",
            throttled.steps_per_second,
            "steps/s",
        )
        .target("≥ 2,000 steps/s", Bound::AtLeast(2_000.0)),
    );
    section.rows.push(Row::new(
        "one sequential step, SeaweedFS",
        seaweed.step.as_secs_f64() * 1e3,
        "ms",
    ));
    section.rows.push(Row::new(
        format!("wake a suspended run of {WOKEN_STEPS} steps, SeaweedFS"),
        seaweed.wake.as_secs_f64() * 1e3,
        "ms",
    ));
    section.rows.push(
        Row::new(
            "journaled steps across concurrent runs, SeaweedFS",
            seaweed.steps_per_second,
            "steps/s",
        )
        .against("the same with 20 ms per request", throttled.steps_per_second),
    );
    for (store, figures) in [("20 ms per request", &throttled), ("SeaweedFS", &seaweed)] {
        let [puts, gets, lists] = figures.per_step;
        section.rows.push(
            Row::new(format!("puts per journaled step, {store}"), puts, "puts").target("≤ 1.1", Bound::AtMost(1.1)),
        );
        section
            .rows
            .push(Row::new(format!("gets per journaled step, {store}"), gets, "gets"));
        section.rows.push(
            Row::new(format!("lists per journaled step, {store}"), lists, "lists")
                .target("≤ 0.05", Bound::AtMost(0.05)),
        );
        let [puts, gets, lists] = figures.per_run.map(|n| n as f64);
        section
            .rows
            .push(Row::new(format!("puts per run of three steps, {store}"), puts, "puts"));
        let (own, ledger) = figures.puts_per_run_together;
        section.rows.push(
            Row::new(
                format!("puts per run of three steps, {CONCURRENT_RUNS} at once, its own objects, {store}"),
                own,
                "puts",
            )
            .target("≤ 5", Bound::AtMost(5.0)),
        );
        section.rows.push(Row::new(
            format!("puts per run of three steps, {CONCURRENT_RUNS} at once, its share of the ledger's, {store}"),
            ledger,
            "puts",
        ));
        section.rows.push(Row::new(
            format!("gets and lists per run of three steps, {store}"),
            gets + lists,
            "requests",
        ));
        section.rows.push(Row::new(
            format!("the host's upkeep, {store}"),
            figures.upkeep_per_second,
            "requests/s",
        ));
    }
    Ok(section)
}
