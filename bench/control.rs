//! Reaching a run that is going: how soon a pause stops its steps and a
//! resumption starts them again, against the time one of its steps takes;
//! restarting a finished run from its end, against running it anew; what
//! a value appended to a stream costs, against a step; and what a step's
//! output stored apart costs to journal and to replay, against a bare put
//! and get of as many bytes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use stepstone::journal::Outcome;
use stepstone::runtime::{AttemptCall, AttemptUnderWay, Progress, Restart, StandIn, StepStandIn, Submission};
use stepstone::store::RunId;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::fixtures::{Backend, Host, served_config};
use crate::measure::{Samples, millis, time};
use crate::report::{Row, Section};

/// Pauses and resumptions measured.
const ROUNDS: usize = 20;
/// Steps of the run a restart keeps, and a new run executes.
const KEPT: u32 = 100;
/// Values a streaming run appends, and steps its baseline runs.
const STREAMED: u32 = 200;
/// The size of the large output: past the 256 KiB threshold, under the
/// 1 MiB output limit.
const LARGE_OUTPUT: usize = 512 << 10;

/// Answers each attempt at once, as the bench guest's `noop` would, and
/// notes when it started: what tells a run's steps are going.
struct Attempts(watch::Sender<(u64, Instant)>);

impl StepStandIn for Attempts {
    fn attempt(&self, call: &AttemptCall<'_>) -> StandIn {
        self.0.send_modify(|(count, at)| {
            *count += 1;
            *at = Instant::now();
        });
        StandIn {
            answer: Some(Ok(call.input.to_owned())),
            takes: Duration::ZERO,
        }
    }
}

