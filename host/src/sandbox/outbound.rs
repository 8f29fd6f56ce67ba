//! Outgoing HTTP (`wasi:http/outgoing-handler`): which origins a tenant's
//! steps may reach, and the budget of one attempt's requests.
//!
//! Invariants: a request is checked before any connection is made, by its
//! scheme, host and port as the guest wrote them (no DNS lookup decides);
//! what is not allowed fails in the guest with `HTTP-request-denied`, and
//! the run's log names the origin refused. Workflows never reach the
//! network: their replays must see what their first execution saw. Every
//! request and response body is counted and cut off at its limit, and every
//! wait has a timeout inside the attempt's own deadline. A request body the
//! host stops reading early (a refusal, a connection that failed) is read
//! to its end, up to its limit, so the guest sees the request's error.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use crate::config::HttpLimits;
use crate::guest_log::{Level, LogWriter};

/// An origin a tenant's steps may reach: `https://api.example.com`,
/// `http://127.0.0.1:8099`, `https://*.example.com:443`. Without a port, the
/// scheme's (443, 80); `*.` matches one or more labels before the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedOrigin {
    scheme: String,
    host: HostPattern,
    port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Exactly(String),
    /// `*.suffix`: any host ending in `.suffix`.
    Below(String),
}

/// An entry of an allowlist that names no origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{entry}` is not an allowed origin: write SCHEME://HOST[:PORT] with scheme http or https, and no path (e.g. https://api.example.com, https://*.example.com:443)"
)]
pub struct InvalidOrigin {
    entry: String,
}

impl std::str::FromStr for AllowedOrigin {
    type Err = InvalidOrigin;

    fn from_str(entry: &str) -> Result<Self, InvalidOrigin> {
        let invalid = || InvalidOrigin {
            entry: entry.to_owned(),
        };
        let uri: http::Uri = entry.parse().map_err(|_| invalid())?;
        let default_port = match uri.scheme_str() {
            Some("http") => 80,
            Some("https") => 443,
            _ => return Err(invalid()),
        };
        let bare = uri.path_and_query().is_none_or(|path| path.as_str() == "/");
        let credentials = uri
            .authority()
            .is_some_and(|authority| authority.as_str().contains('@'));
        let host = uri.host().filter(|host| bare && !credentials && !host.is_empty());
        let host = host.ok_or_else(invalid)?;
        let host_len = host.len();
        let host = host.to_ascii_lowercase();
        let host = match host.strip_prefix("*.") {
            Some(suffix) if !suffix.is_empty() && !suffix.contains('*') => HostPattern::Below(suffix.to_owned()),
            None if !host.contains('*') => HostPattern::Exactly(host),
            _ => return Err(invalid()),
        };
        // Read from the text: `http` reads an out-of-range port as none.
        let written = uri.authority().map_or("", |authority| authority.as_str());
        let port = match written.get(host_len..).unwrap_or_default() {
            "" => default_port,
            port => port
                .strip_prefix(':')
                .and_then(|port| port.parse().ok())
                .ok_or_else(invalid)?,
        };
        Ok(Self {
            scheme: uri.scheme_str().unwrap_or_default().to_owned(),
            host,
            port,
        })
    }
}

impl AllowedOrigin {
    fn allows(&self, scheme: &str, host: &str, port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        let host_matches = match &self.host {
            HostPattern::Exactly(allowed) => host == *allowed,
            HostPattern::Below(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|labels| labels.len() > 1 && labels.ends_with('.')),
        };
        self.scheme == scheme && self.port == port && host_matches
    }
}

impl std::fmt::Display for AllowedOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = match &self.host {
            HostPattern::Exactly(host) => host.clone(),
            HostPattern::Below(suffix) => format!("*.{suffix}"),
        };
        write!(f, "{}://{host}:{}", self.scheme, self.port)
    }
}

/// The origins a tenant's steps may reach; by default, none. In a tenants
/// file, a list of origins (`allowed_outbound_hosts = ["https://api.example.com"]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct Outbound {
    origins: Vec<AllowedOrigin>,
}

impl From<Vec<AllowedOrigin>> for Outbound {
    fn from(origins: Vec<AllowedOrigin>) -> Self {
        Self { origins }
    }
}

impl TryFrom<Vec<String>> for Outbound {
    type Error = InvalidOrigin;

    fn try_from(entries: Vec<String>) -> Result<Self, InvalidOrigin> {
        Self::parse(&entries)
    }
}

impl From<Outbound> for Vec<String> {
    fn from(outbound: Outbound) -> Self {
        outbound.origins.iter().map(ToString::to_string).collect()
    }
}

impl Outbound {
    /// Parses each entry, naming the first that is not an origin.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, InvalidOrigin> {
        let origins = entries
            .iter()
            .map(|entry| entry.as_ref().parse())
            .collect::<Result<_, _>>()?;
        Ok(Self { origins })
    }

    /// Whether a request to `uri` may be sent.
    pub fn allows(&self, uri: &http::Uri) -> bool {
        let (Some(scheme), Some(host)) = (uri.scheme_str(), uri.host()) else {
            return false;
        };
        let port = uri.port_u16().unwrap_or(if scheme == "https" { 443 } else { 80 });
        self.origins.iter().any(|origin| origin.allows(scheme, host, port))
    }
}

