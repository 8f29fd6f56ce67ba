//! `/v1/runs`: starting runs and everything a client does with one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::{IntoParams, ToSchema};

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::{self, Body, OptionalJson, Path, Query};
use super::params::{Cursor, Timeout, WholeNumber};
use super::responses::{JsonBody, Malformed, Oversized, Refusals, Throttled, UnknownRun};
use crate::clock::parse_time;
use crate::component::Loaded;
use crate::config::LimitRequest;
use crate::durations::DurationText;
use crate::journal::Entry;
use crate::runtime::{
    Advanced, AttemptUnderWay, DEADLINE, Moment, ReplayReport, Restart, Restarted, RunQuery, RunStatus, START,
    Submission, UnreadableRun,
};
use crate::store::{ComponentName, ConcurrencyKey, RunId, RunTag, SignalId, SignalName, WorkflowName};
use crate::tenancy::Tenant;

/// Longest a `wait` may hold a request.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// How long a `wait` waits without a `timeout`.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// The runs a page holds: at most, and without a `limit`.
const MAX_PAGE: u32 = 1000;
const DEFAULT_PAGE: u32 = 100;

/// How long a wait asked to wait `timeout` holds its request.
pub(super) fn held_for(Timeout(timeout): Timeout) -> Duration {
    timeout.min(MAX_WAIT)
}

/// The run an operation is about.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct RunPath {
    #[param(inline)]
    pub(super) id: RunId,
}

/// A run to start.
#[derive(Deserialize, ToSchema)]
pub struct StartRun {
    /// A component name or digest.
    pub component: ComponentName,
    /// Which version of the name to run (`GET /v1/components/{name}` lists
    /// them; 1 is the first build uploaded under it); absent: the latest.
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 4_294_967_295u64)]
    pub version: Option<WholeNumber>,
    /// One of the component's workflows (404 if it has none of this name).
    pub workflow: WorkflowName,
    /// The workflow's input (any JSON). Kept as the text sent, unparsed:
    /// a large input costs its bytes, not a tree of values many times
    /// their size.
    #[schema(value_type = Value)]
    pub input: Box<RawValue>,
    /// An idempotency key: the same id with the same input returns the same
    /// run; with another input, 409.
    pub run_id: Option<RunId>,
    #[serde(default)]
    pub options: RunOptions,
    /// Other components of the tenant's (link name → component name or
    /// digest), whose steps the workflow calls as `link/step`.
    #[serde(default)]
    pub links: BTreeMap<String, ComponentName>,
    /// When to start the run: an RFC 3339 time with its offset, e.g.
    /// `2026-12-24T18:00:00Z` (a time passed starts it at once), at most a
    /// year and a day ahead. The run waits in the store, `scheduled`, and
    /// starts on time after a restart.
    #[schema(example = "2026-12-24T18:00:00Z", format = DateTime)]
    pub start_at: Option<String>,
    /// Or how long from now to start it, e.g. `4s` or `1h 30m`.
    #[schema(value_type = Option<DurationText>)]
    pub delay: Option<String>,
    /// When the run must have ended (RFC 3339): past it, the run is
    /// cancelled (its children too, its workflow compensating as on a
    /// cancel) and ends `failed` with kind `deadline-exceeded`.
    #[schema(example = "2026-12-24T19:00:00Z", format = DateTime)]
    pub deadline: Option<String>,
    /// Or how long after its start the run must have ended, e.g. `1h`.
    #[schema(value_type = Option<DurationText>)]
    pub timeout: Option<String>,
    /// A URL to POST the run's end to once it ends (`{id, run_id,
    /// workflow, state, output | error | reason}`), at least once, signed
    /// with the tenant's secret `notify-signing-key` (`Stepstone-Signature:
    /// sha256=HMAC-SHA256 of the body`), with the run id as
    /// `Stepstone-Delivery`. Its origin must be among the tenant's
    /// `allowed_outbound_hosts`.
    #[schema(example = "https://hooks.example.com/runs", max_length = 2048)]
    pub notify: Option<String>,
    /// Up to 16 tags to search runs by (`GET /v1/runs?tag=`), e.g. `customer-42`.
    #[serde(default)]
    #[schema(max_items = 16)]
    pub tags: Vec<RunTag>,
    /// The run's place in line, 1 (first) to 9 (last), default 5: when the
    /// host's instance slots are scarce, the tenant's waiting workflow
    /// activations and step attempts of a lower number go first (tenants
    /// still share the slots fairly), as do waiting runs of a concurrency key.
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 9, example = 5)]
    pub priority: Option<WholeNumber>,
    /// Runs sharing this key (a customer's id, say) execute at most
    /// `concurrency_limit` at once, across every host; the others wait,
    /// `queued`, by priority and then age. A run holds its place from its
    /// start until it ends, its waits included.
    #[schema(example = "customer-42")]
    pub concurrency_key: Option<ConcurrencyKey>,
    /// How many runs of `concurrency_key` may execute at once, 1 to 1000
    /// (default 1). Given without a key, the key is the workflow's name.
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 1000)]
    pub concurrency_limit: Option<WholeNumber>,
}

