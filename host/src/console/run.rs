//! A run's page: where it stands, how it was started, its journal as a
//! timeline with its payloads, its log lines, and the actions a client has
//! on it: send a signal, cancel, check a replay, upgrade it to another
//! build. Where it stands and its timeline refresh while it runs; its
//! streams are shown live, each value as it is appended.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::extract::{Form, Path, Query};
use super::layout::{self, Nav};
use super::{PageError, Signed, timeline};
use crate::api::error::ApiError;
use crate::api::state::ApiState;
use crate::clock::{now_ms, rfc3339};
use crate::guest_log::Source;
use crate::journal::{CallKind, Payload, RunRecord};
use crate::runtime::{AttemptUnderWay, LogCursor, LogPage, ReplayReport, Restart, RunError, RunState, RunStatus};
use crate::store::{RunId, SignalName, StreamName, TenantId};

/// Log lines a page shows.
const LOG_PAGE: usize = 100;
/// How often an unfinished run's page refreshes, in milliseconds.
const REFRESH_MS: u32 = 2000;
/// The longest reason a cancellation or a pause keeps, in bytes: a
/// pause's limit.
pub(super) const MAX_REASON: usize = crate::runtime::MAX_PAUSE_REASON;

#[derive(Deserialize)]
pub struct RunPath {
    id: RunId,
}

#[derive(Deserialize, Default)]
pub struct PageParams {
    /// Show the log lines after this cursor.
    #[serde(default)]
    logs: String,
    /// What the action that led here did.
    #[serde(default)]
    notice: String,
}

/// What an action came to, shown at the top of the page.
struct Notice {
    ok: bool,
    text: String,
}

impl Notice {
    fn done(text: impl Into<String>) -> Self {
        Self {
            ok: true,
            text: text.into(),
        }
    }

    fn refused(text: impl Into<String>) -> Self {
        Self {
            ok: false,
            text: text.into(),
        }
    }
}

/// The notices an action redirects to, by name (a page shows only these,
/// never text from the URL).
fn redirected_notice(name: &str) -> Option<Notice> {
    match name {
        "signal-sent" => Some(Notice::done("Signal sent: the run takes it when it waits for it.")),
        "cancel-requested" => Some(Notice::done(
            "Cancellation recorded: the run meets it at its current or next wait and ends cancelled.",
        )),
        "paused" => Some(Notice::done(
            "Paused: the run starts nothing more until resumed; an attempt under way finishes.",
        )),
        "resumed" => Some(Notice::done("Resumed: the run goes on where it stopped.")),
        "advanced" => Some(Notice::done(
            "Advanced: the run's wait ended now, as if its timer had run out; the run goes on from it.",
        )),
        "restarted" => Some(Notice::done(
            "Restarted: this new run replays the calls it kept, without executing them again, and executes from there.",
        )),
        _ => None,
    }
}

/// `GET /ui/runs/{id}`.
pub async fn page(
    State(state): State<ApiState>,
    signed: Signed,
    Path(RunPath { id }): Path<RunPath>,
    Query(params): Query<PageParams>,
) -> Result<Response, PageError> {
    let notice = redirected_notice(&params.notice);
    render(&state, &signed, &id, &params.logs, notice, StatusCode::OK).await
}

/// `GET /ui/runs/{id}/streams/{name}/events`: one of the run's streams as
/// server-sent events, as the API serves it, for the page to show live.
pub async fn stream_events(
    State(state): State<ApiState>,
    signed: Signed,
    Path(StreamPath { id, name }): Path<StreamPath>,
) -> Result<Response, PageError> {
    let tenant = &signed.0.tenant.id;
    let events = state.runtime().runs().read_stream(tenant, &id, name, 0, true).await?;
    Ok(crate::api::streams::server_sent(events).into_response())
}

