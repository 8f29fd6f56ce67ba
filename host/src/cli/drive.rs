//! Subcommands that make runs progress: `run`, `resume`, `signal`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use stepstone::journal::Outcome;
use stepstone::runtime::{AttemptUnderWay, DEADLINE, Moment, Progress, Restart, RunError, Runtime, START, Submission};
use stepstone::store::{ComponentName, ConcurrencyKey, RunId, RunTag, SignalId, SignalName, TenantId};

use super::read_file;

#[derive(Args)]
pub struct RunArgs {
    /// The component (.wasm) that exports the workflow.
    component: PathBuf,
    /// The workflow to run.
    workflow: String,
    /// The workflow's input, as JSON.
    #[arg(long, default_value = "null")]
    input: String,
    /// The run's id: an idempotency key. An existing run with this id and
    /// the same input is continued, not started again.
    #[arg(long)]
    run_id: Option<RunId>,
    /// Link another component to the run, so the workflow can call its steps
    /// as `NAME/step`.
    #[arg(long = "link", value_name = "NAME=COMPONENT.wasm", value_parser = parse_link)]
    links: Vec<(String, PathBuf)>,
    /// Leave a wait longer than this suspended in the store and exit, for
    /// `stepstone resume` to pick up later.
    #[arg(long, value_parser = humantime::parse_duration)]
    detach_after: Option<Duration>,
    #[command(flatten)]
    when: RunLifecycle,
}

/// When a run starts (at once, or later: it waits durably, in the store,
/// and starts on time after a restart), by when it must have ended, and
/// whom it tells once it has.
#[derive(Args)]
pub struct RunLifecycle {
    /// Start at this time (RFC 3339, e.g. 2026-12-24T18:00:00Z), at most a
    /// year and a day ahead.
    #[arg(long, conflicts_with = "delay")]
    pub start_at: Option<String>,
    /// Start this long from now (e.g. 4s, 1h 30m).
    #[arg(long)]
    pub delay: Option<String>,
    /// Past this time (RFC 3339) the run is cancelled, compensates, and
    /// ends `deadline-exceeded`.
    #[arg(long, conflicts_with = "timeout")]
    pub deadline: Option<String>,
    /// The deadline as a duration from the run's start (e.g. 1h).
    #[arg(long)]
    pub timeout: Option<String>,
    /// POST the run's end to this URL, signed with the secret
    /// `notify-signing-key` (sent by `stepstone serve`); its origin must be
    /// allowed outbound.
    #[arg(long)]
    pub notify: Option<String>,
    /// A tag to search runs by (`stepstone list --tag`); repeat for more, up to 16.
    #[arg(long = "tag")]
    pub tags: Vec<RunTag>,
    /// The run's place in line when slots are scarce, 1 (first) to 9 (last).
    #[arg(long, default_value_t = 5)]
    pub priority: u64,
    /// At most --concurrency-limit runs sharing this key execute at once;
    /// the others wait, queued.
    #[arg(long)]
    pub concurrency_key: Option<ConcurrencyKey>,
    /// How many runs of the key execute at once (default 1); without
    /// --concurrency-key, the key is the workflow's name.
    #[arg(long)]
    pub concurrency_limit: Option<u64>,
}

impl RunLifecycle {
    fn apply(&self, submission: &mut Submission) -> Result<(), RunError> {
        submission.start_at = Moment::parse(START, self.start_at.as_deref(), self.delay.as_deref())?;
        submission.deadline = Moment::parse(DEADLINE, self.deadline.as_deref(), self.timeout.as_deref())?;
        submission.notify = self.notify.clone();
        submission.tags = self.tags.clone();
        submission.priority = self.priority;
        if self.concurrency_key.is_some() || self.concurrency_limit.is_some() {
            submission.limit_concurrency(self.concurrency_key.clone(), self.concurrency_limit)?;
        }
        Ok(())
    }
}

/// A component reference and the version it names: `NAME@3` is version 3
/// of `NAME`; a reference without `@` means the latest build.
pub fn versioned(reference: &str) -> anyhow::Result<(&str, Option<u64>)> {
    match reference.rsplit_once('@') {
        None => Ok((reference, None)),
        Some((name, version)) => {
            let version = version
                .parse()
                .ok()
                .filter(|version| *version > 0)
                .with_context(|| format!("`{reference}`: the version after `@` is a number from 1"))?;
            Ok((name, Some(version)))
        }
    }
}

fn parse_link(link: &str) -> Result<(String, PathBuf), String> {
    match link.split_once('=') {
        Some((name, path)) if !name.is_empty() && !name.contains('/') => Ok((name.into(), path.into())),
        _ => Err(format!("`{link}` is not NAME=PATH")),
    }
}

