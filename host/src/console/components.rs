//! The components pages: every build the tenant stores with its names and
//! size, and one build's exports, digest, versions and the runs using it.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::extract::{Form, Path, Query};
use super::layout::{self, Nav};
use super::runs::PAGE_SIZE;
use super::{PageError, Signed};
use crate::api::state::ApiState;
use crate::runtime::{AttemptUnderWay, BatchAction, RunQuery, RunSelector};
use crate::store::ComponentName;

/// `GET /ui/components`.
pub async fn list(State(state): State<ApiState>, signed: Signed) -> Result<Response, PageError> {
    let tenant = &signed.0.tenant;
    let stored = state.runtime().catalog().stored_components(&tenant.id).await?;
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, digest) in state.runtime().catalog().component_names(&tenant.id).await? {
        names.entry(digest).or_default().push(name.to_string());
    }
    let used: u64 = stored.iter().map(|(_, size)| size).sum();
    let quotas = &tenant.quotas;
    let body = html! {
        h1 { "Components" }
        p.quota {
            (stored.len()) " of " (quotas.max_components) " components stored, "
            (layout::bytes(used)) " of " (layout::bytes(quotas.max_component_storage_bytes))
        }
        @if stored.is_empty() {
            p.empty { "No component stored: upload one with " code { "stepstone upload" } " or " code { "POST /v1/components" } "." }
        } @else {
            div.scroll {
                table.components {
                    thead { tr { th { "Names" } th { "Digest" } th.num { "Size" } } }
                    tbody {
                        @for (digest, size) in &stored {
                            tr {
                                td {
                                    @for name in names.get(digest).into_iter().flatten() {
                                        a href={ "/ui/components/" (name) } { (name) } " "
                                    }
                                }
                                td { a href={ "/ui/components/" (digest) } { code { (layout::short_digest(digest)) } } }
                                td.num { (layout::bytes(*size)) }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(layout::page(&signed.frame("Components", Nav::Components), body).into_response())
}

#[derive(Deserialize)]
pub struct ComponentPath {
    reference: ComponentName,
}

/// What a batch the page redirects from did.
#[derive(Deserialize, Default)]
pub struct PageParams {
    #[serde(default)]
    batch: String,
    #[serde(default)]
    count: usize,
}

impl PageParams {
    /// The notice of the batch done, if any (only these words and the count
    /// reach the page, never text from the URL).
    fn notice(&self) -> Option<String> {
        let done = match self.batch.as_str() {
            "paused" => "Paused",
            "resumed" => "Resumed",
            _ => return None,
        };
        Some(format!("{done} {} unfinished runs of this component.", self.count))
    }
}

/// `GET /ui/components/{name or digest}`.
pub async fn page(
    State(state): State<ApiState>,
    signed: Signed,
    Path(ComponentPath { reference }): Path<ComponentPath>,
    Query(params): Query<PageParams>,
) -> Result<Response, PageError> {
    let tenant = &signed.0.tenant.id;
    let runtime = state.runtime();
    let loaded = runtime.component(tenant, reference.as_str()).await?;
    let names: Vec<ComponentName> = (runtime.catalog().component_names(tenant).await?)
        .into_iter()
        .filter(|(_, digest)| *digest == loaded.digest)
        .map(|(name, _)| name)
        .collect();
    let versions = match names.iter().find(|name| **name == reference) {
        Some(name) => runtime.catalog().component_versions(tenant, name).await?,
        None => Vec::new(),
    };
    let query = RunQuery {
        component: Some(loaded.digest.clone()),
        limit: PAGE_SIZE,
        newest_first: true,
        ..RunQuery::default()
    };
    let (runs, more) = runtime.search().page(tenant, &query).await?;
    let schemas = loaded.signals.declared();
    let csrf = signed.0.csrf.clone();
    let body = html! {
        h1 { "Component " code { (reference) } }
        @if let Some(notice) = params.notice() { p.notice { (notice) } }
        section.facts {
            dl {
                dt { "Digest" } dd #digest { code { (loaded.digest) } }
                dt { "Size" } dd { (layout::bytes(loaded.size())) }
                dt { "Names" } dd { @for name in &names { a href={ "/ui/components/" (name) } { (name) } " " } }
                dt { "Workflows" } dd #workflows { @for workflow in &loaded.manifest.workflows { code { (workflow) } " " } }
                dt { "Steps" } dd #steps { @for step in &loaded.manifest.steps { code { (step) } " " } }
            }
        }
        @if !schemas.is_empty() {
            section {
                h2 { "Signal schemas" }
                @for (signal, schema) in &schemas {
                    h3 { code { (signal) } }
                    pre.json { (serde_json::to_string_pretty(schema).unwrap_or_default()) }
                }
            }
        }
        @if !versions.is_empty() {
            section {
                h2 { "Versions of " code { (reference) } }
                div.scroll {
                    table {
                        thead { tr { th.num { "Version" } th { "Digest" } th { "Named" } } }
                        tbody {
                            @for version in &versions {
                                tr {
                                    td.num { (version.version) }
                                    td { a href={ "/ui/components/" (version.digest) } { code { (layout::short_digest(&version.digest)) } } }
                                    td.time { (layout::time(version.named_at_ms)) }
                                }
                            }
                        }
                    }
                }
            }
        }
        section.actions {
            h2 { "All its runs" }
            p.hint { "Every unfinished run of " code { (reference) } (if names.contains(&reference) { ", every version," } else { "" }) " at once: how to stop a bad deploy from doing more damage." }
            form #batch-pause-form method="post" action={ "/ui/components/" (reference) "/pause" } {
                input type="hidden" name="csrf" value=(csrf);
                label { "Reason " input type="text" name="reason" maxlength=(super::run::MAX_REASON) placeholder="paused from the console"; }
                (super::run::interrupt_box())
                button type="submit" { "Pause every unfinished run" }
            }
            form #batch-resume-form method="post" action={ "/ui/components/" (reference) "/resume" } {
                input type="hidden" name="csrf" value=(csrf);
                button type="submit" { "Resume every paused run" }
            }
        }
        section {
            h2 { "Runs using it" }
            @if runs.runs.is_empty() {
                p.empty { "No run of this build." }
            } @else {
                div.scroll {
                    table.runs {
                        thead { tr { th { "Run" } th { "Workflow" } th { "State" } th { "Created" } } }
                        tbody {
                            @for run in &runs.runs {
                                tr {
                                    td { a href={ "/ui/runs/" (run.run_id) } { (run.run_id) } }
                                    td { (run.workflow) }
                                    td { (layout::state_badge(&run.state)) }
                                    td.time { (layout::time(run.created_at_ms)) }
                                }
                            }
                        }
                    }
                }
            }
            @if more.is_some() {
                p { a href={ "/ui/runs?component=" (loaded.digest) } { "All runs of this build →" } }
            }
        }
    };
    let title = format!("Component {reference}");
    Ok(layout::page(&signed.frame(&title, Nav::Components), body).into_response())
}

#[derive(Deserialize)]
pub struct BatchForm {
    csrf: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    interrupt: Option<String>,
}

/// `POST /ui/components/{reference}/pause`: every unfinished run of it.
pub async fn pause(
    State(state): State<ApiState>,
    signed: Signed,
    Path(ComponentPath { reference }): Path<ComponentPath>,
    Form(form): Form<BatchForm>,
) -> Result<Response, PageError> {
    signed.check(&form.csrf)?;
    let reason = super::run::reason_given(&form.reason, "paused from the console");
    let under_way = AttemptUnderWay::stopped_if(form.interrupt.is_some());
    batch(
        &state,
        &signed,
        &reference,
        BatchAction::Pause(&reason, under_way),
        "paused",
    )
    .await
}

/// `POST /ui/components/{reference}/resume`: every paused run of it.
pub async fn resume(
    State(state): State<ApiState>,
    signed: Signed,
    Path(ComponentPath { reference }): Path<ComponentPath>,
    Form(form): Form<BatchForm>,
) -> Result<Response, PageError> {
    signed.check(&form.csrf)?;
    batch(&state, &signed, &reference, BatchAction::Resume, "resumed").await
}

/// Acts on every page of the component's unfinished runs, then back to
/// its page saying how many.
async fn batch(
    state: &ApiState,
    signed: &Signed,
    reference: &ComponentName,
    action: BatchAction<'_>,
    done: &str,
) -> Result<Response, PageError> {
    let tenant = &signed.0.tenant.id;
    let builds = state.runtime().catalog().builds(tenant, reference.as_str()).await?;
    let mut selector = RunSelector {
        builds: Some(builds),
        ..RunSelector::default()
    };
    let mut count = 0;
    loop {
        let page = state.runtime().runs().batch(tenant, &selector, action).await?;
        count += page.runs.len();
        match page.next {
            Some(next) => selector.after = Some(next),
            None => break,
        }
    }
    Ok(Redirect::to(&format!("/ui/components/{reference}?batch={done}&count={count}")).into_response())
}
