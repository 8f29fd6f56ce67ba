//! The steps of the simulated runs, and the service they act on: every
//! attempt a host starts is recorded by the service (the downstream world
//! a step would charge a card in), with the host, the time, the attempt's
//! fencing token, and whether the call's journal entry already existed
//! then; the step answers as `noop` does (its input), after a while; the
//! step `flaky` fails its first attempt now and then (the service was
//! busy), to be retried.
//!
//! Invariant: how long an attempt takes depends on the call alone (run,
//! seq, attempt), never on the order hosts ask in, so a seed's steps
//! behave the same on every run of it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use object_store::ObjectStoreExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use sha2::{Digest, Sha256};
use stepstone::runtime::{AttemptCall, StandIn, StepStandIn};
use stepstone::sandbox::{AttemptFailure, StepErrorKind};
use stepstone::store::{RunId, TenantId, keys_of};
use tokio::time::Instant;

/// An attempt the service saw start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub at: Duration,
    pub host: usize,
    pub run: String,
    pub seq: u64,
    pub attempt: u32,
    pub fencing_token: u64,
    /// The call's journal entry was already stored when it started.
    pub journaled: bool,
}

/// What the service saw, in order.
pub struct Service {
    origin: Instant,
    started: Mutex<Vec<Started>>,
}

impl Service {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            origin: Instant::now(),
            started: Mutex::default(),
        })
    }

    pub fn started(&self) -> Vec<Started> {
        self.started.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// One host's steps: what its runs' step attempts do.
pub struct HostSteps {
    pub host: usize,
    pub service: Arc<Service>,
    /// The store as it is, to see whether a call's entry exists.
    pub store: Arc<InMemory>,
    pub tenant: TenantId,
}

impl HostSteps {
    /// Whether the journal entry of `call` is stored.
    fn journaled(&self, call: &AttemptCall<'_>) -> bool {
        let Ok(run) = RunId::new(call.run) else {
            return false;
        };
        let key = Path::from(format!("tenants/{}/{}", self.tenant, keys_of(&run).entry(call.seq)));
        // The in-memory store answers at once: no runtime is needed.
        futures::executor::block_on(self.store.head(&key)).is_ok()
    }
}

impl StepStandIn for HostSteps {
    fn attempt(&self, call: &AttemptCall<'_>) -> StandIn {
        let at = self.service.origin.elapsed();
        self.service
            .started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Started {
                at,
                host: self.host,
                run: call.run.to_owned(),
                seq: call.seq,
                attempt: call.attempt,
                fencing_token: call.fencing_token,
                journaled: self.journaled(call),
            });
        let drawn = digest(call);
        let answer = if call.step == "flaky" && call.attempt == 1 && (drawn >> 32).is_multiple_of(3) {
            Err(AttemptFailure::new(
                StepErrorKind::Failed,
                "the service was busy".to_owned(),
            ))
        } else {
            Ok(call.input.to_owned())
        };
        StandIn {
            answer: Some(answer),
            takes: Duration::from_millis(drawn % 1500),
        }
    }
}

/// A number drawn from the call alone.
fn digest(call: &AttemptCall<'_>) -> u64 {
    let hash = Sha256::new()
        .chain_update(call.run.as_bytes())
        .chain_update(call.seq.to_le_bytes())
        .chain_update(call.attempt.to_le_bytes())
        .finalize();
    u64::from_le_bytes(hash[..8].try_into().unwrap_or_default())
}
