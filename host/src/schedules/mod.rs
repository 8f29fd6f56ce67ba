//! Cron schedules: a tenant's standing orders to start a run of a workflow
//! at every fire of a cron pattern (UTC), stored beside its runs, and the
//! loop a server fires them from.
//!
//! Invariants: the run a fire starts has the id `{schedule}-{fire time}`
//! (`nightly-20261224T180000Z`), and starting a run under an id that exists
//! returns that run, so however many hosts fire a schedule and however often
//! one restarts, a fire is at most one run. A schedule's [`ScheduleState`]
//! (how far it has fired, its last run, a buffered fire) is stored after
//! each fire, so a host coming up, or another one, goes on from there: fires
//! missed while no host ran are made up within the schedule's `catch_up`
//! window, at most [`MAX_CATCH_UP_FIRES`], each subject to its overlap policy.
//!
//! # Example
//!
//! ```no_run
//! # async fn example(runtime: stepstone::runtime::Runtime) -> Result<(), Box<dyn std::error::Error>> {
//! use stepstone::schedules::{NewSchedule, Overlap};
//! use stepstone::store::TenantId;
//!
//! let nightly = NewSchedule {
//!     name: "nightly".parse()?,
//!     component: "reports".parse()?,
//!     workflow: "summarise".parse()?,
//!     input: serde_json::json!({"days": 1}),
//!     cron: "0 2 * * *".into(),
//!     overlap: Overlap::Skip,
//!     catch_up: None,
//! };
//! let added = runtime.runs().add_schedule(&TenantId::default_tenant(), nightly).await?;
//! println!("next run at {:?}", added.next_fire);
//! # Ok(()) }
//! ```

mod cron;
mod firing;
mod state;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use utoipa::ToSchema;

pub use cron::{CronPattern, CronText, MAX_PATTERN_BYTES};
internal_use!(cron::fire_stamp);
pub(crate) use firing::fire_in_background;
pub use firing::{LATE_TOLERANCE, MAX_CATCH_UP_FIRES};
pub use state::{Fire, ScheduleState};

use crate::clock::{now_ms, rfc3339};
use crate::durations::DurationText;
use crate::journal::{decode, encode};
use crate::store::{
    ComponentName, RunId, ScheduleName, Storage, StoreError, StoreKey, TenantId, WorkflowName, schedule_key,
    schedules_key,
};

/// Schedules one tenant may hold.
pub const MAX_SCHEDULES: usize = 100;
/// Bytes of a schedule's input, below the payload quota: the schedule
/// holds it, and every firing and listing reads it. A larger input is
/// better kept where a step of the run reads it.
pub const MAX_SCHEDULE_INPUT_BYTES: usize = 1 << 20;
/// The longest catch-up window.
pub const MAX_CATCH_UP: Duration = Duration::from_secs(7 * 24 * 3600);
/// The catch-up window of a schedule that names none.
pub const DEFAULT_CATCH_UP: Duration = Duration::from_secs(3600);

/// What to do with a fire while the schedule's previous run is unfinished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Overlap {
    /// Drop the fire.
    #[default]
    Skip,
    /// Keep one fire, started once the previous run ends; drop others.
    BufferOne,
    /// Start it anyway, beside the previous run.
    Allow,
}

/// A schedule to add, as a client gives it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSchedule {
    /// 1 to 100 letters, digits, `-`, `_` or `.`; each run it starts is
    /// `{name}-{fire time}`, e.g. `nightly-20261224T020000Z`.
    #[schema(example = "nightly")]
    pub name: ScheduleName,
    /// A component name (each fire runs the build it points at then) or digest.
    #[schema(example = "reports")]
    pub component: ComponentName,
    /// One of the component's workflows.
    pub workflow: WorkflowName,
    /// Each run's input (any JSON).
    pub input: serde_json::Value,
    /// A cron pattern in UTC: five fields (`minute hour day month weekday`),
    /// six with seconds first, or seven with a year last; `@hourly`,
    /// `@daily` and the like too.
    #[schema(value_type = CronText)]
    pub cron: String,
    /// What a fire does while the schedule's previous run is unfinished; `skip` by default.
    #[serde(default)]
    pub overlap: Overlap,
    /// How far back fires missed while no host ran are made up (at most 10
    /// of them, the latest), e.g. `1h` (the default), `0s` for none, at most `7days`.
    #[schema(value_type = Option<DurationText>)]
    pub catch_up: Option<String>,
}

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// The tenant's name for it; its runs are `{name}-{fire time}`.
    pub name: ScheduleName,
    /// The component each fire runs: a name, resolved at the fire, or a digest.
    pub component: ComponentName,
    /// The component's workflow each run starts.
    pub workflow: String,
    /// The runs' input, JSON text.
    pub input: String,
    /// The cron pattern, in UTC, as the client gave it.
    pub cron: String,
    /// What a fire does while the previous run is unfinished.
    pub overlap: Overlap,
    /// How far back fires missed while no host ran are made up, in ms (0: none).
    pub catch_up_ms: u64,
    /// Whether firing is paused; what it would have fired meanwhile is not made up.
    pub paused: bool,
    /// When it was added, in ms since the Unix epoch; no fire before then is made up.
    pub created_at_ms: u64,
}

