//! The tenants' components: validated, stored within the tenant's component
//! quotas, named, looked up and deleted.
//!
//! Invariants: nothing is stored unless it validates and the quotas admit
//! it (one upload of a tenant checked at a time, so a check sees every
//! earlier one); a component a name, a schedule or a stored run refers to
//! is never deleted.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::RunError;
use crate::component::{ComponentError, Components, Loaded, STORED_FRESH, digest_of, is_digest};
use crate::journal::RunRecords;
use crate::metrics::Metrics;
use crate::policy::{OverQuota, Policies, Uploads};
use crate::schedules::Schedules;
use crate::store::{ComponentName, RunId, Storage, TenantId, runs_key};

/// The tenants' components (see the module doc); [`Runtime::catalog`](super::Runtime::catalog) gives it.
#[derive(Clone)]
pub struct Catalog {
    storage: Storage,
    components: Arc<Components>,
    policies: Arc<Policies>,
    /// Each tenant's uploads, checked one at a time.
    uploads: Arc<Uploads>,
    metrics: Arc<Metrics>,
    schedules: Schedules,
}

impl Catalog {
    pub(super) fn new(
        storage: Storage,
        components: Arc<Components>,
        policies: Arc<Policies>,
        metrics: Arc<Metrics>,
        schedules: Schedules,
    ) -> Self {
        Self {
            storage,
            components,
            policies,
            uploads: Arc::default(),
            metrics,
            schedules,
        }
    }

    /// Validates a component without storing anything.
    pub async fn validate(&self, what: &str, bytes: Bytes) -> Result<Arc<Loaded>, RunError> {
        Ok(self.components.validate(what, bytes).await?)
    }

    /// Compiles every role a run of `loaded` needs and keeps it loaded for
    /// `tenant`, so no run of it waits for a compilation or a load: what a
    /// host that knows its components when it starts may do first.
    pub async fn preload(&self, tenant: &TenantId, loaded: &Arc<Loaded>) -> Result<(), RunError> {
        Ok(self.components.preload(tenant, loaded).await?)
    }

    /// Validates a component and stores it for the tenant; with `name`, the
    /// name then points at it. Nothing is stored if validation fails, if
    /// the name is written as a digest (a reference to it would mean the
    /// digest), or if the tenant's component quotas refuse it.
    pub async fn upload(
        &self,
        tenant: &TenantId,
        bytes: Bytes,
        name: Option<&ComponentName>,
    ) -> Result<Arc<Loaded>, RunError> {
        if let Some(name) = name.filter(|name| is_digest(name.as_str())) {
            return Err(ComponentError::NameReadsAsDigest { name: name.to_string() }.into());
        }
        let quotas = self.policies.of(tenant).components;
        quotas.check_size(bytes.len())?;
        // One at a time per tenant, so the check sees every earlier upload.
        let _queued = self.uploads.queue(tenant).await;
        let stored = self.stored_components(tenant).await?;
        quotas.check_store(&stored, &digest_of(bytes.clone()).await, bytes.len())?;
        let what = name.map_or_else(|| "the upload".to_owned(), |name| format!("component `{name}`"));
        let compiling = self.metrics.upload_compiling(tenant);
        let validated = self.components.validate_for(tenant, &what, bytes);
        let loaded = tokio::time::timeout(quotas.compile_timeout, validated)
            .await
            .map_err(|_| OverQuota::CompileTime {
                limit: quotas.compile_timeout,
            })??;
        drop(compiling);
        let store = self.storage.tenant(tenant);
        self.components.store(&store, &loaded).await?;
        if let Some(name) = name {
            self.components.name(&store, name, &loaded.digest).await?;
        }
        Ok(loaded)
    }

    /// The tenant's component called `reference`: a digest, else a name
    /// (no name is written as a digest).
    pub async fn component(&self, tenant: &TenantId, reference: &str) -> Result<Arc<Loaded>, RunError> {
        let digest = match ComponentName::new(reference) {
            Ok(name) => self.component_digest(tenant, &name).await?,
            Err(_) => reference.to_owned(),
        };
        if !is_digest(&digest) {
            return Err(ComponentError::Unknown {
                digest: reference.to_owned(),
            }
            .into());
        }
        let store = self.storage.tenant(tenant);
        Ok(self.components.get(&store, &digest).await?)
    }

    /// The builds `reference` names, by digest: every version of a
    /// component name, or one build by its digest. Unknown: an error.
    pub async fn builds(&self, tenant: &TenantId, reference: &str) -> Result<BTreeSet<String>, RunError> {
        if let Ok(name) = ComponentName::new(reference) {
            let versions = self.component_versions(tenant, &name).await?;
            if !versions.is_empty() {
                return Ok(versions.into_iter().map(|version| version.digest).collect());
            }
        }
        Ok(BTreeSet::from([self
            .component(tenant, reference)
            .await?
            .digest
            .clone()]))
    }

