//! Each tenant's policy: what its runs, steps and components may use, in
//! the types the runtime enforces them with, and where each is enforced.
//!
//! A [`TenantPolicy`] is built from the tenants file
//! ([`Quotas::policy`](crate::tenancy::Quotas::policy)) or by a library
//! user, and handed to [`Runtime::set_policy`](crate::runtime::Runtime::set_policy)
//! (or [`Runtime::follow_tenants`](crate::runtime::Runtime::follow_tenants),
//! which also follows the file's changes).
//!
//! Invariant: every quota is held by the runtime, whoever calls it (the HTTP
//! API, the CLI, an embedder), so no caller can skip one:
//! - runs: [`admission`] (active runs, runs a minute, children's depth and
//!   number) and [`TenantPolicy::check_fuel`], the daily fuel budget, on
//!   every new run and before every step attempt (the day's use counted by
//!   `runtime::usage`);
//! - payloads: [`TenantPolicy::check_payload`], on every input, signal and
//!   schedule input;
//! - components: [`components`] (size, count, stored bytes, compile time);
//! - steps: [`StepLimits`], the ceiling a step call's options can only
//!   lower, and [`Outbound`], the origins its HTTP requests may reach;
//! - retention: how long finished runs are kept (`runtime::retention`).
//!
//! A tenant without a policy of its own gets the host's default, built from
//! its [`HostConfig`].

pub mod admission;
pub mod components;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::egress::Outbound;
pub use admission::{Admission, Refusal, RunQuotas};
pub use components::{ComponentQuotas, OverQuota, Uploads};

use crate::config::{HostConfig, StepLimits};
use crate::shared_map::lock;
use crate::store::TenantId;

/// What one tenant may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantPolicy {
    /// The most one step attempt may use (fuel, memory, time, output,
    /// scratch, retries, HTTP).
    pub steps: StepLimits,
    /// The origins its steps and webhooks may send HTTP requests to.
    pub outbound: Arc<Outbound>,
    /// The runs it may start.
    pub runs: RunQuotas,
    /// The components it may store.
    pub components: ComponentQuotas,
    /// Bytes of one input, signal payload or schedule input.
    pub max_payload_bytes: usize,
    /// How long its finished runs are kept (`None`: for ever).
    pub retention: Option<Duration>,
    /// Fuel its step attempts may burn a UTC day, over every host (`None`:
    /// no daily budget).
    pub fuel_per_day: Option<u64>,
}

/// Bytes of one payload a tenant may send, unless its policy says otherwise.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 64 << 20;

impl TenantPolicy {
    /// The policy of a tenant the host was told nothing about: the host's
    /// step limits, no outgoing HTTP, the default quotas, runs kept for
    /// ever, no daily fuel budget.
    pub fn default_for(config: &HostConfig) -> Self {
        Self {
            steps: config.step,
            outbound: Arc::default(),
            runs: RunQuotas::default(),
            components: ComponentQuotas::default(),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            retention: None,
            fuel_per_day: None,
        }
    }

    /// Refuses a payload (`what`: "the input", "the payload") over
    /// [`max_payload_bytes`](Self::max_payload_bytes).
    pub fn check_payload(&self, what: &str, size: usize) -> Result<(), OverQuota> {
        if size > self.max_payload_bytes {
            return Err(OverQuota::Payload {
                what: what.to_owned(),
                size,
                limit: self.max_payload_bytes,
            });
        }
        Ok(())
    }

    /// Refuses anything new once `spent` (the fuel burnt in the UTC day
    /// of `now_ms`, over every host) reaches
    /// [`fuel_per_day`](Self::fuel_per_day), until the next day.
    pub fn check_fuel(&self, spent: u64, now_ms: u64) -> Result<(), Refusal> {
        match self.fuel_per_day {
            Some(limit) if spent >= limit => {
                let next_day_ms = (now_ms / DAY_MS).saturating_add(1).saturating_mul(DAY_MS);
                Err(Refusal::FuelSpent {
                    limit,
                    retry_after: Duration::from_millis(next_day_ms.saturating_sub(now_ms)).max(Duration::from_secs(1)),
                })
            }
            _ => Ok(()),
        }
    }
}

/// A UTC day, in milliseconds (the Unix epoch counts no leap seconds).
pub(crate) const DAY_MS: u64 = 86_400_000;

/// Every tenant's policy on this host, and the default for the rest.
pub struct Policies {
    default: Arc<TenantPolicy>,
    by_tenant: Mutex<HashMap<TenantId, Arc<TenantPolicy>>>,
}

