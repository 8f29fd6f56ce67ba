//! The tenant page: what the tenant uses against its quotas now, its use
//! per UTC day, its HTTP hooks, and every quota the operator set for it.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use super::layout::{self, Nav};
use super::{PageError, Signed};
use crate::api::state::ApiState;
use crate::clock::{now_ms, rfc3339};
use crate::runtime::day_of;

/// Days of use the page shows, today first.
const DAYS: u64 = 7;

/// `GET /ui/tenant`.
pub async fn page(State(state): State<ApiState>, signed: Signed) -> Result<Response, PageError> {
    let tenant = &signed.0.tenant;
    let runtime = state.runtime();
    let today = day_of(now_ms());
    let mut days = Vec::new();
    for day in (0..DAYS).map(|back| today.saturating_sub(back)) {
        days.push((day, runtime.usage().day(&tenant.id, day).await?));
    }
    let stored = runtime.catalog().stored_components(&tenant.id).await?;
    let hooks = (runtime.hooks().list(&tenant.id).await).map_err(crate::runtime::RunError::from)?;
    let quotas = &tenant.quotas;
    let used_today = &days[0].1;
    let fuel_budget = quotas
        .fuel_per_day
        .map_or_else(|| "no daily budget".to_owned(), |budget| budget.to_string());
    let gauges = [
        (
            "Active runs",
            runtime.runs().active_runs(&tenant.id).to_string(),
            quotas.max_active_runs.to_string(),
        ),
        ("Fuel burnt today", used_today.fuel.to_string(), fuel_budget),
        (
            "Runs started today",
            used_today.runs.to_string(),
            format!("{} a minute", quotas.max_new_runs_per_minute),
        ),
        (
            "Components stored",
            stored.len().to_string(),
            quotas.max_components.to_string(),
        ),
        (
            "Component bytes stored",
            layout::bytes(stored.iter().map(|(_, size)| size).sum()),
            layout::bytes(quotas.max_component_storage_bytes),
        ),
    ];
    let body = html! {
        h1 { "Tenant " code { (tenant.id) } }
        section {
            h2 { "Usage against quotas" }
            div.scroll {
                table.gauges #gauges {
                    thead { tr { th { "" } th.num { "Used" } th.num { "Quota" } } }
                    tbody { @for (what, used, quota) in &gauges { tr { th { (what) } td.num { (used) } td.num { (quota) } } } }
                }
            }
        }
        section {
            h2 { "Use per UTC day" }
            div.scroll {
                table.usage {
                    thead { tr { th { "Day" } th.num { "Runs started" } th.num { "Step attempts" } th.num { "Fuel" } th.num { "Outgoing requests" } } }
                    tbody {
                        @for (day, used) in &days {
                            tr {
                                td { (rfc3339(day.saturating_mul(86_400_000)).get(..10).unwrap_or_default()) }
                                td.num { (used.runs) }
                                td.num { (used.step_attempts) }
                                td.num { (used.fuel) }
                                td.num { (used.outbound_requests) }
                            }
                        }
                    }
                }
            }
        }
        section {
            h2 { "HTTP hooks" }
            @if hooks.is_empty() {
                p.hint #no-hooks { "None: `PUT /v1/hooks/{name}` or `stepstone hook put` maps a path to a workflow." }
            } @else {
                div.scroll {
                    table.hooks #hooks {
                        thead { tr { th { "Path" } th { "Component" } th { "Workflow" } th { "Headers passed" } } }
                        tbody {
                            @for (name, hook) in &hooks {
                                tr {
                                    td { code { "POST /hooks/" (tenant.id) "/" (name) } }
                                    td { a href={ "/ui/components/" (hook.component) } { (hook.component) } }
                                    td { (hook.workflow) }
                                    td { (hook.headers.join(", ")) }
                                }
                            }
                        }
                    }
                }
            }
        }
        section {
            h2 { "Quotas" }
            (quota_table(&serde_json::to_value(quotas).unwrap_or_default()))
        }
    };
    Ok(layout::page(&signed.frame("Tenant", Nav::Tenant), body).into_response())
}

/// Every quota, as `stepstone.toml` names it.
fn quota_table(quotas: &serde_json::Value) -> Markup {
    let shown = |value: &serde_json::Value| match value {
        serde_json::Value::Null => "none".to_owned(),
        serde_json::Value::Array(items) if items.is_empty() => "none".to_owned(),
        other => other.to_string(),
    };
    html! {
        div.scroll {
            table.quotas #quotas {
                tbody {
                    @for (name, value) in quotas.as_object().into_iter().flatten() {
                        tr { th { code { (name) } } td { (shown(value)) } }
                    }
                }
            }
        }
    }
}
