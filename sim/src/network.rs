//! The store as the simulated hosts reach it: one in-memory store behind a
//! seeded generator that delays each host's calls, fails some, loses the
//! reply of some writes after they landed, answers some listings of the
//! hosts' shared folder (`cluster/`: heartbeats, wake-ups) as they stood a
//! while ago, as an eventually consistent store would, and cuts a host off
//! (dead: its calls never return) or holds its calls (paused: they return
//! once it runs again), or holds only its calls to `cluster/` for a while
//! (partitioned from the other hosts, not from its runs), or fails every
//! call of every host for a while (an outage, outlasting the retries of
//! the store layer). Listings of a run's own records are answered as they
//! stand: the journal relies on listing what was written (S3, GCS,
//! Azure and SeaweedFS list so). Versions are written as Azure writes
//! them: an ETag quoted in a write's or a read's answer, bare in a
//! listing, so a host comparing them as given would find a heartbeat
//! changed on every look.
//!
//! Invariants: every decision is drawn from the one generator, in the
//! order the calls are made, and every wait is on tokio's paused clock, so
//! one seed makes the same calls fail and wait the same way every time. A
//! dead host reaches nothing again; a paused host's calls, and the replies
//! of calls it made before, wait until its pause ends.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chacha20::ChaCha20Rng;
use chacha20::rand_core::{Rng, SeedableRng};
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, Result,
};
use tokio::time::Instant;

/// How the store behaves toward every host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreFaults {
    /// Each call waits up to this long, uniformly.
    pub max_latency: Duration,
    /// The share of calls that fail, from 0 to 1.
    pub error_rate: f64,
    /// The share of failed writes that landed first (their reply lost).
    pub lost_reply_rate: f64,
    /// How old a stale listing of `cluster/` may be, and the share of such
    /// listings answered stale.
    pub stale: Duration,
    pub stale_rate: f64,
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
    pub stale_listings: u64,
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
}

/// The store every simulated host shares.
pub struct Network {
    store: Arc<InMemory>,
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
}

impl Network {
    pub fn new(seed: u64, faults: StoreFaults) -> Arc<Self> {
        Arc::new(Self {
            store: Arc::new(InMemory::new()),
            state: Mutex::new(State {
                rng: ChaCha20Rng::seed_from_u64(seed),
                faults,
                hosts: Vec::new(),
                partitioned: Vec::new(),
                counts: StoreCounts::default(),
                outage: None,
                listed: HashMap::new(),
            }),
        })
    }

    /// The store as the checks read it: no delay, no fault.
    pub fn store(&self) -> Arc<InMemory> {
        self.store.clone()
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
        // A call an outage fails never reaches the store.
        let (rate, may_land) = match *outage {
            Some((until, rate)) if until > Instant::now() => (rate, false),
            _ => (faults.error_rate, true),
        };
        if !chance(rng, rate) {
            return (latency, Fate::Done);
        }
        counts.failed += 1;
        if write && may_land && chance(rng, faults.lost_reply_rate) {
            counts.lost_replies += 1;
            return (latency, Fate::Lost);
        }
        (latency, Fate::Failed)
    }

    /// Carries `call` out as `host` reaches the store now.
    async fn carry<R>(
        &self,
        host: usize,
        write: bool,
        what: &str,
        key: &Path,
        call: impl Future<Output = Result<R>>,
    ) -> Result<R> {
        self.reachable(host, key).await;
        let (latency, fate) = self.draw(write);
        tracing::trace!(host, what, %key, ?latency, ?fate, "store call");
        tokio::time::sleep(latency).await;
        let result = match fate {
            Fate::Failed => Err(injected(what, key)),
            Fate::Done => call.await,
            Fate::Lost => call.await.and(Err(injected(what, key))),
        };
        // A reply travels back to a host that may have been paused or cut
        // off meanwhile.
        self.reachable(host, key).await;
        result
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
        futures::stream::once(async move {
            let answering = network.clone();
            let collected = async move {
                let fresh = listing.collect::<Vec<Result<ObjectMeta>>>().await;
                Ok(if shared {
                    answering.maybe_stale(&what, fresh)
                } else {
                    fresh
                })
            };
            let carried = network.carry(host, false, "list", &key, collected).await;
            match carried {
                Ok(metas) => futures::stream::iter(metas).boxed(),
                Err(e) => futures::stream::iter([Err(e)]).boxed(),
            }
        })
        .flatten()
        .boxed()
    }
}

#[async_trait]
impl ObjectStore for SimStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        let put = self.network.store.put_opts(location, payload, opts);
        let mut put = self.network.carry(self.host, true, "put", location, put).await?;
        put.e_tag = put.e_tag.map(quoted);
        Ok(put)
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        let start = self.network.store.put_multipart_opts(location, opts);
        self.network
            .carry(self.host, true, "multipart put", location, start)
            .await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let get = self.network.store.get_opts(location, options);
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
                    let store = network.store.clone();
                    let delete = async {
                        let mut gone = store.delete_stream(futures::stream::iter([Ok(location.clone())]).boxed());
                        gone.next().await.unwrap_or(Ok(location.clone()))
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
        let list = self.network.store.list_with_delimiter(prefix);
        self.network.carry(self.host, false, "list", &key, list).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let copy = self.network.store.copy_opts(from, to, options);
        self.network.carry(self.host, true, "copy to", to, copy).await
    }
}

/// An ETag as Azure answers a write or a read with it.
fn quoted(e_tag: String) -> String {
    format!("\"{e_tag}\"")
}
