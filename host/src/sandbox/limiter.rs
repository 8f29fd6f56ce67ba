//! Limits every sandboxed store carries: fuel, an epoch deadline and a memory
//! guard, and the mapping from a stopped guest to a typed error kind.

use wasmtime::{ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder, Trap, UpdateDeadline};

use super::StepErrorKind;
use super::deadline::{Deadline, INSIDE_HOST_CALL};

/// A [`ResourceLimiter`] that remembers why it refused growth, so a trap
/// that follows (an allocator aborting on a failed `memory.grow`, a guest
/// giving up after `table.grow` returned -1) is reported as `memory-limit`
/// naming the limit, rather than as an anonymous trap.
pub struct MemoryGuard {
    limits: StoreLimits,
    memory_bytes: usize,
    table_elements: usize,
    /// The first refusal, in words; later ones add nothing a user needs.
    refusal: Option<String>,
    /// Linear memory granted, over every memory of the instance: what each
    /// started with and every growth since (a memory never shrinks).
    memory_granted: usize,
}

impl MemoryGuard {
    /// A guard that lets each linear memory grow to `memory_bytes` bytes and
    /// each table to `table_elements` elements, and refuses growth past them.
    pub fn new(memory_bytes: usize, table_elements: usize) -> Self {
        let limits = StoreLimitsBuilder::new()
            .memory_size(memory_bytes)
            .table_elements(table_elements)
            .build();
        Self {
            limits,
            memory_bytes,
            table_elements,
            refusal: None,
            memory_granted: 0,
        }
    }

    /// The instance's linear memory in bytes, at its largest so far.
    pub fn memory_granted(&self) -> usize {
        self.memory_granted
    }

    /// Why a memory or table growth was refused, if one was.
    pub fn refusal(&self) -> Option<&str> {
        self.refusal.as_deref()
    }

    fn note(&mut self, allowed: bool, refusal: impl FnOnce() -> String) -> bool {
        if !allowed && self.refusal.is_none() {
            self.refusal = Some(refusal());
        }
        allowed
    }
}

/// The smaller of the host's limit and the guest's own declared maximum.
fn effective_limit(host: usize, declared: Option<usize>) -> usize {
    declared.map_or(host, |declared| declared.min(host))
}

impl ResourceLimiter for MemoryGuard {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        if allowed {
            self.memory_granted = self.memory_granted.saturating_add(desired.saturating_sub(current));
        }
        let limit = effective_limit(self.memory_bytes, maximum);
        Ok(self.note(allowed, || {
            format!("linear memory growth to {desired} bytes refused: the limit is {limit} bytes")
        }))
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.note(false, || format!("linear memory growth failed: {error:#}"));
        Ok(())
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = self.limits.table_growing(current, desired, maximum)?;
        let limit = effective_limit(self.table_elements, maximum);
        Ok(self.note(allowed, || {
            format!("table growth to {desired} elements refused: the limit is {limit} elements")
        }))
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.note(false, || format!("table growth failed: {error:#}"));
        Ok(())
    }
}

/// The store data of a sandboxed instance.
pub trait Sandboxed: Send + 'static {
    /// The store's memory guard: its resource limiter, asked why a trap happened.
    fn guard(&mut self) -> &mut MemoryGuard;
    /// When the current stretch of guest code must have stopped; asked at
    /// each epoch tick while guest code runs, and watched by
    /// [`Deadline::bound`] while it is inside a host call.
    fn deadline(&self) -> &Deadline;
}

/// A store with every limit in place: `fuel` (`None` on an engine that does
/// not meter it), the data's memory guard, and an epoch check that yields to
/// the executor each tick and interrupts the guest once its deadline has
/// passed.
pub fn new_store<T: Sandboxed>(engine: &wasmtime::Engine, data: T, fuel: Option<u64>) -> wasmtime::Result<Store<T>> {
    let mut store = Store::new(engine, data);
    store.limiter(|data| data.guard());
    if let Some(fuel) = fuel {
        store.set_fuel(fuel)?;
    }
    store.epoch_deadline_callback(|cx| {
        Ok(if cx.data().deadline().passed() {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Yield(1)
        })
    });
    store.set_epoch_deadline(1);
    Ok(store)
}

