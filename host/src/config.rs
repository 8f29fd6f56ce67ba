//! Every limit and tunable of the host, in one struct, so the CLI, the tests
//! and (later) per-tenant quotas all configure the host the same way.

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
}

impl Default for StepLimits {
    fn default() -> Self {
        Self {
            fuel: 100_000_000_000,
            memory_bytes: 256 << 20,
            table_elements: 100_000,
            timeout: Duration::from_secs(60),
            max_output_bytes: 1 << 20,
        }
    }
}

impl StepLimits {
    /// These limits, lowered (never raised) by a step call's own options.
    pub fn lowered_by(self, fuel: Option<u64>, timeout: Option<Duration>) -> Self {
        Self {
            fuel: fuel.map_or(self.fuel, |f| f.min(self.fuel)),
            timeout: timeout.map_or(self.timeout, |t| t.min(self.timeout)),
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
    pub wait: WaitPolicy,
    /// Use wasmtime's pooling allocator when the platform allows it.
    pub pooling: bool,
    /// How many instances of each role the pool holds at once.
    pub pool_instances: u32,
}

impl HostConfig {
    /// The defaults, with pooling on.
    pub fn new() -> Self {
        Self { pooling: true, pool_instances: 256, ..Self::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_lower_limits_but_never_raise_them() {
        let host = StepLimits { fuel: 100, timeout: Duration::from_secs(5), ..StepLimits::default() };
        let lowered = host.lowered_by(Some(10), Some(Duration::from_secs(1)));
        assert_eq!((lowered.fuel, lowered.timeout), (10, Duration::from_secs(1)));
        let raised = host.lowered_by(Some(1_000), Some(Duration::from_secs(50)));
        assert_eq!((raised.fuel, raised.timeout), (100, Duration::from_secs(5)));
        assert_eq!(host.lowered_by(None, None), host);
    }
}
