//! Pausing and advancing a run through the library: a step whose attempt
//! failed while its run was paused makes no further attempt until the run
//! is resumed, and the attempt under way when the pause came finished and
//! counted, unless the pause stopped it; a sleep waited out in its
//! instance ends once advanced.

mod answered;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use stepstone::component::CodeCache;
use stepstone::config::HostConfig;
use stepstone::journal::PauseRecord;
use stepstone::runtime::RunStatus;
use stepstone::runtime::{
    AttemptCall, AttemptFailure, AttemptUnderWay, RunState, Runtime, StandIn, StepErrorKind, StepStandIn, Submission,
};
use stepstone::store::{RunId, Storage, TenantId};
use stepstone_e2e::guest;

use answered::AnsweredAtOnce;

/// Pauses the run of the step `flaky` as its first attempt starts; counts
/// that step's attempts. A pause that lets the attempt finish sees it fail
/// (retried a second later); one that stops it stops an attempt that would
/// take an hour. Every other attempt answers its input, as the bench
/// guest's steps do.
struct PausingOnce {
    runtime: Mutex<Option<Runtime>>,
    attempts: Mutex<u32>,
    under_way: AttemptUnderWay,
    /// How long after the attempt starts the pause is asked.
    pause_after: Duration,
}

impl PausingOnce {
    /// A runtime on the in-memory store whose steps `stand_in` answers.
    fn runtime(under_way: AttemptUnderWay) -> (Runtime, Arc<PausingOnce>) {
        Self::runtime_with(HostConfig::new(), under_way, Duration::ZERO)
    }

    fn runtime_with(
        config: HostConfig,
        under_way: AttemptUnderWay,
        pause_after: Duration,
    ) -> (Runtime, Arc<PausingOnce>) {
        let stand_in = Arc::new(PausingOnce {
            runtime: Mutex::new(None),
            attempts: Mutex::new(0),
            under_way,
            pause_after,
        });
        let runtime =
            Runtime::with_step_stand_in(config, Storage::in_memory(), CodeCache::disabled(), stand_in.clone())
                .expect("a runtime");
        *stand_in.runtime.lock().expect("unpoisoned") = Some(runtime.clone());
        (runtime, stand_in)
    }

    fn attempts(&self) -> u32 {
        *self.attempts.lock().expect("unpoisoned")
    }
}

