//! Where guests' log lines go: the host's `tracing` output, inside the span
//! of the run and step that wrote them, cut to a bounded length.

use crate::contract::bindings::LogLevel;

/// Longest guest log line kept, in bytes; the rest is cut.
const MAX_LINE: usize = 4096;

/// Emits one guest log line at its level.
pub fn emit(level: LogLevel, message: &str) {
    let line = truncated(message);
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
    fn long_lines_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_LINE);
        let cut = truncated(&long);
        assert!(cut.len() <= MAX_LINE && cut.len() >= MAX_LINE - 1);
        assert_eq!(truncated("short"), "short");
    }
}
