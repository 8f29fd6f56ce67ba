//! Retention: a tenant's finished runs are kept for its `retention`, then
//! a sweeper deletes every object of theirs (run record, journal,
//! snapshots, attempts, timers, signals, outcome), oldest first, in batches;
//! and a component nothing refers to any more can be deleted.
//!
//! Invariants: a finished run is found through its marker in the index of
//! finished runs (`finished/{hour}/{finished-at}-{run}`), written before the
//! run leaves the index of unfinished ones, so no finished run lacks one.
//! The run record goes first (the run then answers "no such run") and the
//! marker last, so a sweep cut short is finished by the next. Deleting is
//! idempotent: hosts sweeping the same tenant at once only repeat deletes.
//! A finished child run (or a generation of a chain a parent started) is
//! kept while its parent is unfinished: the parent may await it any time,
//! and would otherwise wait for ever. A component is deleted only while no
//! name, schedule or stored run refers to it, and stored again if a run another host started meanwhile
//! turns out to (see [`Components::delete`](crate::component::Components::delete)).

use std::collections::HashMap;
use std::time::Duration;

use super::{RunError, Runtime, now_ms};
use crate::component::{ComponentError, STORED_FRESH};
use crate::journal::{Outcome, RunRecords};
use crate::shared_map::lock;
use crate::store::{RunId, StoreKey, TenantId, TenantStore, chain_key, finished_key, keys_of, parse_finished_marker};

/// Runs one pass deletes per tenant, at most: the rest wait for the next.
pub const SWEEP_BATCH: usize = 100;
/// How often the sweeper looks, within these bounds: a quarter of the
/// shortest retention.
const SWEEP_EVERY: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));

/// What one pass deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub runs: u64,
    pub objects: u64,
}

/// How long each tenant keeps its finished runs (absent: for ever).
#[derive(Default)]
pub struct Retention(std::sync::Mutex<HashMap<TenantId, Duration>>);

impl Runtime {
    /// Keeps `tenant`'s finished runs for `retention` (`None`: for ever).
    pub fn set_retention(&self, tenant: &TenantId, retention: Option<Duration>) {
        let mut kept = lock(&self.host.retention.0);
        match retention {
            Some(retention) => kept.insert(tenant.clone(), retention),
            None => kept.remove(tenant),
        };
    }

    /// Sweeps every tenant with a retention, from a background task, for
    /// as long as the process lives.
    pub fn sweep_forever(&self) {
        let runtime = self.clone();
        tokio::spawn(async move {
            loop {
                let kept: Vec<(TenantId, Duration)> = lock(&runtime.host.retention.0).clone().into_iter().collect();
                for (tenant, retention) in &kept {
                    if let Err(e) = runtime.sweep(tenant, *retention).await {
                        tracing::warn!(%tenant, "the retention sweep stopped; it goes on at the next: {e}");
                    }
                }
                let shortest = kept.iter().map(|(_, retention)| *retention / 4).min();
                let every = shortest.unwrap_or(SWEEP_EVERY.1).clamp(SWEEP_EVERY.0, SWEEP_EVERY.1);
                tokio::time::sleep(every).await;
            }
        });
    }

    /// Deletes up to [`SWEEP_BATCH`] of the tenant's runs that finished
    /// over `retention` ago, oldest first.
    pub async fn sweep(&self, tenant: &TenantId, retention: Duration) -> Result<Swept, RunError> {
        let store = self.host.storage.tenant(tenant);
        let cutoff = now_ms().saturating_sub(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX));
        let mut swept = Swept::default();
        'hours: for hour in store.children(&finished_key()).await? {
            let Ok(hour_number) = hour.parse::<u64>() else { continue };
            if hour_number.saturating_mul(3_600_000) > cutoff {
                break;
            }
            for marker in store.list(&StoreKey::from_iter(["finished", hour.as_str()])).await? {
                let Some((finished_at_ms, run)) = marker.filename().and_then(parse_finished_marker) else {
                    continue;
                };
                if finished_at_ms > cutoff || swept.runs as usize == SWEEP_BATCH {
                    break 'hours;
                }
                let Some(objects) = delete_run(&store, &run, finished_at_ms).await? else {
                    continue;
                };
                swept.objects += objects;
                self.host.background.ended.forget(tenant, &run);
                store.delete(&marker).await?;
                swept.runs += 1;
            }
        }
        if swept.runs > 0 {
            tracing::info!(%tenant, runs = swept.runs, objects = swept.objects, "deleted runs past their retention");
            self.host.metrics.swept(tenant, swept.runs, swept.objects);
        }
        Ok(swept)
    }
}

