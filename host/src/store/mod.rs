//! Object storage: one [`ObjectStore`] behind everything, the key layout, and
//! per-tenant isolation through prefixes.
//!
//! Invariants: every key a tenant's data lives at starts with
//! `tenants/{tenant}/` (a [`TenantStore`] cannot name any other); records are
//! written whole, never in place, and create-only (`PutMode::Create`), so a
//! second writer fails instead of replacing what the first wrote; only
//! pointers (a component name) are overwritten. Every call is retried
//! while the store fails transiently (bounded, with backoff and jitter), and
//! a create-only write retried after a lost reply succeeds only if what is
//! stored is byte for byte what it wrote.

mod checks;
// Only the binary arms a crash point (for the crash suite), so only the
// `internals` build has them.
#[cfg(feature = "internals")]
mod crash_points;
mod faults;
mod keys;
mod local;
pub mod location;
mod offset_listing;
#[cfg(any(test, feature = "internals"))]
#[doc(hidden)]
pub mod seams;
mod write_log;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::memory::InMemory;
use object_store::path::Path as Key;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

pub use checks::Probes;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use crash_points::{CRASH_AT_VAR, CrashPhase, CrashPoint, CrashingStore, InvalidCrashPoint};
pub use faults::{FaultConfig, FaultConfigError, FaultScope, Faults, FaultyStore, InjectedFault};
// The layout's keys are the store's own.
internal_use!(keys::{IncarnationKeys, RunKeys, keys_of, place_generation, unfinished_key, unfinished_marker});
pub use keys::{
    ComponentName, ConcurrencyKey, GroupId, HookName, InvalidName, RunId, RunTag, ScheduleName, SecretName, SignalId,
    SignalName, StreamName, TenantId, WorkflowName,
};
// Where each object of the layout lives is the store's own business.
pub(crate) use keys::{
    chain_key, component_key, component_name_key, component_names_key, component_version_key, component_versions_key,
    components_key, finished_key, finished_marker, group_key, hook_key, hooks_key, outbox_entry, outbox_key,
    parse_finished_marker, parse_place_generation, parse_ticket, places_key, runs_key, schedule_key, schedules_key,
    ticket, tickets_key, unfinished_index_complete,
};
pub use local::{Durability, LocalStore, UnknownDurability};
pub use object_store::path::Path as StoreKey;

/// A failed store operation, typed by what the caller can do about it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Nothing is stored at the key.
    #[error("nothing stored at {key}")]
    NotFound {
        /// The key, relative to the view's prefix (a tenant's, without `tenants/{tenant}/`).
        key: String,
    },
    /// A create-only write found the key taken: another writer got there first.
    #[error("{key} was already written by another writer")]
    AlreadyExists {
        /// The key, relative to the view's prefix (a tenant's, without `tenants/{tenant}/`).
        key: String,
    },
    /// The store could not be reached or failed, and kept failing.
    #[error("storage failed at {key} after {attempts} attempt(s): {cause}")]
    Unavailable {
        /// The key, relative to the view's prefix (a tenant's, without `tenants/{tenant}/`).
        key: String,
        /// How many times the call was tried, the first included.
        attempts: u32,
        /// The last failure; part of the message, so not a `source` to print twice.
        cause: object_store::Error,
    },
    /// The data directory could not be opened.
    #[error("cannot open the data directory {path}: {reason}")]
    Open {
        /// The data directory, as given.
        path: String,
        /// Why it could not be created or opened, from the file system.
        reason: String,
    },
    /// The store answers, but does not do what the engine stands on
    /// (create-only writes that one writer wins, reads consistent after
    /// writes): no host runs on it.
    #[error("cannot use the store {location}: {reason}")]
    Unsuitable {
        /// The store's URL, as given.
        location: String,
        /// What it did, and what to use instead.
        reason: String,
    },
    /// The store a URL names cannot be used: the URL, or the bucket, the
    /// endpoint or the credentials behind it.
    #[error("cannot use the store {location}: {reason}")]
    Location {
        /// The store's URL, as given.
        location: String,
        /// What is wrong with it, and what to check.
        reason: String,
    },
}

