//! Where guests' log lines go: the host's `tracing` output, inside the span
//! of the run and step that wrote them, cut to a bounded length, and within
//! the run's allowance, so a guest cannot flood the host's logs. Lines come
//! from `log` calls and from a guest's WASI stdout and stderr.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use crate::contract::bindings::LogLevel;

/// What one execution of a run may still log, shared by its workflow and
/// its steps.
#[derive(Debug)]
pub struct LogBudget {
    left: AtomicUsize,
    exhausted: AtomicBool,
}

impl LogBudget {
    pub fn new(bytes: usize) -> Self {
        Self {
            left: AtomicUsize::new(bytes),
            exhausted: AtomicBool::new(false),
        }
    }

    /// Emits `message` if the budget allows it; the first line over budget
    /// is replaced by one warning, and every later line is dropped, even one
    /// short enough to fit what is left (the log says lines were dropped, so
    /// none may follow as if nothing had been).
    pub fn emit(&self, level: LogLevel, message: &str) {
        if self.exhausted.load(Ordering::Relaxed) {
            return;
        }
        let line = truncated(message);
        let spent = self.left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
            left.checked_sub(line.len())
        });
        match spent {
            Ok(_) => emit(level, line),
            Err(_) if !self.exhausted.swap(true, Ordering::Relaxed) => {
                tracing::warn!(target: TARGET, "the run's log allowance is used up; further guest log lines are dropped");
            }
            Err(_) => {}
        }
    }
}

/// The target guests' log lines are logged under.
pub const TARGET: &str = "stepstone::guest";

/// Longest guest log line kept, in bytes; the rest is cut.
const MAX_LINE: usize = 4096;

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
/// at `level`, within the run's allowance. While `muted` is set (a workflow
/// re-executing calls it already made) lines are dropped, since they were
/// logged the first time.
#[derive(Clone)]
pub struct GuestOutput {
    lines: Arc<Mutex<PendingLine>>,
}

struct PendingLine {
    budget: Arc<LogBudget>,
    level: LogLevel,
    muted: Arc<AtomicBool>,
    text: Vec<u8>,
}

impl GuestOutput {
    pub fn new(budget: Arc<LogBudget>, level: LogLevel, muted: Arc<AtomicBool>) -> Self {
        let line = PendingLine {
            budget,
            level,
            muted,
            text: Vec::new(),
        };
        Self {
            lines: Arc::new(Mutex::new(line)),
        }
    }

    fn write(&self, bytes: &[u8]) {
        crate::shared_map::lock(&self.lines).write(bytes);
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
        if !self.muted.load(Ordering::Relaxed) {
            self.budget.emit(self.level, &String::from_utf8_lossy(&self.text));
        }
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

    #[test]
    fn output_becomes_lines_within_the_budget_and_nothing_while_muted() {
        let budget = Arc::new(LogBudget::new(100));
        let muted = Arc::new(AtomicBool::new(false));
        let output = GuestOutput::new(budget.clone(), LogLevel::Info, muted.clone());
        output.write(b"one\ntw");
        output.write(b"o\n");
        assert_eq!(budget.left.load(Ordering::Relaxed), 100 - 6, "two lines of three bytes");
        muted.store(true, Ordering::Relaxed);
        output.write(b"replayed\n");
        assert_eq!(budget.left.load(Ordering::Relaxed), 94);
        muted.store(false, Ordering::Relaxed);
        output.write(&vec![b'x'; 2 * MAX_LINE]);
        drop(output);
        assert!(
            budget.exhausted.load(Ordering::Relaxed),
            "the cut line is still over the budget"
        );
    }

    #[test]
    fn a_budget_stops_lines_once_spent() {
        let budget = LogBudget::new(10);
        budget.emit(LogLevel::Info, "12345");
        budget.emit(LogLevel::Info, "12345");
        assert_eq!(budget.left.load(Ordering::Relaxed), 0);
        budget.emit(LogLevel::Info, "x");
        assert!(budget.exhausted.load(Ordering::Relaxed));
    }

    #[test]
    fn once_a_line_is_dropped_shorter_ones_are_dropped_too() {
        let budget = LogBudget::new(10);
        budget.emit(LogLevel::Info, "123456789012");
        assert!(budget.exhausted.load(Ordering::Relaxed));
        budget.emit(LogLevel::Info, "12345");
        assert_eq!(budget.left.load(Ordering::Relaxed), 10, "nothing more was spent");
    }

    #[test]
    fn long_lines_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_LINE);
        let cut = truncated(&long);
        assert!(cut.len() <= MAX_LINE && cut.len() >= MAX_LINE - 1);
        assert_eq!(truncated("short"), "short");
    }
}