pub async fn run(runtime: &Runtime, args: RunArgs) -> anyhow::Result<ExitCode> {
    let tenant = TenantId::default_tenant();
    let component = load(runtime, &args.component).await?;
    let mut links = BTreeMap::new();
    for (name, path) in &args.links {
        links.insert(name.clone(), load(runtime, path).await?);
    }
    let mut submission = Submission::new(component, &args.workflow, &args.input);
    submission.run_id = args.run_id;
    submission.links = links;
    args.when.apply(&mut submission)?;
    let run = runtime.submit(&tenant, submission).await?;
    tracing::info!(run = %run, "run started");
    // A run that continues as new is driven through its chain, so the
    // output printed is the chain's final one.
    let (generation, progress) = runtime
        .runs()
        .run_chain_to_end(&tenant, &run, args.detach_after)
        .await
        .map_err(|e| stopped(&run, e))?;
    report(runtime, &tenant, &generation, progress).await
}

/// Why driving `run` stopped. A storage failure leaves the run as it was,
/// and says so, with how to go on.
fn stopped(run: &RunId, error: RunError) -> anyhow::Error {
    if error.is_storage_failure() {
        anyhow::Error::new(error).context(format!(
            "run {run} stopped on a storage failure; it has not failed: what it recorded is kept, and `stepstone resume` continues it once storage recovers"
        ))
    } else {
        anyhow::Error::new(error).context(format!("run {run}"))
    }
}

async fn load(
    runtime: &Runtime,
    path: &std::path::Path,
) -> anyhow::Result<std::sync::Arc<stepstone::component::Loaded>> {
    let bytes = read_file(path)?;
    Ok(runtime.validate(&path.display().to_string(), bytes).await?)
}

