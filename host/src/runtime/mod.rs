//! The life of a run: submission, execution until it finishes or suspends,
//! waiting outside an instance, replay against a journal, signals and status.
//!
//! Invariants: a run's history is its journal; its status is projected from
//! its records, never stored beside them. A run is executed by re-running its
//! workflow from the start against the journal, so "resume after a crash",
//! "wake after eviction" and "check a new build" are one mechanism.
//!
//! # Example
//!
//! ```no_run
//! # async fn example(bytes: bytes::Bytes) -> Result<(), Box<dyn std::error::Error>> {
//! use stepstone::{component::CodeCache, config::HostConfig, store::{Storage, TenantId}};
//! use stepstone::runtime::{Runtime, Submission};
//!
//! let runtime = Runtime::new(HostConfig::new(), Storage::in_memory(), CodeCache::disabled())?;
//! let tenant = TenantId::default_tenant();
//! let component = runtime.validate("hello.wasm", bytes).await?;
//! let run = runtime
//!     .submit(&tenant, Submission::new(component, "greet", r#"{"name":"Ada"}"#))
//!     .await?;
//! let progress = runtime.run_to_end(&tenant, &run, None).await?;
//! # Ok(()) }
//! ```

mod background;
mod batch;
mod bells;
mod cancellation;
mod catalog;
mod children;
mod concurrency;
mod continuation;
mod control;
mod durable;
mod execution_host;
mod fresh;
mod groups;
mod hooks;
mod in_flight;
mod interruption;
mod logs;
mod moment;
mod patches;
mod phantoms;
mod recently_ended;
mod replay;
mod restart;
mod retention;
mod retry;
mod runs;
mod search;
mod stand_in;
mod status;
mod step_call;
mod step_host;
mod step_target;
mod streams;
mod submit;
mod tenants;
mod upgrade;
mod usage;
mod workflow;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

pub use crate::cluster::{HostId, HostStop, Incarnation, InvalidHostId, LiveError};
pub use crate::egress::HostsFileError;
pub use crate::guest_log::{Level, LogLine, Source};
pub use crate::policy::{Refusal, RunQuotas};
pub use crate::sandbox::{AttemptFailure, Role, SandboxError, StepErrorKind};
pub use batch::{BATCH_PAGE, BatchAction, BatchPage, RunSelector};
pub use catalog::Catalog;
pub use continuation::{ContinuationError, MAX_CHAIN_HOPS};
pub use control::{Advanced, AttemptUnderWay, MAX_PAUSE_REASON};
pub use groups::{GroupRecord, Groups, MAX_GROUP_RUNS};
pub use hooks::{MAX_ATTEMPTS, Notification, SIGNING_KEY_SECRET, message, signature};
pub use interruption::Suspension;
pub use logs::{LogCursor, LogPage, Logs, MAX_LOG_PAGE, PagedLine};
pub use moment::{DEADLINE, Moment, MomentFields, START};
pub use replay::ReplayReport;
pub use restart::{Restart, Restarted};
pub use retention::{Retention, SWEEP_BATCH, Swept};
pub use retry::RetryPolicy;
pub use runs::Runs;
pub use search::{MAX_TAGS, Search};
pub use stand_in::{AttemptCall, StandIn, StepStandIn};
pub use status::{RunCursor, RunQuery, RunState, RunStatus, StoredPayload};
pub use streams::{MAX_STREAM_READERS, StreamEvent, StreamValue};
pub use submit::{MAX_CONCURRENCY_LIMIT, Submission};
pub use upgrade::{Divergence, UPGRADE_PAGE, UpgradeReport, Upgrades};
pub use usage::{DayUsage, Usage};
internal_use!(usage::day_of);

