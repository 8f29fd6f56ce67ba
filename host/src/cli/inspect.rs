//! Subcommands that look at runs without moving them: `status`, `history`,
//! `list`, `replay`, `stream`.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use futures::StreamExt;
use stepstone::clock::rfc3339;
use stepstone::journal::{Entry, Recorded};
use stepstone::runtime::{ReplayReport, RunQuery, RunState, RunStatus, Runtime, StreamEvent};
use stepstone::sandbox::kind_name;
use stepstone::store::{RunId, StreamName, TenantId};

use super::read_file;

pub async fn status(runtime: &Runtime, run: &RunId, json: bool) -> anyhow::Result<ExitCode> {
    let status = runtime.status(&TenantId::default_tenant(), run).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        println!("{}", status_line(&status));
    }
    Ok(ExitCode::SUCCESS)
}

/// Waits for a run to finish, for at most `timeout`, then prints its status.
pub async fn wait(runtime: &Runtime, run: &RunId, timeout: Duration) -> anyhow::Result<ExitCode> {
    let status = runtime.runs().wait(&TenantId::default_tenant(), run, timeout).await?;
    println!("{}", serde_json::to_string_pretty(&status)?);
    Ok(exit_code(status.state.name()))
}

/// 0 for a completed run, 1 for one that failed or was cancelled, 2 for
/// one still going when the wait ended.
pub fn exit_code(state: &str) -> ExitCode {
    match state {
        "completed" => ExitCode::SUCCESS,
        "failed" | "cancelled" => ExitCode::FAILURE,
        _ => ExitCode::from(2),
    }
}

