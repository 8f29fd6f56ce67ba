//! A run's journal as a timeline: each durable call as a bar on the run's
//! time axis (a step's bar split into its attempts), the call a run waits
//! in now, and the gaps in which no call was in progress.
//!
//! Invariant: built from the stored records only (entries, failed
//! attempts, the run's state), so it shows what a replay would read.

use std::collections::BTreeMap;

use maud::{Markup, html};

use super::layout;
use crate::journal::{AttemptRecord, Entry, Payload, Recorded};
use crate::runtime::RunState;
use crate::sandbox::kind_name;
use crate::store::RunId;

/// Idle time shorter than this between calls is the workflow's own work,
/// not a gap.
const GAP_MIN_MS: u64 = 100;
/// The width of the time axis, in SVG units.
const AXIS: f64 = 1000.0;
/// The narrowest bar drawn, so an instant call is still seen.
const MIN_BAR: f64 = 3.0;

/// One attempt of a step: when it ran, and why it failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub number: u32,
    pub start_ms: u64,
    pub end_ms: u64,
    pub error: Option<String>,
}

/// One durable call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub seq: u64,
    pub kind: String,
    pub name: String,
    pub start_ms: u64,
    pub end_ms: u64,
    pub attempts: Vec<Attempt>,
    /// What it returned, in a few words.
    pub summary: String,
    /// Whether it failed (a step's error, a refused child...).
    pub failed: bool,
    /// What it returned, in full (a payload, pretty-printed).
    pub payload: Option<String>,
    /// The name of what it returned, stored apart: opened on demand.
    pub stored: Option<(String, u64)>,
    /// The child run it started.
    pub child: Option<RunId>,
    /// Still in progress: the run waits in it now.
    pub open: bool,
}

/// A row of the timeline.
#[derive(Debug, Clone, PartialEq)]
pub enum Row {
    Call(Call),
    /// No call was in progress from one time to the other.
    Gap {
        from_ms: u64,
        to_ms: u64,
    },
}

/// A run's timeline, from its start to its last call's end (or now).
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    pub start_ms: u64,
    pub end_ms: u64,
    pub rows: Vec<Row>,
}

/// The timeline of a run created at `created_at_ms`, with journal
/// `entries`, the failed attempts of its steps by seq, in `state` at
/// `now_ms`.
pub fn build(
    created_at_ms: u64,
    entries: &[Entry],
    failed: &BTreeMap<u64, Vec<AttemptRecord>>,
    state: &RunState,
    now_ms: u64,
) -> Timeline {
    let mut calls: Vec<Call> = entries
        .iter()
        .map(|entry| call(entry, failed.get(&entry.seq).map_or(&[][..], Vec::as_slice)))
        .collect();
    let last_end = calls.iter().map(|c| c.end_ms).max().unwrap_or(created_at_ms);
    calls.extend(open_call(state, last_end.max(created_at_ms), now_ms));
    calls.sort_by_key(|c| (c.start_ms, c.seq));
    let mut rows = Vec::with_capacity(calls.len());
    let mut covered_until = created_at_ms;
    for call in calls {
        if call.start_ms > covered_until.saturating_add(GAP_MIN_MS) {
            rows.push(Row::Gap {
                from_ms: covered_until,
                to_ms: call.start_ms,
            });
        }
        covered_until = covered_until.max(call.end_ms);
        rows.push(Row::Call(call));
    }
    let end_ms = match state.is_finished() {
        true => covered_until,
        false => covered_until.max(now_ms),
    };
    Timeline {
        start_ms: created_at_ms,
        end_ms: end_ms.max(created_at_ms.saturating_add(1)),
        rows,
    }
}

fn call(entry: &Entry, failed: &[AttemptRecord]) -> Call {
    let (summary, is_failure, payload, child) = what_it_returned(&entry.recorded);
    Call {
        seq: entry.seq,
        kind: entry.call.kind.to_string(),
        name: entry.call.name.clone(),
        start_ms: entry.started_at_ms,
        end_ms: entry.finished_at_ms.max(entry.started_at_ms),
        attempts: attempts(entry, failed, is_failure.then(|| summary.clone())),
        summary,
        failed: is_failure,
        payload,
        stored: match entry.recorded.payload() {
            Some(Payload::Stored { sha256, bytes }) => Some((sha256.clone(), *bytes)),
            _ => None,
        },
        child,
        open: false,
    }
}

