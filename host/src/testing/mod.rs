//! Testing workflows without waiting for them (`stepstone test`): a
//! [`Scenario`] runs one workflow of a component in memory on virtual time,
//! its steps stubbed by name or run for real, its signals sent at virtual
//! times; the run is then checked against what the scenario expects and
//! replayed against its own journal, so a workflow that would not replay
//! fails its test rather than a run in production.
//!
//! Invariants: each scenario runs on a thread of its own, in a fresh host
//! over an in-memory store, on a paused tokio clock:
//! nothing one scenario does reaches another, and no timer waits for real.
//! Everything but the clock and the stubbed attempts is the host's own code
//! (retries and their backoffs, evictions and replays, journaling), so a
//! scenario exercises what production runs.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use serde_json::json;
//! use stepstone::testing::{Expectations, Harness, Scenario, Stub};
//!
//! let harness = Harness::new(std::fs::read("target/guests/order.wasm")?);
//! let day = Duration::from_secs(24 * 3600);
//! let order = json!({"order_id": "o-1", "item": "book", "amount_cents": 1200,
//!                    "sleep_ms": 86_400_000, "approval_timeout_ms": 3_600_000});
//! let scenario = Scenario::new("place-order", order)
//!     .stub("charge", Stub::output(json!({"charge": "ch-o-1"})))
//!     .signal_at(day + Duration::from_secs(60), "approve", json!({"approved": true}))
//!     .expect(Expectations {
//!         outcome: Some("completed".into()),
//!         ..Expectations::default()
//!     });
//! let report = harness.run(&scenario)?;
//! assert!(report.passed(), "{report}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod expect;
pub mod junit;
mod scenario;
mod stubs;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// The kinds a stubbed attempt fails with (see [`STUB_FAILURE_KINDS`]).
pub use crate::contract::bindings::StepErrorKind;
pub use expect::StepCallRecord;
pub use scenario::{
    Answer, DEFAULT_UNTIL, Expectations, ExpectedStep, STUB_FAILURE_KINDS, Scenario, ScenarioError, Stub, TimedSignal,
};

use crate::clock::{self, VirtualTime};
use crate::component::CodeCache;
use crate::config::HostConfig;
use crate::journal::{CallKind, Entry, Outcome, Recorded};
use crate::runtime::{AttemptUnderWay, Progress, ReplayReport, RunError, Runtime, Submission};
use crate::shared_map::lock;
use crate::store::{RunId, SignalName, Storage, TenantId};
use stubs::Stubs;

/// The run id every scenario's run has: its WASI random is seeded from
/// it, so a scenario draws the same numbers every time it runs.
const SCENARIO_RUN: &str = "scenario";

/// Why a scenario could not run at all (a scenario that ran and fell short
/// of its expectations is a failed [`ScenarioReport`] instead).
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// No thread, or no tokio runtime on it, could be started for the scenario.
    #[error("cannot start a thread and runtime for scenario `{scenario}`: {reason}")]
    Start {
        /// The name of the scenario that could not start.
        scenario: String,
        /// Why, as the operating system or tokio gave it.
        reason: String,
    },
    /// The host failed the scenario before it could be checked: the component does not validate,
    /// say, or the run could not be submitted, driven, read back or replayed.
    #[error("scenario `{scenario}` could not run: {source}")]
    Run {
        /// The name of the scenario that could not run.
        scenario: String,
        /// What the host reported.
        #[source]
        source: Box<RunError>,
    },
    /// The scenario's thread panicked: a bug in the host, to report.
    #[error("scenario `{scenario}` stopped the host's thread (a bug in the host: please report it)")]
    Panicked {
        /// The name of the scenario whose thread stopped.
        scenario: String,
    },
}

/// Runs scenarios against one component.
pub struct Harness {
    component: Bytes,
    label: String,
    cache: CodeCache,
    replay_with: Option<(String, Bytes)>,
}

impl Harness {
    /// A harness for the component `component` (its bytes), compiling it
    /// afresh for every scenario unless given a [`cache_dir`](Self::cache_dir).
    pub fn new(component: impl Into<Bytes>) -> Self {
        Self {
            component: component.into(),
            label: "the component".to_owned(),
            cache: CodeCache::disabled(),
            replay_with: None,
        }
    }