impl StoreError {
    fn at(key: &Key, Failed { source, attempts }: Failed) -> Self {
        let key = key.to_string();
        match source {
            object_store::Error::NotFound { .. } => Self::NotFound { key },
            object_store::Error::AlreadyExists { .. } => Self::AlreadyExists { key },
            cause => Self::Unavailable { key, attempts, cause },
        }
    }
}

/// The last error of a call, and how many times it was tried.
struct Failed {
    source: object_store::Error,
    attempts: u32,
}

/// How store calls are retried: exponential backoff with jitter, bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreRetries {
    /// Tries of one call, the first included.
    pub attempts: u32,
    /// The wait before the first retry; each next one doubles, plus jitter.
    pub first_delay: Duration,
    /// The longest wait between two tries, however many came before.
    pub max_delay: Duration,
}

impl Default for StoreRetries {
    /// Eight tries over about 2.5 s at most: a store that fails that long is
    /// down, and the caller is told.
    fn default() -> Self {
        Self {
            attempts: 8,
            first_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(1),
        }
    }
}

impl StoreRetries {
    fn backoff(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_jitter()
            .with_min_delay(self.first_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.attempts.saturating_sub(1) as usize)
    }
}

/// Whether trying the same call again may succeed: not for answers about the
/// data (missing, taken) or the request itself.
fn is_transient(error: &object_store::Error) -> bool {
    use object_store::Error::*;
    !matches!(
        error,
        NotFound { .. }
            | AlreadyExists { .. }
            | Precondition { .. }
            | NotModified { .. }
            | NotImplemented { .. }
            | NotSupported { .. }
            | PermissionDenied { .. }
            | Unauthenticated { .. }
            | InvalidPath { .. }
            | UnknownConfigurationKey { .. }
    )
}

/// The host's storage: any [`ObjectStore`], shared by every tenant.
#[derive(Clone, Debug)]
pub struct Storage {
    root: Arc<dyn ObjectStore>,
    /// The same store without crash points or injected faults: those test
    /// what a run's records survive, and hosts' heartbeats and wake-ups are
    /// not among them.
    cluster_root: Arc<dyn ObjectStore>,
    retries: StoreRetries,
    /// Where the store is, for messages.
    location: String,
}

impl Storage {
    /// Storage over any object store (S3, a fault injector, ...).
    pub fn new(root: Arc<dyn ObjectStore>) -> Self {
        Self {
            cluster_root: root.clone(),
            root,
            retries: StoreRetries::default(),
            location: "given to the host".into(),
        }
    }

    /// Storage at the location a URL names (see [`location`]); a `file://`
    /// location is as durable as `durability` says (other stores decide
    /// for themselves).
    pub fn open(location: &str, durability: Durability) -> Result<Self, StoreError> {
        location::open(location, durability)
    }

    /// The same storage, named `location` in messages.
    fn at(self, location: &str) -> Self {
        Self {
            location: location.into(),
            ..self
        }
    }

    /// The same storage, with store calls retried as `retries` says.
    pub fn with_retries(self, retries: StoreRetries) -> Self {
        Self { retries, ..self }
    }

    /// The same storage seen through a [`FaultyStore`], with its faults to
    /// count and change.
    pub fn with_faults(self, config: FaultConfig) -> (Self, Arc<Faults>) {
        let faulty = FaultyStore::new(self.root, config);
        let counts = faulty.faults();
        let storage = Self {
            root: Arc::new(faulty),
            ..self
        };
        (storage, counts)
    }

    /// Storage in memory, gone with the process: for tests.
    pub fn in_memory() -> Self {
        Self::new(Arc::new(InMemory::new())).at("memory://")
    }

    /// Storage on the local file system under `dir`, created if absent,
    /// without syncing writes (they survive a crash of the process, not of
    /// the machine): for tests and benchmarks; see [`Storage::local_with`].
    pub fn local(dir: &Path) -> Result<Self, StoreError> {
        Self::local_with(dir, Durability::NoFsync)
    }