/// `GET /ui/runs/{id}/payloads/{sha256}`: a payload the run stored apart,
/// read only when asked for, as the API serves it.
pub async fn stored_payload(
    State(state): State<ApiState>,
    signed: Signed,
    Path(PayloadPath { id, sha256 }): Path<PayloadPath>,
) -> Result<Response, PageError> {
    let tenant = &signed.0.tenant.id;
    match state.runtime().runs().stored_payload(tenant, &id, &sha256).await? {
        Some(text) => Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], text).into_response()),
        None => Err(PageError::new(StatusCode::NOT_FOUND, "the run stored no such payload")),
    }
}

#[derive(Deserialize)]
pub struct PayloadPath {
    id: RunId,
    sha256: String,
}

#[derive(Deserialize)]
pub struct StreamPath {
    id: RunId,
    name: StreamName,
}

/// `GET /ui/runs/{id}/live`: where the run stands and its timeline, as
/// the page refreshes them.
pub async fn live(
    State(state): State<ApiState>,
    signed: Signed,
    Path(RunPath { id }): Path<RunPath>,
) -> Result<Markup, PageError> {
    let tenant = &signed.0.tenant.id;
    let record = state.runtime().runs().run_record(tenant, &id).await?;
    live_part(&state, tenant, &record).await.map(|(markup, _)| markup)
}

async fn render(
    state: &ApiState,
    signed: &Signed,
    run: &RunId,
    log_cursor: &str,
    notice: Option<Notice>,
    status: StatusCode,
) -> Result<Response, PageError> {
    let tenant = &signed.0.tenant.id;
    let runtime = state.runtime();
    let record = runtime.runs().run_record(tenant, run).await?;
    let after = match log_cursor {
        "" => None,
        cursor => Some(cursor.parse::<LogCursor>().map_err(PageError::bad_request)?),
    };
    let (live, status_now) = live_part(state, tenant, &record).await?;
    let logs = runtime.logs().page(tenant, run, after.as_ref(), LOG_PAGE).await?;
    let names = runtime.catalog().component_names(tenant).await?;
    let finished = status_now.state.is_finished();
    let body = html! {
        h1 { "Run " code #run-id { (run) } }
        @if let Some(notice) = &notice {
            p.notice.ok[notice.ok].refused[!notice.ok] role="status" { (notice.text) }
        }
        div #live data-poll=[(!finished).then(|| format!("/ui/runs/{run}/live"))] data-every=(REFRESH_MS) { (live) }
        section #streams {
            h2 { "Streams" }
            p.empty { "Values the workflow appends to a stream show here as they come." }
        }
        (facts(&record))
        (log_lines(run, &logs, !log_cursor.is_empty()))
        (actions(run, &signed.0.csrf, &status_now, &names))
    };
    let title = format!("Run {run}");
    Ok((status, layout::page(&signed.frame(&title, Nav::Runs), body)).into_response())
}

/// Where the run stands, how it ended, and its timeline; with its status.
async fn live_part(state: &ApiState, tenant: &TenantId, record: &RunRecord) -> Result<(Markup, RunStatus), PageError> {
    let runtime = state.runtime();
    let run = &record.run_id;
    let status = runtime.runs().generation_status(tenant, run).await?;
    let entries = runtime.history(tenant, run).await?;
    let mut failed = BTreeMap::new();
    let retrying = match &status.state {
        RunState::Retrying { seq, .. } => Some(*seq),
        _ => None,
    };
    let retried = entries.iter().filter(|e| e.attempts > 1).map(|e| e.seq);
    for seq in retried.chain(retrying) {
        failed.insert(seq, runtime.runs().failed_attempts(tenant, run, seq).await?);
    }
    let timeline = timeline::build(record.created_at_ms, &entries, &failed, &status.state, now_ms());
    let finished = status.state.is_finished();
    let streams: BTreeSet<&str> = entries
        .iter()
        .filter(|entry| entry.call.kind == CallKind::StreamAppend)
        .map(|entry| entry.call.name.as_str())
        .collect();
    let markup = html! {
        // The streams the journal holds, for the page's script to follow
        // (outside this part, which each refresh replaces).
        ul #stream-names hidden {
            @for name in &streams {
                li data-stream=(format!("/ui/runs/{run}/streams/{name}/events")) { (name) }
            }
        }
        section.summary data-final[finished] {
            p.standing {
                (layout::state_badge(&status.state))
                " · " (status.journaled_calls) " journaled calls"
                @if let Some(pause) = &status.paused {
                    " · " strong.paused { "paused" } " since " (rfc3339(pause.paused_at_ms)) ": " (pause.reason)
                }
            }
            (outcome(&status.run_id, &status.state))
        }
        section.timeline {
            h2 { "Timeline" }
            @if timeline.rows.is_empty() {
                p.empty { "No durable call yet." }
            } @else {
                (timeline::render(&timeline, run))
            }
        }
    };
    Ok((markup, status))
}

