//! Outgoing HTTP for steps, through `wasi:http`: a [`Request`] sent to an
//! origin on the tenant's allowlist, and its [`Response`], whose body is
//! read as it arrives.
//!
//! The host refuses any other origin before connecting (the error names
//! `HttpRequestDenied`), bounds each attempt's requests, bytes and waiting,
//! and gives workflows no network at all: only steps send requests.
//!
//! ```no_run
//! use stepstone_guest::{Step, StepFailure, http::Request};
//!
//! fn quote(ctx: &Step, item: String) -> Result<String, StepFailure> {
//!     let response = Request::get(&format!("https://prices.example.com/{item}"))
//!         .header("idempotency-key", ctx.idempotency_key())
//!         .send()?;
//!     Ok(response.text()?)
//! }
//! ```

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::StepFailure;
use crate::bindings::wasi::http::outgoing_handler;
use crate::bindings::wasi::http::types::{
    self as wasi_http, Fields, IncomingBody, IncomingResponse, Method, OutgoingBody, OutgoingRequest, Scheme,
};
use crate::bindings::wasi::io::streams::{InputStream, StreamError};

/// The most a request body is written at once: the host takes one chunk
/// before the request is on its way, the rest as the server reads it.
const WRITE_CHUNK: usize = 4096;
/// The most one read of a response body asks for.
const READ_CHUNK: u64 = 64 * 1024;

/// One HTTP request, built up and then [sent](Request::send).
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Option<Vec<u8>>,
}

impl Request {
    /// A request with `method` (e.g. `"PUT"`) to `url`, an absolute
    /// `http://` or `https://` URL.
    pub fn new(method: &str, url: &str) -> Self {
        Self {
            method: method.to_owned(),
            url: url.to_owned(),
            headers: Vec::new(),
            body: None,
        }
    }

    pub fn get(url: &str) -> Self {
        Self::new("GET", url)
    }

    pub fn post(url: &str) -> Self {
        Self::new("POST", url)
    }

    /// Adds header `name` (repeatable: each call adds a value).
    pub fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.headers.push((name.to_owned(), value.as_ref().to_vec()));
        self
    }

    /// Sets the body, sent with its `content-length`.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// Sets the body to `value` as JSON, and the `content-type` to say so.
    pub fn json<T: Serialize + ?Sized>(self, value: &T) -> Result<Self, HttpError> {
        let body = serde_json::to_vec(value).map_err(|e| HttpError::new(format!("encoding the body as JSON: {e}")))?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Sends the request and waits for the answer's status and headers; the
    /// body is read from the [`Response`].
    pub fn send(self) -> Result<Response, HttpError> {
        let at = |what: &str| HttpError::new(format!("{} {}: {what}", self.method, self.url));
        let outgoing = self.outgoing().map_err(|e| at(&e))?;
        let body = outgoing.body().map_err(|()| at("the request body was taken"))?;
        // Sent before the body is written: the host buffers one chunk of it
        // and takes the rest only once the request is on its way.
        let pending = outgoing_handler::handle(outgoing, None).map_err(|e| at(&format!("{e:?}")))?;
        self.write_body(&body).map_err(|e| at(&e))?;
        OutgoingBody::finish(body, None).map_err(|e| at(&format!("finishing the request body: {e:?}")))?;
        pending.subscribe().block();
        let response = pending
            .get()
            .ok_or_else(|| at("no answer after waiting for it"))?
            .map_err(|()| at("the answer was taken"))?
            .map_err(|e| at(&format!("{e:?}")))?;
        Response::new(response).map_err(|e| at(&e))
    }

    /// The wasi:http request: method, URL and headers (the body apart).
    fn outgoing(&self) -> Result<OutgoingRequest, String> {
        let (scheme, rest) = self
            .url
            .split_once("://")
            .ok_or("the URL has no scheme: it must start with http:// or https://")?;
        let (authority, path) = rest.find('/').map_or((rest, "/"), |at| rest.split_at(at));
        let headers = Fields::new();
        if let Some(body) = &self.body {
            headers
                .append("content-length", body.len().to_string().as_bytes())
                .map_err(|e| format!("content-length: {e:?}"))?;
        }
        for (name, value) in &self.headers {
            headers
                .append(name, value)
                .map_err(|e| format!("header {name}: {e:?}"))?;
        }
        let request = OutgoingRequest::new(headers);
        request
            .set_method(&method(&self.method))
            .map_err(|()| "invalid method")?;
        request
            .set_scheme(Some(&scheme_of(scheme)))
            .map_err(|()| "invalid scheme")?;
        request
            .set_authority(Some(authority))
            .map_err(|()| "invalid authority")?;
        request.set_path_with_query(Some(path)).map_err(|()| "invalid path")?;
        Ok(request)
    }

    fn write_body(&self, body: &OutgoingBody) -> Result<(), String> {
        let Some(bytes) = &self.body else { return Ok(()) };
        let stream = body.write().map_err(|()| "the request body stream was taken")?;
        for chunk in bytes.chunks(WRITE_CHUNK) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| format!("writing the request body: {}", stream_error(e)))?;
        }
        Ok(())
    }
}

