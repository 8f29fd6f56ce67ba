//! Getting work in: validating and storing components, submitting runs and
//! adding schedules — checked whole before anything is stored, idempotent
//! on the run id and the schedule name.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::moment::{DEADLINE, Moment, START};
use super::{RunError, Runs};
use crate::clock::now_ms;
use crate::clock::rfc3339;
use crate::component::Loaded;
use crate::config::LimitRequest;
use crate::journal::ledger::ListedRun;
use crate::journal::{
    ConcurrencyLimit, DEFAULT_PRIORITY, FIRST_PRIORITY, JournalError, LAST_PRIORITY, Payload, RunRecord, RunRecords,
    Vacancy, digest, incarnations,
};
use crate::schedules::{CronPattern, MAX_SCHEDULE_INPUT_BYTES, NewSchedule, Schedule, ScheduleView, catch_up_window};
use crate::store::{ConcurrencyKey, RunId, StoreError, TenantId};
use crate::task::{Seam, seam};
use crate::telemetry::spans;

/// A run to start.
pub struct Submission {
    /// The run's id, which makes submitting idempotent; `None` generates one.
    pub run_id: Option<RunId>,
    /// The workflow of `component` to run.
    pub workflow: String,
    /// The component the run executes.
    pub component: Arc<Loaded>,
    /// Components whose steps the run may call as `name/step`.
    pub links: BTreeMap<String, Arc<Loaded>>,
    /// The workflow's input, as JSON.
    pub input: String,
    /// Step limits for this run, below the tenant's.
    pub limits: LimitRequest,
    /// The run starting this one as its child, and its depth.
    pub parent: Option<(RunId, u32)>,
    /// When the run starts.
    pub start_at: Moment,
    /// When it must have ended (a duration counts from its start).
    pub deadline: Moment,
    /// A URL to POST the run's end to, signed.
    pub notify: Option<String>,
    /// Tags to search runs by.
    pub tags: Vec<crate::store::RunTag>,
    /// Its place in line when slots are scarce, [`FIRST_PRIORITY`] first.
    pub priority: u64,
    /// How many runs sharing its key may execute at once.
    pub concurrency: Option<ConcurrencyLimit>,
    /// The run's place in a chain, when it is a generation another run
    /// continued as (see `runtime::continuation`).
    pub chain: Option<crate::journal::ChainLink>,
    /// The run this one restarts, and from which seq (see
    /// `runtime::restart`).
    pub restarted_from: Option<crate::journal::RestartPoint>,
}

impl Submission {
    /// A run of `component`'s `workflow` on `input` (JSON), all else at its
    /// default: a generated id, starting now, no deadline, priority
    /// [`DEFAULT_PRIORITY`], no concurrency limit.
    pub fn new(component: Arc<Loaded>, workflow: &str, input: &str) -> Self {
        Self {
            run_id: None,
            workflow: workflow.into(),
            component,
            links: BTreeMap::new(),
            input: input.into(),
            limits: LimitRequest::default(),
            parent: None,
            start_at: Moment::Unset,
            deadline: Moment::Unset,
            notify: None,
            tags: Vec::new(),
            priority: DEFAULT_PRIORITY.into(),
            concurrency: None,
            chain: None,
            restarted_from: None,
        }
    }

    /// Holds the run to `limit` runs of `key` at once; without a key, of its
    /// workflow (the default limit is 1: one at a time).
    pub fn limit_concurrency(&mut self, key: Option<ConcurrencyKey>, limit: Option<u64>) -> Result<(), RunError> {
        let key = match key {
            Some(key) => key,
            None => ConcurrencyKey::new(&self.workflow)?,
        };
        let asked = limit.unwrap_or(1);
        let limit = u32::try_from(asked)
            .ok()
            .filter(|limit| (1..=MAX_CONCURRENCY_LIMIT).contains(limit))
            .ok_or(RunError::ConcurrencyLimit {
                limit: asked,
                max: MAX_CONCURRENCY_LIMIT,
            })?;
        self.concurrency = Some(ConcurrencyLimit { key, limit });
        Ok(())
    }
}

/// The most runs of one concurrency key that may execute at once.
pub const MAX_CONCURRENCY_LIMIT: u32 = 1_000;

