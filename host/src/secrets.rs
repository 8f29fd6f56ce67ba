//! Tenants' secrets: named values a tenant's steps read through
//! `wasi:config/store`, sealed at rest with the host's key. A secret is the
//! tenant's, or one component name's: the steps a workflow calls as
//! `COMPONENT/step` see a component's secret in place of the tenant's of
//! the same name.
//!
//! Invariants: a value is stored only sealed (XChaCha20-Poly1305 under the
//! host key from `$STEPSTONE_SECRET_KEY`, a fresh random nonce, the tenant,
//! the component if any and the name as associated data, so a sealed value
//! copied to another tenant, component or name does not open); it is opened
//! only for the step attempts of its own tenant, never for a workflow, and
//! never journaled or logged; listings give names, never values. A tenant
//! holds at most [`MAX_SECRETS`] secrets (its own and its components'
//! together) of at most [`MAX_SECRET_CHARS`] each: a host counts them under
//! a lock of the tenant's, and counts again once a new one is written, so a
//! new secret that a set on another host pushed past the limit at the same
//! moment is taken back and refused.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use wasmtime_wasi_config::WasiConfigVariables;

use crate::shared_map::lock;
use crate::store::{ComponentName, SecretName, Storage, StoreError, StoreKey, TenantId, TenantStore};

/// The environment variable that holds the host key: 64 hex digits.
pub const SECRET_KEY_VAR: &str = "STEPSTONE_SECRET_KEY";

/// Secrets one tenant may hold.
pub const MAX_SECRETS: usize = 100;

/// Characters of one secret's value: counted as JSON Schema's `maxLength`
/// counts them, so the API's document states the limit exactly.
pub const MAX_SECRET_CHARS: usize = 16 << 10;

/// How long the secrets opened for a tenant's steps are reused before they
/// are read again (a secret set on another host reaches this one by then).
const OPENED_FOR: Duration = Duration::from_secs(10);

const NONCE_BYTES: usize = 24;

/// Why a secret could not be set, listed or opened.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The host has no key (`$STEPSTONE_SECRET_KEY` is not set), so no
    /// secret can be set or opened.
    #[error(
        "secrets need the host key: set {SECRET_KEY_VAR} to 64 hex digits (e.g. from `openssl rand -hex 32`), the same on every host sharing the store"
    )]
    NoKey,
    /// `$STEPSTONE_SECRET_KEY` is set but is not 64 hex digits.
    #[error("{SECRET_KEY_VAR} is not a key: {reason}; it must be 64 hex digits")]
    BadKey {
        /// What is wrong with it: not hex, not 32 bytes, or not Unicode.
        reason: String,
    },
    /// The value is longer than [`MAX_SECRET_CHARS`] characters; nothing
    /// was stored.
    #[error("secret `{name}` is {length} characters, over the limit of {MAX_SECRET_CHARS}")]
    TooLarge {
        /// The secret being set.
        name: SecretName,
        /// The value's length, in characters.
        length: usize,
    },
    /// The tenant already holds [`MAX_SECRETS`] secrets, its components'
    /// included: one must be deleted before a new one is set.
    #[error("the tenant already holds {MAX_SECRETS} secrets, the limit: delete one first")]
    TooMany,
    /// The value given is empty; nothing was stored.
    #[error("secret `{name}` has an empty value: give the value (the request body, or the command's standard input)")]
    Empty {
        /// The secret being set.
        name: SecretName,
    },
    /// A stored value does not open with the host's key: the key is not the
    /// one that sealed it, or the record is damaged or was copied from
    /// another tenant, component or name.
    #[error(
        "secret `{name}` does not open with this host's key ({SECRET_KEY_VAR} differs from the one that sealed it, or the record is damaged)"
    )]
    Sealed {
        /// The secret that does not open.
        name: String,
    },
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The host key that seals secrets, and derives keys for other purposes.
pub struct SecretKey {
    cipher: XChaCha20Poly1305,
    /// HMAC-SHA256 keyed with the host key: a derived key is its MAC of
    /// the purpose, so no two purposes share a key.
    derivation: Hmac<Sha256>,
}