/// The kebab-case name of `kind`, as the WIT spells it.
pub fn kind_name(kind: StepErrorKind) -> &'static str {
    match kind {
        StepErrorKind::Failed => "failed",
        StepErrorKind::FuelExhausted => "fuel-exhausted",
        StepErrorKind::TimedOut => "timed-out",
        StepErrorKind::MemoryLimit => "memory-limit",
        StepErrorKind::Trapped => "trapped",
        StepErrorKind::OutputTooLarge => "output-too-large",
        StepErrorKind::UnknownStep => "unknown-step",
        StepErrorKind::Cancelled => "cancelled",
        StepErrorKind::InvalidOutput => "invalid-output",
    }
}

/// Why guest code stopped, from the error its call returned.
pub fn classify(error: &wasmtime::Error, guard: &MemoryGuard) -> (StepErrorKind, String) {
    if let Some(refusal) = guard.refusal() {
        return (StepErrorKind::MemoryLimit, format!("{refusal}; then: {error:#}"));
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => (StepErrorKind::FuelExhausted, "all fuel consumed".into()),
        Some(Trap::Interrupt) if error.to_string() == INSIDE_HOST_CALL => {
            (StepErrorKind::TimedOut, INSIDE_HOST_CALL.into())
        }
        Some(Trap::Interrupt) => (StepErrorKind::TimedOut, "wall-clock limit reached".into()),
        Some(trap) => (StepErrorKind::Trapped, format!("{trap}: {error:#}")),
        None => (StepErrorKind::Trapped, format!("{error:#}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_granted_sums_every_memory_and_leaves_refusals_out() -> wasmtime::Result<()> {
        let mut guard = MemoryGuard::new(4 << 20, 10);
        assert!(guard.memory_growing(0, 1 << 20, None)?);
        assert!(guard.memory_growing(0, 1 << 16, None)?, "a second memory");
        assert!(guard.memory_growing(1 << 20, 2 << 20, None)?);
        assert!(!guard.memory_growing(2 << 20, 8 << 20, None)?);
        assert_eq!(guard.memory_granted(), (2 << 20) + (1 << 16));
        Ok(())
    }

    #[test]
    fn guard_remembers_the_first_refused_growth_and_its_limit() {
        let mut guard = MemoryGuard::new(1 << 16, 10);
        assert!(guard.memory_growing(0, 1 << 16, None).expect("valid in this test"));
        assert_eq!(guard.refusal(), None);
        assert!(
            !guard
                .memory_growing(1 << 16, 2 << 16, None)
                .expect("valid in this test")
        );
        assert_eq!(
            guard.refusal(),
            Some("linear memory growth to 131072 bytes refused: the limit is 65536 bytes")
        );
        assert!(!guard.table_growing(0, 11, None).expect("valid in this test"));
        assert!(
            guard
                .refusal()
                .expect("valid in this test")
                .starts_with("linear memory")
        );
    }

    #[test]
    fn a_refused_table_growth_names_the_table_limit() {
        let mut guard = MemoryGuard::new(1 << 16, 10);
        assert!(!guard.table_growing(5, 11, None).expect("valid in this test"));
        assert_eq!(
            guard.refusal(),
            Some("table growth to 11 elements refused: the limit is 10 elements")
        );
    }

    #[test]
    fn traps_map_to_their_kinds() {
        let guard = MemoryGuard::new(1 << 16, 10);
        let kind = |trap: Trap| classify(&wasmtime::Error::new(trap), &guard).0;
        assert_eq!(kind(Trap::OutOfFuel), StepErrorKind::FuelExhausted);
        assert_eq!(kind(Trap::Interrupt), StepErrorKind::TimedOut);
        assert_eq!(kind(Trap::UnreachableCodeReached), StepErrorKind::Trapped);
        let mut refused = MemoryGuard::new(0, 0);
        refused.memory_growing(0, 1, None).expect("valid in this test");
        assert_eq!(
            classify(&wasmtime::Error::new(Trap::UnreachableCodeReached), &refused).0,
            StepErrorKind::MemoryLimit
        );
    }
}
