//! Who is calling: the bearer token of every request, mapped to its tenant.

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;

use super::ApiState;
use super::error::ApiError;
use crate::tenancy::Tenant;

/// The tenant a request authenticated as.
pub struct Caller(pub Tenant);

impl FromRequestParts<ApiState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .ok_or_else(ApiError::unauthorized)?;
        let tenant = state
            .tenants()
            .authenticate(token.trim())
            .cloned()
            .ok_or_else(ApiError::unauthorized)?;
        Ok(Self(tenant))
    }
}
