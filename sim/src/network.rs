//! The store as the simulated hosts reach it: one in-memory store behind a
//! seeded generator that delays each host's calls, fails some, loses the
//! reply of some writes after they landed (some of those land only later,
//! after the client's retry, as a request held up in the network would),
//! delivers some writes twice, answers some listings of the hosts' shared
//! folder (`cluster/`: heartbeats, wake-ups) as they stood a while ago, as
//! an eventually consistent store would, and cuts a host off (dead: its
//! calls never return) or holds its calls (paused: they return once it
//! runs again), or holds only its calls to `cluster/` for a while
//! (partitioned from the other hosts, not from its runs), or fails every
//! call of every host for a while (an outage, outlasting the retries of
//! the store layer). Listings of a run's own records are answered as they
//! stand: the journal relies on listing what was written (S3, GCS, Azure
//! and SeaweedFS list so). Versions are written as Azure writes them: an
//! ETag quoted in a write's or a read's answer, bare in a listing, so a
//! host comparing them as given would find a heartbeat changed on every
//! look.
//!
//! Two modes make a store no host may run on, which the hosts' startup
//! probe must refuse (`Storage::check`): `non-atomic`, whose create-only
//! writes check then write (two writers racing may both create), and
//! `stale-reads`, a gateway that answers a key it once found absent as
//! absent for a while after it is written (so a fence could miss a claim).
//!
//! What landed in the store under `runs/` and `retired/` is kept, in order, for the
//! checks (a create, an overwrite, a delete and what it deleted), each at
//! the moment it landed: the history the oracles judge, not the store's
//! end state.
//!
//! Invariants: every decision is drawn from the one generator, in the
//! order the calls are made, and every wait is on tokio's paused clock, so
//! one seed makes the same calls fail and wait the same way every time. A
//! dead host reaches nothing again, but for a write it sent that lands
//! late; a paused host's calls, and the replies of calls it made before,
//! wait until its pause ends. A write lands at most `late-by` after it was
//! sent.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use chacha20::ChaCha20Rng;
use chacha20::rand_core::{Rng, SeedableRng};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use tokio::time::Instant;

/// How the store behaves toward every host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreFaults {
    /// Each call waits up to this long, uniformly.
    pub max_latency: Duration,
    /// The share of calls that fail, from 0 to 1.
    pub error_rate: f64,
    /// The share of failed writes that landed (their reply lost).
    pub lost_reply_rate: f64,
    /// The share of those that land only after the client's retry, up to
    /// `late_by` after they were sent.
    pub late_rate: f64,
    pub late_by: Duration,
    /// The share of writes delivered twice, the second up to `late_by`
    /// after the first.
    pub duplicate_rate: f64,
    /// How old a stale listing of `cluster/` may be, and the share of such
    /// listings answered stale; in `stale-reads` mode, how long a key read
    /// absent reads absent.
    pub stale: Duration,
    pub stale_rate: f64,
    pub mode: StoreMode,
}

/// What kind of store the hosts run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreMode {
    /// Create-only writes atomic, reads fresh: S3, GCS, Azure, SeaweedFS.
    #[default]
    Strict,
    /// Create-only writes that check, then write: two at once may both
    /// create. No host may run on it.
    NonAtomic,
    /// Reads of a key once found absent answer absent for `stale` after it
    /// is written (negative caching). No host may run on it.
    StaleReads,
}

impl StoreMode {
    /// Whether hosts must refuse a store of this mode.
    pub fn is_refused(self) -> bool {
        self != Self::Strict
    }
}

impl fmt::Display for StoreMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Strict => "strict",
            Self::NonAtomic => "non-atomic",
            Self::StaleReads => "stale-reads",
        })
    }
}

impl FromStr for StoreMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "strict" => Ok(Self::Strict),
            "non-atomic" => Ok(Self::NonAtomic),
            "stale-reads" => Ok(Self::StaleReads),
            _ => Err("strict, non-atomic or stale-reads".into()),
        }
    }
}

/// Whether a host reaches the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Up,
    /// Its calls wait until then.
    Paused(Instant),
    /// Its calls never return.
    Down,
}

/// What the store did, by kind: calls, failures injected, replies lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCounts {
    pub calls: u64,
    pub failed: u64,
    pub lost_replies: u64,
    pub late_landings: u64,
    pub duplicates: u64,
    pub stale_listings: u64,
}

