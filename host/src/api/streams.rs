//! `/v1/runs/{id}/streams/{name}`: a run's stream as server-sent events,
//! from any offset, through any host.

use std::convert::Infallible;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::{Path, Query};
use super::params::MAX_WHOLE;
use super::responses::{Malformed, Refusals, ServerSentEvent};
use crate::runtime::{RunError, StreamEvent};
use crate::store::{RunId, StreamName};

/// The header an `EventSource` reconnects with: the `id` of the last
/// event it got, a value's offset.
const LAST_EVENT_ID: &str = "last-event-id";

/// The stream a read is of, and its run.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct StreamPath {
    #[param(inline)]
    id: RunId,
    #[param(inline)]
    name: StreamName,
}

#[derive(Deserialize, IntoParams)]
pub struct StreamParams {
    #[param(schema_with = offset_schema)]
    offset: Option<u64>,
    /// `false`: send the values appended so far (and `end` if the run has
    /// ended), then end, rather than wait for more.
    follow: Option<bool>,
}

fn offset_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .description(Some(
            "The offset of the first value to send (0, the first, by default).",
        ))
        .minimum(Some(0))
        .maximum(Some(MAX_WHOLE))
        .build()
}

/// Read a run's stream (values its workflow appends with
/// `append-to-stream`) as server-sent events, from `offset` on: those
/// appended already, then each as it is appended, through any host and
/// across a failover, then the run's end. A read lasts at most the host's
/// `stream_read_span` (5 minutes by default); it ends then without `end`,
/// and is read on from the next offset, as an `EventSource` does by
/// itself with `Last-Event-ID`.
#[utoipa::path(get, path = "/v1/runs/{id}/streams/{name}", params(
        StreamPath, StreamParams,
        ("Last-Event-ID" = Option<String>, Header, nullable = false, pattern = "^[0-9]{1,19}$",
            description = "the offset of the last value received: the read goes on after it (over `offset`)"),
    ),
    responses(
        (status = 200, content_type = "text/event-stream", body = ServerSentEvent,
            description = "`event: value` per value (`id`: its offset, `data`: the value's JSON), then `event: end` (`data`: the run's status) once the run has ended"),
        (status = 404, body = ErrorBody, description = "no such run"),
        Malformed, Refusals,
    ))]
pub async fn read(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(StreamPath { id, name }): Path<StreamPath>,
    Query(params): Query<StreamParams>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let offset = match params.offset {
        Some(offset) if offset > MAX_WHOLE => {
            return Err(ApiError::bad_request(format!(
                "offset {offset} is past the largest, {MAX_WHOLE}"
            )));
        }
        offset => offset.unwrap_or(0),
    };
    let from = match last_event_id(&headers)? {
        Some(last) => last.saturating_add(1),
        None => offset,
    };
    let events = state
        .runtime
        .runs()
        .read_stream(&tenant.id, &id, name, from, params.follow.unwrap_or(true))
        .await?;
    Ok(server_sent(events))
}

/// A stream's events as server-sent events: `value` (its offset as `id`),
/// `end` with the run's status, `error` if the read failed.
pub(crate) fn server_sent(
    events: impl Stream<Item = Result<StreamEvent, RunError>> + Send + 'static,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    Sse::new(events.map(|event| Ok(sse_event(event)))).keep_alive(KeepAlive::default())
}

/// The offset `Last-Event-ID` names, if the request has one.
fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(header) = headers.get(LAST_EVENT_ID) else {
        return Ok(None);
    };
    let text = header.to_str().unwrap_or_default();
    let digits = (1..=19).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_digit());
    match digits.then(|| text.parse::<u64>()) {
        Some(Ok(offset)) => Ok(Some(offset)),
        _ => Err(ApiError::bad_request(format!(
            "Last-Event-ID `{}` is not a value's offset: send the `id` of the last event received",
            String::from_utf8_lossy(header.as_bytes())
        ))),
    }
}

fn sse_event(event: Result<StreamEvent, RunError>) -> Event {
    let error = |e: &dyn std::fmt::Display| Event::default().event("error").data(e.to_string());
    match event {
        Ok(StreamEvent::Value(value)) => Event::default()
            .event("value")
            .id(value.offset.to_string())
            .data(value.value),
        Ok(StreamEvent::End(status)) => Event::default()
            .event("end")
            .json_data(&status)
            .unwrap_or_else(|e| error(&e)),
        Err(e) => error(&e),
    }
}
