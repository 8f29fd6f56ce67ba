//! The runs the ledger notes open that have no record, as this host saw
//! them: since when, on its own boot clock. A note is taken for the
//! phantom of a submission that crashed before creating its run only once
//! this host has seen it without a record for [`ledger::PHANTOM_AFTER`] of
//! its own clock, never by its creation time: a creator whose wall clock is
//! hours behind, or that stalls between its note and its record, is never
//! judged by another host's clock (issue 55, path 2). A phantom is then
//! settled in the store ([`RunRecords::settle_phantom`]), so a creation
//! still under way fails instead of storing a run noted ended.
//!
//! Invariant: a tenant's entries are those its latest look saw without a
//! record, so they are never more than its open notes; a host started
//! again sees every note afresh ([`Sightings`]).
//!
//! [`RunRecords::settle_phantom`]: crate::journal::RunRecords::settle_phantom

use crate::clock::Sightings;
use crate::journal::NotedRun;
use crate::journal::ledger;
use crate::store::TenantId;

/// When this host first saw each record-less note, by tenant.
#[derive(Default)]
pub(super) struct Phantoms {
    seen: Sightings<TenantId, NotedRun>,
}

impl Phantoms {
    /// Keeps `unrecorded`, the notes of `tenant` a look found without a
    /// record, in place of those an earlier look found (each keeping its
    /// first sight), and returns those seen so for [`ledger::PHANTOM_AFTER`].
    pub(super) fn seen(&self, tenant: &TenantId, unrecorded: Vec<NotedRun>) -> Vec<NotedRun> {
        self.seen.look(tenant.clone(), unrecorded, ledger::PHANTOM_AFTER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualTime;
    use crate::store::RunId;

    fn noted(run: &str) -> NotedRun {
        NotedRun {
            run: RunId::new(run).expect("an id"),
            created_at_ms: 1,
        }
    }

    /// A note is a phantom once this host has seen it without a record
    /// for PHANTOM_AFTER of its own clock, not a moment before, whatever
    /// its creation time says; one seen with a record meanwhile starts
    /// again; other tenants' notes are their own.
    #[tokio::test(start_paused = true)]
    async fn a_note_is_a_phantom_once_seen_without_a_record_for_phantom_after() {
        let _virtual = VirtualTime::start(1_000);
        let (phantoms, tenant, other) = (
            Phantoms::default(),
            TenantId::default_tenant(),
            TenantId::new("other").expect("an id"),
        );
        assert!(
            phantoms.seen(&tenant, vec![noted("a"), noted("b")]).is_empty(),
            "first sight"
        );
        phantoms.seen(&other, vec![noted("a")]);
        tokio::time::sleep(ledger::PHANTOM_AFTER - std::time::Duration::from_millis(1)).await;
        assert!(phantoms.seen(&tenant, vec![noted("a")]).is_empty(), "a moment short");
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        assert_eq!(
            phantoms.seen(&tenant, vec![noted("a"), noted("b")]),
            vec![noted("a")],
            "b was seen with a record between"
        );
        assert_eq!(phantoms.seen(&other, vec![noted("a")]), vec![noted("a")]);
        phantoms.seen(&tenant, Vec::new());
        assert!(
            !phantoms.seen.holds(&tenant),
            "nothing kept of a tenant without phantoms"
        );
    }
}