impl std::ops::AddAssign for StoreCounts {
    fn add_assign(&mut self, other: Self) {
        self.calls += other.calls;
        self.failed += other.failed;
        self.lost_replies += other.lost_replies;
        self.late_landings += other.late_landings;
        self.duplicates += other.duplicates;
        self.stale_listings += other.stale_listings;
    }
}

/// What landed under `runs/`, when, by which host.
#[derive(Debug, Clone)]
pub struct Landed {
    /// Since the seed began.
    pub at: Duration,
    pub host: usize,
    /// The key, from `tenants/`.
    pub key: String,
    pub change: Change,
}

/// What a write did to its key.
#[derive(Debug, Clone)]
pub enum Change {
    /// Created, create-only, with these bytes.
    Created(Bytes),
    Overwritten,
    /// Deleted what it held, if anything.
    Deleted(Option<Bytes>),
}

/// The hosts' shared folder: heartbeats, departures, wake-ups.
const SHARED: &str = "cluster/";

/// What a listing answered.
type Listing = Vec<Result<ObjectMeta>>;

struct State {
    rng: ChaCha20Rng,
    faults: StoreFaults,
    hosts: Vec<Reach>,
    /// Until when each host's calls to `cluster/` wait.
    partitioned: Vec<Option<Instant>>,
    counts: StoreCounts,
    /// Until when, and how many of, the calls fail: an outage of the store.
    outage: Option<(Instant, f64)>,
    /// Listings of `cluster/` answered lately, by what was listed, oldest
    /// first: what a stale listing is answered from.
    listed: HashMap<String, VecDeque<(Instant, Listing)>>,
    /// In `stale-reads` mode, the keys read absent, and when.
    read_absent: HashMap<Path, Instant>,
    history: Vec<Landed>,
}

/// The store every simulated host shares.
pub struct Network {
    store: Arc<InMemory>,
    origin: Instant,
    state: Mutex<State>,
}

/// What becomes of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Done,
    /// Fails before it reaches the store.
    Failed,
    /// Lands, then fails: its reply is lost.
    Lost,
    /// Fails, and lands this much later, after the client's retry.
    Late(Duration),
    /// Lands, and lands again this much later.
    Twice(Duration),
}

/// A call, made again each time it lands.
type Call<R> = Arc<dyn Fn() -> BoxFuture<'static, Result<R>> + Send + Sync>;

impl Network {
    pub fn new(seed: u64, faults: StoreFaults, origin: Instant) -> Arc<Self> {
        Arc::new(Self {
            store: Arc::new(InMemory::new()),
            origin,
            state: Mutex::new(State {
                rng: ChaCha20Rng::seed_from_u64(seed),
                faults,
                hosts: Vec::new(),
                partitioned: Vec::new(),
                counts: StoreCounts::default(),
                outage: None,
                listed: HashMap::new(),
                read_absent: HashMap::new(),
                history: Vec::new(),
            }),
        })
    }

    /// The store as the checks read it: no delay, no fault.
    pub fn store(&self) -> Arc<InMemory> {
        self.store.clone()
    }

    /// What landed under `runs/`, in order.
    pub fn history(&self) -> Vec<Landed> {
        self.state().history.clone()
    }

    /// A new host's way to the store, and its number.
    pub fn join(self: &Arc<Self>) -> (SimStore, usize) {
        let mut state = self.state();
        state.hosts.push(Reach::Up);
        state.partitioned.push(None);
        let host = state.hosts.len() - 1;
        (
            SimStore {
                network: self.clone(),
                host,
            },
            host,
        )
    }

    pub fn set_reach(&self, host: usize, reach: Reach) {
        self.state().hosts[host] = reach;
    }

    /// Pauses `host` until `until`, or as long as it is paused already if
    /// that is longer (a pause never cuts a longer stall short); a host
    /// cut off for good stays so. When its pause ends, if it is not down.
    pub fn pause(&self, host: usize, until: Instant) -> Option<Instant> {
        let mut state = self.state();
        let until = match state.hosts[host] {
            Reach::Down => return None,
            Reach::Paused(paused) => paused.max(until),
            Reach::Up => until,
        };
        state.hosts[host] = Reach::Paused(until);
        Some(until)
    }

