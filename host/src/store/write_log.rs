//! The local store's write-ahead log ([`Durability::Log`](super::Durability::Log)):
//! every put and delete is appended to one file beside the objects and
//! synced before it is applied and acknowledged, the writes in flight
//! together sharing one sync; the objects' own files are written without
//! syncs and made durable all at once at a checkpoint. One `fdatasync` of
//! an append stands for the two syncs a synced put makes (its file, its
//! directory), each of which the disk pays for separately.
//!
//! One thread per log, the committer, makes every batch: writers queue
//! their writes (bytes already staged beside their keys) and await its
//! answer, holding no thread while the log syncs.
//!
//! Invariants:
//! - A write is applied to the files only once its record, which holds
//!   its bytes, is on disk: after a power loss, a key that may name a torn
//!   or lost file has a record that rewrites it.
//! - Every process writing the root in this mode takes the log's lock
//!   (`flock`) around a batch: the check a create-only put makes, the
//!   record's place in the log and the write itself happen in one order
//!   for all of them. So the last record of a key is its state, and
//!   replaying the last record of each key restores the store.
//! - The log is replayed when the machine has booted since it was last
//!   written (its header keeps the boot id): while the machine stays up,
//!   its page cache holds every write applied, whichever process made it.
//! - A checkpoint (`syncfs` of the root's file system) makes every applied
//!   write durable; the log then starts a new generation, and records of
//!   an older one no longer count (each record's checksum covers its
//!   generation), so the log is rewritten in place and never grows past
//!   its capacity by more than one batch.
//! - A record holds at most [`MAX_RECORDED_BYTES`] of a put's bytes: the
//!   store writes a larger put synced, outside the log, and notes it.
//! - A failed sync of the log poisons it: the kernel may have dropped the
//!   pages it could not write, so no later write may be acknowledged on
//!   top of them. The host must be restarted, which replays the log.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

/// The log's file name in the root: object_store takes a name ending in
/// `#` and digits for one of its staging files and lists it as no object.
pub const LOG_NAME: &str = "write-log#0";

/// Bytes of records before a checkpoint, allocated when the log is made so
/// that an append allocates nothing and its `fdatasync` writes little more
/// than the data (unwritten space reads as zeros: no record).
const DEFAULT_CAPACITY: u64 = 16 << 20;

/// The largest put whose bytes the log records. A larger one is written
/// synced outside the log and noted in it (as a copy is): its bytes would
/// push the log far past its capacity, and a replay reads the whole log.
pub const MAX_RECORDED_BYTES: u64 = DEFAULT_CAPACITY / 4;

/// The header's place at the start of the file; records follow.
const HEADER_BYTES: u64 = 4096;

const MAGIC: &[u8; 8] = b"STEPLOG1";

/// A write the log records and applies.
#[derive(Debug)]
pub enum Write {
    /// `bytes` at `file`, only where nothing is if `create`. `staged` is a
    /// file beside it holding the same bytes, renamed or linked onto it;
    /// without one (an empty create), the file is made at its key.
    Put {
        file: PathBuf,
        bytes: Bytes,
        staged: Option<Staged>,
        create: bool,
    },
    /// Removes `file`.
    Delete { file: PathBuf },
    /// `file` was written (`exists`) or removed durably outside the log (a
    /// copy, a rename, a multipart upload): what the disk holds is its state.
    Noted { file: PathBuf, exists: bool },
}

/// What a write did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Put, with the file's ETag as object_store reports it.
    Written(String),
    /// A create found the key taken; nothing was written.
    Taken,
    Deleted,
    /// A delete found nothing at the key.
    Missing,
    Noted,
}

/// Writes that may wait for the committer at once; a writer past them
/// waits for room. The bound the design before the committer had (one
/// waiting writer per thread of tokio's blocking pool, 512 by default):
/// with a record's bytes up to [`MAX_RECORDED_BYTES`], what writers can
/// hold in memory while the log syncs stays bounded.
pub const QUEUED_WRITES: usize = 512;

/// A write and where its writer waits for the answer.
type Queued = (Write, oneshot::Sender<io::Result<Outcome>>);

/// The log of one store root. Its own thread, the committer, takes every
/// write queued since its last batch, commits them with one sync and
/// answers each (group commit). A writer queues its write and awaits the
/// answer without holding a thread: under load, one wake-up of the
/// committer serves a whole batch, and the answers wake tasks, not threads.
#[derive(Debug)]
pub struct WriteLog {
    queue: mpsc::Sender<Queued>,
    syncs: Arc<AtomicU64>,
}

impl WriteLog {
    /// Opens the log of `root` (creating it), replaying it first if the
    /// machine has booted since it was last written.
    pub fn open(root: &Path) -> io::Result<Self> {
        Self::open_on(root, current_boot().as_deref(), DEFAULT_CAPACITY)
    }

