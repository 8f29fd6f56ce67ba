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

wit_bindgen::generate!({
    path: "../wit/http",
    world: "stepstone-hostile:http/fetch",
    generate_all,
});

use wasi::http::outgoing_handler;
use wasi::http::types::{Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

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
    if let Some((header, secret)) = fetch.secret_header.take() {
        let value = read_secret(&secret)?.ok_or_else(|| format!("the tenant has no secret `{secret}`"))?;
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

/// The tenant's secret `name`, through wasi:config.
fn read_secret(name: &str) -> Result<Option<String>, String> {
    wasi::config::store::get(name).map_err(|e| format!("reading secret `{name}`: {e:?}"))
}

/// Sends `fetch` once and reads the whole answer, keeping its first KiB.
fn send(fetch: &Fetch) -> Result<Fetched, String> {
    let (scheme, rest) = fetch.url.split_once("://").ok_or("the URL has no scheme")?;
    let (authority, path) = rest.find('/').map_or((rest, "/"), |at| rest.split_at(at));
    let headers = Fields::new();
    if let Some(body) = &fetch.body {
        // A body of known length, sent as one, not chunked.
        let length = body.len().to_string();
        headers
            .append("content-length", length.as_bytes())
            .map_err(|e| format!("content-length: {e:?}"))?;
    }
    for (name, value) in &fetch.headers {
        headers
            .append(name, value.as_bytes())
            .map_err(|e| format!("header {name}: {e:?}"))?;
    }
    let request = OutgoingRequest::new(headers);
    let method = match fetch.method.as_deref().unwrap_or("GET") {
        "GET" => Method::Get,
        "POST" => Method::Post,
        other => Method::Other(other.to_owned()),
    };
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_owned()),
    };
    request.set_method(&method).map_err(|()| "invalid method")?;
    request.set_scheme(Some(&scheme)).map_err(|()| "invalid scheme")?;
    request.set_authority(Some(authority)).map_err(|()| "invalid authority")?;
    request.set_path_with_query(Some(path)).map_err(|()| "invalid path")?;
    let body = request.body().map_err(|()| "the request body was taken")?;
    // Sent before the body is written: the host buffers one chunk of it, and
    // takes the rest only once the request is on its way.
    let pending = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    if let Some(text) = &fetch.body {
        let stream = body.write().map_err(|()| "the request body stream was taken")?;
        for chunk in text.as_bytes().chunks(4096) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| format!("writing the request body: {e:?}"))?;
        }
    }
    OutgoingBody::finish(body, None).map_err(|e| format!("finishing the request body: {e:?}"))?;
    pending.subscribe().block();
    let response = pending
        .get()
        .ok_or("no answer after waiting for it")?
        .map_err(|()| "the answer was taken")?
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status();
    let body = response.consume().map_err(|()| "the answer's body was taken")?;
    let (kept, bytes) = read_to_end(&body)?;
    IncomingBody::finish(body);
    Ok(Fetched {
        status,
        body: String::from_utf8_lossy(&kept).into_owned(),
        bytes,
    })
}

/// Reads `body` to its end: its first KiB, and how many bytes it had.
fn read_to_end(body: &IncomingBody) -> Result<(Vec<u8>, u64), String> {
    let stream = body.stream().map_err(|()| "the answer's stream was taken")?;
    let (mut kept, mut bytes) = (Vec::new(), 0_u64);
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => {
                bytes += chunk.len() as u64;
                let room = 1024_usize.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..room.min(chunk.len())]);
            }
            Err(StreamError::Closed) => return Ok((kept, bytes)),
            Err(StreamError::LastOperationFailed(e)) => {
                let cause = wasi::http::types::http_error_code(&e).map_or_else(|| e.to_debug_string(), |code| format!("{code:?}"));
                return Err(format!("reading the answer after {bytes} bytes: {cause}"));
            }
        }
    }
}

/// `fetch` called as a step, and the limits to call it with.
#[derive(Deserialize)]
struct FetchOnce {
    fetch: Fetch,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default = "once")]
    attempts: u32,
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
    Ok(match ctx.step_with::<_, Fetched>("fetch", &call.fetch, options) {
        Ok(fetched) => Outcome::Fetched(fetched),
        Err(error) => Outcome::Failed {
            error_kind: format!("{:?}", error.kind()),
            message: error.message().to_owned(),
        },
    })
}

fn fetch_in_workflow(_ctx: &Workflow, fetch: Fetch) -> Result<Fetched, Error> {
    Ok(send(&fetch)?)
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
