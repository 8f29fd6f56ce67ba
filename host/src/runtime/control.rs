//! Reaching a run: signals, cancellation, pausing and resuming, stored for
//! the run and delivered at once through the run's bell and flags when this
//! host drives it, or through a wake-up in the store when another host does
//! (see [`crate::cluster`]). A waiting run also looks at the store at the
//! configured interval, as a backstop.
//!
//! A paused run keeps its place and its buffered signals, and starts no
//! activation and no step attempt until it is resumed: its driver meets the
//! pause when it next starts the run, at the workflow's next new durable
//! call, or before a step's next attempt; an attempt under way finishes
//! and is journaled, unless the pause stops it ([`AttemptUnderWay`]): then
//! it is dropped, or aborted once no instance of the run executes here,
//! and attempted anew once the run is resumed. A cancellation goes through
//! a pause: the run executes to end cancelled.
//!
//! Advancing a run ends its current wait (a sleep, or a signal wait's
//! timeout) now: a record beside the wait's timer, which the wait reads
//! when the run's bell rings (or its backstop poll comes) and the replay
//! reads when it meets the timer again before its deadline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{Notify, watch};

use super::{RunError, Runs};
use crate::clock::now_ms;
use crate::clock::rfc3339;
use crate::journal::{AdvanceRecord, CancelRecord, PauseRecord, Recorded, RunRecord, RunRecords, SignalRecord};
use crate::shared_map::lock;
use crate::store::{RunId, SignalId, SignalName, TenantId};
use crate::telemetry::spans;

type RunKey = (TenantId, RunId);

/// The longest reason a pause keeps, in bytes: it is stored on the run.
pub const MAX_PAUSE_REASON: usize = 1024;

/// Refuses a pause's reason longer than [`MAX_PAUSE_REASON`].
pub(super) fn check_pause_reason(reason: &str) -> Result<(), RunError> {
    match reason.len() {
        size if size > MAX_PAUSE_REASON => Err(RunError::TooLarge {
            what: "a pause's reason".into(),
            size,
            limit: MAX_PAUSE_REASON,
        }),
        _ => Ok(()),
    }
}

/// Whether a run is paused, as far as a host has heard, and what becomes
/// of a step attempt under way: it finishes and is journaled, or, if the
/// pause asked, it is stopped and made again once the run is resumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paused {
    No,
    AttemptsFinish,
    AttemptsInterrupted,
}

impl From<Option<&PauseRecord>> for Paused {
    fn from(pause: Option<&PauseRecord>) -> Self {
        match pause {
            None => Paused::No,
            Some(pause) if pause.interrupt => Paused::AttemptsInterrupted,
            Some(_) => Paused::AttemptsFinish,
        }
    }
}

/// What a pause does to a step attempt under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptUnderWay {
    /// It finishes, and its result is journaled.
    Finishes,
    /// It is stopped, and made again once the run is resumed: for a step
    /// doing harm, which must be safe to run again, as after a crash.
    Stops,
}

impl AttemptUnderWay {
    /// `Stops` if a pause asks to interrupt, else `Finishes`.
    pub fn stopped_if(interrupt: bool) -> Self {
        match interrupt {
            true => AttemptUnderWay::Stops,
            false => AttemptUnderWay::Finishes,
        }
    }
}

/// How the host reaches one run.
pub struct RunControl {
    bell: Notify,
    cancelled: watch::Sender<bool>,
    paused: watch::Sender<Paused>,
}

impl Default for RunControl {
    fn default() -> Self {
        Self {
            bell: Notify::new(),
            cancelled: watch::Sender::new(false),
            paused: watch::Sender::new(Paused::No),
        }
    }
}

impl RunControl {
    pub fn is_cancelled(&self) -> bool {
        *self.cancelled.borrow()
    }

    /// Whether the run is paused, as far as this host has heard: a
    /// cancelled run is not, since a cancellation goes through a pause.
    pub fn is_paused(&self) -> bool {
        *self.paused.borrow() != Paused::No && !self.is_cancelled()
    }

    /// Whether the run is paused by a pause that stops step attempts under way.
    pub fn interrupts_attempts(&self) -> bool {
        *self.paused.borrow() == Paused::AttemptsInterrupted && !self.is_cancelled()
    }

