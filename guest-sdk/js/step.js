// Stepstone steps in JavaScript: `steps({name: fn})` gives the `describe`
// and `step` exports of a component built for the `steps` world. Each
// `fn(ctx, input)` gets its input as a JSON value and returns its output as
// one; the JSON text crossing the boundary is this
// module's business. A step may do anything: the host memoizes its output.

import { attempt, log } from 'stepstone:workflow/step-support@0.1.0';
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
// permanent failure; any throw but a StepFailure a retryable one.
export function stepExport(fns) {
  return {
    runStep(name, input) {
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
        return JSON.stringify(fn(new StepContext(), value));
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
