//! The answers the API's operations share, as its OpenAPI document
//! declares them: the refusals several operations answer, and the schemas
//! of the names the store checks (with the limits `store::keys` enforces).

use std::collections::BTreeMap;

use axum::http::{StatusCode, header};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::{Content, HeaderBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{IntoResponses, PartialSchema, ToSchema};

use crate::store::{
    ComponentName, ConcurrencyKey, GroupId, HookName, RunId, RunTag, ScheduleName, SecretName, SignalId, SignalName,
    StreamName, TenantId, WorkflowName,
};

/// An error answer, `{"error": "..."}`, with the headers `ApiError` adds to
/// its status.
fn refusal(status: StatusCode, description: &str) -> RefOr<Response> {
    let body = Content::new(Some(Ref::from_schema_name("ErrorBody")));
    let response = ResponseBuilder::new()
        .description(description)
        .content("application/json", body);
    let string = || ObjectBuilder::new().schema_type(Type::String);
    let response = match status {
        StatusCode::UNAUTHORIZED => response.header(
            header::WWW_AUTHENTICATE.as_str(),
            HeaderBuilder::new()
                .schema(string())
                .description(Some("`Bearer`"))
                .build(),
        ),
        StatusCode::TOO_MANY_REQUESTS => response.header(
            header::RETRY_AFTER.as_str(),
            HeaderBuilder::new()
                .schema(ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(1)))
                .description(Some("seconds to wait before trying again"))
                .build(),
        ),
        _ => response,
    };
    response.build().into()
}

/// Declares a set of refusals several operations answer, for their
/// `responses(...)`.
macro_rules! refusals {
    ($($(#[$doc:meta])* $set:ident { $($status:ident => $description:literal,)* })*) => {$(
        $(#[$doc])*
        pub struct $set;

        impl IntoResponses for $set {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                BTreeMap::from([$(
                    (StatusCode::$status.as_str().to_owned(), refusal(StatusCode::$status, $description)),
                )*])
            }
        }
    )*};
}

refusals! {
    /// What any operation may answer.
    Refusals {
        UNAUTHORIZED => "missing or unknown bearer token",
        REQUEST_TIMEOUT => "the request took longer than the server allows (120 s)",
        INTERNAL_SERVER_ERROR => "the host failed (its log says why)",
        SERVICE_UNAVAILABLE => "the store is unavailable: retry later",
    }
    /// What an operation with parameters or a body answers when they break
    /// this document.
    Malformed {
        BAD_REQUEST => "a parameter or the body is malformed or breaks this document's constraints (the error says which)",
    }
    /// What an operation that reads a body answers when the body is larger
    /// than the route accepts (`body_limit` refuses it before reading it).
    Oversized {
        PAYLOAD_TOO_LARGE => "the body, or a part of it, is over this endpoint's limit or the tenant's size quota (the error names the limit)",
    }
    /// What an operation taking a JSON body answers when it is not what the
    /// schema describes.
    JsonBody {
        UNPROCESSABLE_ENTITY => "the body is JSON, but not of the schema's shape (the error names the field)",
    }
    /// What an operation on a run answers when there is no such run.
    UnknownRun {
        NOT_FOUND => "no such run (another tenant's run looks the same)",
    }
    /// What an operation answers over a rate, concurrency or buffer limit.
    Throttled {
        TOO_MANY_REQUESTS => "over one of the tenant's quotas or a run's limit (the error says which): retry later",
    }
}

/// The longest run ids, component names and signal names, as
/// `store::keys` checks them.
pub const NAME_MAX: usize = 128;
/// The longest schedule names and group ids: the run ids made of them add a suffix.
const PREFIX_NAME_MAX: usize = 100;
/// One server-sent event, as a client (an `EventSource`) parses it: what
/// the documents of `text/event-stream` answers describe, event by event:
/// its `event` (each operation lists its own), its `data` (JSON text) and,
/// where the operation gives one, its `id`.
pub struct ServerSentEvent;

impl PartialSchema for ServerSentEvent {
    fn schema() -> RefOr<Schema> {
        let text = || ObjectBuilder::new().schema_type(Type::String);
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("event", text())
            .property("data", text())
            .property("id", text())
            .required("data")
            .into()
    }
}

impl ToSchema for ServerSentEvent {}

/// The longest run tags.
const TAG_MAX: usize = 64;
/// The longest signal ids.
const SIGNAL_ID_MAX: usize = 64;
/// The longest tenant ids.
const TENANT_ID_MAX: usize = 64;

/// A regular expression for a name `store::keys` accepts: 1 to `max` ASCII
/// letters, digits, `-`, `_` and `.`, not starting with `.` (unanchored).
pub fn name_pattern(max: usize) -> String {
    format!("[A-Za-z0-9_-][A-Za-z0-9._-]{{0,{}}}", max - 1)
}

fn name_schema(max: usize, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .min_length(Some(1))
        .max_length(Some(max))
        .pattern(Some(format!("^{}$", name_pattern(max))))
        .into()
}

/// The schemas of the store's names, so that bodies and parameters holding
/// them carry their constraints.
macro_rules! name_schemas {
    ($($name:ty: $max:expr, $description:literal;)*) => {$(
        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                name_schema($max, $description)
            }
        }

        impl ToSchema for $name {}
    )*};
}

