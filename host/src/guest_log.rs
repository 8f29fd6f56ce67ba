//! A run's log lines: what guests write (`log` calls, WASI stdout and
//! stderr) and what the host says about the run (failed attempts, refused
//! requests, the allowance used up). Each line is emitted as a `tracing`
//! event in the span of the run and step that wrote it, and kept, with who
//! wrote it and when, for the run's stored log (`runtime::logs`). Guest
//! lines are cut to a bounded length and held to the execution's allowance,
//! so a guest can flood neither the host's logs nor its memory; the host's
//! text log escapes their control characters (see `telemetry`), so a line
//! cannot forge another.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use crate::clock::now_ms;
use crate::contract::bindings::LogLevel;
use crate::shared_map::lock;

/// The target guests' log lines are logged under.
pub const TARGET: &str = "stepstone::guest";
/// Longest guest log line kept, in bytes; the rest is cut.
const MAX_LINE: usize = 4096;
/// What keeping a line costs beyond its text (its origin, time, level):
/// charged to the allowance too, so a flood of empty lines is bounded in
/// memory as a flood of long ones is.
const LINE_OVERHEAD: usize = 64;
/// The most bytes of host lines one execution keeps: the host's own lines
/// have an allowance apart from the guests', so a guest that used its own
/// up does not hide why its attempts failed.
const HOST_ALLOWANCE: usize = 64 << 10;

/// A line's level, as the guest or the host gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// The finest detail (`trace`).
    Trace,
    /// Detail for debugging (`debug`).
    Debug,
    /// Ordinary progress (`info`): a guest's stdout is logged at it.
    Info,
    /// Something amiss that did not stop the writer (`warn`): a guest's stderr,
    /// and the host's refusals, are logged at it.
    Warn,
    /// A failure (`error`).
    Error,
}

impl From<LogLevel> for Level {
    fn from(level: LogLevel) -> Self {
        match level {
            LogLevel::Trace => Self::Trace,
            LogLevel::Debug => Self::Debug,
            LogLevel::Info => Self::Info,
            LogLevel::Warn => Self::Warn,
            LogLevel::Error => Self::Error,
        }
    }
}

impl Level {
    /// The level's lowercase name, as a line stores it (`trace` to `error`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Trace => "trace",
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        }
    }
}

/// Who wrote a line: the run's guest code, or the host about the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The run's guest code: its `log` calls, stdout and stderr.
    Guest,
    /// The host, about the run: failed attempts, refused requests, the
    /// allowance used up.
    Host,
}

/// One line of a run's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// Who wrote the line.
    pub source: Source,
    /// The level its writer gave it.
    pub level: Level,
    /// The journal seq it was written at: a step's call, or, in the
    /// workflow, the seq its next durable call takes.
    pub seq: Option<u64>,
    /// The step (as the workflow called it) and attempt that wrote it;
    /// absent for the workflow's lines.
    pub step: Option<String>,
    /// The attempt, from 1, of the step that wrote it; absent for the
    /// workflow's lines.
    pub attempt: Option<u32>,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The line's text; a guest's is cut to 4096 bytes.
    pub message: String,
}

/// What one execution of a run logs, shared by its workflow and its steps:
/// the allowance left, and the lines kept until they are stored.
#[derive(Debug)]
pub struct RunLog {
    left: AtomicUsize,
    host_left: AtomicUsize,
    exhausted: AtomicBool,
    kept: Mutex<Vec<LogLine>>,
    /// The execution has ended and stored what it kept: a step still
    /// running stores its own later lines when it ends.
    closed: AtomicBool,
}

impl RunLog {
    /// A log allowing `bytes` of guest lines.
    pub fn new(bytes: usize) -> Self {
        Self {
            left: AtomicUsize::new(bytes),
            host_left: AtomicUsize::new(bytes.min(HOST_ALLOWANCE)),
            exhausted: AtomicBool::new(false),
            kept: Mutex::default(),
            closed: AtomicBool::new(false),
        }
    }

