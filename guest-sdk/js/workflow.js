// Stepstone workflows in JavaScript: `workflows({name: fn})` gives the
// `describe` and `workflow` exports of a component built for the
// `workflows` world. Each `fn(ctx, input)` gets its input as a JSON value
// and returns its output as one. A workflow must reach the world only
// through its WorkflowContext: every call on it is journaled by the host and
// answered from the journal on replay. (Date.now() and Math.random() are
// safe too: the host gives workflows a deterministic WASI.)
//
// The WIT's u64s are BigInts in the bindings; this module speaks Numbers
// (milliseconds) and BigInt only for `random()`, which needs all 64 bits.

import * as durable from 'stepstone:workflow/durable@0.1.0';
import { describeExport, describeThrown } from './describe.js';

// A step call's final failure, after its retry policy gave up. `kind` is
// the WIT `step-error-kind`: failed, fuel-exhausted, timed-out,
// memory-limit, trapped, output-too-large, unknown-step, cancelled or
// invalid-output.
export class StepError extends Error {
  constructor(step, { kind, message, attempts }) {
    super(`step \`${step}\` ${kind} after ${attempts} attempt(s): ${message}`);
    this.name = 'StepError';
    Object.assign(this, { step, kind, attempts, detail: message });
  }
}

const STEP_OPTIONS = ['maxAttempts', 'initialBackoffMs', 'backoffRate', 'maxBackoffMs', 'timeoutMs', 'fuel'];
// The WIT `http-limits`, each option named `http` + its field.
const HTTP_LIMITS = {
  httpMaxRequests: 'maxRequests',
  httpMaxRequestBytes: 'maxRequestBytes',
  httpMaxResponseBytes: 'maxResponseBytes',
  httpConnectTimeoutMs: 'connectTimeoutMs',
  httpFirstByteTimeoutMs: 'firstByteTimeoutMs',
};

const bigint = (value) => (value === undefined ? undefined : BigInt(value));

// A call's options: the WIT `step-options` record in camelCase
// (maxAttempts, initialBackoffMs, backoffRate, maxBackoffMs, timeoutMs,
// fuel), and its `http-limits` (undefined when no `http...` bound is set).
function callOptions(options = {}) {
  const known = [...STEP_OPTIONS, ...Object.keys(HTTP_LIMITS)];
  const unknown = Object.keys(options).filter((key) => !known.includes(key));
  if (unknown.length > 0) {
    throw new TypeError(`unknown step option(s) ${unknown.join(', ')}; the options are ${known.join(', ')}`);
  }
  const step = {
    maxAttempts: options.maxAttempts,
    initialBackoffMs: bigint(options.initialBackoffMs),
    backoffRate: options.backoffRate,
    maxBackoffMs: bigint(options.maxBackoffMs),
    timeoutMs: bigint(options.timeoutMs),
    fuel: bigint(options.fuel),
  };
  const bounded = Object.keys(HTTP_LIMITS).filter((key) => options[key] !== undefined);
  if (bounded.length === 0) {
    return { step, http: undefined };
  }
  const http = Object.fromEntries(
    Object.entries(HTTP_LIMITS).map(([option, field]) => [
      field,
      field === 'maxRequests' ? options[option] : bigint(options[option]),
    ]),
  );
  return { step, http };
}

// Starts or calls (`how`: 'callStep' or 'startStep') step `name`, through
// the `...WithHttp` variant only when the call bounds its HTTP.
function durableStep(how, name, input, options) {
  const { step, http } = callOptions(options);
  const payload = JSON.stringify(input);
  return http === undefined ? durable[how](name, payload, step) : durable[`${how}WithHttp`](name, payload, step, http);
}

function stepResult(step, result) {
  if (result.tag === 'err') {
    throw new StepError(step, result.val);
  }
  return JSON.parse(result.val);
}

// The durable calls of a workflow.
export class WorkflowContext {
  // Runs step `name` (or `component/step`) and returns its output; throws
  // a StepError when it fails for good.
  step(name, input = null, options = {}) {
    try {
      return JSON.parse(durableStep('callStep', name, input, options));
    } catch (error) {
      if (error && Object.hasOwn(error, 'payload')) {
        throw new StepError(name, error.payload);
      }
      throw error;
    }
  }

