//! One step attempt: a fresh instance from the component's [`InstancePre`],
//! one call, then the instance is dropped. Nothing survives an attempt.

use std::path::Path;
use std::sync::Arc;

use wasmtime::component::{Component, HasSelf, InstancePre};
use wasmtime::{Engine, Store};

use super::StepErrorKind;
use super::deadline::Deadline;
use super::limiter::{MemoryGuard, Sandboxed, classify, new_store};
use super::link::link;
use super::outbound::{HttpHooks, HttpUsage};
use super::scratch::ScratchDir;
use super::wasi::{GuestWasi, Stdio};
use crate::cluster::CLAIM_BITS;
use crate::config::StepLimits;
use crate::contract::bindings::exports::stepstone::workflow::step;
use crate::contract::bindings::stepstone::workflow::{step_support, types};
use crate::contract::bindings::{LogLevel, StepFailure};
use crate::egress::{Egress, Outbound};
use crate::guest_log::{LogWriter, RunLog};
use crate::secrets::OpenedSecrets;

/// Store data of a step instance.
pub struct StepState {
    guard: MemoryGuard,
    attempt: u32,
    deadline: Deadline,
    log: LogWriter,
    serving: Serving,
    wasi: GuestWasi,
}

impl wasmtime_wasi::WasiView for StepState {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        self.wasi.view()
    }
}

impl super::wasi::Guest for StepState {
    fn guest(&mut self) -> &mut GuestWasi {
        &mut self.wasi
    }
}

impl wasmtime_wasi_http::WasiHttpView for StepState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        self.wasi.http_view()
    }
}

/// What an attempt reaches outside its instance.
pub struct Reach<'a> {
    /// The run's log, which its steps share.
    pub log: Arc<RunLog>,
    /// Where the attempt's scratch directory is made, if its tenant grants
    /// one.
    pub scratch_root: Option<&'a Path>,
    /// The way out its HTTP requests take, and where they may go.
    pub egress: Arc<Egress>,
    /// Its tenant's allowlist: the origins its HTTP requests may reach.
    pub outbound: Arc<Outbound>,
    /// The call it serves.
    pub serving: Serving,
    /// Its tenant's secrets, its `wasi:config`.
    pub secrets: Arc<OpenedSecrets>,
}

impl Reach<'_> {
    /// Nothing but the log.
    pub fn log_only(log: Arc<RunLog>) -> Self {
        Self {
            log,
            scratch_root: None,
            egress: Arc::default(),
            outbound: Arc::default(),
            serving: Serving::default(),
            secrets: Arc::default(),
        }
    }
}

impl Sandboxed for StepState {
    fn guard(&mut self) -> &mut MemoryGuard {
        &mut self.guard
    }

    fn deadline(&self) -> &Deadline {
        &self.deadline
    }
}

impl types::Host for StepState {}

impl step_support::Host for StepState {
    async fn log(&mut self, level: LogLevel, message: String) -> wasmtime::Result<()> {
        self.log.guest(level, &message);
        Ok(())
    }

    async fn attempt(&mut self) -> wasmtime::Result<u32> {
        Ok(self.attempt)
    }

    async fn fencing_token(&mut self) -> wasmtime::Result<u64> {
        Ok(self.serving.epoch)
    }

    async fn context(&mut self) -> wasmtime::Result<step_support::StepContext> {
        let Serving {
            tenant, run, seq, epoch, ..
        } = &self.serving;
        Ok(step_support::StepContext {
            run_id: run.clone(),
            seq: *seq,
            attempt: self.attempt,
            idempotency_key: idempotency_key(tenant, run, *epoch, *seq),
        })
    }
}

/// The idempotency key of the call at `seq` of `tenant`'s run `run`,
/// driven under the claim of `epoch` (its fencing token): the same for
/// every attempt of the call, on every host, and another for a run of the
/// id created again after retention deleted one (another incarnation, the
/// bits of the epoch above [`CLAIM_BITS`]): `{tenant}/{run}/{seq}` for a
/// run's first incarnation, `{tenant}/{run}/{incarnation}/{seq}` for later
/// ones.
pub fn idempotency_key(tenant: &str, run: &str, epoch: u64, seq: u64) -> String {
    match epoch >> CLAIM_BITS {
        0 => format!("{tenant}/{run}/{seq}"),
        incarnation => format!("{tenant}/{run}/{incarnation}/{seq}"),
    }
}

