// Workflows in JavaScript: one calls a step written in Rust, one is that
// workflow changed behind a patch marker, one reads the engine's own clock
// and random numbers, which the host makes replay the same values, one
// loops by continuing as new, and one streams its progress.

import { workflows } from '../../guest-sdk/js/workflow.js';

const component = workflows({
  // {"name": "Ada"} -> {"greeting": "Hello, Ada!", "via": "javascript"}, the
  // greeting made by step `make-greeting` of the Rust component the host
  // links to the run as `hello`.
  greet(ctx, person) {
    const made = ctx.step('hello/make-greeting', person, { maxAttempts: 3 });
    return { greeting: made.greeting, via: 'javascript' };
  },

  // `greet`, changed while runs of it were under way to greet twice,
  // behind the patch marker `greet-again`: a run recorded before the
  // change replays as `greet` ran; a new run journals the marker and
  // greets again.
  'greet-again'(ctx, person) {
    const made = ctx.step('hello/make-greeting', person, { maxAttempts: 3 });
    const greeting = { greeting: made.greeting, via: 'javascript' };
    if (ctx.patched('greet-again')) {
      greeting.again = ctx.step('hello/make-greeting', person, { maxAttempts: 3 }).greeting;
    }
    return greeting;
  },

  // Prints and returns the time and a random number. A workflow's WASI
  // clock and randomness are deterministic, so a replay prints the same.
  stamp() {
    const time = Date.now();
    const random = Math.random();
    console.log(`time ${time} random ${random}`);
    return { time, random };
  },

  // 3 -> {"done": true, "via": "javascript"}, one generation per number:
  // each continues as new on the number below its own.
  countdown(ctx, n) {
    if (n <= 0) {
      return { done: true, via: 'javascript' };
    }
    return ctx.continueAsNew(n - 1);
  },

  // 3 -> {"streamed": 3, "via": "javascript"}, having appended {"done": 1},
  // {"done": 2} and {"done": 3} to the run's stream `progress`.
  progress(ctx, n) {
    for (let done = 1; done <= n; done++) {
      ctx.appendToStream('progress', { done });
    }
    return { streamed: n, via: 'javascript' };
  },
});

export const describe = component.describe;
export const workflow = component.workflow;
