//! The host's one way out to the network. Every request a tenant causes, a
//! step's `wasi:http` request or a completion webhook, leaves through
//! [`Egress::send`]: checked against the tenant's allowlist, its host
//! resolved once, its addresses checked, and sent to an address that was
//! checked.
//!
//! Invariants:
//! - A request whose origin (scheme, host, port as written) is not on the
//!   tenant's allowlist is refused before any lookup or connection.
//! - A host is resolved once per request, here ([`Resolver`]), and the
//!   connection goes to one of the addresses that lookup returned: no
//!   second lookup, so DNS rebinding gains nothing.
//! - An address that is not global (loopback, private, link-local with the
//!   cloud metadata service, unique-local, CGNAT, multicast, unspecified,
//!   documentation, and their IPv4-mapped and -compatible forms: see
//!   [`non_global`]) is refused unless an entry of the allowlist names that
//!   very address as an IP literal. A name the tenant controls therefore
//!   reaches nothing inside the host's network.
//! - A redirect is never followed: the 3xx answer is the request's answer.
//! - Every wait (lookup, connect, TLS, first byte, each next byte) has a
//!   timeout.

mod address;
mod allowlist;
mod resolve;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use wasmtime_wasi_http::Error as HttpError;

pub use address::non_global;
pub use allowlist::{AllowedOrigin, InvalidOrigin, Outbound, ip_literal, origin_of};
pub use resolve::{HostsFileError, LookupError, Resolver};

/// Where the operator sets a tenant's allowlist, for this host: what a
/// refusal tells the author to change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AllowlistSetting {
    /// `allowed_outbound_hosts` in the tenant's quotas (`stepstone serve`).
    #[default]
    TenantsFile,
    /// `--allow-outbound` on the command line (`stepstone run`).
    Flag,
}

impl AllowlistSetting {
    /// What to change so that `origin` (or, for an address refusal, the
    /// address) is allowed.
    pub(crate) fn how_to_allow(self, refusal: &Refusal) -> String {
        let entry = refusal.entry();
        match self {
            Self::TenantsFile => {
                format!("the operator adds `{entry}` to the tenant's allowed_outbound_hosts in the tenants file")
            }
            Self::Flag => format!("add `--allow-outbound {entry}` to the command"),
        }
    }
}

/// What the host's outgoing requests are configured with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressConfig {
    /// Names resolved from this file (hosts(5) format) before the system's
    /// resolver: the operator's pins, and a test's resolver.
    pub hosts_file: Option<PathBuf>,
    /// Where this host's allowlists are set.
    pub setting: AllowlistSetting,
}

/// Why a request was not sent: the tenant may not reach where it goes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The request's origin is not on the tenant's allowlist: nothing was
    /// looked up or sent.
    #[error("{origin} is not among the origins this tenant may reach")]
    Origin {
        /// The origin refused, `scheme://host:port`.
        origin: String,
    },
    /// The origin is allowed, but every address it resolved to is not
    /// global and not named on the allowlist; this is the first of them.
    #[error(
        "{origin} resolves to {address}, a {class} address, which a tenant reaches only where its allowlist names that address as an IP literal"
    )]
    Address {
        /// The origin requested, `scheme://host:port`.
        origin: String,
        /// The address refused, in its canonical form (IPv4 if IPv4-mapped).
        address: IpAddr,
        /// Why the address is not global, in words (see [`non_global`]).
        class: &'static str,
    },
}

impl Refusal {
    /// The allowlist entry that would let the request through.
    fn entry(&self) -> String {
        match self {
            Self::Origin { origin } => origin.clone(),
            Self::Address { origin, address, .. } => {
                let scheme = origin.split("://").next().unwrap_or("http");
                let port = origin.rsplit(':').next().unwrap_or_default();
                match address {
                    IpAddr::V4(v4) => format!("{scheme}://{v4}:{port}"),
                    IpAddr::V6(v6) => format!("{scheme}://[{v6}]:{port}"),
                }
            }
        }
    }
}

