//! Usage: what each tenant used per UTC day (fuel burnt, runs started, step
//! attempts, outgoing HTTP requests), and the daily fuel budget held to it.
//!
//! Invariants: each host counts in memory and stores its own count of a
//! tenant's day (`usage/{day}/{host}`, overwritten by that host only, at
//! most every [`FLUSH_EVERY`]), so hosts never write the same object; a
//! day's usage is the sum over hosts. A tenant over its `fuel_per_day`
//! ([`TenantPolicy::check_fuel`](crate::policy::TenantPolicy::check_fuel))
//! gets no new run (429 until the next UTC day) and no new step attempt (it
//! waits, holding no instance, until the day turns or the budget grows).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{Refusal, RunError};
use crate::clock::now_ms;
use crate::cluster::HostId;
use crate::journal::{decode, encode};
use crate::policy::{DAY_MS, Policies};
use crate::shared_map::lock;
use crate::store::{Storage, StoreKey, TenantId};

/// How often a host stores its counts, and how old a sum over the other
/// hosts may be when the budget is checked.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);
/// How often a step attempt held back by a spent budget looks again.
const BUDGET_RECHECK: Duration = Duration::from_secs(5);

/// One tenant's use in one day.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DayUsage {
    /// Fuel its step attempts burnt.
    pub fuel: u64,
    /// Runs it started.
    pub runs: u64,
    /// Step attempts it made, failed ones included.
    pub step_attempts: u64,
    /// HTTP requests its steps sent out.
    pub outbound_requests: u64,
}

impl DayUsage {
    fn add(&mut self, other: &DayUsage) {
        self.fuel = self.fuel.saturating_add(other.fuel);
        self.runs = self.runs.saturating_add(other.runs);
        self.step_attempts = self.step_attempts.saturating_add(other.step_attempts);
        self.outbound_requests = self.outbound_requests.saturating_add(other.outbound_requests);
    }
}

/// The UTC day of `ms` (days since 1970).
pub fn day_of(ms: u64) -> u64 {
    ms / DAY_MS
}

fn day_key(day: u64) -> StoreKey {
    StoreKey::from_iter(["usage", &format!("{day:06}")])
}

/// This host's counts, and the others' sums as last read; the budgets are
/// the tenants' policies'.
pub struct Usage {
    storage: Storage,
    me: HostId,
    /// This host's counts, and whether they changed since stored.
    counted: Mutex<HashMap<(TenantId, u64), (DayUsage, bool)>>,
    /// The other hosts' sums, and when they were read.
    others: Mutex<HashMap<(TenantId, u64), (Instant, DayUsage)>>,
    policies: Arc<Policies>,
}

impl Usage {
    /// The meter of host `me`: it stores its counts in `storage` and holds
    /// tenants to the fuel budgets of `policies`.
    pub fn new(storage: Storage, me: HostId, policies: Arc<Policies>) -> Self {
        Self {
            storage,
            me,
            counted: Mutex::default(),
            others: Mutex::default(),
            policies,
        }
    }

    /// Counts what `tenant` just used, today.
    pub fn count(&self, tenant: &TenantId, used: DayUsage) {
        let mut counted = lock(&self.counted);
        let (usage, dirty) = counted.entry((tenant.clone(), day_of(now_ms()))).or_default();
        usage.add(&used);
        *dirty = true;
    }

    /// Stores this host's changed counts; days before yesterday are
    /// forgotten once stored.
    pub async fn flush(&self) -> Result<(), RunError> {
        let today = day_of(now_ms());
        let changed: Vec<((TenantId, u64), DayUsage)> = lock(&self.counted)
            .iter_mut()
            .filter(|(_, (_, dirty))| *dirty)
            .map(|(key, (usage, dirty))| {
                *dirty = false;
                (key.clone(), *usage)
            })
            .collect();
        for ((tenant, day), usage) in changed {
            let key = StoreKey::from_iter(["usage", &format!("{day:06}"), self.me.to_string().as_str()]);
            let stored = self
                .storage
                .tenant(&tenant)
                .overwrite(&key, Bytes::from(encode(&usage)))
                .await;
            if let Err(e) = stored {
                if let Some((_, dirty)) = lock(&self.counted).get_mut(&(tenant, day)) {
                    *dirty = true;
                }
                return Err(e.into());
            }
        }
        lock(&self.counted).retain(|(_, day), (_, dirty)| *dirty || day.saturating_add(1) >= today);
        Ok(())
    }

    /// Stores this host's counts from a background task, every 5 seconds
    /// (`FLUSH_EVERY`), for as long as the process lives.
    pub fn keep(self: &Arc<Self>) {
        let usage = self.clone();
        crate::task::spawn(async move {
            loop {
                tokio::time::sleep(FLUSH_EVERY).await;
                usage.flush_or_log().await;
            }
        });
    }

    /// Stores this host's counts now; a failure is logged (they are stored
    /// at the next flush).
    pub async fn flush_or_log(&self) {
        if let Err(e) = self.flush().await {
            tracing::warn!("cannot store the usage counts; trying again at the next flush: {e}");
        }
    }

    /// Bytes of every object `tenant` has in the store, counted now (one
    /// listing of all of them).
    pub async fn stored_bytes(&self, tenant: &TenantId) -> Result<u64, RunError> {
        let sizes = self.storage.tenant(tenant).sizes(&StoreKey::from("")).await?;
        Ok(sizes.iter().map(|(_, size)| size).sum())
    }

    /// `tenant`'s use on `day`, summed over every host.
    pub async fn day(&self, tenant: &TenantId, day: u64) -> Result<DayUsage, RunError> {
        let mut total = self.others(tenant, day).await?;
        if let Some((mine, _)) = lock(&self.counted).get(&(tenant.clone(), day)) {
            total.add(mine);
        }
        Ok(total)
    }

