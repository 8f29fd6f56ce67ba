//! The smallest Stepstone guest: a workflow that calls one step, and a
//! workflow that calls a step of another component, written in WAT.

use serde::{Deserialize, Serialize};
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

export! {
    workflows: {
        "greet" => greet,
        "wrap-with-wat" => wrap_with_wat,
    },
    steps: {
        "make-greeting" => make_greeting,
    },
}
