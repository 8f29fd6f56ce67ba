//! The final statuses of runs that ended on this host lately, so that a
//! wait arriving just after its run's end (a client that starts a run,
//! then waits for it) is answered without reading the store.
//!
//! Invariants: what is kept is bounded by count ([`KEPT`]), bytes
//! ([`KEPT_BYTES`]) and age ([`KEPT_FOR`]), the oldest going first, so a
//! tenant ending many runs can only make others' waits read the store. A
//! run's status no longer changes once it has ended, but for its deletion:
//! a retention sweep on this host forgets it here; one on another host can
//! leave the ended status answered here for at most [`KEPT_FOR`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{RunState, RunStatus};
use crate::shared_map::lock;
use crate::store::{RunId, TenantId};

type RunKey = (TenantId, RunId);

/// How long a status is kept: a client's wait follows its start within
/// milliseconds.
pub const KEPT_FOR: Duration = Duration::from_secs(5);
/// At most so many statuses are kept.
pub const KEPT: usize = 4096;
/// At most so many bytes of statuses are kept; a larger one is not.
pub const KEPT_BYTES: usize = 8 << 20;

/// The final statuses kept, within the bounds above.
#[derive(Default)]
pub struct RecentlyEnded(Mutex<Kept>);

#[derive(Default)]
struct Kept {
    by_run: HashMap<RunKey, Held>,
    /// Keys in the order they were kept, with when; a key kept again or
    /// forgotten leaves an entry here that no longer matches `by_run`.
    order: VecDeque<(Instant, RunKey)>,
    bytes: usize,
}

struct Held {
    since: Instant,
    weight: usize,
    status: Arc<RunStatus>,
}

impl RecentlyEnded {
    /// Keeps the final status of a run that just ended.
    pub fn keep(&self, tenant: &TenantId, status: Arc<RunStatus>) {
        let weight = weight(&status);
        if weight > KEPT_BYTES {
            return;
        }
        let key = (tenant.clone(), status.run_id.clone());
        let now = Instant::now();
        let mut kept = lock(&self.0);
        kept.forget(&key);
        kept.bytes += weight;
        kept.order.push_back((now, key.clone()));
        let held = Held {
            since: now,
            weight,
            status,
        };
        kept.by_run.insert(key, held);
        kept.trim(now);
    }

    /// The status of `run` if it ended here within [`KEPT_FOR`].
    pub fn get(&self, tenant: &TenantId, run: &RunId) -> Option<Arc<RunStatus>> {
        let mut kept = lock(&self.0);
        kept.trim(Instant::now());
        let held = kept.by_run.get(&(tenant.clone(), run.clone()))?;
        Some(held.status.clone())
    }

    /// Forgets `run`: it was deleted.
    pub fn forget(&self, tenant: &TenantId, run: &RunId) {
        lock(&self.0).forget(&(tenant.clone(), run.clone()));
    }
}

impl Kept {
    fn forget(&mut self, key: &RunKey) {
        if let Some(held) = self.by_run.remove(key) {
            self.bytes -= held.weight;
        }
    }

    /// Lets the oldest go while they are too many, too large or too old.
    fn trim(&mut self, now: Instant) {
        while let Some((since, key)) = self.order.front() {
            let expired = now.saturating_duration_since(*since) >= KEPT_FOR;
            if !expired && self.order.len() <= KEPT && self.bytes <= KEPT_BYTES {
                break;
            }
            if self.by_run.get(key).is_some_and(|held| held.since == *since) {
                let key = key.clone();
                self.forget(&key);
            }
            self.order.pop_front();
        }
    }
}

/// About how many bytes a status holds.
fn weight(status: &RunStatus) -> usize {
    let state = match &status.state {
        RunState::Completed { output, .. } => output.as_ref().map_or(0, String::len),
        RunState::Failed { kind, message } => kind.len() + message.len(),
        RunState::Cancelled { reason } => reason.len(),
        _ => 0,
    };
    size_of::<RunStatus>() + status.run_id.as_str().len() + status.workflow.len() + status.component.len() + state
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::RunRecord;

    fn ended(run: &str, output: &str) -> Arc<RunStatus> {
        let state = RunState::Completed {
            output: Some(output.into()),
            output_stored: None,
        };
        Arc::new(RunStatus::of(RunRecord::example(run, 0), 3, state))
    }

    fn tenant(name: &str) -> TenantId {
        TenantId::new(name).expect("a valid tenant id")
    }

    fn id(run: &str) -> RunId {
        RunId::new(run).expect("a valid run id")
    }

    #[tokio::test(start_paused = true)]
    async fn a_status_is_answered_for_its_tenant_until_it_is_too_old() {
        let recent = RecentlyEnded::default();
        recent.keep(&tenant("a"), ended("r1", "1"));
        assert_eq!(recent.get(&tenant("a"), &id("r1")), Some(ended("r1", "1")));
        assert_eq!(recent.get(&tenant("b"), &id("r1")), None, "another tenant's run");
        tokio::time::advance(KEPT_FOR - Duration::from_millis(1)).await;
        assert!(recent.get(&tenant("a"), &id("r1")).is_some());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(recent.get(&tenant("a"), &id("r1")), None);
    }

    #[tokio::test]
    async fn the_oldest_go_first_past_the_count_and_a_deleted_run_is_forgotten() {
        let recent = RecentlyEnded::default();
        for n in 0..=KEPT {
            recent.keep(&tenant("a"), ended(&format!("r{n}"), "1"));
        }
        assert_eq!(recent.get(&tenant("a"), &id("r0")), None);
        assert!(recent.get(&tenant("a"), &id("r1")).is_some());
        assert!(recent.get(&tenant("a"), &id(&format!("r{KEPT}"))).is_some());
        recent.forget(&tenant("a"), &id("r1"));
        assert_eq!(recent.get(&tenant("a"), &id("r1")), None);
    }

    #[tokio::test]
    async fn statuses_are_kept_up_to_the_byte_bound_and_one_larger_not_at_all() {
        let recent = RecentlyEnded::default();
        let large = "x".repeat(KEPT_BYTES / 2);
        recent.keep(&tenant("a"), ended("r1", &large));
        recent.keep(&tenant("a"), ended("r2", &large));
        // Each weighs a little more than half the bound: the first went.
        assert_eq!(recent.get(&tenant("a"), &id("r1")), None);
        assert!(recent.get(&tenant("a"), &id("r2")).is_some());
        recent.keep(&tenant("a"), ended("r3", &"x".repeat(KEPT_BYTES)));
        assert_eq!(recent.get(&tenant("a"), &id("r3")), None, "larger than the bound");
        assert!(recent.get(&tenant("a"), &id("r2")).is_some(), "not pushed out by it");
    }

    #[tokio::test]
    async fn a_run_kept_again_is_held_once() {
        let recent = RecentlyEnded::default();
        recent.keep(&tenant("a"), ended("r1", "1"));
        recent.keep(&tenant("a"), ended("r1", "2"));
        assert_eq!(recent.get(&tenant("a"), &id("r1")), Some(ended("r1", "2")));
        let kept = lock(&recent.0);
        assert_eq!(kept.by_run.len(), 1);
        assert_eq!(kept.bytes, weight(&ended("r1", "2")));
    }
}
