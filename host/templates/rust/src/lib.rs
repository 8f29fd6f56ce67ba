//! {{name}}: the workflow `greet` calls the step `make-greeting`, retried
//! up to three times, and returns the greeting it made.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use stepstone_guest::{Error, Step, StepFailure, StepOptions, Workflow, export};

#[derive(Serialize, Deserialize)]
struct Person {
    name: String,
}

#[derive(Serialize)]
struct Greeting {
    greeting: String,
}

/// A workflow reaches the world only through `ctx`: the host journals each
/// call, and after a crash runs the workflow again from the start, answering
/// the calls it made from the journal.
fn greet(ctx: &Workflow, person: Person) -> Result<Greeting, Error> {
    let retry = StepOptions::new()
        .max_attempts(3)
        .initial_backoff(Duration::from_millis(100));
    let greeting: String = ctx.step_with("make-greeting", &person, retry)?;
    Ok(Greeting { greeting })
}

/// A step may do anything: it runs in a sandbox of its own, and its result
/// is recorded once. An ordinary failure is retried as the caller asked; a
/// permanent one is not.
fn make_greeting(ctx: &Step, person: Person) -> Result<String, StepFailure> {
    if person.name.is_empty() {
        return Err(StepFailure::permanent("no name to greet"));
    }
    ctx.info(&format!("greeting {} (attempt {})", person.name, ctx.attempt()));
    Ok(format!("Hello, {}!", person.name))
}

export! {
    workflows: { "greet" => greet },
    steps: { "make-greeting" => make_greeting },
}
