//! The `durable` interface, as the host implements it: every call takes the
//! next seq; a call the journal has is answered from it, any other is
//! carried out and journaled before the workflow sees its result.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, TryFutureExt};

use super::cancellation::cancelled_step;
use super::in_flight::RunningStep;
use super::interruption::{Interruption, Suspension};
use super::step_call::{self, StepCall};
use super::workflow::{Mode, StartedStep, StepDone, StepResult, StepUnfinished, WorkflowState};
use crate::clock::now_ms;
use crate::config::{HttpLimitRequest, LimitRequest};
use crate::contract::bindings::stepstone::workflow::{durable, types};
use crate::contract::bindings::{LogLevel, StepError, StepOptions};
use crate::journal::{Call, CallKind, Entry, JournalError, PatchMark, Payload, Recorded};
use crate::store::{SignalName, StreamName};
use crate::telemetry::spans;

type Trappable<T> = wasmtime::Result<T>;

/// A step call once [started](WorkflowState::start), under its handle (its
/// seq).
enum Started {
    /// Live, or taken over, or unrecorded in verify mode: awaited through
    /// [`WorkflowState::finish`].
    Live(u32),
    /// Its result is in the journal: no future, nothing kept, for a replay
    /// of an awaited call costs only the lookup.
    Replayed { handle: u32, call: Call, done: StepDone },
}

impl Started {
    fn replayed(handle: u32, call: Call, result: Result<String, StepError>, finished_at_ms: u64) -> Self {
        let done = StepDone { result, finished_at_ms };
        Self::Replayed { handle, call, done }
    }
}

/// Where a live step call runs.
#[derive(Clone, Copy)]
enum Launch {
    /// On a task of its own, so that it progresses while the workflow goes
    /// on (`start-step`).
    Task,
    /// On the workflow's own task, polled while the workflow awaits it: for
    /// `call-step`, which awaits it at once. Saves a hand-off between
    /// tokio's worker threads, which was half the cost of a trivial step.
    /// The step still runs in a store and fiber of its own.
    Awaited,
}

impl types::Host for WorkflowState {}

impl WorkflowState {
    /// Takes the next seq for `call`; returns the recorded result if the
    /// journal has one, fails in verify mode if it does not.
    /// A recorded result reaches the guest now, so the run's clock moves to
    /// its entry's time (see [`JournalClock`](crate::sandbox::JournalClock)).
    pub(super) fn next_call(&mut self, call: &Call) -> Result<(u64, Option<Recorded>), Interruption> {
        let (seq, recorded) = self.take_seq(call)?;
        if recorded.is_none() && self.mode == Mode::Verify {
            return Err(Interruption::JournalEnd { seq });
        }
        let recorded = recorded.map(|(recorded, finished_at_ms)| {
            self.clock.observe(finished_at_ms);
            recorded
        });
        Ok((seq, recorded))
    }

    /// Like [`next_call`](Self::next_call), but a call the journal lacks is
    /// no error in verify mode (a step started and never awaited may have
    /// been dropped unrecorded when its run ended).
    /// The recorded result comes with the time its entry finished.
    fn take_seq(&mut self, call: &Call) -> Result<(u64, Option<(Recorded, u64)>), Interruption> {
        let limit = self.run.host.run_limits.max_journal_entries;
        let (seq, entry) = self.cursor.next(call)?;
        // A paused run makes no new call: it suspends before it, to go on
        // from there once resumed.
        if entry.is_none() && self.mode == Mode::Live && self.run.control.is_paused() {
            return Err(Interruption::Suspend(Suspension::paused()));
        }
        let recorded = entry.map(|entry| (entry.recorded, entry.finished_at_ms));
        // After `next`, which may have passed over patch markers.
        if seq >= limit {
            return Err(Interruption::HostLimit(format!(
                "the run reached the host's limit of {limit} durable calls: split its work into child workflows"
            )));
        }
        self.end_activation();
        self.mute_replayed_output();
        Ok((seq, recorded))
    }

    pub(super) async fn append(
        &mut self,
        seq: u64,
        call: Call,
        recorded: Recorded,
        started_at_ms: u64,
    ) -> Result<(), Interruption> {
        let entry = Entry {
            seq,
            call,
            recorded,
            attempts: 1,
            started_at_ms,
            finished_at_ms: now_ms(),
            last_attempt_started_at_ms: None,
        };
        self.run.records.append(&entry).await?;
        self.clock.observe(entry.finished_at_ms);
        spans::journaled(self.run.tenant(), self.run.records.run_id(), &entry);
        Ok(())
    }