    /// Holds `host`'s calls to `cluster/` until `until`.
    pub fn partition(&self, host: usize, until: Instant) {
        self.state().partitioned[host] = Some(until);
    }

    /// Fails `rate` of every host's calls until `until`.
    pub fn outage(&self, until: Instant, rate: f64) {
        self.state().outage = Some((until, rate));
    }

    pub fn reach(&self, host: usize) -> Reach {
        self.state().hosts[host]
    }

    /// Whether `host` reaches the store now.
    pub fn is_up(&self, host: usize) -> bool {
        match self.reach(host) {
            Reach::Up => true,
            Reach::Paused(until) => until <= Instant::now(),
            Reach::Down => false,
        }
    }

    pub fn counts(&self) -> StoreCounts {
        self.state().counts
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits while `host` may not reach `key`: for ever once it is down.
    async fn reachable(&self, host: usize, key: &Path) {
        loop {
            let partitioned = self.state().partitioned[host].filter(|until| *until > Instant::now());
            match (self.reach(host), partitioned) {
                (Reach::Down, _) => std::future::pending::<()>().await,
                (Reach::Paused(until), _) if until > Instant::now() => tokio::time::sleep_until(until).await,
                (_, Some(until)) if key.as_ref().starts_with(SHARED) => tokio::time::sleep_until(until).await,
                _ => return,
            }
        }
    }

    /// Draws one call's latency and fate.
    fn draw(&self, write: bool) -> (Duration, Fate) {
        let mut state = self.state();
        state.counts.calls += 1;
        let State {
            rng,
            faults,
            counts,
            outage,
            ..
        } = &mut *state;
        let max = u64::try_from(faults.max_latency.as_micros()).unwrap_or(u64::MAX);
        let latency = Duration::from_micros(if max == 0 { 0 } else { rng.next_u64() % (max + 1) });
        let later = |rng: &mut ChaCha20Rng| {
            let most = u64::try_from(faults.late_by.as_micros()).unwrap_or(u64::MAX).max(1);
            Duration::from_micros(1 + rng.next_u64() % most)
        };
        // A call an outage fails never reaches the store.
        let (rate, may_land) = match *outage {
            Some((until, rate)) if until > Instant::now() => (rate, false),
            _ => (faults.error_rate, true),
        };
        if !chance(rng, rate) {
            if write && may_land && chance(rng, faults.duplicate_rate) {
                counts.duplicates += 1;
                return (latency, Fate::Twice(later(rng)));
            }
            return (latency, Fate::Done);
        }
        counts.failed += 1;
        if write && may_land && chance(rng, faults.lost_reply_rate) {
            counts.lost_replies += 1;
            if chance(rng, faults.late_rate) {
                counts.late_landings += 1;
                return (latency, Fate::Late(later(rng)));
            }
            return (latency, Fate::Lost);
        }
        (latency, Fate::Failed)
    }

    /// Carries `call` out as `host` reaches the store now.
    async fn carry<R: Send + 'static>(
        &self,
        host: usize,
        write: bool,
        what: &str,
        key: &Path,
        call: Call<R>,
    ) -> Result<R> {
        self.reachable(host, key).await;
        let (latency, fate) = self.draw(write);
        tracing::trace!(host, what, %key, ?latency, ?fate, "store call");
        tokio::time::sleep(latency).await;
        let land_later = |after: Duration| {
            let call = call.clone();
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                let _ = call().await;
            });
        };
        let result = match fate {
            Fate::Failed => Err(injected(what, key)),
            Fate::Done => call().await,
            Fate::Lost => call().await.and(Err(injected(what, key))),
            Fate::Late(after) => {
                land_later(after);
                Err(injected(what, key))
            }
            Fate::Twice(after) => {
                let answer = call().await;
                land_later(after);
                answer
            }
        };
        // A reply travels back to a host that may have been paused or cut
        // off meanwhile.
        self.reachable(host, key).await;
        result
    }

    /// Notes what landed at `key`, if it is a run's or marks an
    /// incarnation retired.
    fn landed(&self, host: usize, key: &Path, change: Change) {
        if !key.as_ref().contains("/runs/") && !key.as_ref().contains("/retired/") {
            return;
        }
        let at = Instant::now().duration_since(self.origin);
        self.state().history.push(Landed {
            at,
            host,
            key: key.to_string(),
            change,
        });
    }

    /// In `stale-reads` mode, whether a read of `key` answers absent, as
    /// read absent lately; notes a read that finds it absent.
    fn reads_absent(&self, key: &Path, found: bool) -> bool {
        let mut state = self.state();
        if state.faults.mode != StoreMode::StaleReads {
            return false;
        }
        let now = Instant::now();
        let stale = state.faults.stale;
        match state.read_absent.get(key) {
            Some(at) if now.duration_since(*at) <= stale => true,
            _ if !found => {
                state.read_absent.insert(key.clone(), now);
                false
            }
            _ => false,
        }
    }
}

