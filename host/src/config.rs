//! Every limit and tunable of the host, in one struct, so the CLI, the tests
//! and a library user all configure the host the same way; what one tenant
//! may use of it is that tenant's [`crate::policy::TenantPolicy`].

use std::path::PathBuf;
use std::time::Duration;

use crate::cluster::HostId;
pub use crate::cluster::LeasePolicy;
pub use crate::egress::{AllowedOrigin, AllowlistSetting, EgressConfig, InvalidOrigin};

/// Bounds on any step call's retry policy, whatever its options ask: a
/// guest asking for endless attempts with no wait between them gets at most
/// `max_attempts`, at least `min_backoff` apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryLimits {
    /// Attempts one step call may make.
    ///
    /// Default: 100.
    pub max_attempts: u32,
    /// The shortest wait between two attempts.
    ///
    /// Default: 100 ms.
    pub min_backoff: Duration,
    /// The longest wait between two attempts.
    ///
    /// Default: 24 h.
    pub max_backoff: Duration,
}

impl Default for RetryLimits {
    fn default() -> Self {
        Self {
            max_attempts: 100,
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(24 * 3600),
        }
    }
}

/// Limits applied to one step attempt, and the bounds of a step call's
/// retries. A step call's options may lower the attempt's limits, never
/// raise them (see [`StepLimits::lowered_by`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepLimits {
    /// Fuel one attempt may burn (about one unit per WebAssembly instruction).
    ///
    /// Default: 100,000,000,000.
    pub fuel: u64,
    /// Linear memory one attempt may grow to, in bytes.
    ///
    /// Default: 256 MiB.
    pub memory_bytes: usize,
    /// Table elements one attempt may grow to.
    ///
    /// Default: 100,000.
    pub table_elements: usize,
    /// Wall-clock time one attempt may take.
    ///
    /// Default: 60 s.
    pub timeout: Duration,
    /// Size of a step's output, in bytes (one past
    /// [`HostConfig::offload_payloads_above`] is stored apart).
    ///
    /// Default: 64 MiB.
    pub max_output_bytes: usize,
    /// Whether each attempt gets a fresh scratch directory, preopened as
    /// `/scratch` and removed after the attempt (a tenant's policy).
    ///
    /// Default: `false`.
    pub scratch_dir: bool,
    /// What one attempt may write into its scratch directory, in bytes
    /// (see `sandbox::ScratchBudget` for what a write costs).
    ///
    /// Default: 64 MiB.
    pub scratch_bytes: u64,
    /// Bounds on the call's retry policy.
    pub retry: RetryLimits,
    /// What one attempt may spend on outgoing HTTP.
    pub http: HttpLimits,
}

/// What one attempt may spend on outgoing HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Requests one attempt may send.
    ///
    /// Default: 100.
    pub max_requests: u32,
    /// Bytes of one request's body.
    ///
    /// Default: 1 MiB.
    pub max_request_bytes: u64,
    /// Bytes of one response's body.
    ///
    /// Default: 16 MiB.
    pub max_response_bytes: u64,
    /// How long a connection may take to open.
    ///
    /// Default: 5 s.
    pub connect_timeout: Duration,
    /// How long the first byte of a response, and each next one, may take.
    ///
    /// Default: 30 s.
    pub first_byte_timeout: Duration,
}

/// What a step call asks of [`HttpLimits`]: each bound set can lower the
/// limit in force, never raise it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpLimitRequest {
    /// Requests one attempt may send; `None` keeps the limit in force.
    pub max_requests: Option<u32>,
    /// Bytes of one request's body; `None` keeps the limit in force.
    pub max_request_bytes: Option<u64>,
    /// Bytes of one response's body; `None` keeps the limit in force.
    pub max_response_bytes: Option<u64>,
    /// How long a connection may take to open, in milliseconds; `None` keeps the limit in force.
    pub connect_timeout_ms: Option<u64>,
    /// How long the first byte of a response, and each next one, may take, in milliseconds;
    /// `None` keeps the limit in force.
    pub first_byte_timeout_ms: Option<u64>,
}

impl HttpLimits {
    /// These limits, lowered (never raised) by `request`.
    pub fn lowered_by(self, request: &HttpLimitRequest) -> Self {
        let millis = |asked: Option<u64>| asked.map(Duration::from_millis);
        Self {
            max_requests: lower(self.max_requests, request.max_requests),
            max_request_bytes: lower(self.max_request_bytes, request.max_request_bytes),
            max_response_bytes: lower(self.max_response_bytes, request.max_response_bytes),
            connect_timeout: lower(self.connect_timeout, millis(request.connect_timeout_ms)),
            first_byte_timeout: lower(self.first_byte_timeout, millis(request.first_byte_timeout_ms)),
        }
    }
}