    /// Refuses a payload over the limit; `what` names it in the refusal.
    pub(super) fn check_payload(&self, payload: &str, what: impl FnOnce() -> String) -> Result<(), Interruption> {
        let limit = self.run.host.workflow_limits.max_payload_bytes;
        if payload.len() > limit {
            return Err(Interruption::InvalidCall(format!(
                "{} of {} bytes exceeds the payload limit of {limit} bytes",
                what(),
                payload.len()
            )));
        }
        Ok(())
    }

    /// Takes the step call's seq and starts it: from its journaled result
    /// when there is one, else live, where `launch` says.
    async fn start(
        &mut self,
        step: String,
        input: String,
        options: StepOptions,
        http: HttpLimitRequest,
        launch: Launch,
    ) -> Result<Started, Interruption> {
        self.check_payload(&input, || format!("input of step `{step}`"))?;
        let call = Call::new(CallKind::Step, &step, input.as_bytes());
        let (seq, recorded) = self.take_seq(&call)?;
        let handle = u32::try_from(seq).map_err(|_| Interruption::InvalidCall("journal too long".into()))?;
        let result: Shared<BoxFuture<'static, StepResult>> = match recorded {
            Some((Recorded::Step { result }, at)) => {
                // A stored output is read only now, as the workflow reaches its call.
                let result = match result {
                    Ok(output) => Ok(self.run.records.payload_text(output).await?),
                    Err(error) => Err(error),
                };
                return Ok(Started::replayed(handle, call, result, at));
            }
            Some((Recorded::Cancelled { reason }, at)) => {
                return Ok(Started::replayed(handle, call, Err(cancelled_step(reason)), at));
            }
            Some((other, _)) => return Err(Interruption::mismatch(seq, other)),
            None if self.mode == Mode::Verify => {
                self.steps.insert(handle, StartedStep::Unrecorded);
                return Ok(Started::Live(handle));
            }
            None if self.take_over(handle, seq, &call) => return Ok(Started::Live(handle)),
            None => {
                let target = Box::pin(self.run.resolve_step(&step)).await?;
                let asked = LimitRequest {
                    fuel: options.fuel,
                    timeout_ms: options.timeout_ms,
                    ..LimitRequest::default()
                };
                let mut limits = self.run.step_limits.lowered_by(&asked);
                limits.http = limits.http.lowered_by(&http);
                // A step called as `component/step` reads that component's secrets.
                let secrets = self
                    .run
                    .secrets
                    .for_component(step.split_once('/').map(|(component, _)| component));
                let step = StepCall {
                    seq,
                    call: call.clone(),
                    target,
                    input,
                    options,
                    limits,
                    log: self.run.log.clone(),
                    outbound: self.run.outbound.clone(),
                    secrets,
                    resumes_attempts: self.run.retried.contains(&seq),
                    priority: self.run.priority,
                    control: self.run.control.clone(),
                };
                self.launch(handle, step, launch)
            }
        };
        self.steps.insert(handle, StartedStep::Running { result, call });
        Ok(Started::Live(handle))
    }

    /// Starts a step call whose handle the guest awaits later
    /// (`start-step`); a replayed one waits there with its journaled result.
    async fn start_awaitable(
        &mut self,
        step: String,
        input: String,
        options: StepOptions,
        http: HttpLimitRequest,
    ) -> Result<u32, Interruption> {
        match self.start(step, input, options, http, Launch::Task).await? {
            Started::Live(handle) => Ok(handle),
            Started::Replayed { handle, call, done } => {
                let result = futures::future::ready(Ok(done)).boxed().shared();
                self.steps.insert(handle, StartedStep::Running { result, call });
                Ok(handle)
            }
        }
    }

    /// Starts the live step call `step` where `launch` says: on the
    /// workflow's task, or on a task of its own, registered in flight so
    /// that it outlives an eviction.
    fn launch(&mut self, handle: u32, step: StepCall, launch: Launch) -> Shared<BoxFuture<'static, StepResult>> {
        let (seq, call) = (step.seq, step.call.clone());
        let execution = step_call::execute(self.run.host.steps.clone(), self.run.records.clone(), step);
        let execution = tracing::Instrument::in_current_span(execution);
        if let Launch::Awaited = launch {
            return execution.boxed().shared();
        }
        let task = crate::task::spawn(self.run.ringing(execution));
        let abort = task.abort_handle();
        let result = task
            .map(|joined| {
                joined.unwrap_or_else(|e| {
                    Err(StepUnfinished::Journal(Arc::new(JournalError::TaskFailed(
                        e.to_string(),
                    ))))
                })
            })
            .boxed()
            .shared();
        let running = RunningStep {
            call,
            incarnation: self.incarnation(),
            result: result.clone(),
            task: abort.clone(),
        };
        let (tenant, run) = (self.run.tenant(), self.run.records.run_id());
        self.run.host.in_flight.insert(tenant, run, seq, running);
        self.running.insert(handle, abort);
        result
    }

    /// The incarnation of the run this execution drives, as its claim's
    /// epoch counts it.
    fn incarnation(&self) -> u64 {
        crate::cluster::incarnation_of(self.run.records.epoch())
    }

    /// Takes over the step an earlier execution of this run started at
    /// `seq` and left running when it was evicted, if there is one: the
    /// step must not run twice.
    fn take_over(&mut self, handle: u32, seq: u64, call: &Call) -> bool {
        let in_flight = &self.run.host.in_flight;
        let run = self.run.records.run_id();
        let Some(step) = in_flight.take_over(self.run.tenant(), run, seq, (call, self.incarnation())) else {
            return false;
        };
        tracing::info!(seq, step = %call.name, "taking over the step an evicted execution started");
        self.running.insert(handle, step.task);
        self.steps.insert(
            handle,
            StartedStep::Running {
                result: step.result,
                call: call.clone(),
            },
        );
        true
    }

    /// The step started with `handle`, as a future of its result.
    fn started(&self, handle: u32) -> Result<Shared<BoxFuture<'static, StepResult>>, Interruption> {
        match self.steps.get(&handle) {
            Some(StartedStep::Running { result, .. }) => Ok(result.clone()),
            Some(StartedStep::Unrecorded) => Err(Interruption::JournalEnd { seq: u64::from(handle) }),
            None => Err(Interruption::InvalidCall(format!(
                "no step was started with handle {handle}"
            ))),
        }
    }

    async fn finish(&mut self, handle: u32) -> Result<Result<String, StepError>, Interruption> {
        let step = self.started(handle)?;
        let eviction = tokio::time::sleep(self.run.host.wait.step_eviction_threshold);
        // Biased: a result ready when the threshold passes is taken, the
        // same way every time (a seed of the simulation plays one way).
        let result = if self.cancellation_seen {
            tokio::select! {
                biased;
                result = step.clone() => result,
                () = eviction => return Err(self.evict_awaiting(handle, step)),
                () = self.run.control.paused() => return Err(self.paused_awaiting(handle, step)),
            }
        } else {
            tokio::select! {
                biased;
                result = step.clone() => result,
                () = self.run.control.cancelled() => return self.interrupt_step(handle, step).await,
                () = eviction => return Err(self.evict_awaiting(handle, step)),
                () = self.run.control.paused() => return Err(self.paused_awaiting(handle, step)),
            }
        };
        let result = self.received(result)?;
        // Waiting for a step may take long: the guest resumes with a fresh
        // activation budget, as after any durable call.
        self.end_activation();
        Ok(result)
    }

    /// The run is paused while it awaits step `handle`: the attempt under
    /// way runs on as a long step does, unless the pause stops it: then it
    /// is dropped with the instance (or, on a task of its own, aborted once
    /// the instance is gone), and made again once the run is resumed.
    fn paused_awaiting(&mut self, handle: u32, step: Shared<BoxFuture<'static, StepResult>>) -> Interruption {
        if !self.run.control.interrupts_attempts() {
            return self.evict_awaiting(handle, step);
        }
        tracing::info!(seq = handle, "the pause stops the awaited step's attempt");
        Interruption::Suspend(Suspension::paused())
    }

    /// The awaited step `handle` takes longer than the eviction threshold:
    /// the run suspends until the step ends, and the step runs on, on a
    /// task of its own if it ran on the workflow's, for the run's next
    /// execution to take over. No instance waits through a long step.
    fn evict_awaiting(&mut self, handle: u32, step: Shared<BoxFuture<'static, StepResult>>) -> Interruption {
        let seq = u64::from(handle);
        if !self.running.contains_key(&handle)
            && let Some(StartedStep::Running { call, .. }) = self.steps.get(&handle)
        {
            let task = crate::task::spawn(self.run.ringing(step.clone()));
            let running = RunningStep {
                call: call.clone(),
                incarnation: self.incarnation(),
                result: step,
                task: task.abort_handle(),
            };
            let (tenant, run) = (self.run.tenant(), self.run.records.run_id());
            self.run.host.in_flight.insert(tenant, run, seq, running);
        }
        tracing::info!(seq, "the awaited step runs long: run suspended until it ends");
        Interruption::Suspend(Suspension {
            step: Some(seq),
            ..Suspension::until(u64::MAX)
        })
    }

    /// A step's journaled result reaches the guest: the run's clock moves to
    /// when its entry finished. A step waiting for a long retry suspends
    /// the run until then.
    pub(super) fn received(&self, done: StepResult) -> Result<Result<String, StepError>, Interruption> {
        let done = done.map_err(|unfinished| match unfinished {
            StepUnfinished::Journal(e) => Interruption::Journal(e),
            StepUnfinished::RetryAt(at_ms) => Interruption::Suspend(Suspension::until(at_ms)),
        })?;
        self.clock.observe(done.finished_at_ms);
        Ok(done.result)
    }

    /// Waits in this instance until `deadline_ms`, when the timer of the
    /// wait at `seq` ends, or suspends the run if the wait is longer than
    /// the eviction threshold or the run is paused meanwhile. A ring of the
    /// run's bell may mean the wait was advanced: the store says. Returns
    /// whether the wait ended because the run was cancelled.
    async fn wait_until(&self, seq: u64, mut deadline_ms: u64) -> Result<bool, Interruption> {
        loop {
            let remaining = Duration::from_millis(deadline_ms.saturating_sub(now_ms()));
            if remaining.is_zero() {
                return Ok(false);
            }
            if remaining > self.run.host.wait.eviction_threshold || self.run.control.is_paused() {
                return Err(Interruption::Suspend(Suspension::timer(seq, deadline_ms)));
            }
            let rung = self.run.control.nap(remaining).await;
            if self.run.control.is_cancelled() {
                return Ok(true);
            }
            deadline_ms = self.advanced(seq, deadline_ms, rung).await?;
        }
    }

    /// The deadline of the wait at `seq`, brought forward to its advance if
    /// one was made: looked for only when the run's bell `rung`, since an
    /// advance rings it.
    async fn advanced(&self, seq: u64, deadline_ms: u64, rung: bool) -> Result<u64, Interruption> {
        if !rung {
            return Ok(deadline_ms);
        }
        let advance = self.run.records.advance_request(seq).await?;
        Ok(advance.map_or(deadline_ms, |advance| deadline_ms.min(advance.advanced_at_ms)))
    }

    /// The oldest signal called `name` the run has not taken yet.
    async fn next_signal(&self, name: &SignalName) -> Result<(usize, Option<(String, Payload)>), Interruption> {
        let signals = self.run.records.signals(name).await?;
        let taken = signals
            .iter()
            .filter(|(key, _)| self.consumed_signals.contains(key))
            .count();
        let next = signals
            .into_iter()
            .find(|(key, _)| !self.consumed_signals.contains(key));
        Ok((taken, next.map(|(key, signal)| (key, signal.payload))))
    }

    async fn await_signal_live(
        &mut self,
        seq: u64,
        call: Call,
        name: SignalName,
        timeout_ms: u64,
    ) -> Result<Option<Payload>, Interruption> {
        // The timer and the first look for a signal, at once: on object
        // storage each is a round trip, and neither needs the other.
        let timer = self
            .run
            .records
            .timer(seq, now_ms(), timeout_ms, Some(name.as_str()))
            .err_into::<Interruption>();
        let (timer, mut look) = futures::try_join!(timer, self.next_signal(&name))?;
        // The wait began when its timer was first written, perhaps before
        // an eviction: the entry says how long it really lasted.
        let started_at_ms = timer.started_at_ms;
        let mut deadline_ms = timer.deadline_ms;
        let waiting_since = Instant::now();
        let wait = self.run.host.wait;
        loop {
            let (taken, next) = look;
            // A pause evicts the run at once, before it takes a signal or
            // times out: it waits, suspended, to be resumed.
            if self.run.control.is_paused() {
                return Err(Interruption::Suspend(Suspension {
                    signal: Some((name, taken)),
                    ..Suspension::timer(seq, deadline_ms)
                }));
            }
            if let Some((key, payload)) = next {
                self.consumed_signals.insert(key.clone());
                let recorded = Recorded::Signal {
                    payload: Some(payload.clone()),
                    key: Some(key),
                };
                self.append(seq, call, recorded, started_at_ms).await?;
                tracing::info!(seq, signal = %name, "signal received");
                return Ok(Some(payload));
            }
            let now = now_ms();
            if now >= deadline_ms {
                self.append(
                    seq,
                    call,
                    Recorded::Signal {
                        payload: None,
                        key: None,
                    },
                    started_at_ms,
                )
                .await?;
                tracing::info!(seq, signal = %name, "signal wait timed out");
                return Ok(None);
            }
            let Some(until_eviction) = wait.until_eviction(waiting_since) else {
                let signal = Some((name, taken));
                return Err(Interruption::Suspend(Suspension {
                    signal,
                    ..Suspension::timer(seq, deadline_ms)
                }));
            };
            let left = Duration::from_millis(deadline_ms - now);
            let rung = self
                .run
                .control
                .nap(left.min(wait.signal_poll_interval).min(until_eviction))
                .await;
            if self.run.control.is_cancelled() {
                self.record_cancelled(seq, call, started_at_ms).await?;
                return Ok(None);
            }
            deadline_ms = self.advanced(seq, deadline_ms, rung).await?;
            look = self.next_signal(&name).await?;
        }
    }

    async fn recorded_value(&mut self, kind: CallKind, fresh: impl FnOnce() -> u64) -> Result<u64, Interruption> {
        let call = Call::new(kind, "", b"");
        match self.next_call(&call)? {
            (_, Some(Recorded::Value(value))) => Ok(value),
            (seq, Some(other)) => Err(Interruption::mismatch(seq, other)),
            (seq, None) => {
                let value = fresh();
                self.append(seq, call, Recorded::Value(value), now_ms()).await?;
                Ok(value)
            }
        }
    }
}

