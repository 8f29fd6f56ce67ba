//! Continue-as-new: a workflow ends its generation (this run, and its
//! journal) and the same logical run goes on as a new run, the chain's next
//! generation, on a new input and with an empty journal. A loop that never
//! ends (a poller, an entity) so keeps every journal bounded.
//!
//! This module owns the chain: how a generation's id is derived, how the
//! next generation is started, and how any id of a chain is resolved to its
//! latest generation (for status, `wait`, signals and cancellation).
//!
//! Invariants:
//! - Generation `n >= 1` of the chain that began with run `root` is run
//!   `{root}.g{n}`: derived, never chosen. A generation re-driven after its
//!   host died between starting the next run and writing its own outcome
//!   replays to `continue-as-new` again and finds that same run, which was
//!   created once (run records are create-only, submission is idempotent
//!   on the id). Child runs are `{parent}.{seq}`, digits only, so no child
//!   id is ever a generation's.
//! - The next generation's run record exists before this generation's
//!   `Continued { next }` outcome is written, so every `next` resolves.
//! - `chains/{root}` names the newest generation known to have started. It
//!   may lag (its write lost to a crash; a re-driven older generation
//!   never moves it back) but never leads: resolution
//!   starts there when it is ahead of the id asked about and follows `next`
//!   links, at most [`MAX_CHAIN_HOPS`]. It lives outside the root's folder,
//!   so retention may delete the root's records while the chain goes on.
//! - Starting a generation is admitted against the tenant's new-runs-a-
//!   minute rate and fuel budget (not its active runs: the new generation
//!   replaces this one). Refused, the generation suspends and tries again,
//!   so a workflow that continues in a tight loop starts runs no faster
//!   than its quota allows, and never fails for it.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::interruption::Suspension;
use super::moment::Moment;
use super::retention::LATE_WRITES_LAND_WITHIN;
use super::{Progress, RunError, Runs, Submission, failed};
use crate::clock::{millis, now_ms};
use crate::journal::{ChainLink, JournalError, Outcome, RunRecord, RunRecords, decode, encode};
use crate::store::{RunId, TenantId, TenantStore, chain_key};

/// How many `next` links a resolution follows past the chain's pointer
/// before it gives up: the pointer lags by a generation or two at most,
/// unless generations start faster than it is written.
pub const MAX_CHAIN_HOPS: usize = 64;

/// What a generation's id adds to its root's: `.g` and the generation.
const GENERATION_MARK: &str = ".g";

/// Why a run could not continue as new, or its chain not be followed.
#[derive(Debug, thiserror::Error)]
pub enum ContinuationError {
    /// The id of the run's next generation would be longer than a run id may
    /// be: the run fails; start runs that continue as new under shorter ids.
    #[error(
        "run `{run}` cannot continue as new: generation {generation} of the chain of `{root}` would be run `{root}{GENERATION_MARK}{generation}`, over the {limit} characters a run id may have; start runs that continue as new under shorter ids"
    )]
    IdTooLong {
        /// The generation that called `continue-as-new`.
        run: RunId,
        /// The first run of its chain, whose id every generation's extends.
        root: RunId,
        /// The next generation's number (the root's successor is 1).
        generation: u64,
        /// The most characters a run id may have.
        limit: usize,
    },
    /// The id of the run's next generation is taken by a run that does not
    /// continue its chain: the run fails.
    #[error(
        "run `{run}` cannot continue as new: the id of its next generation, `{next}`, is taken by a run that does not continue it"
    )]
    Taken {
        /// The generation that called `continue-as-new`.
        run: RunId,
        /// The id its next generation would have, held by the other run.
        next: RunId,
    },
    /// The chain's latest generation lies more than [`MAX_CHAIN_HOPS`] links
    /// past its pointer, so it was not found: ask again.
    #[error(
        "the chain of run `{run}` has more than {hops} generations past the newest its pointer names, so its latest was not found: ask again"
    )]
    Unresolved {
        /// The run whose chain was followed.
        run: RunId,
        /// How many `next` links were followed before giving up.
        hops: usize,
    },
}

/// The stored pointer to a chain's newest generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ChainPointer {
    generation: u64,
    run: RunId,
}

