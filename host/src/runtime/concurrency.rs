//! Concurrency keys: at most `limit` runs sharing a key execute at once, on
//! whichever hosts drive them; the others wait in line, by priority, then
//! by when they were created (DBOS queues, ironflow's concurrency limits).
//!
//! A key has `limit` places, each a chain of create-only generations in the
//! store (`queues/{key}/places/{slot}/{generation}`): an odd generation holds
//! the run that took the place, the even one after it frees the place. A
//! run takes a place by creating the next generation, and frees it by
//! creating the next again. Create-only lets exactly one of two racing
//! hosts make a generation, so no more than `limit` runs hold places
//! whatever the hosts sharing the store do. A place belongs to its run, not
//! to a host: a run taken over after its host died still holds it. A run
//! that ended without freeing its place (its host died in between) is found
//! ended by a waiter, which frees the place for it. Waiting runs hold
//! tickets (`queues/{key}/waiting/{priority}-{created}-{run}`) whose names
//! sort in the order they take places.
//!
//! Invariants: the newest generation of a place is never deleted, only
//! those below it, so a generation made from a stale view (its number since
//! made and trimmed) is seen not to be the newest and given up; a run notes
//! the place it is taking in its records before it takes it, so a host that
//! dies in between leaves the run knowing where to look; a waiting run
//! holds no instance and no slot; a run holds its place from its first
//! execution until it ends, its waits included.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{Progress, RunError, Runs};
use crate::journal::{ConcurrencyLimit, JournalError, RunRecord, RunRecords};
use crate::store::{
    ConcurrencyKey, RunId, StoreError, StoreKey, TenantId, TenantStore, keys_of, parse_place_generation, parse_ticket,
    place_generation, places_key, ticket, tickets_key,
};

/// How often a waiting run looks at its key's places in the store, for a
/// place another host freed (one freed here wakes it at once).
const PLACE_POLL: Duration = Duration::from_secs(2);

/// Every how many looks a waiting run with no free place checks whether
/// the holders have ended without freeing theirs: one read per holder.
const STALE_CHECK_EVERY: u32 = 5;

/// The place a run takes, noted in its records as it takes it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Place {
    slot: u32,
    generation: u64,
}

/// Whether a place's newest generation says it is taken.
fn is_taken(generation: u64) -> bool {
    generation % 2 == 1
}

/// Rung when a place of a key is freed on this host, so that the runs
/// waiting for one here look at once instead of at their next poll.
pub(super) type PlaceBells = super::bells::Bells<(TenantId, ConcurrencyKey)>;

impl Runs {
    /// Waits, before `record`'s run first executes, until it holds a place
    /// of its concurrency key. `Some` if it ended instead: cancelled, or
    /// past its deadline, while it waited.
    pub(super) async fn take_place(
        &self,
        records: &RunRecords,
        record: &RunRecord,
    ) -> Result<Option<Progress>, RunError> {
        let Some(concurrency) = &record.concurrency else {
            return Ok(None);
        };
        let store = records.store();
        let run = &record.run_id;
        if holds_place(store, &concurrency.key, run).await?.is_some() {
            return Ok(None);
        }
        let ticket = ticket_of(record, concurrency);
        create_once(store, &ticket, Bytes::new()).await?;
        let bell = self
            .host
            .place_bells
            .of((store.tenant().clone(), concurrency.key.clone()));
        let control = self.host.controls.of(store.tenant(), run);
        tracing::info!(key = %concurrency.key, "run waits for a place of its concurrency key");
        let _queued = self.host.metrics.run_queued(store.tenant());
        let mut looks: u32 = 0;
        loop {
            looks = looks.wrapping_add(1);
            let freed = bell.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(request) = records.cancel_request().await? {
                return Ok(Some(self.end_unstarted(records, record, &request).await?));
            }
            let places = newest_generations(store, &concurrency.key).await?;
            // An earlier execution of the run (on a host that since lost
            // it, or before a stand-down here) may have taken its place.
            if let Some(place) = noted_place(store, run).await?
                && names_run(store, &concurrency.key, run, place, &places).await?
            {
                return Ok(None);
            }
            let open = open_places(&places, concurrency.limit);
            if open.is_empty() && looks % STALE_CHECK_EVERY == 1 && free_stale(store, &concurrency.key, &places).await?
            {
                continue;
            }
            let takeable = match open.len() {
                0 => Vec::new(),
                seen_open => takeable_places(store, concurrency, run, seen_open).await?,
            };
            if !takeable.is_empty() {
                // A host that lost the run while it waited takes nothing.
                records.check_claim()?;
                if self.take_one(store, &concurrency.key, takeable, run, &ticket).await? {
                    return Ok(None);
                }
                // Another run took them first: look again at once.
                continue;
            }
            tokio::select! {
                biased;
                () = freed => {}
                _ = control.nap(PLACE_POLL) => {}
            }
        }
    }

