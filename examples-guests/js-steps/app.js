// Steps in JavaScript, for workflows in any language: a Rust workflow
// calls `js-steps/wrap` when the host links this component to its run as
// `js-steps`.

import { steps, StepFailure } from '../../guest-sdk/js/step.js';

const component = steps({
  // Any JSON value -> {"from": "javascript", "value": value}.
  wrap(ctx, value) {
    ctx.info(`wrapping, attempt ${ctx.attempt}`);
    return { from: 'javascript', value };
  },

  // [3, 1, 2] -> [1, 2, 3]; anything but a list of numbers fails for good.
  sort(ctx, numbers) {
    if (!Array.isArray(numbers) || !numbers.every((n) => typeof n === 'number')) {
      throw new StepFailure('expected a list of numbers', { permanent: true });
    }
    return [...numbers].sort((a, b) => a - b);
  },
});

export const describe = component.describe;
export const step = component.step;
