//! Runs driven on background tasks, for a long-lived host: at most one task
//! per run, each driving its run until it finishes (waiting outside any
//! instance between activations, and through storage outages), and a way to
//! wait for one to finish.
//!
//! A run that ends here hands its final status to those waiting for it, and
//! keeps it a few seconds for those who come just after (see
//! [`recently_ended`](super::recently_ended)), so a wait costs no store
//! read. That status is what the store would project:
//! built from the run record the driver ran, the entries its journal handle
//! read and wrote (the claim keeps other writers out) and the outcome stored.
//! Builds with debug assertions check the two agree at every wait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use tokio::sync::watch;

use super::recently_ended::RecentlyEnded;
use super::{HostStop, LiveError, Progress, RunError, RunState, RunStatus, Runs};
use crate::journal::Outcome;
use crate::shared_map::lock;
use crate::store::{RunId, TenantId};

type RunKey = (TenantId, RunId);

/// How often a wait for a run driven elsewhere looks at the store.
const STORE_WAIT_POLL: Duration = Duration::from_millis(100);

/// The runs being driven in the background, each with where its driving
/// stands.
#[derive(Default)]
pub struct Background {
    running: Mutex<HashMap<RunKey, watch::Sender<Driving>>>,
    /// The final statuses of runs driven here that ended lately.
    pub(super) ended: Arc<RecentlyEnded>,
}

/// Where the driving of a run in the background stands.
#[derive(Debug)]
pub(super) enum Driving {
    Going,
    /// Its task ended; with the run's final status if the run ended in it
    /// (not continued as new): the status the store holds from then on.
    Ended(Option<Arc<RunStatus>>),
}

/// Tries again after a storage failure, waiting longer each time up to a
/// minute, for as long as it takes: a server carries on by itself once its
/// store recovers.
fn through_outages() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_jitter()
        .with_min_delay(Duration::from_secs(1))
        .with_max_delay(Duration::from_secs(60))
        .without_max_times()
}

/// Waits for the task driving a run to end: the run's final status, if the
/// run ended in it.
pub(super) async fn driving_ended(mut driving: watch::Receiver<Driving>) -> Option<Arc<RunStatus>> {
    match &*driving
        .wait_for(|driving| matches!(driving, Driving::Ended(_)))
        .await
        .ok()?
    {
        Driving::Ended(status) => status.clone(),
        Driving::Going => None,
    }
}

impl Runs {
    /// Drives a run on a background task until it finishes, unless one is
    /// driving it already.
    pub fn drive_in_background(&self, tenant: &TenantId, run: &RunId) {
        let key = (tenant.clone(), run.clone());
        let mut running = lock(&self.host.background.running);
        if running.contains_key(&key) {
            return;
        }
        let driving = watch::Sender::new(Driving::Going);
        running.insert(key.clone(), driving.clone());
        let runtime = self.clone();
        self.host.metrics.run_active(tenant, 1);
        crate::task::spawn(async move {
            let (tenant, run) = &key;
            match runtime.run_to_end_through_outages(tenant, run).await {
                Err(e @ RunError::DrivenElsewhere { .. }) => tracing::info!(%tenant, %run, "not driven here: {e}"),
                Err(RunError::NotLive(LiveError::Stopped {
                    why: HostStop::Twin, ..
                })) => {
                    runtime.hand_over(tenant, run).await;
                }
                Err(e) => tracing::error!(%tenant, %run, "run stopped: {e}"),
                Ok(Progress::Finished(Outcome::Continued { next })) => {
                    runtime.drive_in_background(tenant, &next);
                    // The next generation's record may name another host,
                    // which created it and then stood down from this one
                    // before driving it: woken, it drives it (found by the
                    // simulation, seed 10 with seams=3: a host stalled
                    // between the next generation's note and its record
                    // lost its lease; the host that took the chain over
                    // deferred to it, alive, and no one drove the chain).
                    runtime.wake(tenant, &next).await;
                }
                Ok(_) => {}
            }
            lock(&runtime.host.background.running).remove(&key);
            runtime.host.metrics.run_active(tenant, -1);
            driving.send_if_modified(|driving| match driving {
                Driving::Going => {
                    *driving = Driving::Ended(None);
                    true
                }
                Driving::Ended(_) => false,
            });
        });
    }

    /// Leaves `run` to the other process under this host's id, once this
    /// one stopped for it: a wake-up addressed to the id, which that
    /// process drives the run at. Its recovery at its join found the runs
    /// there were then; this hands it any this host created or claimed
    /// since, which carry the id, so no peer takes them over.
    async fn hand_over(&self, tenant: &TenantId, run: &RunId) {
        let cluster = &self.host.cluster;
        match cluster.wake(cluster.me(), tenant, run).await {
            Ok(()) => tracing::info!(%tenant, %run, "left the run to the other process under this host's id"),
            Err(e) => {
                tracing::error!(%tenant, %run, "cannot leave the run to the other process under this host's id; it is driven again at that process's next start: {e}")
            }
        }
    }