fn method(name: &str) -> Method {
    match name.to_ascii_uppercase().as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "CONNECT" => Method::Connect,
        "OPTIONS" => Method::Options,
        "TRACE" => Method::Trace,
        "PATCH" => Method::Patch,
        _ => Method::Other(name.to_owned()),
    }
}

fn scheme_of(name: &str) -> Scheme {
    match name {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_owned()),
    }
}

/// An answer: its status and headers, and a body not yet read.
pub struct Response {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Body,
}

impl Response {
    fn new(response: IncomingResponse) -> Result<Self, String> {
        let status = response.status();
        let headers = response.headers().entries();
        let body = Body::new(response)?;
        Ok(Self { status, headers, body })
    }

    pub fn status(&self) -> u16 {
        self.status
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        let (_, value) = self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name))?;
        Some(value)
    }

    /// The body, to read piece by piece (an answer larger than the step's
    /// memory can still be read to its end).
    pub fn into_body(self) -> Body {
        self.body
    }

    /// The whole body.
    pub fn bytes(self) -> Result<Vec<u8>, HttpError> {
        let mut body = self.body;
        let mut all = Vec::new();
        while let Some(chunk) = body.chunk()? {
            all.extend_from_slice(&chunk);
        }
        Ok(all)
    }

    /// The whole body as text (invalid UTF-8 replaced).
    pub fn text(self) -> Result<String, HttpError> {
        Ok(String::from_utf8_lossy(&self.bytes()?).into_owned())
    }

    /// The whole body, decoded from JSON.
    pub fn json<T: DeserializeOwned>(self) -> Result<T, HttpError> {
        let bytes = self.bytes()?;
        serde_json::from_slice(&bytes).map_err(|e| HttpError::new(format!("the answer is not the JSON expected: {e}")))
    }
}

/// A response body being read. Its fields drop in the order wasi:http
/// requires: the stream, then the body, then the response they came from.
pub struct Body {
    stream: InputStream,
    _body: IncomingBody,
    _response: IncomingResponse,
    read: u64,
}

impl Body {
    fn new(response: IncomingResponse) -> Result<Self, String> {
        let body = response.consume().map_err(|()| "the answer's body was taken")?;
        let stream = body.stream().map_err(|()| "the answer's stream was taken")?;
        Ok(Self {
            stream,
            _body: body,
            _response: response,
            read: 0,
        })
    }

    /// The next piece of the body, or `None` at its end.
    pub fn chunk(&mut self) -> Result<Option<Vec<u8>>, HttpError> {
        match self.stream.blocking_read(READ_CHUNK) {
            Ok(chunk) => {
                self.read += chunk.len() as u64;
                Ok(Some(chunk))
            }
            Err(StreamError::Closed) => Ok(None),
            Err(e) => Err(HttpError::new(format!(
                "reading the answer after {} bytes: {}",
                self.read,
                stream_error(e)
            ))),
        }
    }
}

/// What went wrong with a stream, as the HTTP error code when it is one.
fn stream_error(error: StreamError) -> String {
    match error {
        StreamError::Closed => "the stream was closed".into(),
        StreamError::LastOperationFailed(e) => {
            wasi_http::http_error_code(&e).map_or_else(|| e.to_debug_string(), |code| format!("{code:?}"))
        }
    }
}

/// A request that could not be sent or answered: the message names the
/// request and the cause (wasi:http's error code when there is one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    message: String,
}

impl HttpError {
    fn new(message: String) -> Self {
        Self { message }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HttpError {}

/// A failed request is worth another attempt: the service may answer next
/// time. A step that knows better returns [`StepFailure::permanent`].
impl From<HttpError> for StepFailure {
    fn from(error: HttpError) -> Self {
        StepFailure::retryable(error.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_matched_in_any_case() {
        assert!(matches!(method("post"), Method::Post));
        assert!(matches!(method("PATCH"), Method::Patch));
        assert!(matches!(method("PURGE"), Method::Other(m) if m == "PURGE"));
    }

    #[test]
    fn a_json_body_says_its_type() {
        let request = Request::post("http://127.0.0.1:8099/charges")
            .json(&serde_json::json!({"cents": 1200}))
            .unwrap();
        assert_eq!(request.body.as_deref(), Some(&b"{\"cents\":1200}"[..]));
        assert!(
            request
                .headers
                .contains(&("content-type".into(), b"application/json".to_vec()))
        );
    }

    #[test]
    fn failed_requests_are_retryable_step_failures() {
        let failure = StepFailure::from(HttpError::new("GET http://x/: HttpRequestDenied".into()));
        assert!(!failure.is_permanent());
        assert_eq!(failure.message(), "GET http://x/: HttpRequestDenied");
    }
}
