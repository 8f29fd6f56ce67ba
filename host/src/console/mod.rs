//! The operator's console, served by `stepstone serve` at `/ui`: pages
//! rendered on the server (maud templates) with a little script of its own
//! that refreshes a page's live parts, every asset compiled into the binary.
//! A tenant signs in with its token (see [`session`]) and sees its runs
//! (filtered, paged, live), each run's journal as a timeline with its
//! payloads and log lines and the actions a client has (signal, cancel,
//! replay check, upgrade), its components, and its quotas and usage.
//!
//! Invariants: every page reaches the store only through the session's
//! tenant, so another tenant's run or component answers 404 and shows
//! nothing, as one that does not exist; no page shows a token; every change
//! is a POST carrying the session's CSRF token, from this host's own pages.

mod assets;
mod components;
mod extract;
mod layout;
mod run;
mod runs;
pub(crate) mod session;
mod tenant;
mod timeline;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::html;
use serde::Deserialize;

use crate::api::error::ApiError;
use crate::api::state::ApiState;
use crate::clock::now_ms;
use crate::runtime::RunError;
use extract::{Form, Query};
use layout::{Frame, Nav};
use session::{COOKIE, SESSION_LENGTH, Session};

/// The console's routes, under `/ui`.
pub fn router() -> Router<ApiState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/runs") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/runs") }))
        .route("/ui/login", get(sign_in_page).post(sign_in))
        .route("/ui/logout", post(sign_out))
        .route("/ui/runs", get(runs::page))
        .route("/ui/runs/rows", get(runs::rows))
        .route("/ui/runs/{id}", get(run::page))
        .route("/ui/runs/{id}/live", get(run::live))
        .route("/ui/runs/{id}/streams/{name}/events", get(run::stream_events))
        .route("/ui/runs/{id}/payloads/{sha256}", get(run::stored_payload))
        .route("/ui/runs/{id}/signal", post(run::signal))
        .route("/ui/runs/{id}/cancel", post(run::cancel))
        .route("/ui/runs/{id}/pause", post(run::pause))
        .route("/ui/runs/{id}/resume", post(run::resume))
        .route("/ui/runs/{id}/advance", post(run::advance))
        .route("/ui/runs/{id}/restart", post(run::restart))
        .route("/ui/runs/{id}/replay", post(run::replay))
        .route("/ui/runs/{id}/upgrade", post(run::upgrade))
        .route("/ui/components", get(components::list))
        .route("/ui/components/{reference}", get(components::page))
        .route("/ui/components/{reference}/pause", post(components::pause))
        .route("/ui/components/{reference}/resume", post(components::resume))
        .route("/ui/tenant", get(tenant::page))
        .route("/ui/assets/{name}", get(assets::serve))
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
        .layer(middleware::from_fn(guarded))
}

/// The largest form the console reads (a signal's payload, encoded): the
/// sign-in form is read before anyone is known, so not a tenant's quota of
/// up to a component's size. Larger signals go through the API.
const MAX_FORM_BYTES: usize = 4 << 20;

/// What every console answer carries: the browser may run and load only
/// this host's own script and styles, frame the page nowhere, and keep no
/// page in its cache; and a POST from another origin is refused before it
/// reaches a handler.
async fn guarded(request: Request, next: Next) -> Response {
    if request.method() == Method::POST && !same_origin(request.headers()) {
        return PageError::new(StatusCode::FORBIDDEN, "this form was posted from another site").into_response();
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let policy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                  form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(policy));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// Whether a request's `Origin`, if it has one, is the host it was sent to.
/// Browsers send `Origin` with every POST; a request without one is not a
/// browser's cross-site form.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|host| host.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|origin| origin.split_once("://"))
        .map(|(_, host)| host);
    host.is_some() && origin_host == host
}

/// A page that could not be shown: its status, and what was wrong.
#[derive(Debug)]
pub struct PageError {
    status: StatusCode,
    message: String,
}

impl PageError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<ApiError> for PageError {
    fn from(error: ApiError) -> Self {
        Self::new(error.status(), error.message())
    }
}

