//! Pausing a run through the library: a step whose attempt failed while
//! its run was paused makes no further attempt until the run is resumed,
//! and the attempt under way when the pause came finished and counted.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use stepstone::component::CodeCache;
use stepstone::config::HostConfig;
use stepstone::runtime::{AttemptCall, AttemptFailure, Runtime, StandIn, StepErrorKind, StepStandIn, Submission};
use stepstone::store::{RunId, Storage, TenantId};
use stepstone_e2e::guest;

/// Fails the first attempt of the step `flaky` (retried a second later),
/// pausing its run as it starts; counts that step's attempts. Every other
/// attempt answers its input, as the bench guest's steps do.
struct PausingOnce {
    runtime: Mutex<Option<Runtime>>,
    attempts: Mutex<u32>,
}

impl StepStandIn for PausingOnce {
    fn attempt(&self, call: &AttemptCall<'_>) -> StandIn {
        if call.step != "flaky" {
            return StandIn {
                answer: Some(Ok(call.input.to_owned())),
                takes: Duration::ZERO,
            };
        }
        *self.attempts.lock().expect("unpoisoned") += 1;
        if call.attempt > 1 {
            return StandIn {
                answer: Some(Ok(call.input.to_owned())),
                takes: Duration::ZERO,
            };
        }
        let runtime = self.runtime.lock().expect("unpoisoned").clone().expect("the runtime");
        let run = RunId::new(call.run).expect("a valid id");
        tokio::spawn(async move {
            let paused = runtime
                .runs()
                .pause(&TenantId::default_tenant(), &run, "mid-attempt")
                .await;
            paused.expect("paused");
        });
        StandIn {
            answer: Some(Err(AttemptFailure::new(StepErrorKind::Failed, "busy".to_owned()))),
            // Long enough for the pause to land before the attempt ends.
            takes: Duration::from_millis(300),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_runs_step_makes_no_further_attempt_until_it_is_resumed() {
    let stand_in = Arc::new(PausingOnce {
        runtime: Mutex::new(None),
        attempts: Mutex::new(0),
    });
    let runtime = Runtime::with_step_stand_in(
        HostConfig::new(),
        Storage::in_memory(),
        CodeCache::disabled(),
        stand_in.clone(),
    )
    .expect("a runtime");
    *stand_in.runtime.lock().expect("unpoisoned") = Some(runtime.clone());
    let tenant = TenantId::default_tenant();
    let bytes = bytes::Bytes::from(std::fs::read(guest("bench")).expect("the guest is built"));
    let bench = runtime.upload(&tenant, bytes, None).await.expect("uploaded");
    let run = runtime
        .submit(&tenant, Submission::new(bench, "relay", r#"{"n":1,"nap_s":0}"#))
        .await
        .expect("submitted");
    runtime.runs().drive_in_background(&tenant, &run);

    // Unpaused, the retry would come a second after the failure.
    let waited = runtime
        .runs()
        .wait(&tenant, &run, Duration::from_secs(2))
        .await
        .expect("a status");
    assert!(!waited.state.is_finished(), "{waited:?}");
    assert_eq!(waited.paused.as_ref().map(|p| p.reason.as_str()), Some("mid-attempt"));
    assert_eq!(
        *stand_in.attempts.lock().expect("unpoisoned"),
        1,
        "no attempt while paused"
    );

    runtime.runs().resume(&tenant, &run).await.expect("resumed");
    let ended = runtime
        .runs()
        .wait(&tenant, &run, Duration::from_secs(30))
        .await
        .expect("a status");
    assert!(ended.state.is_finished(), "{ended:?}");
    assert_eq!(*stand_in.attempts.lock().expect("unpoisoned"), 2);
    assert!(ended.paused.is_none());
}
