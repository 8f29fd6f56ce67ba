//! Hosts sharing one store: which of them are alive, which one drives each
//! run, and how a host wakes a run another drives.
//!
//! Every host that drives runs keeps a heartbeat (`cluster/hosts/{host}`),
//! renewed every quarter of its lease TTL. A run is driven by the host of
//! its highest claim: the host that created it holds epoch 0 (named in the
//! run record); a host takes a run over only by creating the next epoch
//! (`runs/{run}/owners/{epoch}`, create-only, so of two hosts racing one
//! wins), and only from a host it judged dead.
//!
//! Invariants:
//! - A host writes its heartbeat before it claims or creates any run, and
//!   once it has left, no renewal writes it again.
//! - A host judges another dead only by its own boot clock: the heartbeat
//!   stayed the same (missing counts as a state too) for a whole TTL since
//!   it first saw it so, or the host left (`left/{host}`), or its process
//!   is known to have exited on this machine. Since a version is seen only
//!   after it was written, no host is judged dead before its own lease (a
//!   TTL from sending that renewal) ran out.
//! - A claim holds only while the lease it was made under does, and only
//!   for 0.8 of its TTL (see `lease`); a host that went a TTL without
//!   renewing, or found its heartbeat deleted by a peer, voids every
//!   claim it made (a new generation) and must claim again, at a new
//!   epoch, before it writes for a run again. One that found it written
//!   by another process under its id stops for good (see `twins`). Every write of a run's driver
//!   checks its claim, and before every step attempt the driver also reads
//!   whether a later epoch exists ([`Claim::overtaken`]): a host wrongly
//!   judged dead stops starting attempts as soon as it could know.
//! - A heartbeat is deleted only by its host leaving, or by a peer that
//!   found it at the very version it judged dead by.
//! - The create-only journal stays the last fence: a write that passed its
//!   check just before the lease ran out lands only if no other host wrote
//!   that seq, so it never contradicts the journal.

mod claim_text;
mod claims;
mod deletions;
mod host_id;
mod lease;
mod liveness;
mod twins;
mod wakeups;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{OnceCell, mpsc, watch};

pub use claims::{CLAIM_BITS, Claim, ClaimError, ClaimLost, Owner, epochs_of, incarnation_of, overtaken_at};
pub use claim_text::{Sweeper, deleted_by};
pub use deletions::Deleting;
pub use host_id::{HostId, Incarnation, InvalidHostId};
pub use lease::{LeaseLapsed, LeasePolicy};
pub use twins::{HostStop, LiveError};
pub use wakeups::Wakeup;

use crate::clock::{BootInstant, LeaseClock};
use crate::shared_map::lock;
use crate::store::{RunId, Scope, Storage, StoreError, StoreKey, TenantId};
use lease::Lease;
use twins::Found;
use liveness::Observations;

/// Wake-ups waiting to be handled; past this many, the rest stay in the
/// store for the next look.
const WAKEUP_QUEUE: usize = 4096;

/// This host's place among the hosts sharing the store.
pub struct Cluster {
    me: HostId,
    /// This process, among any others under `me` (see `twins`).
    incarnation: Incarnation,
    store: Scope,
    lease: Arc<Lease>,
    /// Held around each write of the heartbeat, so that a renewal under
    /// way when the host leaves lands before the leave's delete, never
    /// after it (which would leave a live-looking heartbeat for a TTL).
    heartbeat_writes: tokio::sync::Mutex<()>,
    /// How often this host looks for wake-ups other hosts left it.
    wakeup_poll: Duration,
    others: Mutex<Observations>,
    /// The claims this host holds, by run.
    held: Mutex<BTreeMap<(TenantId, RunId), Claim>>,
    /// Set once the first heartbeat is written and the renewals run.
    joined: OnceCell<()>,
    /// The version of the heartbeat this host last wrote: found otherwise
    /// at the next renewal, another wrote or deleted it.
    written: Mutex<Option<String>>,
    /// Why this host stopped driving runs, once it has.
    stopped: watch::Sender<Option<HostStop>>,
    /// How many hosts this one has found dead: a change is the signal to
    /// look for their runs.
    deaths: watch::Sender<u64>,
    wakeups: mpsc::Sender<Wakeup>,
    /// Taken by whoever handles the wake-ups.
    wakeup_queue: Mutex<Option<mpsc::Receiver<Wakeup>>>,
}

