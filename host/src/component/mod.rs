//! Components: validating what a user hands us, storing it content-addressed,
//! compiling it once per role (with an on-disk cache of native code), and
//! keeping the compiled result for every later instantiation.
//!
//! Invariant: a component is usable only once it has passed validation — it
//! is a component (not a core module), imports nothing beyond the contract,
//! exports what its manifest claims, and answered `describe` in a sandbox.

mod cache;
mod registry;
pub mod signal_schemas;
mod versions;

pub use cache::CodeCache;
internal_use!(registry::Components);
#[cfg(test)]
pub(crate) use registry::attempt_example_step;
pub use registry::{Loaded, STORED_FRESH, digest_of};
pub use versions::ComponentVersion;

use crate::sandbox::Role;
use crate::store::{InvalidName, StoreError};

/// Whether `reference` is written as a component digest (64 hex digits):
/// it then means that build, never a name, so no name is looked up for it.
pub fn is_digest(reference: &str) -> bool {
    reference.len() == 64 && reference.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Why a component was refused or could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    /// The bytes are a core WebAssembly module, not a component: make one of it
    /// with `stepstone componentize` first.
    #[error(
        "{what} is a core WebAssembly module, not a component: turn the module into one with `stepstone componentize MODULE.wasm -o COMPONENT.wasm`, then use that"
    )]
    CoreModule {
        /// What the bytes were read from, as messages name it (e.g. "the upload").
        what: String,
    },
    /// The bytes are not WebAssembly.
    #[error("{what} is not a WebAssembly component")]
    NotWasm {
        /// What the bytes were read from, as messages name it (e.g. "the upload").
        what: String,
    },
    /// The bytes say they are a component but do not parse as one.
    #[error("{what} is not a valid WebAssembly component: {reason}")]
    Malformed {
        /// What the bytes were read from, as messages name it (e.g. "the upload").
        what: String,
        /// What the parser found wrong.
        reason: String,
    },
    /// The component does not compile, or its workflow program does not link,
    /// on the engine of `role`.
    #[error("component {digest} does not compile for the {role} engine: {reason}")]
    Compile {
        /// The component's digest (hex SHA-256 of its bytes).
        digest: String,
        /// The role whose engine refused it.
        role: Role,
        /// What wasmtime reported.
        reason: String,
    },
    /// The component imports something its role's policy does not grant:
    /// rebuild it without that import.
    #[error("component {digest} imports `{import}`, which the {role} policy does not grant: {granted}", granted = crate::sandbox::policy::granted_summary(*role))]
    ForbiddenImport {
        /// The component's digest (hex SHA-256 of its bytes).
        digest: String,
        /// The first import refused, as the component names it.
        import: String,
        /// The role whose policy refused it.
        role: Role,
    },
    /// The component lacks an export its role or manifest needs: build it
    /// against `world`.
    #[error("component {digest} does not export `{export}`: build it against the {package} world `{world}`", package = crate::contract::PACKAGE)]
    MissingExport {
        /// The component's digest (hex SHA-256 of its bytes).
        digest: String,
        /// The missing interface, fully qualified.
        export: String,
        /// The world of the contract that exports it: `steps` or `workflows`.
        world: &'static str,
    },
    /// The component's `describe` failed in the sandbox, so what it exports
    /// is unknown.
    #[error("component {digest}: `describe` failed ({}): {message}", crate::sandbox::kind_name(*kind))]
    Describe {
        /// The component's digest (hex SHA-256 of its bytes).
        digest: String,
        /// How it failed: trapped, timed out, out of fuel...
        kind: crate::sandbox::StepErrorKind,
        /// What the failure said.
        message: String,
    },
    /// The component declares a workflow whose name is not a valid workflow
    /// name, so no run of it could be searched by name: rename the workflow.
    #[error("component {digest} declares a workflow no run could be searched by: {reason}")]
    WorkflowName {
        /// The component's digest (hex SHA-256 of its bytes).
        digest: String,
        /// What is wrong with the first invalid name.
        reason: InvalidName,
    },
    /// The component's `stepstone:signal-schemas` section does not parse, or
    /// a schema in it does not compile.
    #[error("component {digest} declares signal schemas (`stepstone:signal-schemas`) that cannot be used: {reason}")]
    SignalSchemas {
        /// The component's digest (hex SHA-256 of its bytes).
        digest: String,
        /// What is wrong with the section.
        reason: String,
    },
    /// The component cannot be deleted while a name, a schedule or a stored
    /// run refers to it.
    #[error("component {digest} is in use by {by}: it can be deleted once nothing refers to it")]
    InUse {
        /// The component asked to be deleted.
        digest: String,
        /// The first reference found: "the name `x`", "schedule `y`" or "run `z`".
        by: String,
    },
    /// No component is stored under the reference.
    #[error("no component `{digest}` is stored")]
    Unknown {
        /// The digest asked for, or the reference as given when no name matched it.
        digest: String,
    },
    /// A component name is written as a digest (64 hex digits), so a reference
    /// to it would mean that digest instead: choose another name.
    #[error(
        "component name `{name}` is 64 hex digits, which is how a digest is written: a reference to it would mean the build of that digest; choose another name"
    )]
    NameReadsAsDigest {
        /// The name refused.
        name: String,
    },
    /// The component name has no such version.
    #[error("component `{name}` has no version {version}; it has 1 to {latest}")]
    UnknownVersion {
        /// The name asked for.
        name: String,
        /// The version asked for.
        version: u64,
        /// The newest version the name has; 0 when it has none.
        latest: u32,
    },
    /// A stored version record does not parse: it is corrupt, or was written
    /// by a host that stores versions differently.
    #[error("the version record {key} cannot be read: {reason}")]
    CorruptVersion {
        /// The store key of the record.
        key: String,
        /// Why it does not parse.
        reason: String,
    },
    /// The store failed; [`StoreError`] says what the caller can do.
    #[error(transparent)]
    Store(#[from] StoreError),
}