/// Step limits for a run: each can lower the tenant's quota, never raise it.
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct RunOptions {
    /// Fuel one step attempt may burn.
    fuel: Option<WholeNumber>,
    /// Memory one step instance may take.
    memory_bytes: Option<WholeNumber>,
    /// Milliseconds one step attempt may take.
    timeout_ms: Option<WholeNumber>,
    /// Bytes one step's output may take.
    max_output_bytes: Option<WholeNumber>,
}

impl RunOptions {
    /// The limits asked for, as the runtime takes them.
    fn request(self) -> LimitRequest {
        LimitRequest {
            fuel: self.fuel.map(|n| n.0),
            memory_bytes: self.memory_bytes.map(WholeNumber::saturating_usize),
            timeout_ms: self.timeout_ms.map(|n| n.0),
            max_output_bytes: self.max_output_bytes.map(WholeNumber::saturating_usize),
        }
    }
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct Started {
    pub run_id: RunId,
}

#[derive(Deserialize, IntoParams)]
pub struct StartParams {
    /// Wait up to this long for the run to finish and answer with its
    /// status (200), as `GET /v1/runs/{id}/wait` does (at most 60 s),
    /// instead of answering at once with its id (202).
    #[param(inline)]
    pub(super) wait: Option<Timeout>,
}

/// Start a run (or return the run its `run_id` already names); with `wait`,
/// start it and wait for its end in one request.
#[utoipa::path(post, path = "/v1/runs", request_body = StartRun, params(StartParams), responses(
    (status = 202, body = Started, description = "started; without `wait`"),
    (status = 200, body = RunStatus, description = "with `wait`: where the run stands when it finished or the wait ran out"),
    (status = 404, body = ErrorBody, description = "no such component, or no such workflow in it"),
    (status = 409, body = ErrorBody, description = "the run id exists with another input"),
    (status = 415, body = ErrorBody, description = "the body is not `Content-Type: application/json`"),
    Malformed, Oversized, JsonBody, Throttled, Refusals,
))]
pub async fn start(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Query(params): Query<StartParams>,
    extract::Json(start): extract::Json<StartRun>,
) -> Result<Response, ApiError> {
    let submission = submission_of(&state, &tenant, start).await?;
    let run = state.runtime.start(&tenant.id, submission).await?;
    let Some(timeout) = params.wait else {
        return Ok((StatusCode::ACCEPTED, Json(Started { run_id: run })).into_response());
    };
    Ok(Json(state.runtime.runs().wait(&tenant.id, &run, held_for(timeout)).await?).into_response())
}

