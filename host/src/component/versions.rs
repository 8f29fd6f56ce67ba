//! The builds a component name has pointed at, oldest first: its versions.
//! Uploading under a name adds a version unless the name points at that
//! build already; a run can start on any version, or on the latest.
//!
//! Invariants: a version is written (create-only, numbered from 1) before
//! the name points at its build, so every build a name ever meant has a
//! version; two uploads racing for one number both get one, in turn. A
//! version outlives its build: starting a version whose build was deleted
//! answers that no such component is stored.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::ComponentError;
use crate::store::{ComponentName, StoreError, TenantStore, component_version_key, component_versions_key};

/// One build a name pointed at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ComponentVersion {
    /// 1 for the first build uploaded under the name, counting up.
    pub version: u32,
    /// The build the name pointed at, by digest.
    pub digest: String,
    /// When the name was pointed at it, in milliseconds since the Unix epoch.
    pub named_at_ms: u64,
}

/// What a version's record holds.
#[derive(Serialize, Deserialize)]
struct Stored {
    digest: String,
    named_at_ms: u64,
}

/// How many times an upload tries the next number while others take it.
const RACES: u32 = 16;

/// Every version of `name`, oldest first.
pub async fn of(store: &TenantStore, name: &ComponentName) -> Result<Vec<ComponentVersion>, ComponentError> {
    let mut versions = Vec::new();
    for key in store.list(&component_versions_key(name)).await? {
        let Some(version) = key.filename().and_then(|number| number.parse().ok()) else {
            continue;
        };
        let Some(bytes) = store.get(&key).await? else {
            continue;
        };
        let stored: Stored = serde_json::from_slice(&bytes).map_err(|e| ComponentError::CorruptVersion {
            key: key.to_string(),
            reason: e.to_string(),
        })?;
        versions.push(ComponentVersion {
            version,
            digest: stored.digest,
            named_at_ms: stored.named_at_ms,
        });
    }
    versions.sort_by_key(|version| version.version);
    Ok(versions)
}

/// Adds `digest` as the newest version of `name`, unless it is that
/// already; `current` is the build the name points at now, which a name
/// given before versions were kept gets as its version 1.
pub async fn add(
    store: &TenantStore,
    name: &ComponentName,
    digest: &str,
    current: Option<&str>,
    now_ms: u64,
) -> Result<(), ComponentError> {
    for _ in 0..RACES {
        let versions = of(store, name).await?;
        let newest = match (versions.last(), current) {
            (Some(newest), _) => Some((newest.version, newest.digest.clone())),
            (None, Some(current)) if current != digest => {
                write(store, name, 1, current, now_ms).await?;
                continue;
            }
            (None, _) => None,
        };
        let next = match newest {
            Some((_, newest)) if newest == digest => return Ok(()),
            Some((number, _)) => number.saturating_add(1),
            None => 1,
        };
        if write(store, name, next, digest, now_ms).await? {
            return Ok(());
        }
    }
    Err(ComponentError::Store(StoreError::AlreadyExists {
        key: component_versions_key(name).to_string(),
    }))
}

/// Writes version `number`; whether this call wrote it (not another).
async fn write(
    store: &TenantStore,
    name: &ComponentName,
    number: u32,
    digest: &str,
    named_at_ms: u64,
) -> Result<bool, ComponentError> {
    let stored = Stored {
        digest: digest.to_owned(),
        named_at_ms,
    };
    let bytes = serde_json::to_vec(&stored).expect("a version serializes");
    match store
        .create(&component_version_key(name, number), Bytes::from(bytes))
        .await
    {
        Ok(()) => Ok(true),
        Err(StoreError::AlreadyExists { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Storage, TenantId};

    fn name() -> ComponentName {
        ComponentName::new("hello").expect("a valid name")
    }

    fn digests(versions: &[ComponentVersion]) -> Vec<(u32, &str)> {
        versions.iter().map(|v| (v.version, v.digest.as_str())).collect()
    }

    #[tokio::test]
    async fn a_name_given_before_versions_were_kept_gets_its_build_as_version_one() {
        let store = Storage::in_memory().tenant(&TenantId::default_tenant());
        add(&store, &name(), "new", Some("old"), 5).await.expect("added");
        add(&store, &name(), "new", Some("new"), 6).await.expect("added");
        let versions = of(&store, &name()).await.expect("listed");
        assert_eq!(digests(&versions), [(1, "old"), (2, "new")]);
    }

    #[tokio::test]
    async fn uploads_racing_under_one_name_each_get_a_version() {
        let store = Storage::in_memory().tenant(&TenantId::default_tenant());
        let racing = (0..8).map(|i| {
            let store = store.clone();
            async move { add(&store, &name(), &format!("build-{i}"), None, i).await }
        });
        for added in futures::future::join_all(racing).await {
            added.expect("added");
        }
        let versions = of(&store, &name()).await.expect("listed");
        let numbers: Vec<u32> = versions.iter().map(|v| v.version).collect();
        assert_eq!(numbers, (1..=8).collect::<Vec<_>>());
        let mut builds: Vec<&str> = versions.iter().map(|v| v.digest.as_str()).collect();
        builds.sort_unstable();
        builds.dedup();
        assert_eq!(builds.len(), 8, "{versions:?}");
    }
}
