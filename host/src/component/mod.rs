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
#[cfg(test)]
pub(crate) use registry::attempt_example_step;
pub use registry::{Components, Loaded, STORED_FRESH, digest_of};
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
    #[error(
        "{what} is a core WebAssembly module, not a component: turn the module into one with `stepstone componentize MODULE.wasm -o COMPONENT.wasm`, then use that"
    )]
    CoreModule { what: String },
    #[error("{what} is not a WebAssembly component")]
    NotWasm { what: String },
    #[error("{what} is not a valid WebAssembly component: {reason}")]
    Malformed { what: String, reason: String },
    #[error("component {digest} does not compile for the {role} engine: {reason}")]
    Compile { digest: String, role: Role, reason: String },
    #[error("component {digest} imports `{import}`, which the {role} policy does not grant: {granted}", granted = crate::sandbox::policy::granted_summary(*role))]
    ForbiddenImport { digest: String, import: String, role: Role },
    #[error("component {digest} does not export `{export}`: build it against the {package} world `{world}`", package = crate::contract::PACKAGE)]
    MissingExport {
        digest: String,
        export: String,
        world: &'static str,
    },
    #[error("component {digest}: `describe` failed ({}): {message}", crate::sandbox::kind_name(*kind))]
    Describe {
        digest: String,
        kind: crate::sandbox::StepErrorKind,
        message: String,
    },
    #[error("component {digest} declares a workflow no run could be searched by: {reason}")]
    WorkflowName { digest: String, reason: InvalidName },
    #[error("component {digest} declares signal schemas (`stepstone:signal-schemas`) that cannot be used: {reason}")]
    SignalSchemas { digest: String, reason: String },
    #[error("component {digest} is in use by {by}: it can be deleted once nothing refers to it")]
    InUse { digest: String, by: String },
    #[error("no component `{digest}` is stored")]
    Unknown { digest: String },
    #[error(
        "component name `{name}` is 64 hex digits, which is how a digest is written: a reference to it would mean the build of that digest; choose another name"
    )]
    NameReadsAsDigest { name: String },
    #[error("component `{name}` has no version {version}; it has 1 to {latest}")]
    UnknownVersion { name: String, version: u64, latest: u32 },
    #[error("the version record {key} cannot be read: {reason}")]
    CorruptVersion { key: String, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}
