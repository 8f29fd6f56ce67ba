//! The runs of one host: each driven until it finishes or suspends, woken,
//! claimed, and ended; the state every run on the host shares ([`Host`]).
//!
//! Invariants: a run is executed only under this host's claim on it, and
//! only after admission ([`Runs::submit`] admits; nothing else creates a
//! run). An execution sees its host through an `ExecutionHost`, never the
//! whole `Host`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tracing::Instrument;

use crate::clock::now_ms;

use super::control::{Controls, Paused, RunControl};
use super::interruption::Interruption;
use super::workflow::{Mode, WorkflowProgram, WorkflowState};
use crate::byte_budget::ByteBudgetCache;
use crate::cluster::{Claim, ClaimError, Cluster, HostId, HostStop, Wakeup};
use crate::component::{CodeCache, ComponentError, Components, Loaded};
use crate::config::{HostConfig, StepLimits, WorkflowLimits};
use crate::egress::{Egress, Outbound};
use crate::guest_log::RunLog;
use crate::journal::ledger::{self, Ledger, NotedRun};
use crate::journal::{
    Abandoned, Cursor, FirstFence, JournalError, Outcome, PauseRecord, Payload, RunRecord, RunRecords, SnapshotListing,
};
use crate::metrics::Metrics;
use crate::policy::{Admission, Policies, TenantPolicy};
use crate::sandbox::{Engines, Role, StepErrorKind, classify, kind_name};
use crate::schedules::Schedules;
use crate::secrets::{Secrets, StepSecrets};
use crate::store::{
    RunId, Storage, StoreError, TenantId, runs_key, unfinished_index_complete, unfinished_key, unfinished_marker,
};
use crate::telemetry::spans;

use super::{
    Progress, Retention, RunError, RunListing, RunState, RunStatus, StepStandIn, Suspension, background, children,
    concurrency, continuation, execution_host, fresh, hooks, in_flight, logs, phantoms, restart, step_host, streams,
    usage,
};

/// What every run on this host shares.
pub(super) struct Host {
    pub(super) config: HostConfig,
    pub(super) storage: Storage,
    pub(super) components: Arc<Components>,
    pub(super) metrics: Arc<Metrics>,
    /// This host among those sharing the store: its lease and claims.
    pub(super) cluster: Arc<Cluster>,
    /// Tenants' secrets, sealed in the store.
    pub(super) secrets: Arc<Secrets>,
    /// Tenants' cron schedules, in the store.
    pub(super) schedules: Schedules,
    /// Workflow programs by component digest, within the same budget as
    /// the loaded components.
    pub(super) programs: ByteBudgetCache<String, Arc<WorkflowProgram>>,
    /// What each tenant may use.
    pub(super) policies: Arc<Policies>,
    pub(super) admission: Arc<Admission>,
    /// The tenants' components.
    pub(super) catalog: super::Catalog,
    /// What each tenant used per day, and its fuel budget.
    pub(super) usage: Arc<usage::Usage>,
    /// The tenants whose runs this host recovers, schedules it fires and
    /// notifications it sends (see [`Runtime::serve_tenants`]).
    pub(super) served: tokio::sync::watch::Sender<BTreeSet<TenantId>>,
    /// Completion hooks: the outboxes and their sender.
    pub(super) hooks: Arc<hooks::Hooks>,
    /// The sweeper of runs past their retention.
    pub(super) retention: Arc<Retention>,
    /// Rung when a place of a concurrency key is freed here.
    pub(super) place_bells: concurrency::PlaceBells,
    /// Rung when a run driven here appends to a stream, for its readers here.
    pub(super) stream_bells: Arc<streams::StreamBells>,
    /// The reads of streams open here, by tenant, within their limit.
    pub(super) stream_reads: streams::StreamReads,
    /// When each run created here was created: never twice the same.
    pub(super) creation: crate::clock::CreationClock,
    /// The notes of runs opened and ended here, batched.
    pub(super) ledger: Ledger,
    pub(super) controls: Arc<Controls>,
    pub(super) background: background::Background,
    pub(super) in_flight: Arc<in_flight::InFlightSteps>,
    pub(super) fresh: fresh::FreshRuns,
    /// The notes of runs seen open without a record, and since when.
    pub(super) phantoms: phantoms::Phantoms,
    /// What step calls see of this host.
    pub(super) steps: Arc<step_host::StepHost>,
}

/// One run being executed: its records and the components it may use.
pub(super) struct RunContext {
    /// What the execution sees of its host.
    pub(super) host: execution_host::ExecutionHost,
    pub(super) records: RunRecords,
    pub(super) own: Arc<Loaded>,
    pub(super) links: BTreeMap<String, Arc<Loaded>>,
    /// Wakes the run for a signal, or cancels it.
    pub(super) control: Arc<RunControl>,
    /// The tenant's limits for one step attempt.
    pub(super) step_limits: StepLimits,
    /// The origins the run's steps may reach over HTTP.
    pub(super) outbound: Arc<Outbound>,
    /// Its tenant's secrets, for its steps.
    pub(super) secrets: Arc<StepSecrets>,
    /// What this execution of the run logs, and may still log.
    pub(super) log: Arc<RunLog>,
    /// When the run was created: where its journal time starts.
    pub(super) started_at_ms: u64,
    /// Where the run stands in its tree of child runs (0: a root).
    pub(super) depth: u32,
    /// Its place in line for instance slots, which its steps share.
    pub(super) priority: u8,
    /// The seqs with failed attempts in the store when this execution
    /// began. Only the host driving a run records its attempts, so a step
    /// this execution starts at any other seq has none to resume: it skips
    /// reading them, which saves a store listing per step.
    pub(super) retried: HashSet<u64>,
}

impl RunContext {
    pub(super) fn tenant(&self) -> &TenantId {
        self.records.store().tenant()
    }

    /// `text` as the run's records hold it: stored apart past the host's
    /// offload threshold.
    pub(super) async fn payload(&self, text: String) -> Result<Payload, JournalError> {
        self.records.payload(text, self.host.steps.offload_payloads_above).await
    }

    /// `step`, ringing the run's bell once it has ended, so that the run,
    /// if it suspended awaiting the step, wakes.
    pub(super) fn ringing<F: Future>(&self, step: F) -> impl Future<Output = F::Output> + use<F> {
        let (controls, tenant, run) = (
            self.host.controls.clone(),
            self.tenant().clone(),
            self.records.run_id().clone(),
        );
        async move {
            let ended = step.await;
            controls.ring(&tenant, &run);
            ended
        }
    }
}

