//! The runtime over every storage backend, through the library API: the same
//! runs must give the same results and the same journal shape on each.
//! Uses the example guests built by `make guests`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::memory::InMemory;
use stepstone::component::{CodeCache, Loaded};
use stepstone::config::HostConfig;
use stepstone::contract::bindings::{StepError, StepErrorKind};
use stepstone::journal::{AttemptRecord, CallKind, Outcome, Recorded, RunRecords};
use stepstone::runtime::{Progress, ReplayReport, RunState, Runtime, Submission};
use stepstone::store::{FaultConfig, Faults, FaultyStore, RunId, Storage, TenantId};

fn guest(name: &str) -> Bytes {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/guests")
        .join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}: run `make guests`", path.display()))
        .into()
}

/// Every backend the journal must work on, freshly made.
fn backends() -> Vec<(&'static str, Storage, tempfile::TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let local = Storage::local(&dir.path().join("objects")).unwrap();
    vec![
        ("in-memory", Storage::in_memory(), tempfile::tempdir().unwrap()),
        ("local-fs", local, dir),
        ("in-memory failing 10%", flaky().0, tempfile::tempdir().unwrap()),
    ]
}

/// A store that fails one call in ten (half of the failed writes landing
/// anyway), which the host's retries must hide.
fn flaky() -> (Storage, Arc<Faults>) {
    let store = FaultyStore::new(InMemory::new(), "errors=0.1,seed=5".parse().unwrap());
    let counts = store.faults();
    (Storage::new(Arc::new(store)), counts)
}

async fn runtime(storage: Storage) -> Runtime {
    Runtime::new(HostConfig::new(), storage, CodeCache::disabled()).unwrap()
}

async fn load(runtime: &Runtime, name: &str) -> Arc<Loaded> {
    runtime.validate(name, guest(name)).await.unwrap()
}