/// What a step call's `http-limits` ask for.
fn http_request(limits: types::HttpLimits) -> HttpLimitRequest {
    HttpLimitRequest {
        max_requests: limits.max_requests,
        max_request_bytes: limits.max_request_bytes,
        max_response_bytes: limits.max_response_bytes,
        connect_timeout_ms: limits.connect_timeout_ms,
        first_byte_timeout_ms: limits.first_byte_timeout_ms,
    }
}

impl WorkflowState {
    async fn call(
        &mut self,
        step: String,
        input: String,
        options: StepOptions,
        http: HttpLimitRequest,
    ) -> Trappable<Result<String, StepError>> {
        let started = self.start(step, input, options, http, Launch::Awaited).await;
        let result = match started.map_err(Interruption::trap)? {
            // Boxed: the wait for a live step is most of this future's
            // size, which the host call moves on every call, replayed ones
            // included.
            Started::Live(handle) => Box::pin(self.finish(handle)).await,
            Started::Replayed { done, .. } => self.received(Ok(done)),
        };
        result.map_err(Interruption::trap)
    }
}

impl WorkflowState {
    /// Answers `patched(change)`: journaled once, when the run takes the
    /// change past its recorded history; in verify mode that is where the
    /// journal ends, as for any other call.
    pub(super) async fn patch_answer(&mut self, change: String) -> Result<bool, Interruption> {
        if let Some(answer) = self.patches.given(&change) {
            return Ok(answer);
        }
        self.patches
            .admit(&change, self.run.host.run_limits.max_patch_changes)?;
        let answer = match self.cursor.patch_mark(&change) {
            PatchMark::Unmarked => false,
            PatchMark::Marked | PatchMark::Unrecorded => {
                let call = Call::new(CallKind::Patch, &change, b"");
                match self.next_call(&call)? {
                    (_, Some(Recorded::Patched)) => {}
                    (seq, Some(other)) => return Err(Interruption::mismatch(seq, other)),
                    (seq, None) => {
                        self.append(seq, call, Recorded::Patched, now_ms()).await?;
                        tracing::info!(seq, change = %change, "patch marker journaled: the run takes the change");
                    }
                }
                true
            }
        };
        self.patches.remember(change, answer);
        Ok(answer)
    }
}