/// Why a request failed.
#[derive(Debug)]
pub enum SendError {
    /// Refused by the host: nothing was sent.
    Refused(Refusal),
    /// Sent, or tried, and failed on the way.
    Http(HttpError),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(refusal) => write!(f, "refused: {refusal}"),
            Self::Http(error) => write!(f, "{error}"),
        }
    }
}

impl From<HttpError> for SendError {
    fn from(error: HttpError) -> Self {
        Self::Http(error)
    }
}

/// How long each wait of a request may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// The lookup, the connection, and the TLS and HTTP handshakes, each.
    pub connect: Duration,
    /// The response's head.
    pub first_byte: Duration,
    /// Each next frame of the response's body.
    pub between_bytes: Duration,
}

/// What drives a request's connection once its response head is in: the
/// caller polls it while it reads the body.
pub type Connection = Pin<Box<dyn Future<Output = Result<(), HttpError>> + Send>>;

/// The host's outgoing requests: one resolver and one TLS configuration
/// for every tenant.
#[derive(Debug, Default)]
pub struct Egress {
    resolver: Resolver,
    setting: AllowlistSetting,
}

trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

impl Egress {
    /// The host's egress, resolving names from `config`'s hosts file first
    /// if it names one.
    pub fn new(config: &EgressConfig) -> Result<Self, HostsFileError> {
        Ok(Self {
            resolver: Resolver::new(config.hosts_file.as_deref())?,
            setting: config.setting,
        })
    }

    /// Where this host's allowlists are set.
    pub fn setting(&self) -> AllowlistSetting {
        self.setting
    }

    /// Sends `request` where `allowed` lets it go (see the module's
    /// invariants), answering its response head and the connection to
    /// drive while its body is read.
    pub async fn send<B>(
        &self,
        allowed: &Outbound,
        mut request: Request<B>,
        timeouts: Timeouts,
    ) -> Result<(Response<ResponseBody>, Connection), SendError>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let uri = request.uri().clone();
        if !allowed.allows(&uri) {
            return Err(SendError::Refused(Refusal::Origin {
                origin: origin_of(&uri),
            }));
        }
        let host = uri.host().ok_or(HttpError::HttpRequestUriInvalid)?;
        let https = uri.scheme_str() == Some("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tcp = self.connect(allowed, &uri, host, port, timeouts.connect).await?;
        let stream: Box<dyn Stream> = if https {
            Box::new(tls_handshake(host, tcp, timeouts.connect).await?)
        } else {
            Box::new(tcp)
        };
        let handshake = hyper::client::conn::http1::handshake(TokioIo::new(stream));
        let (mut sender, connection) = tokio::time::timeout(timeouts.connect, handshake)
            .await
            .map_err(|_| HttpError::ConnectionTimeout)?
            .map_err(HttpError::from)?;
        // Sent to the origin itself, not to a proxy: the path alone.
        let path = uri.path_and_query().map_or("/", |path| path.as_str());
        *request.uri_mut() = http::Uri::try_from(path).map_err(|_| HttpError::HttpRequestUriInvalid)?;
        let head = async move {
            let response = tokio::time::timeout(timeouts.first_byte, sender.send_request(request))
                .await
                .map_err(|_| HttpError::ConnectionReadTimeout)?
                .map_err(HttpError::from)?;
            Ok(response.map(|body| ResponseBody::new(body, timeouts.between_bytes)))
        };
        Ok(driving(head, connection).await?)
    }

