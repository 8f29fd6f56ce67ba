//! Seams in a store, for tests: an [`ObjectStore`] decorator over
//! [`InMemory`] that runs a hook before each read, write, delete and
//! listing (which may fail the call), may rewrite what a listing answers,
//! and may take create-only writes as overwrites. It is how a test puts
//! another actor between two steps of a protocol (a submission between two
//! deletes of a sweep, a twin's write between a put and a read), fails one
//! try of a call as a flaky network would, shows a reader an object listed
//! that is gone by the time it reads it (a compaction on another host),
//! plays a server that ignores `If-None-Match: *`, or a cache in front of
//! a store that remembers keys it read absent.
//!
//! Invariant: every call reaches the in-memory store as made, after its
//! hook, unless the hook failed it, but for the create-only writes of a
//! store made to ignore them; a listing's answer is rewritten, never what
//! is stored.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// A call a hook runs before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Get,
    Put,
    Delete,
    List,
}

/// What runs before a call, given the call and its key (a listing's
/// prefix): an error fails the call without making it.
pub type Before = Arc<dyn Fn(Call, Path) -> BoxFuture<'static, Result<()>> + Send + Sync>;

/// A failure as a flaky network gives one, for a hook to fail a call with.
pub fn flaky(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "Seams",
        source: format!("a test failed this call on purpose: {what}").into(),
    }
}

/// What a listing of a prefix answers, given what the store holds.
pub type Listed = Arc<dyn Fn(&Path, Vec<ObjectMeta>) -> Vec<ObjectMeta> + Send + Sync>;

/// How a store takes a create-only write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Creates {
    /// As object_store's `InMemory`: atomically, refused when the key exists.
    Honoured,
    /// As an overwrite.
    Ignored,
    /// As a gateway that checks for the key, then overwrites it: refused
    /// when the key exists, but two at once may both land.
    CheckedThenWritten,
}

/// The decorator: see the module doc.
pub struct Seams {
    inner: Arc<InMemory>,
    before: Before,
    listed: Listed,
    /// What a create-only write does.
    creates: Creates,
    /// Keys read absent, which reads answer absent from then on.
    read_absent: Option<Arc<std::sync::Mutex<std::collections::HashSet<Path>>>>,
}

impl Seams {
    /// A store that runs `before` ahead of each read, write, delete and
    /// listing.
    pub fn before(before: Before) -> Self {
        Self {
            before,
            ..Self::plain()
        }
    }

    /// A way to `inner` that runs `before` ahead of each call, as
    /// [`before`](Self::before): one host's calls, while others reach
    /// `inner` plainly.
    pub fn before_on(inner: Arc<InMemory>, before: Before) -> Self {
        Self {
            inner,
            before,
            ..Self::plain()
        }
    }

    /// A store whose listings answer what `listed` makes of them.
    pub fn listing(listed: Listed) -> Self {
        Self {
            listed,
            ..Self::plain()
        }
    }

    /// A store that takes every create-only write as an overwrite.
    pub fn ignoring_create_only() -> Self {
        Self {
            creates: Creates::Ignored,
            ..Self::plain()
        }
    }

    /// A store whose create-only writes look for the key, then overwrite
    /// it: one at a time they are refused as they should be, but creates
    /// of one key made at once may all land.
    pub fn checking_then_writing() -> Self {
        Self {
            creates: Creates::CheckedThenWritten,
            ..Self::plain()
        }
    }

    /// A store behind a cache that remembers a key it read absent, and
    /// answers it absent from then on, written or not.
    pub fn caching_absent() -> Self {
        Self {
            read_absent: Some(Arc::default()),
            ..Self::plain()
        }
    }

    fn plain() -> Self {
        Self {
            inner: Arc::new(InMemory::new()),
            before: Arc::new(|_, _| async { Ok(()) }.boxed()),
            listed: Arc::new(|_, listed| listed),
            creates: Creates::Honoured,
            read_absent: None,
        }
    }
}

impl fmt::Display for Seams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Seams({})", self.inner)
    }
}

impl fmt::Debug for Seams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Seams {
    async fn put_opts(&self, at: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        (self.before)(Call::Put, at.clone()).await?;
        if opts.mode != PutMode::Create || self.creates == Creates::Honoured {
            return self.inner.put_opts(at, payload, opts).await;
        }
        if self.creates == Creates::CheckedThenWritten {
            if self.inner.head(at).await.is_ok() {
                return Err(object_store::Error::AlreadyExists {
                    path: at.to_string(),
                    source: "found by the gateway's check".into(),
                });
            }
            // The window between the check and the write, where another
            // create of the key slips in.
            tokio::task::yield_now().await;
        }
        let overwrite = PutOptions {
            mode: PutMode::Overwrite,
            ..opts
        };
        self.inner.put_opts(at, payload, overwrite).await
    }

    async fn put_multipart_opts(&self, at: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(at, opts).await
    }

    async fn get_opts(&self, at: &Path, options: GetOptions) -> Result<GetResult> {
        (self.before)(Call::Get, at.clone()).await?;
        let got = self.inner.get_opts(at, options).await;
        let Some(cache) = &self.read_absent else { return got };
        let mut absent = cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if got.is_err() || absent.contains(at) {
            absent.insert(at.clone());
            return Err(object_store::Error::NotFound {
                path: at.to_string(),
                source: "read absent before (a cache)".into(),
            });
        }
        got
    }

    fn delete_stream(&self, locations: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        let before = self.before.clone();
        let hooked = locations.then(move |location| {
            let before = before.clone();
            async move {
                let at = location?;
                before(Call::Delete, at.clone()).await?;
                Ok(at)
            }
        });
        self.inner.delete_stream(hooked.boxed())
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let (before, listed, inner) = (self.before.clone(), self.listed.clone(), self.inner.clone());
        let prefix = prefix.cloned().unwrap_or_default();
        futures::stream::once(async move {
            if let Err(e) = before(Call::List, prefix.clone()).await {
                return futures::stream::iter([Err(e)]).boxed();
            }
            let found: Vec<Result<ObjectMeta>> = inner.list(Some(&prefix)).collect().await;
            match found.into_iter().collect::<Result<Vec<ObjectMeta>>>() {
                Ok(found) => futures::stream::iter(listed(&prefix, found).into_iter().map(Ok)).boxed(),
                Err(e) => futures::stream::iter([Err(e)]).boxed(),
            }
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
