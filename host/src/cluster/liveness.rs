//! Other hosts' liveness, judged from their heartbeats by this host's own
//! clock: a host is dead once its heartbeat has stayed the same for a whole
//! lease TTL since this host first saw it so, or it said it left, or its
//! process has exited on this machine. No two hosts' clocks are compared.
//!
//! A heartbeat that is missing counts as one more state it can stay in: a
//! host whose heartbeat vanished is dead a TTL later, not at once, so a
//! heartbeat deleted by mistake (a peer cleaning up a host it took for
//! dead just as that host renewed) costs nothing: its host writes it again
//! at its next renewal, well within the TTL. A host that leaves says so
//! (see `Cluster::leave`), and is dead at once.

use std::collections::BTreeMap;
use std::time::Duration;

use super::HostId;
use crate::clock::BootInstant;

/// What this host has seen of the others' heartbeats, by host in order:
/// what is done about them is done in one order, run after run.
#[derive(Debug, Default)]
pub struct Observations {
    hosts: BTreeMap<HostId, Observation>,
}

#[derive(Debug)]
struct Observation {
    /// The heartbeat's version when last seen; `None` while it is missing.
    version: Option<String>,
    /// When this host first saw it so.
    since: BootInstant,
    /// When this host judged the host dead.
    dead_since: Option<BootInstant>,
    /// The host said it left: it is dead for good (a host's id is its
    /// process's, so it never comes back).
    left: bool,
}

impl Observations {
    /// Records that `host`'s heartbeat has `version` now (`None`: it is
    /// missing), and says whether the host is dead.
    pub fn observe(&mut self, host: &HostId, version: Option<String>, ttl: Duration, now: BootInstant) -> bool {
        let observation = self.hosts.entry(host.clone()).or_insert_with(|| Observation {
            version: version.clone(),
            since: now,
            dead_since: None,
            left: false,
        });
        if observation.version != version && !observation.left {
            *observation = Observation {
                version,
                since: now,
                dead_since: None,
                left: false,
            };
        }
        let dead = observation.left || host.process_gone() || now.duration_since(observation.since) >= ttl;
        if dead {
            observation.dead_since.get_or_insert(now);
        }
        dead
    }

    /// Records that `host` said it left: it is dead from now. Says whether
    /// that is news.
    pub fn left(&mut self, host: &HostId, now: BootInstant) -> bool {
        let observation = self.hosts.entry(host.clone()).or_insert_with(|| Observation {
            version: None,
            since: now,
            dead_since: None,
            left: false,
        });
        let news = !observation.left;
        observation.left = true;
        observation.dead_since.get_or_insert(now);
        news
    }

    /// Whether `host` was judged dead before, by an observation.
    pub fn known_dead(&self, host: &HostId) -> bool {
        self.hosts.get(host).is_some_and(|o| o.dead_since.is_some())
    }

    /// The hosts not yet judged dead whose heartbeats are not listed.
    pub fn unlisted<'a>(&'a self, listed: &'a [HostId]) -> impl Iterator<Item = HostId> + 'a {
        self.hosts
            .iter()
            .filter(|(host, o)| o.dead_since.is_none() && !listed.contains(host))
            .map(|(host, _)| host.clone())
    }

    /// Forgets, and returns, the hosts judged dead longer than `grace` ago,
    /// each with the version of the heartbeat it was judged dead by: only
    /// a heartbeat still at that version may be cleaned up.
    pub fn forget_dead(&mut self, grace: Duration, now: BootInstant) -> Vec<(HostId, Option<String>)> {
        let long_dead: Vec<HostId> = self
            .hosts
            .iter()
            .filter(|(_, o)| o.dead_since.is_some_and(|since| now.duration_since(since) >= grace))
            .map(|(host, _)| host.clone())
            .collect();
        long_dead
            .into_iter()
            .filter_map(|host| self.hosts.remove_entry(&host))
            .map(|(host, observation)| (host, observation.version))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    fn other_machine(n: u32) -> HostId {
        HostId::try_from(format!("elsewhere.{n}.abc")).expect("a valid id")
    }

    #[test]
    fn a_heartbeat_seen_for_the_first_time_is_alive_until_a_ttl_passes_unchanged() {
        let mut seen = Observations::default();
        let host = other_machine(1);
        let t0 = BootInstant::now();
        assert!(!seen.observe(&host, Some("v1".into()), TTL, t0));
        assert!(!seen.observe(&host, Some("v1".into()), TTL, t0.after(TTL - Duration::from_millis(1))));
        assert!(seen.observe(&host, Some("v1".into()), TTL, t0.after(TTL)));
        assert!(seen.known_dead(&host));
    }

    #[test]
    fn a_changing_heartbeat_keeps_its_host_alive_and_brings_a_dead_one_back() {
        let mut seen = Observations::default();
        let host = other_machine(2);
        let t0 = BootInstant::now();
        seen.observe(&host, Some("v1".into()), TTL, t0);
        assert!(seen.observe(&host, Some("v1".into()), TTL, t0.after(TTL * 2)));
        assert!(!seen.observe(&host, Some("v2".into()), TTL, t0.after(TTL * 2)));
        assert!(!seen.known_dead(&host));
    }

    /// A heartbeat deleted under a live host (by a peer cleaning up what it
    /// took for dead) is not taken for a death: the host writes it again
    /// within a TTL, and nobody judged it dead in between.
    #[test]
    fn a_missing_heartbeat_is_dead_only_a_ttl_later_and_one_that_comes_back_is_alive() {
        let mut seen = Observations::default();
        let (host, never_seen) = (other_machine(3), other_machine(4));
        let t0 = BootInstant::now();
        seen.observe(&host, Some("v1".into()), TTL, t0);
        let deleted = t0.after(Duration::from_secs(1));
        assert!(!seen.observe(&host, None, TTL, deleted), "missing is not dead at once");
        assert!(!seen.observe(&host, None, TTL, deleted.after(TTL - Duration::from_millis(1))));
        assert!(!seen.observe(&host, Some("v2".into()), TTL, deleted.after(TTL / 4)));
        assert!(!seen.observe(&never_seen, None, TTL, t0));
        assert!(
            seen.observe(&never_seen, None, TTL, t0.after(TTL)),
            "missing for a TTL is dead"
        );
    }

    #[test]
    fn a_host_that_left_is_dead_at_once_and_the_long_dead_are_forgotten_with_their_version() {
        let mut seen = Observations::default();
        let (gone, alive) = (other_machine(5), other_machine(6));
        let t0 = BootInstant::now();
        seen.observe(&gone, Some("last".into()), TTL, t0);
        assert!(seen.left(&gone, t0), "news");
        assert!(!seen.left(&gone, t0.after(TTL)), "not news twice");
        assert!(
            seen.observe(&gone, None, TTL, t0),
            "its heartbeat deleted, it stays dead"
        );
        seen.observe(&alive, Some("v".into()), TTL, t0);
        assert_eq!(seen.unlisted(std::slice::from_ref(&gone)).collect::<Vec<_>>(), [alive]);
        assert!(
            seen.forget_dead(TTL, t0.after(TTL - Duration::from_millis(1)))
                .is_empty()
        );
        assert_eq!(
            seen.forget_dead(TTL, t0.after(TTL)),
            [(gone.clone(), Some("last".into()))]
        );
        assert!(!seen.known_dead(&gone));
    }
}
