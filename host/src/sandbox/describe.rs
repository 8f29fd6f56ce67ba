//! Asking a component what it exports, inside a sandbox of its own: the first
//! guest code any upload runs, so it gets tight limits and no imports.

use std::time::Duration;

use wasmtime::Engine;
use wasmtime::component::Component;

use super::StepErrorKind;
use super::attempt::AttemptFailure;
use super::deadline::Deadline;
use super::limiter::{MemoryGuard, Sandboxed, new_store};
use super::link::link;
use super::wasi::GuestWasi;
use crate::contract::bindings::Manifest;
use crate::contract::bindings::exports::stepstone::workflow::describe;

/// What one `describe` call may spend: a component answering it runs no
/// tenant's work, so a little fuel and time are plenty.
const FUEL: u64 = 100_000_000;
const TIMEOUT: Duration = Duration::from_secs(5);
const MEMORY: usize = 64 << 20;

struct DescribeState {
    guard: MemoryGuard,
    deadline: Deadline,
    wasi: GuestWasi,
}

impl wasmtime_wasi::WasiView for DescribeState {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        self.wasi.view()
    }
}

impl super::wasi::Guest for DescribeState {
    fn guest(&mut self) -> &mut GuestWasi {
        &mut self.wasi
    }
}

impl wasmtime_wasi_http::WasiHttpView for DescribeState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        self.wasi.http_view()
    }
}

impl Sandboxed for DescribeState {
    fn guard(&mut self) -> &mut MemoryGuard {
        &mut self.guard
    }

    fn deadline(&self) -> &Deadline {
        &self.deadline
    }
}

/// Calls the component's `describe` export, with fuel if `engine` meters it
/// (the timeout bounds it either way). Every contract import traps:
/// describing itself is all a component may do here; its WASI (which a
/// language runtime may touch as it starts) is the inert one of `wasi`.
pub async fn describe(engine: &Engine, component: &Component, metered: bool) -> Result<Manifest, AttemptFailure> {
    let setup = |e: wasmtime::Error| AttemptFailure::new(StepErrorKind::Trapped, format!("{e:#}"));
    let pre = link(engine, component, None, |_| Ok(())).map_err(setup)?;
    let indices = describe::GuestIndices::new(&pre).map_err(setup)?;
    let state = DescribeState {
        guard: MemoryGuard::new(MEMORY, 10_000),
        deadline: Deadline::after(TIMEOUT),
        wasi: GuestWasi::for_describe(),
    };
    let deadline = state.deadline.clone();
    let mut store = new_store(engine, state, metered.then_some(FUEL)).map_err(setup)?;
    let result = deadline
        .bound(async {
            let instance = pre.instantiate_async(&mut store).await?;
            indices.load(&mut store, &instance)?.call_describe(&mut store).await
        })
        .await;
    result.map_err(|e| AttemptFailure::stopped(&e, &mut store))
}
