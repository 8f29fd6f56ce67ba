//! The request bodies a host holds in memory at once: each body read
//! counts its bytes, as they arrive, against the host's budget and its
//! tenant's share, until its request has been answered. A flood of large
//! bodies (payloads of up to 64 MiB, components as large) is refused, not
//! read into memory without a bound. A body no one has vouched for yet (a
//! request to a hook, read before its signature can be checked) counts in
//! a pool of its own instead, and against its source address's share of
//! it: strangers' bodies never take what a tenant's or the host's budget
//! holds for authenticated requests (issue 56: two stalled 60 MiB posts
//! to a hook held its tenant's share, and four the host's).
//!
//! Invariant: the authenticated bodies held never add up to more than
//! [`MAX_BODY_BYTES_IN_FLIGHT`], nor one tenant's to more than
//! [`MAX_TENANT_BODY_BYTES_IN_FLIGHT`]; the anonymous ones never to more
//! than [`MAX_ANONYMOUS_BODY_BYTES_IN_FLIGHT`], nor one source's to more
//! than [`MAX_SOURCE_BODY_BYTES_IN_FLIGHT`]; except that one body its
//! route accepts is always let in alone: a bound is never below one
//! body's limit. A tenant or a source past its share is told so (429);
//! any caller, when the host or the anonymous pool is full (503); all say
//! to retry.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;

use crate::shared_map::lock;
use crate::store::TenantId;

/// The bytes of request bodies a host holds at once.
pub const MAX_BODY_BYTES_IN_FLIGHT: usize = 512 << 20;
/// The bytes of one tenant's request bodies a host holds at once: two
/// payloads at the default quota.
pub const MAX_TENANT_BODY_BYTES_IN_FLIGHT: usize = 128 << 20;
/// The bytes of bodies no one has vouched for yet that a host holds at
/// once, beside its budget: four payloads at the default quota.
pub const MAX_ANONYMOUS_BODY_BYTES_IN_FLIGHT: usize = 256 << 20;
/// The bytes of those one source address (an IPv6 /64) holds at once: one
/// payload at the default quota.
pub const MAX_SOURCE_BODY_BYTES_IN_FLIGHT: usize = 64 << 20;

/// What the bodies being read or handled hold.
#[derive(Debug, Default)]
pub struct BodyBudget {
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    authenticated: Pool<TenantId>,
    anonymous: Pool<IpAddr>,
}

/// Bytes held in all, and by each sharer.
#[derive(Debug)]
struct Pool<K> {
    total: usize,
    by: HashMap<K, usize>,
}

impl<K> Default for Pool<K> {
    fn default() -> Self {
        Self {
            total: 0,
            by: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> Pool<K> {
    /// Holds `more` bytes for `sharer` (none: counted in the total alone)
    /// within `limit` in all and `share` each; which bound refused them.
    fn hold(&mut self, sharer: Option<&K>, more: usize, limit: usize, share: usize) -> Result<(), Bound> {
        if self.total.saturating_add(more) > limit {
            return Err(Bound::Pool(limit));
        }
        if let Some(sharer) = sharer {
            let held = self.by.entry(sharer.clone()).or_default();
            if held.saturating_add(more) > share {
                return Err(Bound::Share(share));
            }
            *held += more;
        }
        self.total += more;
        Ok(())
    }

    fn release(&mut self, sharer: Option<&K>, bytes: usize) {
        self.total -= bytes;
        if let Some(sharer) = sharer
            && let Some(held) = self.by.get_mut(sharer)
        {
            *held -= bytes;
            if *held == 0 {
                self.by.remove(sharer);
            }
        }
    }
}

/// Which bound of a pool refused bytes, and its size.
enum Bound {
    Pool(usize),
    Share(usize),
}

/// Whose a body is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// An authenticated tenant's.
    Tenant(TenantId),
    /// A caller not known yet, whose request is refused (a `/v1` route
    /// without a valid token): held within the host's budget.
    Unknown,
    /// A caller no one has vouched for yet, from this source (see
    /// `admission::source_of`): held in the anonymous pool.
    Anonymous(IpAddr),
}

/// Why a body's next bytes were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverBudget {
    /// Its tenant's bodies hold their share.
    Tenant { limit: usize },
    /// The host's bodies hold its budget.
    Host { limit: usize },
    /// Its source's anonymous bodies hold their share.
    Source { limit: usize },
    /// The anonymous bodies hold their pool.
    Anonymous { limit: usize },
}

impl BodyBudget {
    /// A body of `holder` that its route reads up to `route_limit` bytes
    /// of, holding nothing yet.
    pub fn body(&self, holder: Holder, route_limit: usize) -> HeldBody<'_> {
        HeldBody {
            budget: self,
            holder,
            route_limit,
            bytes: 0,
        }
    }

