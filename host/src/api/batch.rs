//! `/v1/batch`: pausing or resuming many of a tenant's unfinished runs at
//! once, a page at a time (see [`crate::runtime::RunSelector`]).

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::ToSchema;

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::OptionalJson;
use super::responses::{JsonBody, Malformed, Oversized, Refusals};
use crate::runtime::{AttemptUnderWay, BatchAction, BatchPage, RunSelector};
use crate::store::{ComponentName, RunId, RunTag, TenantId};

/// Which unfinished runs a batch acts on: those passing every filter given
/// (none: all the tenant's).
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    /// Only runs of this component: every version of a name, or one build
    /// by its digest.
    pub component: Option<ComponentName>,
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// Only runs given this tag.
    pub tag: Option<RunTag>,
    /// Only runs after this one: the previous page's `next`.
    pub after: Option<RunId>,
    /// Why, kept on each run paused (a pause only).
    pub reason: Option<String>,
    /// Stop each run's step attempt under way, as `/v1/runs/{id}/pause`
    /// does (a pause only). False by default.
    pub interrupt: Option<bool>,
}

impl ApiState {
    async fn selector(&self, tenant: &TenantId, batch: Batch) -> Result<RunSelector, ApiError> {
        let builds = match &batch.component {
            Some(component) => Some(self.runtime.catalog().builds(tenant, component.as_str()).await?),
            None => None,
        };
        Ok(RunSelector {
            builds,
            workflow: batch.workflow,
            tag: batch.tag,
            after: batch.after,
        })
    }
}

/// Pause a page of the tenant's unfinished runs (at most 1,000 looked at a
/// call, in id order): each as `/v1/runs/{id}/pause` does. Runs started
/// after are not paused; asking again pauses nothing twice.
#[utoipa::path(post, path = "/v1/batch/pause",
    request_body(content = Option<Batch>, description = "optional: no filter pauses every unfinished run"),
    responses(
        (status = 200, body = BatchPage, description = "the runs paused, and where the next page starts"),
        (status = 404, body = ErrorBody, description = "no such component"),
        Malformed, Oversized, JsonBody, Refusals,
    ))]
pub async fn pause(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    OptionalJson(batch): OptionalJson<Batch>,
) -> Result<Json<BatchPage>, ApiError> {
    let reason = batch
        .reason
        .clone()
        .unwrap_or_else(|| "paused by a batch through the API".into());
    let under_way = AttemptUnderWay::stopped_if(batch.interrupt.unwrap_or(false));
    let selector = state.selector(&tenant.id, batch).await?;
    let page = state
        .runtime
        .runs()
        .batch(&tenant.id, &selector, BatchAction::Pause(&reason, under_way))
        .await?;
    Ok(Json(page))
}

/// Resume a page of the tenant's paused runs (at most 1,000 looked at a
/// call, in id order), each where it stopped.
#[utoipa::path(post, path = "/v1/batch/resume",
    request_body(content = Option<Batch>, description = "optional: no filter resumes every paused run"),
    responses(
        (status = 200, body = BatchPage, description = "the runs resumed, and where the next page starts"),
        (status = 404, body = ErrorBody, description = "no such component"),
        Malformed, Oversized, JsonBody, Refusals,
    ))]
pub async fn resume(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    OptionalJson(batch): OptionalJson<Batch>,
) -> Result<Json<BatchPage>, ApiError> {
    let selector = state.selector(&tenant.id, batch).await?;
    let page = state
        .runtime
        .runs()
        .batch(&tenant.id, &selector, BatchAction::Resume)
        .await?;
    Ok(Json(page))
}
