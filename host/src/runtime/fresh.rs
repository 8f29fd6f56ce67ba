//! Runs this host created and has not driven yet. Their first drive knows
//! what the store holds for them — the run record this host wrote, nothing
//! else — so it skips reading it back: no run-record read, no journal,
//! snapshot or attempts listing, no outcome or cancel-request read before the workflow
//! starts; and its first step attempt may stand on the fence read while the
//! record was stored ([`FirstFence`]).
//!
//! Invariants: forgetting a run is always safe. A run missing here is read
//! from the store like any other; a cancel request stored meanwhile by
//! another process is still read before the run's outcome is written; and
//! if another host drove the run meanwhile, the create-only journal makes
//! this one stand down at its first entry. A run is fresh only if no drive
//! of it began on this host since its record's creation began: a drive
//! that begins meanwhile (recovery, or its concurrency key's line, finding
//! the record while the submission still awaits) takes the run's place
//! here, so the submission's drive reads the store too. (The simulation
//! found a submission, still joining its run's concurrency line in a
//! store outage, that marked the run fresh after such a drive had run
//! three steps: its own drive started the first step again.)

use std::collections::HashMap;
use std::sync::Mutex;

use crate::journal::{FirstFence, RunRecord};
use crate::shared_map::lock;
use crate::store::{RunId, TenantId};

/// How many undriven runs are remembered; past that the map starts again
/// empty, so runs submitted and never driven here (each holding its input)
/// cannot grow it without bound. A server drives each run as soon as it is
/// submitted, so only a burst of submissions fills it.
const CAPACITY: usize = 1024;

#[derive(Default)]
pub struct FreshRuns(Mutex<HashMap<(TenantId, RunId), Freshness>>);

enum Freshness {
    /// Its record is being created.
    Creating,
    /// Boxed: a record is large beside `Creating`.
    Created(Box<Fresh>),
}

/// What the first drive of a run this host created starts from.
#[derive(Debug)]
pub struct Fresh {
    /// The run record this host stored.
    pub record: RunRecord,
    /// The fence for its first attempt, read as the record was stored.
    pub first_fence: Option<FirstFence>,
}

impl FreshRuns {
    /// Notes that this host is about to create `run`'s record.
    pub fn creating(&self, tenant: &TenantId, run: &RunId) {
        let mut runs = lock(&self.0);
        if runs.len() >= CAPACITY {
            runs.clear();
        }
        runs.insert((tenant.clone(), run.clone()), Freshness::Creating);
    }

    /// Remembers a run whose record this host has just created, unless a
    /// drive of it began since [`creating`](Self::creating).
    pub fn created(&self, tenant: &TenantId, fresh: Fresh) {
        let mut runs = lock(&self.0);
        if let Some(freshness @ Freshness::Creating) = runs.get_mut(&(tenant.clone(), fresh.record.run_id.clone())) {
            *freshness = Freshness::Created(Box::new(fresh));
        }
    }

    /// What `run`'s first drive starts from, if this host created it and
    /// nothing has driven it since; it is no longer fresh afterwards.
    /// Called as every drive begins.
    pub fn take(&self, tenant: &TenantId, run: &RunId) -> Option<Fresh> {
        match lock(&self.0).remove(&(tenant.clone(), run.clone()))? {
            Freshness::Created(fresh) => Some(*fresh),
            Freshness::Creating => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(run: &str) -> Fresh {
        Fresh {
            record: RunRecord::example(run, 1),
            first_fence: None,
        }
    }

    /// The record of what `take` found fresh.
    fn taken(fresh: &FreshRuns, tenant: &TenantId, run: &RunId) -> Option<RunRecord> {
        fresh.take(tenant, run).map(|fresh| fresh.record)
    }

    #[test]
    fn a_run_is_fresh_once_and_for_its_tenant_only() {
        let fresh = FreshRuns::default();
        let (acme, other) = (
            TenantId::new("acme").expect("valid in this test"),
            TenantId::new("other").expect("valid in this test"),
        );
        let run = RunId::new("r1").expect("valid in this test");
        fresh.creating(&acme, &run);
        fresh.created(&acme, record("r1"));
        assert_eq!(taken(&fresh, &other, &run), None);
        assert_eq!(taken(&fresh, &acme, &run), Some(record("r1").record));
        assert_eq!(taken(&fresh, &acme, &run), None, "the second drive reads the store");
    }

    /// A drive that begins while the record is being created (recovery,
    /// or the run's line) leaves the run not fresh once it is created.
    #[test]
    fn a_run_driven_while_its_record_is_created_is_not_fresh() {
        let fresh = FreshRuns::default();
        let tenant = TenantId::default_tenant();
        let run = RunId::new("r1").expect("valid in this test");
        fresh.creating(&tenant, &run);
        assert_eq!(
            taken(&fresh, &tenant, &run),
            None,
            "the drive meanwhile reads the store"
        );
        fresh.created(&tenant, record("r1"));
        assert_eq!(taken(&fresh, &tenant, &run), None, "so does the submission's");
        // Created without `creating` first (never the case): not fresh.
        fresh.created(&tenant, record("r1"));
        assert_eq!(taken(&fresh, &tenant, &run), None);
    }

    #[test]
    fn runs_never_driven_do_not_grow_the_map_past_its_capacity() {
        let fresh = FreshRuns::default();
        let tenant = TenantId::default_tenant();
        for i in 0..=CAPACITY {
            fresh.creating(&tenant, &RunId::new(&format!("r{i}")).expect("valid in this test"));
            fresh.created(&tenant, record(&format!("r{i}")));
        }
        assert_eq!(lock(&fresh.0).len(), 1);
    }
}
