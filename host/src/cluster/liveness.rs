//! Other hosts' liveness, judged from their heartbeats by this host's own
//! clock: a host is dead once its heartbeat has stayed the same for a whole
//! lease TTL since this host first saw that version, or is gone, or its
//! process has exited on this machine. No two hosts' clocks are compared.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::HostId;

/// What this host has seen of the others' heartbeats.
#[derive(Debug, Default)]
pub struct Observations {
    hosts: HashMap<HostId, Observation>,
}

#[derive(Debug)]
struct Observation {
    /// The heartbeat's version when last seen, if it was there.
    version: Option<String>,
    /// When this host first saw that version.
    since: Instant,
    /// When this host judged the host dead.
    dead_since: Option<Instant>,
}

impl Observations {
    /// Records that `host`'s heartbeat has `version` now (`None`: it is
    /// gone), and says whether the host is dead.
    pub fn observe(&mut self, host: &HostId, version: Option<String>, ttl: Duration, now: Instant) -> bool {
        let observation = self.hosts.entry(host.clone()).or_insert_with(|| Observation {
            version: version.clone(),
            since: now,
            dead_since: None,
        });
        if observation.version != version {
            *observation = Observation {
                version,
                since: now,
                dead_since: None,
            };
        }
        let dead = observation.version.is_none() || host.process_gone() || now.duration_since(observation.since) >= ttl;
        if dead {
            observation.dead_since.get_or_insert(now);
        }
        dead
    }

    /// Whether `host` was judged dead before, by an observation.
    pub fn known_dead(&self, host: &HostId) -> bool {
        self.hosts.get(host).is_some_and(|o| o.dead_since.is_some())
    }

    /// The hosts this host saw alive whose heartbeats are no longer listed.
    pub fn vanished<'a>(&'a self, listed: &'a [HostId]) -> impl Iterator<Item = HostId> + 'a {
        self.hosts
            .iter()
            .filter(|(host, o)| o.dead_since.is_none() && !listed.contains(host))
            .map(|(host, _)| host.clone())
    }

    /// Forgets, and returns, the hosts judged dead longer than `grace` ago:
    /// their heartbeats can go (a host whose heartbeat is gone is dead).
    pub fn forget_dead(&mut self, grace: Duration, now: Instant) -> Vec<HostId> {
        let long_dead: Vec<HostId> = self
            .hosts
            .iter()
            .filter(|(_, o)| o.dead_since.is_some_and(|since| now.duration_since(since) >= grace))
            .map(|(host, _)| host.clone())
            .collect();
        for host in &long_dead {
            self.hosts.remove(host);
        }
        long_dead
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
        let t0 = Instant::now();
        assert!(!seen.observe(&host, Some("v1".into()), TTL, t0));
        assert!(!seen.observe(&host, Some("v1".into()), TTL, t0 + TTL - Duration::from_millis(1)));
        assert!(seen.observe(&host, Some("v1".into()), TTL, t0 + TTL));
        assert!(seen.known_dead(&host));
    }

    #[test]
    fn a_changing_heartbeat_keeps_its_host_alive_and_brings_a_dead_one_back() {
        let mut seen = Observations::default();
        let host = other_machine(2);
        let t0 = Instant::now();
        seen.observe(&host, Some("v1".into()), TTL, t0);
        assert!(seen.observe(&host, Some("v1".into()), TTL, t0 + TTL * 2));
        assert!(!seen.observe(&host, Some("v2".into()), TTL, t0 + TTL * 2));
        assert!(!seen.known_dead(&host));
    }

    #[test]
    fn a_missing_heartbeat_is_dead_at_once_and_the_long_dead_are_forgotten() {
        let mut seen = Observations::default();
        let (gone, alive) = (other_machine(3), other_machine(4));
        let t0 = Instant::now();
        assert!(seen.observe(&gone, None, TTL, t0));
        seen.observe(&alive, Some("v".into()), TTL, t0);
        assert_eq!(seen.vanished(std::slice::from_ref(&gone)).collect::<Vec<_>>(), [alive]);
        assert!(seen.forget_dead(TTL, t0 + TTL - Duration::from_millis(1)).is_empty());
        assert_eq!(seen.forget_dead(TTL, t0 + TTL), std::slice::from_ref(&gone));
        assert!(!seen.known_dead(&gone));
    }
}
