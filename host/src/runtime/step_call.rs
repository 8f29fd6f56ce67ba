//! Running one step call for real: attempts in fresh sandboxes, under the
//! call's retry policy, with every failed attempt journaled so a crash
//! mid-retry resumes the count; then the entry that makes the result durable.
//! A call sees its host only as a [`StepHost`].

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use super::DayUsage;
use super::control::RunControl;
use super::retry::RetryPolicy;
use super::stand_in::{AttemptCall, StandIn, taking};
use super::step_host::StepHost;
use super::step_target::StepTarget;
use super::workflow::{StepDone, StepResult, StepUnfinished};
use crate::clock::{millis, now_ms};
use crate::config::StepLimits;
use crate::contract::bindings::{StepError, StepErrorKind, StepOptions};
use crate::egress::Outbound;
use crate::guest_log::{Level, LogWriter, RunLog};
use crate::journal::{AttemptRecord, Call, Entry, Recorded, RunRecords};
use crate::sandbox::{AttemptFailure, Reach, Role, Serving, StepProgram, checked_output, kind_name, run_attempt};
use crate::secrets::OpenedSecrets;
use crate::telemetry::spans;

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
    /// The run's log, which its steps share.
    pub log: Arc<RunLog>,
    /// The origins the step's HTTP requests may go to: its tenant's.
    pub outbound: Arc<Outbound>,
    /// Its tenant's secrets.
    pub secrets: Arc<OpenedSecrets>,
    /// Whether failed attempts of this call were recorded before (by an
    /// earlier execution), so their count and backoff must be resumed.
    pub resumes_attempts: bool,
    /// Its run's priority, which places its attempts in line for a slot.
    pub priority: u8,
    /// How its run is reached: a paused run starts no attempt.
    pub control: Arc<RunControl>,
}

/// Runs `step` to its final result and journals it. The result is durable
/// before this returns: the workflow never acts on an unrecorded result.
/// A step that outlived the execution that started it stores the log lines
/// it wrote since then.
pub async fn execute(host: Arc<StepHost>, records: RunRecords, step: StepCall) -> StepResult {
    let span = spans::step_call(records.store().tenant(), records.run_id(), step.seq, &step.call.name);
    let ending = spans::Ending::of(&span);
    let done = journaled_result(host, records, step).instrument(span.clone()).await;
    match &done {
        Ok(StepDone { result: Ok(_), .. }) => ending.ended("ok", None),
        Ok(StepDone { result: Err(e), .. }) => ending.ended(kind_name(e.kind), Some(&e.message)),
        Err(StepUnfinished::RetryAt(_)) => ending.ended("retry-later", None),
        Err(StepUnfinished::Journal(e)) => ending.ended("stopped", Some(e)),
    }
    done
}

/// The attempts of `step` until one is final, then its journal entry.
async fn journaled_result(host: Arc<StepHost>, records: RunRecords, step: StepCall) -> StepResult {
    let _in_flight = host.in_flight.starting().await;
    let result = journaled(&host, &records, &step).await;
    if step.log.is_closed() {
        super::logs::store(&records, &step.log).await;
    }
    result
}

async fn journaled(host: &StepHost, records: &RunRecords, step: &StepCall) -> StepResult {
    let started_at_ms = now_ms();
    let Attempted {
        result,
        attempts,
        last_started_at_ms,
    } = attempt_until_done(host, records, step).await?;
    let finished_at_ms = now_ms();
    tracing::info!(
        seq = step.seq,
        step = %step.call.name,
        attempts,
        duration_ms = finished_at_ms.saturating_sub(started_at_ms),
        outcome = match &result { Ok(_) => "ok", Err(e) => kind_name(e.kind) },
        "step finished"
    );
    if let Err(error) = &result {
        let failure = format!(
            "step `{}` failed after {attempts} attempts ({}): {}",
            step.call.name,
            kind_name(error.kind),
            error.message
        );
        LogWriter::step(step.log.clone(), step.seq, &step.call.name, attempts).host(Level::Error, failure);
    }
    let recorded = Recorded::Step {
        result: match &result {
            Ok(output) => Ok(records
                .payload(output.clone(), host.offload_payloads_above)
                .await
                .map_err(journal)?),
            Err(error) => Err(error.clone()),
        },
    };
    let entry = Entry {
        seq: step.seq,
        call: step.call.clone(),
        recorded,
        attempts,
        started_at_ms,
        finished_at_ms,
        last_attempt_started_at_ms: (attempts > 1).then_some(last_started_at_ms),
    };
    records.append_step(&entry).await.map_err(journal)?;
    Ok(StepDone { result, finished_at_ms })
}

