//! The records stored about a run.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::config::LimitRequest;
use crate::contract::bindings::StepError;
use crate::store::RunId;

use super::payload::Payload;

/// How a run was started; written once, when it is submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's id, unique in its tenant's store.
    pub run_id: RunId,
    /// The workflow the run executes, by the name its component exports.
    pub workflow: String,
    /// Digest of the component that runs the workflow.
    pub component: String,
    /// Other components the run may call steps of, by the name it uses
    /// (`name/step`), pinned to a digest when the run started.
    pub links: BTreeMap<String, String>,
    /// The workflow's input (JSON text, or a reference to it stored apart).
    pub input: Payload,
    /// Digest of `input` (see [`digest`]): a submission again under the same
    /// run id must match it.
    pub input_digest: String,
    /// When the run was created, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// When the run was created, in microseconds since the Unix epoch,
    /// later than every run its host created before it (even within one
    /// microsecond); `None` in runs stored before it was
    /// kept. Read through [`RunRecord::created_us`].
    #[serde(default)]
    pub created_at_us: Option<u64>,
    /// Step limits the run asked for, below its tenant's.
    #[serde(default)]
    pub limits: LimitRequest,
    /// The run that started this one as its child.
    #[serde(default)]
    pub parent: Option<RunId>,
    /// How many parents up the run's tree begins: 0 for a run a client
    /// started, 1 for its child.
    #[serde(default)]
    pub depth: u32,
    /// The host that created the run, which drives it first (epoch 0 of
    /// its claims); `None` in runs stored before hosts claimed runs.
    #[serde(default)]
    pub host: Option<crate::cluster::HostId>,
    /// The process of `host` that created the run: its claim at epoch 0 is
    /// that process's, not a twin's under the same id; `None` in runs
    /// stored before claims named one.
    #[serde(default)]
    pub host_incarnation: Option<crate::cluster::Incarnation>,
    /// Which run of its id this is: 0 for the first, and for a run whose id
    /// retention deleted a run of, one above every incarnation it deleted
    /// (see `journal::incarnations`). Its claims' epochs, the fencing tokens
    /// of its steps, lie above every earlier incarnation's
    /// ([`crate::cluster::epochs_of`]), and its steps' idempotency keys name it.
    #[serde(default)]
    pub incarnation: u64,
    /// When the run was asked to start, in milliseconds since the Unix
    /// epoch: no instance runs before then.
    #[serde(default)]
    pub start_at_ms: Option<u64>,
    /// When the run must have ended, in milliseconds since the Unix epoch:
    /// then it is cancelled, and ends `deadline-exceeded`.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    /// Where to POST the run's end (see `runtime::hooks`).
    #[serde(default)]
    pub notify: Option<String>,
    /// The tags it was given, to search runs by.
    #[serde(default)]
    pub tags: Vec<crate::store::RunTag>,
    /// Its place in line when instance slots or its concurrency key's
    /// places are scarce: [`FIRST_PRIORITY`] goes first.
    #[serde(default = "default_priority")]
    pub priority: u8,
    /// At most so many runs sharing its key execute at once.
    #[serde(default)]
    pub concurrency: Option<ConcurrencyLimit>,
    /// The builds the run ran on before an upgrade moved it to `component`,
    /// oldest first: read from its build record (`runs/{run}/build`), never
    /// part of the run record as written.
    #[serde(default, skip_serializing)]
    pub earlier_builds: Vec<String>,
    /// Where the run stands in a chain of runs that continued as new;
    /// `None` for a run a client or a parent started (a chain's root).
    #[serde(default)]
    pub chain: Option<ChainLink>,
    /// The run this one restarts, and where: its journal begins with that
    /// run's entries before the seq, which it replays and never executes.
    #[serde(default)]
    pub restarted_from: Option<RestartPoint>,
    /// Set in the record a recovery stores in place of a run whose
    /// submission noted it open but never created it: no run of this
    /// creation can be created after (see [`RunRecord::abandoned`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abandoned: Option<Abandoned>,
}

/// Who gave a run's creation up, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Abandoned {
    /// The host whose recovery found the run noted open and never created.
    pub by: crate::cluster::HostId,
    /// When, in milliseconds since the Unix epoch on that host's clock.
    pub at_ms: u64,
}

impl RunRecord {
    /// When the run was created, in microseconds: what orders the runs
    /// waiting in line for a concurrency key's place.
    pub fn created_us(&self) -> u64 {
        self.created_at_us
            .unwrap_or_else(|| self.created_at_ms.saturating_mul(1_000))
    }

