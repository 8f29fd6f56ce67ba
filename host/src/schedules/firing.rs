//! The loop `stepstone serve` fires its tenants' schedules from. It keeps
//! each schedule and its state in memory, reads them again when the store's
//! copy changed (at once for a change made on this host, within
//! [`RELOAD_EVERY`] for another host's), and sleeps until the next fire.
//!
//! Every host sharing a store fires every schedule: the fire's run id makes
//! the second start return the first's run, and the hosts decide the same
//! fates from the same state, so the state they store agrees.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::{CronPattern, Fire, Overlap, Schedule, ScheduleName, ScheduleState, Schedules, Versions};
use crate::clock::now_ms;
use crate::runtime::{RunError, Runs, Submission};
use crate::store::TenantId;

/// Fires missed while no host ran that are made up, at most: the latest.
pub const MAX_CATCH_UP_FIRES: usize = 10;
/// A fire decided this late is late, not missed: no catch-up window drops it.
pub const LATE_TOLERANCE: Duration = Duration::from_secs(2);
/// How soon a change made on another host is seen.
pub(super) const RELOAD_EVERY: Duration = Duration::from_secs(10);
/// How often a buffered fire looks whether the run before it has ended.
const BUFFERED_POLL: Duration = Duration::from_secs(1);

/// A schedule as this host last read it.
struct Tracked {
    schedule: Schedule,
    pattern: CronPattern,
    spec_version: String,
    state: ScheduleState,
    /// `None` once this host wrote the state, so the next reload reads it.
    state_version: Option<String>,
}

/// Fires the schedules of the tenants `runs` serves from a background
/// task, for as long as the process lives: each fire starts its run through
/// `runs`, admitted like any other.
pub(crate) fn fire_in_background(runs: Runs) {
    crate::task::spawn(fire_forever(runs));
}

async fn fire_forever(runs: Runs) {
    let schedules = runs.schedules().clone();
    let mut served = runs.served_changes();
    let mut tenants: BTreeMap<TenantId, BTreeMap<ScheduleName, Tracked>> = BTreeMap::new();
    loop {
        let now_served = served.borrow_and_update().clone();
        tenants.retain(|tenant, _| now_served.contains(tenant));
        for tenant in now_served {
            tenants.entry(tenant).or_default();
        }
        for (tenant, tracked) in &mut tenants {
            if let Err(e) = reload(&schedules, tenant, tracked).await {
                tracing::warn!(%tenant, "cannot read the schedules; firing those read before: {e}");
            }
        }
        let reloaded_at = Instant::now();
        while reloaded_at.elapsed() < RELOAD_EVERY {
            let now = now_ms();
            for (tenant, tracked) in &mut tenants {
                for schedule in tracked.values_mut() {
                    if let Err(e) = fire_due(&runs, tenant, schedule, now).await {
                        let name = &schedule.schedule.name;
                        tracing::warn!(%tenant, schedule = %name, "cannot fire the schedule; trying again: {e}");
                    }
                }
            }
            let wake = next_wake(&tenants, now).min(RELOAD_EVERY.saturating_sub(reloaded_at.elapsed()));
            tokio::select! {
                () = tokio::time::sleep(wake) => {}
                () = schedules.changed.notified() => break,
                Ok(()) = served.changed() => break,
            }
        }
    }
}

/// Reads again the schedules whose spec or state changed in the store, and
/// forgets those deleted.
async fn reload(
    schedules: &Schedules,
    tenant: &TenantId,
    tracked: &mut BTreeMap<ScheduleName, Tracked>,
) -> Result<(), RunError> {
    let versions = schedules.versions(tenant).await?;
    tracked.retain(|name, _| versions.contains_key(name));
    for (name, Versions { spec, state }) in versions {
        let Some(spec) = spec else { continue };
        let known = tracked.get(&name);
        if known.is_none_or(|t| t.spec_version != spec) {
            let schedule = schedules.spec(tenant, &name).await?;
            let pattern = match CronPattern::parse(&schedule.cron, now_ms()) {
                Ok(pattern) => pattern,
                Err(e) => {
                    tracing::warn!(%tenant, schedule = %name, "the schedule fires no more: {e}");
                    tracked.remove(&name);
                    continue;
                }
            };
            let state = known.map(|t| t.state.clone()).unwrap_or_default();
            let t = Tracked {
                schedule,
                pattern,
                spec_version: spec,
                state,
                state_version: None,
            };
            tracked.insert(name.clone(), t);
        }
        let Some(t) = tracked.get_mut(&name) else { continue };
        if state.is_some() && t.state_version != state {
            if let Some(stored) = schedules.state(tenant, &name).await? {
                // Another host may be ahead of this one, never behind by more
                // than what this one decided alike.
                if stored.fired_until_ms >= t.state.fired_until_ms {
                    t.state = stored;
                }
            }
            t.state_version = state;
        }
    }
    Ok(())
}