  // Starts step `name` without waiting for it; see `all` and `any`.
  start(name, input = null, options = {}) {
    return { step: name, handle: durableStep('startStep', name, input, options) };
  }

  // Waits for every started step; returns their outputs in order, or
  // throws the StepError of the first that failed.
  all(pending) {
    const results = durable.awaitAll(pending.map((p) => p.handle));
    return results.map((result, i) => stepResult(pending[i].step, result));
  }

  // Waits for the first started step to finish: [its index, its output].
  any(pending) {
    const [index, result] = durable.awaitAny(pending.map((p) => p.handle));
    return [index, stepResult(pending[index].step, result)];
  }

  // A durable timer: survives a host restart and waits only what is left.
  sleep(ms) {
    durable.sleep(BigInt(ms));
  }

  // Waits up to `timeoutMs` for the next signal `name`: its payload, or
  // undefined when the wait timed out.
  signal(name, timeoutMs) {
    const payload = durable.awaitSignal(name, BigInt(timeoutMs));
    return payload === undefined ? undefined : JSON.parse(payload);
  }

  // The recorded wall-clock time, as a Date.
  now() {
    return new Date(Number(durable.now()));
  }

  // A recorded random 64-bit number, as a BigInt.
  random() {
    return durable.random();
  }

  memo(key) {
    const value = durable.memoGet(key);
    return value === undefined ? undefined : JSON.parse(value);
  }

  setMemo(key, value) {
    durable.memoSet(key, JSON.stringify(value));
  }

  // Runs workflow `workflow` as a child run (of `component`, a linked
  // component's name; this one when omitted) and returns its output.
  child(workflow, input = null, component = undefined) {
    const handle = durable.startChild(workflow, JSON.stringify(input), component);
    try {
      return JSON.parse(durable.awaitChild(handle));
    } catch (error) {
      const why = error && Object.hasOwn(error, 'payload') ? error.payload : describeThrown(error);
      throw new Error(`child workflow \`${workflow}\` failed: ${why}`);
    }
  }

  // `level` is one of trace, debug, info, warn, error.
  log(level, message) {
    durable.log(level, message);
  }

  // Appends `value` (any JSON value) to the run's stream `name`, which
  // clients read live (`GET /v1/runs/{id}/streams/{name}`): a durable call,
  // so a replay appends nothing twice. `name` is 1 to 128 letters, digits,
  // `-`, `_` and `.`, not starting with `.`.
  appendToStream(name, value) {
    durable.appendToStream(name, JSON.stringify(value));
  }

  // Whether this run takes change `changeId` of the workflow's code (a
  // patch marker): true for a run that reaches the call on this build past
  // its recorded history (the host journals a marker, once) or whose
  // journal has the marker here; false for a run recorded by code before
  // the change, which then replays as it ran. The first answer holds for
  // the rest of the execution. `changeId` is 1 to 256 bytes (UTF-8).
  patched(changeId) {
    return durable.patched(changeId);
  }

  // Ends this run's journal and continues the same logical run as a new
  // generation on `input` (any JSON value), with an empty journal: how a
  // loop that never ends keeps its journal small. Never returns: the host
  // ends the instance at the call.
  continueAsNew(input = null) {
    durable.continueAsNew(JSON.stringify(input));
    throw new Error('the host ends the instance at continue-as-new');
  }

  info(message) {
    durable.log('info', message);
  }

  warn(message) {
    durable.log('warn', message);
  }

  error(message) {
    durable.log('error', message);
  }
}

// The `workflow` export over the workflows in `fns`. A throw fails the run
// with the thrown error's message.
export function workflowExport(fns) {
  return {
    run(name, input) {
      const fn = Object.hasOwn(fns, name) ? fns[name] : undefined;
      if (!fn) {
        throw { payload: `unknown workflow \`${name}\`: this component exports ${Object.keys(fns).join(', ')}` };
      }
      try {
        return JSON.stringify(fn(new WorkflowContext(), JSON.parse(input)));
      } catch (error) {
        throw { payload: describeThrown(error) };
      }
    },
  };
}

// The exports of a component of workflows only.
export function workflows(fns) {
  return { describe: describeExport(fns, {}), workflow: workflowExport(fns) };
}
