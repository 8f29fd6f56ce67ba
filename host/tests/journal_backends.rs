//! The runtime over every storage backend, through the library API: the same
//! runs must give the same results and the same journal shape on each.
//! Uses the example guests built by `make guests`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use stepstone::component::{CodeCache, Loaded};
use stepstone::config::{HostConfig, SnapshotPolicy};
use stepstone::contract::bindings::{StepError, StepErrorKind};
use stepstone::journal::{
    AttemptRecord, Call, CallKind, ConcurrencyLimit, Entry, Outcome, Payload, Recorded, RunRecords,
};
use stepstone::runtime::{
    AttemptCall, Moment, Progress, ReplayReport, RunError, RunState, Runtime, StandIn, StepStandIn, Submission,
};
use stepstone::store::{
    ConcurrencyKey, Durability, FaultConfig, Faults, FaultyStore, RunId, Storage, TenantId, TenantStore, keys_of,
    place_generation, unfinished_key, unfinished_marker,
};

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
    let synced_dir = tempfile::tempdir().unwrap();
    let synced = Storage::local_with(&synced_dir.path().join("objects"), Durability::Fsync).unwrap();
    let logged_dir = tempfile::tempdir().unwrap();
    let logged = Storage::local_with(&logged_dir.path().join("objects"), Durability::Log).unwrap();
    vec![
        ("in-memory", Storage::in_memory(), tempfile::tempdir().unwrap()),
        ("local-fs", local, dir),
        ("local-fs, fsync", synced, synced_dir),
        ("local-fs, write log", logged, logged_dir),
        ("in-memory failing 10%", flaky().0, tempfile::tempdir().unwrap()),
        ("s3 (SeaweedFS)", s3(), tempfile::tempdir().unwrap()),
    ]
}

