//! The workflow side: the [`Workflow`] context, through which a workflow
//! makes every durable call (steps, timers, signals, time, randomness,
//! memos, logs, child workflows, continuing as new, patch markers),
//! [`Pending`], a step started for fan-out, and [`Child`], a child workflow
//! started.
//!
//! Each durable call is journaled by the host and answered from the journal
//! when the run is replayed, which is why a workflow must not reach the
//! world any other way.

use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::bindings::stepstone::workflow::durable;
use crate::bindings::stepstone::workflow::types as wit;
use crate::log::level_shortcuts;
use crate::options::millis;
use crate::{Error, Level, StepError, StepOptions};

/// The handle a workflow function receives to make durable calls.
#[derive(Debug)]
pub struct Workflow {
    // Only the SDK creates contexts, so a workflow cannot fake one.
    _private: (),
}

impl Workflow {
    pub(crate) fn new() -> Self {
        Self { _private: () }
    }

    /// Runs step `name` with the host's default options and returns its
    /// output. `name` is a step of this component, or `component/step` for a
    /// step of another component linked to the run.
    pub fn step<I, O>(&self, name: &str, input: &I) -> Result<O, StepError>
    where
        I: Serialize + ?Sized,
        O: DeserializeOwned,
    {
        self.step_with(name, input, StepOptions::new())
    }

    /// Runs step `name` under `options`' retry and sandbox policy.
    pub fn step_with<I, O>(&self, name: &str, input: &I, options: StepOptions) -> Result<O, StepError>
    where
        I: Serialize + ?Sized,
        O: DeserializeOwned,
    {
        let input = encode_step_input(name, input)?;
        // Only a call that bounds its HTTP imports `call-step-with-http`,
        // so a component that never does runs on hosts without it.
        let result = match options.http_to_wit() {
            Some(http) => durable::call_step_with_http(name, &input, options.to_wit(), http),
            None => durable::call_step(name, &input, options.to_wit()),
        };
        decode_step_result(name, result)
    }

    /// Starts step `name` without waiting for it; await it with
    /// [`all`](Self::all) or [`any`](Self::any).
    pub fn start<I, O>(&self, name: &str, input: &I) -> Result<Pending<O>, StepError>
    where
        I: Serialize + ?Sized,
        O: DeserializeOwned,
    {
        self.start_with(name, input, StepOptions::new())
    }

    /// Starts step `name` under `options`' retry and sandbox policy.
    pub fn start_with<I, O>(&self, name: &str, input: &I, options: StepOptions) -> Result<Pending<O>, StepError>
    where
        I: Serialize + ?Sized,
        O: DeserializeOwned,
    {
        let input = encode_step_input(name, input)?;
        let handle = match options.http_to_wit() {
            Some(http) => durable::start_step_with_http(name, &input, options.to_wit(), http),
            None => durable::start_step(name, &input, options.to_wit()),
        };
        Ok(Pending {
            step: name.to_owned(),
            handle,
            output: PhantomData,
        })
    }

    /// Waits for every started step; results come in the order of `pending`.
    pub fn all<T: DeserializeOwned>(&self, pending: Vec<Pending<T>>) -> Vec<Result<T, StepError>> {
        let handles: Vec<_> = pending.iter().map(|step| step.handle).collect();
        durable::await_all(&handles)
            .into_iter()
            .zip(pending)
            .map(|(result, step)| decode_step_result(&step.step, result))
            .collect()
    }

    /// Waits for the first of `pending` to finish, takes it out of `pending`
    /// and returns its index there (before removal) and its result. The
    /// others keep running and can still be awaited.
    ///
    /// # Panics
    ///
    /// If `pending` is empty: there would be nothing to wait for.
    pub fn any<T: DeserializeOwned>(&self, pending: &mut Vec<Pending<T>>) -> (usize, Result<T, StepError>) {
        assert!(!pending.is_empty(), "Workflow::any needs at least one pending step");
        let handles: Vec<_> = pending.iter().map(|step| step.handle).collect();
        let (index, result) = durable::await_any(&handles);
        // Lossless: usize is at least 32 bits wide on every target we build.
        let index = index as usize;
        let finished = pending.remove(index);
        (index, decode_step_result(&finished.step, result))
    }

    /// Runs workflow `workflow` of this component as a child run and waits
    /// for its output.
    pub fn child<I, O>(&self, workflow: &str, input: &I) -> Result<O, Error>
    where
        I: Serialize + ?Sized,
        O: DeserializeOwned,
    {
        self.start_child(workflow, input, None)?.join()
    }

    /// Starts workflow `workflow` as a child run — its own run, with its own
    /// journal, cancelled with this one — without waiting for it. With
    /// `component`, the workflow comes from that component (a component
    /// linked to the run, or one of the tenant's component names).
    pub fn start_child<I, O>(&self, workflow: &str, input: &I, component: Option<&str>) -> Result<Child<O>, Error>
    where
        I: Serialize + ?Sized,
        O: DeserializeOwned,
    {
        let input = serde_json::to_string(input)?;
        Ok(Child {
            workflow: workflow.to_owned(),
            handle: durable::start_child(workflow, &input, component),
            output: PhantomData,
        })
    }

    /// Waits `duration` on a durable timer: a host restart in between does
    /// not restart the wait.
    pub fn sleep(&self, duration: Duration) {
        durable::sleep(millis(duration));
    }

