//! `/v1/schedules`: a tenant's cron schedules, each starting a run of a
//! workflow at every fire (see [`crate::schedules`]).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::{self, Path};
use super::responses::{JsonBody, Malformed, Oversized, Refusals};
use crate::schedules::{NewSchedule, ScheduleView};
use crate::store::ScheduleName;

/// Which schedule.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SchedulePath {
    #[param(inline)]
    name: ScheduleName,
}

/// The tenant's schedules.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct ScheduleList {
    pub schedules: Vec<ScheduleView>,
}

/// Add a cron schedule (adding the same one again answers it; another of the same name is refused).
#[utoipa::path(post, path = "/v1/schedules", request_body = NewSchedule, responses(
    (status = 201, body = ScheduleView, description = "added (or the same schedule was there)"),
    (status = 403, body = ErrorBody, description = "the tenant holds 100 schedules, the limit"),
    (status = 404, body = ErrorBody, description = "no such component, or no such workflow in it"),
    (status = 409, body = ErrorBody, description = "a schedule of that name orders other runs"),
    (status = 415, body = ErrorBody, description = "the body is not `Content-Type: application/json`"),
    Malformed, Oversized, JsonBody, Refusals,
))]
pub async fn add(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    extract::Json(new): extract::Json<NewSchedule>,
) -> Result<(StatusCode, Json<ScheduleView>), ApiError> {
    let added = state.runtime.runs().add_schedule(&tenant.id, new).await?;
    Ok((StatusCode::CREATED, Json(added)))
}

/// The tenant's schedules, by name.
#[utoipa::path(get, path = "/v1/schedules", responses((status = 200, body = ScheduleList), Refusals))]
pub async fn list(State(state): State<ApiState>, Caller(tenant): Caller) -> Result<Json<ScheduleList>, ApiError> {
    let schedules = state.runtime.schedules().list(&tenant.id).await?;
    Ok(Json(ScheduleList { schedules }))
}

/// A schedule: what it starts, when it fires next, its last run.
#[utoipa::path(get, path = "/v1/schedules/{name}", params(SchedulePath), responses(
    (status = 200, body = ScheduleView),
    (status = 404, body = ErrorBody, description = "no such schedule"),
    Malformed, Refusals,
))]
pub async fn get(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(SchedulePath { name }): Path<SchedulePath>,
) -> Result<Json<ScheduleView>, ApiError> {
    Ok(Json(state.runtime.schedules().get(&tenant.id, &name).await?))
}

/// Pause a schedule: it fires nothing until resumed.
#[utoipa::path(post, path = "/v1/schedules/{name}/pause", params(SchedulePath), responses(
    (status = 200, body = ScheduleView),
    (status = 404, body = ErrorBody, description = "no such schedule"),
    Malformed, Oversized, Refusals,
))]
pub async fn pause(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(SchedulePath { name }): Path<SchedulePath>,
) -> Result<Json<ScheduleView>, ApiError> {
    Ok(Json(
        state.runtime.schedules().set_paused(&tenant.id, &name, true).await?,
    ))
}

/// Resume a paused schedule: it fires from now on (fires while paused are not made up).
#[utoipa::path(post, path = "/v1/schedules/{name}/resume", params(SchedulePath), responses(
    (status = 200, body = ScheduleView),
    (status = 404, body = ErrorBody, description = "no such schedule"),
    Malformed, Oversized, Refusals,
))]
pub async fn resume(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(SchedulePath { name }): Path<SchedulePath>,
) -> Result<Json<ScheduleView>, ApiError> {
    Ok(Json(
        state.runtime.schedules().set_paused(&tenant.id, &name, false).await?,
    ))
}

/// Delete a schedule; the runs it started go on.
#[utoipa::path(delete, path = "/v1/schedules/{name}", params(SchedulePath), responses(
    (status = 204, description = "deleted"),
    (status = 404, body = ErrorBody, description = "no such schedule"),
    Malformed, Refusals,
))]
pub async fn delete(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(SchedulePath { name }): Path<SchedulePath>,
) -> Result<StatusCode, ApiError> {
    match state.runtime.schedules().delete(&tenant.id, &name).await? {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(ApiError::new(StatusCode::NOT_FOUND, format!("no schedule `{name}`"))),
    }
}
