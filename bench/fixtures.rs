//! What the benchmarks run on: the guests built by `make guests`, hosts on
//! each storage backend, a store that keeps no journal (the baseline of the
//! journal's cost), and helpers that run workflows to their end.
//!
//! Invariant: every host here is the library's own `Runtime`, configured as
//! `stepstone serve` configures it unless a benchmark says otherwise.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, bail};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::throttle::{ThrottleConfig, ThrottledStore};
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult,
};
use stepstone::component::{CodeCache, Loaded};
use stepstone::config::HostConfig;
use stepstone::journal::Outcome;
use stepstone::policy::{RunQuotas, TenantPolicy};
use stepstone::runtime::{Progress, Runtime, StepStandIn, Submission};
use stepstone::store::{Storage, TenantId};

/// The guests' directory: `target/guests` of this repository.
pub fn guests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/guests")
}

/// The component `target/guests/{name}.wasm`.
pub fn guest(name: &str) -> anyhow::Result<Bytes> {
    let path = guests_dir().join(format!("{name}.wasm"));
    let bytes = std::fs::read(&path).with_context(|| format!("{}: run `make guests`", path.display()))?;
    Ok(bytes.into())
}

/// Where `Backend::LocalFsInRam` keeps its files: tmpfs on Linux.
const RAM_DIR: &str = "/dev/shm";

/// The directories this run's benchmarks keep their files in, one on disk
/// and one on tmpfs, each holding a folder per store.
///
/// Both choices keep other work's file deletions out of the journal's
/// figures: ext4 without a journal (this machine's root file system) passes
/// over every inode of a block group freed in the last seconds to minutes
/// when it creates a file there. So the disk directory is in `/var/tmp`
/// (`STEPSTONE_BENCH_DIR` overrides it), not in `/tmp`, where the test suite
/// has just deleted thousands of files, nor under `target/`, where cargo has
/// just replaced the benchmark's own build; and nothing is deleted until
/// every figure is measured ([`remove_scratch`]).
static SCRATCH: OnceLock<[PathBuf; 2]> = OnceLock::new();

/// Names the scratch directories of the benchmark run a child process
/// belongs to, so that the parent deletes the child's files with its own.
pub const SCRATCH_NAME_ENV: &str = "STEPSTONE_BENCH_SCRATCH_NAME";

/// The name of this run's scratch directories.
pub fn scratch_name() -> String {
    std::env::var(SCRATCH_NAME_ENV).unwrap_or_else(|_| format!("stepstone-bench-{}", std::process::id()))
}

/// This benchmark's binary started again with `arg` (which `main` hands to
/// the child's part), sharing this run's scratch directories, as `configure`
/// further sets it up; what it printed once it succeeded. `what` names the
/// child in errors.
pub async fn child_output(
    what: &str,
    arg: &str,
    configure: impl FnOnce(&mut tokio::process::Command),
) -> anyhow::Result<String> {
    let mut command = tokio::process::Command::new(std::env::current_exe()?);
    command.arg(arg).env(SCRATCH_NAME_ENV, scratch_name());
    configure(&mut command);
    let output = command.output().await.with_context(|| format!("starting {what}"))?;
    if !output.status.success() {
        bail!(
            "{what} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8(output.stdout)?)
}

fn scratch_roots() -> &'static [PathBuf; 2] {
    SCRATCH.get_or_init(|| {
        let name = scratch_name();
        let on_disk = match std::env::var_os("STEPSTONE_BENCH_DIR") {
            Some(dir) => PathBuf::from(dir),
            None if Path::new("/var/tmp").is_dir() => PathBuf::from("/var/tmp"),
            None => std::env::temp_dir(),
        };
        [on_disk.join(&name), Path::new(RAM_DIR).join(name)]
    })
}

/// A new, empty directory for one store of this run: on tmpfs for
/// `LocalFsInRam`, on disk for any other backend.
pub fn scratch_dir(backend: Backend) -> anyhow::Result<PathBuf> {
    let root = &scratch_roots()[usize::from(backend == Backend::LocalFsInRam)];
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let dir = tempfile::tempdir_in(root).with_context(|| format!("a directory in {}", root.display()))?;
    Ok(dir.keep())
}

/// Deletes every directory [`scratch_dir`] made, in this process and its
/// children, once the figures are in.
pub fn remove_scratch() {
    for root in scratch_roots() {
        if let Err(e) = std::fs::remove_dir_all(root)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            eprintln!("bench: could not remove {}: {e}", root.display());
        }
    }
}

