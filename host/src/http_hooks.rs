//! HTTP hooks: a tenant's paths on the host, `/hooks/{tenant}/{name}`,
//! each starting a run of one workflow for every request signed with the
//! tenant's secret `hook-signing-key`.
//!
//! A request is taken only with `Stepstone-Signature: t={unix seconds},sha256={hex}`,
//! the HMAC-SHA256 of `{t}.{METHOD} {target}\n{body}` under that key,
//! where `target` is the request's path and query as sent
//! (`/hooks/acme/orders?ref=main`), `t` within [`TOLERANCE`] of the host's
//! clock. So a signature holds for its hook, its method and its query, not
//! only its body: a request captured on one hook and sent to another of
//! the tenant's, or with another query, is forged (issue 56). The run's id
//! is the hook's name and the first 20 hex digits of the signature, so a
//! request sent again (a retry, or a replay by whoever captured it)
//! starts no second run but answers the first; past the tolerance a
//! replay is refused. The request's method, the headers the hook names,
//! its query and its body become the run's input, which says which of
//! them the signature covers (the headers are not: a sender's tooling
//! sets them, and a replay that changes them answers the first run):
//!
//! ```json
//! {"method": "POST", "headers": {"x-event": "push"}, "query": {"ref": "main"}, "body": {"order": 7},
//!  "signed": ["method", "query", "body"]}
//! ```
//!
//! The body is its JSON as sent if it is JSON (checked, never parsed into
//! a tree: issue 56), else its text; an empty one is `null`.
//! The tenant's quotas hold for these runs as for any other.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::Sha256;
use utoipa::ToSchema;

use crate::store::{ComponentName, HookName, RunId, Storage, StoreError, TenantId, WorkflowName, hook_key, hooks_key};

/// The tenant's secret every request to its hooks is signed with.
pub const SIGNING_KEY_SECRET: &str = "hook-signing-key";
/// How far a signature's time may be from the host's clock.
pub const TOLERANCE: Duration = Duration::from_secs(300);
/// Hooks one tenant may hold.
pub const MAX_HOOKS: usize = 100;
/// Request headers one hook may pass into its runs' input.
pub const MAX_HEADERS: usize = 16;
/// The longest header name a hook passes, in bytes.
pub const MAX_HEADER_NAME: usize = 256;
/// Hex digits of the signature in a run's id.
const RUN_ID_HEX: usize = 20;
/// The parts of a run's input the signature covers.
const SIGNED_PARTS: [&str; 3] = ["method", "query", "body"];

/// What a hook starts: a run of `workflow` of `component` per request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Hook {
    /// A component name (each request runs the build it points at then) or
    /// a digest.
    pub component: ComponentName,
    /// The workflow each request starts.
    pub workflow: WorkflowName,
    /// The request headers passed into the run's input, by name (any
    /// case); at most 16. Others are not passed.
    #[serde(default)]
    #[schema(schema_with = header_names)]
    pub headers: Vec<String>,
}

/// What [`Hook::headers`] holds: at most 16 header names (RFC 9110 tokens).
fn header_names() -> utoipa::openapi::Array {
    let name = utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .pattern(Some("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"))
        .max_length(Some(256));
    utoipa::openapi::ArrayBuilder::new()
        .items(name)
        .max_items(Some(MAX_HEADERS))
        .build()
}

