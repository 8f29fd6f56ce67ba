//! `stepstone batch`: pausing or resuming many unfinished runs at once, in
//! the embedded store or over `--server`, every page until the last.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::json;
use stepstone::runtime::{AttemptUnderWay, BatchAction, BatchPage, RunSelector, Runtime};
use stepstone::store::{ComponentName, RunId, RunTag, TenantId};

use super::remote::Remote;

#[derive(Subcommand)]
pub enum BatchCommand {
    /// Pause the unfinished runs the filters pick (none: every one): each
    /// keeps its place and buffered signals and starts nothing until
    /// resumed. Runs started after are not paused.
    Pause {
        #[command(flatten)]
        filters: Filters,
        #[arg(long, default_value = "paused by a batch")]
        reason: String,
        /// Stop each run's step attempt under way (it runs again once
        /// resumed) instead of letting it finish.
        #[arg(long)]
        interrupt: bool,
    },
    /// Resume the paused runs the filters pick (none: every one).
    Resume {
        #[command(flatten)]
        filters: Filters,
    },
}

/// Which unfinished runs: those passing every filter given.
#[derive(Args)]
pub struct Filters {
    /// Only runs of this component: every version of a name, or one build by its digest.
    #[arg(long)]
    component: Option<ComponentName>,
    /// Only runs of this workflow.
    #[arg(long)]
    workflow: Option<String>,
    /// Only runs given this tag.
    #[arg(long)]
    tag: Option<RunTag>,
}

impl BatchCommand {
    fn filters(&self) -> &Filters {
        match self {
            Self::Pause { filters, .. } | Self::Resume { filters } => filters,
        }
    }

    fn path(&self) -> &'static str {
        match self {
            Self::Pause { .. } => "/v1/batch/pause",
            Self::Resume { .. } => "/v1/batch/resume",
        }
    }
}

/// `stepstone batch` on the embedded store's default tenant.
pub async fn local(runtime: &Runtime, command: BatchCommand) -> anyhow::Result<ExitCode> {
    let tenant = TenantId::default_tenant();
    let filters = command.filters();
    let builds = match &filters.component {
        Some(component) => Some(runtime.catalog().builds(&tenant, component.as_str()).await?),
        None => None,
    };
    let action = match &command {
        BatchCommand::Pause { reason, interrupt, .. } => {
            BatchAction::Pause(reason, AttemptUnderWay::stopped_if(*interrupt))
        }
        BatchCommand::Resume { .. } => BatchAction::Resume,
    };
    let mut selector = RunSelector {
        builds,
        workflow: filters.workflow.clone(),
        tag: filters.tag.clone(),
        after: None,
    };
    let mut runs = Vec::new();
    loop {
        let page = runtime.runs().batch(&tenant, &selector, action).await?;
        runs.extend(page.runs);
        match page.next {
            Some(next) => selector.after = Some(next),
            None => return print(&runs),
        }
    }
}

/// `stepstone batch` for the token's tenant, through `/v1/batch`.
pub async fn remote(remote: &Remote, command: BatchCommand) -> anyhow::Result<ExitCode> {
    let filters = command.filters();
    let mut body = json!({
        "component": filters.component,
        "workflow": filters.workflow,
        "tag": filters.tag,
    });
    if let BatchCommand::Pause { reason, interrupt, .. } = &command {
        body["reason"] = json!(reason);
        body["interrupt"] = json!(interrupt);
    }
    let mut runs = Vec::new();
    loop {
        let answer = remote
            .send(remote.request(Method::POST, command.path()).json(&body))
            .await?;
        let page: BatchPage = serde_json::from_value(answer)?;
        runs.extend(page.runs);
        match page.next {
            Some(next) => body["after"] = json!(next),
            None => return print(&runs),
        }
    }
}

fn print(runs: &[RunId]) -> anyhow::Result<ExitCode> {
    super::print_json(&json!({ "count": runs.len(), "runs": runs }))
}
