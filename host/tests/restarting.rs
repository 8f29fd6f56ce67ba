//! Restarting a run through the library: a restarted run executes only the
//! calls after its point, on whichever host first drives it; once the
//! restart has answered it needs nothing of its old run; one whose copy of
//! its kept calls a crash cut short copies the rest, or, if the old run is
//! gone by then, fails saying so and runs nothing (and a restart that
//! finds it gone as it copies is refused); and one delivers again
//! as many untaken signals as a run may hold, not one more.

mod answered;

use std::sync::{Arc, OnceLock};

use futures::FutureExt;
use object_store::memory::InMemory;

use stepstone::component::CodeCache;
use stepstone::config::HostConfig;
use stepstone::journal::Outcome;
use stepstone::runtime::{Progress, Restart, RunError, Runtime, Submission};
use stepstone::store::seams::{Before, Call, Seams};
use stepstone::store::{RunId, Storage, TenantId, keys_of};
use stepstone_e2e::guest;

use answered::AnsweredAtOnce;

/// A run of five steps, driven to its end, on a runtime whose attempts
/// `attempts` counts.
async fn finished_run(attempts: &Arc<AnsweredAtOnce>) -> (Runtime, Storage, TenantId, RunId) {
    let storage = Storage::in_memory();
    let (runtime, tenant, run) = answered::sequential(attempts, storage.clone(), 5).await;
    let ended = runtime.run_to_end(&tenant, &run, None).await.expect("driven");
    assert!(
        matches!(ended, Progress::Finished(Outcome::Completed { .. })),
        "{ended:?}"
    );
    (runtime, storage, tenant, run)
}

/// The finished run of five steps of [`finished_run`], restarted from
/// `seq` (not yet driven), and the attempts made before the restart.
async fn restarted_at(seq: u64, attempts: &Arc<AnsweredAtOnce>) -> (Runtime, Storage, TenantId, RunId, RunId, u32) {
    let (runtime, storage, tenant, run) = finished_run(attempts).await;
    let before = attempts.attempts();
    let restart = Restart {
        seq,
        ..Restart::default()
    };
    let restarted = runtime.runs().restart(&tenant, &run, restart).await.expect("restarted");
    assert!(!restarted.old_cancelled, "a finished run is not cancelled");
    (runtime, storage, tenant, run, restarted.run_id, before)
}

/// Restarted from seq 2 of five steps, a run runs three: the two kept are
/// replayed, and it ends as the first did.
#[tokio::test]
async fn a_restarted_run_runs_only_the_calls_after_its_point() {
    let attempts = Arc::new(AnsweredAtOnce::default());
    let (runtime, _, tenant, _, restarted, before) = restarted_at(2, &attempts).await;
    let ended = (runtime.run_to_end(&tenant, &restarted, None).await).expect("driven");
    assert!(
        matches!(&ended, Progress::Finished(Outcome::Completed { output }) if output.holds("10")),
        "{ended:?}"
    );
    assert_eq!(attempts.attempts() - before, 3);
}

/// Once a restart has answered, its old run may go (retention deleting
/// it before any host drove the new one): the new run has its kept calls.
#[tokio::test]
async fn a_restarted_run_needs_nothing_of_its_old_run_once_the_restart_answered() {
    let attempts = Arc::new(AnsweredAtOnce::default());
    let (runtime, storage, tenant, run, restarted, before) = restarted_at(3, &attempts).await;
    let store = storage.tenant(&tenant);
    let old = store.list(&keys_of(&run).root()).await.expect("listed");
    store.delete_all(&old).await.expect("the old run deleted");
    let ended = (runtime.run_to_end(&tenant, &restarted, None).await).expect("driven");
    assert!(
        matches!(&ended, Progress::Finished(Outcome::Completed { output }) if output.holds("10")),
        "{ended:?}"
    );
    assert_eq!(attempts.attempts() - before, 2, "only the calls after seq 3 ran");
}

/// The entries a restart copied into `restarted`'s journal, deleted but
/// for those of `kept_seqs`: what a crash that cut the copy short leaves.
async fn copy_cut_short(storage: &Storage, tenant: &TenantId, restarted: &RunId, kept_seqs: &[u64]) {
    let store = storage.tenant(tenant);
    let copied = store.list(&keys_of(restarted).of(0).journal()).await.expect("listed");
    let keep: Vec<_> = kept_seqs
        .iter()
        .map(|seq| keys_of(restarted).of(0).entry(*seq))
        .collect();
    let cut: Vec<_> = copied.into_iter().filter(|key| !keep.contains(key)).collect();
    store.delete_all(&cut).await.expect("the copy cut short");
}

/// A restarted run whose copy a crash cut short, and whose old run was
/// deleted before any host copied the rest, fails `restart-point-gone`,
/// having run nothing.
#[tokio::test]
async fn a_restarted_run_whose_old_run_is_gone_fails_saying_so() {
    let attempts = Arc::new(AnsweredAtOnce::default());
    let (runtime, storage, tenant, run, restarted, before) = restarted_at(3, &attempts).await;
    copy_cut_short(&storage, &tenant, &restarted, &[]).await;
    let store = storage.tenant(&tenant);
    let old = store.list(&keys_of(&run).root()).await.expect("listed");
    store.delete_all(&old).await.expect("deleted");
    let ended = (runtime.run_to_end(&tenant, &restarted, None).await).expect("driven");
    match ended {
        Progress::Finished(Outcome::Failed { kind, message }) => {
            assert_eq!(kind, "restart-point-gone");
            assert!(message.contains(run.as_str()), "{message}");
        }
        other => panic!("not failed: {other:?}"),
    }
    assert_eq!(attempts.attempts(), before, "nothing ran");
}

