//! Streams out of a run: values its workflow appends to named streams
//! (`append-to-stream`), journaled as durable calls, and read by clients
//! from any offset, live, through any host.
//!
//! A stream is its run's journal entries of kind `stream-append` under its
//! name, in seq order; nothing else records it. So a value is stored once,
//! by its call's create-only entry, a replay appends nothing twice, and a
//! host that does not drive the run reads the same stream, across a
//! failover, as the one that does. A value's offset is its place among its
//! stream's values, from 0. A stream ends when its run does.
//!
//! Invariants: a reader sends each value once, in offset order. It reads
//! the journal past the last seq it has read, and a value's entry is
//! written before its workflow makes its next call, so no value is written
//! at a seq a reader has passed; a restarted run's kept calls, which its
//! driver copies in any order, are read only as far as they are copied
//! without a gap. A run appends at most `RunLimits::max_stream_values`
//! values and `max_stream_bytes` bytes, every stream together; past either
//! it fails `host-limit`, naming the limit. A read lasts at most
//! `WaitPolicy::stream_read_span`, and a tenant has at most
//! [`MAX_STREAM_READERS`] open on a host at once.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use serde::Serialize;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::interruption::Interruption;
use super::{RunError, RunStatus, Runs};
use crate::config::RunLimits;
use crate::journal::{CallKind, Entry, Recorded, RunRecords};
use crate::shared_map::lock;
use crate::store::{RunId, StreamName, TenantId};

/// The bells of the runs whose streams are read on this host, rung by
/// each value appended here.
pub(super) type StreamBells = super::bells::Bells<(TenantId, RunId)>;

/// The most reads of streams one tenant may have open on one host at
/// once: each holds a connection and looks at the store every
/// `stream_poll_interval`, so a flood of them is refused (429), not served.
pub const MAX_STREAM_READERS: usize = 64;

/// The reads of streams open on this host, by tenant.
#[derive(Default)]
pub(super) struct StreamReads(Arc<Mutex<HashMap<TenantId, usize>>>);

impl StreamReads {
    /// A place for one more read of `tenant`'s, held until dropped; refused
    /// past [`MAX_STREAM_READERS`].
    fn open(&self, tenant: &TenantId) -> Result<OpenRead, RunError> {
        let mut open = lock(&self.0);
        let count = open.entry(tenant.clone()).or_default();
        if *count >= MAX_STREAM_READERS {
            return Err(RunError::StreamReaders {
                limit: MAX_STREAM_READERS,
            });
        }
        *count += 1;
        Ok(OpenRead {
            reads: self.0.clone(),
            tenant: tenant.clone(),
        })
    }
}

/// One read's place among its tenant's, given back when dropped.
struct OpenRead {
    reads: Arc<Mutex<HashMap<TenantId, usize>>>,
    tenant: TenantId,
}

impl Drop for OpenRead {
    fn drop(&mut self) {
        let mut open = lock(&self.reads);
        if let Some(count) = open.get_mut(&self.tenant) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.tenant);
            }
        }
    }
}

/// What one execution of a run has appended to its streams, replayed
/// values included: the whole run's, since a replay passes them all.
#[derive(Debug, Default)]
pub(super) struct StreamTally {
    values: u64,
    bytes: u64,
}

impl StreamTally {
    /// Checks that one more value of `size` bytes keeps the run within
    /// its quotas.
    pub(super) fn admit(&self, stream: &StreamName, size: usize, limits: &RunLimits) -> Result<(), Interruption> {
        let over = |what: String| {
            Interruption::HostLimit(format!(
                "appending to stream `{stream}` would take the run past the host's quota of {what}: \
                 stream less, or raise the quota"
            ))
        };
        if self.values >= limits.max_stream_values {
            return Err(over(format!("{} values", limits.max_stream_values)));
        }
        if self.bytes.saturating_add(size as u64) > limits.max_stream_bytes {
            return Err(over(format!("{} bytes of streamed values", limits.max_stream_bytes)));
        }
        Ok(())
    }

    pub(super) fn count(&mut self, size: usize) {
        self.values += 1;
        self.bytes = self.bytes.saturating_add(size as u64);
    }
}

/// One value of a stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamValue {
    /// Its place among the stream's values, from 0.
    pub offset: u64,
    /// The value, as JSON text.
    pub value: String,
}

/// What a stream's reader is sent: its values, then its run's end.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// A value of the stream, at or past the offset the read began at.
    Value(StreamValue),
    /// The run has ended: no value follows.
    End(Box<RunStatus>),
}

