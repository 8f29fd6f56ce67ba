//! Stepstone: a WebAssembly plugin host for durable workflow steps.
//!
//! Workflows and steps are WebAssembly components written against one WIT
//! contract. The host runs every step attempt in a fresh sandbox, records
//! every durable call a workflow makes in a journal on object storage
//! ([`journal`], [`store`]), and replays that journal so a crashed or
//! evicted run resumes where it stopped ([`runtime`]). Hosts sharing one
//! store divide the runs between them by leases. Each tenant is held to its
//! [`policy`] by the runtime, whoever calls it.
//!
//! # The embedder's API
//!
//! [`runtime::Runtime`] is the front: built from a [`config::HostConfig`],
//! a [`store::Storage`] and a [`component::CodeCache`], it takes components
//! and [`runtime::Submission`]s and answers with statuses. [`api::router`]
//! serves it over HTTP, and [`tenancy`] reads the tenants file a server
//! holds tenants to. The modules not listed here are the host's own: the
//! `internals` feature makes them public (hidden from these docs) for the
//! `stepstone` binary and the crate's own suites, with no promise kept.
//!
//! ```no_run
//! # async fn example(bytes: bytes::Bytes) -> Result<(), Box<dyn std::error::Error>> {
//! use stepstone::{component::CodeCache, config::HostConfig, store::{Storage, TenantId}};
//! use stepstone::runtime::{Progress, Runtime, Submission};
//!
//! let runtime = Runtime::new(HostConfig::new(), Storage::in_memory(), CodeCache::disabled())?;
//! let tenant = TenantId::default_tenant();
//! let component = runtime.upload(&tenant, bytes, None).await?;
//! let run = runtime.submit(&tenant, Submission::new(component, "greet", r#"{"name":"Ada"}"#)).await?;
//! if let Progress::Finished(outcome) = runtime.run_to_end(&tenant, &run, None).await? {
//!     println!("{outcome:?}");
//! }
//! # Ok(()) }
//! ```
//!
//! Every public item is documented: `missing_docs` is an error here.

#![deny(missing_docs)]

/// Declares modules outside the embedder's API: public but hidden from the
/// docs with the `internals` feature, the crate's own without it (where
/// what only the binary and the suites use is unused, so not linted dead).
macro_rules! internal_modules {
    ($($name:ident),* $(,)?) => {$(
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unused_imports)]
        mod $name;
    )*};
}

/// Re-exports items outside the embedder's API from a module inside it,
/// as `internal_modules!` declares modules: public but hidden from the docs
/// with the `internals` feature, the crate's own without it.
macro_rules! internal_use {
    ($($path:tt)*) => {
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        pub use $($path)*;
        #[cfg(not(feature = "internals"))]
        #[allow(unused_imports)]
        pub(crate) use $($path)*;
    };
}

pub mod api;
pub mod component;
pub mod config;
pub mod http_hooks;
pub mod journal;
pub mod metrics;
pub mod policy;
pub mod runtime;
pub mod schedules;
pub mod secrets;
pub mod store;
pub mod telemetry;
pub mod tenancy;
pub mod testing;

internal_modules!(
    clock,
    cluster,
    componentize,
    contract,
    durations,
    egress,
    guest_log,
    sandbox,
    task,
);

#[cfg(feature = "mimalloc")]
mod allocator;
mod byte_budget;
mod console;
mod shared_map;
