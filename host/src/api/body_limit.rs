//! How large a request's body may be: the size of what its route accepts
//! (a component, a run's input, a signal's payload, a secret's value), by
//! the caller's quotas, checked before any of it is parsed.
//!
//! Invariant: no `/v1` route reads more than its limit, and the bodies
//! read stay within the host's budget (see [`super::body_budget`]). A `Content-Length`
//! over it is refused before the body is read; a body that grows past it
//! is refused as soon as it does; both answer 413 naming the limit. Every
//! route that reads a body says what it accepts ([`limited`]); those that
//! take options only take at most [`SMALL_BODY`] bytes, as does any other.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, DefaultBodyLimit, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use bytes::{Bytes, BytesMut};
use http_body::Frame;
use http_body_util::BodyExt;

use super::ApiState;
use super::admission::source_of;
use super::auth::Caller;
use super::body_budget::{Holder, OverBudget};
use super::error::ApiError;
use super::hook_check;
use crate::policy::TenantPolicy;
use crate::runtime::MAX_GROUP_RUNS;
use crate::schedules::MAX_SCHEDULE_INPUT_BYTES;
use crate::secrets::MAX_SECRET_CHARS;

/// The body of a route that takes options only: a cancel's reason, a
/// replay's or an upgrade's options.
pub const SMALL_BODY: usize = 64 << 10;
/// What a run's fields other than its input may add to its body (its
/// component, workflow, id, tags, notify URL, links, options).
pub const RUN_FIELDS_BYTES: usize = 16 << 10;
/// How much of a refused body is read and dropped, at most, so that its
/// client reads the refusal; and for how long.
const LINGER_BYTES: usize = 16 << 20;
const LINGER: Duration = Duration::from_secs(10);
/// What each run of a group may add beyond the group's inputs, which
/// together are held to one payload's quota.
pub const GROUP_RUN_FIELDS_BYTES: usize = 2 << 10;

/// What a route's body holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepts {
    /// A component's bytes (`max_component_bytes`).
    Component,
    /// A run's input and its fields (`max_payload_bytes` and
    /// [`RUN_FIELDS_BYTES`]).
    Run,
    /// A schedule of runs: its input
    /// ([`MAX_SCHEDULE_INPUT_BYTES`], within `max_payload_bytes`) and the
    /// fields of a run.
    Schedule,
    /// A group's runs: their inputs within one `max_payload_bytes`, and
    /// [`GROUP_RUN_FIELDS_BYTES`] a run for the rest.
    Group,
    /// A signal's payload itself (`max_payload_bytes`).
    Payload,
    /// A secret's value ([`MAX_SECRET_CHARS`] characters of UTF-8).
    Secret,
    /// Options only ([`SMALL_BODY`]).
    Small,
    /// A request to a tenant's HTTP hook, `/hooks/{tenant}/{name}`, which
    /// becomes a run's input: the `max_payload_bytes` of the tenant the
    /// path names (no caller is known).
    HookRequest,
}

impl Accepts {
    /// The most bytes a body of this kind may hold under `policy`.
    pub fn limit(self, policy: &TenantPolicy) -> usize {
        match self {
            Self::Component => policy.components.max_bytes,
            Self::Run => policy.max_payload_bytes.saturating_add(RUN_FIELDS_BYTES),
            Self::Schedule => (policy.max_payload_bytes)
                .min(MAX_SCHEDULE_INPUT_BYTES)
                .saturating_add(RUN_FIELDS_BYTES),
            Self::Group => policy
                .max_payload_bytes
                .saturating_add(MAX_GROUP_RUNS.saturating_mul(GROUP_RUN_FIELDS_BYTES)),
            Self::Payload | Self::HookRequest => policy.max_payload_bytes,
            Self::Secret => MAX_SECRET_CHARS * char::MAX_LEN_UTF8,
            Self::Small => SMALL_BODY,
        }
    }

    /// What the limit is made of, for the 413's message.
    fn made_of(self) -> &'static str {
        match self {
            Self::Component => "the tenant's max_component_bytes",
            Self::Run => "the tenant's max_payload_bytes for the input, and 16 KiB for the run's other fields",
            Self::Schedule => "1 MiB or the tenant's max_payload_bytes for the input, and 16 KiB for the other fields",
            Self::Group => "the tenant's max_payload_bytes for the runs' inputs together, and 2 KiB a run for the rest",
            Self::Payload | Self::HookRequest => "the tenant's max_payload_bytes",
            Self::Secret => "the longest secret value, its characters taken at 4 bytes",
            Self::Small => "this endpoint takes options only",
        }
    }
}

/// `route`, reading a body of what it `accepts` within its caller's limit.
pub fn limited(route: MethodRouter<ApiState>, state: &ApiState, accepts: Accepts) -> MethodRouter<ApiState> {
    route
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state((state.clone(), accepts), read_within))
}

