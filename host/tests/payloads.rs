//! Payloads stored apart through the library: a step's output past the
//! offload threshold is an object of its own, named by its SHA-256, which
//! its journal entry names; a replay reads it back as its call is reached,
//! and refuses one that is missing or altered, naming it; a restarted run
//! takes its own copy.

use stepstone::component::CodeCache;
use stepstone::config::HostConfig;
use stepstone::journal::{Outcome, Payload, Recorded, sha256_hex};
use stepstone::runtime::{Progress, ReplayReport, Restart, Runtime, Submission};
use stepstone::store::{RunId, Storage, TenantId, keys_of};
use stepstone_e2e::guest;

/// Outputs over this many bytes are stored apart in these tests.
const OFFLOAD_ABOVE: usize = 100;

/// A run of `hello`'s `greet` for a name of `length` letters, driven to its
/// end on a runtime that stores outputs over [`OFFLOAD_ABOVE`] apart.
async fn greeted(length: usize) -> (Runtime, Storage, RunId, String) {
    let storage = Storage::in_memory();
    let mut config = HostConfig::new();
    config.offload_payloads_above = OFFLOAD_ABOVE;
    let runtime = Runtime::new(config, storage.clone(), CodeCache::disabled()).expect("a runtime");
    let tenant = TenantId::default_tenant();
    let bytes = bytes::Bytes::from(std::fs::read(guest("hello")).expect("the guest is built"));
    let hello = runtime.upload(&tenant, bytes, None).await.expect("uploaded");
    let name = "a".repeat(length);
    let input = serde_json::json!({ "name": name }).to_string();
    let run = runtime
        .submit(&tenant, Submission::new(hello, "greet", &input))
        .await
        .expect("submitted");
    let ended = runtime.run_to_end(&tenant, &run, None).await.expect("driven");
    let Progress::Finished(Outcome::Completed { output }) = ended else {
        panic!("not completed: {ended:?}")
    };
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
    assert!(
        matches!(&ended, Progress::Finished(Outcome::Completed { output }) if output.contains(&name)),
        "{ended:?}"
    );
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
