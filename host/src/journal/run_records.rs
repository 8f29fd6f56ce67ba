//! Typed access to the stored records of one run.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::records::{AttemptRecord, CancelRecord, Entry, Outcome, RunRecord, SignalRecord, TimerRecord};
use super::{JournalError, decode, encode};
use crate::store::{RunId, SignalId, SignalName, StoreError, StoreKey, TenantStore, keys_of};

/// How many records are read from the store at once.
const READ_AHEAD: usize = 32;

/// The records of one run, in one tenant's store.
#[derive(Clone, Debug)]
pub struct RunRecords {
    store: TenantStore,
    run: RunId,
}

impl RunRecords {
    pub fn new(store: TenantStore, run: RunId) -> Self {
        Self { store, run }
    }

    pub fn run_id(&self) -> &RunId {
        &self.run
    }

    pub fn store(&self) -> &TenantStore {
        &self.store
    }

    async fn read<R: DeserializeOwned>(&self, key: &StoreKey) -> Result<Option<R>, JournalError> {
        let Some(bytes) = self.store.get(key).await? else {
            return Ok(None);
        };
        decode(&bytes).map(Some).map_err(|reason| JournalError::Corrupt {
            key: key.to_string(),
            reason,
        })
    }

    async fn create<R: Serialize>(&self, key: &StoreKey, record: &R) -> Result<(), JournalError> {
        Ok(self.store.create(key, Bytes::from(encode(record))).await?)
    }

    /// How the run was started, or `None` for an unknown run.
    pub async fn run(&self) -> Result<Option<RunRecord>, JournalError> {
        self.read(&keys_of(&self.run).run()).await
    }

    /// Records how the run starts; fails with `AlreadyExists` if it has.
    pub async fn create_run(&self, record: &RunRecord) -> Result<(), JournalError> {
        self.create(&keys_of(&self.run).run(), record).await
    }

    pub async fn outcome(&self) -> Result<Option<Outcome>, JournalError> {
        self.read(&keys_of(&self.run).outcome()).await
    }

    /// Records how the run ended and returns the outcome that stands: if an
    /// outcome was already recorded (a retry after a crash, another host),
    /// that one, never a second.
    pub async fn finish(&self, outcome: &Outcome) -> Result<Outcome, JournalError> {
        match self.create(&keys_of(&self.run).outcome(), outcome).await {
            Ok(()) => Ok(outcome.clone()),
            Err(JournalError::Store(StoreError::AlreadyExists { key })) => self
                .outcome()
                .await?
                .ok_or(JournalError::Store(StoreError::NotFound { key })),
            Err(e) => Err(e),
        }
    }

    /// The request to cancel the run, if one was made.
    pub async fn cancel_request(&self) -> Result<Option<CancelRecord>, JournalError> {
        self.read(&keys_of(&self.run).cancel()).await
    }

    /// Records a request to cancel the run; the first request stands.
    pub async fn request_cancel(&self, request: &CancelRecord) -> Result<(), JournalError> {
        match self.create(&keys_of(&self.run).cancel(), request).await {
            Err(JournalError::Store(StoreError::AlreadyExists { .. })) => Ok(()),
            other => other,
        }
    }

    /// Every journal entry, by seq.
    pub async fn entries(&self) -> Result<BTreeMap<u64, Entry>, JournalError> {
        let keys = self.store.list(&keys_of(&self.run).journal()).await?;
        futures::stream::iter(keys)
            .map(|key| async move {
                let entry: Entry = self
                    .read(&key)
                    .await?
                    .ok_or(StoreError::NotFound { key: key.to_string() })?;
                Ok::<_, JournalError>((entry.seq, entry))
            })
            .buffered(READ_AHEAD)
            .try_collect()
            .await
    }

