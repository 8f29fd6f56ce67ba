//! The WASI 0.2 a guest gets, by role. Runtimes such as Python's and
//! JavaScript's import clocks, random, environment, stdio and files whether
//! or not the guest's own code uses them, so every role links them; what
//! differs is what they reach.
//!
//! Invariants: no guest gets ambient authority — no environment variables,
//! no arguments, no stdin, no sockets, no files except a step's per-attempt
//! scratch directory when its tenant grants one (held to its byte budget),
//! and no HTTP but a step's
//! requests to the origins its tenant allows (see `outbound`), and no
//! configuration but a step's view of its tenant's secrets
//! (`wasi:config/store`; a workflow's is empty). A workflow's WASI is deterministic: its clocks read the run's
//! journaled time ([`JournalClock`]) and its random numbers come from a
//! generator seeded by the run id, so a replay reads what the first
//! execution read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chacha20::ChaCha20Rng;
use chacha20::rand_core::SeedableRng;
use sha2::{Digest, Sha256};
use wasmtime_wasi::{FsPerms, HostMonotonicClock, HostWallClock, ResourceTable, WasiCtx, WasiCtxBuilder, WasiCtxView};

use wasmtime_wasi_config::WasiConfig;
use wasmtime_wasi_http::WasiHttpCtx;
use wasmtime_wasi_http::WasiHttpCtxView;

use super::outbound::HttpHooks;
use super::scratch::ScratchDir;
use super::scratch_budget::{ScratchBudget, WithScratch};
use crate::contract::bindings::LogLevel;
use crate::guest_log::{GuestOutput, LogWriter};
use crate::secrets::OpenedSecrets;

/// Where a step's scratch directory appears inside the guest.
pub const SCRATCH_GUEST_PATH: &str = "/scratch";

/// A guest's WASI state: the context and the table of its resources.
pub struct GuestWasi {
    /// Only ever reached through `&mut self`, never locked: the mutex makes
    /// the store data `Sync`, which the host's async calls need (the WASI
    /// context holds non-`Sync` trait objects).
    state: Mutex<WasiState>,
}

struct WasiState {
    /// `None` until the guest's first WASI call when it can be built then
    /// (see [`GuestWasi::for_step`]).
    ctx: Option<WasiCtx>,
    /// Where the guest's output goes; what a deferred `ctx` is built with.
    stdio: Stdio,
    table: ResourceTable,
    http: WasiHttpCtx,
    hooks: HttpHooks,
    /// What `wasi:config/store` serves: a step's tenant's secrets.
    secrets: Arc<OpenedSecrets>,
    /// What a step may still write into its scratch directory, if it has one.
    scratch: Option<Arc<ScratchBudget>>,
}

/// A guest's store data, which holds its [`GuestWasi`].
pub trait Guest {
    /// The store's WASI state.
    fn guest(&mut self) -> &mut GuestWasi;
}

impl<T: Guest> WithScratch for T {
    fn scratch_budget(&mut self) -> Option<Arc<ScratchBudget>> {
        self.guest().scratch_budget()
    }
}

/// The guest's standard output and standard error.
#[derive(Clone)]
pub struct Stdio {
    /// Where the guest's standard output goes.
    pub stdout: GuestOutput,
    /// Where the guest's standard error goes.
    pub stderr: GuestOutput,
}

impl Stdio {
    /// Output into the run's log as `writer`: stdout at info, stderr at warn.
    pub fn logged(writer: &LogWriter) -> Self {
        Self {
            stdout: GuestOutput::new(writer.clone(), LogLevel::Info),
            stderr: GuestOutput::new(writer.clone(), LogLevel::Warn),
        }
    }

    /// Output nobody reads.
    pub fn dropped() -> Self {
        Self::logged(&LogWriter::nowhere())
    }
}

impl GuestWasi {
    /// A workflow's WASI: the run's journaled time, random seeded from the
    /// run id, output to the run's log, no HTTP (a refusal is logged in `log`).
    pub fn for_workflow(run_id: &str, clock: JournalClock, stdio: Stdio, log: LogWriter) -> Self {
        let mut builder = closed_builder(stdio.clone());
        let seed = seed(run_id);
        builder
            .wall_clock(clock.clone())
            .monotonic_clock(clock)
            .secure_random(ChaCha20Rng::from_seed(seed))
            .insecure_random(ChaCha20Rng::from_seed(Sha256::digest(seed).into()))
            .insecure_random_seed(u128::from_le_bytes(seed[..16].try_into().unwrap_or_default()));
        Self::new(
            Some(builder.build()),
            stdio,
            HttpHooks::refusing(log),
            Arc::default(),
            None,
        )
    }

    /// A step's WASI: real clocks and random, output to the run's log,
    /// `scratch` (a host directory) as [`SCRATCH_GUEST_PATH`] if granted,
    /// the HTTP `http` lets through, and `secrets` as its configuration.
    /// Without a scratch directory the context is built on the guest's first
    /// WASI call: many steps make none, and building one (its random
    /// generators seeded, its clocks and streams boxed) was a measurable part
    /// of every attempt. A scratch directory is opened at once, so failing to
    /// open it fails the attempt before any guest code runs.
    pub fn for_step(
        stdio: Stdio,
        scratch: Option<&ScratchDir>,
        http: HttpHooks,
        secrets: Arc<OpenedSecrets>,
    ) -> wasmtime::Result<Self> {
        let Some(dir) = scratch else {
            return Ok(Self::new(None, stdio, http, secrets, None));
        };
        let mut builder = closed_builder(stdio.clone());
        builder.preopened_dir(dir.path(), SCRATCH_GUEST_PATH, FsPerms::ReadWrite)?;
        let budget = Some(dir.budget().clone());
        Ok(Self::new(Some(builder.build()), stdio, http, secrets, budget))
    }