    /// Opens the log as if the machine's boot id were `boot` (`None`:
    /// unknown, so the log is always replayed), with `capacity` bytes of
    /// records before a checkpoint.
    pub(super) fn open_on(root: &Path, boot: Option<&str>, capacity: u64) -> io::Result<Self> {
        let syncs = Arc::new(AtomicU64::new(0));
        let committer = Committer::open(root, boot, capacity, syncs.clone())?;
        let (queue, queued) = mpsc::channel(QUEUED_WRITES);
        std::thread::Builder::new()
            .name("stepstone-write-log".into())
            .spawn(move || committer.serve(queued))?;
        Ok(Self { queue, syncs })
    }

    /// How many times the log was synced (batches and checkpoints).
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Records and applies `write` in the committer's next batch; answers
    /// once its record is on disk and it is applied.
    pub async fn write(&self, write: Write) -> io::Result<Outcome> {
        let (answer, answered) = oneshot::channel();
        self.queue.send((write, answer)).await.map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }
}

/// The committer could not answer: a batch panicked (which poisons the
/// log) or its thread is gone.
fn stopped() -> io::Error {
    io::Error::other("the write log stopped: its committer failed; restart the host")
}

/// A staging file beside a key, holding a put's bytes.
#[derive(Debug)]
pub struct Staged {
    pub path: PathBuf,
    /// Its ETag as object_store reports it, read from the open file: it is
    /// the key's once placed (a link or rename keeps the inode, size and
    /// modification time), so no put stats its key again.
    pub e_tag: String,
}

/// Writes `bytes` to a new staging file beside `file` (making its
/// directory if need be), named as object_store names its own.
pub fn stage(file: &Path, bytes: &[u8]) -> io::Result<Staged> {
    for suffix in 1..=u32::MAX {
        let mut staging = file.as_os_str().to_owned();
        staging.push(format!("#{suffix}"));
        let staging = PathBuf::from(staging);
        match with_dir(&staging, |at| OpenOptions::new().write(true).create_new(true).open(at)) {
            Ok(mut created) => {
                let written = created.write_all(bytes).and_then(|()| e_tag_of(&created));
                if written.is_err() {
                    // Best effort: a disk too full for the bytes must not
                    // also keep a staging file for each attempt.
                    let _ = std::fs::remove_file(&staging);
                }
                return written.map(|e_tag| Staged { path: staging, e_tag });
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("no free staging name"))
}

/// Moves the `staged` file beside `file` onto it: linked where nothing is
/// (`create`, refused with `AlreadyExists` where something is) or renamed
/// over what is; answers the placed file's ETag. The staging file is gone
/// afterwards, whatever happened.
pub fn place(file: &Path, staged: Staged, create: bool) -> io::Result<String> {
    let from = &staged.path;
    let placed = match create {
        true => with_dir(file, |at| std::fs::hard_link(from, at)).and_then(|()| std::fs::remove_file(from)),
        false => with_dir(file, |at| std::fs::rename(from, at)),
    };
    if placed.is_err() {
        // Best effort: the placement's error is the one to report.
        let _ = std::fs::remove_file(from);
    }
    placed.map(|()| staged.e_tag)
}

/// The ETag of an open file.
fn e_tag_of(file: &File) -> io::Result<String> {
    super::local::e_tag(&file.metadata()?)
}

/// Runs `make` on `file`, creating its directory and retrying once if it is
/// missing (no sync: a replay makes directories again).
fn with_dir<T>(file: &Path, make: impl Fn(&Path) -> io::Result<T>) -> io::Result<T> {
    match make(file) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(dir) = file.parent() {
                std::fs::create_dir_all(dir)?;
            }
            make(file)
        }
        made => made,
    }
}

/// The machine's boot id, which changes at every boot (Linux).
fn current_boot() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned())
}

/// The log's header: which boot wrote it last and its generation. It is
/// written when a generation starts, not with every batch: a batch's sync
/// then writes the blocks of its records alone (the header's block too
/// would double what a sync costs), and a writer finds the end of the
/// records by reading past the last one it knows of.
#[derive(Debug, Clone, PartialEq)]
struct Header {
    boot: [u8; 36],
    generation: u64,
}

impl Header {
    const LEN: usize = 8 + 36 + 8 + 4;

    fn boot_of(boot: Option<&str>) -> [u8; 36] {
        let mut field = [0; 36];
        if let Some(boot) = boot {
            let len = boot.len().min(36);
            field[..len].copy_from_slice(&boot.as_bytes()[..len]);
        }
        field
    }

    fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0; Self::LEN];
        out[..8].copy_from_slice(MAGIC);
        out[8..44].copy_from_slice(&self.boot);
        out[44..52].copy_from_slice(&self.generation.to_le_bytes());
        let crc = crc32fast::hash(&out[..52]);
        out[52..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8; Self::LEN]) -> Option<Self> {
        let crc = u32::from_le_bytes(bytes[52..].try_into().ok()?);
        if &bytes[..8] != MAGIC || crc32fast::hash(&bytes[..52]) != crc {
            return None;
        }
        Some(Self {
            boot: bytes[8..44].try_into().ok()?,
            generation: u64::from_le_bytes(bytes[44..52].try_into().ok()?),
        })
    }
}