/// How many durable calls `entries` (in seq order) record: one past the
/// last seq, saturating for a foreign entry at `u64::MAX`.
pub(super) fn recorded_calls(entries: &[crate::journal::Entry]) -> u64 {
    entries.last().map_or(0, |last| last.seq.saturating_add(1))
}

/// What a drive knows the store holds for its run.
pub(super) enum Stored {
    /// Only the run record, which this host created: the run is fresh;
    /// with the fence for its first attempt, if it was read.
    RunRecordOnly(Option<FirstFence>),
    /// Whatever was read from the store; its journal's snapshots were
    /// listed with its records.
    Read(SnapshotListing),
}

impl Stored {
    pub(super) fn is_fresh(&self) -> bool {
        matches!(self, Self::RunRecordOnly(_))
    }
}

/// How an execution of a workflow ended.
pub(super) enum Ended {
    Returned(Result<String, String>),
    Interrupted(Interruption),
    Stopped(StepErrorKind, String),
}

/// The runs of this host (see the module doc): cheap to clone, the host's
/// shared state behind it. [`Runtime::runs`](super::Runtime::runs) gives it.
#[derive(Clone)]
pub struct Runs {
    pub(super) host: Arc<Host>,
}

impl Runs {
    pub(super) fn build(
        config: HostConfig,
        storage: Storage,
        cache: CodeCache,
        stand_in: Option<Arc<dyn StepStandIn>>,
    ) -> Result<Self, RunError> {
        let engines = Engines::new(&config)?;
        let egress = Arc::new(Egress::new(&config.egress)?);
        let budget = config.loaded_components_bytes;
        let components = Arc::new(Components::within(engines, cache, budget));
        let me = config.host_id.clone().unwrap_or_else(HostId::fresh);
        let cluster = Cluster::new(&storage, me, &config.lease, config.wait.wakeup_poll_interval);
        let secrets = Arc::new(Secrets::new(storage.clone()));
        let schedules = Schedules::new(storage.clone());
        let policies = Arc::new(Policies::new(TenantPolicy::default_for(&config)));
        let usage = Arc::new(usage::Usage::new(
            storage.clone(),
            cluster.me().clone(),
            policies.clone(),
        ));
        let metrics = Arc::new(Metrics::default());
        let steps = Arc::new(step_host::StepHost {
            components: components.clone(),
            usage: usage.clone(),
            metrics: metrics.clone(),
            egress: egress.clone(),
            stand_in,
            scratch_root: config.scratch_root.clone(),
            eviction_threshold: config.wait.step_eviction_threshold,
            in_flight: step_host::StepsInFlight::default(),
            offload_payloads_above: config.offload_payloads_above,
        });
        let background = background::Background::default();
        let ledger = Ledger::new(cluster.me().clone());
        let retention = Arc::new(Retention::new(
            storage.clone(),
            cluster.clone(),
            ledger.clone(),
            policies.clone(),
            background.ended.clone(),
            metrics.clone(),
        ));
        let hooks = Arc::new(hooks::Hooks::new(
            storage.clone(),
            secrets.clone(),
            policies.clone(),
            egress.clone(),
            metrics.clone(),
        ));
        let catalog = super::Catalog::new(
            storage.clone(),
            components.clone(),
            policies.clone(),
            metrics.clone(),
            schedules.clone(),
        );
        let host = Host {
            config,
            storage,
            components,
            metrics,
            cluster,
            secrets,
            schedules,
            programs: ByteBudgetCache::new(budget, 256),
            admission: Arc::new(Admission::new(policies.clone())),
            policies,
            catalog,
            usage,
            served: tokio::sync::watch::Sender::default(),
            hooks,
            retention,
            place_bells: concurrency::PlaceBells::default(),
            stream_bells: Arc::default(),
            stream_reads: streams::StreamReads::default(),
            creation: crate::clock::CreationClock::default(),
            ledger,
            controls: Arc::default(),
            background,
            in_flight: Arc::default(),
            fresh: fresh::FreshRuns::default(),
            phantoms: phantoms::Phantoms::default(),
            steps,
        };
        Ok(Self { host: Arc::new(host) })
    }

    /// The policy `tenant` is held to now.
    pub(crate) fn policy(&self, tenant: &TenantId) -> Arc<TenantPolicy> {
        self.host.policies.of(tenant)
    }

    /// The tenants served now.
    pub(super) fn served(&self) -> Vec<TenantId> {
        self.host.served.borrow().iter().cloned().collect()
    }

    /// Sees each change of the tenants served.
    pub(crate) fn served_changes(&self) -> tokio::sync::watch::Receiver<BTreeSet<TenantId>> {
        self.host.served.subscribe()
    }

    pub(crate) fn catalog(&self) -> &super::Catalog {
        &self.host.catalog
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.host.metrics
    }

    pub(crate) fn schedules(&self) -> &Schedules {
        &self.host.schedules
    }

    /// Admits a new run of `tenant`, which has `active` runs now, within
    /// its quotas (active runs, runs a minute, fuel a day), counting it
    /// against the rate: what [`submit`](Self::submit) does first.
    pub(super) async fn admit(&self, tenant: &TenantId, active: usize) -> Result<(), RunError> {
        if let Some(refusal) = self.host.usage.fuel_refusal(tenant).await? {
            return Err(refusal.into());
        }
        Ok(self.host.admission.admit(tenant, active)?)
    }

    pub(super) fn records(&self, tenant: &TenantId, run: &RunId) -> RunRecords {
        RunRecords::new(self.host.storage.tenant(tenant), run.clone())
    }