fn outcome(run: &RunId, state: &RunState) -> Markup {
    html! {
        @match state {
            RunState::Completed { output, output_stored } => {
                h2 { "Output" }
                @if let Some(output) = output {
                    pre.json #output { (layout::pretty_json(output)) }
                }
                @if let Some(stored) = output_stored {
                    (layout::stored_payload(run, &stored.sha256, stored.bytes))
                }
            }
            RunState::Failed { kind, message } => {
                h2 { "Failed: " (kind) }
                pre.failure { (message) }
            }
            RunState::Cancelled { reason } => {
                h2 { "Cancelled" }
                p { (reason) }
            }
            RunState::Continued { continued_as } => {
                p { "Continued as new: " a href={ "/ui/runs/" (continued_as) } { (continued_as) } }
            }
            _ => {}
        }
    }
}

/// How the run was started.
fn facts(record: &RunRecord) -> Markup {
    let run_link = |run: &RunId| html! { a href={ "/ui/runs/" (run) } { (run) } };
    html! {
        section.facts {
            h2 { "Started" }
            dl {
                dt { "Workflow" } dd #workflow { (record.workflow) }
                dt { "Component" } dd { a href={ "/ui/components/" (record.component) } { code { (record.component) } } }
                @if !record.earlier_builds.is_empty() {
                    dt { "Earlier builds" }
                    dd { @for build in &record.earlier_builds { a href={ "/ui/components/" (build) } { code { (layout::short_digest(build)) } } " " } }
                }
                dt { "Created" } dd { (layout::time(record.created_at_ms)) }
                @if let Some(start) = record.start_at_ms { dt { "Starts" } dd { (layout::time(start)) } }
                @if let Some(deadline) = record.deadline_ms { dt { "Deadline" } dd { (layout::time(deadline)) } }
                dt { "Priority" } dd { (record.priority) }
                @if !record.tags.is_empty() {
                    dt { "Tags" } dd { @for tag in &record.tags { span.tag { (tag) } " " } }
                }
                @if let Some(parent) = &record.parent { dt { "Parent" } dd { (run_link(parent)) } }
                @if let Some(chain) = &record.chain {
                    dt { "Chain" }
                    dd { "generation " (chain.generation) " of " (run_link(&chain.root)) ", after " (run_link(&chain.previous)) }
                }
                @if let Some(point) = &record.restarted_from {
                    dt { "Restarted from" }
                    dd #restarted-from { (run_link(&point.run)) ", keeping its calls before seq " (point.seq) }
                }
                @if let Some(concurrency) = &record.concurrency {
                    dt { "Concurrency" } dd { "key " code { (concurrency.key) } ", " (concurrency.limit) " at once" }
                }
                @for (name, digest) in &record.links {
                    dt { "Link " code { (name) } } dd { a href={ "/ui/components/" (digest) } { code { (layout::short_digest(digest)) } } }
                }
            }
            h3 { "Input" }
            @match &record.input {
                Payload::Inline(input) => pre.json #input { (layout::pretty_json(input)) },
                Payload::Stored { sha256, bytes } => (layout::stored_payload(&record.run_id, sha256, *bytes)),
            }
        }
    }
}

