//! Deterministic crash points, for crash-consistency tests: an
//! [`ObjectStore`] decorator that kills its own process with `SIGKILL` at
//! the N-th write, just before it, half-way through it, or just after it.
//!
//! Enabled only by the hidden variable [`CRASH_AT_VAR`]
//! (`STEPSTONE_CRASH_AT=before:12`, `during:12`, `after:12`); without it the
//! store is not wrapped at all. Invariants: writes are numbered from 1 in the
//! order they start, across every task of the process, so one number names
//! one write; reads, lists and every write but the chosen one pass through
//! untouched. `during` writes the first half of the object through the
//! store's multipart upload and dies before completing it, which is what a
//! crash in the middle of a put leaves behind (on the local file system, a
//! half-written staging file beside the key, never a torn object at it).

use std::fmt;
use std::ops::Range;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path as Key;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

use super::Storage;

/// The environment variable that arms a crash point.
pub const CRASH_AT_VAR: &str = "STEPSTONE_CRASH_AT";

/// Where, relative to the chosen write, the process dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPhase {
    /// The caller decided to write (a step finished), nothing is stored.
    Before,
    /// Half of the object has reached the store, which has not published it.
    During,
    /// The object is stored; the caller never learnt that it was.
    After,
}

impl CrashPhase {
    const ALL: [CrashPhase; 3] = [CrashPhase::Before, CrashPhase::During, CrashPhase::After];

    /// The phase as `STEPSTONE_CRASH_AT` names it.
    pub fn name(self) -> &'static str {
        match self {
            CrashPhase::Before => "before",
            CrashPhase::During => "during",
            CrashPhase::After => "after",
        }
    }
}

/// A crash at one write of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashPoint {
    /// Where, relative to that write, the process dies.
    pub phase: CrashPhase,
    /// The write's number, from 1.
    pub write: u64,
}

/// A crash point that cannot be parsed.
#[derive(Debug, thiserror::Error)]
#[error("invalid {CRASH_AT_VAR} `{value}`: expected before:N, during:N or after:N with N >= 1")]
pub struct InvalidCrashPoint {
    value: String,
}

impl FromStr for CrashPoint {
    type Err = InvalidCrashPoint;

    fn from_str(value: &str) -> Result<Self, InvalidCrashPoint> {
        let invalid = || InvalidCrashPoint {
            value: value.to_owned(),
        };
        let (phase, write) = value.split_once(':').ok_or_else(invalid)?;
        let phase = CrashPhase::ALL
            .into_iter()
            .find(|known| known.name() == phase)
            .ok_or_else(invalid)?;
        let write = write.parse().ok().filter(|n| *n >= 1).ok_or_else(invalid)?;
        Ok(Self { phase, write })
    }
}

impl CrashPoint {
    /// The crash point armed by [`CRASH_AT_VAR`], if any.
    pub fn from_env() -> Result<Option<Self>, InvalidCrashPoint> {
        std::env::var(CRASH_AT_VAR).ok().map(|value| value.parse()).transpose()
    }

    /// `storage`, killing this process at this point.
    pub fn arm(self, storage: Storage) -> Storage {
        Storage {
            root: Arc::new(CrashingStore::new(storage.root.clone(), self)),
            ..storage
        }
    }
}

/// An [`ObjectStore`] that kills its process at one write.
#[derive(Debug)]
pub struct CrashingStore<T> {
    inner: T,
    point: CrashPoint,
    writes: AtomicU64,
}

impl<T: ObjectStore> CrashingStore<T> {
    /// Wraps `inner`, killing this process at `point` (the writes through it numbered from 1).
    pub fn new(inner: T, point: CrashPoint) -> Self {
        Self {
            inner,
            point,
            writes: AtomicU64::new(0),
        }
    }

    /// Numbers a write; its phase to die in if it is the chosen one.
    fn crash_phase(&self) -> Option<CrashPhase> {
        let write = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        (write == self.point.write).then_some(self.point.phase)
    }

    fn die(&self, key: &Key) -> ! {
        tracing::warn!(write = self.point.write, phase = self.point.phase.name(), %key, "crash point reached: SIGKILL");
        // SIGKILL, not abort: nothing of this process runs any more (no
        // destructor, no buffered write), as when the machine loses it.
        let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        std::process::abort()
    }

    /// Sends the first half of `payload` to `key` and never completes it.
    async fn die_mid_write(&self, key: &Key, payload: PutPayload) -> ! {
        let bytes = Bytes::from(payload);
        let mut upload = self
            .inner
            .put_multipart_opts(key, PutMultipartOptions::default())
            .await
            .ok();
        if let Some(upload) = upload.as_mut() {
            let _ = upload.put_part(bytes.slice(..bytes.len() / 2).into()).await;
        }
        // Still open: dropping the upload would let the store clean it up.
        self.die(key)
    }
}

impl<T> fmt::Display for CrashingStore<T>
where
    T: fmt::Display,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CrashingStore({:?} write {}, {})",
            self.point.phase, self.point.write, self.inner
        )
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ObjectStore> ObjectStore for CrashingStore<T> {
    async fn put_opts(&self, location: &Key, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        match self.crash_phase() {
            None => self.inner.put_opts(location, payload, opts).await,
            Some(CrashPhase::Before) => self.die(location),
            Some(CrashPhase::During) => self.die_mid_write(location, payload).await,
            Some(CrashPhase::After) => {
                self.inner.put_opts(location, payload, opts).await?;
                self.die(location)
            }
        }
    }

    async fn put_multipart_opts(&self, location: &Key, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Key, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Key, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(&self, locations: BoxStream<'static, Result<Key>>) -> BoxStream<'static, Result<Key>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Key>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(&self, prefix: Option<&Key>, offset: &Key) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Key>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Key, to: &Key, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Key, to: &Key, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_points_parse_and_bad_ones_are_named() {
        let point: CrashPoint = "during:12".parse().expect("a valid point");
        assert_eq!(
            point,
            CrashPoint {
                phase: CrashPhase::During,
                write: 12
            }
        );
        for bad in ["", "during", "mid:3", "before:0", "after:x", "after:-1"] {
            let err = bad.parse::<CrashPoint>().unwrap_err().to_string();
            assert!(err.contains(CRASH_AT_VAR) && err.contains(bad), "{err}");
        }
    }

    #[tokio::test]
    async fn writes_other_than_the_chosen_one_pass_through() -> Result<(), Box<dyn std::error::Error>> {
        let point = CrashPoint {
            phase: CrashPhase::Before,
            write: 3,
        };
        let store = CrashingStore::new(object_store::memory::InMemory::new(), point);
        for name in ["a", "b"] {
            store
                .put_opts(&Key::from(name), PutPayload::from_static(b"x"), PutOptions::default())
                .await?;
        }
        assert_eq!(
            store
                .get_opts(&Key::from("b"), GetOptions::default())
                .await?
                .bytes()
                .await?,
            "x"
        );
        assert_eq!(
            store.crash_phase(),
            Some(CrashPhase::Before),
            "the third write is the chosen one"
        );
        assert_eq!(store.crash_phase(), None);
        Ok(())
    }
}