    /// What errors call the component (its file's name, say).
    pub fn labelled(mut self, label: &str) -> Self {
        self.label = label.to_owned();
        self
    }

    /// Keeps compiled code in `dir` (a folder only you can write: compiled
    /// code found there is loaded and run as it is).
    pub fn cache_dir(mut self, dir: &Path) -> Self {
        self.cache = CodeCache::open(dir);
        self
    }

    /// Also replays every scenario's journal against `build` (labelled
    /// `label`), say the next version of the component: a scenario whose
    /// journal it does not replay identically fails, naming the first
    /// divergence.
    pub fn replay_with(mut self, label: &str, build: impl Into<Bytes>) -> Self {
        self.replay_with = Some((label.to_owned(), build.into()));
        self
    }

    /// Runs `scenario`, its steps completing in the order they would.
    pub fn run(&self, scenario: &Scenario) -> Result<ScenarioReport, HarnessError> {
        self.run_on_own_thread(scenario, None)
    }

    /// Runs `scenario` with its steps' completions shuffled by `seed`: each
    /// attempt takes a pseudo-random extra moment (up to a second of
    /// virtual time), so steps started together finish in another order.
    pub fn run_shuffled(&self, scenario: &Scenario, seed: u64) -> Result<ScenarioReport, HarnessError> {
        self.run_on_own_thread(scenario, Some(seed))
    }

    fn run_on_own_thread(&self, scenario: &Scenario, shuffle: Option<u64>) -> Result<ScenarioReport, HarnessError> {
        let start_failed = |reason: String| HarnessError::Start {
            scenario: scenario.name.clone(),
            reason,
        };
        std::thread::scope(|scope| {
            let thread = std::thread::Builder::new()
                .name(format!("scenario {}", scenario.name))
                .spawn_scoped(scope, || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .start_paused(true)
                        .build()
                        .map_err(|e| start_failed(e.to_string()))?;
                    runtime.block_on(self.play(scenario, shuffle))
                })
                .map_err(|e| start_failed(e.to_string()))?;
            thread.join().map_err(|_| HarnessError::Panicked {
                scenario: scenario.name.clone(),
            })?
        })
    }

    /// A fresh host whose steps `stubs` stands in for, and the scenario's
    /// run submitted there.
    async fn start(
        &self,
        scenario: &Scenario,
        tenant: &TenantId,
        stubs: Arc<Stubs>,
    ) -> Result<(Runtime, RunId), RunError> {
        let runtime = Runtime::with_step_stand_in(host_config(), Storage::in_memory(), self.cache.clone(), stubs)?;
        let component = runtime.validate(&self.label, self.component.clone()).await?;
        let mut submission = Submission::new(component, &scenario.workflow, &scenario.input.to_string());
        submission.run_id = Some(RunId::new(SCENARIO_RUN)?);
        let run = runtime.submit(tenant, submission).await?;
        Ok((runtime, run))
    }

    /// The scenario, on this thread's paused runtime.
    async fn play(&self, scenario: &Scenario, shuffle: Option<u64>) -> Result<ScenarioReport, HarnessError> {
        let failed = |source: RunError| HarnessError::Run {
            scenario: scenario.name.clone(),
            source: Box::new(source),
        };
        let real_start = std::time::Instant::now();
        let _time = VirtualTime::start(scenario.start_time_ms.unwrap_or_else(clock::now_ms));
        let stubs = Arc::new(Stubs::new(scenario.stubs.clone(), shuffle));
        let tenant = TenantId::default_tenant();
        let (runtime, run) = self.start(scenario, &tenant, stubs.clone()).await.map_err(failed)?;
        let started = Instant::now();
        let mut report = ScenarioReport::new(scenario, shuffle);
        let event_failures = Arc::new(Mutex::new(Vec::new()));
        let events = send_events(&runtime, &tenant, &run, scenario, &event_failures);
        let driven = tokio::time::timeout(scenario.until, drive_chain(&runtime, &tenant, &run)).await;
        report.virtual_elapsed = started.elapsed();
        drop(events);
        report.failures.append(&mut lock(&event_failures));
        report.unsent_signals = unsent(scenario, report.virtual_elapsed);
        match driven {
            Ok(Ok((generations, outcome))) => {
                let review = Review {
                    runtime: &runtime,
                    tenant: &tenant,
                    stubs: &stubs,
                    harness: self,
                };
                review
                    .finished(scenario, &generations, outcome, &mut report)
                    .await
                    .map_err(failed)?;
            }
            Ok(Err(e)) => return Err(failed(e)),
            Err(_) => {
                let state = runtime.status(&tenant, &run).await.map_err(failed)?.state;
                report.failures.push(format!(
                    "the run had not finished after {} of virtual time (the scenario's `until`); it stands {}",
                    humantime::format_duration(scenario.until),
                    serde_json::to_string(&state).unwrap_or_default()
                ));
            }
        }
        report.real_elapsed = real_start.elapsed();
        Ok(report)
    }
}

