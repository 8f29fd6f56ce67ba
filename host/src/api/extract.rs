//! The API's request extractors: axum's `Json`, `Query`, `Path` and body
//! bytes, with every rejection answered like any other refusal, as an
//! [`ApiError`] (`{"error": "..."}`) instead of axum's plain text.
//!
//! Invariant: the status stays axum's (400 for a malformed request, 413 for
//! an oversized body, 415 for a wrong content type, 422 for JSON of the
//! wrong shape) and the message is axum's, which names the offending field.

use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

macro_rules! rejection_as_api_error {
    ($($rejection:ty),*) => {$(
        impl From<$rejection> for ApiError {
            fn from(rejection: $rejection) -> Self {
                ApiError::new(rejection.status(), rejection.body_text())
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
