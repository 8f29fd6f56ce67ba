//! Linking a component for one role: the contract interface that role
//! provides, the WASI, `wasi:http` and `wasi:config` every role links (see
//! `wasi` and `outbound` for what they reach), and a trap for each
//! function of the other role's contract interface (a workflow's
//! `step-support`, a step's `durable`), so a component exporting both
//! workflows and steps instantiates in either role.

use wasmtime::Engine;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, InstancePre, Linker};
use wasmtime_wasi::WasiView;
use wasmtime_wasi_config::WasiConfig;
use wasmtime_wasi_http::WasiHttpView;

use super::scratch_budget::hold_writes_to_budget;
use super::wasi::Guest;

/// Links `component` with the imports `provide` adds (the contract
/// interface called `provided`, if any), WASI 0.2 and `wasi:http`; every other contract
/// function traps if called. The registry has already refused imports its
/// policy does not grant, so nothing else can be left.
pub fn link<T: WasiView + WasiHttpView + Guest + 'static>(
    engine: &Engine,
    component: &Component,
    provided: Option<&str>,
    provide: impl FnOnce(&mut Linker<T>) -> wasmtime::Result<()>,
) -> wasmtime::Result<InstancePre<T>> {
    let mut linker = Linker::new(engine);
    provide(&mut linker)?;
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    hold_writes_to_budget(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    wasmtime_wasi_config::add_to_linker(&mut linker, config_of::<T>)?;
    trap_other_contract_imports(&mut linker, engine, component, provided)?;
    linker.instantiate_pre(component)
}

fn config_of<T: Guest>(state: &mut T) -> WasiConfig<'_> {
    state.guest().config()
}

/// Not `Linker::define_unknown_imports_as_traps`: it defines each import at
/// its exact version, which would shadow the WASI 0.2.x the linker matches
/// by semver (a guest importing `wasi:cli/environment@0.2.9` would get traps
/// instead of the host's 0.2.12).
fn trap_other_contract_imports<T: 'static>(
    linker: &mut Linker<T>,
    engine: &Engine,
    component: &Component,
    provided: Option<&str>,
) -> wasmtime::Result<()> {
    let provided = provided.map(crate::contract::interface);
    for (name, item) in component.component_type().imports(engine) {
        let ComponentItem::ComponentInstance(instance) = item.ty else {
            continue;
        };
        if !name.starts_with("stepstone:workflow/") || provided.as_deref() == Some(name) {
            continue;
        }
        let mut defined = linker.instance(name)?;
        for (function, item) in instance.exports(engine) {
            if matches!(item.ty, ComponentItem::ComponentFunc(_)) {
                let message = format!("`{name}#{function}` is not available in this role");
                defined.func_new(function, move |_, _, _, _| Err(wasmtime::Error::msg(message.clone())))?;
            }
        }
    }
    Ok(())
}