/// The submission `start` asks for, its components looked up and its
/// fields checked.
pub async fn submission_of(state: &ApiState, tenant: &Tenant, start: StartRun) -> Result<Submission, ApiError> {
    let input = start.input.get();
    let component = match start.version {
        Some(version) => {
            (state.runtime)
                .catalog()
                .component_version(&tenant.id, &start.component, version.0)
                .await?
        }
        None => state.runtime.component(&tenant.id, start.component.as_str()).await?,
    };
    let mut submission = Submission::new(component, start.workflow.as_str(), input);
    submission.run_id = start.run_id;
    submission.limits = start.options.request();
    submission.start_at = Moment::parse(START, start.start_at.as_deref(), start.delay.as_deref())?;
    submission.deadline = Moment::parse(DEADLINE, start.deadline.as_deref(), start.timeout.as_deref())?;
    submission.notify = start.notify;
    submission.tags = start.tags;
    if let Some(priority) = start.priority {
        submission.priority = priority.0;
    }
    if start.concurrency_key.is_some() || start.concurrency_limit.is_some() {
        submission.limit_concurrency(start.concurrency_key, start.concurrency_limit.map(|n| n.0))?;
    }
    for (name, reference) in start.links {
        let linked = state.runtime.component(&tenant.id, reference.as_str()).await?;
        submission.links.insert(name, linked);
    }
    Ok(submission)
}

#[derive(Deserialize, IntoParams)]
pub struct ListParams {
    /// Only runs in this state.
    #[param(inline)]
    status: Option<StateFilter>,
    /// Only runs of this workflow.
    #[param(inline)]
    workflow: Option<WorkflowName>,
    /// Only runs of this component (a name: the build it points at now; or a digest).
    #[param(inline)]
    component: Option<ComponentName>,
    /// Only runs given this tag at submission.
    #[param(inline)]
    tag: Option<RunTag>,
    /// Only runs created at or after this time (RFC 3339).
    #[param(format = DateTime, example = "2026-12-01T00:00:00Z")]
    created_after: Option<String>,
    /// Only runs created before this time (RFC 3339).
    #[param(format = DateTime, example = "2026-12-02T00:00:00Z")]
    created_before: Option<String>,
    #[param(schema_with = page_limit)]
    limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    #[param(inline)]
    cursor: Option<Cursor>,
    /// `oldest-first` (the default) or `newest-first`, by creation time.
    #[param(inline)]
    order: Option<ListOrder>,
}

/// The order a listing goes in.
#[derive(Deserialize, ToSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ListOrder {
    OldestFirst,
    NewestFirst,
}

/// The states a run can be in, as `RunStatus` names them.
#[derive(Deserialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
pub enum StateFilter {
    Scheduled,
    Queued,
    Pending,
    Running,
    Retrying,
    Sleeping,
    AwaitingSignal,
    Completed,
    Failed,
    Cancelled,
    Continued,
}

impl StateFilter {
    fn name(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Queued => "queued",
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Retrying => "retrying",
            Self::Sleeping => "sleeping",
            Self::AwaitingSignal => "awaiting-signal",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Continued => "continued",
        }
    }
}

fn page_limit() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .description(Some("At most this many runs."))
        .minimum(Some(1))
        .maximum(Some(MAX_PAGE))
        .default(Some(DEFAULT_PAGE.into()))
        .build()
}

#[derive(Serialize, ToSchema)]
pub struct RunPage {
    pub runs: Vec<RunStatus>,
    /// Pass as `cursor` for the next page; absent on the last one. A page
    /// filtered by `status` may hold fewer runs than `limit` and still
    /// have a next one.
    pub next_cursor: Option<String>,
    /// Runs passed over because a record of theirs is corrupt, with why.
    pub unreadable: Vec<UnreadableRun>,
}

/// List runs, oldest first (or newest first), a page at a time.
#[utoipa::path(get, path = "/v1/runs", params(ListParams),
    responses((status = 200, body = RunPage), Malformed, Refusals))]
