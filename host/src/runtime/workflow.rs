//! A workflow's own instance: its store data, its sandbox (fuel and a
//! wall-clock deadline per activation, a memory limit), and the program a
//! workflow component is linked into.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use futures::future::{BoxFuture, Shared};
use tokio::task::AbortHandle;
use wasmtime::component::{Component, HasSelf, InstancePre};
use wasmtime::{CallHook, Engine, Store};

use super::RunContext;
use super::patches::PatchAnswers;
use super::streams::StreamTally;
use crate::config::WorkflowLimits;
use crate::contract::bindings::StepError;
use crate::contract::bindings::exports::stepstone::workflow::workflow;
use crate::contract::bindings::stepstone::workflow::durable;
use crate::guest_log::{LogWriter, WorkflowPlace};
use crate::journal::{Call, Cursor, JournalError, Recorded};
use crate::sandbox::{Deadline, GuestWasi, JournalClock, MemoryGuard, Sandboxed, Stdio, link, new_store};
use crate::store::RunId;

/// Whether durable calls without a journal entry may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Execute: replay what is recorded, then run the rest for real.
    Live,
    /// Check a build against a journal: serve recorded results, run nothing.
    Verify,
}

/// A step call's journaled result, and when its entry says it finished
/// (the time a workflow's clock moves to when it receives the result).
#[derive(Debug, Clone)]
pub struct StepDone {
    pub result: Result<String, StepError>,
    pub finished_at_ms: u64,
}

/// Why a step call ended without a journaled result.
#[derive(Debug, Clone)]
pub enum StepUnfinished {
    /// The journal could not be written, or the step's task died: nothing
    /// was recorded, so the step runs again when the run is replayed.
    Journal(Arc<JournalError>),
    /// An attempt failed and the next one waits longer than the eviction
    /// threshold, until this time (ms since the epoch): the failure is
    /// recorded, and the run waits for the retry as for a timer.
    RetryAt(u64),
}

/// The result of a step call, shared by everyone awaiting its handle.
pub type StepResult = Result<StepDone, StepUnfinished>;

/// A step the workflow started.
pub enum StartedStep {
    /// Its result, to come (or replayed from the journal), and the call
    /// that started it.
    Running {
        result: Shared<BoxFuture<'static, StepResult>>,
        call: Call,
    },
    /// Checking a journal that never recorded it: the run ended before the
    /// step did, so awaiting it is where the journal ends.
    Unrecorded,
}

/// Store data of a workflow instance: where the run stands in its journal,
/// and the steps it has started.
pub(crate) struct WorkflowState {
    guard: MemoryGuard,
    /// The current activation's deadline, paused from a journaled call
    /// until the guest resumes.
    deadline: Deadline,
    limits: WorkflowLimits,
    /// Set by every journaled call, so the call hook starts a new activation
    /// when the guest resumes. Only journaled calls reset the budget: a loop
    /// around `log` does not.
    activation_ended: bool,
    pub(super) run: Arc<RunContext>,
    pub(super) mode: Mode,
    pub(super) cursor: Cursor,
    pub(super) memos: BTreeMap<String, String>,
    pub(super) consumed_signals: HashSet<String>,
    pub(super) steps: HashMap<u32, StartedStep>,
    /// Child runs started, by handle: the run, or why it could not start.
    pub(super) children: HashMap<u32, Result<RunId, String>>,
    /// The tasks of steps running live, by handle. They outlive the
    /// instance if it is evicted (see `runtime::in_flight`).
    pub(super) running: HashMap<u32, AbortHandle>,
    /// The answers `patched` gave in this execution, by change id.
    pub(super) patches: PatchAnswers,
    /// What the run has appended to its streams, against its quotas.
    pub(super) streamed: StreamTally,
    /// Whether the workflow has met its run's cancellation (a call was
    /// journaled `Cancelled`); from then on, awaited steps are not cut short.
    pub(super) cancellation_seen: bool,
    /// The run's journal time, which the guest's WASI clocks read.
    pub(super) clock: JournalClock,
    /// Where the workflow stands as it logs: its lines are dropped while it
    /// re-executes recorded calls, so none is kept twice.
    place: Arc<WorkflowPlace>,
    /// The workflow's handle on the run's log.
    pub(super) log: LogWriter,
    wasi: GuestWasi,
}

impl wasmtime_wasi::WasiView for WorkflowState {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        self.wasi.view()
    }
}

impl crate::sandbox::Guest for WorkflowState {
    fn guest(&mut self) -> &mut GuestWasi {
        &mut self.wasi
    }
}

impl wasmtime_wasi_http::WasiHttpView for WorkflowState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        self.wasi.http_view()
    }
}

