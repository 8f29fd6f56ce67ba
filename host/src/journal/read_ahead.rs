//! What a host reads of a run at once when it wakes it: every key of the
//! run in one listing, beside its record, then in one parallel round the
//! records an execution reads first (its journal from the newest
//! snapshot, its cancel and pause requests, the open wait's timer and
//! advance, the newest signals; of a finished run, its outcome only). Waking a suspended run then costs two
//! round trips on object storage, however many records it reads.
//!
//! Invariants: a read-ahead answers each key, and each listing, once, and
//! only within [`READ_AHEAD_FOR`] of its listing; every read after that
//! goes to the store. What it answers is what the store held at a moment
//! after the wake-up began. The run's bell exists from before that moment
//! and keeps a ring for the next wait, and a cancel, a pause, an advance
//! and a signal each ring it once stored: one stored since is met at the
//! run's next wait, which reads the store again. Journal entries, timers
//! and outcomes are create-only, so an answer read ahead only misses what
//! a later write would be refused for. A run with more keys than one page
//! of a listing holds is read as before, record by record. Claims and the
//! fence are never read ahead.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt};

use crate::clock::BootInstant;
use crate::shared_map::lock;
use crate::store::{RunId, StoreError, StoreKey, TenantStore, keys_of};

/// How long after its listing a read-ahead answers: long enough for a
/// warm host to replay a journal to its wait, short enough that a late
/// first read of a key goes to the store.
pub const READ_AHEAD_FOR: Duration = Duration::from_secs(2);
/// A run with this many keys or more is read record by record: one page
/// of S3's listing holds 1,000.
const LISTED_AT_ONCE: usize = 1_000;
/// The newest signals fetched: a woken wait usually takes one just sent.
const SIGNALS_FETCHED: usize = 16;
/// Records fetched at once.
const FETCHED_AT_ONCE: usize = 32;

type Fetched = Shared<BoxFuture<'static, Arc<HashMap<StoreKey, Bytes>>>>;

/// A run's keys as listed at its wake-up, and the records fetched then.
pub(super) struct ReadAhead {
    listed: BTreeSet<StoreKey>,
    listed_at: BootInstant,
    fetched: Fetched,
    /// The keys and listing prefixes answered already.
    answered: Mutex<HashSet<StoreKey>>,
}

impl std::fmt::Debug for ReadAhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (f.debug_struct("ReadAhead"))
            .field("listed", &self.listed.len())
            .field("listed_at", &self.listed_at)
            .finish_non_exhaustive()
    }
}

impl ReadAhead {
    /// Lists `run`'s keys and starts fetching the records its execution
    /// reads first; `None` for a run with too many keys to list at once.
    pub(super) async fn of(store: &TenantStore, run: &RunId) -> Result<Option<Self>, StoreError> {
        let listed_at = BootInstant::now();
        let Some(listed) = store.list_fewer_than(&keys_of(run).root(), LISTED_AT_ONCE).await? else {
            return Ok(None);
        };
        let listed: BTreeSet<StoreKey> = listed.into_iter().collect();
        let wanted = first_reads(run, &listed);
        let store = store.clone();
        let fetch = async move {
            let fetched = futures::stream::iter(wanted)
                .map(|key| {
                    let store = store.clone();
                    async move {
                        // A failed read is read again by whoever asks.
                        let bytes = store.get(&key).await.ok().flatten();
                        bytes.map(|bytes| (key, bytes))
                    }
                })
                .buffer_unordered(FETCHED_AT_ONCE)
                .filter_map(std::future::ready)
                .collect::<HashMap<_, _>>()
                .await;
            Arc::new(fetched)
        };
        // Spawned, so the reads go on while the run is claimed and loaded.
        let fetching = crate::task::spawn(fetch).map(|joined| joined.unwrap_or_default());
        Ok(Some(Self {
            listed,
            listed_at,
            fetched: fetching.boxed().shared(),
            answered: Mutex::default(),
        }))
    }

    /// Whether the read-ahead may still answer: it has not expired.
    pub(super) fn is_current(&self) -> bool {
        self.listed_at.elapsed() <= READ_AHEAD_FOR
    }

