//! Following the tenants file: each tenant's policy, and which tenants
//! this host serves in the background, kept as the file says.

use std::sync::Arc;

use super::Runtime;
use crate::tenancy::{LiveTenants, Tenants};

impl Runtime {
    /// Holds each tenant of `tenants` to its policy now, and again each
    /// time the file changes (see [`LiveTenants::follow`]); a tenant new to
    /// the host has its unfinished runs recovered and is served from then
    /// on. Outside a Tokio runtime, only the policies of now are set.
    pub fn follow_tenants(&self, tenants: &LiveTenants) {
        self.apply_policies(&tenants.current());
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(follow_changes(self.clone(), tenants.subscribe()));
        }
    }

    fn apply_policies(&self, tenants: &Tenants) {
        for tenant in tenants.iter() {
            self.set_policy(&tenant.id, tenant.quotas.policy());
        }
    }
}

async fn follow_changes(runtime: Runtime, mut changes: tokio::sync::watch::Receiver<Arc<Tenants>>) {
    while changes.changed().await.is_ok() {
        let tenants = changes.borrow_and_update().clone();
        runtime.apply_policies(&tenants);
        let added = runtime.serve_tenants(tenants.iter().map(|tenant| tenant.id.clone()));
        for tenant in added {
            match runtime.recover(&tenant).await {
                Ok(runs) => tracing::info!(%tenant, runs, "a new tenant: recovered its unfinished runs"),
                Err(e) => tracing::error!(%tenant, "a new tenant: cannot recover its unfinished runs: {e}"),
            }
        }
    }
}
