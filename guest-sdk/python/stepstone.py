"""Write Stepstone durable workflows and steps in Python.

Register functions with the `workflow` and `step` decorators and re-export
`Describe`, `Workflow` and `Step` from your app module: those are the
classes componentize-py looks for to implement the `stepstone:workflow`
exports. Inputs and outputs are plain JSON values (dicts, lists, str,
numbers, None); this module does the JSON encoding, so a Python workflow can
call a step in any language and the other way round.

A workflow must reach the world only through its `WorkflowContext`: every
call on it is journaled by the host and answered from the journal on replay.
(Python's own clock and `random` are safe too: the host gives workflows a
deterministic WASI.) A step may do anything; the host memoizes its output.

Everything is imported when the module loads: componentize-py snapshots
the interpreter after loading the app, and a component has no files to
import from afterwards. A component built for the `steps` world has no
`durable` bindings, one built for `workflows` no `step-support`.
"""

import json
import traceback
from datetime import datetime, timezone

from componentize_py_types import Err
from wit_world.imports import types

try:
    from wit_world.imports import durable
except ImportError:
    durable = None
try:
    from wit_world.imports import step_support
except ImportError:
    step_support = None

_workflows = {}
_steps = {}


def workflow(name):
    """Registers `fn(ctx: WorkflowContext, input) -> output` as workflow `name`."""

    def register(fn):
        _workflows[name] = fn
        return fn

    return register


def step(name):
    """Registers `fn(ctx: StepContext, input) -> output` as step `name`."""

    def register(fn):
        _steps[name] = fn
        return fn

    return register


class StepFailure(Exception):
    """Raised by a step that fails on its own terms. A permanent failure is
    not retried, whatever the caller's retry policy says."""

    def __init__(self, message, permanent=False):
        super().__init__(message)
        self.message = message
        self.permanent = permanent


class StepError(Exception):
    """A step call's final failure, after its retry policy gave up. `kind` is
    the WIT `step-error-kind` in kebab case: "failed", "fuel-exhausted",
    "timed-out", "memory-limit", "trapped", "output-too-large",
    "unknown-step", "cancelled" or "invalid-output"."""

    def __init__(self, step, kind, message, attempts):
        super().__init__(f"step `{step}` {kind} after {attempts} attempt(s): {message}")
        self.step = step
        self.kind = kind
        self.message = message
        self.attempts = attempts

    @staticmethod
    def from_wit(step, error):
        return StepError(step, error.kind.name.lower().replace("_", "-"), error.message, error.attempts)


_LEVELS = ("trace", "debug", "info", "warn", "error")


def _log_level(level):
    if level not in _LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(_LEVELS)}")
    return types.LogLevel[level.upper()]


class _Logging:
    """`log(level, message)` and its shortcuts, for both contexts."""

    def info(self, message):
        self.log("info", message)

    def warn(self, message):
        self.log("warn", message)

    def error(self, message):
        self.log("error", message)

    def debug(self, message):
        self.log("debug", message)


class Pending:
    """A step started with `WorkflowContext.start`, not yet awaited."""

    def __init__(self, step, handle):
        self.step = step
        self.handle = handle


class Child:
    """A child workflow started with `WorkflowContext.start_child`."""

    def __init__(self, workflow, handle):
        self.workflow = workflow
        self.handle = handle

    def join(self):
        """Waits for the child run to end; returns its output or raises
        RuntimeError with why it failed."""
        try:
            return json.loads(durable.await_child(self.handle))
        except Err as err:
            raise RuntimeError(f"child workflow `{self.workflow}` failed: {err.value}") from None