impl Cluster {
    /// Host `me`, not yet joined: it joins (writes its first heartbeat)
    /// when it first claims a run.
    pub fn new(storage: &Storage, me: HostId, lease: &LeasePolicy, wakeup_poll: Duration) -> Arc<Self> {
        let (wakeups, queue) = mpsc::channel(WAKEUP_QUEUE);
        let clock = LeaseClock::drifting(lease.clock_drift_permille);
        Arc::new(Self {
            me,
            incarnation: Incarnation::draw(),
            store: storage.cluster(),
            lease: Arc::new(Lease::new(lease.ttl, clock)),
            heartbeat_writes: tokio::sync::Mutex::new(()),
            wakeup_poll,
            others: Mutex::default(),
            held: Mutex::default(),
            joined: OnceCell::new(),
            written: Mutex::default(),
            stopped: watch::Sender::new(None),
            deaths: watch::Sender::new(0),
            wakeups,
            wakeup_queue: Mutex::new(Some(queue)),
        })
    }

    /// This host: the id its heartbeat and claims are written under.
    pub fn me(&self) -> &HostId {
        &self.me
    }

    /// This process, among any others under this host's id: written in its
    /// heartbeats and claims, and in the runs it creates.
    pub fn incarnation(&self) -> Incarnation {
        self.incarnation
    }

    /// The lease TTL: a host whose heartbeat has not changed for this long
    /// is dead, and this host's own claims lapse if it does not renew
    /// within it.
    pub fn ttl(&self) -> Duration {
        self.lease.ttl()
    }

    /// Whether this host's lease has held, unbroken, since it was
    /// `generation`: false once it lapsed, even if renewed since.
    pub fn held_since(&self, generation: u64) -> bool {
        self.lease.check(generation).is_ok()
    }

    /// The generation of this host's lease, renewed first if it does not
    /// hold now; on first use, writes the first heartbeat and starts
    /// renewing it, once no other process may hold a lease under this
    /// host's id (see `twins`).
    pub async fn live(self: &Arc<Self>) -> Result<u64, LiveError> {
        self.joined
            .get_or_try_init(|| async {
                self.wait_out_an_earlier_process().await?;
                self.renew().await?;
                crate::task::spawn(keep_alive(Arc::downgrade(self)));
                crate::task::spawn(wakeups::watch(Arc::downgrade(self)));
                tracing::info!(host = %self.me, ttl_ms = crate::clock::millis(self.ttl()), "joined the hosts sharing the store");
                Ok::<(), LiveError>(())
            })
            .await?;
        if let Some(generation) = self.lease.current() {
            return Ok(generation);
        }
        self.renew().await?;
        // A renewal under way may have stopped the host meanwhile (this
        // one then returns at once), and a stopped host's lease never
        // holds.
        if let Some(why) = *self.stopped.borrow() {
            return Err(LiveError::Stopped {
                host: self.me.clone(),
                why,
            });
        }
        // A renewal slower than the TTL leaves the lease lapsed: a claim
        // made in it fails its first check, saying so.
        Ok(self.lease.generation())
    }

    /// The wake-ups other hosts leave this one, once: for the runtime.
    pub fn take_wakeups(&self) -> Option<mpsc::Receiver<Wakeup>> {
        lock(&self.wakeup_queue).take()
    }

    /// Changes each time this host finds another host dead.
    pub fn deaths(&self) -> watch::Receiver<u64> {
        self.deaths.subscribe()
    }

    /// Says why, once this host stops driving runs.
    pub fn stopped(&self) -> watch::Receiver<Option<HostStop>> {
        self.stopped.subscribe()
    }