    /// Notes whether the run is paused, and rings its bell: a run waiting
    /// in its instance is evicted, a suspended one looks again.
    pub fn set_paused(&self, paused: Paused) {
        if self.paused.send_replace(paused) != paused {
            self.bell.notify_one();
        }
    }

    /// Resolves once the run is paused (never, once it is cancelled).
    pub async fn paused(&self) {
        if self.is_cancelled() {
            return std::future::pending().await;
        }
        // The sender lives as long as `self`, so waiting cannot fail.
        let _ = self.paused.subscribe().wait_for(|paused| *paused != Paused::No).await;
    }

    /// Resolves once the run is not paused, or is cancelled.
    pub async fn unpaused(&self) {
        let mut paused = self.paused.subscribe();
        tokio::select! {
            biased;
            _ = paused.wait_for(|paused| *paused == Paused::No) => {}
            () = self.cancelled() => {}
        }
    }

    /// Resolves once the run is cancelled.
    pub async fn cancelled(&self) {
        // The sender lives as long as `self`, so waiting cannot fail.
        let _ = self.cancelled.subscribe().wait_for(|cancelled| *cancelled).await;
    }

    /// Sleeps for `at_most`, or until the bell rings or the run is
    /// cancelled. Says whether the bell rang. Biased, so that of two ready
    /// at once the same one always wins: what follows depends on which,
    /// and a seed of the simulation must play one way.
    pub async fn nap(&self, at_most: Duration) -> bool {
        tokio::select! {
            biased;
            () = self.cancelled() => false,
            () = self.bell.notified() => true,
            () = tokio::time::sleep(at_most) => false,
        }
    }
}

/// Cancels a run at its deadline unless dropped first: held while the
/// run's instance may run, so the deadline interrupts whatever it waits on.
pub(super) struct DeadlineTimer(tokio::task::AbortHandle);

impl Drop for DeadlineTimer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The controls of the runs this host is driving.
#[derive(Default)]
pub struct Controls {
    runs: Mutex<HashMap<RunKey, Arc<RunControl>>>,
}

impl Controls {
    /// The control of a run, made on first use.
    pub fn of(&self, tenant: &TenantId, run: &RunId) -> Arc<RunControl> {
        lock(&self.runs)
            .entry((tenant.clone(), run.clone()))
            .or_default()
            .clone()
    }

    fn existing(&self, tenant: &TenantId, run: &RunId) -> Option<Arc<RunControl>> {
        lock(&self.runs).get(&(tenant.clone(), run.clone())).cloned()
    }

    /// Wakes the run if this host is driving it; a ring while it is not
    /// waiting is kept for its next wait.
    pub fn ring(&self, tenant: &TenantId, run: &RunId) {
        if let Some(control) = self.existing(tenant, run) {
            control.bell.notify_one();
        }
    }

    /// Stops the run's activation and step attempts if this host drives it.
    pub fn cancel(&self, tenant: &TenantId, run: &RunId) {
        if let Some(control) = self.existing(tenant, run) {
            control.cancelled.send_replace(true);
        }
    }

    /// Notes that the run is paused or resumed, if this host drives it (or,
    /// with `held`, will: it holds the run's claim).
    pub fn set_paused(&self, tenant: &TenantId, run: &RunId, paused: Paused, held: bool) {
        let control = if held {
            Some(self.of(tenant, run))
        } else {
            self.existing(tenant, run)
        };
        if let Some(control) = control {
            control.set_paused(paused);
        }
    }

    /// Drops the control of a run that has finished.
    pub fn forget(&self, tenant: &TenantId, run: &RunId) {
        lock(&self.runs).remove(&(tenant.clone(), run.clone()));
    }
}

/// Messages to a run from outside: signals and cancellation.
impl Runs {
    /// Sends signal `name` to a run; it is buffered until the run takes it.
    pub async fn signal(
        &self,
        tenant: &TenantId,
        run: &RunId,
        name: &SignalName,
        payload: &str,
    ) -> Result<(), RunError> {
        self.signal_with_id(tenant, run, name, payload, None).await
    }

