//! The runs page: the tenant's runs, newest first, filtered by state,
//! workflow, component and creation time, a page at a time through the
//! index of runs (never a listing of every run), their states refreshed
//! while the page is open.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::extract::Query;
use super::layout::{self, Nav};
use super::{PageError, Signed};
use crate::api::state::ApiState;
use crate::runtime::{RunCursor, RunListing, RunQuery, RunStatus};
use crate::store::ComponentName;

/// Runs a page shows.
pub const PAGE_SIZE: usize = 50;
/// Runs a page reads at most, so a filter few runs match ends a page early
/// (with a link to go on) rather than read every run.
const EXAMINED_PER_PAGE: usize = 1000;
/// How often an open page refreshes its runs' states, in milliseconds.
const REFRESH_MS: u32 = 2000;
/// The longest workflow name a filter takes.
const MAX_WORKFLOW: usize = 256;
/// The states a run can be in, as the filter offers them.
const STATES: [&str; 11] = [
    "scheduled",
    "queued",
    "pending",
    "running",
    "retrying",
    "sleeping",
    "awaiting-signal",
    "completed",
    "failed",
    "cancelled",
    "continued",
];

/// What the filter form sends; an empty field filters nothing.
#[derive(Deserialize, Default, Clone)]
pub struct RunFilter {
    #[serde(default)]
    state: String,
    #[serde(default)]
    workflow: String,
    #[serde(default)]
    component: String,
    /// Created at or after, and before: `YYYY-MM-DDTHH:MM[:SS]` in UTC (as
    /// a `datetime-local` field sends it) or RFC 3339.
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
    /// `oldest` for oldest first.
    #[serde(default)]
    order: String,
    #[serde(default)]
    cursor: String,
}

impl RunFilter {
    /// The same filter as a query string, from `cursor` on (`None`: the
    /// first page).
    fn query_string(&self, cursor: Option<&str>) -> String {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        for (name, value) in [
            ("state", &self.state),
            ("workflow", &self.workflow),
            ("component", &self.component),
            ("from", &self.from),
            ("to", &self.to),
            ("order", &self.order),
        ] {
            if !value.is_empty() {
                query.append_pair(name, value);
            }
        }
        if let Some(cursor) = cursor {
            query.append_pair("cursor", cursor);
        }
        query.finish()
    }

    fn oldest_first(&self) -> bool {
        self.order == "oldest"
    }

    /// The listing this filter asks for, its names checked and its
    /// component looked up.
    async fn query(&self, state: &ApiState, signed: &Signed) -> Result<RunQuery, PageError> {
        let given = |text: &str| Some(text.trim().to_owned()).filter(|text| !text.is_empty());
        if !self.state.is_empty() && !STATES.contains(&self.state.as_str()) {
            return Err(PageError::bad_request(format!(
                "no run is ever in state `{}`",
                self.state
            )));
        }
        if self.workflow.len() > MAX_WORKFLOW {
            return Err(PageError::bad_request(format!(
                "a workflow name of {} bytes: no workflow name is longer than {MAX_WORKFLOW}",
                self.workflow.len()
            )));
        }
        let component = match given(&self.component) {
            Some(reference) => {
                let name = ComponentName::new(&reference).map_err(|e| PageError::bad_request(e.to_string()))?;
                let tenant = &signed.0.tenant.id;
                Some(state.runtime().catalog().component_digest(tenant, &name).await?)
            }
            None => None,
        };
        let after = match given(&self.cursor) {
            Some(cursor) => Some(cursor.parse::<RunCursor>().map_err(PageError::bad_request)?),
            None => None,
        };
        Ok(RunQuery {
            workflow: given(&self.workflow),
            component,
            created_from_ms: given(&self.from).map(|at| moment("from", &at)).transpose()?,
            created_before_ms: given(&self.to).map(|at| moment("to", &at)).transpose()?,
            state: given(&self.state),
            after,
            limit: PAGE_SIZE,
            newest_first: !self.oldest_first(),
            examine_at_most: EXAMINED_PER_PAGE,
            ..RunQuery::default()
        })
    }
}

/// A time a filter gives, in milliseconds since 1970: a `datetime-local`
/// value taken as UTC, or RFC 3339.
fn moment(field: &str, text: &str) -> Result<u64, PageError> {
    let local = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S%.f"]
        .iter()
        .find_map(|format| chrono::NaiveDateTime::parse_from_str(text, format).ok())
        .map(|time| time.and_utc().timestamp_millis());
    let millis = local
        .or_else(|| {
            chrono::DateTime::parse_from_rfc3339(text)
                .ok()
                .map(|t| t.timestamp_millis())
        })
        .ok_or_else(|| {
            PageError::bad_request(format!(
                "`{field}` is `{text}`, not a time such as 2026-05-01T12:00 (UTC)"
            ))
        })?;
    Ok(u64::try_from(millis).unwrap_or(0))
}