    /// The epoch of its creator's claim: its incarnation's first.
    pub fn first_epoch(&self) -> u64 {
        crate::cluster::epochs_of(self.incarnation).start
    }

    /// How many entries the run's journal begins with that another run
    /// wrote: those a restart kept (0 for a run that was not restarted).
    pub fn kept_calls(&self) -> u64 {
        self.restarted_from.as_ref().map_or(0, |point| point.seq)
    }
}

/// Where a run was restarted from (see `runtime::restart`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RestartPoint {
    /// The run restarted.
    #[schema(value_type = String)]
    pub run: RunId,
    /// The first seq executed anew: the restarted run's entries before it
    /// are kept.
    pub seq: u64,
}

/// Which build a run moved to by an upgrade, and those it ran on before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildRecord {
    /// Digest of the component the run moved to.
    pub component: String,
    /// Digests of the builds it ran on before, oldest first.
    pub earlier: Vec<String>,
    /// When the upgrade moved the run, in milliseconds since the Unix epoch.
    pub moved_at_ms: u64,
}

/// The priority that goes first, the one that goes last, and the one a run
/// has unless it asks for another (as Temporal's priority keys: lower first).
pub const FIRST_PRIORITY: u8 = 1;
/// The priority that goes last.
pub const LAST_PRIORITY: u8 = 9;
/// The priority a run has unless it asks for another.
pub const DEFAULT_PRIORITY: u8 = 5;

fn default_priority() -> u8 {
    DEFAULT_PRIORITY
}

/// How many runs of one concurrency key may execute at once: from when one
/// starts until it ends, waits included, on whichever hosts drive them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConcurrencyLimit {
    /// The key the runs share.
    pub key: crate::store::ConcurrencyKey,
    /// How many of them may execute at once (at least 1).
    pub limit: u32,
}

/// A generation's place in its chain: the runs one logical run went
/// through, each ended by `continue-as-new` and continued by the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChainLink {
    /// The chain's first run, whose id a client started it under.
    #[schema(value_type = String)]
    pub root: RunId,
    /// Which generation this run is: the root is 0, the run it continued
    /// as is 1, and so on.
    pub generation: u64,
    /// The generation this one continues.
    #[schema(value_type = String)]
    pub previous: RunId,
}

impl RunRecord {
    /// What a recovery stores in place of the record of run `run` created
    /// at `created_at_ms`, which its submission noted open and never
    /// created: the record's key taken (create-only), that creation, late,
    /// fails, and the run is known never to have been.
    pub fn abandoned(run: RunId, created_at_ms: u64, abandoned: Abandoned) -> Self {
        Self {
            abandoned: Some(abandoned),
            ..Self::bare(
                run,
                String::new(),
                String::new(),
                Payload::Inline("null".into()),
                created_at_ms,
            )
        }
    }

    fn bare(run_id: RunId, workflow: String, component: String, input: Payload, created_at_ms: u64) -> Self {
        Self {
            run_id,
            workflow,
            component,
            links: BTreeMap::new(),
            input,
            input_digest: String::new(),
            created_at_ms,
            created_at_us: None,
            limits: LimitRequest::default(),
            parent: None,
            depth: 0,
            host: None,
            host_incarnation: None,
            incarnation: 0,
            start_at_ms: None,
            deadline_ms: None,
            notify: None,
            tags: Vec::new(),
            priority: DEFAULT_PRIORITY,
            concurrency: None,
            earlier_builds: Vec::new(),
            chain: None,
            restarted_from: None,
            abandoned: None,
        }
    }
}

#[cfg(test)]
impl RunRecord {
    /// A run of workflow `w` of component `c`, created at `created_at_ms`,
    /// for tests that need a record and nothing it holds.
    pub fn example(run: &str, created_at_ms: u64) -> Self {
        let run = RunId::new(run).expect("a valid run id");
        Self::bare(run, "w".into(), "c".into(), "{}".into(), created_at_ms)
    }
}

/// How a run ended; written once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    /// The workflow returned a result.
    Completed {
        /// What the workflow returned (JSON text, or a reference to it
        /// stored apart).
        output: Payload,
    },
    /// The workflow returned an error, or the host ended the run as failed.
    Failed {
        /// What kind of failure it was, in a word or two: `workflow-error`,
        /// `non-determinism`, `deadline-exceeded`, and so on.
        kind: String,
        /// What went wrong, in words.
        message: String,
    },
    /// The run was cancelled before its workflow returned.
    Cancelled {
        /// Why the run was cancelled, as its cancellation said.
        reason: String,
    },
    /// The run continued as new: its generation ended, and the logical run
    /// goes on as run `next`, the chain's next generation.
    Continued {
        /// The run the chain goes on as.
        next: RunId,
    },
}