/// Why a hook could not be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// No hook of that name.
    #[error("no hook `{name}`")]
    Unknown {
        /// The name asked for.
        name: HookName,
    },
    /// The tenant holds [`MAX_HOOKS`] hooks already.
    #[error("the tenant holds {MAX_HOOKS} hooks, the limit: delete one first")]
    TooMany,
    /// A header the hook names is no header name, or it names too many.
    #[error("a hook passes at most {MAX_HEADERS} request headers, each a header name: {0}")]
    Headers(String),
    /// A stored hook does not decode.
    #[error("hook `{name}` is stored corrupt ({reason}): put it again")]
    Corrupt {
        /// The hook.
        name: HookName,
        /// What the decoder said.
        reason: String,
    },
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a request to a hook was refused: it was not signed by a holder of
/// the tenant's `hook-signing-key`, or not lately.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No signature.
    #[error(
        "no `Stepstone-Signature` header: sign the request with `t={{unix seconds}},sha256={{hex HMAC-SHA256 of \"{{t}}.{{METHOD}} {{path and query}}\\n{{body}}\" under the tenant's secret `hook-signing-key`}}`"
    )]
    Unsigned,
    /// A signature not of the scheme's form.
    #[error("the `Stepstone-Signature` header is not `t={{unix seconds}},sha256={{64 hex digits}}`")]
    Malformed,
    /// A signature made too long before (or after) now.
    #[error(
        "the signature's time is {off_s} s from the host's clock, over the 300 s allowed: sign each request as it is sent"
    )]
    Stale {
        /// How far the signed time is from now, in seconds.
        off_s: u64,
    },
    /// A signature that does not match.
    #[error("the signature does not match the method, path, query and body under the tenant's `hook-signing-key`")]
    Forged,
}

impl Hook {
    /// The hook with its header names lowercased, if they are header names
    /// and few enough.
    pub fn checked(mut self) -> Result<Self, HookError> {
        if self.headers.len() > MAX_HEADERS {
            return Err(HookError::Headers(format!("{} given", self.headers.len())));
        }
        for name in &mut self.headers {
            if name.len() > MAX_HEADER_NAME {
                return Err(HookError::Headers(format!("a name of {} bytes", name.len())));
            }
            let parsed = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| HookError::Headers(format!("`{name}` is no header name")))?;
            *name = parsed.as_str().to_owned();
        }
        Ok(self)
    }
}

/// What a hook request's signature covers besides its time.
#[derive(Debug, Clone, Copy)]
pub struct SignedRequest<'a> {
    /// Its method, as sent (`POST`).
    pub method: &'a str,
    /// Its path and query, as sent (`/hooks/acme/orders?ref=main`).
    pub target: &'a str,
    /// Its body.
    pub body: &'a [u8],
}

/// `Stepstone-Signature` for `request` sent at `t` (unix seconds) under `key`.
pub fn sign(key: &[u8], t: u64, request: SignedRequest<'_>) -> String {
    format!(
        "t={t},sha256={}",
        hex::encode(mac(key, t, request).finalize().into_bytes())
    )
}

/// The HMAC of `{t}.{METHOD} {target}\n{body}`: the method and the target
/// hold no newline, so no two requests sign the same bytes.
fn mac(key: &[u8], t: u64, request: SignedRequest<'_>) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(format!("{t}.{} {}\n", request.method, request.target).as_bytes());
    mac.update(request.body);
    mac
}

/// A request's `Stepstone-Signature`, of the scheme's form and made
/// lately: what can be checked before its body is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    t: u64,
    mac: Vec<u8>,
}

impl Signature {
    /// The signature in `header`, if there is one, of the scheme's form,
    /// made within [`TOLERANCE`] of `now_s` (unix seconds).
    pub fn parse(header: Option<&str>, now_s: u64) -> Result<Self, Refusal> {
        let header = header.ok_or(Refusal::Unsigned)?;
        let (t, mac) = header
            .split_once(',')
            .and_then(|(t, mac)| Some((t.strip_prefix("t=")?, mac.strip_prefix("sha256=")?)))
            .ok_or(Refusal::Malformed)?;
        let t: u64 = t.parse().map_err(|_| Refusal::Malformed)?;
        let mac = hex::decode(mac).map_err(|_| Refusal::Malformed)?;
        if mac.len() != 32 {
            return Err(Refusal::Malformed);
        }
        let off_s = now_s.abs_diff(t);
        if off_s > TOLERANCE.as_secs() {
            return Err(Refusal::Stale { off_s });
        }
        Ok(Self { t, mac })
    }

    /// Its bytes, if it signs `request` under `key`.
    pub fn verify(self, key: &[u8], request: SignedRequest<'_>) -> Result<Vec<u8>, Refusal> {
        mac(key, self.t, request)
            .verify_slice(&self.mac)
            .map_err(|_| Refusal::Forged)?;
        Ok(self.mac)
    }
}