    /// Stops driving anything and takes this host's heartbeat and wake-ups
    /// out of the store, so its runs can be taken over at once: the last
    /// thing a host does before it exits.
    pub async fn leave(&self) {
        let _writing = self.heartbeat_writes.lock().await;
        if !self.joined.initialized() || self.lease.has_left() {
            return;
        }
        self.lease.leave();
        self.stopped.send_replace(Some(HostStop::Left));
        let gone = async {
            self.store.overwrite(&left_key(&self.me), Bytes::new()).await?;
            self.store.delete(&heartbeat_key(&self.me)).await?;
            wakeups::clear(&self.store, &self.me).await
        };
        match gone.await {
            Ok(()) => tracing::info!(host = %self.me, "left the hosts sharing the store"),
            Err(e) => tracing::warn!(
                "could not take this host's heartbeat out of the store; others take its runs over once its lease runs out: {e}"
            ),
        }
    }

    /// Writes the next heartbeat. One found otherwise than this host left
    /// it was deleted by a peer that judged this host dead, which voids
    /// every claim; or written by another process under this host's id,
    /// which stops this host for good (see `twins`). The version written
    /// is the write's own answer, where the store gives one.
    async fn renew(&self) -> Result<(), LiveError> {
        let _writing = self.heartbeat_writes.lock().await;
        if self.lease.has_left() {
            return Ok(());
        }
        let sent = self.now();
        let key = heartbeat_key(&self.me);
        let expected = lock(&self.written).clone();
        if expected.is_some() {
            let found = self.store.version(&key).await?;
            if found != expected {
                match self.heartbeat_holds().await? {
                    Found::Its => {}
                    Found::Deleted => {
                        tracing::error!(host = %self.me, "this host's heartbeat was deleted by a peer that took it for dead: voiding every claim it holds");
                        self.lease.void();
                    }
                    Found::Another => return Err(self.stop_for_twin().await),
                }
            }
        }
        let ttl_ms = u64::try_from(self.ttl().as_millis()).unwrap_or(u64::MAX);
        let heartbeat = twins::heartbeat_bytes(self.lease.next_renewal(), ttl_ms, self.incarnation);
        let written = self.store.overwrite_versioned(&key, heartbeat).await?;
        self.lease.renewed(sent, self.now());
        *lock(&self.written) = match written {
            Some(version) => Some(version),
            None => self.store.version(&key).await?,
        };
        Ok(())
    }

    /// Now, on this host's lease clock.
    fn now(&self) -> BootInstant {
        self.lease.clock().now()
    }

    /// Whether `host` is dead, as far as this host can tell now. A host
    /// found dead here first counts among the deaths as one found by a look
    /// around does: once judged dead, it is not news to the next look, and
    /// its other runs would never be taken over (found by the simulation,
    /// seed 3491).
    pub async fn is_dead(&self, host: &HostId) -> Result<bool, StoreError> {
        if *host == self.me {
            return Ok(false);
        }
        if host.process_gone() {
            return Ok(true);
        }
        let version = self.store.version(&heartbeat_key(host)).await?;
        let (dead, news) = if version.is_none() && self.store.version(&left_key(host)).await?.is_some() {
            (true, lock(&self.others).left(host, self.now()))
        } else {
            let mut others = lock(&self.others);
            let was_dead = others.known_dead(host);
            let dead = others.observe(host, version, self.ttl(), self.now());
            (dead, dead && !was_dead)
        };
        if news {
            self.deaths.send_modify(|deaths| *deaths += 1);
        }
        Ok(dead)
    }

    /// Reads every heartbeat: notes the hosts newly found dead, and takes
    /// out of the store those dead for a TTL already.
    async fn look_around(&self) -> Result<(), StoreError> {
        let listed = self.store.versions(&StoreKey::from("hosts")).await?;
        let left = self.store.list(&StoreKey::from("left")).await?;
        let now = self.now();
        let mut newly_dead = 0;
        let long_dead = {
            let mut others = lock(&self.others);
            for key in &left {
                let Some(host) = key.filename().and_then(|name| HostId::try_from(name.to_owned()).ok()) else {
                    continue;
                };
                if host != self.me && others.left(&host, now) {
                    newly_dead += 1;
                }
            }
            let mut hosts = Vec::with_capacity(listed.len());
            for (key, version) in listed {
                let Some(host) = key.filename().and_then(|name| HostId::try_from(name.to_owned()).ok()) else {
                    continue;
                };
                if host != self.me {
                    let was_dead = others.known_dead(&host);
                    if others.observe(&host, Some(version), self.ttl(), now) && !was_dead {
                        newly_dead += 1;
                    }
                }
                hosts.push(host);
            }
            let unlisted: Vec<HostId> = others.unlisted(&hosts).collect();
            for host in unlisted {
                // Missing counts as a state of its own: dead a TTL after it
                // was first missed.
                if others.observe(&host, None, self.ttl(), now) {
                    newly_dead += 1;
                }
            }
            others.forget_dead(self.ttl(), now)
        };
        if newly_dead > 0 {
            tracing::info!(hosts = newly_dead, "found hosts dead; taking their runs over");
            self.deaths.send_modify(|deaths| *deaths += newly_dead);
        }
        for (host, judged_by) in long_dead {
            self.clean_up(&host, judged_by).await?;
        }
        Ok(())
    }