/// The place of the generation that follows `record`'s run.
pub(super) fn next_link(record: &RunRecord) -> ChainLink {
    let (root, generation) = match &record.chain {
        // A chain cannot reach u64::MAX generations: the tenant's rate
        // admits at most a few thousand a minute.
        Some(link) => (link.root.clone(), link.generation.saturating_add(1)),
        None => (record.run_id.clone(), 1),
    };
    ChainLink {
        root,
        generation,
        previous: record.run_id.clone(),
    }
}

/// The run id of the generation `link` places.
pub(super) fn generation_id(link: &ChainLink) -> Result<RunId, ContinuationError> {
    RunId::new(&format!("{}{GENERATION_MARK}{}", link.root, link.generation)).map_err(|e| {
        ContinuationError::IdTooLong {
            run: link.previous.clone(),
            root: link.root.clone(),
            generation: link.generation,
            limit: e.max(),
        }
    })
}

/// The root and generation a generation's id names (the inverse of
/// [`generation_id`]); `None` for an id not so derived.
fn parse_generation(run: &RunId) -> Option<(RunId, u64)> {
    let (root, generation) = run.as_str().rsplit_once(GENERATION_MARK)?;
    let canonical =
        !generation.is_empty() && generation.bytes().all(|b| b.is_ascii_digit()) && !generation.starts_with('0');
    if !canonical {
        return None;
    }
    Some((RunId::new(root).ok()?, generation.parse().ok()?))
}

/// What a generation that called `continue-as-new` comes to.
pub(super) enum Continuing {
    /// Its end: continued as the next generation, or failed (or cancelled).
    Ended(Outcome),
    /// It waits to start the next generation: for its tenant's rate, or
    /// for the next generation's id to be free.
    Waiting(Suspension),
}

/// What starting the next generation gave.
enum Started {
    Run(RunId),
    /// Refused by the tenant's rate or fuel budget, for this long.
    Refused(Duration),
}

impl Runs {
    /// Ends `record`'s generation, which called `continue-as-new` on
    /// `input`, by starting the next one. A failure to store decided
    /// nothing and is returned (the run is driven again); an input or id
    /// that cannot make a generation fails the run, saying why.
    pub(super) async fn continue_as_new(
        &self,
        records: &RunRecords,
        record: &RunRecord,
        input: String,
    ) -> Result<Continuing, RunError> {
        // A cancelled run starts no next generation: it ends cancelled.
        if let Some(request) = records.cancel_request().await? {
            return Ok(Continuing::Ended(request.outcome()));
        }
        let link = next_link(record);
        match self.start_generation(records.store(), record, &link, input).await {
            Ok(Started::Run(next)) => {
                tracing::info!(%next, generation = link.generation, "run continued as new");
                Ok(Continuing::Ended(Outcome::Continued { next }))
            }
            Ok(Started::Refused(wait)) => {
                tracing::info!(
                    wait_ms = millis(wait),
                    generation = link.generation,
                    "next generation held back by the tenant's rate"
                );
                let wake_at_ms = now_ms().saturating_add(millis(wait));
                let suspension = Suspension::until(wake_at_ms).no_later_than(record.deadline_ms, now_ms());
                Ok(Continuing::Waiting(suspension))
            }
            // Its host lost its lease while storing the next generation:
            // nothing was decided, and the run is driven again.
            Err(e) if e.is_storage_failure() || e.is_stood_down() || matches!(e, RunError::Journal(_)) => Err(e),
            // The next generation's id is held by a sweep (of a chain run
            // under this id before, or of a creation of it taken back):
            // asked again once the hold has passed (found by the
            // simulation, seed 5002: a run used again failed at its
            // continuation).
            Err(RunError::BeingDeleted { .. }) => {
                let wake_at_ms = now_ms().saturating_add(millis(LATE_WRITES_LAND_WITHIN));
                let suspension = Suspension::until(wake_at_ms).no_later_than(record.deadline_ms, now_ms());
                Ok(Continuing::Waiting(suspension))
            }
            Err(e) => Ok(Continuing::Ended(failed("invalid-continuation", e.to_string()))),
        }
    }