/// A page of runs, and where the next one starts.
async fn listing(
    state: &ApiState,
    signed: &Signed,
    filter: &RunFilter,
) -> Result<(RunListing<RunStatus>, Option<RunCursor>), PageError> {
    let query = filter.query(state, signed).await?;
    Ok(state.runtime().search().page(&signed.0.tenant.id, &query).await?)
}

/// `GET /ui/runs`.
pub async fn page(
    State(state): State<ApiState>,
    signed: Signed,
    Query(filter): Query<RunFilter>,
) -> Result<Response, PageError> {
    let (runs, next) = listing(&state, &signed, &filter).await?;
    let rows_url = format!("/ui/runs/rows?{}", filter.query_string(Some(&filter.cursor)));
    let body = html! {
        h1 { "Runs" }
        (filters(&filter))
        div #runs data-poll=(rows_url) data-every=(REFRESH_MS) {
            (table(&runs, next.as_ref(), &filter))
        }
    };
    Ok(layout::page(&signed.frame("Runs", Nav::Runs), body).into_response())
}

/// `GET /ui/runs/rows`: the table alone, as the page refreshes it.
pub async fn rows(
    State(state): State<ApiState>,
    signed: Signed,
    Query(filter): Query<RunFilter>,
) -> Result<Markup, PageError> {
    let (runs, next) = listing(&state, &signed, &filter).await?;
    Ok(table(&runs, next.as_ref(), &filter))
}

fn filters(filter: &RunFilter) -> Markup {
    html! {
        form.filters method="get" action="/ui/runs" {
            label { "State "
                select name="state" {
                    option value="" { "any" }
                    @for state in STATES {
                        option value=(state) selected[filter.state == state] { (state) }
                    }
                }
            }
            label { "Workflow " input type="text" name="workflow" value=(filter.workflow) maxlength=(MAX_WORKFLOW); }
            label { "Component " input type="text" name="component" value=(filter.component) placeholder="name or digest"; }
            label { "Created from " input type="datetime-local" name="from" value=(filter.from); }
            label { "to " input type="datetime-local" name="to" value=(filter.to); }
            label { "Order "
                select name="order" {
                    option value="" { "newest first" }
                    option value="oldest" selected[filter.oldest_first()] { "oldest first" }
                }
            }
            button type="submit" { "Filter" }
            " "
            a href="/ui/runs" { "Clear" }
        }
    }
}

/// The table of a page of runs, with the link to the next page.
fn table(runs: &RunListing<RunStatus>, next: Option<&RunCursor>, filter: &RunFilter) -> Markup {
    html! {
        @for unreadable in &runs.unreadable {
            p.warning { "Run " code { (unreadable.run_id) } " cannot be read: " (unreadable.error) }
        }
        @if runs.runs.is_empty() && next.is_none() {
            p.empty { "No runs match." }
        } @else if runs.runs.len() < PAGE_SIZE && next.is_some() {
            p.empty { "Fewer runs matched among the next " (EXAMINED_PER_PAGE) " read: the next page goes on from there." }
        }
        @if !runs.runs.is_empty() {
            div.scroll {
                table.runs {
                    thead { tr { th { "Run" } th { "Workflow" } th { "State" } th.wide { "Component" } th { "Created" } th.num { "Calls" } } }
                    tbody {
                        @for run in &runs.runs {
                            tr data-run=(run.run_id) {
                                td { a href={ "/ui/runs/" (run.run_id) } { (run.run_id) } }
                                td { (run.workflow) }
                                td { (layout::state_badge(&run.state)) }
                                td.wide { a href={ "/ui/components/" (run.component) } { code { (layout::short_digest(&run.component)) } } }
                                td.time { (layout::time(run.created_at_ms)) }
                                td.num { (run.journaled_calls) }
                            }
                        }
                    }
                }
            }
        }
        nav.pager {
            @if !filter.cursor.is_empty() {
                a href={ "/ui/runs?" (filter.query_string(None)) } { "← First page" }
            }
            @if let Some(next) = next {
                a.next href={ "/ui/runs?" (filter.query_string(Some(&next.to_string()))) } { "Next page →" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_times_are_utc_local_fields_or_rfc_3339() {
        assert_eq!(moment("from", "2026-05-01T12:00").ok(), Some(1_777_636_800_000));
        assert_eq!(moment("from", "2026-05-01T12:00:30").ok(), Some(1_777_636_830_000));
        assert_eq!(
            moment("from", "2026-05-01T14:00:00+02:00").ok(),
            Some(1_777_636_800_000)
        );
        assert_eq!(moment("from", "1960-01-01T00:00").ok(), Some(0), "before 1970 is 1970");
        for refused in ["", "yesterday", "2026-13-01T00:00", "2026-05-01"] {
            assert!(moment("from", refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn a_filters_query_string_keeps_what_was_given() {
        let filter = RunFilter {
            state: "failed".into(),
            workflow: "a b&c".into(),
            cursor: "old".into(),
            ..RunFilter::default()
        };
        assert_eq!(filter.query_string(None), "state=failed&workflow=a+b%26c");
        assert_eq!(
            filter.query_string(Some("5-r")),
            "state=failed&workflow=a+b%26c&cursor=5-r"
        );
    }
}
