//! `/v1/runs`: starting runs and everything a client does with one.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::{self, Body, Path, Query};
use crate::config::LimitRequest;
use crate::journal::Entry;
use crate::runtime::{ReplayReport, RunCursor, RunQuery, RunStatus, Submission, UnreadableRun};
use crate::store::{RunId, SignalId, SignalName};

/// Longest a `wait` may hold a request.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// A run to start.
#[derive(Deserialize, ToSchema)]
pub struct StartRun {
    /// A component name or digest.
    pub component: String,
    pub workflow: String,
    /// The workflow's input (any JSON).
    #[schema(value_type = Object)]
    pub input: Value,
    /// An idempotency key: the same id with the same input returns the same
    /// run; with another input, 409.
    pub run_id: Option<String>,
    /// Step limits for this run (`fuel`, `memory_bytes`, `timeout_ms`,
    /// `max_output_bytes`): each can lower the tenant's quota, never raise it.
    #[serde(default)]
    pub options: LimitRequest,
    /// Other components of the tenant's (link name → component name or
    /// digest), whose steps the workflow calls as `link/step`.
    #[serde(default)]
    pub links: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct Started {
    pub run_id: String,
}

fn run_id(id: &str) -> Result<RunId, ApiError> {
    RunId::new(id).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// Start a run (or return the run its `run_id` already names).
#[utoipa::path(post, path = "/v1/runs", request_body = StartRun, responses(
    (status = 202, body = Started),
    (status = 400, body = ErrorBody), (status = 404, body = ErrorBody, description = "no such component"),
    (status = 409, body = ErrorBody, description = "the run id exists with another input"),
    (status = 413, body = ErrorBody), (status = 429, body = ErrorBody, description = "a rate or concurrency quota; see Retry-After"),
))]
pub async fn start(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    extract::Json(start): extract::Json<StartRun>,
) -> Result<(StatusCode, Json<Started>), ApiError> {
    let input = start.input.to_string();
    ApiError::check_size("the input", input.len(), tenant.quotas.max_payload_bytes)?;
    let run_id = start.run_id.as_deref().map(run_id).transpose()?;
    state.runtime.admit(&tenant.id)?;
    let component = state.runtime.component(&tenant.id, &start.component).await?;
    let mut submission = Submission::new(component, &start.workflow, &input);
    submission.run_id = run_id;
    submission.limits = start.options;
    for (name, reference) in start.links {
        let linked = state.runtime.component(&tenant.id, &reference).await?;
        submission.links.insert(name, linked);
    }
    let run = state.runtime.submit(&tenant.id, submission).await?;
    state.runtime.drive_in_background(&tenant.id, &run);
    Ok((
        StatusCode::ACCEPTED,
        Json(Started {
            run_id: run.to_string(),
        }),
    ))
}

#[derive(Deserialize, IntoParams)]
pub struct ListParams {
    /// Only runs in this state (`pending`, `running`, `sleeping`, `completed`, ...).
    status: Option<String>,
    workflow: Option<String>,
    /// At most this many runs (default 100).
    limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct RunPage {
    pub runs: Vec<RunStatus>,
    /// Pass as `cursor` for the next page; absent on the last one. A page
    /// filtered by `status` may hold fewer runs than `limit` and still
    /// have a next one.
    pub next_cursor: Option<String>,
    /// Runs passed over because a record of theirs is corrupt, with why.
    pub unreadable: Vec<UnreadableRun>,
}

/// List runs, oldest first, a page at a time.
#[utoipa::path(get, path = "/v1/runs", params(ListParams), responses((status = 200, body = RunPage)))]
pub async fn list(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Query(params): Query<ListParams>,
) -> Result<Json<RunPage>, ApiError> {
    let after = params
        .cursor
        .as_deref()
        .map(str::parse::<RunCursor>)
        .transpose()
        .map_err(ApiError::bad_request)?;
    let query = RunQuery {
        workflow: params.workflow,
        state: params.status,
        after,
        limit: params.limit.unwrap_or(100).clamp(1, 1000),
    };
    let (listing, next) = state.runtime.list_page(&tenant.id, &query).await?;
    Ok(Json(RunPage {
        runs: listing.runs,
        next_cursor: next.map(|cursor| cursor.to_string()),
        unreadable: listing.unreadable,
    }))
}

/// Where a run stands.
#[utoipa::path(get, path = "/v1/runs/{id}", params(("id" = String, Path)),
    responses((status = 200, body = RunStatus), (status = 404, body = ErrorBody)))]
pub async fn status(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(id): Path<String>,
) -> Result<Json<RunStatus>, ApiError> {
    Ok(Json(state.runtime.status(&tenant.id, &run_id(&id)?).await?))
}

#[derive(Deserialize, IntoParams)]
pub struct WaitParams {
    /// How long to wait for the run to finish, e.g. `30s` (at most 60 s).
    timeout: Option<String>,
}

/// Wait (long-poll) until a run finishes or the timeout passes.
#[utoipa::path(get, path = "/v1/runs/{id}/wait", params(("id" = String, Path), WaitParams),
    responses((status = 200, body = RunStatus), (status = 404, body = ErrorBody)))]
