//! Sends a guest's panic message to the run's log. On wasm32 a panic aborts
//! with a bare `unreachable` trap, so without this the message is lost.

use std::panic::{self, PanicHookInfo};

/// Routes every later panic's message ("panicked at src/lib.rs:9:5: ...")
/// to `log`.
pub(crate) fn route_panics_to(log: fn(&str)) {
    // Natively (the unit tests) there is no host to log to, and the test
    // harness reports panics itself.
    if cfg!(target_arch = "wasm32") {
        panic::set_hook(Box::new(move |info: &PanicHookInfo<'_>| log(&info.to_string())));
    }
}