/// What an attempt's outgoing HTTP came to, for the tenant's metrics.
#[derive(Debug, Default)]
pub struct HttpUsage {
    pub requests: AtomicU64,
    pub refused: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
}

/// The `wasi:http` hooks of one guest instance: a step's send what its
/// tenant allows within the attempt's limits; a workflow's (and a
/// component's describing itself) send nothing.
pub struct HttpHooks {
    /// `None`: the instance is not a step, and may send nothing.
    allowed: Option<Arc<Outbound>>,
    limits: HttpLimits,
    usage: Arc<HttpUsage>,
    log: LogWriter,
}

impl HttpHooks {
    /// The hooks of a step attempt.
    pub fn for_step(allowed: Arc<Outbound>, limits: HttpLimits, log: LogWriter) -> Self {
        Self {
            allowed: Some(allowed),
            limits,
            usage: Arc::default(),
            log,
        }
    }

    /// The hooks of an instance that sends nothing, logging each refusal
    /// into `log`.
    pub fn refusing(log: LogWriter) -> Self {
        Self {
            allowed: None,
            limits: HttpLimits::default(),
            usage: Arc::default(),
            log,
        }
    }

    pub fn usage(&self) -> Arc<HttpUsage> {
        self.usage.clone()
    }

    /// Why `request` may not be sent, if it may not.
    fn refusal(&self, uri: &http::Uri) -> Option<String> {
        let Some(allowed) = &self.allowed else {
            return Some(format!(
                "a workflow may not make HTTP requests (its replays must see what it saw): {uri} was refused; make the request in a step"
            ));
        };
        if !allowed.allows(uri) {
            let origin = uri.authority().map_or_else(String::new, ToString::to_string);
            let scheme = uri.scheme_str().unwrap_or("?");
            return Some(format!(
                "{scheme}://{origin} is not among the origins this tenant's steps may reach ({uri} was refused): the operator adds it to allowed_outbound_hosts"
            ));
        }
        let sent = self.usage.requests.load(Ordering::Relaxed);
        if sent >= u64::from(self.limits.max_requests) {
            return Some(format!(
                "the attempt has made its limit of {} HTTP requests ({uri} was refused)",
                self.limits.max_requests
            ));
        }
        None
    }

    /// The guest's timeouts, none longer than the tenant's.
    fn options(&self, asked: Option<RequestOptions>) -> RequestOptions {
        let asked = asked.unwrap_or_default();
        let within = |asked: Option<Duration>, limit: Duration| Some(asked.map_or(limit, |asked| asked.min(limit)));
        RequestOptions {
            connect_timeout: within(asked.connect_timeout, self.limits.connect_timeout),
            first_byte_timeout: within(asked.first_byte_timeout, self.limits.first_byte_timeout),
            between_bytes_timeout: within(asked.between_bytes_timeout, self.limits.first_byte_timeout),
        }
    }
}

type Sent = Box<dyn Future<Output = Result<(), HttpError>> + Send>;
type Answered = Box<dyn Future<Output = Result<(http::Response<WasiBody>, Sent), HttpError>> + Send>;

impl WasiHttpHooks for HttpHooks {
    fn send_request(&mut self, request: http::Request<WasiBody>, options: Option<RequestOptions>, _: Sent) -> Answered {
        let limits = self.limits;
        let request = request.map(|body| DrainedOnDrop::wrap(body, limits.max_request_bytes));
        if let Some(refusal) = self.refusal(request.uri()) {
            self.usage.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(target: crate::guest_log::TARGET, "{refusal}");
            self.log.host(Level::Warn, refusal);
            return Box::new(std::future::ready(Err(HttpError::HttpRequestDenied)));
        }
        self.usage.requests.fetch_add(1, Ordering::Relaxed);
        let options = self.options(options);
        let request = request.map(|body| counted(body, limits.max_request_bytes, self.usage.clone(), Direction::Sent));
        let usage = self.usage.clone();
        Box::new(async move {
            let (response, io) = wasmtime_wasi_http::default_send_request(request, Some(options)).await?;
            let response = response.map(|body| {
                counted(
                    body.boxed_unsync(),
                    limits.max_response_bytes,
                    usage,
                    Direction::Received,
                )
            });
            Ok((response, Box::new(io) as Sent))
        })
    }
}

/// A request body that, dropped before its end, has the rest read in the
/// background, up to `limit` bytes. A guest that writes its body after
/// sending, as StarlingMonkey's `fetch` does, then meets the request's error
/// (refused, connection refused) rather than a write to a body gone from
/// under it, which traps its event loop. The reading ends with the body: at
/// the guest's last write, or when its attempt's instance is dropped.
struct DrainedOnDrop {
    body: Option<WasiBody>,
    limit: u64,
}

impl DrainedOnDrop {
    fn wrap(body: WasiBody, limit: u64) -> WasiBody {
        Self {
            body: Some(body),
            limit,
        }
        .boxed_unsync()
    }
}

