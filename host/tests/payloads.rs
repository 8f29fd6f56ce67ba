//! Payloads stored apart through the library: a run's input, a step's
//! output, a signal's payload, a memo's value, a child's output and a run's
//! output past the offload threshold are each an object of their own,
//! named by their SHA-256, which the record holding them names; a replay
//! reads them back as its calls are reached, and refuses one that is
//! missing or altered, naming it; a restarted run and a parent take their
//! own copies; a crash between a payload and the record naming it leaves
//! nothing a driver trips on.

use stepstone::component::{CodeCache, Loaded};
use stepstone::config::HostConfig;
use stepstone::journal::{Outcome, Payload, Recorded, sha256_hex};
use stepstone::runtime::{Progress, ReplayReport, Restart, RunError, RunState, Runtime, Submission};
use stepstone::store::{RunId, SignalName, Storage, TenantId, keys_of};
use stepstone_e2e::guest;

/// Payloads over this many bytes are stored apart in these tests.
const OFFLOAD_ABOVE: usize = 100;

/// A runtime on `storage` storing payloads over `offload_above` bytes
/// apart, and `hello` uploaded to it.
async fn offloading(storage: &Storage, offload_above: usize) -> (Runtime, std::sync::Arc<Loaded>) {
    let mut config = HostConfig::new();
    config.offload_payloads_above = offload_above;
    let runtime = Runtime::new(config, storage.clone(), CodeCache::disabled()).expect("a runtime");
    let bytes = bytes::Bytes::from(std::fs::read(guest("hello")).expect("the guest is built"));
    let hello = (runtime.upload(&TenantId::default_tenant(), bytes, None).await).expect("uploaded");
    (runtime, hello)
}

/// The output `run` completed with, read back if it was stored apart.
async fn output_of(runtime: &Runtime, run: &RunId) -> String {
    let tenant = TenantId::default_tenant();
    let ended = runtime.run_to_end(&tenant, run, None).await.expect("driven");
    let Progress::Finished(Outcome::Completed { output }) = ended else {
        panic!("not completed: {ended:?}")
    };
    (runtime.runs().payload_text(&tenant, run, output).await).expect("its output read")
}

/// A run of `hello`'s `greet` for a name of `length` letters, driven to its
/// end on a runtime that stores payloads over [`OFFLOAD_ABOVE`] apart.
async fn greeted(length: usize) -> (Runtime, Storage, RunId, String) {
    let storage = Storage::in_memory();
    let (runtime, hello) = offloading(&storage, OFFLOAD_ABOVE).await;
    let name = "a".repeat(length);
    let input = serde_json::json!({ "name": name }).to_string();
    let run = runtime
        .submit(&TenantId::default_tenant(), Submission::new(hello, "greet", &input))
        .await
        .expect("submitted");
    let output = output_of(&runtime, &run).await;
    assert!(output.contains(&name), "{output}");
    (runtime, storage, run, name)
}

/// The output of the run's first step, as its journal entry holds it.
async fn first_output(runtime: &Runtime, run: &RunId) -> Payload {
    let history = runtime
        .history(&TenantId::default_tenant(), run)
        .await
        .expect("history");
    match &history[0].recorded {
        Recorded::Step { result: Ok(output) } => output.clone(),
        other => panic!("not a step's output: {other:?}"),
    }
}

async fn replayed(runtime: &Runtime, run: &RunId) -> ReplayReport {
    let tenant = TenantId::default_tenant();
    (runtime.runs().replay(&tenant, run, None).await).expect("replayed")
}