    /// Takes one of `places` for `run` and leaves the line (`ticket`);
    /// whether it did (others may have taken them first).
    async fn take_one(
        &self,
        store: &TenantStore,
        key: &ConcurrencyKey,
        places: Vec<Place>,
        run: &RunId,
        ticket: &StoreKey,
    ) -> Result<bool, RunError> {
        let more_open = places.len() > 1;
        for place in places {
            if take(store, key, place, run).await? {
                store.delete(ticket).await?;
                tracing::info!(%key, slot = place.slot, "run took a place");
                if more_open {
                    // A waiter that saw this run still in line ahead of it,
                    // and so left an open place alone, looks again.
                    self.host.place_bells.ring(&(store.tenant().clone(), key.clone()));
                }
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Puts a run that starts at once in its key's line as it is created,
    /// so that runs created one after another wait in that order however
    /// their executions race to [`Runtime::take_place`] (which takes the
    /// ticket too, for a run whose host died before it took one here). A
    /// failure is logged for that reason.
    pub(super) async fn join_line(&self, store: &TenantStore, record: &RunRecord) {
        let Some(concurrency) = record.concurrency.as_ref().filter(|_| record.start_at_ms.is_none()) else {
            return;
        };
        if let Err(e) = create_once(store, &ticket_of(record, concurrency), Bytes::new()).await {
            tracing::warn!(run = %record.run_id, key = %concurrency.key, "cannot put the run in its key's line; its execution does: {e}");
        }
    }

    /// Whether `record`'s run waits for a place of its concurrency key:
    /// it has one, and holds no place.
    pub(super) async fn is_queued(&self, store: &TenantStore, record: &RunRecord) -> Result<bool, RunError> {
        Ok(match &record.concurrency {
            Some(concurrency) => holds_place(store, &concurrency.key, &record.run_id).await?.is_none(),
            None => false,
        })
    }

    /// Frees the place `record`'s run held, if any, and its ticket, once it
    /// has ended. A failure is logged: a waiter finds the run ended and
    /// takes its place over.
    pub(super) async fn leave_place(&self, store: &TenantStore, record: &RunRecord) {
        let Some(concurrency) = &record.concurrency else {
            return;
        };
        let run = &record.run_id;
        let left: Result<(), RunError> = async {
            store.delete(&ticket_of(record, concurrency)).await?;
            if let Some(place) = holds_place(store, &concurrency.key, run).await? {
                free(store, &concurrency.key, place).await?;
            }
            Ok(())
        }
        .await;
        match left {
            Ok(()) => self
                .host
                .place_bells
                .ring(&(store.tenant().clone(), concurrency.key.clone())),
            Err(e) => {
                tracing::warn!(%run, key = %concurrency.key, "cannot free the run's place; a waiter takes it over once it sees the run ended: {e}")
            }
        }
    }
}

/// `record`'s ticket in the line of its key.
fn ticket_of(record: &RunRecord, concurrency: &ConcurrencyLimit) -> StoreKey {
    ticket(&concurrency.key, record.priority, record.created_us(), &record.run_id)
}

/// Creates `key` holding `bytes`, or finds it there already.
async fn create_once(store: &TenantStore, key: &StoreKey, bytes: Bytes) -> Result<(), StoreError> {
    match store.create(key, bytes).await {
        Ok(()) | Err(StoreError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The place `run` holds of `key`, if any: the one its records note, if
/// that generation names it and is its place's newest.
async fn holds_place(store: &TenantStore, key: &ConcurrencyKey, run: &RunId) -> Result<Option<Place>, RunError> {
    let Some(place) = noted_place(store, run).await? else {
        return Ok(None);
    };
    let newest = newest_generations(store, key).await?;
    Ok(names_run(store, key, run, place, &newest).await?.then_some(place))
}

/// The place `run` noted it was taking, if it noted one.
async fn noted_place(store: &TenantStore, run: &RunId) -> Result<Option<Place>, RunError> {
    let noted = keys_of(run).place();
    let Some(bytes) = store.get(&noted).await? else {
        return Ok(None);
    };
    let place = serde_json::from_slice(&bytes).map_err(|e| JournalError::Corrupt {
        key: noted.to_string(),
        reason: e.to_string(),
    })?;
    Ok(Some(place))
}

/// Whether `place` is its slot's newest generation (of `newest`), taken
/// by `run`.
async fn names_run(
    store: &TenantStore,
    key: &ConcurrencyKey,
    run: &RunId,
    place: Place,
    newest: &BTreeMap<u32, u64>,
) -> Result<bool, StoreError> {
    if newest.get(&place.slot) != Some(&place.generation) {
        return Ok(false);
    }
    let generation = place_generation(key, place.slot, place.generation);
    Ok(store.get(&generation).await?.as_deref() == Some(run.as_str().as_bytes()))
}

/// The newest generation of every place of `key` ever taken, by slot.
async fn newest_generations(store: &TenantStore, key: &ConcurrencyKey) -> Result<BTreeMap<u32, u64>, StoreError> {
    let listed = store.list(&places_key(key)).await?;
    Ok(newest_of(listed.iter().filter_map(parse_place_generation)))
}

fn newest_of(generations: impl Iterator<Item = (u32, u64)>) -> BTreeMap<u32, u64> {
    let mut newest: BTreeMap<u32, u64> = BTreeMap::new();
    for (slot, generation) in generations {
        let seen = newest.entry(slot).or_default();
        *seen = (*seen).max(generation);
    }
    newest
}

/// The places below `limit` no run holds, each as the generation that
/// would take it.
fn open_places(places: &BTreeMap<u32, u64>, limit: u32) -> Vec<Place> {
    (0..limit)
        .filter_map(|slot| match places.get(&slot).copied().unwrap_or(0) {
            newest if is_taken(newest) => None,
            newest => Some(Place {
                slot,
                generation: newest.saturating_add(1),
            }),
        })
        .collect()
}

/// Frees the places whose holder has ended (or is gone) without freeing
/// them; whether it freed any.
async fn free_stale(store: &TenantStore, key: &ConcurrencyKey, places: &BTreeMap<u32, u64>) -> Result<bool, RunError> {
    let mut freed = false;
    for (&slot, &generation) in places.iter().filter(|(_, generation)| is_taken(**generation)) {
        let Some(holder) = store.get(&place_generation(key, slot, generation)).await? else {
            continue;
        };
        let holder = std::str::from_utf8(&holder).ok().and_then(|id| RunId::new(id).ok());
        if ended_or_gone(store, holder.as_ref()).await? {
            tracing::info!(%key, slot, "freeing a place whose run ended without freeing it");
            free(store, key, Place { slot, generation }).await?;
            freed = true;
        }
    }
    Ok(freed)
}

/// Whether `run` has ended, or is no longer stored at all (`None`: a
/// holder that names no run).
async fn ended_or_gone(store: &TenantStore, run: Option<&RunId>) -> Result<bool, RunError> {
    let Some(run) = run else { return Ok(true) };
    let records = RunRecords::new(store.clone(), run.clone());
    Ok(records.outcome().await?.is_some() || records.run().await?.is_none())
}

/// Frees `place` by making the generation after it (or finds it made).
async fn free(store: &TenantStore, key: &ConcurrencyKey, place: Place) -> Result<(), StoreError> {
    // Saturating: a generation is parsed from a key name, which no guest
    // or request writes, but a damaged store must not panic the host.
    let freed = place_generation(key, place.slot, place.generation.saturating_add(1));
    create_once(store, &freed, Bytes::new()).await?;
    trim(store, key, place.slot).await.map(drop)
}

/// The open places of `concurrency`'s key that `run` may take now: all of
/// them if fewer live runs are in line ahead of it, none otherwise.
/// `seen_open` places were open at the caller's look. The places are read
/// again after the line: a run that took one in between has left the line
/// by then, and must not be counted as an open place too.
async fn takeable_places(
    store: &TenantStore,
    concurrency: &ConcurrencyLimit,
    run: &RunId,
    seen_open: usize,
) -> Result<Vec<Place>, RunError> {
    let Some(ahead) = ahead_in_line(store, &concurrency.key, run, seen_open).await? else {
        return Ok(Vec::new());
    };
    let open = open_places(&newest_generations(store, &concurrency.key).await?, concurrency.limit);
    // `ahead` is exact below `seen_open` only; more places open since were
    // freed, which rang this run's bell: it looks again.
    Ok(if ahead < open.len().min(seen_open) {
        open
    } else {
        Vec::new()
    })
}

/// How many live runs are in line for `key` ahead of `run`, counted up to
/// `at_most` (at least that many if it says so); `None` if `run` has no
/// ticket (it was taken back by a run of the same id that ended). A ticket
/// ahead of it whose run has ended is thrown away, so a run that ended
/// while waiting (its host died before it took its ticket back) blocks no
/// one.
async fn ahead_in_line(
    store: &TenantStore,
    key: &ConcurrencyKey,
    run: &RunId,
    at_most: usize,
) -> Result<Option<usize>, RunError> {
    let mut tickets = store.list(&tickets_key(key)).await?;
    tickets.sort();
    let mut ahead = 0;
    for ticket in tickets {
        let Some(waiting) = ticket.filename().and_then(parse_ticket) else {
            continue;
        };
        if &waiting == run {
            return Ok(Some(ahead));
        }
        if ended_or_gone(store, Some(&waiting)).await? {
            store.delete(&ticket).await?;
            continue;
        }
        ahead += 1;
        if ahead >= at_most {
            return Ok(Some(ahead));
        }
    }
    Ok(None)
}

/// Takes `place` for `run`; whether it did (no other run made that
/// generation first, nor a later one meanwhile).
async fn take(store: &TenantStore, key: &ConcurrencyKey, place: Place, run: &RunId) -> Result<bool, RunError> {
    let noted = serde_json::to_vec(&place).expect("a place serializes");
    store.overwrite(&keys_of(run).place(), noted.into()).await?;
    let taken = place_generation(key, place.slot, place.generation);
    match store
        .create(&taken, Bytes::copy_from_slice(run.as_str().as_bytes()))
        .await
    {
        Ok(()) => {}
        Err(StoreError::AlreadyExists { .. }) => return Ok(false),
        Err(e) => return Err(e.into()),
    }
    if trim(store, key, place.slot).await? != Some(place.generation) {
        // Made below a newer generation: it holds nothing, so it goes.
        store.delete(&taken).await?;
        return Ok(false);
    }
    Ok(true)
}

/// Deletes every generation of place `slot` below its newest, and says
/// which that is.
async fn trim(store: &TenantStore, key: &ConcurrencyKey, slot: u32) -> Result<Option<u64>, StoreError> {
    let listed = store.list(&places_key(key)).await?;
    let generations: Vec<_> = listed
        .into_iter()
        .filter_map(|stored| match parse_place_generation(&stored) {
            Some((of, generation)) if of == slot => Some((generation, stored)),
            _ => None,
        })
        .collect();
    let newest = generations.iter().map(|(generation, _)| *generation).max();
    let older: Vec<_> = generations
        .into_iter()
        .filter(|(generation, _)| Some(*generation) < newest)
        .map(|(_, stored)| stored)
        .collect();
    store.delete_all(&older).await?;
    Ok(newest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str) -> RunId {
        RunId::new(id).expect("a valid run id")
    }

    fn key() -> ConcurrencyKey {
        ConcurrencyKey::new("customer-42").expect("a valid key")
    }

    #[test]
    fn odd_generations_hold_a_place_and_even_ones_free_it() {
        let places = newest_of([(0, 3), (0, 4), (1, 7), (0, 2)].into_iter());
        assert_eq!(places, BTreeMap::from([(0, 4), (1, 7)]));
        assert_eq!(
            open_places(&places, 3),
            [Place { slot: 0, generation: 5 }, Place { slot: 2, generation: 1 }],
            "a freed place and one never taken are open; places past the limit are not"
        );
        assert_eq!(open_places(&places, 1), [Place { slot: 0, generation: 5 }]);
        let key = place_generation(&key(), 12, 34);
        assert_eq!(parse_place_generation(&key), Some((12, 34)));
    }

    #[test]
    fn tickets_sort_by_priority_then_creation_to_the_microsecond() {
        // "zeta" and "alpha" were created in the same millisecond, in that
        // order: their microseconds, not their ids, put them in line.
        let created = |id: &str, us: u64| RunRecord {
            created_at_us: Some(us),
            ..RunRecord::example(id, us / 1_000)
        };
        let stored_before_microseconds = RunRecord::example("early", 1);
        let tickets = [
            (5, stored_before_microseconds),
            (1, created("urgent", 9_000_000)),
            (5, created("zeta", 20_000_100)),
            (5, created("alpha", 20_000_200)),
        ]
        .map(|(priority, record)| ticket(&key(), priority, record.created_us(), &record.run_id));
        let mut sorted = tickets.to_vec();
        sorted.sort();
        let order: Vec<_> = sorted
            .iter()
            .filter_map(|t| t.filename().and_then(parse_ticket))
            .collect();
        assert_eq!(order, [run("urgent"), run("early"), run("zeta"), run("alpha")]);
    }

    async fn store() -> TenantStore {
        crate::store::Storage::in_memory().tenant(&TenantId::default_tenant())
    }

    #[tokio::test]
    async fn of_two_runs_racing_for_one_generation_only_one_takes_the_place_and_holds_it() {
        let store = store().await;
        let open = Place { slot: 0, generation: 1 };
        let first = take(&store, &key(), open, &run("a")).await.expect("stored");
        let second = take(&store, &key(), open, &run("b")).await.expect("stored");
        assert!(first && !second, "{first} {second}");
        assert_eq!(holds_place(&store, &key(), &run("a")).await.expect("read"), Some(open));
        assert_eq!(holds_place(&store, &key(), &run("b")).await.expect("read"), None);
        free(&store, &key(), open).await.expect("freed");
        assert_eq!(holds_place(&store, &key(), &run("a")).await.expect("read"), None);
        assert_eq!(
            store.list(&places_key(&key())).await.expect("listed").len(),
            1,
            "trimmed"
        );
    }

    #[tokio::test]
    async fn a_generation_made_from_a_stale_view_holds_nothing_and_is_deleted() {
        let store = store().await;
        // Generations 1 (a) and 2 (freed) were made and 1 trimmed; a host
        // that saw the place never taken now makes generation 1 again.
        store
            .create(&place_generation(&key(), 0, 2), Bytes::new())
            .await
            .expect("stored");
        let stale = take(&store, &key(), Place { slot: 0, generation: 1 }, &run("b"))
            .await
            .expect("stored");
        assert!(!stale, "a generation below the newest holds nothing");
        assert_eq!(
            newest_generations(&store, &key()).await.expect("listed"),
            BTreeMap::from([(0, 2)])
        );
        assert_eq!(store.list(&places_key(&key())).await.expect("listed").len(), 1);
    }

    #[tokio::test]
    async fn a_run_may_take_a_place_only_while_fewer_live_runs_are_ahead_of_it_than_are_open() {
        let store = store().await;
        let limit = ConcurrencyLimit { key: key(), limit: 2 };
        for (id, created) in [("second", 2), ("third", 3)] {
            let record = RunRecord::example(id, created);
            RunRecords::new(store.clone(), record.run_id.clone())
                .create_run(&record)
                .await
                .expect("stored");
            create_once(&store, &ticket_of(&record, &limit), Bytes::new())
                .await
                .expect("stored");
        }
        // "third" saw both places open; "first" (whose ticket is gone) has
        // taken one since, so "second" alone is owed the other.
        assert!(
            take(&store, &key(), Place { slot: 0, generation: 1 }, &run("first"))
                .await
                .expect("stored")
        );
        let third = takeable_places(&store, &limit, &run("third"), 2).await.expect("read");
        assert_eq!(third, [], "third would jump the line");
        let second = takeable_places(&store, &limit, &run("second"), 2).await.expect("read");
        assert_eq!(second, [Place { slot: 1, generation: 1 }]);
        let unlisted = takeable_places(&store, &limit, &run("fourth"), 2).await.expect("read");
        assert_eq!(unlisted, [], "a run without a ticket is in no line");
        // A ticket whose run has ended is thrown away, and blocks no one.
        let ended = RunRecords::new(store.clone(), run("second"));
        ended
            .finish(&crate::journal::Outcome::Cancelled { reason: "test".into() })
            .await
            .expect("stored");
        let third = takeable_places(&store, &limit, &run("third"), 1).await.expect("read");
        assert_eq!(third, [Place { slot: 1, generation: 1 }]);
        assert_eq!(store.list(&tickets_key(&key())).await.expect("listed").len(), 1);
    }

    #[tokio::test]
    async fn a_place_whose_holder_is_gone_is_freed_by_a_waiter() {
        let store = store().await;
        let held = Place { slot: 0, generation: 1 };
        assert!(take(&store, &key(), held, &run("gone")).await.expect("stored"));
        let places = newest_generations(&store, &key()).await.expect("listed");
        assert!(open_places(&places, 1).is_empty());
        assert!(free_stale(&store, &key(), &places).await.expect("checked"));
        let places = newest_generations(&store, &key()).await.expect("listed");
        assert_eq!(open_places(&places, 1), [Place { slot: 0, generation: 3 }]);
    }
}
