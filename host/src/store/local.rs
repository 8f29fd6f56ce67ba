//! The local file system store as Stepstone opens it ([`LocalStore`]):
//! what its writes survive, a crash of the host process only or a power
//! loss too, with every write synced to disk before it returns; and its
//! listing past an offset, which compares names first
//! ([`offset_listing`](super::offset_listing)).
//!
//! Invariants of [`Durability::Fsync`]: a put or copy returns only once the
//! object's bytes, and then its directory entry, are on disk (object_store's
//! `LocalFileSystem::with_fsync`: the staged file is synced before it is
//! linked or renamed to its key, so no power loss can leave a key naming an
//! empty or torn file; the directory after; new directories up to the first
//! old one); a delete returns once its directory is synced; a create-only
//! put refused because the key is taken returns only once what holds the
//! key is on disk, so a caller that reads it back acts on durable bytes.
//!
//! An empty object (a marker) has no bytes to tear, so its file gets no
//! sync of its own: it is created at its key (create-only) or renamed onto
//! it, and its directory's sync makes both the file and its name durable.
//! That is one sync where object_store makes two, and half of a run's puts
//! are markers.
//!
//! Concurrent writers share the disk's cache flushes: each put syncs on a
//! thread of tokio's blocking pool, and the kernel's block layer merges the
//! flushes waiting at one time into one (`docs/BENCHMARKS.md`, *Peers*,
//! measures it). Deletes made together share one sync per directory.
//!
//! A put of at most [`INLINE_PUT_BYTES`] (a journal entry, a marker) is
//! staged beside its key on the calling task: with [`Durability::NoFsync`]
//! it is then linked or renamed onto the key there too, as object_store
//! makes it; with [`Durability::Log`] it is queued to the log's committer.
//! Half a dozen page-cache calls cost less than the trip to tokio's
//! blocking pool object_store takes, whose two thread wake-ups were most
//! of a sequential journaled step's time (`docs/BENCHMARKS.md`, *Journaled
//! step throughput*). Larger puts, and every call that may wait for the
//! disk (a sync, a read), still go to the blocking pool.
//!
//! [`Durability::Log`] survives a power loss too, with fewer syncs: puts and
//! deletes go through the root's write-ahead log ([`super::write_log`]),
//! which syncs each write's record, bytes and all, before the write is made
//! and acknowledged, one sync for the writes in flight together. Copies,
//! renames, multipart uploads (which Stepstone does not make) and puts of
//! more than [`write_log::MAX_RECORDED_BYTES`] are synced as with `Fsync`,
//! then noted in the log so that a replay leaves them be.

use std::collections::BTreeSet;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path as FsPath, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::write_log::{self, Outcome, Write, WriteLog};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMode,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

/// What an acknowledged write to the local store survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// A power loss: every write is synced to disk before it returns, the
    /// object's file and then its directory.
    Fsync,
    /// A crash of the process only: writes are in the kernel's page cache
    /// when they return, on disk within the kernel's writeback interval.
    NoFsync,
    /// A power loss, as `Fsync`: every put and delete is recorded in a
    /// write-ahead log synced before it returns (writes in flight together
    /// share one sync), the objects' files synced at the log's checkpoints.
    /// The default: one sync where `Fsync` makes two, shared.
    #[default]
    Log,
}

/// The largest put staged on the calling task (see the module's docs): its
/// bytes are copied into the page cache in a few microseconds.
pub const INLINE_PUT_BYTES: usize = 64 << 10;

/// A durability that is none of `fsync`, `log` and `no-fsync`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown durability `{0}`: expected fsync (writes survive a power loss), log (the same, through a write-ahead log) \
     or no-fsync (a process crash only)"
)]
pub struct UnknownDurability(String);

impl FromStr for Durability {
    type Err = UnknownDurability;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "fsync" => Ok(Self::Fsync),
            "no-fsync" => Ok(Self::NoFsync),
            "log" => Ok(Self::Log),
            _ => Err(UnknownDurability(text.to_owned())),
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Fsync => "fsync",
            Self::NoFsync => "no-fsync",
            Self::Log => "log",
        })
    }
}

