//! `/v1/groups`: many runs submitted at once, their states counted, their
//! ends streamed as server-sent events, and cancelled together.

use std::collections::BTreeMap;
use std::convert::Infallible;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::{self, OptionalJson, Path};
use super::responses::{JsonBody, Malformed, Oversized, Refusals, ServerSentEvent, Throttled};
use super::runs::{CancelRun, StartRun, submission_of};
use crate::runtime::{GroupRecord, RunStatus};
use crate::store::{GroupId, RunId};

/// Runs to start as one group.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartGroup {
    /// An idempotency key: the same id with the same runs answers the same
    /// group (and starts those not yet started); with other runs, 409.
    pub group_id: Option<GroupId>,
    /// 1 to 1000 runs, as `POST /v1/runs` takes them; a run without a
    /// `run_id` is `{group_id}-{index}` (index from 0000).
    #[schema(min_items = 1, max_items = 1000)]
    pub runs: Vec<StartRun>,
}

/// A group and its runs' ids.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct GroupStarted {
    #[schema(value_type = String)]
    pub group_id: GroupId,
    #[schema(value_type = Vec<String>)]
    pub run_ids: Vec<RunId>,
}

impl From<GroupRecord> for GroupStarted {
    fn from(record: GroupRecord) -> Self {
        Self {
            group_id: record.group_id,
            run_ids: record.run_ids,
        }
    }
}

/// Where a group's runs stand.
#[derive(Serialize, ToSchema)]
pub struct GroupStatus {
    #[schema(value_type = String)]
    pub group_id: GroupId,
    pub created_at_ms: u64,
    /// Runs in the group.
    pub runs: usize,
    /// How many runs are in each state (`completed`, `failed`, ...).
    pub counts: BTreeMap<String, usize>,
    /// Runs that have ended, whichever way.
    pub finished: usize,
}

/// Which group.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct GroupPath {
    #[param(inline)]
    id: GroupId,
}

/// Start many runs at once, as one group.
#[utoipa::path(post, path = "/v1/groups", request_body = StartGroup, responses(
    (status = 202, body = GroupStarted),
    (status = 404, body = ErrorBody, description = "a run names no such component, or no such workflow in it: no run was started"),
    (status = 409, body = ErrorBody, description = "the group id, or a run id, exists with other runs or input"),
    (status = 415, body = ErrorBody, description = "the body is not `Content-Type: application/json`"),
    Malformed, Oversized, JsonBody, Throttled, Refusals,
))]
pub async fn start(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    extract::Json(start): extract::Json<StartGroup>,
) -> Result<(StatusCode, Json<GroupStarted>), ApiError> {
    let mut submissions = Vec::with_capacity(start.runs.len());
    for run in start.runs {
        submissions.push(submission_of(&state, &tenant, run).await?);
    }
    let record = state
        .runtime
        .groups()
        .submit(&tenant.id, start.group_id, submissions)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(record.into())))
}

/// How many of a group's runs are in each state.
#[utoipa::path(get, path = "/v1/groups/{id}", params(GroupPath), responses(
    (status = 200, body = GroupStatus),
    (status = 404, body = ErrorBody, description = "no such group"),
    Malformed, Refusals,
))]
pub async fn status(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(GroupPath { id }): Path<GroupPath>,
) -> Result<Json<GroupStatus>, ApiError> {
    let record = state.runtime.groups().get(&tenant.id, &id).await?;
    let statuses = state.runtime.groups().statuses(&tenant.id, &record).await?;
    let mut counts = BTreeMap::new();
    for status in &statuses {
        *counts.entry(status.state.name().to_owned()).or_insert(0) += 1;
    }
    Ok(Json(GroupStatus {
        finished: statuses.iter().filter(|s| s.state.is_finished()).count(),
        group_id: record.group_id,
        created_at_ms: record.created_at_ms,
        runs: record.run_ids.len(),
        counts,
    }))
}

/// Each run of the group as it ends, as server-sent events: an event `run`
/// per run (its status, JSON), then an event `end`.
#[utoipa::path(get, path = "/v1/groups/{id}/events", params(GroupPath), responses(
    (status = 200, content_type = "text/event-stream", body = ServerSentEvent, description = "`event: run` with a run's status as each run ends, then `event: end`"),
    (status = 404, body = ErrorBody, description = "no such group"),
    Malformed, Refusals,
))]
pub async fn events(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(GroupPath { id }): Path<GroupPath>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let record = state.runtime.groups().get(&tenant.id, &id).await?;
    let ends = state
        .runtime
        .groups()
        .ends(&tenant.id, &record)
        .map(|ended| Ok(run_event(ended)));
    let end = futures::stream::once(async { Ok(Event::default().event("end").data("{}")) });
    Ok(Sse::new(ends.chain(end)).keep_alive(KeepAlive::default()))
}

fn run_event(ended: Result<RunStatus, crate::runtime::RunError>) -> Event {
    match ended {
        Ok(status) => Event::default()
            .event("run")
            .json_data(&status)
            .unwrap_or_else(|e| Event::default().event("error").data(e.to_string())),
        Err(e) => Event::default().event("error").data(e.to_string()),
    }
}

/// Cancel every unfinished run of the group.
#[utoipa::path(post, path = "/v1/groups/{id}/cancel", params(GroupPath), request_body(content = Option<CancelRun>, description = "optional"),
    responses(
        (status = 202, description = "every unfinished run of the group is being cancelled"),
        (status = 404, body = ErrorBody, description = "no such group"),
        Malformed, Oversized, JsonBody, Refusals,
    ))]
pub async fn cancel(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(GroupPath { id }): Path<GroupPath>,
    OptionalJson(request): OptionalJson<CancelRun>,
) -> Result<StatusCode, ApiError> {
    let record = state.runtime.groups().get(&tenant.id, &id).await?;
    let reason = request.reason.unwrap_or_else(|| "the group was cancelled".into());
    state.runtime.groups().cancel(&tenant.id, &record, &reason).await?;
    Ok(StatusCode::ACCEPTED)
}