    /// Executes a run until it finishes or suspends, if no other live host
    /// drives it.
    pub async fn drive(&self, tenant: &TenantId, run: &RunId) -> Result<Progress, RunError> {
        let records = self.records(tenant, run);
        // The tenant's secrets, which the execution's context takes (read
        // again every 10 s), beside the run's records: neither needs the other.
        let secrets = async { Ok::<_, RunError>(self.host.secrets.for_steps(tenant).await?) };
        let ((record, stored, outcome), _) = futures::try_join!(self.record(&records), secrets)?;
        if let Some(outcome) = outcome {
            return Ok(Progress::Finished(outcome));
        }
        let claim = self.claim(&records, &record).await?;
        let driven = records.driven_under(claim);
        if let Stored::RunRecordOnly(Some(fence)) = stored {
            driven.stand_on(fence);
        }
        let fresh = stored.is_fresh();
        // A run just created here has no requests but those this host
        // noted on its control.
        let requests = async {
            if fresh {
                Ok((None, None))
            } else {
                futures::try_join!(driven.cancel_request(), driven.pause_request()).map_err(RunError::from)
            }
        };
        // The journal is read with the rest, but a failure to read it is
        // the execution's, told by its span like any other.
        let journal = async {
            match stored {
                Stored::RunRecordOnly(_) => Ok(Vec::new()),
                Stored::Read(snapshots) => driven.entries_from(snapshots).await,
            }
        };
        let (prepared, journal) = futures::join!(
            futures::future::try_join(self.context(driven.clone(), &record, fresh), requests),
            journal
        );
        let (context, (cancel_request, pause_request)) = prepared?;
        if cancel_request.is_none() && paused(&context.control, fresh, pause_request.as_ref()) {
            tracing::info!(%run, "the run is paused: it waits to be resumed");
            if context.control.interrupts_attempts() {
                // No instance of the run executes here now: what an earlier
                // one left running stops, to be attempted again once resumed.
                self.host.in_flight.abort_run(tenant, run);
            }
            return Ok(Progress::Suspended(
                Suspension::paused().no_later_than(record.deadline_ms, now_ms()),
            ));
        }
        if !fresh {
            if cancel_request.is_some() {
                // Cancelled while no instance ran: the workflow meets it at its
                // next wait, and may compensate before it ends.
                self.host.controls.cancel(tenant, run);
            } else if self.parent_cancelled(tenant, &record).await? {
                let reason = format!(
                    "its parent {} was cancelled",
                    record.parent.as_ref().map_or("", RunId::as_str)
                );
                self.cancel_one(tenant, run, &reason).await?;
            } else if let Some(deadline_ms) = record.deadline_ms.filter(|at| *at <= now_ms()) {
                self.cancel_at_deadline(tenant, run, deadline_ms).await?;
            }
        }
        // Held while an instance may run: cancels the run at its deadline
        // (one passed has cancelled it above, or before).
        let _deadline = record
            .deadline_ms
            .filter(|at| *at > now_ms())
            .map(|at| self.deadline_timer(tenant, run, at));
        let span = tracing::info_span!("execution", run = %run, workflow = %record.workflow);
        spans::join_run_trace(&span, tenant, run, self.host.cluster.me());
        let ending = spans::Ending::of(&span);
        let progress = async {
            let entries = match self.kept_prefix(&context.records, &record, journal?).await? {
                restart::KeptPrefix::Whole(entries) => entries,
                restart::KeptPrefix::Gone(why) => {
                    let outcome = self.end_without_prefix(&context.records, &record, why).await?;
                    return Ok(Progress::Finished(outcome));
                }
            };
            // Its first execution: a restarted run's journal begins with
            // calls another run made.
            if entries.iter().all(|entry| entry.seq < record.kept_calls()) {
                if let Some(waiting) = self.before_start(&context.records, &record).await? {
                    return Ok(waiting);
                }
                if let Some(ended) = self.take_place(&context.records, &record).await? {
                    return Ok(ended);
                }
            }
            if !entries.is_empty() {
                self.host.metrics.replayed(tenant);
                self.host.in_flight.forget_journaled(tenant, run, entries.iter().map(|entry| entry.seq));
            }
            let recorded_calls = recorded_calls(&entries);
            let records = context.records.clone();
            let log = context.log.clone();
            let control = context.control.clone();
            let ended = self.execute(context, &record, Cursor::new(entries), Mode::Live).await;
            // Stored before the outcome, so a run seen finished shows its log.
            log.close();
            logs::store(&records, &log).await;
            // Steps left running survive an eviction, for the next execution
            // to take over; any other end stops them.
            let steps_cut_short = !matches!(ended, Ok((Ended::Interrupted(Interruption::Suspend(_)), _)))
                && self.host.in_flight.abort_run(tenant, run);
            let (ended, calls) = ended?;
            let outcome = match ended {
                Ended::Returned(_) | Ended::Interrupted(Interruption::ContinueAsNew(_)) if calls < recorded_calls => failed(
                    "non-determinism",
                    format!(
                        "the workflow finished after {calls} durable calls, but the journal records {recorded_calls}: this build or run makes other calls than the one that wrote the journal"
                    ),
                ),
                Ended::Returned(Ok(output)) => match self.check_json("workflow output", &output) {
                    Ok(()) => Outcome::Completed {
                        output: records.payload(output, self.host.config.offload_payloads_above).await?,
                    },
                    Err(e @ RunError::TooLarge { .. }) => failed("output-too-large", e.to_string()),
                    Err(e) => failed("invalid-output", format!("{e}: every payload must be JSON")),
                },
                Ended::Returned(Err(message)) => failed("workflow-error", message),
                Ended::Interrupted(Interruption::Suspend(suspension)) => {
                    tracing::info!(wake_at_ms = suspension.wake_at_ms, "run suspended, instance dropped");
                    if control.interrupts_attempts() {
                        self.host.in_flight.abort_run(tenant, run);
                    }
                    records.snapshot(&self.host.config.snapshots).await;
                    let suspension = suspension.no_later_than(record.deadline_ms, now_ms());
                    return Ok(Progress::Suspended(suspension));
                }
                Ended::Interrupted(Interruption::Journal(e)) => return Err(self.journal_failure(run, e)),
                Ended::Interrupted(Interruption::ContinueAsNew(input)) => {
                    match self.continue_as_new(&records, &record, input).await? {
                        continuation::Continuing::Ended(outcome) => outcome,
                        continuation::Continuing::Waiting(suspension) => return Ok(Progress::Suspended(suspension)),
                    }
                }
                Ended::Interrupted(other) => failed(interruption_kind(&other), other.to_string()),
                Ended::Stopped(kind, message) => failed(
                    kind_name(kind),
                    activation_message(kind, &message, &self.host.config.workflow),
                ),
            };
            // However the workflow ended, a cancelled run ends cancelled;
            // one that started its next generation passes it on instead.
            let outcome = match records.cancel_request().await? {
                Some(request) if !matches!(outcome, Outcome::Continued { .. }) => request.outcome(),
                _ => outcome,
            };
            let outcome = match records.finish(&outcome).await {
                Ok(outcome) => outcome,
                Err(e) => {
                    // The next generation this one started is not driven
                    // here then: holding its creator's claim, this host
                    // would take a wake-up for it for being driven already
                    // (found by the simulation, seed 10 with seams=3: a
                    // host that lost its lease while starting the next
                    // generation held it undriven, and the host that took
                    // the chain over deferred to it).
                    if let Outcome::Continued { next } = &outcome {
                        self.host.cluster.release(tenant, next);
                    }
                    return Err(e.into());
                }
            };
            self.ended(&records, &record, &outcome).await;
            match &outcome {
                Outcome::Continued { next } => self.pass_on_cancellation(&records, next).await,
                // The parent awaits the chain's last generation, not this one.
                _ => {
                    if let Some(parent) = &record.parent {
                        self.wake(tenant, parent).await;
                    }
                }
            }
            log_finished(&outcome);
            // A step cut short may still journal: only the store knows then.
            if !steps_cut_short && !matches!(outcome, Outcome::Continued { .. }) {
                let journaled_calls = records.entries_known();
                self.ended_here(tenant, run, || {
                    RunStatus::of(record.clone(), journaled_calls, RunState::ended(outcome.clone()))
                });
            }
            Ok(Progress::Finished(outcome))
        }
        .instrument(span.clone())
        .await;
        match &progress {
            Ok(Progress::Finished(outcome)) => ending.ended(outcome.name(), outcome_failure(outcome)),
            Ok(Progress::Suspended(_)) => ending.ended("suspended", None),
            Err(e) => ending.ended("stopped", Some(e)),
        }
        progress
    }