    /// Like [`signal`](Self::signal); with the sender's `id`, sending again
    /// (say, after a crash hid whether the first send was stored) is a no-op
    /// once the signal is stored, even if the run has taken it and finished.
    /// A run that continued as new passes the signal to its chain's latest
    /// generation (the id is then that generation's to deduplicate).
    pub async fn signal_with_id(
        &self,
        tenant: &TenantId,
        run: &RunId,
        name: &SignalName,
        payload: &str,
        id: Option<&SignalId>,
    ) -> Result<(), RunError> {
        self.check_input(tenant, "the signal payload", payload)?;
        let run = &self.latest_generation(tenant, run).await?;
        let records = self.records(tenant, run);
        let record = records
            .run()
            .await?
            .ok_or_else(|| RunError::UnknownRun { run: run.clone() })?;
        let component = self.host.components.get(records.store(), &record.component).await?;
        component
            .signals
            .check(name.as_str(), payload)
            .map_err(|reason| RunError::SignalRefused {
                run: run.clone(),
                signal: name.to_string(),
                reason,
            })?;
        if let Some(id) = id
            && records.signal_stored(name, id).await?
        {
            return Ok(());
        }
        if records.outcome().await?.is_some() {
            return Err(RunError::Finished { run: run.clone() });
        }
        let limit = self.host.config.run.max_buffered_signals;
        if records.buffered_signals().await? >= limit {
            return Err(RunError::SignalsFull {
                run: run.clone(),
                limit,
            });
        }
        let signal = SignalRecord {
            payload: records
                .payload(payload.to_owned(), self.host.config.offload_payloads_above)
                .await?,
            sent_at_ms: now_ms(),
        };
        records.send_signal(name, &signal, id).await?;
        spans::link_to_run(tenant, run);
        self.wake(tenant, run).await;
        Ok(())
    }

    /// Cancels a run and, once it is cancelled, every run in its tree of
    /// children: its current step attempt is interrupted (its result, if
    /// any, discarded) and the run ends `cancelled`. Asking twice is
    /// harmless. A run that continued as new is cancelled in its chain's
    /// latest generation.
    pub async fn cancel(&self, tenant: &TenantId, run: &RunId, reason: &str) -> Result<(), RunError> {
        let run = &self.latest_generation(tenant, run).await?;
        self.cancel_one(tenant, run, reason).await?;
        self.cancel_children(tenant, run).await;
        Ok(())
    }

    /// Like [`cancel`](Self::cancel), but returns once the run itself is
    /// cancelled and cancels its children on a task of their own, so the
    /// caller does not wait for a tree of any size. A child the task does
    /// not reach (the host stops first) cancels itself when next driven,
    /// seeing its parent's cancellation.
    pub async fn cancel_in_background(&self, tenant: &TenantId, run: &RunId, reason: &str) -> Result<(), RunError> {
        let run = &self.latest_generation(tenant, run).await?;
        self.cancel_tree_with(tenant, run, cancel_record(reason, false)).await
    }

    /// Cancels a run whose deadline passed, and its tree of children, so
    /// that it ends `deadline-exceeded` after compensating as a cancelled
    /// run does.
    pub(super) async fn cancel_at_deadline(
        &self,
        tenant: &TenantId,
        run: &RunId,
        deadline_ms: u64,
    ) -> Result<(), RunError> {
        let reason = format!("the run's deadline, {}, passed", rfc3339(deadline_ms));
        tracing::info!(%run, deadline_ms, "deadline passed: cancelling the run");
        self.cancel_tree_with(tenant, run, cancel_record(&reason, true)).await
    }

    pub(super) fn deadline_timer(&self, tenant: &TenantId, run: &RunId, deadline_ms: u64) -> DeadlineTimer {
        let (runtime, tenant, run) = (self.clone(), tenant.clone(), run.clone());
        let task = crate::task::spawn(async move {
            tokio::time::sleep(Duration::from_millis(deadline_ms.saturating_sub(now_ms()))).await;
            if let Err(e) = runtime.cancel_at_deadline(&tenant, &run, deadline_ms).await {
                tracing::debug!(%run, "not cancelled at its deadline: {e}");
            }
        });
        DeadlineTimer(task.abort_handle())
    }

