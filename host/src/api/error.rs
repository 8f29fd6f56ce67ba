//! How a failure becomes an HTTP answer: a status a client can act on and a
//! JSON body `{"error": "..."}` saying what was wrong.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::component::ComponentError;
use crate::journal::JournalError;
use crate::policy::OverQuota;
use crate::runtime::{ContinuationError, RunError};
use crate::schedules::ScheduleError;
use crate::secrets::SecretError;
use crate::store::StoreError;

/// A failed request.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    retry_after_secs: Option<u64>,
}

impl ApiError {
    /// An answer of `status`, with `message` as its body's `error`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after_secs: None,
        }
    }

    /// 400: the request is wrong, as `message` says.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 429: come back after `retry_after_secs`.
    pub fn too_many(message: impl Into<String>, retry_after_secs: u64) -> Self {
        Self {
            retry_after_secs: Some(retry_after_secs),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, message)
        }
    }

    /// The HTTP status the answer has.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// What was wrong, for the client.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// 401: the bearer token is missing or unknown; the answer asks for one
    /// (`WWW-Authenticate: Bearer`).
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "missing or unknown bearer token: send `Authorization: Bearer <token>`",
        )
    }
}

#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What was wrong, and what to do about it.
    pub error: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(status = %self.status, "{}", self.message);
        }
        let mut response = (self.status, Json(ErrorBody { error: self.message })).into_response();
        if let Some(secs) = self.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<RunError> for ApiError {
    fn from(error: RunError) -> Self {
        let status = match &error {
            // No such run; or no such workflow in the component, like no such component.
            RunError::UnknownRun { .. } | RunError::UnknownWorkflow { .. } => StatusCode::NOT_FOUND,
            RunError::InvalidJson { .. }
            | RunError::InvalidName(_)
            | RunError::InvalidTime(_)
            | RunError::SignalRefused { .. }
            | RunError::InvalidNotify(_)
            | RunError::GroupSize { .. }
            | RunError::Priority { .. }
            | RunError::ConcurrencyLimit { .. }
            | RunError::TooManyTags { .. } => StatusCode::BAD_REQUEST,
            RunError::UnknownGroup { .. } => StatusCode::NOT_FOUND,
            RunError::GroupMismatch { .. } => StatusCode::CONFLICT,
            RunError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            RunError::OverQuota(over) => match over {
                OverQuota::Payload { .. } | OverQuota::ComponentSize { .. } => StatusCode::PAYLOAD_TOO_LARGE,
                OverQuota::ComponentCount { .. } | OverQuota::ComponentBytes { .. } => StatusCode::FORBIDDEN,
                OverQuota::CompileTime { .. } => StatusCode::BAD_REQUEST,
            },
            RunError::SignalsFull { .. } | RunError::StreamReaders { .. } => StatusCode::TOO_MANY_REQUESTS,
            RunError::Refused(refusal) => match refusal.retry_after() {
                Some(wait) => return Self::too_many(error.to_string(), wait.as_secs().max(1)),
                None => StatusCode::BAD_REQUEST,
            },
            RunError::InputMismatch { .. }
            | RunError::BeingDeleted { .. }
            | RunError::ClaimedTooOften { .. }
            | RunError::Finished { .. }
            | RunError::NotWaiting { .. }
            | RunError::Conflict { .. }
            | RunError::RestartRefused { .. }
            | RunError::DrivenElsewhere { .. } => StatusCode::CONFLICT,
            RunError::Component(ComponentError::Unknown { .. } | ComponentError::UnknownVersion { .. }) => {
                StatusCode::NOT_FOUND
            }
            RunError::Component(ComponentError::CorruptVersion { .. }) => StatusCode::INTERNAL_SERVER_ERROR,
            RunError::Component(ComponentError::InUse { .. }) => StatusCode::CONFLICT,
            RunError::Component(ComponentError::Store(e)) => store_status(e),
            RunError::Component(_) => StatusCode::BAD_REQUEST,
            RunError::Journal(e) => match &**e {
                JournalError::Store(e) => store_status(e),
                JournalError::StoodDown { .. } | JournalError::Unsettled { .. } => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
            RunError::NotLive(_) | RunError::Interrupted { .. } => StatusCode::SERVICE_UNAVAILABLE,
            RunError::Instance { .. } | RunError::Sandbox(_) | RunError::HostsFile(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            RunError::Secrets(e) => secret_status(e),
            RunError::Schedule(e) => schedule_status(e),
            RunError::Hook(e) => super::hooks::hook_status(e),
            // The chain's latest generation is found by asking again.
            RunError::Continuation(ContinuationError::Unresolved { .. }) => StatusCode::SERVICE_UNAVAILABLE,
            RunError::Continuation(_) => StatusCode::CONFLICT,
        };
        match status {
            StatusCode::TOO_MANY_REQUESTS => Self::too_many(error.to_string(), 1),
            _ => Self::new(status, error.to_string()),
        }
    }
}

pub(super) fn store_status(error: &StoreError) -> StatusCode {
    match error {
        StoreError::NotFound { .. } => StatusCode::NOT_FOUND,
        StoreError::AlreadyExists { .. } => StatusCode::CONFLICT,
        StoreError::Unavailable { .. }
        | StoreError::Open { .. }
        | StoreError::Location { .. }
        | StoreError::Unsuitable { .. } => StatusCode::SERVICE_UNAVAILABLE,
    }
}

fn schedule_status(error: &ScheduleError) -> StatusCode {
    match error {
        ScheduleError::InvalidCron { .. } | ScheduleError::InvalidCatchUp { .. } => StatusCode::BAD_REQUEST,
        ScheduleError::Exists { .. } => StatusCode::CONFLICT,
        ScheduleError::TooMany { .. } => StatusCode::FORBIDDEN,
        ScheduleError::Unknown { .. } => StatusCode::NOT_FOUND,
        ScheduleError::Corrupt { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        ScheduleError::Store(e) => store_status(e),
    }
}

impl From<ScheduleError> for ApiError {
    fn from(error: ScheduleError) -> Self {
        Self::new(schedule_status(&error), error.to_string())
    }
}

fn secret_status(error: &SecretError) -> StatusCode {
    match error {
        SecretError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        SecretError::TooMany => StatusCode::FORBIDDEN,
        SecretError::Empty { .. } => StatusCode::BAD_REQUEST,
        SecretError::Store(e) => store_status(e),
        // The host's key is missing or wrong: the operator's to fix.
        SecretError::NoKey | SecretError::BadKey { .. } | SecretError::Sealed { .. } => StatusCode::SERVICE_UNAVAILABLE,
    }
}

impl From<SecretError> for ApiError {
    fn from(error: SecretError) -> Self {
        Self::new(secret_status(&error), error.to_string())
    }
}