impl WorkflowState {
    /// Answers `append-to-stream(name, value)`: journaled once, then rings
    /// the readers on this host.
    pub(super) async fn append_to_stream(&mut self, name: String, value: String) -> Result<(), Interruption> {
        let stream = StreamName::new(&name).map_err(|e| Interruption::InvalidCall(e.to_string()))?;
        self.check_payload(&value, || format!("the value appended to stream `{stream}`"))?;
        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&value) {
            return Err(Interruption::InvalidCall(format!(
                "the value appended to stream `{stream}` is not JSON ({e}): pass JSON text"
            )));
        }
        let call = Call::new(CallKind::StreamAppend, &name, value.as_bytes());
        match self.next_call(&call)? {
            (_, Some(Recorded::Appended { .. })) => {}
            (seq, Some(other)) => return Err(Interruption::mismatch(seq, other)),
            (seq, None) => {
                self.streamed.admit(&stream, value.len(), &self.run.host.run_limits)?;
                let size = value.len();
                self.append(seq, call, Recorded::Appended { value }, now_ms()).await?;
                let run = (self.run.tenant().clone(), self.run.records.run_id().clone());
                self.run.host.stream_bells.ring(&run);
                self.streamed.count(size);
                return Ok(());
            }
        }
        self.streamed.count(value.len());
        Ok(())
    }
}