    /// Storage on the local file system under `dir`, created if absent, its
    /// writes as durable as `durability` says.
    pub fn local_with(dir: &Path, durability: Durability) -> Result<Self, StoreError> {
        let open = |reason: String| StoreError::Open {
            path: dir.display().to_string(),
            reason,
        };
        local::create_dir(dir, durability).map_err(|e| open(e.to_string()))?;
        let store = local::local_store(dir, durability).map_err(|e| open(e.to_string()))?;
        Ok(Self::new(store).at(&format!("file://{}", dir.display())))
    }

    /// The part of the store that belongs to `tenant`.
    pub fn tenant(&self, tenant: &TenantId) -> TenantStore {
        TenantStore {
            scope: self.scope(&self.root, Key::from_iter(["tenants", tenant.as_str()])),
            tenant: tenant.clone(),
        }
    }

    /// The part of the store the hosts sharing it keep for each other
    /// (heartbeats, wake-ups), under `cluster/`.
    pub fn cluster(&self) -> Scope {
        self.scope(&self.cluster_root, Key::from("cluster"))
    }

    fn scope(&self, root: &Arc<dyn ObjectStore>, prefix: Key) -> Scope {
        Scope {
            store: Arc::new(PrefixStore::new(root.clone(), prefix)),
            retries: self.retries,
        }
    }
}

/// One tenant's view of the store; every key is relative to its prefix.
#[derive(Clone, Debug)]
pub struct TenantStore {
    scope: Scope,
    tenant: TenantId,
}

impl TenantStore {
    /// The tenant whose data this view holds.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }
}

impl std::ops::Deref for TenantStore {
    type Target = Scope;

    fn deref(&self) -> &Scope {
        &self.scope
    }
}

/// A view of the store under one prefix, which every key is relative to;
/// every call is retried while the store fails transiently.
#[derive(Clone, Debug)]
pub struct Scope {
    store: Arc<PrefixStore<Arc<dyn ObjectStore>>>,
    retries: StoreRetries,
}

impl Scope {
    /// Writes `bytes` at `key`; fails with [`StoreError::AlreadyExists`] if
    /// the key holds anything else.
    pub async fn create(&self, key: &Key, bytes: Bytes) -> Result<(), StoreError> {
        match self.put(key, bytes.clone(), PutMode::Create).await {
            // An earlier try may have landed with its reply lost: then the
            // key holds these very bytes, and the write did succeed.
            Err(Failed {
                source: object_store::Error::AlreadyExists { .. },
                attempts: 2..,
            }) if self.get(key).await?.as_ref() == Some(&bytes) => {
                tracing::debug!(%key, "a retried create found its own earlier write");
                Ok(())
            }
            result => result.map_err(|failed| StoreError::at(key, failed)),
        }
    }

    /// Deletes `key`; deleting nothing is no error.
    pub async fn delete(&self, key: &Key) -> Result<(), StoreError> {
        match self.retried(key, || self.store.delete(key)).await {
            Ok(())
            | Err(Failed {
                source: object_store::Error::NotFound { .. },
                ..
            }) => Ok(()),
            Err(failed) => Err(StoreError::at(key, failed)),
        }
    }

    /// Deletes every key of `keys` in as few requests as the store takes
    /// (S3 deletes 1,000 a request); a key holding nothing is no error.
    pub async fn delete_all(&self, keys: &[Key]) -> Result<(), StoreError> {
        let Some(first) = keys.first() else { return Ok(()) };
        let delete = || {
            let locations = futures::stream::iter(keys.to_vec()).map(Ok).boxed();
            self.store
                .delete_stream(locations)
                .filter(|deleted| {
                    let gone = matches!(deleted, Err(object_store::Error::NotFound { .. }));
                    std::future::ready(!gone)
                })
                .try_for_each(|_| std::future::ready(Ok(())))
        };
        self.retried(first, delete)
            .await
            .map_err(|failed| StoreError::at(first, failed))
    }

    /// Writes `bytes` at `key`, replacing what was there: for pointers and
    /// markers only (a component name, an unfinished run), never for records.
    pub async fn overwrite(&self, key: &Key, bytes: Bytes) -> Result<(), StoreError> {
        self.put(key, bytes, PutMode::Overwrite)
            .await
            .map_err(|failed| StoreError::at(key, failed))
    }

