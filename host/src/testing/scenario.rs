//! What a scenario says: the workflow and its input, the steps it stubs,
//! the signals (and a cancellation) it sends at virtual times, and what it
//! expects. Built in Rust with [`Scenario::new`] and its builders, or read
//! from a TOML file with [`Scenario::from_toml`], which checks the whole
//! file and names the field that is wrong.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::contract::bindings::StepErrorKind;
use crate::sandbox::kind_name;

/// The virtual time a scenario may take by default: past it, a run that has
/// not finished fails the scenario.
pub const DEFAULT_UNTIL: Duration = Duration::from_secs(366 * 24 * 3600);

/// The step error kinds a stub's attempt may fail with: those an attempt
/// itself ends with (`unknown-step` and `cancelled` are the host's to give).
pub const STUB_FAILURE_KINDS: [StepErrorKind; 7] = [
    StepErrorKind::Failed,
    StepErrorKind::FuelExhausted,
    StepErrorKind::TimedOut,
    StepErrorKind::MemoryLimit,
    StepErrorKind::Trapped,
    StepErrorKind::OutputTooLarge,
    StepErrorKind::InvalidOutput,
];

/// A scenario file or value that cannot be run as it is.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The scenario file is no valid scenario: bad TOML, an unknown or missing field, or a bad value.
    #[error("{file}: {reason}")]
    Invalid {
        /// The scenario file's path.
        file: String,
        /// What is wrong, naming the field (fix it and run again).
        reason: String,
    },
    /// The scenario file could not be read (it is missing, say, or not UTF-8).
    #[error("cannot read scenario {file}: {reason}")]
    Unreadable {
        /// The scenario file's path.
        file: String,
        /// Why it could not be read, as the operating system gave it.
        reason: String,
    },
}

/// One test of a workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The scenario's name in reports (by default its workflow's, or its file's stem).
    pub name: String,
    /// The component file, when the scenario names one (a harness is given
    /// its component otherwise).
    pub component: Option<PathBuf>,
    /// The workflow the scenario runs, by name.
    pub workflow: String,
    /// The workflow's input (`null` when a scenario file gives none).
    pub input: Value,
    /// Where virtual time starts, in ms since the epoch (`None`: now).
    pub start_time_ms: Option<u64>,
    /// Stubs by step name; a step without one runs for real.
    pub stubs: BTreeMap<String, Stub>,
    /// Signals sent to the run, each at its virtual time.
    pub signals: Vec<TimedSignal>,
    /// When the run is cancelled, in virtual time from its start.
    pub cancel_at: Option<Duration>,
    /// When the run is paused, in virtual time from its start, and for how
    /// long (it is resumed then).
    pub pause: Option<(Duration, Duration)>,
    /// When the run's current wait (a sleep, or a signal wait's timeout)
    /// is advanced, ended at once, in virtual time from its start.
    pub advance_at: Vec<Duration>,
    /// The virtual time the run may take before the scenario fails.
    pub until: Duration,
    /// What the run must come to.
    pub expect: Expectations,
}

/// What a step's attempts answer instead of the step: in order, the last
/// one repeating; none means the real step runs. Each attempt takes `takes`
/// of virtual time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stub {
    /// What the attempts answer, in order, the last repeating; empty: the real step runs.
    pub answers: Vec<Answer>,
    /// The virtual time each attempt takes (zero by default).
    pub takes: Duration,
}

/// How one stubbed attempt ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The attempt succeeds with this output.
    Output(Value),
    /// The attempt fails, as a step's attempt would.
    Failure {
        /// The kind the attempt fails with: one of [`STUB_FAILURE_KINDS`].
        kind: StepErrorKind,
        /// The failure's message, as the step would report it.
        message: String,
        /// Retrying cannot help: the call fails at once (kind `failed` only,
        /// as a step reports it).
        permanent: bool,
    },
}

/// A signal sent at a virtual time.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedSignal {
    /// When, from the run's start.
    pub at: Duration,
    /// The signal's name, as the workflow waits for it.
    pub name: String,
    /// The signal's payload (`null` when a scenario file gives none).
    pub payload: Value,
}

/// What the run must come to. Every part left unset is not checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expectations {
    /// `completed`, `failed` or `cancelled`.
    pub outcome: Option<String>,
    /// The output, exactly (as JSON values).
    pub output: Option<Value>,
    /// Members the output must have, at any depth; arrays match exactly.
    pub output_contains: Option<Value>,
    /// A failed run's kind (`workflow-error`, `non-determinism`, ...).
    pub error_kind: Option<String>,
    /// Text a failed run's message, or a cancelled run's reason, contains.
    pub error_contains: Option<String>,
    /// Every step the run called, in journal order.
    pub steps: Option<Vec<ExpectedStep>>,
    /// The values each stream named must hold, in order (as JSON values),
    /// over every generation of the run.
    pub streams: Option<BTreeMap<String, Vec<Value>>>,
}