pub async fn wait(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(id): Path<String>,
    Query(params): Query<WaitParams>,
) -> Result<Json<RunStatus>, ApiError> {
    let timeout = match params.timeout {
        Some(text) => {
            humantime::parse_duration(&text).map_err(|e| ApiError::bad_request(format!("timeout `{text}`: {e}")))?
        }
        None => Duration::from_secs(30),
    };
    let run = run_id(&id)?;
    Ok(Json(state.runtime.wait(&tenant.id, &run, timeout.min(MAX_WAIT)).await?))
}

/// One journal entry.
#[derive(Serialize, ToSchema)]
pub struct JournalEntry {
    pub seq: u64,
    pub kind: String,
    pub name: String,
    pub attempts: u32,
    pub started_at_ms: u64,
    pub finished_at_ms: u64,
    /// What the call returned, as recorded.
    #[schema(value_type = Object)]
    pub recorded: Value,
}

impl From<Entry> for JournalEntry {
    fn from(entry: Entry) -> Self {
        Self {
            seq: entry.seq,
            kind: entry.call.kind.to_string(),
            name: entry.call.name,
            attempts: entry.attempts,
            started_at_ms: entry.started_at_ms,
            finished_at_ms: entry.finished_at_ms,
            recorded: serde_json::to_value(&entry.recorded).unwrap_or(Value::Null),
        }
    }
}

/// A run's journal: every durable call and its result.
#[utoipa::path(get, path = "/v1/runs/{id}/journal", params(("id" = String, Path)),
    responses((status = 200, body = Vec<JournalEntry>), (status = 404, body = ErrorBody)))]
pub async fn journal(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(id): Path<String>,
) -> Result<Json<Vec<JournalEntry>>, ApiError> {
    let entries = state.runtime.history(&tenant.id, &run_id(&id)?).await?;
    Ok(Json(entries.into_iter().map(JournalEntry::from).collect()))
}

#[derive(Deserialize, IntoParams)]
pub struct SignalParams {
    /// An idempotency key: sending again with the same id stores the signal once.
    signal_id: Option<String>,
}

/// Send a signal (the body is its JSON payload); buffered until the run waits for it.
#[utoipa::path(post, path = "/v1/runs/{id}/signals/{name}",
    params(("id" = String, Path), ("name" = String, Path), SignalParams),
    request_body(content = Object, content_type = "application/json"),
    responses((status = 202), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn signal(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path((id, name)): Path<(String, String)>,
    Query(params): Query<SignalParams>,
    Body(body): Body,
) -> Result<StatusCode, ApiError> {
    let payload =
        std::str::from_utf8(&body).map_err(|_| ApiError::bad_request("the signal payload is not UTF-8 JSON"))?;
    ApiError::check_size("the payload", payload.len(), tenant.quotas.max_payload_bytes)?;
    let name = SignalName::new(&name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let signal_id = params.signal_id.as_deref().map(SignalId::new).transpose();
    let signal_id = signal_id.map_err(|e| ApiError::bad_request(e.to_string()))?;
    state
        .runtime
        .signal_with_id(&tenant.id, &run_id(&id)?, &name, payload, signal_id.as_ref())
        .await?;
    Ok(StatusCode::ACCEPTED)
}

#[derive(Deserialize, ToSchema, Default)]
pub struct CancelRun {
    /// Why, kept on the run.
    pub reason: Option<String>,
}

/// Cancel a run: its running step attempt is interrupted and it ends `cancelled`.
#[utoipa::path(post, path = "/v1/runs/{id}/cancel", params(("id" = String, Path)), request_body = CancelRun,
    responses((status = 202), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "the run has finished")))]
pub async fn cancel(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(id): Path<String>,
    Body(body): Body,
) -> Result<StatusCode, ApiError> {
    // The body is optional, whatever the content type says: `curl -H
    // 'Content-Type: application/json' -X POST .../cancel` must work.
    let request = if body.is_empty() {
        CancelRun::default()
    } else {
        serde_json::from_slice::<CancelRun>(&body)
            .map_err(|e| ApiError::bad_request(format!("the body is not {{\"reason\": \"...\"}}: {e}")))?
    };
    let reason = request.reason.unwrap_or_else(|| "cancelled through the API".into());
    state
        .runtime
        .cancel_in_background(&tenant.id, &run_id(&id)?, &reason)
        .await?;
    Ok(StatusCode::ACCEPTED)
}

/// What a replay checks the journal against.
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct ReplayRun {
    /// A component name or digest of the tenant's (a new build) to replay
    /// instead of the one the run was started with.
    pub component: Option<String>,
}

/// Re-execute a run against its journal without running any step.
#[utoipa::path(post, path = "/v1/runs/{id}/replay", params(("id" = String, Path)), request_body = ReplayRun,
    responses((status = 200, body = ReplayReport), (status = 404, body = ErrorBody)))]
pub async fn replay(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(id): Path<String>,
    body: Option<Json<ReplayRun>>,
) -> Result<Json<ReplayReport>, ApiError> {
    let build = match body.and_then(|Json(replay)| replay.component) {
        Some(reference) => Some(state.runtime.component(&tenant.id, &reference).await?),
        None => None,
    };
    Ok(Json(state.runtime.replay(&tenant.id, &run_id(&id)?, build).await?))
}