    /// Writes `bytes` at `key` as [`overwrite`](Self::overwrite) does, and
    /// says the version written, from the write's own answer (as
    /// [`version`](Self::version) reads it); `None` from a store that
    /// answers a write with none. A read after the write could answer
    /// another writer's version, landed in between.
    pub async fn overwrite_versioned(&self, key: &Key, bytes: Bytes) -> Result<Option<String>, StoreError> {
        let written = self
            .put_answered(key, bytes, PutMode::Overwrite)
            .await
            .map_err(|failed| StoreError::at(key, failed))?;
        Ok(written.e_tag.map(|tag| bare_tag(&tag)))
    }

    async fn put(&self, key: &Key, bytes: Bytes, mode: PutMode) -> Result<(), Failed> {
        self.put_answered(key, bytes, mode).await.map(drop)
    }

    async fn put_answered(&self, key: &Key, bytes: Bytes, mode: PutMode) -> Result<object_store::PutResult, Failed> {
        let put = || {
            let options = PutOptions {
                mode: mode.clone(),
                ..PutOptions::default()
            };
            self.store.put_opts(key, PutPayload::from_bytes(bytes.clone()), options)
        };
        self.retried(key, put).await
    }

    /// Reads `key`, or `None` if nothing is stored there.
    pub async fn get(&self, key: &Key) -> Result<Option<Bytes>, StoreError> {
        let read = || async { self.store.get(key).await?.bytes().await };
        match self.retried(key, read).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(Failed {
                source: object_store::Error::NotFound { .. },
                ..
            }) => Ok(None),
            Err(failed) => Err(StoreError::at(key, failed)),
        }
    }

    /// Every key under `prefix`, in lexicographic order.
    pub async fn list(&self, prefix: &Key) -> Result<Vec<Key>, StoreError> {
        self.sorted_keys(prefix, None).await
    }

    /// The keys under `prefix` that sort after `offset`, in lexicographic
    /// order. The store passes over the others unread (the local file
    /// system does not stat them), so the end of a long folder costs less
    /// than all of it.
    pub async fn list_after(&self, prefix: &Key, offset: &Key) -> Result<Vec<Key>, StoreError> {
        self.sorted_keys(prefix, Some(offset)).await
    }

    /// Every key under `prefix`, in lexicographic order, if there are
    /// fewer than `fewer_than`; `None` if there are more. One request on a
    /// store whose listing pages hold `fewer_than` keys (S3's hold 1,000).
    pub async fn list_fewer_than(&self, prefix: &Key, fewer_than: usize) -> Result<Option<Vec<Key>>, StoreError> {
        let list = || {
            (self.store.list(Some(prefix)))
                .take(fewer_than)
                .map_ok(|meta| meta.location)
                .try_collect::<Vec<Key>>()
        };
        let mut keys = self
            .retried(prefix, list)
            .await
            .map_err(|failed| StoreError::at(prefix, failed))?;
        if keys.len() == fewer_than {
            return Ok(None);
        }
        keys.sort();
        Ok(Some(keys))
    }

    async fn sorted_keys(&self, prefix: &Key, offset: Option<&Key>) -> Result<Vec<Key>, StoreError> {
        let list = || {
            let listing = match offset {
                Some(offset) => self.store.list_with_offset(Some(prefix), offset),
                None => self.store.list(Some(prefix)),
            };
            listing.map_ok(|meta| meta.location).try_collect::<Vec<Key>>()
        };
        let mut keys = self
            .retried(prefix, list)
            .await
            .map_err(|failed| StoreError::at(prefix, failed))?;
        keys.sort();
        Ok(keys)
    }

    /// Every key under `prefix` with its size in bytes.
    pub async fn sizes(&self, prefix: &Key) -> Result<Vec<(Key, u64)>, StoreError> {
        let list = || {
            self.store
                .list(Some(prefix))
                .map_ok(|meta| (meta.location, meta.size))
                .try_collect::<Vec<_>>()
        };
        self.retried(prefix, list)
            .await
            .map_err(|failed| StoreError::at(prefix, failed))
    }

    /// Every key under `prefix` with its version: a tag that changes each
    /// time the key is written (its ETag, or its modification time).
    pub async fn versions(&self, prefix: &Key) -> Result<Vec<(Key, String)>, StoreError> {
        let list = || {
            self.store
                .list(Some(prefix))
                .map_ok(|meta| {
                    let version = version_of(&meta);
                    (meta.location, version)
                })
                .try_collect::<Vec<_>>()
        };
        self.retried(prefix, list)
            .await
            .map_err(|failed| StoreError::at(prefix, failed))
    }

    /// The version of `key` (see [`versions`](Self::versions)), or `None`
    /// if nothing is stored there.
    pub async fn version(&self, key: &Key) -> Result<Option<String>, StoreError> {
        match self.retried(key, || self.store.head(key)).await {
            Ok(meta) => Ok(Some(version_of(&meta))),
            Err(Failed {
                source: object_store::Error::NotFound { .. },
                ..
            }) => Ok(None),
            Err(failed) => Err(StoreError::at(key, failed)),
        }
    }

    /// The names of the "directories" right under `prefix`.
    pub async fn children(&self, prefix: &Key) -> Result<Vec<String>, StoreError> {
        let listing = self
            .retried(prefix, || self.store.list_with_delimiter(Some(prefix)))
            .await
            .map_err(|failed| StoreError::at(prefix, failed))?;
        let mut names: Vec<String> = listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_owned))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Makes `call` on `key` until it succeeds, fails for good, or has
    /// been tried as often as the retry policy allows.
    async fn retried<T, F>(&self, key: &Key, mut call: impl FnMut() -> F) -> Result<T, Failed>
    where
        F: Future<Output = object_store::Result<T>>,
    {
        let attempts = AtomicU32::new(1);
        let result = (|| call())
            .retry(self.retries.backoff())
            .when(is_transient)
            .notify(|error, wait| {
                let attempt = attempts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%key, attempt, retry_in_ms = crate::clock::millis(wait), %error, "storage call failed; retrying");
            })
            .await;
        result.map_err(|source| Failed {
            source,
            attempts: attempts.into_inner(),
        })
    }
}