impl Schedule {
    /// Whether `other` orders the same runs (a second add of it is no change).
    fn same_order_as(&self, other: &Self) -> bool {
        fn order(s: &Schedule) -> (&ComponentName, &str, &str, &str, Overlap, u64) {
            (&s.component, &s.workflow, &s.input, &s.cron, s.overlap, s.catch_up_ms)
        }
        order(self) == order(other)
    }

    /// The run its fire at `fire_ms` starts.
    pub fn run_id(&self, fire_ms: u64) -> RunId {
        RunId::new(&format!("{}-{}", self.name, fire_stamp(fire_ms)))
            .expect("a schedule name and a fire stamp make a valid run id")
    }
}

/// A schedule as a client sees it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ScheduleView {
    /// The schedule's name; its runs are `{name}-{fire time}`.
    #[schema(value_type = String)]
    pub name: ScheduleName,
    /// The component each fire runs: a name, resolved at the fire, or a digest.
    #[schema(value_type = String)]
    pub component: ComponentName,
    /// The component's workflow each run starts.
    pub workflow: String,
    /// Each run's input.
    pub input: serde_json::Value,
    /// The cron pattern, in UTC, as the client gave it.
    pub cron: String,
    /// The pattern in words.
    pub description: String,
    /// What a fire does while the previous run is unfinished.
    pub overlap: Overlap,
    /// The catch-up window, e.g. `1h`.
    pub catch_up: String,
    /// Whether firing is paused; what it would have fired meanwhile is not made up.
    pub paused: bool,
    /// When it was added, in ms since the Unix epoch.
    pub created_at_ms: u64,
    /// When it fires next (RFC 3339), unless paused.
    pub next_fire: Option<String>,
    /// The run it started last.
    #[schema(value_type = Option<String>)]
    pub last_run: Option<RunId>,
    /// A fire waiting for the last run to end (`buffer-one`), RFC 3339.
    pub buffered_fire: Option<String>,
}

impl ScheduleView {
    fn of(schedule: Schedule, state: Option<ScheduleState>, now_ms: u64) -> Self {
        let state = state.unwrap_or_default();
        let pattern = CronPattern::parse(&schedule.cron, now_ms).ok();
        let next_fire = pattern
            .as_ref()
            .filter(|_| !schedule.paused)
            .and_then(|p| p.next_after(now_ms.max(state.fired_until_ms)))
            .map(rfc3339);
        let last_run = state.last_started_ms.map(|fire| schedule.run_id(fire));
        Self {
            description: pattern.map_or_else(|| "matches no time to come".into(), |p| p.describe()),
            input: serde_json::from_str(&schedule.input).unwrap_or(serde_json::Value::Null),
            catch_up: humantime::format_duration(Duration::from_millis(schedule.catch_up_ms)).to_string(),
            name: schedule.name,
            component: schedule.component,
            workflow: schedule.workflow,
            cron: schedule.cron,
            overlap: schedule.overlap,
            paused: schedule.paused,
            created_at_ms: schedule.created_at_ms,
            next_fire,
            last_run,
            buffered_fire: state.buffered_ms.map(rfc3339),
        }
    }
}