/// Prints how a run ended (its output as the last line of stdout) or where
/// it waits, and picks the exit code.
async fn report(runtime: &Runtime, tenant: &TenantId, run: &RunId, progress: Progress) -> anyhow::Result<ExitCode> {
    match progress {
        Progress::Finished(Outcome::Completed { output }) => {
            // A stored output is its chain's last generation's.
            let last = runtime.runs().status(tenant, run).await?.run_id;
            println!("{}", runtime.runs().payload_text(tenant, &last, output).await?);
            Ok(ExitCode::SUCCESS)
        }
        Progress::Finished(Outcome::Failed { kind, message }) => {
            anyhow::bail!("run {run} failed ({kind}): {message}")
        }
        Progress::Finished(Outcome::Cancelled { reason }) => anyhow::bail!("run {run} was cancelled: {reason}"),
        // Driven through its chain, a run never stops here continued.
        Progress::Finished(Outcome::Continued { next }) => {
            println!("run {run} continued as {next}");
            Ok(ExitCode::SUCCESS)
        }
        Progress::Suspended(_) => {
            let status = runtime.status(tenant, run).await?;
            println!("run {run} suspended: {}", serde_json::to_string(&status.state)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

pub async fn upload(runtime: &Runtime, path: &std::path::Path, name: Option<&str>) -> anyhow::Result<ExitCode> {
    let name = name.map(ComponentName::new).transpose()?;
    let loaded = runtime
        .upload(&TenantId::default_tenant(), read_file(path)?, name.as_ref())
        .await?;
    let info = serde_json::json!({
        "name": name.map(|n| n.to_string()),
        "digest": loaded.digest,
        "workflows": loaded.manifest.workflows,
        "steps": loaded.manifest.steps,
    });
    println!("{}", serde_json::to_string_pretty(&info)?);
    Ok(ExitCode::SUCCESS)
}

pub async fn start(
    runtime: &Runtime,
    component: &str,
    workflow: &str,
    input: &str,
    run_id: Option<RunId>,
    when: &RunLifecycle,
) -> anyhow::Result<ExitCode> {
    let tenant = TenantId::default_tenant();
    let component = match versioned(component)? {
        (name, Some(version)) => {
            (runtime
                .catalog()
                .component_version(&tenant, &ComponentName::new(name)?, version))
            .await?
        }
        (reference, None) => runtime.component(&tenant, reference).await?,
    };
    let mut submission = Submission::new(component, workflow, input);
    submission.run_id = run_id;
    when.apply(&mut submission)?;
    let run = runtime.submit(&tenant, submission).await?;
    eprintln!("run {run} submitted; on the embedded store `stepstone resume` drives it");
    println!("{run}");
    Ok(ExitCode::SUCCESS)
}

pub async fn resume(runtime: &Runtime, paused: Option<&RunId>, detach_after: Duration) -> anyhow::Result<ExitCode> {
    let tenant = &TenantId::default_tenant();
    if let Some(run) = paused {
        (runtime.runs().resume(tenant, run).await).with_context(|| format!("cannot resume run {run}"))?;
    }
    let listing = runtime.runs().unfinished(tenant).await?;
    tracing::info!(runs = listing.runs.len(), "resuming unfinished runs");
    for unreadable in &listing.unreadable {
        eprintln!(
            "error: run {} cannot be resumed: {}; the other runs go on",
            unreadable.run_id, unreadable.error
        );
    }
    // A run that continues as new is followed to its next generation,
    // unless that one is listed too (a crash came between the two), so
    // that no generation is driven twice at once.
    let listed: std::collections::HashSet<&RunId> = listing.runs.iter().collect();
    let listed = &listed;
    let driven = futures::future::join_all(listing.runs.iter().map(|run| async move {
        let mut current = run.clone();
        loop {
            match runtime.run_to_end(tenant, &current, Some(detach_after)).await {
                Ok(Progress::Finished(Outcome::Continued { next })) if !listed.contains(&next) => current = next,
                progress => return (current, progress),
            }
        }
    }));
    let mut failures = listing.unreadable.len();
    for (run, progress) in driven.await {
        match progress {
            Ok(Progress::Finished(Outcome::Completed { output })) => println!("{run} completed {output}"),
            Ok(Progress::Finished(Outcome::Failed { kind, message })) => println!("{run} failed ({kind}): {message}"),
            Ok(Progress::Finished(Outcome::Cancelled { reason })) => println!("{run} cancelled: {reason}"),
            Ok(Progress::Finished(Outcome::Continued { next })) => println!("{run} continued as {next}"),
            Ok(Progress::Suspended(suspension)) => println!("{run} suspended until {}", suspension.wake_at_ms),
            Err(e @ RunError::DrivenElsewhere { .. }) => eprintln!("{e}"),
            Err(e) => {
                failures += 1;
                eprintln!("error: {:#}", stopped(&run, e));
            }
        }
    }
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub async fn cancel(runtime: &Runtime, run: &RunId, reason: &str) -> anyhow::Result<ExitCode> {
    runtime
        .cancel(&TenantId::default_tenant(), run, reason)
        .await
        .with_context(|| format!("cannot cancel run {run}"))?;
    Ok(ExitCode::SUCCESS)
}

pub async fn pause(
    runtime: &Runtime,
    run: &RunId,
    reason: &str,
    under_way: AttemptUnderWay,
) -> anyhow::Result<ExitCode> {
    runtime
        .runs()
        .pause(&TenantId::default_tenant(), run, reason, under_way)
        .await
        .with_context(|| format!("cannot pause run {run}"))?;
    Ok(ExitCode::SUCCESS)
}

pub async fn advance(runtime: &Runtime, run: &RunId) -> anyhow::Result<ExitCode> {
    let advanced = runtime
        .runs()
        .advance(&TenantId::default_tenant(), run)
        .await
        .with_context(|| format!("cannot advance run {run}"))?;
    println!("{}", serde_json::to_string_pretty(&advanced)?);
    Ok(ExitCode::SUCCESS)
}

pub async fn restart(
    runtime: &Runtime,
    run: &RunId,
    seq: u64,
    component: Option<&str>,
    run_id: Option<RunId>,
    keep_old: bool,
) -> anyhow::Result<ExitCode> {
    let tenant = TenantId::default_tenant();
    let component = match component {
        Some(reference) => Some(runtime.component(&tenant, reference).await?),
        None => None,
    };
    let restart = Restart {
        seq,
        component,
        run_id,
        keep_old,
    };
    let restarted = (runtime.runs().restart(&tenant, run, restart).await)
        .with_context(|| format!("cannot restart run {run} from seq {seq}"))?;
    eprintln!(
        "run {} submitted; on the embedded store `stepstone resume` drives it",
        restarted.run_id
    );
    super::print_json(&serde_json::to_value(&restarted)?)
}

pub async fn signal(
    runtime: &Runtime,
    run: &RunId,
    name: &str,
    payload: &str,
    id: Option<&SignalId>,
) -> anyhow::Result<ExitCode> {
    let name = SignalName::new(name)?;
    runtime
        .runs()
        .signal_with_id(&TenantId::default_tenant(), run, &name, payload, id)
        .await
        .with_context(|| format!("cannot signal run {run}"))?;
    Ok(ExitCode::SUCCESS)
}