    /// A connection to an address of `host` that `allowed` lets the tenant
    /// reach: its one lookup's addresses, tried in order.
    async fn connect(
        &self,
        allowed: &Outbound,
        uri: &http::Uri,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<TcpStream, SendError> {
        let found = match ip_literal(host) {
            Some(address) => vec![SocketAddr::new(address, port)],
            None => self.resolver.lookup(host, port, timeout).await.map_err(|e| match e {
                LookupError::Timeout { .. } => HttpError::DnsTimeout,
                LookupError::NotFound { reason, .. } => HttpError::DnsError {
                    rcode: Some(reason),
                    info_code: None,
                },
            })?,
        };
        let mut refused = None;
        let reachable: Vec<SocketAddr> = found
            .into_iter()
            .filter(|found| match non_global(found.ip()) {
                Some(class) if !allowed.names_address(found.ip()) => {
                    refused.get_or_insert(Refusal::Address {
                        origin: origin_of(uri),
                        address: found.ip().to_canonical(),
                        class,
                    });
                    false
                }
                _ => true,
            })
            .collect();
        if reachable.is_empty() {
            return Err(SendError::Refused(
                refused.unwrap_or(Refusal::Origin { origin: origin_of(uri) }),
            ));
        }
        let connected = async {
            let mut failed = None;
            for address in reachable {
                match TcpStream::connect(address).await {
                    Ok(stream) => return Ok(stream),
                    Err(e) => failed = Some(e),
                }
            }
            Err(failed.unwrap_or_else(|| std::io::ErrorKind::NotFound.into()))
        };
        match tokio::time::timeout(timeout, connected).await {
            Ok(stream) => Ok(stream.map_err(HttpError::Connect)?),
            Err(_) => Err(HttpError::ConnectionTimeout.into()),
        }
    }
}

/// TLS over `tcp` to `host`, its certificate checked against the web's
/// roots (compiled in: the host needs no system store).
async fn tls_handshake(
    host: &str,
    tcp: TcpStream,
    timeout: Duration,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, HttpError> {
    let config = tls_config()
        .as_ref()
        .map_err(|e| HttpError::InternalError(Some(e.clone())))?;
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let name = rustls::pki_types::ServerName::try_from(bare.to_owned()).map_err(HttpError::InvalidDnsNameError)?;
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    tokio::time::timeout(timeout, connector.connect(name, tcp))
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
        .map_err(HttpError::Tls)
}

/// The TLS client configuration, made once: the ring provider, named, as
/// the process may hold more than one.
fn tls_config() -> &'static Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.into(),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot configure TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Arc::new(config))
    })
}

/// Awaits `head` while driving `connection` (an HTTP/1 connection makes no
/// progress unless polled); answers the head and what is left to drive.
async fn driving<H, C>(head: H, connection: C) -> Result<(Response<ResponseBody>, Connection), HttpError>
where
    H: Future<Output = Result<Response<ResponseBody>, HttpError>>,
    C: Future<Output = Result<(), hyper::Error>> + Send + 'static,
{
    let mut head = std::pin::pin!(head);
    let mut connection = Some(Box::pin(connection));
    let response = std::future::poll_fn(|cx| {
        if let Poll::Ready(response) = head.as_mut().poll(cx) {
            return Poll::Ready(response);
        }
        let Some(driven) = connection.as_mut() else {
            return Poll::Pending;
        };
        let ended = ready!(driven.as_mut().poll(cx));
        connection = None;
        match ended {
            Ok(()) => head.as_mut().poll(cx),
            Err(e) => Poll::Ready(Err(HttpError::from(e))),
        }
    })
    .await?;
    let rest: Connection = Box::pin(async move {
        let Some(connection) = connection else {
            return Ok(());
        };
        connection.await.map_err(|e| {
            if e.is_timeout() {
                HttpError::HttpResponseTimeout
            } else {
                HttpError::from(e)
            }
        })
    });
    Ok((response, rest))
}

/// A response body, each frame within its timeout of the one before.
pub struct ResponseBody {
    incoming: hyper::body::Incoming,
    timeout: tokio::time::Interval,
}

impl ResponseBody {
    fn new(incoming: hyper::body::Incoming, between_bytes: Duration) -> Self {
        // An interval of zero panics: the shortest is a nanosecond.
        let mut timeout = tokio::time::interval(between_bytes.max(Duration::from_nanos(1)));
        timeout.reset();
        Self { incoming, timeout }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                self.timeout.reset();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) if e.is_timeout() => Poll::Ready(Some(Err(HttpError::HttpResponseTimeout))),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(HttpError::from(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                ready!(self.timeout.poll_tick(cx));
                Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.incoming.size_hint()
    }
}