fn log_lines(run: &RunId, page: &LogPage, paged: bool) -> Markup {
    html! {
        section #logs {
            h2 { "Log" }
            @if page.lines.is_empty() {
                p.empty { "No log lines stored (a run's lines are stored as each execution ends)." }
            } @else {
                div.scroll {
                    table.logs {
                        thead { tr { th { "Time" } th { "Level" } th { "From" } th.num { "Seq" } th { "Step" } th { "Message" } } }
                        tbody {
                            @for paged in &page.lines {
                                @let line = &paged.line;
                                tr data-level=(line.level.name()) {
                                    td.time { (layout::time(line.at_ms)) }
                                    td { span.level { (line.level.name()) } }
                                    td { (match line.source { Source::Guest => "guest", Source::Host => "host" }) }
                                    td.num { @if let Some(seq) = line.seq { (seq) } }
                                    td {
                                        @if let Some(step) = &line.step { (step) }
                                        @if let Some(attempt) = line.attempt { " #" (attempt) }
                                    }
                                    td.message { (line.message) }
                                }
                            }
                        }
                    }
                }
            }
            nav.pager {
                @if paged { a href={ "/ui/runs/" (run) "#logs" } { "← First lines" } }
                @if let Some(next) = &page.next { a.next href={ "/ui/runs/" (run) "?logs=" (next) "#logs" } { "Next lines →" } }
            }
        }
    }
}

/// The forms of the actions on a run; those that change a run only while
/// it goes on.
fn actions(run: &RunId, csrf: &str, status: &RunStatus, names: &[(crate::store::ComponentName, String)]) -> Markup {
    let action = |what: &str| format!("/ui/runs/{run}/{what}");
    let finished = status.state.is_finished();
    html! {
        section.actions {
            h2 { "Actions" }
            datalist #component-names { @for (name, _) in names { option value=(name) {} } }
            @if !finished {
                form #signal-form method="post" action=(action("signal")) {
                    h3 { "Send a signal" }
                    input type="hidden" name="csrf" value=(csrf);
                    label { "Name " input type="text" name="name" required maxlength="128"; }
                    label { "Payload (JSON) " textarea name="payload" rows="3" { "{}" } }
                    button type="submit" { "Send" }
                }
                @if status.paused.is_some() {
                    form #resume-form method="post" action=(action("resume")) {
                        h3 { "Resume" }
                        input type="hidden" name="csrf" value=(csrf);
                        button type="submit" { "Resume the run" }
                    }
                } @else {
                    form #pause-form method="post" action=(action("pause")) {
                        h3 { "Pause" }
                        input type="hidden" name="csrf" value=(csrf);
                        label { "Reason " input type="text" name="reason" maxlength=(MAX_REASON) placeholder="paused from the console"; }
                        (interrupt_box())
                        button type="submit" { "Pause the run" }
                    }
                }
                form #advance-form method="post" action=(action("advance")) {
                    h3 { "Advance" }
                    input type="hidden" name="csrf" value=(csrf);
                    p.hint { "Ends its current sleep, or its signal wait's timeout, now." }
                    button type="submit" { "Advance its timer" }
                }
                form #cancel-form method="post" action=(action("cancel")) {
                    h3 { "Cancel" }
                    input type="hidden" name="csrf" value=(csrf);
                    label { "Reason " input type="text" name="reason" maxlength=(MAX_REASON) placeholder="cancelled from the console"; }
                    button.danger type="submit" { "Cancel the run" }
                }
            }
            form #restart-form method="post" action=(action("restart")) {
                h3 { "Restart from a point" }
                input type="hidden" name="csrf" value=(csrf);
                p.hint { "A new run keeps this run's calls before the seq, and executes from there." }
                label { "From seq " input type="number" name="seq" required min="0" value=(status.journaled_calls); }
                label { "On build " input type="text" name="build" list="component-names" placeholder="its own (or a name or digest)"; }
                @if !finished {
                    label.check { input type="checkbox" name="keep_old" value="on"; " keep this run going (else it is cancelled)" }
                }
                button type="submit" { "Restart" }
            }
            form #replay-form method="post" action=(action("replay")) {
                h3 { "Replay check" }
                input type="hidden" name="csrf" value=(csrf);
                label { "Against build " input type="text" name="build" list="component-names" placeholder="its own (or a name or digest)"; }
                button type="submit" { "Check" }
            }
            @if !finished {
                form #upgrade-form method="post" action=(action("upgrade")) {
                    h3 { "Upgrade" }
                    input type="hidden" name="csrf" value=(csrf);
                    label { "To build " input type="text" name="to" list="component-names" required placeholder="a name or digest"; }
                    label.check { input type="checkbox" name="dry_run" value="on"; " only check" }
                    button type="submit" { "Upgrade" }
                }
            }
        }
    }
}

