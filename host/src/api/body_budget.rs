//! The request bodies a host holds in memory at once: each body read
//! counts its bytes, as they arrive, against the host's budget and its
//! tenant's share, until its request has been answered. A flood of large
//! bodies (payloads of up to 64 MiB, components as large) is refused, not
//! read into memory without a bound.
//!
//! Invariant: the bodies held never add up to more than
//! [`MAX_BODY_BYTES_IN_FLIGHT`], nor one tenant's to more than
//! [`MAX_TENANT_BODY_BYTES_IN_FLIGHT`], except that one body its route
//! accepts is always let in alone: a bound is never below one body's limit.
//! A tenant past its share is told so (429); any caller, when the host is
//! full (503); both say to retry.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::shared_map::lock;
use crate::store::TenantId;

/// The bytes of request bodies a host holds at once.
pub const MAX_BODY_BYTES_IN_FLIGHT: usize = 512 << 20;
/// The bytes of one tenant's request bodies a host holds at once: two
/// payloads at the default quota.
pub const MAX_TENANT_BODY_BYTES_IN_FLIGHT: usize = 128 << 20;

/// What the bodies being read or handled hold.
#[derive(Debug, Default)]
pub struct BodyBudget {
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_tenant: HashMap<TenantId, usize>,
}

/// Why a body's next bytes were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverBudget {
    /// Its tenant's bodies hold their share.
    Tenant { limit: usize },
    /// The host's bodies hold its budget.
    Host { limit: usize },
}

impl BodyBudget {
    /// A body of `tenant` (`None`: a caller not known yet) that its route
    /// reads up to `route_limit` bytes of, holding nothing yet.
    pub fn body(&self, tenant: Option<TenantId>, route_limit: usize) -> HeldBody<'_> {
        HeldBody {
            budget: self,
            tenant,
            route_limit,
            bytes: 0,
        }
    }

    /// The bytes held now, by every body and by `tenant`'s.
    #[cfg(test)]
    fn held(&self, tenant: &TenantId) -> (usize, usize) {
        let held = lock(&self.held);
        (held.total, held.by_tenant.get(tenant).copied().unwrap_or(0))
    }
}

/// One body's bytes, held against the budget until dropped.
#[derive(Debug)]
pub struct HeldBody<'a> {
    budget: &'a BodyBudget,
    tenant: Option<TenantId>,
    route_limit: usize,
    bytes: usize,
}

impl HeldBody<'_> {
    /// Holds `more` bytes, if the host's budget and the tenant's share
    /// have room for them.
    pub fn grow(&mut self, more: usize) -> Result<(), OverBudget> {
        let mut held = lock(&self.budget.held);
        let host_limit = MAX_BODY_BYTES_IN_FLIGHT.max(self.route_limit);
        if held.total.saturating_add(more) > host_limit {
            return Err(OverBudget::Host { limit: host_limit });
        }
        if let Some(tenant) = &self.tenant {
            let tenant_limit = MAX_TENANT_BODY_BYTES_IN_FLIGHT.max(self.route_limit);
            let tenants = held.by_tenant.entry(tenant.clone()).or_default();
            if tenants.saturating_add(more) > tenant_limit {
                return Err(OverBudget::Tenant { limit: tenant_limit });
            }
            *tenants += more;
        }
        held.total += more;
        self.bytes += more;
        Ok(())
    }
}

impl Drop for HeldBody<'_> {
    fn drop(&mut self) {
        let mut held = lock(&self.budget.held);
        held.total -= self.bytes;
        if let Some(tenant) = &self.tenant
            && let Some(tenants) = held.by_tenant.get_mut(tenant)
        {
            *tenants -= self.bytes;
            if *tenants == 0 {
                held.by_tenant.remove(tenant);
            }
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
        let mut first = budget.body(Some(acme.clone()), 64 << 20);
        first.grow(64 << 20).expect("within the share");
        let mut second = budget.body(Some(acme.clone()), 64 << 20);
        second.grow(64 << 20).expect("the share, exactly");
        let mut third = budget.body(Some(acme.clone()), 64 << 20);
        assert_eq!(
            third.grow(1),
            Err(OverBudget::Tenant {
                limit: MAX_TENANT_BODY_BYTES_IN_FLIGHT
            })
        );
        let mut others = Vec::new();
        for n in 0..3 {
            let mut body = budget.body(Some(tenant(&format!("t{n}"))), 128 << 20);
            body.grow(128 << 20).expect("within the budget");
            others.push(body);
        }
        let mut over = budget.body(Some(initech.clone()), 64 << 20);
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
        assert!(lock(&budget.held).by_tenant.is_empty(), "no tenant left behind");
    }

    #[test]
    fn one_body_its_route_accepts_is_let_in_alone_however_large() {
        let budget = BodyBudget::default();
        let mut huge = budget.body(Some(tenant("acme")), 1 << 30);
        huge.grow(1 << 30).expect("alone, its route's limit");
        let mut small = budget.body(None, 64 << 10);
        assert_eq!(
            small.grow(1),
            Err(OverBudget::Host {
                limit: MAX_BODY_BYTES_IN_FLIGHT
            })
        );
    }
}