impl SecretKey {
    /// The key from `$STEPSTONE_SECRET_KEY`, or `None` if it is not set.
    pub fn from_env() -> Result<Option<Self>, SecretError> {
        match std::env::var(SECRET_KEY_VAR) {
            Ok(hex) => Self::from_hex(hex.trim()).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(e) => Err(SecretError::BadKey { reason: e.to_string() }),
        }
    }

    /// The key written as `hex`: 64 hex digits, 32 bytes.
    pub fn from_hex(hex: &str) -> Result<Self, SecretError> {
        let bytes = hex::decode(hex).map_err(|e| SecretError::BadKey { reason: e.to_string() })?;
        let bad_length = || SecretError::BadKey {
            reason: format!("{} bytes, not 32", bytes.len()),
        };
        let cipher = XChaCha20Poly1305::new_from_slice(&bytes).map_err(|_| bad_length())?;
        let derivation = <Hmac<Sha256> as Mac>::new_from_slice(&bytes).map_err(|_| bad_length())?;
        Ok(Self { cipher, derivation })
    }

    /// A key of its own for `purpose`, the same on every host with this key.
    pub fn derive(&self, purpose: &str) -> [u8; 32] {
        self.derivation
            .clone()
            .chain_update(purpose.as_bytes())
            .finalize()
            .into_bytes()
            .into()
    }

    fn seal(&self, tenant: &TenantId, scope: Scope, name: &SecretName, value: &[u8]) -> Vec<u8> {
        let mut nonce = [0; NONCE_BYTES];
        rand::rng().fill_bytes(&mut nonce);
        let aad = associated_data(tenant, scope, name.as_str());
        let sealed = self
            .cipher
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: value, aad: &aad })
            .expect("XChaCha20-Poly1305 seals any value under 256 GiB");
        [&nonce[..], &sealed].concat()
    }

    fn open(&self, tenant: &TenantId, scope: Scope, name: &str, sealed: &[u8]) -> Result<String, SecretError> {
        let damaged = || SecretError::Sealed { name: name.to_owned() };
        let (nonce, sealed) = sealed.split_at_checked(NONCE_BYTES).ok_or_else(damaged)?;
        let aad = associated_data(tenant, scope, name);
        let value = self
            .cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: sealed, aad: &aad })
            .map_err(|_| damaged())?;
        String::from_utf8(value).map_err(|_| damaged())
    }
}

/// Whose a secret is: the tenant's, or one of its component names'.
pub type Scope<'a> = Option<&'a ComponentName>;

/// What a sealed value is bound to: its tenant, its component, its name.
fn associated_data(tenant: &TenantId, scope: Scope, name: &str) -> Vec<u8> {
    match scope {
        None => format!("stepstone secret\0{tenant}\0{name}").into_bytes(),
        Some(component) => format!("stepstone component secret\0{tenant}\0{component}\0{name}").into_bytes(),
    }
}

/// Where the component names' secrets are kept, apart from the tenant's.
const COMPONENTS_FOLDER: &str = "component-secrets";

fn folder(scope: Scope) -> StoreKey {
    match scope {
        None => StoreKey::from("secrets"),
        Some(component) => StoreKey::from_iter([COMPONENTS_FOLDER, component.as_str()]),
    }
}

fn key_of(scope: Scope, name: &SecretName) -> StoreKey {
    match scope {
        None => StoreKey::from_iter(["secrets", name.as_str()]),
        Some(component) => StoreKey::from_iter([COMPONENTS_FOLDER, component.as_str(), name.as_str()]),
    }
}

/// A tenant's secrets, opened, as its steps read them.
#[derive(Default)]
pub struct OpenedSecrets {
    names: Vec<String>,
    variables: WasiConfigVariables,
}

/// Names only: a value must never reach a log.
impl std::fmt::Debug for OpenedSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedSecrets")
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl OpenedSecrets {
    /// The names of the secrets, sorted.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The values, as `wasi:config/store` serves them.
    pub fn variables(&self) -> &WasiConfigVariables {
        &self.variables
    }
}

