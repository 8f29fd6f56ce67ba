//! Following the tenants file: each tenant's policy, and which tenants
//! this host serves in the background, kept as the file says.

use std::sync::Arc;

use super::Runtime;
use crate::tenancy::{LiveTenants, Tenants};

/// What [`Runtime::follow_tenants`] does.
pub(super) fn follow(runtime: &Runtime, tenants: &LiveTenants) {
    apply_policies(runtime, &tenants.current());
    if tokio::runtime::Handle::try_current().is_ok() {
        crate::task::spawn(follow_changes(runtime.clone(), tenants.subscribe()));
    }
}

/// Holds the file's tenants to their policies; one taken out of the file
/// loses its own (as it loses its token and its place among the served).
fn apply_policies(runtime: &Runtime, tenants: &Tenants) {
    let policies = tenants.iter().map(|tenant| (tenant.id.clone(), tenant.quotas.policy()));
    runtime.runs.host.policies.replace(policies);
}

async fn follow_changes(runtime: Runtime, mut changes: tokio::sync::watch::Receiver<Arc<Tenants>>) {
    while changes.changed().await.is_ok() {
        let tenants = changes.borrow_and_update().clone();
        apply_policies(&runtime, &tenants);
        let added = runtime.serve_tenants(tenants.iter().map(|tenant| tenant.id.clone()));
        for tenant in added {
            match runtime.runs().recover(&tenant).await {
                Ok(runs) => tracing::info!(%tenant, runs, "a new tenant: recovered its unfinished runs"),
                Err(e) => tracing::error!(%tenant, "a new tenant: cannot recover its unfinished runs: {e}"),
            }
        }
    }
}
