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
/// component `digest` through the API at `base`, `concurrency` at a time,
/// and wait for each as `asking` says.
pub struct Load<'a> {
    pub base: &'a str,
    pub token: &'a str,
    pub digest: &'a str,
    pub runs: usize,
    pub concurrency: usize,
    pub asking: Asking,
}

/// How a client asks for a run and its end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Asking {
    /// `POST /v1/runs`, then `GET /v1/runs/{id}/wait`.
    StartThenWait,
    /// `POST /v1/runs?wait=60s`: both in one request.
    StartWaiting,
}

impl Asking {
    fn word(self) -> &'static str {
        match self {
            Self::StartThenWait => "start-then-wait",
            Self::StartWaiting => "start-waiting",
        }
    }

    fn from_word(word: &str) -> anyhow::Result<Self> {
        [Self::StartThenWait, Self::StartWaiting]
            .into_iter()
            .find(|asking| asking.word() == word)
            .with_context(|| format!("`{word}` is no way of asking"))
    }
}

/// Starts the clients' process and waits for it: how long its timed runs
/// took, each submitted and waited for to its end.
pub async fn drive(load: Load<'_>) -> anyhow::Result<Duration> {
    let printed = child_output("the clients' process", CHILD_ARG, |command| {
        command
            .args([load.base, load.token, load.digest])
            .args([load.runs.to_string(), load.concurrency.to_string()])
            .arg(load.asking.word());
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
    let [base, token, digest, runs, concurrency, asking] = &args[..] else {
        bail!("usage: {CHILD_ARG} BASE TOKEN DIGEST RUNS CONCURRENCY ASKING");
    };
    let load = Load {
        base,
        token,
        digest,
        runs: runs.parse()?,
        concurrency: concurrency.parse()?,
        asking: Asking::from_word(asking)?,
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

/// Starts a run and waits for its end, as `load.asking` says.
async fn one_run(client: &reqwest::Client, load: &Load<'_>) -> anyhow::Result<()> {
    let base = load.base;
    let query = match load.asking {
        Asking::StartThenWait => "",
        Asking::StartWaiting => "?wait=60s",
    };
    let started = client
        .post(format!("{base}/runs{query}"))
        .bearer_auth(load.token)
        .json(&serde_json::json!({"component": load.digest, "workflow": "three-steps", "input": {"n": 3}}))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let status = match load.asking {
        Asking::StartWaiting => started,
        Asking::StartThenWait => {
            let started: serde_json::Value = serde_json::from_str(&started)?;
            let run = started["run_id"].as_str().context("no run_id in the answer")?;
            client
                .get(format!("{base}/runs/{run}/wait?timeout=60s"))
                .bearer_auth(load.token)
                .send()
                .await?
                .error_for_status()?
                .text()
                .await?
        }
    };
    if !status.contains("completed") {
        bail!("the run did not complete: {status}");
    }
    Ok(())
}
