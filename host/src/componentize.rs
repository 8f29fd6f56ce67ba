//! Turns a core WebAssembly module into a Stepstone component, so a guest in
//! any language needs no tool beyond its compiler and `stepstone componentize`.
//!
//! A module built with a WIT bindings generator already carries its component
//! type in a custom section; a hand-written one (WAT, or a compiler without
//! bindings) gets the contract's world embedded here first.

use std::path::PathBuf;

use wit_component::{ComponentEncoder, StringEncoding};

use crate::contract;

/// Why a module could not be made a component.
#[derive(Debug, thiserror::Error)]
pub enum ComponentizeError {
    /// The input is not a binary module, and does not parse as WebAssembly text.
    #[error("{path}: not WebAssembly text: {reason}")]
    Text {
        /// The file the module was read from.
        path: PathBuf,
        /// What the text parser found wrong, with its position.
        reason: String,
    },
    /// The input is a component already: use it as it is.
    #[error("{path} is already a component; nothing to do")]
    AlreadyComponent {
        /// The file the module was read from.
        path: PathBuf,
    },
    /// The input starts like binary WebAssembly but is neither a core module
    /// nor a component.
    #[error("{path} is not a WebAssembly module")]
    NotWasm {
        /// The file the module was read from.
        path: PathBuf,
    },
    /// The world asked for is none of the contract's: `workflows`, `steps`
    /// or `workflows-and-steps`.
    #[error(
        "world `{world}` is not in {}: choose workflows, steps or workflows-and-steps",
        contract::PACKAGE
    )]
    UnknownWorld {
        /// The world asked for.
        world: String,
    },
    /// The module carries no component type and no world was named: build it
    /// with a WIT bindings generator, or pass the world it implements.
    #[error(
        "{path} carries no component type: build it with a WIT bindings generator, or name the world it implements with --world"
    )]
    NoComponentType {
        /// The file the module was read from.
        path: PathBuf,
    },
    /// The module could not be made a component: e.g. its imports or exports
    /// do not match its world.
    #[error("{path}: cannot make a component: {reason}")]
    Encode {
        /// The file the module was read from.
        path: PathBuf,
        /// What wit-component reported.
        reason: String,
    },
}

/// Makes a component of `bytes` (a core module in binary or text form, read
/// from `path`). With `world`, that world of the contract is embedded first;
/// without it, the module must already carry its component type.
pub fn componentize(path: PathBuf, bytes: &[u8], world: Option<&str>) -> Result<Vec<u8>, ComponentizeError> {
    let mut module = wat::parse_bytes(bytes)
        .map_err(|e| ComponentizeError::Text {
            path: path.clone(),
            reason: e.to_string(),
        })?
        .into_owned();
    if wasmparser::Parser::is_component(&module) {
        return Err(ComponentizeError::AlreadyComponent { path });
    }
    if !wasmparser::Parser::is_core_wasm(&module) {
        return Err(ComponentizeError::NotWasm { path });
    }
    match world {
        Some(world) => embed_world(&mut module, world).map_err(|e| match e {
            EmbedError::UnknownWorld => ComponentizeError::UnknownWorld {
                world: world.to_owned(),
            },
            EmbedError::Encode(reason) => ComponentizeError::Encode {
                path: path.clone(),
                reason,
            },
        })?,
        None if !has_component_type(&module) => return Err(ComponentizeError::NoComponentType { path }),
        None => {}
    }
    ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .and_then(|mut encoder| encoder.encode())
        .map_err(|e| ComponentizeError::Encode {
            path,
            reason: format!("{e:#}"),
        })
}

/// Whether a bindings generator embedded the module's component type (the
/// custom sections wit-component reads are named `component-type...`).
fn has_component_type(module: &[u8]) -> bool {
    wasmparser::Parser::new(0).parse_all(module).any(|payload| {
        matches!(payload, Ok(wasmparser::Payload::CustomSection(section)) if section.name().starts_with("component-type"))
    })
}

enum EmbedError {
    UnknownWorld,
    Encode(String),
}

fn embed_world(module: &mut Vec<u8>, world: &str) -> Result<(), EmbedError> {
    let (resolve, package) = contract::resolve().map_err(|e| EmbedError::Encode(format!("{e:#}")))?;
    let world = resolve
        .select_world(&[package], Some(world))
        .map_err(|_| EmbedError::UnknownWorld)?;
    wit_component::embed_component_metadata(module, &resolve, world, StringEncoding::UTF8)
        .map_err(|e| EmbedError::Encode(format!("{e:#}")))
}

/// The hand-written example step (`examples-guests/wat-step`) as a
/// component, for tests that need a step to run.
#[cfg(test)]
pub(crate) fn example_wat_step() -> Vec<u8> {
    let wat = include_bytes!("../../examples-guests/wat-step/step.wat");
    componentize("step.wat".into(), wat, Some("steps")).expect("the example step componentizes")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest module that satisfies the `steps` world's exports.
    const STEP_WAT: &str = r#"(module
        (memory (export "memory") 1)
        (global $next (mut i32) (i32.const 1024))
        (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
            (local $p i32)
            (local.set $p (global.get $next))
            (global.set $next (i32.add (global.get $next) (local.get 3)))
            (local.get $p))
        (func (export "stepstone:workflow/describe@0.1.0#describe") (result i32) (i32.const 0))
        (func (export "stepstone:workflow/step@0.1.0#run-step") (param i32 i32 i32 i32) (result i32) (i32.const 0)))"#;

    #[test]
    fn hand_written_module_becomes_a_component() {
        let component =
            componentize("step.wat".into(), STEP_WAT.as_bytes(), Some("steps")).expect("valid in this test");
        assert!(wasmparser::Parser::is_component(&component));
    }

    #[test]
    fn module_without_component_type_is_refused_with_its_path() {
        let err = componentize("bare.wat".into(), STEP_WAT.as_bytes(), None).unwrap_err();
        assert!(matches!(err, ComponentizeError::NoComponentType { .. }), "{err}");
        assert!(err.to_string().contains("bare.wat"), "{err}");
    }

    #[test]
    fn unknown_world_is_named() {
        let err = componentize("s.wat".into(), STEP_WAT.as_bytes(), Some("nope")).unwrap_err();
        assert!(err.to_string().contains("`nope`"), "{err}");
    }

    #[test]
    fn text_that_is_not_wasm_is_refused() {
        let err = componentize("x.txt".into(), b"hello", None).unwrap_err();
        assert!(matches!(err, ComponentizeError::Text { .. }), "{err}");
    }
}