#[tokio::test]
async fn an_output_at_the_threshold_stays_in_its_entry_and_one_past_it_is_stored_apart() {
    let around_the_name = r#"{"greeting":"Hello, !"}"#.len();
    let (runtime, _, run, _) = greeted(OFFLOAD_ABOVE - around_the_name).await;
    assert!(
        matches!(first_output(&runtime, &run).await, Payload::Inline(text) if text.len() == OFFLOAD_ABOVE),
        "at the threshold"
    );
    let (runtime, storage, run, name) = greeted(1000).await;
    let text = format!(r#"{{"greeting":"Hello, {name}!"}}"#);
    let Payload::Stored { sha256, bytes } = first_output(&runtime, &run).await else {
        panic!("past the threshold, the output is stored apart")
    };
    assert_eq!(
        (sha256.as_str(), bytes),
        (sha256_hex(text.as_bytes()).as_str(), text.len() as u64)
    );
    let store = storage.tenant(&TenantId::default_tenant());
    let stored = store.get(&keys_of(&run).payload(&sha256)).await.expect("read");
    assert_eq!(
        stored.as_deref(),
        Some(text.as_bytes()),
        "named by its SHA-256, under the run"
    );
    assert!(matches!(replayed(&runtime, &run).await, ReplayReport::Identical { .. }));
}

#[tokio::test]
async fn a_replay_refuses_a_stored_output_that_is_missing_or_altered_naming_it() {
    let (runtime, storage, run, _) = greeted(1000).await;
    let Payload::Stored { sha256, .. } = first_output(&runtime, &run).await else {
        panic!("stored apart")
    };
    let store = storage.tenant(&TenantId::default_tenant());
    let key = keys_of(&run).payload(&sha256);
    store.delete(&key).await.expect("deleted");
    store
        .create(&key, bytes::Bytes::from_static(br#"{"greeting":"forged"}"#))
        .await
        .expect("altered");
    let tenant = TenantId::default_tenant();
    let refused = runtime.runs().replay(&tenant, &run, None).await;
    let said = format!("{refused:?}");
    assert!(
        said.contains("do not match its name") && said.contains(&sha256),
        "{said}"
    );
    store.delete(&key).await.expect("deleted");
    let said = format!("{:?}", runtime.runs().replay(&tenant, &run, None).await);
    assert!(said.contains("is missing") && said.contains(&sha256), "{said}");
}

#[tokio::test]
async fn a_restarted_run_takes_its_own_copy_of_a_kept_output_stored_apart() {
    let (runtime, storage, run, name) = greeted(1000).await;
    let tenant = TenantId::default_tenant();
    let restart = Restart {
        seq: 1,
        ..Restart::default()
    };
    let restarted = runtime.runs().restart(&tenant, &run, restart).await.expect("restarted");
    let ended = runtime
        .run_to_end(&tenant, &restarted.run_id, None)
        .await
        .expect("driven");
    let Progress::Finished(Outcome::Completed { output }) = ended else {
        panic!("not completed: {ended:?}")
    };
    let output = runtime.runs().payload_text(&tenant, &restarted.run_id, output).await;
    assert!(output.expect("read").contains(&name));
    let Payload::Stored { sha256, .. } = first_output(&runtime, &restarted.run_id).await else {
        panic!("kept as stored")
    };
    let store = storage.tenant(&tenant);
    let old = store.list(&keys_of(&run).root()).await.expect("listed");
    store.delete_all(&old).await.expect("the old run deleted");
    let copy = store
        .get(&keys_of(&restarted.run_id).payload(&sha256))
        .await
        .expect("read");
    assert!(copy.is_some(), "the restarted run's own copy outlives the old run");
    assert!(matches!(
        replayed(&runtime, &restarted.run_id).await,
        ReplayReport::Identical { .. }
    ));
}

/// The payload the entry at `seq` of `run`'s journal holds.
async fn payload_at(runtime: &Runtime, run: &RunId, seq: usize) -> Payload {
    let history = runtime
        .history(&TenantId::default_tenant(), run)
        .await
        .expect("history");
    (history[seq].recorded.payload().cloned()).unwrap_or_else(|| panic!("no payload at {seq}: {history:?}"))
}

fn stored_name(payload: &Payload) -> String {
    match payload {
        Payload::Stored { sha256, .. } => sha256.clone(),
        Payload::Inline(text) => panic!("inline, not stored apart: {text}"),
    }
}

#[tokio::test]
async fn a_large_input_and_output_are_stored_apart_and_the_status_names_the_output_unread() {
    let (runtime, _, run, name) = greeted(1000).await;
    let tenant = TenantId::default_tenant();
    let record = runtime.runs().run_record(&tenant, &run).await.expect("its record");
    let input = serde_json::json!({ "name": name }).to_string();
    assert_eq!(stored_name(&record.input), sha256_hex(input.as_bytes()), "the input");
    let output = format!(r#"{{"greeting":"Hello, {name}!"}}"#);
    let status = runtime.runs().status(&tenant, &run).await.expect("its status");
    let RunState::Completed {
        output: None,
        output_stored: Some(stored),
    } = &status.state
    else {
        panic!("the output named, not shown: {:?}", status.state)
    };
    assert_eq!(
        (stored.sha256.as_str(), stored.bytes),
        (sha256_hex(output.as_bytes()).as_str(), output.len() as u64)
    );
    let json = serde_json::to_value(&status).expect("serialized");
    assert_eq!(json["output_stored"]["sha256"], stored.sha256.as_str());
    assert!(json.get("output").is_none(), "{json}");
    let read = runtime.runs().stored_payload(&tenant, &run, &stored.sha256).await;
    assert_eq!(read.expect("read").as_deref(), Some(output.as_str()));
    let other = TenantId::new("initech").expect("a tenant");
    let foreign = runtime.runs().stored_payload(&other, &run, &stored.sha256).await;
    assert!(matches!(foreign, Err(RunError::UnknownRun { .. })), "{foreign:?}");
}

#[tokio::test]
async fn a_large_signal_is_stored_apart_once_and_the_entry_taking_it_names_the_same_object() {
    let storage = Storage::in_memory();
    let (runtime, hello) = offloading(&storage, OFFLOAD_ABOVE).await;
    let tenant = TenantId::default_tenant();
    let run = (runtime.submit(&tenant, Submission::new(hello, "await-go", "{}")).await).expect("submitted");
    let payload = serde_json::json!({ "note": "n".repeat(1000) }).to_string();
    let go = SignalName::new("go").expect("a name");
    (runtime.signal(&tenant, &run, &go, &payload).await).expect("sent");
    assert_eq!(output_of(&runtime, &run).await, payload);
    let taken = payload_at(&runtime, &run, 0).await;
    assert_eq!(stored_name(&taken), sha256_hex(payload.as_bytes()));
    let store = storage.tenant(&tenant);
    let payloads = store.list(&keys_of(&run).root()).await.expect("listed");
    let stored = payloads
        .iter()
        .filter(|key| key.to_string().contains("/payloads/"))
        .count();
    assert_eq!(
        stored, 1,
        "the signal, its entry and the run's output share one object: {payloads:?}"
    );
    assert!(matches!(replayed(&runtime, &run).await, ReplayReport::Identical { .. }));
}

#[tokio::test]
async fn a_parent_keeps_its_own_copy_of_a_childs_output_stored_apart() {
    let storage = Storage::in_memory();
    let (runtime, hello) = offloading(&storage, OFFLOAD_ABOVE).await;
    let tenant = TenantId::default_tenant();
    let name = "c".repeat(1000);
    let input = serde_json::json!({ "names": [name] }).to_string();
    let parent = (runtime
        .submit(&tenant, Submission::new(hello, "greet-all", &input))
        .await)
        .expect("submitted");
    let output = output_of(&runtime, &parent).await;
    assert_eq!(output, serde_json::json!([format!("Hello, {name}!")]).to_string());
    let history = runtime.history(&tenant, &parent).await.expect("history");
    let child = history
        .iter()
        .find_map(|entry| match &entry.recorded {
            Recorded::Child { run: Ok(child) } => Some(child.clone()),
            _ => None,
        })
        .expect("a child started");
    let ended = history.iter().find_map(|entry| match &entry.recorded {
        Recorded::ChildEnded { result: Ok(output) } => Some(output.clone()),
        _ => None,
    });
    let sha256 = stored_name(&ended.expect("the child's end taken"));
    let store = storage.tenant(&tenant);
    let own = store.get(&keys_of(&parent).payload(&sha256)).await.expect("read");
    assert!(own.is_some(), "the parent's copy");
    let childs = store.list(&keys_of(&child).root()).await.expect("listed");
    store.delete_all(&childs).await.expect("the child deleted");
    assert!(matches!(
        replayed(&runtime, &parent).await,
        ReplayReport::Identical { .. }
    ));
}

#[tokio::test]
async fn with_a_threshold_of_zero_every_payload_is_stored_apart_and_a_replay_reads_them() {
    let storage = Storage::in_memory();
    let (runtime, hello) = offloading(&storage, 0).await;
    let tenant = TenantId::default_tenant();
    let run = (runtime.submit(&tenant, Submission::new(hello, "stamp", "{}")).await).expect("submitted");
    let output: serde_json::Value = serde_json::from_str(&output_of(&runtime, &run).await).expect("JSON");
    let history = runtime.history(&tenant, &run).await.expect("history");
    let memo = history
        .iter()
        .find_map(|entry| match &entry.recorded {
            Recorded::MemoSet { value } => Some(value.clone()),
            _ => None,
        })
        .expect("a memo set");
    let text = runtime
        .runs()
        .payload_text(&tenant, &run, memo.clone())
        .await
        .expect("read");
    assert_eq!(stored_name(&memo), sha256_hex(text.as_bytes()));
    assert_eq!(output["memo"].to_string(), text, "the memo as the workflow read it");
    assert!(matches!(replayed(&runtime, &run).await, ReplayReport::Identical { .. }));
}

/// A host that dies after storing a run's payloads and before the records
/// naming them leaves objects no record names: the next driver writes the
/// same bytes under the same names, and the run ends as it would have.
#[tokio::test]
async fn a_crash_between_payloads_and_the_records_naming_them_is_driven_past() {
    let (died, storage, run, name) = greeted(1000).await;
    died.runs().leave().await;
    let tenant = TenantId::default_tenant();
    let store = storage.tenant(&tenant);
    let all = store.list(&keys_of(&run).root()).await.expect("listed");
    let payloads: Vec<_> = all
        .iter()
        .filter(|key| key.to_string().contains("/payloads/"))
        .cloned()
        .collect();
    assert_eq!(
        payloads.len(),
        2,
        "the input and the output, which the step's output is: {all:?}"
    );
    let record = keys_of(&run).run();
    let lost: Vec<_> = all
        .iter()
        .filter(|key| **key != record && !payloads.contains(key))
        .cloned()
        .collect();
    store
        .delete_all(&lost)
        .await
        .expect("all but the run record and its payloads deleted");
    let (restarted, _) = offloading(&storage, OFFLOAD_ABOVE).await;
    assert_eq!(
        output_of(&restarted, &run).await,
        format!(r#"{{"greeting":"Hello, {name}!"}}"#)
    );
    let history = restarted.history(&tenant, &run).await.expect("history");
    assert!(
        matches!(history[0].recorded, Recorded::Step { .. }),
        "the step ran again: {history:?}"
    );
    let after = store.list(&keys_of(&run).root()).await.expect("listed");
    let stored_after = after
        .iter()
        .filter(|key| key.to_string().contains("/payloads/"))
        .count();
    assert_eq!(stored_after, 2, "written again under the same names: {after:?}");
}

/// A run of the hostile guest's `workflow` on `input`, on the default
/// limits but for fuel and memory enough for a guest to write 64 MiB of
/// JSON (its serializer's buffer doubles past the 256 MiB default).
async fn hostile_run(workflow: &str, input: serde_json::Value) -> (Runtime, RunId, Progress) {
    let mut config = HostConfig::new();
    config.workflow.activation_fuel = 20_000_000_000;
    config.workflow.memory_bytes = 512 << 20;
    config.step.memory_bytes = 512 << 20;
    let runtime = Runtime::new(config, Storage::in_memory(), CodeCache::disabled()).expect("a runtime");
    let tenant = TenantId::default_tenant();
    let wasm = bytes::Bytes::from(std::fs::read(guest("hostile")).expect("the guest is built"));
    let hostile = runtime.upload(&tenant, wasm, None).await.expect("uploaded");
    let submission = Submission::new(hostile, workflow, &input.to_string());
    let run = runtime.submit(&tenant, submission).await.expect("submitted");
    let ended = runtime.run_to_end(&tenant, &run, None).await.expect("driven");
    (runtime, run, ended)
}

#[tokio::test]
async fn a_workflow_output_of_exactly_64_mib_is_stored_apart_and_one_byte_more_fails_its_run() {
    let limit = HostConfig::new().workflow.max_payload_bytes;
    assert_eq!(limit, 64 << 20, "the default");
    // A JSON string of so many letters: its quotes make two more bytes.
    let big = |bytes: usize| hostile_run("big-workflow", serde_json::json!({ "bytes": bytes }));
    let (runtime, run, ended) = big(limit - 2).await;
    let Progress::Finished(Outcome::Completed { output }) = ended else {
        panic!("not completed: {ended:?}")
    };
    assert_eq!(output.bytes(), limit as u64);
    stored_name(&output);
    assert!(matches!(replayed(&runtime, &run).await, ReplayReport::Identical { .. }));
    let (_, _, ended) = big(limit - 1).await;
    let said = format!("{ended:?}");
    assert!(
        said.contains("output-too-large") && said.contains(&format!("the limit of {limit} bytes")),
        "{said}"
    );
}

#[tokio::test]
async fn a_step_output_of_exactly_64_mib_is_stored_apart_and_one_byte_more_fails_the_step() {
    let limit = HostConfig::new().step.max_output_bytes;
    assert_eq!(limit, 64 << 20, "the default");
    let big = |bytes: usize| {
        let call = serde_json::json!({ "step": "big", "input": { "bytes": bytes }, "options": {} });
        hostile_run("call-limited", call)
    };
    let (runtime, run, _) = big(limit - 2).await;
    let output = payload_at(&runtime, &run, 0).await;
    assert_eq!(output.bytes(), limit as u64);
    stored_name(&output);
    let (runtime, run, _) = big(limit - 1).await;
    let history = runtime
        .history(&TenantId::default_tenant(), &run)
        .await
        .expect("history");
    let said = format!("{:?}", history[0].recorded);
    assert!(
        said.contains("OutputTooLarge") && said.contains(&format!("the limit of {limit} bytes")),
        "{said}"
    );
}

/// A submission again under a run's id, with another large input, is
/// refused and stores nothing: a flood of them grows no storage.
#[tokio::test]
async fn a_resubmission_with_another_large_input_stores_nothing() {
    let storage = Storage::in_memory();
    let (runtime, hello) = offloading(&storage, OFFLOAD_ABOVE).await;
    let tenant = TenantId::default_tenant();
    let id = RunId::new("chosen").expect("an id");
    let submit = |fill: &str| {
        let input = serde_json::json!({ "fill": fill.repeat(1000) }).to_string();
        let mut submission = Submission::new(hello.clone(), "await-go", &input);
        submission.run_id = Some(id.clone());
        runtime.submit(&tenant, submission)
    };
    submit("a").await.expect("submitted");
    submit("a").await.expect("the same again: the same run");
    for fill in ["b", "c", "d"] {
        assert!(submit(fill).await.is_err(), "another input under the id is refused");
    }
    let stored = storage
        .tenant(&tenant)
        .list(&keys_of(&id).payloads())
        .await
        .expect("listed");
    assert_eq!(stored.len(), 1, "the run's own input only: {stored:?}");
}
