//! Admission of new runs, per tenant: how many may be active at once, how
//! many may start a minute, and how deep and wide a tree of child runs may
//! grow.
//!
//! Invariant: a run a client submits and a child a workflow starts are
//! admitted alike, so a workflow that starts children of itself meets the
//! same quotas as a client that floods the API, and cannot outgrow them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::Policies;
use crate::shared_map::lock;
use crate::store::TenantId;

/// What one tenant may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunQuotas {
    /// Runs of the tenant being driven at once, children included.
    pub max_active_runs: usize,
    /// Runs the tenant may start a minute, children included.
    pub max_new_runs_per_minute: u32,
    /// How deep a tree of child runs may grow: a top-level run is at depth
    /// 0, its children at 1.
    pub max_child_depth: u32,
    /// Children one run may start.
    pub max_children_per_run: u32,
}

impl Default for RunQuotas {
    fn default() -> Self {
        Self {
            max_active_runs: 10_000,
            max_new_runs_per_minute: 60_000,
            max_child_depth: 8,
            max_children_per_run: 1_000,
        }
    }
}

/// Why a run may not start now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The tenant has as many active runs as it may: ask again once some finish.
    #[error("the tenant already has {limit} active runs, its quota: wait for some to finish")]
    ActiveRuns {
        /// Runs the tenant may have active at once.
        limit: usize,
    },
    /// The tenant has started as many runs this minute as it may: ask again after `retry_after`.
    #[error("the tenant may start {limit} runs a minute, its quota")]
    Rate {
        /// Runs the tenant may start a minute.
        limit: u32,
        /// How long until the minute's window ends (at least 1 s).
        retry_after: Duration,
    },
    /// The child would nest deeper than the tenant's child runs may.
    #[error("a child at depth {depth} is past the limit of {limit}: child workflows may nest only so deep")]
    Depth {
        /// The depth the child would be at (a top-level run is at 0).
        depth: u32,
        /// The deepest a child run may be.
        limit: u32,
    },
    /// The run has started as many children as one run may: start fewer, or nest them.
    #[error("the run has started {limit} children, the limit for one run: start fewer, or nest them")]
    Children {
        /// Children one run may start.
        limit: u32,
    },
    /// The parent run is being cancelled, so it may start no child run.
    #[error("the run is being cancelled, so it starts no more child runs")]
    Cancelling,
    /// The tenant has burnt its fuel for the UTC day: ask again after `retry_after`.
    #[error("the tenant has burnt its {limit} fuel for today (UTC), its quota: wait for the next day")]
    FuelSpent {
        /// Fuel the tenant may burn a UTC day.
        limit: u64,
        /// How long until the next UTC day begins (at least 1 s).
        retry_after: Duration,
    },
}

impl Refusal {
    /// When asking again may succeed: `None` for a limit time does not lift.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::ActiveRuns { .. } => Some(Duration::from_secs(1)),
            Self::Rate { retry_after, .. } | Self::FuelSpent { retry_after, .. } => Some(*retry_after),
            Self::Depth { .. } | Self::Children { .. } | Self::Cancelling => None,
        }
    }
}

/// New runs admitted in the current minute.
struct RateWindow {
    started: Instant,
    admitted: u32,
}

/// What the tenants have used of their rate, held to their policies.
pub struct Admission {
    policies: Arc<Policies>,
    windows: Mutex<HashMap<TenantId, RateWindow>>,
}

impl Admission {
    /// Admission held to `policies`, with no run counted yet.
    pub fn new(policies: Arc<Policies>) -> Self {
        Self {
            policies,
            windows: Mutex::default(),
        }
    }

    fn quotas(&self, tenant: &TenantId) -> RunQuotas {
        self.policies.of(tenant).runs
    }

    /// Admits one new run of `tenant`, which has `active` runs now, or
    /// says why not. An admitted run counts against the minute's rate.
    pub fn admit(&self, tenant: &TenantId, active: usize) -> Result<(), Refusal> {
        let quotas = self.quotas(tenant);
        if active >= quotas.max_active_runs {
            return Err(Refusal::ActiveRuns {
                limit: quotas.max_active_runs,
            });
        }
        const MINUTE: Duration = Duration::from_secs(60);
        let mut windows = lock(&self.windows);
        let window = windows.entry(tenant.clone()).or_insert(RateWindow {
            started: Instant::now(),
            admitted: 0,
        });
        if window.started.elapsed() >= MINUTE {
            *window = RateWindow {
                started: Instant::now(),
                admitted: 0,
            };
        }
        if window.admitted >= quotas.max_new_runs_per_minute {
            let left = MINUTE.saturating_sub(window.started.elapsed());
            return Err(Refusal::Rate {
                limit: quotas.max_new_runs_per_minute,
                retry_after: left.max(Duration::from_secs(1)),
            });
        }
        window.admitted += 1;
        Ok(())
    }

    /// Whether a run at `depth` that has started `started` children may
    /// start another.
    pub fn admit_child(&self, tenant: &TenantId, depth: u32, started: usize) -> Result<(), Refusal> {
        let quotas = self.quotas(tenant);
        let child_depth = depth.saturating_add(1);
        if child_depth > quotas.max_child_depth {
            return Err(Refusal::Depth {
                depth: child_depth,
                limit: quotas.max_child_depth,
            });
        }
        if started >= quotas.max_children_per_run as usize {
            return Err(Refusal::Children {
                limit: quotas.max_children_per_run,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HostConfig;
    use crate::policy::TenantPolicy;

    fn tenant() -> TenantId {
        TenantId::new("acme").expect("a valid id")
    }

    fn admission() -> (Admission, Arc<Policies>) {
        let policies = Arc::new(Policies::new(TenantPolicy::default_for(&HostConfig::new())));
        (Admission::new(policies.clone()), policies)
    }

    #[test]
    fn runs_are_admitted_up_to_the_active_and_rate_quotas() {
        let (admission, policies) = admission();
        let runs = RunQuotas {
            max_active_runs: 5,
            max_new_runs_per_minute: 3,
            ..RunQuotas::default()
        };
        policies.set(
            &tenant(),
            TenantPolicy {
                runs,
                ..TenantPolicy::default_for(&HostConfig::new())
            },
        );
        assert_eq!(admission.admit(&tenant(), 5), Err(Refusal::ActiveRuns { limit: 5 }));
        for _ in 0..3 {
            admission.admit(&tenant(), 0).expect("within the rate");
        }
        let refused = admission.admit(&tenant(), 0).expect_err("over the rate");
        assert!(matches!(refused, Refusal::Rate { limit: 3, .. }), "{refused:?}");
        assert!(
            refused
                .retry_after()
                .is_some_and(|wait| wait <= Duration::from_secs(60))
        );
        let other = TenantId::new("globex").expect("a valid id");
        admission.admit(&other, 0).expect("another tenant has its own window");
    }

    #[test]
    fn children_are_bounded_in_depth_and_number() {
        let (admission, _) = admission();
        let limits = RunQuotas::default();
        admission
            .admit_child(&tenant(), limits.max_child_depth - 1, 0)
            .expect("the deepest child allowed");
        let deep = admission.admit_child(&tenant(), limits.max_child_depth, 0);
        assert_eq!(
            deep,
            Err(Refusal::Depth {
                depth: limits.max_child_depth + 1,
                limit: limits.max_child_depth
            })
        );
        let wide = admission.admit_child(&tenant(), 0, limits.max_children_per_run as usize);
        assert_eq!(wide.map_err(|e| e.retry_after()), Err(None));
        assert!(admission.admit_child(&tenant(), u32::MAX, 0).is_err());
    }
}
