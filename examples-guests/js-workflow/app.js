// Workflows in JavaScript: one calls a step written in Rust, one reads the
// engine's own clock and random numbers, which the host makes replay the
// same values, and one loops by continuing as new.

import { workflows } from '../../guest-sdk/js/workflow.js';

const component = workflows({
  // {"name": "Ada"} -> {"greeting": "Hello, Ada!", "via": "javascript"}, the
  // greeting made by step `make-greeting` of the Rust component the host
  // links to the run as `hello`.
  greet(ctx, person) {
    const made = ctx.step('hello/make-greeting', person, { maxAttempts: 3 });
    return { greeting: made.greeting, via: 'javascript' };
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
});

export const describe = component.describe;
export const workflow = component.workflow;
