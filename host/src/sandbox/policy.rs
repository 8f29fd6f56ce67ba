//! Which imports a component may have: the contract's interfaces, and the
//! WASI 0.2 interfaces the host links for every role (see `sandbox::wasi`
//! and `sandbox::outbound` for what they reach there). Anything else — WASI
//! 0.3, `wasi:http`'s incoming side, a package of the guest's own — is
//! refused when the component is loaded, never discovered when a call traps.

use super::Role;
use crate::contract;

/// The WASI interfaces the host links, without their version. Python and
/// JavaScript runtimes import these whether or not their guest uses them
/// (measured: componentize-py 0.25 imports all 27, sockets included).
const WASI: [&str; 30] = [
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/ip-name-lookup",
    "wasi:http/types",
    "wasi:http/outgoing-handler",
    "wasi:config/store",
];

/// The WASI release the host links; an import of any 0.2.x matches it.
const WASI_VERSION: &str = "0.2.";

/// The contract interfaces a component may import in any role: a component
/// exporting workflows and steps imports both `durable` and `step-support`.
const CONTRACT: [&str; 3] = ["types", "durable", "step-support"];

/// Whether the import called `name` is granted. Both roles grant the same
/// names: a role differs in what the WASI it links reaches.
pub fn grants(name: &str) -> bool {
    if CONTRACT.iter().any(|interface| contract::interface(interface) == name) {
        return true;
    }
    match name.split_once('@') {
        Some((interface, version)) => version.starts_with(WASI_VERSION) && WASI.contains(&interface),
        None => false,
    }
}

/// What `role` lets a component import, for messages.
pub fn granted_summary(role: Role) -> String {
    let files = match role {
        Role::Workflow => "no files",
        Role::Step => "files only in a scratch directory its tenant grants",
    };
    format!(
        "a {role} may import the {} interfaces `durable` and `step-support`, and the WASI 0.2 interfaces \
         of clocks, random, cli, io, filesystem, sockets, outgoing HTTP and config (with no sockets, no environment, \
         {files}, HTTP only from steps to the origins their tenant allows, and as config only a step's tenant's secrets)",
        contract::PACKAGE
    )
}

/// The first import of `imports` that is not granted.
pub fn first_refused<'a>(imports: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    imports.into_iter().find(|name| !grants(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_and_wasi_02_are_granted_and_nothing_else() {
        for granted in [
            "stepstone:workflow/durable@0.1.0",
            "stepstone:workflow/step-support@0.1.0",
            "wasi:clocks/wall-clock@0.2.9",
            "wasi:sockets/tcp@0.2.0",
            "wasi:filesystem/preopens@0.2.12",
            "wasi:http/outgoing-handler@0.2.0",
            "wasi:http/types@0.2.12",
            "wasi:config/store@0.2.0-rc.1",
        ] {
            assert!(grants(granted), "{granted}");
        }
        for refused in [
            "wasi:http/incoming-handler@0.2.0",
            "wasi:clocks/wall-clock@0.3.0-rc-2025-09-16",
            "wasi:keyvalue/store@0.2.0-draft",
            "acme:secrets/vault@1.0.0",
            "wasi:clocks/wall-clock",
            "stepstone:workflow/durable@0.2.0",
        ] {
            assert!(!grants(refused), "{refused}");
        }
        let imports = ["wasi:io/poll@0.2.9", "wasi:http/types@0.2.9", "x:y/z@1.0.0"];
        assert_eq!(first_refused(imports), Some("x:y/z@1.0.0"));
    }
}