    /// Waits for the next signal called `name` and returns its payload, or
    /// `None` after `timeout`. Signals sent before the wait are buffered.
    pub fn signal<T: DeserializeOwned>(&self, name: &str, timeout: Duration) -> Result<Option<T>, Error> {
        durable::await_signal(name, millis(timeout))
            .map(|payload| decode_payload(&payload, format_args!("signal `{name}`")))
            .transpose()
    }

    /// The current time, recorded on first execution and replayed after.
    pub fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(durable::now())
    }

    /// A random number, recorded on first execution and replayed after.
    pub fn random(&self) -> u64 {
        durable::random()
    }

    /// Reads the run-scoped memo `key`, if one was written.
    pub fn memo<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, Error> {
        durable::memo_get(key)
            .map(|payload| decode_payload(&payload, format_args!("memo `{key}`")))
            .transpose()
    }

    /// Writes the run-scoped memo `key`.
    pub fn set_memo<T: Serialize + ?Sized>(&self, key: &str, value: &T) -> Result<(), Error> {
        durable::memo_set(key, &serde_json::to_string(value)?);
        Ok(())
    }

    /// Appends `value` to the run's stream `name`, which clients read live
    /// (`GET /v1/runs/{id}/streams/{name}`, `stepstone stream`): a durable
    /// call, so a replay appends nothing twice. For a long job's progress,
    /// or an agent's tokens as they come.
    ///
    /// ```no_run
    /// # fn work(ctx: &stepstone_guest::Workflow) -> Result<(), stepstone_guest::Error> {
    /// for done in 1..=3 {
    ///     ctx.append_to_stream("progress", &serde_json::json!({"done": done, "of": 3}))?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// `name` is 1 to 128 letters, digits, `-`, `_` and `.`, not starting
    /// with `.`; past the host's quota of streamed values or bytes the run
    /// fails, saying which.
    pub fn append_to_stream<T: Serialize + ?Sized>(&self, name: &str, value: &T) -> Result<(), Error> {
        durable::append_to_stream(name, &serde_json::to_string(value)?);
        Ok(())
    }

    /// Whether this run takes change `change_id` of the workflow's code: a
    /// patch marker, so one build serves the runs recorded before a change
    /// and those after it.
    ///
    /// ```no_run
    /// # fn place_order(ctx: &stepstone_guest::Workflow, order: serde_json::Value) -> Result<(), stepstone_guest::Error> {
    /// if ctx.patched("fraud-check") {
    ///     let clear: bool = ctx.step("fraud-check", &order)?; // the new code
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// `true` for a run that reaches the call on this build past its
    /// recorded history (the host journals a marker, once) or whose journal
    /// has the marker here; `false` for a run recorded by code before the
    /// change, which then replays as it ran. The first answer holds for the
    /// rest of the execution. `change_id` is 1 to 256 bytes; another fails
    /// the run.
    pub fn patched(&self, change_id: &str) -> bool {
        durable::patched(change_id)
    }

    /// Writes to the run's log.
    pub fn log(&self, level: Level, message: &str) {
        durable::log(level.to_wit(), message);
    }

    /// Ends this run's journal and continues the same logical run as a new
    /// generation, started on `input` with an empty journal: how a loop
    /// that never ends (a poller, an entity) keeps its journal small.
    /// Status, `wait`, signals and cancellation given the run's id follow
    /// it to its latest generation.
    ///
    /// Never returns `Ok`: the host ends the instance at the call, so
    /// `return ctx.continue_as_new(&next)` fits any workflow's return
    /// type. It returns `Err` only if `input` does not encode as JSON.
    pub fn continue_as_new<I: Serialize + ?Sized, T>(&self, input: &I) -> Result<T, Error> {
        let input = serde_json::to_string(input)?;
        durable::continue_as_new(&input);
        unreachable!("the host ends the instance at continue-as-new")
    }
}

level_shortcuts!(Workflow);

/// A step started with [`Workflow::start`] whose output, a `T`, is still to
/// be awaited.
#[must_use = "a started step's result is only seen through `Workflow::all` or `Workflow::any`"]
#[derive(Debug)]
pub struct Pending<T> {
    step: String,
    handle: durable::StepHandle,
    // `fn() -> T`: a `Pending<T>` yields a `T` but does not own one.
    output: PhantomData<fn() -> T>,
}

/// A child run started with [`Workflow::start_child`].
#[must_use = "a child's result is only seen through `Child::join`"]
#[derive(Debug)]
pub struct Child<T> {
    workflow: String,
    handle: durable::ChildHandle,
    output: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> Child<T> {
    /// Waits for the child run to end and returns its output.
    pub fn join(self) -> Result<T, Error> {
        let output = durable::await_child(self.handle)
            .map_err(|error| Error::Message(format!("child workflow `{}` failed: {error}", self.workflow)))?;
        decode_payload(
            &output,
            format_args!("the output of child workflow `{}`", self.workflow),
        )
    }
}

fn encode_step_input<I: Serialize + ?Sized>(step: &str, input: &I) -> Result<String, StepError> {
    serde_json::to_string(input).map_err(|error| StepError::unencodable_input(step, &error))
}

fn decode_step_result<T: DeserializeOwned>(step: &str, result: Result<String, wit::StepError>) -> Result<T, StepError> {
    let output = result.map_err(|error| StepError::from_wit(step, error))?;
    serde_json::from_str(&output).map_err(|error| StepError::undecodable_output(step, &error))
}

fn decode_payload<T: DeserializeOwned>(payload: &str, source: fmt::Arguments<'_>) -> Result<T, Error> {
    serde_json::from_str(payload)
        .map_err(|error| Error::Message(format!("{source} does not hold the expected type: {error}")))
}
