//! The HTTP API (`stepstone serve`): JSON under `/v1`, every request on
//! behalf of the tenant its bearer token names; and the console's pages
//! under `/ui`.
//!
//! Invariant: a handler reaches storage only through the caller's tenant, so
//! another tenant's run or component answers 404, exactly like one that does
//! not exist.

mod admission;
mod auth;
mod batch;
mod body_budget;
mod body_limit;
mod components;
mod doc;
pub(crate) mod error;
mod extract;
mod groups;
mod hook_check;
mod hooks;
mod idle;
mod listener;
mod logs;
mod params;
mod responses;
mod runs;
mod schedules;
mod secrets;
pub(crate) mod state;
pub(crate) mod streams;
mod usage;

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use utoipa::OpenApi;

pub use admission::{Admission, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_SOURCE};
pub use body_limit::{Accepts, GROUP_RUN_FIELDS_BYTES, RUN_FIELDS_BYTES, SMALL_BODY};
pub use error::ApiError;
pub use idle::{FIRST_REQUEST_WITHIN, IDLE_FOR};
pub use listener::{HEADER_READ_TIMEOUT, serve};
pub use state::ApiState;

use crate::console;
use crate::runtime::Runtime;
use body_limit::limited;

/// Longest any request may take (the long-poll `wait` stays well below).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// The operator's routes, for a listen address of their own: `/metrics`
/// names every tenant, so it is not served to tenants.
pub fn operator_router(runtime: Runtime) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(runtime): State<Runtime>| async move { runtime.metrics().encode() }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .with_state(runtime)
}

/// The API's routes.
pub fn router(state: ApiState) -> Router {
    let accepting = |route, accepts| limited(route, &state, accepts);
    let v1 = Router::new()
        .route(
            "/components",
            accepting(post(components::upload), Accepts::Component).get(components::list),
        )
        .route(
            "/components/{reference}",
            get(components::get).delete(components::delete),
        )
        .route(
            "/components/{reference}/upgrade",
            accepting(post(components::upgrade), Accepts::Small),
        )
        .route("/runs", accepting(post(runs::start), Accepts::Run).get(runs::list))
        .route("/runs/{id}", get(runs::status))
        .route("/runs/{id}/wait", get(runs::wait))
        .route("/runs/{id}/journal", get(runs::journal))
        .route("/runs/{id}/payloads/{sha256}", get(runs::payload))
        .route("/runs/{id}/logs", get(logs::logs))
        .route("/runs/{id}/streams/{name}", get(streams::read))
        .route(
            "/runs/{id}/signals/{name}",
            accepting(post(runs::signal), Accepts::Payload),
        )
        .route("/runs/{id}/replay", accepting(post(runs::replay), Accepts::Small))
        .route("/runs/{id}/cancel", accepting(post(runs::cancel), Accepts::Small))
        .route("/runs/{id}/pause", accepting(post(runs::pause), Accepts::Small))
        .route("/runs/{id}/resume", accepting(post(runs::resume), Accepts::Small))
        .route("/runs/{id}/advance", accepting(post(runs::advance), Accepts::Small))
        .route("/runs/{id}/restart", accepting(post(runs::restart), Accepts::Small))
        .route("/hooks", get(hooks::list))
        .route(
            "/hooks/{name}",
            accepting(put(hooks::put), Accepts::Small).delete(hooks::delete),
        )
        .route("/batch/pause", accepting(post(batch::pause), Accepts::Small))
        .route("/batch/resume", accepting(post(batch::resume), Accepts::Small))
        .route("/groups", accepting(post(groups::start), Accepts::Group))
        .route("/groups/{id}", get(groups::status))
        .route("/groups/{id}/events", get(groups::events))
        .route("/groups/{id}/cancel", accepting(post(groups::cancel), Accepts::Small))
        .route(
            "/schedules",
            accepting(post(schedules::add), Accepts::Schedule).get(schedules::list),
        )
        .route("/schedules/{name}", get(schedules::get).delete(schedules::delete))
        .route(
            "/schedules/{name}/pause",
            accepting(post(schedules::pause), Accepts::Small),
        )
        .route(
            "/schedules/{name}/resume",
            accepting(post(schedules::resume), Accepts::Small),
        )
        .route("/usage", get(usage::usage))
        .route("/secrets", get(secrets::list))
        .route(
            "/secrets/{name}",
            accepting(put(secrets::set), Accepts::Secret).delete(secrets::delete),
        )
        .route("/openapi.json", get(|| async { axum::Json(doc::ApiDoc::openapi()) }));
    let hook_calls = accepting(post(hooks::call), Accepts::HookRequest);
    Router::new()
        .nest("/v1", v1)
        .route("/hooks/{tenant}/{name}", hook_calls)
        .merge(console::router())
        .route("/healthz", get(|| async { "ok" }))
        // After every route: the 405 fallback applies to the routes so far.
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such endpoint: see /v1/openapi.json") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "this endpoint does not take that method: see `Allow`",
            )
        })
        .layer(DefaultBodyLimit::max(SMALL_BODY))
        .layer(middleware::from_fn(time_limit))
        .layer(middleware::from_fn(crate::telemetry::spans::traced_request))
        .with_state(state)
}

/// Answers 408 to a request still unanswered after `REQUEST_TIMEOUT`.
async fn time_limit(request: Request, next: Next) -> Response {
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!("the request took over {REQUEST_TIMEOUT:?}, the server's limit"),
        )
        .into_response(),
    }
}