    /// What a run that has not started yet comes to before its start time:
    /// a suspension until then, or, cancelled meanwhile, its end. `None`
    /// once it may start.
    pub(super) async fn before_start(
        &self,
        records: &RunRecords,
        record: &RunRecord,
    ) -> Result<Option<Progress>, RunError> {
        let Some(start_at_ms) = record.start_at_ms.filter(|at| *at > now_ms()) else {
            return Ok(None);
        };
        if let Some(request) = records.cancel_request().await? {
            return Ok(Some(self.end_unstarted(records, record, &request).await?));
        }
        tracing::info!(start_at_ms, "run waits for its start time");
        Ok(Some(Progress::Suspended(Suspension::until(start_at_ms))))
    }

    /// Ends a run that never executed as `request` asks.
    pub(super) async fn end_unstarted(
        &self,
        records: &RunRecords,
        record: &RunRecord,
        request: &crate::journal::CancelRecord,
    ) -> Result<Progress, RunError> {
        let outcome = records.finish(&request.clone().outcome()).await?;
        self.ended(records, record, &outcome).await;
        tracing::info!("run cancelled before it started");
        Ok(Progress::Finished(outcome))
    }

    /// What follows a run's end on the host that ended it: its claim let
    /// go, its end counted, its notification made due.
    pub(super) async fn ended(&self, records: &RunRecords, record: &RunRecord, outcome: &Outcome) {
        let tenant = records.store().tenant();
        self.host.ledger.ended(records.store(), NotedRun::of(record), now_ms());
        spans::run_ended(tenant, record, outcome, now_ms());
        self.host.cluster.release(tenant, &record.run_id);
        self.count_finished(tenant, outcome);
        self.leave_place(records.store(), record).await;
        self.host.hooks.ended(records.store(), record, outcome).await;
    }

    pub(super) fn count_finished(&self, tenant: &TenantId, outcome: &Outcome) {
        if matches!(outcome, Outcome::Failed { kind, .. } if kind == "non-determinism") {
            self.host.metrics.non_determinism(tenant);
        }
        self.host.metrics.run_finished(tenant, outcome.name());
    }

    /// Drives a run through its suspensions, waiting for its timers and
    /// signals outside any instance, until it finishes — or, with
    /// `detach_after`, until it would wait longer than that.
    pub async fn run_to_end(
        &self,
        tenant: &TenantId,
        run: &RunId,
        detach_after: Option<Duration>,
    ) -> Result<Progress, RunError> {
        let ended = self.drive_through_waits(tenant, run, detach_after).await;
        // Finished, or stopped by an error: a later drive makes a new
        // control, so none is kept for a run no one drives.
        if !matches!(ended, Ok(Progress::Suspended(_))) {
            self.host.controls.forget(tenant, run);
            self.host.cluster.release(tenant, run);
        }
        ended
    }

    pub(super) async fn drive_through_waits(
        &self,
        tenant: &TenantId,
        run: &RunId,
        detach_after: Option<Duration>,
    ) -> Result<Progress, RunError> {
        loop {
            let suspension = match self.drive(tenant, run).await? {
                Progress::Suspended(suspension) => suspension,
                finished => return Ok(finished),
            };
            let wait = Duration::from_millis(suspension.wake_at_ms.saturating_sub(now_ms()));
            // A run awaiting a step waits for it here: the step runs in
            // this process, and detaching would abandon it.
            if suspension.step.is_none() && detach_after.is_some_and(|limit| wait > limit) {
                return Ok(Progress::Suspended(suspension));
            }
            self.host.metrics.run_evicted(tenant, 1);
            let woken = self.wait_for_wake(tenant, run, &suspension).await;
            self.host.metrics.run_evicted(tenant, -1);
            woken?;
        }
    }

    pub(super) async fn wait_for_wake(
        &self,
        tenant: &TenantId,
        run: &RunId,
        suspension: &Suspension,
    ) -> Result<(), RunError> {
        let records = self.records(tenant, run);
        let poll = self.host.config.wait.signal_poll_interval;
        let control = self.host.controls.of(tenant, run);
        loop {
            let left = suspension.wake_at_ms.saturating_sub(now_ms());
            if left == 0 || control.is_cancelled() {
                return Ok(());
            }
            let advanced = async {
                match suspension.timer {
                    Some(seq) => Ok(records.advance_request(seq).await?.is_some()),
                    None => Ok::<bool, JournalError>(false),
                }
            };
            let (cancel, advanced) = futures::try_join!(records.cancel_request(), advanced)?;
            if cancel.is_some() || advanced {
                return Ok(());
            }
            // The store says when a pause ends: a resumption's wake-up may
            // be lost, never its deletion of the pause.
            if suspension.paused && records.pause_request().await?.is_none() {
                control.set_paused(Paused::No);
                return Ok(());
            }
            // A step this run awaits is stopped by its next driver here.
            if suspension.step.is_some() && control.interrupts_attempts() {
                return Ok(());
            }
            if let Some((name, taken)) = &suspension.signal
                && records.signals(name).await?.len() > *taken
            {
                return Ok(());
            }
            if let Some(child) = &suspension.child
                && self.records(tenant, child).outcome().await?.is_some()
            {
                return Ok(());
            }
            if let Some(seq) = suspension.step
                && !self.host.in_flight.is_running(tenant, run, seq)
            {
                return Ok(());
            }
            // Poll the store too: another process may signal or cancel.
            control.nap(poll.min(Duration::from_millis(left))).await;
        }
    }