    /// Takes a host long dead out of the store: its heartbeat only if it is
    /// still the version it was judged dead by (a host that came back
    /// wrote another), its leaving mark and its wake-ups.
    async fn clean_up(&self, host: &HostId, judged_by: Option<String>) -> Result<(), StoreError> {
        let key = heartbeat_key(host);
        let now = self.store.version(&key).await?;
        if now.is_some() && now != judged_by {
            return Ok(());
        }
        if now.is_some() {
            self.store.delete(&key).await?;
        }
        self.store.delete(&left_key(host)).await?;
        wakeups::clear(&self.store, host).await
    }
}

/// Renews the heartbeat every quarter TTL and looks at the others', until
/// the host is dropped or leaves.
async fn keep_alive(cluster: Weak<Cluster>) {
    loop {
        let Some(cluster) = cluster.upgrade() else { return };
        if cluster.lease.has_left() {
            return;
        }
        let period = cluster.ttl() / 4;
        if let Err(e) = cluster.renew().await {
            tracing::warn!("could not renew this host's heartbeat: {e}");
        }
        if let Err(e) = cluster.look_around().await {
            tracing::warn!("could not read the other hosts' heartbeats: {e}");
        }
        drop(cluster);
        tokio::time::sleep(period).await;
    }
}

fn heartbeat_key(host: &HostId) -> StoreKey {
    StoreKey::from_iter(["hosts", host.as_str()])
}