/// A key's version as one string whatever the store: its ETag without the
/// quotes and weak marker some stores add and others leave out (Azure
/// lists ETags bare and answers a HEAD with them quoted: compared as
/// given, a version would never be seen again), or, without one, its
/// modification time and size.
fn version_of(meta: &object_store::ObjectMeta) -> String {
    match &meta.e_tag {
        Some(tag) => bare_tag(tag),
        None => format!("{}-{}", meta.last_modified.timestamp_micros(), meta.size),
    }
}

/// An ETag without the quotes and weak marker some stores add.
fn bare_tag(tag: &str) -> String {
    tag.trim_start_matches("W/").trim_matches('"').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn an_etag_reads_the_same_quoted_bare_or_weak() {
        let meta = |tag: Option<&str>| object_store::ObjectMeta {
            location: Key::from("k"),
            last_modified: chrono::DateTime::from_timestamp_micros(1_700_000_000_000_000).expect("a time"),
            size: 7,
            e_tag: tag.map(str::to_owned),
            version: None,
        };
        let versions: Vec<String> = ["\"0x8DC\"", "0x8DC", "W/\"0x8DC\""]
            .into_iter()
            .map(|tag| version_of(&meta(Some(tag))))
            .collect();
        assert_eq!(versions, ["0x8DC", "0x8DC", "0x8DC"]);
        assert_eq!(version_of(&meta(None)), "1700000000000000-7");
    }

    fn tenant(name: &str) -> TenantId {
        TenantId::new(name).expect("a valid tenant id")
    }

    #[tokio::test]
    async fn tenants_never_see_each_others_keys() -> TestResult {
        let storage = Storage::in_memory();
        let (a, b) = (storage.tenant(&tenant("a")), storage.tenant(&tenant("b")));
        let key = Key::from("runs/r1/run");
        a.create(&key, Bytes::from_static(b"of a")).await?;
        assert_eq!(b.get(&key).await?, None);
        assert!(b.list(&Key::from("runs")).await?.is_empty());
        assert_eq!(a.get(&key).await?.as_deref(), Some(&b"of a"[..]));
        Ok(())
    }

    #[tokio::test]
    async fn create_refuses_a_taken_key_on_every_backend() -> TestResult {
        let dir = tempfile::tempdir()?;
        for storage in [Storage::in_memory(), Storage::local(dir.path())?] {
            let store = storage.tenant(&tenant("t"));
            let key = Key::from("runs/r/journal/0000000001");
            store.create(&key, Bytes::from_static(b"first")).await?;
            let err = store.create(&key, Bytes::from_static(b"second")).await.unwrap_err();
            assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err}");
            assert_eq!(store.get(&key).await?.as_deref(), Some(&b"first"[..]));
        }
        Ok(())
    }

    #[tokio::test]
    async fn list_after_gives_only_the_keys_past_the_offset_on_every_backend() -> TestResult {
        let dir = tempfile::tempdir()?;
        for storage in [Storage::in_memory(), Storage::local(dir.path())?] {
            let store = storage.tenant(&tenant("t"));
            for seq in [3, 1, 0, 2, 10] {
                let key = Key::from(format!("runs/r/journal/{seq:010}"));
                store.create(&key, Bytes::new()).await?;
            }
            store.create(&Key::from("runs/r/run"), Bytes::new()).await?;
            let after = store
                .list_after(&Key::from("runs/r/journal"), &Key::from("runs/r/journal/0000000001"))
                .await?;
            let names: Vec<_> = after.iter().filter_map(|key| key.filename()).collect();
            assert_eq!(names, ["0000000002", "0000000003", "0000000010"]);
        }
        Ok(())
    }

    #[tokio::test]
    async fn children_lists_one_level() -> TestResult {
        let store = Storage::in_memory().tenant(&tenant("t"));
        for key in ["runs/r1/run", "runs/r2/run", "runs/r2/journal/1"] {
            store.create(&Key::from(key), Bytes::new()).await?;
        }
        assert_eq!(store.children(&Key::from("runs")).await?, ["r1", "r2"]);
        Ok(())
    }

    fn quick_retries(attempts: u32) -> StoreRetries {
        StoreRetries {
            attempts,
            first_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        }
    }

    #[tokio::test]
    async fn retries_hide_a_flaky_store_and_a_create_whose_reply_was_lost_succeeds() -> TestResult {
        let (storage, counts) = Storage::in_memory().with_faults("errors=0.5,on=writes,seed=11".parse()?);
        let store = storage.with_retries(quick_retries(40)).tenant(&tenant("t"));
        for i in 0..100 {
            let key = Key::from(format!("runs/r/journal/{i:010}"));
            store.create(&key, Bytes::from(format!("entry {i}"))).await?;
            let other = store.create(&key, Bytes::from_static(b"another")).await.unwrap_err();
            assert!(matches!(other, StoreError::AlreadyExists { .. }), "{other}");
        }
        assert_eq!(store.list(&Key::from("runs/r/journal")).await?.len(), 100);
        assert!(counts.injected() >= 50, "only {} faults injected", counts.injected());
        Ok(())
    }

    #[tokio::test]
    async fn a_store_that_keeps_failing_is_reported_with_the_key_and_the_attempts() -> TestResult {
        let (storage, counts) = Storage::in_memory().with_faults("errors=1,landed=0".parse()?);
        let store = storage.with_retries(quick_retries(3)).tenant(&tenant("t"));
        let error = store.get(&Key::from("runs/r/run")).await.unwrap_err();
        assert!(matches!(error, StoreError::Unavailable { attempts: 3, .. }), "{error}");
        let message = error.to_string();
        assert!(
            message.starts_with("storage failed at runs/r/run after 3 attempt(s): ") && message.contains("injected"),
            "{message}"
        );
        assert_eq!(counts.operations(), 3);
        Ok(())
    }
}