/// The local file system store under `root` (which must exist), as durable
/// as `durability` says.
pub fn local_store(root: &FsPath, durability: Durability) -> Result<Arc<dyn ObjectStore>> {
    Ok(Arc::new(LocalStore::open(root, durability)?))
}

/// Creates `dir` and its missing parents; with [`Durability::Fsync`], syncs
/// every directory whose entries changed, so the new directories outlive a
/// power loss.
pub fn create_dir(dir: &FsPath, durability: Durability) -> io::Result<()> {
    let first_existing = dir.ancestors().find(|ancestor| ancestor.exists()).map(FsPath::to_owned);
    std::fs::create_dir_all(dir)?;
    if durability == Durability::NoFsync {
        return Ok(());
    }
    for changed in dir.ancestors() {
        sync_dir(changed)?;
        if Some(changed) == first_existing.as_deref() {
            break;
        }
    }
    Ok(())
}

/// The local file system store, its writes as durable as its
/// [`Durability`] says (see the module's invariants).
#[derive(Debug)]
pub struct LocalStore {
    inner: Arc<LocalFileSystem>,
    durability: Durability,
    /// Directories this store synced itself (after deletes, refused
    /// creates and empty objects), for tests to count the syncs.
    dir_syncs: Arc<AtomicU64>,
    /// The root's write-ahead log, with [`Durability::Log`].
    log: Option<Arc<WriteLog>>,
}

impl LocalStore {
    /// The store on `fs`, without the write log [`Durability::Log`] needs
    /// (see [`LocalStore::open`]).
    pub fn new(fs: LocalFileSystem, durability: Durability) -> Self {
        Self {
            inner: Arc::new(fs.with_fsync(durability != Durability::NoFsync)),
            durability,
            dir_syncs: Arc::default(),
            log: None,
        }
    }

    /// How many directories this store synced itself (the syncs of other
    /// puts and of copies happen inside object_store).
    pub fn dir_syncs(&self) -> u64 {
        self.dir_syncs.load(Ordering::Relaxed)
    }

    /// The store under `root` (which must exist), opening its write log
    /// with [`Durability::Log`] (and replaying it after a reboot).
    pub fn open(root: &FsPath, durability: Durability) -> Result<Self> {
        let mut store = Self::new(LocalFileSystem::new_with_prefix(root)?, durability);
        if durability == Durability::Log {
            store.log = Some(Arc::new(WriteLog::open(root).map_err(store_error)?));
        }
        Ok(store)
    }

    /// How many times the write log was synced, with [`Durability::Log`].
    pub fn log_syncs(&self) -> Option<u64> {
        self.log.as_ref().map(|log| log.syncs())
    }

    /// Syncs the file at `location` and its directory: what a create-only
    /// put found at its key is on disk once this returns.
    async fn sync_existing(&self, location: &Path) -> Result<()> {
        let file = self.inner.path_to_filesystem(location)?;
        let syncs = self.dir_syncs.clone();
        blocking(move || {
            File::open(&file)?.sync_all()?;
            syncs.fetch_add(1, Ordering::Relaxed);
            sync_parent(&file)
        })
        .await
    }

    /// Puts an empty object with [`Durability::Fsync`] in one trip to the
    /// blocking pool: its file is made at the key, then its directory
    /// synced (see the module's invariants).
    async fn put_empty(&self, location: &Path, create: bool) -> Result<PutResult> {
        let file = self.inner.path_to_filesystem(location)?;
        let syncs = self.dir_syncs.clone();
        put_answer(location, blocking(move || place_empty(&file, create, &syncs)).await?)
    }

    /// A small create-only (`create`) or overwriting put without syncs, on
    /// the calling task (see the module's docs).
    fn put_inline(&self, location: &Path, payload: PutPayload, create: bool) -> Result<PutResult> {
        let file = self.inner.path_to_filesystem(location)?;
        let placed =
            write_log::stage(&file, &Bytes::from(payload)).and_then(|staged| write_log::place(&file, staged, create));
        match placed {
            Ok(e_tag) => put_answer(location, Some(e_tag)),
            Err(taken) if create && taken.kind() == io::ErrorKind::AlreadyExists => put_answer(location, None),
            Err(e) => Err(store_error(e)),
        }
    }

