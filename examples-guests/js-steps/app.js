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

  // {"payments_url": "http://127.0.0.1:PORT", "order_id": "o-1",
  // "amount_cents": 1200} -> the payment service's JSON answer to
  // POST {payments_url}/charges, authorized by the tenant's secret
  // `payments-api-key`, as `charge` of ../checkout (Rust) and ../py-steps
  // do. The call's idempotency key goes with it, so a retry after a lost
  // answer charges once. A server error or no answer is worth another
  // attempt; any other answer but a 2xx fails for good.
  async charge(ctx, order) {
    const fields = ['payments_url', 'order_id', 'amount_cents'];
    if (typeof order !== 'object' || order === null || !fields.every((field) => Object.hasOwn(order, field))) {
      throw new StepFailure(`expected an object with ${fields.join(', ')}`, { permanent: true });
    }
    const { payments_url, order_id, amount_cents } = order;
    const key = ctx.secret('payments-api-key');
    if (key === undefined) {
      throw new StepFailure(
        'the tenant has no secret `payments-api-key`: set it with `stepstone secret set payments-api-key`',
        { permanent: true },
      );
    }
    let answer;
    try {
      answer = await fetch(`${payments_url}/charges`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${key}`,
          'idempotency-key': ctx.idempotencyKey,
          'fencing-token': String(ctx.fencingToken),
          'content-type': 'application/json',
        },
        body: JSON.stringify({ order_id, amount_cents }),
      });
    } catch (error) {
      // Not sent (refused by the allowlist) or not answered: the run's log
      // says which.
      throw new StepFailure(error.message);
    }
    if (answer.ok) {
      return await answer.json();
    }
    if (answer.status >= 500) {
      throw new StepFailure(`payment service answered ${answer.status}`);
    }
    throw new StepFailure(`payment service refused the charge: ${answer.status} ${await answer.text()}`, {
      permanent: true,
    });
  },
});

export const describe = component.describe;
export const step = component.step;