    pub(super) async fn cancel_tree_with(
        &self,
        tenant: &TenantId,
        run: &RunId,
        request: CancelRecord,
    ) -> Result<(), RunError> {
        self.request_cancellation(tenant, run, &request).await?;
        let (runtime, tenant, run) = (self.clone(), tenant.clone(), run.clone());
        crate::task::spawn(async move { runtime.cancel_children(&tenant, &run).await });
        Ok(())
    }

    pub(super) async fn cancel_one(&self, tenant: &TenantId, run: &RunId, reason: &str) -> Result<(), RunError> {
        self.request_cancellation(tenant, run, &cancel_record(reason, false))
            .await
    }

    async fn request_cancellation(
        &self,
        tenant: &TenantId,
        run: &RunId,
        request: &CancelRecord,
    ) -> Result<(), RunError> {
        let records = self.records_of_unfinished(tenant, run).await?;
        records.request_cancel(request).await?;
        self.host.controls.cancel(tenant, run);
        self.wake(tenant, run).await;
        Ok(())
    }

    /// The records of `run`, known and not finished: both read at once, as
    /// each is a round trip on object storage.
    async fn records_of_unfinished(&self, tenant: &TenantId, run: &RunId) -> Result<RunRecords, RunError> {
        let records = self.records(tenant, run);
        match futures::try_join!(records.run(), records.outcome())? {
            (None, _) => Err(RunError::UnknownRun { run: run.clone() }),
            (Some(_), Some(_)) => Err(RunError::Finished { run: run.clone() }),
            (Some(_), None) => Ok(records),
        }
    }

    /// Pauses a run (a run that continued as new, in its chain's latest
    /// generation): it keeps its place and its buffered signals, and starts
    /// no activation and no step attempt until [`resume`](Self::resume),
    /// on whichever host drives it; an attempt under way finishes and is
    /// journaled, unless the pause `Stops` it. Pausing a paused run keeps
    /// the first pause.
    pub async fn pause(
        &self,
        tenant: &TenantId,
        run: &RunId,
        reason: &str,
        under_way: AttemptUnderWay,
    ) -> Result<(), RunError> {
        check_pause_reason(reason)?;
        let run = &self.latest_generation(tenant, run).await?;
        let records = self.records_of_unfinished(tenant, run).await?;
        let request = PauseRecord {
            reason: reason.to_owned(),
            paused_at_ms: now_ms(),
            interrupt: under_way == AttemptUnderWay::Stops,
        };
        // The pause that stands, if one came first.
        let stands = records.request_pause(&request).await?;
        let held = self.host.cluster.holds(tenant, run);
        self.host
            .controls
            .set_paused(tenant, run, Paused::from(Some(&stands)), held);
        self.wake(tenant, run).await;
        Ok(())
    }

    /// Resumes a paused run where it stopped; resuming a run that is not
    /// paused is harmless.
    pub async fn resume(&self, tenant: &TenantId, run: &RunId) -> Result<(), RunError> {
        let run = &self.latest_generation(tenant, run).await?;
        let records = self.records_of_unfinished(tenant, run).await?;
        records.resume().await?;
        self.host.controls.set_paused(tenant, run, Paused::No, false);
        self.wake(tenant, run).await;
        Ok(())
    }

    /// Ends the run's current wait (a sleep, or a signal wait's timeout:
    /// the wait then takes no signal) now, as if its timer had run out, on
    /// whichever host drives it: for operators, and for testing by hand. A
    /// run that continued as new is advanced in its chain's latest
    /// generation. Advancing a wait twice is harmless; a run in no such
    /// wait is refused ([`RunError::NotWaiting`]).
    pub async fn advance(&self, tenant: &TenantId, run: &RunId) -> Result<Advanced, RunError> {
        let run = &self.latest_generation(tenant, run).await?;
        let records = self.records_of_unfinished(tenant, run).await?;
        let (seq, timer) = records
            .open_timer()
            .await?
            .ok_or_else(|| RunError::NotWaiting { run: run.clone() })?;
        let advanced_at_ms = now_ms();
        records.request_advance(seq, &AdvanceRecord { advanced_at_ms }).await?;
        self.wake(tenant, run).await;
        Ok(Advanced {
            run: run.clone(),
            seq,
            signal: timer.signal,
            deadline_ms: timer.deadline_ms,
            advanced_at_ms,
        })
    }