/// A tenant's secrets, opened for its steps: its own, and each component
/// name's over them.
#[derive(Debug, Default)]
pub struct StepSecrets {
    tenant: Arc<OpenedSecrets>,
    components: HashMap<String, Arc<OpenedSecrets>>,
}

impl StepSecrets {
    /// What a step of `component` (the name a workflow called it by, none
    /// for the run's own) reads.
    pub fn for_component(&self, component: Option<&str>) -> Arc<OpenedSecrets> {
        component
            .and_then(|component| self.components.get(component))
            .unwrap_or(&self.tenant)
            .clone()
    }
}

/// The secrets of every tenant, in the store.
pub struct Secrets {
    storage: Storage,
    key: Mutex<Option<Arc<SecretKey>>>,
    /// What each tenant's steps were last given, and when it was read.
    opened: Mutex<HashMap<TenantId, (Instant, Arc<StepSecrets>)>>,
    /// Each tenant's sets on this host, one at a time, so that each counts
    /// what the others added.
    writes: Mutex<HashMap<TenantId, Arc<tokio::sync::Mutex<()>>>>,
}

impl Secrets {
    /// The secrets kept in `storage`, with no key until
    /// [`Secrets::set_key`]: until then none can be set or opened.
    pub fn new(storage: Storage) -> Self {
        Self {
            storage,
            key: Mutex::default(),
            opened: Mutex::default(),
            writes: Mutex::default(),
        }
    }

    /// Seals and opens secrets with `key` from now on.
    pub fn set_key(&self, key: SecretKey) {
        *lock(&self.key) = Some(Arc::new(key));
        lock(&self.opened).clear();
    }

    /// A key derived from the host key for `purpose` (see
    /// [`SecretKey::derive`]), if the host has one.
    pub fn derived_key(&self, purpose: &str) -> Option<[u8; 32]> {
        lock(&self.key).as_ref().map(|key| key.derive(purpose))
    }

    fn key(&self) -> Result<Arc<SecretKey>, SecretError> {
        lock(&self.key).clone().ok_or(SecretError::NoKey)
    }

    /// Sets `name` to `value` for `tenant` (or its component `scope`), sealed.
    pub async fn set(
        &self,
        tenant: &TenantId,
        scope: Scope<'_>,
        name: &SecretName,
        value: &str,
    ) -> Result<(), SecretError> {
        if value.is_empty() {
            return Err(SecretError::Empty { name: name.clone() });
        }
        let length = value.chars().count();
        if length > MAX_SECRET_CHARS {
            return Err(SecretError::TooLarge {
                name: name.clone(),
                length,
            });
        }
        let key = self.key()?;
        let writes = lock(&self.writes).entry(tenant.clone()).or_default().clone();
        let _one_at_a_time = writes.lock().await;
        let new = !self.names(tenant, scope).await?.contains(name);
        if new && self.held(tenant).await? >= MAX_SECRETS {
            return Err(SecretError::TooMany);
        }
        let sealed = key.seal(tenant, scope, name, value.as_bytes());
        let store = self.storage.tenant(tenant);
        store.overwrite(&key_of(scope, name), Bytes::from(sealed)).await?;
        lock(&self.opened).remove(tenant);
        if new && self.held(tenant).await? > MAX_SECRETS {
            store.delete(&key_of(scope, name)).await?;
            return Err(SecretError::TooMany);
        }
        Ok(())
    }

    /// How many secrets `tenant` holds, its own and its components'.
    async fn held(&self, tenant: &TenantId) -> Result<usize, SecretError> {
        let store = self.storage.tenant(tenant);
        let own = store.list(&folder(None)).await?.len();
        Ok(own + store.list(&StoreKey::from(COMPONENTS_FOLDER)).await?.len())
    }

    /// The names of `tenant`'s secrets (or its component `scope`'s), sorted.
    pub async fn names(&self, tenant: &TenantId, scope: Scope<'_>) -> Result<Vec<SecretName>, SecretError> {
        let keys = self.storage.tenant(tenant).list(&folder(scope)).await?;
        Ok(keys
            .iter()
            .filter_map(|key| SecretName::new(key.filename()?).ok())
            .collect())
    }