#[derive(Deserialize)]
pub struct SignalForm {
    csrf: String,
    name: String,
    #[serde(default)]
    payload: String,
}

/// `POST /ui/runs/{id}/signal`.
pub async fn signal(
    State(state): State<ApiState>,
    signed: Signed,
    Path(RunPath { id }): Path<RunPath>,
    Form(form): Form<SignalForm>,
) -> Result<Response, PageError> {
    signed.check(&form.csrf)?;
    let tenant = &signed.0.tenant;
    let sent = async {
        let name = SignalName::new(form.name.trim()).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let payload = match form.payload.trim() {
            "" => "null",
            payload => payload,
        };
        state.runtime().signal(&tenant.id, &id, &name, payload).await?;
        Ok::<(), ApiError>(())
    };
    match sent.await {
        Ok(()) => Ok(Redirect::to(&format!("/ui/runs/{id}?notice=signal-sent")).into_response()),
        Err(e) => refused(&state, &signed, &id, e).await,
    }
}

/// A form of an action on a run: its CSRF token and, for a cancellation or
/// a pause, a reason (none for a resumption); for a pause, whether it stops
/// a step attempt under way (a checkbox, sent only when ticked).
#[derive(Deserialize)]
pub struct ReasonForm {
    csrf: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    interrupt: Option<String>,
}

/// The checkbox that makes a pause stop a step attempt under way.
pub(super) fn interrupt_box() -> Markup {
    html! {
        label { input type="checkbox" name="interrupt" value="on"; " Stop a step attempt under way (it runs again once resumed)" }
    }
}

/// `POST /ui/runs/{id}/cancel`.
pub async fn cancel(
    State(state): State<ApiState>,
    signed: Signed,
    Path(RunPath { id }): Path<RunPath>,
    Form(form): Form<ReasonForm>,
) -> Result<Response, PageError> {
    signed.check(&form.csrf)?;
    let reason = reason_given(&form.reason, "cancelled from the console");
    let cancelled = state
        .runtime()
        .runs()
        .cancel_in_background(&signed.0.tenant.id, &id, &reason)
        .await;
    redirect_or_refuse(&state, &signed, &id, cancelled, "cancel-requested").await
}

/// The reason a form gave, cut to [`MAX_REASON`] bytes (at a character's
/// edge), or `default`.
pub(super) fn reason_given(given: &str, default: &str) -> String {
    match given.trim() {
        "" => default.to_owned(),
        reason => {
            let end = (0..=reason.len().min(MAX_REASON))
                .rev()
                .find(|&end| reason.is_char_boundary(end))
                .unwrap_or(0);
            reason[..end].to_owned()
        }
    }
}

