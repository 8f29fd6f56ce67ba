//! Outgoing HTTP (`wasi:http/outgoing-handler`) of a guest: a step's
//! requests, sent through the host's [`Egress`] within one attempt's
//! budget; a workflow's, refused.
//!
//! Invariants: where a request may go is decided by [`Egress`] (its
//! allowlist, then its address) before any connection is made; what is not
//! allowed fails in the guest (`HTTP-request-denied` for an origin off the
//! list, `destination-IP-prohibited` for an address), and the run's log
//! names the origin refused and what to change to allow it, as does the
//! attempt's failure if it fails. Workflows never reach the
//! network: their replays must see what their first execution saw. Every
//! request and response body is counted and cut off at its limit, and every
//! wait has a timeout inside the attempt's own deadline. A request body the
//! host stops reading early (a refusal, a connection that failed) is read
//! to its end, up to its limit, so the guest sees the request's error.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use crate::config::HttpLimits;
use crate::egress::{Egress, Outbound, Refusal, SendError, Timeouts, origin_of};
use crate::guest_log::{Level, LogWriter};
use crate::shared_map::lock;

/// What an attempt's outgoing HTTP came to: counts for the tenant's
/// metrics, and the first request the host refused, for the attempt's
/// failure.
#[derive(Debug, Default)]
pub struct HttpUsage {
    /// Requests sent, or tried and failed on the way; refused ones are not counted.
    pub requests: AtomicU64,
    /// Requests the host refused: off the allowlist, to an address not allowed,
    /// over the attempt's request limit, or made by a workflow.
    pub refused: AtomicU64,
    /// Bytes of request bodies sent, over every request.
    pub bytes_sent: AtomicU64,
    /// Bytes of response bodies received, over every request.
    pub bytes_received: AtomicU64,
    first_refusal: Mutex<Option<String>>,
}

impl HttpUsage {
    /// Why the host refused the attempt's first refused request, and what
    /// to change to allow it.
    pub fn first_refusal(&self) -> Option<String> {
        lock(&self.first_refusal).clone()
    }

    /// Counts a refusal, says why in the host's and the run's logs, and
    /// keeps it if it is the attempt's first.
    fn refuse(&self, log: &LogWriter, why: String) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(target: crate::guest_log::TARGET, "{why}");
        log.host(Level::Warn, why.clone());
        lock(&self.first_refusal).get_or_insert(why);
    }
}

/// Where a step's requests go: out through the host's egress, to what its
/// tenant allows.
struct StepReach {
    egress: Arc<Egress>,
    allowed: Arc<Outbound>,
}

/// The `wasi:http` hooks of one guest instance: a step's send what its
/// tenant allows within the attempt's limits; a workflow's (and a
/// component's describing itself) send nothing.
pub struct HttpHooks {
    /// `None`: the instance is not a step, and may send nothing.
    reach: Option<StepReach>,
    limits: HttpLimits,
    usage: Arc<HttpUsage>,
    log: LogWriter,
}

impl HttpHooks {
    /// The hooks of a step attempt, whose requests leave through `egress`
    /// to what `allowed` lets them reach.
    pub fn for_step(egress: Arc<Egress>, allowed: Arc<Outbound>, limits: HttpLimits, log: LogWriter) -> Self {
        Self {
            reach: Some(StepReach { egress, allowed }),
            limits,
            usage: Arc::default(),
            log,
        }
    }

    /// The hooks of an instance that sends nothing, logging each refusal
    /// into `log`.
    pub fn refusing(log: LogWriter) -> Self {
        Self {
            reach: None,
            limits: HttpLimits::default(),
            usage: Arc::default(),
            log,
        }
    }

    pub fn usage(&self) -> Arc<HttpUsage> {
        self.usage.clone()
    }

    /// Why a request to `uri` may not even be tried, if it may not.
    fn refusal(&self, uri: &http::Uri) -> Option<String> {
        let origin = origin_of(uri);
        if self.reach.is_none() {
            return Some(format!(
                "a workflow may not make HTTP requests (its replays must see what it saw): a request to {origin} was refused; make the request in a step"
            ));
        }
        let sent = self.usage.requests.load(Ordering::Relaxed);
        if sent >= u64::from(self.limits.max_requests) {
            return Some(format!(
                "the attempt has made its limit of {} HTTP requests (a request to {origin} was refused)",
                self.limits.max_requests
            ));
        }
        None
    }

