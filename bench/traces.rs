//! Tracing's overhead: the same 3-step runs with traces exported over
//! OTLP/HTTP to a collector on this machine, and with traces off (the
//! baseline). Each is measured in a child process of its own, since a
//! process installs its telemetry once, as `stepstone` does: log lines
//! (written nowhere here) and, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set,
//! the trace exporter.

use anyhow::{Context, bail};
use stepstone::telemetry::{self, LogFormat, LogSettings, Telemetry, TraceExport};
use stepstone_e2e::Collector;

use crate::fixtures::{Backend, Host, child_output, served_config};
use crate::measure::{Samples, micros, rate, time};
use crate::report::{Row, Section};

/// The argument that makes the benchmark binary measure only this.
pub const CHILD_ARG: &str = "--three-step-runs";

/// Runs each child makes before it measures.
const WARM_UP: usize = 200;
/// Runs timed one by one, in each child.
const SEQUENTIAL: usize = 400;
/// Runs timed together, `CONCURRENCY` at a time, in each child.
const CONCURRENT: usize = 1500;
const CONCURRENCY: usize = 64;
/// Children of each kind, taking turns: the machine's load moves between
/// processes more than tracing's cost does.
const ROUNDS: usize = 5;
/// Spans a completed `three-steps` run makes: its root, one execution,
/// and per step the call and its attempt.
const SPANS_PER_RUN: usize = 8;

/// In the child process: the telemetry `stepstone` would install, to be
/// shut down (its last spans sent) after [`measure_in_child`].
pub fn telemetry_in_child() -> anyhow::Result<Telemetry> {
    let logs = LogSettings {
        format: LogFormat::Text,
        default_filter: "stepstone=info",
        ansi: false,
    };
    Ok(telemetry::install(logs, std::io::sink, TraceExport::from_env()?)?)
}

/// In the child process: the median time of one `three-steps` run on the
/// in-memory store, one at a time, then runs/s with `CONCURRENCY` at a
/// time; printed as `MEDIAN_US RUNS_PER_S`.
pub async fn measure_in_child() -> anyhow::Result<()> {
    let host = Host::new(Backend::Memory, served_config()).await?;
    host.run_many("three-steps", 3, WARM_UP, CONCURRENCY).await?;
    let mut one_by_one = Samples::default();
    for _ in 0..SEQUENTIAL {
        let (took, ran) = time(host.run("three-steps", 3)).await;
        ran?;
        one_by_one.push(took);
    }
    let together = host.run_many("three-steps", 3, CONCURRENT, CONCURRENCY).await?;
    println!("{} {}", micros(one_by_one.median()), rate(CONCURRENT, together));
    Ok(())
}

/// One child's figures: the median run in µs, and runs/s.
async fn child(traces_to: Option<&str>) -> anyhow::Result<(f64, f64)> {
    let text = child_output("the tracing benchmark's child", CHILD_ARG, |command| {
        match traces_to {
            Some(endpoint) => command.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            None => command.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT"),
        };
        command.env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    })
    .await?;
    let mut numbers = text.split_whitespace().map(str::parse::<f64>);
    match (numbers.next(), numbers.next()) {
        (Some(Ok(median)), Some(Ok(per_second))) => Ok((median, per_second)),
        _ => bail!("unexpected output of the tracing benchmark's child: {text}"),
    }
}

/// The median of `values`.
fn median(mut values: Vec<f64>) -> anyhow::Result<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().context("no figures")
}

pub async fn tracing_overhead() -> anyhow::Result<Section> {
    let collector = Collector::counting();
    let endpoint = collector.endpoint();
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        off.push(child(None).await?);
        on.push(child(Some(&endpoint)).await?);
    }
    let runs = ROUNDS * (WARM_UP + SEQUENTIAL + CONCURRENT);
    let received = collector.count();
    let expected = runs * SPANS_PER_RUN;
    let figure = |figures: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64| median(figures.iter().map(pick).collect());
    let (latency_off, latency_on) = (figure(&off, |f| f.0)?, figure(&on, |f| f.0)?);
    let (rate_off, rate_on) = (figure(&off, |f| f.1)?, figure(&on, |f| f.1)?);
    let mut section = Section::new(
        "Tracing overhead",
        format!(
            "Runs of the bench guest's `three-steps` workflow (3 sequential `noop` steps) on the in-memory \
             store, in a host process set up as `stepstone` sets itself up (log lines at `info`, written \
             nowhere here): {SEQUENTIAL} runs one at a time (median of each), then {CONCURRENT} runs \
             {CONCURRENCY} at a time. Traces exported: `OTEL_EXPORTER_OTLP_ENDPOINT` points at an OTLP/HTTP \
             collector in the benchmark's own process on 127.0.0.1, which decodes every export and counts \
             its spans (sharing the machine's two cores with the host, as a local collector agent would, \
             but doing little more). Baseline: \
             the same runs with the variable unset. {ROUNDS} processes of each kind, taking turns; the \
             median of their figures."
        ),
    );
    section.rows.push(
        Row::new("3-step run, one at a time, traces exported (median)", latency_on, "µs")
            .against("traces off", latency_off),
    );
    section.rows.push(Row::new(
        "time added per span, one run at a time",
        (latency_on - latency_off) / SPANS_PER_RUN as f64,
        "µs",
    ));
    section.rows.push(
        Row::new(
            format!("3-step runs, {CONCURRENCY} at a time, traces exported"),
            rate_on,
            "runs/s",
        )
        .against("traces off", rate_off),
    );
    section.rows.push(
        Row::new("spans received by the collector", received as f64, "spans")
            .against(format!("{SPANS_PER_RUN} per run made"), expected as f64),
    );
    Ok(section)
}
