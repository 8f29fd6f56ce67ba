//! A Rust workflow that calls steps written in other languages, each in a
//! component of its own, by qualified name (`component/step`): the
//! `wrap` step of py-steps (Python), js-steps (JavaScript), c-steps (C) and
//! wat-step (WAT), or another step the input names. The host finds each component linked to the run under
//! that name, or the tenant's component uploaded with that name.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use stepstone_guest::{Error, Workflow, export};

/// The components called when the input names none.
const EVERY_LANGUAGE: [&str; 4] = ["py-steps", "js-steps", "c-steps", "wat-step"];

#[derive(Deserialize)]
struct Request {
    value: Value,
    /// The components whose step to call; all four by default.
    #[serde(default)]
    via: Option<Vec<String>>,
    /// The step of each to call; `wrap` by default.
    #[serde(default = "wrap")]
    step: String,
}

fn wrap() -> String {
    "wrap".into()
}

/// `{"value": V}` → `{"py-steps": {"from": "python", "value": V}, ...}`:
/// every component's `wrap` (or `step`) runs in parallel, and the results
/// are combined by component name.
fn polyglot(ctx: &Workflow, request: Request) -> Result<BTreeMap<String, Value>, Error> {
    let components = request
        .via
        .unwrap_or_else(|| EVERY_LANGUAGE.map(str::to_owned).to_vec());
    let pending = components
        .iter()
        .map(|component| ctx.start::<_, Value>(&format!("{component}/{}", request.step), &request.value))
        .collect::<Result<Vec<_>, _>>()?;
    let results = ctx.all(pending);
    components
        .into_iter()
        .zip(results)
        .map(|(component, result)| Ok((component, result?)))
        .collect()
}

export! {
    workflows: {
        "polyglot" => polyglot,
    },
}