const PUT: u8 = 1;
const DELETE: u8 = 2;
const NOTED: u8 = 3;

/// A key's last recorded state, as a replay restores it.
#[derive(Debug, PartialEq)]
enum State {
    Bytes(Vec<u8>),
    Absent,
    /// Written durably outside the log: left as it is.
    OnDisk,
}

/// Appends the record of one write, a frame of `[length][crc][kind, path
/// length, path, bytes]`, the crc over the generation and the body. The
/// body is written in place, its crc filled in after: a put's bytes are
/// copied once.
fn encode_record(frames: &mut Vec<u8>, generation: u64, kind: u8, path: &Path, bytes: &[u8]) {
    debug_assert!(
        bytes.len() as u64 <= MAX_RECORDED_BYTES,
        "the store keeps larger puts out of the log"
    );
    let path = path.as_os_str().as_bytes();
    let start = frames.len();
    frames.extend_from_slice(&((5 + path.len() + bytes.len()) as u32).to_le_bytes());
    frames.extend_from_slice(&[0; 4]);
    frames.push(kind);
    frames.extend_from_slice(&(path.len() as u32).to_le_bytes());
    frames.extend_from_slice(path);
    frames.extend_from_slice(bytes);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&generation.to_le_bytes());
    crc.update(&frames[start + 8..]);
    frames[start + 4..start + 8].copy_from_slice(&crc.finalize().to_le_bytes());
}

/// The last state of each key among the records of `generation` in `log`
/// (from the header on), up to the first frame that is empty, cut short
/// or fails its crc: where the last batch written before a crash may end.
fn last_states(log: &[u8], generation: u64) -> HashMap<PathBuf, State> {
    let mut states = HashMap::new();
    let mut at = HEADER_BYTES as usize;
    while let Some((kind, path, bytes, next)) = decode_record(log, at, generation) {
        let state = match kind {
            PUT => State::Bytes(bytes.to_vec()),
            DELETE => State::Absent,
            _ => State::OnDisk,
        };
        states.insert(PathBuf::from(OsStr::from_bytes(path)), state);
        at = next;
    }
    states
}

/// Where the records of `generation` in `log` end, reading from `at`, the
/// end of those a writer knew of: past what other writers appended since.
fn end_of_records(log: &File, mut at: u64, generation: u64) -> io::Result<u64> {
    let size = log.metadata()?.len();
    loop {
        let mut frame = [0; 8];
        if at + 8 > size {
            return Ok(at);
        }
        log.read_exact_at(&mut frame, at)?;
        let len = u64::from(u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]));
        // A length that runs past the file is no record's (a stale or torn one).
        if at + 8 + len > size {
            return Ok(at);
        }
        let mut record = frame.to_vec();
        record.resize(8 + len as usize, 0);
        log.read_exact_at(&mut record[8..], at + 8)?;
        match decode_record(&record, 0, generation) {
            Some((.., next)) => at += next as u64,
            None => return Ok(at),
        }
    }
}