    /// The bytes held now, by every authenticated body and by `tenant`'s.
    #[cfg(test)]
    fn held(&self, tenant: &TenantId) -> (usize, usize) {
        let held = lock(&self.held);
        let pool = &held.authenticated;
        (pool.total, pool.by.get(tenant).copied().unwrap_or(0))
    }
}

/// One body's bytes, held against the budget until dropped.
#[derive(Debug)]
pub struct HeldBody<'a> {
    budget: &'a BodyBudget,
    holder: Holder,
    route_limit: usize,
    bytes: usize,
}

impl HeldBody<'_> {
    /// Holds `more` bytes, if its pool and its share of it have room.
    pub fn grow(&mut self, more: usize) -> Result<(), OverBudget> {
        let mut held = lock(&self.budget.held);
        let at_least = |bound: usize| bound.max(self.route_limit);
        let host = at_least(MAX_BODY_BYTES_IN_FLIGHT);
        match &self.holder {
            Holder::Tenant(tenant) => held
                .authenticated
                .hold(Some(tenant), more, host, at_least(MAX_TENANT_BODY_BYTES_IN_FLIGHT))
                .map_err(|bound| match bound {
                    Bound::Pool(limit) => OverBudget::Host { limit },
                    Bound::Share(limit) => OverBudget::Tenant { limit },
                }),
            Holder::Unknown => {
                (held.authenticated.hold(None, more, host, host)).map_err(|_| OverBudget::Host { limit: host })
            }
            Holder::Anonymous(source) => {
                let (pool, share) = (MAX_ANONYMOUS_BODY_BYTES_IN_FLIGHT, MAX_SOURCE_BODY_BYTES_IN_FLIGHT);
                (held.anonymous.hold(Some(source), more, at_least(pool), at_least(share))).map_err(
                    |bound| match bound {
                        Bound::Pool(limit) => OverBudget::Anonymous { limit },
                        Bound::Share(limit) => OverBudget::Source { limit },
                    },
                )
            }
        }?;
        self.bytes += more;
        Ok(())
    }
}