/// A step's attempts: the failed ones as their records say, the last from
/// when it began to the entry's end. A call of one attempt has none apart.
fn attempts(entry: &Entry, failed: &[AttemptRecord], last_error: Option<String>) -> Vec<Attempt> {
    if entry.attempts <= 1 {
        return Vec::new();
    }
    let mut attempts = Vec::new();
    let mut previous_end = entry.started_at_ms;
    for record in failed {
        let start_ms = match record.started_at_ms {
            0 => previous_end,
            started => started,
        };
        attempts.push(Attempt {
            number: record.attempt,
            start_ms,
            end_ms: record.failed_at_ms.max(start_ms),
            error: Some(format!("{}: {}", kind_name(record.error.kind), record.error.message)),
        });
        previous_end = record.failed_at_ms;
    }
    let start_ms = entry.last_attempt_started_at_ms.unwrap_or(previous_end);
    attempts.push(Attempt {
        number: entry.attempts,
        start_ms,
        end_ms: entry.finished_at_ms.max(start_ms),
        error: last_error,
    });
    attempts
}

/// A few words on what a call returned, whether it failed, the payload in
/// full, and the child run it started.
fn what_it_returned(recorded: &Recorded) -> (String, bool, Option<String>, Option<RunId>) {
    // A stored payload is linked (see `Call::stored`), not shown.
    let pretty = |payload: &Payload| payload.inline().map(layout::pretty_json);
    match recorded {
        Recorded::Step { result: Ok(output) } => match output.inline() {
            Some(_) => ("ok".into(), false, pretty(output), None),
            None => (format!("ok {output}"), false, None, None),
        },
        Recorded::Step { result: Err(error) } => (
            format!("failed ({}): {}", kind_name(error.kind), error.message),
            true,
            None,
            None,
        ),
        Recorded::Slept => ("slept".into(), false, None, None),
        Recorded::Signal {
            payload: Some(payload), ..
        } => ("received".into(), false, pretty(payload), None),
        Recorded::Signal { payload: None, .. } => ("timed out, no signal".into(), false, None, None),
        Recorded::Value(value) => (value.to_string(), false, None, None),
        Recorded::MemoSet { value } => ("set".into(), false, pretty(value), None),
        Recorded::Winner(index) => (format!("handle #{index} finished first"), false, None, None),
        Recorded::Child { run: Ok(run) } => (format!("started {run}"), false, None, Some(run.clone())),
        Recorded::Child { run: Err(why) } => (format!("refused: {why}"), true, None, None),
        Recorded::ChildEnded { result: Ok(output) } => ("child completed".into(), false, pretty(output), None),
        Recorded::ChildEnded { result: Err(why) } => (format!("child failed: {why}"), true, None, None),
        Recorded::Cancelled { reason } => (format!("cancelled: {reason}"), true, None, None),
        Recorded::Patched => ("takes the change".into(), false, None, None),
        Recorded::Appended { value } => ("appended".into(), false, Some(layout::pretty_json(value)), None),
    }
}

/// The call an unfinished run waits in now, from `since_ms` (its last
/// recorded call's end) to `now_ms`.
fn open_call(state: &RunState, since_ms: u64, now_ms: u64) -> Option<Call> {
    let (seq, kind, name, summary) = match state {
        RunState::Sleeping { seq, until_ms } => (
            *seq,
            "sleep",
            String::new(),
            format!("until {}", layout::time(*until_ms)),
        ),
        RunState::AwaitingSignal { seq, signal, until_ms } => (
            *seq,
            "signal",
            signal.clone(),
            format!("waiting, until {}", layout::time(*until_ms)),
        ),
        RunState::Retrying { seq, failed_attempts } => (
            *seq,
            "step",
            String::new(),
            format!("{failed_attempts} attempts failed; waiting to retry"),
        ),
        _ => return None,
    };
    Some(Call {
        seq,
        kind: kind.into(),
        name,
        start_ms: since_ms,
        end_ms: now_ms.max(since_ms),
        attempts: Vec::new(),
        summary,
        failed: false,
        payload: None,
        stored: None,
        child: None,
        open: true,
    })
}