/// When a run submitted at `now_ms` starts (`None`: at once) and must have
/// ended; a deadline not after the start is refused.
fn run_times(submission: &Submission, now_ms: u64) -> Result<(Option<u64>, Option<u64>), RunError> {
    let start_at_ms = submission.start_at.resolve(START, now_ms)?.filter(|at| *at > now_ms);
    let starts = start_at_ms.unwrap_or(now_ms);
    let deadline_ms = submission.deadline.resolve(DEADLINE, starts)?;
    if let Some(deadline_ms) = deadline_ms.filter(|deadline| *deadline <= starts) {
        return Err(RunError::InvalidTime(format!(
            "the run's deadline, {}, is not after its start, {}: give it a later deadline or a timeout above 0",
            rfc3339(deadline_ms),
            rfc3339(starts)
        )));
    }
    Ok((start_at_ms, deadline_ms))
}

impl Runs {
    /// Starts a run and drives it on a background task: [`submit`](Self::submit),
    /// then [`drive_in_background`](Self::drive_in_background).
    pub async fn start(&self, tenant: &TenantId, submission: Submission) -> Result<RunId, RunError> {
        let run = self.submit(tenant, submission).await?;
        self.drive_in_background(tenant, &run);
        Ok(run)
    }

    /// Submits a run for the caller to drive: admits it within the tenant's
    /// quotas (see [`crate::policy`]), checks everything, then stores its
    /// run record. Submitting the same run id with the same workflow and
    /// input again returns the existing run; with another input it is
    /// refused.
    pub async fn submit(&self, tenant: &TenantId, submission: Submission) -> Result<RunId, RunError> {
        self.check_input(tenant, "the input", &submission.input)?;
        self.admit(tenant, self.active_runs(tenant)).await?;
        self.create(tenant, submission).await
    }

    /// Checks a submission and stores its run record: its input checked
    /// and the run admitted already.
    pub(super) async fn create(&self, tenant: &TenantId, submission: Submission) -> Result<RunId, RunError> {
        let component = &submission.component;
        if !component.has_workflow(&submission.workflow) {
            return Err(RunError::UnknownWorkflow {
                workflow: submission.workflow,
                digest: component.digest.clone(),
                available: component.manifest.workflows.join(", "),
            });
        }
        let store = self.host.storage.tenant(tenant);
        for loaded in std::iter::once(component).chain(submission.links.values()) {
            self.host.components.store(&store, loaded).await?;
        }
        let created_at_us = self.host.creation.next_us();
        let created_at_ms = created_at_us / 1_000;
        let (start_at_ms, deadline_ms) = run_times(&submission, created_at_ms)?;
        if let Some(url) = &submission.notify {
            self.host.hooks.check(tenant, url).await?;
        }
        let priority = u8::try_from(submission.priority)
            .ok()
            .filter(|priority| (FIRST_PRIORITY..=LAST_PRIORITY).contains(priority))
            .ok_or(RunError::Priority {
                priority: submission.priority,
            })?;
        if submission.tags.len() > super::MAX_TAGS {
            return Err(RunError::TooManyTags {
                count: submission.tags.len(),
                limit: super::MAX_TAGS,
            });
        }
        let chosen_id = submission.run_id.is_some();
        let run_id = submission.run_id.unwrap_or_else(RunId::generate);
        let records = RunRecords::new(store, run_id.clone());
        // The lease the record is created under: a host that loses it
        // before the record is stored (paused, cut off) stores none.
        let generation = self.live().await?;
        // A generated id is new; a chosen one may name a run that exists,
        // or one whose deletion left objects behind, or is under way.
        let new_run = !chosen_id || self.vacant(&records).await?;
        let input_digest = digest(submission.input.as_bytes());
        // Stored after what was left behind is deleted, before the run
        // record, which names it; not for a run there is, whose record
        // stands (a resubmission of it with another input must store
        // nothing, or each would leave an object behind).
        let input = match new_run {
            true => (records.payload(submission.input, self.host.config.offload_payloads_above)).await?,
            false => Payload::Inline(submission.input),
        };
        let mut record = RunRecord {
            run_id: run_id.clone(),
            workflow: submission.workflow,
            component: component.digest.clone(),
            links: submission
                .links
                .iter()
                .map(|(name, c)| (name.clone(), c.digest.clone()))
                .collect(),
            input_digest,
            input,
            created_at_ms,
            created_at_us: Some(created_at_us),
            limits: submission.limits,
            depth: submission
                .parent
                .as_ref()
                .map_or(0, |(_, depth)| depth.saturating_add(1)),
            parent: submission.parent.map(|(parent, _)| parent),
            host: Some(self.host.cluster.me().clone()),
            host_incarnation: Some(self.host.cluster.incarnation()),
            incarnation: 0,
            start_at_ms,
            deadline_ms,
            notify: submission.notify,
            tags: submission.tags,
            priority,
            concurrency: submission.concurrency,
            earlier_builds: Vec::new(),
            chain: submission.chain,
            restarted_from: submission.restarted_from,
            abandoned: None,
        };
        // A run there is is answered, never created again: whatever the
        // store holds by the time a record would land (the run deleted and
        // its id used again meanwhile), this submission read nothing of it.
        if !new_run {
            return self.answer_existing(&records, &record).await;
        }
        // Before the run record, and together (on object storage each is
        // a round trip; through the local store's log, one sync): the
        // outbox entry, so that a run with a URL always has its entry; the
        // run noted open and listed in the ledger (in a batch with the runs
        // submitted meanwhile); and, for a chosen id found free, which may
        // have been used before, its incarnation (read only now: see
        // `journal::incarnations`).
        let outbox = async {
            match &record.notify {
                Some(url) => self.host.hooks.enqueue(records.store(), &run_id, url).await,
                None => Ok(()),
            }
        };
        let listed =
            async { Ok::<_, RunError>(self.host.ledger.opened(records.store(), ListedRun::of(&record)).await?) };
        let incarnation = async {
            match chosen_id {
                true => Ok::<_, RunError>(incarnations::next(records.store()).await?),
                false => Ok(0),
            }
        };
        let ((), (), incarnation) = futures::try_join!(outbox, listed, incarnation)?;
        record.incarnation = incarnation;
        seam(Seam::BetweenLedgerNoteAndRecord).await;
        // The run's creator drives it first: it must be alive to others
        // before the run record names it, and asks just before, so that a
        // host stopping meanwhile names no run it then leaves undriven. One
        // that lost its lease since it read the store (it was paused, or
        // cut off) stores no record: what it read may be old, the run
        // created and deleted by another host meanwhile, and its note may
        // be judged a phantom (found by the simulation, seed 18: a host
        // stalled two hours while starting a child created it again, as an
        // incarnation another host's run had had).
        if self.live().await? != generation {
            return Err(RunError::Interrupted { run: run_id });
        }
        self.host.fresh.creating(tenant, &run_id);
        // A run that starts later reads its first fence when it starts.
        let created = match record.start_at_ms {
            Some(_) => records.create_record(&record).await.map(|()| None),
            None => records.create_record_fenced(&record).await,
        };
        match created {
            Ok(_) if chosen_id && self.landed_retired(&records, &record, generation).await? => {
                self.host.retention.take_back(records.store(), &record).await?;
                Err(RunError::Interrupted { run: run_id })
            }
            Ok(first_fence) => {
                let started = super::DayUsage {
                    runs: 1,
                    ..super::DayUsage::default()
                };
                self.host.usage.count(tenant, started);
                self.host
                    .cluster
                    .hold(tenant, &record, generation, record.first_epoch());
                self.join_line(records.store(), &record).await;
                self.host
                    .fresh
                    .created(tenant, super::fresh::Fresh { record, first_fence });
                spans::link_to_run(tenant, &run_id);
                Ok(run_id)
            }
            // Its note, another creation time than the run's, is passed
            // over by listings and noted ended by recovery.
            Err(JournalError::Store(StoreError::AlreadyExists { .. })) => self.answer_existing(&records, &record).await,
            Err(e) => Err(e.into()),
        }
    }

