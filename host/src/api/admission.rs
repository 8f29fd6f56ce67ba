//! Which connections a listener keeps: at most [`MAX_CONNECTIONS`] open at
//! once, and at most a share ([`MAX_CONNECTIONS_PER_SOURCE`] unless the
//! operator sets another) from one source (an IPv4 address, or an IPv6
//! /64: what one machine can pick its addresses from); and how many it
//! holds and refused, in the host's metrics.
//!
//! Invariant: a connection over either cap is closed as it is accepted,
//! before a byte of it is read, so no source can hold more than its share
//! of the host's file descriptors, and the sources within their share are
//! still served.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use crate::metrics::{ConnectionCounts, InProgress};
use crate::shared_map::lock;

/// Connections a listener holds open at once, at most.
pub const MAX_CONNECTIONS: usize = 8_192;
/// Connections one source holds open at once, at most: far more than a
/// browser or an SDK opens, far fewer than the total.
pub const MAX_CONNECTIONS_PER_SOURCE: usize = 256;

/// The connections a listener holds, by source.
#[derive(Debug)]
pub struct Admission {
    per_source: usize,
    held: Mutex<Held>,
    counts: ConnectionCounts,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_source: HashMap<IpAddr, usize>,
}

/// A connection admitted: its place is given back when this is dropped.
#[derive(Debug)]
pub(super) struct Admitted {
    admission: Arc<Admission>,
    source: IpAddr,
    _open: InProgress,
}

impl Admission {
    /// A listener's admission: `per_source` connections from one source
    /// (at least 1, at most [`MAX_CONNECTIONS`]), counted in `counts`.
    pub fn new(per_source: usize, counts: ConnectionCounts) -> Arc<Self> {
        Arc::new(Self {
            per_source: per_source.clamp(1, MAX_CONNECTIONS),
            held: Mutex::default(),
            counts,
        })
    }

    /// Takes a place for a connection from `address`, if both caps allow;
    /// counts it refused if not.
    pub(super) fn admit(self: &Arc<Self>, address: IpAddr) -> Option<Admitted> {
        let source = source_of(address);
        let mut held = lock(&self.held);
        let from_source = held.by_source.get(&source).copied().unwrap_or(0);
        if held.total >= MAX_CONNECTIONS || from_source >= self.per_source {
            self.counts.refused();
            return None;
        }
        held.total += 1;
        held.by_source.insert(source, from_source + 1);
        Some(Admitted {
            admission: Arc::clone(self),
            source,
            _open: self.counts.open(),
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut held = lock(&self.admission.held);
        held.total -= 1;
        if let Some(count) = held.by_source.get_mut(&self.source) {
            *count -= 1;
            if *count == 0 {
                held.by_source.remove(&self.source);
            }
        }
    }
}

/// The source `address` counts against: itself for IPv4 (an IPv4-mapped
/// IPv6 address included), its /64 for IPv6.
pub(super) fn source_of(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let segments = v6.segments();
                let [a, b, c, d, ..] = segments;
                IpAddr::V6(Ipv6Addr::new(a, b, c, d, 0, 0, 0, 0))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    fn admission() -> Arc<Admission> {
        Admission::new(MAX_CONNECTIONS_PER_SOURCE, ConnectionCounts::default())
    }

    #[test]
    fn a_source_is_held_to_its_share_and_gets_a_place_back_when_one_closes() {
        let admission = admission();
        let mut held: Vec<Admitted> = (0..MAX_CONNECTIONS_PER_SOURCE)
            .map(|_| admission.admit(address("10.0.0.1")).expect("within the share"))
            .collect();
        assert!(admission.admit(address("10.0.0.1")).is_none());
        assert!(
            admission.admit(address("::ffff:10.0.0.1")).is_none(),
            "the same source, mapped"
        );
        assert!(admission.admit(address("10.0.0.2")).is_some(), "another source");
        held.pop();
        assert!(admission.admit(address("10.0.0.1")).is_some());
    }

    #[test]
    fn an_ipv6_source_is_its_64_and_the_total_is_held_too() {
        let admission = admission();
        let one_64: Vec<Admitted> = (0..MAX_CONNECTIONS_PER_SOURCE)
            .map(|n| {
                admission
                    .admit(address(&format!("2001:db8::{n:x}")))
                    .expect("within the share")
            })
            .collect();
        assert!(
            admission.admit(address("2001:db8::ffff:1")).is_none(),
            "another address of the /64"
        );
        assert!(admission.admit(address("2001:db8:0:1::1")).is_some(), "the next /64");
        drop(one_64);
        let sources = MAX_CONNECTIONS.div_ceil(MAX_CONNECTIONS_PER_SOURCE);
        let all: Vec<Admitted> = (0..MAX_CONNECTIONS)
            .map(|n| {
                let source = n % sources;
                admission.admit(address(&format!("10.1.{}.{}", source / 256, source % 256)))
            })
            .collect::<Option<_>>()
            .expect("within the total");
        assert!(admission.admit(address("192.0.2.1")).is_none(), "over the total");
        drop(all);
        assert!(admission.admit(address("192.0.2.1")).is_some());
    }

    #[test]
    fn a_share_set_by_the_operator_holds_at_its_edges() {
        for (asked, share) in [(0, 1), (1, 1), (3, 3), (usize::MAX, MAX_CONNECTIONS)] {
            let admission = Admission::new(asked, ConnectionCounts::default());
            let held: Vec<Admitted> = (0..share)
                .map(|_| admission.admit(address("10.0.0.1")).expect("within the share"))
                .collect();
            assert!(admission.admit(address("10.0.0.1")).is_none(), "asked {asked}");
            drop(held);
        }
    }
}