    /// The runs the index of unfinished runs lists, if it is complete
    /// (every unfinished run has its marker); `None` on a store written
    /// before the index was kept. Some listed may have finished since.
    pub(super) async fn indexed_unfinished(&self, tenant: &TenantId) -> Result<Option<Vec<RunId>>, RunError> {
        let listed = self.host.storage.tenant(tenant).list(&unfinished_key()).await?;
        Ok(listed.contains(&unfinished_index_complete()).then(|| {
            listed
                .iter()
                .filter_map(|key| RunId::new(key.filename()?).ok())
                .collect()
        }))
    }

    /// Every run of the tenant that has not finished, and those whose
    /// records are corrupt (which cannot go on, and hold up no other).
    ///
    /// Read from the ledger's runs open ([`crate::journal::ledger`]), and,
    /// for runs stored before it, from the index of unfinished runs
    /// (`unfinished/{run}`): the cost grows with the runs still open, not
    /// with every run ever stored. A run found finished is noted ended (or
    /// taken off the old index); so is the note of a run never created,
    /// once this host has seen it without a record for
    /// [`ledger::PHANTOM_AFTER`] of its own clock and made sure it never
    /// will be (see [`phantoms`](super::phantoms)); and compacts the ledger
    /// when its batches are many. On a store written before either was kept,
    /// the first call builds the old index from a scan of every run; a
    /// store that takes no write then is only read (and scanned again next
    /// time).
    pub async fn unfinished(&self, tenant: &TenantId) -> Result<RunListing<RunId>, RunError> {
        let store = self.host.storage.tenant(tenant);
        let noted = ledger::open_runs(&store).await?;
        if noted.batches >= ledger::COMPACT_AT
            && let Err(e) = self.host.ledger.compact(&store).await
        {
            tracing::warn!(%tenant, "the ledger was not compacted: {e}");
        }
        let mut listing = self.unfinished_before_the_ledger(tenant).await?;
        let listed: BTreeSet<RunId> = listing.runs.iter().cloned().collect();
        let mut unrecorded = Vec::new();
        for noted in noted.runs.into_iter().filter(|noted| !listed.contains(&noted.run)) {
            let records = self.records(tenant, &noted.run);
            let stored = futures::try_join!(records.outcome(), records.stored_record()).map_err(RunError::from);
            match listing.read(&noted.run, stored)? {
                Some((None, Some(record)))
                    if record.created_at_ms == noted.created_at_ms && record.abandoned.is_none() =>
                {
                    listing.runs.push(noted.run)
                }
                // Noted open, but finished; or the note of a submission
                // whose run another submission of the id created; or of a
                // run a recovery found never created.
                Some((Some(_), _) | (None, Some(_))) => self.host.ledger.ended(&store, noted, now_ms()),
                Some((None, None)) => unrecorded.push(noted),
                None => {}
            }
        }
        for noted in self.host.phantoms.seen(tenant, unrecorded) {
            let abandoned = Abandoned {
                by: self.host.cluster.me().clone(),
                at_ms: now_ms(),
            };
            if self
                .records(tenant, &noted.run)
                .settle_phantom(&noted, abandoned)
                .await?
            {
                tracing::warn!(%tenant, run = %noted.run, created_at_ms = noted.created_at_ms, "a run noted open was never created (its submission stopped before it stored the run's record): noted ended, and its creation can no longer happen");
                self.host.ledger.ended(&store, noted, now_ms());
            } else {
                listing.runs.push(noted.run);
            }
        }
        Ok(listing)
    }

    /// The unfinished runs stored before the ledger, from the index of them
    /// (see [`unfinished`](Self::unfinished)).
    async fn unfinished_before_the_ledger(&self, tenant: &TenantId) -> Result<RunListing<RunId>, RunError> {
        let store = self.host.storage.tenant(tenant);
        let (indexed, candidates) = match self.indexed_unfinished(tenant).await? {
            Some(listed) => (true, listed),
            None => (false, self.run_ids(tenant).await?),
        };
        let mut listing = RunListing::default();
        // A store with no run has nothing to index yet: it stays unwritten.
        let mut index_written = !candidates.is_empty();
        for run in candidates {
            let records = self.records(tenant, &run);
            // Only an unfinished run is checked for its record: see `run_ids`.
            let open: Result<Option<bool>, RunError> = async {
                Ok(match records.outcome().await? {
                    Some(_) => Some(false),
                    None => records.run().await?.map(|_| true),
                })
            }
            .await;
            match listing.read(&run, open)?.flatten() {
                Some(true) if indexed => listing.runs.push(run),
                Some(true) => {
                    index_written &= index(&store, &unfinished_marker(&run)).await;
                    listing.runs.push(run);
                }
                Some(false) if indexed => records.unlist(now_ms()).await,
                _ => {}
            }
        }
        if !indexed && index_written {
            index(&store, &unfinished_index_complete()).await;
        }
        Ok(listing)
    }

    /// The ids of every run folder, including one whose run record was never
    /// written (its submission crashed mid-write, leaving only the store's
    /// staging file): that one is no run, and callers skip it.
    pub(super) async fn run_ids(&self, tenant: &TenantId) -> Result<Vec<RunId>, RunError> {
        let names = self.host.storage.tenant(tenant).children(&runs_key()).await?;
        Ok(names.iter().filter_map(|name| RunId::new(name).ok()).collect())
    }

    /// The run's record, what the store is known to hold for the run, and
    /// the outcome stored, if any. The record is read beside a listing of
    /// the run's keys, which `records` and its clones then answer the
    /// execution's first reads from (see `journal::read_ahead`): on object
    /// storage each read is a round trip. The run's bell exists from
    /// before the listing, so a ring for what is stored after it wakes the
    /// run's next wait.
    pub(super) async fn record(&self, records: &RunRecords) -> Result<(RunRecord, Stored, Option<Outcome>), RunError> {
        let (tenant, run) = (records.store().tenant(), records.run_id());
        if let Some(fresh) = self.host.fresh.take(tenant, run) {
            return Ok((fresh.record, Stored::RunRecordOnly(fresh.first_fence), None));
        }
        self.host.controls.of(tenant, run);
        let (record, ()) = futures::try_join!(records.run(), records.read_ahead())?;
        let record = record.ok_or_else(|| RunError::UnknownRun { run: run.clone() })?;
        let (outcome, snapshots) = futures::try_join!(records.outcome(), records.snapshots())?;
        if outcome.is_some() {
            // No one drives a finished run: its bell goes.
            self.host.controls.forget(tenant, run);
        }
        Ok((record, Stored::Read(snapshots), outcome))
    }