impl Policies {
    /// Holds every tenant to `default` until [`set`](Self::set) gives it a policy of its own.
    pub fn new(default: TenantPolicy) -> Self {
        Self {
            default: Arc::new(default),
            by_tenant: Mutex::default(),
        }
    }

    /// Holds `tenant` to `policy` from now on.
    pub fn set(&self, tenant: &TenantId, policy: TenantPolicy) {
        lock(&self.by_tenant).insert(tenant.clone(), Arc::new(policy));
    }

    /// Holds exactly `tenants` to their policies from now on: a tenant
    /// given one before and not among them gets the default again (its
    /// finished runs are no longer swept for it).
    pub fn replace(&self, tenants: impl IntoIterator<Item = (TenantId, TenantPolicy)>) {
        let by_tenant = tenants
            .into_iter()
            .map(|(tenant, policy)| (tenant, Arc::new(policy)))
            .collect();
        *lock(&self.by_tenant) = by_tenant;
    }

    /// The policy `tenant` is held to now.
    pub fn of(&self, tenant: &TenantId) -> Arc<TenantPolicy> {
        lock(&self.by_tenant)
            .get(tenant)
            .cloned()
            .unwrap_or_else(|| self.default.clone())
    }

    /// The tenants whose finished runs are deleted after a while, and
    /// that while.
    pub fn retentions(&self) -> Vec<(TenantId, Duration)> {
        lock(&self.by_tenant)
            .iter()
            .filter_map(|(tenant, policy)| Some((tenant.clone(), policy.retention?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_without_a_policy_gets_the_default_and_one_set_replaces_it() {
        let config = HostConfig::new();
        let policies = Policies::new(TenantPolicy::default_for(&config));
        let acme = TenantId::new("acme").expect("a valid id");
        assert_eq!(policies.of(&acme).steps, config.step);
        assert!(policies.retentions().is_empty());

        let kept = TenantPolicy {
            retention: Some(Duration::from_secs(60)),
            max_payload_bytes: 10,
            ..TenantPolicy::default_for(&config)
        };
        policies.set(&acme, kept.clone());
        assert_eq!(policies.retentions(), vec![(acme.clone(), Duration::from_secs(60))]);
        let other = TenantId::new("other").expect("a valid id");
        policies.replace([(other.clone(), kept.clone())]);
        assert_eq!(
            policies.of(&acme).max_payload_bytes,
            DEFAULT_MAX_PAYLOAD_BYTES,
            "acme left the file"
        );
        assert_eq!(policies.retentions(), vec![(other, Duration::from_secs(60))]);
        policies.replace([(acme.clone(), kept)]);
        let policy = policies.of(&acme);
        assert!(policy.check_payload("the input", 10).is_ok());
        let refused = policy.check_payload("the input", 11).expect_err("one byte over");
        assert_eq!(
            refused.to_string(),
            "the input is 11 bytes; this tenant's quota allows at most 10: send less, or ask the operator for a larger quota"
        );
        let other = TenantId::new("globex").expect("a valid id");
        assert_eq!(policies.of(&other).max_payload_bytes, DEFAULT_MAX_PAYLOAD_BYTES);
    }

    /// The budget's edges: one fuel short passes, the limit itself is
    /// refused until the next UTC day (never less than a second ahead, even
    /// at the end of time), a budget of 0 refuses everything, none refuses
    /// nothing.
    #[test]
    fn the_daily_fuel_budget_refuses_from_its_limit_to_the_next_utc_day() {
        let policy = TenantPolicy {
            fuel_per_day: Some(1000),
            ..TenantPolicy::default_for(&HostConfig::new())
        };
        let noon = 20_000 * DAY_MS + DAY_MS / 2;
        assert!(policy.check_fuel(999, noon).is_ok());
        let refused = policy.check_fuel(1000, noon).expect_err("the limit reached");
        assert!(matches!(refused, Refusal::FuelSpent { limit: 1000, .. }), "{refused}");
        assert_eq!(refused.retry_after(), Some(Duration::from_millis(DAY_MS / 2)));
        let last_ms = 20_001 * DAY_MS - 1;
        assert_eq!(
            policy.check_fuel(u64::MAX, last_ms).expect_err("over").retry_after(),
            Some(Duration::from_secs(1))
        );
        assert!(policy.check_fuel(u64::MAX, u64::MAX).is_err());

        let none = TenantPolicy {
            fuel_per_day: Some(0),
            ..policy.clone()
        };
        assert!(none.check_fuel(0, noon).is_err());
        let unbounded = TenantPolicy {
            fuel_per_day: None,
            ..policy
        };
        assert!(unbounded.check_fuel(u64::MAX, noon).is_ok());
    }
}