    /// The lines kept since the last call, to be stored.
    pub fn take(&self) -> Vec<LogLine> {
        std::mem::take(&mut *lock(&self.kept))
    }

    /// Marks the execution ended: lines kept from now on are stored by
    /// whoever writes them (see [`RunLog::is_closed`]).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
    }

    /// Whether the execution has ended (see [`RunLog::close`]): a step still
    /// running then stores its own later lines when it ends.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Keeps a guest line if the allowance allows it; the first line over
    /// it is replaced by one warning, and every later line is dropped, even
    /// one short enough to fit what is left (the log says lines were
    /// dropped, so none may follow as if nothing had been).
    fn guest(&self, origin: &Origin, level: LogLevel, message: &str) {
        if self.exhausted.load(Ordering::Relaxed) {
            return;
        }
        let line = truncated(message);
        let spent = self.left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
            left.checked_sub(line.len() + LINE_OVERHEAD)
        });
        match spent {
            Ok(_) => {
                emit(level, line);
                self.keep(origin.line(Source::Guest, level.into(), line.to_owned()));
            }
            Err(_) if !self.exhausted.swap(true, Ordering::Relaxed) => {
                let warning = "the run's log allowance is used up; further guest log lines are dropped";
                tracing::warn!(target: TARGET, "{warning}");
                self.host(origin, Level::Warn, warning.to_owned());
            }
            Err(_) => {}
        }
    }

    /// Keeps a host line about the run, within the host's allowance. The
    /// caller has emitted its own `tracing` event.
    fn host(&self, origin: &Origin, level: Level, message: String) {
        let cost = message.len() + LINE_OVERHEAD;
        let spent = (self.host_left).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(cost));
        if spent.is_ok() {
            self.keep(origin.line(Source::Host, level, message));
        }
    }

    fn keep(&self, line: LogLine) {
        lock(&self.kept).push(line);
    }
}

/// Where a workflow stands as it writes: the seq its next durable call
/// takes, and whether it is re-executing calls it made before (whose lines
/// were kept the first time).
#[derive(Debug, Default)]
pub struct WorkflowPlace {
    next_seq: AtomicU64,
    replaying: AtomicBool,
}

impl WorkflowPlace {
    /// Records that the workflow's next durable call takes `next_seq`, and
    /// whether it is re-executing calls it made before (its lines then dropped).
    pub fn set(&self, next_seq: u64, replaying: bool) {
        self.next_seq.store(next_seq, Ordering::Relaxed);
        self.replaying.store(replaying, Ordering::Relaxed);
    }
}

/// Who writes into a run's log.
#[derive(Debug, Clone)]
enum Origin {
    Workflow(Arc<WorkflowPlace>),
    Step {
        seq: u64,
        step: String,
        attempt: u32,
    },
    /// Output no one reads (a component describing itself).
    Nobody,
}

impl Origin {
    /// Whether the writer's lines are dropped now.
    fn muted(&self) -> bool {
        match self {
            Self::Workflow(place) => place.replaying.load(Ordering::Relaxed),
            Self::Step { .. } => false,
            Self::Nobody => true,
        }
    }

    fn line(&self, source: Source, level: Level, message: String) -> LogLine {
        let (seq, step, attempt) = match self {
            Self::Workflow(place) => (Some(place.next_seq.load(Ordering::Relaxed)), None, None),
            Self::Step { seq, step, attempt } => (Some(*seq), Some(step.clone()), Some(*attempt)),
            Self::Nobody => (None, None, None),
        };
        LogLine {
            source,
            level,
            seq,
            step,
            attempt,
            at_ms: now_ms(),
            message,
        }
    }
}

/// A writer's handle on its run's log: its lines say who wrote them.
#[derive(Debug, Clone)]
pub struct LogWriter {
    log: Arc<RunLog>,
    origin: Origin,
}

