//! A guest that makes outgoing HTTP requests through `wasi:http`, for the
//! tests of the host's allowlist and limits (tests/outbound.rs): the step
//! `fetch` sends a request `times` times and reads each answer to its end
//! (with the call's idempotency key if asked, failing its first attempt
//! after sending if asked, as when an answer is lost);
//! the workflow `fetch-once` calls it within the limits it is given and
//! returns what it gave or the error; the workflow `fetch-in-workflow` tries
//! a request itself, which the host must refuse; `secret-in-workflow` reads a
//! secret, which a workflow must never see.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use stepstone_guest::{Error, Step, StepFailure, StepOptions, Workflow, export};

use stepstone_guest::bindings::wasi::clocks::monotonic_clock;
use stepstone_guest::bindings::wasi::config::store;
use stepstone_guest::http::{HttpError, Request};

/// One request, sent `times` times.
#[derive(Deserialize, Serialize)]
struct Fetch {
    url: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default = "once")]
    times: u32,
    /// Send the call's idempotency key as `Idempotency-Key`.
    #[serde(default)]
    idempotent: bool,
    /// Send the attempt's fencing token as `Fencing-Token`.
    #[serde(default)]
    fenced: bool,
    /// Wait this long (on the host's clock, inside a host call) before
    /// sending, having said so in the log: a test pauses the host then.
    #[serde(default)]
    wait_ms: Option<u64>,
    /// Fail the first attempt once its requests are answered.
    #[serde(default)]
    fail_first: bool,
    /// Send a body of this many `x`s instead of `body` (larger than any
    /// input may be).
    #[serde(default)]
    body_bytes: Option<usize>,
    /// Send header NAME with the value of the tenant's secret SECRET.
    #[serde(default)]
    secret_header: Option<(String, String)>,
}

fn once() -> u32 {
    1
}

/// The last answer: its status, the first KiB of its body, and its size.
#[derive(Serialize, Deserialize)]
struct Fetched {
    status: u16,
    body: String,
    bytes: u64,
}

fn fetch(ctx: &Step, mut fetch: Fetch) -> Result<Fetched, StepFailure> {
    if let Some(bytes) = fetch.body_bytes.take() {
        fetch.body = Some("x".repeat(bytes));
    }
    if fetch.idempotent {
        fetch.headers.push(("Idempotency-Key".into(), ctx.idempotency_key()));
    }
    if fetch.fenced {
        fetch.headers.push(("Fencing-Token".into(), ctx.fencing_token().to_string()));
    }
    if let Some(ms) = fetch.wait_ms {
        ctx.info(&format!("fetch waiting {ms} ms, attempt {}", ctx.attempt()));
        monotonic_clock::subscribe_duration(ms.saturating_mul(1_000_000)).block();
    }
    if let Some((header, secret)) = fetch.secret_header.take() {
        let value = ctx
            .secret(&secret)?
            .ok_or_else(|| format!("the tenant has no secret `{secret}`"))?;
        fetch.headers.push((header, value));
    }
    let mut last = None;
    for n in 1..=fetch.times {
        let answer = send(&fetch).map_err(|e| format!("request {n} of {}: {e}", fetch.times))?;
        last = Some(answer);
    }
    if fetch.fail_first && ctx.attempt() == 1 {
        return Err("the answer was lost (the first attempt always fails after sending)".into());
    }
    Ok(last.ok_or("no request was asked for")?)
}

/// The tenant's secret `name`, read straight through wasi:config (as a
/// workflow might try to).
fn read_secret(name: &str) -> Result<Option<String>, String> {
    store::get(name).map_err(|e| format!("reading secret `{name}`: {e:?}"))
}

/// Sends `fetch` once and reads the whole answer, keeping its first KiB.
fn send(fetch: &Fetch) -> Result<Fetched, HttpError> {
    let mut request = Request::new(fetch.method.as_deref().unwrap_or("GET"), &fetch.url);
    for (name, value) in &fetch.headers {
        request = request.header(name, value);
    }
    if let Some(body) = &fetch.body {
        request = request.body(body.as_bytes());
    }
    let response = request.send()?;
    let status = response.status();
    let mut body = response.into_body();
    let (mut kept, mut bytes) = (Vec::new(), 0_u64);
    while let Some(chunk) = body.chunk()? {
        bytes += chunk.len() as u64;
        let room = 1024_usize.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..room.min(chunk.len())]);
    }
    Ok(Fetched {
        status,
        body: String::from_utf8_lossy(&kept).into_owned(),
        bytes,
    })
}

/// `fetch` called as a step, and the limits to call it with.
#[derive(Deserialize)]
struct FetchOnce {
    fetch: Fetch,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default = "once")]
    attempts: u32,
    /// Bounds on the call's outgoing HTTP, below the tenant's.
    #[serde(default)]
    http: HttpBounds,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct HttpBounds {
    max_requests: Option<u32>,
    max_request_bytes: Option<u64>,
    max_response_bytes: Option<u64>,
    connect_timeout_ms: Option<u64>,
    first_byte_timeout_ms: Option<u64>,
}

impl HttpBounds {
    fn apply(&self, mut options: StepOptions) -> StepOptions {
        if let Some(requests) = self.max_requests {
            options = options.http_max_requests(requests);
        }
        if let Some(bytes) = self.max_request_bytes {
            options = options.http_max_request_bytes(bytes);
        }
        if let Some(bytes) = self.max_response_bytes {
            options = options.http_max_response_bytes(bytes);
        }
        if let Some(ms) = self.connect_timeout_ms {
            options = options.http_connect_timeout(Duration::from_millis(ms));
        }
        if let Some(ms) = self.first_byte_timeout_ms {
            options = options.http_first_byte_timeout(Duration::from_millis(ms));
        }
        options
    }
}

/// What the step gave, or its error: the run succeeds either way, so a test
/// reads what the workflow saw.
#[derive(Serialize)]
#[serde(untagged)]
enum Outcome {
    Fetched(Fetched),
    Failed { error_kind: String, message: String },
}

fn fetch_once(ctx: &Workflow, call: FetchOnce) -> Result<Outcome, Error> {
    let mut options = StepOptions::new()
        .max_attempts(call.attempts)
        .initial_backoff(Duration::from_millis(10));
    if let Some(ms) = call.timeout_ms {
        options = options.timeout(Duration::from_millis(ms));
    }
    options = call.http.apply(options);
    Ok(match ctx.step_with::<_, Fetched>("fetch", &call.fetch, options) {
        Ok(fetched) => Outcome::Fetched(fetched),
        Err(error) => Outcome::Failed {
            error_kind: format!("{:?}", error.kind()),
            message: error.message().to_owned(),
        },
    })
}

fn fetch_in_workflow(_ctx: &Workflow, fetch: Fetch) -> Result<Fetched, Error> {
    Ok(send(&fetch).map_err(|e| e.to_string())?)
}

/// What a workflow reads of secret `name`: it must be nothing.
fn secret_in_workflow(_ctx: &Workflow, name: String) -> Result<Option<String>, Error> {
    Ok(read_secret(&name)?)
}

export! {
    workflows: {
        "fetch-once" => fetch_once,
        "fetch-in-workflow" => fetch_in_workflow,
        "secret-in-workflow" => secret_in_workflow,
    },
    steps: {
        "fetch" => fetch,
    },
}
