//! The WIT contract between the host and its guests: the package text, compiled
//! into the binary, and the host-side bindings generated from it.
//!
//! Invariant: the host speaks exactly the package in `wit/` at the top of the
//! repository; nothing here is written by hand that the WIT already says.

use wit_parser::{PackageId, Resolve};

/// The package every guest is written against.
pub const PACKAGE: &str = "stepstone:workflow@0.1.0";

/// The package's files, as shipped in `wit/`.
const SOURCES: [(&str, &str); 3] = [
    ("types.wit", include_str!("../../wit/types.wit")),
    ("durable.wit", include_str!("../../wit/durable.wit")),
    ("worlds.wit", include_str!("../../wit/worlds.wit")),
];

/// Fully qualified name of one of the package's interfaces, as it appears in a
/// component's imports and exports (e.g. `stepstone:workflow/durable@0.1.0`).
pub fn interface(name: &str) -> String {
    format!("stepstone:workflow/{name}@0.1.0")
}

/// Parses the embedded package into a fresh [`Resolve`].
pub fn resolve() -> anyhow::Result<(Resolve, PackageId)> {
    let mut map = wit_parser::SourceMap::default();
    for (path, text) in SOURCES {
        map.push_str(path, text);
    }
    let group = map.parse().map_err(|(_, e)| anyhow::anyhow!("{e}"))?;
    let mut resolve = Resolve::default();
    let package = resolve.push_group(group)?;
    Ok((resolve, package))
}

/// Host bindings for the whole package. Every import is async (a durable call
/// may wait on a step, a timer or a signal) and trappable (a durable call may
/// end the activation: suspension, non-determinism, a storage failure).
pub mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "workflows-and-steps",
        imports: { default: async | trappable },
        exports: { default: async },
        additional_derives: [serde::Serialize, serde::Deserialize, PartialEq],
    });

    pub use self::stepstone::workflow::types::{
        LogLevel, Manifest, StepError, StepErrorKind, StepFailure, StepOptions,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_package_parses_with_its_three_worlds() {
        let (resolve, package) = resolve().expect("the shipped WIT parses");
        for world in ["workflows", "steps", "workflows-and-steps"] {
            resolve
                .select_world(&[package], Some(world))
                .unwrap_or_else(|e| panic!("world {world} missing: {e}"));
        }
        assert_eq!(resolve.packages[package].name.to_string(), PACKAGE);
    }
}