impl durable::Host for WorkflowState {
    async fn call_step(
        &mut self,
        step: String,
        input: String,
        options: StepOptions,
    ) -> Trappable<Result<String, StepError>> {
        self.call(step, input, options, HttpLimitRequest::default()).await
    }

    async fn call_step_with_http(
        &mut self,
        step: String,
        input: String,
        options: StepOptions,
        http: types::HttpLimits,
    ) -> Trappable<Result<String, StepError>> {
        self.call(step, input, options, http_request(http)).await
    }

    async fn start_step(&mut self, step: String, input: String, options: StepOptions) -> Trappable<u32> {
        self.start_awaitable(step, input, options, HttpLimitRequest::default())
            .await
            .map_err(Interruption::trap)
    }

    async fn start_step_with_http(
        &mut self,
        step: String,
        input: String,
        options: StepOptions,
        http: types::HttpLimits,
    ) -> Trappable<u32> {
        self.start_awaitable(step, input, options, http_request(http))
            .await
            .map_err(Interruption::trap)
    }

    async fn await_all(&mut self, handles: Vec<u32>) -> Trappable<Vec<Result<String, StepError>>> {
        let mut results = Vec::with_capacity(handles.len());
        for handle in handles {
            results.push(self.finish(handle).await.map_err(Interruption::trap)?);
        }
        Ok(results)
    }