    /// Starts generation `link` of the chain after `record`'s run, on
    /// `input` and otherwise as `record` was started; a generation started
    /// before (its previous one re-driven after a crash) is that run.
    async fn start_generation(
        &self,
        store: &TenantStore,
        record: &RunRecord,
        link: &ChainLink,
        input: String,
    ) -> Result<Started, RunError> {
        let tenant = store.tenant();
        let what = format!("the continue-as-new input of run `{}`", record.run_id);
        self.check_input(tenant, &what, &input)?;
        let next = generation_id(link)?;
        match self.records(tenant, &next).run().await? {
            Some(existing) if existing.chain.as_ref() != Some(link) => {
                return Err(ContinuationError::Taken {
                    run: record.run_id.clone(),
                    next,
                }
                .into());
            }
            // Admitted when it was created.
            Some(_) => {}
            None => {
                // The generation ending makes way for this one: none is
                // counted active.
                match self.admit(tenant, 0).await {
                    Ok(()) => {}
                    Err(RunError::Refused(refusal)) => {
                        return refusal.retry_after().map(Started::Refused).ok_or(refusal.into());
                    }
                    Err(e) => return Err(e),
                }
                let submission = self.next_submission(store, record, link, &next, input).await?;
                self.create(tenant, submission).await?;
            }
        }
        self.advance_pointer(store, link, &next).await?;
        Ok(Started::Run(next))
    }

    /// `record`'s run as it starts again, as generation `link` with id
    /// `next`, on `input`.
    async fn next_submission(
        &self,
        store: &TenantStore,
        record: &RunRecord,
        link: &ChainLink,
        next: &RunId,
        input: String,
    ) -> Result<Submission, RunError> {
        let component = self.host.components.get(store, &record.component).await?;
        let mut links = BTreeMap::new();
        for (name, digest) in &record.links {
            links.insert(name.clone(), self.host.components.get(store, digest).await?);
        }
        let mut submission = Submission::new(component, &record.workflow, &input);
        submission.run_id = Some(next.clone());
        submission.links = links;
        submission.limits = record.limits;
        // A generation is at its chain's depth, below the same parent.
        submission.parent = record
            .parent
            .clone()
            .map(|parent| (parent, record.depth.saturating_sub(1)));
        submission.deadline = record
            .deadline_ms
            .map_or(Moment::Unset, |at| Moment::At(i64::try_from(at).unwrap_or(i64::MAX)));
        submission.notify = record.notify.clone();
        submission.tags = record.tags.clone();
        // In line where the run was; a generation with a concurrency key
        // queues for a place again, as the one before frees its own.
        submission.priority = record.priority.into();
        submission.concurrency = record.concurrency.clone();
        submission.chain = Some(link.clone());
        Ok(submission)
    }

    /// Points the chain at generation `link` (run `next`), unless it
    /// already names a newer one.
    async fn advance_pointer(&self, store: &TenantStore, link: &ChainLink, next: &RunId) -> Result<(), RunError> {
        if read_pointer(store, &link.root)
            .await?
            .is_some_and(|pointer| pointer.generation >= link.generation)
        {
            return Ok(());
        }
        let pointer = ChainPointer {
            generation: link.generation,
            run: next.clone(),
        };
        let key = chain_key(&link.root);
        Ok(store.overwrite(&key, Bytes::from(encode(&pointer))).await?)
    }

    /// The latest generation of the chain `run` belongs to: `run` itself
    /// unless it continued as new (or is a chain's root whose records
    /// retention deleted). An unknown run is returned as it is, for the
    /// caller to report.
    pub async fn latest_generation(&self, tenant: &TenantId, run: &RunId) -> Result<RunId, RunError> {
        let records = self.records(tenant, run);
        let store = records.store();
        let mut current = match records.outcome().await? {
            Some(Outcome::Continued { next }) => next,
            Some(_) => return Ok(run.clone()),
            None if records.run().await?.is_some() => return Ok(run.clone()),
            None => match read_pointer(store, run).await? {
                Some(pointer) => pointer.run,
                None => return Ok(run.clone()),
            },
        };
        if let Some((root, generation)) = parse_generation(&current)
            && let Some(pointer) = read_pointer(store, &root).await?
            && pointer.generation > generation
        {
            current = pointer.run;
        }
        for _ in 0..MAX_CHAIN_HOPS {
            match self.records(tenant, &current).outcome().await? {
                Some(Outcome::Continued { next }) => current = next,
                _ => return Ok(current),
            }
        }
        Err(ContinuationError::Unresolved {
            run: run.clone(),
            hops: MAX_CHAIN_HOPS,
        }
        .into())
    }