impl Outcome {
    /// The outcome in one word, as metrics, log lines and traces name it.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Completed { .. } => "completed",
            Outcome::Failed { .. } => "failed",
            Outcome::Cancelled { .. } => "cancelled",
            Outcome::Continued { .. } => "continued",
        }
    }

    /// Whether a replay that ended `replayed` (its output inline) ended as
    /// this outcome did: a stored output is compared by its digest, unread.
    pub fn replayed_as(&self, replayed: &Outcome) -> bool {
        match (self, replayed) {
            (
                Outcome::Completed { output },
                Outcome::Completed {
                    output: Payload::Inline(text),
                },
            ) => output.holds(text),
            _ => self == replayed,
        }
    }

    /// The outcome as a child's parent sees it. A child that continued has
    /// not ended: its parent follows the chain (see `runtime::children`)
    /// and sees how the chain's last generation ended.
    pub fn as_result(&self) -> Result<Payload, String> {
        match self {
            Outcome::Completed { output } => Ok(output.clone()),
            Outcome::Failed { kind, message } => Err(format!("{kind}: {message}")),
            Outcome::Cancelled { reason } => Err(format!("cancelled: {reason}")),
            Outcome::Continued { next } => Err(format!("continued as run {next}")),
        }
    }
}

/// In words: `completed with {output}`, `failed: {kind}: {message}`,
/// `cancelled: {reason}`, `continued as run {next}`.
impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Completed { output } => write!(f, "completed with {output}"),
            Outcome::Failed { kind, message } => write!(f, "failed: {kind}: {message}"),
            Outcome::Cancelled { reason } => write!(f, "cancelled: {reason}"),
            Outcome::Continued { next } => write!(f, "continued as run {next}"),
        }
    }
}

/// A request to cancel a run; written once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRecord {
    /// Why the run is cancelled, as the requester said: the run's outcome
    /// carries it.
    pub reason: String,
    /// When the cancellation was asked for, in milliseconds since the Unix
    /// epoch.
    pub requested_at_ms: u64,
    /// Asked by the host as the run's deadline passed: the run then ends
    /// `deadline-exceeded`, not `cancelled`.
    #[serde(default)]
    pub deadline: bool,
}

impl CancelRecord {
    /// How a run cancelled so ends, whatever its workflow returned.
    pub fn outcome(self) -> Outcome {
        if self.deadline {
            Outcome::Failed {
                kind: "deadline-exceeded".into(),
                message: self.reason,
            }
        } else {
            Outcome::Cancelled { reason: self.reason }
        }
    }
}

/// A request to pause a run: it starts no activation and no step attempt
/// until it is resumed (the record deleted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PauseRecord {
    /// Why, as the requester said.
    pub reason: String,
    /// When it was paused, in milliseconds since the Unix epoch.
    pub paused_at_ms: u64,
    /// Whether a step attempt under way was stopped (to be made again once
    /// the run is resumed), not let finish.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupt: bool,
}

/// A request to end a run's wait (a sleep, or a signal wait's timeout) at
/// once: its timer's deadline becomes the moment it was advanced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AdvanceRecord {
    /// When it was advanced, in milliseconds since the Unix epoch.
    pub advanced_at_ms: u64,
}

/// What kind of durable call an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CallKind {
    /// A step call, named by the step.
    Step,
    /// A durable sleep.
    Sleep,
    /// A wait for a signal, named by the signal's name.
    Signal,
    /// A reading of the clock, taken once and replayed.
    Now,
    /// A random number, drawn once and replayed.
    Random,
    /// A memo set, named by its key.
    MemoSet,
    /// A wait for the first of several started steps to finish.
    AwaitAny,
    /// The start of a child run, named by the child's workflow.
    StartChild,
    /// A wait for a child run to end, named by the child's run id.
    AwaitChild,
    /// A patch marker: the run reached `patched(change-id)` on a build that
    /// makes the call, and takes the changed code from here. Named by the
    /// change id.
    Patch,
    /// A value appended to one of the run's streams, named by the stream.
    StreamAppend,
}

impl fmt::Display for CallKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CallKind::Step => "step",
            CallKind::Sleep => "sleep",
            CallKind::Signal => "signal",
            CallKind::Now => "now",
            CallKind::Random => "random",
            CallKind::MemoSet => "memo-set",
            CallKind::AwaitAny => "await-any",
            CallKind::StartChild => "start-child",
            CallKind::AwaitChild => "await-child",
            CallKind::Patch => "patch",
            CallKind::StreamAppend => "stream-append",
        })
    }
}