    /// The other hosts' sum of `tenant`'s `day`, read again once older than
    /// [`FLUSH_EVERY`].
    async fn others(&self, tenant: &TenantId, day: u64) -> Result<DayUsage, RunError> {
        let key = (tenant.clone(), day);
        if let Some((read, usage)) = lock(&self.others).get(&key)
            && read.elapsed() < FLUSH_EVERY
        {
            return Ok(*usage);
        }
        let store = self.storage.tenant(tenant);
        let mut total = DayUsage::default();
        for object in store.list(&day_key(day)).await? {
            if object.filename() == Some(self.me.to_string().as_str()) {
                continue;
            }
            if let Some(bytes) = store.get(&object).await? {
                match decode::<DayUsage>(&bytes) {
                    Ok(usage) => total.add(&usage),
                    Err(reason) => {
                        tracing::warn!(%tenant, key = %object, "passing over a corrupt usage record: {reason}")
                    }
                }
            }
        }
        lock(&self.others).insert(key, (Instant::now(), total));
        Ok(total)
    }

    /// Why `tenant` may start nothing more today, if its fuel is spent.
    pub async fn fuel_refusal(&self, tenant: &TenantId) -> Result<Option<Refusal>, RunError> {
        let policy = self.policies.of(tenant);
        if policy.fuel_per_day.is_none() {
            return Ok(None);
        }
        let now = now_ms();
        let spent = self.day(tenant, day_of(now)).await?.fuel;
        Ok(policy.check_fuel(spent, now).err())
    }

    /// Waits while `tenant`'s fuel for today is spent: what a step attempt
    /// does before it takes an instance.
    pub async fn await_fuel(&self, tenant: &TenantId) {
        self.await_fuel_checking_every(tenant, BUDGET_RECHECK).await;
    }

    async fn await_fuel_checking_every(&self, tenant: &TenantId, recheck: Duration) {
        loop {
            match self.fuel_refusal(tenant).await {
                Ok(None) => return,
                Ok(Some(refusal)) => {
                    tracing::info!(%tenant, "a step attempt waits: {refusal}");
                    tokio::time::sleep(refusal.retry_after().unwrap_or(recheck).min(recheck)).await;
                }
                // The budget cannot be read: the attempt goes on rather than
                // waiting on the store.
                Err(e) => {
                    tracing::warn!(%tenant, "cannot read the tenant's fuel use; the attempt goes on: {e}");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HostConfig;
    use crate::policy::TenantPolicy;

    fn usage(storage: &Storage) -> Usage {
        let policies = Policies::new(TenantPolicy::default_for(&HostConfig::new()));
        Usage::new(storage.clone(), HostId::fresh(), Arc::new(policies))
    }

    fn set_fuel_budget(usage: &Usage, tenant: &TenantId, fuel_per_day: u64) {
        let policy = TenantPolicy {
            fuel_per_day: Some(fuel_per_day),
            ..TenantPolicy::default_for(&HostConfig::new())
        };
        usage.policies.set(tenant, policy);
    }

    #[tokio::test]
    async fn a_day_sums_every_hosts_counts_and_the_budget_refuses_once_spent() -> Result<(), RunError> {
        let storage = Storage::in_memory();
        let tenant = TenantId::default_tenant();
        let (a, b) = (usage(&storage), usage(&storage));
        a.count(
            &tenant,
            DayUsage {
                fuel: 600,
                runs: 1,
                ..DayUsage::default()
            },
        );
        b.count(
            &tenant,
            DayUsage {
                fuel: 500,
                step_attempts: 2,
                ..DayUsage::default()
            },
        );
        a.flush().await?;
        b.flush().await?;
        let today = day_of(now_ms());
        let expected = DayUsage {
            fuel: 1100,
            runs: 1,
            step_attempts: 2,
            outbound_requests: 0,
        };
        assert_eq!(a.day(&tenant, today).await?, expected);
        assert_eq!(
            usage(&storage).day(&tenant, today).await?,
            expected,
            "a third host reads both"
        );

        set_fuel_budget(&a, &tenant, 1101);
        assert_eq!(a.fuel_refusal(&tenant).await?, None);
        set_fuel_budget(&a, &tenant, 1100);
        let refusal = a.fuel_refusal(&tenant).await?.expect("spent at the limit");
        assert!(matches!(refusal, Refusal::FuelSpent { limit: 1100, .. }), "{refusal}");
        assert!(
            refusal
                .retry_after()
                .is_some_and(|wait| wait <= Duration::from_secs(86_400))
        );
        Ok(())
    }

    #[tokio::test]
    async fn an_attempt_waits_while_the_fuel_is_spent_and_goes_on_once_the_budget_grows() {
        const RECHECK: Duration = Duration::from_millis(20);
        let tenant = TenantId::default_tenant();
        let meter = Arc::new(usage(&Storage::in_memory()));
        meter.count(
            &tenant,
            DayUsage {
                fuel: 10,
                ..DayUsage::default()
            },
        );
        set_fuel_budget(&meter, &tenant, 10);
        let waiting = tokio::spawn({
            let (meter, tenant) = (meter.clone(), tenant.clone());
            async move { meter.await_fuel_checking_every(&tenant, RECHECK).await }
        });
        tokio::time::sleep(RECHECK * 5).await;
        assert!(!waiting.is_finished(), "an attempt went on past a spent budget");
        set_fuel_budget(&meter, &tenant, 11);
        tokio::time::timeout(FLUSH_EVERY, waiting)
            .await
            .expect("the attempt goes on within a recheck")
            .expect("the task ends");
    }
}
