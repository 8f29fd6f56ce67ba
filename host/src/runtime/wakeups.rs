//! Waking runs that wait for a signal. A signal sent through this host rings
//! its run's bell at once; a signal another process wrote into the store is
//! found by polling, at the configured interval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::store::{RunId, TenantId};

type RunKey = (TenantId, RunId);

/// The bells of the runs this host is driving.
#[derive(Default)]
pub struct Wakeups {
    bells: Mutex<HashMap<RunKey, Arc<Notify>>>,
}

impl Wakeups {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunKey, Arc<Notify>>> {
        // A panic while holding this lock cannot leave the map inconsistent.
        self.bells.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The bell of a run, made on first use.
    pub fn bell(&self, tenant: &TenantId, run: &RunId) -> Arc<Notify> {
        self.lock().entry((tenant.clone(), run.clone())).or_default().clone()
    }

    /// Wakes the run if this host is driving it; a ring while it is not
    /// waiting is kept for its next wait.
    pub fn ring(&self, tenant: &TenantId, run: &RunId) {
        if let Some(bell) = self.lock().get(&(tenant.clone(), run.clone())) {
            bell.notify_one();
        }
    }

    /// Drops the bell of a run that has finished.
    pub fn forget(&self, tenant: &TenantId, run: &RunId) {
        self.lock().remove(&(tenant.clone(), run.clone()));
    }
}

/// Sleeps for `at_most`, or until `bell` rings.
pub async fn nap(bell: &Notify, at_most: Duration) {
    tokio::select! {
        () = bell.notified() => {}
        () = tokio::time::sleep(at_most) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_ring_cuts_a_nap_short_even_if_it_came_first() {
        let wakeups = Wakeups::default();
        let (tenant, run) = (TenantId::default_tenant(), RunId::new("r").expect("a valid run id"));
        let bell = wakeups.bell(&tenant, &run);
        wakeups.ring(&tenant, &run);
        let started = std::time::Instant::now();
        nap(&bell, Duration::from_secs(30)).await;
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