/// Checks a request's signature `header` over `request` under `key` at
/// `now_s` (unix seconds); the signature's bytes, if it holds.
pub fn verify(key: &[u8], header: Option<&str>, request: SignedRequest<'_>, now_s: u64) -> Result<Vec<u8>, Refusal> {
    Signature::parse(header, now_s)?.verify(key, request)
}

/// The id of the run a request signed `signature` starts through `name`.
pub fn run_id(name: &HookName, signature: &[u8]) -> RunId {
    let digits = hex::encode(signature);
    RunId::new(&format!("{name}-{}", &digits[..RUN_ID_HEX.min(digits.len())]))
        .expect("a hook name leaves room for the digits, which are a run id's characters")
}

/// A run's input as a hook request makes it (see [`input`]).
#[derive(Serialize)]
struct Input<'a> {
    method: &'a str,
    headers: BTreeMap<&'a str, Cow<'a, str>>,
    query: BTreeMap<String, String>,
    body: Option<BodyInput<'a>>,
    signed: [&'static str; 3],
}

/// A request's body in its run's input: its JSON as sent, checked but
/// never parsed into a tree (a 64 MiB `[0,0,…]` took over a GiB as one:
/// issue 56), else its text.
#[derive(Serialize)]
#[serde(untagged)]
enum BodyInput<'a> {
    Json(&'a RawValue),
    Text(Cow<'a, str>),
}

/// The run's input, as JSON: the request's `method`, the `headers` the
/// hook names (as `(name, value)`, names lowercase), its `query` and its
/// `body` (its JSON if it is JSON, else its text; `null` if empty), and
/// which of them the signature covers (`signed`).
pub fn input<'a>(
    method: &'a str,
    headers: impl Iterator<Item = (&'a str, &'a [u8])>,
    hook: &Hook,
    query: Option<&str>,
    body: &'a [u8],
) -> String {
    let headers = headers
        .filter(|(name, _)| hook.headers.iter().any(|wanted| wanted == name))
        .map(|(name, value)| (name, String::from_utf8_lossy(value)))
        .collect();
    let query = url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect();
    let body = match body {
        [] => None,
        bytes => Some(match serde_json::from_slice::<&RawValue>(bytes) {
            Ok(json) => BodyInput::Json(json),
            Err(_) => BodyInput::Text(String::from_utf8_lossy(bytes)),
        }),
    };
    let input = Input {
        method,
        headers,
        query,
        body,
        signed: SIGNED_PARTS,
    };
    serde_json::to_string(&input).expect("an input of strings and checked JSON serializes")
}

/// A tenant's hooks in the store; [`Runtime::hooks`](crate::runtime::Runtime::hooks) gives it.
#[derive(Clone)]
pub struct Hooks {
    storage: Storage,
}

impl Hooks {
    pub(crate) fn new(storage: Storage) -> Self {
        Self { storage }
    }

    /// Stores `hook` as the tenant's `name`, replacing one of that name.
    pub async fn put(&self, tenant: &TenantId, name: &HookName, hook: &Hook) -> Result<(), HookError> {
        let store = self.storage.tenant(tenant);
        if self.get(tenant, name).await?.is_none() && store.list(&hooks_key()).await?.len() >= MAX_HOOKS {
            return Err(HookError::TooMany);
        }
        let bytes = serde_json::to_vec(hook).expect("a hook serializes");
        Ok(store.overwrite(&hook_key(name), Bytes::from(bytes)).await?)
    }

