//! Instance slots shared fairly between tenants: a role's pool holds so many
//! instances at once, and when tenants wait for one, a freed slot goes to
//! the waiting tenant that holds the fewest.
//!
//! Invariant: a tenant holding fewer slots than another waiting tenant is
//! served before it, so a tenant that saturates the host (hundreds of step
//! attempts queued) never queues a tenant under its share behind its own
//! backlog. Within one tenant, the waiter of the first priority (the
//! lowest number) is served first, and among equals the first to come. A
//! freed slot is handed to its next holder directly, so no newcomer
//! overtakes a waiter of its priority.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::shared_map::lock;
use crate::store::TenantId;

/// A role's instance slots.
pub struct FairSlots {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    free: usize,
    held: HashMap<TenantId, usize>,
    /// Each tenant's waiters by priority, then by arrival.
    waiting: HashMap<TenantId, BTreeMap<(u8, u64), oneshot::Sender<Slot>>>,
    arrivals: u64,
}

/// One slot, held by a tenant until dropped.
pub struct Slot {
    slots: Arc<FairSlots>,
    tenant: TenantId,
}

impl FairSlots {
    pub fn new(total: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                free: total,
                ..State::default()
            }),
        })
    }

    /// Waits for a slot for `tenant`, in line by `priority` (lowest first).
    pub async fn acquire(self: &Arc<Self>, tenant: &TenantId, priority: u8) -> Slot {
        loop {
            let granted = {
                let mut state = lock(&self.state);
                if state.free > 0 {
                    state.free -= 1;
                    *state.held.entry(tenant.clone()).or_default() += 1;
                    return self.slot(tenant);
                }
                let (grant, granted) = oneshot::channel();
                state.arrivals += 1;
                let arrival = state.arrivals;
                state
                    .waiting
                    .entry(tenant.clone())
                    .or_default()
                    .insert((priority, arrival), grant);
                granted
            };
            // A grant is only ever dropped unsent if the slots are.
            if let Ok(slot) = granted.await {
                return slot;
            }
        }
    }

    /// How many slots `tenant` holds now.
    #[cfg(test)]
    pub fn held(&self, tenant: &TenantId) -> usize {
        lock(&self.state).held.get(tenant).copied().unwrap_or(0)
    }

    fn slot(self: &Arc<Self>, tenant: &TenantId) -> Slot {
        Slot {
            slots: self.clone(),
            tenant: tenant.clone(),
        }
    }

    /// Gives `tenant`'s slot to the waiting tenant holding the fewest, or
    /// back to the pool.
    fn release(self: &Arc<Self>, tenant: &TenantId) {
        let handed = {
            let mut state = lock(&self.state);
            if let Some(held) = state.held.get_mut(tenant) {
                *held -= 1;
                if *held == 0 {
                    state.held.remove(tenant);
                }
            }
            match next_waiter(&mut state) {
                Some((next, grant)) => {
                    *state.held.entry(next.clone()).or_default() += 1;
                    Some((next, grant))
                }
                None => {
                    state.free += 1;
                    None
                }
            }
        };
        if let Some((next, grant)) = handed {
            // A waiter that gave up drops the slot unreceived, which releases
            // it again, to the next waiter: outside the lock.
            let _ = grant.send(self.slot(&next));
        }
    }
}

/// The first live waiter of the waiting tenant that holds the fewest slots.
fn next_waiter(state: &mut State) -> Option<(TenantId, oneshot::Sender<Slot>)> {
    loop {
        state.waiting.retain(|_, queue| {
            while queue.first_key_value().is_some_and(|(_, grant)| grant.is_closed()) {
                queue.pop_first();
            }
            !queue.is_empty()
        });
        let neediest = state
            .waiting
            .keys()
            .min_by_key(|tenant| (state.held.get(*tenant).copied().unwrap_or(0), (*tenant).clone()))?
            .clone();
        if let Some((_, grant)) = state.waiting.get_mut(&neediest).and_then(BTreeMap::pop_first) {
            return Some((neediest, grant));
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.release(&self.tenant);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn tenant(id: &str) -> TenantId {
        TenantId::new(id).expect("a valid id")
    }

    #[tokio::test]
    async fn a_tenant_under_its_share_is_served_before_a_tenant_over_it() {
        let slots = FairSlots::new(2);
        let (flood, quiet) = (tenant("flood"), tenant("quiet"));
        let held = [slots.acquire(&flood, 5).await, slots.acquire(&flood, 5).await];
        let mut queued = Vec::new();
        for _ in 0..10 {
            let slots = slots.clone();
            let flood = flood.clone();
            queued.push(tokio::spawn(async move { slots.acquire(&flood, 5).await }));
        }
        tokio::task::yield_now().await;
        let quiet_slot = {
            let slots = slots.clone();
            let quiet = quiet.clone();
            tokio::spawn(async move { slots.acquire(&quiet, 5).await })
        };
        tokio::task::yield_now().await;
        drop(held);
        let quiet_slot = tokio::time::timeout(Duration::from_secs(5), quiet_slot)
            .await
            .expect("the quiet tenant is served from the first freed slot")
            .expect("joined");
        assert_eq!(slots.held(&quiet), 1);
        drop(quiet_slot);
        for waiter in queued {
            drop(
                tokio::time::timeout(Duration::from_secs(5), waiter)
                    .await
                    .expect("served")
                    .expect("joined"),
            );
        }
        assert_eq!((slots.held(&flood), slots.held(&quiet)), (0, 0));
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_loses_no_slot() {
        let slots = FairSlots::new(1);
        let a = tenant("a");
        let held = slots.acquire(&a, 5).await;
        let gave_up = tokio::time::timeout(Duration::from_millis(10), slots.acquire(&a, 5)).await;
        assert!(gave_up.is_err());
        drop(held);
        let again = tokio::time::timeout(Duration::from_secs(5), slots.acquire(&a, 5)).await;
        assert!(again.is_ok(), "the slot went back to the pool");
    }

    #[tokio::test]
    async fn within_a_tenant_the_first_priority_is_served_first_then_the_first_to_come() {
        let slots = FairSlots::new(1);
        let a = tenant("a");
        let held = slots.acquire(&a, 5).await;
        let (served, mut order) = tokio::sync::mpsc::unbounded_channel();
        let waiters = [("late-low", 9), ("early-mid", 5), ("later-mid", 5), ("urgent", 1)];
        for (arrived, (name, priority)) in waiters.into_iter().enumerate() {
            let (waiter_slots, waiter, served) = (slots.clone(), a.clone(), served.clone());
            tokio::spawn(async move {
                let slot = waiter_slots.acquire(&waiter, priority).await;
                served.send(name).expect("the test listens");
                drop(slot);
            });
            // Each waits before the next comes, so arrival order is known.
            while lock(&slots.state).waiting.get(&a).map_or(0, BTreeMap::len) <= arrived {
                tokio::task::yield_now().await;
            }
        }
        drop(held);
        let mut names = Vec::new();
        for _ in 0..4 {
            names.push(order.recv().await.expect("served"));
        }
        assert_eq!(names, ["urgent", "early-mid", "later-mid", "late-low"]);
    }
}