pub async fn list(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Query(params): Query<ListParams>,
) -> Result<Json<RunPage>, ApiError> {
    let limit = params.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit {limit}: a page holds 1 to {MAX_PAGE} runs"
        )));
    }
    let component = match params.component {
        Some(reference) => Some(state.runtime.catalog().component_digest(&tenant.id, &reference).await?),
        None => None,
    };
    let query = RunQuery {
        workflow: params.workflow.map(String::from),
        component,
        tag: params.tag,
        created_from_ms: params
            .created_after
            .as_deref()
            .map(|at| created("created_after", at))
            .transpose()?,
        created_before_ms: params
            .created_before
            .as_deref()
            .map(|at| created("created_before", at))
            .transpose()?,
        state: params.status.map(|status| status.name().to_owned()),
        after: params.cursor.map(|Cursor(cursor)| cursor),
        limit: limit as usize,
        newest_first: params.order == Some(ListOrder::NewestFirst),
        examine_at_most: usize::MAX,
    };
    let (listing, next) = state.runtime.search().page(&tenant.id, &query).await?;
    Ok(Json(RunPage {
        runs: listing.runs,
        next_cursor: next.map(|cursor| cursor.to_string()),
        unreadable: listing.unreadable,
    }))
}

/// `at` (RFC 3339) in milliseconds since 1970, for the listing's `what`.
fn created(what: &str, at: &str) -> Result<u64, ApiError> {
    let at_ms = parse_time(at).map_err(|e| {
        ApiError::bad_request(format!(
            "{what} `{at}` is not an RFC 3339 time ({e}): write e.g. 2026-12-01T00:00:00Z"
        ))
    })?;
    Ok(u64::try_from(at_ms).unwrap_or(0))
}

/// Where a run stands. For a run that continued as new (any generation's
/// id, or its chain's root's), where the chain's latest generation stands:
/// `run_id` and `chain` name it, and a chain that ended shows its final
/// output.
#[utoipa::path(get, path = "/v1/runs/{id}", params(RunPath),
    responses((status = 200, body = RunStatus), Malformed, UnknownRun, Refusals))]
pub async fn status(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(RunPath { id }): Path<RunPath>,
) -> Result<Json<RunStatus>, ApiError> {
    Ok(Json(state.runtime.status(&tenant.id, &id).await?))
}

#[derive(Deserialize, IntoParams)]
pub struct WaitParams {
    /// How long to wait for the run to finish (default 30 s, at most 60 s:
    /// a longer timeout waits 60 s).
    #[param(inline)]
    timeout: Option<Timeout>,
}

/// Wait (long-poll) until a run finishes or the timeout passes. A run that
/// continues as new is waited for until its chain's last generation ends.
#[utoipa::path(get, path = "/v1/runs/{id}/wait", params(RunPath, WaitParams),
    responses((status = 200, body = RunStatus), Malformed, UnknownRun, Refusals))]
pub async fn wait(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(RunPath { id }): Path<RunPath>,
    Query(params): Query<WaitParams>,
) -> Result<Json<RunStatus>, ApiError> {
    let timeout = params.timeout.unwrap_or(Timeout(DEFAULT_WAIT));
    Ok(Json(
        state.runtime.runs().wait(&tenant.id, &id, held_for(timeout)).await?,
    ))
}

/// One journal entry.
#[derive(Serialize, ToSchema)]
pub struct JournalEntry {
    pub seq: u64,
    pub kind: String,
    pub name: String,
    pub attempts: u32,
    pub started_at_ms: u64,
    pub finished_at_ms: u64,
    /// What the call returned, as recorded.
    #[schema(value_type = Object)]
    pub recorded: Value,
}

impl From<Entry> for JournalEntry {
    fn from(entry: Entry) -> Self {
        Self {
            seq: entry.seq,
            kind: entry.call.kind.to_string(),
            name: entry.call.name,
            attempts: entry.attempts,
            started_at_ms: entry.started_at_ms,
            finished_at_ms: entry.finished_at_ms,
            recorded: serde_json::to_value(&entry.recorded).unwrap_or(Value::Null),
        }
    }
}

