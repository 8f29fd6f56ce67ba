//! The console's runs page with 10,000 runs stored: how long the first page
//! and a filtered page take to answer, against the JSON listing of the same
//! runs (`GET /v1/runs`) from the same server in the same run.
//!
//! Invariant: both are read through one signed-in server on one store, one
//! request at a time, after the same warm-up, and each answer is checked to
//! hold the page's 50 runs.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use futures::StreamExt;
use stepstone::api::{ApiState, router};
use stepstone::journal::{listed_hours, listed_in_hour};
use stepstone::tenancy::Tenants;

use crate::fixtures::{Backend, Host, served_config};
use crate::measure::{Samples, millis, time};
use crate::report::{Row, Section};

/// Runs stored.
const RUNS: usize = 10_000;
/// One run in this many is of the workflow the filtered page asks for.
const FILTERED_EVERY: usize = 10;
/// Runs a page shows (the console's page size).
const PAGE: usize = 50;
const WARM_UP: usize = 5;
const SAMPLES: usize = 50;
const TOKEN: &str = "bench-console-token";

/// A page asked for, and how to count the runs it holds.
struct Request {
    path: String,
    /// What marks one run in the answer.
    per_run: &'static str,
}

pub async fn runs_page() -> anyhow::Result<Section> {
    let host = Host::new(Backend::LocalFs, served_config()).await?;
    let stored = futures::stream::iter(0..RUNS)
        .map(|i| {
            let workflow = if i % FILTERED_EVERY == 0 {
                "one-step"
            } else {
                "zero-steps"
            };
            host.run(workflow, 1)
        })
        .buffer_unordered(64)
        .collect::<Vec<anyhow::Result<()>>>()
        .await;
    stored.into_iter().collect::<anyhow::Result<Vec<()>>>()?;

    let tenants = Tenants::single(host.tenant.clone(), TOKEN);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let server =
        tokio::spawn(axum::serve(listener, router(ApiState::new(host.runtime.clone(), tenants))).into_future());
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let cookie = sign_in(&client, &base).await?;

    let console = |query: &str| Request {
        path: format!("/ui/runs{query}"),
        per_run: "<tr data-run=",
    };
    let json = |query: &str| Request {
        path: format!("/v1/runs?limit={PAGE}&order=newest-first{query}"),
        per_run: "\"run_id\":",
    };
    let first = median(&client, &base, &cookie, &console("")).await?;
    let first_json = median(&client, &base, &cookie, &json("")).await?;
    let filtered = median(&client, &base, &cookie, &console("?workflow=one-step&state=completed")).await?;
    let filtered_json = median(&client, &base, &cookie, &json("&workflow=one-step&status=completed")).await?;
    server.abort();
    let (listing, listed) = hour_read(&host).await?;

    let mut section = Section::new(
        "Console runs page",
        format!(
            "{RUNS} runs of the bench guest stored on the local FS store (one in {FILTERED_EVERY} of workflow \
             `one-step`, the others `zero-steps`), served by the API's router in this process. Each figure is \
             the median of {SAMPLES} requests made one at a time (after {WARM_UP} to warm up) for a page of \
             {PAGE} runs, newest first, answer read whole: the console's HTML page (signed in, its session \
             cookie sent) against the JSON page of the same runs, `GET /v1/runs`. Filtered: state `completed` \
             and workflow `one-step`. Both read the page's runs' statuses through the ledger's listing; \
             the console's page also renders them. The runs were created within seconds, so in one hour of \
             the listing (or two): a page reads that hour's segments, {RUNS} runs (the filtered page \
             picks the workflow's from them). The diagnostic row times that one read alone.",
        ),
    );
    section.rows.push(
        Row::new(
            format!("first page (`/ui/runs`), {RUNS} runs stored"),
            millis(first),
            "ms",
        )
        .against("JSON page", millis(first_json)),
    );
    section.rows.push(
        Row::new(
            "filtered page (`/ui/runs?workflow=…&state=completed`)",
            millis(filtered),
            "ms",
        )
        .against("JSON page", millis(filtered_json)),
    );
    section.rows.push(Row::new(
        format!("diagnostic: one read of an hour of the listing, {listed} runs"),
        millis(listing),
        "ms",
    ));
    Ok(section)
}

/// The median time of reading the listing's largest hour (all the runs,
/// unless their creation crossed an hour), and how many runs it lists.
async fn hour_read(host: &Host) -> anyhow::Result<(Duration, usize)> {
    let store = host.storage.tenant(&host.tenant);
    let mut largest = (0, 0);
    for hour in listed_hours(&store).await? {
        let runs = listed_in_hour(&store, hour).await?.len();
        if runs > largest.1 {
            largest = (hour, runs);
        }
    }
    let (hour, runs) = largest;
    let mut samples = Samples::default();
    for sample in 0..WARM_UP + SAMPLES {
        let (took, listed) = time(listed_in_hour(&store, hour)).await;
        ensure!(listed?.len() == runs, "the hour changed while read");
        if sample >= WARM_UP {
            samples.push(took);
        }
    }
    Ok((samples.median(), runs))
}

/// Signs in to the console; returns the session cookie.
async fn sign_in(client: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    let answer = client
        .post(format!("{base}/ui/login"))
        .form(&[("token", TOKEN)])
        .send()
        .await?;
    ensure!(
        answer.status().as_u16() == 303,
        "signing in answered {}",
        answer.status()
    );
    let cookie = answer
        .headers()
        .get("set-cookie")
        .context("no session cookie")?
        .to_str()?;
    Ok(cookie.split(';').next().unwrap_or_default().to_owned())
}

/// The median time of `request`, each answer checked to hold a whole page.
async fn median(client: &reqwest::Client, base: &str, cookie: &str, request: &Request) -> anyhow::Result<Duration> {
    let mut samples = Samples::default();
    for sample in 0..WARM_UP + SAMPLES {
        let (took, body) = time(async {
            client
                .get(format!("{base}{}", request.path))
                .bearer_auth(TOKEN)
                .header("cookie", cookie)
                .send()
                .await?
                .error_for_status()?
                .text()
                .await
        })
        .await;
        let runs = body?.matches(request.per_run).count();
        if runs != PAGE {
            bail!("{} held {runs} runs, not {PAGE}", request.path);
        }
        if sample >= WARM_UP {
            samples.push(took);
        }
    }
    Ok(samples.median())
}