impl Runtime {
    /// Deletes the tenant's component `digest`, unless a name, a schedule
    /// or a stored run refers to it.
    pub async fn delete_component(&self, tenant: &TenantId, digest: &str) -> Result<(), RunError> {
        if let Some(by) = self.reference_to(tenant, digest).await? {
            return Err(ComponentError::InUse {
                digest: digest.to_owned(),
                by,
            }
            .into());
        }
        let bytes = self
            .host
            .components
            .delete(&self.host.storage.tenant(tenant), digest)
            .await?;
        let (runtime, tenant, digest) = (self.clone(), tenant.clone(), digest.to_owned());
        tokio::spawn(async move {
            tokio::time::sleep(STORED_FRESH + Duration::from_secs(5)).await;
            match runtime.reference_to(&tenant, &digest).await {
                Ok(None) => {}
                Ok(Some(by)) => {
                    tracing::warn!(%tenant, %digest, "{by} started on the component as it was deleted: storing it again");
                    let store = runtime.host.storage.tenant(&tenant);
                    if let Err(e) = runtime.host.components.restore(&store, &digest, bytes).await {
                        tracing::error!(%tenant, %digest, "cannot store the deleted component again: {e}");
                    }
                }
                Err(e) => tracing::warn!(%tenant, %digest, "cannot check the deleted component's runs: {e}"),
            }
        });
        Ok(())
    }

    /// What refers to component `digest`: a name, a schedule or a run.
    async fn reference_to(&self, tenant: &TenantId, digest: &str) -> Result<Option<String>, RunError> {
        let store = self.host.storage.tenant(tenant);
        let names = self.host.components.names(&store).await?;
        if let Some((name, _)) = names.iter().find(|(_, points_at)| points_at == digest) {
            return Ok(Some(format!("the name `{name}`")));
        }
        let schedules = self.host.schedules.list(tenant).await?;
        if let Some(schedule) = schedules.iter().find(|s| s.component.as_str() == digest) {
            return Ok(Some(format!("schedule `{}`", schedule.name)));
        }
        for run in self.run_ids(tenant).await? {
            if let Some(record) = self.records(tenant, &run).run().await?
                && std::iter::once(&record.component)
                    .chain(&record.earlier_builds)
                    .chain(record.links.values())
                    .any(|build| build == digest)
            {
                return Ok(Some(format!("run `{run}`")));
            }
        }
        Ok(None)
    }
}

/// Deletes the objects of `run`, which finished at `finished_at_ms`, and
/// says how many there were; `None` if it is kept for now, its parent
/// being unfinished. A run started anew under the id since (its record
/// younger than the marker) is another run, and is left alone.
async fn delete_run(store: &TenantStore, run: &RunId, finished_at_ms: u64) -> Result<Option<u64>, RunError> {
    let keys = keys_of(run);
    let record = RunRecords::new(store.clone(), run.clone()).run().await?;
    if let Some(record) = &record {
        if record.created_at_ms > finished_at_ms {
            return Ok(Some(0));
        }
        if let Some(parent) = &record.parent
            && is_unfinished(store, parent).await?
        {
            return Ok(None);
        }
        store.delete_all(&super::search::markers(record)).await?;
        // A chain's last generation takes the chain's pointer with it;
        // one that continued leaves it to the generations after.
        if let Some(link) = &record.chain
            && !matches!(
                RunRecords::new(store.clone(), run.clone()).outcome().await?,
                Some(Outcome::Continued { .. })
            )
        {
            store.delete(&chain_key(&link.root)).await?;
        }
    }
    store.delete(&keys.run()).await?;
    let rest = store.list(&keys.root()).await?;
    store.delete_all(&rest).await?;
    Ok(Some(rest.len() as u64 + 1))
}

