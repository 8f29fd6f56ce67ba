//! Throughput: journaled steps per second, small runs per second through the
//! library and through the HTTP API, and the shapes other engines publish.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::bail;
use bytes::Bytes;
use stepstone::api::{ApiState, router};
use stepstone::store::{Storage, StoreKey, TenantId, TenantStore};
use stepstone::tenancy::Tenants;

use crate::fixtures::{Backend, Host, guest, scratch_dir, served_config};
use crate::http_clients::{self, Asking};
use crate::measure::{Samples, millis, rate, time};
use crate::report::{Bound, Row, Section};

/// Clients (or concurrent runs) of the runs/s benchmarks.
const CONCURRENCY: usize = 64;

/// `count` create-only puts of 64-byte objects, one after another: what the
/// local FS store can do at best for a sequential journal.
async fn sequential_puts(store: &TenantStore, round: usize, count: u32) -> anyhow::Result<()> {
    for i in 0..count {
        let key = StoreKey::from(format!("raw/{round}/{i:010}"));
        store.create(&key, Bytes::from_static(&[7; 64])).await?;
    }
    Ok(())
}

/// The backends the throughput figures compare, in the order their figures
/// are unpacked.
const JOURNAL_BACKENDS: [Backend; 4] = [
    Backend::NoJournal,
    Backend::Memory,
    Backend::LocalFs,
    Backend::LocalFsInRam,
];

/// A fresh host on each backend.
async fn hosts(backends: &[Backend]) -> anyhow::Result<Vec<Host>> {
    let mut hosts = Vec::new();
    for backend in backends {
        hosts.push(Host::new(*backend, served_config()).await?);
    }
    Ok(hosts)
}

/// Median time of `repeats` runs of `workflow` on `{"n": n}`.
async fn time_runs(host: &Host, workflow: &str, n: u32, repeats: usize) -> anyhow::Result<Duration> {
    let mut samples = Samples::default();
    for _ in 0..repeats {
        let (took, result) = time(host.run(workflow, n)).await;
        result?;
        samples.push(took);
    }
    Ok(samples.median())
}

pub async fn journaled_steps() -> anyhow::Result<Section> {
    const STEPS: u32 = 1000;
    let hosts = hosts(&JOURNAL_BACKENDS).await?;
    for host in &hosts {
        host.run("sequential", 10).await?;
    }
    let raw = Storage::local(&scratch_dir(Backend::LocalFs)?)?.tenant(&TenantId::default_tenant());
    let mut raw_puts = Samples::default();
    let mut samples = vec![Samples::default(); hosts.len()];
    for round in 0..3 {
        for (host, samples) in hosts.iter().zip(&mut samples) {
            let (took, result) = time(host.run("sequential", STEPS)).await;
            result?;
            samples.push(took);
        }
        let (took, result) = time(sequential_puts(&raw, round, STEPS)).await;
        result?;
        raw_puts.push(took);
    }
    let raw_rate = rate(STEPS as usize, raw_puts.median());
    let per_second: Vec<f64> = samples.iter().map(|s| rate(STEPS as usize, s.median())).collect();
    let [off, memory, local, in_ram] = per_second[..] else {
        bail!("one figure per backend")
    };
    let counted = Host::new(Backend::Counted, served_config()).await?;
    let before = counted.requests.counts();
    counted.run("sequential", STEPS).await?;
    let per_step = |i: usize| (counted.requests.counts()[i] - before[i]) as f64 / f64::from(STEPS);
    let mut section = Section::new(
        "Journaled step throughput",
        "One run of the bench guest's `sequential` workflow: 1,000 calls of the trivial `noop` \
         step, one after another, each journaled (durable) before the workflow sees its result. \
         Median of 3 runs per backend, the backends taking turns so that the machine's load falls \
         on each alike. Journaling off: the same on a store that acknowledges journal entries \
         without keeping them. Bare puts: 1,000 create-only puts of 64-byte objects, one after \
         another, straight to a local FS store, in the same rounds: the disk's own limit for a \
         journal that writes each entry before going on. On tmpfs: the local FS store in a \
         directory on tmpfs (RAM), the same code with the disk taken out.",
    );
    section.rows.push(
        Row::new("in-memory store", memory, "steps/s")
            .against("journaling off", off)
            .target("≥ 50,000 steps/s", Bound::AtLeast(50_000.0)),
    );
    section.rows.push(
        Row::new("local FS store", local, "steps/s")
            .against("journaling off", off)
            .target("≥ 10,000 steps/s", Bound::AtLeast(10_000.0)),
    );
    section.rows.push(
        Row::new("local FS store", local, "steps/s")
            .against("bare create-only puts of entry-sized objects", raw_rate)
            .ratio_target("≥ 0.85× bare puts", Bound::AtLeast(0.85)),
    );
    section.rows.push(
        Row::new("local FS store on tmpfs (diagnostic)", in_ram, "steps/s").against("local FS store on disk", local),
    );
    for (i, request) in ["puts", "gets", "lists"].into_iter().enumerate() {
        section.rows.push(Row::new(
            format!("store {request} per step (a run of {STEPS})"),
            per_step(i),
            request,
        ));
    }
    Ok(section)
}