    async fn await_any(&mut self, handles: Vec<u32>) -> Trappable<(u32, Result<String, StepError>)> {
        let listed: Vec<u8> = handles.iter().flat_map(|h| h.to_le_bytes()).collect();
        let call = Call::new(CallKind::AwaitAny, "", &listed);
        let winner = match self.next_call(&call).map_err(Interruption::trap)? {
            (_, Some(Recorded::Winner(index))) => index,
            (seq, Some(other)) => return Err(Interruption::mismatch(seq, other).trap()),
            (seq, None) => {
                let started_at_ms = now_ms();
                let racing = handles
                    .iter()
                    .map(|handle| self.started(*handle))
                    .collect::<Result<Vec<_>, _>>();
                let racing = racing.map_err(Interruption::trap)?;
                if racing.is_empty() {
                    return Err(Interruption::InvalidCall("await-any needs at least one handle".into()).trap());
                }
                // Not a point where cancellation is seen: the steps raced
                // here end on their own, and the one awaited next is cut short.
                let (_, index, _) = futures::future::select_all(racing).await;
                let index = index as u32;
                self.append(seq, call, Recorded::Winner(index), started_at_ms)
                    .await
                    .map_err(Interruption::trap)?;
                index
            }
        };
        let handle = *handles.get(winner as usize).ok_or_else(|| {
            Interruption::InvalidCall(format!(
                "recorded winner {winner} is not among {} handles",
                handles.len()
            ))
            .trap()
        })?;
        let result = self.finish(handle).await.map_err(Interruption::trap)?;
        Ok((winner, result))
    }