/// `limit`, or what was `asked` if that is lower.
fn lower<T: Ord + Copy>(limit: T, asked: Option<T>) -> T {
    asked.map_or(limit, |asked| asked.min(limit))
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_requests: 100,
            max_request_bytes: 1 << 20,
            max_response_bytes: 16 << 20,
            connect_timeout: Duration::from_secs(5),
            first_byte_timeout: Duration::from_secs(30),
        }
    }
}

impl Default for StepLimits {
    fn default() -> Self {
        Self {
            fuel: 100_000_000_000,
            memory_bytes: 256 << 20,
            table_elements: 100_000,
            timeout: Duration::from_secs(60),
            max_output_bytes: 64 << 20,
            scratch_dir: false,
            scratch_bytes: 64 << 20,
            retry: RetryLimits::default(),
            http: HttpLimits::default(),
        }
    }
}

/// Step limits a run or a step call asks for. Each one set can lower the
/// limit in force, never raise it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LimitRequest {
    /// Fuel one attempt may burn; `None` keeps the limit in force.
    pub fuel: Option<u64>,
    /// Linear memory one attempt may grow to, in bytes; `None` keeps the limit in force.
    pub memory_bytes: Option<usize>,
    /// Wall-clock time one attempt may take, in milliseconds; `None` keeps the limit in force.
    pub timeout_ms: Option<u64>,
    /// Size of a step's output, in bytes; `None` keeps the limit in force.
    pub max_output_bytes: Option<usize>,
}

impl StepLimits {
    /// These limits, lowered (never raised) by `request`.
    pub fn lowered_by(self, request: &LimitRequest) -> Self {
        Self {
            fuel: lower(self.fuel, request.fuel),
            memory_bytes: lower(self.memory_bytes, request.memory_bytes),
            timeout: lower(self.timeout, request.timeout_ms.map(Duration::from_millis)),
            max_output_bytes: lower(self.max_output_bytes, request.max_output_bytes),
            ..self
        }
    }
}

/// Limits applied to a workflow's own instance. An *activation* is the code a
/// workflow runs between two journaled durable calls: it must be short, since
/// all real work belongs in steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkflowLimits {
    /// Fuel one activation may burn.
    ///
    /// Default: 1,000,000,000.
    pub activation_fuel: u64,
    /// Wall-clock time one activation may take.
    ///
    /// Default: 10 s.
    pub activation_timeout: Duration,
    /// Linear memory the workflow instance may grow to, in bytes.
    ///
    /// Default: 256 MiB.
    pub memory_bytes: usize,
    /// Table elements the workflow instance may grow to.
    ///
    /// Default: 100,000.
    pub table_elements: usize,
    /// Size of a run's input, a step's input, a memo's value, a child's
    /// input or a workflow's output, in bytes (one past
    /// [`HostConfig::offload_payloads_above`] is stored apart).
    ///
    /// Default: 64 MiB.
    pub max_payload_bytes: usize,
}

impl Default for WorkflowLimits {
    fn default() -> Self {
        Self {
            activation_fuel: 1_000_000_000,
            activation_timeout: Duration::from_secs(10),
            memory_bytes: 256 << 20,
            table_elements: 100_000,
            max_payload_bytes: 64 << 20,
        }
    }
}

/// Limits on what one run may accumulate in the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// Durable calls one run may journal.
    ///
    /// Default: 100,000.
    pub max_journal_entries: u64,
    /// Signals waiting, untaken, for one run.
    ///
    /// Default: 1,000.
    pub max_buffered_signals: usize,
    /// Bytes of guest log lines one execution of a run may write, each
    /// line counting its length plus 64 (what keeping it costs); the rest
    /// is dropped, once, with a warning.
    ///
    /// Default: 1 MiB.
    pub max_log_bytes: usize,
    /// Changes one execution may ask `patched` about (each answer is kept
    /// in memory for the execution, a `false` one without a journal entry
    /// to bound it).
    ///
    /// Default: 1,000.
    pub max_patch_changes: usize,
    /// Values one run may append to its streams, all streams together
    /// (each is a journal entry, read by every reader of the stream).
    ///
    /// Default: 10,000.
    pub max_stream_values: u64,
    /// Bytes of values one run may append to its streams, all streams
    /// together.
    ///
    /// Default: 16 MiB.
    pub max_stream_bytes: u64,
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            max_journal_entries: 100_000,
            max_buffered_signals: 1_000,
            max_log_bytes: 1 << 20,
            max_patch_changes: 1_000,
            max_stream_values: 10_000,
            max_stream_bytes: 16 << 20,
        }
    }
}