    /// Joins the hosts sharing the store, if this one has not yet, and
    /// says which generation of its lease holds: what a run is claimed, or
    /// created, under.
    pub async fn live(&self) -> Result<u64, RunError> {
        let generation = self.host.cluster.live().await?;
        if let Some(queue) = self.host.cluster.take_wakeups() {
            crate::task::spawn(handle_wakeups(Arc::downgrade(&self.host), queue));
        }
        Ok(generation)
    }

    /// Says why, once this host stops driving runs: it left, or another
    /// process writes its heartbeat (then a server exits).
    pub fn stopped(&self) -> tokio::sync::watch::Receiver<Option<HostStop>> {
        self.host.cluster.stopped()
    }

    /// Takes this host out of the hosts sharing the store, once the notes
    /// it made in the ledger are stored: it drives nothing more, and its
    /// runs can be taken over at once.
    pub async fn leave(&self) {
        self.host.ledger.settle().await;
        self.host.cluster.leave().await;
    }

    /// This host's claim on `record`'s run: see [`Cluster::claim`].
    pub(super) async fn claim(&self, records: &RunRecords, record: &RunRecord) -> Result<Claim, RunError> {
        self.live().await?;
        self.host
            .cluster
            .claim(records.store(), record)
            .await
            .map_err(|e| match e {
                ClaimError::Owned { host } => RunError::DrivenElsewhere {
                    run: record.run_id.clone(),
                    host,
                },
                ClaimError::Deleting => RunError::UnknownRun {
                    run: record.run_id.clone(),
                },
                ClaimError::Exhausted { claims } => RunError::ClaimedTooOften {
                    run: record.run_id.clone(),
                    claims,
                },
                ClaimError::Store(e) => e.into(),
                ClaimError::Record(e) => e.into(),
                ClaimError::Live(e) => e.into(),
            })
    }

    /// Wakes `run` wherever it is driven: here through its bell, and on
    /// another live host through a wake-up left for it in the store. A
    /// failure is only logged: the run finds the news at its next look.
    pub(super) async fn wake(&self, tenant: &TenantId, run: &RunId) {
        self.host.controls.ring(tenant, run);
        if self.host.cluster.holds(tenant, run) {
            return;
        }
        let cluster = &self.host.cluster;
        let records = self.records(tenant, run);
        let woken = async {
            let Some(record) = records.run().await? else {
                return Ok(());
            };
            match cluster.owner(records.store(), &record).await?.host {
                Some(host) if host != *cluster.me() && !cluster.is_dead(&host).await? => {
                    tracing::debug!(%run, %host, "left a wake-up for the host driving the run");
                    Ok(cluster.wake(&host, tenant, run).await?)
                }
                _ => Ok::<(), RunError>(()),
            }
        };
        if let Err(e) = woken.await {
            tracing::warn!(%run, "could not wake the run on the host driving it; it finds the news at its next look: {e}");
        }
    }

    /// The components `record`'s run uses, loaded, and all else an
    /// execution needs; `fresh` for a run of which only the run record is
    /// stored.
    pub(super) async fn context(
        &self,
        records: RunRecords,
        record: &RunRecord,
        fresh: bool,
    ) -> Result<Arc<RunContext>, RunError> {
        let store = records.store().clone();
        let own = self.host.components.get(&store, &record.component).await?;
        let mut links = BTreeMap::new();
        for (name, digest) in &record.links {
            links.insert(name.clone(), self.host.components.get(&store, digest).await?);
        }
        let control = self.host.controls.of(store.tenant(), &record.run_id);
        let policy = self.policy(store.tenant());
        let step_limits = policy.steps.lowered_by(&record.limits);
        let outbound = policy.outbound.clone();
        let secrets = self.host.secrets.for_steps(store.tenant()).await?;
        // A fresh run has no failed attempts to list.
        let retried = if fresh {
            HashSet::new()
        } else {
            records.retries().await?.into_iter().map(|(seq, _)| seq).collect()
        };
        let context = RunContext {
            host: self.execution_host(),
            records,
            own,
            links,
            control,
            step_limits,
            outbound,
            secrets,
            log: Arc::new(RunLog::new(self.host.config.run.max_log_bytes)),
            started_at_ms: record.created_at_ms,
            depth: record.depth,
            priority: record.priority,
            retried,
        };
        Ok(Arc::new(context))
    }

    pub(super) async fn program(&self, loaded: &Loaded) -> Result<Arc<WorkflowProgram>, RunError> {
        if let Some(program) = self.host.programs.get(&loaded.digest) {
            return Ok(program);
        }
        let component = self.host.components.workflow(loaded).await?;
        let program =
            WorkflowProgram::new(self.host.components.engines().get(Role::Workflow), &component).map_err(|e| {
                ComponentError::Compile {
                    digest: loaded.digest.clone(),
                    role: Role::Workflow,
                    reason: format!("{e:#}"),
                }
            })?;
        let program = Arc::new(program);
        self.host
            .programs
            .insert(loaded.digest.clone(), program.clone(), loaded.size());
        Ok(program)
    }

    /// Runs the workflow from the start against `cursor`; returns how it
    /// ended and the seq its calls reached (see [`Cursor::end`]).
    pub(super) async fn execute(
        &self,
        context: Arc<RunContext>,
        record: &RunRecord,
        cursor: Cursor,
        mode: Mode,
    ) -> Result<(Ended, u64), RunError> {
        let program = self.program(&context.own).await?;
        let input = context.records.payload_text(record.input.clone()).await?;
        let tenant = context.tenant().clone();
        let _slot = (self.host.components.engines())
            .slot(Role::Workflow, &tenant, record.priority)
            .await;
        let state = WorkflowState::new(context, cursor, mode, self.host.config.workflow);
        let instance_error = |e: wasmtime::Error| RunError::Instance {
            run: record.run_id.clone(),
            reason: format!("{e:#}"),
        };
        let mut store = program.store(state).map_err(instance_error)?;
        let ended = match program.run(&mut store, &record.workflow, &input).await {
            Ok(result) => Ended::Returned(result),
            Err(e) => match e.downcast_ref::<Interruption>() {
                Some(interruption) => Ended::Interrupted(interruption.clone()),
                None => {
                    let (kind, message) = classify(&e, crate::sandbox::Sandboxed::guard(store.data_mut()));
                    Ended::Stopped(kind, message)
                }
            },
        };
        Ok((ended, store.data_mut().cursor.end()))
    }

