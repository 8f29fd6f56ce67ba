//! The fuzz targets' regression inputs, replayed in `make test` without
//! cargo-fuzz: every file under `fuzz/regressions/<target>/` (inputs that
//! once found a bug, and a few crafted ones) goes through the same body the
//! fuzzer runs (`fuzz/src/lib.rs`), which panics if the host breaks a promise
//! about bad input. Plus properties of the journal envelope, by proptest.
//! Uses the `hello` guest built by `make guests`.

#[path = "../../fuzz/src/lib.rs"]
mod targets;

use std::path::PathBuf;

use proptest::prelude::*;
use stepstone::contract::bindings::{StepError, StepErrorKind};
use stepstone::journal::{Call, CallKind, Entry, Payload, Recorded, decode, encode};

/// Runs `body` on every saved input of `target`, naming each that fails.
fn replay(target: &str, body: impl Fn(&[u8]) + std::panic::RefUnwindSafe) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions")
        .join(target);
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{} holds no inputs", dir.display());
    let failed: Vec<String> = inputs
        .iter()
        .filter(|path| {
            let input = std::fs::read(path).unwrap();
            std::panic::catch_unwind(|| body(&input)).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{target}: these inputs break the host again: {failed:#?}"
    );
}

#[test]
fn saved_component_uploads_are_refused_cleanly() {
    replay("component_upload", targets::component_upload);
}

/// The `valid-*` inputs are records as this format version writes them: a
/// build that cannot read them any more cannot read its old journals.
#[test]
fn saved_journal_records_decode_or_are_refused_cleanly() {
    replay("journal_decode", |input| {
        targets::journal_decode(input);
    });
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/journal_decode");
    for name in [
        "run",
        "outcome",
        "cancel",
        "entry",
        "entry-by-position",
        "attempt",
        "timer",
        "signal",
    ] {
        let record = std::fs::read(dir.join(format!("valid-{name}"))).unwrap();
        assert!(targets::journal_decode(&record), "valid-{name} no longer decodes");
    }
}

#[test]
fn saved_api_requests_are_answered_cleanly() {
    replay("api_json", targets::api_json);
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), "[a-f0-9]{0,40}"]
}

fn call() -> impl Strategy<Value = Call> {
    let kinds = prop_oneof![
        Just(CallKind::Step),
        Just(CallKind::Sleep),
        Just(CallKind::Signal),
        Just(CallKind::Now),
        Just(CallKind::Random),
        Just(CallKind::MemoSet),
        Just(CallKind::AwaitAny),
        Just(CallKind::StartChild),
        Just(CallKind::AwaitChild),
        Just(CallKind::Patch),
        Just(CallKind::StreamAppend),
    ];
    (kinds, text(), text()).prop_map(|(kind, name, input_digest)| Call {
        kind,
        name,
        input_digest,
    })
}

fn recorded() -> impl Strategy<Value = Recorded> {
    let kinds = prop_oneof![
        Just(StepErrorKind::Failed),
        Just(StepErrorKind::FuelExhausted),
        Just(StepErrorKind::TimedOut),
        Just(StepErrorKind::Trapped),
    ];
    let step_error = (kinds, text(), any::<u32>()).prop_map(|(kind, message, attempts)| StepError {
        kind,
        message,
        attempts,
    });
    // A payload as an entry holds it: the text, or a stored one's name and size.
    let payload = || {
        let stored = ("[0-9a-f]{64}", any::<u64>()).prop_map(|(sha256, bytes)| Payload::Stored { sha256, bytes });
        prop_oneof![text().prop_map(Payload::Inline), stored]
    };
    prop_oneof![
        prop_oneof![payload().prop_map(Ok), step_error.prop_map(Err)].prop_map(|result| Recorded::Step { result }),
        Just(Recorded::Slept),
        (proptest::option::of(payload()), proptest::option::of(text()))
            .prop_map(|(payload, key)| Recorded::Signal { payload, key }),
        any::<u64>().prop_map(Recorded::Value),
        payload().prop_map(|value| Recorded::MemoSet { value }),
        any::<u32>().prop_map(Recorded::Winner),
        prop_oneof![payload().prop_map(Ok), text().prop_map(Err)].prop_map(|result| Recorded::ChildEnded { result }),
        text().prop_map(|reason| Recorded::Cancelled { reason }),
        Just(Recorded::Patched),
        text().prop_map(|value| Recorded::Appended { value }),
    ]
}

fn entry() -> impl Strategy<Value = Entry> {
    (
        any::<u64>(),
        call(),
        recorded(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        any::<Option<u64>>(),
    )
        .prop_map(
            |(seq, call, recorded, attempts, started_at_ms, finished_at_ms, last_attempt_started_at_ms)| Entry {
                seq,
                call,
                recorded,
                attempts,
                started_at_ms,
                finished_at_ms,
                last_attempt_started_at_ms,
            },
        )
}

proptest! {
    #[test]
    fn every_journal_entry_round_trips(entry in entry()) {
        prop_assert_eq!(decode::<Entry>(&entry.encode()), Ok(entry.clone()));
        // As entries were stored before they were stored by position.
        prop_assert_eq!(decode::<Entry>(&encode(&entry)), Ok(entry.clone()));
        // What replay and `history` do with an entry read back.
        prop_assert!(targets::journal_decode(&[&[0x83], &entry.encode()[8..]].concat()));
    }

    #[test]
    fn a_truncated_entry_is_refused(entry in entry(), cut in any::<prop::sample::Index>()) {
        let bytes = entry.encode();
        let cut = cut.index(bytes.len());
        prop_assert!(decode::<Entry>(&bytes[..cut]).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_break_decoding(selector in any::<u8>(), body in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _decoded = targets::journal_decode(&[&[selector], body.as_slice()].concat());
    }
}