impl StepStandIn for PausingOnce {
    fn attempt(&self, call: &AttemptCall<'_>) -> StandIn {
        if call.step != "flaky" {
            return StandIn {
                answer: Some(Ok(call.input.to_owned())),
                takes: Duration::ZERO,
            };
        }
        let mut attempts = self.attempts.lock().expect("unpoisoned");
        *attempts += 1;
        // Not `call.attempt`: a stopped attempt is no failed one, and the
        // next counts as the first again.
        if *attempts > 1 {
            return StandIn {
                answer: Some(Ok(call.input.to_owned())),
                takes: Duration::ZERO,
            };
        }
        drop(attempts);
        let runtime = self.runtime.lock().expect("unpoisoned").clone().expect("the runtime");
        let run = RunId::new(call.run).expect("a valid id");
        let (under_way, pause_after) = (self.under_way, self.pause_after);
        tokio::spawn(async move {
            tokio::time::sleep(pause_after).await;
            let paused = runtime
                .runs()
                .pause(&TenantId::default_tenant(), &run, "mid-attempt", under_way)
                .await;
            paused.expect("paused");
        });
        match under_way {
            AttemptUnderWay::Finishes => StandIn {
                answer: Some(Err(AttemptFailure::new(StepErrorKind::Failed, "busy".to_owned()))),
                // Long enough for the pause to land before the attempt ends.
                takes: Duration::from_millis(300),
            },
            AttemptUnderWay::Stops => StandIn {
                answer: Some(Ok(call.input.to_owned())),
                takes: Duration::from_secs(3600),
            },
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_runs_step_makes_no_further_attempt_until_it_is_resumed() {
    let (runtime, stand_in) = PausingOnce::runtime(AttemptUnderWay::Finishes);
    // Unpaused, the retry would come a second after the failure.
    let (paused, ended) = paused_then_resumed(&runtime, &stand_in).await;
    assert!(!paused.interrupt, "{paused:?}");
    assert!(ended.state.is_finished(), "{ended:?}");
    assert!(ended.paused.is_none());
}

/// Drives a relay of one step on `runtime`, whose stand-in pauses it as the
/// step's first attempt starts: two seconds on, the run is paused, with no
/// attempt but that one; once resumed, it is attempted once more and the
/// run ends. Answers the pause and the run's last status.
async fn paused_then_resumed(runtime: &Runtime, stand_in: &PausingOnce) -> (PauseRecord, RunStatus) {
    let (tenant, run) = drive_relay(runtime, r#"{"n":1,"nap_s":0}"#).await;
    let paused = runtime
        .runs()
        .wait(&tenant, &run, Duration::from_secs(2))
        .await
        .expect("a status");
    assert!(!paused.state.is_finished(), "{paused:?}");
    let pause = paused.paused.expect("paused");
    assert_eq!(pause.reason, "mid-attempt");
    assert_eq!(stand_in.attempts(), 1, "no attempt while paused");

    runtime.runs().resume(&tenant, &run).await.expect("resumed");
    let ended = runtime
        .runs()
        .wait(&tenant, &run, Duration::from_secs(30))
        .await
        .expect("a status");
    assert_eq!(stand_in.attempts(), 2);
    (pause, ended)
}

/// A pause that stops the attempt under way: the attempt, which would take
/// an hour, is dropped, no other starts while the run is paused, and once
/// resumed the step is attempted again and the run ends at once. Both where
/// the workflow's instance awaits the attempt, and where the attempt runs
/// on a task of its own, its run suspended (a step evicted at once, the
/// pause asked a little later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_that_stops_the_attempt_under_way_makes_it_again_once_resumed() {
    stops_the_attempt_under_way(HostConfig::new(), Duration::ZERO).await;
    let mut evicting = HostConfig::new();
    evicting.wait.step_eviction_threshold = Duration::ZERO;
    stops_the_attempt_under_way(evicting, Duration::from_millis(300)).await;
}

async fn stops_the_attempt_under_way(config: HostConfig, pause_after: Duration) {
    let (runtime, stand_in) = PausingOnce::runtime_with(config, AttemptUnderWay::Stops, pause_after);
    let (pause, ended) = paused_then_resumed(&runtime, &stand_in).await;
    assert!(pause.interrupt, "{pause:?}");
    assert!(
        matches!(&ended.state, RunState::Completed { output: Some(output), .. } if output == "1"),
        "the hour-long attempt was stopped, and the next one answered: {ended:?}"
    );
}

/// A sleep shorter than the eviction threshold is waited out in its
/// instance: advancing it rings the run's bell, and the wait reads the
/// advance and ends, ten minutes early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_waited_in_its_instance_ends_once_advanced() {
    let mut config = HostConfig::new();
    config.wait.eviction_threshold = Duration::from_secs(3600);
    let runtime = Runtime::new(config, Storage::in_memory(), CodeCache::disabled()).expect("a runtime");
    let (tenant, run) = drive_relay(&runtime, r#"{"n":1,"nap_s":600}"#).await;
    let runs = runtime.runs();
    let mut status = runs.status(&tenant, &run).await.expect("a status");
    while !matches!(status.state, RunState::Sleeping { .. }) {
        assert!(!status.state.is_finished(), "{status:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
        status = runs.status(&tenant, &run).await.expect("a status");
    }
    let advanced = runs.advance(&tenant, &run).await.expect("advanced");
    assert_eq!((advanced.seq, advanced.signal.as_deref()), (2, None), "{advanced:?}");
    let ended = runs
        .wait(&tenant, &run, Duration::from_secs(30))
        .await
        .expect("a status");
    assert!(
        matches!(&ended.state, RunState::Completed { output: Some(output), .. } if output == "1"),
        "{ended:?}"
    );
}

/// Uploads the bench guest and drives a relay on `input` in the background.
async fn drive_relay(runtime: &Runtime, input: &str) -> (TenantId, RunId) {
    let tenant = TenantId::default_tenant();
    let bytes = bytes::Bytes::from(std::fs::read(guest("bench")).expect("the guest is built"));
    let bench = runtime.upload(&tenant, bytes, None).await.expect("uploaded");
    let run = runtime
        .submit(&tenant, Submission::new(bench, "relay", input))
        .await
        .expect("submitted");
    runtime.runs().drive_in_background(&tenant, &run);
    (tenant, run)
}

/// A run of steps driven to its end by one caller is paused, resumed,
/// paused again and cancelled: each pause stops its steps, each resumption
/// starts them again, and the cancellation ends the run, so the caller's
/// drive returns it cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_driven_to_its_end_is_paused_resumed_paused_and_cancelled_and_its_driver_returns() {
    let attempts = Arc::new(AnsweredAtOnce::default());
    let (runtime, tenant, run) = answered::sequential(&attempts, Storage::in_memory(), 1_000_000).await;
    let driver = {
        let (runtime, tenant, run) = (runtime.clone(), tenant.clone(), run.clone());
        tokio::spawn(async move { runtime.run_to_end(&tenant, &run, None).await })
    };
    let count = || attempts.attempts();
    let runs = runtime.runs();
    let moving = |at_least: u32| async move {
        while count() < at_least {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let stands_still = || async {
        loop {
            let before = count();
            tokio::time::sleep(Duration::from_millis(200)).await;
            if count() == before {
                return before;
            }
        }
    };
    for round in 0..2 {
        moving(count() + 10).await;
        runs.pause(&tenant, &run, "a look", AttemptUnderWay::Finishes)
            .await
            .expect("paused");
        let stopped = tokio::time::timeout(Duration::from_secs(10), stands_still())
            .await
            .unwrap_or_else(|_| panic!("round {round}: the steps go on while paused"));
        assert!(!driver.is_finished(), "round {round}: a paused run is not ended");
        if round == 0 {
            runs.resume(&tenant, &run).await.expect("resumed");
            tokio::time::timeout(Duration::from_secs(10), moving(stopped + 10))
                .await
                .expect("the steps go on once resumed");
        }
    }
    runs.cancel(&tenant, &run, "enough").await.expect("cancelled");
    let ended = tokio::time::timeout(Duration::from_secs(10), driver)
        .await
        .expect("the driver returns once the run is cancelled")
        .expect("the driver's task")
        .expect("driven");
    assert!(
        matches!(
            &ended,
            stepstone::runtime::Progress::Finished(stepstone::journal::Outcome::Cancelled { .. })
        ),
        "{ended:?}"
    );
}