impl Network {
    /// `fresh`, the listing of `what` as it stands, kept; or, drawn so, an
    /// answer that listing had within the staleness allowed.
    fn maybe_stale(&self, what: &str, fresh: Vec<Result<ObjectMeta>>) -> Vec<Result<ObjectMeta>> {
        let mut state = self.state();
        let now = Instant::now();
        let oldest = now.checked_sub(state.faults.stale).unwrap_or(now);
        let rate = state.faults.stale_rate;
        let stale = chance(&mut state.rng, rate);
        let history = state.listed.entry(what.to_owned()).or_default();
        while history.front().is_some_and(|(at, _)| *at < oldest) {
            history.pop_front();
        }
        let answer = match history.front() {
            Some((_, old)) if stale => Some(clone_listing(old)),
            _ => None,
        };
        history.push_back((now, clone_listing(&fresh)));
        if answer.is_some() {
            state.counts.stale_listings += 1;
        }
        answer.unwrap_or(fresh)
    }
}

fn clone_listing(listing: &[Result<ObjectMeta>]) -> Vec<Result<ObjectMeta>> {
    listing
        .iter()
        .map(|item| match item {
            Ok(meta) => Ok(meta.clone()),
            Err(e) => Err(injected("list", &Path::from(e.to_string()))),
        })
        .collect()
}

/// Whether a draw from `rng` falls within `rate` (0 to 1).
fn chance(rng: &mut ChaCha20Rng, rate: f64) -> bool {
    rate > 0.0 && (rng.next_u64() as f64 / u64::MAX as f64) < rate
}

fn injected(what: &str, key: &Path) -> object_store::Error {
    object_store::Error::Generic {
        store: "SimStore",
        source: format!("simulated fault: {what} {key} failed").into(),
    }
}

/// One host's way to the shared store.
#[derive(Clone)]
pub struct SimStore {
    network: Arc<Network>,
    host: usize,
}

impl fmt::Debug for SimStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimStore(host {})", self.host)
    }
}

impl fmt::Display for SimStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimStore(host {})", self.host)
    }
}

impl SimStore {
    /// A listing that passes through as one read call, stale sometimes if
    /// it lists the hosts' shared folder.
    fn listing(
        &self,
        prefix: Option<&Path>,
        offset: Option<&Path>,
        listing: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let (network, host) = (self.network.clone(), self.host);
        let key = prefix.cloned().unwrap_or_default();
        let shared = key.as_ref().starts_with(SHARED);
        let what = format!("{key} after {}", offset.map_or("", Path::as_ref));
        let listing = Arc::new(Mutex::new(Some(listing)));
        futures::stream::once(async move {
            let answering = network.clone();
            let collect: Call<Listing> = Arc::new(move || {
                let (answering, what) = (answering.clone(), what.clone());
                let listing = listing.lock().unwrap_or_else(|p| p.into_inner()).take();
                async move {
                    let fresh = match listing {
                        Some(listing) => listing.collect::<Listing>().await,
                        None => Vec::new(),
                    };
                    Ok(if shared {
                        answering.maybe_stale(&what, fresh)
                    } else {
                        fresh
                    })
                }
                .boxed()
            });
            match network.carry(host, false, "list", &key, collect).await {
                Ok(metas) => futures::stream::iter(metas).boxed(),
                Err(e) => futures::stream::iter([Err(e)]).boxed(),
            }
        })
        .flatten()
        .boxed()
    }