/// One step call the journal must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExpectedStep {
    /// The step the call must be of, by name.
    pub step: String,
    /// The input the call must be made with, exactly (as JSON values).
    pub input: Option<Value>,
    /// How many attempts the call must take, retries included.
    pub attempts: Option<u32>,
    /// The output the call must return, exactly (as JSON values).
    pub output: Option<Value>,
    /// The kind the call failed with, after its retries.
    pub error_kind: Option<String>,
}

impl Scenario {
    /// A scenario of `workflow` on `input`, stubbing nothing and expecting
    /// nothing yet.
    pub fn new(workflow: &str, input: Value) -> Self {
        Self {
            name: workflow.to_owned(),
            component: None,
            workflow: workflow.to_owned(),
            input,
            start_time_ms: None,
            stubs: BTreeMap::new(),
            signals: Vec::new(),
            cancel_at: None,
            pause: None,
            advance_at: Vec::new(),
            until: DEFAULT_UNTIL,
            expect: Expectations::default(),
        }
    }

    /// Names the scenario `name` in reports (it is named after its workflow otherwise).
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Answers `step`'s attempts with `stub` instead of running it.
    pub fn stub(mut self, step: &str, stub: Stub) -> Self {
        self.stubs.insert(step.to_owned(), stub);
        self
    }

    /// Sends signal `name` with `payload` `at` after the run starts.
    pub fn signal_at(mut self, at: Duration, name: &str, payload: Value) -> Self {
        self.signals.push(TimedSignal {
            at,
            name: name.to_owned(),
            payload,
        });
        self
    }

    /// Cancels the run `at` after it starts.
    pub fn cancel_at(mut self, at: Duration) -> Self {
        self.cancel_at = Some(at);
        self
    }

    /// Pauses the run `at` after it starts, and resumes it `lasts` later.
    pub fn paused(mut self, at: Duration, lasts: Duration) -> Self {
        self.pause = Some((at, lasts));
        self
    }

    /// Ends the run's current wait `at` after it starts, as an operator's
    /// `stepstone advance` would.
    pub fn advanced_at(mut self, at: Duration) -> Self {
        self.advance_at.push(at);
        self
    }

    /// Checks the run against `expect`, in place of what the scenario expected before.
    pub fn expect(mut self, expect: Expectations) -> Self {
        self.expect = expect;
        self
    }

    /// Reads the scenario in `text`, a TOML file at `path` (its name, unless
    /// it gives one, is the file's stem; a component path in it is relative
    /// to the file's folder).
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, ScenarioError> {
        let invalid = |reason: String| ScenarioError::Invalid {
            file: path.display().to_string(),
            reason,
        };
        let file: ScenarioFile = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let name = match &file.name {
            Some(name) => name.clone(),
            None => path
                .file_stem()
                .map_or_else(|| "scenario".to_owned(), |stem| stem.to_string_lossy().into_owned()),
        };
        let folder = path.parent().unwrap_or(Path::new(""));
        file.into_scenario(name, folder).map_err(invalid)
    }

    /// Reads the scenario file at `path`.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError::Unreadable {
            file: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::from_toml(&text, path)
    }
}

impl Stub {
    /// Every attempt returns `output`.
    pub fn output(output: Value) -> Self {
        Self::answers(vec![Answer::Output(output)])
    }

    /// Every attempt fails with `kind`.
    pub fn failing(kind: StepErrorKind, message: &str) -> Self {
        Self::answers(vec![Answer::failure(kind, message)])
    }

    /// The attempts answer `answers` in order, the last repeating.
    pub fn answers(answers: Vec<Answer>) -> Self {
        Self {
            answers,
            takes: Duration::ZERO,
        }
    }

    /// The real step runs (taking, with [`taking`](Self::taking), that
    /// much longer).
    pub fn real() -> Self {
        Self::default()
    }

    /// Each attempt takes `takes` of virtual time.
    pub fn taking(mut self, takes: Duration) -> Self {
        self.takes = takes;
        self
    }

    /// What attempt number `attempt` (from 1) answers; `None`: the real step runs.
    pub fn answer(&self, attempt: u32) -> Option<&Answer> {
        let index = usize::try_from(attempt.saturating_sub(1)).unwrap_or(usize::MAX);
        self.answers.get(index).or(self.answers.last())
    }
}