/// Where a host that left says so: it is dead at once to its peers.
fn left_key(host: &HostId) -> StoreKey {
    StoreKey::from_iter(["left", host.as_str()])
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;
    use object_store::throttle::{ThrottleConfig, ThrottledStore};

    use super::*;
    use crate::clock::VirtualTime;

    /// A renewal under way when the host leaves (the keep-alive's, its put
    /// slowed to a second) lands before the leave's delete: the heartbeat
    /// is gone for good, and others may take the host's runs over at once.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_under_way_when_the_host_leaves_does_not_bring_its_heartbeat_back() -> Result<(), LiveError> {
        let slow_puts = ThrottleConfig {
            wait_put_per_call: Duration::from_secs(1),
            ..ThrottleConfig::default()
        };
        let storage = Storage::new(Arc::new(ThrottledStore::new(InMemory::new(), slow_puts)));
        let cluster = Cluster::new(
            &storage,
            HostId::fresh(),
            &LeasePolicy::default(),
            Duration::from_secs(60),
        );
        cluster.live().await?;
        // The keep-alive, spawned by the join, starts its first renewal.
        tokio::task::yield_now().await;
        cluster.leave().await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let heartbeat = cluster.store.version(&heartbeat_key(&cluster.me)).await?;
        assert_eq!(heartbeat, None, "the heartbeat came back after the host left");
        Ok(())
    }

    /// A heartbeat found changed at a renewal: one deleted by a peer that
    /// took the host for dead voids every claim, and the host goes on; its
    /// own bytes again (a write whose reply was lost) change nothing; bytes
    /// another process wrote under its id stop it for good, and it writes
    /// nothing more.
    #[tokio::test]
    async fn a_heartbeat_deleted_voids_the_claims_and_one_written_by_another_process_stops_the_host()
    -> Result<(), LiveError> {
        let storage = Storage::in_memory();
        let cluster = Cluster::new(
            &storage,
            HostId::fresh(),
            &LeasePolicy::default(),
            Duration::from_secs(60),
        );
        let first = cluster.live().await?;
        let key = heartbeat_key(&cluster.me);
        // A renewal whose write landed though its reply was lost: the bytes
        // stored are still its own, at another version.
        let landed = twins::heartbeat_bytes(98, 1, cluster.incarnation);
        cluster.store.overwrite(&key, landed).await?;
        cluster.renew().await?;
        assert_eq!(cluster.lease.generation(), first, "a write of its own changes nothing");

        cluster.store.delete(&key).await?;
        cluster.renew().await?;
        assert_eq!(cluster.lease.generation(), first + 1, "a peer's delete voids the claims");
        assert!(cluster.live().await.is_ok(), "and the host goes on");

        let another = twins::heartbeat_bytes(99, 1, Incarnation::draw());
        cluster.store.overwrite(&key, another.clone()).await?;
        let stopped = cluster.renew().await;
        assert!(
            matches!(stopped, Err(LiveError::Stopped { why: HostStop::Twin, .. })),
            "{stopped:?}"
        );
        assert!(matches!(
            cluster.live().await,
            Err(LiveError::Stopped { why: HostStop::Twin, .. })
        ));
        assert_eq!(*cluster.stopped().borrow(), Some(HostStop::Twin));
        cluster.renew().await?;
        cluster.leave().await;
        assert_eq!(
            cluster.store.get(&key).await?,
            Some(another),
            "the other process's heartbeat stays"
        );
        Ok(())
    }

    /// A host started under an id whose heartbeat another process renews
    /// is refused, once it never stood still for a TTL in three; one whose
    /// heartbeat stands still joins once it stayed so for a TTL (its
    /// process is dead, as a peer would judge), and one written once more
    /// meanwhile (a dead process's last write, landing late) a TTL after
    /// that write; one with no heartbeat joins at once.
    #[tokio::test(start_paused = true)]
    async fn a_start_under_an_id_in_use_is_refused_and_under_a_dead_ones_waits_a_ttl() -> Result<(), LiveError> {
        let _virtual = VirtualTime::start(1_000);
        let storage = Storage::in_memory();
        let policy = LeasePolicy::default();
        let start = |id: &HostId| Cluster::new(&storage, id.clone(), &policy, Duration::from_secs(60));
        let first = start(&HostId::fresh());
        let joining = tokio::time::Instant::now();
        first.live().await?;
        assert_eq!(joining.elapsed(), Duration::ZERO, "no heartbeat: joined at once");

        let refused = start(first.me()).live().await;
        assert!(
            matches!(&refused, Err(LiveError::IdInUse { host }) if host == first.me()),
            "{refused:?}"
        );
        let waited = joining.elapsed();
        assert!(
            waited >= policy.ttl * twins::JOIN_WAIT_TTLS && waited < policy.ttl * (twins::JOIN_WAIT_TTLS + 1),
            "refused after {waited:?}"
        );

        let dead = HostId::fresh();
        let key = heartbeat_key(&dead);
        first.store.overwrite(&key, Bytes::from_static(b"{\"renewal\":9}")).await?;
        let waiting = tokio::time::Instant::now();
        start(&dead).live().await?;
        assert!(waiting.elapsed() >= policy.ttl, "joined after {:?}", waiting.elapsed());

        let late = HostId::fresh();
        let key = heartbeat_key(&late);
        first.store.overwrite(&key, Bytes::from_static(b"{\"renewal\":9}")).await?;
        let waiting = tokio::time::Instant::now();
        let joined = tokio::spawn({
            let late = start(&late);
            async move { late.live().await }
        });
        tokio::time::sleep(policy.ttl / 2).await;
        first.store.overwrite(&key, Bytes::from_static(b"{\"renewal\":10}")).await?;
        joined.await.expect("joined")?;
        let waited = waiting.elapsed();
        assert!(
            waited >= policy.ttl * 3 / 2 && waited < policy.ttl * 2,
            "a TTL after the late write: {waited:?}"
        );
        Ok(())
    }

    /// Hole 3 of the cluster review: a peer cleaning up a host it judged
    /// dead deletes its heartbeat only at the version it judged it dead by,
    /// so a host that came back and renewed keeps its heartbeat.
    #[tokio::test]
    async fn a_dead_hosts_heartbeat_is_cleaned_up_only_at_the_version_it_was_judged_dead_by() -> Result<(), StoreError>
    {
        let storage = Storage::in_memory();
        let cleaner = Cluster::new(
            &storage,
            HostId::fresh(),
            &LeasePolicy::default(),
            Duration::from_secs(60),
        );
        let back = HostId::try_from("elsewhere.7.abc".to_owned()).expect("a valid id");
        let key = heartbeat_key(&back);
        cleaner.store.overwrite(&key, Bytes::from_static(b"old")).await?;
        let judged_by = cleaner.store.version(&key).await?;
        cleaner.store.overwrite(&key, Bytes::from_static(b"renewed")).await?;
        cleaner.clean_up(&back, judged_by.clone()).await?;
        assert_eq!(
            cleaner.store.get(&key).await?,
            Some(Bytes::from_static(b"renewed")),
            "a fresh heartbeat stays"
        );
        let now = cleaner.store.version(&key).await?;
        cleaner.clean_up(&back, now).await?;
        assert_eq!(
            cleaner.store.get(&key).await?,
            None,
            "a heartbeat still at its dead version goes"
        );
        Ok(())
    }

    /// A host judged dead first by a claim's look (`is_dead`) counts among
    /// the deaths the takeover watches, once: its other runs are taken
    /// over too, though the next look around finds it dead already.
    #[tokio::test(start_paused = true)]
    async fn a_host_found_dead_by_a_claim_counts_among_the_deaths_once() -> Result<(), StoreError> {
        let _virtual = VirtualTime::start(1_000);
        let storage = Storage::in_memory();
        let observer = Cluster::new(
            &storage,
            HostId::fresh(),
            &LeasePolicy::default(),
            Duration::from_secs(60),
        );
        let gone = HostId::try_from("elsewhere.7.abc".to_owned()).expect("a valid id");
        observer
            .store
            .overwrite(&heartbeat_key(&gone), Bytes::from_static(b"last"))
            .await?;
        let deaths = observer.deaths();
        assert!(!observer.is_dead(&gone).await?, "first seen: alive");
        tokio::time::sleep(LeasePolicy::default().ttl).await;
        assert!(observer.is_dead(&gone).await?, "unchanged for a TTL: dead");
        assert_eq!(*deaths.borrow(), 1);
        assert!(observer.is_dead(&gone).await?);
        observer.look_around().await?;
        assert_eq!(*deaths.borrow(), 1, "a death is news once");
        Ok(())
    }
}

