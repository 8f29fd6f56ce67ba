//! `stepstone schedule`: a tenant's cron schedules, in the embedded store
//! (where `stepstone serve` fires them) or over `--server`.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};
use stepstone::runtime::Runtime;
use stepstone::schedules::{NewSchedule, Overlap};
use stepstone::store::{ComponentName, ScheduleName, TenantId, WorkflowName};

use super::remote::Remote;

#[derive(Subcommand)]
pub enum ScheduleCommand {
    /// Add a schedule: a run of WORKFLOW at every fire of the cron pattern
    /// (UTC), each with the id `NAME-{fire time}`. Schedules fire while
    /// `stepstone serve` runs.
    Add(AddArgs),
    /// List the schedules, with when each fires next.
    List,
    /// Pause a schedule: it fires nothing until resumed.
    Pause { name: ScheduleName },
    /// Resume a paused schedule; what it would have fired meanwhile is not made up.
    Resume { name: ScheduleName },
    /// Delete a schedule; the runs it started go on.
    Rm { name: ScheduleName },
}

#[derive(Args)]
pub struct AddArgs {
    name: ScheduleName,
    /// A component name (each fire runs the build it points at then) or digest.
    component: ComponentName,
    workflow: WorkflowName,
    /// Five fields (`minute hour day month weekday`) or six with seconds first, e.g. "0 2 * * *".
    #[arg(long)]
    cron: String,
    /// Each run's input, as JSON.
    #[arg(long, default_value = "null")]
    input: String,
    /// A fire while the last run goes on: `skip` it, `buffer-one` (start it
    /// once that run ends), or `allow` it.
    #[arg(long, default_value = "skip", value_parser = overlap)]
    overlap: Overlap,
    /// How far back fires missed while no host ran are made up (at most
    /// 10), e.g. `1h` (the default) or `0s`.
    #[arg(long)]
    catch_up: Option<String>,
}

fn overlap(text: &str) -> Result<Overlap, String> {
    serde_json::from_value(Value::String(text.to_owned()))
        .map_err(|_| format!("`{text}` is none of skip, buffer-one, allow"))
}

impl AddArgs {
    fn into_new(self) -> anyhow::Result<NewSchedule> {
        Ok(NewSchedule {
            name: self.name,
            component: self.component,
            workflow: self.workflow,
            input: serde_json::from_str(&self.input).context("--input is not valid JSON")?,
            cron: self.cron,
            overlap: self.overlap,
            catch_up: self.catch_up,
        })
    }
}

/// `stepstone schedule` for the embedded tenant.
pub async fn local(runtime: &Runtime, command: ScheduleCommand) -> anyhow::Result<ExitCode> {
    let (schedules, tenant) = (runtime.schedules(), TenantId::default_tenant());
    let answer = match command {
        ScheduleCommand::Add(add) => {
            serde_json::to_value(runtime.runs().add_schedule(&tenant, add.into_new()?).await?)?
        }
        ScheduleCommand::List => json!({ "schedules": schedules.list(&tenant).await? }),
        ScheduleCommand::Pause { name } => serde_json::to_value(schedules.set_paused(&tenant, &name, true).await?)?,
        ScheduleCommand::Resume { name } => serde_json::to_value(schedules.set_paused(&tenant, &name, false).await?)?,
        ScheduleCommand::Rm { name } => {
            anyhow::ensure!(schedules.delete(&tenant, &name).await?, "no schedule `{name}`");
            return Ok(ExitCode::SUCCESS);
        }
    };
    super::print_json(&answer)
}

/// `stepstone schedule` for the token's tenant, through `/v1/schedules`.
pub async fn remote(remote: &Remote, command: ScheduleCommand) -> anyhow::Result<ExitCode> {
    let answer = match command {
        ScheduleCommand::Add(add) => {
            let request = remote.request(Method::POST, "/v1/schedules").json(&add.into_new()?);
            remote.send(request).await?
        }
        ScheduleCommand::List => remote.send(remote.request(Method::GET, "/v1/schedules")).await?,
        ScheduleCommand::Pause { name } => {
            let path = format!("/v1/schedules/{name}/pause");
            remote.send(remote.request(Method::POST, &path)).await?
        }
        ScheduleCommand::Resume { name } => {
            let path = format!("/v1/schedules/{name}/resume");
            remote.send(remote.request(Method::POST, &path)).await?
        }
        ScheduleCommand::Rm { name } => {
            let path = format!("/v1/schedules/{name}");
            remote.send(remote.request(Method::DELETE, &path)).await?;
            return Ok(ExitCode::SUCCESS);
        }
    };
    super::print_json(&answer)
}
