"""Steps in Python, for workflows in any language: a Rust workflow calls
`py-steps/wrap` when the host links this component to its run as
`py-steps`. `charge` calls a payment service over HTTP, as the Rust and
JavaScript steps of the same name do; `fill-scratch` writes a file in the
attempt's scratch directory, as Python code does."""

import json

import stepstone
from stepstone import Describe, Step  # the exports componentize-py implements


@stepstone.step("wrap")
def wrap(ctx, value):
    """Any JSON value -> {"from": "python", "value": value}."""
    ctx.info(f"wrapping, attempt {ctx.attempt}")
    return {"from": "python", "value": value}


@stepstone.step("word-count")
def word_count(ctx, text):
    """"a b a" -> {"a": 2, "b": 1}; anything but a string fails for good."""
    if not isinstance(text, str):
        raise stepstone.StepFailure(f"expected a string, got {type(text).__name__}", permanent=True)
    counts = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts


@stepstone.step("charge")
def charge(ctx, order):
    """{"payments_url", "order_id", "amount_cents"} -> the payment service's
    JSON answer to POST {payments_url}/charges, authorized by the tenant's
    secret `payments-api-key`. The call's idempotency key goes with it, so a
    retry after a lost answer charges once. A 4xx answer fails for good;
    anything else that is not a 2xx, or no answer at all, is retried."""
    fields = ("payments_url", "order_id", "amount_cents")
    if not isinstance(order, dict) or any(field not in order for field in fields):
        raise stepstone.StepFailure(f"expected an object with {', '.join(fields)}", permanent=True)
    api_key = ctx.secret("payments-api-key")
    if api_key is None:
        raise stepstone.StepFailure(
            "the tenant has no secret `payments-api-key`: set it with `stepstone secret set payments-api-key`",
            permanent=True,
        )
    try:
        answer = stepstone.request(
            "POST",
            f"{order['payments_url']}/charges",
            headers={
                "authorization": f"Bearer {api_key}",
                "idempotency-key": ctx.idempotency_key,
                "fencing-token": str(ctx.fencing_token),
                "content-type": "application/json",
            },
            body=json.dumps({"order_id": order["order_id"], "amount_cents": order["amount_cents"]}),
        )
    except stepstone.HttpError as error:
        raise stepstone.StepFailure(str(error)) from None
    if 200 <= answer.status < 300:
        return answer.json()
    if answer.status >= 500:
        raise stepstone.StepFailure(f"payment service answered {answer.status}")
    raise stepstone.StepFailure(f"payment service refused the charge: {answer.status} {answer.text()}", permanent=True)


@stepstone.step("fill-scratch")
def fill_scratch(ctx, spec):
    """{"bytes": N, "chunk": C} -> the bytes written to /scratch/fill, C at
    a time, flushed after each; a write the host refuses (the scratch
    directory's limit) fails the step saying how far it got."""
    written = 0
    try:
        with open("/scratch/fill", "wb") as file:
            while written < spec["bytes"]:
                file.write(b"x" * spec["chunk"])
                file.flush()
                written += spec["chunk"]
    except OSError as error:
        raise stepstone.StepFailure(f"wrote {written} bytes, then: {error}", permanent=True) from None
    return written
