//! `/v1/runs/{id}/logs`: a run's log lines, guest's and host's, a page at a
//! time.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::{IntoParams, ToSchema};

use super::ApiState;
use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Path, Query};
use super::params::LogCursorParam;
use super::responses::{Malformed, Refusals, UnknownRun};
use super::runs::RunPath;
use crate::guest_log::{Level, Source};
use crate::runtime::{LogPage, MAX_LOG_PAGE, PagedLine};

/// The lines a page holds without a `limit`.
const DEFAULT_LOG_PAGE: usize = 100;

#[derive(Deserialize, IntoParams)]
pub struct LogParams {
    #[param(schema_with = log_page_limit)]
    limit: Option<usize>,
    /// Go on after this line: a line's `cursor`, or the previous page's `next_cursor`.
    #[param(inline)]
    cursor: Option<LogCursorParam>,
}

fn log_page_limit() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .description(Some("At most this many lines."))
        .minimum(Some(1))
        .maximum(Some(MAX_LOG_PAGE))
        .default(Some(DEFAULT_LOG_PAGE.into()))
        .build()
}

/// One log line of a run.
#[derive(Serialize, ToSchema)]
pub struct LogLineBody {
    /// `guest`: the workflow or a step wrote it (a `log` call, or stdout and
    /// stderr); `host`: the host, about the run (a failed attempt, a
    /// refused request, the log allowance used up).
    pub source: Source,
    pub level: Level,
    /// The journal seq it was written at: a step's call, or, for the
    /// workflow, the seq of its next durable call.
    pub seq: Option<u64>,
    /// The step and attempt that wrote it; absent for the workflow's lines.
    pub step: Option<String>,
    pub attempt: Option<u32>,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub message: String,
    /// Pass as `cursor` to read the lines after this one.
    pub cursor: String,
}

impl From<PagedLine> for LogLineBody {
    fn from(PagedLine { line, cursor }: PagedLine) -> Self {
        Self {
            source: line.source,
            level: line.level,
            seq: line.seq,
            step: line.step,
            attempt: line.attempt,
            at_ms: line.at_ms,
            message: line.message,
            cursor: cursor.to_string(),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct LogPageBody {
    pub lines: Vec<LogLineBody>,
    /// Pass as `cursor` for the next page; absent once every line stored
    /// now was shown (a run still going may log more: ask again after the
    /// last line's `cursor`).
    pub next_cursor: Option<String>,
}

impl From<LogPage> for LogPageBody {
    fn from(page: LogPage) -> Self {
        Self {
            lines: page.lines.into_iter().map(LogLineBody::from).collect(),
            next_cursor: page.next.map(|cursor| cursor.to_string()),
        }
    }
}

/// A run's log lines, oldest first, a page at a time: what its workflow and
/// steps logged (each execution's lines are stored as it ends) and what the
/// host said about it.
#[utoipa::path(get, path = "/v1/runs/{id}/logs", params(RunPath, LogParams),
    responses((status = 200, body = LogPageBody), Malformed, UnknownRun, Refusals))]
pub async fn logs(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(RunPath { id }): Path<RunPath>,
    Query(params): Query<LogParams>,
) -> Result<Json<LogPageBody>, ApiError> {
    let limit = params.limit.unwrap_or(DEFAULT_LOG_PAGE);
    if !(1..=MAX_LOG_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit {limit}: a page holds 1 to {MAX_LOG_PAGE} lines"
        )));
    }
    let after = params.cursor.map(|LogCursorParam(cursor)| cursor);
    let page = state
        .runtime
        .logs()
        .page(&tenant.id, &id, after.as_ref(), limit)
        .await?;
    Ok(Json(page.into()))
}
