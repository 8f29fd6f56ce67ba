//! `/v1/hooks`: a tenant's HTTP hooks, and `/hooks/{tenant}/{name}`, where
//! each starts a run per signed request (see [`crate::http_hooks`]).

use axum::body::Bytes;
use axum::extract::{OriginalUri, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::{self, Path, Query};
use super::hook_check::Admitted;
use super::responses::{JsonBody, Malformed, Oversized, Refusals};
use super::runs::{StartParams, Started, held_for};
use crate::http_hooks::{self, Hook, HookError};
use crate::runtime::{RunStatus, Submission};
use crate::store::{HookName, TenantId};

/// Which hook.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct HookPath {
    #[param(inline)]
    name: HookName,
}

/// A tenant's hook, reached at `/hooks/{tenant}/{name}`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct PublicHookPath {
    #[param(inline)]
    tenant: TenantId,
    #[param(inline)]
    name: HookName,
}

/// A hook, by name.
#[derive(Serialize, ToSchema)]
pub struct NamedHook {
    pub name: HookName,
    /// What it starts.
    pub hook: Hook,
}

/// The tenant's hooks.
#[derive(Serialize, ToSchema)]
pub struct HookList {
    pub hooks: Vec<NamedHook>,
}

/// Add or replace a hook: `/hooks/{tenant}/{name}` then starts a run of the
/// workflow per request signed with the tenant's secret `hook-signing-key`.
#[utoipa::path(put, path = "/v1/hooks/{name}", params(HookPath), request_body = Hook, responses(
    (status = 200, body = NamedHook, description = "stored"),
    (status = 400, body = ErrorBody, description = "a header name that is none, or more than 16"),
    (status = 403, body = ErrorBody, description = "the tenant holds 100 hooks, the limit"),
    (status = 404, body = ErrorBody, description = "no such component, or no such workflow in it"),
    (status = 415, body = ErrorBody, description = "the body is not `Content-Type: application/json`"),
    Malformed, Oversized, JsonBody, Refusals,
))]
pub async fn put(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(HookPath { name }): Path<HookPath>,
    extract::Json(hook): extract::Json<Hook>,
) -> Result<Json<NamedHook>, ApiError> {
    let hook = state.runtime.put_hook(&tenant.id, &name, hook).await?;
    Ok(Json(NamedHook { name, hook }))
}

/// The tenant's hooks, by name.
#[utoipa::path(get, path = "/v1/hooks", responses((status = 200, body = HookList), Refusals))]
pub async fn list(State(state): State<ApiState>, Caller(tenant): Caller) -> Result<Json<HookList>, ApiError> {
    let hooks = state.runtime.hooks().list(&tenant.id).await?;
    let hooks = hooks.into_iter().map(|(name, hook)| NamedHook { name, hook }).collect();
    Ok(Json(HookList { hooks }))
}

/// Delete a hook; the runs it started go on.
#[utoipa::path(delete, path = "/v1/hooks/{name}", params(HookPath), responses(
    (status = 204, description = "deleted"),
    (status = 404, body = ErrorBody, description = "no such hook"),
    Malformed, Refusals,
))]
pub async fn delete(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(HookPath { name }): Path<HookPath>,
) -> Result<StatusCode, ApiError> {
    match state.runtime.hooks().delete(&tenant.id, &name).await? {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(HookError::Unknown { name }.into()),
    }
}

/// Start a run of the hook's workflow with the POSTed request as its input
/// (`{method, headers, query, body, signed}`), if it is signed:
/// `Stepstone-Signature: t={unix seconds},sha256={hex HMAC-SHA256 of "{t}.{METHOD} {path and query}\n{body}"}`
/// under the tenant's secret `hook-signing-key`, `t` within 300 s: the
/// signature holds for this hook and this query alone. No
/// token: the signature is the credential. The same request sent again
/// answers the same run. With `wait`, the answer is the run's status once
/// it ends or the wait runs out (`wait` stays in the query the run sees).
#[utoipa::path(post, path = "/hooks/{tenant}/{name}", params(PublicHookPath, StartParams),
    request_body(content = String, description = "any body: JSON, or text"),
    security(()),
    responses(
        (status = 202, body = Started, description = "the run started (or the same request's, sent before); without `wait`"),
        (status = 200, body = RunStatus, description = "with `wait`: where the run stands when it finished or the wait ran out"),
        (status = 401, body = ErrorBody, description = "unsigned, forged, or signed over 300 s away from now"),
        (status = 404, body = ErrorBody, description = "no such hook (or its tenant has set no `hook-signing-key`)"),
        Malformed, Oversized, Refusals,
    ))]
pub async fn call(
    State(state): State<ApiState>,
    Path(PublicHookPath { tenant, name }): Path<PublicHookPath>,
    Query(params): Query<StartParams>,
    Extension(admitted): Extension<Admitted>,
    OriginalUri(uri): OriginalUri,
    request: Parts,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Parts { method, headers, .. } = request;
    let query = uri.query();
    let request = http_hooks::SignedRequest {
        method: method.as_str(),
        target: uri.path_and_query().map_or(uri.path(), |target| target.as_str()),
        body: &body,
    };
    let signed = (admitted.signature.verify(admitted.key.as_bytes(), request))
        .map_err(|refusal| ApiError::new(StatusCode::UNAUTHORIZED, refusal.to_string()))?;
    let hook = admitted.hook;
    let passed = headers.iter().map(|(name, value)| (name.as_str(), value.as_bytes()));
    let input = http_hooks::input(method.as_str(), passed, &hook, query, &body);
    let component = state.runtime.component(&tenant, hook.component.as_str()).await?;
    let mut submission = Submission::new(component, hook.workflow.as_str(), &input);
    submission.run_id = Some(http_hooks::run_id(&name, &signed));
    let run = state.runtime.start(&tenant, submission).await?;
    let Some(timeout) = params.wait else {
        return Ok((StatusCode::ACCEPTED, Json(Started { run_id: run })).into_response());
    };
    Ok(Json(state.runtime.runs().wait(&tenant, &run, held_for(timeout)).await?).into_response())
}

pub(super) fn hook_status(error: &HookError) -> StatusCode {
    match error {
        HookError::Unknown { .. } => StatusCode::NOT_FOUND,
        HookError::TooMany => StatusCode::FORBIDDEN,
        HookError::Headers(_) => StatusCode::BAD_REQUEST,
        HookError::Corrupt { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        HookError::Store(e) => super::error::store_status(e),
    }
}

impl From<HookError> for ApiError {
    fn from(error: HookError) -> Self {
        Self::new(hook_status(&error), error.to_string())
    }
}
