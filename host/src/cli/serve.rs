//! `stepstone serve` and `stepstone tenant`: the host as a shared server.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use stepstone::api::{self, Admission, ApiState};
use stepstone::runtime::HostStop;
use stepstone::runtime::Runtime;
use stepstone::store::TenantId;
use stepstone::tenancy::{LiveTenants, Tenants};
use tokio::sync::watch;

/// How long a shutdown waits for step attempts in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Where `stepstone serve` listens, and how many connections one source
/// may hold on each listener.
pub struct Listening<'a> {
    pub api: &'a str,
    /// The operator's metrics, if served.
    pub metrics: Option<&'a str>,
    pub per_source: usize,
}

/// Serves the API (and the operator's metrics, if asked) where `listening`
/// says until SIGTERM or Ctrl-C, then lets the step attempts in flight
/// finish and journal their results.
pub async fn serve(runtime: Runtime, listening: Listening<'_>, config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let tenants = match config {
        Some(path) => {
            let tenants = Tenants::load(path)?;
            anyhow::ensure!(
                tenants.iter().next().is_some(),
                "{} lists no tenants: add one with `stepstone tenant add ID --config {}`",
                path.display(),
                path.display()
            );
            tenants
        }
        None => single_tenant(),
    };
    // Joined before anything else, so that other hosts see this one alive.
    runtime.runs().live().await?;
    for tenant in runtime.serve_tenants(tenants.iter().map(|tenant| tenant.id.clone())) {
        let recovered = runtime.runs().recover(&tenant).await?;
        tracing::info!(%tenant, runs = recovered, "recovered unfinished runs");
    }
    runtime.runs().take_over_from_dead_hosts();
    runtime.fire_schedules();
    runtime.deliver_notifications();
    let tenants = LiveTenants::from(tenants);
    if let Some(path) = config {
        tenants.follow(path.to_owned());
    }
    let listener = bind(listening.api).await?;
    let operator = match listening.metrics {
        Some(address) => Some(bind(address).await?),
        None => None,
    };
    // Scripts and tests read the addresses (a port may have been 0).
    println!("listening on http://{}", listener.local_addr()?);
    if let Some(operator) = &operator {
        println!("metrics on http://{}/metrics", operator.local_addr()?);
    }
    // Logged, not printed: a script reading the addresses may have closed
    // its end of standard output by now.
    tracing::info!("console on http://{}/ui", listener.local_addr()?);
    std::io::stdout().flush()?;
    let router = api::router(ApiState::new(runtime.clone(), tenants));
    runtime.retention().sweep_forever();
    runtime.usage().keep();
    let mut stopped = runtime.runs().stopped();
    let admission = || Admission::new(listening.per_source, runtime.metrics().connections());
    let api = api::serve(listener, router, shutdown(stopped.clone()), admission());
    match operator {
        Some(operator) => {
            let operator_router = api::operator_router(runtime.clone());
            let metrics = api::serve(operator, operator_router, std::future::pending(), admission());
            // The metrics end with the API: their server is not waited for.
            tokio::select! {
                () = api => {}
                () = metrics => {}
            }
        }
        None => api.await,
    }
    let unfinished = runtime.runs().drain(SHUTDOWN_GRACE).await;
    runtime.usage().flush_or_log().await;
    if unfinished > 0 {
        tracing::warn!(
            steps = unfinished,
            grace_ms = stepstone::clock::millis(SHUTDOWN_GRACE),
            "step attempts still running after the grace period are abandoned; they run again at the next start"
        );
    }
    if let Some(why @ HostStop::Twin) = *stopped.borrow_and_update() {
        anyhow::bail!("this server stopped: {why}");
    }
    tracing::info!("stopped; unfinished runs resume from their journals at the next start");
    Ok(ExitCode::SUCCESS)
}

async fn bind(address: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))
}

/// Without a tenants file: one tenant, `default`, with a token made for
/// this process only.
fn single_tenant() -> Tenants {
    let mut tenants = Tenants::default();
    let token = tenants.add_token(&TenantId::default_tenant());
    eprintln!("no --config: serving the single tenant `default`; its token, for this process only, is");
    eprintln!("  {token}");
    eprintln!(
        "for lasting tokens: `stepstone tenant add default --config stepstone.toml`, then `serve --config stepstone.toml`"
    );
    tenants
}

/// Ends at SIGTERM or Ctrl-C, or once this host stops driving runs for
/// another process under its id.
async fn shutdown(mut stopped: watch::Receiver<Option<HostStop>>) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => drop(signal.recv().await),
            Err(e) => {
                tracing::warn!("cannot watch for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
        _ = stopped.wait_for(|why| *why == Some(HostStop::Twin)) => {}
    }
    tracing::info!("shutting down: finishing requests in flight");
}

/// `stepstone tenant add`: a new token for a tenant, printed once.
pub fn add_tenant(id: &TenantId, config: &Path) -> anyhow::Result<ExitCode> {
    let mut tenants = Tenants::load(config)?;
    let token = tenants.add_token(id);
    tenants.save(config)?;
    eprintln!(
        "tenant `{id}` has a new token in {}; it is shown only this once:",
        config.display()
    );
    println!("{token}");
    Ok(ExitCode::SUCCESS)
}
