//! One seed of the simulation: hosts started on the shared store, a plan of
//! runs, faults and operators' controls (pause and resume, advance,
//! restart from a seq) drawn from the seed and played on virtual time, then
//! the checks.
//!
//! What is simulated rather than run for real, and why it stays
//! deterministic: the hosts are real `Runtime`s with the real workflow
//! guest (`bench`), on one current-thread tokio runtime whose clock is
//! paused (every sleep, timeout, lease and retry runs on virtual time, and
//! tasks run in the order they are woken); the host's clock reads
//! (`now_ms`, the boot clock of leases) follow that time; retry jitter
//! draws from this thread's seeded generator; steps are stand-ins whose
//! timing depends on the call alone (see `steps`); the store is `network`.
//! Guests run untimed (`HostConfig::untimed_guests`): wasmtime's epoch
//! thread, which ticks on the wall clock, would make a workflow yield at
//! a moment no seed decides; its fuel still bounds it.
//! A killed host cannot be made to stop its tasks, so it is cut off from
//! the store for good instead: it writes nothing more, and its steps
//! start nothing more, as a dead process's would. A paused host's store
//! calls wait until it runs again, which is where a paused process's work
//! would stop too. A partitioned host reaches its runs' records but not
//! the hosts' shared folder. Each host's lease clock drifts by its own
//! rate, drawn from the seed (`clock::LeaseClock`). A suspend of the
//! machine is played as a pause: leases are read on the boot clock, which
//! counts a suspend as it counts a pause, so nothing a host decides tells
//! the two apart. A pause stops a host's store calls, not the timers of
//! its steps' stand-ins; a host stopped between its fence's read and its
//! attempt is played by a stall at that seam (below), and one stopped
//! inside an attempt on real processes (`tests/cluster.rs`: an owner
//! SIGSTOPped inside an attempt). Components are loaded
//! on a thread of their own while the world stands still: the code cache
//! is read on wall-clock threads. The first seed of a batch, and every
//! failing one, is played twice, and its traces compared, to show a seed
//! plays one way.
//!
//! Each host's calls run for its process (`stepstone::task::Process`):
//! its wall clock reads its own offset, hours from the others' if the
//! faults say so, and the seams of the protocol (between a check and its
//! act) may stall it there, as a pause of a real process could land
//! there. A client's call through a host gives up after
//! [`CLIENT_TIMEOUT`] and is made again through another, as an HTTP client
//! would; the call given up is dropped, as a server drops a request whose
//! client went. Before any host starts, the store is probed as a host's
//! start probes it (`Storage::check`): a store of a mode no host may run
//! on must be refused there. The checks run once every stall has ended,
//! and the hosts ran on a while after, so what a stalled host does when it
//! comes back is judged too.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use chacha20::ChaCha20Rng;
use chacha20::rand_core::{Rng, SeedableRng};
use futures::FutureExt;
use sha2::{Digest, Sha256};
use stepstone::clock::VirtualTime;
use stepstone::cluster::{HostId, LiveError};
use stepstone::component::{CodeCache, Loaded};
use stepstone::config::{HostConfig, WaitPolicy};
use stepstone::journal::{ConcurrencyLimit, NotedRun, RunRecord, RunRecords, is_listed, noted_ended};
use stepstone::policy::TenantPolicy;
use stepstone::runtime::{AttemptUnderWay, Restart, RunError, Runtime, Submission};
use stepstone::store::{
    ConcurrencyKey, Probes, RunId, SignalId, SignalName, Storage, StoreError, TenantId, TenantStore,
};
use stepstone::task::{Process, Seam, SeamHook};
use tokio::time::Instant;

use crate::check;
use crate::faults::{FaultCounts, HostFault, SimConfig, stall_length};
use crate::history::{self, Ended};
use crate::network::{Network, Reach, StoreCounts};
use crate::steps::{HostSteps, Service};

/// Where virtual time starts: a fixed moment, the same for every seed.
const START_MS: u64 = 1_800_000_000_000;

/// How long a tenant keeps its finished runs in the simulation: short, so
/// retention sweeps while children and generations are still awaited.
const RETENTION: Duration = Duration::from_secs(20);

/// How long a client waits for a host's answer before it asks another.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the hosts run on once every stall has ended, before the checks.
const AFTER_THE_LAST_STALL: Duration = Duration::from_secs(60);

/// The chance that a host passing a seam stalls there, in thousandths, while
/// the seed's stalls at seams last: the seams passed at every call, and the
/// rarer ones (a deletion claim, a submission's note).
const SEAM_STALL_PERMILLE: [(Seam, u64); 4] = [
    (Seam::AfterFenceRead, 2),
    (Seam::AfterClaimCheck, 1),
    (Seam::BetweenDeletionClaimAndListing, 60),
    (Seam::BetweenLedgerNoteAndRecord, 60),
];

/// A planned run: its id, workflow, input, the signal it is sent if it
/// awaits one, its concurrency key (limit 1), and what it must end with.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    pub id: RunId,
    pub workflow: &'static str,
    pub n: u32,
    /// How long each leg of a relay sleeps, in seconds.
    pub nap_s: u64,
    pub go: Option<u32>,
    pub key: Option<ConcurrencyKey>,
    pub expected: String,
    /// The durable calls its journal holds at its end; `None` for a
    /// relay, whose journal is spread over its generations.
    pub calls: Option<u64>,
    /// Which submission of the id this is: 0 for the first, more for a
    /// run submitted again under the id once retention deleted it.
    pub again: u32,
}

impl PlannedRun {
    /// What the checks know this run by.
    pub fn key(&self) -> RunKey {
        (self.id.clone(), self.again)
    }

    /// Its input, as submitted.
    fn input(&self) -> String {
        format!("{{\"n\":{},\"nap_s\":{}}}", self.n, self.nap_s)
    }
}

/// A run as the checks know it: its id, and which submission of it.
pub type RunKey = (RunId, u32);

/// What one seed came to.
#[derive(Debug, Clone, Default)]
pub struct SeedReport {
    pub seed: u64,
    /// Each invariant broken, named, with what broke it.
    pub violations: Vec<String>,
    /// Virtual seconds each host ran, summed.
    pub host_seconds: f64,
    pub faults: FaultCounts,
    pub store: StoreCounts,
    /// A digest of what happened, in order: the same seed gives the same.
    pub trace: String,
    /// The events, readable, for the first violation's report.
    pub events: Vec<String>,
    /// The store's mode was refused by the hosts' probe (the seed ran
    /// nothing else).
    pub refused: bool,
}

/// A host of the simulation.
struct SimHost {
    id: HostId,
    /// Its process: its index, and its wall clock's offset.
    process: Process,
    /// `None` once it was killed.
    runtime: Option<Runtime>,
    /// The workflow guest, loaded on this host.
    bench: Arc<Loaded>,
    started: Instant,
    stopped: Option<Instant>,
}

