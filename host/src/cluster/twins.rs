//! Two processes under one host id: a start under an id another process
//! still renews is refused, and a host that finds its heartbeat written by
//! another process stops driving runs for good.
//!
//! Claims name a host id, and a host claims a run its own id claimed
//! without asking whether that host lives (it is itself), so two live
//! processes under one id would take each other's runs turn about and run
//! their steps at once. A host's id is fresh for each process
//! ([`HostId::fresh`]); two share one only when it is given
//! (`HostConfig::host_id`) to a second process while the first runs, or
//! when a process comes back from a pause longer than its lease to find
//! its id taken by a successor.
//!
//! Invariants:
//! - A host joins under an id whose heartbeat is stored only once it saw
//!   that heartbeat stay the same for a whole TTL on its own clock, as a
//!   peer judges a host dead: the earlier process's lease ran out. One
//!   that does not stand still that long within [`JOIN_WAIT_TTLS`] TTLs
//!   refuses the start (found by the simulation, seed 4421: refused at
//!   the first change, a restart was refused for good over the last write
//!   of the process it replaced, which landed after that one was killed).
//! - Each process draws an [`Incarnation`] as it starts its host, and
//!   writes it in every heartbeat and every claim: a heartbeat or claim is
//!   this process's only if it carries this incarnation (a write whose
//!   reply was lost is its own, whichever of its writes landed: found by
//!   the simulation, seed 2091), never because it names this host's id.
//! - A host that finds its heartbeat holding another incarnation's bytes
//!   stops for good before it writes anything again: its lease ends, no
//!   claim of it holds, and it claims nothing more. It looks at each
//!   renewal, and before it claims a run another process under its id
//!   claimed (see `claims`). The survivor recovered the runs when it
//!   joined, and is handed those the host held since.
//! - A renewal takes the version it wrote from the write's own answer
//!   (where the store gives one), not from a read after it, which a twin's
//!   write landing between the two would answer.
//! - A heartbeat deleted under a host is no other process's: a peer judged
//!   the host dead and took its runs over, so the host voids its claims and
//!   goes on.

use bytes::Bytes;

use super::{Cluster, HostId, Incarnation, heartbeat_key};
use crate::shared_map::lock;
use crate::store::{RunId, StoreError, TenantId};

/// TTLs a host starting under an id waits, at most, for its stored
/// heartbeat to stand still for one of them.
pub const JOIN_WAIT_TTLS: u32 = 3;

/// Why this host may not claim or create runs.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// Another process renews the heartbeat of this host's id.
    #[error(
        "host id `{host}` is in use: another process kept renewing its heartbeat while this one waited three lease TTLs to join; give each process its own id (leave `host_id` unset for a fresh one)"
    )]
    IdInUse {
        /// The id in use.
        host: HostId,
    },
    /// This host drives no more runs.
    #[error("host `{host}` drives no more runs: {why}")]
    Stopped {
        /// This host.
        host: HostId,
        /// Why it stopped.
        why: HostStop,
    },
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a host stopped driving runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostStop {
    /// It left the hosts sharing the store: it is shutting down.
    #[error("it left the hosts sharing the store (it is shutting down)")]
    Left,
    /// Another process wrote its heartbeat.
    #[error(
        "another process wrote its heartbeat under the same id (one given this id while it ran, or one that took the id while this process was paused past its lease); restart it under a fresh id"
    )]
    Twin,
}

/// What a host finds in its heartbeat at a renewal.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Found {
    /// What it wrote last.
    Its,
    /// Nothing: a peer judged it dead and deleted it.
    Deleted,
    /// Another process's bytes.
    Another,
}

impl Cluster {
    /// Waits, before the first heartbeat, until no other process may hold
    /// a lease under this host's id: at once if no heartbeat is stored (or
    /// it goes), once it stayed the same for a TTL otherwise. A heartbeat
    /// that changed once may be the last write of a process that died
    /// with it under way, so the wait starts again from it; one that never
    /// stands still for [`JOIN_WAIT_TTLS`] TTLs is a live process's.
    pub(super) async fn wait_out_an_earlier_process(&self) -> Result<(), LiveError> {
        let key = heartbeat_key(&self.me);
        let Some(mut seen) = self.store.version(&key).await? else {
            return Ok(());
        };
        tracing::warn!(host = %self.me, ttl_ms = crate::clock::millis(self.ttl()), "this host's id has a heartbeat stored; waiting a lease TTL to find whether the process that wrote it still runs");
        let began = self.now();
        let mut still_since = began;
        loop {
            let still = self.now().duration_since(still_since);
            if still >= self.ttl() {
                return Ok(());
            }
            if self.now().duration_since(began) >= self.ttl().saturating_mul(JOIN_WAIT_TTLS) {
                return Err(LiveError::IdInUse { host: self.me.clone() });
            }
            tokio::time::sleep((self.ttl() - still).min(self.ttl() / 4)).await;
            match self.store.version(&key).await? {
                None => return Ok(()),
                Some(now) if now != seen => (seen, still_since) = (now, self.now()),
                Some(_) => {}
            }
        }
    }

    /// What the heartbeat holds now: this process's bytes (any of its
    /// writes), none, or another process's.
    pub(super) async fn heartbeat_holds(&self) -> Result<Found, StoreError> {
        let stored = self.store.get(&heartbeat_key(&self.me)).await?;
        Ok(match stored {
            None => Found::Deleted,
            Some(bytes) if incarnation_in(&bytes) == Some(self.incarnation) => Found::Its,
            Some(_) => Found::Another,
        })
    }

    /// Stops driving runs for good: another process writes this host's
    /// heartbeat. The runs it holds are handed to that process, with a
    /// wake-up each addressed to the id, which it drives them at: those it
    /// created or claimed since the other joined carry the id, so no peer
    /// takes them over, and the other's recovery at its join did not find
    /// them.
    pub(super) async fn stop_for_twin(&self) -> LiveError {
        tracing::error!(host = %self.me, "{}", HostStop::Twin);
        self.lease.leave();
        self.stopped.send_replace(Some(HostStop::Twin));
        let held: Vec<(TenantId, RunId)> = lock(&self.held).keys().cloned().collect();
        for (tenant, run) in held {
            if let Err(e) = self.wake(&self.me, &tenant, &run).await {
                tracing::error!(%tenant, %run, "cannot leave the run to the other process under this host's id; it is driven again at that process's next start: {e}");
            }
        }
        LiveError::Stopped {
            host: self.me.clone(),
            why: HostStop::Twin,
        }
    }
}

/// The bytes of a heartbeat: its renewal's number and the writing
/// process's incarnation, so that no two writes, of any processes, match.
pub(super) fn heartbeat_bytes(renewal: u64, ttl_ms: u64, incarnation: Incarnation) -> Bytes {
    let heartbeat = serde_json::json!({
        "renewal": renewal,
        "ttl_ms": ttl_ms,
        "incarnation": incarnation.to_string(),
    });
    Bytes::from(heartbeat.to_string())
}

/// The incarnation a heartbeat was written by; `None` for bytes that name
/// none (an older build's, or junk).
fn incarnation_in(heartbeat: &[u8]) -> Option<Incarnation> {
    let heartbeat: serde_json::Value = serde_json::from_slice(heartbeat).ok()?;
    heartbeat.get("incarnation")?.as_str()?.parse().ok()
}