    /// Drives a run to its end, and again each time storage failed under
    /// it (which decided nothing), waiting longer between tries, up to a
    /// minute: a server continues its runs by itself once storage recovers.
    /// So too when this host stood down, its lease lapsed (it claims the
    /// run again, unless another host has), or another writer's entry came
    /// first (it replays it).
    async fn run_to_end_through_outages(&self, tenant: &TenantId, run: &RunId) -> Result<Progress, RunError> {
        (|| self.run_to_end(tenant, run, None))
            .retry(through_outages())
            .when(|e| e.is_storage_failure() || e.is_stood_down() || matches!(e, RunError::Conflict { .. }))
            .notify(|e, wait| tracing::error!(%tenant, %run, retry_in_ms = crate::clock::millis(wait), "run stopped on a storage failure; driving it again: {e}"))
            .await
    }

    /// If a task of this host drives the run: where its driving stands.
    pub(super) fn driven_here(&self, tenant: &TenantId, run: &RunId) -> Option<watch::Receiver<Driving>> {
        lock(&self.host.background.running)
            .get(&(tenant.clone(), run.clone()))
            .map(watch::Sender::subscribe)
    }

    /// Whether a task of this host drives the run now: executing it, or
    /// waiting for its timer, its signal or its step.
    pub fn drives(&self, tenant: &TenantId, run: &RunId) -> bool {
        self.driven_here(tenant, run)
            .is_some_and(|driving| matches!(*driving.borrow(), Driving::Going))
    }

    /// Hands the final status of a run that just ended to those waiting
    /// for it, if a task of this host drives it.
    pub(super) fn ended_here(&self, tenant: &TenantId, run: &RunId, status: impl FnOnce() -> RunStatus) {
        let background = &self.host.background;
        if let Some(driving) = lock(&background.running).get(&(tenant.clone(), run.clone())) {
            let status = Arc::new(status());
            background.ended.keep(tenant, status.clone());
            driving.send_replace(Driving::Ended(Some(status)));
        }
    }

    /// How many of the tenant's runs are being driven right now.
    pub fn active_runs(&self, tenant: &TenantId) -> usize {
        lock(&self.host.background.running)
            .keys()
            .filter(|(owner, _)| owner == tenant)
            .count()
    }

    /// Starts no new step call and lets those in flight finish and journal
    /// their results, for at most `grace`: what a clean shutdown needs.
    /// Returns how many were still in flight when it gave up.
    pub async fn drain(&self, grace: Duration) -> usize {
        self.host.steps.in_flight.drain(grace).await
    }

    /// Drives in the background every unfinished run of the tenant that no
    /// live host drives (after a restart, or a host's death). Returns how
    /// many unfinished runs there were, passing over (and logging) those
    /// whose records are corrupt.
    pub async fn recover(&self, tenant: &TenantId) -> Result<usize, RunError> {
        let listing = self.unfinished(tenant).await?;
        for run in &listing.runs {
            self.drive_in_background(tenant, run);
        }
        Ok(listing.runs.len())
    }

    /// From now on, drives the unfinished runs of the served tenants that
    /// no live host drives each time a host is found dead, until this host
    /// leaves. A look that fails is made again until it is done, whatever
    /// failed it, unless this host stopped: no later death may come to
    /// prompt it (found by the simulation, seed 101, the store failing
    /// most calls just after a host's death; and by reading, a ledger
    /// that compactions kept changing under the look).
    pub fn take_over_from_dead_hosts(&self) {
        let runtime = self.clone();
        let mut deaths = self.host.cluster.deaths();
        crate::task::spawn(async move {
            while deaths.changed().await.is_ok() {
                for tenant in &runtime.served() {
                    let looked = (|| runtime.recover(tenant))
                        .retry(through_outages())
                        .when(|e| !matches!(e, RunError::NotLive(_)))
                        .notify(|e, wait| tracing::error!(%tenant, retry_in_ms = crate::clock::millis(wait), "cannot look for runs of dead hosts; looking again: {e}"))
                        .await;
                    match looked {
                        Ok(runs) => tracing::info!(%tenant, runs, "looked for runs of dead hosts among the unfinished"),
                        Err(e) => tracing::error!(%tenant, "cannot look for runs of dead hosts: {e}"),
                    }
                }
            }
        });
    }