impl LogWriter {
    /// The workflow's handle, which follows it through its journal.
    pub fn workflow(log: Arc<RunLog>, place: Arc<WorkflowPlace>) -> Self {
        Self {
            log,
            origin: Origin::Workflow(place),
        }
    }

    /// The handle of attempt `attempt` of the step called `step` at `seq`.
    pub fn step(log: Arc<RunLog>, seq: u64, step: &str, attempt: u32) -> Self {
        let step = step.to_owned();
        Self {
            log,
            origin: Origin::Step { seq, step, attempt },
        }
    }

    /// A handle that drops every line.
    pub fn nowhere() -> Self {
        Self {
            log: Arc::new(RunLog::new(0)),
            origin: Origin::Nobody,
        }
    }

    /// Writes a guest line, within the run's allowance.
    pub fn guest(&self, level: LogLevel, message: &str) {
        if !self.origin.muted() {
            self.log.guest(&self.origin, level, message);
        }
    }

    /// Writes a host line about the run (the caller emits its `tracing`
    /// event), within the host's allowance.
    pub fn host(&self, level: Level, message: impl Into<String>) {
        if !self.origin.muted() {
            self.log.host(&self.origin, level, message.into());
        }
    }
}

/// Emits one guest log line at its level.
fn emit(level: LogLevel, line: &str) {
    match level {
        LogLevel::Trace => tracing::trace!(target: TARGET, "{line}"),
        LogLevel::Debug => tracing::debug!(target: TARGET, "{line}"),
        LogLevel::Info => tracing::info!(target: TARGET, "{line}"),
        LogLevel::Warn => tracing::warn!(target: TARGET, "{line}"),
        LogLevel::Error => tracing::error!(target: TARGET, "{line}"),
    }
}