    async fn sleep(&mut self, duration_ms: u64) -> Trappable<()> {
        let call = Call::new(CallKind::Sleep, "", &duration_ms.to_le_bytes());
        let run = async {
            match self.next_call(&call)? {
                (_, Some(Recorded::Slept | Recorded::Cancelled { .. })) => Ok(()),
                (seq, Some(other)) => Err(Interruption::mismatch(seq, other)),
                (seq, None) => {
                    let timer = self.run.records.timer(seq, now_ms(), duration_ms, None).await?;
                    let started_at_ms = timer.started_at_ms;
                    if self.run.control.is_cancelled() || self.wait_until(seq, timer.deadline_ms).await? {
                        self.record_cancelled(seq, call.clone(), started_at_ms).await?;
                        return Ok(());
                    }
                    self.append(seq, call.clone(), Recorded::Slept, started_at_ms).await?;
                    tracing::info!(seq, duration_ms, "slept");
                    Ok(())
                }
            }
        };
        run.await.map_err(Interruption::trap)
    }

    async fn await_signal(&mut self, name: String, timeout_ms: u64) -> Trappable<Option<String>> {
        let signal = SignalName::new(&name).map_err(|e| Interruption::InvalidCall(e.to_string()).trap())?;
        let call = Call::new(CallKind::Signal, &name, &timeout_ms.to_le_bytes());
        let run = async {
            let payload = match self.next_call(&call)? {
                (_, Some(Recorded::Signal { payload, key })) => {
                    self.consumed_signals.extend(key);
                    payload
                }
                (_, Some(Recorded::Cancelled { .. })) => None,
                (seq, Some(other)) => return Err(Interruption::mismatch(seq, other)),
                (seq, None) => self.await_signal_live(seq, call.clone(), signal, timeout_ms).await?,
            };
            match payload {
                Some(payload) => Ok(Some(self.run.records.payload_text(payload).await?)),
                None => Ok(None),
            }
        };
        run.await.map_err(Interruption::trap)
    }

    async fn now(&mut self) -> Trappable<u64> {
        self.recorded_value(CallKind::Now, now_ms)
            .await
            .map_err(Interruption::trap)
    }

    async fn random(&mut self) -> Trappable<u64> {
        self.recorded_value(CallKind::Random, rand::random)
            .await
            .map_err(Interruption::trap)
    }

    async fn memo_get(&mut self, key: String) -> Trappable<Option<String>> {
        Ok(self.memos.get(&key).cloned())
    }

    async fn memo_set(&mut self, key: String, value: String) -> Trappable<()> {
        let run = async {
            self.check_payload(&value, || format!("memo `{key}`"))?;
            let call = Call::new(CallKind::MemoSet, &key, value.as_bytes());
            match self.next_call(&call)? {
                (_, Some(Recorded::MemoSet { .. })) => {}
                (seq, Some(other)) => return Err(Interruption::mismatch(seq, other)),
                (seq, None) => {
                    let value = self.run.payload(value.clone()).await?;
                    self.append(seq, call, Recorded::MemoSet { value }, now_ms()).await?
                }
            }
            self.memos.insert(key, value);
            Ok(())
        };
        run.await.map_err(Interruption::trap)
    }

    async fn start_child(&mut self, workflow: String, input: String, component: Option<String>) -> Trappable<u32> {
        self.start_child_run(workflow, input, component)
            .await
            .map_err(Interruption::trap)
    }

    async fn await_child(&mut self, child: u32) -> Trappable<Result<String, String>> {
        let run = async {
            Ok(match self.await_child_run(child).await? {
                Ok(output) => Ok(self.run.records.payload_text(output).await?),
                Err(why) => Err(why),
            })
        };
        run.await.map_err(Interruption::trap)
    }

    async fn append_to_stream(&mut self, name: String, value: String) -> Trappable<()> {
        self.append_to_stream(name, value).await.map_err(Interruption::trap)
    }

    async fn patched(&mut self, change_id: String) -> Trappable<bool> {
        self.patch_answer(change_id).await.map_err(Interruption::trap)
    }

    /// Not journaled: a replay that reaches the call again (the host died
    /// before this generation's outcome was written) starts the same next
    /// generation again, which its deterministic id makes a no-op.
    async fn continue_as_new(&mut self, input: String) -> Trappable<()> {
        Err(Interruption::ContinueAsNew(input).trap())
    }

    async fn log(&mut self, level: LogLevel, message: String) -> Trappable<()> {
        self.log.guest(level, &message);
        Ok(())
    }
}
