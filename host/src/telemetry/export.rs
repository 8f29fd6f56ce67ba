//! Where traces go: OTLP over HTTP with protobuf bodies, set up by the
//! standard `OTEL_*` variables, behind the SDK's batch processor (a bounded
//! queue emptied by a thread of its own, so no run ever waits for the
//! collector), saying in the log when the collector stops answering and
//! when it answers again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::{Key, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter};

use super::ids::RunIds;

/// Turns traces on: the collector's base URL (`/v1/traces` is appended).
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// Turns traces on too: the full URL traces are posted to.
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// The only protocol spoken; the variables that may name it.
const PROTOCOL: &str = "http/protobuf";
const PROTOCOL_VARIABLES: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"];
/// What the SDK names a service nobody named (followed by `:` and the
/// executable's name).
const UNNAMED_SERVICE: &str = "unknown_service";

/// The telemetry could not be set up as the environment asks.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A protocol variable names a protocol other than `http/protobuf`, the
    /// only one spoken: set it to that, or unset it.
    #[error(
        "{variable}={value}: Stepstone exports traces over OTLP/HTTP with protobuf bodies only; set it to `{PROTOCOL}` or unset it"
    )]
    Protocol {
        /// The variable that names the protocol.
        variable: &'static str,
        /// The protocol it names.
        value: String,
    },
    /// The OTLP exporter could not be built as the environment asks.
    #[error("cannot set up the trace exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// A log subscriber was installed in the process already: telemetry is
    /// installed once a process.
    #[error("the process's log subscriber was installed already: {0}")]
    Installed(#[from] tracing_subscriber::util::TryInitError),
}

/// The exporter the environment asks for, not yet started.
pub struct TraceExport {
    exporter: opentelemetry_otlp::SpanExporter,
    endpoint: String,
}

impl TraceExport {
    /// The exporter `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`)
    /// points at; `None` when neither is set, and nothing is exported.
    /// Timeout, headers and the batch processor's bounds come from the
    /// other standard variables (`OTEL_EXPORTER_OTLP_TIMEOUT`,
    /// `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`).
    pub fn from_env() -> Result<Option<Self>, TelemetryError> {
        let set = |variable| std::env::var(variable).ok().filter(|value| !value.is_empty());
        let endpoint = match (set(TRACES_ENDPOINT), set(ENDPOINT)) {
            (Some(traces), _) => traces,
            (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        for variable in PROTOCOL_VARIABLES {
            if let Some(value) = set(variable).filter(|value| value != PROTOCOL) {
                return Err(TelemetryError::Protocol { variable, value });
            }
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()?;
        Ok(Some(Self { exporter, endpoint }))
    }

    /// Starts exporting: the batch processor's thread, and the provider
    /// whose tracer makes the spans.
    pub(super) fn start(self) -> SdkTracerProvider {
        let watched = Watched {
            exporter: self.exporter,
            endpoint: self.endpoint,
            failing: AtomicBool::new(false),
        };
        let batches = BatchSpanProcessor::builder(watched)
            .with_batch_config(BatchConfigBuilder::default().build())
            .build();
        SdkTracerProvider::builder()
            .with_span_processor(batches)
            .with_id_generator(RunIds::default())
            .with_resource(resource())
            .build()
    }
}

/// What the spans come from: `OTEL_SERVICE_NAME` (or the `service.name` of
/// `OTEL_RESOURCE_ATTRIBUTES`), else `stepstone`, and the host's version.
fn resource() -> Resource {
    let service = Key::from_static_str("service.name");
    let detected = Resource::builder().build();
    let named = detected
        .get(&service)
        .is_some_and(|name| !name.as_str().starts_with(UNNAMED_SERVICE));
    let builder = Resource::builder().with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if named {
        builder.build()
    } else {
        builder.with_service_name("stepstone").build()
    }
}

/// The OTLP exporter, watched: the first failed export of a streak is
/// logged, and so is the first export that works after it.
#[derive(Debug)]
struct Watched {
    exporter: opentelemetry_otlp::SpanExporter,
    endpoint: String,
    failing: AtomicBool,
}

impl SpanExporter for Watched {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let exported = self.exporter.export(batch).await;
        let was_failing = self.failing.swap(exported.is_err(), Ordering::Relaxed);
        match &exported {
            Err(e) if !was_failing => tracing::warn!(
                endpoint = %self.endpoint,
                spans,
                "cannot export traces; spans are dropped until the collector answers: {e}"
            ),
            Ok(()) if was_failing => tracing::info!(endpoint = %self.endpoint, "traces are exported again"),
            _ => {}
        }
        exported
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.exporter.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.exporter.set_resource(resource);
    }
}
