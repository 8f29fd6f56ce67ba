//! Linking a component for one role: the imports that role provides, and a
//! trap for every other import the component declares (a workflow's
//! `step-support`, a step's `durable`), so a component exporting both
//! workflows and steps instantiates in either role.

use wasmtime::Engine;
use wasmtime::component::{Component, InstancePre, Linker};

/// Links `component` with the imports `provide` adds; its remaining imports
/// trap if called. The registry has already refused imports outside the
/// contract, so only the other role's interfaces can be left.
pub fn link<T: 'static>(
    engine: &Engine,
    component: &Component,
    provide: impl FnOnce(&mut Linker<T>) -> wasmtime::Result<()>,
) -> wasmtime::Result<InstancePre<T>> {
    let mut linker = Linker::new(engine);
    provide(&mut linker)?;
    linker.define_unknown_imports_as_traps(component)?;
    linker.instantiate_pre(component)
}
