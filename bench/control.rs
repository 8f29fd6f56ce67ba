//! Reaching a run from outside: how soon a pause stops a run taking one
//! step after another, against one of its steps; and how soon a resume
//! gets a paused run going again, against a signal getting a waiting run
//! going, both runs evicted from their instances with journals of one
//! length.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::bail;
use stepstone::runtime::{Progress, Submission};
use stepstone::store::{RunId, SignalName};

use crate::fixtures::{Backend, Host, served_config};
use crate::measure::{Samples, millis};
use crate::report::{Row, Section};

/// Pauses and resumes measured, and signalled runs beside them.
const ROUNDS: usize = 30;
/// Steps the run takes between two pauses.
const STEPS_BETWEEN: u64 = 50;
/// The journal both kinds of woken run replay, about.
const JOURNAL: u32 = 500;
/// Time for a driver to reach its wait before it is woken: what is
/// measured is the wake, not the way there.
const SETTLE: Duration = Duration::from_millis(20);

pub async fn pause_and_resume() -> anyhow::Result<Section> {
    let mut config = served_config();
    // Evicted at once when waiting, as a paused run is: both woken runs
    // replay their journals.
    config.wait.eviction_threshold = Duration::ZERO;
    let host = Host::new(Backend::Counted, config).await?;
    let (stopped, step) = pauses(&host).await?;
    let resumed = resumes(&host).await?;
    let signalled = signals(&host).await?;
    let mut section = Section::new(
        "Pause and resume",
        format!(
            "In memory (requests counted). A run of the bench guest's `sequential` takes step after step, driven as `serve` drives it; {ROUNDS} times, after {STEPS_BETWEEN} more steps, it is paused (`Runs::pause`) and the time until its driver stops is measured, against one of its steps (the same {STEPS_BETWEEN} steps' time, each). Resumed, its driver waiting for the store's word, the time until its next write (its next step starts) is measured against a signal to runs of `sequential-then-wait` with the same {JOURNAL}-step journal, waiting the same way, until their next write. Medians."
        ),
    );
    section.rows.push(
        Row::new(
            "pause to stopped, a run taking step after step",
            millis(stopped.median()),
            "ms",
        )
        .against("one of its steps", millis(step.median())),
    );
    section.rows.push(
        Row::new(
            format!("resume to running, a paused run of {JOURNAL} entries"),
            millis(resumed.median()),
            "ms",
        )
        .against(
            format!("a signal to a waiting run of {JOURNAL} entries"),
            millis(signalled.median()),
        ),
    );
    Ok(section)
}

impl Host {
    fn puts(&self) -> u64 {
        self.requests.puts.load(Ordering::Relaxed)
    }

    /// When the store has taken a put more than the `from` it had.
    async fn next_put(&self, from: u64) -> Instant {
        while self.puts() <= from {
            tokio::task::yield_now().await;
        }
        Instant::now()
    }

    async fn start(&self, workflow: &str, n: u32) -> anyhow::Result<RunId> {
        let input = format!(r#"{{"n":{n}}}"#);
        let submission = Submission::new(self.bench.clone(), workflow, &input);
        Ok(self.runtime.submit(&self.tenant, submission).await?)
    }

    /// Drives `run` in a task of its own, until it suspends (`detach`) or
    /// ends.
    fn drive(&self, run: &RunId, detach: bool) -> tokio::task::JoinHandle<anyhow::Result<Progress>> {
        let (runtime, tenant, run) = (self.runtime.clone(), self.tenant.clone(), run.clone());
        let detach_after = detach.then_some(Duration::ZERO);
        tokio::spawn(async move { Ok(runtime.run_to_end(&tenant, &run, detach_after).await?) })
    }
}

/// How long each pause took to stop the run, and each step took.
async fn pauses(host: &Host) -> anyhow::Result<(Samples, Samples)> {
    let runs = host.runtime.runs();
    let run = host.start("sequential", u32::MAX).await?;
    let (mut stopped, mut step) = (Samples::default(), Samples::default());
    for _ in 0..ROUNDS {
        let driving = host.drive(&run, true);
        let from = host.puts();
        let began = host.next_put(from).await;
        let ended = host.next_put(from + STEPS_BETWEEN).await;
        step.push((ended - began) / STEPS_BETWEEN as u32);
        let asked = Instant::now();
        runs.pause(&host.tenant, &run, "measured").await?;
        if !matches!(driving.await??, Progress::Suspended(_)) {
            bail!("the paused run should have stopped");
        }
        stopped.push(asked.elapsed());
        runs.resume(&host.tenant, &run).await?;
    }
    Ok((stopped, step))
}

/// How long each resume took to get a paused run writing again: a run of
/// `sequential` paused at about its `JOURNAL`th step, then cancelled.
async fn resumes(host: &Host) -> anyhow::Result<Samples> {
    let runs = host.runtime.runs();
    let mut resumed = Samples::default();
    for _ in 0..ROUNDS {
        let run = host.start("sequential", u32::MAX).await?;
        let driving = host.drive(&run, true);
        host.next_put(host.puts() + u64::from(JOURNAL)).await;
        runs.pause(&host.tenant, &run, "measured").await?;
        if !matches!(driving.await??, Progress::Suspended(_)) {
            bail!("the paused run should have stopped");
        }
        let waiting = host.drive(&run, false);
        tokio::time::sleep(SETTLE).await;
        let from = host.puts();
        let asked = Instant::now();
        runs.resume(&host.tenant, &run).await?;
        resumed.push(host.next_put(from).await - asked);
        host.runtime.cancel(&host.tenant, &run, "measured").await?;
        if !matches!(waiting.await??, Progress::Finished(_)) {
            bail!("the cancelled run should have ended");
        }
    }
    Ok(resumed)
}

/// How long each signal took to get a waiting run writing again.
async fn signals(host: &Host) -> anyhow::Result<Samples> {
    let go = SignalName::new("go")?;
    let mut signalled = Samples::default();
    for _ in 0..ROUNDS {
        let run = host.start("sequential-then-wait", JOURNAL).await?;
        let waiting = host.drive(&run, false);
        tokio::time::sleep(SETTLE).await;
        let asked = Instant::now();
        host.runtime
            .runs()
            .signal_with_id(&host.tenant, &run, &go, "1", None)
            .await?;
        // The signal's own put comes first.
        let from = host.puts();
        signalled.push(host.next_put(from).await - asked);
        if !matches!(waiting.await??, Progress::Finished(_)) {
            bail!("the signalled run should have ended");
        }
    }
    Ok(signalled)
}
