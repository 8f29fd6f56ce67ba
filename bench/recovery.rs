//! Getting a run going again: replaying a long journal to where the run
//! left off, and the first run of a newly uploaded component with and
//! without the compiled-code cache.

use std::time::Duration;

use anyhow::bail;
use stepstone::component::{CodeCache, Components};
use stepstone::config::SnapshotPolicy;
use stepstone::journal::{Outcome, RunRecords};
use stepstone::runtime::{Progress, Runtime, Submission};
use stepstone::sandbox::Engines;
use stepstone::store::{RunId, Storage, TenantId};

use crate::fixtures::{Backend, Host, guest, guests_dir, scratch_dir, served_config};
use crate::invocation::{OTHER_LANGUAGES, not_built};
use crate::measure::{Samples, millis, time};
use crate::report::{Bound, Row, Section};

/// A suspended run of `sequential-then-wait` over `entries` steps on
/// `backend`, on a host that snapshots journals as `every` says.
pub struct SuspendedRun {
    host: Host,
    run: RunId,
    live: Duration,
}

impl SuspendedRun {
    pub async fn new(backend: Backend, entries: u32, every: u64) -> anyhow::Result<Self> {
        let mut config = served_config();
        // Suspend as soon as the workflow reaches its wait: what is measured
        // is getting there, not `serve`'s 250 ms in-instance wait for a
        // signal that is not coming.
        config.wait.eviction_threshold = Duration::ZERO;
        config.snapshots.every = every;
        let host = Host::new(backend, config).await?;
        let input = format!(r#"{{"n":{entries}}}"#);
        let submission = Submission::new(host.bench.clone(), "sequential-then-wait", &input);
        let run = host.runtime.submit(&host.tenant, submission).await?;
        let (live, progress) = time(host.runtime.runs().drive(&host.tenant, &run)).await;
        if !matches!(progress?, Progress::Suspended(_)) {
            bail!("the run should wait for its signal");
        }
        Ok(Self { host, run, live })
    }

    /// Wakes the run, which replays to its wait and suspends again.
    pub async fn recover(&self) -> anyhow::Result<Duration> {
        let (took, progress) = time(self.host.runtime.runs().drive(&self.host.tenant, &self.run)).await;
        if !matches!(progress?, Progress::Suspended(_)) {
            bail!("the replayed run should wait for its signal again");
        }
        Ok(took)
    }

    fn records(&self) -> RunRecords {
        RunRecords::new(self.host.storage.tenant(&self.host.tenant), self.run.clone())
    }

    /// Reads the run's journal as a recovery does.
    async fn read_journal(&self) -> anyhow::Result<Duration> {
        let (took, entries) = time(self.records().entries()).await;
        entries?;
        Ok(took)
    }

    /// Writes the snapshot a suspension writes, from the journal as read.
    async fn write_snapshot(&self) -> anyhow::Result<Duration> {
        let records = self.records();
        records.entries().await?;
        let (took, written) = time(records.snapshot(&SnapshotPolicy::default())).await;
        if written.is_none() {
            bail!("no snapshot was written");
        }
        Ok(took)
    }
}

pub async fn replay() -> anyhow::Result<Section> {
    const ENTRIES: u32 = 10_000;
    let snapshotted = SuspendedRun::new(Backend::LocalFs, ENTRIES, SnapshotPolicy::default().every).await?;
    let unsnapshotted = SuspendedRun::new(Backend::LocalFs, ENTRIES, 0).await?;
    let (mut recoveries, mut without) = (Samples::default(), Samples::default());
    let (mut reads, mut reads_without) = (Samples::default(), Samples::default());
    // The two hosts take turns, so the machine's load falls on both alike.
    // A snapshotted recovery is timed four times a turn: at ~10 ms, five
    // samples moved its median by a tenth from one report to the next.
    for _ in 0..5 {
        for _ in 0..4 {
            recoveries.push(snapshotted.recover().await?);
            reads.push(snapshotted.read_journal().await?);
        }
        without.push(unsnapshotted.recover().await?);
        reads_without.push(unsnapshotted.read_journal().await?);
    }
    let replay = recoveries.median();
    let mut section = Section::new(
        "Replay",
        format!(
            "A run of `sequential-then-wait` on the local FS store: {ENTRIES} sequential steps, then \
             a wait for a signal that suspends it (its instance dropped at once). Waking it \
             (`Runtime::drive`) reads the journal and re-runs the workflow against it up to the wait, \
             where it suspends again: median of 20 (of 5 for the baseline). The run suspended once its journal was written, so \
             its journal was compacted into a snapshot then; the baseline is the same run on a host \
             that writes no snapshots (`--snapshot-every 0`), which reads every entry. Reading the \
             journal alone (`RunRecords::entries`) is timed beside it, and, once, writing the \
             snapshot as a suspension does (`RunRecords::snapshot`)."
        ),
    );
    section.rows.push(
        Row::new(format!("recover a run of {ENTRIES} entries"), millis(replay), "ms")
            .against("no snapshot", millis(without.median()))
            .target("≤ 100 ms", Bound::AtMost(100.0)),
    );
    section.rows.push(
        Row::new(format!("recover a run of {ENTRIES} entries"), millis(replay), "ms")
            .against("its live execution", millis(snapshotted.live))
            .ratio_target("≤ 0.02× its live execution", Bound::AtMost(0.02)),
    );
    section.rows.push(
        Row::new("of which reading its journal", millis(reads.median()), "ms")
            .against("no snapshot", millis(reads_without.median())),
    );
    section.rows.push(
        Row::new("recover, no snapshot", millis(without.median()), "ms")
            .against("live execution", millis(unsnapshotted.live)),
    );
    // Last: from here on, the run without snapshots has one.
    let write = unsnapshotted.write_snapshot().await?;
    section.rows.push(
        Row::new("write the snapshot (once, as the run suspends)", millis(write), "ms")
            .against("live execution", millis(unsnapshotted.live)),
    );
    Ok(section)
}

/// Three times, `measure` on a new host with an empty compiled-code cache,
/// then on another host sharing the cache the first filled.
async fn uncached_then_cached<F, Fut>(bytes: &bytes::Bytes, measure: F) -> anyhow::Result<(Samples, Samples)>
where
    F: Fn(CodeCache, bytes::Bytes) -> Fut,
    Fut: Future<Output = anyhow::Result<Duration>>,
{
    let mut uncached = Samples::default();
    let mut cached = Samples::default();
    for _ in 0..3 {
        let dir = scratch_dir(Backend::LocalFs)?;
        uncached.push(measure(CodeCache::open(&dir), bytes.clone()).await?);
        cached.push(measure(CodeCache::open(&dir), bytes.clone()).await?);
    }
    Ok((uncached, cached))
}

/// Validates, submits and runs `three-steps` on a host with a fresh runtime
/// (nothing compiled in memory) over `cache`.
async fn first_run(cache: CodeCache, bytes: bytes::Bytes) -> anyhow::Result<Duration> {
    let (took, result) = time(async {
        let runtime = Runtime::new(served_config(), Storage::in_memory(), cache)?;
        let tenant = TenantId::default_tenant();
        let loaded = runtime.upload(&tenant, bytes, None).await?;
        let run = runtime
            .submit(&tenant, Submission::new(loaded, "three-steps", r#"{"n":3}"#))
            .await?;
        match runtime.run_to_end(&tenant, &run, None).await? {
            Progress::Finished(Outcome::Completed { .. }) => Ok(()),
            other => bail!("the first run did not complete: {other:?}"),
        }
    })
    .await;
    result.map(|()| took)
}

/// Validates `bytes` and readies its steps on fresh engines over `cache`:
/// the cold start of a steps-only guest.
async fn step_ready(cache: CodeCache, bytes: bytes::Bytes) -> anyhow::Result<Duration> {
    readied(cache, bytes, true).await
}

/// Validates `bytes` on fresh engines over `cache`, and readies its steps
/// if `steps`: a validation compiles one role (workflows, if it has any)
/// and runs the component's description.
async fn readied(cache: CodeCache, bytes: bytes::Bytes, steps: bool) -> anyhow::Result<Duration> {
    let (took, result) = time(async {
        let components = Components::within(
            Engines::new(&served_config())?,
            cache,
            served_config().loaded_components_bytes,
        );
        let loaded = components.validate("the guest", bytes).await?;
        if steps {
            components.steps(&loaded).await?;
        }
        anyhow::Ok(())
    })
    .await;
    result.map(|()| took)
}

pub async fn cold_start() -> anyhow::Result<Section> {
    let mut section = Section::new(
        "Cold start",
        "A new host process's first run of a newly uploaded component (upload with validation, \
         submit, run `three-steps` to its end), with an empty compiled-code cache (everything \
         compiled by Cranelift) and with the cache filled by an earlier host. Median of 3. \
         Baseline: the same run on a host that already has the component loaded. Both roles: \
         the bench guest (workflows and steps) validated and its steps readied on fresh engines \
         with no cache, against validating it alone (which compiles it for the workflow engine \
         and runs its description): the step engine takes the workflow engine's code \
         (`Engines::share_code`), so the second role costs a copy, not a compile.",
    );
    let bytes = guest("bench")?;
    let warm = Host::new(Backend::Memory, served_config()).await?;
    warm.run("three-steps", 3).await?;
    let mut warm_runs = Samples::default();
    for _ in 0..20 {
        let (took, result) = time(warm.run("three-steps", 3)).await;
        result?;
        warm_runs.push(took);
    }
    let (cold, cached) = uncached_then_cached(&bytes, first_run).await?;
    let warm_ms = millis(warm_runs.median());
    section
        .rows
        .push(Row::new("Rust guest, no cache", millis(cold.median()), "ms").against("warm host", warm_ms));
    section.rows.push(
        Row::new("Rust guest, cache filled", millis(cached.median()), "ms").against("no cache", millis(cold.median())),
    );
    // A guest of workflows and steps, compiled for both roles: once.
    let (mut one_role, mut both_roles) = (Samples::default(), Samples::default());
    for _ in 0..3 {
        one_role.push(readied(CodeCache::disabled(), bytes.clone(), false).await?);
        both_roles.push(readied(CodeCache::disabled(), bytes.clone(), true).await?);
    }
    section.rows.push(
        Row::new(
            "Rust guest of workflows and steps, both roles ready, no cache",
            millis(both_roles.median()),
            "ms",
        )
        .against("validated alone: one compile", millis(one_role.median()))
        .ratio_target("≤ 1.15× one compile", Bound::AtMost(1.15)),
    );
    for (language, file) in OTHER_LANGUAGES {
        if !guests_dir().join(format!("{file}.wasm")).exists() {
            section.after.push_str(&not_built(language, file));
            continue;
        }
        let (compiled, cached) = uncached_then_cached(&guest(file)?, step_ready).await?;
        section.rows.push(
            Row::new(
                format!("{language} guest, steps ready, no cache"),
                millis(compiled.median()),
                "ms",
            )
            .against("cache filled", millis(cached.median())),
        );
    }
    Ok(section)
}