    /// A create-only (`create`) or overwriting put through the write log:
    /// its bytes staged beside the key (on the calling task up to
    /// [`INLINE_PUT_BYTES`], on the blocking pool above), then recorded and
    /// placed by the log's committer.
    async fn logged_put(
        &self,
        log: &Arc<WriteLog>,
        location: &Path,
        payload: PutPayload,
        create: bool,
    ) -> Result<PutResult> {
        let file = self.inner.path_to_filesystem(location)?;
        let bytes = Bytes::from(payload);
        let staged = if create && bytes.is_empty() {
            None
        } else if bytes.len() <= INLINE_PUT_BYTES {
            Some(write_log::stage(&file, &bytes).map_err(store_error)?)
        } else {
            let (file, bytes) = (file.clone(), bytes.clone());
            Some(blocking(move || write_log::stage(&file, &bytes)).await?)
        };
        let put = Write::Put {
            file,
            bytes,
            staged,
            create,
        };
        let e_tag = match log.write(put).await.map_err(store_error)? {
            Outcome::Written(e_tag) => Some(e_tag),
            _ => None,
        };
        put_answer(location, e_tag)
    }

    /// Records that `location` was written (`exists`) or removed durably
    /// outside the log.
    async fn note(&self, log: &Arc<WriteLog>, location: &Path, exists: bool) -> Result<()> {
        let file = self.inner.path_to_filesystem(location)?;
        log.write(Write::Noted { file, exists }).await.map_err(store_error)?;
        Ok(())
    }

    /// Deletes through the write log, those in flight together sharing its
    /// syncs; each is reported in the order asked.
    fn logged_deletes(
        &self,
        log: Arc<WriteLog>,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let files = self.inner.clone();
        locations
            .map(move |location| {
                let (log, files) = (log.clone(), files.clone());
                async move {
                    let location = location?;
                    let file = files.path_to_filesystem(&location)?;
                    match log.write(Write::Delete { file }).await.map_err(store_error)? {
                        Outcome::Deleted => Ok(location),
                        _ => Err(object_store::Error::NotFound {
                            path: location.to_string(),
                            source: Box::new(io::Error::from(io::ErrorKind::NotFound)),
                        }),
                    }
                }
            })
            .buffered(DELETES_SYNCED_TOGETHER)
            .boxed()
    }
}

/// A put's answer: written, with its ETag, or refused because a create
/// found `location` taken (`None`).
fn put_answer(location: &Path, e_tag: Option<String>) -> Result<PutResult> {
    match e_tag {
        Some(e_tag) => Ok(PutResult {
            e_tag: Some(e_tag),
            version: None,
            extensions: Default::default(),
        }),
        None => Err(object_store::Error::AlreadyExists {
            path: location.to_string(),
            source: Box::new(io::Error::from(io::ErrorKind::AlreadyExists)),
        }),
    }
}

/// Makes an empty file at `file` (only where none is, with `create`) and
/// syncs its directory, creating the directory durably first if it is
/// missing; returns the file's ETag as object_store reports it, or `None`
/// for a refused create, which syncs the file holding the key instead.
fn place_empty(file: &FsPath, create: bool, syncs: &AtomicU64) -> io::Result<Option<String>> {
    let dir = file
        .parent()
        .ok_or_else(|| io::Error::other("a key names a file in a directory"))?;
    if !dir.exists() {
        create_dir(dir, Durability::Fsync)?;
    }
    let placed = match create {
        true => OpenOptions::new().write(true).create_new(true).open(file),
        false => rename_empty_onto(file),
    };
    let placed = match placed {
        Ok(placed) => Some(placed),
        Err(taken) if create && taken.kind() == io::ErrorKind::AlreadyExists => {
            File::open(file)?.sync_all()?;
            None
        }
        Err(e) => return Err(e),
    };
    sync_dir(dir)?;
    syncs.fetch_add(1, Ordering::Relaxed);
    placed.map(|placed| e_tag(&placed.metadata()?)).transpose()
}

