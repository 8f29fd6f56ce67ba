// {{name}}: the workflow `greet` calls the step `make-greeting`, retried up
// to three times, and returns the greeting it made.

import { component } from './stepstone/component.js';
import { StepFailure } from './stepstone/step.js';

const guest = component({
  workflows: {
    // A workflow reaches the world only through `ctx`: the host journals
    // each call, and after a crash runs the workflow again from the start,
    // answering the calls it made from the journal.
    greet(ctx, person) {
      const greeting = ctx.step('make-greeting', person, { maxAttempts: 3, initialBackoffMs: 100 });
      return { greeting };
    },
  },
  steps: {
    // A step may do anything (it may be `async`): it runs in a sandbox of
    // its own, and its result is recorded once. A throw is retried as the
    // caller asked; a permanent `StepFailure` is not.
    'make-greeting'(ctx, person) {
      if (!person?.name) {
        throw new StepFailure('no name to greet', { permanent: true });
      }
      ctx.info(`greeting ${person.name} (attempt ${ctx.attempt})`);
      return `Hello, ${person.name}!`;
    },
  },
});

// The component's exports, by their names in the contract.
export const describe = guest.describe;
export const workflow = guest.workflow;
export const step = guest.step;