fn decode_record(log: &[u8], at: usize, generation: u64) -> Option<(u8, &[u8], &[u8], usize)> {
    let frame = log.get(at..at.checked_add(8)?)?;
    let len = u32::from_le_bytes(frame[..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(frame[4..].try_into().ok()?);
    let body = log.get(at + 8..(at + 8).checked_add(len)?)?;
    let mut check = crc32fast::Hasher::new();
    check.update(&generation.to_le_bytes());
    check.update(body);
    if len < 5 || check.finalize() != crc {
        return None;
    }
    let path_len = u32::from_le_bytes(body[1..5].try_into().ok()?) as usize;
    let path = body.get(5..5usize.checked_add(path_len)?)?;
    Some((body[0], path, &body[5 + path_len..], at + 8 + len))
}

/// The log file, and what commits a batch of writes to it.
#[derive(Debug)]
struct Committer {
    root: PathBuf,
    /// Shared so a batch can hold the lock on it while committing through `&mut self`.
    log: Arc<File>,
    capacity: u64,
    /// The generation this writer last saw, and where its records ended.
    generation: u64,
    end: u64,
    syncs: Arc<AtomicU64>,
    /// Why the log can take no more writes.
    poisoned: Option<String>,
}

/// Holds the log's `flock` until dropped.
struct Locked<'a>(&'a File);

impl<'a> Locked<'a> {
    fn new(file: &'a File) -> io::Result<Self> {
        file.lock()?;
        Ok(Self(file))
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // Closing the file would release it too; an error leaves nothing to undo.
        let _ = self.0.unlock();
    }
}

impl Committer {
    fn open(root: &Path, boot: Option<&str>, capacity: u64, syncs: Arc<AtomicU64>) -> io::Result<Self> {
        let path = root.join(LOG_NAME);
        let log = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?
            .into();
        let mut committer = Self {
            root: root.to_owned(),
            log,
            capacity,
            generation: 0,
            end: HEADER_BYTES,
            syncs,
            poisoned: None,
        };
        let log = committer.log.clone();
        let _locked = Locked::new(&log)?;
        let header = match committer.read_header()? {
            Some(header) => header,
            None => return committer.create(boot).map(|()| committer),
        };
        if boot.is_none() || Header::boot_of(boot) != header.boot {
            committer.replay(&header)?;
            committer.start_generation(header.generation + 1, Header::boot_of(boot))?;
        }
        Ok(committer)
    }

    /// The header, or `None` for a log just created (empty).
    fn read_header(&self) -> io::Result<Option<Header>> {
        if self.log.metadata()?.len() == 0 {
            return Ok(None);
        }
        let mut bytes = [0; Header::LEN];
        self.log.read_exact_at(&mut bytes, 0)?;
        Header::decode(&bytes).map(Some).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the write log {} has a damaged header: move it aside to open the store \
                     (writes made since its last checkpoint and not yet on disk are lost with it)",
                    self.root.join(LOG_NAME).display()
                ),
            )
        })
    }

    /// Allocates the log's capacity once and writes its first header.
    fn create(&mut self, boot: Option<&str>) -> io::Result<()> {
        let flags = rustix::fs::FallocateFlags::empty();
        rustix::fs::fallocate(&self.log, flags, 0, HEADER_BYTES + self.capacity)?;
        self.start_generation(1, Header::boot_of(boot))?;
        self.log.sync_all()?;
        File::open(&self.root)?.sync_all()
    }

    fn start_generation(&mut self, generation: u64, boot: [u8; 36]) -> io::Result<()> {
        self.log.write_all_at(&Header { boot, generation }.encode(), 0)?;
        self.sync_log()?;
        (self.generation, self.end) = (generation, HEADER_BYTES);
        Ok(())
    }

    fn sync_log(&self) -> io::Result<()> {
        self.log.sync_data()?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Restores the last recorded state of every key the log names, then
    /// makes the file system durable.
    fn replay(&self, header: &Header) -> io::Result<()> {
        let log = std::fs::read(self.root.join(LOG_NAME))?;
        let states = last_states(&log, header.generation);
        let mut restored = 0;
        for (relative, state) in &states {
            let file = self.root.join(relative);
            match restore(&file, state) {
                Ok(changed) => restored += usize::from(changed),
                // Its write failed when it was made (a directory stood at the
                // key, say), and its writer was told so.
                Err(e) => tracing::warn!(file = %file.display(), "a logged write cannot be replayed: {e}"),
            }
        }
        sync_file_system(&self.root)?;
        tracing::info!(
            root = %self.root.display(),
            keys = states.len(),
            restored,
            "replayed the write log after a reboot"
        );
        Ok(())
    }

    /// Commits the writes queued, a batch of all those waiting at a time,
    /// until every writer is gone. A panic while committing poisons the
    /// log: the batch's state on disk is unknown, so no later write may be
    /// acknowledged on top of it.
    fn serve(mut self, mut queued: mpsc::Receiver<Queued>) {
        let mut batch = Vec::new();
        while queued.blocking_recv_many(&mut batch, QUEUED_WRITES) > 0 {
            let (writes, answers): (Vec<Write>, Vec<_>) = batch.drain(..).unzip();
            let count = writes.len();
            let outcomes = std::panic::catch_unwind(AssertUnwindSafe(|| self.commit(writes))).unwrap_or_else(|_| {
                self.poisoned = Some("a batch panicked while it was committed".into());
                (0..count).map(|_| Err(stopped())).collect()
            });
            for (answer, outcome) in answers.into_iter().zip(outcomes) {
                // A writer that stopped waiting needs no answer.
                let _ = answer.send(outcome);
            }
        }
    }

    /// Records `writes` in one sync, then applies them in order.
    fn commit(&mut self, writes: Vec<Write>) -> Vec<io::Result<Outcome>> {
        if let Some(why) = &self.poisoned {
            let why = format!("the write log takes no more writes since a sync failed ({why}): restart the host");
            return writes.iter().map(|_| Err(io::Error::other(why.clone()))).collect();
        }
        let count = writes.len();
        match self.commit_locked(writes) {
            Ok(outcomes) => outcomes,
            Err(BatchFailed { error, poisons }) => {
                let why = error.to_string();
                if poisons {
                    self.poisoned = Some(why.clone());
                }
                (0..count)
                    .map(|_| Err(io::Error::new(error.kind(), format!("the write log failed: {why}"))))
                    .collect()
            }
        }
    }

    fn commit_locked(&mut self, writes: Vec<Write>) -> Result<Vec<io::Result<Outcome>>, BatchFailed> {
        let log = self.log.clone();
        let _locked = Locked::new(&log).map_err(BatchFailed::retry)?;
        let header = self.read_header().map_err(BatchFailed::retry)?;
        let header = header.ok_or_else(|| BatchFailed::retry(io::Error::other("the write log is empty")))?;
        if header.generation != self.generation {
            (self.generation, self.end) = (header.generation, HEADER_BYTES);
        }
        let decided = decide(writes);
        let recorded = self.append(&decided);
        if let Err(failed) = recorded {
            decided.into_iter().for_each(|(write, _)| discard(write));
            return Err(failed);
        }
        let outcomes = decided
            .into_iter()
            .map(|(write, decision)| apply(write, decision))
            .collect();
        if self.end > HEADER_BYTES + self.capacity {
            sync_file_system(&self.root).map_err(BatchFailed::poisoning)?;
            let next = self.generation + 1;
            self.start_generation(next, header.boot)
                .map_err(BatchFailed::poisoning)?;
        }
        Ok(outcomes)
    }

    /// Appends the records of the writes decided to take effect after the
    /// last record any writer made, and syncs them.
    fn append(&mut self, decided: &[(Write, Decision)]) -> Result<(), BatchFailed> {
        self.end = end_of_records(&self.log, self.end, self.generation).map_err(BatchFailed::retry)?;
        let mut frames = Vec::new();
        for (write, _) in decided
            .iter()
            .filter(|(_, decision)| matches!(decision, Decision::Record))
        {
            record(&mut frames, self.generation, &self.root, write);
        }
        if frames.is_empty() {
            return Ok(());
        }
        // A failed write leaves the end where it was: the next batch writes over it.
        self.log.write_all_at(&frames, self.end).map_err(BatchFailed::retry)?;
        self.sync_log().map_err(BatchFailed::poisoning)?;
        self.end += frames.len() as u64;
        Ok(())
    }
}