/// A durable call as the workflow made it: what replay checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    /// What kind of call it is.
    pub kind: CallKind,
    /// What the call names: the step, the signal, the memo's key, the child's
    /// workflow or run, the patch's change id, or the stream; empty for calls that name
    /// nothing (a sleep, `now`, `random`, `await-any`).
    pub name: String,
    /// Digest of the call's input (see [`digest`]).
    pub input_digest: String,
}

impl Call {
    /// A call of `kind` named `name`, with the digest of `input`.
    pub fn new(kind: CallKind, name: impl Into<String>, input: &[u8]) -> Self {
        Self {
            kind,
            name: name.into(),
            input_digest: digest(input),
        }
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A digest read from a damaged or foreign record may be short or not
        // hex: show it whole rather than slice inside a character.
        let digest = self.input_digest.get(..12).unwrap_or(&self.input_digest);
        write!(f, "{} `{}` (input {digest})", self.kind, self.name)
    }
}

/// What a durable call returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Recorded {
    /// The step finished, after as many attempts as it took.
    Step {
        /// The step's output (JSON text, or a reference to it stored
        /// apart), or the error its last attempt ended with.
        result: Result<Payload, StepError>,
    },
    /// The timer fired.
    Slept,
    /// The signal that was taken (its key, so it is never taken twice), or
    /// none if the wait timed out.
    Signal {
        /// The signal's payload (as its signal record holds it); `None` if
        /// the wait timed out.
        payload: Option<Payload>,
        /// The store key of the signal taken; `None` if the wait timed out.
        key: Option<String>,
    },
    /// What `now` (milliseconds since the Unix epoch) or `random` returned,
    /// given again on replay.
    Value(u64),
    /// A memo was set.
    MemoSet {
        /// The value the memo was set to (the call's name is its key).
        value: Payload,
    },
    /// The index, among the awaited handles, of the first to finish.
    Winner(u32),
    /// The child run that was started, or why it could not be.
    Child {
        /// The child run's id, or why it could not be started.
        run: Result<RunId, String>,
    },
    /// How a child run ended: its output, or why it failed.
    ChildEnded {
        /// The child's output (JSON text, or a reference to it, stored
        /// apart under this run), or how it failed, in words.
        result: Result<Payload, String>,
    },
    /// The run was cancelled during this call: a wait ended early, an
    /// awaited step was interrupted.
    Cancelled {
        /// Why the run was cancelled.
        reason: String,
    },
    /// A patch marker's only answer: the run takes the change.
    Patched,
    /// A value was appended to a stream (the call's name): what its
    /// readers are sent.
    Appended {
        /// The value (JSON text).
        value: String,
    },
}

impl Recorded {
    /// The payload the call returned, if it returned one: a step's output,
    /// a signal's payload, a memo's value, a child's output.
    pub fn payload(&self) -> Option<&Payload> {
        match self {
            Recorded::Step { result: Ok(payload) }
            | Recorded::Signal {
                payload: Some(payload), ..
            }
            | Recorded::MemoSet { value: payload }
            | Recorded::ChildEnded { result: Ok(payload) } => Some(payload),
            _ => None,
        }
    }
}

/// One journal entry: a durable call and its result.
///
/// Stored with its fields by position ([`Entry::encode`]), and so are those
/// of the [`Call`], [`Recorded`] and step error inside it: a new field goes
/// at the end of its struct or variant, with a default, and only the last
/// may be skipped when empty. A build reads entries with fewer fields than
/// it knows, not more: hosts sharing a bucket take a build with a new field
/// before any of them writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The entry's place in the run's journal: 0 for the first, one more for
    /// each after.
    pub seq: u64,
    /// The call as the workflow made it, which replay checks it makes again.
    pub call: Call,
    /// What the call returned: on replay, what the workflow is given again.
    pub recorded: Recorded,
    /// How many attempts the call took (steps; 1 otherwise).
    pub attempts: u32,
    /// When the call began (a step's first attempt, a wait's first start), in
    /// milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// When the call's result was recorded, in milliseconds since the Unix
    /// epoch.
    pub finished_at_ms: u64,
    /// When a step's last attempt began, if it took more than one (its
    /// earlier ones are under `attempts/`); absent otherwise, so an entry of
    /// one attempt is stored as it was before this was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt_started_at_ms: Option<u64>,
}

