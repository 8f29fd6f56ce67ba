//! `/v1/components`: uploading, listing and describing a tenant's components.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::{Body, Path, Query};
use crate::component::Loaded;
use crate::store::ComponentName;

/// A stored component and what it exports.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct ComponentInfo {
    /// The name it was uploaded under, if any.
    pub name: Option<String>,
    /// SHA-256 of its bytes: pins this exact build.
    pub digest: String,
    pub workflows: Vec<String>,
    pub steps: Vec<String>,
}

impl ComponentInfo {
    fn of(loaded: &Loaded, name: Option<String>) -> Self {
        Self {
            name,
            digest: loaded.digest.clone(),
            workflows: loaded.manifest.workflows.clone(),
            steps: loaded.manifest.steps.clone(),
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
    /// Name the upload; the name then points at this build.
    name: Option<String>,
}

/// Upload a component (the raw `.wasm` as the body).
#[utoipa::path(post, path = "/v1/components", params(UploadParams),
    request_body(content = Vec<u8>, content_type = "application/wasm"),
    responses(
        (status = 201, body = ComponentInfo, description = "stored (or already stored: uploads are idempotent)"),
        (status = 400, body = ErrorBody, description = "not a valid Stepstone component"),
        (status = 413, body = ErrorBody, description = "over the tenant's component size quota"),
    ))]
pub async fn upload(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Query(params): Query<UploadParams>,
    Body(body): Body,
) -> Result<(StatusCode, Json<ComponentInfo>), ApiError> {
    ApiError::check_size("the component", body.len(), tenant.quotas.max_component_bytes)?;
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "the body is empty: send the component's .wasm bytes",
        ));
    }
    let name = params
        .name
        .as_deref()
        .map(ComponentName::new)
        .transpose()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let _compiling = state.compile_permit(&tenant.id).await;
    let budget = Duration::from_millis(tenant.quotas.compile_timeout_ms);
    let loaded = tokio::time::timeout(budget, state.runtime.upload(&tenant.id, body, name.as_ref()))
        .await
        .map_err(|_| ApiError::bad_request(format!("validating and compiling the component took over {budget:?}, this tenant's limit: upload a smaller component")))??;
    Ok((StatusCode::CREATED, Json(ComponentInfo::of(&loaded, params.name))))
}

/// List the tenant's component names.
#[utoipa::path(get, path = "/v1/components", responses((status = 200, body = Vec<NamedComponent>)))]
pub async fn list(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
) -> Result<Json<Vec<NamedComponent>>, ApiError> {
    let names = state.runtime.component_names(&tenant.id).await?;
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

/// Describe a component, by name or digest.
#[utoipa::path(get, path = "/v1/components/{reference}",
    params(("reference" = String, Path, description = "a component name or digest")),
    responses((status = 200, body = ComponentInfo), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(reference): Path<String>,
) -> Result<Json<ComponentInfo>, ApiError> {
    let loaded = state.runtime.component(&tenant.id, &reference).await?;
    let name = (loaded.digest != reference).then_some(reference);
    Ok(Json(ComponentInfo::of(&loaded, name)))
}