/// The durable call an attempt serves: what `step-support#context` tells
/// the step.
#[derive(Debug, Clone, Default)]
pub struct Serving {
    /// The tenant whose run makes the call.
    pub tenant: String,
    /// The id of the run the call belongs to.
    pub run: String,
    /// The call's seq in the run's journal.
    pub seq: u64,
    /// The step's name as the workflow called it (`component/step` too).
    pub step: String,
    /// The epoch of the claim the run is driven under: the attempt's
    /// fencing token.
    pub epoch: u64,
}

/// A step component, linked and type-checked once, ready to instantiate for
/// every attempt.
pub struct StepProgram {
    pre: InstancePre<StepState>,
    step: step::GuestIndices,
    /// Whether the engine meters fuel (see `HostConfig::unmetered_steps`).
    metered: bool,
}

impl StepProgram {
    /// Links `component` (compiled by the step engine, which meters fuel if
    /// `metered`) against `step-support`.
    pub fn new(engine: &Engine, component: &Component, metered: bool) -> wasmtime::Result<Self> {
        let pre = link(engine, component, Some("step-support"), |linker| {
            step_support::add_to_linker::<_, HasSelf<_>>(linker, |state| state)
        })?;
        let step = step::GuestIndices::new(&pre)?;
        Ok(Self { pre, step, metered })
    }

    fn store(
        &self,
        attempt: u32,
        limits: &StepLimits,
        reach: &Reach<'_>,
        scratch: Option<&ScratchDir>,
    ) -> Result<(Store<StepState>, Arc<HttpUsage>), AttemptFailure> {
        let sandbox_error =
            |e: wasmtime::Error| AttemptFailure::new(StepErrorKind::Trapped, format!("cannot create a sandbox: {e:#}"));
        let log = LogWriter::step(reach.log.clone(), reach.serving.seq, &reach.serving.step, attempt);
        let http = HttpHooks::for_step(reach.egress.clone(), reach.outbound.clone(), limits.http, log.clone());
        let usage = http.usage();
        let stdio = Stdio::logged(&log);
        let wasi = GuestWasi::for_step(stdio, scratch, http, reach.secrets.clone()).map_err(sandbox_error)?;
        let state = StepState {
            guard: MemoryGuard::new(limits.memory_bytes, limits.table_elements),
            attempt,
            deadline: Deadline::after(limits.timeout),
            log,
            serving: reach.serving.clone(),
            wasi,
        };
        let store = new_store(self.pre.engine(), state, self.metered.then_some(limits.fuel)).map_err(sandbox_error)?;
        Ok((store, usage))
    }
}

/// Why one attempt did not produce an output.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptFailure {
    /// How the attempt stopped.
    pub kind: StepErrorKind,
    /// What went wrong, in words for the step's author.
    pub message: String,
    /// The step said retrying cannot help.
    pub permanent: bool,
}

impl AttemptFailure {
    /// A failure of `kind` that retrying may get past (not permanent).
    pub fn new(kind: StepErrorKind, message: String) -> Self {
        Self {
            kind,
            message,
            permanent: false,
        }
    }

    /// The failure of guest code that stopped with `error`.
    pub(crate) fn stopped<T: Sandboxed>(error: &wasmtime::Error, store: &mut Store<T>) -> Self {
        let (kind, message) = classify(error, store.data_mut().guard());
        Self::new(kind, message)
    }

    /// Adds what the host cut short in the attempt, if anything (a request
    /// it refused, a scratch directory full): the author learns it from the
    /// failure, not only from the host's log.
    fn noting(mut self, note: Option<String>) -> Self {
        if let Some(note) = note {
            self.message = format!("{} ({note})", self.message);
        }
        self
    }

    /// Names the limit a fuel or time failure ran into, so the message
    /// says which and how much.
    fn naming_limit(mut self, limits: &StepLimits) -> Self {
        let limit = match self.kind {
            StepErrorKind::FuelExhausted => format!("the attempt's fuel limit is {}", limits.fuel),
            StepErrorKind::TimedOut => format!("the attempt's timeout is {:?}", limits.timeout),
            _ => return self,
        };
        self.message = format!("{}: {limit}", self.message);
        self
    }
}

/// What one attempt produced, and what it cost.
pub struct AttemptReport {
    /// The step's output (JSON text within the output limit), or why there is none.
    pub result: Result<String, AttemptFailure>,
    /// The fuel the attempt burned; 0 if the engine does not meter fuel or the
    /// attempt failed before its sandbox was set up.
    pub fuel_used: u64,
    /// Its linear memory at its largest, in bytes.
    pub memory_bytes: usize,
    /// Its outgoing HTTP.
    pub http: Arc<HttpUsage>,
}