/// Retention deleting the old run between a restart's read of it and its
/// copy of the kept calls (here, as the new run's record is stored): the
/// restart is refused, saying the run was deleted, and the new run has
/// ended failed, `restart-point-gone`, having run nothing (found by the
/// simulation, seed 47 with late writes: the restart was answered with a
/// run doomed to fail).
#[tokio::test]
async fn a_restart_whose_old_run_is_deleted_before_its_copy_is_refused() {
    let attempts = Arc::new(AnsweredAtOnce::default());
    let inner = Arc::new(InMemory::new());
    let (plain, deleted_on_copy) = (Storage::new(inner.clone()), Arc::new(OnceLock::<RunId>::new()));
    let delete_the_old_run: Before = {
        let (plain, deleted_on_copy) = (plain.clone(), deleted_on_copy.clone());
        Arc::new(move |call, key| {
            let (plain, deleted_on_copy) = (plain.clone(), deleted_on_copy.clone());
            async move {
                if let (Call::Put, Some(old)) = (call, deleted_on_copy.get())
                    && key.as_ref().ends_with("/runs/again/run")
                {
                    let store = plain.tenant(&TenantId::default_tenant());
                    let objects = store.list(&keys_of(old).root()).await.expect("listed");
                    store.delete_all(&objects).await.expect("the old run deleted");
                }
                Ok(())
            }
            .boxed()
        })
    };
    let storage = Storage::new(Arc::new(Seams::before_on(inner, delete_the_old_run)));
    let (runtime, tenant, run) = answered::sequential(&attempts, storage, 5).await;
    runtime.run_to_end(&tenant, &run, None).await.expect("driven");
    deleted_on_copy.set(run.clone()).expect("set once");
    let before = attempts.attempts();
    let again = RunId::new("again").expect("a valid id");
    let restart = Restart {
        seq: 3,
        run_id: Some(again.clone()),
        ..Restart::default()
    };
    match runtime.runs().restart(&tenant, &run, restart).await {
        Err(RunError::RestartRefused { reason, .. }) => assert!(
            reason.contains("was deleted") && reason.contains("`again` ended failed"),
            "{reason}"
        ),
        other => panic!("restarted from a run deleted meanwhile: {other:?}"),
    }
    match (runtime.run_to_end(&tenant, &again, None).await).expect("read") {
        Progress::Finished(Outcome::Failed { kind, .. }) => assert_eq!(kind, "restart-point-gone"),
        other => panic!("not failed: {other:?}"),
    }
    assert_eq!(attempts.attempts(), before, "nothing ran");
}

/// A restarted run only some of whose kept calls were copied before a
/// crash (here, the second of three) copies the rest, leaves the one there
/// as it is, and runs only the calls after its point.
#[tokio::test]
async fn a_restarted_run_whose_copy_was_cut_short_copies_the_rest() {
    let attempts = Arc::new(AnsweredAtOnce::default());
    let (runtime, storage, tenant, _, restarted, before) = restarted_at(3, &attempts).await;
    copy_cut_short(&storage, &tenant, &restarted, &[1]).await;
    let store = storage.tenant(&tenant);
    let new = keys_of(&restarted).of(0);
    let copied = store.get(&new.entry(1)).await.expect("read").expect("left");
    let ended = (runtime.run_to_end(&tenant, &restarted, None).await).expect("driven");
    assert!(
        matches!(&ended, Progress::Finished(Outcome::Completed { output }) if output.holds("10")),
        "{ended:?}"
    );
    assert_eq!(attempts.attempts() - before, 2, "only the calls after seq 3 ran");
    let kept = store.get(&new.entry(1)).await.expect("read");
    assert_eq!(kept, Some(copied), "the copy already there is left as it is");
}

/// A runtime limiting untaken signals to `limit`, on `storage`.
fn holding_signals(storage: &Storage, limit: usize) -> Runtime {
    let mut config = HostConfig::new();
    config.run.max_buffered_signals = limit;
    Runtime::new(config, storage.clone(), CodeCache::disabled()).expect("a runtime")
}

/// A restart delivers again the signals the run had not taken: as many as
/// a run may hold untaken, not one more. Two hosts on one store, their
/// limits a signal apart, each judge the same run at its own limit.
#[tokio::test]
async fn a_restart_delivers_again_up_to_the_untaken_signals_a_run_may_hold() {
    let storage = Storage::in_memory();
    let (two, three) = (holding_signals(&storage, 2), holding_signals(&storage, 3));
    let tenant = TenantId::default_tenant();
    let bytes = bytes::Bytes::from(std::fs::read(guest("hello")).expect("the guest is built"));
    let hello = three.upload(&tenant, bytes, None).await.expect("uploaded");
    let run = three
        .submit(&tenant, Submission::new(hello, "await-go", "null"))
        .await
        .expect("submitted");
    let extra = stepstone::store::SignalName::new("extra").expect("a valid name");
    for n in 0..3 {
        three.signal(&tenant, &run, &extra, &n.to_string()).await.expect("sent");
    }
    let restart = || Restart {
        seq: 0,
        ..Restart::default()
    };
    match two.runs().restart(&tenant, &run, restart()).await {
        Err(RunError::RestartRefused { reason, .. }) => assert!(
            reason.contains("not taken 3 signals") && reason.contains("the 2 a run may hold"),
            "{reason}"
        ),
        other => panic!("three signals restarted under a limit of two: {other:?}"),
    }
    let restarted = three.runs().restart(&tenant, &run, restart()).await.expect("restarted");
    assert_eq!(restarted.signals_again, 3, "at the limit");
}
