//! Which component and step a step name means: a bare name is a step of the
//! run's own component; `component/step` is a step of the component linked
//! to the run under that name, or else of the tenant's component of that
//! name (`stepstone upload --name`), so a workflow in one language calls
//! steps written in another.
//!
//! A name is resolved when its call first runs; the journal then holds the
//! result, so a replay never resolves it again. A linked component is pinned
//! to a digest when the run starts; a tenant name is read at the call.

use std::sync::Arc;

use super::RunContext;
use crate::component::{ComponentError, Loaded};
use crate::journal::JournalError;
use crate::store::ComponentName;

/// The component and the step name within it, or why there is none.
pub type StepTarget = Result<(Arc<Loaded>, String), String>;

impl RunContext {
    /// Resolves `name`. Only a storage failure is an error; a name that
    /// means nothing is a [`StepTarget`] error, which the call fails with.
    pub(super) async fn resolve_step(&self, name: &str) -> Result<StepTarget, JournalError> {
        let Some((component, step)) = name.split_once('/') else {
            return Ok(exported(&self.own, "this run's component", name));
        };
        let loaded = match self.links.get(component) {
            Some(linked) => linked.clone(),
            None => match self.named_component(component).await? {
                Ok(loaded) => loaded,
                Err(message) => return Ok(Err(message)),
            },
        };
        Ok(exported(&loaded, &format!("component `{component}`"), step))
    }

    async fn named_component(&self, component: &str) -> Result<Result<Arc<Loaded>, String>, JournalError> {
        let unknown = || {
            format!(
                "no component `{component}` is linked to this run or named by its tenant: \
                 upload it with `stepstone upload FILE --name {component}`"
            )
        };
        let Ok(name) = ComponentName::new(component) else {
            return Ok(Err(unknown()));
        };
        let store = self.records.store();
        let found = async {
            match self.host.components.by_name(store, &name).await? {
                Some(digest) => self.host.components.get(store, &digest).await.map(Some),
                None => Ok(None),
            }
        };
        match found.await {
            Ok(Some(loaded)) => {
                tracing::info!(component, digest = %loaded.digest, "step component resolved by name");
                Ok(Ok(loaded))
            }
            Ok(None) => Ok(Err(unknown())),
            Err(ComponentError::Store(e)) => Err(e.into()),
            Err(other) => Ok(Err(format!("component `{component}` cannot be used: {other}"))),
        }
    }
}

/// Step `step` of `loaded` (called `what` in messages), if it exports it.
fn exported(loaded: &Arc<Loaded>, what: &str, step: &str) -> StepTarget {
    if loaded.has_step(step) {
        return Ok((loaded.clone(), step.to_owned()));
    }
    Err(format!(
        "{what} ({}) exports no step `{step}`; its steps: {}",
        &loaded.digest[..12],
        match loaded.manifest.steps.as_slice() {
            [] => "none".to_owned(),
            steps => steps.join(", "),
        }
    ))
}
