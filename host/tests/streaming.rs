//! Streams out of a run through the library: a reader gets every value
//! once, in order, from any offset, live and from another host's runtime on
//! the same store; a replay appends nothing twice; a restarted run's kept
//! values are read only once copied whole; the quotas hold at their edges;
//! a read that follows ends at its span.

use std::time::Duration;

use futures::StreamExt;
use stepstone::component::CodeCache;
use stepstone::config::{HostConfig, RunLimits};
use stepstone::journal::{CallKind, Outcome};
use stepstone::runtime::{Progress, Restart, RunError, RunState, Runtime, StreamEvent, Submission};
use stepstone::store::{RunId, Storage, StreamName, TenantId, keys_of};
use stepstone_e2e::guest;

fn runtime(config: HostConfig, storage: &Storage) -> Runtime {
    Runtime::new(config, storage.clone(), CodeCache::disabled()).expect("a runtime")
}

/// Submits `hello`'s `stream-ticks` on `input`, not yet driven.
async fn ticking(runtime: &Runtime, input: &str) -> RunId {
    let tenant = TenantId::default_tenant();
    let bytes = bytes::Bytes::from(std::fs::read(guest("hello")).expect("the guest is built"));
    let hello = runtime.upload(&tenant, bytes, None).await.expect("uploaded");
    let submission = Submission::new(hello, "stream-ticks", input);
    runtime.submit(&tenant, submission).await.expect("submitted")
}

async fn drive(runtime: &Runtime, run: &RunId) -> Progress {
    (runtime.run_to_end(&TenantId::default_tenant(), run, None).await).expect("driven")
}

/// What a read of stream `ticks` from `from` sends: the ticks' offsets and
/// values, and the state the run ended in if the read got its end.
async fn read(runtime: &Runtime, run: &RunId, from: u64, follow: bool) -> (Vec<(u64, String)>, Option<String>) {
    let name = StreamName::new("ticks").expect("a valid name");
    let tenant = TenantId::default_tenant();
    let events = runtime.runs().read_stream(&tenant, run, name, from, follow).await;
    let mut events = std::pin::pin!(events.expect("the run is there"));
    let (mut values, mut end) = (Vec::new(), None);
    while let Some(event) = events.next().await {
        match event.expect("read") {
            StreamEvent::Value(value) => values.push((value.offset, value.value)),
            StreamEvent::End(status) => end = Some(status.state.name().to_owned()),
        }
    }
    (values, end)
}