/// How a step call ended: its final result, the attempts it took, and when
/// the last one began.
struct Attempted {
    result: Result<String, StepError>,
    attempts: u32,
    last_started_at_ms: u64,
}

async fn attempt_until_done(
    host: &StepHost,
    records: &RunRecords,
    step: &StepCall,
) -> Result<Attempted, StepUnfinished> {
    let policy = RetryPolicy::from_options(&step.options, &step.limits.retry);
    let earlier = if step.resumes_attempts {
        records.attempts(step.seq).await.map_err(journal)?
    } else {
        Vec::new()
    };
    let mut attempt = earlier.last().map_or(1, |failed| failed.attempt + 1);
    if let Some(failed) = earlier.last() {
        let resume_at = policy.next_attempt_at_ms(failed.failed_at_ms, failed.attempt);
        wait_for_retry(host, resume_at).await?;
    }
    // The real step, loaded for its first attempt that a stand-in leaves to it.
    let mut real: Option<RealStep> = None;
    loop {
        if step.control.is_paused() {
            tracing::info!(seq = step.seq, step = %step.call.name, attempt, "the run is paused: the attempt waits for its resumption");
            step.control.unpaused().await;
        }
        // A host that lost its claim starts no attempt: another may run it.
        records.check_claim().map_err(journal)?;
        let started_at_ms = now_ms();
        let ended = |result, attempts| Attempted {
            result,
            attempts,
            last_started_at_ms: started_at_ms,
        };
        let stand_in = match &host.stand_in {
            // A stand-in's answer is the attempt: the claim is confirmed
            // before it is asked, as before a real attempt starts.
            Some(stand_in) => {
                records.confirm_start(step.seq).await.map_err(journal)?;
                stand_in.attempt(&AttemptCall {
                    run: records.run_id().as_str(),
                    step: &step.call.name,
                    seq: step.seq,
                    input: &step.input,
                    attempt,
                    fencing_token: records.epoch(),
                })
            }
            None => StandIn::real(),
        };
        let result = match stand_in.answer {
            Some(answer) => {
                taking(stand_in.takes).await;
                answer.and_then(|output| checked_output(output, &step.limits))
            }
            None => {
                let real = match &mut real {
                    Some(real) => real,
                    None => match RealStep::load(host, step).await {
                        Ok(loaded) => real.insert(loaded),
                        Err(unreachable) => return Ok(ended(Err(unreachable), attempt - 1)),
                    },
                };
                let result = real.attempt(host, records, step, attempt).await?;
                taking(stand_in.takes).await;
                result
            }
        };
        let failure = match result {
            Ok(output) => return Ok(ended(Ok(output), attempt)),
            Err(failure) => failure,
        };
        let error = error(failure.kind, failure.message, attempt);
        if failure.permanent || attempt >= policy.max_attempts {
            return Ok(ended(Err(with_cap(error, &policy, &step.options)), attempt));
        }
        let wait = policy.backoff(attempt);
        tracing::warn!(
            seq = step.seq,
            step = %step.call.name,
            attempt,
            kind = kind_name(error.kind),
            retry_in_ms = millis(wait),
            "attempt failed: {}; retrying",
            error.message
        );
        let failed = format!(
            "attempt {attempt} failed ({}): {}; retrying in {wait:?}",
            kind_name(error.kind),
            error.message
        );
        LogWriter::step(step.log.clone(), step.seq, &step.call.name, attempt).host(Level::Warn, failed);
        let record = AttemptRecord {
            attempt,
            error,
            started_at_ms,
            failed_at_ms: now_ms(),
        };
        records.record_attempt(step.seq, &record).await.map_err(journal)?;
        wait_for_retry(host, policy.next_attempt_at_ms(record.failed_at_ms, attempt)).await?;
        attempt += 1;
    }
}

/// The step a call resolved to, compiled for attempts.
struct RealStep {
    program: Arc<StepProgram>,
    name: String,
}

impl RealStep {
    /// The step `step` calls, or the final error of a call whose step is
    /// unknown or cannot be compiled.
    async fn load(host: &StepHost, step: &StepCall) -> Result<Self, StepError> {
        let (component, name) = step.target.as_ref().map_err(|why| unknown_step(&step.call.name, why))?;
        let program = host
            .components
            .steps(component)
            .await
            .map_err(|e| error(StepErrorKind::Trapped, e.to_string(), 0))?;
        Ok(Self {
            program,
            name: name.clone(),
        })
    }

