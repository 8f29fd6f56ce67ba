//! Write Stepstone durable workflows and steps in ordinary Rust.
//!
//! A **workflow** is a deterministic function that reaches the world only
//! through its [`Workflow`] context: every step call, timer, signal, clock
//! read and random number goes through it and is journaled by the host, so a
//! run that crashed or was evicted is replayed to exactly where it stopped.
//! A **step** is an ordinary function the host runs in its own sandbox,
//! under fuel, memory and time limits, retrying it as the caller asked; it
//! gets a [`Step`] context and reports failure with a [`StepFailure`].
//!
//! Inputs and outputs are any serde types. They cross the boundary as JSON,
//! so a Rust workflow can call a step written in another language.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use stepstone_guest::{export, Error, Step, StepFailure, StepOptions, Workflow};
//! use std::time::Duration;
//!
//! #[derive(Serialize, Deserialize)]
//! struct Order { id: String, cents: u64 }
//!
//! fn place_order(ctx: &Workflow, order: Order) -> Result<String, Error> {
//!     let retry = StepOptions::new().max_attempts(3).initial_backoff(Duration::from_millis(100));
//!     let receipt: String = ctx.step_with("charge", &order, retry)?;
//!     ctx.sleep(Duration::from_secs(1));
//!     Ok(receipt)
//! }
//!
//! fn charge(ctx: &Step, order: Order) -> Result<String, StepFailure> {
//!     ctx.info(&format!("charging {} cents, attempt {}", order.cents, ctx.attempt()));
//!     Ok(format!("receipt-{}", order.id))
//! }
//!
//! export! {
//!     workflows: { "place-order" => place_order },
//!     steps: { "charge" => charge },
//! }
//! # fn main() {}
//! ```
//!
//! Where things are: [`Workflow`] and [`Pending`] (durable calls), [`Step`]
//! and [`StepFailure`] (the step side), [`http`] (a step's outgoing
//! requests), [`StepOptions`] (retry policy and
//! limits of one call), [`Error`] and [`StepError`] (what a workflow sees
//! fail), [`Level`] (logs) and [`export!`] (the component's exports).

#[cfg(all(feature = "allocator", target_arch = "wasm32", not(target_feature = "atomics")))]
mod allocator;
mod error;
pub mod http;
mod log;
mod options;
mod panic_log;
mod step;
mod workflow;

#[doc(hidden)]
pub mod bindings;
#[doc(hidden)]
pub mod dispatch;

pub use error::{Error, StepError, StepErrorKind};
pub use log::Level;
pub use options::StepOptions;
pub use step::{Step, StepFailure};
pub use workflow::{Child, Pending, Workflow};