impl Entry {
    /// The entry as stored, in its envelope, its fields by position.
    pub fn encode(&self) -> Vec<u8> {
        super::envelope::encode_positional(self)
    }
}

/// A step attempt that failed while the step was still being retried, so a
/// crash between attempts resumes the count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// Which attempt of the step it was, counting from 1.
    pub attempt: u32,
    /// How the attempt failed.
    pub error: StepError,
    /// When the attempt began (0 in records written before this was kept).
    #[serde(default)]
    pub started_at_ms: u64,
    /// When the attempt failed, in milliseconds since the Unix epoch: the
    /// wait before the next attempt counts from then.
    pub failed_at_ms: u64,
}

/// When a sleep or a signal wait ends, fixed when the wait first began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerRecord {
    /// When the wait ends, in milliseconds since the Unix epoch.
    pub deadline_ms: u64,
    /// When the wait first began (0 in records written before this was
    /// kept), so its entry says how long it really lasted.
    #[serde(default)]
    pub started_at_ms: u64,
    /// The signal awaited, or none for a sleep.
    pub signal: Option<String>,
}

/// A signal sent to a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalRecord {
    /// What the sender passed (JSON text): what the workflow that takes the
    /// signal receives; stored apart when large, under the run it is sent
    /// to, so the journal entry that takes it names the same object.
    pub payload: Payload,
    /// When it was sent, in milliseconds since the Unix epoch: signals of one
    /// name are taken oldest first.
    pub sent_at_ms: u64,
}

/// The digest replay compares inputs by: SHA-256, hex, truncated to 128 bits.
pub fn digest(bytes: &[u8]) -> String {
    // Into a buffer, not through `hex::encode`'s iterator of chars: replay
    // takes a digest per call, and the iterator was 3 % of a recovery.
    let mut hex = [0; 32];
    hex::encode_to_slice(&Sha256::digest(bytes)[..16], &mut hex).expect("32 hex digits for 16 bytes");
    String::from_utf8(hex.to_vec()).expect("hex digits are ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_tells_inputs_apart() {
        assert_eq!(digest(b"a"), digest(b"a"));
        assert_ne!(digest(b"a"), digest(b"b"));
        assert_eq!(digest(b"").len(), 32);
    }

    #[test]
    fn an_entry_of_one_attempt_is_stored_as_before_the_last_attempts_start_was_kept() {
        let entry = Entry {
            seq: 3,
            call: Call::new(CallKind::Step, "charge", b"{}"),
            recorded: Recorded::Slept,
            attempts: 1,
            started_at_ms: 5,
            finished_at_ms: 9,
            last_attempt_started_at_ms: None,
        };
        let retried = Entry {
            attempts: 2,
            last_attempt_started_at_ms: Some(7),
            ..entry.clone()
        };
        // Six fields by position, the seventh only when there is one.
        let (once, again) = (entry.encode(), retried.encode());
        assert_eq!(again.len(), once.len() + 1, "one byte for a small number");
        assert_eq!(crate::journal::decode::<Entry>(&once).expect("decodes"), entry);
        assert_eq!(crate::journal::decode::<Entry>(&again).expect("decodes"), retried);
    }

    #[test]
    fn entries_stored_by_name_before_are_read_as_they_were() {
        let entry = Entry {
            seq: 12,
            call: Call::new(CallKind::Signal, "approved", b"{}"),
            recorded: Recorded::Signal {
                payload: Some("{}".into()),
                key: Some("k".into()),
            },
            attempts: 1,
            started_at_ms: 5,
            finished_at_ms: 9,
            last_attempt_started_at_ms: Some(6),
        };
        let by_name = crate::journal::encode(&entry);
        assert!(String::from_utf8_lossy(&by_name).contains("finished_at_ms"));
        assert_eq!(crate::journal::decode::<Entry>(&by_name).expect("decodes"), entry);
        assert!(
            entry.encode().len() < by_name.len() / 2,
            "by position is less than half the size"
        );
    }

    #[test]
    fn a_call_with_a_short_or_multibyte_digest_still_displays() {
        for input_digest in ["ab", "0123456789a\u{1F600}"] {
            let call = Call {
                kind: CallKind::Step,
                name: "charge".into(),
                input_digest: input_digest.into(),
            };
            assert!(call.to_string().ends_with(&format!("(input {input_digest})")));
        }
        assert!(
            Call::new(CallKind::Step, "charge", b"x")
                .to_string()
                .ends_with(&format!("(input {})", &digest(b"x")[..12]))
        );
    }
}
