//! The registry of loaded components: validation on the way in, then one
//! compiled program per role, kept for every later instantiation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;
use wasmparser::{Parser, Payload};
use wasmtime::component::Component;

use super::cache::Urgency;
use super::signal_schemas::{self, SignalSchemas};
use super::{CodeCache, ComponentError};
use crate::byte_budget::ByteBudgetCache;
use crate::contract::{self, bindings::Manifest};
use crate::sandbox::{self, Engines, Role, StepProgram};
use crate::shared_map::lock;
use crate::store::{
    ComponentName, StoreError, TenantId, TenantStore, WorkflowName, component_key, component_name_key,
    component_names_key, components_key,
};

/// A validated component, compiled lazily for each role it is used in.
pub struct Loaded {
    /// Its digest: hex SHA-256 of its bytes, which it is stored under.
    pub digest: String,
    /// What its `describe` answered: the workflows and steps it exports.
    pub manifest: Manifest,
    /// The schemas it declares for the signals its workflows await.
    pub signals: SignalSchemas,
    bytes: Bytes,
    workflow: OnceCell<Component>,
    step: OnceCell<Arc<StepProgram>>,
}

impl Loaded {
    /// Whether the component exports step `name`.
    pub fn has_step(&self, name: &str) -> bool {
        self.manifest.steps.iter().any(|s| s == name)
    }

    /// Whether the component exports workflow `name`.
    pub fn has_workflow(&self, name: &str) -> bool {
        self.manifest.workflows.iter().any(|w| w == name)
    }