/// `POST /ui/runs/{id}/pause`.
pub async fn pause(
    State(state): State<ApiState>,
    signed: Signed,
    Path(RunPath { id }): Path<RunPath>,
    Form(form): Form<ReasonForm>,
) -> Result<Response, PageError> {
    signed.check(&form.csrf)?;
    let reason = reason_given(&form.reason, "paused from the console");
    let under_way = AttemptUnderWay::stopped_if(form.interrupt.is_some());
    let paused = (state.runtime().runs())
        .pause(&signed.0.tenant.id, &id, &reason, under_way)
        .await;
    redirect_or_refuse(&state, &signed, &id, paused, "paused").await
}

/// `POST /ui/runs/{id}/resume`.
pub async fn resume(
    State(state): State<ApiState>,
    signed: Signed,
    Path(RunPath { id }): Path<RunPath>,
    Form(form): Form<ReasonForm>,
) -> Result<Response, PageError> {
    signed.check(&form.csrf)?;
    let resumed = state.runtime().runs().resume(&signed.0.tenant.id, &id).await;
    redirect_or_refuse(&state, &signed, &id, resumed, "resumed").await
}

/// `POST /ui/runs/{id}/advance`.
pub async fn advance(
    State(state): State<ApiState>,
    signed: Signed,
    Path(RunPath { id }): Path<RunPath>,
    Form(form): Form<ReasonForm>,
) -> Result<Response, PageError> {
    signed.check(&form.csrf)?;
    let advanced = state.runtime().runs().advance(&signed.0.tenant.id, &id).await.map(drop);
    redirect_or_refuse(&state, &signed, &id, advanced, "advanced").await
}

/// Back to the run's page with `notice`, or the page with the refusal.
async fn redirect_or_refuse(
    state: &ApiState,
    signed: &Signed,
    id: &RunId,
    done: Result<(), RunError>,
    notice: &str,
) -> Result<Response, PageError> {
    match done {
        Ok(()) => Ok(Redirect::to(&format!("/ui/runs/{id}?notice={notice}")).into_response()),
        Err(e) => refused(state, signed, id, e.into()).await,
    }
}

/// The tenant's build a form's field names, if it names one.
async fn build_given(
    state: &ApiState,
    tenant: &crate::store::TenantId,
    field: &str,
) -> Result<Option<std::sync::Arc<crate::component::Loaded>>, RunError> {
    match field.trim() {
        "" => Ok(None),
        reference => Ok(Some(state.runtime().component(tenant, reference).await?)),
    }
}

#[derive(Deserialize)]
pub struct RestartForm {
    csrf: String,
    seq: u64,
    #[serde(default)]
    build: String,
    keep_old: Option<String>,
}

/// `POST /ui/runs/{id}/restart`: on to the new run's page.
pub async fn restart(
    State(state): State<ApiState>,
    signed: Signed,
    Path(RunPath { id }): Path<RunPath>,
    Form(form): Form<RestartForm>,
) -> Result<Response, PageError> {
    signed.check(&form.csrf)?;
    let tenant = &signed.0.tenant.id;
    let runs = state.runtime().runs();
    let restarted = async {
        let component = build_given(&state, tenant, &form.build).await?;
        let restart = Restart {
            seq: form.seq,
            component,
            run_id: None,
            keep_old: form.keep_old.is_some(),
        };
        runs.restart(tenant, &id, restart).await
    };
    match restarted.await {
        Ok(restarted) => {
            runs.drive_in_background(tenant, &restarted.run_id);
            Ok(Redirect::to(&format!("/ui/runs/{}?notice=restarted", restarted.run_id)).into_response())
        }
        Err(e) => refused(&state, &signed, &id, e.into()).await,
    }
}

#[derive(Deserialize)]
pub struct ReplayForm {
    csrf: String,
    #[serde(default)]
    build: String,
}