name_schemas! {
    RunId: NAME_MAX, "A run's id: letters, digits, `-`, `_` and `.`, not starting with `.`.";
    ComponentName: NAME_MAX, "A component's name (where a component is looked up, its digest also serves).";
    SignalName: NAME_MAX, "The name a signal is sent and awaited under.";
    StreamName: NAME_MAX, "A run's stream, as its workflow appends to it.";
    SignalId: SIGNAL_ID_MAX, "A sender's idempotency key for one signal.";
    SecretName: NAME_MAX, "The name of a tenant's secret, as its steps ask `wasi:config/store` for it.";
    ScheduleName: PREFIX_NAME_MAX, "A cron schedule's name; the runs it starts are `{name}-{fire time}`.";
    RunTag: TAG_MAX, "A tag given to a run at submission, to search runs by.";
    ConcurrencyKey: NAME_MAX, "What runs share to be limited together, e.g. a customer's id.";
    WorkflowName: NAME_MAX, "A workflow a component declares.";
    GroupId: PREFIX_NAME_MAX, "A group of runs; its runs without an id of their own are `{group}-{index}`.";
    HookName: PREFIX_NAME_MAX, "An HTTP hook's name; the runs it starts are `{name}-{20 hex digits}`.";
    TenantId: TENANT_ID_MAX, "A tenant's id, as the tenants file names it.";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_name_lengths_are_the_stores() {
        let longest = |max: usize| ["a".repeat(max), "a".repeat(max + 1)];
        let [fits, over] = longest(NAME_MAX);
        assert!(RunId::new(&fits).is_ok() && RunId::new(&over).is_err());
        assert!(ComponentName::new(&fits).is_ok() && ComponentName::new(&over).is_err());
        assert!(SignalName::new(&fits).is_ok() && SignalName::new(&over).is_err());
        assert!(StreamName::new(&fits).is_ok() && StreamName::new(&over).is_err());
        let [fits, over] = longest(SIGNAL_ID_MAX);
        assert!(SignalId::new(&fits).is_ok() && SignalId::new(&over).is_err());
        let [fits, over] = longest(PREFIX_NAME_MAX);
        assert!(ScheduleName::new(&fits).is_ok() && ScheduleName::new(&over).is_err());
        assert!(GroupId::new(&fits).is_ok() && GroupId::new(&over).is_err());
        assert!(HookName::new(&fits).is_ok() && HookName::new(&over).is_err());
        let [fits, over] = longest(TENANT_ID_MAX);
        assert!(TenantId::new(&fits).is_ok() && TenantId::new(&over).is_err());
        let [fits, over] = longest(NAME_MAX);
        assert!(WorkflowName::new(&fits).is_ok() && WorkflowName::new(&over).is_err());
        assert!(SecretName::new(&fits).is_ok() && SecretName::new(&over).is_err());
        assert!(ConcurrencyKey::new(&fits).is_ok() && ConcurrencyKey::new(&over).is_err());
        let [fits, over] = longest(TAG_MAX);
        assert!(RunTag::new(&fits).is_ok() && RunTag::new(&over).is_err());
    }
}
