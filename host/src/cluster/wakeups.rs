//! Wake-ups between hosts: a host that stored a signal or a cancellation
//! for a run another host drives leaves an empty object in that host's
//! folder (`cluster/wakeups/{host}/{tenant}/{run}`); the host looks there
//! every `WaitPolicy::wakeup_poll_interval`, takes each one out, then hands it on. Since the
//! object is removed before the run is woken, and the signal was stored
//! before the object, a wake-up is never lost between the two.

use std::sync::Weak;

use bytes::Bytes;

use super::{Cluster, HostId};
use crate::store::{RunId, Scope, StoreError, StoreKey, TenantId};

/// A run this host drives has something new in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wakeup {
    /// The tenant the run belongs to.
    pub tenant: TenantId,
    /// The run with something new: a signal or a cancellation stored for it.
    pub run: RunId,
}

fn folder(host: &HostId) -> StoreKey {
    StoreKey::from_iter(["wakeups", host.as_str()])
}

impl Cluster {
    /// Leaves `host` a wake-up for `run`; many coalesce into one.
    pub async fn wake(&self, host: &HostId, tenant: &TenantId, run: &RunId) -> Result<(), StoreError> {
        let key = StoreKey::from_iter(["wakeups", host.as_str(), tenant.as_str(), run.as_str()]);
        self.store.overwrite(&key, Bytes::new()).await
    }

    /// Takes this host's wake-ups out of the store and queues them; those
    /// that do not fit in the queue stay for the next look.
    async fn collect_wakeups(&self) -> Result<(), StoreError> {
        let keys = self.store.list(&folder(&self.me)).await?;
        for key in keys {
            let parts: Vec<String> = key.parts().map(|part| part.as_ref().to_owned()).collect();
            let wakeup = match parts.as_slice() {
                [.., tenant, run] => TenantId::new(tenant).ok().zip(RunId::new(run).ok()),
                _ => None,
            };
            let Ok(permit) = self.wakeups.try_reserve() else {
                return Ok(());
            };
            self.store.delete(&key).await?;
            if let Some((tenant, run)) = wakeup {
                permit.send(Wakeup { tenant, run });
            }
        }
        Ok(())
    }
}

/// Looks for wake-ups until the host is dropped or leaves.
pub async fn watch(cluster: Weak<Cluster>) {
    loop {
        let Some(cluster) = cluster.upgrade() else { return };
        if cluster.lease.has_left() {
            return;
        }
        if let Err(e) = cluster.collect_wakeups().await {
            tracing::warn!("could not read this host's wake-ups: {e}");
        }
        let poll = cluster.wakeup_poll;
        drop(cluster);
        tokio::time::sleep(poll).await;
    }
}

/// Takes every wake-up left for `host` out of the store.
pub async fn clear(store: &Scope, host: &HostId) -> Result<(), StoreError> {
    for key in store.list(&folder(host)).await? {
        store.delete(&key).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cluster::{LeasePolicy, WAKEUP_QUEUE};
    use crate::store::Storage;

    /// Wake-ups past what the queue holds stay in the store for the next
    /// look: the queue never grows past its bound, and none is lost.
    #[tokio::test]
    async fn wakeups_past_the_queue_stay_in_the_store_for_the_next_look() -> Result<(), StoreError> {
        let cluster = Cluster::new(
            &Storage::in_memory(),
            HostId::fresh(),
            &LeasePolicy::default(),
            Duration::from_secs(60),
        );
        let mut queue = cluster.take_wakeups().expect("the queue, taken once");
        let tenant = TenantId::default_tenant();
        for n in 0..=WAKEUP_QUEUE {
            let run = RunId::new(&format!("r{n:05}")).expect("a valid id");
            cluster.wake(&cluster.me, &tenant, &run).await?;
        }
        cluster.collect_wakeups().await?;
        let left = cluster.store.list(&folder(&cluster.me)).await?;
        assert_eq!((queue.len(), left.len()), (WAKEUP_QUEUE, 1), "a full queue, one left");

        let first = queue.recv().await.expect("a queued wake-up");
        assert_eq!(first.run.as_str(), "r00000");
        cluster.collect_wakeups().await?;
        assert!(cluster.store.list(&folder(&cluster.me)).await?.is_empty());
        let mut runs = std::collections::BTreeSet::from([first.run]);
        while let Ok(wakeup) = queue.try_recv() {
            runs.insert(wakeup.run);
        }
        assert_eq!(runs.len(), WAKEUP_QUEUE + 1, "every wake-up taken once");
        Ok(())
    }
}