    /// Cancels every run below `root`, a level at a time, a few runs at once.
    /// A child that already ended, or whose cancellation fails, stops no
    /// other.
    async fn cancel_children(&self, tenant: &TenantId, root: &RunId) {
        let mut parents = vec![root.clone()];
        while !parents.is_empty() {
            let level = parents
                .into_iter()
                .map(|parent| async move { self.cancel_children_of(tenant, &parent).await });
            let cancelled = futures::stream::iter(level)
                .buffer_unordered(CANCELS_AT_ONCE)
                .collect::<Vec<_>>()
                .await;
            parents = cancelled.into_iter().flatten().collect();
        }
    }

    /// Cancels the children `parent`'s journal lists (in their chains'
    /// latest generations, for those that continued as new); returns the
    /// runs cancelled.
    async fn cancel_children_of(&self, tenant: &TenantId, parent: &RunId) -> Vec<RunId> {
        let entries = match self.records(tenant, parent).entries().await {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(%parent, "cannot list the children to cancel: {e}");
                return Vec::new();
            }
        };
        let children: Vec<RunId> = entries
            .into_iter()
            .filter_map(|entry| match entry.recorded {
                Recorded::Child { run: Ok(child) } => Some(child),
                _ => None,
            })
            .collect();
        let reason = format!("its parent {parent} was cancelled");
        let mut cancelled = Vec::with_capacity(children.len());
        for child in children {
            let latest = match self.latest_generation(tenant, &child).await {
                Ok(latest) => latest,
                Err(e) => {
                    tracing::debug!(%child, "child not cancelled: {e}");
                    continue;
                }
            };
            if let Err(e) = self.cancel_one(tenant, &latest, &reason).await {
                tracing::debug!(%child, "child not cancelled: {e}");
            }
            cancelled.push(latest);
        }
        cancelled
    }

    /// Whether `record`'s parent run was asked to be cancelled, so the run
    /// must be cancelled too (the task cancelling the tree may not have
    /// reached it: its host stopped).
    pub(super) async fn parent_cancelled(&self, tenant: &TenantId, record: &RunRecord) -> Result<bool, RunError> {
        match &record.parent {
            Some(parent) => Ok(self.records(tenant, parent).cancel_request().await?.is_some()),
            None => Ok(false),
        }
    }
}

/// A wait ended early by [`Runs::advance`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Advanced {
    /// The run (the chain's latest generation) whose wait ended.
    #[schema(value_type = String)]
    pub run: RunId,
    /// The durable call's seq: its entry records the wait's end.
    pub seq: u64,
    /// The signal it awaited, or none for a sleep.
    pub signal: Option<String>,
    /// When the wait would have ended, in milliseconds since the Unix epoch.
    pub deadline_ms: u64,
    /// When it was advanced, in milliseconds since the Unix epoch.
    pub advanced_at_ms: u64,
}

/// Runs a tree's cancellation writes to at once.
const CANCELS_AT_ONCE: usize = 16;

fn cancel_record(reason: &str, deadline: bool) -> CancelRecord {
    CancelRecord {
        reason: reason.to_owned(),
        requested_at_ms: now_ms(),
        deadline,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> (TenantId, RunId) {
        (TenantId::default_tenant(), RunId::new("r").expect("a valid run id"))
    }

    #[tokio::test]
    async fn a_ring_cuts_a_nap_short_even_if_it_came_first() {
        let controls = Controls::default();
        let (tenant, run) = run();
        let control = controls.of(&tenant, &run);
        controls.ring(&tenant, &run);
        let started = std::time::Instant::now();
        control.nap(Duration::from_secs(30)).await;
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn cancelling_wakes_every_waiter_and_stays_cancelled() {
        let controls = Controls::default();
        let (tenant, run) = run();
        let control = controls.of(&tenant, &run);
        let waiter = tokio::spawn({
            let control = control.clone();
            async move { control.cancelled().await }
        });
        controls.cancel(&tenant, &run);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("joined");
        assert!(control.is_cancelled());
        control.nap(Duration::from_secs(30)).await;
    }
}
