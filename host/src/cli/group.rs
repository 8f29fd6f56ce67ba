//! `stepstone group`: many runs started at once on a server, counted,
//! followed as they end, and cancelled together (a group's runs are driven
//! by `stepstone serve`, so these take `--server`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};
use stepstone::store::GroupId;

use super::read_file;
use super::remote::Remote;

/// The longest `group events` follows a group.
const FOLLOW_FOR: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

#[derive(Subcommand)]
pub enum GroupCommand {
    /// Start the runs of FILE, `{"group_id": ..., "runs": [...]}` as `POST
    /// /v1/groups` takes it, and print the group's id and run ids.
    Start { file: PathBuf },
    /// How many of the group's runs are in each state.
    Status { id: GroupId },
    /// Print each run of the group as it ends (a JSON line each), until all have.
    Events { id: GroupId },
    /// Cancel every unfinished run of the group.
    Cancel {
        id: GroupId,
        #[arg(long, default_value = "the group was cancelled")]
        reason: String,
    },
}

/// `stepstone group` for the token's tenant, through `/v1/groups`.
pub async fn remote(remote: &Remote, command: GroupCommand) -> anyhow::Result<ExitCode> {
    let answer = match command {
        GroupCommand::Start { file } => {
            let body: Value = serde_json::from_slice(&read_file(&file)?)
                .with_context(|| format!("{} is not JSON", file.display()))?;
            remote
                .send(remote.request(Method::POST, "/v1/groups").json(&body))
                .await?
        }
        GroupCommand::Status { id } => {
            remote
                .send(remote.request(Method::GET, &format!("/v1/groups/{id}")))
                .await?
        }
        GroupCommand::Events { id } => return follow(remote, &id).await,
        GroupCommand::Cancel { id, reason } => {
            let request = remote.request(Method::POST, &format!("/v1/groups/{id}/cancel"));
            remote.send(request.json(&json!({"reason": reason}))).await?;
            return Ok(ExitCode::SUCCESS);
        }
    };
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(ExitCode::SUCCESS)
}

/// Prints the data of each `run` event of the group's stream as it comes.
async fn follow(remote: &Remote, id: &GroupId) -> anyhow::Result<ExitCode> {
    // As long as the group takes, not the client's usual 120 s.
    let request = remote.request(Method::GET, &format!("/v1/groups/{id}/events"));
    let response = remote.stream(request.timeout(FOLLOW_FOR)).await?;
    super::remote::each_event(response, |event| {
        if event.event == "run" {
            println!("{}", event.data);
        }
        true
    })
    .await?;
    Ok(ExitCode::SUCCESS)
}
