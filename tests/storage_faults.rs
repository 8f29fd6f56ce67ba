//! Faults in what the store holds: a corrupt record is reported as corrupt,
//! naming its key, and other runs go on.

use serde_json::json;
use stepstone_e2e::{Host, arg, guest, order_input};

#[test]
fn a_flipped_byte_in_a_journal_entry_stops_that_run_only() {
    let host = Host::new();
    let wasm = guest("order");
    for run in ["healthy", "damaged"] {
        let input = order_input(run, 60_000, json!({})).to_string();
        let args = [
            "run",
            arg(&wasm),
            "place-order",
            "--run-id",
            run,
            "--input",
            &input,
            "--detach-after",
            "1s",
        ];
        let detached = host.run(&args).success();
        assert!(detached.stdout().contains("suspended"), "{}", detached.stdout());
    }
    let entry = host
        .data_dir()
        .join("objects/tenants/default/runs/damaged/journal/0000000000");
    let mut bytes = std::fs::read(&entry).expect("the first entry is on disk");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&entry, bytes).unwrap();

    host.run(&["cancel", "healthy"]).success();
    let resumed = host.run(&["resume"]);
    let stderr = resumed.failure();
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: run damaged"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        error.contains("runs/damaged/journal/0000000000") && error.contains("checksum mismatch"),
        "{error}"
    );
    assert_eq!(
        host.status("healthy").unwrap()["state"],
        "cancelled",
        "the other run went on"
    );
    let damaged = host.run(&["history", "damaged"]).failure();
    assert!(damaged.contains("checksum mismatch"), "{damaged}");
}