/// A host for one scenario: alone on its in-memory store, so it polls for
/// no other host's news (its runs' bells ring in-process) and its lease
/// never lapses while the scenario's real steps run.
fn host_config() -> HostConfig {
    let alone = Duration::from_secs(366 * 24 * 3600);
    let mut config = HostConfig::new();
    config.pooling = false;
    config.lease.ttl = alone;
    config.wait.signal_poll_interval = alone;
    config.wait.wakeup_poll_interval = alone;
    config
}

/// Starts a task per signal (and the cancellation, the pause, each advance) that sends it at its
/// virtual time from now, the run's start (a time past the end of time
/// never comes); dropping the set stops those not yet sent.
fn send_events(
    runtime: &Runtime,
    tenant: &TenantId,
    run: &RunId,
    scenario: &Scenario,
    failures: &Arc<Mutex<Vec<String>>>,
) -> JoinSet<()> {
    let mut events = JoinSet::new();
    for signal in &scenario.signals {
        let (runtime, tenant, run, failures) = (runtime.clone(), tenant.clone(), run.clone(), failures.clone());
        let signal = signal.clone();
        events.spawn(async move {
            tokio::time::sleep(signal.at).await;
            let sent = match SignalName::new(&signal.name) {
                Ok(name) => runtime.signal(&tenant, &run, &name, &signal.payload.to_string()).await,
                Err(e) => Err(e.into()),
            };
            match sent {
                Ok(()) | Err(RunError::Finished { .. }) => {}
                Err(e) => lock(&failures).push(format!(
                    "signal `{}` at {} could not be sent: {e}",
                    signal.name,
                    humantime::format_duration(signal.at)
                )),
            }
        });
    }
    if let Some(at) = scenario.cancel_at {
        let (runtime, tenant, run, failures) = (runtime.clone(), tenant.clone(), run.clone(), failures.clone());
        events.spawn(async move {
            tokio::time::sleep(at).await;
            match runtime.cancel(&tenant, &run, "cancelled by the scenario").await {
                Ok(()) | Err(RunError::Finished { .. }) => {}
                Err(e) => lock(&failures).push(format!("the cancellation could not be sent: {e}")),
            }
        });
    }
    for &at in &scenario.advance_at {
        let (runtime, tenant, run, failures) = (runtime.clone(), tenant.clone(), run.clone(), failures.clone());
        events.spawn(async move {
            tokio::time::sleep(at).await;
            match runtime.runs().advance(&tenant, &run).await {
                Ok(_) | Err(RunError::Finished { .. }) => {}
                Err(e) => lock(&failures).push(format!(
                    "the advance at {} could not be made: {e}",
                    humantime::format_duration(at)
                )),
            }
        });
    }
    if let Some((at, lasts)) = scenario.pause {
        let (runtime, tenant, run, failures) = (runtime.clone(), tenant.clone(), run.clone(), failures.clone());
        events.spawn(async move {
            tokio::time::sleep(at).await;
            let paused = runtime
                .runs()
                .pause(&tenant, &run, "paused by the scenario", AttemptUnderWay::Finishes)
                .await;
            let resumed = match paused {
                Ok(()) => {
                    tokio::time::sleep(lasts).await;
                    runtime.runs().resume(&tenant, &run).await
                }
                other => other,
            };
            match resumed {
                Ok(()) | Err(RunError::Finished { .. }) => {}
                Err(e) => lock(&failures).push(format!("the pause could not be sent: {e}")),
            }
        });
    }
    events
}

