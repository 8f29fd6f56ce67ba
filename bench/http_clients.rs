//! The clients of the HTTP small-runs figure, in a process of their own as
//! a user's clients would be: the benchmark's process serves the API, and
//! starts itself again with [`CHILD_ARG`] to be its 64 clients.

use std::time::Duration;

use anyhow::{Context, bail};
use futures::StreamExt;

use crate::fixtures::child_output;
use crate::measure::time;

/// The argument that makes the benchmark's process the clients.
pub const CHILD_ARG: &str = "--http-clients";

/// Runs submitted before timing, to open the connections and warm the host.
const WARM_UP: usize = 50;

/// What the clients are to do: start `runs` runs of `three-steps` of the
/// component `digest` through the API at `base`, `concurrency` at a time.
pub struct Load<'a> {
    pub base: &'a str,
    pub token: &'a str,
    pub digest: &'a str,
    pub runs: usize,
    pub concurrency: usize,
}

/// Starts the clients' process and waits for it: how long its timed runs
/// took, each submitted and waited for to its end.
pub async fn drive(load: Load<'_>) -> anyhow::Result<Duration> {
    let printed = child_output("the clients' process", CHILD_ARG, |command| {
        command
            .args([load.base, load.token, load.digest])
            .args([load.runs.to_string(), load.concurrency.to_string()]);
    })
    .await?;
    let seconds: f64 = printed
        .trim()
        .parse()
        .context("the clients' process printed no duration")?;
    Ok(Duration::from_secs_f64(seconds))
}

/// In the clients' process: the load its arguments give, warmed up then
/// timed; prints the seconds the timed runs took.
pub async fn clients_in_child() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip_while(|arg| arg != CHILD_ARG).skip(1).collect();
    let [base, token, digest, runs, concurrency] = &args[..] else {
        bail!("usage: {CHILD_ARG} BASE TOKEN DIGEST RUNS CONCURRENCY");
    };
    let load = Load {
        base,
        token,
        digest,
        runs: runs.parse()?,
        concurrency: concurrency.parse()?,
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(load.concurrency)
        .build()?;
    run_all(&client, &load, WARM_UP).await?;
    let (took, done) = time(run_all(&client, &load, load.runs)).await;
    done?;
    println!("{}", took.as_secs_f64());
    Ok(())
}

async fn run_all(client: &reqwest::Client, load: &Load<'_>, count: usize) -> anyhow::Result<()> {
    futures::stream::iter(0..count)
        .map(|_| one_run(client, load))
        .buffer_unordered(load.concurrency)
        .collect::<Vec<anyhow::Result<()>>>()
        .await
        .into_iter()
        .collect()
}

/// `POST /v1/runs`, then `GET /v1/runs/{id}/wait` until it ends.
async fn one_run(client: &reqwest::Client, load: &Load<'_>) -> anyhow::Result<()> {
    let base = load.base;
    let started: serde_json::Value = client
        .post(format!("{base}/runs"))
        .bearer_auth(load.token)
        .json(&serde_json::json!({"component": load.digest, "workflow": "three-steps", "input": {"n": 3}}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let run = started["run_id"].as_str().context("no run_id in the answer")?;
    let status = client
        .get(format!("{base}/runs/{run}/wait?timeout=60s"))
        .bearer_auth(load.token)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    if !status.contains("completed") {
        bail!("run {run} did not complete: {status}");
    }
    Ok(())
}
