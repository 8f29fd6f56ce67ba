"""Steps in Python, for workflows in any language: a Rust workflow calls
`py-steps/wrap` when the host links this component to its run as
`py-steps`."""

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
