// Stepstone steps in JavaScript: `steps({name: fn})` gives the `describe`
// and `step` exports of a component built for the `steps` world. Each
// `fn(ctx, input)` gets its input as a JSON value and returns its output as
// one, or a promise of one: a step may be `async`. The JSON text crossing
// the boundary is this module's business. A step may do anything: the host
// memoizes its output.
//
// A step reaches the network with the global `fetch`, which componentize-js
// implements over wasi:http (when built without `--disable http`): the host
// lets it reach the origins its tenant's allowlist names and refuses the
// rest, which `fetch` reports as a rejected promise (a TypeError). Nothing
// here wraps it.

import { get } from 'wasi:config/store@0.2.0-rc.1';
import { attempt, context, fencingToken, log } from 'stepstone:workflow/step-support@0.1.0';
import { describeExport, describeThrown } from './describe.js';

// Thrown by a step that fails on its own terms. A permanent failure is not
// retried, whatever the caller's retry policy says. `payload` is what the
// component's bindings send back as the WIT `step-failure`.
export class StepFailure extends Error {
  constructor(message, { permanent = false } = {}) {
    super(message);
    this.name = 'StepFailure';
    this.payload = { message, permanent };
  }
}

// What a running step may ask of the host.
export class StepContext {
  // Which attempt this is, starting at 1.
  get attempt() {
    return attempt();
  }

  // The run this call belongs to.
  get runId() {
    return context().runId;
  }

  // The call's place in its run's journal, as a Number: the WIT's u64 is a
  // BigInt in the bindings, and no journal comes near 2^53 entries.
  get seq() {
    return Number(context().seq);
  }

  // The same for every attempt of this call, on any host, and for no other
  // call of any tenant: send it as a service's `Idempotency-Key`, so a
  // request an earlier attempt got through is not done twice.
  // `{tenant}/{run}/{seq}`, or `{tenant}/{run}/{incarnation}/{seq}` for a run
  // whose id was used before (retention deleted an earlier run of it), so a
  // service never answers it with the earlier run's result.
  get idempotencyKey() {
    return context().idempotencyKey;
  }

  // A number that only rises as the run passes from host to host, and from
  // one incarnation of its id to the next (exact as a number up to
  // incarnation 2^33): send it
  // with the idempotency key (say as `Fencing-Token`) to a service that
  // keeps the highest it saw for each key and refuses a lower one, so an
  // attempt of a host that lost the run cannot act after the new owner's.
  get fencingToken() {
    return Number(fencingToken());
  }

  // The tenant's secret `name` (set with `stepstone secret set NAME`), or
  // undefined when the tenant has none of that name.
  secret(name) {
    try {
      return get(name);
    } catch (error) {
      // The bindings throw the WIT `error` variant as `payload`: say which
      // secret could not be read, and why, in the step's failure.
      const why =
        error && Object.hasOwn(error, 'payload') ? `${error.payload.tag}: ${error.payload.val}` : describeThrown(error);
      throw new Error(`the secret \`${name}\` could not be read: ${why}`);
    }
  }

  // `level` is one of trace, debug, info, warn, error.
  log(level, message) {
    log(level, message);
  }

  info(message) {
    log('info', message);
  }

  warn(message) {
    log('warn', message);
  }

  error(message) {
    log('error', message);
  }
}

// The `step` export over the steps in `fns`. Input that is not JSON is a
// permanent failure; any throw or rejection but a StepFailure a retryable
// one. `runStep` is async so a step may be: componentize-js runs the event
// loop until the promise settles and gives the WIT its result.
export function stepExport(fns) {
  return {
    async runStep(name, input) {
      const fn = Object.hasOwn(fns, name) ? fns[name] : undefined;
      if (!fn) {
        throw new StepFailure(`unknown step \`${name}\`: this component exports ${Object.keys(fns).join(', ')}`, {
          permanent: true,
        });
      }
      let value;
      try {
        value = JSON.parse(input);
      } catch (error) {
        // No retry makes bad input good.
        throw new StepFailure(`step \`${name}\`: input is not JSON: ${error.message}`, { permanent: true });
      }
      try {
        return JSON.stringify(await fn(new StepContext(), value));
      } catch (error) {
        throw error instanceof StepFailure ? error : new StepFailure(describeThrown(error));
      }
    },
  };
}

// The exports of a component of steps only.
export function steps(fns) {
  return { describe: describeExport({}, fns), step: stepExport(fns) };
}
