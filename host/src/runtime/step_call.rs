//! Running one step call for real: attempts in fresh sandboxes, under the
//! call's retry policy, with every failed attempt journaled so a crash
//! mid-retry resumes the count; then the entry that makes the result durable.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use super::clock::now_ms;
use super::retry::RetryPolicy;
use super::step_target::StepTarget;
use super::workflow::{StepDone, StepResult};
use crate::component::Loaded;
use crate::config::StepLimits;
use crate::contract::bindings::{StepError, StepErrorKind, StepOptions};
use crate::guest_log::LogBudget;
use crate::journal::{AttemptRecord, Call, Entry, Recorded, RunRecords};
use crate::runtime::Host;
use crate::sandbox::{Role, kind_name, run_attempt};

/// A step call the journal has no entry for.
pub struct StepCall {
    pub seq: u64,
    pub call: Call,
    /// The component and step name the call resolved to, or why none.
    pub target: StepTarget,
    pub input: String,
    pub options: StepOptions,
    /// The attempt limits: the tenant's, lowered by the call's options.
    pub limits: StepLimits,
    /// The run's log allowance, which its steps share.
    pub log: Arc<LogBudget>,
}

/// Runs `step` to its final result and journals it. The result is durable
/// before this returns: the workflow never acts on an unrecorded result.
pub async fn execute(host: Arc<Host>, records: RunRecords, step: StepCall) -> StepResult {
    let _in_flight = host.background.step_starting().await;
    let started_at_ms = now_ms();
    let (result, attempts) = match &step.target {
        Ok((component, name)) => attempt_until_done(&host, &records, &step, component, name).await?,
        Err(why) => (Err(unknown_step(&step.call.name, why)), 0),
    };
    let finished_at_ms = now_ms();
    tracing::info!(
        seq = step.seq,
        step = %step.call.name,
        attempts,
        duration_ms = finished_at_ms.saturating_sub(started_at_ms),
        outcome = match &result { Ok(_) => "ok", Err(e) => kind_name(e.kind) },
        "step finished"
    );
    let recorded = Recorded::Step { result: result.clone() };
    let entry = Entry {
        seq: step.seq,
        call: step.call,
        recorded,
        attempts,
        started_at_ms,
        finished_at_ms,
    };
    records.append(&entry).await.map_err(Arc::new)?;
    Ok(StepDone { result, finished_at_ms })
}

async fn attempt_until_done(
    host: &Host,
    records: &RunRecords,
    step: &StepCall,
    component: &Loaded,
    name: &str,
) -> Result<(Result<String, StepError>, u32), Arc<crate::journal::JournalError>> {
    let policy = RetryPolicy::from_options(&step.options);
    let program = match host.components.steps(component).await {
        Ok(program) => program,
        Err(e) => return Ok((Err(error(StepErrorKind::Trapped, e.to_string(), 0)), 0)),
    };
    let earlier = records.attempts(step.seq).await.map_err(Arc::new)?;
    let mut attempt = earlier.last().map_or(1, |failed| failed.attempt + 1);
    if let Some(failed) = earlier.last() {
        let resume_at = failed.failed_at_ms + policy.backoff(failed.attempt).as_millis() as u64;
        tokio::time::sleep(Duration::from_millis(resume_at.saturating_sub(now_ms()))).await;
    }
    loop {
        let span = tracing::info_span!("attempt", seq = step.seq, step = name, attempt);
        let _slot = host.components.engines().slot(Role::Step).await;
        let started = std::time::Instant::now();
        let running = host.metrics.attempt_running(records.store().tenant());
        let scratch = step.limits.scratch_dir.then_some(host.config.scratch_root.as_path());
        let report = run_attempt(
            &program,
            name,
            &step.input,
            attempt,
            &step.limits,
            step.log.clone(),
            scratch,
        )
        .instrument(span)
        .await;
        drop(running);
        let how = report
            .result
            .as_ref()
            .map_or_else(|failure| kind_name(failure.kind), |_| "ok");
        host.metrics
            .step_attempt(records.store().tenant(), how, started.elapsed(), report.fuel_used);
        let failure = match report.result {
            Ok(output) => return Ok((Ok(output), attempt)),
            Err(failure) => failure,
        };
        let error = error(failure.kind, failure.message, attempt);
        if failure.permanent || attempt >= policy.max_attempts {
            return Ok((Err(error), attempt));
        }
        let wait = policy.backoff(attempt);
        tracing::warn!(
            seq = step.seq,
            step = name,
            attempt,
            kind = kind_name(error.kind),
            "attempt failed: {}; retrying in {wait:?}",
            error.message
        );
        let record = AttemptRecord {
            attempt,
            error,
            failed_at_ms: now_ms(),
        };
        records.record_attempt(step.seq, &record).await.map_err(Arc::new)?;
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

fn error(kind: StepErrorKind, message: String, attempts: u32) -> StepError {
    StepError {
        kind,
        message,
        attempts,
    }
}

fn unknown_step(name: &str, why: &str) -> StepError {
    error(StepErrorKind::UnknownStep, format!("unknown step `{name}`: {why}"), 0)
}