/// Two processes under one host id, each told apart by its incarnation.
#[cfg(test)]
mod twin_tests {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::FutureExt;

    use super::*;
    use crate::clock::VirtualTime;
    use crate::journal::{RunRecord, RunRecords};
    use crate::store::seams::{Before, Call, Seams, flaky};
    use crate::store::keys_of;

    /// A store whose hook, once its countdown is set to N, runs `act`
    /// before the N-th call of `call` at a key ending in `ending` from
    /// then (with a handle on the same store), and fails that call if
    /// `fails`; the countdown is 0 once it acted.
    fn store_acting_once(
        call: Call,
        ending: String,
        fails: bool,
        act: impl Fn(Storage) -> futures::future::BoxFuture<'static, ()> + Send + Sync + 'static,
    ) -> (Storage, Arc<AtomicUsize>) {
        let countdown = Arc::new(AtomicUsize::new(0));
        let handle: Arc<OnceLock<Storage>> = Arc::default();
        let before: Before = {
            let (countdown, handle, act) = (countdown.clone(), handle.clone(), Arc::new(act));
            Arc::new(move |made, key| {
                let counted = made == call && key.as_ref().ends_with(&ending);
                let hit = counted
                    && countdown.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)) == Ok(1);
                let acting = hit.then(|| act(handle.get().expect("the store is set").clone()));
                async move {
                    if let Some(acting) = acting {
                        acting.await;
                        if fails {
                            return Err(flaky("a twin's write landed first"));
                        }
                    }
                    Ok(())
                }
                .boxed()
            })
        };
        let storage = Storage::new(Arc::new(Seams::before(before)));
        handle.set(storage.clone()).map_err(drop).expect("set once");
        (storage, countdown)
    }

    /// A renewal takes the version it wrote from the write's answer: a
    /// twin's heartbeat landing between the write and a read after it is
    /// found at the next renewal, and the host stops for good. (Read back
    /// after the write, the twin's version passed for the host's own, and
    /// both went on.)
    #[tokio::test(start_paused = true)]
    async fn a_twins_heartbeat_landing_just_after_a_renewal_is_found_at_the_next() -> Result<(), LiveError> {
        let _virtual = VirtualTime::start(1_000);
        let me = HostId::fresh();
        let twin = twins::heartbeat_bytes(1, 10_000, Incarnation::draw());
        let (storage, armed) = store_acting_once(Call::Get, me.to_string(), false, {
            let key = heartbeat_key(&me);
            move |storage| {
                let (key, twin) = (key.clone(), twin.clone());
                async move { storage.cluster().overwrite(&key, twin).await.expect("the twin writes") }.boxed()
            }
        });
        let cluster = Cluster::new(&storage, me, &LeasePolicy::default(), Duration::from_secs(60));
        // The join's read that finds no heartbeat passes; the twin writes
        // before the next read of it.
        armed.store(2, Ordering::SeqCst);
        cluster.live().await?;
        tokio::time::sleep(cluster.ttl()).await;
        assert_eq!(armed.load(Ordering::SeqCst), 0, "the twin wrote");
        assert_eq!(*cluster.stopped().borrow(), Some(HostStop::Twin));
        Ok(())
    }

    /// A run that another process under this host's id created (a twin,
    /// or a process before it): a claim made while that process still
    /// writes the heartbeat stops this host before it claims anything; a
    /// claim whose create, retried after a failure, finds the other
    /// process's claim at that epoch does not take it for its own (the
    /// same id, other bytes), and claims the next epoch only once that
    /// process no longer renews the heartbeat.
    #[tokio::test(start_paused = true)]
    async fn a_claim_of_a_twins_run_never_shares_its_epoch_and_a_live_twin_stops_the_claimer() -> Result<(), ClaimError>
    {
        let _virtual = VirtualTime::start(1_000);
        let me = HostId::fresh();
        let other = Incarnation::draw();
        let record = RunRecord {
            host: Some(me.clone()),
            host_incarnation: Some(other),
            ..RunRecord::example("r1", 1)
        };
        let (storage, armed) = store_acting_once(Call::Put, keys_of(&record.run_id).owner(1).to_string(), true, {
            let (run, me) = (record.run_id.clone(), me.clone());
            move |storage| {
                let (run, me) = (run.clone(), me.clone());
                async move {
                    let store = storage.tenant(&TenantId::default_tenant());
                    let claim = super::claim_text::claim_bytes(&me, other);
                    store.create(&keys_of(&run).owner(1), claim).await.expect("the twin claims");
                }
                .boxed()
            }
        });
        let store = storage.tenant(&TenantId::default_tenant());
        RunRecords::new(store.clone(), record.run_id.clone())
            .create_record(&record)
            .await
            .map_err(|e| ClaimError::Record(e))?;
        let cluster = Cluster::new(&storage, me.clone(), &LeasePolicy::default(), Duration::from_secs(60));
        cluster.live().await?;

        armed.store(1, Ordering::SeqCst);
        let claim = cluster.claim(&store, &record).await?;
        assert_eq!(armed.load(Ordering::SeqCst), 0, "the twin claimed first");
        assert_eq!(claim.epoch, 2, "the twin's epoch is not taken for this process's");

        let twins_heartbeat = twins::heartbeat_bytes(7, 10_000, other);
        cluster.store.overwrite(&heartbeat_key(&me), twins_heartbeat).await?;
        let taken = RunRecord {
            run_id: RunId::new("r2").expect("an id"),
            ..record
        };
        RunRecords::new(store.clone(), taken.run_id.clone())
            .create_record(&taken)
            .await
            .map_err(|e| ClaimError::Record(e))?;
        let refused = cluster.claim(&store, &taken).await;
        assert!(
            matches!(refused, Err(ClaimError::Live(LiveError::Stopped { why: HostStop::Twin, .. }))),
            "{refused:?}"
        );
        assert_eq!(store.list(&keys_of(&taken.run_id).owners()).await?, Vec::<StoreKey>::new(), "nothing claimed");
        Ok(())
    }
}
