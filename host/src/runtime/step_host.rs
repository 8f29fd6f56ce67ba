//! What a step call sees of its host, and no more: the components whose
//! steps it runs (and their instance slots), the fuel its tenant has left
//! today, the way out for its requests, the metrics it counts into, the
//! stand-in that may answer for it under test, and whether the host is
//! draining. Everything else a call uses is its own (the tenant's limits,
//! origins and secrets, in [`StepCall`](super::step_call::StepCall)) or
//! its run's (the journal and the claim, in `RunRecords`).
//!
//! Invariant: once draining began, no step call starts; each one started
//! before is counted until its result is journaled, so a shutdown can
//! wait for them.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use super::StepStandIn;
use super::usage::Usage;
use crate::component::Components;
use crate::egress::Egress;
use crate::metrics::Metrics;

/// The part of the host step calls use.
pub struct StepHost {
    pub(super) components: Arc<Components>,
    pub(super) usage: Arc<Usage>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) egress: Arc<Egress>,
    /// What answers attempts in place of the steps, under test.
    pub(super) stand_in: Option<Arc<dyn StepStandIn>>,
    /// Where attempts that ask for one get their scratch directory.
    pub(super) scratch_root: PathBuf,
    /// A retry's wait longer than this ends the call unfinished, to be
    /// retried when its run is executed again, instead of holding a task.
    pub(super) eviction_threshold: Duration,
    pub(super) in_flight: StepsInFlight,
    /// A payload larger than this (a step's output, a memo, a child's
    /// output) is stored as an object of its own.
    pub(super) offload_payloads_above: usize,
}

/// The step calls started here and not yet journaled, and whether the host
/// is draining.
#[derive(Default)]
pub struct StepsInFlight {
    count: watch::Sender<usize>,
    /// Set when shutting down: no new step call starts.
    draining: AtomicBool,
}

/// Marks one step call in flight for as long as it lives.
pub struct InFlight<'a>(&'a watch::Sender<usize>);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|count| *count -= 1);
    }
}

impl StepsInFlight {
    /// Registers a step call about to start. While draining, it waits
    /// forever instead: it is not journaled, so it runs after the restart.
    pub async fn starting(&self) -> InFlight<'_> {
        self.count.send_modify(|count| *count += 1);
        let in_flight = InFlight(&self.count);
        if self.draining.load(Ordering::SeqCst) {
            drop(in_flight);
            return std::future::pending().await;
        }
        in_flight
    }

    /// Starts no new step call and waits, for at most `grace`, for those in
    /// flight to be journaled. Returns how many were still in flight then.
    pub async fn drain(&self, grace: Duration) -> usize {
        self.draining.store(true, Ordering::SeqCst);
        let mut in_flight = self.count.subscribe();
        let _ = tokio::time::timeout(grace, in_flight.wait_for(|count| *count == 0)).await;
        *in_flight.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_drain_waits_for_calls_in_flight_and_starts_no_new_one() {
        let steps = Arc::new(StepsInFlight::default());
        let running = steps.starting().await;
        assert_eq!(
            steps.drain(Duration::from_millis(10)).await,
            1,
            "the running call was not counted"
        );
        let late = tokio::time::timeout(Duration::from_millis(10), steps.starting()).await;
        assert!(late.is_err(), "a call started while draining");
        drop(running);
        assert_eq!(steps.drain(Duration::ZERO).await, 0);
    }
}
