//! Step invocation, fuel and outgoing HTTP: one step attempt (fresh store,
//! instantiate from the component's `InstancePre`, one call, drop) against
//! the same logic called natively, with and without the pooling allocator
//! and fuel, and one with a request against the same request from Rust.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use sha2::{Digest, Sha256};
use stepstone::component::{CodeCache, Components};
use stepstone::config::{HostConfig, StepLimits};
use stepstone::egress::Outbound;
use stepstone::guest_log::RunLog;
use stepstone::sandbox::{Engines, Reach, StepProgram, run_attempt};

use crate::fixtures::{guest, guests_dir};
use crate::measure::{Samples, micros, millis};
use crate::report::{Bound, Row, Section};

/// A component's step, ready to attempt, on an engine configured by `config`.
struct Bench {
    program: Arc<StepProgram>,
    /// The steps the component exports.
    steps: Vec<String>,
    limits: StepLimits,
    log: Arc<RunLog>,
    /// The origins its requests may reach.
    outbound: Arc<Outbound>,
    /// Kept alive: dropping the engines stops their epoch ticker.
    _components: Components,
}

/// The compiled code of the attempt benchmarks, kept between runs in
/// `target/bench-code-cache` (keyed, as every code cache, by component and
/// engine settings): they time attempts, not compiling, which took most of
/// a minute for the Python guest alone, twice. *Cold start* times
/// compiling, with caches of its own.
fn attempt_code_cache() -> CodeCache {
    CodeCache::open(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-code-cache"))
}

impl Bench {
    async fn new(config: &HostConfig, bytes: Bytes) -> anyhow::Result<Self> {
        let components = Components::within(
            Engines::new(config)?,
            attempt_code_cache(),
            config.loaded_components_bytes,
        );
        let loaded = components.validate("the benchmark guest", bytes).await?;
        let program = components.steps(&loaded).await?;
        Ok(Self {
            program,
            steps: loaded.manifest.steps.clone(),
            limits: config.step,
            log: Arc::new(RunLog::new(usize::MAX)),
            outbound: Arc::default(),
            _components: components,
        })
    }

    /// One attempt of `step` on `input`; the output, or why there is none.
    async fn attempt(&self, step: &str, input: &str) -> Result<String, String> {
        let reach = Reach {
            outbound: self.outbound.clone(),
            ..Reach::log_only(self.log.clone())
        };
        let report = run_attempt(&self.program, step, input, 1, &self.limits, reach).await;
        report.result.map_err(|failure| failure.message)
    }

    /// `samples` timed attempts after `warmup` untimed ones.
    async fn time(&self, step: &str, input: &str, warmup: usize, samples: usize) -> anyhow::Result<Samples> {
        for _ in 0..warmup {
            self.attempt(step, input).await.map_err(anyhow::Error::msg)?;
        }
        let mut timed = Samples::default();
        for _ in 0..samples {
            let started = Instant::now();
            let result = self.attempt(step, input).await;
            timed.push(started.elapsed());
            result.map_err(anyhow::Error::msg)?;
        }
        Ok(timed)
    }
}

fn unpooled() -> HostConfig {
    HostConfig {
        pooling: false,
        ..HostConfig::new()
    }
}

/// The `noop` step natively: the JSON in, the JSON out.
fn native_noop(input: &str) -> String {
    let n: u32 = serde_json::from_str(input).unwrap_or_default();
    serde_json::to_string(&n).unwrap_or_default()
}

/// Median time of one native call, from batches (one call is below the
/// clock's resolution).
fn time_native(batches: usize, per_batch: usize, call: impl Fn() -> String) -> Duration {
    let mut samples = Samples::default();
    for _ in 0..batches {
        let started = Instant::now();
        for _ in 0..per_batch {
            black_box(call());
        }
        samples.push(started.elapsed() / per_batch as u32);
    }
    samples.median()
}

pub async fn step_invocation() -> anyhow::Result<Section> {
    let bytes = guest("bench")?;
    let pooled = Bench::new(&HostConfig::new(), bytes.clone()).await?;
    let on_demand = Bench::new(&unpooled(), bytes).await?;
    let with_pool = pooled.time("noop", "7", 300, 3000).await?;
    let without_pool = on_demand.time("noop", "7", 100, 1000).await?;
    let native = time_native(200, 1000, || native_noop(black_box("7")));
    let mut section = Section::new(
        "Step invocation",
        "One attempt of the bench guest's `noop` step (a fresh `Store`, instantiate from the cached \
         `InstancePre`, call `run-step(\"noop\", \"7\")`, drop), timed one by one: median (p90). \
         The native baseline runs the same logic (JSON in, JSON out) as a Rust function.",
    );
    let p90 = |s: &Samples| micros(s.quantile(0.9));
    section.rows.push(
        Row::new(
            format!(
                "pooled, median (p90 {:.1} µs, {} samples)",
                p90(&with_pool),
                with_pool.len()
            ),
            micros(with_pool.median()),
            "µs",
        )
        .against("native call", micros(native))
        .target("median ≤ 10 µs", Bound::AtMost(10.0)),
    );
    section.rows.push(
        Row::new(
            format!(
                "pooled, against on-demand allocation (p90 {:.1} µs)",
                p90(&without_pool)
            ),
            micros(with_pool.median()),
            "µs",
        )
        .against("without pooling", micros(without_pool.median())),
    );
    let (rows, not_built) = other_languages().await?;
    section.rows.extend(rows);
    section.after = not_built;
    Ok(section)
}

/// The other languages' example step guests.
pub const OTHER_LANGUAGES: [(&str, &str); 2] = [("Python", "py-steps"), ("JavaScript", "js-steps")];

/// Says which of the other languages' guests were not built.
pub fn not_built(language: &str, file: &str) -> String {
    format!("\n**{language}: not measured**: `target/guests/{file}.wasm` was not built.\n")
}

/// The Python and JavaScript example steps, when their guests were built;
/// and a note for each that was not.
async fn other_languages() -> anyhow::Result<(Vec<Row>, String)> {
    let mut rows = Vec::new();
    let mut missing = String::new();
    for (language, file) in OTHER_LANGUAGES {
        if !guests_dir().join(format!("{file}.wasm")).exists() {
            missing.push_str(&not_built(language, file));
            continue;
        }
        let bytes = guest(file)?;
        let pooled = Bench::new(&HostConfig::new(), bytes.clone()).await?;
        let on_demand = Bench::new(&unpooled(), bytes).await?;
        let step = pooled.steps.first().context("the guest exports no step")?.clone();
        let with_pool = time_any_outcome(&pooled, &step, 20, 200).await;
        let without_pool = time_any_outcome(&on_demand, &step, 5, 50).await;
        rows.push(
            Row::new(
                format!("{language} step `{step}` pooled, median"),
                micros(with_pool.median()),
                "µs",
            )
            .against("without pooling", micros(without_pool.median()))
            .target("median ≤ 300 µs", Bound::AtMost(300.0)),
        );
    }
    Ok((rows, missing))
}

/// Times attempts whatever they return: another language's example step
/// may want an input this benchmark does not know; the instantiation and
/// call are timed all the same.
async fn time_any_outcome(bench: &Bench, step: &str, warmup: usize, samples: usize) -> Samples {
    for _ in 0..warmup {
        let _ = bench.attempt(step, "{}").await;
    }
    let mut timed = Samples::default();
    for _ in 0..samples {
        let started = Instant::now();
        let _ = bench.attempt(step, "{}").await;
        timed.push(started.elapsed());
    }
    timed
}

/// The bytes the `sha256` steps hash: 0, 1, 2, … 255, 0, …, one MiB.
fn mebibyte() -> Vec<u8> {
    (0..=255u8).cycle().take(1 << 20).collect()
}

/// The `sha256` step natively: the same bytes, the same hex output.
fn native_sha256() -> String {
    hex::encode(Sha256::digest(mebibyte()))
}

/// The `sha256-portable` step natively.
fn native_sha256_portable() -> String {
    hex::encode(hmac_sha256::Hash::hash(&mebibyte()))
}

pub async fn fuel_cost() -> anyhow::Result<Section> {
    let bytes = guest("bench")?;
    let metered = Bench::new(&HostConfig::new(), bytes.clone()).await?;
    let unmetered_config = HostConfig {
        unmetered_steps: true,
        ..HostConfig::new()
    };
    let unmetered = Bench::new(&unmetered_config, bytes).await?;
    let expected = native_sha256();
    for (bench, step) in [
        (&metered, "sha256"),
        (&unmetered, "sha256"),
        (&unmetered, "sha256-portable"),
    ] {
        let output = bench.attempt(step, "1").await.map_err(anyhow::Error::msg)?;
        if output != format!("\"{expected}\"") {
            bail!("the guest's `{step}` {output} differs from the native SHA-256 {expected}");
        }
    }
    let fuel_on = millis(metered.time("sha256", "1", 1, 9).await?.median());
    let fuel_off = millis(unmetered.time("sha256", "1", 1, 9).await?.median());
    let portable = millis(unmetered.time("sha256-portable", "1", 1, 9).await?.median());
    let native = millis(time_native(9, 1, native_sha256));
    let native_portable = millis(time_native(9, 1, native_sha256_portable));
    let mut section = Section::new(
        "Fuel cost",
        "The bench guest's `sha256` step over 1 MiB (RustCrypto's `sha2`, built for wasm32 with \
         `opt-level = 3`), one attempt each, median of 9; fuel off is \
         `HostConfig::unmetered_steps` (the timeout still bounds the step). Native: the same \
         `sha2` code compiled for this machine, which takes the CPU's SHA extensions (SHA-NI) \
         where it has them; WebAssembly has no such instructions, so in the guest the crate runs \
         its portable code. The `sha256-portable` step hashes the same bytes with `hmac-sha256`, \
         portable code on both sides: against its native twin it shows what running as \
         WebAssembly costs alone.",
    );
    section.rows.extend([
        Row::new("fuel on", fuel_on, "ms").against("fuel off", fuel_off),
        Row::new("fuel on", fuel_on, "ms").against("native", native),
        Row::new("fuel off", fuel_off, "ms")
            .against("native", native)
            .ratio_target("≤ 2× native", Bound::AtMost(2.0)),
        Row::new("fuel off, portable SHA-256 in both", portable, "ms").against("native", native_portable),
        Row::new("native `sha2` (diagnostic)", native, "ms").against("native portable SHA-256", native_portable),
    ]);
    Ok(section)
}

/// A loopback server answering `GET /ok` with `hello`; its origin.
async fn serve_hello() -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let origin = format!("http://{}", listener.local_addr()?);
    let router = axum::Router::new().route("/ok", axum::routing::get(|| async { "hello" }));
    tokio::spawn(axum::serve(listener, router).into_future());
    Ok(origin)
}