    /// The tenant's hook `name`, if it has one.
    pub async fn get(&self, tenant: &TenantId, name: &HookName) -> Result<Option<Hook>, HookError> {
        let Some(bytes) = self.storage.tenant(tenant).get(&hook_key(name)).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| HookError::Corrupt {
                name: name.clone(),
                reason: e.to_string(),
            })
    }

    /// Every hook of the tenant, by name.
    pub async fn list(&self, tenant: &TenantId) -> Result<Vec<(HookName, Hook)>, HookError> {
        let mut hooks = Vec::new();
        for key in self.storage.tenant(tenant).list(&hooks_key()).await? {
            let Some(name) = key.filename().and_then(|name| HookName::new(name).ok()) else {
                continue;
            };
            if let Some(hook) = self.get(tenant, &name).await? {
                hooks.push((name, hook));
            }
        }
        Ok(hooks)
    }

    /// Deletes the tenant's hook `name`; whether it had it.
    pub async fn delete(&self, tenant: &TenantId, name: &HookName) -> Result<bool, HookError> {
        let store = self.storage.tenant(tenant);
        let existed = store.version(&hook_key(name)).await?.is_some();
        store.delete(&hook_key(name)).await?;
        Ok(existed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const NOW: u64 = 1_800_000_000;

    fn request<'a>(target: &'a str, body: &'a [u8]) -> SignedRequest<'a> {
        SignedRequest {
            method: "POST",
            target,
            body,
        }
    }

    /// A signature holds for its method, path, query, body, key and time
    /// alone: any other is forged (a request captured on one hook, sent
    /// to another, or with another query: issue 56), a time past the
    /// tolerance stale (at its edge, not), and anything not of the
    /// scheme's form malformed.
    #[test]
    fn a_signature_holds_for_its_request_key_and_time_only() {
        let sent = request("/hooks/acme/staging?env=test", b"{}");
        let signed = sign(b"key", NOW, sent);
        assert!(verify(b"key", Some(&signed), sent, NOW).is_ok());
        for other in [
            request("/hooks/acme/staging?env=test", b"{ }"),
            request("/hooks/acme/prod?env=test", b"{}"),
            request("/hooks/acme/staging?env=evil", b"{}"),
            request("/hooks/acme/staging", b"{}"),
            request("/hooks/acme/staging?env=test\n", b"{}"),
            SignedRequest { method: "PUT", ..sent },
        ] {
            assert_eq!(
                verify(b"key", Some(&signed), other, NOW),
                Err(Refusal::Forged),
                "{other:?}"
            );
        }
        assert_eq!(verify(b"other", Some(&signed), sent, NOW), Err(Refusal::Forged));
        let edge = TOLERANCE.as_secs();
        assert!(verify(b"key", Some(&signed), sent, NOW + edge).is_ok());
        assert!(verify(b"key", Some(&signed), sent, NOW - edge).is_ok());
        assert_eq!(
            verify(b"key", Some(&signed), sent, NOW + edge + 1),
            Err(Refusal::Stale { off_s: edge + 1 })
        );
        let retimed = signed.replacen(&format!("t={NOW}"), &format!("t={}", NOW + 1), 1);
        assert_eq!(verify(b"key", Some(&retimed), sent, NOW), Err(Refusal::Forged));
        assert_eq!(verify(b"key", None, sent, NOW), Err(Refusal::Unsigned));
        let digits = &signed[signed.find(",sha256=").unwrap_or(0) + 8..];
        for malformed in [
            String::new(),
            "sha256=00".into(),
            format!("t={NOW}"),
            format!("t=-1,sha256={digits}"),
            format!("t={NOW},sha256=zz"),
            format!("t={NOW},sha256=00"),
            format!("t={},sha256={}", u64::MAX, "0".repeat(64)),
        ] {
            let refused = verify(b"key", Some(&malformed), sent, NOW);
            assert!(
                matches!(refused, Err(Refusal::Malformed | Refusal::Stale { .. })),
                "{malformed}: {refused:?}"
            );
        }
    }

    /// A run's id is the hook's name and 20 hex digits of the signature,
    /// within a run id's length for the longest hook name.
    #[test]
    fn a_requests_run_is_named_by_its_hook_and_signature() {
        let longest = HookName::new(&"h".repeat(100)).expect("a name");
        let id = run_id(&longest, &[0xab; 32]);
        assert_eq!(id.as_str().len(), 121);
        assert!(id.as_str().ends_with(&format!("-{}", "ab".repeat(10))));
    }

    /// The input holds the method, the named headers alone, the query
    /// (the last of a repeated key) and the body as JSON, text or null.
    #[test]
    fn the_input_holds_the_method_the_named_headers_the_query_and_the_body() {
        let hook = Hook {
            component: ComponentName::new("c").expect("a name"),
            workflow: WorkflowName::new("w").expect("a name"),
            headers: vec!["x-event".into()],
        }
        .checked()
        .expect("valid");
        let headers = [("x-event", b"push".as_slice()), ("authorization", b"secret".as_slice())];
        let input = parsed(&input(
            "POST",
            headers.into_iter(),
            &hook,
            Some("a=1&a=2&b=%20"),
            br#"{"n":1}"#,
        ));
        assert_eq!(
            input,
            json!({"method": "POST", "headers": {"x-event": "push"}, "query": {"a": "2", "b": " "}, "body": {"n": 1},
                "signed": ["method", "query", "body"]})
        );
        assert_eq!(input_of_body(&hook, b"not json")["body"], json!("not json"));
        assert_eq!(input_of_body(&hook, b"")["body"], Value::Null);
        let shouting = Hook {
            headers: vec!["X-Event".into()],
            ..hook.clone()
        };
        assert_eq!(shouting.checked().expect("valid").headers, ["x-event"]);
        let bad = Hook {
            headers: vec!["no spaces".into()],
            ..hook.clone()
        };
        assert!(matches!(bad.checked(), Err(HookError::Headers(_))));
        let headers = |count: usize, length: usize| Hook {
            headers: (0..count).map(|n| format!("{n:x<length$}")).collect(),
            ..hook.clone()
        };
        assert!(headers(MAX_HEADERS, MAX_HEADER_NAME).checked().is_ok(), "at the limits");
        for over in [headers(MAX_HEADERS + 1, 8), headers(1, MAX_HEADER_NAME + 1)] {
            assert!(matches!(over.checked(), Err(HookError::Headers(_))));
        }
    }

    /// A JSON body enters the input as sent, never parsed into a tree and
    /// written again (which took a GiB for a 64 MiB array, and would turn
    /// `1.00` into `1.0`), however deep, as `POST /v1/runs` keeps its input.
    #[test]
    fn a_json_body_enters_the_input_as_sent() {
        let hook = Hook {
            component: ComponentName::new("c").expect("a name"),
            workflow: WorkflowName::new("w").expect("a name"),
            headers: Vec::new(),
        };
        for sent in [
            r#"[1.00, {"b": 2, "a": 1e400}]"#.to_owned(),
            format!("{}{}", "[".repeat(200), "]".repeat(200)),
        ] {
            let made = input("POST", std::iter::empty(), &hook, None, sent.as_bytes());
            assert!(made.contains(&format!(r#""body":{sent},"#)), "{made}");
        }
    }

    /// A tenant holds 100 hooks at most: the 101st is refused, one of
    /// them replaced is not, and another tenant's count is its own.
    #[tokio::test]
    async fn a_tenant_holds_a_hundred_hooks_at_most() -> Result<(), HookError> {
        let hooks = Hooks::new(Storage::in_memory());
        let (acme, globex) = (TenantId::default_tenant(), TenantId::new("globex").expect("a valid id"));
        let hook = Hook {
            component: ComponentName::new("hello").expect("a valid name"),
            workflow: WorkflowName::new("echo").expect("a valid name"),
            headers: Vec::new(),
        };
        let name = |n: usize| HookName::new(&format!("h{n}")).expect("a valid name");
        for n in 0..MAX_HOOKS {
            hooks.put(&acme, &name(n), &hook).await?;
        }
        assert!(matches!(
            hooks.put(&acme, &name(MAX_HOOKS), &hook).await,
            Err(HookError::TooMany)
        ));
        hooks.put(&acme, &name(0), &hook).await?;
        hooks.put(&globex, &name(MAX_HOOKS), &hook).await?;
        assert_eq!(hooks.list(&acme).await?.len(), MAX_HOOKS);
        assert!(hooks.delete(&acme, &name(7)).await?);
        hooks.put(&acme, &name(MAX_HOOKS), &hook).await?;
        Ok(())
    }

    fn input_of_body(hook: &Hook, body: &[u8]) -> Value {
        parsed(&input("PUT", std::iter::empty(), hook, None, body))
    }

    fn parsed(input: &str) -> Value {
        serde_json::from_str(input).expect("the input is JSON")
    }
}