use crate::component::{CodeCache, ComponentError, Loaded};
use crate::config::HostConfig;
use crate::journal::{Entry, JournalError, Outcome};
use crate::metrics::Metrics;
use crate::policy::{OverQuota, TenantPolicy};
use crate::schedules::{ScheduleError, Schedules};
use crate::secrets::{SecretError, Secrets};
use crate::store::{ComponentName, InvalidName, RunId, SignalName, Storage, StoreError, TenantId};
use crate::tenancy::LiveTenants;
use runs::{Ended, RunContext, Stored, failed, recorded_calls};

/// Why a run could not be submitted, driven or inspected.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The tenant has no run of this id.
    #[error("no run `{run}`: `stepstone list` shows the runs there are")]
    UnknownRun {
        /// The id asked about.
        run: RunId,
    },
    /// The component exports no workflow of the name asked for.
    #[error("component {digest} has no workflow `{workflow}`; it exports: {available}")]
    UnknownWorkflow {
        /// The workflow asked for.
        workflow: String,
        /// The component's digest.
        digest: String,
        /// The workflows it does export, comma-separated.
        available: String,
    },
    /// A payload (an input, a signal's, a workflow's output) is not JSON.
    #[error("{what} is not valid JSON: {reason}")]
    InvalidJson {
        /// Which payload, as the message names it (e.g. "the input").
        what: String,
        /// What the JSON parser found wrong.
        reason: String,
    },
    /// A payload is larger than the host takes (its `max_payload_bytes`).
    #[error("{what} is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// Which payload, as the message names it (e.g. "the input").
        what: String,
        /// Its size, in bytes.
        size: usize,
        /// Bytes one payload may have.
        limit: usize,
    },
    /// An id or name given (a run's, a signal's, ...) is not valid.
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// A run of this id exists with another workflow or input: submitting again
    /// is idempotent only with the same ones.
    #[error("run `{run}` already exists with another workflow or input: choose another run id")]
    InputMismatch {
        /// The run id that is taken.
        run: RunId,
    },
    /// This host lost its lease between reading the store for a new run and
    /// storing its record (it was paused, or cut off): nothing was created.
    #[error(
        "the submission of run `{run}` was interrupted (this host lost its lease while storing the run: it was paused or cut off from the store); nothing of it runs: submit it again"
    )]
    Interrupted {
        /// The run not created.
        run: RunId,
    },
    /// The run was taken over from host to host as many times as its
    /// incarnation has epochs: no host drives it again.
    #[error("run `{run}` was claimed {claims} times, every epoch its incarnation has; no host drives it again")]
    ClaimedTooOften {
        /// The run.
        run: RunId,
        /// How many claims an incarnation has.
        claims: u64,
    },
    /// Retention is deleting the last run of this id (one that ended, or a
    /// submission given up): a run under it may be created once that is
    /// done.
    #[error(
        "run `{run}` is being deleted (the last run under this id ended and its retention passed, or its submission stalled for over an hour and was given up); the id is held until the deletion is done and 30 s after, so that none of the old writes lands on a new run: submit it again then"
    )]
    BeingDeleted {
        /// The run id being deleted.
        run: RunId,
    },
    /// The run holds as many signals it has not taken as the host allows: send
    /// again once it takes some.
    #[error("run `{run}` already holds {limit} signals it has not taken, the host's limit: wait until it takes some")]
    SignalsFull {
        /// The run signalled.
        run: RunId,
        /// Signals a run may hold untaken.
        limit: usize,
    },
    /// A signal's payload does not match the schema the run's component
    /// declares for that signal.
    #[error(
        "signal `{signal}` does not match the schema run `{run}`'s component declares for it, {reason}: send a payload that does"
    )]
    SignalRefused {
        /// The run signalled.
        run: RunId,
        /// The signal's name.
        signal: String,
        /// How the payload fails the schema.
        reason: String,
    },
    /// The run has already ended, so it takes no signal or cancellation.
    #[error("run `{run}` has already finished")]
    Finished {
        /// The run that ended.
        run: RunId,
    },
    /// The run is in no wait a timer ends (a sleep, or a signal wait's
    /// timeout), so there is nothing to advance.
    #[error(
        "run `{run}` is not waiting on a timer (a sleep, or a signal wait's timeout): there is nothing to advance; its status says what it waits for"
    )]
    NotWaiting {
        /// The run asked to advance.
        run: RunId,
    },
    /// Another host wrote the run's journal first: this host goes on from the
    /// journal only if its claim still holds.
    #[error(
        "another host wrote run `{run}`'s journal first: this host reads the run's newest claim again, and goes on from the journal if the claim is still its own, else leaves the run to its holder"
    )]
    Conflict {
        /// The run whose journal was written.
        run: RunId,
    },
    /// Another host, alive, holds the run's claim and drives it; this host
    /// leaves the run to it.
    #[error(
        "run `{run}` is driven by host {host}, which is alive: it goes on there (another host takes it over only once that host's lease runs out)"
    )]
    DrivenElsewhere {
        /// The run asked for.
        run: RunId,
        /// The host that drives it.
        host: HostId,
    },
    /// This host may claim or create no run: its id is another process's,
    /// or it stopped driving runs (see [`LiveError`]).
    #[error(transparent)]
    NotLive(LiveError),
    /// The run's workflow instance could not be started.
    #[error("cannot start the workflow instance of run `{run}`: {reason}")]
    Instance {
        /// The run whose instance failed.
        run: RunId,
        /// Why, as the engine said.
        reason: String,
    },
    /// The tenant's admission refuses a new run now (see [`Refusal`]); some
    /// refusals say when to ask again.
    #[error("cannot start a run: {0}")]
    Refused(#[from] Refusal),
    /// Something sent is past a quota of the tenant's.
    #[error(transparent)]
    OverQuota(#[from] OverQuota),
    /// The run's component was refused, or could not be found or loaded.
    #[error(transparent)]
    Component(#[from] ComponentError),
    /// Shared, because a step task's storage failure reaches every caller
    /// awaiting that step.
    #[error(transparent)]
    Journal(Arc<JournalError>),
    /// The sandbox could not be set up.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The egress's hosts file could not be used: the operator fixes it.
    #[error(transparent)]
    HostsFile(#[from] HostsFileError),
    /// The tenant's secrets could not be opened for its steps.
    #[error("cannot open the tenant's secrets for its steps: {0}")]
    Secrets(#[from] SecretError),
    /// A run's start or deadline is refused (unreadable, both forms given, too
    /// far ahead, or not after its start); the message says why.
    #[error("{0}")]
    InvalidTime(String),
    /// A `notify` URL is refused (too long, its origin not allowed, or no
    /// signing key set); the message says why.
    #[error("{0}")]
    InvalidNotify(String),
    /// The tenant has no group of this id.
    #[error("no group `{group}`")]
    UnknownGroup {
        /// The id asked about.
        group: crate::store::GroupId,
    },
    /// A group of this id exists with other runs: submitting a group again is
    /// idempotent only with the same runs.
    #[error("group `{group}` already exists with other runs: choose another group id")]
    GroupMismatch {
        /// The group id that is taken.
        group: crate::store::GroupId,
    },
    /// A run is given more tags than it may carry.
    #[error("a run carries at most {limit} tags, not {count}")]
    TooManyTags {
        /// How many tags it was given.
        count: usize,
        /// Tags a run may carry ([`MAX_TAGS`]).
        limit: usize,
    },
    /// A run's priority is outside 1 (first) to 9 (last).
    #[error(
        "priority {priority} is out of range: give {first} (first) to {last} (last)",
        first = crate::journal::FIRST_PRIORITY,
        last = crate::journal::LAST_PRIORITY
    )]
    Priority {
        /// The priority given.
        priority: u64,
    },
    /// A concurrency limit is outside 1 to [`MAX_CONCURRENCY_LIMIT`].
    #[error("a concurrency limit lets 1 to {max} runs of a key execute at once, not {limit}")]
    ConcurrencyLimit {
        /// The limit given.
        limit: u64,
        /// The highest limit taken.
        max: u32,
    },
    /// A group is empty, or holds more runs than a group may.
    #[error("a group holds 1 to {limit} runs, not {size}")]
    GroupSize {
        /// How many runs the group was given.
        size: usize,
        /// Runs one group may hold ([`MAX_GROUP_RUNS`]).
        limit: usize,
    },
    /// A schedule could not be added, changed or read.
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// An HTTP hook could not be stored or read.
    #[error(transparent)]
    Hook(#[from] crate::http_hooks::HookError),
    /// A run could not continue as new, or its chain could not be followed.
    #[error(transparent)]
    Continuation(#[from] ContinuationError),
    /// A run cannot be restarted from the point asked (see [`Runs::restart`]).
    #[error("cannot restart run `{run}` from seq {seq}: {reason}")]
    RestartRefused {
        /// The run asked to restart.
        run: RunId,
        /// The seq it was asked to restart from.
        seq: u64,
        /// Why not, and where it could restart from.
        reason: String,
    },
    /// The tenant has as many reads of streams open on this host as it may.
    #[error(
        "the tenant already has {limit} reads of streams open on this host, the limit: close one, or read on later"
    )]
    StreamReaders {
        /// Reads a tenant may have open on a host ([`MAX_STREAM_READERS`]).
        limit: usize,
    },
}

impl RunError {
    /// Whether a record of the run is corrupt: the run cannot go on, but
    /// nothing about the tenant's other runs depends on it.
    pub fn is_corrupt_record(&self) -> bool {
        matches!(self, Self::Journal(error) if matches!(&**error, JournalError::Corrupt { .. }))
    }

    /// Whether this host's claim on the run lapsed, so it stood down, or
    /// its lease lapsed while it stored a run the run's driver started (a
    /// child or the next generation: `Interrupted`): the run may go on
    /// here once claimed again, or on another host.
    pub fn is_stood_down(&self) -> bool {
        match self {
            Self::Journal(error) => matches!(&**error, JournalError::StoodDown { .. }),
            Self::Interrupted { .. } => true,
            _ => false,
        }
    }

    /// This error of a read of `run`, which found gone something it had
    /// listed: the run is being deleted (retention deletes its record
    /// last), so it is unknown from now on (found by the simulation: a
    /// history, and a restart, read as retention swept the run).
    pub(super) fn deleted_meanwhile(self, run: &RunId) -> Self {
        match &self {
            Self::Journal(read) if matches!(**read, JournalError::Store(StoreError::NotFound { .. })) => {
                Self::UnknownRun { run: run.clone() }
            }
            _ => self,
        }
    }

    /// Whether the store kept failing, or kept changing under a read of
    /// the ledger (see [`JournalError::Unsettled`]): nothing about the run
    /// was decided, so driving it again once storage recovers continues it.
    pub fn is_storage_failure(&self) -> bool {
        match self {
            Self::Journal(error) => matches!(
                &**error,
                JournalError::Store(StoreError::Unavailable { .. }) | JournalError::Unsettled { .. }
            ),
            Self::Component(ComponentError::Store(StoreError::Unavailable { .. }))
            | Self::Schedule(ScheduleError::Store(StoreError::Unavailable { .. }))
            | Self::Secrets(SecretError::Store(StoreError::Unavailable { .. })) => true,
            _ => false,
        }
    }
}

impl From<JournalError> for RunError {
    fn from(error: JournalError) -> Self {
        Self::Journal(Arc::new(error))
    }
}

impl From<LiveError> for RunError {
    fn from(error: LiveError) -> Self {
        match error {
            LiveError::Store(e) => e.into(),
            e => Self::NotLive(e),
        }
    }
}

impl From<StoreError> for RunError {
    fn from(error: StoreError) -> Self {
        JournalError::from(error).into()
    }
}

/// A run whose records could not be read, named with why, so that a
/// listing or a recovery passes over it and goes on with the others.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct UnreadableRun {
    /// The run passed over.
    #[schema(value_type = String)]
    pub run_id: RunId,
    /// What is wrong, naming the record's key.
    pub error: String,
}

/// Runs of a tenant, and those passed over because a record is corrupt.
#[derive(Debug)]
pub struct RunListing<T> {
    /// The runs read, in the listing's order.
    pub runs: Vec<T>,
    /// The runs passed over, each with why.
    pub unreadable: Vec<UnreadableRun>,
}

impl<T> Default for RunListing<T> {
    fn default() -> Self {
        Self {
            runs: Vec::new(),
            unreadable: Vec::new(),
        }
    }
}

impl<T> RunListing<T> {
    /// What reading `run` gave: its value; or nothing, when it is no run
    /// (a folder without a record) or its record is corrupt (noted, and
    /// logged as an error naming the key). Any other error, such as a
    /// failing store, ends the listing: it decided nothing.
    fn read<V>(&mut self, run: &RunId, read: Result<V, RunError>) -> Result<Option<V>, RunError> {
        match read {
            Ok(value) => Ok(Some(value)),
            Err(RunError::UnknownRun { .. }) => Ok(None),
            Err(e) if e.is_corrupt_record() => {
                tracing::error!(%run, "passing over run `{run}`, whose records cannot be read: {e}");
                self.unreadable.push(UnreadableRun {
                    run_id: run.clone(),
                    error: e.to_string(),
                });
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// How far a drive got.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// The run ended, with this outcome (`Continued` for a generation that
    /// continued as new).
    Finished(Outcome),
    /// The run waits with no instance; wake it by driving it again.
    Suspended(Suspension),
}

/// The host's entry point, a thin front over what it owns: its [`Runs`],
/// its [`Catalog`] of components, the tenants' policies, and the features
/// ([`Groups`], [`Upgrades`], [`Retention`], [`Search`], [`Logs`], [`Schedules`],
/// [`Secrets`], [`Usage`]). Cheap to clone,
/// shared by every caller.
#[derive(Clone)]
pub struct Runtime {
    runs: Runs,
}

impl Runtime {
    /// A runtime over `storage`, its compiled components kept in `cache`.
    pub fn new(config: HostConfig, storage: Storage, cache: CodeCache) -> Result<Self, RunError> {
        Ok(Self {
            runs: Runs::build(config, storage, cache, None)?,
        })
    }

    /// A runtime whose step attempts `stand_in` answers, or lets the real
    /// steps run (see [`StepStandIn`]): for tests.
    pub fn with_step_stand_in(
        config: HostConfig,
        storage: Storage,
        cache: CodeCache,
        stand_in: Arc<dyn StepStandIn>,
    ) -> Result<Self, RunError> {
        Ok(Self {
            runs: Runs::build(config, storage, cache, Some(stand_in))?,
        })
    }

    /// The host configuration the runtime was built with.
    pub fn config(&self) -> &HostConfig {
        &self.runs.host.config
    }

    /// The host's metrics, which its runs and steps update.
    pub fn metrics(&self) -> &Metrics {
        &self.runs.host.metrics
    }

    // Tenants: their policies, and which ones this host serves.

    /// Holds `tenant` to `policy` from now on: runs and attempts started
    /// afterwards, and every upload, submission and signal.
    pub fn set_policy(&self, tenant: &TenantId, policy: TenantPolicy) {
        self.runs.host.policies.set(tenant, policy);
    }

    /// The policy `tenant` is held to now.
    pub fn policy(&self, tenant: &TenantId) -> Arc<TenantPolicy> {
        self.runs.policy(tenant)
    }

    /// Holds each tenant of `tenants` to its policy now, and again each
    /// time the file changes (see [`LiveTenants::follow`]); a tenant new to
    /// the host has its unfinished runs recovered and is served from then
    /// on; one taken out of the file is no longer served and falls back to
    /// the default policy (replacing any [`set_policy`](Self::set_policy)
    /// gave). Outside a Tokio runtime, only the policies of now are set.
    pub fn follow_tenants(&self, tenants: &LiveTenants) {
        tenants::follow(self, tenants);
    }

    /// Makes `tenants` the ones this host serves in the background (takes
    /// over their runs from dead hosts, fires their schedules, sends their
    /// notifications), from now on; answers those it did not serve before,
    /// whose unfinished runs the caller recovers.
    pub fn serve_tenants(&self, tenants: impl IntoIterator<Item = TenantId>) -> Vec<TenantId> {
        let tenants: BTreeSet<TenantId> = tenants.into_iter().collect();
        let mut added = Vec::new();
        self.runs.host.served.send_if_modified(|served| {
            added = tenants.difference(served).cloned().collect();
            let changed = *served != tenants;
            *served = tenants;
            changed
        });
        added
    }

    // What the runtime owns.

    /// The runs: submitted, driven, controlled and inspected.
    pub fn runs(&self) -> &Runs {
        &self.runs
    }

    /// The tenants' components: uploaded, named, looked up, deleted.
    pub fn catalog(&self) -> &Catalog {
        &self.runs.host.catalog
    }

    /// The tenants' HTTP hooks, each starting a run per signed request.
    pub fn hooks(&self) -> crate::http_hooks::Hooks {
        crate::http_hooks::Hooks::new(self.runs.host.storage.clone())
    }

    /// Stores the tenant's hook `name` (its header names lowercased), once
    /// its component is found to have its workflow.
    pub async fn put_hook(
        &self,
        tenant: &TenantId,
        name: &crate::store::HookName,
        hook: crate::http_hooks::Hook,
    ) -> Result<crate::http_hooks::Hook, RunError> {
        let hook = hook.checked()?;
        let component = self.component(tenant, hook.component.as_str()).await?;
        if !component.has_workflow(hook.workflow.as_str()) {
            return Err(RunError::UnknownWorkflow {
                workflow: hook.workflow.to_string(),
                digest: component.digest.clone(),
                available: component.manifest.workflows.join(", "),
            });
        }
        self.hooks().put(tenant, name, &hook).await?;
        Ok(hook)
    }

    /// Searching the runs, a page at a time.
    pub fn search(&self) -> Search {
        Search::new(self.runs.clone())
    }

    /// The runs' stored logs, a page at a time.
    pub fn logs(&self) -> Logs {
        Logs::new(self.runs.host.storage.clone())
    }

    /// Run groups: many runs submitted, watched and cancelled as one.
    pub fn groups(&self) -> Groups {
        Groups::new(self.runs.clone())
    }

    /// Upgrades: runs replayed against a new build, and moved to it.
    pub fn upgrades(&self) -> Upgrades {
        Upgrades::new(self.runs.clone())
    }

    /// The sweeper of runs past their tenant's retention.
    pub fn retention(&self) -> &Arc<Retention> {
        &self.runs.host.retention
    }

    /// Tenants' cron schedules; [`fire_schedules`](Self::fire_schedules) fires them.
    pub fn schedules(&self) -> &Schedules {
        self.runs.schedules()
    }

    /// Tenants' secrets: set and list them here; steps read them.
    pub fn secrets(&self) -> &Secrets {
        &self.runs.host.secrets
    }

    /// What each tenant used per day, over every host.
    pub fn usage(&self) -> &Arc<Usage> {
        &self.runs.host.usage
    }

    /// Fires the schedules of the served tenants from a background task,
    /// for as long as the process lives.
    pub fn fire_schedules(&self) {
        crate::schedules::fire_in_background(self.runs.clone());
    }

    /// Sends the notifications of the served tenants' ended runs from a
    /// background task, for as long as the process lives.
    pub fn deliver_notifications(&self) {
        self.runs.host.hooks.deliver(self.runs.served_changes());
    }

    // The calls most callers make, each the [`Runs`] method of its name.

    /// Validates a component without storing anything.
    pub async fn validate(&self, what: &str, bytes: Bytes) -> Result<Arc<Loaded>, RunError> {
        self.catalog().validate(what, bytes).await
    }

    /// See [`Catalog::upload`].
    pub async fn upload(
        &self,
        tenant: &TenantId,
        bytes: Bytes,
        name: Option<&ComponentName>,
    ) -> Result<Arc<Loaded>, RunError> {
        self.catalog().upload(tenant, bytes, name).await
    }

    /// See [`Catalog::component`].
    pub async fn component(&self, tenant: &TenantId, reference: &str) -> Result<Arc<Loaded>, RunError> {
        self.catalog().component(tenant, reference).await
    }

    /// See [`Runs::submit`].
    pub async fn submit(&self, tenant: &TenantId, submission: Submission) -> Result<RunId, RunError> {
        self.runs.submit(tenant, submission).await
    }

    /// See [`Runs::start`].
    pub async fn start(&self, tenant: &TenantId, submission: Submission) -> Result<RunId, RunError> {
        self.runs.start(tenant, submission).await
    }

    /// See [`Runs::run_to_end`].
    pub async fn run_to_end(
        &self,
        tenant: &TenantId,
        run: &RunId,
        detach_after: Option<Duration>,
    ) -> Result<Progress, RunError> {
        self.runs.run_to_end(tenant, run, detach_after).await
    }

    /// See [`Runs::status`].
    pub async fn status(&self, tenant: &TenantId, run: &RunId) -> Result<RunStatus, RunError> {
        self.runs.status(tenant, run).await
    }

    /// See [`Runs::history`].
    pub async fn history(&self, tenant: &TenantId, run: &RunId) -> Result<Vec<Entry>, RunError> {
        self.runs.history(tenant, run).await
    }

    /// See [`Runs::list`].
    pub async fn list(&self, tenant: &TenantId) -> Result<RunListing<RunStatus>, RunError> {
        self.runs.list(tenant).await
    }

    /// See [`Runs::signal`].
    pub async fn signal(
        &self,
        tenant: &TenantId,
        run: &RunId,
        name: &SignalName,
        payload: &str,
    ) -> Result<(), RunError> {
        self.runs.signal(tenant, run, name, payload).await
    }

    /// See [`Runs::cancel`].
    pub async fn cancel(&self, tenant: &TenantId, run: &RunId, reason: &str) -> Result<(), RunError> {
        self.runs.cancel(tenant, run, reason).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run stopped by a store outage is driven again once the store is
    /// back; opening the tenant's secrets is a store call like any other.
    #[test]
    fn a_store_outage_while_opening_secrets_is_a_storage_failure() {
        let outage = || StoreError::Unavailable {
            key: "secrets".into(),
            attempts: 3,
            cause: object_store::Error::NotFound {
                path: "secrets".into(),
                source: "gone".into(),
            },
        };
        assert!(RunError::Secrets(SecretError::Store(outage())).is_storage_failure());
        assert!(RunError::from(outage()).is_storage_failure());
        assert!(!RunError::Secrets(SecretError::NoKey).is_storage_failure());
    }

    /// A run whose driver lost its lease while storing the run it started
    /// (its next generation, a child) stood down: it is driven again, not
    /// stopped for good (simulation seed 11: a chain stopped, undriven,
    /// when its generation's submission was interrupted).
    #[test]
    fn a_submission_interrupted_by_a_lapsed_lease_stands_the_run_down() {
        let run = RunId::new("r1").expect("an id");
        assert!(RunError::Interrupted { run: run.clone() }.is_stood_down());
        assert!(!RunError::BeingDeleted { run }.is_stood_down());
    }
}
