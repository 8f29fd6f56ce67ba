//! The HTTP API (`stepstone serve`): JSON under `/v1`, every request on
//! behalf of the tenant its bearer token names; and the console's pages
//! under `/ui` (see [`crate::console`]).
//!
//! Invariant: a handler reaches storage only through the caller's tenant, so
//! another tenant's run or component answers 404, exactly like one that does
//! not exist.

mod auth;
mod components;
mod doc;
mod error;
mod extract;
mod groups;
mod logs;
mod params;
mod runs;
mod schedules;
mod secrets;
mod usage;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use utoipa::OpenApi;

pub use error::ApiError;

use crate::console::{self, Sessions};
use crate::runtime::Runtime;
use crate::shared_map::lock;
use crate::store::TenantId;
use crate::tenancy::Tenants;

/// Longest any request may take (the long-poll `wait` stays well below).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// What the console's session key is derived from the host key for.
const SESSION_KEY_PURPOSE: &str = "stepstone console sessions";
/// Uploads compiled at once per tenant, so one tenant's huge uploads queue
/// behind each other instead of taking every core from the others.
const COMPILES_PER_TENANT: usize = 1;

/// What every handler shares.
#[derive(Clone)]
pub struct ApiState {
    runtime: Runtime,
    tenants: Arc<Tenants>,
    compiles: Arc<Mutex<HashMap<TenantId, Arc<Semaphore>>>>,
    /// The console's sign-ins.
    sessions: Arc<Sessions>,
}

impl ApiState {
    pub fn new(runtime: Runtime, tenants: Tenants) -> Self {
        for tenant in tenants.iter() {
            runtime.set_step_limits(&tenant.id, tenant.quotas.step_limits());
            runtime.set_run_quotas(&tenant.id, tenant.quotas.run_quotas());
            runtime.set_outbound(&tenant.id, tenant.quotas.allowed_outbound_hosts.clone());
            runtime.set_retention(&tenant.id, tenant.quotas.retention());
            runtime.set_fuel_budget(&tenant.id, tenant.quotas.fuel_per_day);
        }
        let sessions = Sessions::new(runtime.secrets().derived_key(SESSION_KEY_PURPOSE));
        Self {
            runtime,
            tenants: Arc::new(tenants),
            compiles: Arc::default(),
            sessions: Arc::new(sessions),
        }
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    pub(crate) fn tenants(&self) -> &Tenants {
        &self.tenants
    }

    pub(crate) fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    async fn compile_permit(&self, tenant: &TenantId) -> Option<OwnedSemaphorePermit> {
        let semaphore = lock(&self.compiles)
            .entry(tenant.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(COMPILES_PER_TENANT)))
            .clone();
        semaphore.acquire_owned().await.ok()
    }

    /// The largest body any tenant may send.
    fn max_body(&self) -> usize {
        self.tenants
            .iter()
            .map(|t| t.quotas.max_component_bytes.max(t.quotas.max_payload_bytes))
            .max()
            .unwrap_or(0)
    }
}

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
    let max_body = state.max_body();
    let v1 = Router::new()
        .route("/components", post(components::upload).get(components::list))
        .route(
            "/components/{reference}",
            get(components::get).delete(components::delete),
        )
        .route("/components/{reference}/upgrade", post(components::upgrade))
        .route("/runs", post(runs::start).get(runs::list))
        .route("/runs/{id}", get(runs::status))
        .route("/runs/{id}/wait", get(runs::wait))
        .route("/runs/{id}/journal", get(runs::journal))
        .route("/runs/{id}/logs", get(logs::logs))
        .route("/runs/{id}/signals/{name}", post(runs::signal))
        .route("/runs/{id}/replay", post(runs::replay))
        .route("/runs/{id}/cancel", post(runs::cancel))
        .route("/groups", post(groups::start))
        .route("/groups/{id}", get(groups::status))
        .route("/groups/{id}/events", get(groups::events))
        .route("/groups/{id}/cancel", post(groups::cancel))
        .route("/schedules", post(schedules::add).get(schedules::list))
        .route("/schedules/{name}", get(schedules::get).delete(schedules::delete))
        .route("/schedules/{name}/pause", post(schedules::pause))
        .route("/schedules/{name}/resume", post(schedules::resume))
        .route("/usage", get(usage::usage))
        .route("/secrets", get(secrets::list))
        .route("/secrets/{name}", put(secrets::set).delete(secrets::delete))
        .route("/openapi.json", get(|| async { axum::Json(doc::ApiDoc::openapi()) }));
    Router::new()
        .nest("/v1", v1)
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
        .layer(DefaultBodyLimit::max(max_body))
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