/// What is played, in order of time.
#[derive(Debug, Clone)]
enum Event {
    Submit {
        run: usize,
        host: usize,
    },
    /// The run's `go` signal, sent through a host that may not drive it.
    Signal {
        run: usize,
        host: usize,
    },
    Fault {
        host: usize,
        fault: HostFault,
    },
    /// An operator pauses the run through a host, stopping its step
    /// attempt under way or not; it is resumed later.
    Pause {
        run: usize,
        host: usize,
        under_way: AttemptUnderWay,
    },
    Resume {
        run: usize,
        host: usize,
    },
    /// An operator ends the run's current durable sleep now.
    Advance {
        run: usize,
        host: usize,
    },
    /// An operator restarts the run from `seq` (or as far as its journal
    /// holds calls in a row), keeping it going: the new run must end as it
    /// would have, executing none of the calls it kept.
    Restart {
        run: usize,
        host: usize,
        seq: u64,
    },
    /// A client submits the run's id again with another input, as a run of
    /// its own, once (or while) retention deletes the first: refused while
    /// that one stands or is being deleted, it tries again a while later.
    Resubmit {
        run: usize,
        host: usize,
    },
}

/// What a call through a host answered, and through which host.
struct Answered<T> {
    host: usize,
    answer: Result<T, RunError>,
    /// Whether an earlier try failed on the store (its reply may have
    /// been lost after it took effect).
    retried: bool,
}

/// A run an operator restarted, as the checks know it: planned as the
/// run it restarts, under its own id, and the first seq it executed.
#[derive(Debug, Clone)]
pub struct RestartedRun {
    pub run: PlannedRun,
    pub kept: u64,
}

/// Runs one seed on a runtime of its own, on virtual time.
pub fn run_seed(config: &SimConfig, guest: &Bytes, cache: &CodeCache, seed: u64) -> anyhow::Result<SeedReport> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    let report = runtime.block_on(simulate(config, guest, cache, seed));
    // The hosts' tasks (a killed host's, blocked for good) go with it.
    runtime.shutdown_background();
    report
}

async fn simulate(config: &SimConfig, guest: &Bytes, cache: &CodeCache, seed: u64) -> anyhow::Result<SeedReport> {
    let _time = VirtualTime::start(START_MS);
    fastrand::seed(seed);
    let mut rng = ChaCha20Rng::seed_from_u64(seed.rotate_left(17) ^ 0x5eed_5eed);
    let network = Network::new(seed, config.store, Instant::now());
    let service = Service::new();
    let tenant = TenantId::default_tenant();
    let stalls = Arc::new(Mutex::new(Stalls {
        origin: Instant::now(),
        before_attempts: BTreeSet::new(),
        rng: ChaCha20Rng::seed_from_u64(seed.rotate_left(29) ^ 0x5ea5),
        left: config.faults.seams,
        network: network.clone(),
        ttl: config.ttl,
        events: Vec::new(),
        until: Instant::now(),
        counts: FaultCounts::default(),
    }));
    stepstone::task::stall_at_seams(Some(seam_hook(stalls.clone())));
    let mut world = World {
        config,
        guest,
        cache,
        network: network.clone(),
        service: service.clone(),
        tenant: tenant.clone(),
        hosts: Vec::new(),
        events: Vec::new(),
        faults: FaultCounts::default(),
        restarted: Vec::new(),
        restarts_watched: Vec::new(),
        resubmitted: Vec::new(),
        created: Arc::default(),
        stalls: stalls.clone(),
        until: Instant::now(),
        seed,
    };
    for _ in 0..config.hosts {
        if let Err(e) = world.start_host(None).await {
            stepstone::task::stall_at_seams(None);
            return refused(e, config, seed);
        }
    }
    if config.store.mode.is_refused() {
        stepstone::task::stall_at_seams(None);
        let mode = config.store.mode;
        return Ok(SeedReport {
            seed,
            violations: vec![format!(
                "probe: the hosts' probe took a {mode} store, on which no host may run"
            )],
            ..SeedReport::default()
        });
    }
    let (runs, plan) = draw_plan(&mut rng, config);
    let origin = Instant::now();
    let until = origin + config.span + config.until;
    world.until = until;
    let watcher = tokio::spawn(watch_ends(
        network.clone(),
        tenant.clone(),
        runs.clone(),
        until,
        world.created.clone(),
    ));
    let mut plan = std::collections::VecDeque::from(plan);
    while let Some((at, event)) = plan.pop_front() {
        tokio::time::sleep_until(origin + at).await;
        if let Some(later) = world.play(&runs, event).await? {
            let at = Instant::now().duration_since(origin) + later.0;
            let place = plan.iter().position(|(next, _)| *next > at).unwrap_or(plan.len());
            plan.insert(place, (at, later.1));
        }
    }
    let watched = watcher.await?;
    world.events.extend(watched.events);
    let (mut unlisted, mut noted) = (watched.unlisted, watched.noted);
    // What a stalled host does once it comes back is judged too; a stall
    // that begins in the time after the last one pushes the checks back
    // again (seed 255: a host stalled again 3 s after its first stall ended
    // was checked while stalled, its runs taken for undriven).
    loop {
        let stalled_until = lock(&stalls).until;
        tokio::time::sleep_until(stalled_until.max(Instant::now()) + AFTER_THE_LAST_STALL).await;
        if lock(&stalls).until <= stalled_until {
            break;
        }
    }
    for restart_watcher in std::mem::take(&mut world.restarts_watched) {
        let watched = restart_watcher.await?;
        world.events.extend(watched.events);
        unlisted.extend(watched.unlisted);
        noted.extend(watched.noted);
    }
    let store = Storage::new(network.store()).tenant(&tenant);
    unlisted.extend(listed_after_deletion(&store, &noted).await);
    let mut report = SeedReport {
        seed,
        faults: world.faults,
        store: network.counts(),
        ..SeedReport::default()
    };
    let end = Instant::now();
    report.host_seconds = world
        .hosts
        .iter()
        .map(|host| host.stopped.unwrap_or(end).duration_since(host.started).as_secs_f64())
        .sum();
    let every_run: Vec<PlannedRun> = runs
        .iter()
        .cloned()
        .chain(world.restarted.iter().map(|r| r.run.clone()))
        .chain(world.resubmitted.iter().cloned())
        .collect();
    let mut history = history::Runs::default();
    history.absorb(&network.history());
    let created = lock(&world.created).clone();
    let ended: BTreeMap<RunKey, Ended> = (every_run.iter())
        .filter_map(|run| {
            let record = created.get(&run.key())?;
            Some((run.key(), history.ended(&run.id, record.created_at_ms)?))
        })
        .collect();
    let incarnations = created
        .iter()
        .map(|(key, record)| (key.clone(), record.incarnation))
        .collect();
    let driven = world.still_driven(&every_run, &ended, &created, &history);
    let in_flight = lock(&stalls).before_attempts.clone();
    let checked = check::Checked {
        runs: &every_run,
        restarted: &world.restarted,
        ended: &ended,
        driven: &driven,
        unlisted: &unlisted,
        started: service.started(),
        in_flight: &in_flight,
        history: &history,
        incarnations: &incarnations,
    };
    report.violations = checked.violations();
    {
        let mut stalls = lock(&stalls);
        report.faults += std::mem::take(&mut stalls.counts);
        world.events.append(&mut stalls.events);
    }
    stepstone::task::stall_at_seams(None);
    world.events.extend(service.started().iter().map(|s| {
        format!(
            "{:>9.3}s host {} started {} seq {} attempt {} token {}{}",
            s.at.as_secs_f64(),
            s.host,
            s.run,
            s.seq,
            s.attempt,
            s.fencing_token,
            if s.fenced { " (fenced)" } else { "" }
        )
    }));
    report.trace = digest(&world.events, &ended);
    report.events = world.events;
    Ok(report)
}