    /// Whether `record`, just created under a chosen id, landed after its
    /// incarnation was retired, and no host but its creator can have
    /// driven it (no claim of its incarnation stands): its creator lost
    /// its lease while storing it, and meanwhile a run of that incarnation
    /// came and went under the id, so the record would hand that run's
    /// epochs and idempotency keys on (found by the simulation, seed 6447:
    /// a host stalled 1.6 hours while creating a child, and the child's
    /// step ran again under them). The marks are the tenant's, not the
    /// id's, so a record another host has since taken over and driven is
    /// kept (seed 5002: a generation driven for seven minutes was taken
    /// back when its creator woke), and a live host reads no marks.
    async fn landed_retired(
        &self,
        records: &RunRecords,
        record: &RunRecord,
        generation: u64,
    ) -> Result<bool, RunError> {
        if self.host.cluster.held_since(generation) {
            return Ok(false);
        }
        let store = records.store();
        if incarnations::next(store).await? <= record.incarnation {
            return Ok(false);
        }
        let owner = self.host.cluster.owner(store, record).await?;
        Ok(owner.epoch == record.first_epoch())
    }

    /// What a submission of `record` answers when a run of its id is
    /// stored: that run, if it was submitted with the same workflow and
    /// input; refused otherwise. A run given up (a submission that stalled
    /// between its note and its record past `PHANTOM_AFTER`, never
    /// created) is swept now, and one deleted meanwhile, or being deleted,
    /// is gone: either way a submission again, once the id's hold has
    /// passed, creates it.
    async fn answer_existing(&self, records: &RunRecords, record: &RunRecord) -> Result<RunId, RunError> {
        let run = records.run_id().clone();
        let Some(existing) = records.stored_record().await? else {
            return Err(RunError::BeingDeleted { run });
        };
        if existing.abandoned.is_some() {
            self.host.retention.sweep_abandoned(records.store(), &existing).await?;
            return Err(RunError::BeingDeleted { run });
        }
        // A record under a deletion claim is a run being swept, or one a
        // copy of which landed late after a sweep or a take-back deleted
        // it: the sweep's end deletes it, so it answers no submission
        // (found by the simulation, seed 2003: a submission taken back
        // was sent again, found the record's late copy and was answered
        // as started; the run was gone at its first signal).
        if self.host.cluster.is_being_deleted(records.store(), &existing).await? {
            return Err(RunError::BeingDeleted { run });
        }
        // A run an upgrade moved is still the run started on its first build.
        let first_build = existing.earlier_builds.first().unwrap_or(&existing.component);
        let same = (
            &existing.workflow,
            first_build,
            &existing.input_digest,
            &existing.restarted_from,
        ) == (
            &record.workflow,
            &record.component,
            &record.input_digest,
            &record.restarted_from,
        );
        match same {
            true => Ok(run),
            false => Err(RunError::InputMismatch { run }),
        }
    }