fn order_input(id: &str) -> String {
    format!(r#"{{"order_id":"{id}","item":"pen","amount_cents":300,"sleep_ms":0,"approval_timeout_ms":2000}}"#)
}

#[tokio::test]
async fn the_order_saga_completes_the_same_way_on_every_backend() {
    let tenant = TenantId::default_tenant();
    for (backend, storage, _dir) in backends() {
        let runtime = runtime(storage).await;
        let order = load(&runtime, "order").await;
        let mut submission = Submission::new(order, "place-order", &order_input("b-1"));
        submission.run_id = Some(RunId::new("b-1").unwrap());
        let run = runtime.submit(&tenant, submission).await.unwrap();
        let signal = stepstone::store::SignalName::new("approve").unwrap();
        runtime
            .signal(&tenant, &run, &signal, r#"{"approved":true}"#)
            .await
            .unwrap();
        let progress = runtime.run_to_end(&tenant, &run, None).await.unwrap();
        let Progress::Finished(Outcome::Completed { output }) = progress else {
            panic!("{backend}: {progress:?}")
        };
        assert!(output.contains(r#""tracking":"trk-b-1""#), "{backend}: {output}");

        let history = runtime.history(&tenant, &run).await.unwrap();
        let kinds: Vec<CallKind> = history.iter().map(|e| e.call.kind).collect();
        use CallKind::*;
        assert_eq!(kinds, [Step, Step, Sleep, Signal, Step], "{backend}");
        assert!(
            history.iter().enumerate().all(|(i, e)| e.seq == i as u64),
            "{backend}: gap in seqs"
        );
        let replay = runtime.replay(&tenant, &run, None).await.unwrap();
        assert_eq!(replay, ReplayReport::Identical { calls: 5 }, "{backend}");
    }
}

#[tokio::test]
async fn resubmitting_a_run_id_is_idempotent_for_the_same_input_and_refused_for_another() {
    let tenant = TenantId::default_tenant();
    for (backend, storage, _dir) in backends() {
        let runtime = runtime(storage).await;
        let hello = load(&runtime, "hello").await;
        let submit = |input: &str| {
            let mut submission = Submission::new(hello.clone(), "greet", input);
            submission.run_id = Some(RunId::new("same").unwrap());
            runtime.submit(&tenant, submission)
        };
        let first = submit(r#"{"name":"Ada"}"#).await.unwrap();
        assert_eq!(submit(r#"{"name":"Ada"}"#).await.unwrap(), first, "{backend}");
        let refused = submit(r#"{"name":"Bob"}"#).await.unwrap_err().to_string();
        assert!(
            refused.contains("already exists with another workflow or input"),
            "{backend}: {refused}"
        );
    }
}

/// A crash between two attempts of a step: the attempts already made are in
/// the store, so the next host resumes the count instead of starting over.
#[tokio::test]
async fn a_retry_in_progress_resumes_its_attempt_count() {
    let tenant = TenantId::default_tenant();
    for (backend, storage, _dir) in backends() {
        let runtime = runtime(storage.clone()).await;
        let order = load(&runtime, "order").await;
        let mut submission = Submission::new(order, "place-order", &order_input("r-1"));
        submission.run_id = Some(RunId::new("r-1").unwrap());
        let run = runtime.submit(&tenant, submission).await.unwrap();
        // What a host that crashed after charge's first failed attempt left.
        let records = RunRecords::new(storage.tenant(&tenant), run.clone());
        let error = StepError {
            kind: StepErrorKind::Failed,
            message: "earlier host".into(),
            attempts: 1,
        };
        records
            .record_attempt(
                1,
                &AttemptRecord {
                    attempt: 1,
                    error,
                    failed_at_ms: 0,
                },
            )
            .await
            .unwrap();

        let signal = stepstone::store::SignalName::new("approve").unwrap();
        runtime
            .signal(&tenant, &run, &signal, r#"{"approved":true}"#)
            .await
            .unwrap();
        runtime.run_to_end(&tenant, &run, None).await.unwrap();
        let charge = runtime
            .history(&tenant, &run)
            .await
            .unwrap()
            .into_iter()
            .find(|e| e.call.name == "charge")
            .unwrap();
        // `charge` fails only on attempt 1; this host started at attempt 2.
        assert_eq!(charge.attempts, 2, "{backend}");
        assert!(
            matches!(charge.recorded, Recorded::Step { result: Ok(_) }),
            "{backend}: {charge:?}"
        );
        assert_eq!(
            records.attempts(1).await.unwrap().len(),
            1,
            "{backend}: attempt 1 ran again"
        );
    }
}

#[tokio::test]
async fn runs_complete_although_the_store_fails_calls() {
    let tenant = TenantId::default_tenant();
    let (storage, counts) = flaky();
    let runtime = runtime(storage).await;
    let fanout = load(&runtime, "fanout").await;
    for i in 0..5 {
        let submission = Submission::new(fanout.clone(), "fan-out", &format!(r#"{{"items":[{i},2,3]}}"#));
        let run = runtime.submit(&tenant, submission).await.unwrap();
        let progress = runtime.run_to_end(&tenant, &run, None).await.unwrap();
        let Progress::Finished(Outcome::Completed { output }) = progress else {
            panic!("{progress:?}")
        };
        assert_eq!(output, format!(r#"{{"squares":[{},4,9],"sum":{}}}"#, i * i, i * i + 13));
        let seqs: Vec<u64> = runtime
            .history(&tenant, &run)
            .await
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>(), "no gap, no duplicate");
    }
    assert!(counts.injected() > 0, "{} calls, none failed", counts.operations());
}

/// A run driven in the background, as `serve` drives runs, meets a store
/// that takes no write: it stops without failing, and continues by itself
/// once the store takes writes again.
#[tokio::test]
async fn a_background_run_continues_by_itself_once_the_store_recovers() {
    let tenant = TenantId::default_tenant();
    let (storage, faults) = flaky();
    faults.set_config(FaultConfig::default());
    let runtime = runtime(storage).await;
    let order = load(&runtime, "order").await;
    let mut submission = Submission::new(order, "place-order", &order_input("down"));
    submission.run_id = Some(RunId::new("down").unwrap());
    let run = runtime.submit(&tenant, submission).await.unwrap();
    let approve = stepstone::store::SignalName::new("approve").unwrap();
    runtime
        .signal(&tenant, &run, &approve, r#"{"approved":true}"#)
        .await
        .unwrap();

    faults.set_config("errors=1,on=writes,landed=0".parse().unwrap());
    runtime.drive_in_background(&tenant, &run);
    let outage = async {
        while faults.injected() < 8 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), outage)
        .await
        .expect("the first journal write was tried 8 times");
    let status = runtime.status(&tenant, &run).await.unwrap();
    assert_eq!(status.state, RunState::Pending, "stopped, not failed");

    faults.set_config(FaultConfig::default());
    let status = runtime.wait(&tenant, &run, Duration::from_secs(60)).await.unwrap();
    assert!(
        matches!(&status.state, RunState::Completed { output } if output.contains("trk-down")),
        "{status:?}"
    );
    assert_eq!(status.journaled_calls, 5);
}

#[tokio::test]
async fn compiled_code_is_cached_on_disk_and_reused() {
    let cache_dir = tempfile::tempdir().unwrap();
    let first = Runtime::new(
        HostConfig::new(),
        Storage::in_memory(),
        CodeCache::open(cache_dir.path()),
    )
    .unwrap();
    first.validate("hello", guest("hello")).await.unwrap();
    let cached: Vec<_> = std::fs::read_dir(cache_dir.path()).unwrap().flatten().collect();
    assert_eq!(
        cached.len(),
        2,
        "hello has workflows and steps: both roles compiled at validation, each cached"
    );

    let second = Runtime::new(
        HostConfig::new(),
        Storage::in_memory(),
        CodeCache::open(cache_dir.path()),
    )
    .unwrap();
    let started = std::time::Instant::now();
    second.validate("hello", guest("hello")).await.unwrap();
    for file in &cached {
        let modified_after = std::fs::metadata(file.path()).unwrap().modified().unwrap();
        assert!(
            modified_after <= std::time::SystemTime::now() - started.elapsed(),
            "{} was rewritten",
            file.path().display()
        );
    }
}

/// A submission killed half-way through writing its run record leaves a run
/// folder holding only the store's staging file (`run#1`): that is no run,
/// and listing or recovering runs passes over it instead of failing.
#[tokio::test]
async fn a_run_folder_without_its_record_is_no_run() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    let runtime = runtime(Storage::local(&objects).unwrap()).await;
    let half = objects.join("tenants/default/runs/half");
    std::fs::create_dir_all(&half).unwrap();
    std::fs::write(half.join("run#1"), b"STP").unwrap();
    let tenant = TenantId::default_tenant();
    assert_eq!(runtime.unfinished(&tenant).await.unwrap(), []);
    assert!(runtime.list(&tenant).await.unwrap().is_empty());
}
