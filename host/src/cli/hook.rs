//! `stepstone hook`: a tenant's HTTP hooks, in the embedded store (which
//! `stepstone serve` answers them from) or over `--server`.

use std::process::ExitCode;

use clap::Subcommand;
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
    Put {
        name: HookName,
        /// A component name (each request runs the build it points at then) or digest.
        component: ComponentName,
        workflow: WorkflowName,
        /// A request header passed into the run's input (at most 16).
        #[arg(long = "header")]
        headers: Vec<String>,
    },
    /// List the hooks.
    List,
    /// Delete a hook; the runs it started go on.
    Rm { name: HookName },
}

/// `stepstone hook` for the embedded tenant.
pub async fn local(runtime: &Runtime, command: HookCommand) -> anyhow::Result<ExitCode> {
    let tenant = TenantId::default_tenant();
    let answer = match command {
        HookCommand::Put {
            name,
            component,
            workflow,
            headers,
        } => {
            let hook = Hook {
                component,
                workflow,
                headers,
            };
            let hook = runtime.put_hook(&tenant, &name, hook).await?;
            named(&name, &hook)
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
    print(&answer)
}

/// `stepstone hook` for the token's tenant, through `/v1/hooks`.
pub async fn remote(remote: &Remote, command: HookCommand) -> anyhow::Result<ExitCode> {
    let answer = match command {
        HookCommand::Put {
            name,
            component,
            workflow,
            headers,
        } => {
            let hook = json!({"component": component, "workflow": workflow, "headers": headers});
            let request = remote.request(Method::PUT, &format!("/v1/hooks/{name}")).json(&hook);
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
    print(&answer)
}

fn named(name: &HookName, hook: &Hook) -> Value {
    json!({ "name": name, "hook": hook })
}

fn print(answer: &Value) -> anyhow::Result<ExitCode> {
    println!("{}", serde_json::to_string_pretty(answer)?);
    Ok(ExitCode::SUCCESS)
}
