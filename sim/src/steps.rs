//! The steps of the simulated runs, and the service they act on, as a
//! payment service would: every attempt a host starts is sent to it with
//! the call's idempotency key and fencing token, and recorded (the process,
//! the time, the token, the key, the run's incarnation). The service keeps the highest
//! token it saw for each key and refuses a lower one (the attempt fails,
//! fenced); it acts once per key and answers a key it acted on with what
//! it answered first, so a key two incarnations of a run share gets the
//! earlier one's answer. The step answers as `noop` does (its input),
//! after a while; the step `flaky` fails its first attempt now and then
//! (the service was busy), to be retried.
//!
//! Invariant: how long an attempt takes, and whether `flaky` fails it,
//! depends on the call alone (run, seq, attempt), never on the order hosts
//! ask in, so a seed's steps behave the same on every run of it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use stepstone::cluster::CLAIM_BITS;
use stepstone::runtime::{AttemptCall, StandIn, StepStandIn};
use stepstone::sandbox::{AttemptFailure, StepErrorKind, idempotency_key};
use stepstone::store::TenantId;
use tokio::time::Instant;

/// An attempt the service saw start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub at: Duration,
    /// The process that started it (each start of a host is one).
    pub host: usize,
    pub run: String,
    pub seq: u64,
    pub attempt: u32,
    pub fencing_token: u64,
    /// The run's incarnation, as its token says.
    pub incarnation: u64,
    pub key: String,
    /// The service refused it: a higher token was seen for its key.
    pub fenced: bool,
}

/// What the service did for one idempotency key.
#[derive(Debug, Clone, Default)]
struct Book {
    highest_token: u64,
    /// The first answer it gave, which every later request gets.
    answer: Option<String>,
}

/// What the service saw, in order, and its books by key.
pub struct Service {
    origin: Instant,
    state: Mutex<(Vec<Started>, BTreeMap<String, Book>)>,
}

impl Service {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            origin: Instant::now(),
            state: Mutex::default(),
        })
    }

    pub fn started(&self) -> Vec<Started> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0.clone()
    }

    /// Takes the attempt `started` asking `asked` (acting on it unless
    /// `busy`): its answer, or why not.
    fn take(&self, mut started: Started, asked: &str, busy: bool) -> Result<String, &'static str> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (starts, books) = &mut *state;
        let book = books.entry(started.key.clone()).or_default();
        started.fenced = started.fencing_token < book.highest_token;
        let answer = match (started.fenced, busy) {
            (true, _) => Err("fenced: the service saw a later fencing token for this idempotency key"),
            (false, true) => Err("the service was busy"),
            (false, false) => Ok(book.answer.get_or_insert_with(|| asked.to_owned()).clone()),
        };
        if !started.fenced {
            book.highest_token = started.fencing_token;
        }
        starts.push(started);
        answer
    }
}

/// One host's steps: what its runs' step attempts do.
pub struct HostSteps {
    pub host: usize,
    pub service: Arc<Service>,
    pub tenant: TenantId,
}

impl StepStandIn for HostSteps {
    fn attempt(&self, call: &AttemptCall<'_>) -> StandIn {
        let started = Started {
            at: self.service.origin.elapsed(),
            host: self.host,
            run: call.run.to_owned(),
            seq: call.seq,
            attempt: call.attempt,
            fencing_token: call.fencing_token,
            incarnation: call.fencing_token >> CLAIM_BITS,
            key: idempotency_key(self.tenant.as_str(), call.run, call.fencing_token, call.seq),
            fenced: false,
        };
        let drawn = digest(call);
        let busy = call.step == "flaky" && call.attempt == 1 && (drawn >> 32).is_multiple_of(3);
        let answer = (self.service.take(started, call.input, busy))
            .map_err(|why| AttemptFailure::new(StepErrorKind::Failed, why.to_owned()));
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
