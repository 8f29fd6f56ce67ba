//! This host's own lease: when it last renewed its heartbeat, and whether
//! it went a whole TTL without, since when every claim it made is void.
//!
//! Invariants: the lease is measured on the boot clock ([`BootInstant`]),
//! which counts a suspend, so a host woken from one finds its lease run
//! out as its peers do. Claims hold only for [`USABLE_SHARE`] of the TTL
//! after the renewal was sent: the gap between a check and the write or
//! attempt it guards, and the drift between two hosts' clock rates, stay
//! inside the rest, before any peer can judge this host dead.

use std::sync::Mutex;
use std::time::Duration;

use crate::clock::{BootInstant, LeaseClock};
use crate::shared_map::lock;

/// How long a host's claim on its runs lasts without renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasePolicy {
    /// A host that has not renewed its heartbeat for this long is judged
    /// dead by the others, who take its runs over; it renews every quarter
    /// of it, and stops writing for its runs once a whole TTL passed
    /// without a renewal.
    ///
    /// Default: 10 s (at least [`LeasePolicy::MIN_TTL`]).
    pub ttl: Duration,
    /// How many parts per thousand this host's lease clock runs fast
    /// (below 0: slow) against the boot clock. 0 for a host serving
    /// tenants; a simulation of many hosts gives each a drift of its own
    /// (see `clock::LeaseClock`).
    ///
    /// Default: 0.
    pub clock_drift_permille: i32,
}

impl LeasePolicy {
    /// The shortest TTL: renewals every quarter of it must fit a slow store.
    pub const MIN_TTL: Duration = Duration::from_secs(1);
}

impl Default for LeasePolicy {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(10),
            clock_drift_permille: 0,
        }
    }
}

/// The share of its TTL a lease holds for claims, in tenths: a host starts
/// no attempt and makes no write past 0.8 TTL without a renewal.
pub const USABLE_SHARE: u32 = 8;

/// The host's lease, which every claim it holds refers to.
#[derive(Debug)]
pub struct Lease {
    ttl: Duration,
    clock: LeaseClock,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// When the last renewal that succeeded was sent: the lease holds from
    /// then (not from its reply, which came later).
    renewed: Option<BootInstant>,
    /// Bumped at each lapse; a claim made in an earlier generation is void.
    generation: u64,
    /// Renewals sent, so that each heartbeat differs from the last.
    renewals: u64,
    /// The host left: it drives nothing more.
    left: bool,
}

/// A write was refused because this host's lease lapsed.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "this host's lease lapsed: it went longer than its lease TTL of {ttl:?} without renewing its heartbeat (it was paused, overloaded or cut off from the store), so another host may have taken its runs over"
)]
pub struct LeaseLapsed {
    /// The lease's TTL: how long the host may go without renewing its
    /// heartbeat.
    pub ttl: Duration,
}

impl Lease {
    pub fn new(ttl: Duration, clock: LeaseClock) -> Self {
        Self {
            ttl,
            clock,
            state: Mutex::default(),
        }
    }

    /// The clock the lease is measured on, which its host's failure
    /// detector reads too.
    pub fn clock(&self) -> &LeaseClock {
        &self.clock
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long after a renewal was sent claims made under it hold.
    pub fn usable(&self) -> Duration {
        self.ttl * USABLE_SHARE / 10
    }

    /// The generation of the lease if it holds now for claims.
    pub fn current(&self) -> Option<u64> {
        let state = lock(&self.state);
        let holds = !state.left
            && state
                .renewed
                .is_some_and(|renewed| self.clock.since(renewed) < self.usable());
        holds.then_some(state.generation)
    }

    /// The generation of the lease, holding or not.
    pub fn generation(&self) -> u64 {
        lock(&self.state).generation
    }

    /// Whether a claim made in `generation` still holds.
    pub fn check(&self, generation: u64) -> Result<(), LeaseLapsed> {
        match self.current() {
            Some(current) if current == generation => Ok(()),
            _ => Err(LeaseLapsed { ttl: self.ttl }),
        }
    }

    /// The number of the renewal about to be sent.
    pub fn next_renewal(&self) -> u64 {
        let mut state = lock(&self.state);
        state.renewals += 1;
        state.renewals
    }

    /// Records a renewal sent at `sent` and stored by `stored`. If the lease
    /// ran out before it was stored, others may have judged this host dead
    /// in between: the lease starts a new generation, voiding every claim.
    pub fn renewed(&self, sent: BootInstant, stored: BootInstant) {
        let mut state = lock(&self.state);
        if let Some(previous) = state.renewed
            && stored.duration_since(previous) >= self.ttl
        {
            state.generation += 1;
            tracing::warn!(
                lapsed_for_ms = crate::clock::millis(stored.duration_since(previous) - self.ttl),
                "this host's lease lapsed; it stands down from every run it drove and claims them again"
            );
        }
        state.renewed = Some(sent);
    }

    /// Starts a new generation at once, voiding every claim: the heartbeat
    /// was found changed by another writer (a clone of this host, or a peer
    /// that took it for dead), so peers may have judged this host dead.
    pub fn void(&self) {
        lock(&self.state).generation += 1;
    }

    /// Ends the lease for good: the host drives nothing more.
    pub fn leave(&self) {
        lock(&self.state).left = true;
    }

    pub fn has_left(&self) -> bool {
        lock(&self.state).left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_holds_claims_for_eight_tenths_of_a_ttl_from_the_renewal_sent() {
        let lease = Lease::new(Duration::from_secs(10), LeaseClock::drifting(0));
        assert_eq!(lease.current(), None, "no renewal yet");
        let sent = BootInstant::now();
        lease.renewed(sent, sent.after(Duration::from_millis(5)));
        assert_eq!(lease.current(), Some(0));
        assert!(lease.check(0).is_ok());
        assert!(lease.check(1).is_err());
        let lease = Lease::new(Duration::from_millis(100), LeaseClock::drifting(0));
        let nearly_spent = BootInstant::now();
        lease.renewed(nearly_spent, nearly_spent);
        std::thread::sleep(lease.usable());
        assert!(lease.check(0).is_err(), "past 0.8 TTL a claim no longer holds");
        assert_eq!(lease.usable(), Duration::from_millis(80));
    }

    #[test]
    fn a_renewal_stored_a_ttl_after_the_last_voids_every_claim() {
        let lease = Lease::new(Duration::from_secs(100), LeaseClock::drifting(0));
        let start = BootInstant::now();
        lease.renewed(start, start);
        let late = start.after(Duration::from_secs(100));
        lease.renewed(late, late);
        assert!(lease.check(0).is_err(), "a claim from before the lapse must not hold");
        assert_eq!(lease.generation(), 1);
        let just_in_time = late.after(Duration::from_millis(99_999));
        lease.renewed(just_in_time, just_in_time);
        assert_eq!(lease.generation(), 1);
        lease.void();
        assert_eq!(
            lease.generation(),
            2,
            "a heartbeat changed by another writer voids the claims"
        );
    }

    #[test]
    fn a_lease_runs_out_without_renewal_and_after_leaving() {
        let lease = Lease::new(Duration::from_millis(10), LeaseClock::drifting(0));
        let now = BootInstant::now();
        lease.renewed(now, now);
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(lease.current(), None);
        let lease = Lease::new(Duration::from_secs(10), LeaseClock::drifting(0));
        lease.renewed(BootInstant::now(), BootInstant::now());
        lease.leave();
        assert!(lease.check(0).is_err());
    }
}