    /// The guest's timeouts, none longer than the tenant's.
    fn timeouts(&self, asked: Option<RequestOptions>) -> Timeouts {
        let asked = asked.unwrap_or_default();
        let within = |asked: Option<Duration>, limit: Duration| asked.map_or(limit, |asked| asked.min(limit));
        Timeouts {
            connect: within(asked.connect_timeout, self.limits.connect_timeout),
            first_byte: within(asked.first_byte_timeout, self.limits.first_byte_timeout),
            between_bytes: within(asked.between_bytes_timeout, self.limits.first_byte_timeout),
        }
    }
}

type Sent = Box<dyn Future<Output = Result<(), HttpError>> + Send>;
type Answered = Box<dyn Future<Output = Result<(http::Response<WasiBody>, Sent), HttpError>> + Send>;

impl WasiHttpHooks for HttpHooks {
    fn send_request(&mut self, request: http::Request<WasiBody>, options: Option<RequestOptions>, _: Sent) -> Answered {
        let limits = self.limits;
        let request = request.map(|body| DrainedOnDrop::wrap(body, limits.max_request_bytes));
        let reach = match (&self.reach, self.refusal(request.uri())) {
            (Some(reach), None) => (reach.egress.clone(), reach.allowed.clone()),
            (_, refusal) => {
                self.usage.refuse(&self.log, refusal.unwrap_or_default());
                return Box::new(std::future::ready(Err(HttpError::HttpRequestDenied)));
            }
        };
        self.usage.requests.fetch_add(1, Ordering::Relaxed);
        let timeouts = self.timeouts(options);
        let request = request.map(|body| counted(body, limits.max_request_bytes, self.usage.clone(), Direction::Sent));
        let (usage, log) = (self.usage.clone(), self.log.clone());
        Box::new(async move {
            let (egress, allowed) = reach;
            let (response, connection) = match egress.send(&allowed, request, timeouts).await {
                Ok(sent) => sent,
                Err(SendError::Http(error)) => return Err(error),
                Err(SendError::Refused(refusal)) => {
                    usage.requests.fetch_sub(1, Ordering::Relaxed);
                    usage.refuse(&log, format!("{refusal}: {}", egress.setting().how_to_allow(&refusal)));
                    return Err(match refusal {
                        Refusal::Origin { .. } => HttpError::HttpRequestDenied,
                        Refusal::Address { .. } => HttpError::DestinationIpProhibited,
                    });
                }
            };
            let response = response.map(|body| {
                counted(
                    body.boxed_unsync(),
                    limits.max_response_bytes,
                    usage,
                    Direction::Received,
                )
            });
            Ok((response, Box::new(connection) as Sent))
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
        let allowed = Outbound::parse(&["http://127.0.0.1:8099"]).expect("valid origins");
        let step = HttpHooks::for_step(Arc::default(), Arc::new(allowed), limits, log);
        assert_eq!(step.refusal(&uri), None);
        step.usage.requests.store(2, Ordering::Relaxed);
        assert!(
            step.refusal(&uri)
                .is_some_and(|why| why.contains("limit of 2 HTTP requests"))
        );
    }

    #[test]
    fn a_guest_may_shorten_the_timeouts_never_lengthen_them() {
        let hooks = HttpHooks::for_step(
            Arc::default(),
            Arc::default(),
            HttpLimits::default(),
            LogWriter::nowhere(),
        );
        let asked = RequestOptions {
            connect_timeout: Some(Duration::from_secs(3600)),
            first_byte_timeout: Some(Duration::from_millis(10)),
            between_bytes_timeout: None,
        };
        let given = hooks.timeouts(Some(asked));
        assert_eq!(given.connect, HttpLimits::default().connect_timeout);
        assert_eq!(given.first_byte, Duration::from_millis(10));
        assert_eq!(given.between_bytes, HttpLimits::default().first_byte_timeout);
    }
}