pub async fn small_runs() -> anyhow::Result<Section> {
    const RUNS: usize = 2000;
    let mut section = Section::new(
        "Small runs per second",
        format!(
            "{RUNS} runs of the bench guest's `three-steps` workflow (3 sequential `noop` steps), each \
             submitted, driven to its end and finished, {CONCURRENCY} at a time. Through HTTP: \
             {CONCURRENCY} clients in a process of their own, each `POST /v1/runs` then \
             `GET /v1/runs/{{id}}/wait` (or, in one request, `POST /v1/runs?wait=60s`), against the \
             API served by this process on 127.0.0.1 (client and server share the machine's cores), \
             compared with the library on the same host and store, the three taking turns a fifth of \
             the runs at a time."
        ),
    );
    let hosts = hosts(&JOURNAL_BACKENDS).await?;
    let mut took = vec![Duration::ZERO; hosts.len()];
    for host in &hosts {
        host.run_many("three-steps", 3, 50, CONCURRENCY).await?;
    }
    // The backends take turns, a fifth of the runs at a time.
    for _ in 0..5 {
        for (host, took) in hosts.iter().zip(&mut took) {
            *took += host.run_many("three-steps", 3, RUNS / 5, CONCURRENCY).await?;
        }
    }
    let library: Vec<f64> = took.iter().map(|took| rate(RUNS, *took)).collect();
    let [off, memory, local, in_ram] = library[..] else {
        bail!("one figure per backend")
    };
    section.rows.push(
        Row::new("library, in-memory store", memory, "runs/s")
            .against("journaling off", off)
            .target("≥ 2,000 runs/s", Bound::AtLeast(2_000.0)),
    );
    section.rows.push(
        Row::new("library, local FS store", local, "runs/s")
            .against("journaling off", off)
            .target("≥ 2,000 runs/s", Bound::AtLeast(2_000.0)),
    );
    section.rows.push(
        Row::new("library, local FS store on tmpfs (diagnostic)", in_ram, "runs/s")
            .against("local FS store on disk", local),
    );
    let counted = Host::new(Backend::Counted, served_config()).await?;
    let before = counted.requests.counts();
    let heads_before = counted.requests.heads.load(Ordering::Relaxed);
    counted.run_many("three-steps", 3, 100, CONCURRENCY).await?;
    let after = counted.requests.counts();
    for (i, request) in ["puts", "gets", "lists"].into_iter().enumerate() {
        let per_run = (after[i] - before[i]) as f64 / 100.0;
        section
            .rows
            .push(Row::new(format!("store {request} per run (library)"), per_run, request));
    }
    let heads = (counted.requests.heads.load(Ordering::Relaxed) - heads_before) as f64 / 100.0;
    section.rows.push(Row::new(
        "of the gets, HEADs per run (the fence: read before its first step attempt, and with each step's entry for the attempt after it, the last read for none)",
        heads,
        "heads",
    ));
    for (backend, store) in [
        (Backend::LocalFs, "local FS store"),
        (Backend::LocalFsInRam, "local FS store on tmpfs (diagnostic)"),
    ] {
        let [then_wait, waiting, library] = http_and_library(backend, RUNS).await?;
        let row = Row::new(format!("HTTP API, {store}"), then_wait, "runs/s")
            .against("library, same host, in turns", library);
        section.rows.push(match backend {
            Backend::LocalFs => row.ratio_target("≥ 0.85× the library", Bound::AtLeast(0.85)),
            _ => row,
        });
        section.rows.push(
            Row::new(
                format!("HTTP API, start and wait in one request, {store}"),
                waiting,
                "runs/s",
            )
            .against("library, same host, in turns", library),
        );
    }
    Ok(section)
}