/// The storage backends the journal benchmarks compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `object_store`'s `InMemory`.
    Memory,
    /// `LocalFileSystem` in a temporary directory.
    LocalFs,
    /// `LocalFileSystem` in a temporary directory on tmpfs (`/dev/shm`): the
    /// same code path as `LocalFs` with the disk taken out, to tell the
    /// host's own cost from the disk's.
    LocalFsInRam,
    /// In memory, with journal entries acknowledged and dropped: the cost of
    /// running the steps with journaling off.
    NoJournal,
    /// In memory, counting the requests made of the store.
    Counted,
    /// `InMemory` behind 20 ms of latency on every request
    /// (`ThrottledStore`): a remote object store's round trips, without its
    /// variance. Not `LocalFileSystem`: `ThrottledStore` cannot pass on the
    /// file a local read answers with (it panics, `unimplemented!`).
    InMemoryWith20ms,
    /// SeaweedFS over S3, on this machine.
    SeaweedFs,
}

/// The latency `InMemoryWith20ms` adds to every request.
pub const INJECTED_LATENCY: Duration = Duration::from_millis(20);

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Memory => "in-memory",
            Backend::LocalFs => "local FS",
            Backend::LocalFsInRam => "local FS on tmpfs",
            Backend::NoJournal => "journaling off",
            Backend::Counted => "in-memory, counted",
            Backend::InMemoryWith20ms => "in-memory + 20 ms per request",
            Backend::SeaweedFs => "SeaweedFS (S3)",
        })
    }
}

/// A host with its storage.
pub struct Host {
    pub runtime: Runtime,
    /// The store under the runtime, to read records beside it.
    pub storage: Storage,
    /// The requests made of the store.
    pub requests: Arc<Requests>,
    pub tenant: TenantId,
    pub bench: Arc<Loaded>,
}

impl Host {
    pub async fn new(backend: Backend, config: HostConfig) -> anyhow::Result<Self> {
        Self::with_stand_in(backend, config, None).await
    }

    /// A host whose step attempts `stand_in` answers, if given.
    pub async fn with_stand_in(
        backend: Backend,
        config: HostConfig,
        stand_in: Option<Arc<dyn StepStandIn>>,
    ) -> anyhow::Result<Self> {
        let requests = Arc::new(Requests::default());
        let probe = |inner: Arc<dyn ObjectStore>, keep_journal| Probe {
            inner,
            keep_journal,
            requests: requests.clone(),
        };
        let storage = match backend {
            Backend::Memory => Storage::in_memory(),
            Backend::LocalFs | Backend::LocalFsInRam => Storage::local(&scratch_dir(backend)?)?,
            Backend::NoJournal => Storage::new(Arc::new(probe(Arc::new(InMemory::new()), false))),
            Backend::Counted => Storage::new(Arc::new(probe(Arc::new(InMemory::new()), true))),
            Backend::InMemoryWith20ms => {
                let wait = INJECTED_LATENCY;
                let latency = ThrottleConfig {
                    wait_put_per_call: wait,
                    wait_get_per_call: wait,
                    wait_list_per_call: wait,
                    wait_list_with_delimiter_per_call: wait,
                    wait_delete_per_call: wait,
                    ..ThrottleConfig::default()
                };
                let throttled = Arc::new(ThrottledStore::new(InMemory::new(), latency));
                Storage::new(Arc::new(probe(throttled, true)))
            }
            Backend::SeaweedFs => Storage::new(Arc::new(probe(stepstone_e2e::seaweedfs().object_store(), true))),
        };
        let runtime = match stand_in {
            Some(stand_in) => Runtime::with_step_stand_in(config, storage.clone(), CodeCache::disabled(), stand_in)?,
            None => Runtime::new(config, storage.clone(), CodeCache::disabled())?,
        };
        let tenant = TenantId::default_tenant();
        // The benchmarks measure the host, not its quotas.
        let unbounded = RunQuotas {
            max_active_runs: usize::MAX,
            max_new_runs_per_minute: u32::MAX,
            ..RunQuotas::default()
        };
        let policy = TenantPolicy {
            runs: unbounded,
            ..(*runtime.policy(&tenant)).clone()
        };
        runtime.set_policy(&tenant, policy);
        let bench = runtime.validate("bench", guest("bench")?).await?;
        Ok(Self {
            runtime,
            storage,
            requests,
            tenant,
            bench,
        })
    }