fn truncated(message: &str) -> &str {
    if message.len() <= MAX_LINE {
        return message;
    }
    let mut end = MAX_LINE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

/// A guest's WASI stdout or stderr: each line written becomes a log line
/// at `level`, within the run's allowance (a workflow's lines are dropped
/// while it re-executes calls it made before: they were kept the first
/// time).
#[derive(Clone)]
pub struct GuestOutput {
    lines: Arc<Mutex<PendingLine>>,
}

struct PendingLine {
    writer: LogWriter,
    level: LogLevel,
    text: Vec<u8>,
}

impl GuestOutput {
    /// Output written by `writer` at `level`: each line, at its newline,
    /// becomes a log line.
    pub fn new(writer: LogWriter, level: LogLevel) -> Self {
        let line = PendingLine {
            writer,
            level,
            text: Vec::new(),
        };
        Self {
            lines: Arc::new(Mutex::new(line)),
        }
    }

    fn write(&self, bytes: &[u8]) {
        lock(&self.lines).write(bytes);
    }
}

impl PendingLine {
    fn write(&mut self, mut bytes: &[u8]) {
        while let Some(end) = bytes.iter().position(|b| *b == b'\n') {
            self.push(&bytes[..end]);
            self.emit();
            bytes = &bytes[end + 1..];
        }
        self.push(bytes);
    }

    /// Keeps at most one line's worth: the rest of a longer line is cut.
    fn push(&mut self, bytes: &[u8]) {
        let room = MAX_LINE.saturating_sub(self.text.len());
        self.text.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn emit(&mut self) {
        self.writer.guest(self.level, &String::from_utf8_lossy(&self.text));
        self.text.clear();
    }
}
impl Drop for PendingLine {
    /// A last line without its newline is still logged.
    fn drop(&mut self) {
        if !self.text.is_empty() {
            self.emit();
        }
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        GuestOutput::write(self, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 << 10)
    }
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        bytes: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        GuestOutput::write(&self, bytes);
        std::task::Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest_bytes(log: &RunLog) -> Vec<usize> {
        log.take()
            .iter()
            .filter(|line| line.source == Source::Guest)
            .map(|line| line.message.len())
            .collect()
    }

    #[test]
    fn output_becomes_lines_within_the_allowance_and_nothing_while_replaying() {
        let log = Arc::new(RunLog::new(1000));
        let place = Arc::new(WorkflowPlace::default());
        place.set(3, false);
        let output = GuestOutput::new(LogWriter::workflow(log.clone(), place.clone()), LogLevel::Info);
        output.write(b"one\ntw");
        output.write(b"o\n");
        let kept = log.take();
        let texts: Vec<(&str, Option<u64>)> = kept.iter().map(|l| (l.message.as_str(), l.seq)).collect();
        assert_eq!(texts, [("one", Some(3)), ("two", Some(3))]);
        assert_eq!(log.left.load(Ordering::Relaxed), 1000 - 2 * (3 + LINE_OVERHEAD));
        place.set(1, true);
        output.write(b"replayed\n");
        assert!(log.take().is_empty(), "a replayed line was kept the first time");
        place.set(4, false);
        output.write(&vec![b'x'; 2 * MAX_LINE]);
        drop(output);
        assert!(
            log.exhausted.load(Ordering::Relaxed),
            "the cut line is still over the allowance"
        );
        let warning = log.take();
        assert_eq!(warning.len(), 1);
        assert_eq!(
            (warning[0].source, warning[0].level, warning[0].seq),
            (Source::Host, Level::Warn, Some(4))
        );
    }

    #[test]
    fn an_allowance_stops_lines_once_spent_and_shorter_ones_after() {
        let log = Arc::new(RunLog::new(2 * (5 + LINE_OVERHEAD)));
        let step = LogWriter::step(log.clone(), 7, "charge", 2);
        step.guest(LogLevel::Info, "12345");
        step.guest(LogLevel::Info, "12345");
        assert_eq!(log.left.load(Ordering::Relaxed), 0);
        step.guest(LogLevel::Info, "x");
        step.guest(LogLevel::Info, "");
        let kept = log.take();
        assert_eq!(kept.len(), 3, "two lines and the warning: {kept:?}");
        assert_eq!(
            (kept[0].seq, kept[0].step.as_deref(), kept[0].attempt),
            (Some(7), Some("charge"), Some(2))
        );
        assert_eq!(kept[2].source, Source::Host);
    }

    #[test]
    fn a_flood_of_empty_lines_is_bounded_like_a_flood_of_long_ones() {
        let log = Arc::new(RunLog::new(1 << 16));
        let step = LogWriter::step(log.clone(), 0, "s", 1);
        for _ in 0..100_000 {
            step.guest(LogLevel::Info, "");
        }
        assert_eq!(guest_bytes(&log).len(), (1 << 16) / LINE_OVERHEAD);
    }

    #[test]
    fn host_lines_have_their_own_allowance() {
        let log = Arc::new(RunLog::new(1 << 20));
        let step = LogWriter::step(log.clone(), 0, "s", 1);
        let long = "h".repeat(1000);
        for _ in 0..1000 {
            step.host(Level::Warn, long.clone());
        }
        let kept = log.take();
        assert_eq!(kept.len(), HOST_ALLOWANCE / (1000 + LINE_OVERHEAD));
        step.guest(LogLevel::Info, "still room");
        assert_eq!(guest_bytes(&log), [10], "the guest's allowance is untouched");
    }

    #[test]
    fn nobody_keeps_nothing() {
        let writer = LogWriter::nowhere();
        writer.guest(LogLevel::Error, "lost");
        writer.host(Level::Warn, "lost");
        assert!(writer.log.take().is_empty());
    }

    #[test]
    fn long_lines_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_LINE);
        let cut = truncated(&long);
        assert!(cut.len() <= MAX_LINE && cut.len() >= MAX_LINE - 1);
        assert_eq!(truncated("short"), "short");
    }
}