impl Runs {
    /// The values of `run`'s stream `name` from offset `from` on, those
    /// appended already first, then (if `follow`) each as it is appended,
    /// then the run's end if it has ended. A read that follows lasts until
    /// the run's end or `WaitPolicy::stream_read_span`, whichever comes
    /// first: read on from the offset after the last value.
    pub async fn read_stream(
        &self,
        tenant: &TenantId,
        run: &RunId,
        name: StreamName,
        from: u64,
        follow: bool,
    ) -> Result<impl Stream<Item = Result<StreamEvent, RunError>> + use<>, RunError> {
        let record = self.run_record(tenant, run).await?;
        let open = self.host.stream_reads.open(tenant)?;
        let wait = self.host.config.wait;
        let span = if follow {
            wait.stream_read_span
        } else {
            std::time::Duration::ZERO
        };
        let reader = StreamReader {
            _open: open,
            runs: self.clone(),
            records: self.records(tenant, run),
            bell: self.host.stream_bells.of((tenant.clone(), run.clone())),
            name,
            from,
            kept_calls: record.kept_calls(),
            appended: 0,
            read_through: None,
            run_ended: false,
            end_sent: false,
            until: Instant::now() + span,
        };
        let batches = futures::stream::unfold(Some(reader), |reader| async move {
            let mut reader = reader?;
            match reader.next_batch().await {
                Ok(Some(batch)) => Some((Ok(batch), Some(reader))),
                Ok(None) => None,
                Err(e) => Some((Err(e), None)),
            }
        });
        Ok(batches.flat_map(|batch| match batch {
            Ok(events) => futures::stream::iter(events.into_iter().map(Ok)).left_stream(),
            Err(e) => futures::stream::once(std::future::ready(Err(e))).right_stream(),
        }))
    }
}

/// A read of one stream: where it stands in the run's journal.
struct StreamReader {
    _open: OpenRead,
    runs: Runs,
    records: RunRecords,
    bell: Arc<Notify>,
    name: StreamName,
    /// The first offset to send.
    from: u64,
    /// The run's calls kept from the run it was restarted from (0 for
    /// most): none past a missing one is read.
    kept_calls: u64,
    /// The stream's values read so far, sent or not.
    appended: u64,
    /// The last seq read; `None` before the first read.
    read_through: Option<u64>,
    /// Whether the run's end was seen (before the last read, which then
    /// read every value it appended).
    run_ended: bool,
    /// Whether the end was sent: nothing follows it.
    end_sent: bool,
    until: Instant,
}

impl StreamReader {
    /// The next values, or the run's end; `None` once the end was sent or
    /// the read's time is up.
    async fn next_batch(&mut self) -> Result<Option<Vec<StreamEvent>>, RunError> {
        let poll = self.runs.host.config.wait.stream_poll_interval;
        if self.end_sent {
            return Ok(None);
        }
        loop {
            // Listening before reading: a value appended meanwhile rings.
            let bell = self.bell.clone();
            let mut rung = pin!(bell.notified());
            rung.as_mut().enable();
            let values = self.read_on().await?;
            if !values.is_empty() {
                return Ok(Some(values));
            }
            if self.run_ended {
                let status = self
                    .runs
                    .generation_status(self.records.store().tenant(), self.records.run_id());
                let end = StreamEvent::End(Box::new(status.await?));
                self.end_sent = true;
                return Ok(Some(vec![end]));
            }
            if self.records.outcome().await?.is_some() {
                self.run_ended = true;
                continue;
            }
            let left = self.until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            tokio::select! {
                () = rung => {}
                () = tokio::time::sleep(poll.min(left)) => {}
            }
        }
    }

    /// The stream's values in the entries past those read, from offset
    /// `from` on.
    async fn read_on(&mut self) -> Result<Vec<StreamEvent>, RunError> {
        let entries = match self.read_through {
            None => self.records.entries().await?,
            Some(seq) => self.records.entries_after(seq).await?,
        };
        let mut next = self.read_through.map_or(0, |seq| seq + 1);
        let mut values = Vec::new();
        for entry in entries {
            if next < self.kept_calls && entry.seq != next {
                break;
            }
            next = entry.seq + 1;
            self.read_through = Some(entry.seq);
            if let Some(value) = self.value_of(entry) {
                values.push(StreamEvent::Value(value));
            }
        }
        Ok(values)
    }

    /// The value `entry` appended to this stream, if it did and its offset
    /// is to be sent; counts it either way.
    fn value_of(&mut self, entry: Entry) -> Option<StreamValue> {
        let Recorded::Appended { value } = entry.recorded else {
            return None;
        };
        if entry.call.kind != CallKind::StreamAppend || entry.call.name != self.name.as_str() {
            return None;
        }
        let offset = self.appended;
        self.appended += 1;
        (offset >= self.from).then_some(StreamValue { offset, value })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(tally: &StreamTally, size: usize, limits: &RunLimits) -> String {
        match tally.admit(&StreamName::new("tokens").unwrap(), size, limits) {
            Err(Interruption::HostLimit(message)) => message,
            other => panic!("a value of {size} bytes was not refused: {other:?}"),
        }
    }

    #[test]
    fn the_quotas_admit_up_to_their_limit_and_refuse_past_it() {
        let limits = RunLimits {
            max_stream_values: 3,
            max_stream_bytes: 10,
            ..RunLimits::default()
        };
        let mut tally = StreamTally::default();
        assert!(
            tally.admit(&StreamName::new("s").unwrap(), 10, &limits).is_ok(),
            "10 bytes fit in 10"
        );
        let message = refusal(&tally, 11, &limits);
        assert!(
            message.contains("quota of 10 bytes") && message.contains("`tokens`"),
            "{message}"
        );
        for _ in 0..3 {
            tally.count(1);
        }
        let message = refusal(&tally, 1, &limits);
        assert!(message.contains("quota of 3 values"), "{message}");
        let huge = StreamTally {
            values: 0,
            bytes: u64::MAX,
        };
        assert!(
            refusal(&huge, usize::MAX, &limits).contains("bytes"),
            "no overflow at the extremes"
        );
    }
}