    /// The value of the tenant's own secret `name`, opened for the host
    /// itself (say, to sign what it sends on the tenant's behalf).
    pub async fn value(&self, tenant: &TenantId, name: &SecretName) -> Result<Option<String>, SecretError> {
        let Some(sealed) = self.storage.tenant(tenant).get(&key_of(None, name)).await? else {
            return Ok(None);
        };
        self.key()?.open(tenant, None, name.as_str(), &sealed).map(Some)
    }

    /// Deletes `name`; whether it was there.
    pub async fn delete(&self, tenant: &TenantId, scope: Scope<'_>, name: &SecretName) -> Result<bool, SecretError> {
        let existed = self.names(tenant, scope).await?.contains(name);
        self.storage.tenant(tenant).delete(&key_of(scope, name)).await?;
        lock(&self.opened).remove(tenant);
        Ok(existed)
    }

    /// `tenant`'s secrets, opened, for its step attempts: read again once
    /// 10 seconds have passed (`OPENED_FOR`), in two round trips (the two
    /// folders listed at once, then every secret read at once). A tenant
    /// without secrets needs no key.
    pub async fn for_steps(&self, tenant: &TenantId) -> Result<Arc<StepSecrets>, SecretError> {
        if let Some((read, opened)) = lock(&self.opened).get(tenant)
            && read.elapsed() < OPENED_FOR
        {
            return Ok(opened.clone());
        }
        let store = self.storage.tenant(tenant);
        let (tenants_folder, components_folder) = (StoreKey::from("secrets"), StoreKey::from(COMPONENTS_FOLDER));
        let (own, scoped) = futures::try_join!(store.list(&tenants_folder), store.list(&components_folder))?;
        // At most MAX_SECRETS (and a few written past it in a race), all at once.
        let reads = (own.iter().chain(&scoped)).map(|key| read_sealed(store.clone(), key.clone()));
        let sealed = futures::future::try_join_all(reads).await?;
        let mut sealed = (own.iter().chain(&scoped)).zip(sealed);
        let tenants = self.open_all(tenant, None, BTreeMap::new(), sealed.by_ref().take(own.len()))?;
        let mut by_component: BTreeMap<ComponentName, Vec<(&StoreKey, Option<Bytes>)>> = BTreeMap::new();
        for (key, bytes) in sealed {
            if let Some(component) = key
                .parts()
                .nth(1)
                .and_then(|part| ComponentName::new(part.as_ref()).ok())
            {
                by_component.entry(component).or_default().push((key, bytes));
            }
        }
        let mut components = HashMap::new();
        for (component, sealed) in by_component {
            let over = self.open_all(tenant, Some(&component), tenants.clone(), sealed)?;
            components.insert(component.as_str().to_owned(), Arc::new(opened_from(over)));
        }
        let opened = Arc::new(StepSecrets {
            tenant: Arc::new(opened_from(tenants)),
            components,
        });
        lock(&self.opened).insert(tenant.clone(), (Instant::now(), opened.clone()));
        Ok(opened)
    }

    /// `values` with `scope`'s secrets, as read (`None`: deleted since
    /// listed), opened over them.
    fn open_all<'k>(
        &self,
        tenant: &TenantId,
        scope: Scope<'_>,
        mut values: BTreeMap<String, String>,
        sealed: impl IntoIterator<Item = (&'k StoreKey, Option<Bytes>)>,
    ) -> Result<BTreeMap<String, String>, SecretError> {
        for (key, sealed) in sealed {
            let (Some(name), Some(sealed)) = (key.filename(), sealed) else {
                continue;
            };
            let value = self.key()?.open(tenant, scope, name, &sealed)?;
            values.insert(name.to_owned(), value);
        }
        Ok(values)
    }
}

/// The sealed secret at `key`, if it is still there.
async fn read_sealed(store: TenantStore, key: StoreKey) -> Result<Option<Bytes>, StoreError> {
    store.get(&key).await
}