/// `POST /ui/runs/{id}/replay`: the check's verdict, on the run's page.
pub async fn replay(
    State(state): State<ApiState>,
    signed: Signed,
    Path(RunPath { id }): Path<RunPath>,
    Form(form): Form<ReplayForm>,
) -> Result<Response, PageError> {
    signed.check(&form.csrf)?;
    let tenant = &signed.0.tenant.id;
    let checked = async {
        let build = build_given(&state, tenant, &form.build).await?;
        state.runtime().runs().replay(tenant, &id, build).await
    };
    match checked.await {
        Ok(report) => {
            let notice = Notice {
                ok: !matches!(report, ReplayReport::Diverged { .. }),
                text: replay_verdict(&report),
            };
            render(&state, &signed, &id, "", Some(notice), StatusCode::OK).await
        }
        Err(e) => refused(&state, &signed, &id, e.into()).await,
    }
}

fn replay_verdict(report: &ReplayReport) -> String {
    match report {
        ReplayReport::Identical { calls } => {
            format!(
                "Replay identical: the workflow made its {calls} recorded calls again and reached the same outcome."
            )
        }
        ReplayReport::ConsistentSoFar { calls } => {
            format!("Replay consistent so far: the workflow made its {calls} recorded calls again.")
        }
        ReplayReport::Diverged {
            seq: Some(seq),
            message,
        } => format!("Replay diverged at seq {seq}: {message}"),
        ReplayReport::Diverged { seq: None, message } => format!("Replay diverged: {message}"),
    }
}

#[derive(Deserialize)]
pub struct UpgradeForm {
    csrf: String,
    to: String,
    dry_run: Option<String>,
}

/// `POST /ui/runs/{id}/upgrade`: what the check found, and whether the run
/// moved, on the run's page.
pub async fn upgrade(
    State(state): State<ApiState>,
    signed: Signed,
    Path(RunPath { id }): Path<RunPath>,
    Form(form): Form<UpgradeForm>,
) -> Result<Response, PageError> {
    signed.check(&form.csrf)?;
    let tenant = &signed.0.tenant.id;
    let dry_run = form.dry_run.is_some();
    let upgraded = async {
        let to = state.runtime().component(tenant, form.to.trim()).await?;
        let record = state.runtime().runs().run_record(tenant, &id).await?;
        if record.component == to.digest {
            return Ok::<_, crate::runtime::RunError>(Notice::refused("The run already runs on this build."));
        }
        let report = state.runtime().upgrades().run(tenant, &id, &to, dry_run).await?;
        let short = layout::short_digest(&to.digest);
        Ok(match (report, dry_run) {
            (ReplayReport::ConsistentSoFar { .. }, false) => {
                Notice::done(format!("Moved to build {short}: the run goes on there."))
            }
            (ReplayReport::ConsistentSoFar { .. }, true) => Notice::done(format!(
                "Build {short} replays the run identically so far: it can move."
            )),
            (ReplayReport::Identical { .. }, _) => Notice::refused("The run has finished: there is nothing to move."),
            (diverged, _) => Notice::refused(format!("The run stays: {}", replay_verdict(&diverged))),
        })
    };
    match upgraded.await {
        Ok(notice) => render(&state, &signed, &id, "", Some(notice), StatusCode::OK).await,
        Err(e) => refused(&state, &signed, &id, ApiError::from(e)).await,
    }
}

/// The run's page saying why an action was refused, with the refusal's
/// status.
async fn refused(state: &ApiState, signed: &Signed, run: &RunId, error: ApiError) -> Result<Response, PageError> {
    let notice = Notice::refused(error.message());
    render(state, signed, run, "", Some(notice), error.status()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_from_the_url_is_one_of_the_pages_own() {
        assert!(redirected_notice("signal-sent").is_some_and(|n| n.ok));
        assert!(redirected_notice("<b>you won</b>").is_none());
        assert!(redirected_notice("").is_none());
    }

    #[test]
    fn replay_verdicts_say_where_a_replay_diverged() {
        let diverged = ReplayReport::Diverged {
            seq: Some(3),
            message: "asked `ship`".into(),
        };
        assert_eq!(replay_verdict(&diverged), "Replay diverged at seq 3: asked `ship`");
        assert!(replay_verdict(&ReplayReport::Identical { calls: 5 }).contains("5 recorded calls"));
    }
}
