//! The API's request extractors: axum's `Json`, `Query`, `Path` and body
//! bytes, with every rejection answered like any other refusal, as an
//! [`ApiError`] (`{"error": "..."}`) instead of axum's plain text.
//!
//! Invariant: the status stays axum's (400 for a malformed request, 413 for
//! an oversized body, 415 for a wrong content type, 422 for JSON of the
//! wrong shape) and the message is axum's, which names the offending field
//! (but for a 413, whose message names the limit).
//! [`OptionalJson`], which is not axum's, answers the same statuses.

use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::error::Category;

use super::body_limit::SMALL_BODY;
use super::error::ApiError;

macro_rules! rejection_as_api_error {
    ($($rejection:ty),*) => {$(
        impl From<$rejection> for ApiError {
            fn from(rejection: $rejection) -> Self {
                match rejection.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("the body is over this endpoint's limit of {SMALL_BODY} bytes: send less"),
                    ),
                    status => ApiError::new(status, rejection.body_text()),
                }
            }
        }
    )*};
}

rejection_as_api_error!(BytesRejection, JsonRejection, PathRejection, QueryRejection);

/// A JSON request body.
pub struct Json<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let axum::Json(value) = <axum::Json<T> as FromRequest<S>>::from_request(request, state).await?;
        Ok(Self(value))
    }
}

/// The query string.
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Query(value) = axum::extract::Query::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

/// The path parameters.
pub struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Path(value) = axum::extract::Path::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

/// The raw request body.
pub struct Body(pub bytes::Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        Ok(Self(bytes::Bytes::from_request(request, state).await?))
    }
}

/// A JSON body that may be left out: an empty body, like `null`, is
/// `T::default()`. The content type is not checked, so `curl -X POST` with
/// or without `-H 'Content-Type: application/json'` works.
pub struct OptionalJson<T>(pub T);

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let Body(body) = Body::from_request(request, state).await?;
        if body.is_empty() {
            return Ok(Self(T::default()));
        }
        let value = serde_json::from_slice::<Option<T>>(&body);
        value
            .map(|value| Self(value.unwrap_or_default()))
            .map_err(|error| match error.classify() {
                Category::Data => ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("the body is not of the documented shape: {error}"),
                ),
                _ => ApiError::bad_request(format!("the body is not JSON: {error}")),
            })
    }
}
