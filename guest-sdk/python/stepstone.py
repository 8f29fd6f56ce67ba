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
Its `StepContext` names the call it serves (`run_id`, `seq`, `attempt`,
`idempotency_key`) and reads its tenant's secrets (`secret`), and `request`
sends HTTP requests to the origins the host allows (`--allow-outbound`).

Everything is imported when the module loads: componentize-py snapshots
the interpreter after loading the app, and a component has no files to
import from afterwards. A component built for the `steps` world has no
`durable` bindings, one built for `workflows` no `step-support`, no
`wasi:http` and no `wasi:config`.
"""

import functools
import json
import re
import traceback
import urllib.parse
from datetime import datetime, timezone

from componentize_py_types import Err

try:
    # Where wasi:http is imported too, its `types` and ours share a name, so
    # componentize-py qualifies both.
    from wit_world.imports import stepstone_workflow_types as types
except ImportError:
    from wit_world.imports import types
try:
    from wit_world.imports import durable
except ImportError:
    durable = None
try:
    from wit_world.imports import step_support
except ImportError:
    step_support = None
try:
    from wit_world.imports import outgoing_handler, streams
    from wit_world.imports import store as config_store
    from wit_world.imports import wasi_http_types as http_types
except ImportError:
    outgoing_handler = streams = config_store = http_types = None

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
        step_options, http = _options(options)
        try:
            # Only a call that bounds its HTTP uses `call-step-with-http`.
            if http is None:
                return json.loads(durable.call_step(name, json.dumps(input), step_options))
            return json.loads(durable.call_step_with_http(name, json.dumps(input), step_options, http))
        except Err as err:
            raise StepError.from_wit(name, err.value) from None

    def start(self, name, input=None, **options):
        """Starts step `name` without waiting for it; see `all` and `any`."""
        step_options, http = _options(options)
        if http is None:
            return Pending(name, durable.start_step(name, json.dumps(input), step_options))
        return Pending(name, durable.start_step_with_http(name, json.dumps(input), step_options, http))

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

    def append_to_stream(self, name, value):
        """Appends `value` (any JSON value) to the run's stream `name`, which
        clients read live (`GET /v1/runs/{id}/streams/{name}`): a durable
        call, so a replay appends nothing twice. `name` is 1 to 128 letters,
        digits, `-`, `_` and `.`, not starting with `.`."""
        durable.append_to_stream(name, json.dumps(value))

    def patched(self, change_id):
        """Whether this run takes change `change_id` of the workflow's code
        (a patch marker): True for a run that reaches the call on this build
        past its recorded history (the host journals a marker, once) or whose
        journal has the marker here; False for a run recorded by code before
        the change, which then replays as it ran. The first answer holds for
        the rest of the execution. `change_id` is 1 to 256 bytes (UTF-8)."""
        return durable.patched(change_id)

    def continue_as_new(self, input=None):
        """Ends this run's journal and continues the same logical run as a
        new generation on `input` (any JSON value), with an empty journal:
        how a loop that never ends keeps its journal small. Never returns:
        the host ends the instance at the call."""
        durable.continue_as_new(json.dumps(input))
        raise AssertionError("the host ends the instance at continue-as-new")


class StepContext(_Logging):
    """What a running step may ask of the host: which call it serves, its
    tenant's secrets, and a log. (For outgoing HTTP, see `request`.)"""

    @functools.cached_property
    def _context(self):
        """The WIT `step-context`, asked of the host once per attempt."""
        return step_support.context()

    @property
    def attempt(self):
        """Which attempt this is, starting at 1."""
        return step_support.attempt()

    @property
    def run_id(self):
        """The run this call belongs to."""
        return self._context.run_id

    @property
    def seq(self):
        """The call's place in its run's journal."""
        return self._context.seq

    @property
    def idempotency_key(self):
        """The same for every attempt of this call, on any host, and for no
        other call: send it as a service's `Idempotency-Key`, so a request an
        earlier attempt sent (its answer lost) does the work only once.
        `{tenant}/{run}/{seq}`, or `{tenant}/{run}/{incarnation}/{seq}` for a
        run whose id was used before (retention deleted an earlier run of it),
        so a service never answers it with the earlier run's result."""
        return self._context.idempotency_key

    @property
    def fencing_token(self):
        """A number that only rises as the run passes from host to host, and
        from one incarnation of its id to the next: send it with the idempotency key (say as `Fencing-Token`) to a
        service that keeps the highest it saw for each key and refuses a
        lower one, so an attempt of a host that lost the run cannot act
        after the new owner's."""
        return step_support.fencing_token()

    def secret(self, name):
        """The tenant's secret `name` (set with `stepstone secret set NAME`),
        or None if it has none. Raises RuntimeError if the store fails: no
        secret is not the same as an unreadable one."""
        try:
            return config_store.get(name)
        except Err as err:
            cause = f"{_wit_name(err.value, 'Error_')}: {err.value.value}"
            raise RuntimeError(f"reading the secret `{name}` failed ({cause})") from None

    def log(self, level, message):
        step_support.log(_log_level(level), message)


