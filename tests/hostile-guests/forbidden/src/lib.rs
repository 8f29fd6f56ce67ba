//! A guest that imports an interface no Stepstone policy grants
//! (`evil:net/raw`, a raw network socket), from a step and from a workflow:
//! the host must refuse the component when it is loaded, naming the import,
//! before any of its code runs.

use serde::de::IgnoredAny;
use stepstone_guest::{Error, Step, StepFailure, Workflow, export};

wit_bindgen::generate!({
    inline: "
        package evil:net;

        interface raw {
            /// Opens a raw connection to `address`; whether it succeeded.
            connect: func(address: string) -> bool;
        }

        world exfiltrator {
            import raw;
        }
    ",
});

/// Tries to reach the network from a step.
fn exfiltrate(_ctx: &Step, _input: IgnoredAny) -> Result<bool, StepFailure> {
    Ok(evil::net::raw::connect("203.0.113.7:443"))
}

/// Tries to reach the network from a workflow.
fn exfiltrate_workflow(_ctx: &Workflow, _input: IgnoredAny) -> Result<bool, Error> {
    Ok(evil::net::raw::connect("203.0.113.7:443"))
}

export! {
    workflows: { "exfiltrate-workflow" => exfiltrate_workflow },
    steps: { "exfiltrate" => exfiltrate },
}