/// Whether `run` is stored and has not ended.
async fn is_unfinished(store: &TenantStore, run: &RunId) -> Result<bool, RunError> {
    let records = RunRecords::new(store.clone(), run.clone());
    Ok(records.run().await?.is_some() && records.outcome().await?.is_none())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::component::CodeCache;
    use crate::config::HostConfig;
    use crate::journal::RunRecord;
    use crate::store::{Storage, finished_marker};

    fn runtime(storage: Storage) -> Runtime {
        Runtime::new(HostConfig::new(), storage, CodeCache::disabled()).expect("a runtime")
    }

    fn run(n: usize) -> RunId {
        RunId::new(&format!("r{n:04}")).expect("a valid id")
    }

    #[tokio::test]
    async fn a_pass_deletes_at_most_a_batch_oldest_first_and_keeps_runs_within_retention() -> Result<(), RunError> {
        let storage = Storage::in_memory();
        let tenant = TenantId::default_tenant();
        let store = storage.tenant(&tenant);
        let long_ago = now_ms() - 7_200_000;
        for n in 0..SWEEP_BATCH + 20 {
            let at = long_ago + n as u64;
            store.overwrite(&finished_marker(at, &run(n)), Bytes::new()).await?;
            store
                .overwrite(&keys_of(&run(n)).outcome(), Bytes::from_static(b"x"))
                .await?;
        }
        let recent = run(9_999);
        store
            .overwrite(&finished_marker(now_ms(), &recent), Bytes::new())
            .await?;
        store
            .overwrite(&keys_of(&recent).outcome(), Bytes::from_static(b"x"))
            .await?;
        let runtime = runtime(storage);
        let hour = Duration::from_secs(3600);

        let first = runtime.sweep(&tenant, hour).await?;
        assert_eq!(first.runs as usize, SWEEP_BATCH);
        assert!(store.get(&keys_of(&run(SWEEP_BATCH - 1)).outcome()).await?.is_none());
        assert!(
            store.get(&keys_of(&run(SWEEP_BATCH)).outcome()).await?.is_some(),
            "the oldest go first"
        );
        let second = runtime.sweep(&tenant, hour).await?;
        assert_eq!(second.runs, 20);
        assert_eq!(
            runtime.sweep(&tenant, hour).await?,
            Swept::default(),
            "nothing is left past retention"
        );
        assert!(
            store.get(&keys_of(&recent).outcome()).await?.is_some(),
            "a run within retention stays"
        );
        assert_eq!(store.list(&finished_key()).await?.len(), 1);
        Ok(())
    }

    /// A parent may await its child long after the child ended: a finished
    /// child past retention is kept while its parent is unfinished, and
    /// swept once the parent has ended.
    #[tokio::test]
    async fn a_finished_child_is_kept_while_its_parent_is_unfinished() -> Result<(), RunError> {
        let storage = Storage::in_memory();
        let tenant = TenantId::default_tenant();
        let store = storage.tenant(&tenant);
        let long_ago = now_ms() - 7_200_000;
        let parent = RunRecords::new(store.clone(), run(1));
        parent.create_run(&RunRecord::example("r0001", long_ago)).await?;
        let mut child_record = RunRecord::example("r0001.0", long_ago);
        child_record.parent = Some(run(1));
        child_record.depth = 1;
        let child = RunRecords::new(store.clone(), child_record.run_id.clone());
        child.create_run(&child_record).await?;
        let ended = Outcome::Completed { output: "1".into() };
        child.finish(&ended, long_ago).await?;
        let runtime = runtime(storage);
        let hour = Duration::from_secs(3600);

        assert_eq!(runtime.sweep(&tenant, hour).await?, Swept::default());
        assert_eq!(
            child.outcome().await?,
            Some(ended.clone()),
            "the child its parent may await"
        );
        parent.finish(&ended, long_ago + 1).await?;
        assert_eq!(runtime.sweep(&tenant, hour).await?.runs, 2);
        assert_eq!(child.outcome().await?, None);
        assert_eq!(parent.run().await?, None);
        Ok(())
    }
}