fn ticks(offsets: std::ops::Range<u64>) -> Vec<(u64, String)> {
    offsets.map(|n| (n, format!(r#"{{"tick":{n}}}"#))).collect()
}

#[tokio::test]
async fn a_finished_runs_stream_is_read_from_any_offset_and_ends() {
    let storage = Storage::in_memory();
    let runtime = runtime(HostConfig::new(), &storage);
    let run = ticking(&runtime, r#"{"ticks":5}"#).await;
    assert!(matches!(
        drive(&runtime, &run).await,
        Progress::Finished(Outcome::Completed { .. })
    ));
    let completed = Some("completed".to_owned());
    assert_eq!(read(&runtime, &run, 0, true).await, (ticks(0..5), completed.clone()));
    assert_eq!(read(&runtime, &run, 3, false).await, (ticks(3..5), completed.clone()));
    assert_eq!(read(&runtime, &run, u64::MAX, true).await, (vec![], completed));
    let other = StreamName::new("other").expect("a valid name");
    let tenant = TenantId::default_tenant();
    let events = runtime
        .runs()
        .read_stream(&tenant, &run, other, 0, true)
        .await
        .expect("read");
    let events: Vec<_> = events.collect().await;
    assert!(
        matches!(events.as_slice(), [Ok(StreamEvent::End(_))]),
        "a stream never appended to only ends: {events:?}"
    );
    let unknown = RunId::new("no-such-run").expect("a valid id");
    let refused = runtime
        .runs()
        .read_stream(&tenant, &unknown, StreamName::new("ticks").unwrap(), 0, true);
    assert!(matches!(refused.await.err(), Some(RunError::UnknownRun { .. })));
}

/// Readers on this host and on another host's runtime, both started before
/// the run, get each value once, in order, as the run appends it, though
/// it suspends (and replays) at every tick's timer; the journal holds each
/// tick once.
#[tokio::test]
async fn readers_here_and_on_another_host_see_each_value_once_as_it_is_appended() {
    let storage = Storage::in_memory();
    let mut config = HostConfig::new();
    config.wait.eviction_threshold = Duration::ZERO;
    let (here, elsewhere) = (runtime(config.clone(), &storage), runtime(config, &storage));
    let run = ticking(&here, r#"{"ticks":6,"every_ms":20}"#).await;
    let (read_here, read_elsewhere, driven) = tokio::join!(
        read(&here, &run, 0, true),
        read(&elsewhere, &run, 0, true),
        drive(&here, &run)
    );
    assert!(
        matches!(driven, Progress::Finished(Outcome::Completed { .. })),
        "{driven:?}"
    );
    let completed = Some("completed".to_owned());
    assert_eq!(read_here, (ticks(0..6), completed.clone()));
    assert_eq!(read_elsewhere, (ticks(0..6), completed));
    let history = here.history(&TenantId::default_tenant(), &run).await.expect("history");
    let appends = history.iter().filter(|e| e.call.kind == CallKind::StreamAppend).count();
    assert_eq!(appends, 6, "the replays appended nothing twice");
}

/// A restarted run's stream is the old run's kept values, then its own;
/// none past a kept call not yet copied is read.
#[tokio::test]
async fn a_restarted_runs_kept_values_are_read_only_once_copied_whole() {
    let storage = Storage::in_memory();
    let runtime = runtime(HostConfig::new(), &storage);
    let tenant = TenantId::default_tenant();
    let run = ticking(&runtime, r#"{"ticks":4,"every_ms":1}"#).await;
    drive(&runtime, &run).await;
    // Seqs 0 to 3: tick 0, sleep, tick 1, sleep; kept, then tick 2 anew.
    let restart = Restart {
        seq: 4,
        ..Restart::default()
    };
    let restarted = runtime.runs().restart(&tenant, &run, restart).await.expect("restarted");
    // The copy as a crash may leave it, made out of order: seqs 2 and 3
    // copied, 0 and 1 not yet.
    let store = storage.tenant(&tenant);
    let new = keys_of(&restarted.run_id).of(0);
    store
        .delete_all(&[new.entry(0), new.entry(1)])
        .await
        .expect("cut short");
    assert_eq!(
        read(&runtime, &restarted.run_id, 0, false).await,
        (vec![], None),
        "tick 1 is not read before tick 0 is copied"
    );
    drive(&runtime, &restarted.run_id).await;
    assert_eq!(
        read(&runtime, &restarted.run_id, 0, true).await,
        (ticks(0..4), Some("completed".to_owned()))
    );
}

async fn ended_with(limits: RunLimits, ticks: u64) -> Outcome {
    let storage = Storage::in_memory();
    let mut config = HostConfig::new();
    config.run = limits;
    let runtime = runtime(config, &storage);
    let run = ticking(&runtime, &format!(r#"{{"ticks":{ticks}}}"#)).await;
    match drive(&runtime, &run).await {
        Progress::Finished(outcome) => outcome,
        other => panic!("the run did not end: {other:?}"),
    }
}

/// Each tick is `{"tick":N}`, 10 bytes for N below 10.
#[tokio::test]
async fn a_run_streams_up_to_its_quotas_and_fails_past_them_saying_which() {
    let values = RunLimits {
        max_stream_values: 3,
        ..RunLimits::default()
    };
    assert!(matches!(ended_with(values, 3).await, Outcome::Completed { .. }));
    match ended_with(values, 4).await {
        Outcome::Failed { kind, message } => {
            assert_eq!(kind, "host-limit");
            assert!(
                message.contains("quota of 3 values") && message.contains("`ticks`"),
                "{message}"
            );
        }
        other => panic!("a fourth value passed a quota of 3: {other:?}"),
    }
    let bytes = RunLimits {
        max_stream_bytes: 30,
        ..RunLimits::default()
    };
    assert!(matches!(ended_with(bytes, 3).await, Outcome::Completed { .. }));
    match ended_with(bytes, 4).await {
        Outcome::Failed { message, .. } => assert!(message.contains("quota of 30 bytes"), "{message}"),
        other => panic!("41 bytes passed a quota of 30: {other:?}"),
    }
}

/// A read that follows a run no one drives ends at its span, having sent
/// nothing and no end.
#[tokio::test]
async fn a_read_that_follows_ends_at_its_span() {
    let storage = Storage::in_memory();
    let mut config = HostConfig::new();
    config.wait.stream_read_span = Duration::from_millis(100);
    let runtime = runtime(config, &storage);
    let run = ticking(&runtime, r#"{"ticks":1}"#).await;
    let began = std::time::Instant::now();
    assert_eq!(read(&runtime, &run, 0, true).await, (vec![], None));
    assert!(began.elapsed() >= Duration::from_millis(100), "{:?}", began.elapsed());
    let status = runtime.status(&TenantId::default_tenant(), &run).await.expect("status");
    assert!(!matches!(status.state, RunState::Completed { .. }), "no one drove it");
}

/// A tenant has at most 64 reads of streams open on a host: the 65th is
/// refused, saying so, and one closed makes room.
#[tokio::test]
async fn a_tenant_holds_at_most_its_limit_of_open_stream_reads() {
    let storage = Storage::in_memory();
    let runtime = runtime(HostConfig::new(), &storage);
    let run = ticking(&runtime, r#"{"ticks":1}"#).await;
    let tenant = TenantId::default_tenant();
    let name = || StreamName::new("ticks").expect("a valid name");
    let mut open = Vec::new();
    for _ in 0..stepstone::runtime::MAX_STREAM_READERS {
        open.push(
            runtime
                .runs()
                .read_stream(&tenant, &run, name(), 0, true)
                .await
                .expect("open"),
        );
    }
    match runtime.runs().read_stream(&tenant, &run, name(), 0, true).await {
        Err(RunError::StreamReaders { limit }) => assert_eq!(limit, 64),
        other => panic!("a 65th read was not refused: {:?}", other.err()),
    }
    open.pop();
    assert!(
        runtime.runs().read_stream(&tenant, &run, name(), 0, true).await.is_ok(),
        "room again"
    );
}
