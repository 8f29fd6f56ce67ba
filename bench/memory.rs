//! Memory: the resident set a host keeps for runs that wait (suspended,
//! their instances dropped). Measured in a child process of its own, so the
//! other benchmarks' allocations do not blur it.

use std::time::Duration;

use anyhow::{Context, bail};
use futures::StreamExt;
use stepstone::runtime::Submission;

use crate::fixtures::{Backend, Host, child_output, rss_bytes, served_config};
use crate::report::{Row, Section};

/// The argument that makes the benchmark binary measure only this.
pub const CHILD_ARG: &str = "--suspended-runs-rss";

const RUNS: usize = 10_000;

/// In the child process: starts `RUNS` runs that wait for a signal, waits
/// until every one is evicted, and prints the RSS before and after.
pub async fn measure_in_child() -> anyhow::Result<()> {
    let host = Host::new(Backend::LocalFs, served_config()).await?;
    host.run("zero-steps", 0).await?;
    let before = rss_bytes()?;
    let submitted: Vec<anyhow::Result<()>> = futures::stream::iter(0..RUNS)
        .map(|_| async {
            let submission = Submission::new(host.bench.clone(), "wait-for-go", r#"{"n":0}"#);
            host.runtime.start(&host.tenant, submission).await?;
            Ok(())
        })
        .buffer_unordered(64)
        .collect()
        .await;
    submitted.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while evicted(&host.runtime.metrics().encode()) < RUNS {
        if std::time::Instant::now() > deadline {
            bail!("the runs were not all suspended within 300 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("{before} {}", rss_bytes()?);
    Ok(())
}

/// The `runs_evicted` gauge from the metrics text.
fn evicted(metrics: &str) -> usize {
    metrics
        .lines()
        .filter(|line| line.starts_with("stepstone_runs_evicted{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<usize>().ok())
        .sum()
}

pub async fn suspended_runs() -> anyhow::Result<Section> {
    let text = child_output("the memory benchmark", CHILD_ARG, |_| {}).await?;
    let mut numbers = text.split_whitespace().map(str::parse::<u64>);
    let (Some(Ok(before)), Some(Ok(after))) = (numbers.next(), numbers.next()) else {
        bail!("unexpected output of the memory benchmark: {text}");
    };
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    let held = after.checked_sub(before).context("RSS shrank while runs were added")?;
    let mut section = Section::new(
        "Memory",
        format!(
            "A host process (served configuration: eviction after 250 ms, store polled every 30 s) on \
             the local FS store starts {RUNS} runs of `wait-for-go`, each driven in the background until \
             it waits for a signal and is evicted (instance dropped). RSS from /proc/self/status, before \
             and after. Baseline: the idle host's RSS."
        ),
    );
    section.rows.push(
        Row::new(format!("RSS added by {RUNS} suspended runs"), mib(held), "MiB").against("idle host", mib(before)),
    );
    section
        .rows
        .push(Row::new("per suspended run", held as f64 / RUNS as f64 / 1024.0, "KiB"));
    Ok(section)
}