/// Drives the run, and the generations it continues as, to the end: the
/// ids of every generation, and how the last one ended.
async fn drive_chain(runtime: &Runtime, tenant: &TenantId, run: &RunId) -> Result<(Vec<RunId>, Outcome), RunError> {
    let mut generations = vec![run.clone()];
    loop {
        let current = generations.last().unwrap_or(run).clone();
        match runtime.run_to_end(tenant, &current, None).await? {
            Progress::Finished(Outcome::Continued { next }) => generations.push(next),
            Progress::Finished(outcome) => return Ok((generations, outcome)),
            // Without a time to detach after, a run is driven through its
            // waits; were it to stop at one, driving it again goes on.
            Progress::Suspended(_) => {}
        }
    }
}

/// The signals the run ended before.
fn unsent(scenario: &Scenario, elapsed: Duration) -> Vec<String> {
    scenario
        .signals
        .iter()
        .filter(|signal| signal.at > elapsed)
        .map(|signal| format!("{} at {}", signal.name, humantime::format_duration(signal.at)))
        .collect()
}

/// Looking over a finished run: its journal, its expectations, its replays.
struct Review<'a> {
    runtime: &'a Runtime,
    tenant: &'a TenantId,
    stubs: &'a Stubs,
    harness: &'a Harness,
}

impl Review<'_> {
    async fn finished(
        &self,
        scenario: &Scenario,
        generations: &[RunId],
        outcome: Outcome,
        report: &mut ScenarioReport,
    ) -> Result<(), RunError> {
        let other_build = match &self.harness.replay_with {
            Some((label, bytes)) => Some((label, self.runtime.validate(label, bytes.clone()).await?)),
            None => None,
        };
        for generation in generations {
            let entries = self.runtime.history(self.tenant, generation).await?;
            report.journal_entries += entries.len();
            report.steps.extend(self.step_calls(generation, &entries).await?);
            for entry in &entries {
                if let Recorded::Appended { value } = &entry.recorded {
                    let stream = report.streams.entry(entry.call.name.clone()).or_default();
                    stream.push(value.clone());
                }
            }
            let own = self.runtime.runs().replay(self.tenant, generation, None).await?;
            if let Some(divergence) = divergence(&own) {
                report.failures.push(format!(
                    "replaying run {generation} against its own journal diverged{divergence}: the workflow is not deterministic"
                ));
            }
            report.replays.push((generation.clone(), own));
            if let Some((label, build)) = &other_build {
                let replayed = self
                    .runtime
                    .runs()
                    .replay(self.tenant, generation, Some(build.clone()))
                    .await?;
                if let Some(divergence) = divergence(&replayed) {
                    report.failures.push(format!(
                        "replaying run {generation} with {label} diverged{divergence}: runs in flight would fail on that build"
                    ));
                }
            }
        }
        // The last generation ended the run, and holds its output.
        let outcome = match (outcome, generations.last()) {
            (Outcome::Completed { output }, Some(last)) => Outcome::Completed {
                output: self
                    .runtime
                    .runs()
                    .payload_text(self.tenant, last, output)
                    .await?
                    .into(),
            },
            (outcome, _) => outcome,
        };
        report.failures.extend(expect::mismatches(
            &scenario.expect,
            &outcome,
            &report.steps,
            &report.streams,
        ));
        report.outcome = Some(outcome);
        Ok(())
    }

    /// The step calls `entries` of run `run` hold, with their inputs and
    /// their outputs (those stored apart read back).
    async fn step_calls(&self, run: &RunId, entries: &[Entry]) -> Result<Vec<StepCallRecord>, RunError> {
        let mut calls = Vec::new();
        for entry in entries.iter().filter(|entry| entry.call.kind == CallKind::Step) {
            let result = match &entry.recorded {
                Recorded::Step { result: Ok(output) } => Ok(self
                    .runtime
                    .runs()
                    .payload_text(self.tenant, run, output.clone())
                    .await?),
                Recorded::Step { result: Err(error) } => Err(error.clone()),
                other => Err(crate::contract::bindings::StepError {
                    kind: crate::contract::bindings::StepErrorKind::Cancelled,
                    message: format!("{other:?}"),
                    attempts: entry.attempts,
                }),
            };
            calls.push(StepCallRecord {
                run: run.to_string(),
                seq: entry.seq,
                step: entry.call.name.clone(),
                input: self
                    .stubs
                    .input(run.as_str(), entry.seq)
                    .map(|input| serde_json::from_str(&input).unwrap_or(serde_json::Value::String(input))),
                attempts: entry.attempts,
                result,
            });
        }
        Ok(calls)
    }
}