/// Where `from..to` falls on the axis of `timeline`: x and width in SVG
/// units.
fn span(timeline: &Timeline, from_ms: u64, to_ms: u64) -> (f64, f64) {
    let length = timeline.end_ms.saturating_sub(timeline.start_ms).max(1) as f64;
    let at = |ms: u64| (ms.saturating_sub(timeline.start_ms) as f64 / length * AXIS).clamp(0.0, AXIS);
    let x = at(from_ms).min(AXIS - MIN_BAR);
    (x, (at(to_ms) - x).max(MIN_BAR))
}

/// The timeline as a table: one row per call or gap, a bar on the run's
/// time axis in each.
pub fn render(timeline: &Timeline, run: &RunId) -> Markup {
    let bar = |from_ms: u64, to_ms: u64, class: &str| {
        let (x, width) = span(timeline, from_ms, to_ms);
        html! { rect x=(format!("{x:.1}")) y="1" width=(format!("{width:.1}")) height="10" class=(class) {} }
    };
    let axis = |content: Markup| {
        html! { svg.bar viewBox="0 0 1000 12" preserveAspectRatio="none" role="img" { (content) } }
    };
    html! {
        div.scroll {
            table.timeline {
                thead { tr { th.num { "Seq" } th { "Call" } th.wide { "Started" } th.num { "Took" } th.axis { "Timeline" } th { "Result" } } }
                tbody {
                    @for row in &timeline.rows {
                        @match row {
                            Row::Gap { from_ms, to_ms } => {
                                tr.gap {
                                    td.num {}
                                    td { em { "gap" } }
                                    td.time.wide { "+" (layout::duration(from_ms.saturating_sub(timeline.start_ms))) }
                                    td.num { (layout::duration(to_ms.saturating_sub(*from_ms))) }
                                    td.axis { (axis(bar(*from_ms, *to_ms, "gap"))) }
                                    td { "no call in progress" }
                                }
                            }
                            Row::Call(call) => {
                                tr.call data-kind=(call.kind) data-open[call.open] {
                                    td.num { (call.seq) }
                                    td { span.kind { (call.kind) } " " (call.name) }
                                    td.time.wide { "+" (layout::duration(call.start_ms.saturating_sub(timeline.start_ms))) }
                                    td.num { (layout::duration(call.end_ms.saturating_sub(call.start_ms))) }
                                    td.axis {
                                        (axis(html! {
                                            @if call.attempts.is_empty() {
                                                (bar(call.start_ms, call.end_ms, &bar_class(call)))
                                            }
                                            @for attempt in &call.attempts {
                                                (bar(attempt.start_ms, attempt.end_ms, if attempt.error.is_some() { "failed" } else { "step" }))
                                            }
                                        }))
                                    }
                                    td.result {
                                        span class=(if call.failed { "failed" } else { "ok" }) { (call.summary) }
                                        @if let Some(child) = &call.child {
                                            " " a href={ "/ui/runs/" (child) } { "open child" }
                                        }
                                        @if !call.attempts.is_empty() {
                                            ol.attempts {
                                                @for attempt in &call.attempts {
                                                    li {
                                                        "attempt " (attempt.number) ": " (layout::duration(attempt.end_ms.saturating_sub(attempt.start_ms)))
                                                        @if let Some(error) = &attempt.error { " — " span.failed { (error) } }
                                                    }
                                                }
                                            }
                                        }
                                        @if let Some(payload) = &call.payload {
                                            details { summary { "payload" } pre.json { (payload) } }
                                        }
                                        @if let Some((sha256, bytes)) = &call.stored {
                                            " " (layout::stored_payload(run, sha256, *bytes))
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        p.axis-note { "Axis: " (layout::time(timeline.start_ms)) " to " (layout::time(timeline.end_ms)) " (" (layout::duration(timeline.end_ms.saturating_sub(timeline.start_ms))) ") · run " (run) }
    }
}

fn bar_class(call: &Call) -> String {
    match (call.open, call.failed) {
        (true, _) => format!("{} open", call.kind),
        (false, true) => "failed".into(),
        (false, false) => call.kind.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::bindings::{StepError, StepErrorKind};
    use crate::journal::{Call as JournalCall, CallKind};

    fn entry(seq: u64, kind: CallKind, from: u64, to: u64, recorded: Recorded) -> Entry {
        Entry {
            seq,
            call: JournalCall::new(kind, "x", b""),
            recorded,
            attempts: 1,
            started_at_ms: from,
            finished_at_ms: to,
            last_attempt_started_at_ms: None,
        }
    }

    fn ok(output: &str) -> Recorded {
        Recorded::Step {
            result: Ok(Payload::Inline(output.into())),
        }
    }

    fn calls(timeline: &Timeline) -> Vec<&Call> {
        timeline
            .rows
            .iter()
            .filter_map(|row| match row {
                Row::Call(call) => Some(call),
                Row::Gap { .. } => None,
            })
            .collect()
    }

    #[test]
    fn idle_time_between_calls_is_a_gap_and_parallel_calls_are_not() {
        let entries = [
            entry(0, CallKind::Step, 1_000, 1_010, ok("1")),
            entry(1, CallKind::Step, 1_020, 1_500, ok("2")),
            entry(2, CallKind::Step, 1_030, 1_100, ok("3")),
            entry(3, CallKind::Sleep, 5_000, 6_000, Recorded::Slept),
        ];
        let completed = RunState::Completed {
            output: Some("{}".into()),
            output_stored: None,
        };
        let timeline = build(1_000, &entries, &BTreeMap::new(), &completed, 99_999);
        let gaps: Vec<&Row> = timeline.rows.iter().filter(|r| matches!(r, Row::Gap { .. })).collect();
        assert_eq!(
            gaps,
            [&Row::Gap {
                from_ms: 1_500,
                to_ms: 5_000
            }]
        );
        assert_eq!(
            (timeline.start_ms, timeline.end_ms),
            (1_000, 6_000),
            "a finished run ends at its last call"
        );
        assert_eq!(calls(&timeline).iter().map(|c| c.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
    }

    #[test]
    fn a_retried_step_shows_each_attempt_and_why_it_failed() {
        let mut retried = entry(0, CallKind::Step, 100, 400, ok(r#"{"a":1}"#));
        retried.attempts = 2;
        retried.last_attempt_started_at_ms = Some(300);
        let failure = AttemptRecord {
            attempt: 1,
            error: StepError {
                kind: StepErrorKind::Failed,
                message: "unavailable".into(),
                attempts: 1,
            },
            started_at_ms: 100,
            failed_at_ms: 150,
        };
        let failed = BTreeMap::from([(0, vec![failure])]);
        let timeline = build(100, &[retried], &failed, &RunState::Running, 500);
        let call = calls(&timeline)[0].clone();
        let spans: Vec<(u32, u64, u64, bool)> = call
            .attempts
            .iter()
            .map(|a| (a.number, a.start_ms, a.end_ms, a.error.is_some()))
            .collect();
        assert_eq!(spans, [(1, 100, 150, true), (2, 300, 400, false)]);
        assert_eq!(call.payload.as_deref(), Some("{\n  \"a\": 1\n}"));
        assert_eq!(timeline.end_ms, 500, "an unfinished run's axis runs to now");
    }

    #[test]
    fn the_wait_a_run_is_in_is_an_open_call_to_now() {
        let entries = [entry(0, CallKind::Step, 10, 20, ok("1"))];
        let waiting = RunState::AwaitingSignal {
            seq: 1,
            signal: "approve".into(),
            until_ms: 9_000,
        };
        let timeline = build(10, &entries, &BTreeMap::new(), &waiting, 5_000);
        let open = calls(&timeline)[1].clone();
        assert_eq!(
            (open.seq, open.kind.as_str(), open.name.as_str()),
            (1, "signal", "approve")
        );
        assert_eq!((open.start_ms, open.end_ms, open.open), (20, 5_000, true));
        assert!(timeline.rows.iter().all(|r| !matches!(r, Row::Gap { .. })));
    }

    #[test]
    fn bars_stay_on_the_axis_whatever_the_times() {
        let timeline = Timeline {
            start_ms: 100,
            end_ms: 100,
            rows: Vec::new(),
        };
        for (from, to) in [(0, 0), (100, 100), (u64::MAX, u64::MAX), (50, u64::MAX)] {
            let (x, width) = span(&timeline, from, to);
            assert!(
                (0.0..=AXIS).contains(&x) && x + width <= AXIS + MIN_BAR && width >= MIN_BAR,
                "{from} {to}"
            );
        }
    }
}