    /// Takes `key` (a record's, or a listing's prefix) as answered, unless
    /// it was already or the read-ahead expired.
    fn answers(&self, key: &StoreKey) -> bool {
        self.is_current() && lock(&self.answered).insert(key.clone())
    }

    /// The record stored at `key` when the run was woken: `Some(None)` if
    /// none was, `None` if the store must be read (asked before, expired,
    /// or not fetched).
    pub(super) async fn get(&self, key: &StoreKey) -> Option<Option<Bytes>> {
        if !self.answers(key) {
            return None;
        }
        if !self.listed.contains(key) {
            return Some(None);
        }
        self.fetched.clone().await.get(key).cloned().map(Some)
    }

    /// The keys under `prefix` that sort after `after` (every one without
    /// it) when the run was woken, in order; `None` if the store must be
    /// listed.
    pub(super) fn list(&self, prefix: &StoreKey, after: Option<&StoreKey>) -> Option<Vec<StoreKey>> {
        if !self.answers(prefix) {
            return None;
        }
        Some(
            (self.listed.iter())
                .filter(|key| key.prefix_matches(prefix) && after.is_none_or(|after| *key > after))
                .cloned()
                .collect(),
        )
    }
}

/// The newest incarnation of `run` with a folder among the keys `listed`
/// (the first's is the run's own): the run a wake-up is for, but for a
/// fresh one with nothing stored yet, which then reads an earlier one's
/// leftovers ahead for nothing. Which keys a read-ahead fetches is a guess;
/// its answers come from the listing, whatever the guess.
fn newest_incarnation(run: &RunId, listed: &BTreeSet<StoreKey>) -> u64 {
    let folders = keys_of(run).incarnations();
    (listed.iter())
        .filter_map(|key| key.prefix_match(&folders)?.next()?.as_ref().parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

/// The records of `run` an execution woken reads first, of those `listed`.
fn first_reads(run: &RunId, listed: &BTreeSet<StoreKey>) -> Vec<StoreKey> {
    let ids = keys_of(run);
    let keys = ids.of(newest_incarnation(run, listed));
    let under =
        |prefix: StoreKey| -> Vec<&StoreKey> { listed.iter().filter(|key| key.prefix_matches(&prefix)).collect() };
    let seq = |key: &StoreKey| key.filename().and_then(|name| name.parse::<u64>().ok());
    // A finished run is not executed: its outcome is all a drive reads.
    if listed.contains(&keys.outcome()) {
        return vec![keys.outcome()];
    }
    let mut wanted: Vec<StoreKey> = [ids.cancel(), ids.pause()]
        .into_iter()
        .filter(|key| listed.contains(key))
        .collect();
    // The journal from its newest snapshot: the snapshot, the entry its
    // last seq must match, and the entries after it.
    let covers = under(keys.snapshots())
        .into_iter()
        .filter_map(seq)
        .filter(|covers| *covers > 0)
        .max();
    if let Some(covers) = covers {
        wanted.push(keys.snapshot(covers));
    }
    let from = covers.map_or(0, |covers| covers - 1);
    let entries = under(keys.journal());
    wanted.extend(
        entries
            .iter()
            .filter(|key| seq(key).is_some_and(|at| at >= from))
            .map(|key| (*key).clone()),
    );
    // The open wait: the newest timer whose call has no entry yet.
    if let Some(wait) = under(keys.timers()).into_iter().filter_map(seq).max()
        && !listed.contains(&keys.entry(wait))
    {
        wanted.push(keys.timer(wait));
        wanted.extend(Some(ids.advance(wait)).filter(|key| listed.contains(key)));
    }
    let mut signals = under(ids.all_signals());
    signals.sort_by_key(|key| {
        key.filename()
            .and_then(|name| name.split('-').next()?.parse::<u64>().ok())
    });
    wanted.extend(signals.into_iter().rev().take(SIGNALS_FETCHED).cloned());
    wanted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Storage, TenantId};

    fn run() -> RunId {
        RunId::new("woken").expect("a run id")
    }

    async fn stored(store: &TenantStore, keys: &[StoreKey]) {
        for key in keys {
            store.create(key, Bytes::from(key.to_string())).await.expect("stored");
        }
    }

    #[tokio::test]
    async fn it_answers_each_key_once_from_one_listing_and_one_round_of_reads() {
        let store = Storage::in_memory().tenant(&TenantId::default_tenant());
        let run = run();
        let keys = keys_of(&run);
        let entries: Vec<StoreKey> = (0..5).map(|seq| keys.of(0).entry(seq)).collect();
        stored(&store, &entries).await;
        stored(
            &store,
            &[keys.of(0).snapshot(3), keys.of(0).timer(5), keys.cancel(), keys.run()],
        )
        .await;
        let ahead = ReadAhead::of(&store, &run).await.expect("listed").expect("few keys");
        let fetched = ahead.fetched.clone().await;
        let mut expected: Vec<StoreKey> = vec![
            keys.cancel(),
            keys.of(0).snapshot(3),
            keys.of(0).entry(2),
            keys.of(0).entry(3),
            keys.of(0).entry(4),
            keys.of(0).timer(5),
        ];
        let mut got: Vec<StoreKey> = fetched.keys().cloned().collect();
        expected.sort();
        got.sort();
        assert_eq!(
            got, expected,
            "the run record and the entries the snapshot holds are not fetched"
        );

        assert_eq!(
            ahead.get(&keys.cancel()).await,
            Some(Some(Bytes::from(keys.cancel().to_string())))
        );
        assert_eq!(ahead.get(&keys.cancel()).await, None, "a second read goes to the store");
        assert_eq!(ahead.get(&keys.pause()).await, Some(None), "not listed: absent");
        assert_eq!(
            ahead.get(&keys.of(0).entry(0)).await,
            None,
            "listed, not fetched: read from the store"
        );
        let after = ahead.list(&keys.of(0).journal(), Some(&keys.of(0).entry(2)));
        assert_eq!(after, Some(vec![keys.of(0).entry(3), keys.of(0).entry(4)]));
        assert_eq!(
            ahead.list(&keys.of(0).journal(), None),
            None,
            "a listing is answered once"
        );
    }

    #[tokio::test]
    async fn of_a_finished_run_only_the_outcome_is_fetched() {
        let store = Storage::in_memory().tenant(&TenantId::default_tenant());
        let run = run();
        let keys = keys_of(&run);
        stored(&store, &[keys.of(0).entry(0), keys.cancel(), keys.of(0).outcome()]).await;
        let ahead = ReadAhead::of(&store, &run).await.expect("listed").expect("few keys");
        let fetched = ahead.fetched.clone().await;
        assert_eq!(fetched.keys().collect::<Vec<_>>(), [&keys.of(0).outcome()]);
    }

    #[tokio::test]
    async fn a_run_of_more_keys_than_a_page_is_read_record_by_record() {
        let store = Storage::in_memory().tenant(&TenantId::default_tenant());
        let run = run();
        let keys = keys_of(&run);
        let many: Vec<StoreKey> = (0..LISTED_AT_ONCE as u64).map(|seq| keys.of(0).entry(seq)).collect();
        stored(&store, &many[..LISTED_AT_ONCE - 1]).await;
        assert!(ReadAhead::of(&store, &run).await.expect("listed").is_some());
        stored(&store, &many[LISTED_AT_ONCE - 1..]).await;
        assert!(ReadAhead::of(&store, &run).await.expect("listed").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn it_answers_nothing_once_expired() {
        let _virtual = crate::clock::VirtualTime::start(0);
        let store = Storage::in_memory().tenant(&TenantId::default_tenant());
        let ahead = ReadAhead::of(&store, &run()).await.expect("listed").expect("few keys");
        assert!(ahead.is_current());
        tokio::time::advance(READ_AHEAD_FOR + Duration::from_millis(1)).await;
        assert_eq!(ahead.get(&keys_of(&run()).cancel()).await, None);
    }
}
