"""Workflows in Python: one calls a step written in Rust, one is that
workflow changed behind a patch marker, one reads Python's own clock and
random numbers, which the host makes replay the same values, one loops
by continuing as new, and one streams its progress."""

import random
import time

import stepstone
from stepstone import Describe, Workflow  # the exports componentize-py implements


@stepstone.workflow("greet")
def greet(ctx, person):
    """{"name": "Ada"} -> {"greeting": "Hello, Ada!", "via": "python"}, the
    greeting made by step `make-greeting` of the Rust component the host
    links to the run as `hello`."""
    made = ctx.step("hello/make-greeting", person, max_attempts=3)
    return {"greeting": made["greeting"], "via": "python"}


@stepstone.workflow("greet-again")
def greet_again(ctx, person):
    """`greet`, changed while runs of it were under way to greet twice,
    behind the patch marker `greet-again`: a run recorded before the change
    replays as `greet` ran; a new run journals the marker and greets again."""
    made = ctx.step("hello/make-greeting", person, max_attempts=3)
    greeting = {"greeting": made["greeting"], "via": "python"}
    if ctx.patched("greet-again"):
        greeting["again"] = ctx.step("hello/make-greeting", person, max_attempts=3)["greeting"]
    return greeting


@stepstone.workflow("stamp")
def stamp(ctx, _input):
    """Prints and returns the time and a random number. A workflow's WASI
    clock and randomness are deterministic, so a replay prints the same."""
    now = time.time()
    number = random.random()
    print(f"time {now} random {number}")
    return {"time": now, "random": number}


@stepstone.workflow("countdown")
def countdown(ctx, n):
    """3 -> {"done": True, "via": "python"}, one generation per number: each
    continues as new on the number below its own."""
    if n <= 0:
        return {"done": True, "via": "python"}
    ctx.continue_as_new(n - 1)


@stepstone.workflow("progress")
def progress(ctx, n):
    """3 -> {"streamed": 3, "via": "python"}, having appended {"done": 1},
    {"done": 2} and {"done": 3} to the run's stream `progress`."""
    for done in range(1, n + 1):
        ctx.append_to_stream("progress", {"done": done})
    return {"streamed": n, "via": "python"}