    /// What an execution of a run sees of this host.
    pub(super) fn execution_host(&self) -> execution_host::ExecutionHost {
        let host = &self.host;
        execution_host::ExecutionHost {
            wait: host.config.wait,
            run_limits: host.config.run,
            workflow_limits: host.config.workflow,
            components: host.components.clone(),
            steps: host.steps.clone(),
            in_flight: host.in_flight.clone(),
            controls: host.controls.clone(),
            stream_bells: host.stream_bells.clone(),
            admission: host.admission.clone(),
            children: children::ChildRuns::new(self.clone()),
        }
    }

    pub(super) fn journal_failure(&self, run: &RunId, error: Arc<JournalError>) -> RunError {
        match &*error {
            JournalError::Store(StoreError::AlreadyExists { .. }) => RunError::Conflict { run: run.clone() },
            _ => RunError::Journal(error),
        }
    }
}

/// Whether a run about to be driven, and not cancelled, is paused: as the
/// store says (when it was read), else as this host noted.
fn paused(control: &RunControl, fresh: bool, stored: Option<&PauseRecord>) -> bool {
    if !fresh {
        control.set_paused(stored.into());
    }
    control.is_paused()
}

/// Hands the wake-ups other hosts leave to the runs they are for, until the
/// host is gone: a cancellation stops the run's attempt here, a pause or a
/// resumption is noted, and any news rings its bell.
async fn handle_wakeups(host: std::sync::Weak<Host>, mut queue: tokio::sync::mpsc::Receiver<Wakeup>) {
    while let Some(Wakeup { tenant, run }) = queue.recv().await {
        let Some(host) = host.upgrade() else { return };
        let runtime = Runs { host };
        let records = runtime.records(&tenant, &run);
        let (cancel, pause) = futures::join!(records.cancel_request(), records.pause_request());
        match cancel {
            Ok(Some(_)) => runtime.host.controls.cancel(&tenant, &run),
            Ok(None) => {}
            Err(e) => tracing::warn!(%run, "cannot read whether the woken run was cancelled: {e}"),
        }
        match pause {
            Ok(pause) => runtime
                .host
                .controls
                .set_paused(&tenant, &run, pause.as_ref().into(), false),
            Err(e) => tracing::warn!(%run, "cannot read whether the woken run was paused: {e}"),
        }
        runtime.host.controls.ring(&tenant, &run);
        // One this host holds no claim on was left to it, by another
        // process that stopped under its id (see `hand_over`): driving it
        // claims it, unless a live host holds it. One it holds is driven
        // here already (in the background, or by a caller in the
        // foreground, as `stepstone run` does).
        let held = runtime.host.cluster.holds(&tenant, &run);
        tracing::debug!(%run, held, "woken by another host");
        if !held {
            runtime.drive_in_background(&tenant, &run);
        }
    }
}

/// Writes a marker of the unfinished-runs index; whether it was written.
async fn index(store: &crate::store::TenantStore, marker: &crate::store::StoreKey) -> bool {
    match store.overwrite(marker, Bytes::new()).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("cannot index the unfinished runs, so the next recovery scans every run again: {e}");
            false
        }
    }
}

pub(super) fn failed(kind: &str, message: String) -> Outcome {
    Outcome::Failed {
        kind: kind.into(),
        message,
    }
}

/// Longest output or message a `run finished` line shows, in bytes.
const LOGGED_TEXT: usize = 1024;

/// Logs how a run ended, in words and a field per part: the outcome, and
/// the output (as JSON text), the failure's kind and why, the reason for
/// cancelling, or the next generation (each text cut to [`LOGGED_TEXT`]
/// bytes).
fn log_finished(outcome: &Outcome) {
    pub(super) fn cut(text: &str) -> &str {
        &text[..text.floor_char_boundary(LOGGED_TEXT)]
    }
    let (mut output, mut kind, mut reason, mut next) = (None, None, None, None);
    match outcome {
        Outcome::Completed {
            output: Payload::Inline(text),
        } => output = Some(cut(text).to_owned()),
        Outcome::Completed { output: stored } => output = Some(stored.to_string()),
        Outcome::Failed { kind: failed, message } => (kind, reason) = (Some(failed.as_str()), Some(cut(message))),
        Outcome::Cancelled { reason: why } => reason = Some(cut(why)),
        Outcome::Continued { next: run } => next = Some(run.as_str()),
    }
    let output = output.as_deref().map(tracing::field::display);
    tracing::info!(outcome = outcome.name(), output, kind, reason, next, "run finished");
}

/// A run that ended failed, as its span's error says it.
fn outcome_failure(outcome: &Outcome) -> Option<&dyn std::fmt::Display> {
    matches!(outcome, Outcome::Failed { .. }).then_some(outcome as &dyn std::fmt::Display)
}

fn interruption_kind(interruption: &Interruption) -> &'static str {
    match interruption {
        Interruption::NonDeterminism(_) => "non-determinism",
        Interruption::HostLimit(_) => "host-limit",
        _ => "invalid-call",
    }
}