class Response:
    """An HTTP answer, read to its end: `status` (an int), `headers` (a dict
    of lower-case names; a repeated header's values joined with ", ", as
    HTTP allows) and `body` (bytes)."""

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def text(self):
        """The body as UTF-8 text (undecodable bytes replaced, so an error
        page can always be shown)."""
        return self.body.decode("utf-8", errors="replace")

    def json(self):
        """The body parsed as JSON; raises ValueError if it is not."""
        return json.loads(self.body)


class HttpError(Exception):
    """A request that got no answer: the host refused it
    (`HTTP-request-denied`: its origin is not allowed), or it failed on the
    way (`connection-refused`, `connection-timeout`, ...). `code` is the
    wasi:http `error-code` case as the WIT spells it, or None when the
    failure came with none. An answer, whatever its status, is a Response."""

    def __init__(self, method, url, reason, code=None):
        super().__init__(f"{method} {url}: {reason}")
        self.method = method
        self.url = url
        self.code = code


def request(method, url, headers=None, body=None):
    """Sends an HTTP request from a step and returns the `Response`, read to
    its end. `headers` is a dict or a list of (name, value) pairs; `body` is
    bytes or str (sent as UTF-8) and goes with a `content-length` header.
    Raises HttpError when no answer comes. Only steps may send requests, and
    only to the origins the host allows; the host times out a request
    within the attempt's deadline."""
    if outgoing_handler is None:
        raise RuntimeError("stepstone.request needs wasi:http: build the component for the `steps` world")
    method = method.upper()
    content = _body_bytes(body)
    outgoing = _outgoing_request(method, url, headers, content)
    outgoing_body = outgoing.body()
    try:
        pending = outgoing_handler.handle(outgoing, None)
    except Err as err:
        raise _code_error(method, url, err.value) from None
    with pending:
        try:
            _write_body(outgoing_body, content, method, url)
        except HttpError:
            # A request that failed on its way (refused, unreachable) closed
            # its body: the error its answer holds says why, and is raised.
            _await_answer(pending, method, url)
            raise
        answer = _await_answer(pending, method, url)
    return _read_answer(answer, method, url)


# The most `blocking-write-and-flush` takes at once.
_WRITE_CHUNK = 4096
_READ_CHUNK = 64 * 1024
_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
_ACRONYMS = {"Dns": "DNS", "Ip": "IP", "Tls": "TLS", "Http": "HTTP", "Uri": "URI"}


def _wit_name(case, prefix):
    """The WIT name of a variant case, e.g. `HTTP-request-denied` for an
    `ErrorCode_HttpRequestDenied`: error messages then read like the WIT."""
    words = re.findall(r"[A-Z][a-z]*", type(case).__name__.removeprefix(prefix))
    return "-".join(_ACRONYMS.get(word, word.lower()) for word in words)


def _code_error(method, url, code, doing=None):
    """The HttpError of a wasi:http `error-code`, saying what to do about a
    refusal: the host's allowlist, not the service, said no."""
    name = _wit_name(code, "ErrorCode_")
    if isinstance(code, http_types.ErrorCode_HttpRequestDenied):
        reason = f"{name} (the host lets steps reach only the origins it allows, e.g. with --allow-outbound)"
    else:
        detail = getattr(code, "value", None)
        reason = name if detail is None else f"{name}: {detail}"
    return HttpError(method, url, reason if doing is None else f"{doing}: {reason}", code=name)


def _stream_error(method, url, error, doing):
    """The HttpError of a body stream that failed while `doing` something,
    with the wasi:http error code behind it when there is one."""
    if isinstance(error, streams.StreamError_Closed):
        return HttpError(method, url, f"{doing}: the stream was closed")
    code = http_types.http_error_code(error.value)
    if code is None:
        return HttpError(method, url, f"{doing}: {error.value.to_debug_string()}")
    return _code_error(method, url, code, doing)


def _body_bytes(body):
    if body is None or isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    raise TypeError(f"a request body is bytes or str, not {type(body).__name__} (json.dumps a value first)")


def _outgoing_request(method, url, headers, body):
    """The wasi:http request for `url`; raises ValueError for a URL or a
    header the request cannot carry."""
    parts = urllib.parse.urlsplit(url)
    if not parts.scheme or not parts.netloc:
        raise ValueError(f"{url!r} is not an absolute URL (SCHEME://HOST[:PORT]/PATH)")
    outgoing = http_types.OutgoingRequest(_fields(headers, body))
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    for part, setter, value in (
        ("method", outgoing.set_method, _method(method)),
        ("scheme", outgoing.set_scheme, _scheme(parts.scheme)),
        ("authority", outgoing.set_authority, parts.netloc),
        ("path", outgoing.set_path_with_query, path),
    ):
        try:
            setter(value)
        except Err:
            raise ValueError(f"{method} {url}: invalid {part}") from None
    return outgoing


