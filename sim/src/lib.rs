//! A deterministic simulation of many Stepstone hosts on one store: real
//! runtimes and a real workflow guest, on one seeded generator and virtual
//! time, over a store that delays, fails and loses replies ([`network`]),
//! with hosts killed, paused, restarted, partitioned from their peers and
//! on drifting clocks, and the whole store out for a while ([`faults`]); after each seed the
//! invariants are checked ([`check`]). The same seed plays the same way,
//! so a failing seed is a bug to replay.

pub mod check;
pub mod faults;
pub mod history;
pub mod network;
pub mod steps;
pub mod world;

pub use faults::{FaultCounts, HostFaults, SimConfig};
pub use network::{StoreCounts, StoreFaults};
pub use world::{SeedReport, run_seed};