impl Drop for HeldBody<'_> {
    fn drop(&mut self) {
        let mut held = lock(&self.budget.held);
        match &self.holder {
            Holder::Tenant(tenant) => held.authenticated.release(Some(tenant), self.bytes),
            Holder::Unknown => held.authenticated.release(None, self.bytes),
            Holder::Anonymous(source) => held.anonymous.release(Some(source), self.bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> TenantId {
        TenantId::new(name).expect("a tenant id")
    }

    #[test]
    fn a_tenant_holds_at_most_its_share_and_every_body_together_the_budget() {
        let budget = BodyBudget::default();
        let (acme, initech) = (tenant("acme"), tenant("initech"));
        let mut first = budget.body(Holder::Tenant(acme.clone()), 64 << 20);
        first.grow(64 << 20).expect("within the share");
        let mut second = budget.body(Holder::Tenant(acme.clone()), 64 << 20);
        second.grow(64 << 20).expect("the share, exactly");
        let mut third = budget.body(Holder::Tenant(acme.clone()), 64 << 20);
        assert_eq!(
            third.grow(1),
            Err(OverBudget::Tenant {
                limit: MAX_TENANT_BODY_BYTES_IN_FLIGHT
            })
        );
        let mut others = Vec::new();
        for n in 0..3 {
            let mut body = budget.body(Holder::Tenant(tenant(&format!("t{n}"))), 128 << 20);
            body.grow(128 << 20).expect("within the budget");
            others.push(body);
        }
        let mut over = budget.body(Holder::Tenant(initech.clone()), 64 << 20);
        assert_eq!(
            over.grow(1),
            Err(OverBudget::Host {
                limit: MAX_BODY_BYTES_IN_FLIGHT
            })
        );
        drop((first, others));
        assert_eq!(budget.held(&acme), (64 << 20, 64 << 20), "released once answered");
        third.grow(64 << 20).expect("room again");
        drop((second, third, over));
        assert_eq!(budget.held(&acme), (0, 0));
        assert!(lock(&budget.held).authenticated.by.is_empty(), "no tenant left behind");
    }

    /// Anonymous bodies fill a pool of their own, a source its share of it
    /// first: a tenant's share and the host's budget stay whole meanwhile,
    /// and an anonymous body over its route's limit is still let in alone.
    #[test]
    fn anonymous_bodies_hold_their_own_pool_a_source_its_share() {
        let budget = BodyBudget::default();
        let source = |n: u8| Holder::Anonymous(IpAddr::from([10, 0, 0, n]));
        let mut first = budget.body(source(1), 1 << 20);
        first
            .grow(MAX_SOURCE_BODY_BYTES_IN_FLIGHT)
            .expect("a source's share, exactly");
        let mut second = budget.body(source(1), 1 << 20);
        assert_eq!(
            second.grow(1),
            Err(OverBudget::Source {
                limit: MAX_SOURCE_BODY_BYTES_IN_FLIGHT
            })
        );
        let others: Vec<HeldBody<'_>> = (2..5)
            .map(|n| {
                let mut body = budget.body(source(n), 1 << 20);
                body.grow(MAX_SOURCE_BODY_BYTES_IN_FLIGHT).expect("within the pool");
                body
            })
            .collect();
        let mut over = budget.body(source(9), 1 << 20);
        assert_eq!(
            over.grow(1),
            Err(OverBudget::Anonymous {
                limit: MAX_ANONYMOUS_BODY_BYTES_IN_FLIGHT
            })
        );
        let mut tenants = budget.body(Holder::Tenant(tenant("acme")), 64 << 20);
        tenants
            .grow(MAX_TENANT_BODY_BYTES_IN_FLIGHT)
            .expect("the tenant's share untouched by strangers");
        assert_eq!(budget.held(&tenant("acme")).0, MAX_TENANT_BODY_BYTES_IN_FLIGHT);
        drop((first, others));
        second.grow(1).expect("room again once answered");
        let mut huge = budget.body(source(9), 1 << 30);
        assert_eq!(
            huge.grow(1 << 30),
            Err(OverBudget::Anonymous { limit: 1 << 30 }),
            "the pool holds one byte"
        );
        drop(second);
        huge.grow(1 << 30).expect("alone, its route's limit");
        drop((huge, over, tenants));
        assert!(lock(&budget.held).anonymous.by.is_empty(), "no source left behind");
        assert_eq!(lock(&budget.held).anonymous.total, 0);
    }

    #[test]
    fn one_body_its_route_accepts_is_let_in_alone_however_large() {
        let budget = BodyBudget::default();
        let mut huge = budget.body(Holder::Tenant(tenant("acme")), 1 << 30);
        huge.grow(1 << 30).expect("alone, its route's limit");
        let mut small = budget.body(Holder::Unknown, 64 << 10);
        assert_eq!(
            small.grow(1),
            Err(OverBudget::Host {
                limit: MAX_BODY_BYTES_IN_FLIGHT
            })
        );
    }
}
