//! A run's stored log: the lines each execution kept (`guest_log::RunLog`),
//! written as one batch when the execution ends, and read back a page at a
//! time.
//!
//! ```text
//! runs/{run}/logs/{first-at:016}-{id}    a batch of lines (create-only)
//! ```
//!
//! Invariants: an execution writes at most one batch, plus one for each
//! step it left running that logged after it ended; never one write per
//! line, and nothing when it logged nothing. A batch is never rewritten, and
//! goes with its run (retention deletes everything under `runs/{run}/`).
//! Lines not yet stored are lost with the host that kept them, as the
//! `tracing` events they also were.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::RunError;
use crate::guest_log::{LogLine, RunLog};
use crate::journal::{JournalError, RunRecords, decode, encode};
use crate::store::{RunId, Storage, TenantId};

/// The most lines one page holds.
pub const MAX_LOG_PAGE: usize = 1000;
/// A batch's name: the time of its first line, then a fresh id.
const BATCH_TIME_DIGITS: usize = 16;
const BATCH_ID_DIGITS: usize = 32;
/// A line's index in its batch has at most this many digits.
const LINE_DIGITS: usize = 6;

/// What a batch object holds.
#[derive(Serialize, Deserialize)]
struct LogBatch {
    lines: Vec<LogLine>,
}

/// Stores the lines `log` kept since it was last stored, as one batch of
/// `records`' run. A failure is a warning: the lines are lost, the run
/// goes on.
pub(super) async fn store(records: &RunRecords, log: &RunLog) {
    let lines = log.take();
    let Some(first) = lines.first() else { return };
    let batch = format!("{:0BATCH_TIME_DIGITS$}-{}", first.at_ms, uuid::Uuid::now_v7().simple());
    let count = lines.len();
    let stored = async {
        let key = records.incarnation_keys().await?.log_batch(&batch);
        let created = records
            .store()
            .create(&key, Bytes::from(encode(&LogBatch { lines })))
            .await;
        created.map_err(JournalError::from)
    };
    if let Err(e) = stored.await {
        tracing::warn!(run = %records.run_id(), lines = count, "cannot store the run's log lines, which are lost: {e}");
    }
}

/// Where a page of log lines goes on: after line `line` of batch `batch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogCursor {
    batch: String,
    line: usize,
}

impl fmt::Display for LogCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.batch, self.line)
    }
}

impl FromStr for LogCursor {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let invalid = || format!("`{text}` is not a log cursor: pass a line's `cursor` or the page's `next_cursor`");
        let (batch, line) = text.rsplit_once('.').ok_or_else(invalid)?;
        let (time, id) = batch.split_once('-').ok_or_else(invalid)?;
        let digits = |part: &str, length: std::ops::RangeInclusive<usize>| {
            length.contains(&part.len()) && part.bytes().all(|b| b.is_ascii_digit())
        };
        let hex_id = id.len() == BATCH_ID_DIGITS && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !digits(time, BATCH_TIME_DIGITS..=BATCH_TIME_DIGITS) || !hex_id || !digits(line, 1..=LINE_DIGITS) {
            return Err(invalid());
        }
        Ok(Self {
            batch: batch.to_owned(),
            line: line.parse().map_err(|_| invalid())?,
        })
    }
}

impl LogCursor {
    /// The pattern every cursor matches, for the API's document.
    pub fn pattern() -> String {
        format!("^[0-9]{{{BATCH_TIME_DIGITS}}}-[0-9a-f]{{{BATCH_ID_DIGITS}}}\\.[0-9]{{1,{LINE_DIGITS}}}$")
    }
}

/// A line of a page, with the cursor that goes on after it.
#[derive(Debug, Clone, PartialEq)]
pub struct PagedLine {
    /// The line, as stored.
    pub line: LogLine,
    /// Where a page after this line starts: pass it as `after`.
    pub cursor: LogCursor,
}