/// A run's journal: every durable call and its result.
#[utoipa::path(get, path = "/v1/runs/{id}/journal", params(RunPath),
    responses((status = 200, body = Vec<JournalEntry>), Malformed, UnknownRun, Refusals))]
pub async fn journal(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(RunPath { id }): Path<RunPath>,
) -> Result<Json<Vec<JournalEntry>>, ApiError> {
    let entries = state.runtime.history(&tenant.id, &id).await?;
    Ok(Json(entries.into_iter().map(JournalEntry::from).collect()))
}

/// A payload a run stored apart, and its run.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct PayloadPath {
    #[param(inline)]
    id: RunId,
    /// Its SHA-256, 64 hex digits, as the journal names it.
    #[param(pattern = "^[0-9a-f]{64}$")]
    sha256: String,
}

/// A payload the run stored apart (a step's output past the host's
/// offload threshold, which its journal entry names as `{sha256, bytes}`):
/// its JSON, checked against its name.
#[utoipa::path(get, path = "/v1/runs/{id}/payloads/{sha256}", params(PayloadPath),
    responses(
        (status = 200, body = Value, content_type = "application/json", description = "the payload"),
        (status = 404, body = ErrorBody, description = "no such run, or the run stored no payload of that name"),
        Malformed, Refusals,
    ))]
pub async fn payload(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(PayloadPath { id, sha256 }): Path<PayloadPath>,
) -> Result<Response, ApiError> {
    match state.runtime.runs().stored_payload(&tenant.id, &id, &sha256).await? {
        Some(text) => Ok(([(header::CONTENT_TYPE, "application/json")], text).into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("run `{id}` stored no payload {sha256}: its journal names the ones it did"),
        )),
    }
}

/// The signal an operation sends, to which run.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SignalPath {
    #[param(inline)]
    id: RunId,
    #[param(inline)]
    name: SignalName,
}

#[derive(Deserialize, IntoParams)]
pub struct SignalParams {
    /// An idempotency key: sending again with the same id stores the signal once.
    #[param(inline)]
    signal_id: Option<SignalId>,
}

/// Send a signal (the body is its JSON payload); buffered until the run waits for it.
/// Sent to a run that continued as new, it goes to the chain's latest generation.
#[utoipa::path(post, path = "/v1/runs/{id}/signals/{name}", params(SignalPath, SignalParams),
    request_body(content = Value, content_type = "application/json", description = "the payload: any JSON, unless the run's component declares a JSON Schema for the signal (then 400 names the failing path)"),
    responses(
        (status = 202, description = "stored (or already stored under this `signal_id`)"),
        (status = 409, body = ErrorBody, description = "the run has finished"),
        (status = 413, body = ErrorBody, description = "the payload is over the tenant's size quota"),
        Malformed, UnknownRun, Throttled, Refusals,
    ))]
pub async fn signal(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(SignalPath { id, name }): Path<SignalPath>,
    Query(params): Query<SignalParams>,
    Body(body): Body,
) -> Result<StatusCode, ApiError> {
    let payload =
        std::str::from_utf8(&body).map_err(|_| ApiError::bad_request("the signal payload is not UTF-8 JSON"))?;
    state
        .runtime
        .runs()
        .signal_with_id(&tenant.id, &id, &name, payload, params.signal_id.as_ref())
        .await?;
    Ok(StatusCode::ACCEPTED)
}

#[derive(Deserialize, ToSchema, Default)]
pub struct CancelRun {
    /// Why, kept on the run.
    pub reason: Option<String>,
}

/// Cancel a run: its running step attempt is interrupted and it ends `cancelled`.
/// Given a run that continued as new, the chain's latest generation is cancelled.
#[utoipa::path(post, path = "/v1/runs/{id}/cancel", params(RunPath),
    request_body(content = Option<CancelRun>, description = "optional"),
    responses(
        (status = 202, description = "the cancellation is recorded; the run ends `cancelled`"),
        (status = 409, body = ErrorBody, description = "the run has finished"),
        Malformed, Oversized, JsonBody, UnknownRun, Refusals,
    ))]
