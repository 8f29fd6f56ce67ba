//! `/v1/secrets`: a tenant's secrets, write-only. Values go in and are
//! never answered back; listings give names.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{IntoParams, PartialSchema, ToSchema};

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::{Body, Path, Query};
use super::responses::{Malformed, Refusals};
use crate::secrets::MAX_SECRET_CHARS;
use crate::store::{ComponentName, SecretName};

/// A secret's value: UTF-8 text, 1 to 16384 characters.
pub struct SecretValue;

impl PartialSchema for SecretValue {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(MAX_SECRET_CHARS))
            .into()
    }
}

impl ToSchema for SecretValue {}

/// Which secret.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SecretPath {
    #[param(inline)]
    name: SecretName,
}

/// Whose secrets: the tenant's, or one of its component names'.
#[derive(Deserialize, IntoParams)]
pub struct ScopeParams {
    /// A component name: its secrets, which the steps a workflow calls as
    /// `COMPONENT/step` read in place of the tenant's of the same name.
    #[param(inline)]
    component: Option<ComponentName>,
}

/// The names of the tenant's secrets.
#[derive(Serialize, ToSchema)]
pub struct SecretNames {
    pub names: Vec<SecretName>,
}

/// Set a secret (the body is its value, UTF-8 text); steps read it through `wasi:config/store`.
#[utoipa::path(put, path = "/v1/secrets/{name}", params(SecretPath, ScopeParams),
    request_body(content = inline(SecretValue), content_type = "text/plain", description = "the value, at most 16384 characters"),
    responses(
        (status = 204, description = "set, sealed with the host key"),
        (status = 403, body = ErrorBody, description = "the tenant holds 100 secrets, the limit"),
        (status = 413, body = ErrorBody, description = "the value is over 16384 characters"),
        Malformed, Refusals,
        // After `Refusals`, whose 503 it replaces.
        (status = 503, body = ErrorBody, description = "the host has no secret key (`STEPSTONE_SECRET_KEY`, the operator's to set), or the store is unavailable: retry later"),
    ))]
pub async fn set(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(SecretPath { name }): Path<SecretPath>,
    Query(ScopeParams { component }): Query<ScopeParams>,
    Body(body): Body,
) -> Result<StatusCode, ApiError> {
    let value =
        std::str::from_utf8(&body).map_err(|_| ApiError::bad_request("the secret's value is not UTF-8 text"))?;
    state
        .runtime
        .secrets()
        .set(&tenant.id, component.as_ref(), &name, value)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The names of the tenant's secrets (never their values).
#[utoipa::path(get, path = "/v1/secrets", params(ScopeParams), responses((status = 200, body = SecretNames), Malformed, Refusals))]
pub async fn list(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Query(ScopeParams { component }): Query<ScopeParams>,
) -> Result<Json<SecretNames>, ApiError> {
    let names = state.runtime.secrets().names(&tenant.id, component.as_ref()).await?;
    Ok(Json(SecretNames { names }))
}

/// Delete a secret.
#[utoipa::path(delete, path = "/v1/secrets/{name}", params(SecretPath, ScopeParams),
    responses(
        (status = 204, description = "deleted"),
        (status = 404, body = ErrorBody, description = "no such secret"),
        Malformed, Refusals,
    ))]
pub async fn delete(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(SecretPath { name }): Path<SecretPath>,
    Query(ScopeParams { component }): Query<ScopeParams>,
) -> Result<StatusCode, ApiError> {
    match state
        .runtime
        .secrets()
        .delete(&tenant.id, component.as_ref(), &name)
        .await?
    {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(ApiError::new(StatusCode::NOT_FOUND, format!("no secret `{name}`"))),
    }
}
