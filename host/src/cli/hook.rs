//! `stepstone hook`: a tenant's HTTP hooks, in the embedded store (which
//! `stepstone serve` answers them from) or over `--server`.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};
use stepstone::http_hooks::Hook;
use stepstone::runtime::Runtime;
use stepstone::store::{ComponentName, HookName, TenantId, WorkflowName};

use super::remote::Remote;

#[derive(Subcommand)]
pub enum HookCommand {
    /// Add or replace a hook: `/hooks/{tenant}/NAME` then starts a run of
    /// WORKFLOW for each request signed with the tenant's secret
    /// `hook-signing-key`, its input the request.
    Put(PutArgs),
    /// List the hooks.
    List,
    /// Delete a hook; the runs it started go on.
    Rm { name: HookName },
}

#[derive(Args)]
pub struct PutArgs {
    name: HookName,
    /// A component name (each request runs the build it points at then) or digest.
    component: ComponentName,
    workflow: WorkflowName,
    /// A request header passed into the run's input (at most 16).
    #[arg(long = "header")]
    headers: Vec<String>,
}

impl PutArgs {
    fn hook(&self) -> Hook {
        Hook {
            component: self.component.clone(),
            workflow: self.workflow.clone(),
            headers: self.headers.clone(),
        }
    }
}

/// `stepstone hook` for the embedded tenant.
pub async fn local(runtime: &Runtime, command: HookCommand) -> anyhow::Result<ExitCode> {
    let tenant = TenantId::default_tenant();
    let answer = match command {
        HookCommand::Put(put) => {
            let hook = runtime.put_hook(&tenant, &put.name, put.hook()).await?;
            named(&put.name, &hook)
        }
        HookCommand::List => {
            let hooks = runtime.hooks().list(&tenant).await?;
            json!({ "hooks": hooks.iter().map(|(name, hook)| named(name, hook)).collect::<Vec<_>>() })
        }
        HookCommand::Rm { name } => {
            anyhow::ensure!(runtime.hooks().delete(&tenant, &name).await?, "no hook `{name}`");
            return Ok(ExitCode::SUCCESS);
        }
    };
    super::print_json(&answer)
}

/// `stepstone hook` for the token's tenant, through `/v1/hooks`.
pub async fn remote(remote: &Remote, command: HookCommand) -> anyhow::Result<ExitCode> {
    let answer = match command {
        HookCommand::Put(put) => {
            let request = remote
                .request(Method::PUT, &format!("/v1/hooks/{}", put.name))
                .json(&put.hook());
            remote.send(request).await?
        }
        HookCommand::List => remote.send(remote.request(Method::GET, "/v1/hooks")).await?,
        HookCommand::Rm { name } => {
            remote
                .send(remote.request(Method::DELETE, &format!("/v1/hooks/{name}")))
                .await?;
            return Ok(ExitCode::SUCCESS);
        }
    };
    super::print_json(&answer)
}

fn named(name: &HookName, hook: &Hook) -> Value {
    json!({ "name": name, "hook": hook })
}
