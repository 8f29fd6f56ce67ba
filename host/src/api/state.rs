//! What every handler of the API and the console shares: the runtime, the
//! tenants as the tenants file names them now, the console's sign-ins and
//! the request bodies held.

use std::sync::Arc;

use super::body_budget::BodyBudget;
use crate::console::session::Sessions;
use crate::runtime::Runtime;
use crate::tenancy::{LiveTenants, Tenants};

/// What the console's session key is derived from the host key for.
const SESSION_KEY_PURPOSE: &str = "stepstone console sessions";

/// What every handler shares.
#[derive(Clone)]
pub struct ApiState {
    pub(super) runtime: Runtime,
    pub(super) tenants: LiveTenants,
    /// The console's sign-ins.
    pub(super) sessions: Arc<Sessions>,
    /// The request bodies held in memory now.
    pub(super) bodies: Arc<BodyBudget>,
}

impl ApiState {
    /// The API of `runtime` for `tenants`, whose policies the runtime holds
    /// them to from now on, and again each time they change (see
    /// [`Runtime::follow_tenants`]).
    pub fn new(runtime: Runtime, tenants: impl Into<LiveTenants>) -> Self {
        let tenants = tenants.into();
        runtime.follow_tenants(&tenants);
        let sessions = Sessions::new(runtime.secrets().derived_key(SESSION_KEY_PURPOSE));
        Self {
            runtime,
            tenants,
            sessions: Arc::new(sessions),
            bodies: Arc::default(),
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
}