impl Body for DrainedOnDrop {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        match self.body.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for DrainedOnDrop {
    fn drop(&mut self) {
        let Some(body) = self.body.take().filter(|body| !body.is_end_stream()) else {
            return;
        };
        let limit = usize::try_from(self.limit).unwrap_or(usize::MAX);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let mut rest = Limited::new(body, limit);
                while let Some(Ok(_)) = rest.frame().await {}
            });
        }
    }
}

#[derive(Clone, Copy)]
enum Direction {
    Sent,
    Received,
}

/// `body`, counted into `usage` and cut off past `limit` bytes with the
/// error `wasi:http` names for a body too large.
fn counted(body: WasiBody, limit: u64, usage: Arc<HttpUsage>, direction: Direction) -> WasiBody {
    let count = move |frame: http_body::Frame<Bytes>| {
        if let Some(data) = frame.data_ref() {
            let counter = match direction {
                Direction::Sent => &usage.bytes_sent,
                Direction::Received => &usage.bytes_received,
            };
            counter.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        frame
    };
    let too_large = move |error: Box<dyn std::error::Error + Send + Sync>| match error.downcast::<HttpError>() {
        Ok(error) => *error,
        Err(_) => match direction {
            Direction::Sent => HttpError::HttpRequestBodySize(Some(limit)),
            Direction::Received => HttpError::HttpResponseBodySize(Some(limit)),
        },
    };
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    Limited::new(body.map_frame(count), limit)
        .map_err(too_large)
        .boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbound(entries: &[&str]) -> Outbound {
        Outbound::parse(entries).expect("valid origins")
    }

    fn allows(outbound: &Outbound, url: &str) -> bool {
        outbound.allows(&url.parse().expect("a valid URL"))
    }

    #[test]
    fn origins_match_by_scheme_host_and_port_as_written() {
        let list = outbound(&[
            "https://api.example.com",
            "http://127.0.0.1:8099",
            "https://*.example.org:8443",
        ]);
        assert!(allows(&list, "https://api.example.com/v1/charges?x=1"));
        assert!(allows(&list, "https://API.example.com:443/"));
        assert!(!allows(&list, "http://api.example.com/"), "another scheme");
        assert!(!allows(&list, "https://api.example.com:444/"), "another port");
        assert!(
            !allows(&list, "https://api.example.com.evil.net/"),
            "a suffix is not the host"
        );
        assert!(allows(&list, "http://127.0.0.1:8099/pay"));
        assert!(
            !allows(&list, "http://localhost:8099/pay"),
            "no lookup makes localhost 127.0.0.1"
        );
        assert!(allows(&list, "https://a.b.example.org:8443/"));
        assert!(
            !allows(&list, "https://example.org:8443/"),
            "the wildcard needs a label"
        );
        assert!(!allows(&list, "https://evilexample.org:8443/"));
        assert!(
            !allows(&Outbound::default(), "https://api.example.com/"),
            "nothing by default"
        );
    }

    #[test]
    fn entries_that_name_no_origin_are_refused_with_the_entry() {
        for bad in [
            "api.example.com",
            "ftp://x.org",
            "https://",
            "https://x.org:99999",
            "https://x.org/path",
            "https://a b",
            "https://user@x.org",
            "https://*.*.x.org",
        ] {
            let error = bad.parse::<AllowedOrigin>().expect_err(bad).to_string();
            assert!(error.contains(bad), "{error}");
        }
    }

    #[test]
    fn a_workflow_and_a_step_past_its_budget_send_nothing() {
        let log = LogWriter::nowhere();
        let uri: http::Uri = "http://127.0.0.1:8099/".parse().expect("a URI");
        let workflow = HttpHooks::refusing(log.clone());
        assert!(workflow.refusal(&uri).is_some_and(|why| why.contains("in a step")));
        let limits = HttpLimits {
            max_requests: 2,
            ..HttpLimits::default()
        };
        let step = HttpHooks::for_step(Arc::new(outbound(&["http://127.0.0.1:8099"])), limits, log);
        assert_eq!(step.refusal(&uri), None);
        step.usage.requests.store(2, Ordering::Relaxed);
        assert!(
            step.refusal(&uri)
                .is_some_and(|why| why.contains("limit of 2 HTTP requests"))
        );
    }

    #[test]
    fn a_guest_may_shorten_the_timeouts_never_lengthen_them() {
        let hooks = HttpHooks::for_step(Arc::default(), HttpLimits::default(), LogWriter::nowhere());
        let asked = RequestOptions {
            connect_timeout: Some(Duration::from_secs(3600)),
            first_byte_timeout: Some(Duration::from_millis(10)),
            between_bytes_timeout: None,
        };
        let given = hooks.options(Some(asked));
        assert_eq!(given.connect_timeout, Some(HttpLimits::default().connect_timeout));
        assert_eq!(given.first_byte_timeout, Some(Duration::from_millis(10)));
        assert_eq!(
            given.between_bytes_timeout,
            Some(HttpLimits::default().first_byte_timeout)
        );
    }
}