impl WorkflowState {
    pub fn new(run: Arc<RunContext>, cursor: Cursor, mode: Mode, limits: WorkflowLimits) -> Self {
        let cancellation_seen = cursor.ahead().any(|e| matches!(e.recorded, Recorded::Cancelled { .. }));
        let consumed_signals = cursor
            .ahead()
            .filter_map(|entry| match &entry.recorded {
                Recorded::Signal { key: Some(key), .. } => Some(key.clone()),
                _ => None,
            })
            .collect();
        let clock = JournalClock::new(run.started_at_ms);
        let place = Arc::new(WorkflowPlace::default());
        let log = LogWriter::workflow(run.log.clone(), place.clone());
        let stdio = Stdio::logged(&log);
        let wasi = GuestWasi::for_workflow(run.records.run_id().as_str(), clock.clone(), stdio, log.clone());
        let mut state = Self {
            guard: MemoryGuard::new(limits.memory_bytes, limits.table_elements),
            deadline: Deadline::after(limits.activation_timeout),
            limits,
            activation_ended: false,
            run,
            mode,
            cursor,
            memos: BTreeMap::new(),
            consumed_signals,
            steps: HashMap::new(),
            children: HashMap::new(),
            running: HashMap::new(),
            patches: PatchAnswers::default(),
            streamed: StreamTally::default(),
            cancellation_seen,
            clock,
            place,
            log,
            wasi,
        };
        state.mute_replayed_output();
        state
    }

    /// Lines are logged only when running live, past the recorded calls,
    /// at the seq the next call takes.
    pub(super) fn mute_replayed_output(&mut self) {
        let muted = self.replaying() || self.mode == Mode::Verify;
        self.place.set(self.cursor.position(), muted);
    }

    /// Marks the end of an activation: the guest gets a fresh budget when it
    /// resumes, and the time until then is not the guest's.
    pub(super) fn end_activation(&mut self) {
        self.activation_ended = true;
        self.deadline.pause();
    }

    /// Whether the workflow is still re-executing recorded calls (so its
    /// logs were already written once).
    pub(super) fn replaying(&self) -> bool {
        self.cursor.replaying()
    }
}

impl Sandboxed for WorkflowState {
    fn guard(&mut self) -> &mut MemoryGuard {
        &mut self.guard
    }

    fn deadline(&self) -> &Deadline {
        &self.deadline
    }
}

/// A workflow component linked against `durable`, ready to instantiate.
pub struct WorkflowProgram {
    pre: InstancePre<WorkflowState>,
    workflow: workflow::GuestIndices,
}

impl WorkflowProgram {
    /// Links `component` (compiled by the workflow engine) against `durable`.
    pub fn new(engine: &Engine, component: &Component) -> wasmtime::Result<Self> {
        let pre = link(engine, component, Some("durable"), |linker| {
            durable::add_to_linker::<_, HasSelf<_>>(linker, |state| state)
        })?;
        let workflow = workflow::GuestIndices::new(&pre)?;
        Ok(Self { pre, workflow })
    }

    /// A sandboxed store for `state`. A call hook renews fuel and deadline
    /// each time the guest resumes after a journaled call: on the way back
    /// from the host, or earlier, when the host calls the guest's allocator
    /// to hand it the call's result (time spent waiting for a step must not
    /// count against the guest's own budget).
    pub fn store(&self, state: WorkflowState) -> wasmtime::Result<Store<WorkflowState>> {
        let fuel = state.limits.activation_fuel;
        let mut store = new_store(self.pre.engine(), state, Some(fuel))?;
        store.call_hook(move |mut cx, hook| {
            let resuming = matches!(hook, CallHook::ReturningFromHost | CallHook::CallingWasm);
            if resuming && cx.data().activation_ended {
                let data = cx.data_mut();
                data.activation_ended = false;
                data.deadline.renew(data.limits.activation_timeout);
                cx.set_fuel(fuel)?;
            }
            Ok(())
        });
        Ok(store)
    }

    /// Runs workflow `name` on `input` from the start, each activation
    /// within its deadline even while the guest blocks in a WASI call.
    pub async fn run(
        &self,
        store: &mut Store<WorkflowState>,
        name: &str,
        input: &str,
    ) -> wasmtime::Result<Result<String, String>> {
        let deadline = store.data().deadline.clone();
        deadline
            .bound(async {
                let instance = self.pre.instantiate_async(&mut *store).await?;
                let guest = self.workflow.load(&mut *store, &instance)?;
                guest.call_run(&mut *store, name, &input.to_owned()).await
            })
            .await
    }
}
