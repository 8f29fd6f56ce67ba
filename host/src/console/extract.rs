//! The console's request extractors: axum's `Path`, `Query` and `Form`,
//! each rejection answered as a page saying what was wrong (with axum's
//! status and message), like every other refusal of the console.

use axum::extract::rejection::{FormRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::PageError;

macro_rules! rejection_as_page_error {
    ($($rejection:ty),*) => {$(
        impl From<$rejection> for PageError {
            fn from(rejection: $rejection) -> Self {
                PageError::new(rejection.status(), rejection.body_text())
            }
        }
    )*};
}

rejection_as_page_error!(FormRejection, PathRejection, QueryRejection);

/// The path parameters.
pub struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, PageError> {
        let axum::extract::Path(value) = axum::extract::Path::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

/// The query string.
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, PageError> {
        let axum::extract::Query(value) = axum::extract::Query::from_request_parts(parts, state).await?;
        Ok(Self(value))
    }
}

/// A form posted as `application/x-www-form-urlencoded`.
pub struct Form<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Form<T> {
    type Rejection = PageError;

    async fn from_request(request: Request, state: &S) -> Result<Self, PageError> {
        let axum::Form(value) = axum::Form::from_request(request, state).await?;
        Ok(Self(value))
    }
}
