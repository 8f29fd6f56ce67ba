//! How long a connection may hold the host without asking for anything:
//! until its first request begins, [`FIRST_REQUEST_WITHIN`]; once it has
//! asked, [`IDLE_FOR`] with no request in flight. On HTTP/1 and HTTP/2
//! alike, whatever bytes it sends meanwhile (a version preface, pings, a
//! head never finished): only requests count.
//!
//! Invariant: a request is in flight from the moment the router is called
//! until its response body has been sent or dropped, so a long answer (a
//! stream of events, a slow download) is never cut as idle; and a
//! connection with none in flight is closed once its time has passed.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use futures::future::BoxFuture;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::watch;
use tokio::time::Instant;

/// How long a new connection may take to begin its first request: as long
/// as a request's head may take to arrive.
pub const FIRST_REQUEST_WITHIN: Duration = super::listener::HEADER_READ_TIMEOUT;
/// How long a connection that has asked before may wait with no request in
/// flight: a client keeps it for its next request that long.
pub const IDLE_FOR: Duration = Duration::from_secs(60);

/// What a connection is doing: requests in flight, since when it has had
/// none, and whether it ever had one.
#[derive(Debug, Clone, Copy)]
struct State {
    in_flight: usize,
    idle_since: Instant,
    asked: bool,
}

/// One connection's requests, as its router sees them.
#[derive(Debug)]
pub struct Activity(watch::Sender<State>);

/// A request in flight: it ends when this is dropped.
#[derive(Debug)]
struct InFlight(Arc<Activity>);

impl Activity {
    /// A connection accepted now, with no request yet.
    pub fn new() -> Arc<Self> {
        let state = State {
            in_flight: 0,
            idle_since: Instant::now(),
            asked: false,
        };
        Arc::new(Self(watch::Sender::new(state)))
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        self.0.send_modify(|state| {
            state.in_flight += 1;
            state.asked = true;
        });
        InFlight(Arc::clone(self))
    }

    /// Resolves once the connection has been idle past its time (see the
    /// module doc).
    pub async fn idle(&self) {
        let mut changes = self.0.subscribe();
        loop {
            let state = *changes.borrow_and_update();
            let allowed = if state.asked { IDLE_FOR } else { FIRST_REQUEST_WITHIN };
            tokio::select! {
                () = tokio::time::sleep_until(state.idle_since + allowed), if state.in_flight == 0 => return,
                // The sender lives as long as `self`: a change is all this waits for.
                _ = changes.changed() => {}
            }
        }
    }

    /// `router`, with each request it serves counted in flight here until
    /// its response body is done.
    pub fn serving(self: &Arc<Self>, router: Router, source: SocketAddr) -> Counted {
        Counted {
            router,
            activity: Arc::clone(self),
            source,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.0.send_modify(|state| {
            state.in_flight -= 1;
            if state.in_flight == 0 {
                state.idle_since = Instant::now();
            }
        });
    }
}

/// A router whose requests count in flight on their connection, and
/// carry the connection's peer (`ConnectInfo`).
#[derive(Clone)]
pub struct Counted {
    router: Router,
    activity: Arc<Activity>,
    source: SocketAddr,
}

impl<B> tower::Service<http::Request<B>> for Counted
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        tower::Service::<http::Request<B>>::poll_ready(&mut self.router, cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        request.extensions_mut().insert(ConnectInfo(self.source));
        let in_flight = self.activity.begin();
        let answer = self.router.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| {
                Body::new(Answering {
                    body,
                    _in_flight: in_flight,
                })
            }))
        })
    }
}

/// A response body that keeps its request in flight until it is done.
struct Answering {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for Answering {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the connection is found idle within `within`.
    async fn idle_within(activity: &Activity, within: Duration) -> bool {
        tokio::time::timeout(within, activity.idle()).await.is_ok()
    }

    /// A response whose body is still being sent (a stream of events)
    /// keeps its request in flight, however long; it ends when the body
    /// is dropped.
    #[tokio::test(start_paused = true)]
    async fn a_request_is_in_flight_until_its_response_body_is_done() {
        use tower::ServiceExt;
        let (send, receive) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let receive = Arc::new(std::sync::Mutex::new(Some(receive)));
        let router = Router::new().route(
            "/events",
            axum::routing::get(move || {
                let events = receive.lock().expect("unpoisoned").take().expect("asked once");
                let events = futures::stream::unfold(events, |mut events| async move {
                    events.recv().await.map(|event| (event, events))
                });
                std::future::ready(Body::from_stream(events))
            }),
        );
        let activity = Activity::new();
        let request = http::Request::get("/events").body(Body::empty()).expect("a request");
        let response = activity
            .serving(router, ([127, 0, 0, 1], 80).into())
            .oneshot(request)
            .await
            .expect("an answer");
        send.send(Ok(Bytes::from("event"))).await.expect("sent");
        assert!(
            !idle_within(&activity, IDLE_FOR * 10).await,
            "the body is still being sent"
        );
        drop(response);
        assert!(idle_within(&activity, IDLE_FOR + Duration::from_millis(1)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_past_its_first_request_time_and_then_past_its_idle_time() {
        let silent = Activity::new();
        assert!(!idle_within(&silent, FIRST_REQUEST_WITHIN - Duration::from_millis(1)).await);
        assert!(idle_within(&silent, Duration::from_millis(2)).await);

        let asking = Activity::new();
        let request = asking.begin();
        assert!(
            !idle_within(&asking, IDLE_FOR * 10).await,
            "a request in flight is never idle"
        );
        drop(request);
        assert!(!idle_within(&asking, IDLE_FOR - Duration::from_millis(1)).await);
        let again = asking.begin();
        drop(again);
        assert!(
            !idle_within(&asking, IDLE_FOR - Duration::from_millis(1)).await,
            "counted from the last request"
        );
        assert!(idle_within(&asking, Duration::from_millis(2)).await);
    }
}