/// Reads the body within the limit of what the route accepts from its
/// caller (an unknown caller, whose request is refused anyway, gets
/// [`SMALL_BODY`]), then hands the request on with the body read. A hook
/// request is first checked as far as it can be unread
/// ([`hook_check::admit`]; refused unread if not), its body then held as
/// anonymous, and what was checked handed on with it.
async fn read_within(State((state, accepts)): State<(ApiState, Accepts)>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let (holder, tenant) = match accepts {
        Accepts::HookRequest => match hook_check::admit(&state, parts.uri.path(), &parts.headers).await {
            Ok(admitted) => {
                let tenant = admitted.tenant.clone();
                parts.extensions.insert(admitted);
                (Holder::Anonymous(source_of_request(&parts)), Some(tenant))
            }
            Err(refusal) => return refused(body, refusal.into_response()),
        },
        _ => match Caller::from_request_parts(&mut parts, &state).await {
            Ok(Caller(tenant)) => (Holder::Tenant(tenant.id.clone()), Some(tenant.id.clone())),
            Err(_) => (Holder::Unknown, None),
        },
    };
    let limit = tenant
        .as_ref()
        .map_or(SMALL_BODY, |tenant| accepts.limit(&state.runtime().policy(tenant)));
    let over = || too_large(limit, accepts.made_of());
    let announced = parts.headers.get(header::CONTENT_LENGTH);
    let announced = announced.and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|length| length > limit as u64) {
        return refused(body, over());
    }
    let mut body = body;
    // Held until the request is answered: what its handler parses and
    // keeps of the body is of its size.
    let mut held = state.bodies.body(holder, limit);
    let mut read = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let data = match frame.map(Frame::into_data) {
            Ok(Ok(data)) => data,
            Ok(Err(_trailers)) => continue,
            Err(e) => return ApiError::bad_request(format!("cannot read the body: {e}")).into_response(),
        };
        if read.len().saturating_add(data.len()) > limit {
            return refused(body, over());
        }
        if let Err(full) = held.grow(data.len()) {
            return refused(body, busy(full));
        }
        read.extend_from_slice(&data);
    }
    next.run(Request::from_parts(parts, Body::from(read.freeze()))).await
}

/// The source a request's anonymous body counts against: its peer's
/// address, or its /64 (the unspecified address for a request that came
/// through no listener, as in a test).
fn source_of_request(parts: &Parts) -> IpAddr {
    let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>();
    peer.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |ConnectInfo(peer)| {
        source_of(peer.ip())
    })
}

/// The refusal `response`, with the connection closed after it and the
/// rest of `body` read and dropped meanwhile (at most [`LINGER_BYTES`],
/// for at most [`LINGER`], as a server's lingering close does): a client
/// still sending the body then reads the answer, not a reset.
fn refused(mut body: Body, mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    crate::task::spawn(async move {
        let discard = async {
            let mut left = LINGER_BYTES;
            while let Some(Ok(frame)) = body.frame().await {
                left = left.saturating_sub(frame.data_ref().map_or(0, Bytes::len));
                if left == 0 {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(LINGER, discard).await;
    });
    response
}

/// 429 or 503, naming the bound the bodies in flight reached, with a
/// `Retry-After`.
fn busy(full: OverBudget) -> Response {
    let (status, message) = match full {
        OverBudget::Tenant { limit } => (
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "your requests' bodies being read or handled here hold {limit} bytes, the most one tenant's may: send fewer large bodies at once, or retry shortly"
            ),
        ),
        OverBudget::Host { limit } => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the bodies of the requests this host is reading or handling hold {limit} bytes, the most it holds: retry shortly"
            ),
        ),
        OverBudget::Source { limit } => (
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "hook requests from your address being read or handled hold {limit} bytes, the most one address's may before their signatures are checked: send fewer large bodies at once, or retry shortly"
            ),
        ),
        OverBudget::Anonymous { limit } => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "hook requests being read or handled here hold {limit} bytes, the most this host holds before their signatures are checked: retry shortly"
            ),
        ),
    };
    let mut response = ApiError::new(status, message).into_response();
    (response.headers_mut()).insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// 413, naming the limit and what it is made of.
fn too_large(limit: usize, made_of: &str) -> Response {
    let message = format!("the body is over this endpoint's limit of {limit} bytes ({made_of}): send less");
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenancy::Quotas;

    #[test]
    fn each_limit_is_what_its_route_accepts_and_never_overflows() {
        let quotas = Quotas {
            max_payload_bytes: 1000,
            max_component_bytes: 5000,
            ..Quotas::default()
        }
        .policy();
        assert_eq!(Accepts::Payload.limit(&quotas), 1000);
        assert_eq!(Accepts::Run.limit(&quotas), 1000 + RUN_FIELDS_BYTES);
        assert_eq!(Accepts::Component.limit(&quotas), 5000);
        assert_eq!(Accepts::Secret.limit(&quotas), 4 * MAX_SECRET_CHARS);
        let unbounded = Quotas {
            max_payload_bytes: usize::MAX,
            ..Quotas::default()
        }
        .policy();
        assert_eq!(Accepts::Group.limit(&unbounded), usize::MAX);
    }
}
