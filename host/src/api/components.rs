//! `/v1/components`: uploading, listing and describing a tenant's components.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::{IntoParams, PartialSchema, ToSchema};

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::{self, Body, Path, Query};
use super::responses::{JsonBody, Malformed, Oversized, Refusals};
use crate::component::{ComponentVersion, Loaded};
use crate::runtime::UpgradeReport;
use crate::store::{ComponentName, RunId};

/// A stored component and what it exports.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct ComponentInfo {
    /// The name it was uploaded under, if any.
    pub name: Option<String>,
    /// SHA-256 of its bytes: pins this exact build.
    pub digest: String,
    pub workflows: Vec<String>,
    pub steps: Vec<String>,
    /// The JSON Schema it declares for each signal its workflows await
    /// (a send that does not match is refused with 400).
    #[serde(default)]
    pub signal_schemas: std::collections::BTreeMap<String, serde_json::Value>,
    /// Described by name: every build the name has pointed at, oldest
    /// first (start one with `version` on `POST /v1/runs`).
    #[serde(default)]
    pub versions: Vec<ComponentVersion>,
}

impl ComponentInfo {
    fn of(loaded: &Loaded, name: Option<String>) -> Self {
        Self {
            name,
            digest: loaded.digest.clone(),
            workflows: loaded.manifest.workflows.clone(),
            steps: loaded.manifest.steps.clone(),
            signal_schemas: loaded.signals.declared(),
            versions: Vec::new(),
        }
    }
}

/// A component name and the build it points at.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct NamedComponent {
    pub name: String,
    pub digest: String,
}

#[derive(Deserialize, IntoParams)]
pub struct UploadParams {
    /// Name the upload; the name then points at this build. Not 64 hex
    /// digits: a reference written so means that digest.
    #[param(inline)]
    name: Option<ComponentName>,
}

/// A component's `.wasm` bytes, whatever the content type says.
pub struct Wasm;

impl PartialSchema for Wasm {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .into()
    }
}

impl ToSchema for Wasm {}

/// Upload a component (the raw `.wasm` as the body).
#[utoipa::path(post, path = "/v1/components", params(UploadParams),
    request_body(content(
        (inline(Wasm) = "application/wasm"),
        (inline(Wasm) = "application/octet-stream"),
    )),
    responses(
        (status = 201, body = ComponentInfo, description = "stored (or already stored: uploads are idempotent)"),
        (status = 400, body = ErrorBody, description = "not a valid Stepstone component, or an invalid `name`"),
        (status = 403, body = ErrorBody, description = "over the tenant's quota of stored components (count or bytes)"),
        (status = 413, body = ErrorBody, description = "over the tenant's component size quota"),
        Refusals,
    ))]
pub async fn upload(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Query(params): Query<UploadParams>,
    Body(body): Body,
) -> Result<(StatusCode, Json<ComponentInfo>), ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "the body is empty: send the component's .wasm bytes",
        ));
    }
    let loaded = state.runtime.upload(&tenant.id, body, params.name.as_ref()).await?;
    let name = params.name.map(String::from);
    Ok((StatusCode::CREATED, Json(ComponentInfo::of(&loaded, name))))
}

/// List the tenant's component names.
#[utoipa::path(get, path = "/v1/components", responses((status = 200, body = Vec<NamedComponent>), Refusals))]
pub async fn list(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
) -> Result<Json<Vec<NamedComponent>>, ApiError> {
    let names = state.runtime.catalog().component_names(&tenant.id).await?;
    Ok(Json(
        names
            .into_iter()
            .map(|(name, digest)| NamedComponent {
                name: name.to_string(),
                digest,
            })
            .collect(),
    ))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ComponentPath {
    /// A component name or digest.
    #[param(inline)]
    reference: ComponentName,
}

/// Describe a component, by name or digest.
#[utoipa::path(get, path = "/v1/components/{reference}", params(ComponentPath),
    responses(
        (status = 200, body = ComponentInfo),
        (status = 404, body = ErrorBody, description = "no such component"),
        Malformed, Refusals,
    ))]
pub async fn get(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(ComponentPath { reference }): Path<ComponentPath>,
) -> Result<Json<ComponentInfo>, ApiError> {
    let loaded = state.runtime.component(&tenant.id, reference.as_str()).await?;
    if loaded.digest == reference.as_str() {
        return Ok(Json(ComponentInfo::of(&loaded, None)));
    }
    let mut info = ComponentInfo::of(&loaded, Some(reference.to_string()));
    info.versions = state
        .runtime
        .catalog()
        .component_versions(&tenant.id, &reference)
        .await?;
    Ok(Json(info))
}

/// Delete a component by digest, once no name, schedule or stored run refers to it.
#[utoipa::path(delete, path = "/v1/components/{reference}", params(ComponentPath),
    responses(
        (status = 204, description = "deleted"),
        (status = 404, body = ErrorBody, description = "no component of this digest"),
        (status = 409, body = ErrorBody, description = "a name, a schedule or a stored run refers to it (the error says which)"),
        Malformed, Refusals,
    ))]
pub async fn delete(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(ComponentPath { reference }): Path<ComponentPath>,
) -> Result<StatusCode, ApiError> {
    state
        .runtime
        .catalog()
        .delete_component(&tenant.id, reference.as_str())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// What to move a build's unfinished runs to.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Upgrade {
    /// The new build: a component name (the build it points at) or digest.
    pub to: ComponentName,
    /// Check every run against the new build, and move none.
    #[serde(default)]
    pub dry_run: bool,
    /// Go on after this run: the `next_after` of the previous answer.
    pub after: Option<RunId>,
}

/// Move the unfinished runs of a build (the one a name points at now, or a
/// digest) to another: each is replayed against the new build, and moves
/// only if it replays identically so far (at most 100 runs a call).
#[utoipa::path(post, path = "/v1/components/{reference}/upgrade", params(ComponentPath), request_body = Upgrade,
    responses(
        (status = 200, body = UpgradeReport),
        (status = 404, body = ErrorBody, description = "no such component to move to"),
        (status = 415, body = ErrorBody, description = "the body is not `Content-Type: application/json`"),
        Malformed, Oversized, JsonBody, Refusals,
    ))]
pub async fn upgrade(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(ComponentPath { reference }): Path<ComponentPath>,
    extract::Json(upgrade): extract::Json<Upgrade>,
) -> Result<Json<UpgradeReport>, ApiError> {
    let from = state.runtime.catalog().component_digest(&tenant.id, &reference).await?;
    let to = state.runtime.component(&tenant.id, upgrade.to.as_str()).await?;
    let report = (state.runtime)
        .upgrades()
        .build(&tenant.id, &from, to, upgrade.dry_run, upgrade.after.as_ref())
        .await?;
    Ok(Json(report))
}