    /// A create-only put as a non-atomic store makes it: a check, a while,
    /// then an overwrite; writers checking within that while all create.
    async fn create_after_a_check(
        network: &Network,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        if network.store.head(location).await.is_ok() {
            return Err(object_store::Error::AlreadyExists {
                path: location.to_string(),
                source: "the key is taken".into(),
            });
        }
        let busy = network.state().faults.max_latency + Duration::from_micros(1);
        tokio::time::sleep(busy).await;
        let opts = PutOptions {
            mode: PutMode::Overwrite,
            ..opts
        };
        network.store.put_opts(location, payload, opts).await
    }
}

#[async_trait]
impl ObjectStore for SimStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        let (network, host, at) = (self.network.clone(), self.host, location.clone());
        let put: Call<PutResult> = Arc::new(move || {
            let (network, at, payload, opts) = (network.clone(), at.clone(), payload.clone(), opts.clone());
            async move {
                let create = matches!(opts.mode, PutMode::Create);
                let bytes: Bytes = payload
                    .iter()
                    .flat_map(|chunk| chunk.iter().copied())
                    .collect::<Vec<u8>>()
                    .into();
                let mode = network.state().faults.mode;
                let put = match (create, mode) {
                    (true, StoreMode::NonAtomic) => SimStore::create_after_a_check(&network, &at, payload, opts).await,
                    _ => network.store.put_opts(&at, payload, opts).await,
                };
                if put.is_ok() {
                    let change = match create {
                        true => Change::Created(bytes),
                        false => Change::Overwritten,
                    };
                    network.landed(host, &at, change);
                }
                put
            }
            .boxed()
        });
        let mut put = self.network.carry(self.host, true, "put", location, put).await?;
        put.e_tag = put.e_tag.map(quoted);
        Ok(put)
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.network.reachable(self.host, location).await;
        self.network.store.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let (network, at) = (self.network.clone(), location.clone());
        let get: Call<GetResult> = Arc::new(move || {
            let (network, at, options) = (network.clone(), at.clone(), options.clone());
            async move {
                let got = network.store.get_opts(&at, options).await;
                if network.reads_absent(&at, got.is_ok()) {
                    return Err(object_store::Error::NotFound {
                        path: at.to_string(),
                        source: "read absent lately (negative caching)".into(),
                    });
                }
                got
            }
            .boxed()
        });
        let mut get = self.network.carry(self.host, false, "get", location, get).await?;
        get.meta.e_tag = get.meta.e_tag.map(quoted);
        Ok(get)
    }

    fn delete_stream(&self, locations: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        let (network, host) = (self.network.clone(), self.host);
        locations
            .then(move |location| {
                let network = network.clone();
                async move {
                    let location = location?;
                    let delete: Call<Path> = {
                        let (network, location) = (network.clone(), location.clone());
                        Arc::new(move || {
                            let (network, location) = (network.clone(), location.clone());
                            async move {
                                let held = network.store.get(&location).await;
                                let held = match held {
                                    Ok(got) => got.bytes().await.ok(),
                                    Err(_) => None,
                                };
                                let mut gone = network
                                    .store
                                    .delete_stream(futures::stream::iter([Ok(location.clone())]).boxed());
                                let gone = gone.next().await.unwrap_or(Ok(location.clone()));
                                if gone.is_ok() {
                                    network.landed(host, &location, Change::Deleted(held));
                                }
                                gone
                            }
                            .boxed()
                        })
                    };
                    network.carry(host, true, "delete", &location, delete).await
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.listing(prefix, None, self.network.store.list(prefix))
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        self.listing(
            prefix,
            Some(offset),
            self.network.store.list_with_offset(prefix, offset),
        )
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let key = prefix.cloned().unwrap_or_default();
        let (network, listed) = (self.network.clone(), prefix.cloned());
        let list: Call<ListResult> = Arc::new(move || {
            let (network, listed) = (network.clone(), listed.clone());
            async move { network.store.list_with_delimiter(listed.as_ref()).await }.boxed()
        });
        self.network.carry(self.host, false, "list", &key, list).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let (network, from, to_key) = (self.network.clone(), from.clone(), to.clone());
        let copy: Call<()> = Arc::new(move || {
            let (network, from, to, options) = (network.clone(), from.clone(), to_key.clone(), options.clone());
            async move { network.store.copy_opts(&from, &to, options).await }.boxed()
        });
        self.network.carry(self.host, true, "copy to", to, copy).await
    }
}

/// An ETag as Azure answers a write or a read with it.
fn quoted(e_tag: String) -> String {
    format!("\"{e_tag}\"")
}