/// Why a batch was not committed. A failed sync poisons the log: the
/// kernel may have dropped the pages it could not write, and marked them
/// clean, so no later sync can be trusted to cover them.
struct BatchFailed {
    error: io::Error,
    poisons: bool,
}

impl BatchFailed {
    fn retry(error: io::Error) -> Self {
        Self { error, poisons: false }
    }

    fn poisoning(error: io::Error) -> Self {
        Self { error, poisons: true }
    }
}

/// Removes the staging file of a write that will not be made.
fn discard(write: Write) {
    if let Write::Put {
        staged: Some(staged), ..
    } = write
    {
        // Best effort: a staging file left behind is no object.
        let _ = std::fs::remove_file(staged.path);
    }
}

/// Whether a write of a batch takes effect.
enum Decision {
    Record,
    /// Answered without a record: a create found its key taken (by the
    /// files, or by a write before it in the batch), a delete found nothing.
    Unneeded,
    /// A directory stands at the key.
    Refused,
}

/// Decides the writes of a batch in order, each seeing those before it.
fn decide(writes: Vec<Write>) -> Vec<(Write, Decision)> {
    let mut exists: HashMap<PathBuf, bool> = HashMap::new();
    writes
        .into_iter()
        .map(|write| {
            let (file, wants) = match &write {
                Write::Put { file, create, .. } => (file, (*create).then_some(false)),
                Write::Delete { file } => (file, Some(true)),
                Write::Noted { file, .. } => (file, None),
            };
            let found = std::fs::metadata(file).ok();
            if matches!(write, Write::Put { .. }) && found.as_ref().is_some_and(std::fs::Metadata::is_dir) {
                return (write, Decision::Refused);
            }
            let now = *exists.entry(file.clone()).or_insert(found.is_some());
            if wants.is_some_and(|wanted| wanted != now) {
                return (write, Decision::Unneeded);
            }
            let after = !matches!(write, Write::Delete { .. } | Write::Noted { exists: false, .. });
            exists.insert(file.clone(), after);
            (write, Decision::Record)
        })
        .collect()
}

fn record(frames: &mut Vec<u8>, generation: u64, root: &Path, write: &Write) {
    let relative = |file: &Path| file.strip_prefix(root).unwrap_or(file).to_owned();
    match write {
        Write::Put { file, bytes, .. } => encode_record(frames, generation, PUT, &relative(file), bytes),
        Write::Delete { file } => encode_record(frames, generation, DELETE, &relative(file), &[]),
        Write::Noted { file, exists: true } => encode_record(frames, generation, NOTED, &relative(file), &[]),
        Write::Noted { file, exists: false } => encode_record(frames, generation, DELETE, &relative(file), &[]),
    }
}

/// Applies a write whose record is on disk (or answers one that was not
/// recorded), removing its staging file whatever happens.
fn apply(write: Write, decision: Decision) -> io::Result<Outcome> {
    match (write, decision) {
        (Write::Put { file, staged, .. }, unrecorded @ (Decision::Unneeded | Decision::Refused)) => {
            staged.map_or(Ok(()), |staged| std::fs::remove_file(staged.path))?;
            match unrecorded {
                Decision::Refused => Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    format!("a directory stands at {}", file.display()),
                )),
                _ => Ok(Outcome::Taken),
            }
        }
        (Write::Delete { .. }, Decision::Unneeded | Decision::Refused) => Ok(Outcome::Missing),
        (write, _recorded) => apply_recorded(write),
    }
}

