//! An OpenTelemetry collector on loopback for the tests: it takes OTLP/HTTP
//! exports (`POST /v1/traces`, protobuf bodies), decodes them with
//! `opentelemetry-proto`'s types, and keeps every span, with the service
//! that sent it, for the tests to look at; or, for the benchmarks, only
//! counts them.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as ProtoValue;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message;
use serde_json::{Value, json};

use crate::origin::{answer, read_request};

/// One span as the collector received it; ids in lowercase hex.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub service: String,
    pub trace_id: String,
    pub span_id: String,
    /// `None` for a root span.
    pub parent_span_id: Option<String>,
    pub name: String,
    pub attributes: BTreeMap<String, Value>,
    /// The spans it links to, as (trace id, span id).
    pub links: Vec<(String, String)>,
    /// The names of its events (a log line's is its message).
    pub events: Vec<String>,
    /// The message of an error status.
    pub error: Option<String>,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
}

impl ReceivedSpan {
    /// Attribute `key` as a string, `""` if it has none.
    pub fn text(&self, key: &str) -> &str {
        self.attributes.get(key).and_then(Value::as_str).unwrap_or_default()
    }

    /// Attribute `key` as a number, if it is one.
    pub fn number(&self, key: &str) -> Option<i64> {
        self.attributes.get(key).and_then(Value::as_i64)
    }
}

/// The collector; it lives as long as the test process.
#[derive(Clone)]
pub struct Collector {
    port: u16,
    /// Whether it keeps the spans, or only counts them.
    keeps: bool,
    spans: Arc<(Mutex<Vec<ReceivedSpan>>, Condvar)>,
    counted: Arc<AtomicUsize>,
}

impl Collector {
    /// Starts a collector on a free loopback port, which keeps every span.
    pub fn start() -> Self {
        Self::listen(true)
    }

    /// Starts a collector that only counts the spans it receives (after
    /// decoding them, as any collector must): a benchmark's, which should
    /// take as little as it can of the machine it measures.
    pub fn counting() -> Self {
        Self::listen(false)
    }

    fn listen(keeps: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let collector = Self {
            port: listener.local_addr().expect("a bound address").port(),
            keeps,
            spans: Arc::default(),
            counted: Arc::default(),
        };
        let serving = collector.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let collector = serving.clone();
                std::thread::spawn(move || collector.serve(stream));
            }
        });
        collector
    }

    /// `http://127.0.0.1:PORT`, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far (none if it only counts them).
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received().clone()
    }

    /// How many spans it has received so far.
    pub fn count(&self) -> usize {
        self.counted.load(Ordering::Relaxed)
    }

    /// Waits until the spans received satisfy `ready`, for at most
    /// `timeout`, and returns them.
    pub fn await_spans(
        &self,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = Instant::now() + timeout;
        let mut spans = self.received();
        while !ready(&spans) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the collector did not receive {what} within {timeout:?}; it has: {:#?}",
                *spans
            );
            spans = self
                .spans
                .1
                .wait_timeout(spans, left)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        spans.clone()
    }

    fn received(&self) -> MutexGuard<'_, Vec<ReceivedSpan>> {
        self.spans.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes exports on one connection until the client closes it.
    fn serve(&self, stream: TcpStream) {
        let mut reader = std::io::BufReader::new(stream.try_clone().expect("a second handle"));
        let mut writer = stream;
        while let Some(request) = read_request(&mut reader) {
            let answered = match (request.method.as_str(), request.path.as_str()) {
                ("POST", "/v1/traces") => match ExportTraceServiceRequest::decode(request.body.as_slice()) {
                    Ok(export) => {
                        self.keep(export);
                        // An empty ExportTraceServiceResponse: all accepted.
                        answer(&mut writer, "200 OK", &["Content-Type: application/x-protobuf"], b"")
                    }
                    Err(e) => answer(&mut writer, "400 Bad Request", &[], e.to_string().as_bytes()),
                },
                _ => answer(&mut writer, "404 Not Found", &[], b"no such path"),
            };
            if answered.is_err() {
                return;
            }
        }
    }

    fn keep(&self, export: ExportTraceServiceRequest) {
        let spans = export.resource_spans.iter().flat_map(|r| &r.scope_spans);
        self.counted
            .fetch_add(spans.map(|scope| scope.spans.len()).sum(), Ordering::Relaxed);
        if !self.keeps {
            return;
        }
        let mut kept = Vec::new();
        for resource_spans in export.resource_spans {
            let resource = resource_spans
                .resource
                .map(|r| attributes(&r.attributes))
                .unwrap_or_default();
            let service = resource
                .get("service.name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            for span in resource_spans.scope_spans.into_iter().flat_map(|scope| scope.spans) {
                let error = span
                    .status
                    .filter(|status| status.code == StatusCode::Error as i32)
                    .map(|status| status.message);
                kept.push(ReceivedSpan {
                    service: service.clone(),
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: (!span.parent_span_id.is_empty()).then(|| hex::encode(&span.parent_span_id)),
                    name: span.name,
                    attributes: attributes(&span.attributes),
                    links: span
                        .links
                        .iter()
                        .map(|link| (hex::encode(&link.trace_id), hex::encode(&link.span_id)))
                        .collect(),
                    events: span.events.iter().map(|event| event.name.clone()).collect(),
                    error,
                    start_unix_nanos: span.start_time_unix_nano,
                    end_unix_nanos: span.end_time_unix_nano,
                });
            }
        }
        self.received().extend(kept);
        self.spans.1.notify_all();
    }
}

fn attributes(attributes: &[KeyValue]) -> BTreeMap<String, Value> {
    attributes
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.as_ref().map_or(Value::Null, json_of)))
        .collect()
}

fn json_of(value: &AnyValue) -> Value {
    match &value.value {
        Some(ProtoValue::StringValue(text)) => json!(text),
        Some(ProtoValue::BoolValue(flag)) => json!(flag),
        Some(ProtoValue::IntValue(number)) => json!(number),
        Some(ProtoValue::DoubleValue(number)) => json!(number),
        Some(ProtoValue::ArrayValue(array)) => array.values.iter().map(json_of).collect(),
        Some(ProtoValue::KvlistValue(list)) => Value::Object(attributes(&list.values).into_iter().collect()),
        Some(ProtoValue::BytesValue(bytes)) => json!(hex::encode(bytes)),
        Some(ProtoValue::StringValueStrindex(index)) => json!(index),
        None => Value::Null,
    }
}