    /// What keeping it loaded costs, as its size in bytes: its compiled
    /// code is some multiple of that.
    pub fn size(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// SHA-256 of a component, hex: on a blocking thread, since hashing tens of
/// megabytes would hold up the async ones.
pub async fn digest_of(bytes: Bytes) -> String {
    let hash = |bytes: &Bytes| hex::encode(Sha256::digest(bytes));
    let aside = bytes.clone();
    tokio::task::spawn_blocking(move || hash(&aside))
        .await
        // Only a runtime shutting down refuses the task: hash here, then.
        .unwrap_or_else(|_| hash(&bytes))
}

/// Every component the host has loaded, per tenant, within a budget of
/// bytes (see [`HostConfig::loaded_components_bytes`]).
///
/// [`HostConfig::loaded_components_bytes`]: crate::config::HostConfig::loaded_components_bytes
pub struct Components {
    engines: Engines,
    cache: CodeCache,
    loaded: ByteBudgetCache<(TenantId, String), Arc<Loaded>>,
    /// When this host last stored each component, or found it stored.
    stored: Mutex<HashMap<(TenantId, String), Instant>>,
}

/// How long a component this host stored is taken to be there still
/// without asking the store: a deletion on another host is made good by
/// then (a deletion waits this long before it answers).
pub const STORED_FRESH: Duration = Duration::from_secs(60);

impl Components {
    /// Components kept loaded within `budget` bytes of component code.
    pub fn within(engines: Engines, cache: CodeCache, budget: u64) -> Self {
        Self {
            engines,
            cache,
            loaded: ByteBudgetCache::new(budget, 256),
            stored: Mutex::default(),
        }
    }

    /// The engines components are compiled for and run on, one per role.
    pub fn engines(&self) -> &Engines {
        &self.engines
    }

    /// Validates `bytes` (read from `what`, for messages), storing nothing.
    /// Compiles and links its steps, so no step attempt waits for that (an
    /// attempt may share the CPU with other uploads' compiles); the
    /// workflow role is compiled at its first run, or by
    /// [`preload`](Self::preload).
    pub async fn validate(&self, what: &str, bytes: Bytes) -> Result<Arc<Loaded>, ComponentError> {
        self.validate_for(&TenantId::default_tenant(), what, bytes).await
    }

    /// Like [`validate`](Self::validate), for an upload of `tenant`, whose
    /// share of the instance slots runs its `describe`.
    pub async fn validate_for(
        &self,
        tenant: &TenantId,
        what: &str,
        bytes: Bytes,
    ) -> Result<Arc<Loaded>, ComponentError> {
        let loaded = self.check(tenant, what, bytes, Urgency::Upload).await?;
        // At upload only: a component stored before names were checked loads on.
        let workflows = &loaded.manifest.workflows;
        if let Some(reason) = workflows.iter().find_map(|name| WorkflowName::new(name).err()) {
            return Err(ComponentError::WorkflowName {
                digest: loaded.digest,
                reason,
            });
        }
        if !loaded.manifest.steps.is_empty() {
            self.step_program(&loaded, Urgency::Upload).await?;
        }
        Ok(Arc::new(loaded))
    }

    /// Stores a validated component in the tenant's store, content-addressed.
    /// Storing the same bytes again changes nothing.
    pub async fn store(&self, store: &TenantStore, loaded: &Arc<Loaded>) -> Result<(), ComponentError> {
        // Stored lately means stored still: every submit of a run would
        // otherwise repeat the put.
        let key = (store.tenant().clone(), loaded.digest.clone());
        if lock(&self.stored)
            .get(&key)
            .is_some_and(|at| at.elapsed() < STORED_FRESH)
        {
            return Ok(());
        }
        match store.create(&component_key(&loaded.digest), loaded.bytes.clone()).await {
            Ok(()) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        lock(&self.stored).insert(key, Instant::now());
        self.remember(store.tenant(), loaded.clone());
        Ok(())
    }

    /// Deletes the tenant's component `digest` from the store and from this
    /// host. Another host that stored it within [`STORED_FRESH`] may start
    /// a run of it meanwhile without storing it again: the caller checks
    /// for such runs after that long, and stores the bytes it returns again.
    pub async fn delete(&self, store: &TenantStore, digest: &str) -> Result<Bytes, ComponentError> {
        let key = component_key(digest);
        let bytes = store.get(&key).await?.ok_or_else(|| ComponentError::Unknown {
            digest: digest.to_owned(),
        })?;
        store.delete(&key).await?;
        let cached = (store.tenant().clone(), digest.to_owned());
        lock(&self.stored).remove(&cached);
        self.loaded.remove(&cached);
        Ok(bytes)
    }

    /// Stores `bytes` again as component `digest`, after a deletion that a
    /// run started meanwhile on another host still needs.
    pub async fn restore(&self, store: &TenantStore, digest: &str, bytes: Bytes) -> Result<(), ComponentError> {
        match store.create(&component_key(digest), bytes).await {
            Ok(()) | Err(StoreError::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Points `name` at a stored component: the name now means this build.
    /// Before it does, the build becomes the name's newest version.
    pub async fn name(&self, store: &TenantStore, name: &ComponentName, digest: &str) -> Result<(), ComponentError> {
        let current = self.by_name(store, name).await?;
        super::versions::add(store, name, digest, current.as_deref(), crate::clock::now_ms()).await?;
        Ok(store
            .overwrite(&component_name_key(name), Bytes::from(digest.to_owned()))
            .await?)
    }

    /// Every build `name` has pointed at, oldest first.
    pub async fn versions(
        &self,
        store: &TenantStore,
        name: &ComponentName,
    ) -> Result<Vec<super::ComponentVersion>, ComponentError> {
        super::versions::of(store, name).await
    }

    /// The digest `name` points at, if the tenant has such a name.
    pub async fn by_name(&self, store: &TenantStore, name: &ComponentName) -> Result<Option<String>, ComponentError> {
        let digest = store.get(&component_name_key(name)).await?;
        Ok(digest.map(|digest| String::from_utf8_lossy(&digest).into_owned()))
    }

    /// Every component name of the tenant, with the digest it points at.
    pub async fn names(&self, store: &TenantStore) -> Result<Vec<(ComponentName, String)>, ComponentError> {
        let mut names = Vec::new();
        for key in store.list(&component_names_key()).await? {
            let Some(name) = key.filename().and_then(|n| ComponentName::new(n).ok()) else {
                continue;
            };
            if let Some(digest) = self.by_name(store, &name).await? {
                names.push((name, digest));
            }
        }
        Ok(names)
    }

    /// The digest and size of every component the tenant has stored.
    pub async fn stored(&self, store: &TenantStore) -> Result<Vec<(String, u64)>, ComponentError> {
        let stored = store.sizes(&components_key()).await?;
        Ok(stored
            .into_iter()
            .filter_map(|(key, size)| Some((key.filename()?.strip_suffix(".wasm")?.to_owned(), size)))
            .collect())
    }

    /// The tenant's component with `digest`, loading it from the store on
    /// first use.
    pub async fn get(&self, store: &TenantStore, digest: &str) -> Result<Arc<Loaded>, ComponentError> {
        let key = (store.tenant().clone(), digest.to_owned());
        if let Some(loaded) = self.loaded.get(&key) {
            return Ok(loaded);
        }
        let bytes = store
            .get(&component_key(digest))
            .await?
            .ok_or_else(|| ComponentError::Unknown {
                digest: digest.to_owned(),
            })?;
        let loaded = Arc::new(self.check(store.tenant(), digest, bytes, Urgency::Run).await?);
        self.remember(store.tenant(), loaded.clone());
        Ok(loaded)
    }

    /// The component compiled for the workflow engine.
    pub async fn workflow(&self, loaded: &Loaded) -> Result<Component, ComponentError> {
        let compiled = loaded
            .workflow
            .get_or_try_init(|| self.compile(Role::Workflow, &loaded.digest, &loaded.bytes, Urgency::Run));
        compiled.await.cloned()
    }

    /// The component's steps, linked and ready to instantiate.
    pub async fn steps(&self, loaded: &Loaded) -> Result<Arc<StepProgram>, ComponentError> {
        self.step_program(loaded, Urgency::Run).await
    }

    async fn step_program(&self, loaded: &Loaded, urgency: Urgency) -> Result<Arc<StepProgram>, ComponentError> {
        let program = loaded.step.get_or_try_init(|| async {
            let component = match loaded.workflow.get() {
                // Compiled once, for both roles.
                Some(compiled) if self.engines.share_code() => {
                    super::cache::carry_over(compiled, self.engines.get(Role::Step))
                        .await
                        .map_err(|e| compile_error(&loaded.digest, Role::Step, &e))?
                }
                _ => self.compile(Role::Step, &loaded.digest, &loaded.bytes, urgency).await?,
            };
            StepProgram::new(
                self.engines.get(Role::Step),
                &component,
                self.engines.meters_fuel(Role::Step),
            )
            .map(Arc::new)
            .map_err(|e| compile_error(&loaded.digest, Role::Step, &e))
        });
        program.await.cloned()
    }

    /// Compiles every role `loaded` has, and keeps it for `tenant`: see
    /// [`Catalog::preload`](crate::runtime::Catalog::preload).
    pub async fn preload(&self, tenant: &TenantId, loaded: &Arc<Loaded>) -> Result<(), ComponentError> {
        if !loaded.manifest.workflows.is_empty() {
            self.workflow(loaded).await?;
        }
        if !loaded.manifest.steps.is_empty() {
            self.steps(loaded).await?;
        }
        self.remember(tenant, loaded.clone());
        Ok(())
    }

    fn remember(&self, tenant: &TenantId, loaded: Arc<Loaded>) {
        let bytes = loaded.size();
        self.loaded
            .insert((tenant.clone(), loaded.digest.clone()), loaded, bytes);
    }

    async fn compile(
        &self,
        role: Role,
        digest: &str,
        bytes: &[u8],
        urgency: Urgency,
    ) -> Result<Component, ComponentError> {
        self.cache
            .load_or_compile(self.engines.get(role), digest, bytes, urgency)
            .await
            .map_err(|e| compile_error(digest, role, &e))
    }

    async fn check(
        &self,
        tenant: &TenantId,
        what: &str,
        bytes: Bytes,
        urgency: Urgency,
    ) -> Result<Loaded, ComponentError> {
        let exports = top_level_exports(what, &bytes)?;
        let digest = digest_of(bytes.clone()).await;
        let declared = signal_schemas::section_in(&bytes).and_then(|section| match section {
            Some(section) => SignalSchemas::parse(section),
            None => Ok(SignalSchemas::default()),
        });
        let signals = declared.map_err(|reason| ComponentError::SignalSchemas {
            digest: digest.clone(),
            reason,
        })?;
        let exports_workflows = exports.contains(&contract::interface("workflow"));
        let exports_steps = exports.contains(&contract::interface("step"));
        let missing = |export: &str, world| ComponentError::MissingExport {
            digest: digest.clone(),
            export: export.into(),
            world,
        };
        if !exports.contains(&contract::interface("describe")) {
            return Err(missing(&contract::interface("describe"), "steps"));
        }
        let role = if exports_workflows { Role::Workflow } else { Role::Step };
        let component = self.compile(role, &digest, &bytes, urgency).await?;
        check_imports(&digest, &component, self.engines.get(role), role)?;
        let slot = self.engines.slot(role, tenant, crate::journal::DEFAULT_PRIORITY).await;
        let described = sandbox::describe(self.engines.get(role), &component, self.engines.meters_fuel(role)).await;
        drop(slot);
        let manifest = described.map_err(|failure| ComponentError::Describe {
            digest: digest.clone(),
            kind: failure.kind,
            message: failure.message,
        })?;
        if !manifest.workflows.is_empty() && !exports_workflows {
            return Err(missing(&contract::interface("workflow"), "workflows"));
        }
        if !manifest.steps.is_empty() && !exports_steps {
            return Err(missing(&contract::interface("step"), "steps"));
        }
        let workflow = if role == Role::Workflow {
            OnceCell::new_with(Some(component))
        } else {
            OnceCell::new()
        };
        Ok(Loaded {
            digest,
            manifest,
            signals,
            bytes,
            workflow,
            step: OnceCell::new(),
        })
    }
}

fn compile_error(digest: &str, role: Role, error: &wasmtime::Error) -> ComponentError {
    ComponentError::Compile {
        digest: digest.to_owned(),
        role,
        reason: format!("{error:#}"),
    }
}

/// The names a component exports at its top level, read without compiling it.
fn top_level_exports(what: &str, bytes: &[u8]) -> Result<Vec<String>, ComponentError> {
    if !Parser::is_component(bytes) {
        return Err(if Parser::is_core_wasm(bytes) {
            ComponentError::CoreModule { what: what.to_owned() }
        } else {
            ComponentError::NotWasm { what: what.to_owned() }
        });
    }
    let mut depth = 0usize;
    let mut exports = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(|e| ComponentError::Malformed {
            what: what.to_owned(),
            reason: e.to_string(),
        })? {
            Payload::Version { .. } => depth += 1,
            Payload::End(_) => depth -= 1,
            Payload::ComponentExportSection(section) if depth == 1 => {
                for export in section.into_iter().flatten() {
                    exports.push(export.name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    Ok(exports)
}

/// Refuses a component that imports anything its role's policy does not
/// grant, naming the import.
fn check_imports(
    digest: &str,
    component: &Component,
    engine: &wasmtime::Engine,
    role: Role,
) -> Result<(), ComponentError> {
    let component_type = component.component_type();
    match sandbox::policy::first_refused(component_type.imports(engine).map(|(name, _)| name)) {
        Some(import) => Err(ComponentError::ForbiddenImport {
            digest: digest.to_owned(),
            import: import.to_owned(),
            role,
        }),
        None => Ok(()),
    }
}

/// Loads the example step (`examples-guests/wat-step`) on engines built
/// from `config` and runs one attempt of its `wrap` step on `1`: for tests
/// of how the engines' settings carry through to a step.
#[cfg(test)]
pub(crate) async fn attempt_example_step(
    config: &crate::config::HostConfig,
) -> (Components, Arc<Loaded>, sandbox::AttemptReport) {
    let components = Components::within(
        Engines::new(config).expect("engines"),
        CodeCache::disabled(),
        config.loaded_components_bytes,
    );
    let bytes = crate::componentize::example_wat_step();
    let loaded = components.validate("step.wat", bytes.into()).await.expect("validate");
    let program = components.steps(&loaded).await.expect("link");
    let log = Arc::new(crate::guest_log::RunLog::new(0));
    let report = sandbox::run_attempt(&program, "wrap", "1", 1, &config.step, sandbox::Reach::log_only(log)).await;
    (components, loaded, report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HostConfig;

    #[tokio::test]
    async fn unmetered_steps_still_load_and_run_a_steps_only_component() {
        let config = HostConfig {
            unmetered_steps: true,
            ..HostConfig::new()
        };
        let (_, loaded, report) = attempt_example_step(&config).await;
        assert_eq!(loaded.manifest.steps, ["wrap"]);
        assert_eq!(report.result.expect("attempt"), r#"{"from":"wat","value":1}"#);
    }

    /// A preloaded component is kept for its tenant: loading it again
    /// reads nothing from the store (here an empty one, which would answer
    /// that it is unknown).
    #[tokio::test]
    async fn a_preloaded_component_loads_without_the_store() {
        let (components, loaded, _) = attempt_example_step(&HostConfig::new()).await;
        let tenant = TenantId::default_tenant();
        let store = crate::store::Storage::in_memory().tenant(&tenant);
        assert!(components.get(&store, &loaded.digest).await.is_err(), "not kept before");
        components.preload(&tenant, &loaded).await.expect("preloaded");
        let again = components.get(&store, &loaded.digest).await.expect("kept");
        assert!(Arc::ptr_eq(&again, &loaded));
    }
}