/// When a suspended run's journal is compacted into a snapshot (one object
/// holding entries `0..n`, so recovering it reads that and the entries
/// after it instead of every entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotPolicy {
    /// Entries journaled since the newest snapshot that make a new one worth
    /// writing; 0 writes none. A new snapshot also waits until the journal
    /// has grown by a quarter of the newest, so the snapshots of a run that
    /// suspends often add up to a few times its journal, not its square.
    ///
    /// Default: 256.
    pub every: u64,
}

impl Default for SnapshotPolicy {
    fn default() -> Self {
        Self { every: 256 }
    }
}

impl SnapshotPolicy {
    /// Whether a journal whose entries `0..journaled` are all stored needs a
    /// new snapshot, the newest covering `covered`.
    pub fn is_due(&self, covered: u64, journaled: u64) -> bool {
        self.every > 0 && journaled >= covered.saturating_add(self.every.max(covered / 4))
    }
}

/// How the host behaves while a run waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// A run waiting longer than this drops its instance (it is evicted) and is
    /// replayed when woken, so waiting runs hold no memory.
    ///
    /// Default: 5 s ([`WaitPolicy::serving`]: 250 ms).
    pub eviction_threshold: Duration,
    /// A run awaiting a step longer than this drops its instance too, and
    /// the step runs on without it: no instance slot is held through a long
    /// step or its retries. Longer than `eviction_threshold`, since the
    /// step's result is usually close.
    ///
    /// Default: 5 s (serving: 1 s).
    pub step_eviction_threshold: Duration,
    /// How often a waiting run looks for a signal in the store.
    ///
    /// Default: 50 ms (serving: 30 s).
    pub signal_poll_interval: Duration,
    /// How often the host looks for the wake-ups other hosts leave it (a
    /// signal or cancellation sent through them for a run it drives).
    ///
    /// Default: 250 ms.
    pub wakeup_poll_interval: Duration,
    /// How often a stream's reader looks in the store for new values and
    /// for the run's end. A value appended on this host wakes the readers
    /// here at once; this is how soon one appended on another host arrives.
    ///
    /// Default: 200 ms.
    pub stream_poll_interval: Duration,
    /// How long one read of a stream lasts at most, so that no reader holds
    /// a connection for ever: its client reads on from the offset after
    /// the last value it got (an `EventSource` does so by itself).
    ///
    /// Default: 5 min.
    pub stream_read_span: Duration,
}

impl WaitPolicy {
    /// How much longer a run waiting since `since` may keep its instance;
    /// `None` once it must be evicted. A wait that has reached the
    /// threshold is over it: on virtual time, where no time passes between
    /// two looks, "none left" must not read as "a little left".
    pub fn until_eviction(&self, since: tokio::time::Instant) -> Option<Duration> {
        self.eviction_threshold
            .checked_sub(since.elapsed())
            .filter(|left| !left.is_zero())
    }
}

impl WaitPolicy {
    /// How `stepstone serve` waits: a server holds many runs, so waiting
    /// ones give their instance back sooner, and signals reach them
    /// through the API (or a wake-up another host leaves), so the store is
    /// polled only as a backstop.
    pub fn serving() -> Self {
        Self {
            eviction_threshold: Duration::from_millis(250),
            step_eviction_threshold: Duration::from_secs(1),
            signal_poll_interval: Duration::from_secs(30),
            ..Self::default()
        }
    }
}

impl Default for WaitPolicy {
    fn default() -> Self {
        Self {
            eviction_threshold: Duration::from_secs(5),
            step_eviction_threshold: Duration::from_secs(5),
            signal_poll_interval: Duration::from_millis(50),
            wakeup_poll_interval: Duration::from_millis(250),
            stream_poll_interval: Duration::from_millis(200),
            stream_read_span: Duration::from_secs(300),
        }
    }
}