def _fields(headers, body):
    """The request's headers, with a `content-length` for a body, so it goes
    out as is rather than chunked."""
    pairs = list(headers.items() if hasattr(headers, "items") else headers or ())
    if body is not None and all(name.lower() != "content-length" for name, _ in pairs):
        pairs.append(("content-length", str(len(body))))
    entries = [(name, value if isinstance(value, bytes) else str(value).encode()) for name, value in pairs]
    try:
        return http_types.Fields.from_list(entries)
    except Err as err:
        raise ValueError(f"invalid request headers: {_wit_name(err.value, 'HeaderError_')}") from None


def _method(name):
    if name in _METHODS:
        return getattr(http_types, f"Method_{name.capitalize()}")()
    return http_types.Method_Other(name)


def _scheme(name):
    schemes = {"http": http_types.Scheme_Http, "https": http_types.Scheme_Https}
    return schemes[name]() if name in schemes else http_types.Scheme_Other(name)


def _write_body(outgoing_body, body, method, url):
    """Writes the body of a request already handed to the host, which holds
    only one chunk of it before the request is on its way, and finishes it.
    The stream is dropped before `finish`, which traps on a live one."""
    if body:
        with outgoing_body.write() as stream:
            for start in range(0, len(body), _WRITE_CHUNK):
                try:
                    stream.blocking_write_and_flush(body[start : start + _WRITE_CHUNK])
                except Err as err:
                    raise _stream_error(method, url, err.value, "writing the request body") from None
    try:
        http_types.OutgoingBody.finish(outgoing_body, None)
    except Err as err:
        raise _code_error(method, url, err.value, "finishing the request body") from None


def _await_answer(pending, method, url):
    """Waits for the answer's status and headers, or the error that came
    instead. The pollable is dropped before the future, its parent."""
    with pending.subscribe() as ready:
        ready.block()
    # Ready now, so `get` gives an outer Ok: it is Err only for an answer
    # taken already.
    outcome = pending.get().value
    if isinstance(outcome, Err):
        raise _code_error(method, url, outcome.value)
    return outcome.value


def _read_answer(answer, method, url):
    """The Response of `answer`, its body read to the end. Every child
    resource is dropped before its parent, as wasi:http requires, also when
    reading fails (the body is dropped, not finished: no one reads trailers)."""
    with answer:
        with answer.headers() as fields:
            headers = _header_dict(fields.entries())
        with answer.consume() as body:
            content = _read_to_end(body, method, url)
        return Response(answer.status(), headers, content)


def _read_to_end(body, method, url):
    chunks = []
    with body.stream() as stream:
        while True:
            try:
                chunks.append(stream.blocking_read(_READ_CHUNK))
            except Err as err:
                if isinstance(err.value, streams.StreamError_Closed):
                    return b"".join(chunks)
                raise _stream_error(method, url, err.value, "reading the answer") from None


def _header_dict(entries):
    headers = {}
    for name, value in entries:
        name, text = name.lower(), value.decode("utf-8", errors="replace")
        headers[name] = f"{headers[name]}, {text}" if name in headers else text
    return headers


_STEP_OPTIONS = ("max_attempts", "initial_backoff_ms", "backoff_rate", "max_backoff_ms", "timeout_ms", "fuel")
# The WIT `http-limits`, each option named `http_` + its field.
_HTTP_LIMITS = ("max_requests", "max_request_bytes", "max_response_bytes", "connect_timeout_ms", "first_byte_timeout_ms")


def _options(options):
    """The WIT `step-options` and `http-limits` (None when no HTTP bound is
    set) of a step call's keyword options."""
    http_fields = [f"http_{field}" for field in _HTTP_LIMITS]
    unknown = set(options) - set(_STEP_OPTIONS) - set(http_fields)
    if unknown:
        known = ", ".join(_STEP_OPTIONS + tuple(http_fields))
        raise TypeError(f"unknown step option(s) {sorted(unknown)}; the options are {known}")
    step_options = types.StepOptions(**{field: options.get(field) for field in _STEP_OPTIONS})
    if not any(field in options for field in http_fields):
        return step_options, None
    return step_options, types.HttpLimits(**{field: options.get(f"http_{field}") for field in _HTTP_LIMITS})


def _decode_step_result(step, result):
    if isinstance(result, Err):
        raise StepError.from_wit(step, result.value)
    return json.loads(result.value)


def _describe_error(error):
    """The text a failed workflow or step reports: the message of our own
    exceptions, the last traceback line (type and message) of any other."""
    if isinstance(error, (StepError, StepFailure, HttpError)):
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
