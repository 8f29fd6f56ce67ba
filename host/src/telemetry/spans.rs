//! The spans of a run's trace: each execution of the run (a drive, or a
//! replay's check) under the run's root span; a span per durable call and
//! per step attempt; the root span itself, sent when the run ends; and the
//! API requests that started the run or signalled it, linked to its trace.
//!
//! Invariant: while traces are not exported, nothing here makes a span or
//! an attribute: each function costs one atomic load (the log spans
//! `execution` and `attempt` are made by their callers either way).

use std::fmt::Display;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::trace::{Span as _, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;
use tracing::{Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::ids::{RunTrace, with_ids_of};
use crate::cluster::HostId;
use crate::journal::{Entry, Outcome, Recorded, RunRecord};
use crate::sandbox::kind_name;
use crate::store::{RunId, TenantId};

/// The tracer, once traces are exported.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// The target of the spans only traces show; log lines leave them out.
pub(super) const TRACE_ONLY: &str = "stepstone::trace";

/// The longest name or message a span carries, in bytes: names come from
/// guests and requests.
const MAX_TEXT: usize = 256;

/// Makes traces exported from now on, by `tracer` (the process's
/// subscriber is installed once, and so is its tracer).
pub(super) fn start_exporting(tracer: SdkTracer) {
    let _ = TRACER.set(tracer);
}

/// Whether traces are exported.
pub fn exporting() -> bool {
    TRACER.get().is_some()
}

/// `n` as a span attribute: OpenTelemetry's integers are signed, and an
/// unsigned field would be sent as text.
pub fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Puts `execution`, the span of one execution of `run`, in the run's
/// trace under its root span, saying which host executed it. Called
/// before the span is first entered.
pub fn join_run_trace(execution: &Span, tenant: &TenantId, run: &RunId, host: &HostId) {
    if !exporting() {
        return;
    }
    let root = Context::new().with_remote_span_context(RunTrace::of(tenant, run).root());
    if let Err(e) = execution.set_parent(root) {
        tracing::debug!(%run, "the execution's span stays out of the run's trace: {e}");
    }
    execution.set_attribute("tenant", tenant.to_string());
    execution.set_attribute("host", host.to_string());
}

/// Gives a span the outcome of its work once that is known ([`Ending::ended`]);
/// dropped before, because the work was dropped midway (its host stopped),
/// it gives the span `abandoned`.
pub struct Ending<'a> {
    span: &'a Span,
    known: bool,
}

impl<'a> Ending<'a> {
    /// Watches `span`: dropped before [`Ending::ended`], this gives it
    /// `abandoned`.
    pub fn of(span: &'a Span) -> Self {
        Self { span, known: false }
    }

    /// How the work ended, in a word; with `failure`, the span's status is
    /// an error saying why.
    pub fn ended(mut self, outcome: &'static str, failure: Option<&dyn Display>) {
        self.known = true;
        record_outcome(self.span, outcome, failure);
    }
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        if !self.known {
            record_outcome(self.span, "abandoned", None);
        }
    }
}

fn record_outcome(span: &Span, outcome: &'static str, failure: Option<&dyn Display>) {
    if !exporting() {
        return;
    }
    span.set_attribute("outcome", outcome);
    if let Some(why) = failure {
        span.set_status(error(why));
    }
}

/// The span of step call `seq` of `run`, from its first attempt until its
/// result is journaled; its attempts' spans are its children.
pub fn step_call(tenant: &TenantId, run: &RunId, seq: u64, step: &str) -> Span {
    if !exporting() {
        return Span::none();
    }
    let step = bounded(step);
    tracing::info_span!(
        target: TRACE_ONLY,
        "step",
        otel.name = format!("step {step}"),
        %tenant,
        %run,
        seq = int(seq),
        step,
    )
}

/// Gives an attempt's span (a log span too) what only its trace shows:
/// the tenant and the run.
pub fn attempt_started(attempt: &Span, tenant: &TenantId, run: &RunId) {
    if !exporting() {
        return;
    }
    attempt.set_attribute("tenant", tenant.to_string());
    attempt.set_attribute("run", run.to_string());
}

/// What an attempt used: the fuel it burnt, and its linear memory at its
/// largest, in bytes.
pub fn attempt_usage(attempt: &Span, fuel: u64, memory_bytes: usize) {
    if exporting() {
        attempt.set_attribute("fuel", int(fuel));
        attempt.set_attribute("memory_bytes", int(memory_bytes as u64));
    }
}