    /// The seqs the journal holds, from one listing: for questions that do
    /// not need the entries themselves (how many, which are open).
    pub async fn entry_seqs(&self) -> Result<BTreeSet<u64>, JournalError> {
        let keys = self.store.list(&keys_of(&self.run).journal()).await?;
        Ok(keys.iter().filter_map(seq_of).collect())
    }

    /// Appends an entry; fails with `AlreadyExists` if its seq is taken.
    pub async fn append(&self, entry: &Entry) -> Result<(), JournalError> {
        self.create(&keys_of(&self.run).entry(entry.seq), entry).await
    }

    /// The failed attempts of the step at `seq`, oldest first.
    pub async fn attempts(&self, seq: u64) -> Result<Vec<AttemptRecord>, JournalError> {
        let keys = self.store.list(&keys_of(&self.run).attempts(seq)).await?;
        let mut attempts = Vec::with_capacity(keys.len());
        for key in keys {
            attempts.extend(self.read::<AttemptRecord>(&key).await?);
        }
        Ok(attempts)
    }

    pub async fn record_attempt(&self, seq: u64, attempt: &AttemptRecord) -> Result<(), JournalError> {
        self.create(&keys_of(&self.run).attempt(seq, attempt.attempt), attempt)
            .await
    }

    /// The timer of the wait at `seq`: the one recorded when the wait first
    /// began, or a new one ending at `deadline_ms`.
    pub async fn timer(&self, seq: u64, deadline_ms: u64, signal: Option<&str>) -> Result<TimerRecord, JournalError> {
        let key = keys_of(&self.run).timer(seq);
        if let Some(timer) = self.read(&key).await? {
            return Ok(timer);
        }
        let timer = TimerRecord {
            deadline_ms,
            signal: signal.map(str::to_owned),
        };
        match self.create(&key, &timer).await {
            Err(JournalError::Store(StoreError::AlreadyExists { .. })) => Ok(self.read(&key).await?.unwrap_or(timer)),
            other => other.map(|()| timer),
        }
    }

    /// The waits (sleeps and signal waits) ever begun, by seq.
    pub async fn timers(&self) -> Result<Vec<(u64, TimerRecord)>, JournalError> {
        let keys = self.store.list(&keys_of(&self.run).timers()).await?;
        let mut timers = Vec::with_capacity(keys.len());
        for key in keys {
            if let (Some(seq), Some(timer)) = (seq_of(&key), self.read::<TimerRecord>(&key).await?) {
                timers.push((seq, timer));
            }
        }
        Ok(timers)
    }

    /// The seqs of steps with failed attempts, and how many failed.
    pub async fn retries(&self) -> Result<Vec<(u64, usize)>, JournalError> {
        let keys = self.store.list(&keys_of(&self.run).all_attempts()).await?;
        let mut retries: Vec<(u64, usize)> = Vec::new();
        for seq in keys
            .iter()
            .filter_map(|key| key.parts().nth_back(1))
            .filter_map(|p| p.as_ref().parse().ok())
        {
            match retries.last_mut() {
                Some((last, count)) if *last == seq => *count += 1,
                _ => retries.push((seq, 1)),
            }
        }
        Ok(retries)
    }