impl Answer {
    /// A failure of `kind` saying `message`, which a retry may get past (not permanent).
    pub fn failure(kind: StepErrorKind, message: &str) -> Self {
        Self::Failure {
            kind,
            message: message.to_owned(),
            permanent: false,
        }
    }
}

/// A pause as a scenario file writes it: `pause = { at = "10s", for = "3h" }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PauseFile {
    at: String,
    #[serde(rename = "for")]
    lasts: String,
}

impl PauseFile {
    fn window(self) -> Result<(Duration, Duration), String> {
        let at = duration(&self.at).map_err(|e| format!("`pause.at`: {e}"))?;
        let lasts = duration(&self.lasts).map_err(|e| format!("`pause.for`: {e}"))?;
        Ok((at, lasts))
    }
}

/// A scenario as its TOML file writes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    name: Option<String>,
    component: Option<PathBuf>,
    workflow: String,
    /// TOML has no null: a scenario without input gives the workflow `null`.
    input: Option<Value>,
    start_time: Option<String>,
    #[serde(default)]
    steps: BTreeMap<String, StubFile>,
    #[serde(default)]
    signals: Vec<SignalFile>,
    cancel_at: Option<String>,
    pause: Option<PauseFile>,
    #[serde(default)]
    advance_at: Vec<String>,
    until: Option<String>,
    #[serde(default)]
    expect: ExpectFile,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StubFile {
    output: Option<Value>,
    fail: Option<String>,
    message: Option<String>,
    #[serde(default)]
    permanent: bool,
    attempts: Option<Vec<AnswerFile>>,
    #[serde(default)]
    real: bool,
    takes: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerFile {
    output: Option<Value>,
    fail: Option<String>,
    message: Option<String>,
    #[serde(default)]
    permanent: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignalFile {
    at: String,
    name: String,
    payload: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ExpectFile {
    outcome: Option<String>,
    output: Option<Value>,
    output_contains: Option<Value>,
    error_kind: Option<String>,
    error_contains: Option<String>,
    steps: Option<Vec<ExpectedStepFile>>,
    streams: Option<BTreeMap<String, Vec<Value>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectedStepFile {
    step: String,
    input: Option<Value>,
    attempts: Option<u32>,
    output: Option<Value>,
    error_kind: Option<String>,
}

const OUTCOMES: [&str; 3] = ["completed", "failed", "cancelled"];

impl ScenarioFile {
    fn into_scenario(self, name: String, folder: &Path) -> Result<Scenario, String> {
        let stubs = self
            .steps
            .into_iter()
            .map(|(step, stub)| {
                let stub = stub
                    .into_stub()
                    .map_err(|reason| format!("[steps.\"{step}\"]: {reason}"))?;
                Ok((step, stub))
            })
            .collect::<Result<_, String>>()?;
        let signals = self
            .signals
            .into_iter()
            .enumerate()
            .map(|(index, signal)| {
                let at = duration(&signal.at).map_err(|e| format!("[[signals]] number {}: `at`: {e}", index + 1))?;
                Ok(TimedSignal {
                    at,
                    name: signal.name,
                    payload: signal.payload.unwrap_or(Value::Null),
                })
            })
            .collect::<Result<_, String>>()?;
        let expect = self.expect.into_expectations()?;
        Ok(Scenario {
            name,
            component: self.component.map(|path| folder.join(path)),
            workflow: self.workflow,
            input: self.input.unwrap_or(Value::Null),
            start_time_ms: self.start_time.as_deref().map(start_time).transpose()?,
            stubs,
            signals,
            cancel_at: self
                .cancel_at
                .as_deref()
                .map(duration)
                .transpose()
                .map_err(|e| format!("`cancel_at`: {e}"))?,
            pause: self.pause.map(PauseFile::window).transpose()?,
            advance_at: self
                .advance_at
                .iter()
                .map(|at| duration(at).map_err(|e| format!("`advance_at`: {e}")))
                .collect::<Result<_, _>>()?,
            until: match self.until.as_deref() {
                Some(until) => duration(until).map_err(|e| format!("`until`: {e}"))?,
                None => DEFAULT_UNTIL,
            },
            expect,
        })
    }
}

impl StubFile {
    fn into_stub(self) -> Result<Stub, String> {
        let takes = self
            .takes
            .as_deref()
            .map(duration)
            .transpose()
            .map_err(|e| format!("`takes`: {e}"))?
            .unwrap_or_default();
        let given = [
            self.output.is_some(),
            self.fail.is_some(),
            self.attempts.is_some(),
            self.real,
        ];
        if given.iter().filter(|given| **given).count() != 1 {
            return Err("give exactly one of `output`, `fail`, `attempts` or `real = true`".into());
        }
        let answers = match self.attempts {
            Some(attempts) if attempts.is_empty() => return Err("`attempts` lists no attempt".into()),
            Some(attempts) => attempts
                .into_iter()
                .enumerate()
                .map(|(index, attempt)| {
                    answer(attempt.output, attempt.fail, attempt.message, attempt.permanent)
                        .map_err(|e| format!("attempt {}: {e}", index + 1))
                })
                .collect::<Result<_, String>>()?,
            None if self.real => Vec::new(),
            None => vec![answer(self.output, self.fail, self.message, self.permanent)?],
        };
        Ok(Stub { answers, takes })
    }
}

/// One stubbed attempt's answer: an output, or a failure of a kind an
/// attempt can end with.
fn answer(
    output: Option<Value>,
    fail: Option<String>,
    message: Option<String>,
    permanent: bool,
) -> Result<Answer, String> {
    match (output, fail) {
        (Some(output), None) if message.is_none() && !permanent => Ok(Answer::Output(output)),
        (Some(_), None) => Err("an `output` takes no `message` or `permanent`".into()),
        (None, Some(kind)) => {
            let kind = failure_kind(&kind)?;
            if permanent && kind != StepErrorKind::Failed {
                return Err(format!(
                    "only a `failed` attempt can be `permanent` (the step says so); `{}` is the host's",
                    kind_name(kind)
                ));
            }
            Ok(Answer::Failure {
                kind,
                message: message.unwrap_or_else(|| format!("stubbed {}", kind_name(kind))),
                permanent,
            })
        }
        (Some(_), Some(_)) => Err("give either `output` or `fail`, not both".into()),
        (None, None) => Err("give `output` or `fail`".into()),
    }
}

fn failure_kind(name: &str) -> Result<StepErrorKind, String> {
    STUB_FAILURE_KINDS
        .into_iter()
        .find(|kind| kind_name(*kind) == name)
        .ok_or_else(|| {
            let kinds: Vec<&str> = STUB_FAILURE_KINDS.into_iter().map(kind_name).collect();
            format!(
                "`fail = \"{name}\"` is no kind an attempt fails with; give one of {}",
                kinds.join(", ")
            )
        })
}

impl ExpectFile {
    fn into_expectations(self) -> Result<Expectations, String> {
        if let Some(outcome) = self.outcome.as_deref().filter(|outcome| !OUTCOMES.contains(outcome)) {
            return Err(format!(
                "[expect] `outcome = \"{outcome}\"`: give one of {}",
                OUTCOMES.join(", ")
            ));
        }
        let steps = self.steps.map(|steps| {
            steps
                .into_iter()
                .map(|step| ExpectedStep {
                    step: step.step,
                    input: step.input,
                    attempts: step.attempts,
                    output: step.output,
                    error_kind: step.error_kind,
                })
                .collect()
        });
        Ok(Expectations {
            outcome: self.outcome,
            output: self.output,
            output_contains: self.output_contains,
            error_kind: self.error_kind,
            error_contains: self.error_contains,
            steps,
            streams: self.streams,
        })
    }
}

/// A duration as people write it (`90s`, `1h 30m`, `2days`).
fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("`{text}` is no duration ({e}): write it as `90s` or `1h 30m`"))
}

fn start_time(text: &str) -> Result<u64, String> {
    let at = chrono::DateTime::parse_from_rfc3339(text)
        .map_err(|e| format!("`start_time = \"{text}\"` is no RFC 3339 time ({e}), e.g. 2026-01-01T09:00:00Z"))?;
    u64::try_from(at.timestamp_millis()).map_err(|_| format!("`start_time = \"{text}\"` is before 1970"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Scenario, String> {
        Scenario::from_toml(text, Path::new("scenarios/order.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_whole_scenario_reads_as_written() {
        let scenario = parse(
            r#"
            component = "../order.wasm"
            workflow = "place-order"
            input = { order_id = "o-1" }
            start_time = "2026-01-01T00:00:00Z"
            until = "2days"
            cancel_at = "30h"
            pause = { at = "1h", for = "3h 30m" }
            advance_at = ["2h", "25h"]
            [steps.charge]
            attempts = [{ fail = "timed-out" }, { output = { charge = "ch-1" } }]
            takes = "2s"
            [steps."billing/refund"]
            real = true
            [[signals]]
            at = "24h 30m"
            name = "approve"
            payload = { approved = true }
            [expect]
            outcome = "completed"
            steps = [{ step = "charge", attempts = 2 }]
            streams = { progress = [{ done = 1 }, "shipped"] }
            "#,
        )
        .expect("valid");
        assert_eq!(scenario.name, "order");
        assert_eq!(scenario.component, Some(PathBuf::from("scenarios/../order.wasm")));
        assert_eq!(scenario.input, serde_json::json!({"order_id": "o-1"}));
        assert_eq!(scenario.start_time_ms, Some(1_767_225_600_000));
        assert_eq!(scenario.until, Duration::from_secs(2 * 24 * 3600));
        assert_eq!(scenario.cancel_at, Some(Duration::from_secs(30 * 3600)));
        assert_eq!(
            scenario.pause,
            Some((Duration::from_secs(3600), Duration::from_secs(3 * 3600 + 1800)))
        );
        assert_eq!(
            scenario.advance_at,
            [Duration::from_secs(2 * 3600), Duration::from_secs(25 * 3600)]
        );
        let charge = &scenario.stubs["charge"];
        assert_eq!(charge.takes, Duration::from_secs(2));
        assert_eq!(
            charge.answer(1),
            Some(&Answer::failure(StepErrorKind::TimedOut, "stubbed timed-out"))
        );
        assert_eq!(
            charge.answer(2),
            Some(&Answer::Output(serde_json::json!({"charge": "ch-1"})))
        );
        assert_eq!(charge.answer(u32::MAX), charge.answer(2), "the last answer repeats");
        assert_eq!(scenario.stubs["billing/refund"].answer(1), None, "real");
        assert_eq!(scenario.signals[0].at, Duration::from_secs(24 * 3600 + 1800));
        assert_eq!(scenario.expect.steps.as_ref().map(Vec::len), Some(1));
        assert_eq!(
            scenario.expect.streams,
            Some(BTreeMap::from([(
                "progress".to_owned(),
                vec![serde_json::json!({"done": 1}), serde_json::json!("shipped")]
            )]))
        );
    }

    #[test]
    fn a_scenario_without_input_gives_null_and_defaults_the_rest() {
        let scenario = parse("workflow = \"w\"").expect("valid");
        assert_eq!(scenario.input, Value::Null);
        assert_eq!(scenario.until, DEFAULT_UNTIL);
        assert!(scenario.stubs.is_empty() && scenario.signals.is_empty());
    }

    #[test]
    fn every_mistake_is_named_with_the_file_and_the_field() {
        for (text, says) in [
            ("input = 1", "missing field `workflow`"),
            ("workflow = \"w\"\nwrkflow = 2", "unknown field `wrkflow`"),
            (
                "workflow = \"w\"\n[steps.a]\noutput = 1\nfail = \"failed\"",
                "exactly one of",
            ),
            ("workflow = \"w\"\n[steps.a]\ntakes = \"1s\"", "exactly one of"),
            (
                "workflow = \"w\"\n[steps.a]\nfail = \"exploded\"",
                "no kind an attempt fails with",
            ),
            (
                "workflow = \"w\"\n[steps.a]\nfail = \"cancelled\"",
                "no kind an attempt fails with",
            ),
            (
                "workflow = \"w\"\n[steps.a]\nfail = \"timed-out\"\npermanent = true",
                "only a `failed`",
            ),
            ("workflow = \"w\"\n[steps.a]\nattempts = []", "lists no attempt"),
            (
                "workflow = \"w\"\n[steps.a]\nattempts = [{}]",
                "attempt 1: give `output` or `fail`",
            ),
            (
                "workflow = \"w\"\n[steps.a]\noutput = 1\ntakes = \"soon\"",
                "`takes`: `soon` is no duration",
            ),
            (
                "workflow = \"w\"\n[[signals]]\nat = \"-1s\"\nname = \"s\"",
                "[[signals]] number 1",
            ),
            (
                "workflow = \"w\"\nadvance_at = [\"1h\", \"soon\"]",
                "`advance_at`: `soon` is no duration",
            ),
            ("workflow = \"w\"\nadvance_at = \"1h\"", "advance_at"),
            ("workflow = \"w\"\nstart_time = \"yesterday\"", "no RFC 3339 time"),
            ("workflow = \"w\"\nstart_time = \"1969-12-31T00:00:00Z\"", "before 1970"),
            ("workflow = \"w\"\nuntil = \"99999999999999999999999years\"", "`until`"),
            (
                "workflow = \"w\"\n[expect]\noutcome = \"done\"",
                "give one of completed, failed, cancelled",
            ),
        ] {
            let error = parse(text).expect_err(text);
            assert!(error.starts_with("scenarios/order.toml: "), "{error}");
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
