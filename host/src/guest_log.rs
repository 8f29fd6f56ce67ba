//! Where guests' log lines go: the host's `tracing` output, inside the span
//! of the run and step that wrote them, cut to a bounded length, and within
//! the run's allowance, so a guest cannot flood the host's logs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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
                tracing::warn!(target: "stepstone::guest", "the run's log allowance is used up; further guest log lines are dropped");
            }
            Err(_) => {}
        }
    }
}

/// Longest guest log line kept, in bytes; the rest is cut.
const MAX_LINE: usize = 4096;

/// Emits one guest log line at its level.
fn emit(level: LogLevel, line: &str) {
    match level {
        LogLevel::Trace => tracing::trace!(target: "stepstone::guest", "{line}"),
        LogLevel::Debug => tracing::debug!(target: "stepstone::guest", "{line}"),
        LogLevel::Info => tracing::info!(target: "stepstone::guest", "{line}"),
        LogLevel::Warn => tracing::warn!(target: "stepstone::guest", "{line}"),
        LogLevel::Error => tracing::error!(target: "stepstone::guest", "{line}"),
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

#[cfg(test)]
mod tests {
    use super::*;

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