fn opened_from(values: BTreeMap<String, String>) -> OpenedSecrets {
    OpenedSecrets {
        names: values.keys().cloned().collect(),
        variables: values.into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SecretKey {
        SecretKey::from_hex(&"ab".repeat(32)).expect("a valid key")
    }

    fn keyed(storage: Storage, key: SecretKey) -> Secrets {
        let secrets = Secrets::new(storage);
        secrets.set_key(key);
        secrets
    }

    fn name(text: &str) -> SecretName {
        SecretName::new(text).expect("a valid name")
    }

    #[tokio::test]
    async fn a_secret_is_stored_sealed_and_opens_for_its_own_tenant_only() -> Result<(), SecretError> {
        let storage = Storage::in_memory();
        let secrets = keyed(storage.clone(), key());
        let (acme, globex) = (
            TenantId::new("acme").expect("valid"),
            TenantId::new("globex").expect("valid"),
        );
        secrets.set(&acme, None, &name("api-key"), "s3cr3t-value").await?;
        let stored = storage
            .tenant(&acme)
            .get(&key_of(None, &name("api-key")))
            .await?
            .expect("stored");
        assert!(
            !stored.windows(6).any(|w| w == b"s3cr3t"),
            "the value is stored in the clear"
        );
        assert_eq!(secrets.for_steps(&acme).await?.for_component(None).names(), ["api-key"]);
        assert!(secrets.for_steps(&globex).await?.for_component(None).names().is_empty());
        // Copied to another tenant, it does not open.
        storage
            .tenant(&globex)
            .overwrite(&key_of(None, &name("api-key")), stored)
            .await?;
        let copied = keyed(storage, key()).for_steps(&globex).await.unwrap_err();
        assert!(matches!(copied, SecretError::Sealed { .. }), "{copied}");
        Ok(())
    }

    #[tokio::test]
    async fn without_the_key_nothing_is_set_and_another_key_opens_nothing() -> Result<(), SecretError> {
        let storage = Storage::in_memory();
        let tenant = TenantId::default_tenant();
        let keyless = Secrets::new(storage.clone());
        assert!(
            keyless.for_steps(&tenant).await?.for_component(None).names().is_empty(),
            "no secrets need no key"
        );
        let refused = keyless.set(&tenant, None, &name("a"), "v").await.unwrap_err();
        assert!(refused.to_string().contains(SECRET_KEY_VAR), "{refused}");
        keyed(storage.clone(), key())
            .set(&tenant, None, &name("a"), "v")
            .await?;
        let other = SecretKey::from_hex(&"cd".repeat(32))?;
        let wrong = keyed(storage, other).for_steps(&tenant).await.unwrap_err();
        assert!(
            wrong.to_string().contains("does not open with this host's key"),
            "{wrong}"
        );
        for bad in ["", "abc", &"zz".repeat(32), &"ab".repeat(31)] {
            assert!(
                matches!(SecretKey::from_hex(bad), Err(SecretError::BadKey { .. })),
                "{bad:?}"
            );
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_value_over_the_limit_and_a_secret_past_the_count_are_refused() -> Result<(), SecretError> {
        let secrets = keyed(Storage::in_memory(), key());
        let tenant = TenantId::default_tenant();
        secrets
            .set(&tenant, None, &name("edge"), &"é".repeat(MAX_SECRET_CHARS))
            .await?;
        let large = secrets
            .set(&tenant, None, &name("over"), &"x".repeat(MAX_SECRET_CHARS + 1))
            .await;
        assert!(matches!(large, Err(SecretError::TooLarge { .. })));
        for n in 1..MAX_SECRETS {
            secrets.set(&tenant, None, &name(&format!("s{n}")), "v").await?;
        }
        let past = secrets.set(&tenant, None, &name("one-more"), "v").await;
        assert!(matches!(past, Err(SecretError::TooMany)));
        secrets.set(&tenant, None, &name("edge"), "replaced").await?;
        assert!(secrets.delete(&tenant, None, &name("edge")).await?);
        assert!(!secrets.delete(&tenant, None, &name("edge")).await?);
        secrets.set(&tenant, None, &name("one-more"), "v").await?;
        assert_eq!(secrets.names(&tenant, None).await?.len(), MAX_SECRETS);
        Ok(())
    }

    /// Sets racing for the last places, on one host and on two sharing a
    /// store: the count never ends past the limit.
    #[tokio::test]
    async fn concurrent_sets_never_pass_the_count() -> Result<(), SecretError> {
        // Every store call waits, so the racing sets interleave.
        let slow = "latency=1ms".parse().expect("a fault setting");
        let (storage, _) = Storage::in_memory().with_faults(slow);
        let (one, other) = (keyed(storage.clone(), key()), keyed(storage, key()));
        let tenant = TenantId::default_tenant();
        for n in 2..MAX_SECRETS {
            one.set(&tenant, None, &name(&format!("s{n}")), "v").await?;
        }
        let racing = (0..20).map(|n| {
            let host = if n % 2 == 0 { &one } else { &other };
            let tenant = &tenant;
            async move { host.set(tenant, None, &name(&format!("new-{n}")), "v").await }
        });
        let sets = futures::future::join_all(racing).await;
        let set = sets.iter().filter(|set| set.is_ok()).count();
        assert!(
            sets.iter().all(|set| matches!(set, Ok(()) | Err(SecretError::TooMany))),
            "{sets:?}"
        );
        let held = one.names(&tenant, None).await?.len();
        assert!(held <= MAX_SECRETS, "{held} secrets held");
        assert_eq!(held, MAX_SECRETS - 2 + set, "a refused set left nothing behind");
        assert!(set >= 1, "a place was free: someone got it");
        Ok(())
    }

    #[tokio::test]
    async fn a_components_secret_is_read_in_place_of_the_tenants_by_its_steps_only() -> Result<(), SecretError> {
        let storage = Storage::in_memory();
        let secrets = keyed(storage.clone(), key());
        let tenant = TenantId::default_tenant();
        let billing = ComponentName::new("billing").expect("valid");
        secrets.set(&tenant, None, &name("api-key"), "tenant-wide").await?;
        secrets.set(&tenant, None, &name("region"), "eu").await?;
        secrets
            .set(&tenant, Some(&billing), &name("api-key"), "billing-only")
            .await?;
        assert_eq!(secrets.names(&tenant, None).await?, [name("api-key"), name("region")]);
        assert_eq!(secrets.names(&tenant, Some(&billing)).await?, [name("api-key")]);
        let opened = secrets.for_steps(&tenant).await?;
        // Which value each reads, the end-to-end tests show (tests/secrets.rs).
        assert_eq!(opened.for_component(Some("billing")).names(), ["api-key", "region"]);
        assert!(
            !Arc::ptr_eq(&opened.for_component(Some("billing")), &opened.for_component(None)),
            "billing reads a set of its own"
        );
        assert!(
            Arc::ptr_eq(&opened.for_component(Some("shipping")), &opened.for_component(None)),
            "another component reads the tenant's"
        );
        // A component's sealed value copied over the tenant's does not open.
        let sealed = storage
            .tenant(&tenant)
            .get(&key_of(Some(&billing), &name("api-key")))
            .await?
            .expect("stored");
        storage
            .tenant(&tenant)
            .overwrite(&key_of(None, &name("api-key")), sealed)
            .await?;
        let moved = keyed(storage, key()).for_steps(&tenant).await.unwrap_err();
        assert!(matches!(moved, SecretError::Sealed { .. }), "{moved}");
        assert!(secrets.delete(&tenant, Some(&billing), &name("api-key")).await?);
        assert!(!secrets.delete(&tenant, Some(&billing), &name("api-key")).await?);
        Ok(())
    }

    #[tokio::test]
    async fn a_tenants_and_its_components_secrets_count_together() -> Result<(), SecretError> {
        let secrets = keyed(Storage::in_memory(), key());
        let tenant = TenantId::default_tenant();
        let billing = ComponentName::new("billing").expect("valid");
        for n in 0..MAX_SECRETS / 2 {
            secrets.set(&tenant, None, &name(&format!("t{n}")), "v").await?;
            secrets
                .set(&tenant, Some(&billing), &name(&format!("c{n}")), "v")
                .await?;
        }
        let past = secrets.set(&tenant, Some(&billing), &name("one-more"), "v").await;
        assert!(matches!(past, Err(SecretError::TooMany)));
        secrets.set(&tenant, Some(&billing), &name("c0"), "replaced").await?;
        Ok(())
    }
}
