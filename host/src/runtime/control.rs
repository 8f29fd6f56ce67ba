//! Reaching a run: signals and cancellation, stored for the run and, when
//! this host is driving it, delivered at once through the run's bell and
//! cancellation flag. Signals and
//! cancellations written into the store by another process are found by
//! polling, at the configured interval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::clock::now_ms;
use super::{RunError, Runtime};
use crate::journal::{CancelRecord, Recorded, SignalRecord};
use crate::shared_map::lock;
use crate::store::{RunId, SignalId, SignalName, TenantId};

type RunKey = (TenantId, RunId);

/// How the host reaches one run.
pub struct RunControl {
    bell: Notify,
    cancelled: watch::Sender<bool>,
}

impl Default for RunControl {
    fn default() -> Self {
        Self {
            bell: Notify::new(),
            cancelled: watch::Sender::new(false),
        }
    }
}

impl RunControl {
    pub fn is_cancelled(&self) -> bool {
        *self.cancelled.borrow()
    }

    /// Resolves once the run is cancelled.
    pub async fn cancelled(&self) {
        // The sender lives as long as `self`, so waiting cannot fail.
        let _ = self.cancelled.subscribe().wait_for(|cancelled| *cancelled).await;
    }

    /// Sleeps for `at_most`, or until the bell rings or the run is cancelled.
    pub async fn nap(&self, at_most: Duration) {
        tokio::select! {
            () = self.bell.notified() => {}
            () = self.cancelled() => {}
            () = tokio::time::sleep(at_most) => {}
        }
    }
}

/// The controls of the runs this host is driving.
#[derive(Default)]
pub struct Controls {
    runs: Mutex<HashMap<RunKey, Arc<RunControl>>>,
}

impl Controls {
    /// The control of a run, made on first use.
    pub fn of(&self, tenant: &TenantId, run: &RunId) -> Arc<RunControl> {
        lock(&self.runs)
            .entry((tenant.clone(), run.clone()))
            .or_default()
            .clone()
    }

    fn existing(&self, tenant: &TenantId, run: &RunId) -> Option<Arc<RunControl>> {
        lock(&self.runs).get(&(tenant.clone(), run.clone())).cloned()
    }

    /// Wakes the run if this host is driving it; a ring while it is not
    /// waiting is kept for its next wait.
    pub fn ring(&self, tenant: &TenantId, run: &RunId) {
        if let Some(control) = self.existing(tenant, run) {
            control.bell.notify_one();
        }
    }

    /// Stops the run's activation and step attempts if this host drives it.
    pub fn cancel(&self, tenant: &TenantId, run: &RunId) {
        if let Some(control) = self.existing(tenant, run) {
            control.cancelled.send_replace(true);
        }
    }

    /// Drops the control of a run that has finished.
    pub fn forget(&self, tenant: &TenantId, run: &RunId) {
        lock(&self.runs).remove(&(tenant.clone(), run.clone()));
    }
}

/// Messages to a run from outside: signals and cancellation.
impl Runtime {
    /// Sends signal `name` to a run; it is buffered until the run takes it.
    pub async fn signal(
        &self,
        tenant: &TenantId,
        run: &RunId,
        name: &SignalName,
        payload: &str,
    ) -> Result<(), RunError> {
        self.signal_with_id(tenant, run, name, payload, None).await
    }

    /// Like [`signal`](Self::signal); with the sender's `id`, sending again
    /// (say, after a crash hid whether the first send was stored) is a no-op
    /// once the signal is stored, even if the run has taken it and finished.
    pub async fn signal_with_id(
        &self,
        tenant: &TenantId,
        run: &RunId,
        name: &SignalName,
        payload: &str,
        id: Option<&SignalId>,
    ) -> Result<(), RunError> {
        self.check_json("signal payload", payload)?;
        let records = self.records(tenant, run);
        if records.run().await?.is_none() {
            return Err(RunError::UnknownRun { run: run.clone() });
        }
        if let Some(id) = id
            && records.signal_stored(name, id).await?
        {
            return Ok(());
        }
        if records.outcome().await?.is_some() {
            return Err(RunError::Finished { run: run.clone() });
        }
        let limit = self.host.config.run.max_buffered_signals;
        if records.buffered_signals().await? >= limit {
            return Err(RunError::SignalsFull {
                run: run.clone(),
                limit,
            });
        }
        let signal = SignalRecord {
            payload: payload.to_owned(),
            sent_at_ms: now_ms(),
        };
        records.send_signal(name, &signal, id).await?;
        self.host.controls.ring(tenant, run);
        Ok(())
    }

    /// Cancels a run: its current step attempt is interrupted (its result, if
    /// any, discarded) and the run ends `cancelled`. Asking twice is harmless.
    pub async fn cancel(&self, tenant: &TenantId, run: &RunId, reason: &str) -> Result<(), RunError> {
        let records = self.records(tenant, run);
        if records.run().await?.is_none() {
            return Err(RunError::UnknownRun { run: run.clone() });
        }
        if records.outcome().await?.is_some() {
            return Err(RunError::Finished { run: run.clone() });
        }
        records
            .request_cancel(&CancelRecord {
                reason: reason.to_owned(),
                requested_at_ms: now_ms(),
            })
            .await?;
        self.host.controls.cancel(tenant, run);
        for entry in records.entries().await?.into_values() {
            if let Recorded::Child { run: Ok(child) } = entry.recorded {
                // A child that already ended, or whose own cancellation fails, does not stop the parent's.
                if let Err(e) = Box::pin(self.cancel(tenant, &child, &format!("its parent {run} was cancelled"))).await
                {
                    tracing::debug!(%child, "child not cancelled: {e}");
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> (TenantId, RunId) {
        (TenantId::default_tenant(), RunId::new("r").expect("a valid run id"))
    }

    #[tokio::test]
    async fn a_ring_cuts_a_nap_short_even_if_it_came_first() {
        let controls = Controls::default();
        let (tenant, run) = run();
        let control = controls.of(&tenant, &run);
        controls.ring(&tenant, &run);
        let started = std::time::Instant::now();
        control.nap(Duration::from_secs(30)).await;
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn cancelling_wakes_every_waiter_and_stays_cancelled() {
        let controls = Controls::default();
        let (tenant, run) = run();
        let control = controls.of(&tenant, &run);
        let waiter = tokio::spawn({
            let control = control.clone();
            async move { control.cancelled().await }
        });
        controls.cancel(&tenant, &run);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("joined");
        assert!(control.is_cancelled());
        control.nap(Duration::from_secs(30)).await;
    }
}
