//! Signing in to the console: a tenant's token, checked once, becomes a
//! session cookie the host signs, and every form the session shows carries
//! a CSRF token derived from it.
//!
//! Invariants: the cookie holds no token, only which tenant, a fingerprint
//! of the token's stored hash and when it expires, under an HMAC-SHA256 of
//! the host's session key; it is `HttpOnly` and `SameSite=Strict`. A
//! session ends at its expiry, and at once when its token is taken out of
//! the tenants file. Every change a session asks for is a POST carrying the
//! CSRF token, which only a page of the session shows.

use std::time::Duration;

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use crate::store::TenantId;
use crate::tenancy::{Tenant, Tenants, token_hash};

/// The cookie's name.
pub const COOKIE: &str = "stepstone_session";
/// How long a sign-in lasts.
pub const SESSION_LENGTH: Duration = Duration::from_secs(8 * 3600);
/// How much of the token's stored hash a cookie names (hex digits).
const FINGERPRINT_HEX: usize = 32;
/// How much of a MAC a CSRF token keeps (hex digits).
const CSRF_HEX: usize = 32;

/// The key sessions are signed with.
pub struct Sessions {
    key: [u8; 32],
}

/// A signed-in tenant, as a request's cookie shows it.
#[derive(Debug, Clone)]
pub struct Session {
    pub tenant: Tenant,
    /// What every form of this session carries, and every POST must.
    pub csrf: String,
}

impl Sessions {
    /// Sessions signed with `key` (the same on every host that shares it,
    /// so any of them serves a session); without one, a random key of this
    /// process, whose sessions end with it.
    pub fn new(key: Option<[u8; 32]>) -> Self {
        let key = key.unwrap_or_else(|| {
            tracing::info!(
                "console sessions are signed with a key of this process: they end when it stops and are not valid on other hosts (set STEPSTONE_SECRET_KEY to share them)"
            );
            let mut key = [0; 32];
            rand::rng().fill_bytes(&mut key);
            key
        });
        Self { key }
    }

    fn mac(&self, parts: &[&str]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        for part in parts {
            mac.update(part.as_bytes());
            mac.update(b"\n");
        }
        mac
    }

    /// The cookie value that signs `tenant` in with `token` until
    /// `expires_ms`: `{expires}:{fingerprint}:{tenant}:{mac}` (a tenant id
    /// has no `:`).
    pub fn issue(&self, tenant: &TenantId, token: &str, expires_ms: u64) -> String {
        let fingerprint = &token_hash(token)[..FINGERPRINT_HEX];
        let signed = [expires_ms.to_string(), fingerprint.to_owned(), tenant.to_string()];
        let mac = self.signature(&signed);
        format!("{}:{}", signed.join(":"), mac)
    }

    fn signature(&self, signed: &[String; 3]) -> String {
        let parts = ["session", signed[0].as_str(), signed[1].as_str(), signed[2].as_str()];
        hex::encode(self.mac(&parts).finalize().into_bytes())
    }

    /// The session `cookie` holds, if its signature is this host's, it has
    /// not expired by `now_ms`, and its token still authenticates its tenant.
    pub fn open(&self, cookie: &str, tenants: &Tenants, now_ms: u64) -> Option<Session> {
        let mut parts = cookie.split(':');
        let (expires, fingerprint, tenant, mac) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || fingerprint.len() != FINGERPRINT_HEX {
            return None;
        }
        let signed = [expires.to_owned(), fingerprint.to_owned(), tenant.to_owned()];
        let parts = ["session", expires, fingerprint, tenant];
        self.mac(&parts).verify_slice(&hex::decode(mac).ok()?).ok()?;
        if expires.parse::<u64>().ok()? <= now_ms {
            return None;
        }
        let tenant = tenants
            .iter()
            .find(|t| t.id.as_str() == tenant && t.token_sha256.iter().any(|hash| hash.starts_with(fingerprint)))?;
        Some(Session {
            tenant: tenant.clone(),
            csrf: self.csrf(&signed),
        })
    }

    /// The CSRF token of the session signed as `signed`.
    fn csrf(&self, signed: &[String; 3]) -> String {
        let session = self.signature(signed);
        let mut csrf = hex::encode(self.mac(&["csrf", &session]).finalize().into_bytes());
        csrf.truncate(CSRF_HEX);
        csrf
    }
}

impl Session {
    /// Whether a form's `token` is this session's CSRF token (compared in
    /// constant time).
    pub fn allows(&self, token: &str) -> bool {
        let (a, b) = (self.csrf.as_bytes(), token.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    fn acme() -> (Tenants, String) {
        let mut tenants = Tenants::default();
        let token = tenants.add_token(&TenantId::new("acme").expect("valid"));
        tenants.add_token(&TenantId::new("globex").expect("valid"));
        (tenants, token)
    }

    #[test]
    fn a_cookie_signs_in_its_tenant_until_it_expires() {
        let (tenants, token) = acme();
        let sessions = Sessions::new(Some([7; 32]));
        let cookie = sessions.issue(&TenantId::new("acme").expect("valid"), &token, NOW + 1000);
        assert!(!cookie.contains(&token), "the cookie holds no token");
        let session = sessions.open(&cookie, &tenants, NOW).expect("a session");
        assert_eq!(session.tenant.id.as_str(), "acme");
        assert_eq!(session.csrf.len(), CSRF_HEX);
        assert!(session.allows(&session.csrf));
        assert!(!session.allows("") && !session.allows(&"0".repeat(CSRF_HEX)));
        assert!(sessions.open(&cookie, &tenants, NOW + 1000).is_none(), "expired");
        let other_host = Sessions::new(Some([8; 32]));
        assert!(other_host.open(&cookie, &tenants, NOW).is_none(), "another key");
        let shared = Sessions::new(Some([7; 32]));
        assert_eq!(
            shared.open(&cookie, &tenants, NOW).map(|s| s.csrf),
            Some(session.csrf),
            "a host with the same key serves the session"
        );
    }

    #[test]
    fn a_cookie_altered_in_any_part_is_refused() {
        let (tenants, token) = acme();
        let sessions = Sessions::new(Some([7; 32]));
        let cookie = sessions.issue(&TenantId::new("acme").expect("valid"), &token, NOW + 1000);
        let parts: Vec<&str> = cookie.split(':').collect();
        let mut forged = vec![
            String::new(),
            format!("{}:{}:globex:{}", parts[0], parts[1], parts[3]),
            format!("{}:{}:{}:{}", NOW + 99_999, parts[1], parts[2], parts[3]),
            format!("{}:{}:{}:{}", parts[0], "0".repeat(FINGERPRINT_HEX), parts[2], parts[3]),
            format!("{cookie}:x"),
            format!("{}:{}:{}:zz", parts[0], parts[1], parts[2]),
            cookie.replace(parts[3], &"0".repeat(64)),
        ];
        forged.push(cookie[..cookie.len() - 1].to_owned());
        for forged in forged {
            assert!(sessions.open(&forged, &tenants, NOW).is_none(), "{forged}");
        }
    }

    #[test]
    fn a_session_ends_when_its_token_is_taken_out() {
        let (tenants, token) = acme();
        let sessions = Sessions::new(None);
        let cookie = sessions.issue(&TenantId::new("acme").expect("valid"), &token, NOW + 1000);
        assert!(sessions.open(&cookie, &tenants, NOW).is_some());
        let (other_tenants, _) = acme();
        assert!(sessions.open(&cookie, &other_tenants, NOW).is_none(), "tokens replaced");
    }
}
