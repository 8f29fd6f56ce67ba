//! Every limit and tunable of the host, in one struct, so the CLI, the tests
//! and (later) per-tenant quotas all configure the host the same way.

use std::path::PathBuf;
use std::time::Duration;

/// Limits applied to one step attempt. A step call's options may lower them,
/// never raise them (see [`StepLimits::lowered_by`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepLimits {
    /// Fuel one attempt may burn (about one unit per WebAssembly instruction).
    pub fuel: u64,
    /// Linear memory one attempt may grow to, in bytes.
    pub memory_bytes: usize,
    /// Table elements one attempt may grow to.
    pub table_elements: usize,
    /// Wall-clock time one attempt may take.
    pub timeout: Duration,
    /// Size of a step's output, in bytes.
    pub max_output_bytes: usize,
    /// Whether each attempt gets a fresh scratch directory, preopened as
    /// `/scratch` and removed after the attempt (a tenant's policy).
    pub scratch_dir: bool,
}

impl Default for StepLimits {
    fn default() -> Self {
        Self {
            fuel: 100_000_000_000,
            memory_bytes: 256 << 20,
            table_elements: 100_000,
            timeout: Duration::from_secs(60),
            max_output_bytes: 1 << 20,
            scratch_dir: false,
        }
    }
}

/// Step limits a run or a step call asks for. Each one set can lower the
/// limit in force, never raise it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LimitRequest {
    pub fuel: Option<u64>,
    pub memory_bytes: Option<usize>,
    pub timeout_ms: Option<u64>,
    pub max_output_bytes: Option<usize>,
}

impl StepLimits {
    /// These limits, lowered (never raised) by `request`.
    pub fn lowered_by(self, request: &LimitRequest) -> Self {
        fn lower<T: Ord + Copy>(limit: T, asked: Option<T>) -> T {
            asked.map_or(limit, |asked| asked.min(limit))
        }
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
    pub activation_fuel: u64,
    /// Wall-clock time one activation may take.
    pub activation_timeout: Duration,
    /// Linear memory the workflow instance may grow to, in bytes.
    pub memory_bytes: usize,
    /// Table elements the workflow instance may grow to.
    pub table_elements: usize,
    /// Size of a run's input, a step's input or a workflow's output, in bytes.
    pub max_payload_bytes: usize,
}

impl Default for WorkflowLimits {
    fn default() -> Self {
        Self {
            activation_fuel: 1_000_000_000,
            activation_timeout: Duration::from_secs(10),
            memory_bytes: 256 << 20,
            table_elements: 100_000,
            max_payload_bytes: 1 << 20,
        }
    }
}

/// Limits on what one run may accumulate in the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// Durable calls one run may journal.
    pub max_journal_entries: u64,
    /// Signals waiting, untaken, for one run.
    pub max_buffered_signals: usize,
    /// Bytes of guest log lines one execution of a run may write; the rest
    /// is dropped, once, with a warning.
    pub max_log_bytes: usize,
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            max_journal_entries: 100_000,
            max_buffered_signals: 1_000,
            max_log_bytes: 1 << 20,
        }
    }
}

/// How the host behaves while a run waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// A run waiting longer than this drops its instance (it is evicted) and is
    /// replayed when woken, so waiting runs hold no memory.
    pub eviction_threshold: Duration,
    /// How often a waiting run looks for a signal in the store.
    pub signal_poll_interval: Duration,
}

impl Default for WaitPolicy {
    fn default() -> Self {
        Self {
            eviction_threshold: Duration::from_secs(5),
            signal_poll_interval: Duration::from_millis(50),
        }
    }
}

/// The host's whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostConfig {
    pub step: StepLimits,
    pub workflow: WorkflowLimits,
    pub run: RunLimits,
    pub wait: WaitPolicy,
    /// Use wasmtime's pooling allocator when the platform allows it.
    pub pooling: bool,
    /// How many instances of each role the pool holds at once.
    pub pool_instances: u32,
    /// Where steps' scratch directories are made.
    pub scratch_root: PathBuf,
}

impl HostConfig {
    /// The defaults, with pooling on.
    pub fn new() -> Self {
        Self {
            pooling: true,
            pool_instances: 256,
            scratch_root: std::env::temp_dir().join("stepstone-scratch"),
            ..Self::default()
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
}