impl From<RunError> for PageError {
    fn from(error: RunError) -> Self {
        ApiError::from(error).into()
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(status = %self.status, "console: {}", self.message);
        }
        let reason = self.status.canonical_reason().unwrap_or("Error");
        let body = html! {
            main.error {
                h1 { (self.status.as_u16()) " " (reason) }
                p.message { (self.message) }
                p { a href="/ui/runs" { "Back to the runs" } }
            }
        };
        (self.status, layout::document(reason, body)).into_response()
    }
}

/// A signed-in request: its session.
pub struct Signed(pub Session);

/// The header the console's script sends when it refreshes part of a page:
/// a request whose session ended then answers 401, not the sign-in page.
const FRAGMENT_HEADER: &str = "x-console-fragment";

impl FromRequestParts<ApiState> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Response> {
        let session =
            cookie(&parts.headers, COOKIE).and_then(|cookie| state.sessions().open(cookie, &state.tenants(), now_ms()));
        match session {
            Some(session) => Ok(Self(session)),
            None if parts.headers.contains_key(FRAGMENT_HEADER) => Err(StatusCode::UNAUTHORIZED.into_response()),
            None => {
                // A form posted once the session ended lands on the runs
                // page: its action answers only a POST.
                let here = match parts.method {
                    Method::GET => parts.uri.path_and_query().map_or("/ui/runs", |p| p.as_str()),
                    _ => "/ui/runs",
                };
                let next: String = url::form_urlencoded::byte_serialize(here.as_bytes()).collect();
                Err(Redirect::to(&format!("/ui/login?next={next}")).into_response())
            }
        }
    }
}

impl Signed {
    /// The frame of a page of this session.
    pub fn frame<'a>(&'a self, title: &'a str, nav: Nav) -> Frame<'a> {
        Frame {
            title,
            tenant: self.0.tenant.id.as_str(),
            csrf: &self.0.csrf,
            nav,
        }
    }

    /// Refuses a form without this session's CSRF token.
    pub fn check(&self, csrf: &str) -> Result<(), PageError> {
        match self.0.allows(csrf) {
            true => Ok(()),
            false => Err(PageError::new(
                StatusCode::FORBIDDEN,
                "this form is from another session or another site: open the page again and resubmit",
            )),
        }
    }
}

/// The value of cookie `name` among a request's cookies.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('='))
}

/// The longest token a sign-in reads: a token is 68 characters.
const MAX_TOKEN: usize = 256;

#[derive(Deserialize)]
struct SignInQuery {
    next: Option<String>,
}

#[derive(Deserialize)]
struct SignInForm {
    token: String,
    next: Option<String>,
}

/// Where a sign-in goes on to: a page of the console, never elsewhere, and
/// written in what a `Location` header may hold (visible ASCII).
fn landing(next: Option<&str>) -> &str {
    next.filter(|next| {
        next.starts_with("/ui/")
            && !next.contains("//")
            && !next.contains('\\')
            && next.bytes().all(|byte| byte.is_ascii_graphic())
    })
    .unwrap_or("/ui/runs")
}

async fn sign_in_page(Query(query): Query<SignInQuery>) -> Response {
    sign_in_form(StatusCode::OK, None, query.next.as_deref())
}

fn sign_in_form(status: StatusCode, refusal: Option<&str>, next: Option<&str>) -> Response {
    let body = html! {
        main.signin {
            h1 { "Stepstone" }
            form method="post" action="/ui/login" {
                label for="token" { "Tenant token" }
                input #token type="password" name="token" autocomplete="off" required maxlength=(MAX_TOKEN) autofocus;
                input type="hidden" name="next" value=(landing(next));
                button type="submit" { "Sign in" }
                @if let Some(refusal) = refusal { p.refusal role="alert" { (refusal) } }
            }
            p.hint { "The token " code { "stepstone tenant add" } " printed. It is checked once; the browser keeps a session cookie, not the token." }
        }
    };
    (status, layout::document("Sign in", body)).into_response()
}