/// Where and how a replay diverged, in words; `None` if it did not.
fn divergence(replay: &ReplayReport) -> Option<String> {
    match replay {
        ReplayReport::Diverged {
            seq: Some(seq),
            message,
        } => Some(format!(" at seq {seq}: {message}")),
        ReplayReport::Diverged { seq: None, message } => Some(format!(": {message}")),
        ReplayReport::Identical { .. } | ReplayReport::ConsistentSoFar { .. } => None,
    }
}

/// What one scenario came to.
#[derive(Debug, Clone)]
pub struct ScenarioReport {
    /// The scenario's name.
    pub name: String,
    /// The seed its completions were shuffled with, if they were.
    pub shuffle: Option<u64>,
    /// How the run ended (its last generation); `None` if it did not
    /// within the scenario's time.
    pub outcome: Option<Outcome>,
    /// Every step call, in journal order, over every generation.
    pub steps: Vec<StepCallRecord>,
    /// The values of each stream, as JSON text, in order over every
    /// generation.
    pub streams: BTreeMap<String, Vec<String>>,
    /// How many entries the journals of every generation hold together.
    pub journal_entries: usize,
    /// Each generation's replay against its own journal.
    pub replays: Vec<(RunId, ReplayReport)>,
    /// Signals due after the scenario ended, so never sent.
    pub unsent_signals: Vec<String>,
    /// The virtual time from the run's start to its end, or to the scenario's `until`.
    pub virtual_elapsed: Duration,
    /// The wall-clock time the scenario took, compiling the component included.
    pub real_elapsed: Duration,
    /// Each way the run fell short; none means the scenario passed.
    pub failures: Vec<String>,
}

impl ScenarioReport {
    fn new(scenario: &Scenario, shuffle: Option<u64>) -> Self {
        Self {
            name: scenario.name.clone(),
            shuffle,
            outcome: None,
            steps: Vec::new(),
            streams: BTreeMap::new(),
            journal_entries: 0,
            replays: Vec::new(),
            unsent_signals: Vec::new(),
            virtual_elapsed: Duration::ZERO,
            real_elapsed: Duration::ZERO,
            failures: Vec::new(),
        }
    }

    /// Whether the scenario passed: the run fell short in no way.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// The scenario's name, with the completion order it ran in if shuffled.
    pub fn title(&self) -> String {
        match self.shuffle {
            Some(seed) => format!("{} (completions shuffled, seed {seed})", self.name),
            None => self.name.clone(),
        }
    }
}

impl fmt::Display for ScenarioReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.passed() { "PASS" } else { "FAIL" };
        let ended = self
            .outcome
            .as_ref()
            .map_or_else(|| "did not finish".to_owned(), expect::describe);
        write!(
            f,
            "{verdict} {}: {ended}, after {} of virtual time ({} ms real); {} step calls, {} journal entries",
            self.title(),
            humantime::format_duration(Duration::from_millis(
                u64::try_from(self.virtual_elapsed.as_millis()).unwrap_or(u64::MAX)
            )),
            self.real_elapsed.as_millis(),
            self.steps.len(),
            self.journal_entries,
        )?;
        if !self.replays.is_empty() && self.replays.iter().all(|(_, replay)| divergence(replay).is_none()) {
            write!(f, "; replayed identically")?;
        }
        if !self.unsent_signals.is_empty() {
            write!(
                f,
                "\n  signals never sent (due after the scenario ended): {}",
                self.unsent_signals.join(", ")
            )?;
        }
        if !self.passed() {
            let steps: Vec<String> = self
                .steps
                .iter()
                .map(|step| format!("{} ({} attempts)", step.step, step.attempts))
                .collect();
            write!(f, "\n  step calls: [{}]", steps.join(", "))?;
        }
        for failure in &self.failures {
            write!(f, "\n  - {failure}")?;
        }
        Ok(())
    }
}