pub async fn list(runtime: &Runtime, query: &RunQuery, json: bool) -> anyhow::Result<ExitCode> {
    let (listing, _) = runtime.search().page(&TenantId::default_tenant(), query).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&listing.runs)?);
    } else {
        listing
            .runs
            .iter()
            .for_each(|status| println!("{}", status_line(status)));
    }
    for unreadable in &listing.unreadable {
        eprintln!("error: run {} cannot be read: {}", unreadable.run_id, unreadable.error);
    }
    Ok(if listing.unreadable.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn status_line(status: &RunStatus) -> String {
    let state = match &status.state {
        RunState::Scheduled { start_at_ms } => format!("scheduled to start at {}", rfc3339(*start_at_ms)),
        RunState::Queued { concurrency_key } => format!("queued for a place of concurrency key `{concurrency_key}`"),
        RunState::Pending => "pending".to_owned(),
        RunState::Running => "running".to_owned(),
        RunState::Retrying { seq, failed_attempts } => {
            format!("retrying seq {seq} after {failed_attempts} failed attempts")
        }
        RunState::Sleeping { seq, until_ms } => format!("sleeping at seq {seq} until {until_ms}"),
        RunState::AwaitingSignal { seq, signal, until_ms } => {
            format!("awaiting signal `{signal}` at seq {seq} until {until_ms}")
        }
        RunState::Completed {
            output: Some(output), ..
        } => format!("completed: {output}"),
        RunState::Completed {
            output_stored: Some(stored),
            ..
        } => format!(
            "completed: its output is stored apart ({} bytes, sha256 {})",
            stored.bytes, stored.sha256
        ),
        RunState::Completed { .. } => "completed".into(),
        RunState::Failed { kind, message } => format!("failed ({kind}): {message}"),
        RunState::Cancelled { reason } => format!("cancelled: {reason}"),
        RunState::Continued { continued_as } => format!("continued as {continued_as}"),
    };
    let generation = status.chain.as_ref().map_or_else(String::new, |link| {
        format!("  generation {} of {}", link.generation, link.root)
    });
    format!(
        "{}  {}  {} calls  {state}{generation}",
        status.run_id, status.workflow, status.journaled_calls
    )
}

pub async fn history(runtime: &Runtime, run: &RunId, json: bool) -> anyhow::Result<ExitCode> {
    let entries = runtime.history(&TenantId::default_tenant(), run).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:>5}  {:<13}  {:<20}  {:>8}  {:>9}  outcome",
        "seq", "kind", "name", "attempts", "duration"
    );
    for entry in &entries {
        println!(
            "{:>5}  {:<13}  {:<20}  {:>8}  {:>7}ms  {}",
            entry.seq,
            entry.call.kind.to_string(),
            entry.call.name,
            entry.attempts,
            entry.finished_at_ms.saturating_sub(entry.started_at_ms),
            outcome(entry)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the values of `run`'s stream `name` from `offset` on, reading
/// on (with `follow`) until the run ends.
pub async fn stream(
    runtime: &Runtime,
    run: &RunId,
    name: StreamName,
    offset: u64,
    follow: bool,
) -> anyhow::Result<ExitCode> {
    let mut from = offset;
    loop {
        let events = runtime
            .runs()
            .read_stream(&TenantId::default_tenant(), run, name.clone(), from, follow)
            .await?;
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            match event? {
                StreamEvent::Value(value) => {
                    println!("{}", value.value);
                    from = value.offset + 1;
                }
                StreamEvent::End(_) => return Ok(ExitCode::SUCCESS),
            }
        }
        if !follow {
            return Ok(ExitCode::SUCCESS);
        }
    }
}

/// Prints the payload `run` stored apart under `sha256`, as it was sent or
/// returned.
pub async fn payload(runtime: &Runtime, run: &RunId, sha256: &str) -> anyhow::Result<ExitCode> {
    let stored = (runtime.runs())
        .stored_payload(&TenantId::default_tenant(), run, sha256)
        .await?;
    let Some(text) = stored else {
        anyhow::bail!(
            "run {run} stored no payload named {sha256}: `stepstone status {run}` and `stepstone history {run}` name those it did"
        );
    };
    println!("{text}");
    Ok(ExitCode::SUCCESS)
}

fn outcome(entry: &Entry) -> String {
    match &entry.recorded {
        Recorded::Step { result: Ok(output) } => format!("ok {output}"),
        Recorded::Step { result: Err(e) } => format!("{} {}", kind_name(e.kind), e.message),
        Recorded::Slept => "woke".into(),
        Recorded::Signal {
            payload: Some(payload), ..
        } => format!("received {payload}"),
        Recorded::Signal { payload: None, .. } => "timed out".into(),
        Recorded::Value(value) => value.to_string(),
        Recorded::MemoSet { value } => format!("set {value}"),
        Recorded::Winner(index) => format!("handle #{index} first"),
        Recorded::Child { run: Ok(child) } => format!("started {child}"),
        Recorded::Child { run: Err(refused) } | Recorded::ChildEnded { result: Err(refused) } => {
            format!("failed {refused}")
        }
        Recorded::ChildEnded { result: Ok(output) } => format!("ok {output}"),
        Recorded::Cancelled { reason } => format!("cancelled: {reason}"),
        Recorded::Patched => "takes the change".into(),
        Recorded::Appended { value } => format!("appended {value}"),
    }
}

pub async fn replay(runtime: &Runtime, run: &RunId, component: Option<&Path>) -> anyhow::Result<ExitCode> {
    let build = match component {
        Some(path) => Some(runtime.validate(&path.display().to_string(), read_file(path)?).await?),
        None => None,
    };
    match runtime.runs().replay(&TenantId::default_tenant(), run, build).await? {
        ReplayReport::Identical { calls } => {
            println!("deterministic: output identical ({calls} calls replayed)");
            Ok(ExitCode::SUCCESS)
        }
        ReplayReport::ConsistentSoFar { calls } => {
            println!("deterministic so far: the run is unfinished; its {calls} recorded calls replayed identically");
            Ok(ExitCode::SUCCESS)
        }
        ReplayReport::Diverged { seq, message } => {
            match seq {
                Some(seq) => println!("divergence at seq {seq}: {message}"),
                None => println!("divergence: {message}"),
            }
            Ok(ExitCode::FAILURE)
        }
    }
}
