//! A step stand-in that answers every attempt at once with its input, as
//! the bench guest's `noop` does, and counts the attempts: for suites about
//! what a run does around its steps, not what the steps do; and a run of
//! the bench guest's `sequential` on a runtime answered so.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use stepstone::component::CodeCache;
use stepstone::config::HostConfig;
use stepstone::runtime::{AttemptCall, Runtime, StandIn, StepStandIn, Submission};
use stepstone::store::{RunId, Storage, TenantId};
use stepstone_e2e::guest;

#[derive(Default)]
pub struct AnsweredAtOnce(Mutex<u32>);

impl AnsweredAtOnce {
    /// How many attempts were made so far.
    pub fn attempts(&self) -> u32 {
        *self.0.lock().expect("unpoisoned")
    }
}

impl StepStandIn for AnsweredAtOnce {
    fn attempt(&self, call: &AttemptCall<'_>) -> StandIn {
        *self.0.lock().expect("unpoisoned") += 1;
        StandIn {
            answer: Some(Ok(call.input.to_owned())),
            takes: Duration::ZERO,
        }
    }
}

/// A runtime on `storage` whose attempts `attempts` answers, and a run of
/// `sequential` over `n` steps submitted to it, not yet driven.
pub async fn sequential(attempts: &Arc<AnsweredAtOnce>, storage: Storage, n: u32) -> (Runtime, TenantId, RunId) {
    let runtime = Runtime::with_step_stand_in(HostConfig::new(), storage, CodeCache::disabled(), attempts.clone())
        .expect("a runtime");
    let tenant = TenantId::default_tenant();
    let bytes = bytes::Bytes::from(std::fs::read(guest("bench")).expect("the guest is built"));
    let bench = runtime.upload(&tenant, bytes, None).await.expect("uploaded");
    let input = format!(r#"{{"n":{n}}}"#);
    let run = runtime
        .submit(&tenant, Submission::new(bench, "sequential", &input))
        .await
        .expect("submitted");
    (runtime, tenant, run)
}