/// Creates an empty staging file beside `file`, named as object_store names
/// its own (so listings pass over one a crash leaves), and renames it onto
/// `file`: a reader sees the old object or the empty one, never a mix. A
/// refused rename removes its staging file, so retries leave nothing.
fn rename_empty_onto(file: &FsPath) -> io::Result<File> {
    for suffix in 1..=u32::MAX {
        let mut staging = file.as_os_str().to_owned();
        staging.push(format!("#{suffix}"));
        match OpenOptions::new().write(true).create_new(true).open(&staging) {
            Ok(created) => {
                return match std::fs::rename(&staging, file) {
                    Ok(()) => Ok(created),
                    Err(refused) => {
                        // Best effort: the rename's error is the one to report.
                        let _ = std::fs::remove_file(&staging);
                        Err(refused)
                    }
                };
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("no free staging name"))
}

/// object_store's ETag for a local file (its own function is private): its
/// inode, modification time (in microseconds) and size, in hex.
pub(super) fn e_tag(metadata: &std::fs::Metadata) -> io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let modified = metadata
        .modified()?
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Ok(format!(
        "\"{:x}-{:x}-{:x}\"",
        metadata.ino(),
        modified.as_micros(),
        metadata.len()
    ))
}

impl fmt::Display for LocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.durability {
            Durability::Fsync => write!(f, "Synced({})", self.inner),
            Durability::Log => write!(f, "Logged({})", self.inner),
            Durability::NoFsync => fmt::Display::fmt(&self.inner, f),
        }
    }
}

/// Runs file-system calls on tokio's blocking pool, their error as the
/// store's.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> io::Result<T> + Send + 'static) -> Result<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(store_error),
        Err(join) => Err(store_error(join)),
    }
}

/// A file-system failure as the store's.
fn store_error(e: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalFileSystem",
        source: Box::new(e),
    }
}

/// Syncs `dir`'s entries; a directory gone since (nothing may be left in
/// it to keep) syncs the nearest one still there, whose entries changed.
fn sync_dir(dir: &FsPath) -> io::Result<()> {
    match File::open(dir) {
        Ok(handle) => handle.sync_all(),
        Err(gone) if gone.kind() == io::ErrorKind::NotFound => match dir.parent() {
            Some(parent) => sync_dir(parent),
            None => Err(gone),
        },
        Err(e) => Err(e),
    }
}

fn sync_parent(file: &FsPath) -> io::Result<()> {
    file.parent().map_or(Ok(()), sync_dir)
}

