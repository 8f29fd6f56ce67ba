//! The HTTP API (`stepstone serve`): JSON under `/v1`, every request on
//! behalf of the tenant its bearer token names; and the console's pages
//! under `/ui` (see [`crate::console`]).
//!
//! Invariant: a handler reaches storage only through the caller's tenant, so
//! another tenant's run or component answers 404, exactly like one that does
//! not exist.

mod auth;
mod body_limit;
mod components;
mod doc;
mod error;
mod extract;
mod groups;
mod listener;
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

pub use body_limit::{Accepts, GROUP_RUN_FIELDS_BYTES, RUN_FIELDS_BYTES, SMALL_BODY};
pub use error::ApiError;
pub use listener::{HEADER_READ_TIMEOUT, serve};

use crate::console::{self, Sessions};
use crate::runtime::Runtime;
use crate::shared_map::lock;
use crate::store::TenantId;
use crate::tenancy::{LiveTenants, Tenants};
use body_limit::limited;

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
    tenants: LiveTenants,
    compiles: Arc<Mutex<HashMap<TenantId, Arc<Semaphore>>>>,
    /// The console's sign-ins.
    sessions: Arc<Sessions>,
}

impl ApiState {
    /// The API of `runtime` for `tenants`, whose quotas the runtime holds
    /// them to from now on, and again each time they change (see
    /// [`LiveTenants::follow`]).
    pub fn new(runtime: Runtime, tenants: impl Into<LiveTenants>) -> Self {
        let tenants = tenants.into();
        apply_quotas(&runtime, &tenants.current());
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(apply_changes(runtime.clone(), tenants.subscribe()));
        }
        let sessions = Sessions::new(runtime.secrets().derived_key(SESSION_KEY_PURPOSE));
        Self {
            runtime,
            tenants,
            compiles: Arc::default(),
            sessions: Arc::new(sessions),
        }
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The tenants now: a token taken out of the tenants file is gone
    /// from here once the file is read again.
    pub(crate) fn tenants(&self) -> Arc<Tenants> {
        self.tenants.current()
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
}

/// Holds `runtime` to each tenant's quotas.
fn apply_quotas(runtime: &Runtime, tenants: &Tenants) {
    for tenant in tenants.iter() {
        runtime.set_step_limits(&tenant.id, tenant.quotas.step_limits());
        runtime.set_run_quotas(&tenant.id, tenant.quotas.run_quotas());
        runtime.set_outbound(&tenant.id, tenant.quotas.allowed_outbound_hosts.clone());
        runtime.set_retention(&tenant.id, tenant.quotas.retention());
        runtime.set_fuel_budget(&tenant.id, tenant.quotas.fuel_per_day);
    }
}

/// Applies each change of the tenants: their quotas, and the runs of a
/// tenant new to the host, recovered and served from now on.
async fn apply_changes(runtime: Runtime, mut changes: tokio::sync::watch::Receiver<Arc<Tenants>>) {
    while changes.changed().await.is_ok() {
        let tenants = changes.borrow_and_update().clone();
        apply_quotas(&runtime, &tenants);
        let added = runtime.serve_tenants(tenants.iter().map(|tenant| tenant.id.clone()));
        for tenant in added {
            match runtime.recover(&tenant).await {
                Ok(runs) => tracing::info!(%tenant, runs, "a new tenant: recovered its unfinished runs"),
                Err(e) => tracing::error!(%tenant, "a new tenant: cannot recover its unfinished runs: {e}"),
            }
        }
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
        .route("/runs/{id}/logs", get(logs::logs))
        .route(
            "/runs/{id}/signals/{name}",
            accepting(post(runs::signal), Accepts::Payload),
        )
        .route("/runs/{id}/replay", accepting(post(runs::replay), Accepts::Small))
        .route("/runs/{id}/cancel", accepting(post(runs::cancel), Accepts::Small))
        .route("/groups", accepting(post(groups::start), Accepts::Group))
        .route("/groups/{id}", get(groups::status))
        .route("/groups/{id}/events", get(groups::events))
        .route("/groups/{id}/cancel", accepting(post(groups::cancel), Accepts::Small))
        .route(
            "/schedules",
            accepting(post(schedules::add), Accepts::Run).get(schedules::list),
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