impl AttemptReport {
    fn failed(failure: AttemptFailure) -> Self {
        Self {
            result: Err(failure),
            fuel_used: 0,
            memory_bytes: 0,
            http: Arc::default(),
        }
    }
}

/// Runs attempt number `attempt` of step `name` on `input` within `limits`,
/// reaching what `reach` grants: with a scratch root, the attempt gets a
/// fresh scratch directory there.
pub async fn run_attempt(
    program: &StepProgram,
    name: &str,
    input: &str,
    attempt: u32,
    limits: &StepLimits,
    reach: Reach<'_>,
) -> AttemptReport {
    // Declared before the store, so it is removed after the store is gone.
    let scratch = reach
        .scratch_root
        .map(|root| ScratchDir::create(root, limits.scratch_bytes));
    let scratch = match scratch.transpose() {
        Ok(scratch) => scratch,
        Err(e) => {
            let message = format!("cannot create the attempt's scratch directory: {e}");
            return AttemptReport::failed(AttemptFailure::new(StepErrorKind::Trapped, message));
        }
    };
    let (mut store, http) = match program.store(attempt, limits, &reach, scratch.as_ref()) {
        Ok(store) => store,
        Err(failure) => return AttemptReport::failed(failure),
    };
    let deadline = store.data().deadline.clone();
    let called = deadline
        .bound(async {
            let instance = program.pre.instantiate_async(&mut store).await?;
            program
                .step
                .load(&mut store, &instance)?
                .call_run_step(&mut store, name, &input.to_owned())
                .await
        })
        .await;
    let result = match called {
        Ok(Ok(output)) => checked_output(output, limits),
        Ok(Err(StepFailure { message, permanent })) => Err(AttemptFailure {
            kind: StepErrorKind::Failed,
            message,
            permanent,
        }),
        Err(error) => Err(AttemptFailure::stopped(&error, &mut store).naming_limit(limits)),
    };
    let refusal = http
        .first_refusal()
        .map(|r| format!("the host refused a request of this attempt: {r}"));
    let scratch_full = scratch.as_ref().and_then(|scratch| scratch.budget().exhausted());
    let result = result.map_err(|failure| failure.noting(refusal).noting(scratch_full));
    let fuel_used = match store.get_fuel() {
        Ok(left) => limits.fuel.saturating_sub(left),
        Err(_) => 0,
    };
    let memory_bytes = store.data().guard.memory_granted();
    drop(store);
    if let Some(scratch) = scratch {
        scratch.remove().await;
    }
    AttemptReport {
        result,
        fuel_used,
        memory_bytes,
        http,
    }
}

/// A step's output, if it is within the output limit and JSON text, as
/// every payload must be.
pub fn checked_output(output: String, limits: &StepLimits) -> Result<String, AttemptFailure> {
    if output.len() > limits.max_output_bytes {
        return Err(AttemptFailure::new(
            StepErrorKind::OutputTooLarge,
            format!(
                "output of {} bytes exceeds the limit of {} bytes",
                output.len(),
                limits.max_output_bytes
            ),
        ));
    }
    match serde_json::from_str::<serde::de::IgnoredAny>(&output) {
        Ok(_) => Ok(output),
        Err(e) => Err(AttemptFailure::new(
            StepErrorKind::InvalidOutput,
            format!("the step's output is not JSON text ({e}): every payload must be JSON"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::idempotency_key;

    /// A call's key names its run's incarnation past the first, so a run
    /// of an id used again never shares a key with an earlier one; every
    /// epoch of one incarnation (a takeover's too) gives the same key.
    #[test]
    fn an_idempotency_key_names_the_incarnation_past_the_first() {
        assert_eq!(idempotency_key("acme", "order-7", 0, 3), "acme/order-7/3");
        assert_eq!(idempotency_key("acme", "order-7", 5, 3), "acme/order-7/3");
        let second = 1 << super::CLAIM_BITS;
        assert_eq!(idempotency_key("acme", "order-7", second, 3), "acme/order-7/1/3");
        assert_eq!(idempotency_key("acme", "order-7", second + 9, 3), "acme/order-7/1/3");
        assert_eq!(idempotency_key("acme", "order-7", u64::MAX, 0), format!("acme/order-7/{}/0", u64::MAX >> 20));
    }
}