#[async_trait]
impl ObjectStore for LocalStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        if let Some(log) = &self.log {
            let recorded =
                opts.attributes.is_empty() && payload.content_length() as u64 <= write_log::MAX_RECORDED_BYTES;
            return match opts.mode {
                PutMode::Create if recorded => self.logged_put(log, location, payload, true).await,
                PutMode::Overwrite if recorded => self.logged_put(log, location, payload, false).await,
                _ => {
                    let put = self.inner.put_opts(location, payload, opts).await?;
                    self.note(log, location, true).await?;
                    Ok(put)
                }
            };
        }
        let inline = self.durability == Durability::NoFsync
            && opts.attributes.is_empty()
            && payload.content_length() <= INLINE_PUT_BYTES;
        match opts.mode {
            PutMode::Create if inline => return self.put_inline(location, payload, true),
            PutMode::Overwrite if inline => return self.put_inline(location, payload, false),
            _ => {}
        }
        let synced = self.durability == Durability::Fsync;
        let empty = synced && payload.content_length() == 0 && opts.attributes.is_empty();
        match opts.mode {
            PutMode::Create if empty => return self.put_empty(location, true).await,
            PutMode::Overwrite if empty => return self.put_empty(location, false).await,
            _ => {}
        }
        let synced_create = matches!(opts.mode, PutMode::Create) && synced;
        match self.inner.put_opts(location, payload, opts).await {
            Err(taken @ object_store::Error::AlreadyExists { .. }) if synced_create => {
                // Another writer may still be between its link and its
                // directory's sync: what the caller reads next must be durable.
                self.sync_existing(location).await?;
                Err(taken)
            }
            written => written,
        }
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        // object_store syncs a completed upload's file and directory.
        let upload = self.inner.put_multipart_opts(location, opts).await?;
        Ok(match &self.log {
            Some(log) => Box::new(LoggedUpload {
                upload,
                log: log.clone(),
                file: self.inner.path_to_filesystem(location)?,
            }),
            None => upload,
        })
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    /// Deletes as object_store does, then syncs the directories of the
    /// deletes finished together, each once, before reporting them.
    fn delete_stream(&self, locations: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        if let Some(log) = &self.log {
            return self.logged_deletes(log.clone(), locations);
        }
        if self.durability == Durability::NoFsync {
            return self.inner.delete_stream(locations);
        }
        let files = self.inner.clone();
        let syncs = self.dir_syncs.clone();
        self.inner
            .delete_stream(locations)
            .ready_chunks(DELETES_SYNCED_TOGETHER)
            .then(move |deleted| {
                let (files, syncs) = (files.clone(), syncs.clone());
                async move {
                    let dirs: BTreeSet<PathBuf> = deleted
                        .iter()
                        .filter_map(|result| result.as_ref().ok())
                        .filter_map(|location| files.path_to_filesystem(location).ok())
                        .filter_map(|file| file.parent().map(FsPath::to_owned))
                        .collect();
                    let synced = blocking(move || {
                        for dir in &dirs {
                            sync_dir(dir)?;
                            syncs.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(())
                    })
                    .await;
                    let reported: Vec<Result<Path>> = match synced {
                        Ok(()) => deleted,
                        // Unsynced deletes are not reported as done.
                        Err(e) => deleted
                            .into_iter()
                            .map(|result| result.and(Err(unsynced(&e))))
                            .collect(),
                    };
                    futures::stream::iter(reported)
                }
            })
            .flatten()
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        super::offset_listing::list_with_offset(&self.inner, prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        // object_store syncs the copy's directory (its bytes are already on disk).
        self.inner.copy_opts(from, to, options).await?;
        match &self.log {
            Some(log) => self.note(log, to, true).await,
            None => Ok(()),
        }
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await?;
        match &self.log {
            Some(log) => {
                self.note(log, to, true).await?;
                self.note(log, from, false).await
            }
            None => Ok(()),
        }
    }
}

/// A multipart upload to the logged store, noted in the log once complete.
#[derive(Debug)]
struct LoggedUpload {
    upload: Box<dyn MultipartUpload>,
    log: Arc<WriteLog>,
    file: PathBuf,
}

#[async_trait]
impl MultipartUpload for LoggedUpload {
    fn put_part(&mut self, data: PutPayload) -> object_store::UploadPart {
        self.upload.put_part(data)
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let put = self.upload.complete().await?;
        let noted = Write::Noted {
            file: self.file.clone(),
            exists: true,
        };
        self.log.write(noted).await.map_err(store_error)?;
        Ok(put)
    }

    async fn abort(&mut self) -> Result<()> {
        self.upload.abort().await
    }
}

/// Deletes whose directories one sync pass covers at most.
const DELETES_SYNCED_TOGETHER: usize = 64;

fn unsynced(e: &object_store::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalFileSystem",
        source: format!("deleted, but its directory could not be synced: {e}").into(),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;

    use super::*;

    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    fn assert_taken(refused: Result<PutResult>) {
        assert!(
            matches!(refused, Err(object_store::Error::AlreadyExists { .. })),
            "{refused:?}"
        );
    }

    /// Every key the store lists, sorted.
    async fn listed(store: &LocalStore) -> Result<Vec<String>> {
        let mut keys: Vec<String> = store
            .list(None)
            .map_ok(|meta| meta.location.to_string())
            .try_collect()
            .await?;
        keys.sort();
        Ok(keys)
    }

    fn synced(dir: &FsPath) -> Result<LocalStore> {
        Ok(LocalStore::new(
            LocalFileSystem::new_with_prefix(dir)?,
            Durability::Fsync,
        ))
    }

    #[test]
    fn a_durability_reads_as_the_command_line_spells_it_and_prints_back() {
        for durability in [Durability::Fsync, Durability::Log, Durability::NoFsync] {
            assert_eq!(durability.to_string().parse::<Durability>(), Ok(durability));
        }
        assert_eq!(Durability::default(), Durability::Log);
        let refused = "sync".parse::<Durability>().expect_err("not a durability").to_string();
        assert!(
            refused.contains("`sync`")
                && refused.contains("fsync")
                && refused.contains("log")
                && refused.contains("no-fsync"),
            "{refused}"
        );
    }

    #[tokio::test]
    async fn puts_are_create_only_and_a_refused_create_syncs_what_holds_the_key() -> TestResult {
        let dir = tempfile::tempdir()?;
        let store = synced(dir.path())?;
        let key = Path::from("runs/r1/journal/0000000000");
        let create = PutOptions::from(PutMode::Create);
        store
            .put_opts(&key, PutPayload::from_static(b"first"), create.clone())
            .await?;
        assert_eq!(store.dir_syncs(), 0, "object_store syncs a put itself");
        assert_taken(store.put_opts(&key, PutPayload::from_static(b"second"), create).await);
        assert_eq!(store.dir_syncs(), 1, "the key's holder was synced before the refusal");
        assert_eq!(store.get(&key).await?.bytes().await?, Bytes::from_static(b"first"));
        store.put(&key, PutPayload::from_static(b"over")).await?;
        assert_eq!(store.get(&key).await?.bytes().await?, Bytes::from_static(b"over"));
        Ok(())
    }

    #[tokio::test]
    async fn deletes_finished_together_sync_each_of_their_directories_once() -> TestResult {
        let dir = tempfile::tempdir()?;
        let store = synced(dir.path())?;
        let keys: Vec<Path> = ["a", "b"]
            .iter()
            .flat_map(|folder| (0..3).map(move |i| Path::from(format!("{folder}/{i}"))))
            .collect();
        for key in &keys {
            store.put(key, PutPayload::from_static(b"x")).await?;
        }
        let locations = futures::stream::iter(keys.clone().into_iter().map(Ok)).boxed();
        let deleted: Vec<Path> = store.delete_stream(locations).try_collect().await?;
        assert_eq!(deleted, keys);
        // Deletes finish on blocking threads; those ready at once share a
        // pass, so a/ and b/ are each synced at least once, and at most once
        // per delete.
        let syncs = store.dir_syncs();
        assert!((2..=keys.len() as u64).contains(&syncs), "{syncs} directory syncs");
        assert_eq!(store.list(None).try_collect::<Vec<_>>().await?.len(), 0);
        let missing = store.delete(&Path::from("a/ghost")).await;
        assert!(
            matches!(missing, Err(object_store::Error::NotFound { .. })),
            "{missing:?}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn an_empty_object_syncs_its_directory_only_and_keeps_each_put_modes_meaning() -> TestResult {
        let dir = tempfile::tempdir()?;
        let store = synced(dir.path())?;
        let key = Path::from("index/tree/2026-12-02T19/marker");
        let create = PutOptions::from(PutMode::Create);
        let put = store.put_opts(&key, PutPayload::default(), create.clone()).await?;
        assert_eq!(store.dir_syncs(), 1, "one sync, of the marker's new directory");
        let head = store.head(&key).await?;
        assert_eq!(
            (head.size, &head.e_tag),
            (0, &put.e_tag),
            "object_store reads the same object back"
        );
        assert_taken(store.put_opts(&key, PutPayload::default(), create).await);
        assert_eq!(store.dir_syncs(), 2, "a refused create syncs the key's holder too");
        // An overwrite goes through a staging name, skipping one a crash left.
        std::fs::write(dir.path().join("index/tree/2026-12-02T19/full#1"), b"left by a crash")?;
        let full = Path::from("index/tree/2026-12-02T19/full");
        store.put(&full, PutPayload::from_static(b"bytes")).await?;
        assert_eq!(store.dir_syncs(), 2, "object_store syncs a put of bytes itself");
        store.put(&full, PutPayload::default()).await?;
        assert_eq!(store.get(&full).await?.bytes().await?, Bytes::new());
        assert_eq!(store.dir_syncs(), 3);
        assert_eq!(
            listed(&store).await?,
            [full.to_string(), key.to_string()],
            "staging files are not objects"
        );
        Ok(())
    }

    #[tokio::test]
    async fn an_empty_object_where_a_directory_or_file_stands_is_refused_and_leaves_nothing() -> TestResult {
        let dir = tempfile::tempdir()?;
        let store = synced(dir.path())?;
        let kept = Path::from("a/b");
        store.put(&kept, PutPayload::from_static(b"kept")).await?;
        let onto_directory = store.put(&Path::from("a"), PutPayload::default()).await;
        assert!(onto_directory.is_err(), "{onto_directory:?}");
        assert_taken(
            store
                .put_opts(&Path::from("a"), PutPayload::default(), PutMode::Create.into())
                .await,
        );
        let under_file = store.put(&Path::from("a/b/c"), PutPayload::default()).await;
        assert!(under_file.is_err(), "{under_file:?}");
        assert_eq!(store.get(&kept).await?.bytes().await?, Bytes::from_static(b"kept"));
        let names = |at: &FsPath| -> io::Result<Vec<String>> {
            std::fs::read_dir(at)?
                .map(|entry| Ok(entry?.file_name().to_string_lossy().into_owned()))
                .collect()
        };
        assert_eq!(names(dir.path())?, ["a"], "no staging file is left beside `a`");
        assert_eq!(names(&dir.path().join("a"))?, ["b"]);
        Ok(())
    }

    #[tokio::test]
    async fn with_the_log_every_write_keeps_its_meaning_and_the_log_is_no_object() -> TestResult {
        let dir = tempfile::tempdir()?;
        let store = LocalStore::open(dir.path(), Durability::Log)?;
        let syncs = store.log_syncs().ok_or("a log")?;
        let key = Path::from("runs/r1/journal/0000000000");
        let create = PutOptions::from(PutMode::Create);
        let put = store
            .put_opts(&key, PutPayload::from_static(b"first"), create.clone())
            .await?;
        assert_eq!(
            store.head(&key).await?.e_tag,
            put.e_tag,
            "object_store reads the same object back"
        );
        assert_taken(
            store
                .put_opts(&key, PutPayload::from_static(b"second"), create.clone())
                .await,
        );
        store.put(&key, PutPayload::from_static(b"over")).await?;
        assert_eq!(store.get(&key).await?.bytes().await?, Bytes::from_static(b"over"));
        let marker = Path::from("unfinished/r1");
        store.put_opts(&marker, PutPayload::default(), create.clone()).await?;
        assert_taken(store.put_opts(&marker, PutPayload::default(), create).await);
        store.copy(&key, &Path::from("copied")).await?;
        assert_eq!(store.dir_syncs(), 0, "no file or directory syncs of its own");
        assert_eq!(store.log_syncs(), Some(syncs + 4), "one sync of the log a write");
        assert_eq!(
            listed(&store).await?,
            ["copied", key.as_ref(), marker.as_ref()],
            "neither the log nor a staging file is listed"
        );
        let deleted: Vec<Path> = store
            .delete_stream(futures::stream::iter([Ok(marker.clone()), Ok(key.clone())]).boxed())
            .try_collect()
            .await?;
        assert_eq!(deleted, [marker.clone(), key]);
        let missing = store.delete(&marker).await;
        assert!(
            matches!(missing, Err(object_store::Error::NotFound { .. })),
            "{missing:?}"
        );
        let onto_directory = store.put(&Path::from("runs"), PutPayload::from_static(b"x")).await;
        assert!(onto_directory.is_err(), "{onto_directory:?}");
        Ok(())
    }

    #[tokio::test]
    async fn with_the_log_a_put_up_to_the_largest_record_is_recorded_and_a_larger_one_synced_aside() -> TestResult {
        let dir = tempfile::tempdir()?;
        let store = LocalStore::open(dir.path(), Durability::Log)?;
        let largest = write_log::MAX_RECORDED_BYTES as usize;
        let (recorded, aside) = (Path::from("recorded"), Path::from("aside"));
        store.put(&recorded, vec![0xab; largest].into()).await?;
        let syncs = store.log_syncs().ok_or("a log")?;
        store.put(&aside, vec![0xcd; largest + 1].into()).await?;
        assert_eq!(store.log_syncs(), Some(syncs + 1), "the larger put is noted in the log");
        assert_eq!(store.get(&aside).await?.bytes().await?.len(), largest + 1);
        assert_taken(
            store
                .put_opts(&aside, PutPayload::from_static(b"x"), PutMode::Create.into())
                .await,
        );
        let log = std::fs::read(dir.path().join(write_log::LOG_NAME))?;
        let count = |byte: u8| log.iter().filter(|&&b| b == byte).count();
        assert!(count(0xab) >= largest, "the largest record holds its bytes");
        assert!(count(0xcd) < 64, "the larger put's bytes are not in the log");
        Ok(())
    }

    /// A put up to [`INLINE_PUT_BYTES`] is staged (and, without syncs, made)
    /// on the calling task: it completes while the blocking pool's only
    /// thread is held; a larger one waits for that thread. Both keep their
    /// modes' meaning and leave no staging file, with and without the log.
    #[test]
    fn a_put_up_to_the_inline_bound_needs_no_thread_of_the_blocking_pool() -> TestResult {
        use futures::FutureExt;
        // Only guards against a hang: an inline put that waited for the
        // held pool would never complete.
        const HANG: std::time::Duration = std::time::Duration::from_secs(30);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .max_blocking_threads(1)
            .build()?;
        for durability in [Durability::NoFsync, Durability::Log] {
            let dir = tempfile::tempdir()?;
            let store = LocalStore::open(dir.path(), durability)?;
            let (largest, larger) = (Path::from("r/largest"), Path::from("r/larger"));
            let (release, held) = std::sync::mpsc::channel::<()>();
            runtime.block_on(async {
                let pool_held = tokio::task::spawn_blocking(move || held.recv());
                let create = || PutOptions::from(PutMode::Create);
                let inline = store.put_opts(&largest, vec![1; INLINE_PUT_BYTES].into(), create());
                tokio::time::timeout(HANG, inline)
                    .await
                    .map_err(|_| format!("{durability}: an inline put waited for the blocking pool"))??;
                let mut pooled = store.put_opts(&larger, vec![2; INLINE_PUT_BYTES + 1].into(), create());
                assert!(
                    (&mut pooled).now_or_never().is_none(),
                    "{durability}: a larger put was made inline"
                );
                release.send(())?;
                pool_held.await??;
                pooled.await?;
                assert_taken(store.put_opts(&largest, vec![3].into(), create()).await);
                let put = store.put(&largest, vec![4; 2].into()).await?;
                assert_eq!(store.get(&largest).await?.bytes().await?, vec![4; 2]);
                let stored = store.head(&largest).await?.e_tag;
                assert_eq!(put.e_tag, stored, "{durability}: a put answers the ETag a read finds");
                assert_eq!(store.get(&larger).await?.bytes().await?.len(), INLINE_PUT_BYTES + 1);
                let mut left = std::fs::read_dir(dir.path().join("r"))?
                    .map(|entry| entry.map(|entry| entry.file_name()))
                    .collect::<io::Result<Vec<_>>>()?;
                left.sort();
                assert_eq!(left, ["larger", "largest"], "{durability}: no staging file is left");
                TestResult::Ok(())
            })?;
        }
        Ok(())
    }

    #[test]
    fn a_new_data_directory_is_created_with_its_parents() -> TestResult {
        let dir = tempfile::tempdir()?;
        let nested = dir.path().join("data/objects");
        create_dir(&nested, Durability::Fsync)?;
        assert!(nested.is_dir());
        create_dir(&nested, Durability::Fsync)?;
        Ok(())
    }
}