/// A durable call this host journaled (any kind but a step, which has its
/// span while it runs), as a span from when the call began — perhaps in an
/// earlier execution, for a timer — to when its entry was written, under
/// the current span (the execution's).
pub fn journaled(tenant: &TenantId, run: &RunId, entry: &Entry) {
    let Some(tracer) = TRACER.get() else {
        return;
    };
    let kind = entry.call.kind.to_string();
    let name = bounded(&entry.call.name);
    let (outcome, failure) = recorded_outcome(&entry.recorded);
    let mut attributes = vec![
        KeyValue::new("tenant", tenant.to_string()),
        KeyValue::new("run", run.to_string()),
        KeyValue::new("seq", int(entry.seq)),
        KeyValue::new("call", kind.clone()),
        KeyValue::new("outcome", outcome),
    ];
    let title = if name.is_empty() {
        kind
    } else {
        attributes.push(KeyValue::new("name", name.to_owned()));
        format!("{kind} {name}")
    };
    let parent = Span::current().context();
    let mut span = tracer
        .span_builder(title)
        .with_start_time(at(entry.started_at_ms))
        .with_attributes(attributes)
        .start_with_context(tracer, &parent);
    if let Some(why) = failure {
        span.set_status(error(&why));
    }
    span.end_with_timestamp(at(entry.finished_at_ms));
}

/// The outcome of a journaled call in a word, and why it failed if it did.
fn recorded_outcome(recorded: &Recorded) -> (&'static str, Option<&str>) {
    match recorded {
        Recorded::Step { result: Ok(_) } => ("ok", None),
        Recorded::Step { result: Err(e) } => (kind_name(e.kind), Some(&e.message)),
        Recorded::Signal { payload: Some(_), .. } => ("received", None),
        Recorded::Signal { payload: None, .. } => ("timed-out", None),
        Recorded::Child { run: Ok(_) } => ("started", None),
        Recorded::Child { run: Err(why) } | Recorded::ChildEnded { result: Err(why) } => ("failed", Some(why)),
        Recorded::ChildEnded { result: Ok(_) } => ("completed", None),
        Recorded::Cancelled { .. } => ("cancelled", None),
        Recorded::Slept
        | Recorded::Value(_)
        | Recorded::MemoSet { .. }
        | Recorded::Winner(_)
        | Recorded::Patched
        | Recorded::Appended { .. } => ("ok", None),
    }
}

/// The run's root span, from its creation to its end, sent by the host
/// that ended it with the ids the run's executions named as their parent.
pub fn run_ended(tenant: &TenantId, record: &RunRecord, outcome: &Outcome, finished_at_ms: u64) {
    let Some(tracer) = TRACER.get() else {
        return;
    };
    let mut attributes = vec![
        KeyValue::new("tenant", tenant.to_string()),
        KeyValue::new("run", record.run_id.to_string()),
        KeyValue::new("workflow", bounded(&record.workflow).to_owned()),
        KeyValue::new("component", record.component.clone()),
        KeyValue::new("outcome", outcome.name()),
    ];
    if let Some(parent) = &record.parent {
        attributes.push(KeyValue::new("parent_run", parent.to_string()));
    }
    let trace = RunTrace::of(tenant, &record.run_id);
    let mut span = with_ids_of(trace, || {
        tracer
            .span_builder("run")
            .with_start_time(at(record.created_at_ms))
            .with_attributes(attributes)
            .start_with_context(tracer, &Context::new())
    });
    if let Outcome::Failed { kind, message } = outcome {
        span.set_status(error(&format_args!("{kind}: {message}")));
    }
    span.end_with_timestamp(at(finished_at_ms));
}

/// Links the current span to the trace of run `run`, which it has just
/// started or sent a signal: the API request, or the execution of the
/// parent or of the previous generation.
pub fn link_to_run(tenant: &TenantId, run: &RunId) {
    if exporting() {
        Span::current().add_link(RunTrace::of(tenant, run).root());
    }
}

/// The span of one API request, while traces are exported: its method,
/// route and status, with a link to each run it started or signalled.
pub async fn traced_request(request: Request, next: Next) -> Response {
    if !exporting() {
        return next.run(request).await;
    }
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let span = tracing::info_span!(
        target: TRACE_ONLY,
        "request",
        otel.name = format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = route,
        http.response.status_code = tracing::field::Empty,
    );
    let response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", i64::from(response.status().as_u16()));
    response
}

/// `text`, cut to at most [`MAX_TEXT`] bytes.
fn bounded(text: &str) -> &str {
    &text[..text.floor_char_boundary(MAX_TEXT)]
}

/// An error status saying `why`, cut to [`MAX_TEXT`] bytes.
fn error(why: &dyn Display) -> Status {
    Status::error(bounded(&why.to_string()).to_owned())
}

/// A time in milliseconds since the Unix epoch, as the SDK takes it.
fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guests_long_name_is_cut_at_a_character_boundary() {
        let name = format!("x{}", "é".repeat(MAX_TEXT));
        let cut = bounded(&name);
        assert_eq!(cut.len(), MAX_TEXT - 1, "the cut falls inside an `é` and backs off");
        assert!(name.starts_with(cut));
        assert_eq!(bounded("charge"), "charge");
    }

    #[test]
    fn while_traces_are_not_exported_no_span_is_made() {
        let tenant = TenantId::new("acme").expect("valid");
        let run = RunId::new("r-1").expect("valid");
        assert!(!exporting());
        assert!(step_call(&tenant, &run, 0, "charge").is_none());
    }

    #[test]
    fn unsigned_attributes_saturate_into_signed_ones() {
        assert_eq!(int(7), 7);
        assert_eq!(int(u64::MAX), i64::MAX);
    }
}