async fn sign_in(State(state): State<ApiState>, headers: HeaderMap, Form(form): Form<SignInForm>) -> Response {
    let token = form.token.trim();
    let tenant = (token.len() <= MAX_TOKEN)
        .then(|| state.tenants().authenticate(token).cloned())
        .flatten();
    let Some(tenant) = tenant else {
        let refusal = "That token is not known to this host.";
        return sign_in_form(StatusCode::UNAUTHORIZED, Some(refusal), form.next.as_deref());
    };
    let expires_ms = now_ms().saturating_add(SESSION_LENGTH.as_millis() as u64);
    let value = state.sessions().issue(&tenant.id, token, expires_ms);
    let cookie = session_cookie(&value, SESSION_LENGTH.as_secs(), over_tls(&headers));
    let mut response = Redirect::to(landing(form.next.as_deref())).into_response();
    // Only a sign-in that goes on carries its session.
    if response.status().is_redirection()
        && let Ok(cookie) = HeaderValue::from_str(&cookie)
    {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

#[derive(Deserialize)]
struct SignOutForm {
    csrf: String,
}

async fn sign_out(signed: Signed, headers: HeaderMap, Form(form): Form<SignOutForm>) -> Result<Response, PageError> {
    signed.check(&form.csrf)?;
    let mut response = Redirect::to("/ui/login").into_response();
    let cleared = session_cookie("", 0, over_tls(&headers));
    if let Ok(cleared) = HeaderValue::from_str(&cleared) {
        response.headers_mut().insert(header::SET_COOKIE, cleared);
    }
    Ok(response)
}

/// The `Set-Cookie` value of a session, kept `max_age_secs`.
fn session_cookie(value: &str, max_age_secs: u64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}={value}; Path=/ui; Max-Age={max_age_secs}; HttpOnly; SameSite=Strict{secure}")
}

/// Whether the browser reached the host over TLS: `serve` speaks plain
/// HTTP, so TLS ends at a proxy in front, which says so in
/// `X-Forwarded-Proto` or `Forwarded`. A client claiming it falsely only
/// makes its own cookie `Secure`.
fn over_tls(headers: &HeaderMap) -> bool {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok()).unwrap_or("");
    header("x-forwarded-proto").eq_ignore_ascii_case("https")
        || header("forwarded")
            .split([';', ','])
            .any(|part| part.trim().eq_ignore_ascii_case("proto=https"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_str(value).expect("a header value"));
        }
        headers
    }

    #[test]
    fn a_sign_in_lands_only_on_the_consoles_own_pages() {
        assert_eq!(landing(Some("/ui/runs/r-1?x=1")), "/ui/runs/r-1?x=1");
        for elsewhere in [
            "https://evil.example/",
            "//evil.example/ui/",
            "/ui/\\evil",
            "/v1/runs",
            "/ui//x",
            "/ui/runs\n",
            "/ui/runs?x=\r\nSet-Cookie:a=b",
            "/ui/runs/é",
            "/ui/runs x",
            "",
        ] {
            assert_eq!(landing(Some(elsewhere)), "/ui/runs", "{elsewhere}");
        }
        assert_eq!(landing(None), "/ui/runs");
    }

    #[test]
    fn a_post_is_same_origin_only_when_its_origin_is_the_host() {
        assert!(same_origin(&headers(&[("host", "127.0.0.1:8080")])));
        assert!(same_origin(&headers(&[("host", "h:1"), ("origin", "http://h:1")])));
        assert!(!same_origin(&headers(&[("host", "h:1"), ("origin", "http://evil:1")])));
        assert!(!same_origin(&headers(&[("host", "h:1"), ("origin", "null")])));
        assert!(!same_origin(&headers(&[("origin", "http://h:1")])));
    }

    #[test]
    fn the_session_cookie_is_found_among_others_and_marked_secure_behind_tls() {
        let sent = headers(&[("cookie", "a=1; stepstone_session=v:1; b=2"), ("cookie", "c=3")]);
        assert_eq!(cookie(&sent, COOKIE), Some("v:1"));
        assert_eq!(cookie(&headers(&[("cookie", "stepstone_sessionx=1")]), COOKIE), None);
        let plain = session_cookie("v", 60, false);
        assert_eq!(
            plain,
            "stepstone_session=v; Path=/ui; Max-Age=60; HttpOnly; SameSite=Strict"
        );
        assert!(over_tls(&headers(&[("x-forwarded-proto", "HTTPS")])));
        assert!(over_tls(&headers(&[("forwarded", "for=1.2.3.4;proto=https")])));
        assert!(!over_tls(&headers(&[("x-forwarded-proto", "http")])));
        assert!(session_cookie("v", 60, true).ends_with("; Secure"));
    }
}
