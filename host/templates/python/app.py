"""{{name}}: the workflow `greet` calls the step `make-greeting`, retried up
to three times, and returns the greeting it made."""

import stepstone

# componentize-py implements the component's exports with these classes.
from stepstone import Describe, Step, Workflow  # noqa: F401


@stepstone.workflow("greet")
def greet(ctx, person):
    """A workflow reaches the world only through `ctx`: the host journals
    each call, and after a crash runs the workflow again from the start,
    answering the calls it made from the journal."""
    greeting = ctx.step("make-greeting", person, max_attempts=3, initial_backoff_ms=100)
    return {"greeting": greeting}


@stepstone.step("make-greeting")
def make_greeting(ctx, person):
    """A step may do anything: it runs in a sandbox of its own, and its
    result is recorded once. An exception is retried as the caller asked;
    a permanent `StepFailure` is not."""
    name = person.get("name") if isinstance(person, dict) else None
    if not name:
        raise stepstone.StepFailure("no name to greet", permanent=True)
    ctx.info(f"greeting {name} (attempt {ctx.attempt})")
    return f"Hello, {name}!"