    /// Runs attempt number `attempt` in a fresh sandbox, in an instance
    /// slot held for the attempt only, and counts what it used. Once its
    /// waits are over (the fuel of the day, a slot), the claim on the run
    /// is confirmed against the store: a host that lost it meanwhile starts
    /// nothing.
    async fn attempt(
        &self,
        host: &StepHost,
        records: &RunRecords,
        step: &StepCall,
        attempt: u32,
    ) -> Result<Result<String, AttemptFailure>, StepUnfinished> {
        let tenant = records.store().tenant();
        let span = tracing::info_span!(
            "attempt",
            seq = spans::int(step.seq),
            step = %self.name,
            attempt = i64::from(attempt)
        );
        spans::attempt_started(&span, tenant, records.run_id());
        let ending = spans::Ending::of(&span);
        // No slot is held through a wait for the next day's fuel.
        host.usage.await_fuel(tenant).await;
        let slot = host.components.engines().slot(Role::Step, tenant, step.priority).await;
        records.confirm_start(step.seq).await.map_err(journal)?;
        let started = std::time::Instant::now();
        let running = host.metrics.attempt_running(tenant);
        let reach = Reach {
            log: step.log.clone(),
            scratch_root: step.limits.scratch_dir.then_some(host.scratch_root.as_path()),
            egress: host.egress.clone(),
            outbound: step.outbound.clone(),
            secrets: step.secrets.clone(),
            serving: Serving {
                tenant: tenant.to_string(),
                run: records.run_id().to_string(),
                seq: step.seq,
                step: step.call.name.clone(),
                epoch: records.epoch(),
            },
        };
        let report = run_attempt(&self.program, &self.name, &step.input, attempt, &step.limits, reach)
            .instrument(span.clone())
            .await;
        drop((running, slot));
        let (how, failure) = match &report.result {
            Ok(_) => ("ok", None),
            Err(failure) => (
                kind_name(failure.kind),
                Some(&failure.message as &dyn std::fmt::Display),
            ),
        };
        spans::attempt_usage(&span, report.fuel_used, report.memory_bytes);
        ending.ended(how, failure);
        host.metrics
            .step_attempt(tenant, &step.call.name, how, started.elapsed(), report.fuel_used);
        host.metrics.http(tenant, &report.http);
        let used = DayUsage {
            fuel: report.fuel_used,
            step_attempts: 1,
            outbound_requests: report.http.requests.load(std::sync::atomic::Ordering::Relaxed),
            ..DayUsage::default()
        };
        host.usage.count(tenant, used);
        Ok(report.result)
    }
}

/// Waits until `retry_at_ms` for the next attempt, in this task if the
/// wait is short; a longer one ends the call unfinished, to be retried when
/// the run is executed again after that time (the failed attempts are
/// recorded), so no task or instance waits through a long backoff.
async fn wait_for_retry(host: &StepHost, retry_at_ms: u64) -> Result<(), StepUnfinished> {
    let wait = Duration::from_millis(retry_at_ms.saturating_sub(now_ms()));
    if wait > host.eviction_threshold {
        return Err(StepUnfinished::RetryAt(retry_at_ms));
    }
    tokio::time::sleep(wait).await;
    Ok(())
}

fn journal(error: crate::journal::JournalError) -> StepUnfinished {
    StepUnfinished::Journal(Arc::new(error))
}

fn error(kind: StepErrorKind, message: String, attempts: u32) -> StepError {
    StepError {
        kind,
        message,
        attempts,
    }
}

/// A final failure that stopped at the host's attempt cap rather than at
/// the call's own `max-attempts` says so.
fn with_cap(mut error: StepError, policy: &RetryPolicy, options: &StepOptions) -> StepError {
    if options.max_attempts.is_some_and(|asked| asked > policy.max_attempts) {
        error.message = format!(
            "{} (stopped after {} attempts, the host's limit; the call asked for {})",
            error.message,
            policy.max_attempts,
            options.max_attempts.unwrap_or_default()
        );
    }
    error
}

fn unknown_step(name: &str, why: &str) -> StepError {
    error(StepErrorKind::UnknownStep, format!("unknown step `{name}`: {why}"), 0)
}
