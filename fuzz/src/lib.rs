//! The bodies of the fuzz targets, shared by cargo-fuzz (`fuzz_targets/`)
//! and by the host's `tests/fuzz_regressions.rs`, which replays every saved
//! input under `fuzz/regressions/<target>/` in `make test`.
//!
//! Each body takes arbitrary bytes and panics only when the host broke one
//! of its promises about bad input: no panic, no hang, no 5xx answer, and an
//! error that says what was wrong (`{"error": "..."}` over HTTP).

use std::fmt::Debug;
use std::sync::OnceLock;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, Response, StatusCode, header};
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use stepstone::api::{self, ApiState};
use stepstone::component::CodeCache;
use stepstone::config::HostConfig;
use stepstone::journal::{
    self, AttemptRecord, CancelRecord, Cursor, Entry, Outcome, RunRecord, SignalRecord, TimerRecord,
};
use stepstone::runtime::Runtime;
use stepstone::store::{Storage, TenantId};
use stepstone::tenancy::Tenants;
use tower::ServiceExt;

const TOKEN: &str = "fuzz-token";
/// Longer than any request but a long-poll `wait` takes on an idle host.
const REQUEST_BUDGET: Duration = Duration::from_secs(20);
/// A component the API fixture has uploaded, so a fuzzed run submission can
/// get past the component lookup to the workflow and input checks.
const KNOWN_COMPONENT: &str = "hello";

/// One host behind the real router, shared by every input of a process:
/// building it (engines, a compiled component) takes far longer than a run.
struct Api {
    tokio: tokio::runtime::Runtime,
    router: Router,
}

fn api() -> &'static Api {
    static API: OnceLock<Api> = OnceLock::new();
    API.get_or_init(|| {
        let tokio = tokio::runtime::Runtime::new().expect("a tokio runtime");
        let runtime = Runtime::new(HostConfig::new(), Storage::in_memory(), CodeCache::disabled())
            .expect("the default host config is valid");
        let tenant = TenantId::new("fuzz").expect("a valid tenant id");
        let router = api::router(ApiState::new(runtime, Tenants::single(tenant, TOKEN)));
        let api = Api { tokio, router };
        let guest = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/guests/hello.wasm");
        let hello = std::fs::read(guest).unwrap_or_else(|e| panic!("{guest}: {e}: run `make guests`"));
        let path = format!("/v1/components?name={KNOWN_COMPONENT}");
        let (status, body) = api.send(Method::POST, &path, hello.into()).expect("the upload answers");
        assert_eq!(status, StatusCode::CREATED, "uploading {guest}: {body:?}");
        api
    })
}

impl Api {
    /// Sends one request, as a client would; `None` if it was a long-poll
    /// that was still (legitimately) waiting when the budget ran out.
    fn send(&self, method: Method, path: &str, body: Bytes) -> Option<(StatusCode, Bytes)> {
        let content_type = if path.starts_with("/v1/components") {
            "application/wasm"
        } else {
            "application/json"
        };
        let request = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(body))
            .ok()?;
        let answer = self.tokio.block_on(async {
            let response = tokio::time::timeout(REQUEST_BUDGET, self.router.clone().oneshot(request)).await;
            match response {
                Ok(response) => Some(read(response.expect("the router is infallible")).await),
                Err(_) => None,
            }
        });
        if answer.is_none() {
            let long_poll = path.split('?').next().is_some_and(|p| p.ends_with("/wait"));
            assert!(long_poll, "{method} {path} hung for {REQUEST_BUDGET:?}");
        }
        answer
    }
}

async fn read(response: Response<Body>) -> (StatusCode, Bytes) {
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("the response body is readable");
    (status, body)
}

/// The promise every API answer keeps: never a server error for bad input,
/// and every refusal a JSON object whose `error` says why.
fn check_answer(request: &str, status: StatusCode, body: &[u8]) {
    let text = String::from_utf8_lossy(body);
    assert!(!status.is_server_error(), "{request}: {status}: {text}");
    if status.is_client_error() {
        let error = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|json| json.get("error").and_then(|e| e.as_str()).map(str::to_owned));
        assert!(
            error.is_some_and(|e| !e.is_empty()),
            "{request}: {status} without a JSON `error`: {text:?}"
        );
    }
}

