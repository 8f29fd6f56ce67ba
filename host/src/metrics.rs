//! The host's metrics, labelled by tenant, in the Prometheus text format:
//! runs by outcome, active runs and evicted ones, step attempts by outcome and their
//! durations by step, fuel burnt, replays, non-determinism errors, uploads compiling,
//! steps' outgoing HTTP (requests sent and refused, bytes each way),
//! schedules' fires by fate, what retention deleted, completion
//! notifications by fate, and the connections the listeners hold and
//! refused. README.md lists them all.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::sandbox::HttpUsage;
use crate::store::TenantId;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Tenant {
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantOutcome {
    tenant: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantStep {
    tenant: String,
    step: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantDirection {
    tenant: String,
    direction: &'static str,
}

#[derive(Clone)]
struct StepDurations;

impl MetricConstructor<Histogram> for StepDurations {
    fn new_metric(&self) -> Histogram {
        // 100 µs to ~100 s.
        Histogram::new(exponential_buckets(0.0001, 4.0, 11))
    }
}

/// Distinct step names one tenant's step latencies are labelled with; the
/// steps named after them are counted as [`OTHER_STEPS`]. Step names come
/// from tenants' components and the link names of their runs, so each
/// tenant holds at most this many series of the histogram.
pub const MAX_STEP_LABELS: usize = 50;

/// Longest step name a label carries, in bytes; longer ones are counted as
/// [`OTHER_STEPS`].
pub const MAX_STEP_LABEL_BYTES: usize = 128;

/// Whether `step` may be a label as it is: short, and of characters that
/// need no escaping (prometheus-client writes label values unescaped, and a
/// quote or a newline in a name a guest chose would forge other series).
fn labels_as_is(step: &str) -> bool {
    step.len() <= MAX_STEP_LABEL_BYTES
        && step
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':'))
}

/// The `step` label of every step past a tenant's [`MAX_STEP_LABELS`].
pub const OTHER_STEPS: &str = "other";

/// The step names each tenant's latencies are labelled with so far.
#[derive(Default)]
struct StepLabels(Mutex<HashMap<String, HashSet<String>>>);

impl StepLabels {
    /// The label of `step` of `tenant`: its name while the tenant has room
    /// for it, else [`OTHER_STEPS`].
    fn of(&self, tenant: &TenantId, step: &str) -> String {
        let mut labels = crate::shared_map::lock(&self.0);
        let known = labels.entry(tenant.to_string()).or_default();
        let fits = labels_as_is(step) && (known.contains(step) || known.len() < MAX_STEP_LABELS);
        if !fits {
            return OTHER_STEPS.to_owned();
        }
        known.insert(step.to_owned());
        step.to_owned()
    }
}

/// Work counted as in progress (a step attempt, an upload compiling) until
/// dropped.
#[derive(Debug)]
pub struct InProgress(Gauge);

impl InProgress {
    fn start(gauge: &Gauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Every metric the host keeps.
pub struct Metrics {
    registry: Registry,
    runs_finished: Family<TenantOutcome, Counter>,
    runs_active: Family<Tenant, Gauge>,
    runs_evicted: Family<Tenant, Gauge>,
    runs_queued: Family<Tenant, Gauge>,
    attempts_running: Family<Tenant, Gauge>,
    uploads_compiling: Family<Tenant, Gauge>,
    step_attempts: Family<TenantOutcome, Counter>,
    step_seconds: Family<TenantStep, Histogram, StepDurations>,
    step_labels: StepLabels,
    fuel: Family<Tenant, Counter>,
    replays: Family<Tenant, Counter>,
    non_determinism: Family<Tenant, Counter>,
    http_requests: Family<TenantOutcome, Counter>,
    http_bytes: Family<TenantDirection, Counter>,
    schedule_fires: Family<TenantOutcome, Counter>,
    swept_runs: Family<Tenant, Counter>,
    swept_objects: Family<Tenant, Counter>,
    notifications: Family<TenantOutcome, Counter>,
    connections: ConnectionCounts,
}

/// The connections the host's listeners hold open, and those they closed
/// unread as they were accepted (see `api::admission`).
#[derive(Clone, Debug, Default)]
pub struct ConnectionCounts {
    open: Gauge,
    refused: Counter,
}

impl ConnectionCounts {
    /// Counts a connection admitted, open until the guard is dropped.
    pub fn open(&self) -> InProgress {
        InProgress::start(&self.open)
    }

    /// Counts a connection closed as it was accepted.
    pub fn refused(&self) {
        self.refused.inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("stepstone");
        let metrics = Self {
            runs_finished: Family::default(),
            runs_active: Family::default(),
            runs_evicted: Family::default(),
            runs_queued: Family::default(),
            attempts_running: Family::default(),
            uploads_compiling: Family::default(),
            step_attempts: Family::default(),
            step_seconds: Family::new_with_constructor(StepDurations),
            step_labels: StepLabels::default(),
            fuel: Family::default(),
            replays: Family::default(),
            non_determinism: Family::default(),
            http_requests: Family::default(),
            http_bytes: Family::default(),
            schedule_fires: Family::default(),
            swept_runs: Family::default(),
            swept_objects: Family::default(),
            notifications: Family::default(),
            connections: ConnectionCounts::default(),
            registry: Registry::default(),
        };
        registry.register(
            "runs_finished",
            "Runs that ended, by outcome",
            metrics.runs_finished.clone(),
        );
        registry.register("runs_active", "Runs being driven now", metrics.runs_active.clone());
        registry.register(
            "runs_evicted",
            "Runs waiting with no instance",
            metrics.runs_evicted.clone(),
        );
        registry.register(
            "runs_queued",
            "Runs waiting for a place of their concurrency key",
            metrics.runs_queued.clone(),
        );
        registry.register(
            "step_attempts",
            "Step attempts, by outcome",
            metrics.step_attempts.clone(),
        );
        registry.register(
            "step_attempt_seconds",
            "Wall time of step attempts, by step",
            metrics.step_seconds.clone(),
        );
        registry.register(
            "step_attempts_running",
            "Step attempts running now",
            metrics.attempts_running.clone(),
        );
        registry.register(
            "uploads_compiling",
            "Uploaded components being validated and compiled now",
            metrics.uploads_compiling.clone(),
        );
        registry.register("fuel_consumed", "Fuel burnt by step attempts", metrics.fuel.clone());
        registry.register("replays", "Executions that replayed a journal", metrics.replays.clone());
        registry.register(
            "non_determinism_errors",
            "Replays that met a different call than recorded",
            metrics.non_determinism.clone(),
        );
        registry.register(
            "http_requests",
            "Steps' outgoing HTTP requests, sent or refused",
            metrics.http_requests.clone(),
        );
        registry.register(
            "http_bytes",
            "Bytes of steps' outgoing HTTP request and response bodies",
            metrics.http_bytes.clone(),
        );
        registry.register(
            "schedule_fires",
            "Fires of cron schedules, by fate: started, skipped, buffered or refused",
            metrics.schedule_fires.clone(),
        );
        registry.register(
            "retention_deleted_runs",
            "Finished runs deleted past their tenant's retention",
            metrics.swept_runs.clone(),
        );
        registry.register(
            "retention_deleted_objects",
            "Stored objects of those runs deleted",
            metrics.swept_objects.clone(),
        );
        registry.register(
            "notifications",
            "Tries of completion notifications, by fate: delivered, failed (tried again) or given-up",
            metrics.notifications.clone(),
        );
        registry.register(
            "http_connections_open",
            "Connections the host's listeners hold open",
            metrics.connections.open.clone(),
        );
        registry.register(
            "http_connections_refused",
            "Connections closed unread as they were accepted: over their source's share, or the total",
            metrics.connections.refused.clone(),
        );
        Self { registry, ..metrics }
    }
}

fn tenant(id: &TenantId) -> Tenant {
    Tenant { tenant: id.to_string() }
}

fn outcome(id: &TenantId, outcome: &str) -> TenantOutcome {
    TenantOutcome {
        tenant: id.to_string(),
        outcome: outcome.to_owned(),
    }
}

impl Metrics {
    /// The counts of the host's connections, for its listeners.
    pub fn connections(&self) -> ConnectionCounts {
        self.connections.clone()
    }

    /// Counts a run that ended `how`: its outcome's name (`completed`,
    /// `failed`, `cancelled` or `continued`).
    pub fn run_finished(&self, id: &TenantId, how: &str) {
        self.runs_finished.get_or_create(&outcome(id, how)).inc();
    }

    /// Adds `delta` to the tenant's runs being driven now: 1 as a run's
    /// driving starts, -1 as it stops.
    pub fn run_active(&self, id: &TenantId, delta: i64) {
        self.runs_active.get_or_create(&tenant(id)).inc_by(delta);
    }

    /// Adds `delta` to the tenant's runs waiting with no instance: 1 as a
    /// run starts waiting so, -1 as it wakes.
    pub fn run_evicted(&self, id: &TenantId, delta: i64) {
        self.runs_evicted.get_or_create(&tenant(id)).inc_by(delta);
    }

    /// Counts a run as queued for a place of its concurrency key until the
    /// guard is dropped.
    pub fn run_queued(&self, id: &TenantId) -> InProgress {
        InProgress::start(&self.runs_queued.get_or_create(&tenant(id)))
    }

    /// Counts a step attempt as running until the guard is dropped (also
    /// when the attempt is abandoned midway).
    pub fn attempt_running(&self, id: &TenantId) -> InProgress {
        InProgress::start(&self.attempts_running.get_or_create(&tenant(id)))
    }

    /// Counts an upload as compiling until the guard is dropped.
    pub fn upload_compiling(&self, id: &TenantId) -> InProgress {
        InProgress::start(&self.uploads_compiling.get_or_create(&tenant(id)))
    }

    /// Counts an attempt of the step a run called `step`, which ended `how`.
    pub fn step_attempt(&self, id: &TenantId, step: &str, how: &str, took: Duration, fuel: u64) {
        self.step_attempts.get_or_create(&outcome(id, how)).inc();
        let labels = TenantStep {
            tenant: id.to_string(),
            step: self.step_labels.of(id, step),
        };
        self.step_seconds.get_or_create(&labels).observe(took.as_secs_f64());
        self.fuel.get_or_create(&tenant(id)).inc_by(fuel);
    }

    /// Counts what one attempt's outgoing HTTP came to.
    pub(crate) fn http(&self, id: &TenantId, usage: &HttpUsage) {
        use std::sync::atomic::Ordering::Relaxed;
        for (how, count) in [("sent", &usage.requests), ("refused", &usage.refused)] {
            let count = count.load(Relaxed);
            if count > 0 {
                self.http_requests.get_or_create(&outcome(id, how)).inc_by(count);
            }
        }
        for (direction, bytes) in [("sent", &usage.bytes_sent), ("received", &usage.bytes_received)] {
            let bytes = bytes.load(Relaxed);
            if bytes > 0 {
                let labels = TenantDirection {
                    tenant: id.to_string(),
                    direction,
                };
                self.http_bytes.get_or_create(&labels).inc_by(bytes);
            }
        }
    }

    /// Counts a fire of a cron schedule, which ended `fate`: `started`,
    /// `skipped`, `buffered` or `refused`.
    pub fn schedule_fire(&self, id: &TenantId, fate: &str) {
        self.schedule_fires.get_or_create(&outcome(id, fate)).inc();
    }

    /// Counts `runs` finished runs deleted past their tenant's retention, and
    /// the `objects` of theirs deleted with them.
    pub fn swept(&self, id: &TenantId, runs: u64, objects: u64) {
        self.swept_runs.get_or_create(&tenant(id)).inc_by(runs);
        self.swept_objects.get_or_create(&tenant(id)).inc_by(objects);
    }

    /// Counts a try of a completion notification, which ended `fate`:
    /// `delivered`, `failed` (tried again) or `given-up`.
    pub fn notification(&self, id: &TenantId, fate: &str) {
        self.notifications.get_or_create(&outcome(id, fate)).inc();
    }

    /// Counts an execution that replayed a journal.
    pub fn replayed(&self, id: &TenantId) {
        self.replays.get_or_create(&tenant(id)).inc();
    }

    /// Counts a replay that met a different call than its journal recorded.
    pub fn non_determinism(&self, id: &TenantId) {
        self.non_determinism.get_or_create(&tenant(id)).inc();
    }

    /// Everything, in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_labelled_by_tenant() {
        let metrics = Metrics::default();
        let acme = TenantId::new("acme").expect("a valid tenant id");
        metrics.step_attempt(&acme, "charge", "fuel-exhausted", Duration::from_millis(3), 1_000);
        metrics.run_finished(&acme, "completed");
        let text = metrics.encode();
        assert!(
            text.contains(r#"stepstone_step_attempts_total{tenant="acme",outcome="fuel-exhausted"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"stepstone_fuel_consumed_total{tenant="acme"} 1000"#),
            "{text}"
        );
        assert!(
            text.contains(r#"stepstone_runs_finished_total{tenant="acme",outcome="completed"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"stepstone_step_attempt_seconds_count{tenant="acme",step="charge"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn a_tenants_step_latencies_are_labelled_by_at_most_so_many_step_names() {
        let metrics = Metrics::default();
        let (acme, globex) = (
            TenantId::new("acme").expect("valid"),
            TenantId::new("globex").expect("valid"),
        );
        for n in 0..=MAX_STEP_LABELS {
            metrics.step_attempt(&acme, &format!("step-{n}"), "ok", Duration::from_millis(1), 0);
        }
        metrics.step_attempt(&acme, "step-0", "ok", Duration::from_millis(1), 0);
        metrics.step_attempt(
            &acme,
            &"x".repeat(MAX_STEP_LABEL_BYTES + 1),
            "ok",
            Duration::from_millis(1),
            0,
        );
        let forged = "x\"} 1\nstepstone_runs_finished_total{tenant=\"globex\",outcome=\"completed";
        metrics.step_attempt(&globex, forged, "ok", Duration::from_millis(1), 0);
        metrics.step_attempt(&globex, "step-0", "ok", Duration::from_millis(1), 0);
        let text = metrics.encode();
        assert!(!text.contains("runs_finished"), "a step name forged a series: {text}");
        let count = |tenant: &str, step: &str| {
            let series = format!(r#"stepstone_step_attempt_seconds_count{{tenant="{tenant}",step="{step}"}} "#);
            text.lines()
                .find_map(|line| line.strip_prefix(&series))
                .map(|value| value.parse::<u64>().expect("a count"))
        };
        assert_eq!(count("acme", "step-0"), Some(2), "a known name keeps its label: {text}");
        let last = format!("step-{}", MAX_STEP_LABELS - 1);
        assert_eq!(count("acme", &last), Some(1), "{text}");
        let past = format!("step-{MAX_STEP_LABELS}");
        assert_eq!(count("acme", &past), None, "{text}");
        assert_eq!(
            count("acme", OTHER_STEPS),
            Some(2),
            "the name past the limit and the long one: {text}"
        );
        assert_eq!(
            count("globex", "step-0"),
            Some(1),
            "each tenant has its own room: {text}"
        );
        assert_eq!(
            count("globex", OTHER_STEPS),
            Some(1),
            "a name that needs escaping: {text}"
        );
        let acme_series = text
            .lines()
            .filter(|line| line.starts_with(r#"stepstone_step_attempt_seconds_count{tenant="acme""#))
            .count();
        assert_eq!(acme_series, MAX_STEP_LABELS + 1, "{text}");
    }
}