    /// Whether a run may be created under the chosen id of `records`: none
    /// is stored; one is (`false`); or retention deleted the last one and
    /// holds the id a while (see `retention::LATE_WRITES_LAND_WITHIN`),
    /// refused until it is free (freed here, if its sweeper is gone and the
    /// while has passed).
    pub(super) async fn vacant(&self, records: &RunRecords) -> Result<bool, RunError> {
        match records.vacancy().await? {
            Vacancy::Taken => Ok(false),
            Vacancy::Free => Ok(true),
            Vacancy::Sweeping => match self.host.retention.free_if_left(records).await? {
                true => Ok(true),
                false => Err(RunError::BeingDeleted {
                    run: records.run_id().clone(),
                }),
            },
        }
    }

    /// Adds a cron schedule, checked whole first: its pattern fires, its
    /// component has its workflow, its input is JSON within the limit.
    /// Adding the same schedule again answers the one stored.
    pub async fn add_schedule(&self, tenant: &TenantId, new: NewSchedule) -> Result<ScheduleView, RunError> {
        let created_at_ms = now_ms();
        CronPattern::parse_new(&new.cron, created_at_ms)?;
        let catch_up = catch_up_window(new.catch_up.as_deref())?;
        let input = new.input.to_string();
        self.check_input(tenant, "the schedule's input", &input)?;
        if input.len() > MAX_SCHEDULE_INPUT_BYTES {
            return Err(RunError::TooLarge {
                what: "the schedule's input".into(),
                size: input.len(),
                limit: MAX_SCHEDULE_INPUT_BYTES,
            });
        }
        let component = self.host.catalog.component(tenant, new.component.as_str()).await?;
        if !component.has_workflow(new.workflow.as_str()) {
            return Err(RunError::UnknownWorkflow {
                workflow: new.workflow.into(),
                digest: component.digest.clone(),
                available: component.manifest.workflows.join(", "),
            });
        }
        let schedule = Schedule {
            name: new.name,
            component: new.component,
            workflow: new.workflow.into(),
            input,
            cron: new.cron,
            overlap: new.overlap,
            catch_up_ms: u64::try_from(catch_up.as_millis()).unwrap_or(u64::MAX),
            paused: false,
            created_at_ms,
        };
        Ok(self.host.schedules.add(tenant, schedule).await?)
    }

    pub(super) fn check_size(&self, what: &str, payload: &str) -> Result<(), RunError> {
        let limit = self.host.config.workflow.max_payload_bytes;
        if payload.len() > limit {
            return Err(RunError::TooLarge {
                what: what.into(),
                size: payload.len(),
                limit,
            });
        }
        Ok(())
    }

    /// Checks a payload `tenant` sends in: within its policy's size, and JSON.
    pub(super) fn check_input(&self, tenant: &TenantId, what: &str, payload: &str) -> Result<(), RunError> {
        self.policy(tenant).check_payload(what, payload.len())?;
        self.check_json(what, payload)
    }

    pub(super) fn check_json(&self, what: &str, payload: &str) -> Result<(), RunError> {
        self.check_size(what, payload)?;
        serde_json::from_str::<serde::de::IgnoredAny>(payload)
            .map(drop)
            .map_err(|e| RunError::InvalidJson {
                what: what.into(),
                reason: e.to_string(),
            })
    }
}