/// Why a schedule could not be added, changed or read.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The cron pattern does not parse, is too long or matches no time to come.
    #[error(
        "invalid cron pattern `{pattern}`: {reason}; write five fields (`minute hour day month weekday`, e.g. `0 2 * * *`) or six with seconds first"
    )]
    InvalidCron {
        /// The pattern as given, cut to [`MAX_PATTERN_BYTES`] characters.
        pattern: String,
        /// Why it was refused.
        reason: String,
    },
    /// The `catch_up` window is not a duration, or is over [`MAX_CATCH_UP`].
    #[error("invalid catch_up `{given}`: {reason}")]
    InvalidCatchUp {
        /// The window as given, cut to 64 characters.
        given: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A schedule of this name orders other runs: delete it first, or choose another name.
    #[error("schedule `{name}` exists and orders other runs: delete it first, or choose another name")]
    Exists {
        /// The name taken.
        name: ScheduleName,
    },
    /// The tenant holds [`MAX_SCHEDULES`] schedules already: delete one first.
    #[error("the tenant holds {limit} schedules, the limit: delete one first")]
    TooMany {
        /// Schedules one tenant may hold.
        limit: usize,
    },
    /// The tenant has no schedule of this name.
    #[error("no schedule `{name}`: `stepstone schedule list` shows the schedules there are")]
    Unknown {
        /// The name asked for.
        name: ScheduleName,
    },
    /// A stored schedule record does not decode: delete the schedule and add it again.
    #[error("corrupt schedule record at {key}: {reason}; delete the schedule and add it again")]
    Corrupt {
        /// The store key of the record.
        key: String,
        /// What the decoder found wrong.
        reason: String,
    },
    /// The store failed; [`StoreError`] says whether asking again may help.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Reads a `catch_up` window: a duration up to [`MAX_CATCH_UP`].
pub fn catch_up_window(given: Option<&str>) -> Result<Duration, ScheduleError> {
    let Some(given) = given else {
        return Ok(DEFAULT_CATCH_UP);
    };
    let invalid = |reason: String| ScheduleError::InvalidCatchUp {
        given: given.chars().take(64).collect(),
        reason,
    };
    let window = crate::durations::parse(given)
        .ok_or_else(|| invalid("it is not a duration: write one such as `1h`, `0s` or `1h 30m`".into()))?;
    if window > MAX_CATCH_UP {
        return Err(invalid(format!(
            "it is over {}, the longest",
            humantime::format_duration(MAX_CATCH_UP)
        )));
    }
    Ok(window)
}

/// Every tenant's schedules, in the store; rings a bell on each change so
/// this host's firing loop sees it at once (others within
/// 10 seconds, `RELOAD_EVERY`).
#[derive(Clone)]
pub struct Schedules {
    storage: Storage,
    changed: Arc<Notify>,
}

impl Schedules {
    /// The schedules kept in `storage`; clones share one change bell.
    pub fn new(storage: Storage) -> Self {
        Self {
            storage,
            changed: Arc::default(),
        }
    }

    /// Stores `schedule`, unless the tenant has one of its name: adding the
    /// same order again answers the one stored; another order is refused.
    pub async fn add(&self, tenant: &TenantId, schedule: Schedule) -> Result<ScheduleView, ScheduleError> {
        let store = self.storage.tenant(tenant);
        let key = schedule_key(&schedule.name, "spec");
        if store.get(&key).await?.is_none() && store.children(&schedules_key()).await?.len() >= MAX_SCHEDULES {
            return Err(ScheduleError::TooMany { limit: MAX_SCHEDULES });
        }
        let stored = match store.create(&key, Bytes::from(encode(&schedule))).await {
            Ok(()) => schedule,
            Err(StoreError::AlreadyExists { .. }) => {
                let existing = self.spec(tenant, &schedule.name).await?;
                if !existing.same_order_as(&schedule) {
                    return Err(ScheduleError::Exists { name: schedule.name });
                }
                existing
            }
            Err(e) => return Err(e.into()),
        };
        self.changed.notify_one();
        let state = self.state(tenant, &stored.name).await?;
        Ok(ScheduleView::of(stored, state, now_ms()))
    }

    /// The tenant's schedule `name`.
    pub async fn get(&self, tenant: &TenantId, name: &ScheduleName) -> Result<ScheduleView, ScheduleError> {
        let (schedule, state) = futures::try_join!(self.spec(tenant, name), self.state(tenant, name))?;
        Ok(ScheduleView::of(schedule, state, now_ms()))
    }

    /// Every schedule of the tenant, by name.
    pub async fn list(&self, tenant: &TenantId) -> Result<Vec<ScheduleView>, ScheduleError> {
        let store = self.storage.tenant(tenant);
        let mut views = Vec::new();
        for name in store.children(&schedules_key()).await? {
            let Ok(name) = ScheduleName::new(&name) else { continue };
            match self.get(tenant, &name).await {
                Ok(view) => views.push(view),
                // Deleted between the listing and the read.
                Err(ScheduleError::Unknown { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(views)
    }

    /// Pauses the schedule, or resumes it. A resumed schedule fires from
    /// now on: what it would have fired while paused is not made up.
    pub async fn set_paused(
        &self,
        tenant: &TenantId,
        name: &ScheduleName,
        paused: bool,
    ) -> Result<ScheduleView, ScheduleError> {
        let store = self.storage.tenant(tenant);
        let mut schedule = self.spec(tenant, name).await?;
        let mut state = self.state(tenant, name).await?.unwrap_or_default();
        if !paused {
            state.fired_until_ms = state.fired_until_ms.max(now_ms());
            self.write_state(tenant, name, &state).await?;
        }
        schedule.paused = paused;
        store
            .overwrite(&schedule_key(name, "spec"), Bytes::from(encode(&schedule)))
            .await?;
        self.changed.notify_one();
        Ok(ScheduleView::of(schedule, Some(state), now_ms()))
    }

    /// Deletes the schedule (the runs it started stay); `false` if there was none.
    pub async fn delete(&self, tenant: &TenantId, name: &ScheduleName) -> Result<bool, ScheduleError> {
        let store = self.storage.tenant(tenant);
        let spec = schedule_key(name, "spec");
        if store.get(&spec).await?.is_none() {
            return Ok(false);
        }
        store.delete(&spec).await?;
        store.delete(&schedule_key(name, "state")).await?;
        self.changed.notify_one();
        Ok(true)
    }

    async fn spec(&self, tenant: &TenantId, name: &ScheduleName) -> Result<Schedule, ScheduleError> {
        self.read(tenant, &schedule_key(name, "spec"))
            .await?
            .ok_or_else(|| ScheduleError::Unknown { name: name.clone() })
    }

    async fn state(&self, tenant: &TenantId, name: &ScheduleName) -> Result<Option<ScheduleState>, ScheduleError> {
        self.read(tenant, &schedule_key(name, "state")).await
    }

    async fn write_state(
        &self,
        tenant: &TenantId,
        name: &ScheduleName,
        state: &ScheduleState,
    ) -> Result<(), ScheduleError> {
        let store = self.storage.tenant(tenant);
        Ok(store
            .overwrite(&schedule_key(name, "state"), Bytes::from(encode(state)))
            .await?)
    }

    async fn read<R: serde::de::DeserializeOwned>(
        &self,
        tenant: &TenantId,
        key: &StoreKey,
    ) -> Result<Option<R>, ScheduleError> {
        let Some(bytes) = self.storage.tenant(tenant).get(key).await? else {
            return Ok(None);
        };
        decode(&bytes).map(Some).map_err(|reason| ScheduleError::Corrupt {
            key: key.to_string(),
            reason,
        })
    }

    /// The version of each schedule's spec and state, by name: what the
    /// firing loop reads again when it changed.
    async fn versions(&self, tenant: &TenantId) -> Result<BTreeMap<ScheduleName, Versions>, ScheduleError> {
        let mut versions = BTreeMap::<ScheduleName, Versions>::new();
        for (key, version) in self.storage.tenant(tenant).versions(&schedules_key()).await? {
            let parts: Vec<_> = key.parts().collect();
            let [_, name, part] = parts.as_slice() else { continue };
            let Ok(name) = ScheduleName::new(name.as_ref()) else {
                continue;
            };
            let entry = versions.entry(name).or_default();
            match part.as_ref() {
                "spec" => entry.spec = Some(version),
                "state" => entry.state = Some(version),
                _ => {}
            }
        }
        versions.retain(|_, v| v.spec.is_some());
        Ok(versions)
    }
}

#[derive(Default)]
struct Versions {
    spec: Option<String>,
    state: Option<String>,
}
