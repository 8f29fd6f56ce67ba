//! The smallest Stepstone guest: a workflow that calls one step, one that
//! calls a step of another component written in WAT, one that reads the
//! recorded clock, randomness and memos, one that waits for a signal, and
//! two that run others as child workflows.

use serde::{Deserialize, Serialize};
use std::time::{Duration, UNIX_EPOCH};

use serde_json::Value;
use stepstone_guest::{Error, Step, StepFailure, Workflow, export};

#[derive(Serialize, Deserialize)]
struct Person {
    name: String,
}

#[derive(Serialize, Deserialize)]
struct Greeting {
    greeting: String,
}

/// `{"name": "Ada"}` → `{"greeting": "Hello, Ada!"}`.
fn greet(ctx: &Workflow, person: Person) -> Result<Greeting, Error> {
    Ok(ctx.step("make-greeting", &person)?)
}

fn make_greeting(_ctx: &Step, person: Person) -> Result<Greeting, StepFailure> {
    Ok(Greeting {
        greeting: format!("Hello, {}!", person.name),
    })
}

/// Hands its input to step `wrap` of the component the host links to the
/// run as `wat` (examples-guests/wat-step), to show a call across components
/// and languages.
fn wrap_with_wat(ctx: &Workflow, input: Value) -> Result<Value, Error> {
    Ok(ctx.step("wat/wrap", &input)?)
}

#[derive(Serialize)]
struct Stamp {
    now_ms: u64,
    random: u64,
    memo: Option<u64>,
}

/// Reads the clock and a random number — each recorded once, so a replay
/// sees the same values — and keeps the number in a run-scoped memo.
fn stamp(ctx: &Workflow, _input: Value) -> Result<Stamp, Error> {
    let since_epoch = ctx.now().duration_since(UNIX_EPOCH).map_err(|e| e.to_string())?;
    let random = ctx.random();
    ctx.set_memo("random", &random)?;
    Ok(Stamp {
        now_ms: since_epoch.as_millis() as u64,
        random,
        memo: ctx.memo("random")?,
    })
}

/// Waits for the signal `go` and returns its payload: a run that costs
/// nothing while it waits.
fn await_go(ctx: &Workflow, _input: Value) -> Result<Value, Error> {
    let go: Option<Value> = ctx.signal("go", Duration::from_secs(24 * 3600))?;
    Ok(go.unwrap_or(Value::Null))
}

#[derive(Deserialize)]
struct People {
    names: Vec<String>,
}

/// Greets each name in a child run of `greet`, all started before any is
/// awaited: `{"names": ["Ada", "Lin"]}` → `["Hello, Ada!", "Hello, Lin!"]`.
fn greet_all(ctx: &Workflow, people: People) -> Result<Vec<String>, Error> {
    let children = people
        .names
        .iter()
        .map(|name| ctx.start_child::<_, Greeting>("greet", &Person { name: name.clone() }, None))
        .collect::<Result<Vec<_>, _>>()?;
    children.into_iter().map(|child| Ok(child.join()?.greeting)).collect()
}

/// Runs `await-go` as a child and returns what it returns: cancelling this
/// run cancels the child too.
fn await_go_child(ctx: &Workflow, input: Value) -> Result<Value, Error> {
    ctx.child("await-go", &input)
}

/// Returns its input: what a run was given, as a hook's request.
fn echo(_ctx: &Workflow, input: Value) -> Result<Value, Error> {
    Ok(input)
}

#[derive(Deserialize)]
struct Ticks {
    ticks: u64,
    /// A durable timer between two ticks, in milliseconds.
    #[serde(default)]
    every_ms: u64,
}

/// `{"ticks": 3, "every_ms": 100}` → `3`, having appended `{"tick": 0}`,
/// `{"tick": 1}` and `{"tick": 2}` to the run's stream `ticks`, sleeping
/// between two: a stream its readers see grow.
fn stream_ticks(ctx: &Workflow, ticks: Ticks) -> Result<u64, Error> {
    for tick in 0..ticks.ticks {
        if tick > 0 && ticks.every_ms > 0 {
            ctx.sleep(Duration::from_millis(ticks.every_ms));
        }
        ctx.append_to_stream("ticks", &serde_json::json!({ "tick": tick }))?;
    }
    Ok(ticks.ticks)
}

export! {
    workflows: {
        "greet" => greet,
        "wrap-with-wat" => wrap_with_wat,
        "stamp" => stamp,
        "await-go" => await_go,
        "greet-all" => greet_all,
        "await-go-child" => await_go_child,
        "echo" => echo,
        "stream-ticks" => stream_ticks,
    },
    steps: {
        "make-greeting" => make_greeting,
    },
}