pub async fn cancel(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(RunPath { id }): Path<RunPath>,
    OptionalJson(request): OptionalJson<CancelRun>,
) -> Result<StatusCode, ApiError> {
    let reason = request.reason.unwrap_or_else(|| "cancelled through the API".into());
    state
        .runtime
        .runs()
        .cancel_in_background(&tenant.id, &id, &reason)
        .await?;
    Ok(StatusCode::ACCEPTED)
}

#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct PauseRun {
    /// Why, kept on the run while it is paused.
    pub reason: Option<String>,
    /// Stop a step attempt under way (it is made again once the run is
    /// resumed, so the step must be safe to run again, as after a crash)
    /// instead of letting it finish. False by default.
    pub interrupt: Option<bool>,
}

/// Pause a run: it keeps its place and its buffered signals, and starts no
/// activation and no step attempt until resumed; an attempt under way
/// finishes and is journaled, unless `interrupt` stops it. Given a run that continued as new, the
/// chain's latest generation is paused. Pausing a paused run keeps the
/// first pause.
#[utoipa::path(post, path = "/v1/runs/{id}/pause", params(RunPath),
    request_body(content = Option<PauseRun>, description = "optional"),
    responses(
        (status = 202, description = "the pause is recorded; the run's status shows it"),
        (status = 409, body = ErrorBody, description = "the run has finished"),
        Malformed, Oversized, JsonBody, UnknownRun, Refusals,
    ))]
pub async fn pause(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(RunPath { id }): Path<RunPath>,
    OptionalJson(request): OptionalJson<PauseRun>,
) -> Result<StatusCode, ApiError> {
    let under_way = AttemptUnderWay::stopped_if(request.interrupt.unwrap_or(false));
    let reason = request.reason.unwrap_or_else(|| "paused through the API".into());
    state.runtime.runs().pause(&tenant.id, &id, &reason, under_way).await?;
    Ok(StatusCode::ACCEPTED)
}

/// Resume a paused run where it stopped (a run not paused is left as it is).
#[utoipa::path(post, path = "/v1/runs/{id}/resume", params(RunPath),
    responses(
        (status = 202, description = "the run goes on"),
        (status = 409, body = ErrorBody, description = "the run has finished"),
        Malformed, Oversized, UnknownRun, Refusals,
    ))]
pub async fn resume(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(RunPath { id }): Path<RunPath>,
) -> Result<StatusCode, ApiError> {
    state.runtime.runs().resume(&tenant.id, &id).await?;
    Ok(StatusCode::ACCEPTED)
}

/// End a run's current wait now (a sleep, or a signal wait's timeout: the
/// wait then takes no signal), as if its timer had run out: for operators,
/// and for testing by hand. Given a run that continued as new, the chain's
/// latest generation's wait. Advancing a wait twice is harmless.
#[utoipa::path(post, path = "/v1/runs/{id}/advance", params(RunPath),
    responses(
        (status = 200, body = Advanced, description = "the wait ends now, and the run goes on from it"),
        (status = 409, body = ErrorBody, description = "the run has finished, or is in no wait a timer ends"),
        Malformed, Oversized, UnknownRun, Refusals,
    ))]
pub async fn advance(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(RunPath { id }): Path<RunPath>,
) -> Result<Json<Advanced>, ApiError> {
    Ok(Json(state.runtime.runs().advance(&tenant.id, &id).await?))
}

/// Where to restart a run from.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestartRun {
    /// The first seq to execute anew: the run's journal entries before it
    /// are kept, replayed and not executed again (0 keeps none).
    pub seq: WholeNumber,
    /// A component name or digest of the tenant's (a new build) to run on
    /// instead of the run's own: it must replay the kept calls as recorded.
    pub component: Option<ComponentName>,
    /// The new run's id, which makes restarting idempotent; by default one
    /// is generated.
    pub run_id: Option<RunId>,
    /// Leave the run going if it has not finished; by default it is
    /// cancelled.
    #[serde(default)]
    pub keep_old: bool,
}