    /// Starts `workflow` of the bench guest on `{"n": n}` and drives it until
    /// it finishes; fails unless it completes.
    pub async fn run(&self, workflow: &str, n: u32) -> anyhow::Result<()> {
        let input = format!(r#"{{"n":{n}}}"#);
        let run = self
            .runtime
            .submit(&self.tenant, Submission::new(self.bench.clone(), workflow, &input))
            .await?;
        match self.runtime.run_to_end(&self.tenant, &run, None).await? {
            Progress::Finished(Outcome::Completed { .. }) => Ok(()),
            other => bail!("run {run} of `{workflow}` did not complete: {other:?}"),
        }
    }

    /// Runs `runs` runs of `workflow`, at most `concurrency` at once; returns
    /// how long they took together.
    pub async fn run_many(&self, workflow: &str, n: u32, runs: usize, concurrency: usize) -> anyhow::Result<Duration> {
        let started = std::time::Instant::now();
        let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..runs)
            .map(|_| self.run(workflow, n))
            .buffer_unordered(concurrency)
            .collect()
            .await;
        results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        Ok(started.elapsed())
    }
}

/// The host's configuration as `stepstone serve` sets it.
pub fn served_config() -> HostConfig {
    let mut config = HostConfig::new();
    config.wait.eviction_threshold = Duration::from_millis(250);
    config.wait.signal_poll_interval = Duration::from_secs(30);
    config
}

/// Requests made of a [`Probe`] store: those for runs by kind, and apart
/// from them the host's upkeep (its heartbeat, the others', its wake-ups:
/// keys under `cluster/`), which costs the same however many runs it drives.
#[derive(Debug, Default)]
pub struct Requests {
    pub puts: AtomicU64,
    pub gets: AtomicU64,
    /// Of the gets, those that are HEADs (a key's metadata only): a step
    /// attempt's fence, the claim's newest epoch looked up, is one.
    pub heads: AtomicU64,
    pub lists: AtomicU64,
    /// Of the puts, those of the ledger (`ledger/`): batches many runs
    /// share, and their compactions.
    pub ledger_puts: AtomicU64,
    pub upkeep: AtomicU64,
}

impl Requests {
    /// Puts, gets and lists so far.
    pub fn counts(&self) -> [u64; 3] {
        [&self.puts, &self.gets, &self.lists].map(|count| count.load(Ordering::Relaxed))
    }
}

/// A store that counts the requests made of it and, unless `keep_journal`,
/// acknowledges journal entries without keeping them: runs then behave as
/// if journaling were off (no replay would be possible).
#[derive(Debug)]
pub struct Probe {
    inner: Arc<dyn ObjectStore>,
    keep_journal: bool,
    requests: Arc<Requests>,
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Probe({})", self.inner)
    }
}

/// Whether a request for `location` is the host's upkeep (see [`Requests`]).
fn is_upkeep(location: &ObjectPath) -> bool {
    location.as_ref().starts_with("cluster/")
}

fn is_journal_entry(location: &ObjectPath) -> bool {
    location.as_ref().contains("/journal/")
}

impl Probe {
    /// Counts a request for `location` (a key or a listed prefix).
    fn count(&self, counter: &AtomicU64, location: Option<&ObjectPath>) {
        let counter = if location.is_some_and(is_upkeep) {
            &self.requests.upkeep
        } else {
            counter
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl ObjectStore for Probe {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.count(&self.requests.puts, Some(location));
        if location.as_ref().contains("/ledger/") {
            self.requests.ledger_puts.fetch_add(1, Ordering::Relaxed);
        }
        if !self.keep_journal && is_journal_entry(location) {
            return Ok(PutResult {
                e_tag: None,
                version: None,
                extensions: Default::default(),
            });
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &ObjectPath, options: GetOptions) -> object_store::Result<GetResult> {
        self.count(&self.requests.gets, Some(location));
        if options.head && !is_upkeep(location) {
            self.requests.heads.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&ObjectPath>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.count(&self.requests.lists, prefix);
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&ObjectPath>) -> object_store::Result<ListResult> {
        self.count(&self.requests.lists, prefix);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &ObjectPath, to: &ObjectPath, options: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// The resident set size of this process, in bytes.
pub fn rss_bytes() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .context("no VmRSS in /proc/self/status")?;
    Ok(kib * 1024)
}
