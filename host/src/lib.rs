//! Stepstone: a WebAssembly plugin host for durable workflow steps.
//!
//! Workflows and steps are WebAssembly components written against one WIT
//! contract ([`contract`]). The host runs every step attempt in a fresh
//! sandbox ([`sandbox`]), records every durable call a workflow makes in a
//! journal on object storage ([`journal`], [`store`]), and replays that
//! journal so a crashed or evicted run resumes where it stopped ([`runtime`]).
//! Hosts sharing one store divide the runs between them by leases
//! ([`cluster`]). Each tenant is held to its [`policy`] by the runtime,
//! whoever calls it. Whatever a tenant sends to the network leaves through
//! [`egress`].
//!
//! Every public item is documented: `missing_docs` is an error here.

#![deny(missing_docs)]

#[cfg(feature = "mimalloc")]
mod allocator;
pub mod api;
mod byte_budget;
pub mod clock;
pub mod cluster;
pub mod component;
pub mod componentize;
pub mod config;
mod console;
pub mod contract;
pub mod durations;
pub mod egress;
pub mod guest_log;
pub mod journal;
pub mod metrics;
pub mod policy;
pub mod runtime;
pub mod sandbox;
pub mod schedules;
pub mod secrets;
mod shared_map;
pub mod store;
pub mod telemetry;
pub mod tenancy;
pub mod testing;
