//! Object storage: one [`ObjectStore`] behind everything, the key layout, and
//! per-tenant isolation through prefixes.
//!
//! Invariants: every key a tenant's data lives at starts with
//! `tenants/{tenant}/` (a [`TenantStore`] cannot name any other); records are
//! written whole, never in place, and create-only (`PutMode::Create`), so a
//! second writer fails instead of replacing what the first wrote; only
//! pointers (a component name) are overwritten.

mod crash_points;
mod keys;

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path as Key;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

pub use crash_points::{CRASH_AT_VAR, CrashPhase, CrashPoint, CrashingStore, InvalidCrashPoint};
pub use keys::{
    ComponentName, InvalidName, RunId, SignalId, SignalName, TenantId, component_key, component_name_key,
    component_names_key, keys_of, runs_key,
};
pub use object_store::path::Path as StoreKey;

/// A failed store operation, typed by what the caller can do about it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Nothing is stored at the key.
    #[error("nothing stored at {key}")]
    NotFound { key: String },
    /// A create-only write found the key taken: another writer got there first.
    #[error("{key} was already written by another writer")]
    AlreadyExists { key: String },
    /// The store could not be reached or failed; retrying may help.
    #[error("storage failed at {key}: {source}")]
    Unavailable { key: String, source: object_store::Error },
    /// The data directory could not be opened.
    #[error("cannot open the data directory {path}: {reason}")]
    Open { path: String, reason: String },
}

impl StoreError {
    fn at(key: &Key, source: object_store::Error) -> Self {
        let key = key.to_string();
        match source {
            object_store::Error::NotFound { .. } => Self::NotFound { key },
            object_store::Error::AlreadyExists { .. } => Self::AlreadyExists { key },
            source => Self::Unavailable { key, source },
        }
    }
}

/// The host's storage: any [`ObjectStore`], shared by every tenant.
#[derive(Clone, Debug)]
pub struct Storage {
    root: Arc<dyn ObjectStore>,
}

impl Storage {
    /// Storage over any object store (S3, a fault injector, ...).
    pub fn new(root: Arc<dyn ObjectStore>) -> Self {
        Self { root }
    }

    /// Storage in memory, gone with the process: for tests.
    pub fn in_memory() -> Self {
        Self::new(Arc::new(InMemory::new()))
    }

    /// Storage on the local file system under `dir`, created if absent.
    pub fn local(dir: &Path) -> Result<Self, StoreError> {
        let open = |reason: String| StoreError::Open {
            path: dir.display().to_string(),
            reason,
        };
        std::fs::create_dir_all(dir).map_err(|e| open(e.to_string()))?;
        let fs = LocalFileSystem::new_with_prefix(dir).map_err(|e| open(e.to_string()))?;
        Ok(Self::new(Arc::new(fs)))
    }

    /// The part of the store that belongs to `tenant`.
    pub fn tenant(&self, tenant: &TenantId) -> TenantStore {
        let prefix = Key::from_iter(["tenants", tenant.as_str()]);
        TenantStore {
            store: Arc::new(PrefixStore::new(self.root.clone(), prefix)),
            tenant: tenant.clone(),
        }
    }
}

/// One tenant's view of the store; every key is relative to its prefix.
#[derive(Clone, Debug)]
pub struct TenantStore {
    store: Arc<PrefixStore<Arc<dyn ObjectStore>>>,
    tenant: TenantId,
}

impl TenantStore {
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// Writes `bytes` at `key`; fails with [`StoreError::AlreadyExists`] if
    /// the key is taken.
    pub async fn create(&self, key: &Key, bytes: Bytes) -> Result<(), StoreError> {
        self.put(key, bytes, PutMode::Create).await
    }

    /// Writes `bytes` at `key`, replacing what was there: for pointers only
    /// (a component name), never for records.
    pub async fn overwrite(&self, key: &Key, bytes: Bytes) -> Result<(), StoreError> {
        self.put(key, bytes, PutMode::Overwrite).await
    }

    async fn put(&self, key: &Key, bytes: Bytes, mode: PutMode) -> Result<(), StoreError> {
        let options = PutOptions {
            mode,
            ..PutOptions::default()
        };
        self.store
            .put_opts(key, PutPayload::from_bytes(bytes), options)
            .await
            .map(drop)
            .map_err(|e| StoreError::at(key, e))
    }

    /// Reads `key`, or `None` if nothing is stored there.
    pub async fn get(&self, key: &Key) -> Result<Option<Bytes>, StoreError> {
        let read = async { self.store.get(key).await?.bytes().await };
        match read.await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(StoreError::at(key, e)),
        }
    }

    /// Every key under `prefix`, in lexicographic order.
    pub async fn list(&self, prefix: &Key) -> Result<Vec<Key>, StoreError> {
        let mut keys: Vec<Key> = self
            .store
            .list(Some(prefix))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|e| StoreError::at(prefix, e))?;
        keys.sort();
        Ok(keys)
    }

    /// The names of the "directories" right under `prefix`.
    pub async fn children(&self, prefix: &Key) -> Result<Vec<String>, StoreError> {
        let listing = self
            .store
            .list_with_delimiter(Some(prefix))
            .await
            .map_err(|e| StoreError::at(prefix, e))?;
        let mut names: Vec<String> = listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_owned))
            .collect();
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

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
    async fn children_lists_one_level() -> TestResult {
        let store = Storage::in_memory().tenant(&tenant("t"));
        for key in ["runs/r1/run", "runs/r2/run", "runs/r2/journal/1"] {
            store.create(&Key::from(key), Bytes::new()).await?;
        }
        assert_eq!(store.children(&Key::from("runs")).await?, ["r1", "r2"]);
        Ok(())
    }
}