/// (a) Component validation on upload: the bytes are the body of
/// `POST /v1/components`, which validates, compiles and describes them.
pub fn component_upload(data: &[u8]) {
    let api = api();
    let path = "/v1/components?name=fuzzed";
    if let Some((status, body)) = api.send(Method::POST, path, Bytes::copy_from_slice(data)) {
        check_answer(path, status, &body);
    }
}

/// (c) The JSON payload boundary: the input is a request, `METHOD PATH`, a
/// newline, then the body (run submissions, options, signal payloads,
/// cancel reasons, query strings). Inputs that are no HTTP request at all
/// are skipped: no client can send them.
pub fn api_json(data: &[u8]) {
    let Some(newline) = data.iter().position(|&b| b == b'\n') else {
        return;
    };
    let (line, body) = (&data[..newline], &data[newline + 1..]);
    let Ok(line) = std::str::from_utf8(line) else {
        return;
    };
    let Some((method, path)) = line.split_once(' ') else {
        return;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return;
    };
    if !path.starts_with('/') {
        return;
    }
    if let Some((status, answer)) = api().send(method, path, Bytes::copy_from_slice(body)) {
        check_answer(line, status, &answer);
    }
}

/// (b) Journal record decoding: the first byte picks the record type (its
/// low seven bits) and whether the rest is a whole stored record or only its
/// body (top bit set: wrapped here in a valid envelope, so the fuzzer
/// reaches the MessagePack decoder past the checksum). A decoded record must be usable as the host uses it and
/// must encode back to itself. Returns whether the input decoded.
pub fn journal_decode(data: &[u8]) -> bool {
    let Some((&selector, rest)) = data.split_first() else {
        return false;
    };
    let bytes = if selector & 0x80 == 0 {
        rest.to_vec()
    } else {
        enveloped(rest)
    };
    match (selector & 0x7f) % 7 {
        0 => decode_and_use::<RunRecord>(&bytes, |_| ()),
        1 => decode_and_use::<Outcome>(&bytes, |outcome| drop(outcome.as_result())),
        2 => decode_and_use::<CancelRecord>(&bytes, |_| ()),
        3 => decode_and_use::<Entry>(&bytes, replay_against),
        4 => decode_and_use::<AttemptRecord>(&bytes, |_| ()),
        5 => decode_and_use::<TimerRecord>(&bytes, |_| ()),
        _ => decode_and_use::<SignalRecord>(&bytes, |_| ()),
    }
}

/// `body` in a stored record's envelope with a correct checksum.
pub fn enveloped(body: &[u8]) -> Vec<u8> {
    let mut bytes = b"STP".to_vec();
    bytes.push(journal::FORMAT_VERSION);
    bytes.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    bytes.extend_from_slice(body);
    bytes
}

fn decode_and_use<R: Serialize + DeserializeOwned + PartialEq + Debug>(bytes: &[u8], use_record: impl Fn(&R)) -> bool {
    match journal::decode::<R>(bytes) {
        Ok(record) => {
            use_record(&record);
            let again = journal::decode::<R>(&journal::encode(&record));
            assert_eq!(
                again.as_ref(),
                Ok(&record),
                "a decoded record does not encode back to itself"
            );
            true
        }
        Err(reason) => {
            assert!(!reason.is_empty(), "a refused record without a reason");
            false
        }
    }
}

/// What replay does with an entry: serve it, or name the mismatch, and show
/// it the way `history` and the API do.
fn replay_against(entry: &Entry) {
    let mut asked = entry.call.clone();
    asked.name.push('\'');
    let mut cursor = Cursor::new(vec![Entry {
        seq: 0,
        ..entry.clone()
    }]);
    if let Err(mismatch) = cursor.next(&asked) {
        assert!(!mismatch.to_string().is_empty());
    }
    drop(serde_json::to_value(&entry.recorded));
}