/// A page of a run's log.
#[derive(Debug, Default)]
pub struct LogPage {
    /// The page's lines, in order; at most the limit asked for.
    pub lines: Vec<PagedLine>,
    /// Where the next page starts; `None` once every line stored now was
    /// shown (a run that goes on may log more: ask again after the last
    /// line's cursor).
    pub next: Option<LogCursor>,
}

/// The runs' stored logs, read a page at a time (see the module doc);
/// [`Runtime::logs`](super::Runtime::logs) gives them.
#[derive(Clone)]
pub struct Logs {
    storage: Storage,
}

impl Logs {
    pub(super) fn new(storage: Storage) -> Self {
        Self { storage }
    }

    /// Up to `limit` (1 to [`MAX_LOG_PAGE`]) of `run`'s log lines, after
    /// `after`: batch by batch in the order of their first lines, each
    /// batch's lines in the order they were written.
    pub async fn page(
        &self,
        tenant: &TenantId,
        run: &RunId,
        after: Option<&LogCursor>,
        limit: usize,
    ) -> Result<LogPage, RunError> {
        let records = RunRecords::new(self.storage.tenant(tenant), run.clone());
        if records.run().await?.is_none() {
            return Err(RunError::UnknownRun { run: run.clone() });
        }
        let keys = records.incarnation_keys().await?;
        let store = records.store();
        let batches = match after {
            Some(cursor) => {
                let from = keys.log_batch(&cursor.batch);
                let mut later = store.list_after(&keys.logs(), &from).await?;
                later.insert(0, from);
                later
            }
            None => store.list(&keys.logs()).await?,
        };
        let limit = limit.clamp(1, MAX_LOG_PAGE);
        let mut page = LogPage::default();
        for key in batches {
            let Some(name) = key.filename().map(str::to_owned) else {
                continue;
            };
            let Some(bytes) = store.get(&key).await? else { continue };
            let batch: LogBatch = match decode(&bytes) {
                Ok(batch) => batch,
                Err(reason) => {
                    tracing::warn!(%run, %key, "passing over a corrupt batch of the run's log: {reason}");
                    continue;
                }
            };
            let skip = after
                .filter(|cursor| cursor.batch == name)
                .map_or(0, |cursor| cursor.line + 1);
            for (index, line) in batch.lines.into_iter().enumerate().skip(skip) {
                if page.lines.len() == limit {
                    page.next = page.lines.last().map(|last| last.cursor.clone());
                    return Ok(page);
                }
                let cursor = LogCursor {
                    batch: name.clone(),
                    line: index,
                };
                page.lines.push(PagedLine { line, cursor });
            }
        }
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::CodeCache;
    use crate::config::HostConfig;
    use crate::contract::bindings::LogLevel;
    use crate::guest_log::LogWriter;
    use crate::journal::RunRecord;
    use crate::runtime::Runtime;
    use crate::store::Storage;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn a_cursor_is_a_batch_and_a_line() {
        let text = format!("{:016}-{}.12", 1_700_000_000_000u64, "0".repeat(32));
        let cursor: LogCursor = text.parse().expect("a valid cursor");
        assert_eq!(cursor.to_string(), text);
        assert_eq!(cursor.line, 12);
        let pattern = LogCursor::pattern();
        assert!(pattern.contains("{16}") && pattern.contains("{32}"), "{pattern}");
        for refused in [
            "",
            ".1",
            "1-2.3",
            &format!("{:016}-{}.1", 1, "A".repeat(32)),
            &format!("{:016}-{}.1234567", 1, "0".repeat(32)),
            &format!("{:016}-{}.", 1, "0".repeat(32)),
            &format!("{:017}-{}.1", 1, "0".repeat(32)),
            &format!("{:016}-{}.-1", 1, "0".repeat(32)),
        ] {
            assert!(refused.parse::<LogCursor>().is_err(), "{refused}");
        }
    }

    /// A runtime whose run `r` has stored `batches` batches of `per_batch`
    /// lines each.
    async fn logged(batches: usize, per_batch: usize) -> Result<(Runtime, TenantId, RunId), RunError> {
        let runtime = Runtime::new(HostConfig::new(), Storage::in_memory(), CodeCache::disabled())?;
        let tenant = TenantId::default_tenant();
        let run = RunId::new("r").expect("valid");
        let records = runtime.runs().records(&tenant, &run);
        records.create_run(&RunRecord::example("r", 1)).await?;
        for batch in 0..batches {
            let log = std::sync::Arc::new(RunLog::new(1 << 20));
            let writer = LogWriter::step(log.clone(), batch as u64, "s", 1);
            for line in 0..per_batch {
                writer.guest(LogLevel::Info, &format!("{batch}/{line}"));
            }
            store(&records, &log).await;
            // Batch names start with the first line's millisecond.
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        Ok((runtime, tenant, run))
    }

    fn messages(page: &LogPage) -> Vec<&str> {
        page.lines.iter().map(|l| l.line.message.as_str()).collect()
    }

    #[tokio::test]
    async fn pages_go_through_every_batch_in_order_without_repeats() -> TestResult {
        let (runtime, tenant, run) = logged(3, 4).await?;
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = runtime.logs().page(&tenant, &run, after.as_ref(), 5).await?;
            assert!(page.lines.len() <= 5);
            seen.extend(messages(&page).into_iter().map(str::to_owned));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        let expected: Vec<String> = (0..3).flat_map(|b| (0..4).map(move |l| format!("{b}/{l}"))).collect();
        assert_eq!(seen, expected);
        Ok(())
    }

    #[tokio::test]
    async fn a_page_at_the_limits() -> TestResult {
        let (runtime, tenant, run) = logged(1, 3).await?;
        let all = runtime.logs().page(&tenant, &run, None, 3).await?;
        assert_eq!(
            (all.lines.len(), all.next.is_none()),
            (3, true),
            "exactly full is the end"
        );
        let one = runtime.logs().page(&tenant, &run, None, 0).await?;
        assert_eq!(messages(&one), ["0/0"], "a limit of 0 is 1");
        let (runtime_of_many, _, _) = logged(1, MAX_LOG_PAGE + 1).await?;
        let most = runtime_of_many.logs().page(&tenant, &run, None, usize::MAX).await?;
        assert_eq!(
            (most.lines.len(), most.next.is_some()),
            (MAX_LOG_PAGE, true),
            "a limit past the most is the most"
        );
        let last = &all.lines[2].cursor;
        let after_last = runtime.logs().page(&tenant, &run, Some(last), 10).await?;
        assert!(after_last.lines.is_empty() && after_last.next.is_none());
        let nowhere: LogCursor = format!("{}-{}.0", "9".repeat(16), "f".repeat(32)).parse()?;
        assert!(
            runtime
                .logs()
                .page(&tenant, &run, Some(&nowhere), 10)
                .await?
                .lines
                .is_empty()
        );
        let unknown = RunId::new("other").expect("valid");
        assert!(matches!(
            runtime.logs().page(&tenant, &unknown, None, 10).await,
            Err(RunError::UnknownRun { .. })
        ));
        let stranger = TenantId::new("stranger")?;
        assert!(
            matches!(
                runtime.logs().page(&stranger, &run, None, 10).await,
                Err(RunError::UnknownRun { .. })
            ),
            "another tenant's run is no run"
        );
        Ok(())
    }

    #[tokio::test]
    async fn nothing_logged_writes_nothing() -> TestResult {
        let (runtime, tenant, run) = logged(0, 0).await?;
        let records = runtime.runs().records(&tenant, &run);
        store(&records, &RunLog::new(100)).await;
        assert!(
            records
                .store()
                .list(&records.incarnation_keys().await?.logs())
                .await?
                .is_empty()
        );
        Ok(())
    }
}
