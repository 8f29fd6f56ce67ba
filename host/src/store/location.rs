//! Where the store is: a URL (`--store`, `$STEPSTONE_STORE`) opened through
//! object_store's own URL parsing and each backend's builder.
//!
//! `file:///path` (the local file system), `memory://` (gone with the
//! process), `s3://bucket/prefix`, `gs://bucket/prefix` and
//! `az://container/prefix`. Credentials and endpoints come from each
//! backend's standard environment variables, as its `from_env` builder
//! reads them (`AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`; `GOOGLE_SERVICE_ACCOUNT`;
//! `AZURE_STORAGE_ACCOUNT_NAME`, `AZURE_STORAGE_ACCOUNT_KEY`, ...). A path
//! after the bucket prefixes every key, so hosts can share a bucket with
//! other data.

use std::path::Path;
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreScheme};
use url::Url;

use super::{Durability, Storage, StoreError};

/// Opens the store `location` names, a local one as durable as
/// `durability` says. Nothing is read or written: see [`Storage::check`].
pub fn open(location: &str, durability: Durability) -> Result<Storage, StoreError> {
    let invalid = |reason: String| StoreError::Location {
        location: location.to_owned(),
        reason,
    };
    let url = Url::parse(location).map_err(|e| {
        invalid(format!(
            "{e}: a store is file:///PATH, memory://, s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or az://CONTAINER/PREFIX"
        ))
    })?;
    let (scheme, prefix) = ObjectStoreScheme::parse(&url).map_err(|e| invalid(e.to_string()))?;
    let built = |result: object_store::Result<Arc<dyn ObjectStore>>| result.map_err(|e| invalid(e.to_string()));
    let store: Arc<dyn ObjectStore> = match scheme {
        ObjectStoreScheme::Local => return Storage::local_with(Path::new(url.path()), durability),
        ObjectStoreScheme::Memory => Arc::new(InMemory::new()),
        ObjectStoreScheme::AmazonS3 => built(AmazonS3Builder::from_env().with_url(location).build().map(share))?,
        ObjectStoreScheme::GoogleCloudStorage => built(
            GoogleCloudStorageBuilder::from_env()
                .with_url(location)
                .build()
                .map(share),
        )?,
        ObjectStoreScheme::MicrosoftAzure => {
            built(MicrosoftAzureBuilder::from_env().with_url(location).build().map(share))?
        }
        other => {
            return Err(invalid(format!(
                "{other:?} is not a store Stepstone can keep journals in"
            )));
        }
    };
    let store = match prefix.as_ref() {
        "" => store,
        _ => Arc::new(PrefixStore::new(store, prefix)),
    };
    Ok(Storage::new(store).at(location))
}

fn share<S: ObjectStore>(store: S) -> Arc<dyn ObjectStore> {
    Arc::new(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_that_is_no_store_says_what_one_is() {
        let refused = open("not a url", Durability::NoFsync).expect_err("refused");
        assert!(refused.to_string().contains("s3://BUCKET/PREFIX"), "{refused}");
        let http = open("https://example.com/x", Durability::NoFsync).expect_err("refused");
        assert!(http.to_string().contains("not a store"), "{http}");
    }

    #[tokio::test]
    async fn memory_and_file_locations_open_and_answer() {
        open("memory://", Durability::Fsync)
            .expect("memory")
            .check(crate::store::Probes::Thorough)
            .await
            .expect("in memory");
        let dir = tempfile::tempdir().expect("a directory");
        let url = format!("file://{}", dir.path().join("objects").display());
        open(&url, Durability::Fsync)
            .expect("local")
            .check(crate::store::Probes::Thorough)
            .await
            .expect("on disk");
        assert!(dir.path().join("objects").is_dir());
    }
}
