//! What is checked of a request to a tenant's hook before its body is
//! read: the tenant, the hook, its signing key, and a signature of the
//! scheme's form made lately (see [`crate::http_hooks`]). A stranger's
//! body is read only for a hook there is, with a signature that may hold;
//! what was checked goes on with the request to its handler, which
//! verifies the signature over what was read.

use axum::http::{HeaderMap, StatusCode};

use super::ApiState;
use super::error::ApiError;
use crate::clock::now_ms;
use crate::http_hooks::{self, Hook, SIGNING_KEY_SECRET};
use crate::store::{HookName, SecretName, TenantId};

/// What is known of a request to a hook before its body is read (see
/// [`admit`]): its tenant, its hook, the tenant's signing key, and a
/// signature of the scheme's form, made lately.
#[derive(Clone)]
pub(super) struct Admitted {
    pub(super) tenant: TenantId,
    pub(super) hook: Hook,
    pub(super) key: String,
    pub(super) signature: http_hooks::Signature,
}

/// Checks what can be checked of a request to the hook at `path`
/// (`/hooks/{tenant}/{name}`) before its body is read: the tenant is one,
/// the hook is its, it has a signing key, and `headers` carry a signature
/// of the scheme's form, made within 300 s. So a stranger's body is read
/// only for a hook there is, with a signature that may hold, and only
/// then verified. An unknown tenant, hook or key answer the same 404.
pub(super) async fn admit(state: &ApiState, path: &str, headers: &HeaderMap) -> Result<Admitted, ApiError> {
    let mut parts = path.strip_prefix("/hooks/").unwrap_or_default().split('/');
    let named = (
        parts.next().map(TenantId::new),
        parts.next().map(HookName::new),
        parts.next(),
    );
    let (Some(Ok(tenant)), Some(Ok(name)), None) = named else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "no such hook".to_owned()));
    };
    let unknown = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no hook `{name}` (or its tenant has set no `{SIGNING_KEY_SECRET}`)"),
        )
    };
    if !state.tenants().iter().any(|known| known.id == tenant) {
        return Err(unknown());
    }
    let Some(hook) = state.runtime.hooks().get(&tenant, &name).await? else {
        return Err(unknown());
    };
    let secret = SecretName::new(SIGNING_KEY_SECRET).expect("a valid secret name");
    let Some(key) = state.runtime.secrets().value(&tenant, &secret).await? else {
        return Err(unknown());
    };
    let header = headers.get("stepstone-signature").and_then(|value| value.to_str().ok());
    let signature = http_hooks::Signature::parse(header, now_ms() / 1000)
        .map_err(|refusal| ApiError::new(StatusCode::UNAUTHORIZED, refusal.to_string()))?;
    Ok(Admitted {
        tenant,
        hook,
        key,
        signature,
    })
}