/// Decides the schedule's fires due by `now_ms` (and a buffered one), starts
/// the runs of those to start, and stores the state after. A storage
/// failure leaves the state as it was, so the same fires are decided again.
async fn fire_due(runs: &Runs, tenant: &TenantId, tracked: &mut Tracked, now_ms: u64) -> Result<(), RunError> {
    let schedule = &tracked.schedule;
    if schedule.paused {
        return Ok(());
    }
    let window = schedule.catch_up_ms.saturating_add(LATE_TOLERANCE.as_millis() as u64);
    let after = tracked
        .state
        .fired_until_ms
        .max(schedule.created_at_ms)
        .max(now_ms.saturating_sub(window));
    let due = tracked.pattern.fires_between(after, now_ms, MAX_CATCH_UP_FIRES);
    if due.is_empty() && tracked.state.buffered_ms.is_none() {
        return Ok(());
    }
    let busy = match (schedule.overlap, tracked.state.last_started_ms) {
        (Overlap::Allow, _) | (_, None) => false,
        (_, Some(fire)) => runs.is_unfinished(tenant, &schedule.run_id(fire)).await?,
    };
    let (next, fates) = tracked.state.advance(schedule.overlap, busy, &due);
    if next == tracked.state {
        return Ok(());
    }
    for fate in fates {
        match fate {
            Fire::Start(fire) => start(runs, tenant, schedule, fire).await?,
            Fire::Buffer(fire) => {
                tracing::info!(%tenant, schedule = %schedule.name, fire, "the last run goes on: this fire waits for it");
                runs.metrics().schedule_fire(tenant, "buffered");
            }
            Fire::Skip(fire) => {
                tracing::info!(%tenant, schedule = %schedule.name, fire, "the last run goes on: this fire is skipped");
                runs.metrics().schedule_fire(tenant, "skipped");
            }
        }
    }
    runs.schedules().write_state(tenant, &schedule.name, &next).await?;
    tracked.state = next;
    tracked.state_version = None;
    Ok(())
}

/// Starts the run of the fire at `fire_ms`, or returns the one another host
/// started. Only a storage failure is an error: a fire the tenant's quotas
/// refuse, or whose component or workflow is gone, is logged and dropped.
async fn start(runs: &Runs, tenant: &TenantId, schedule: &Schedule, fire_ms: u64) -> Result<(), RunError> {
    let run = schedule.run_id(fire_ms);
    let started = async {
        let component = runs.catalog().component(tenant, schedule.component.as_str()).await?;
        let mut submission = Submission::new(component, &schedule.workflow, &schedule.input);
        submission.run_id = Some(run.clone());
        runs.start(tenant, submission).await
    };
    match started.await {
        Ok(run) => {
            tracing::info!(%tenant, schedule = %schedule.name, %run, "the schedule fired");
            runs.metrics().schedule_fire(tenant, "started");
            Ok(())
        }
        Err(e) if e.is_storage_failure() => Err(e),
        Err(e) => {
            tracing::warn!(%tenant, schedule = %schedule.name, %run, "the fire started no run: {e}");
            runs.metrics().schedule_fire(tenant, "refused");
            Ok(())
        }
    }
}

/// How long until some schedule has a fire (or a buffered fire to look at).
fn next_wake(tenants: &BTreeMap<TenantId, BTreeMap<ScheduleName, Tracked>>, now_ms: u64) -> Duration {
    let mut wake = RELOAD_EVERY;
    for tracked in tenants.values().flat_map(BTreeMap::values) {
        if tracked.schedule.paused {
            continue;
        }
        if tracked.state.buffered_ms.is_some() {
            wake = wake.min(BUFFERED_POLL);
        }
        if let Some(fire) = tracked.pattern.next_after(now_ms.max(tracked.state.fired_until_ms)) {
            wake = wake.min(Duration::from_millis(fire.saturating_sub(now_ms)));
        }
    }
    wake
}