    /// Version `version` of the tenant's component `name` (see
    /// [`component_versions`](Self::component_versions)).
    pub async fn component_version(
        &self,
        tenant: &TenantId,
        name: &ComponentName,
        version: u64,
    ) -> Result<Arc<Loaded>, RunError> {
        let versions = self.component_versions(tenant, name).await?;
        let Some(found) = versions.iter().find(|v| u64::from(v.version) == version) else {
            return Err(ComponentError::UnknownVersion {
                name: name.to_string(),
                version,
                latest: versions.last().map_or(0, |v| v.version),
            }
            .into());
        };
        let store = self.storage.tenant(tenant);
        Ok(self.components.get(&store, &found.digest).await?)
    }

    /// Every build the tenant's component `name` has pointed at, oldest first.
    pub async fn component_versions(
        &self,
        tenant: &TenantId,
        name: &ComponentName,
    ) -> Result<Vec<crate::component::ComponentVersion>, RunError> {
        let store = self.storage.tenant(tenant);
        Ok(self.components.versions(&store, name).await?)
    }

    /// The digest `reference` means: itself if written as one, else the
    /// build a name points at, else the reference itself (taken as a
    /// digest, stored or not).
    pub async fn component_digest(&self, tenant: &TenantId, reference: &ComponentName) -> Result<String, RunError> {
        if is_digest(reference.as_str()) {
            return Ok(reference.to_string());
        }
        let store = self.storage.tenant(tenant);
        let named = self.components.by_name(&store, reference).await?;
        Ok(named.unwrap_or_else(|| reference.to_string()))
    }

    /// The digest and size of every component the tenant has stored.
    pub async fn stored_components(&self, tenant: &TenantId) -> Result<Vec<(String, u64)>, RunError> {
        Ok(self.components.stored(&self.storage.tenant(tenant)).await?)
    }

    /// The tenant's component names, with the digest each points at.
    pub async fn component_names(&self, tenant: &TenantId) -> Result<Vec<(ComponentName, String)>, RunError> {
        Ok(self.components.names(&self.storage.tenant(tenant)).await?)
    }

    /// Deletes the tenant's component `digest`, unless a name, a schedule
    /// or a stored run refers to it.
    pub async fn delete_component(&self, tenant: &TenantId, digest: &str) -> Result<(), RunError> {
        if let Some(by) = self.reference_to(tenant, digest).await? {
            return Err(ComponentError::InUse {
                digest: digest.to_owned(),
                by,
            }
            .into());
        }
        let bytes = self.components.delete(&self.storage.tenant(tenant), digest).await?;
        let (catalog, tenant, digest) = (self.clone(), tenant.clone(), digest.to_owned());
        crate::task::spawn(async move {
            tokio::time::sleep(STORED_FRESH + Duration::from_secs(5)).await;
            match catalog.reference_to(&tenant, &digest).await {
                Ok(None) => {}
                Ok(Some(by)) => {
                    tracing::warn!(%tenant, %digest, "{by} started on the component as it was deleted: storing it again");
                    let store = catalog.storage.tenant(&tenant);
                    if let Err(e) = catalog.components.restore(&store, &digest, bytes).await {
                        tracing::error!(%tenant, %digest, "cannot store the deleted component again: {e}");
                    }
                }
                Err(e) => tracing::warn!(%tenant, %digest, "cannot check the deleted component's runs: {e}"),
            }
        });
        Ok(())
    }

    /// What refers to component `digest`: a name, a schedule or a run.
    async fn reference_to(&self, tenant: &TenantId, digest: &str) -> Result<Option<String>, RunError> {
        let store = self.storage.tenant(tenant);
        let names = self.components.names(&store).await?;
        if let Some((name, _)) = names.iter().find(|(_, points_at)| points_at == digest) {
            return Ok(Some(format!("the name `{name}`")));
        }
        let schedules = self.schedules.list(tenant).await?;
        if let Some(schedule) = schedules.iter().find(|s| s.component.as_str() == digest) {
            return Ok(Some(format!("schedule `{}`", schedule.name)));
        }
        let runs = store.children(&runs_key()).await?;
        for run in runs.iter().filter_map(|name| RunId::new(name).ok()) {
            if let Some(record) = RunRecords::new(store.clone(), run.clone()).run().await?
                && std::iter::once(&record.component)
                    .chain(&record.earlier_builds)
                    .chain(record.links.values())
                    .any(|build| build == digest)
            {
                return Ok(Some(format!("run `{run}`")));
            }
        }
        Ok(None)
    }
}