fn apply_recorded(write: Write) -> io::Result<Outcome> {
    match write {
        Write::Put {
            file, staged, create, ..
        } => {
            let e_tag = match staged {
                None => e_tag_of(&with_dir(&file, |at| {
                    OpenOptions::new().write(true).create_new(true).open(at)
                })?)?,
                Some(staged) => place(&file, staged, create)?,
            };
            Ok(Outcome::Written(e_tag))
        }
        Write::Delete { file } => std::fs::remove_file(file).map(|()| Outcome::Deleted),
        Write::Noted { .. } => Ok(Outcome::Noted),
    }
}

/// Brings `file` to `state` if it differs; says whether it did.
fn restore(file: &Path, state: &State) -> io::Result<bool> {
    match state {
        State::Bytes(bytes) => {
            if std::fs::read(file).is_ok_and(|held| held == *bytes) {
                return Ok(false);
            }
            std::fs::rename(stage(file, bytes)?.path, file)?;
            Ok(true)
        }
        State::Absent => match std::fs::remove_file(file) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        },
        State::OnDisk => Ok(false),
    }
}

/// Makes everything written to the file system holding `root` durable.
fn sync_file_system(root: &Path) -> io::Result<()> {
    rustix::fs::syncfs(File::open(root)?).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl WriteLog {
        /// Records and applies `write`, blocking this (non-async) thread.
        fn write_now(&self, write: Write) -> io::Result<Outcome> {
            futures::executor::block_on(self.write(write))
        }
    }

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn put(file: &Path, bytes: &'static [u8], create: bool) -> io::Result<Write> {
        let staged = (!(bytes.is_empty() && create))
            .then(|| stage(file, bytes))
            .transpose()?;
        Ok(Write::Put {
            file: file.to_owned(),
            bytes: Bytes::from_static(bytes),
            staged,
            create,
        })
    }

    fn header(root: &Path) -> io::Result<Header> {
        let mut bytes = [0; Header::LEN];
        File::open(root.join(LOG_NAME))?.read_exact_at(&mut bytes, 0)?;
        Header::decode(&bytes).ok_or_else(|| io::Error::other("damaged header"))
    }

    #[test]
    fn a_write_is_applied_once_logged_and_a_create_finds_taken_keys() -> TestResult {
        let root = tempfile::tempdir()?;
        let log = WriteLog::open_on(root.path(), Some("boot-a"), 1 << 20)?;
        let syncs = log.syncs();
        let file = root.path().join("runs/r1/journal/0");
        assert!(matches!(
            log.write_now(put(&file, b"first", true)?)?,
            Outcome::Written(_)
        ));
        assert_eq!(std::fs::read(&file)?, b"first");
        assert_eq!(log.syncs(), syncs + 1, "one sync of the log, none of the file");
        assert_eq!(log.write_now(put(&file, b"second", true)?)?, Outcome::Taken);
        assert_eq!(log.syncs(), syncs + 1, "a refused create records nothing");
        assert!(matches!(
            log.write_now(put(&file, b"over", false)?)?,
            Outcome::Written(_)
        ));
        assert_eq!(std::fs::read(&file)?, b"over");
        let marker = root.path().join("unfinished/r1");
        assert!(matches!(log.write_now(put(&marker, b"", true)?)?, Outcome::Written(_)));
        assert_eq!(log.write_now(Write::Delete { file: marker.clone() })?, Outcome::Deleted);
        assert_eq!(log.write_now(Write::Delete { file: marker.clone() })?, Outcome::Missing);
        let left: Vec<_> = std::fs::read_dir(root.path().join("runs/r1/journal"))?.collect::<Result<_, _>>()?;
        assert_eq!(left.len(), 1, "no staging file is left: {left:?}");
        Ok(())
    }

    #[test]
    fn a_batch_takes_one_sync_and_its_writes_see_each_other_in_order() -> TestResult {
        let root = tempfile::tempdir()?;
        let syncs = Arc::new(AtomicU64::new(0));
        let mut committer = Committer::open(root.path(), Some("boot-a"), 1 << 20, syncs.clone())?;
        let before = syncs.load(Ordering::Relaxed);
        let file = root.path().join("k");
        let outcomes = committer.commit(vec![
            put(&file, b"a", true)?,
            put(&file, b"b", true)?,
            Write::Delete { file: file.clone() },
            put(&file, b"c", true)?,
            Write::Delete {
                file: root.path().join("ghost"),
            },
        ]);
        let outcomes: Vec<Outcome> = outcomes.into_iter().collect::<io::Result<_>>()?;
        assert!(matches!(outcomes[0], Outcome::Written(_)));
        assert_eq!(outcomes[1..3], [Outcome::Taken, Outcome::Deleted]);
        assert!(matches!(outcomes[3], Outcome::Written(_)));
        assert_eq!(outcomes[4], Outcome::Missing);
        assert_eq!(syncs.load(Ordering::Relaxed), before + 1);
        assert_eq!(std::fs::read(&file)?, b"c");
        Ok(())
    }

    /// While the committer cannot commit (another process holds the log's
    /// lock), at most [`QUEUED_WRITES`] writes wait in its queue and the
    /// writers past them wait outside it; all are made once it can.
    #[test]
    fn at_most_the_queue_bound_of_writes_wait_for_a_held_committer() -> TestResult {
        let root = tempfile::tempdir()?;
        let log = Arc::new(WriteLog::open_on(root.path(), Some("boot-a"), 1 << 20)?);
        let other_process = File::open(root.path().join(LOG_NAME))?;
        other_process.lock()?;
        // The committer takes at most a full queue into its first batch,
        // then waits for the lock: this many writers overflow the queue.
        let writers = 2 * QUEUED_WRITES + 1;
        let runtime = tokio::runtime::Builder::new_current_thread().build()?;
        runtime.block_on(async {
            let mut written = tokio::task::JoinSet::new();
            for i in 0..writers {
                let (log, file) = (log.clone(), root.path().join(format!("q/{i}")));
                written.spawn(async move { log.write(put(&file, b"queued", true)?).await });
            }
            while log.queue.capacity() > 0 {
                tokio::task::yield_now().await;
            }
            assert_eq!(log.queue.max_capacity(), QUEUED_WRITES);
            assert!(
                written.try_join_next().is_none(),
                "a write was answered while the log was locked"
            );
            other_process.unlock()?;
            let outcomes = written.join_all().await;
            assert_eq!(outcomes.len(), writers);
            for outcome in outcomes {
                assert!(matches!(outcome?, Outcome::Written(_)));
            }
            TestResult::Ok(())
        })?;
        assert_eq!(std::fs::read_dir(root.path().join("q"))?.count(), writers);
        Ok(())
    }

    #[test]
    fn writers_at_once_each_get_their_own_outcome_and_a_contested_key_one_winner() -> TestResult {
        let root = tempfile::tempdir()?;
        let log = WriteLog::open_on(root.path(), Some("boot-a"), 1 << 20)?;
        let before = log.syncs();
        let (writers, each) = (32, 10);
        let outcomes: Vec<(usize, Outcome)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..writers)
                .map(|writer| {
                    let (log, root) = (&log, root.path());
                    scope.spawn(move || -> io::Result<Vec<(usize, Outcome)>> {
                        (0..each)
                            .map(|i| {
                                let own = put(&root.join(format!("own/{writer}/{i}")), b"mine", true)?;
                                log.write_now(own)?;
                                let contested = put(&root.join(format!("contested/{i}")), b"first", true)?;
                                Ok((i, log.write_now(contested)?))
                            })
                            .collect()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().expect("a writer"))
                .collect::<io::Result<Vec<_>>>()
        })?
        .into_iter()
        .flatten()
        .collect();
        for i in 0..each {
            let won = outcomes
                .iter()
                .filter(|(key, outcome)| *key == i && matches!(outcome, Outcome::Written(_)));
            assert_eq!(won.count(), 1, "contested/{i} has one winner");
        }
        assert!(
            outcomes
                .iter()
                .all(|(_, outcome)| matches!(outcome, Outcome::Written(_) | Outcome::Taken))
        );
        for writer in 0..writers {
            assert_eq!(
                std::fs::read_dir(root.path().join(format!("own/{writer}")))?.count(),
                each
            );
        }
        let writes = (writers * each) as u64 + (each as u64);
        assert!(
            log.syncs() - before <= writes,
            "one sync at most for each write that took effect"
        );
        Ok(())
    }

    #[test]
    fn a_reboot_restores_the_last_recorded_state_of_each_key_and_the_same_boot_nothing() -> TestResult {
        let root = tempfile::tempdir()?;
        let (kept, gone, marker) = (
            root.path().join("a/kept"),
            root.path().join("a/gone"),
            root.path().join("m/x"),
        );
        {
            let log = WriteLog::open_on(root.path(), Some("boot-a"), 1 << 20)?;
            log.write_now(put(&kept, b"one", true)?)?;
            log.write_now(put(&gone, b"two", true)?)?;
            log.write_now(put(&kept, b"three", false)?)?;
            log.write_now(Write::Delete { file: gone.clone() })?;
            log.write_now(put(&marker, b"", true)?)?;
        }
        // What a power loss can leave of writes the disk had not yet got.
        std::fs::write(&kept, b"")?;
        std::fs::write(&gone, b"stale")?;
        std::fs::remove_file(&marker)?;
        WriteLog::open_on(root.path(), Some("boot-a"), 1 << 20)?;
        assert_eq!(
            std::fs::read(&kept)?,
            b"",
            "the same boot's page cache is the truth: no replay"
        );
        WriteLog::open_on(root.path(), Some("boot-b"), 1 << 20)?;
        assert_eq!(std::fs::read(&kept)?, b"three");
        assert!(!gone.exists(), "a delete is replayed");
        assert_eq!(std::fs::read(&marker)?, b"", "an empty object is made again");
        assert_eq!(header(root.path())?.generation, 2, "a replay starts a new generation");
        std::fs::write(&kept, b"")?;
        WriteLog::open_on(root.path(), Some("boot-c"), 1 << 20)?;
        assert_eq!(
            std::fs::read(&kept)?,
            b"",
            "records of an older generation are done with"
        );
        Ok(())
    }

    #[test]
    fn a_replay_stops_at_the_first_damaged_record() -> TestResult {
        let root = tempfile::tempdir()?;
        let (first, second) = (root.path().join("first"), root.path().join("second"));
        {
            let log = WriteLog::open_on(root.path(), Some("boot-a"), 1 << 20)?;
            log.write_now(put(&first, b"1", true)?)?;
            log.write_now(put(&second, b"2", true)?)?;
        }
        let log_file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(root.path().join(LOG_NAME))?;
        let end = end_of_records(&log_file, HEADER_BYTES, header(root.path())?.generation)?;
        log_file.write_all_at(b"\xff", end - 1)?;
        std::fs::remove_file(&first)?;
        std::fs::remove_file(&second)?;
        WriteLog::open_on(root.path(), Some("boot-b"), 1 << 20)?;
        assert_eq!(std::fs::read(&first)?, b"1");
        assert!(!second.exists(), "a torn last record is a write never acknowledged");
        Ok(())
    }

    #[test]
    fn logs_of_one_root_take_turns_and_refuse_each_others_keys() -> TestResult {
        let root = tempfile::tempdir()?;
        let one = WriteLog::open_on(root.path(), Some("boot-a"), 1 << 20)?;
        let other = WriteLog::open_on(root.path(), Some("boot-a"), 1 << 20)?;
        let file = root.path().join("runs/r/owners/1");
        assert!(matches!(
            one.write_now(put(&file, b"host-1", true)?)?,
            Outcome::Written(_)
        ));
        assert_eq!(other.write_now(put(&file, b"host-2", true)?)?, Outcome::Taken);
        assert_eq!(other.write_now(Write::Delete { file: file.clone() })?, Outcome::Deleted);
        assert!(matches!(
            one.write_now(put(&file, b"host-1 again", true)?)?,
            Outcome::Written(_)
        ));
        drop((one, other));
        std::fs::remove_file(&file)?;
        WriteLog::open_on(root.path(), Some("boot-b"), 1 << 20)?;
        assert_eq!(std::fs::read(&file)?, b"host-1 again", "one order for both writers");
        Ok(())
    }

    #[test]
    fn a_full_log_checkpoints_and_starts_again_from_its_header() -> TestResult {
        let root = tempfile::tempdir()?;
        let log = WriteLog::open_on(root.path(), Some("boot-a"), 4096)?;
        for i in 0..64 {
            log.write_now(put(&root.path().join(format!("k/{i}")), &[7; 200], true)?)?;
        }
        let header = header(root.path())?;
        assert!(header.generation > 1, "{header:?}");
        let log_file = File::open(root.path().join(LOG_NAME))?;
        let end = end_of_records(&log_file, HEADER_BYTES, header.generation)?;
        assert!(end <= HEADER_BYTES + 4096 + 256, "records end at {end}");
        assert!(std::fs::metadata(root.path().join(LOG_NAME))?.len() <= HEADER_BYTES + 4096 + 256);
        Ok(())
    }

    #[test]
    fn a_garbage_frame_claiming_a_huge_length_ends_the_records_and_the_log_goes_on() -> TestResult {
        let root = tempfile::tempdir()?;
        let log = WriteLog::open_on(root.path(), Some("boot-a"), 1 << 20)?;
        let (kept, later) = (root.path().join("kept"), root.path().join("later"));
        log.write_now(put(&kept, b"before", false)?)?;
        drop(log);
        let generation = header(root.path())?.generation;
        let log_file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(root.path().join(LOG_NAME))?;
        let end = end_of_records(&log_file, HEADER_BYTES, generation)?;
        log_file.write_all_at(&[0xff; 64], end)?;
        assert_eq!(end_of_records(&log_file, HEADER_BYTES, generation)?, end);
        std::fs::write(&kept, b"torn")?;
        let log = WriteLog::open_on(root.path(), Some("boot-b"), 1 << 20)?;
        assert_eq!(
            std::fs::read(&kept)?,
            b"before",
            "the records before the garbage are replayed"
        );
        log.write_now(put(&later, b"after", false)?)?;
        drop(log);
        std::fs::remove_file(&later)?;
        WriteLog::open_on(root.path(), Some("boot-c"), 1 << 20)?;
        assert_eq!(std::fs::read(&later)?, b"after", "the log goes on past a replay");
        Ok(())
    }

    #[test]
    fn a_damaged_header_is_refused_with_what_to_do() -> TestResult {
        let root = tempfile::tempdir()?;
        drop(WriteLog::open_on(root.path(), Some("boot-a"), 4096)?);
        OpenOptions::new()
            .write(true)
            .open(root.path().join(LOG_NAME))?
            .write_all_at(b"XX", 0)?;
        let refused = WriteLog::open_on(root.path(), Some("boot-a"), 4096).expect_err("damaged");
        assert!(
            refused.to_string().contains("damaged header") && refused.to_string().contains("move it aside"),
            "{refused}"
        );
        Ok(())
    }
}