    /// Waits up to `timeout` for a run to finish, then says where it
    /// stands. A run driven here is waited for; one driven elsewhere (by
    /// another host, or another process) is looked for in the store. A run
    /// that continues as new is waited for until its chain ends.
    pub async fn wait(&self, tenant: &TenantId, run: &RunId, timeout: Duration) -> Result<RunStatus, RunError> {
        let deadline = crate::sandbox::instant_after(timeout);
        // The run itself first, with no read: the status names the chain's
        // latest generation, if the run continued as new.
        let mut latest = run.clone();
        let mut waited_here: Option<RunId> = None;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let mut handed_over = self.host.background.ended.get(tenant, &latest);
            if handed_over.is_none()
                && waited_here.as_ref() != Some(&latest)
                && let Some(driving) = self.driven_here(tenant, &latest)
            {
                // Either it finished, or the time is up: the status says which.
                handed_over = tokio::time::timeout(left, driving_ended(driving)).await.ok().flatten();
                waited_here = Some(latest.clone());
            }
            let status = match handed_over {
                Some(status) => self.checked_against_store(tenant, &status).await,
                None => self.status(tenant, &latest).await?,
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let continued = matches!(status.state, RunState::Continued { .. });
            if (status.state.is_finished() && !continued) || left.is_zero() {
                return Ok(status);
            }
            if status.run_id != latest {
                latest = status.run_id;
            } else if !continued {
                tokio::time::sleep(left.min(STORE_WAIT_POLL)).await;
            }
        }
    }

    /// A status a driver handed over. Builds with debug assertions check it
    /// is the status the store projects, so every test that waits for a run
    /// checks the two agree.
    pub(super) async fn checked_against_store(&self, tenant: &TenantId, status: &RunStatus) -> RunStatus {
        if cfg!(debug_assertions)
            && let Ok(projected) = self.generation_status(tenant, &status.run_id).await
        {
            assert_eq!(
                *status, projected,
                "the status its driver handed over is not the store's"
            );
        }
        status.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use object_store::ObjectMeta;
    use object_store::path::Path;

    use super::*;
    use crate::clock::{VirtualTime, now_ms};
    use crate::cluster::{HostId, LeasePolicy};
    use crate::component::CodeCache;
    use crate::config::HostConfig;
    use crate::journal::ledger::ListedRun;
    use crate::journal::{RunRecord, RunRecords};
    use crate::runtime::Runtime;
    use crate::store::seams::{Listed, Seams};
    use crate::store::{Storage, StoreKey, keys_of, unfinished_index_complete};

    /// A look for a dead host's runs that fails however the store answers
    /// (here every listing of the ledger's batches names one a compaction
    /// took before it is read, more times in a row than a reader tries) is
    /// made again until it is done: the dead host's run is taken over.
    #[tokio::test(start_paused = true)]
    async fn a_look_for_a_dead_hosts_runs_the_ledger_keeps_failing_is_made_again_until_done() -> Result<(), RunError> {
        let _virtual = VirtualTime::start(1_800_000_000_000);
        let ghosts = Arc::new(AtomicUsize::new(12));
        let listed: Listed = {
            let ghosts = ghosts.clone();
            Arc::new(move |prefix: &Path, mut found: Vec<ObjectMeta>| {
                let left = ghosts.load(Ordering::SeqCst);
                if prefix.as_ref().ends_with("ledger/batches") && left > 0 {
                    ghosts.store(left - 1, Ordering::SeqCst);
                    found.push(ObjectMeta {
                        location: Path::from(format!("{prefix}/0000000000000000-compacted-00000000")),
                        last_modified: chrono::DateTime::UNIX_EPOCH,
                        size: 1,
                        e_tag: None,
                        version: None,
                    });
                }
                found
            })
        };
        let storage = Storage::new(Arc::new(Seams::listing(listed)));
        let tenant = TenantId::default_tenant();
        let store = storage.tenant(&tenant);
        store.overwrite(&unfinished_index_complete(), Bytes::new()).await?;
        let dead = HostId::try_from("elsewhere.7.abc".to_owned()).expect("a valid id");
        let heartbeat = StoreKey::from_iter(["hosts", dead.as_str()]);
        storage
            .cluster()
            .overwrite(&heartbeat, Bytes::from_static(b"{}"))
            .await?;
        let record = RunRecord {
            host: Some(dead),
            ..RunRecord::example("r0001", now_ms())
        };
        let runtime = Runtime::new(HostConfig::new(), storage.clone(), CodeCache::disabled())?;
        runtime
            .runs()
            .host
            .ledger
            .opened(&store, ListedRun::of(&record))
            .await?;
        RunRecords::new(store.clone(), record.run_id.clone())
            .create_record(&record)
            .await?;

        runtime.serve_tenants([tenant.clone()]);
        runtime.runs().live().await?;
        runtime.runs().take_over_from_dead_hosts();
        tokio::time::sleep(LeasePolicy::default().ttl * 3).await;

        assert_eq!(ghosts.load(Ordering::SeqCst), 0, "every listing named a gone batch");
        let claim = store.get(&keys_of(&record.run_id).owner(1)).await?;
        let cluster = &runtime.runs().host.cluster;
        let taken_by = format!("{} {}", cluster.me(), cluster.incarnation());
        assert_eq!(
            claim.as_deref(),
            Some(taken_by.as_bytes()),
            "the dead host's run taken over"
        );
        Ok(())
    }
}