/// Runs/s through the HTTP API served by this process on `backend`, its
/// clients in a process of their own, asking in each [`Asking`] way, and
/// through the library on the same host, in that order: the three take
/// turns, a fifth of the runs at a time, so that the disk's changes of pace
/// fall on all alike (measured apart, minutes apart, the ratio moved from
/// 0.45× to 1.23×).
async fn http_and_library(backend: Backend, runs: usize) -> anyhow::Result<[f64; 3]> {
    const TOKEN: &str = "bench-token";
    let host = Host::new(backend, served_config()).await?;
    let loaded = host.runtime.upload(&host.tenant, guest("bench")?, None).await?;
    let tenants = Tenants::single(host.tenant.clone(), TOKEN);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}/v1", listener.local_addr()?);
    let server =
        tokio::spawn(axum::serve(listener, router(ApiState::new(host.runtime.clone(), tenants))).into_future());
    let digest = loaded.digest.to_string();
    let turns = async {
        host.run_many("three-steps", 3, 50, CONCURRENCY).await?;
        let mut took = [Duration::ZERO; 3];
        for _ in 0..5 {
            for (asking, took) in [Asking::StartThenWait, Asking::StartWaiting].into_iter().zip(&mut took) {
                *took += http_clients::drive(http_clients::Load {
                    base: &base,
                    token: TOKEN,
                    digest: &digest,
                    runs: runs / 5,
                    concurrency: CONCURRENCY,
                    asking,
                })
                .await?;
            }
            took[2] += host.run_many("three-steps", 3, runs / 5, CONCURRENCY).await?;
        }
        anyhow::Ok(took.map(|took| rate(runs, took)))
    }
    .await;
    server.abort();
    turns
}

pub async fn peer_shapes() -> anyhow::Result<Section> {
    const RUNS: usize = 1000;
    let mut section = Section::new(
        "Peer-comparable shapes (local FS)",
        format!(
            "Shapes other engines publish, on the local file system store. M workflows: {RUNS} runs, \
             {CONCURRENCY} at a time. One workflow × N steps: one run of `sequential`, median of 3. \
             Baseline: the same shape with journaling off."
        ),
    );
    let local = Host::new(Backend::LocalFs, served_config()).await?;
    let off = Host::new(Backend::NoJournal, served_config()).await?;
    for (workflow, label) in [
        ("one-step", "M workflows × 1 step"),
        ("zero-steps", "M workflows × 0 steps"),
    ] {
        let mut figures = Vec::new();
        for host in [&local, &off] {
            host.run_many(workflow, 0, 50, CONCURRENCY).await?;
            figures.push(rate(RUNS, host.run_many(workflow, 0, RUNS, CONCURRENCY).await?));
        }
        section
            .rows
            .push(Row::new(format!("{label}, M = {RUNS}"), figures[0], "runs/s").against("journaling off", figures[1]));
    }
    for n in [100, 200, 400, 800] {
        let on_fs = time_runs(&local, "sequential", n, 3).await?;
        let without = time_runs(&off, "sequential", n, 3).await?;
        section.rows.push(
            Row::new(
                format!("1 workflow × {n} steps"),
                millis(on_fs) / f64::from(n),
                "ms/step",
            )
            .against("journaling off", millis(without) / f64::from(n)),
        );
        section.rows.push(
            Row::new(format!("1 workflow × {n} steps"), 1.0 / on_fs.as_secs_f64(), "runs/s")
                .against("journaling off", 1.0 / without.as_secs_f64()),
        );
    }
    Ok(section)
}
