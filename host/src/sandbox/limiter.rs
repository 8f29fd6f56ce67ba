//! Limits every sandboxed store carries: fuel, an epoch deadline and a memory
//! guard, and the mapping from a stopped guest to a typed error kind.

use std::time::Instant;

use wasmtime::{ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder, Trap, UpdateDeadline};

use super::StepErrorKind;

/// A [`ResourceLimiter`] that remembers when it refused growth, so a trap
/// that follows (an allocator aborting on a failed `memory.grow`) is reported
/// as `memory-limit` rather than as an anonymous trap.
pub struct MemoryGuard {
    limits: StoreLimits,
    refused: bool,
}

impl MemoryGuard {
    pub fn new(memory_bytes: usize, table_elements: usize) -> Self {
        let limits = StoreLimitsBuilder::new()
            .memory_size(memory_bytes)
            .table_elements(table_elements)
            .build();
        Self { limits, refused: false }
    }

    /// Whether a memory or table growth was refused.
    pub fn refused(&self) -> bool {
        self.refused
    }

    fn note(&mut self, allowed: bool) -> bool {
        self.refused |= !allowed;
        allowed
    }
}

impl ResourceLimiter for MemoryGuard {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        Ok(self.note(allowed))
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = self.limits.table_growing(current, desired, maximum)?;
        Ok(self.note(allowed))
    }
}

/// The store data of a sandboxed instance.
pub trait Sandboxed: Send + 'static {
    fn guard(&mut self) -> &mut MemoryGuard;
    /// When the current stretch of guest code must have stopped.
    fn deadline(&self) -> Instant;
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
        Ok(if Instant::now() >= cx.data().deadline() {
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
    }
}

/// Why guest code stopped, from the error its call returned.
pub fn classify(error: &wasmtime::Error, guard: &MemoryGuard) -> (StepErrorKind, String) {
    if guard.refused() {
        return (
            StepErrorKind::MemoryLimit,
            format!("memory or table growth refused: {error:#}"),
        );
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => (StepErrorKind::FuelExhausted, "all fuel consumed".into()),
        Some(Trap::Interrupt) => (StepErrorKind::TimedOut, "wall-clock limit reached".into()),
        Some(trap) => (StepErrorKind::Trapped, format!("{trap}: {error:#}")),
        None => (StepErrorKind::Trapped, format!("{error:#}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_remembers_a_refused_growth() {
        let mut guard = MemoryGuard::new(1 << 16, 10);
        assert!(guard.memory_growing(0, 1 << 16, None).unwrap());
        assert!(!guard.refused());
        assert!(!guard.memory_growing(1 << 16, 2 << 16, None).unwrap());
        assert!(guard.refused());
    }

    #[test]
    fn traps_map_to_their_kinds() {
        let guard = MemoryGuard::new(1 << 16, 10);
        let kind = |trap: Trap| classify(&wasmtime::Error::new(trap), &guard).0;
        assert_eq!(kind(Trap::OutOfFuel), StepErrorKind::FuelExhausted);
        assert_eq!(kind(Trap::Interrupt), StepErrorKind::TimedOut);
        assert_eq!(kind(Trap::UnreachableCodeReached), StepErrorKind::Trapped);
        let mut refused = MemoryGuard::new(0, 0);
        refused.memory_growing(0, 1, None).unwrap();
        assert_eq!(
            classify(&wasmtime::Error::new(Trap::UnreachableCodeReached), &refused).0,
            StepErrorKind::MemoryLimit
        );
    }
}
