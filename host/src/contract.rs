//! The WIT contract between the host and its guests: the package text, compiled
//! into the binary, and the host-side bindings generated from it.
//!
//! Invariant: the host speaks exactly the package in `wit/` at the top of the
//! repository; nothing here is written by hand that the WIT already says.

use wit_parser::{PackageId, Resolve};

/// The package every guest is written against.
pub const PACKAGE: &str = "stepstone:workflow@0.1.0";

/// The package's files, as shipped in `wit/`.
const SOURCES: &[(&str, &str)] = &[
    ("types.wit", include_str!("../../wit/types.wit")),
    ("durable.wit", include_str!("../../wit/durable.wit")),
    ("worlds.wit", include_str!("../../wit/worlds.wit")),
];

/// The WASI packages the `steps` world imports, as shipped in `wit/deps/`:
/// each package's files, every package after those it uses.
const DEPENDENCIES: [&[(&str, &str)]; 8] = [
    &[("deps/io.wit", include_str!("../../wit/deps/io.wit"))],
    &[("deps/clocks.wit", include_str!("../../wit/deps/clocks.wit"))],
    &[("deps/random.wit", include_str!("../../wit/deps/random.wit"))],
    &[("deps/filesystem.wit", include_str!("../../wit/deps/filesystem.wit"))],
    &[("deps/sockets.wit", include_str!("../../wit/deps/sockets.wit"))],
    &[("deps/cli.wit", include_str!("../../wit/deps/cli.wit"))],
    &[("deps/http.wit", include_str!("../../wit/deps/http.wit"))],
    &[
        ("deps/config/store.wit", include_str!("../../wit/deps/config/store.wit")),
        ("deps/config/world.wit", include_str!("../../wit/deps/config/world.wit")),
    ],
];

/// Fully qualified name of one of the package's interfaces, as it appears in a
/// component's imports and exports (e.g. `stepstone:workflow/durable@0.1.0`).
pub fn interface(name: &str) -> String {
    format!("stepstone:workflow/{name}@0.1.0")
}

/// Parses the embedded package, after the WASI it uses, into a fresh
/// [`Resolve`].
pub fn resolve() -> anyhow::Result<(Resolve, PackageId)> {
    let mut resolve = Resolve::default();
    for files in DEPENDENCIES {
        push_package(&mut resolve, files)?;
    }
    let package = push_package(&mut resolve, SOURCES)?;
    Ok((resolve, package))
}

fn push_package(resolve: &mut Resolve, files: &[(&str, &str)]) -> anyhow::Result<PackageId> {
    let mut map = wit_parser::SourceMap::default();
    for &(path, text) in files {
        map.push_str(path, text);
    }
    let group = map.parse().map_err(|(_, e)| anyhow::anyhow!("{e}"))?;
    Ok(resolve.push_group(group)?)
}

/// Host bindings for the whole package. Every import is async (a durable call
/// may wait on a step, a timer or a signal) and trappable (a durable call may
/// end the activation: suspension, non-determinism, a storage failure).
/// Generated from the WIT, whose own comments are the documentation.
#[allow(missing_docs)]
pub mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "workflows-and-steps",
        imports: { default: async | trappable },
        exports: { default: async },
        additional_derives: [serde::Serialize, serde::Deserialize, PartialEq],
        // The WASI a step imports is served by wasmtime-wasi and
        // wasmtime-wasi-http (see `sandbox::link`): reuse their types.
        with: {
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        },
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

    #[test]
    fn every_file_of_wit_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
        let embedded: Vec<&str> = SOURCES
            .iter()
            .chain(DEPENDENCIES.iter().copied().flatten())
            .map(|(path, _)| *path)
            .collect();
        let mut shipped = Vec::new();
        for dir in ["", "deps", "deps/config"] {
            for entry in std::fs::read_dir(root.join(dir)).expect("wit/ is readable") {
                let path = entry.expect("an entry").path();
                if path.extension().is_some_and(|e| e == "wit") {
                    let name = path.file_name().expect("a file name").to_string_lossy();
                    shipped.push(if dir.is_empty() {
                        name.into_owned()
                    } else {
                        format!("{dir}/{name}")
                    });
                }
            }
        }
        shipped.sort();
        let mut embedded: Vec<String> = embedded.into_iter().map(str::to_owned).collect();
        embedded.sort();
        assert_eq!(embedded, shipped);
    }
}
