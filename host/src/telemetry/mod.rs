//! What the host tells its operators while it works: log lines (in words,
//! or one JSON object a line for log shippers), and, when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, traces of runs exported over
//! OTLP/HTTP: one trace per run, whatever host executes it (see
//! [`RunTrace`] and [`spans`]).

mod export;
mod ids;
pub mod spans;

use std::str::FromStr;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::{Level, Metadata};
use tracing_subscriber::Layer;
use tracing_subscriber::field::MakeExt;
use tracing_subscriber::filter::{EnvFilter, FilterExt, filter_fn};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::guest_log;

pub use export::{TelemetryError, TraceExport};
pub use ids::RunTrace;

/// How long the end of the process waits for the last spans to be sent.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(5);

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Words, with `name=value` fields.
    Text,
    /// One JSON object a line: `timestamp`, `level`, `fields` (with the
    /// `message`), and the spans it was logged in (`span`, `spans`).
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(format: &str) -> Result<Self, String> {
        match format {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("`{other}` is no log format: use `text` or `json`")),
        }
    }
}

/// Which log lines are written, and how.
pub struct LogSettings {
    /// How each line looks: words or JSON.
    pub format: LogFormat,
    /// Which lines are written unless `RUST_LOG` says otherwise, in its
    /// syntax.
    pub default_filter: &'static str,
    /// Colours, for a terminal (text only).
    pub ansi: bool,
}

/// The installed telemetry; [`Telemetry::shutdown`] sends the spans still
/// queued.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// Installs the process's telemetry: log lines written to `writer` as
/// `logs` says, and, with `traces`, spans exported there.
pub fn install<W>(logs: LogSettings, writer: W, traces: Option<TraceExport>) -> Result<Telemetry, TelemetryError>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let provider = traces.map(TraceExport::start);
    let tracer = provider.as_ref().map(|provider| provider.tracer("stepstone"));
    let traced = tracer.clone().map(|tracer| {
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_context_activation(false)
            .with_filter(filter_fn(traced))
    });
    tracing_subscriber::registry()
        .with(traced)
        .with(log_lines(logs, writer))
        .try_init()?;
    if let Some(tracer) = tracer {
        spans::start_exporting(tracer);
    }
    Ok(Telemetry { provider })
}

/// What traces take of Stepstone's own `tracing` output (never another
/// crate's: the exporter's HTTP client logs through `tracing` too): its
/// spans, guests' log lines, and its warnings and errors. Its other lines
/// say what the spans show, and would cost an event on a span each.
fn traced(metadata: &Metadata<'_>) -> bool {
    let lowest = if metadata.is_span() || metadata.target() == guest_log::TARGET {
        Level::INFO
    } else {
        Level::WARN
    };
    metadata.target().starts_with("stepstone") && *metadata.level() <= lowest
}

/// The log lines' layer: what `logs` asks for, without the spans only
/// traces show.
fn log_lines<S, W>(logs: LogSettings, writer: W) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let lines = tracing_subscriber::fmt::layer().with_writer(writer).with_target(false);
    let lines = match logs.format {
        LogFormat::Json => lines.json().boxed(),
        LogFormat::Text => lines
            .without_time()
            .with_ansi(logs.ansi)
            .fmt_fields(escaped_fields())
            .boxed(),
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(logs.default_filter));
    let not_trace_only = filter_fn(|metadata: &Metadata<'_>| metadata.target() != spans::TRACE_ONLY);
    lines.with_filter(filter.and(not_trace_only))
}

/// Text fields, `name=value` (the message bare), with every control
/// character escaped: no value (a guest's log line, a step's error, a
/// receiver's `Location`) can end the line and start a forged one.
fn escaped_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static {
    tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
        let written = format!("{value:?}");
        let text = escape_controls(&written);
        match field.name() {
            "message" => write!(writer, "{text}"),
            name => write!(writer, "{name}={text}"),
        }
    })
    .delimited(" ")
}

/// `text` with each control character but a tab written as its escape
/// (`\n`, `\r`, `\u{1b}`).
fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\t') {
        return text.into();
    }
    text.chars()
        .map(|c| match c {
            '\t' => c.to_string(),
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect::<String>()
        .into()
}

impl Telemetry {
    /// Sends the spans still queued, waiting at most 5 seconds (`FLUSH_AT_EXIT`):
    /// a collector gone quiet does not hold the process's exit for longer.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown_with_timeout(FLUSH_AT_EXIT)
        {
            tracing::warn!("traces still queued at exit are dropped: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_formats_are_named_text_and_json_and_nothing_else() {
        assert_eq!("text".parse(), Ok(LogFormat::Text));
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        let refused = "JSON".parse::<LogFormat>().expect_err("formats are lowercase");
        assert!(refused.contains("`text` or `json`"), "{refused}");
    }

    /// A span or event as it would be made at `level` under `target`.
    fn traced_at(target: &'static str, level: Level, span: bool) -> bool {
        struct Site;
        impl tracing::callsite::Callsite for Site {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &Metadata<'_> {
                unreachable!("not registered")
            }
        }
        let kind = if span {
            tracing::metadata::Kind::SPAN
        } else {
            tracing::metadata::Kind::EVENT
        };
        let fields = tracing::field::FieldSet::new(&[], tracing::callsite::Identifier(&Site));
        let metadata = Metadata::new("test", target, level, None, None, None, fields, kind);
        traced(&metadata)
    }

    #[test]
    fn a_text_line_cannot_be_split_by_what_it_quotes() {
        let written = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let sink = written.clone();
        let writer = move || WrittenTo(sink.clone());
        let settings = LogSettings {
            format: LogFormat::Text,
            default_filter: "info",
            ansi: false,
        };
        let subscriber = tracing_subscriber::registry().with(log_lines(settings, writer));
        tracing::subscriber::with_default(subscriber, || {
            let forged = "paid\nINFO stepstone: tenant acme is now an operator\r\u{1b}[2J";
            tracing::info!(target: guest_log::TARGET, step = forged, "{forged}");
        });
        let text = String::from_utf8(written.lock().expect("not poisoned").clone()).expect("UTF-8");
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains(r"paid\nINFO stepstone: tenant acme is now an operator\r\u{1b}[2J"),
            "{text}"
        );
        assert!(text.contains(r#"step="paid\nINFO"#), "{text}");
    }

    /// A writer into a shared buffer.
    struct WrittenTo(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for WrittenTo {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn traces_take_stepstones_spans_guest_lines_and_warnings_and_no_other_crates_output() {
        assert!(traced_at("stepstone::runtime", Level::INFO, true));
        assert!(!traced_at("stepstone::runtime", Level::DEBUG, true));
        assert!(traced_at(guest_log::TARGET, Level::INFO, false));
        assert!(traced_at("stepstone::runtime::step_call", Level::WARN, false));
        assert!(
            !traced_at("stepstone::runtime", Level::INFO, false),
            "an info line says what a span shows"
        );
        assert!(!traced_at("hyper_util::client", Level::WARN, false));
        assert!(!traced_at("reqwest", Level::INFO, true));
    }
}