    /// What the guest may still write into its scratch directory, if it
    /// has one.
    pub fn scratch_budget(&mut self) -> Option<Arc<ScratchBudget>> {
        let state = self.state.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        state.scratch.clone()
    }

    /// The WASI of a component describing itself: a clock stopped at the
    /// epoch, a fixed seed, output dropped, no HTTP.
    pub fn for_describe() -> Self {
        Self::for_workflow("describe", JournalClock::new(0), Stdio::dropped(), LogWriter::nowhere())
    }

    /// The guest's `wasi:config/store`.
    pub fn config(&mut self) -> WasiConfig<'_> {
        let state = self.state.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        WasiConfig::from(state.secrets.variables())
    }

    /// The guest's `wasi:http`, over the same resources as its WASI.
    pub fn http_view(&mut self) -> WasiHttpCtxView<'_> {
        let state = self.state.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        WasiHttpCtxView {
            ctx: &mut state.http,
            table: &mut state.table,
            hooks: &mut state.hooks,
        }
    }

    /// The guest's WASI context and resource table; a step's deferred context
    /// is built here, on its first WASI call.
    pub fn view(&mut self) -> WasiCtxView<'_> {
        let state = self.state.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        let ctx = state
            .ctx
            .get_or_insert_with(|| closed_builder(state.stdio.clone()).build());
        WasiCtxView {
            ctx,
            table: &mut state.table,
        }
    }

    fn new(
        ctx: Option<WasiCtx>,
        stdio: Stdio,
        hooks: HttpHooks,
        secrets: Arc<OpenedSecrets>,
        scratch: Option<Arc<ScratchBudget>>,
    ) -> Self {
        let state = WasiState {
            ctx,
            stdio,
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            hooks,
            secrets,
            scratch,
        };
        Self {
            state: Mutex::new(state),
        }
    }
}

/// What every role shares: no environment, arguments, stdin, preopens or
/// network; stdout and stderr go to the run's log.
/// On virtual time (a test scenario), the clocks are the scenario's.
fn closed_builder(stdio: Stdio) -> WasiCtxBuilder {
    let mut builder = WasiCtxBuilder::new();
    builder
        .stdout(stdio.stdout)
        .stderr(stdio.stderr)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    if crate::clock::is_virtual() {
        let clock = VirtualClock {
            origin: tokio::time::Instant::now(),
        };
        builder.wall_clock(clock).monotonic_clock(clock);
    }
    builder
}

/// A step's clocks on virtual time (see [`crate::clock`]): the scenario's
/// wall clock, and tokio's paused clock, which its sleeps also follow.
#[derive(Clone, Copy)]
struct VirtualClock {
    origin: tokio::time::Instant,
}

impl HostWallClock for VirtualClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        Duration::from_millis(crate::clock::now_ms())
    }
}

impl HostMonotonicClock for VirtualClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The seed of a run's WASI random: SHA-256 of the run id, so every
/// execution of the run, on any host, draws the same numbers.
fn seed(run_id: &str) -> [u8; 32] {
    Sha256::new()
        .chain_update(b"stepstone wasi random\0")
        .chain_update(run_id.as_bytes())
        .finalize()
        .into()
}

/// A workflow's clock: the run's *journal time*, which starts at the run's
/// creation and moves only when the workflow receives the result of a
/// journaled call, to the time that call's entry records as finished. The
/// guest observes it only between such results, and entries never change,
/// so a replay reads the same times. The monotonic clock is the same time,
/// in nanoseconds since the run started.
#[derive(Clone)]
pub struct JournalClock {
    start_ms: u64,
    now_ms: Arc<AtomicU64>,
}

impl JournalClock {
    /// A clock at `start_ms` (ms since the Unix epoch): the run's creation.
    pub fn new(start_ms: u64) -> Self {
        Self {
            start_ms,
            now_ms: Arc::new(AtomicU64::new(start_ms)),
        }
    }

    /// The workflow received a result journaled at `at_ms`. The clock never
    /// goes back (entries of steps run in parallel finish out of order).
    pub fn observe(&self, at_ms: u64) {
        self.now_ms.fetch_max(at_ms, Ordering::Relaxed);
    }

    /// The journal time, in ms since the Unix epoch: the latest finish time
    /// observed, or the start if none has been.
    pub fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::Relaxed)
    }
}

impl HostWallClock for JournalClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        Duration::from_millis(self.now_ms())
    }
}

impl HostMonotonicClock for JournalClock {
    fn resolution(&self) -> u64 {
        1_000_000
    }

    fn now(&self) -> u64 {
        self.now_ms().saturating_sub(self.start_ms).saturating_mul(1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime_wasi::Rng;

    #[test]
    fn the_journal_clock_moves_only_forward_and_only_when_told() {
        let clock = JournalClock::new(1_000);
        assert_eq!(HostWallClock::now(&clock), Duration::from_millis(1_000));
        assert_eq!(HostMonotonicClock::now(&clock), 0);
        clock.observe(1_250);
        clock.observe(1_100);
        assert_eq!(HostWallClock::now(&clock), Duration::from_millis(1_250));
        assert_eq!(HostMonotonicClock::now(&clock), 250_000_000);
    }

    #[test]
    fn a_runs_random_is_the_same_every_time_and_differs_between_runs() {
        let draw = |run: &str| ChaCha20Rng::from_seed(seed(run)).next_u64();
        assert_eq!(draw("run-a"), draw("run-a"));
        assert_ne!(draw("run-a"), draw("run-b"));
    }
}