struct World<'a> {
    config: &'a SimConfig,
    guest: &'a Bytes,
    cache: &'a CodeCache,
    network: Arc<Network>,
    service: Arc<Service>,
    tenant: TenantId,
    hosts: Vec<SimHost>,
    events: Vec<String>,
    faults: FaultCounts,
    restarted: Vec<RestartedRun>,
    /// Each restarted or resubmitted run's watcher, started as it was, to
    /// see it end before retention deletes it.
    restarts_watched: Vec<tokio::task::JoinHandle<Watched>>,
    /// The runs submitted again under an id retention deleted a run of.
    resubmitted: Vec<PlannedRun>,
    /// The record each run was created with, read as it was submitted:
    /// which creation of its id is that run.
    created: Arc<Mutex<BTreeMap<RunKey, RunRecord>>>,
    /// The stalls at seams, shared with the hook that makes them.
    stalls: Arc<Mutex<Stalls>>,
    /// When the watchers give up.
    until: Instant,
    seed: u64,
}

impl World<'_> {
    fn log(&mut self, what: String) {
        self.events.push(at_now(what));
    }

    /// Starts a host (named `id`, or fresh) as `serve` does: joined, its
    /// tenants' unfinished runs recovered, ready to take over the dead's.
    async fn start_host(&mut self, id: Option<HostId>) -> anyhow::Result<usize> {
        let (store, index) = self.network.join();
        let id = match id {
            Some(id) => id,
            None => HostId::try_from(format!("sim.{}.s{}h{index}", index + 1, self.seed))?,
        };
        let process = Process {
            id: index as u64,
            wall_offset_ms: self.offset_of(index),
        };
        let mut config = HostConfig::new();
        config.pooling = false;
        config.untimed_guests = true;
        config.lease.ttl = self.config.ttl;
        let drift = self.drift_of(index);
        config.lease.clock_drift_permille = drift;
        config.wait = WaitPolicy::serving();
        config.host_id = Some(id.clone());
        let steps = HostSteps {
            host: index,
            service: self.service.clone(),
            tenant: self.tenant.clone(),
        };
        let storage = Storage::new(Arc::new(store));
        self.probe(&storage, process).await?;
        let runtime = Runtime::with_step_stand_in(config, storage, self.cache.clone(), Arc::new(steps))?;
        let bench = load_while_the_world_stands_still(&runtime, &self.tenant, self.guest)?;
        let started = Instant::now();
        if !self.start_serving(&runtime, process).await? {
            self.network.set_reach(index, Reach::Down);
            self.hosts.push(SimHost {
                id,
                process,
                runtime: None,
                bench,
                started,
                stopped: Some(Instant::now()),
            });
            return Ok(index);
        }
        let policy = TenantPolicy {
            retention: Some(RETENTION),
            ..(*runtime.policy(&self.tenant)).clone()
        };
        runtime.set_policy(&self.tenant, policy);
        process.scope(async { runtime.retention().sweep_forever() }).await;
        self.hosts.push(SimHost {
            id: id.clone(),
            process,
            runtime: Some(runtime),
            bench,
            started,
            stopped: None,
        });
        self.log(format!(
            "host {index} started as {id}, its clock {drift:+}‰, its wall clock {:+} ms",
            process.wall_offset_ms
        ));
        Ok(index)
    }

    /// Probes the store as `serve` does (`Storage::check`, thoroughly); a probe
    /// the store fails (an injected fault outlasting the store layer's
    /// retries) is made again a second later, as a supervisor would start
    /// the host again. [`Refused`] if the store is found unsuitable.
    async fn probe(&mut self, storage: &Storage, process: Process) -> anyhow::Result<()> {
        loop {
            match process.scope(storage.check(Probes::Thorough)).await {
                Ok(()) => return Ok(()),
                Err(StoreError::Unsuitable { reason, .. }) => return Err(Refused(reason).into()),
                // Its error names the probe's key, drawn afresh each play.
                Err(_) => {
                    self.log(
                        "a host's probe of the store failed (a fault outlasted the retries), made again in a second"
                            .into(),
                    );
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Joins the hosts and recovers the tenant's unfinished runs, as `serve`
    /// starts; a start the store fails (an outage) is tried again a second
    /// later, as a supervisor starts a server that exited again. `false`
    /// if the start was refused: another host runs under the id.
    async fn start_serving(&mut self, runtime: &Runtime, process: Process) -> anyhow::Result<bool> {
        // Served once: a second call adds no tenant, and so would recover
        // none (found by seeds 1300, 2112, 5718 and 6730 of the first
        // 10,000 with outages: a restart the store failed left the dead
        // host's runs to no one, as its id lived on).
        let tenants = runtime.serve_tenants([self.tenant.clone()]);
        loop {
            let started = async {
                runtime.runs().live().await?;
                for tenant in &tenants {
                    runtime.runs().recover(tenant).await?;
                }
                Ok::<(), RunError>(())
            };
            match process.scope(started).await {
                Ok(()) => break,
                Err(e) if e.is_storage_failure() => {
                    self.log(format!("a host's start failed, started again in a second: {e}"));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e @ RunError::NotLive(LiveError::IdInUse { .. })) => {
                    self.log(format!("a host's start was refused: {e}"));
                    return Ok(false);
                }
                Err(e) => return Err(e.into()),
            }
        }
        process
            .scope(async { runtime.runs().take_over_from_dead_hosts() })
            .await;
        Ok(true)
    }

    /// Host `index`'s wall clock offset, in milliseconds: drawn from the
    /// seed and the host alone, so a restart draws its own.
    fn offset_of(&self, index: usize) -> i64 {
        let most = i64::from(self.config.faults.offset_minutes) * 60_000;
        if most == 0 {
            return 0;
        }
        let hash = Sha256::new()
            .chain_update(b"wall clock")
            .chain_update(self.seed.to_le_bytes())
            .chain_update((index as u64).to_le_bytes())
            .finalize();
        let drawn = u64::from_le_bytes(hash[..8].try_into().expect("eight bytes")) % (2 * most as u64 + 1);
        drawn as i64 - most
    }

    /// Host `index`'s clock drift, in parts per thousand: drawn from the
    /// seed and the host alone, so a restart draws its own.
    fn drift_of(&self, index: usize) -> i32 {
        let most = u64::from(self.config.faults.drift_permille);
        if most == 0 {
            return 0;
        }
        let hash = Sha256::new()
            .chain_update(self.seed.to_le_bytes())
            .chain_update((index as u64).to_le_bytes())
            .finalize();
        let drawn = u64::from_le_bytes(hash[..8].try_into().expect("eight bytes")) % (2 * most + 1);
        i32::try_from(drawn).unwrap_or(0) - i32::try_from(most).unwrap_or(0)
    }

    /// Host `host` exits, as `serve` does once it stops driving runs
    /// (another process wrote its heartbeat).
    fn exit(&mut self, host: usize, why: &LiveError) {
        self.network.set_reach(host, Reach::Down);
        self.hosts[host].runtime = None;
        self.hosts[host].stopped = Some(Instant::now());
        self.log(format!("host {host} exited: {why}"));
    }

    /// A host running now, the one asked for or the next after it; while
    /// none is (all paused), the client waits, as a client retrying would.
    /// A host found stopped exits first.
    async fn running(&mut self, asked: usize) -> Option<usize> {
        for host in 0..self.hosts.len() {
            let stopped = self.hosts[host]
                .runtime
                .as_ref()
                .and_then(|runtime| *runtime.runs().stopped().borrow());
            if let Some(why) = stopped {
                let id = self.hosts[host].id.clone();
                self.exit(host, &LiveError::Stopped { host: id, why });
            }
        }
        let count = self.hosts.len();
        loop {
            let alive = (0..count).map(|offset| (asked + offset) % count);
            let mut alive = alive.filter(|&host| self.hosts[host].runtime.is_some()).peekable();
            alive.peek()?;
            if let Some(host) = alive.find(|&host| self.network.is_up(host)) {
                return Some(host);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Calls `op` through a running host (the one asked for, or the next),
    /// as a client would: again after a store failure, through another
    /// host after one that stopped. `None` when no host runs.
    async fn through_a_host<T, Fut>(
        &mut self,
        asked: usize,
        mut op: impl FnMut(Runtime, Arc<Loaded>) -> Fut,
    ) -> Option<Answered<T>>
    where
        Fut: std::future::Future<Output = Result<T, RunError>>,
    {
        let (mut retried, mut asked) = (false, asked);
        loop {
            let host = self.running(asked).await?;
            let runtime = self.hosts[host].runtime.clone().expect("a running host");
            let (bench, process) = (self.hosts[host].bench.clone(), self.hosts[host].process);
            loop {
                let answer = process.scope(op(runtime.clone(), bench.clone()));
                match tokio::time::timeout(CLIENT_TIMEOUT, answer).await {
                    // Given up on: asked again through the next host running
                    // then, as a client behind a balancer would.
                    Err(_) => {
                        (retried, asked) = (true, host + 1);
                        break;
                    }
                    Ok(Err(e)) if e.is_storage_failure() || matches!(e, RunError::Interrupted { .. }) => retried = true,
                    Ok(Err(RunError::NotLive(e))) => {
                        self.exit(host, &e);
                        break;
                    }
                    Ok(answer) => return Some(Answered { host, answer, retried }),
                }
            }
        }
    }

    /// Plays `event`; says what to play later, if anything, and when
    /// from now (a client trying again).
    async fn play(&mut self, runs: &[PlannedRun], event: Event) -> anyhow::Result<Option<(Duration, Event)>> {
        let tenant = self.tenant.clone();
        match event {
            Event::Submit { run, host } => {
                let planned = &runs[run];
                let input = planned.input();
                // A submission cut short by the store is the client's to
                // retry: the run id makes it idempotent.
                let answered = self
                    .through_a_host(host, |runtime, bench| {
                        let mut submission = Submission::new(bench, planned.workflow, &input);
                        submission.run_id = Some(planned.id.clone());
                        submission.concurrency = planned.key.clone().map(|key| ConcurrencyLimit { key, limit: 1 });
                        let tenant = tenant.clone();
                        async move {
                            let run = runtime.submit(&tenant, submission).await?;
                            runtime.runs().drive_in_background(&tenant, &run);
                            Ok(())
                        }
                    })
                    .await;
                let Some(Answered { host, answer, .. }) = answered else {
                    return Ok(None);
                };
                // Its id held by a sweep: its first submission stalled past
                // PHANTOM_AFTER and was given up, and is swept now. The
                // client submits it again later, as told.
                if let Err(e @ RunError::BeingDeleted { .. }) = &answer {
                    self.log(format!("host {host} did not start run {} yet: {e}", planned.id));
                    return Ok(Some((RESUBMIT_EVERY, Event::Submit { run, host })));
                }
                answer.map_err(|e| anyhow::anyhow!("run {} was refused: {e}", planned.id))?;
                self.note_created(planned).await;
                let key = planned
                    .key
                    .as_ref()
                    .map(|key| format!(" on key {key}"))
                    .unwrap_or_default();
                self.log(format!(
                    "host {host} started run {} ({} of {}{key})",
                    planned.id, planned.workflow, planned.n
                ));
            }
            Event::Signal { run, host } => {
                let planned = &runs[run];
                let payload = planned.go.unwrap_or_default().to_string();
                let name = SignalName::new("go")?;
                let id = SignalId::new(&format!("go-{}", planned.id))?;
                // Sent again after a store failure, as a client would: the
                // id makes it one signal.
                let answered = self
                    .through_a_host(host, |runtime, _| {
                        let (tenant, run, name, payload, id) = (
                            tenant.clone(),
                            planned.id.clone(),
                            name.clone(),
                            payload.clone(),
                            id.clone(),
                        );
                        async move {
                            (runtime.runs())
                                .signal_with_id(&tenant, &run, &name, &payload, Some(&id))
                                .await
                        }
                    })
                    .await;
                match answered {
                    None => {}
                    Some(Answered {
                        host, answer: Ok(()), ..
                    }) => self.log(format!("host {host} signalled run {}", planned.id)),
                    // A try whose reply was lost may have been taken, and
                    // the run ended, before the next, or even been deleted
                    // past its retention (seed 8889; a run lost instead
                    // never ends, which the checks find).
                    Some(Answered {
                        host,
                        answer: Err(RunError::Finished { .. } | RunError::UnknownRun { .. }),
                        retried: true,
                    }) => self.log(format!("host {host} signalled run {}", planned.id)),
                    Some(Answered { answer: Err(e), .. }) => {
                        anyhow::bail!("the signal of run {} was refused: {e}", planned.id)
                    }
                }
            }
            Event::Fault { host, fault } => self.inflict(host, fault).await?,
            Event::Pause { run, host, under_way } => {
                let id = runs[run].id.clone();
                let answered = self
                    .through_a_host(host, |runtime, _| {
                        let (tenant, id) = (tenant.clone(), id.clone());
                        async move {
                            runtime
                                .runs()
                                .pause(&tenant, &id, "paused by the simulation", under_way)
                                .await
                        }
                    })
                    .await;
                self.controlled("paused", &id, answered, |faults| faults.run_pauses += 1)?;
            }
            Event::Resume { run, host } => {
                let id = runs[run].id.clone();
                let answered = self
                    .through_a_host(host, |runtime, _| {
                        let (tenant, id) = (tenant.clone(), id.clone());
                        async move { runtime.runs().resume(&tenant, &id).await }
                    })
                    .await;
                self.controlled("resumed", &id, answered, |_| {})?;
            }
            Event::Advance { run, host } => {
                let id = runs[run].id.clone();
                let answered = self
                    .through_a_host(host, |runtime, _| {
                        let (tenant, id) = (tenant.clone(), id.clone());
                        async move { runtime.runs().advance(&tenant, &id).await.map(drop) }
                    })
                    .await;
                self.controlled("advanced", &id, answered, |faults| faults.advances += 1)?;
            }
            Event::Restart { run, host, seq } => self.restart(&runs[run], host, seq).await?,
            Event::Resubmit { run, host } => return self.resubmit(&runs[run], run, host).await,
        }
        Ok(None)
    }

    /// Of `runs` that have not ended, those a live host drives still (its
    /// latest generation executing, or waiting for its timer, signal or
    /// step): not lost, only later than the time allowed (a timer set on
    /// one host's wall clock fires on another's, hours apart).
    fn still_driven(
        &self,
        runs: &[PlannedRun],
        ended: &BTreeMap<RunKey, Ended>,
        created: &BTreeMap<RunKey, RunRecord>,
        history: &history::Runs,
    ) -> BTreeSet<RunKey> {
        let live: Vec<&Runtime> = (self.hosts.iter())
            .filter_map(|host| host.runtime.as_ref())
            .filter(|runtime| runtime.runs().stopped().borrow().is_none())
            .collect();
        (runs.iter())
            .filter(|run| !ended.contains_key(&run.key()))
            .filter(|run| {
                let latest = (created.get(&run.key()))
                    .and_then(|record| history.latest_generation(&run.id, record.created_at_ms));
                latest.is_some_and(|latest| live.iter().any(|runtime| runtime.runs().drives(&self.tenant, &latest)))
            })
            .map(PlannedRun::key)
            .collect()
    }

    /// Notes the record `planned` was created with, read from the store
    /// right after its creation was answered.
    async fn note_created(&mut self, planned: &PlannedRun) {
        let store = Storage::new(self.network.store()).tenant(&self.tenant);
        let stored = RunRecords::new(store, planned.id.clone()).stored_record().await;
        if let Ok(Some(record)) = stored {
            lock(&self.created).insert(planned.key(), record);
        }
    }

    /// Submits `original`'s id again with another input: a run of its own
    /// once retention deleted the first, refused before (the first stands,
    /// or its id is held): then tried again a while later, for a while.
    async fn resubmit(
        &mut self,
        original: &PlannedRun,
        run: usize,
        host: usize,
    ) -> anyhow::Result<Option<(Duration, Event)>> {
        let again = PlannedRun {
            n: original.n % 6 + 1,
            again: original.again + 1,
            key: None,
            ..original.clone()
        };
        let again = PlannedRun {
            expected: (0..again.n).sum::<u32>().to_string(),
            calls: Some(u64::from(again.n)),
            ..again
        };
        let tenant = self.tenant.clone();
        let input = again.input();
        let answered = self
            .through_a_host(host, |runtime, bench| {
                let mut submission = Submission::new(bench, again.workflow, &input);
                submission.run_id = Some(again.id.clone());
                let tenant = tenant.clone();
                async move {
                    let run = runtime.submit(&tenant, submission).await?;
                    runtime.runs().drive_in_background(&tenant, &run);
                    Ok(())
                }
            })
            .await;
        match answered {
            None => Ok(None),
            Some(Answered {
                host, answer: Ok(()), ..
            }) => {
                self.log(format!(
                    "host {host} started run {} again ({} of {})",
                    again.id, again.workflow, again.n
                ));
                self.watch_late(&again).await;
                self.resubmitted.push(again);
                self.faults.resubmissions += 1;
                Ok(None)
            }
            Some(Answered {
                host,
                answer: Err(e @ (RunError::InputMismatch { .. } | RunError::BeingDeleted { .. })),
                ..
            }) => {
                self.log(format!("host {host} did not start run {} again yet: {e}", again.id));
                let giving_up = Instant::now() + RESUBMIT_EVERY >= self.until - self.config.until / 2;
                Ok((!giving_up).then_some((RESUBMIT_EVERY, Event::Resubmit { run, host })))
            }
            Some(Answered { answer: Err(e), .. }) => anyhow::bail!("run {} could not be started again: {e}", again.id),
        }
    }

    /// Notes what an operator's control of run `id` came to: done
    /// (`count`ed), or refused as it may be (the run had ended, its
    /// records deleted since, or it had no wait to advance); any other
    /// refusal is the host's error.
    fn controlled<T>(
        &mut self,
        what: &str,
        id: &RunId,
        answered: Option<Answered<T>>,
        count: impl FnOnce(&mut FaultCounts),
    ) -> anyhow::Result<()> {
        match answered {
            None => {}
            Some(Answered {
                host, answer: Ok(_), ..
            }) => {
                count(&mut self.faults);
                self.log(format!("host {host} {what} run {id}"));
            }
            Some(Answered {
                host,
                answer: Err(e @ (RunError::Finished { .. } | RunError::UnknownRun { .. } | RunError::NotWaiting { .. })),
                ..
            }) => self.log(format!("host {host} not {what} run {id}: {e}")),
            Some(Answered { answer: Err(e), .. }) => anyhow::bail!("run {id} could not be {what}: {e}"),
        }
        Ok(())
    }

    /// Restarts `planned` from `seq`, or from as many calls as its journal
    /// holds in a row if fewer, as a new run kept beside it; one whose
    /// point is refused (inside a fan-out under way) is not restarted.
    async fn restart(&mut self, planned: &PlannedRun, host: usize, seq: u64) -> anyhow::Result<()> {
        let tenant = self.tenant.clone();
        let new_id = RunId::new(&format!("{}-re", planned.id))?;
        // The point is decided once: a try whose reply was lost may have
        // restarted the run there, and the run goes on meanwhile.
        let point = std::rc::Rc::new(std::cell::Cell::new(None));
        let answered = self
            .through_a_host(host, |runtime, _| {
                let (tenant, id, new_id, point) = (tenant.clone(), planned.id.clone(), new_id.clone(), point.clone());
                async move {
                    let seq = match point.get() {
                        Some(seq) => seq,
                        None => {
                            let entries = runtime.history(&tenant, &id).await?;
                            let in_a_row = entries
                                .iter()
                                .enumerate()
                                .take_while(|(index, entry)| entry.seq == *index as u64)
                                .count();
                            seq.min(in_a_row as u64)
                        }
                    };
                    point.set(Some(seq));
                    let restart = Restart {
                        seq,
                        run_id: Some(new_id),
                        keep_old: true,
                        ..Restart::default()
                    };
                    let restarted = runtime.runs().restart(&tenant, &id, restart).await?;
                    runtime.runs().drive_in_background(&tenant, &restarted.run_id);
                    Ok(restarted)
                }
            })
            .await;
        match answered {
            None => {}
            Some(Answered {
                host,
                answer: Ok(restarted),
                ..
            }) => {
                self.faults.run_restarts += 1;
                let kept = restarted.restarted_from.seq;
                self.log(format!(
                    "host {host} restarted run {} from seq {kept} as {new_id}",
                    planned.id
                ));
                let run = PlannedRun {
                    id: new_id,
                    ..planned.clone()
                };
                self.watch_late(&run).await;
                self.restarted.push(RestartedRun { run, kept });
            }
            Some(Answered {
                host,
                answer:
                    Err(
                        e @ (RunError::RestartRefused { .. }
                        | RunError::UnknownRun { .. }
                        | RunError::BeingDeleted { .. }),
                    ),
                ..
            }) => self.log(format!("host {host} did not restart run {}: {e}", planned.id)),
            Some(Answered { answer: Err(e), .. }) => anyhow::bail!("run {} could not be restarted: {e}", planned.id),
        }
        Ok(())
    }

    /// Notes `run`, created after the plan's runs (submitted again, or
    /// restarted), and watches for its end as the plan's runs are.
    async fn watch_late(&mut self, run: &PlannedRun) {
        self.note_created(run).await;
        let watcher = watch_ends(
            self.network.clone(),
            self.tenant.clone(),
            vec![run.clone()],
            self.until,
            self.created.clone(),
        );
        self.restarts_watched.push(tokio::spawn(watcher));
    }

    async fn inflict(&mut self, host: usize, fault: HostFault) -> anyhow::Result<()> {
        match fault {
            HostFault::Outage { ttls, rate } => {
                let lasts = self.config.ttl.mul_f64(ttls);
                self.network.outage(Instant::now() + lasts, rate);
                self.faults.outages += 1;
                self.log(format!("the store failed {rate} of the calls for {lasts:?}"));
            }
            // A host's fault strikes a host still running.
            _ if host >= self.hosts.len() || self.hosts[host].runtime.is_none() => {}
            HostFault::Pause(ttls) => {
                let lasts = self.config.ttl.mul_f64(ttls);
                self.network.pause(host, Instant::now() + lasts);
                self.faults.pauses += 1;
                self.log(format!("host {host} paused for {lasts:?}"));
            }
            HostFault::Partition(ttls) => {
                let lasts = self.config.ttl.mul_f64(ttls);
                self.network.partition(host, Instant::now() + lasts);
                self.faults.partitions += 1;
                self.log(format!("host {host} cut off from cluster/ for {lasts:?}"));
            }
            HostFault::Kill => {
                self.kill(host);
                self.log(format!("host {host} killed"));
            }
            HostFault::Restart { same_id } => {
                let id = same_id.then(|| self.hosts[host].id.clone());
                self.kill(host);
                self.faults.restarts += 1;
                let new = self.start_host(id).await?;
                self.log(format!("host {host} restarted as host {new}"));
            }
            HostFault::Clone => {
                let id = self.hosts[host].id.clone();
                self.faults.clones += 1;
                let clone = self.start_host(Some(id)).await?;
                self.log(format!("host {host} cloned: host {clone} started with its id"));
            }
            HostFault::Stall(lasts) => {
                let until = self
                    .network
                    .pause(host, Instant::now() + lasts)
                    .unwrap_or_else(Instant::now);
                self.faults.stalls += 1;
                let mut stalls = lock(&self.stalls);
                stalls.until = stalls.until.max(until);
                drop(stalls);
                self.log(format!("host {host} stalled for {lasts:?}"));
            }
        }
        Ok(())
    }

    fn kill(&mut self, host: usize) {
        self.network.set_reach(host, Reach::Down);
        self.hosts[host].runtime = None;
        self.hosts[host].stopped = Some(Instant::now());
        self.faults.kills += 1;
    }
}

/// How long a client waits before it submits a run's id again, refused.
const RESUBMIT_EVERY: Duration = Duration::from_secs(10);

/// Stalls a host at a seam lasts, in lease TTLs, unless it is long.
const SEAM_STALLS: [f64; 3] = [0.5, 1.2, 2.5];

/// The stalls at seams, drawn from a generator of their own as hosts pass
/// the seams, at most `left` more.
struct Stalls {
    /// When the seed began, as the service counts.
    origin: Instant,
    /// Each stall after a claim was checked, by host and when it ended:
    /// the attempt the host starts then was decided before the stall, in
    /// flight across it as an attempt of a paused process is.
    before_attempts: BTreeSet<(usize, Duration)>,
    rng: ChaCha20Rng,
    left: u32,
    network: Arc<Network>,
    ttl: Duration,
    events: Vec<String>,
    /// When the last stall of the seed ends.
    until: Instant,
    counts: FaultCounts,
}

impl Stalls {
    /// Whether `process`, passing `seam`, stalls there, and until when: a
    /// host stalled stops all it does, as a paused process would.
    fn at(&mut self, process: Process, seam: Seam) -> Option<Instant> {
        let permille = SEAM_STALL_PERMILLE
            .iter()
            .find(|(at, _)| *at == seam)
            .map_or(0, |(_, p)| *p);
        if self.left == 0 || self.rng.next_u64() % 1000 >= permille {
            return None;
        }
        let host = usize::try_from(process.id).ok()?;
        let long = self.rng.next_u64().is_multiple_of(4);
        let lasts = match long {
            true => stall_length(&mut self.rng),
            false => self
                .ttl
                .mul_f64(SEAM_STALLS[(self.rng.next_u64() % SEAM_STALLS.len() as u64) as usize]),
        };
        let until = self.network.pause(host, Instant::now() + lasts)?;
        if seam == Seam::AfterClaimCheck {
            self.before_attempts.insert((host, until.duration_since(self.origin)));
        }
        self.left -= 1;
        self.counts.seam_stalls += 1;
        self.counts.stalls += u64::from(long);
        self.until = self.until.max(until);
        self.events
            .push(at_now(format!("host {host} stalled at {seam:?} for {lasts:?}")));
        Some(until)
    }
}

/// What passing a seam does to a host of this seed (see [`Stalls`]).
fn seam_hook(stalls: Arc<Mutex<Stalls>>) -> SeamHook {
    Arc::new(move |process, seam| {
        let until = lock(&stalls).at(process, seam);
        async move {
            if let Some(until) = until {
                tokio::time::sleep_until(until).await;
            }
        }
        .boxed()
    })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A host's start refused the store: its probe (`Storage::check`) found
/// it does not do what the engine stands on.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refused(String);

/// What a host's start failing with `error` makes of the seed: a store of
/// a mode no host may run on refused, as it must be (the seed ends there);
/// anything else the host's error.
fn refused(error: anyhow::Error, config: &SimConfig, seed: u64) -> anyhow::Result<SeedReport> {
    let mode = config.store.mode;
    match error.downcast::<Refused>() {
        Ok(Refused(_)) if mode.is_refused() => Ok(SeedReport {
            seed,
            refused: true,
            events: vec![format!("the hosts' probe refused the {mode} store")],
            ..SeedReport::default()
        }),
        Ok(Refused(reason)) => anyhow::bail!("the hosts refused a {mode} store: {reason}"),
        Err(error) => Err(error),
    }
}

/// Loads the guest on `runtime` on a thread of its own, this one waiting,
/// every role compiled and kept for `tenant`: loading reads the code cache
/// on wall-clock threads, and were the other hosts' tasks to run
/// meanwhile, when it ended would decide what they did first, so a seed
/// could play two ways. (Validating alone left the workflow's compilation
/// to its first run, and its load to the host's first signal or takeover:
/// first seeds played two ways under load.)
fn load_while_the_world_stands_still(
    runtime: &Runtime,
    tenant: &TenantId,
    guest: &Bytes,
) -> anyhow::Result<Arc<Loaded>> {
    std::thread::scope(|scope| {
        let loading = scope.spawn(|| -> anyhow::Result<Arc<Loaded>> {
            let own = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            own.block_on(async {
                let loaded = runtime.validate("bench", guest.clone()).await?;
                runtime.catalog().preload(tenant, &loaded).await?;
                Ok(loaded)
            })
        });
        loading
            .join()
            .map_err(|_| anyhow::anyhow!("loading the guest panicked"))?
    })
}

/// Watches every run until it has ended (by the store's history: see
/// [`history`]), following a chain to its last generation, or the time
/// allowed ran out; as each ends, whether a listing finds it (retention
/// has not deleted it yet). It looks every virtual second, well within
/// the retention that deletes a run after it ends.
async fn watch_ends(
    network: Arc<Network>,
    tenant: TenantId,
    runs: Vec<PlannedRun>,
    until: Instant,
    created: Arc<Mutex<BTreeMap<RunKey, RunRecord>>>,
) -> Watched {
    let mut watched = Watched::default();
    let mut history = history::Runs::default();
    let mut ended = std::collections::BTreeSet::new();
    let store = Storage::new(network.store()).tenant(&tenant);
    while ended.len() < runs.len() && Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        history.absorb(&network.history());
        for run in &runs {
            let Some(record) = lock(&created).get(&run.key()).cloned() else {
                continue;
            };
            if ended.contains(&run.key()) || history.ended(&run.id, record.created_at_ms).is_none() {
                continue;
            }
            let records = RunRecords::new(store.clone(), run.id.clone());
            if matches!(records.run().await, Ok(Some(stored)) if stored.created_at_ms == record.created_at_ms) {
                let noted = NotedRun::of(&record);
                watched.unlisted.extend(unlisted(&records, &noted).await);
                watched.noted.push(noted);
            }
            watched.events.push(at_now(format!("run {} ended", run.id)));
            ended.insert(run.key());
        }
    }
    watched
}

/// What [`watch_ends`] saw.
#[derive(Default)]
struct Watched {
    /// The runs a listing missed when they ended.
    unlisted: Vec<String>,
    /// Each run that ended, as the ledger notes it.
    noted: Vec<NotedRun>,
    events: Vec<String>,
}

/// Says so if a listing misses `noted`, the run of `records`, just ended
/// (so within its retention); nothing if a read failed.
async fn unlisted(records: &RunRecords, noted: &NotedRun) -> Option<String> {
    match is_listed(records.store(), noted).await {
        Ok(false) => Some(format!(
            "listing: run {} (created at {} ms) ended, and no listing finds it",
            noted.run, noted.created_at_ms
        )),
        _ => None,
    }
}

/// Says so of each run of `noted` that retention deleted and whose end it
/// dropped from the ledger, which a listing still finds: retention takes
/// a run off the listing before it drops its end. Read in that order (the
/// ends, the record, the listing), so a sweep under way meanwhile is never
/// caught halfway; nothing of a read that failed.
async fn listed_after_deletion(store: &TenantStore, noted: &[NotedRun]) -> Vec<String> {
    let Ok(ended) = noted_ended(store).await else {
        return Vec::new();
    };
    let mut listed = Vec::new();
    for run in noted.iter().filter(|run| !ended.contains(run)) {
        let deleted = matches!(RunRecords::new(store.clone(), run.run.clone()).run().await, Ok(None));
        if deleted && matches!(is_listed(store, run).await, Ok(true)) {
            listed.push(format!(
                "listing: run {} (created at {} ms) was deleted by retention, which dropped its end, and a listing still finds it",
                run.run, run.created_at_ms
            ));
        }
    }
    listed
}

/// `what`, stamped with the virtual time since the seed started (not a
/// process's own wall clock).
fn at_now(what: String) -> String {
    let offset = Process::current().map_or(0, |process| process.wall_offset_ms);
    let now = stepstone::clock::now_ms().saturating_add_signed(-offset);
    let at = Duration::from_millis(now.saturating_sub(START_MS));
    format!("{:>9.3}s {what}", at.as_secs_f64())
}

/// The runs of a seed and the events that play them, in order of time.
fn draw_plan(rng: &mut ChaCha20Rng, config: &SimConfig) -> (Vec<PlannedRun>, Vec<(Duration, Event)>) {
    let mut runs = Vec::new();
    let mut plan = Vec::new();
    let span_ms = u64::try_from(config.span.as_millis()).unwrap_or(u64::MAX).max(1);
    let hosts = config.hosts.max(1);
    for index in 0..config.runs {
        let n = 1 + (rng.next_u32() % 6);
        let (workflow, go) = match rng.next_u32() % 4 {
            0 => ("sequential", None),
            1 => ("parallel", None),
            2 => ("sequential-then-wait", Some(rng.next_u32() % 1000)),
            _ => ("relay", None),
        };
        let relay = workflow == "relay";
        let n = if relay { 1 + n % 3 } else { n };
        // A minute, or ten: hosts live through runs' long sleeps too.
        let nap_s = if rng.next_u32().is_multiple_of(2) { 60 } else { 600 };
        // Half the other runs queue on one of two keys, one holder each.
        let key = (!relay && rng.next_u32().is_multiple_of(2))
            .then(|| ConcurrencyKey::new(&format!("k{}", rng.next_u32() % 2)).expect("a valid key"));
        let expected = if relay {
            // Each leg k: its step (k), then its child's steps (0..k).
            (1..=n).map(|k| k + (0..k).sum::<u32>()).sum::<u32>()
        } else {
            (0..n).sum::<u32>().wrapping_add(go.unwrap_or(0))
        };
        runs.push(PlannedRun {
            id: RunId::new(&format!("r{index:03}")).expect("a valid run id"),
            workflow,
            n,
            nap_s,
            go,
            key,
            expected: expected.to_string(),
            // Its steps, and the signal it took, if it awaited one.
            calls: (!relay).then(|| u64::from(n) + u64::from(go.is_some())),
            again: 0,
        });
        let at = Duration::from_millis(rng.next_u64() % span_ms);
        let host = (rng.next_u32() as usize) % hosts;
        plan.push((at, Event::Submit { run: index, host }));
        if go.is_some() {
            let later = at + Duration::from_millis(rng.next_u64() % span_ms);
            let through = (rng.next_u32() as usize) % hosts;
            plan.push((
                later,
                Event::Signal {
                    run: index,
                    host: through,
                },
            ));
        }
        plan.extend(draw_controls(rng, config, index, workflow, n, at));
        // A quarter of the runs without a signal are submitted again under
        // their id, a while after the first: before, while and after
        // retention deletes the first (it keeps a run 20 s, and holds its
        // id 30 s more).
        if matches!(workflow, "sequential" | "parallel") && rng.next_u32().is_multiple_of(4) {
            let later = at + Duration::from_millis(30_000 + rng.next_u64() % 90_000);
            let host = (rng.next_u32() as usize) % hosts;
            plan.push((later, Event::Resubmit { run: index, host }));
        }
    }
    for (at, host, fault) in config.faults.draw(rng, config.hosts, config.span) {
        plan.push((at, Event::Fault { host, fault }));
    }
    plan.sort_by_key(|(at, _)| *at);
    (runs, plan)
}

/// An operator's controls of run `run` (submitted `at`), drawn: a third of
/// the runs paused through any host (half of those stopping the attempt
/// under way), within the span after their start,
/// and resumed within three lease TTLs; half the relays' sleeps advanced;
/// a quarter of the runs without a signal restarted from a seq within
/// their first five seconds (a run ends, and its records go, later).
fn draw_controls(
    rng: &mut ChaCha20Rng,
    config: &SimConfig,
    run: usize,
    workflow: &str,
    n: u32,
    at: Duration,
) -> Vec<(Duration, Event)> {
    let span_ms = u64::try_from(config.span.as_millis()).unwrap_or(u64::MAX).max(1);
    let ttl_ms = u64::try_from(config.ttl.as_millis()).unwrap_or(u64::MAX).max(1);
    let hosts = config.hosts.max(1);
    let mut host = || (rng.next_u32() as usize) % hosts;
    let (pause_host, resume_host, advance_host, restart_host) = (host(), host(), host(), host());
    let mut controls = Vec::new();
    if rng.next_u32().is_multiple_of(3) {
        let paused = at + Duration::from_millis(rng.next_u64() % span_ms);
        let resumed = paused + Duration::from_millis(rng.next_u64() % (3 * ttl_ms));
        let under_way = AttemptUnderWay::stopped_if(rng.next_u32().is_multiple_of(2));
        controls.push((
            paused,
            Event::Pause {
                run,
                host: pause_host,
                under_way,
            },
        ));
        controls.push((resumed, Event::Resume { run, host: resume_host }));
    }
    if workflow == "relay" && rng.next_u32().is_multiple_of(2) {
        let advanced = at + Duration::from_millis(rng.next_u64() % span_ms);
        controls.push((
            advanced,
            Event::Advance {
                run,
                host: advance_host,
            },
        ));
    }
    if matches!(workflow, "sequential" | "parallel") && rng.next_u32().is_multiple_of(4) {
        let restarted = at + Duration::from_millis(rng.next_u64() % 5_000);
        let seq = u64::from(rng.next_u32() % (n + 1));
        controls.push((
            restarted,
            Event::Restart {
                run,
                host: restart_host,
                seq,
            },
        ));
    }
    controls
}

fn digest(events: &[String], ended: &BTreeMap<RunKey, Ended>) -> String {
    let mut hash = Sha256::new();
    for event in events {
        hash.update(event.as_bytes());
        hash.update(b"\n");
    }
    hash.update(format!("{ended:?}").as_bytes());
    hash.finalize()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::HostFaults;
    use crate::network::StoreFaults;

    /// A seed plays one way: twice played, it gives the same trace, and
    /// keeps every invariant.
    #[test]
    fn a_seed_plays_the_same_way_twice_and_keeps_the_invariants() -> anyhow::Result<()> {
        let guest = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/guests/bench.wasm"))
            .map_err(|e| anyhow::anyhow!("target/guests/bench.wasm: {e}: run `make guests`"))?;
        let cache = tempfile::tempdir()?;
        let cache = CodeCache::open(cache.path());
        let config = SimConfig {
            hosts: 3,
            runs: 6,
            ttl: Duration::from_secs(2),
            span: Duration::from_secs(20),
            until: Duration::from_secs(3600),
            store: "latency=20ms,errors=0.05,lost=0.5,stale=2s,stale-rate=0.5".parse::<StoreFaults>()?,
            faults: "kills=1,pauses=2,restarts=1".parse::<HostFaults>()?,
        };
        let guest = Bytes::from(guest);
        for seed in [3, 186] {
            let first = run_seed(&config, &guest, &cache, seed)?;
            let second = run_seed(&config, &guest, &cache, seed)?;
            assert_eq!(first.trace, second.trace, "seed {seed} played two ways");
            assert_eq!(first.violations, Vec::<String>::new(), "seed {seed}");
            assert!(first.store.calls > 0 && first.host_seconds > 0.0, "{first:?}");
        }
        Ok(())
    }
}
