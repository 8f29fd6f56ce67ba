//! Runs this host created and has not driven yet. Their first drive knows
//! what the store holds for them — the run record this host wrote, nothing
//! else — so it skips reading it back: no run-record read, no journal,
//! snapshot or attempts listing, no outcome or cancel-request read before the workflow
//! starts.
//!
//! Invariant: forgetting a run is always safe. A run missing here is read
//! from the store like any other; a cancel request stored meanwhile by
//! another process is still read before the run's outcome is written; and
//! if another host drove the run meanwhile, the create-only journal makes
//! this one stand down at its first entry.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::journal::RunRecord;
use crate::shared_map::lock;
use crate::store::{RunId, TenantId};

/// How many undriven runs are remembered; past that the map starts again
/// empty, so runs submitted and never driven here (each holding its input)
/// cannot grow it without bound. A server drives each run as soon as it is
/// submitted, so only a burst of submissions fills it.
const CAPACITY: usize = 1024;

#[derive(Default)]
pub struct FreshRuns(Mutex<HashMap<(TenantId, RunId), RunRecord>>);

impl FreshRuns {
    /// Remembers a run whose record this host has just created.
    pub fn created(&self, tenant: &TenantId, record: RunRecord) {
        let mut runs = lock(&self.0);
        if runs.len() >= CAPACITY {
            runs.clear();
        }
        runs.insert((tenant.clone(), record.run_id.clone()), record);
    }

    /// The record of `run` if this host created it and nothing has driven
    /// it since; it is no longer fresh afterwards.
    pub fn take(&self, tenant: &TenantId, run: &RunId) -> Option<RunRecord> {
        lock(&self.0).remove(&(tenant.clone(), run.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(run: &str) -> RunRecord {
        RunRecord::example(run, 1)
    }

    #[test]
    fn a_run_is_fresh_once_and_for_its_tenant_only() {
        let fresh = FreshRuns::default();
        let (acme, other) = (
            TenantId::new("acme").expect("valid in this test"),
            TenantId::new("other").expect("valid in this test"),
        );
        fresh.created(&acme, record("r1"));
        let run = RunId::new("r1").expect("valid in this test");
        assert_eq!(fresh.take(&other, &run), None);
        assert_eq!(fresh.take(&acme, &run), Some(record("r1")));
        assert_eq!(fresh.take(&acme, &run), None, "the second drive reads the store");
    }

    #[test]
    fn runs_never_driven_do_not_grow_the_map_past_its_capacity() {
        let fresh = FreshRuns::default();
        let tenant = TenantId::default_tenant();
        for i in 0..=CAPACITY {
            fresh.created(&tenant, record(&format!("r{i}")));
        }
        assert_eq!(lock(&fresh.0).len(), 1);
    }
}