    /// Signals sent under `name`, oldest first, with their keys.
    pub async fn signals(&self, name: &SignalName) -> Result<Vec<(String, SignalRecord)>, JournalError> {
        let keys = self.store.list(&keys_of(&self.run).signals(name)).await?;
        let mut signals = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(signal) = self.read(&key).await? {
                signals.push((key.to_string(), signal));
            }
        }
        Ok(signals)
    }

    /// How many signals were sent to the run and not yet taken by it.
    pub async fn buffered_signals(&self) -> Result<usize, JournalError> {
        let sent = self.store.list(&keys_of(&self.run).all_signals()).await?;
        let taken: std::collections::HashSet<String> = self
            .entries()
            .await?
            .into_values()
            .filter_map(|entry| match entry.recorded {
                super::Recorded::Signal { key, .. } => key,
                _ => None,
            })
            .collect();
        Ok(sent.iter().filter(|key| !taken.contains(key.as_ref())).count())
    }

    /// Stores a signal for the run; it waits there until the run takes it.
    pub async fn send_signal(
        &self,
        name: &SignalName,
        signal: &SignalRecord,
        id: Option<&SignalId>,
    ) -> Result<(), JournalError> {
        self.create(&keys_of(&self.run).new_signal(name, signal.sent_at_ms, id), signal)
            .await
    }

    /// Whether a signal called `name` was stored with the sender's `id`.
    pub async fn signal_stored(&self, name: &SignalName, id: &SignalId) -> Result<bool, JournalError> {
        let keys = self.store.list(&keys_of(&self.run).signals(name)).await?;
        // Keys are `{sent-at}-{id}`, and sent-at is digits only.
        Ok(keys.iter().any(|key| {
            key.filename()
                .and_then(|file| file.split_once('-'))
                .is_some_and(|(_, stored)| stored == id.as_str())
        }))
    }
}

/// The seq a key ends with.
fn seq_of(key: &StoreKey) -> Option<u64> {
    key.filename()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;
    use crate::journal::{Call, CallKind, Recorded};
    use crate::store::{Storage, TenantId};

    fn records() -> RunRecords {
        let store = Storage::in_memory().tenant(&TenantId::default_tenant());
        RunRecords::new(store, RunId::new("r1").expect("a valid run id"))
    }

    fn entry(seq: u64) -> Entry {
        Entry {
            seq,
            call: Call::new(CallKind::Now, "", b""),
            recorded: Recorded::Value(seq * 10),
            attempts: 1,
            started_at_ms: 0,
            finished_at_ms: 1,
        }
    }

    #[tokio::test]
    async fn entries_come_back_by_seq_and_a_seq_is_written_once() -> TestResult {
        let run = records();
        for seq in [2, 0, 1] {
            run.append(&entry(seq)).await?;
        }
        let entries = run.entries().await?;
        assert_eq!(entries.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(entries[&1], entry(1));
        let again = run.append(&entry(1)).await.unwrap_err();
        assert!(
            matches!(again, JournalError::Store(StoreError::AlreadyExists { .. })),
            "{again}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_corrupt_entry_is_reported_with_its_key() -> TestResult {
        let run = records();
        let mut bytes = encode(&entry(0));
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let key = keys_of(run.run_id()).entry(0);
        run.store().create(&key, Bytes::from(bytes)).await?;
        let err = run.entries().await.unwrap_err().to_string();
        assert!(
            err.contains("runs/r1/journal/0000000000") && err.contains("checksum mismatch"),
            "{err}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn outcome_is_recorded_once() -> TestResult {
        let run = records();
        let first = Outcome::Completed { output: "1".into() };
        assert_eq!(run.finish(&first).await?, first);
        let second = Outcome::Completed { output: "2".into() };
        assert_eq!(run.finish(&second).await?, first);
        Ok(())
    }

    #[tokio::test]
    async fn a_signal_sent_with_an_id_is_found_by_that_id_only() -> TestResult {
        let run = records();
        let name = SignalName::new("go")?;
        let id = SignalId::new("x-once")?;
        assert!(!run.signal_stored(&name, &id).await?);
        let signal = SignalRecord {
            payload: "1".into(),
            sent_at_ms: 5,
        };
        run.send_signal(&name, &signal, Some(&id)).await?;
        assert!(run.signal_stored(&name, &id).await?);
        for other in ["once", "x"] {
            assert!(!run.signal_stored(&name, &SignalId::new(other)?).await?, "{other}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_timer_keeps_its_first_deadline() -> TestResult {
        let run = records();
        assert_eq!(run.timer(3, 100, None).await?.deadline_ms, 100);
        assert_eq!(run.timer(3, 999, None).await?.deadline_ms, 100);
        Ok(())
    }
}
