//! Getting a run going again: replaying a long journal to where the run
//! left off, and the first run of a newly uploaded component with and
//! without the compiled-code cache.

use std::time::Duration;

use anyhow::bail;
use stepstone::component::{CodeCache, Components};
use stepstone::journal::Outcome;
use stepstone::runtime::{Progress, Runtime, Submission};
use stepstone::sandbox::Engines;
use stepstone::store::{Storage, TenantId};

use crate::fixtures::{Backend, Host, guest, guests_dir, served_config};
use crate::invocation::{OTHER_LANGUAGES, not_built};
use crate::measure::{Samples, millis, time};
use crate::report::{Row, Section};

pub async fn replay() -> anyhow::Result<Section> {
    const ENTRIES: u32 = 10_000;
    let host = Host::new(Backend::LocalFs, served_config()).await?;
    let input = format!(r#"{{"n":{ENTRIES}}}"#);
    let run = host
        .runtime
        .submit(
            &host.tenant,
            Submission::new(host.bench.clone(), "sequential-then-wait", &input),
        )
        .await?;
    let (live, progress) = time(host.runtime.drive(&host.tenant, &run)).await;
    if !matches!(progress?, Progress::Suspended(_)) {
        bail!("the run should wait for its signal");
    }
    let mut replays = Samples::default();
    for _ in 0..5 {
        let (took, progress) = time(host.runtime.drive(&host.tenant, &run)).await;
        if !matches!(progress?, Progress::Suspended(_)) {
            bail!("the replayed run should wait for its signal again");
        }
        replays.push(took);
    }
    let replay = replays.median();
    let mut section = Section::new(
        "Replay",
        format!(
            "A run of `sequential-then-wait` on the local FS store: {ENTRIES} sequential steps, then \
             a wait for a signal that suspends it (its instance dropped). Waking it (`Runtime::drive`) \
             reads the journal and re-runs the workflow against it up to the wait: median of 5. \
             Baseline: the first, live execution that wrote the journal."
        ),
    );
    section.rows.push(
        Row::new(format!("recover a run of {ENTRIES} entries"), millis(replay), "ms")
            .against("live execution", millis(live))
            .target("< 100 ms", replay < Duration::from_millis(100)),
    );
    Ok(section)
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
    let (took, result) = time(async {
        let components = Components::new(Engines::new(&served_config())?, cache);
        let loaded = components.validate("the guest", bytes).await?;
        components.steps(&loaded).await?;
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
         Baseline: the same run on a host that already has the component loaded.",
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
    let mut cold = Samples::default();
    let mut cached = Samples::default();
    for _ in 0..3 {
        let dir = tempfile::tempdir()?;
        cold.push(first_run(CodeCache::open(dir.path()), bytes.clone()).await?);
        cached.push(first_run(CodeCache::open(dir.path()), bytes.clone()).await?);
    }
    let warm_ms = millis(warm_runs.median());
    section
        .rows
        .push(Row::new("Rust guest, no cache", millis(cold.median()), "ms").against("warm host", warm_ms));
    section.rows.push(
        Row::new("Rust guest, cache filled", millis(cached.median()), "ms").against("no cache", millis(cold.median())),
    );
    for (language, file) in OTHER_LANGUAGES {
        if !guests_dir().join(format!("{file}.wasm")).exists() {
            section.after.push_str(&not_built(language, file));
            continue;
        }
        let bytes = guest(file)?;
        let mut compiled = Samples::default();
        let mut cached = Samples::default();
        for _ in 0..3 {
            let dir = tempfile::tempdir()?;
            compiled.push(step_ready(CodeCache::open(dir.path()), bytes.clone()).await?);
            cached.push(step_ready(CodeCache::open(dir.path()), bytes.clone()).await?);
        }
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