/// Median time of `samples` GETs of `url` by `client`, after `warmup`.
async fn time_native_get(
    client: &reqwest::Client,
    url: &str,
    warmup: usize,
    samples: usize,
) -> anyhow::Result<Samples> {
    let mut timed = Samples::default();
    for n in 0..warmup + samples {
        let started = Instant::now();
        let body = client.get(url).send().await?.error_for_status()?.bytes().await?;
        if n >= warmup {
            timed.push(started.elapsed());
        }
        black_box(body);
    }
    Ok(timed)
}

pub async fn outgoing_http() -> anyhow::Result<Section> {
    let origin = serve_hello().await?;
    let url = format!("{origin}/ok");
    let mut step = Bench::new(&HostConfig::new(), guest("bench")?).await?;
    step.outbound = Arc::new(Outbound::parse(&[&origin])?);
    let input = serde_json::to_string(&url)?;
    let output = step.attempt("fetch", &input).await.map_err(anyhow::Error::msg)?;
    if output != "5" {
        bail!("the step's GET of {url} read {output} bytes, not the 5 of `hello`");
    }
    let from_step = step.time("fetch", &input, 50, 1000).await?;
    // wasi:http opens a connection per request: so does the first baseline.
    let fresh = reqwest::Client::builder().pool_max_idle_per_host(0).build()?;
    let new_connection = time_native_get(&fresh, &url, 50, 1000).await?;
    let pooled = time_native_get(&reqwest::Client::new(), &url, 50, 1000).await?;
    let mut section = Section::new(
        "Outgoing HTTP",
        "One attempt of the bench guest's `fetch` step, which GETs `/ok` (5 bytes) from a loopback \
         axum server through `wasi:http` (allowlist checked, limits counted), timed one by one with \
         the attempt's instantiation: median of 1,000. Native: the same GET from Rust with reqwest, \
         on a new connection each time as wasi:http makes, and on a kept-alive one.",
    );
    let step_median = micros(from_step.median());
    section.rows.push(
        Row::new("step attempt with one request, median", step_median, "µs")
            .against("native, new connection", micros(new_connection.median())),
    );
    section.rows.push(
        Row::new("step attempt with one request, median", step_median, "µs")
            .against("native, kept-alive connection", micros(pooled.median())),
    );
    Ok(section)
}