/// A fresh prefix of the test process's SeaweedFS, over S3.
fn s3() -> Storage {
    Storage::new(stepstone_e2e::seaweedfs().object_store())
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

/// A run of `hello`'s `greet` whose journal holds `stray`, an entry no
/// execution of it wrote.
async fn greeting_with(runtime: &Runtime, storage: &Storage, stray: Entry) -> RunId {
    let tenant = TenantId::default_tenant();
    let hello = load(runtime, "hello").await;
    let run = runtime
        .submit(&tenant, Submission::new(hello, "greet", r#"{"name":"Ada"}"#))
        .await
        .unwrap();
    RunRecords::new(storage.tenant(&tenant), run.clone())
        .append(&stray)
        .await
        .unwrap();
    run
}

/// Submits the order saga as run `id` and sends its approval: the run is
/// ready to be driven to its end.
async fn approved_order(runtime: &Runtime, id: &str) -> RunId {
    let tenant = TenantId::default_tenant();
    let order = load(runtime, "order").await;
    let mut submission = Submission::new(order, "place-order", &order_input(id));
    submission.run_id = Some(RunId::new(id).unwrap());
    let run = runtime.submit(&tenant, submission).await.unwrap();
    let approve = stepstone::store::SignalName::new("approve").unwrap();
    runtime
        .signal(&tenant, &run, &approve, r#"{"approved":true}"#)
        .await
        .unwrap();
    run
}

fn order_input(id: &str) -> String {
    format!(r#"{{"order_id":"{id}","item":"pen","amount_cents":300,"sleep_ms":0,"approval_timeout_ms":2000}}"#)
}

#[tokio::test]
async fn the_order_saga_completes_the_same_way_on_every_backend() {
    let tenant = TenantId::default_tenant();
    for (backend, storage, _dir) in backends() {
        let runtime = runtime(storage).await;
        let run = approved_order(&runtime, "b-1").await;
        let progress = runtime.run_to_end(&tenant, &run, None).await.unwrap();
        let Progress::Finished(Outcome::Completed {
            output: Payload::Inline(output),
        }) = progress
        else {
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
        let replay = runtime.runs().replay(&tenant, &run, None).await.unwrap();
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
        let crashed = runtime(storage.clone()).await;
        let run = approved_order(&crashed, "r-1").await;
        crashed.runs().leave().await;
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
                    started_at_ms: 0,
                    failed_at_ms: 0,
                },
            )
            .await
            .unwrap();

        let runtime = runtime(storage.clone()).await;
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
        let Progress::Finished(Outcome::Completed {
            output: Payload::Inline(output),
        }) = progress
        else {
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
    let run = approved_order(&runtime, "down").await;

    faults.set_config("errors=1,on=writes,landed=0".parse().unwrap());
    runtime.runs().drive_in_background(&tenant, &run);
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
    let status = runtime
        .runs()
        .wait(&tenant, &run, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(
        matches!(&status.state, RunState::Completed { output: Some(output), .. } if output.contains("trk-down")),
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
        1,
        "hello has workflows and steps: compiled once at validation, for both roles, whose engines compile alike"
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
    assert!(runtime.runs().unfinished(&tenant).await.unwrap().runs.is_empty());
    assert!(runtime.list(&tenant).await.unwrap().runs.is_empty());
}

/// A run's first drive on the host that created it reads nothing back: the
/// store holds only the run record this host wrote, and its first attempt
/// stands on the fence read while that was stored. The same run driven by
/// another host reads the record (and the build record an upgrade may have
/// left) beside one listing of the run's keys, which tells it the run has
/// no outcome, requests, snapshots or failed attempts and which entries it
/// has (none, here), and looks for each step's entry before its attempt
/// (its last owner's late write).
#[tokio::test]
async fn a_fresh_run_is_driven_without_reading_back_what_its_host_wrote() {
    let tenant = TenantId::default_tenant();
    // Counting the calls for runs only: hosts' heartbeats and wake-ups go
    // to the store beside the fault injector, on a schedule of their own.
    let (storage, calls) = Storage::in_memory().with_faults("errors=0".parse().unwrap());
    let (creator, other) = (runtime(storage.clone()).await, runtime(storage).await);
    let hello = load(&creator, "hello").await;
    // Loaded on both hosts, and both joined, so that only the run's own
    // records are counted.
    let submission = Submission::new(hello.clone(), "greet", "{}");
    creator.submit(&tenant, submission).await.unwrap();
    other.component(&tenant, &hello.digest).await.unwrap();
    other.runs().live().await.unwrap();
    let mut drive_calls = Vec::new();
    for driver in [&creator, &other] {
        let submission = Submission::new(hello.clone(), "greet", r#"{"name":"Ada"}"#);
        let run = creator.submit(&tenant, submission).await.unwrap();
        if std::ptr::eq(driver, &other) {
            // The other host takes the run over from its creator, gone.
            creator.runs().leave().await;
        }
        let before = calls.operations();
        let progress = driver.runs().drive(&tenant, &run).await.unwrap();
        assert!(
            matches!(progress, Progress::Finished(Outcome::Completed { .. })),
            "{progress:?}"
        );
        drive_calls.push(calls.operations() - before);
    }
    let [fresh, read_back] = drive_calls[..] else {
        unreachable!()
    };
    // The fresh run's first attempt stands on the fence read with its
    // record only if it starts within 5 ms of it (a loaded test machine
    // may take longer): then it skips that read too.
    assert!(
        (8..=9).contains(&(read_back - fresh)),
        "a fresh run skips 2 reads, 1 listing and (within 5 ms) its first fence, and a takeover costs a listing of the claims, a claim, the run's record read again after its first claim (the record and its build: retention may have deleted the run) and a look for the step's entry before its attempt: {fresh} store calls fresh, {read_back} taken over"
    );
}

/// A run submitted to start later stores its record without reading the
/// fence for a first attempt that will not start within 5 ms: one store
/// call fewer than a run that starts now.
#[tokio::test]
async fn a_run_that_starts_later_reads_no_fence_with_its_record() {
    let tenant = TenantId::default_tenant();
    let (storage, calls) = Storage::in_memory().with_faults("errors=0".parse().unwrap());
    let host = runtime(storage).await;
    let hello = load(&host, "hello").await;
    host.submit(&tenant, Submission::new(hello.clone(), "greet", "{}"))
        .await
        .unwrap();
    let mut submission_calls = Vec::new();
    for start_at in [Moment::Unset, Moment::After(Duration::from_secs(3600))] {
        let mut submission = Submission::new(hello.clone(), "greet", r#"{"name":"Ada"}"#);
        submission.start_at = start_at;
        let before = calls.operations();
        host.submit(&tenant, submission).await.unwrap();
        submission_calls.push(calls.operations() - before);
    }
    assert_eq!(
        submission_calls[0] - submission_calls[1],
        1,
        "{submission_calls:?} store calls: now, later"
    );
}

/// A wait for a run this host drove to its end is answered from memory,
/// also when it comes after the driving task let the run go (a client that
/// starts a run, then waits for it): it needs no store, not even one that
/// fails every read.
#[tokio::test]
async fn a_wait_just_after_a_run_ended_here_is_answered_without_the_store() {
    let tenant = TenantId::default_tenant();
    let (storage, faults) = Storage::in_memory().with_faults("errors=0".parse().unwrap());
    let runtime = runtime(storage).await;
    let hello = load(&runtime, "hello").await;
    let submission = Submission::new(hello, "greet", r#"{"name":"Ada"}"#);
    let run = runtime.submit(&tenant, submission).await.unwrap();
    runtime.runs().drive_in_background(&tenant, &run);
    let ended = runtime
        .runs()
        .wait(&tenant, &run, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(matches!(ended.state, RunState::Completed { .. }), "{ended:?}");
    let let_go = async {
        while runtime.runs().active_runs(&tenant) > 0 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), let_go)
        .await
        .expect("the driving task ends");
    faults.set_config("errors=1,on=reads".parse().unwrap());
    let again = runtime
        .runs()
        .wait(&tenant, &run, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(again, ended);
    assert!(
        runtime.status(&tenant, &run).await.is_err(),
        "a status reads the store, which fails every read now"
    );
}

/// A journal entry at the largest seq (a corrupt or foreign record, never
/// one the host writes) is a journal longer than any workflow's, counted
/// without overflowing: replay finds the run consistent so far, and a drive
/// fails it as non-determinism, naming the count. Never a panic.
#[tokio::test]
async fn an_entry_at_the_largest_seq_fails_the_run_as_non_determinism() {
    let tenant = TenantId::default_tenant();
    let storage = Storage::in_memory();
    let runtime = runtime(storage.clone()).await;
    let stray = Entry {
        seq: u64::MAX,
        ..entry(0, 7)
    };
    let run = greeting_with(&runtime, &storage, stray).await;
    let report = runtime.runs().replay(&tenant, &run, None).await.unwrap();
    assert!(matches!(report, ReplayReport::ConsistentSoFar { .. }), "{report:?}");
    let progress = runtime.runs().drive(&tenant, &run).await.unwrap();
    let Progress::Finished(Outcome::Failed { kind, message }) = progress else {
        panic!("{progress:?}")
    };
    assert_eq!(kind, "non-determinism");
    assert!(
        message.contains(&format!("the journal records {}", u64::MAX)),
        "{message}"
    );
}

/// What the code under test logs on this thread, as text.
#[derive(Clone, Default)]
struct Logged(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logged {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logged {
    /// Captures this thread's events until the guard is dropped.
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logged = Self::default();
        let writer = logged.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (logged, tracing::subscriber::set_default(subscriber))
    }

    /// What was logged since the last call.
    fn take(&self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut *self.0.lock().unwrap())).into_owned()
    }
}

/// A journal entry of seq `seq` recording `value`.
fn entry(seq: u64, value: u64) -> Entry {
    Entry {
        seq,
        call: Call::new(CallKind::Random, "", b""),
        recorded: Recorded::Value(value),
        attempts: 1,
        started_at_ms: seq,
        finished_at_ms: seq + 1,
        last_attempt_started_at_ms: None,
    }
}

/// A run whose journal holds `seqs`, each entry recording `value(seq)`.
async fn journal(storage: &Storage, run: &str, seqs: std::ops::Range<u64>, value: fn(u64) -> u64) -> RunRecords {
    let records = RunRecords::new(storage.tenant(&TenantId::default_tenant()), RunId::new(run).unwrap());
    for seq in seqs {
        records.append(&entry(seq, value(seq))).await.unwrap();
    }
    records
}

/// Another handle on `run`'s records, which has read and written nothing.
fn reopened(run: &RunRecords) -> RunRecords {
    RunRecords::new(run.store().clone(), run.run_id().clone())
}

const EVERY_4: SnapshotPolicy = SnapshotPolicy { every: 4 };

/// A snapshot that is torn, corrupt, empty, of another history, or stands
/// beside a sound older one is passed over with a warning naming it: the
/// journal read is the entries', never an error.
#[tokio::test]
async fn a_damaged_snapshot_falls_back_to_the_entries_with_a_warning() {
    let (logged, _guard) = Logged::capture();
    for (backend, storage, _dir) in backends() {
        let template = journal(&storage, "template", 0..10, |seq| seq).await;
        assert_eq!(template.snapshot(&EVERY_4).await, Some(10), "{backend}");
        let store = template.store().clone();
        let sound = store
            .get(&keys_of(template.run_id()).of(0).snapshot(10))
            .await
            .unwrap()
            .unwrap();
        let mut flipped = sound.to_vec();
        flipped[sound.len() / 2] ^= 0x20;
        let damaged: [(&str, Bytes); 4] = [
            ("truncated", sound.slice(..sound.len() / 2)),
            ("corrupt", Bytes::from(flipped)),
            ("empty", Bytes::new()),
            ("another-history", sound.clone()),
        ];
        logged.take();
        for (damage, bytes) in damaged {
            // Every entry records another value than the template's, so the
            // sound template snapshot disagrees with this run's entries.
            let run = journal(&storage, damage, 0..10, |seq| seq * 100).await;
            let key = keys_of(run.run_id()).of(0).snapshot(10);
            store.create(&key, bytes).await.unwrap();
            let reader = reopened(&run);
            let expected: Vec<Entry> = (0..10).map(|seq| entry(seq, seq * 100)).collect();
            assert_eq!(reader.entries().await.unwrap(), expected, "{backend}, {damage}");
            assert_eq!(reader.entry_seqs().await.unwrap().len(), 10, "{backend}, {damage}");
            let warned = logged.take();
            assert!(
                warned.contains("WARN") && warned.contains(&format!("key={key}")),
                "{backend}, {damage}: no warning naming {key}: {warned}"
            );
        }

        // A corrupt newest snapshot: the sound one before it is used.
        for seq in 10..14 {
            template.append(&entry(seq, seq)).await.unwrap();
        }
        store
            .create(&keys_of(template.run_id()).of(0).snapshot(14), sound.slice(..20))
            .await
            .unwrap();
        let reader = reopened(&template);
        let entries = reader.entries().await.unwrap();
        assert_eq!(
            entries,
            (0..14).map(|seq| entry(seq, seq)).collect::<Vec<_>>(),
            "{backend}"
        );
        assert!(logged.take().contains("snapshots/0000000014"), "{backend}");
    }
}

/// On the local file system a put killed mid-way leaves a staging file
/// (`{n}#1`) beside the snapshot's key, never a torn snapshot at it: the
/// listing passes over it, and so does the journal read.
#[tokio::test]
async fn a_half_written_snapshot_file_is_no_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    let storage = Storage::local(&objects).unwrap();
    let run = journal(&storage, "staged", 0..6, |seq| seq).await;
    let snapshots = objects.join("tenants/default/runs/staged/snapshots");
    std::fs::create_dir_all(&snapshots).unwrap();
    std::fs::write(snapshots.join("0000000006#1"), b"STP\x01half").unwrap();
    let reader = reopened(&run);
    assert_eq!(reader.entries().await.unwrap().len(), 6);
    // The next snapshot is written beside the staging file.
    assert_eq!(reader.snapshot(&EVERY_4).await, Some(6));
    assert!(snapshots.join("0000000006").exists());
}

/// The bytes of `run`'s journal entries, in seq order.
async fn stored_journal(store: &TenantStore, run: &RunId) -> Vec<Bytes> {
    let mut journal = Vec::new();
    for key in store.list(&keys_of(run).of(0).journal()).await.unwrap() {
        journal.push(store.get(&key).await.unwrap().unwrap());
    }
    journal
}

/// A run that suspends writes a snapshot of its journal; woken, it replays
/// through it, and still through a snapshot damaged since; it completes as
/// without one, its entries as they were.
#[tokio::test]
async fn a_suspended_run_replays_through_its_snapshot_and_past_a_damaged_one() {
    let tenant = TenantId::default_tenant();
    for (backend, storage, _dir) in backends() {
        let mut config = HostConfig::new();
        config.wait.eviction_threshold = Duration::ZERO;
        config.snapshots = EVERY_4;
        let runtime = Runtime::new(config, storage.clone(), CodeCache::disabled()).unwrap();
        let bench = load(&runtime, "bench").await;
        let submission = Submission::new(bench, "sequential-then-wait", r#"{"n":20}"#);
        let run = runtime.submit(&tenant, submission).await.unwrap();
        let progress = runtime.runs().drive(&tenant, &run).await.unwrap();
        assert!(matches!(progress, Progress::Suspended(_)), "{backend}: {progress:?}");

        let store = storage.tenant(&tenant);
        let keys = keys_of(&run).of(0);
        let journal_before = stored_journal(&store, &run).await;
        assert_eq!(journal_before.len(), 20, "{backend}");
        assert_eq!(
            store.list(&keys.snapshots()).await.unwrap(),
            [keys.snapshot(20)],
            "{backend}: the suspension wrote one snapshot of the 20 steps"
        );
        let progress = runtime.runs().drive(&tenant, &run).await.unwrap();
        assert!(matches!(progress, Progress::Suspended(_)), "{backend}: {progress:?}");

        let sound = store.get(&keys.snapshot(20)).await.unwrap().unwrap();
        store
            .overwrite(&keys.snapshot(20), sound.slice(..sound.len() - 3))
            .await
            .unwrap();
        let progress = runtime.runs().drive(&tenant, &run).await.unwrap();
        assert!(matches!(progress, Progress::Suspended(_)), "{backend}: {progress:?}");

        let progress = signalled_to_the_end(&runtime, &tenant, &run).await;
        assert_eq!(
            progress,
            Progress::Finished(Outcome::Completed {
                output: (190 + 5).to_string().into()
            }),
            "{backend}"
        );
        let journal_after = stored_journal(&store, &run).await;
        assert_eq!(journal_after[..20], journal_before[..], "{backend}: entries rewritten");
        assert_eq!(runtime.history(&tenant, &run).await.unwrap().len(), 21, "{backend}");
        let replay = runtime.runs().replay(&tenant, &run, None).await.unwrap();
        assert_eq!(replay, ReplayReport::Identical { calls: 21 }, "{backend}");
    }
}

/// Sends `run` (of the bench guest's `sequential-then-wait`) its signal
/// `go` of 5, and drives it to its end.
async fn signalled_to_the_end(runtime: &Runtime, tenant: &TenantId, run: &RunId) -> Progress {
    let go = stepstone::store::SignalName::new("go").unwrap();
    runtime.signal(tenant, run, &go, "5").await.unwrap();
    runtime.run_to_end(tenant, run, None).await.unwrap()
}

/// A drive whose workflow returns before it made every call its journal
/// records did not replay that journal: the run fails `non-determinism`
/// instead of completing as if the extra entries were not there.
#[tokio::test]
async fn a_finished_execution_that_left_journal_entries_unconsumed_is_non_determinism() {
    let tenant = TenantId::default_tenant();
    for (backend, storage, _dir) in backends() {
        let submitting = runtime(storage.clone()).await;
        let stray = Entry {
            seq: 5,
            call: Call::new(CallKind::Step, "make-greeting", b"{}"),
            recorded: Recorded::Step { result: Ok("1".into()) },
            attempts: 1,
            started_at_ms: 0,
            finished_at_ms: 0,
            last_attempt_started_at_ms: None,
        };
        let run = greeting_with(&submitting, &storage, stray).await;
        // Another host, which reads the journal back once the first is gone.
        submitting.runs().leave().await;
        let driving = runtime(storage.clone()).await;
        let progress = driving.run_to_end(&tenant, &run, None).await.unwrap();
        let Progress::Finished(Outcome::Failed { kind, message }) = progress else {
            panic!("{backend}: {progress:?}")
        };
        assert_eq!(kind, "non-determinism", "{backend}: {message}");
        assert!(message.contains("the journal records 6"), "{backend}: {message}");
    }
}

/// Recovery reads the ledger and the index of runs stored before it, not
/// every run stored: a run writes no marker of its own, and is listed
/// while unfinished; a store written before either gets the old index
/// from a single full scan, after which a run of the old index found
/// finished is taken off it, and the ledger alone lists a run it notes.
#[tokio::test]
async fn recovery_reads_the_ledger_and_the_old_index_of_unfinished_runs() {
    let tenant = TenantId::default_tenant();
    for (backend, storage, _dir) in backends() {
        let runtime = runtime(storage.clone()).await;
        let bench = load(&runtime, "bench").await;
        let submit = |id: &str, workflow: &str| {
            let mut submission = Submission::new(bench.clone(), workflow, r#"{"n":1}"#);
            submission.run_id = Some(RunId::new(id).unwrap());
            runtime.submit(&tenant, submission)
        };
        let done = submit("done", "one-step").await.unwrap();
        runtime.run_to_end(&tenant, &done, None).await.unwrap();
        let open = submit("open", "wait-for-go").await.unwrap();
        let store = storage.tenant(&tenant);
        let markers = || async {
            let keys = store.list(&unfinished_key()).await.unwrap();
            keys.iter()
                .filter_map(|k| k.filename().map(str::to_owned))
                .collect::<Vec<_>>()
        };
        assert!(markers().await.is_empty(), "{backend}: no run writes a marker");

        // The first look builds the old index, by one scan.
        assert_eq!(
            runtime.runs().unfinished(&tenant).await.unwrap().runs,
            std::slice::from_ref(&open),
            "{backend}: scanned"
        );
        assert_eq!(markers().await, [".complete", "open"], "{backend}");

        // From now on the old index and the ledger are what is read: a run
        // the ledger notes is found without its marker, a finished run
        // listed on the old index is taken off it.
        store.delete(&unfinished_marker(&open)).await.unwrap();
        store.overwrite(&unfinished_marker(&done), Bytes::new()).await.unwrap();
        assert_eq!(
            runtime.runs().unfinished(&tenant).await.unwrap().runs,
            std::slice::from_ref(&open),
            "{backend}: from the ledger"
        );
        assert_eq!(
            markers().await,
            [".complete"],
            "{backend}: the finished run left the index"
        );
    }
}

/// One writer per run: no host drives a run whose creator is alive; once
/// the creator is gone, of hosts racing to take the run over exactly one
/// claims it and runs its step, and the others stand aside.
#[tokio::test]
async fn of_hosts_racing_for_a_run_exactly_one_drives_it() {
    let tenant = TenantId::default_tenant();
    for (backend, storage, _dir) in backends() {
        let creator = runtime(storage.clone()).await;
        let hello = load(&creator, "hello").await;
        let run = creator
            .submit(&tenant, Submission::new(hello, "greet", r#"{"name":"Ada"}"#))
            .await
            .unwrap();
        let other = runtime(storage.clone()).await;
        let refused = other.runs().drive(&tenant, &run).await.unwrap_err();
        assert!(
            matches!(refused, RunError::DrivenElsewhere { .. }) && refused.to_string().contains("which is alive"),
            "{backend}: {refused}"
        );
        creator.runs().leave().await;
        let racers = futures::future::join_all((0..4).map(|_| runtime(storage.clone()))).await;
        let ended = futures::future::join_all(racers.iter().map(|racer| racer.run_to_end(&tenant, &run, None))).await;
        for end in &ended {
            assert!(
                matches!(
                    end,
                    Ok(Progress::Finished(Outcome::Completed { .. })) | Err(RunError::DrivenElsewhere { .. })
                ),
                "{backend}: {end:?}"
            );
        }
        let attempts: f64 = racers.iter().map(step_attempts).sum();
        assert_eq!(attempts, 1.0, "{backend}: the step ran {attempts} times");
        let claims = storage.tenant(&tenant).list(&keys_of(&run).owners()).await.unwrap();
        assert_eq!(claims.len(), 1, "{backend}: {claims:?}");
    }
}

/// Step attempts a host has made, from its metrics.
fn step_attempts(runtime: &Runtime) -> f64 {
    runtime
        .metrics()
        .encode()
        .lines()
        .filter(|line| line.contains("step_attempt_seconds_count"))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Holds a run's first step attempt until the test lets it go, and counts
/// the attempts it was asked about.
struct HeldFirstAttempt {
    started: tokio::sync::mpsc::UnboundedSender<()>,
    go: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
    attempts: std::sync::atomic::AtomicU32,
}

impl StepStandIn for HeldFirstAttempt {
    fn attempt(&self, _: &AttemptCall<'_>) -> StandIn {
        let seen = self.attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if seen == 0 {
            let _ = self.started.send(());
            // The worker hands its other tasks on while it waits.
            let _ = tokio::task::block_in_place(|| self.go.lock().unwrap().recv());
        }
        StandIn {
            answer: Some(Ok("0".into())),
            takes: Duration::ZERO,
        }
    }
}

/// A host wrongly judged dead while it drives a run (another took the run
/// over at the next epoch during its step) journals the step it had
/// started, which the create-only journal keeps consistent, and then starts
/// no further attempt: it reads the newer claim before each attempt, and
/// stands down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_run_was_taken_over_starts_no_further_attempt() {
    let tenant = TenantId::default_tenant();
    for (backend, storage, _dir) in backends() {
        let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
        let (go, go_rx) = std::sync::mpsc::channel();
        let stand_in = Arc::new(HeldFirstAttempt {
            started,
            go: std::sync::Mutex::new(go_rx),
            attempts: std::sync::atomic::AtomicU32::new(0),
        });
        let config = HostConfig::new();
        let host =
            Runtime::with_step_stand_in(config, storage.clone(), CodeCache::disabled(), stand_in.clone()).unwrap();
        let bench = load(&host, "bench").await;
        let run = host
            .submit(&tenant, Submission::new(bench, "sequential", r#"{"n":3}"#))
            .await
            .unwrap();
        let driving = {
            let (host, tenant, run) = (host.clone(), tenant.clone(), run.clone());
            tokio::spawn(async move { host.run_to_end(&tenant, &run, None).await })
        };
        let mut driving = driving;
        tokio::select! {
            started = started_rx.recv() => started.expect("the first attempt starts"),
            ended = &mut driving => panic!("{backend}: the run ended before its first attempt: {ended:?}"),
        }
        let takeover = Bytes::from("elsewhere.1.abc");
        storage
            .tenant(&tenant)
            .create(&keys_of(&run).owner(1), takeover)
            .await
            .unwrap();
        go.send(()).unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(30), driving)
            .await
            .unwrap_or_else(|_| panic!("{backend}: the run neither ended nor stood down"))
            .unwrap();
        assert!(
            matches!(&ended, Err(e) if e.is_stood_down() && e.to_string().contains("at epoch 1")),
            "{backend}: {ended:?}"
        );
        let attempts = stand_in.attempts.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(attempts, 1, "{backend}: an attempt started after the takeover");
        let journal = RunRecords::new(storage.tenant(&tenant), run).entries().await.unwrap();
        assert_eq!(
            journal.len(),
            1,
            "{backend}: the step started before the takeover is journaled, no other"
        );
    }
}

/// Steps that answer after half a second, one after the other.
struct Slow;

impl StepStandIn for Slow {
    fn attempt(&self, call: &AttemptCall<'_>) -> StandIn {
        StandIn {
            answer: Some(Ok(call.input.to_owned())),
            takes: Duration::from_millis(500),
        }
    }
}

/// A run awaiting steps it started together, which outlive the eviction
/// threshold, is suspended and woken when they end (it waited for ever
/// when the steps ran on tasks of their own: found by the simulation).
#[tokio::test]
async fn a_run_evicted_while_awaiting_steps_it_started_together_finishes() {
    let tenant = TenantId::default_tenant();
    let mut config = HostConfig::new();
    config.wait.step_eviction_threshold = Duration::from_millis(100);
    let host =
        Runtime::with_step_stand_in(config, Storage::in_memory(), CodeCache::disabled(), Arc::new(Slow)).unwrap();
    let bench = load(&host, "bench").await;
    let run = host
        .submit(&tenant, Submission::new(bench, "parallel", r#"{"n":3}"#))
        .await
        .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(30), host.run_to_end(&tenant, &run, None))
        .await
        .expect("the run ends");
    assert!(
        matches!(&ended, Ok(Progress::Finished(Outcome::Completed { output })) if output.holds("3")),
        "{ended:?}"
    );
}

/// A run waiting for a place of its concurrency key goes on once the place
/// is taken for it by an earlier execution of the run: a host that lost
/// the run while both waited, and took the place after (it waited for
/// ever, the place held by its own run: found by the simulation, seed 16
/// of `--span 5m --runs 24`).
#[tokio::test]
async fn a_run_whose_place_was_taken_for_it_elsewhere_goes_on() {
    let tenant = TenantId::default_tenant();
    let storage = Storage::in_memory();
    let host = runtime(storage.clone()).await;
    let bench = load(&host, "bench").await;
    let key = ConcurrencyKey::new("one-at-a-time").unwrap();
    let queued = |workflow: &str, input: &str| {
        let mut submission = Submission::new(bench.clone(), workflow, input);
        submission.concurrency = Some(ConcurrencyLimit {
            key: key.clone(),
            limit: 1,
        });
        submission
    };
    let holder = host.submit(&tenant, queued("wait-for-go", r#"{"n":0}"#)).await.unwrap();
    host.runs().drive_in_background(&tenant, &holder);
    let waiter = host.submit(&tenant, queued("sequential", r#"{"n":2}"#)).await.unwrap();
    let waiting = tokio::spawn({
        let (host, tenant, waiter) = (host.clone(), tenant.clone(), waiter.clone());
        async move { host.run_to_end(&tenant, &waiter, None).await }
    });
    let mut status = host.status(&tenant, &holder).await.unwrap();
    while !matches!(status.state, RunState::AwaitingSignal { .. }) {
        assert!(!status.state.is_finished(), "{status:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        status = host.status(&tenant, &holder).await.unwrap();
    }
    // What the other execution wrote: the holder's place freed (generation
    // 2), then taken for the waiter (3), noted in the waiter's records.
    let store = storage.tenant(&tenant);
    store.create(&place_generation(&key, 0, 2), Bytes::new()).await.unwrap();
    store
        .create(&place_generation(&key, 0, 3), Bytes::from(waiter.as_str().to_owned()))
        .await
        .unwrap();
    let noted = Bytes::from_static(br#"{"slot":0,"generation":3}"#);
    store.overwrite(&keys_of(&waiter).place(), noted).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiter goes on")
        .unwrap();
    assert!(
        matches!(&ended, Ok(Progress::Finished(Outcome::Completed { output })) if output.holds("1")),
        "{ended:?}"
    );
}

/// How many round trips deep the requests made of a [`Rounds`] store went
/// since [`reset`](Self::reset): a request is one round deeper than the
/// deepest that had ended when it began. The hosts' upkeep (keys under
/// `cluster/`) goes on beside the runs and is not counted.
#[derive(Debug, Default)]
struct Depths {
    ended_deepest: AtomicU64,
    deepest: AtomicU64,
}

impl Depths {
    fn reset(&self) {
        self.ended_deepest.store(0, SeqCst);
        self.deepest.store(0, SeqCst);
    }

    fn deepest(&self) -> u64 {
        self.deepest.load(SeqCst)
    }

    /// A request for `location` begins: its depth, if it is counted.
    fn begin(&self, location: Option<&object_store::path::Path>) -> Option<u64> {
        if location.is_some_and(|key| key.as_ref().starts_with("cluster/")) {
            return None;
        }
        let depth = self.ended_deepest.load(SeqCst) + 1;
        self.deepest.fetch_max(depth, SeqCst);
        Some(depth)
    }

    fn end(&self, depth: Option<u64>) {
        if let Some(depth) = depth {
            self.ended_deepest.fetch_max(depth, SeqCst);
        }
    }
}

/// An in-memory store whose every request takes [`Rounds::LATENCY`], as a
/// remote store's round trip, its depth counted in its [`Depths`].
#[derive(Debug, Default)]
struct Rounds {
    inner: InMemory,
    depths: Arc<Depths>,
}

impl Rounds {
    const LATENCY: Duration = Duration::from_millis(50);

    async fn round_trip<T>(&self, location: Option<&object_store::path::Path>, request: impl Future<Output = T>) -> T {
        let depth = self.depths.begin(location);
        tokio::time::sleep(Self::LATENCY).await;
        let answer = request.await;
        self.depths.end(depth);
        answer
    }
}

impl std::fmt::Display for Rounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rounds({})", self.inner)
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for Rounds {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        (self.round_trip(Some(location), self.inner.put_opts(location, payload, opts))).await
    }

    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        (self.round_trip(Some(location), self.inner.get_opts(location, options))).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<object_store::path::Path>>,
    ) -> BoxStream<'static, object_store::Result<object_store::path::Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        let listing = self.inner.list(prefix).collect::<Vec<_>>();
        let (depths, depth) = (self.depths.clone(), self.depths.begin(prefix));
        futures::stream::once(async move {
            tokio::time::sleep(Self::LATENCY).await;
            let listed = listing.await;
            depths.end(depth);
            futures::stream::iter(listed)
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.round_trip(prefix, self.inner.list_with_delimiter(prefix)).await
    }

    async fn copy_opts(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.round_trip(Some(to), self.inner.copy_opts(from, to, options)).await
    }
}

/// Submitting a run takes two round trips (its note in the ledger, then its
/// record), and waking it once suspended two more: its record beside a
/// listing of its keys, then what the execution reads first (its journal,
/// the wait's timer, a signal sent to it) at once; the claim it holds
/// costs none. Woken with a signal stored, it takes it.
#[tokio::test]
async fn submitting_a_run_and_waking_it_suspended_are_two_round_trips_deep_each() {
    let tenant = TenantId::default_tenant();
    let store = Rounds::default();
    let depths = store.depths.clone();
    let mut config = HostConfig::new();
    config.wait.eviction_threshold = Duration::ZERO;
    let runtime = Runtime::new(config, Storage::new(Arc::new(store)), CodeCache::disabled()).unwrap();
    // Uploaded, so that the submission knows the component is stored.
    let bench = runtime.upload(&tenant, guest("bench"), None).await.unwrap();
    runtime.runs().live().await.unwrap();
    let submission = Submission::new(bench, "sequential-then-wait", r#"{"n":3}"#);
    depths.reset();
    let run = runtime.submit(&tenant, submission).await.unwrap();
    assert_eq!(
        depths.deepest(),
        2,
        "a submission: its markers together, then its record"
    );
    let progress = runtime.runs().drive(&tenant, &run).await.unwrap();
    assert!(matches!(progress, Progress::Suspended(_)), "{progress:?}");
    for _ in 0..2 {
        depths.reset();
        let progress = runtime.runs().drive(&tenant, &run).await.unwrap();
        assert!(matches!(progress, Progress::Suspended(_)), "{progress:?}");
        assert_eq!(depths.deepest(), 2, "round trips in series");
    }
    let progress = signalled_to_the_end(&runtime, &tenant, &run).await;
    assert_eq!(
        progress,
        Progress::Finished(Outcome::Completed {
            output: (3 + 5).to_string().into()
        })
    );
}