/// Restart a run from a point: a new run, linked to this one, keeps its
/// journal before `seq` and executes from there, on the run's build or
/// another. The run is taken as named (not as its chain's latest
/// generation) and is cancelled unless it has finished or is kept. The
/// new run is admitted like any other; the signals the run had not taken
/// by `seq` are delivered to it again.
#[utoipa::path(post, path = "/v1/runs/{id}/restart", params(RunPath),
    request_body = RestartRun,
    responses(
        (status = 201, body = Restarted, description = "the new run is started"),
        (status = 404, body = ErrorBody, description = "no such run, or no such component"),
        (status = 409, body = ErrorBody, description = "the run cannot restart there: past its journal, inside a step still running or a child not yet awaited, after its cancellation, or on a build that does not replay the kept calls"),
        (status = 415, body = ErrorBody, description = "the body is not `Content-Type: application/json`"),
        Malformed, Oversized, JsonBody, Refusals,
    ))]
pub async fn restart(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(RunPath { id }): Path<RunPath>,
    extract::Json(request): extract::Json<RestartRun>,
) -> Result<(StatusCode, Json<Restarted>), ApiError> {
    let component = build_named(&state, &tenant, request.component.as_ref()).await?;
    let restart = Restart {
        seq: request.seq.0,
        component,
        run_id: request.run_id,
        keep_old: request.keep_old,
    };
    let runs = state.runtime.runs();
    let restarted = runs.restart(&tenant.id, &id, restart).await?;
    runs.drive_in_background(&tenant.id, &restarted.run_id);
    Ok((StatusCode::CREATED, Json(restarted)))
}

/// What a replay checks the journal against.
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct ReplayRun {
    /// A component name or digest of the tenant's (a new build) to replay
    /// instead of the one the run was started with.
    pub component: Option<ComponentName>,
}

/// Re-execute a run against its journal without running any step.
#[utoipa::path(post, path = "/v1/runs/{id}/replay", params(RunPath),
    request_body(content = Option<ReplayRun>, description = "optional"),
    responses(
        (status = 200, body = ReplayReport),
        (status = 404, body = ErrorBody, description = "no such run, or no such component"),
        Malformed, Oversized, JsonBody, Refusals,
    ))]
pub async fn replay(
    State(state): State<ApiState>,
    Caller(tenant): Caller,
    Path(RunPath { id }): Path<RunPath>,
    OptionalJson(request): OptionalJson<ReplayRun>,
) -> Result<Json<ReplayReport>, ApiError> {
    let build = build_named(&state, &tenant, request.component.as_ref()).await?;
    Ok(Json(state.runtime.runs().replay(&tenant.id, &id, build).await?))
}

/// The tenant's build `reference` names, if a request names one.
async fn build_named(
    state: &ApiState,
    tenant: &Tenant,
    reference: Option<&ComponentName>,
) -> Result<Option<Arc<Loaded>>, ApiError> {
    match reference {
        Some(reference) => Ok(Some(state.runtime.component(&tenant.id, reference.as_str()).await?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_holds_its_request_a_minute_at_most() {
        let held = |timeout| held_for(Timeout(timeout));
        assert_eq!(held(Duration::ZERO), Duration::ZERO);
        assert_eq!(
            held(MAX_WAIT - Duration::from_nanos(1)),
            MAX_WAIT - Duration::from_nanos(1)
        );
        assert_eq!(held(MAX_WAIT), MAX_WAIT);
        assert_eq!(held(MAX_WAIT + Duration::from_nanos(1)), MAX_WAIT);
        assert_eq!(held(Duration::MAX), MAX_WAIT);
    }
}