/// The host's whole configuration. Its defaults ([`HostConfig::new`], the
/// same as [`Default`]) are a host serving tenants: pooling on, 256
/// instances of each role, 1 GiB of loaded components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// Limits on each step attempt, and on a step call's retries.
    pub step: StepLimits,
    /// Limits on a workflow's own instance and each of its activations.
    pub workflow: WorkflowLimits,
    /// Limits on what one run may accumulate in the host.
    pub run: RunLimits,
    /// How the host behaves while a run waits: eviction and polling.
    pub wait: WaitPolicy,
    /// When a suspended run's journal is compacted into a snapshot.
    pub snapshots: SnapshotPolicy,
    /// How long this host's claim on its runs lasts without renewal.
    pub lease: LeasePolicy,
    /// Use wasmtime's pooling allocator when the platform allows it.
    ///
    /// Default: `true`.
    pub pooling: bool,
    /// How many instances of each role the pool holds at once.
    ///
    /// Default: 256.
    pub pool_instances: u32,
    /// Bytes of each pooled linear memory kept resident between instances:
    /// the pages an instance touched are reset in place, up to this much,
    /// rather than released and faulted in again by the next instance. It
    /// makes runtimes with large heaps start faster (measured: a JavaScript
    /// step touches ~400 KiB, and 1 MiB here instead of 256 KiB cut its
    /// attempt by a quarter), at up to this much memory per pool slot that
    /// has held an instance.
    ///
    /// Default: 1 MiB.
    pub pool_memory_keep_resident: usize,
    /// Where steps' scratch directories are made.
    ///
    /// Default: `stepstone-scratch` in the system's temporary directory.
    pub scratch_root: PathBuf,
    /// Run steps without fuel metering: for trusted steps, whose CPU time
    /// the attempt timeout still bounds. Workflows are always metered.
    ///
    /// Default: `false`.
    pub unmetered_steps: bool,
    /// Bytes of components (weighed by their size) kept loaded and compiled
    /// in memory, and again of workflow programs linked from them; the
    /// least used are dropped past it, and loaded again when next used.
    ///
    /// Default: 1 GiB.
    pub loaded_components_bytes: u64,
    /// How tenants' requests leave the host.
    pub egress: EgressConfig,
    /// This host's id among the hosts sharing the store; `None`: a fresh
    /// one naming this process (see `cluster::HostId`). A simulation of
    /// many hosts in one process names each of them. Given an id whose
    /// heartbeat is stored, the host waits a lease TTL before it joins,
    /// and is refused if another process renews it meanwhile
    /// (`LiveError::IdInUse`): two live processes may not share an id.
    ///
    /// Default: `None`.
    pub host_id: Option<HostId>,
    /// Run guest code without the epoch ticker, a thread that advances the
    /// engines' epochs every 5 ms of wall-clock time: guests are bounded
    /// by their fuel alone, never time out and never yield mid-code. For
    /// a simulation on virtual time, where a tick of the wall clock would
    /// make one seed play two ways; never for a host serving tenants.
    ///
    /// Default: `false`.
    pub untimed_guests: bool,
    /// A step's output larger than this many bytes is stored as an object
    /// of its own, named by its SHA-256, and its journal entry holds the
    /// reference: the journal, its snapshots and a replay's memory stay
    /// small, and a replay reads each such output only when the workflow
    /// reaches its call.
    ///
    /// Default: 256 KiB.
    pub offload_payloads_above: usize,
}

impl HostConfig {
    /// The defaults: see [`HostConfig`].
    pub fn new() -> Self {
        Self::default()
    }
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            step: StepLimits::default(),
            workflow: WorkflowLimits::default(),
            run: RunLimits::default(),
            wait: WaitPolicy::default(),
            snapshots: SnapshotPolicy::default(),
            lease: LeasePolicy::default(),
            pooling: true,
            pool_instances: 256,
            pool_memory_keep_resident: 1 << 20,
            scratch_root: std::env::temp_dir().join("stepstone-scratch"),
            unmetered_steps: false,
            loaded_components_bytes: 1 << 30,
            egress: EgressConfig::default(),
            host_id: None,
            untimed_guests: false,
            offload_payloads_above: 256 << 10,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_lower_limits_but_never_raise_them() {
        let host = StepLimits {
            fuel: 100,
            timeout: Duration::from_secs(5),
            ..StepLimits::default()
        };
        let asked = |fuel, timeout_ms, memory_bytes| LimitRequest {
            fuel,
            timeout_ms,
            memory_bytes,
            ..LimitRequest::default()
        };
        let lowered = host.lowered_by(&asked(Some(10), Some(1_000), Some(1 << 20)));
        assert_eq!(
            (lowered.fuel, lowered.timeout, lowered.memory_bytes),
            (10, Duration::from_secs(1), 1 << 20)
        );
        let raised = host.lowered_by(&asked(Some(1_000), Some(50_000), Some(usize::MAX)));
        assert_eq!(raised, host);
        assert_eq!(host.lowered_by(&LimitRequest::default()), host);
    }

    #[test]
    fn a_snapshot_is_due_after_every_entries_and_a_quarter_of_the_last() {
        let policy = SnapshotPolicy { every: 100 };
        assert!(!policy.is_due(0, 99));
        assert!(policy.is_due(0, 100));
        assert!(!policy.is_due(100, 199));
        assert!(policy.is_due(100, 200));
        assert!(!policy.is_due(1_000, 1_249));
        assert!(policy.is_due(1_000, 1_250));
        assert!(!policy.is_due(5_000, 4_000), "another host's newer snapshot");
        assert!(!SnapshotPolicy { every: 0 }.is_due(0, 1_000_000));
        assert!(SnapshotPolicy { every: 1 }.is_due(1, 2));
    }
}