/// Says what a stopped workflow activation means for its author, naming
/// the budget it ran past.
fn activation_message(kind: StepErrorKind, detail: &str, limits: &WorkflowLimits) -> String {
    let budget = match kind {
        StepErrorKind::FuelExhausted => format!("{} fuel", limits.activation_fuel),
        StepErrorKind::TimedOut => format!("{:?}", limits.activation_timeout),
        _ => return format!("the workflow instance stopped: {detail}"),
    };
    format!(
        "the workflow ran past its budget of {budget} between two durable calls ({detail}): a workflow must not loop without calling the host; move long work into a step"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::ledger::ListedRun;
    use crate::runtime::Runtime;
    use crate::store::FaultConfig;

    /// A runtime on an in-memory store of the ledger's time (no run stored
    /// before it to scan for), the default tenant's store and the ledger.
    async fn on_the_ledger() -> Result<(Runtime, TenantId, crate::store::TenantStore, Ledger), RunError> {
        let storage = Storage::in_memory();
        let tenant = TenantId::default_tenant();
        let store = storage.tenant(&tenant);
        let runtime = Runtime::new(HostConfig::new(), storage, CodeCache::disabled())?;
        let ledger = runtime.runs().host.ledger.clone();
        store.overwrite(&unfinished_index_complete(), Bytes::new()).await?;
        Ok((runtime, tenant, store, ledger))
    }

    /// Recovery notes ended every run the ledger holds open that is not:
    /// one finished, and the note of a submission whose run id another
    /// submission created (another creation time); it lists the open run.
    /// A note without a record is left open however old its creation time
    /// (the creator's clock may be hours behind this host's), and the
    /// record its submission stores later is listed (issue 55, path 2:
    /// it was noted ended at once, and a crash of its creator lost it).
    #[tokio::test]
    async fn recovery_notes_ended_what_the_ledger_holds_open_in_vain() -> Result<(), RunError> {
        let (runtime, tenant, store, ledger) = on_the_ledger().await?;
        let now = now_ms();
        let stored = |run: &str, created_at_ms| RunRecord::example(run, created_at_ms);
        for record in [stored("finished", now), stored("open", now), stored("reused", now)] {
            ledger.opened(&store, ListedRun::of(&record)).await?;
            RunRecords::new(store.clone(), record.run_id.clone())
                .create_record(&record)
                .await?;
        }
        let finished = RunRecords::new(store.clone(), RunId::new("finished").expect("an id"));
        finished.finish(&Outcome::Completed { output: "1".into() }).await?;
        let noted = |run: &str, created_at_ms| NotedRun::of(&stored(run, created_at_ms));
        let behind = stored("clock-behind", now - 2 * crate::clock::millis(ledger::PHANTOM_AFTER));
        for note in [stored("reused", now - 5), behind.clone()] {
            ledger.opened(&store, ListedRun::of(&note)).await?;
        }

        let listed = runtime.runs().unfinished(&tenant).await?.runs;
        assert_eq!(
            listed,
            [RunId::new("open").expect("an id"), RunId::new("reused").expect("an id")]
        );
        let left_open = [noted("open", now), noted("reused", now), NotedRun::of(&behind)];
        ledger.settle().await;
        assert_eq!(ledger::open_runs(&store).await?.runs, BTreeSet::from(left_open));

        RunRecords::new(store.clone(), behind.run_id.clone())
            .create_record(&behind)
            .await?;
        let listed = runtime.runs().unfinished(&tenant).await?.runs;
        assert!(
            listed.contains(&behind.run_id),
            "its record, stored late, is listed: {listed:?}"
        );
        Ok(())
    }

    /// A note this host saw without a record for PHANTOM_AFTER of its own
    /// clock is settled: the run's record is stored as abandoned and the
    /// note ended, so its creation, were it still under way, fails, and a
    /// submission under the id is told the run was given up. A note whose
    /// record is stored before that is listed, never settled.
    #[tokio::test(start_paused = true)]
    async fn a_note_seen_without_a_record_for_an_hour_of_this_hosts_clock_is_settled() -> Result<(), RunError> {
        let _virtual = crate::clock::VirtualTime::start(1_800_000_000_000);
        let (runtime, tenant, store, ledger) = on_the_ledger().await?;
        let (phantom, late) = (
            RunRecord::example("phantom", now_ms()),
            RunRecord::example("late", now_ms()),
        );
        for note in [&phantom, &late] {
            ledger.opened(&store, ListedRun::of(note)).await?;
        }
        assert_eq!(runtime.runs().unfinished(&tenant).await?.runs, Vec::<RunId>::new());
        tokio::time::sleep(ledger::PHANTOM_AFTER / 2).await;
        RunRecords::new(store.clone(), late.run_id.clone())
            .create_record(&late)
            .await?;
        runtime.runs().unfinished(&tenant).await?;
        tokio::time::sleep(ledger::PHANTOM_AFTER / 2).await;

        assert_eq!(
            runtime.runs().unfinished(&tenant).await?.runs,
            vec![late.run_id.clone()]
        );
        ledger.settle().await;
        assert_eq!(
            ledger::open_runs(&store).await?.runs,
            BTreeSet::from([NotedRun::of(&late)])
        );
        let records = RunRecords::new(store.clone(), phantom.run_id.clone());
        assert!(records.run().await?.is_none(), "no run of it");
        let created = records.create_record(&phantom).await;
        assert!(
            matches!(created, Err(JournalError::Store(StoreError::AlreadyExists { .. }))),
            "its creation, late, fails: {created:?}"
        );
        let kept = records.stored_record().await?.expect("the abandoned record");
        assert_eq!(
            kept.abandoned.map(|abandoned| abandoned.by),
            Some(runtime.runs().host.cluster.me().clone())
        );
        Ok(())
    }

    /// A host that leaves cleanly while the ends of its runs are still
    /// being noted (one batch in flight on a slow store, more forming)
    /// leaves none of them noted open: `leave` returns once they are stored.
    #[tokio::test]
    async fn a_host_leaving_mid_batch_leaves_no_run_it_ended_noted_open() -> Result<(), RunError> {
        let (storage, tenant) = (Storage::in_memory(), TenantId::default_tenant());
        // The cluster's part of a store is not slowed: leaving is quick.
        let (slowed, faults) = storage.clone().with_faults(FaultConfig::default());
        let runtime = Runtime::new(HostConfig::new(), slowed.clone(), CodeCache::disabled())?;
        let (ledger, store) = (runtime.runs().host.ledger.clone(), slowed.tenant(&tenant));
        let runs: Vec<RunRecord> = (0..3).map(|n| RunRecord::example(&format!("r{n}"), now_ms())).collect();
        for record in &runs {
            ledger.opened(&store, ListedRun::of(record)).await?;
        }
        faults.set_config(FaultConfig {
            latency: Duration::from_millis(300),
            ..FaultConfig::default()
        });
        let before = ledger::open_runs(&storage.tenant(&tenant)).await?.batches;
        for (n, record) in runs.iter().enumerate() {
            ledger.ended(&store, NotedRun::of(record), now_ms());
            if n == 0 {
                // The writer takes the first end and is slowed storing it.
                tokio::task::yield_now().await;
            }
        }
        runtime.runs().leave().await;
        let open = ledger::open_runs(&storage.tenant(&tenant)).await?;
        assert_eq!(open.runs, BTreeSet::new(), "every end stored before leaving");
        assert_eq!(open.batches, before + 2, "one batch in flight, one forming behind it");
        Ok(())
    }
}