class WorkflowContext(_Logging):
    """The durable calls of a workflow. Step options are keyword arguments
    named as in the WIT `step-options` record: max_attempts,
    initial_backoff_ms, backoff_rate, max_backoff_ms, timeout_ms, fuel."""

    def step(self, name, input=None, **options):
        """Runs step `name` (or `component/step`) and returns its output;
        raises StepError when it fails for good."""
        try:
            return json.loads(durable.call_step(name, json.dumps(input), _options(options)))
        except Err as err:
            raise StepError.from_wit(name, err.value) from None

    def start(self, name, input=None, **options):
        """Starts step `name` without waiting for it; see `all` and `any`."""
        return Pending(name, durable.start_step(name, json.dumps(input), _options(options)))

    def all(self, pending):
        """Waits for every started step; returns their outputs in order, or
        raises the StepError of the first that failed."""
        results = durable.await_all([p.handle for p in pending])
        return [_decode_step_result(p.step, result) for p, result in zip(pending, results)]

    def any(self, pending):
        """Waits for the first started step to finish; returns its index in
        `pending` and its output (or raises its StepError)."""
        index, result = durable.await_any([p.handle for p in pending])
        return index, _decode_step_result(pending[index].step, result)

    def sleep(self, seconds):
        """A durable timer: survives a host restart and waits only what is left."""
        durable.sleep(round(seconds * 1000))

    def signal(self, name, timeout):
        """Waits up to `timeout` seconds for the next signal `name`; returns
        its payload, or None when the wait timed out."""
        payload = durable.await_signal(name, round(timeout * 1000))
        return None if payload is None else json.loads(payload)

    def now(self):
        """The recorded wall-clock time, as an aware UTC datetime."""
        return datetime.fromtimestamp(durable.now() / 1000, tz=timezone.utc)

    def random(self):
        """A recorded random integer in [0, 2**64)."""
        return durable.random()

    def memo(self, key, default=None):
        """The run-scoped memo `key`, or `default`."""
        value = durable.memo_get(key)
        return default if value is None else json.loads(value)

    def set_memo(self, key, value):
        durable.memo_set(key, json.dumps(value))

    def child(self, workflow, input=None, component=None):
        """Runs workflow `workflow` as a child run and returns its output."""
        return self.start_child(workflow, input, component).join()

    def start_child(self, workflow, input=None, component=None):
        """Starts a child run without waiting; `component` names a linked
        component (None: this one)."""
        return Child(workflow, durable.start_child(workflow, json.dumps(input), component))

    def log(self, level, message):
        durable.log(_log_level(level), message)


class StepContext(_Logging):
    """What a running step may ask of the host."""

    @property
    def attempt(self):
        """Which attempt this is, starting at 1."""
        return step_support.attempt()

    def log(self, level, message):
        step_support.log(_log_level(level), message)


def _options(options):
    fields = ("max_attempts", "initial_backoff_ms", "backoff_rate", "max_backoff_ms", "timeout_ms", "fuel")
    unknown = set(options) - set(fields)
    if unknown:
        raise TypeError(f"unknown step option(s) {sorted(unknown)}; the options are {', '.join(fields)}")
    return types.StepOptions(**{field: options.get(field) for field in fields})


def _decode_step_result(step, result):
    if isinstance(result, Err):
        raise StepError.from_wit(step, result.value)
    return json.loads(result.value)


def _describe_error(error):
    """The text a failed workflow or step reports: the message of our own
    exceptions, the last traceback line (type and message) of any other."""
    if isinstance(error, (StepError, StepFailure)):
        return str(error)
    return traceback.format_exception_only(type(error), error)[-1].strip()


class Describe:
    """The `describe` export: the names registered with the decorators."""

    def describe(self):
        return types.Manifest(workflows=list(_workflows), steps=list(_steps))


class Workflow:
    """The `workflow` export: dispatches to the registered workflows."""

    def run(self, name, input):
        fn = _workflows.get(name)
        if fn is None:
            raise Err(f"unknown workflow `{name}`: this component exports {sorted(_workflows)}")
        try:
            return json.dumps(fn(WorkflowContext(), json.loads(input)))
        except Exception as error:
            raise Err(_describe_error(error)) from None


class Step:
    """The `step` export: dispatches to the registered steps. Input that is
    not JSON is a permanent failure; an exception other than StepFailure a
    retryable one."""

    def run_step(self, name, input):
        fn = _steps.get(name)
        if fn is None:
            message = f"unknown step `{name}`: this component exports {sorted(_steps)}"
            raise Err(types.StepFailure(message=message, permanent=True))
        try:
            value = json.loads(input)
        except ValueError as error:
            # No retry makes bad input good.
            raise Err(types.StepFailure(message=f"step `{name}`: input is not JSON: {error}", permanent=True)) from None
        try:
            return json.dumps(fn(StepContext(), value))
        except StepFailure as failure:
            raise Err(types.StepFailure(message=failure.message, permanent=failure.permanent)) from None
        except Exception as error:
            raise Err(types.StepFailure(message=_describe_error(error), permanent=False)) from None