    /// Drives a run and, each time it continues as new, its next
    /// generation, until the chain ends or would wait longer than
    /// `detach_after`: what a process driving runs in the foreground (the
    /// CLI) needs. Returns the generation it stopped at, and how.
    pub async fn run_chain_to_end(
        &self,
        tenant: &TenantId,
        run: &RunId,
        detach_after: Option<Duration>,
    ) -> Result<(RunId, Progress), RunError> {
        let mut current = run.clone();
        loop {
            match self.run_to_end(tenant, &current, detach_after).await? {
                Progress::Finished(Outcome::Continued { next }) => current = next,
                progress => return Ok((current, progress)),
            }
        }
    }

    /// Passes a cancellation that reached generation `records` after it
    /// started run `next` on to `next`, so the chain ends cancelled
    /// instead of going on. Its outcome is written by then, so a failure
    /// is only logged: cancelling the chain's id again reaches `next`.
    pub(super) async fn pass_on_cancellation(&self, records: &RunRecords, next: &RunId) {
        let passed = async {
            let Some(request) = records.cancel_request().await? else {
                return Ok(());
            };
            match self.cancel_tree_with(records.store().tenant(), next, request).await {
                Ok(()) | Err(RunError::Finished { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        };
        if let Err(e) = passed.await {
            tracing::warn!(%next, "cannot pass the run's cancellation on to its next generation; cancel the chain again: {e}");
        }
    }
}

/// The pointer of the chain that began with `root`, if it has one.
async fn read_pointer(store: &TenantStore, root: &RunId) -> Result<Option<ChainPointer>, RunError> {
    let key = chain_key(root);
    let Some(bytes) = store.get(&key).await? else {
        return Ok(None);
    };
    decode(&bytes).map(Some).map_err(|reason| {
        JournalError::Corrupt {
            key: key.to_string(),
            reason,
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::CodeCache;
    use crate::config::HostConfig;
    use crate::runtime::Runtime;
    use crate::store::Storage;

    fn id(text: &str) -> RunId {
        RunId::new(text).expect("a valid id")
    }

    #[test]
    fn generations_are_numbered_from_the_root_and_parse_back() {
        let root = RunRecord::example("poller", 1);
        let first = next_link(&root);
        assert_eq!((first.root.as_str(), first.generation), ("poller", 1));
        let first_id = generation_id(&first).expect("fits");
        assert_eq!(first_id.as_str(), "poller.g1");
        let second = next_link(&RunRecord {
            chain: Some(first.clone()),
            ..RunRecord::example("poller.g1", 1)
        });
        assert_eq!(
            second,
            ChainLink {
                root: id("poller"),
                generation: 2,
                previous: first_id
            }
        );
        assert_eq!(parse_generation(&id("poller.g2")), Some((id("poller"), 2)));
        assert_eq!(parse_generation(&id("a.g5.g12")), Some((id("a.g5"), 12)));
    }

    #[test]
    fn ids_that_are_no_generation_do_not_parse() {
        for other in [
            "poller",
            "poller.3",
            "poller.g",
            "poller.g01",
            "poller.gx",
            "poller.g3x",
        ] {
            assert_eq!(parse_generation(&id(other)), None, "{other}");
        }
    }

    #[test]
    fn a_root_id_at_the_length_limit_cannot_continue_and_says_so() {
        let longest = "r".repeat(128);
        let link = next_link(&RunRecord::example(&longest, 1));
        let refused = generation_id(&link).expect_err("no room for the suffix");
        assert!(
            matches!(
                &refused,
                ContinuationError::IdTooLong {
                    generation: 1,
                    limit: 128,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert!(refused.to_string().contains("shorter ids"), "{refused}");
        let fits = "r".repeat(125);
        assert_eq!(
            generation_id(&next_link(&RunRecord::example(&fits, 1)))
                .map(|id| id.as_str().len())
                .ok(),
            Some(128)
        );
    }

    /// A chain of `generations` runs, each continued as the next, its
    /// pointer at `pointer`'s generation.
    async fn chain(runtime: &Runtime, generations: u64, pointer: u64) -> Result<Vec<RunId>, RunError> {
        let tenant = TenantId::default_tenant();
        let store = runtime.runs().host.storage.tenant(&tenant);
        let mut record = RunRecord::example("entity", 1);
        let mut ids = vec![record.run_id.clone()];
        for _ in 1..generations {
            let link = next_link(&record);
            let next = generation_id(&link)?;
            let records = runtime.runs().records(&tenant, &record.run_id);
            records.create_run(&record).await?;
            records.finish(&Outcome::Continued { next: next.clone() }).await?;
            records.unlist(1).await;
            if link.generation <= pointer {
                runtime.runs().advance_pointer(&store, &link, &next).await?;
            }
            record = RunRecord {
                chain: Some(link),
                ..RunRecord::example(next.as_str(), 1)
            };
            ids.push(next);
        }
        runtime
            .runs()
            .records(&tenant, &record.run_id)
            .create_run(&record)
            .await?;
        Ok(ids)
    }

    fn runtime() -> Runtime {
        Runtime::new(HostConfig::new(), Storage::in_memory(), CodeCache::disabled()).expect("a runtime")
    }

    #[tokio::test]
    async fn any_id_of_a_chain_resolves_to_its_latest_generation_past_a_lagging_pointer() -> Result<(), RunError> {
        let runtime = runtime();
        let tenant = TenantId::default_tenant();
        let ids = chain(&runtime, 6, 3).await?;
        let latest = ids.last().expect("a chain");
        assert_eq!(latest.as_str(), "entity.g5");
        for run in &ids {
            assert_eq!(
                &runtime.runs().latest_generation(&tenant, run).await?,
                latest,
                "from {run}"
            );
        }
        let unknown = id("nobody");
        assert_eq!(runtime.runs().latest_generation(&tenant, &unknown).await?, unknown);
        Ok(())
    }

    #[tokio::test]
    async fn retention_keeps_the_pointer_while_the_chain_goes_on_and_sweeps_it_with_its_end() -> Result<(), RunError> {
        let runtime = runtime();
        let tenant = TenantId::default_tenant();
        let store = runtime.runs().host.storage.tenant(&tenant);
        let ids = chain(&runtime, 4, 3).await?;
        let (root, latest) = (&ids[0], &ids[3]);
        let hour = Duration::from_secs(3600);
        assert_eq!(
            runtime.retention().sweep(&tenant, hour).await?.runs,
            3,
            "the generations that continued"
        );
        assert!(
            runtime.runs().records(&tenant, root).run().await?.is_none(),
            "the root's records are gone"
        );
        assert_eq!(&runtime.runs().latest_generation(&tenant, root).await?, latest);
        assert_eq!(&runtime.status(&tenant, root).await?.run_id, latest);
        let records = runtime.runs().records(&tenant, latest);
        records.finish(&Outcome::Completed { output: "1".into() }).await?;
        records.unlist(1).await;
        assert_eq!(runtime.retention().sweep(&tenant, hour).await?.runs, 1);
        assert!(
            read_pointer(&store, root).await?.is_none(),
            "the chain's end took its pointer"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_pointer_never_moves_back_to_an_older_generation() -> Result<(), RunError> {
        let runtime = runtime();
        let store = runtime.runs().host.storage.tenant(&TenantId::default_tenant());
        let root = RunRecord::example("entity", 1);
        let mut third = next_link(&root);
        third.generation = 3;
        runtime.runs().advance_pointer(&store, &third, &id("entity.g3")).await?;
        runtime
            .runs()
            .advance_pointer(&store, &next_link(&root), &id("entity.g1"))
            .await?;
        let pointer = read_pointer(&store, &id("entity")).await?.expect("written");
        assert_eq!((pointer.generation, pointer.run), (3, id("entity.g3")));
        Ok(())
    }

    #[tokio::test]
    async fn a_chain_longer_than_the_hops_past_its_pointer_is_an_error_naming_the_run() -> Result<(), RunError> {
        let runtime = runtime();
        let tenant = TenantId::default_tenant();
        let generations = MAX_CHAIN_HOPS as u64 + 3;
        let ids = chain(&runtime, generations, 0).await?;
        let refused = runtime
            .runs()
            .latest_generation(&tenant, &ids[0])
            .await
            .expect_err("too far");
        assert!(
            matches!(&refused, RunError::Continuation(ContinuationError::Unresolved { run, .. }) if run == &ids[0]),
            "{refused:?}"
        );
        // From a generation within reach of the end, it resolves.
        let near = &ids[ids.len() - 3];
        assert_eq!(
            runtime.runs().latest_generation(&tenant, near).await?,
            ids[ids.len() - 1]
        );
        Ok(())
    }
}
