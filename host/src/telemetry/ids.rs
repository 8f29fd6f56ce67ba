//! A run's trace: its trace id and its root span's id, derived from the
//! tenant and the run id alone, so every execution of the run — after an
//! eviction, a crash, or on another host — lands in the same trace without
//! anything stored to say which.

use std::cell::Cell;

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use sha2::{Digest, Sha256};

use crate::store::{RunId, TenantId};

/// Where the spans of one run go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunTrace {
    /// The first 16 bytes of SHA-256 of `{tenant}/{run}`.
    pub trace_id: TraceId,
    /// The next 8 bytes: the span of the run from its creation to its end,
    /// which the host that ends the run sends, and every execution's span
    /// names as its parent.
    pub root_span_id: SpanId,
}

impl RunTrace {
    /// The trace of `run` of `tenant`: the same on every host, at every
    /// execution.
    pub fn of(tenant: &TenantId, run: &RunId) -> Self {
        let digest = Sha256::digest(format!("{tenant}/{run}"));
        let mut trace = [0; 16];
        let mut span = [0; 8];
        trace.copy_from_slice(&digest[..16]);
        span.copy_from_slice(&digest[16..24]);
        // An all-zero id is invalid and would be dropped: as good as never
        // for a digest, but an id must be valid whatever it hashes.
        trace[15] |= u8::from(trace == [0; 16]);
        span[7] |= u8::from(span == [0; 8]);
        Self {
            trace_id: TraceId::from_bytes(trace),
            root_span_id: SpanId::from_bytes(span),
        }
    }

    /// The root span, as the remote parent an execution's span names.
    pub fn root(&self) -> SpanContext {
        SpanContext::new(
            self.trace_id,
            self.root_span_id,
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        )
    }
}

thread_local! {
    /// The ids the next span made on this thread takes (see [`with_ids_of`]).
    static PLANNED: Cell<Option<RunTrace>> = const { Cell::new(None) };
}

/// Ids for new spans: random, except for a run's root span, whose ids come
/// from the run ([`with_ids_of`]). The SDK takes no ids from the code that
/// makes a span, hence this generator.
#[derive(Debug, Default)]
pub(super) struct RunIds {
    random: RandomIdGenerator,
}

impl IdGenerator for RunIds {
    fn new_trace_id(&self) -> TraceId {
        PLANNED
            .get()
            .map_or_else(|| self.random.new_trace_id(), |run| run.trace_id)
    }

    fn new_span_id(&self) -> SpanId {
        PLANNED
            .get()
            .map_or_else(|| self.random.new_span_id(), |run| run.root_span_id)
    }
}

/// Calls `make`, in which a root span made on this thread takes the ids of
/// `run`'s root span.
pub(super) fn with_ids_of<T>(run: RunTrace, make: impl FnOnce() -> T) -> T {
    /// Forgets the planned ids however `make` ends.
    struct Planned;
    impl Drop for Planned {
        fn drop(&mut self) {
            PLANNED.set(None);
        }
    }
    PLANNED.set(Some(run));
    let _planned = Planned;
    make()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(tenant: &str, run: &str) -> RunTrace {
        RunTrace::of(
            &TenantId::new(tenant).expect("a tenant id"),
            &RunId::new(run).expect("a run id"),
        )
    }

    #[test]
    fn a_run_has_one_trace_whoever_asks_and_another_run_or_tenant_another() {
        let first = trace("acme", "order-1");
        assert_eq!(first, trace("acme", "order-1"));
        assert_ne!(first.trace_id, trace("acme", "order-2").trace_id);
        assert_ne!(first.trace_id, trace("globex", "order-1").trace_id);
        assert!(first.root().is_valid() && first.root().is_remote() && first.root().is_sampled());
    }

    #[test]
    fn the_ids_are_the_documented_digest_of_tenant_and_run() {
        let digest = hex::encode(Sha256::digest("acme/order-1"));
        let run = trace("acme", "order-1");
        assert_eq!(run.trace_id.to_string(), digest[..32]);
        assert_eq!(run.root_span_id.to_string(), digest[32..48]);
    }

    #[test]
    fn only_a_span_made_inside_with_ids_of_takes_the_runs_ids() {
        let ids = RunIds::default();
        let run = trace("acme", "order-1");
        let (trace_id, span_id) = with_ids_of(run, || (ids.new_trace_id(), ids.new_span_id()));
        assert_eq!((trace_id, span_id), (run.trace_id, run.root_span_id));
        assert_ne!(ids.new_trace_id(), run.trace_id);
        assert_ne!(ids.new_span_id(), run.root_span_id);
    }
}
