//! Serving a router on a listener: HTTP/1 and HTTP/2 over hyper, every
//! connection admitted within its source's share ([`super::admission`]),
//! and given a bounded time to ask for something ([`super::idle`]) and to
//! send a request's head.
//!
//! Invariant: a connection that has not sent a whole request head within
//! [`HEADER_READ_TIMEOUT`] is closed (a slowloris client holds a socket no
//! longer than that), as is one that has begun no request that long, or
//! had none in flight for [`super::idle::IDLE_FOR`]; a request once read
//! is bounded by the API's own request timeout.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use super::admission::Admission;
use super::idle::Activity;

/// How long a client may take to send a request's head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a failed accept (say, out of file descriptors) waits before the
/// next, so that the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `shutdown` ends, then lets the
/// requests in flight finish; keeps the connections `admission` admits.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
    admission: Arc<Admission>,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, source) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("cannot accept a connection: {e}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        // Over its source's share, or the total: closed unread, and not
        // logged one by one (a flood would flood the log).
        let Some(admitted) = admission.admit(source.ip()) else {
            continue;
        };
        let activity = Activity::new();
        let service = TowerToHyperService::new(activity.serving(router.clone(), source));
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
        let connection = graceful.watch(connection.into_owned());
        crate::task::spawn(async move {
            let _admitted = admitted;
            tokio::select! {
                ended = connection => if let Err(e) = ended {
                    tracing::debug!("a connection ended with an error: {e}");
                },
                () = activity.idle() => tracing::debug!(%source, "closing a connection that asks for nothing"),
            }
        });
    }
    graceful.shutdown().await;
}