pub async fn operator_controls() -> anyhow::Result<Section> {
    let backend = Backend::InMemoryWith20ms;
    let (sender, mut attempts) = watch::channel((0, Instant::now()));
    let host = Host::with_stand_in(backend, served_config(), Some(Arc::new(Attempts(sender)))).await?;
    let submission = Submission::new(host.bench.clone(), "sequential", r#"{"n":1000000}"#);
    let run = host.runtime.submit(&host.tenant, submission).await?;
    let (mut stopping, mut starting, mut steps) = (Samples::default(), Samples::default(), Samples::default());
    for _ in 0..ROUNDS {
        let mut driver = tokio::spawn(drive(host.runtime.clone(), host.tenant.clone(), run.clone()));
        for _ in 0..5 {
            let before = attempts.borrow_and_update().1;
            next_attempt(&mut attempts, &mut driver).await?;
            steps.push(attempts.borrow().1 - before);
        }
        let (stopped, suspended) = time(async {
            host.runtime
                .runs()
                .pause(&host.tenant, &run, "a look", AttemptUnderWay::Finishes)
                .await?;
            driver.await?
        })
        .await;
        suspended?;
        stopping.push(stopped);
        let resumed = Instant::now();
        attempts.borrow_and_update();
        host.runtime.runs().resume(&host.tenant, &run).await?;
        let mut driver = tokio::spawn(drive(host.runtime.clone(), host.tenant.clone(), run.clone()));
        next_attempt(&mut attempts, &mut driver).await?;
        starting.push(attempts.borrow().1 - resumed);
        host.runtime
            .runs()
            .pause(&host.tenant, &run, "between rounds", AttemptUnderWay::Finishes)
            .await?;
        driver.await??;
        host.runtime.runs().resume(&host.tenant, &run).await?;
    }
    let step = millis(steps.median());
    let mut section = Section::new(
        "Operator controls",
        format!(
            "A run of `sequential` (a million steps, each answered at once by a stand-in, so a step \
             costs what its journal entry does) on {backend}, driven as `Runtime::run_to_end` \
             drives a run to its next suspension. *Pause to stopped*: from `Runs::pause` until its \
             driver returned, the run suspended at its next step; *resume to running*: from \
             `Runs::resume` until the run's next step attempt started, its driver started at once \
             as a woken host's is. Medians of {ROUNDS}, against the median time from one step's \
             attempt to the next's while it runs. *Restart*: a finished run of `sequential` over \
             {KEPT} steps restarted from its end (`Runs::restart`, then driven: it copies the {KEPT} \
             entries and replays them), against a new run of the same {KEPT} steps; median of 5. \
             *Stream append*: a run of `streaming` appending {STREAMED} values, per value, against \
             a run of `sequential` over {STREAMED} steps, per step; median of 5. *Large output*: a \
             run of `one-large-step` whose stand-in answers 512 KiB (stored apart, past the 256 KiB \
             threshold), against a run of `one-step` answered with a few bytes plus a bare put of 512 KiB \
             on the same store; and a replay of it (`Runs::replay`, which reads the output back) \
             against a bare get; medians of 5."
        ),
    );
    section
        .rows
        .push(Row::new("pause to stopped", millis(stopping.median()), "ms").against("one step", step));
    section
        .rows
        .push(Row::new("resume to running", millis(starting.median()), "ms").against("one step", step));
    let (restarted, anew) = restart_against_new(&host).await?;
    section.rows.push(
        Row::new(format!("restart keeping {KEPT} steps"), millis(restarted), "ms")
            .against(format!("a new run of {KEPT} steps"), millis(anew)),
    );
    let (append, step) = append_against_step(&host).await?;
    section
        .rows
        .push(Row::new("stream append, per value", millis(append), "ms").against("one step, per step", millis(step)));
    section.rows.extend(large_output().await?);
    Ok(section)
}

/// Answers every attempt with a JSON string of [`LARGE_OUTPUT`] bytes.
struct LargeOutput;

impl StepStandIn for LargeOutput {
    fn attempt(&self, _call: &AttemptCall<'_>) -> StandIn {
        StandIn {
            answer: Some(Ok(format!("\"{}\"", "x".repeat(LARGE_OUTPUT - 2)))),
            takes: Duration::ZERO,
        }
    }
}

/// Medians of 5 on the 20 ms store: a run of `one-large-step` whose
/// output is [`LARGE_OUTPUT`] bytes, stored apart, against a run of
/// `one-step` with an output of a few bytes plus a bare put of as many
/// bytes; and a replay of it against a bare get.
async fn large_output() -> anyhow::Result<Vec<Row>> {
    let backend = Backend::InMemoryWith20ms;
    let small = Host::with_stand_in(
        backend,
        served_config(),
        Some(Arc::new(Attempts(watch::channel((0, Instant::now())).0))),
    )
    .await?;
    let large = Host::with_stand_in(backend, served_config(), Some(Arc::new(LargeOutput))).await?;
    let store = large.storage.tenant(&large.tenant);
    let bytes = bytes::Bytes::from(vec![b'x'; LARGE_OUTPUT]);
    let mut samples: [Samples; 5] = Default::default();
    for round in 0..5 {
        let (small_run, ran) = time(one_step(&small, "one-step")).await;
        ran?;
        let (large_run, run) = time(one_step(&large, "one-large-step")).await;
        let run = run?;
        let key = stepstone::store::keys_of(&RunId::new(&format!("bare-{round}"))?).payload("bare");
        let (put, stored) = time(store.create(&key, bytes.clone())).await;
        stored?;
        let (replay, replayed) = time(large.runtime.runs().replay(&large.tenant, &run, None)).await;
        replayed?;
        let (get, read) = time(store.get(&key)).await;
        read?;
        for (samples, took) in samples.iter_mut().zip([small_run, large_run, put, replay, get]) {
            samples.push(took);
        }
    }
    let [small_run, large_run, put, replay, get] = samples.map(|samples| millis(samples.median()));
    Ok(vec![
        Row::new("run with a 512 KiB output stored apart", large_run, "ms")
            .against("the same run, a small output, and a bare 512 KiB put", small_run + put),
        Row::new("replay of that run", replay, "ms").against("a bare 512 KiB get", get),
    ])
}

async fn one_step(host: &Host, workflow: &str) -> anyhow::Result<RunId> {
    let submission = Submission::new(host.bench.clone(), workflow, r#"{"n":1}"#);
    let run = host.runtime.submit(&host.tenant, submission).await?;
    completed(host, &run).await.map(|()| run)
}

/// Medians of 5, per call: a run of `streaming` over [`STREAMED`] values;
/// a run of `sequential` over as many steps.
async fn append_against_step(host: &Host) -> anyhow::Result<(Duration, Duration)> {
    let (mut appends, mut steps) = (Samples::default(), Samples::default());
    let input = format!(r#"{{"n":{STREAMED}}}"#);
    for _ in 0..5 {
        for (workflow, samples) in [("streaming", &mut appends), ("sequential", &mut steps)] {
            let (took, ran) = time(async {
                let submission = Submission::new(host.bench.clone(), workflow, &input);
                let run = host.runtime.submit(&host.tenant, submission).await?;
                completed(host, &run).await
            })
            .await;
            ran?;
            samples.push(took / STREAMED);
        }
    }
    Ok((appends.median(), steps.median()))
}

/// Drives `run` until it suspends; fails if it ends.
/// Waits for the run's next step attempt; fails if its driver returns
/// first (it would never come).
async fn next_attempt(
    attempts: &mut watch::Receiver<(u64, Instant)>,
    driver: &mut JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<()> {
    tokio::select! {
        changed = attempts.changed() => Ok(changed?),
        driven = driver => bail!("the run's driver returned before its next step attempt: {:?}", driven?),
    }
}

async fn drive(
    runtime: stepstone::runtime::Runtime,
    tenant: stepstone::store::TenantId,
    run: RunId,
) -> anyhow::Result<()> {
    match runtime.run_to_end(&tenant, &run, Some(Duration::ZERO)).await? {
        Progress::Suspended(_) => Ok(()),
        ended => bail!("run {run} ended: {ended:?}"),
    }
}

/// Medians of 5: a restart of a finished run from its end, driven to its
/// end; and a new run of the same steps.
async fn restart_against_new(host: &Host) -> anyhow::Result<(Duration, Duration)> {
    let (mut restarts, mut news) = (Samples::default(), Samples::default());
    for _ in 0..5 {
        let input = format!(r#"{{"n":{KEPT}}}"#);
        let (took, run) = time(async {
            let submission = Submission::new(host.bench.clone(), "sequential", &input);
            let run = host.runtime.submit(&host.tenant, submission).await?;
            completed(host, &run).await.map(|()| run)
        })
        .await;
        news.push(took);
        let run = run?;
        let kept = host.runtime.history(&host.tenant, &run).await?.len();
        let (took, restarted) = time(async {
            let restart = Restart {
                seq: u64::try_from(kept)?,
                ..Restart::default()
            };
            let restarted = host.runtime.runs().restart(&host.tenant, &run, restart).await?;
            completed(host, &restarted.run_id).await
        })
        .await;
        restarted?;
        restarts.push(took);
    }
    Ok((restarts.median(), news.median()))
}

async fn completed(host: &Host, run: &RunId) -> anyhow::Result<()> {
    match host.runtime.run_to_end(&host.tenant, run, None).await? {
        Progress::Finished(Outcome::Completed { .. }) => Ok(()),
        other => bail!("run {run} did not complete: {other:?}"),
    }
}
