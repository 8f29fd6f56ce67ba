//! Completion hooks: a run submitted with a `notify` URL has a signed JSON
//! message POSTed there once it ends, from a durable outbox, at least once,
//! retried with backoff.
//!
//! Invariants: the outbox entry (`outbox/{run}`) is created with the run,
//! before its run record, so no run with a URL lacks one. The message is
//! built at each try from the run's stored outcome, so every try sends the
//! same bytes, and a receiver deduplicates on `Stepstone-Delivery` (the run
//! id). An entry is deleted only after a 2xx answer, or after
//! [`MAX_ATTEMPTS`]. The URL's origin must be on the tenant's outbound
//! allowlist when the run is submitted and at every try, and every try
//! leaves through the host's [`crate::egress`]: no address inside the
//! host's network is reached unless the allowlist names it, and no
//! redirect is followed (a 3xx is a failed try, logged with its
//! `Location`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::Full;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::sync::{Notify, watch};

use super::RunError;
use crate::clock::{millis, now_ms};
use crate::egress::{Egress, Refusal, SendError, Timeouts, origin_of};
use crate::journal::{Outcome, Payload, RunRecord, RunRecords, decode, encode};
use crate::metrics::Metrics;
use crate::policy::Policies;
use crate::secrets::Secrets;
use crate::store::{RunId, SecretName, Storage, StoreKey, TenantId, TenantStore, outbox_entry, outbox_key};

/// The tenant's secret the messages are signed with.
pub const SIGNING_KEY_SECRET: &str = "notify-signing-key";
/// Tries of one message, at most: the last about a day after the first.
pub const MAX_ATTEMPTS: u32 = 20;
/// The wait after the first failed try; it doubles, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// How long one try may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the outboxes are read, at the longest: a run ending on this
/// host rings at once, and a try due sooner wakes the sender then.
const POLL: Duration = Duration::from_secs(5);
/// How often entries of runs not known to have ended are checked for an
/// outcome (a host that died between a run's end and marking its entry).
const CHECK_UNENDED_EVERY: Duration = Duration::from_secs(300);
/// The longest `notify` URL taken.
pub const MAX_URL_BYTES: usize = 2048;

/// A message to send, or being retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    /// Where the message is POSTed: the run's `notify` URL.
    pub url: String,
    /// Whether the run is known to have ended.
    pub ended: bool,
    /// Tries made so far; the entry is given up after [`MAX_ATTEMPTS`].
    pub attempts: u32,
    /// When the next try is due, in milliseconds since the Unix epoch; 0 is
    /// at once.
    pub next_attempt_ms: u64,
}

/// A tenant's outbox entries as last read, with their versions.
type Known = HashMap<StoreKey, (String, Notification)>;

/// What is POSTed: the run and how it ended; for the last generation of a
/// run that continued as new, its `chain` too (`root` is the id the run
/// was started under).
pub fn message(record: &RunRecord, outcome: &Outcome) -> Vec<u8> {
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    let mut body = json!({"id": record.run_id, "run_id": record.run_id, "workflow": record.workflow});
    if let (Some(link), Some(body)) = (&record.chain, body.as_object_mut()) {
        body.insert("chain".into(), json!(link));
    }
    let ending = match outcome {
        Outcome::Completed {
            output: Payload::Inline(output),
        } => json!({"state": "completed", "output": parse(output)}),
        Outcome::Completed {
            output: Payload::Stored { sha256, bytes },
        } => json!({"state": "completed", "output_stored": {"sha256": sha256, "bytes": bytes}}),
        Outcome::Failed { kind, message } => json!({"state": "failed", "error": {"kind": kind, "message": message}}),
        Outcome::Cancelled { reason } => json!({"state": "cancelled", "reason": reason}),
        // Never sent (a generation that continued notifies no one), but a
        // message says what it is of.
        Outcome::Continued { next } => json!({"state": "continued", "continued_as": next}),
    };
    if let (Some(body), Some(ending)) = (body.as_object_mut(), ending.as_object()) {
        body.extend(ending.clone());
    }
    body.to_string().into_bytes()
}

/// `Stepstone-Signature`: `sha256=` and the hex HMAC-SHA256 of `body` under `key`.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// When to try again after `attempts` failed tries.
fn backoff(attempts: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(2u32.saturating_pow(attempts.saturating_sub(1)))
        .min(MAX_BACKOFF)
}

/// Every tenant's outbox of notifications, and what sends them.
pub struct Hooks {
    storage: Storage,
    secrets: Arc<Secrets>,
    policies: Arc<Policies>,
    egress: Arc<Egress>,
    metrics: Arc<Metrics>,
    /// Rung when a run with a `notify` URL ends.
    bell: Notify,
}

impl Hooks {
    pub(super) fn new(
        storage: Storage,
        secrets: Arc<Secrets>,
        policies: Arc<Policies>,
        egress: Arc<Egress>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            storage,
            secrets,
            policies,
            egress,
            metrics,
            bell: Notify::new(),
        }
    }

    /// Checks a run's `notify` URL before it is submitted: a URL, at most
    /// [`MAX_URL_BYTES`], its origin on the tenant's allowlist, and the
    /// tenant's signing key set.
    pub(super) async fn check(&self, tenant: &TenantId, url: &str) -> Result<(), RunError> {
        let invalid = |why: String| RunError::InvalidNotify(why);
        if url.len() > MAX_URL_BYTES {
            return Err(invalid(format!("the notify URL is over {MAX_URL_BYTES} bytes")));
        }
        let uri: http::Uri = url
            .parse()
            .map_err(|e| invalid(format!("the notify URL is not a URL: {e}")))?;
        if !self.policies.of(tenant).outbound.allows(&uri) {
            let refusal = Refusal::Origin {
                origin: origin_of(&uri),
            };
            let allow = self.egress.setting().how_to_allow(&refusal);
            return Err(invalid(format!("the notify URL's origin: {refusal}: {allow} first")));
        }
        let key = SecretName::new(SIGNING_KEY_SECRET).expect("a valid secret name");
        if self.secrets.value(tenant, &key).await?.is_none() {
            return Err(invalid(format!(
                "the tenant has no secret `{SIGNING_KEY_SECRET}` to sign notifications with: set it first (`stepstone secret set {SIGNING_KEY_SECRET}`)"
            )));
        }
        Ok(())
    }

    /// Puts the notification of a run about to be created in the outbox.
    pub(super) async fn enqueue(&self, store: &TenantStore, run: &RunId, url: &str) -> Result<(), RunError> {
        let entry = Notification {
            url: url.to_owned(),
            ended: false,
            attempts: 0,
            next_attempt_ms: 0,
        };
        Ok(store.overwrite(&outbox_entry(run), Bytes::from(encode(&entry))).await?)
    }

    /// Marks the notification of a run that just ended as due, and rings
    /// the sender; drops that of a generation that continued as new (only
    /// the chain's last one notifies, through its own entry). A failure is
    /// logged: the sender finds the end itself.
    pub(super) async fn ended(&self, store: &TenantStore, record: &RunRecord, outcome: &Outcome) {
        if record.notify.is_none() {
            return;
        }
        let key = outbox_entry(&record.run_id);
        if matches!(outcome, Outcome::Continued { .. }) {
            if let Err(e) = store.delete(&key).await {
                tracing::warn!(run = %record.run_id, "cannot drop the notification of a generation that continued; the sender drops it: {e}");
            }
            return;
        }
        let marked = async {
            let Some(mut entry) = read_entry(store, &key).await? else {
                return Ok(());
            };
            entry.ended = true;
            store
                .overwrite(&key, Bytes::from(encode(&entry)))
                .await
                .map_err(RunError::from)
        };
        if let Err(e) = marked.await {
            tracing::warn!(run = %record.run_id, "cannot mark the run's notification due; it is found later: {e}");
        }
        self.bell.notify_one();
    }

    /// Sends the notifications of the ended runs of the tenants `served`
    /// names (as it changes) from a background task, for as long as the
    /// process lives.
    pub(super) fn deliver(self: &Arc<Self>, served: watch::Receiver<BTreeSet<TenantId>>) {
        let hooks = self.clone();
        crate::task::spawn(async move {
            let mut known: HashMap<TenantId, Known> = HashMap::new();
            let mut checked_unended_at: Option<tokio::time::Instant> = None;
            loop {
                let check_unended = checked_unended_at.is_none_or(|at| at.elapsed() >= CHECK_UNENDED_EVERY);
                let mut wake = POLL;
                let tenants = served.borrow().clone();
                known.retain(|tenant, _| tenants.contains(tenant));
                for tenant in &tenants {
                    let known = known.entry(tenant.clone()).or_default();
                    match hooks.deliver_due(tenant, known, check_unended).await {
                        Ok(Some(next_ms)) => {
                            wake = wake.min(Duration::from_millis(next_ms.saturating_sub(now_ms())));
                        }
                        Ok(None) => {}
                        Err(e) => tracing::warn!(%tenant, "cannot read the outbox of notifications; trying again: {e}"),
                    }
                }
                if check_unended {
                    checked_unended_at = Some(tokio::time::Instant::now());
                }
                tokio::select! {
                    () = tokio::time::sleep(wake) => {}
                    () = hooks.bell.notified() => {}
                }
            }
        });
    }

    /// One pass over the tenant's outbox: tries every message due, and
    /// says when the next one is. Only entries changed since the last pass
    /// are read.
    async fn deliver_due(
        &self,
        tenant: &TenantId,
        known: &mut Known,
        check_unended: bool,
    ) -> Result<Option<u64>, RunError> {
        let store = self.storage.tenant(tenant);
        let listed = store.versions(&outbox_key()).await?;
        known.retain(|key, _| listed.iter().any(|(listed, _)| listed == key));
        let mut next: Option<u64> = None;
        for (key, version) in listed {
            let Some(run) = key.filename().and_then(|name| RunId::new(name).ok()) else {
                continue;
            };
            let mut entry = match known.get(&key) {
                Some((read, entry)) if *read == version => entry.clone(),
                _ => {
                    let Some(entry) = read_entry(&store, &key).await? else {
                        continue;
                    };
                    known.insert(key.clone(), (version, entry.clone()));
                    entry
                }
            };
            let records = RunRecords::new(store.clone(), run);
            if !entry.ended {
                if !check_unended || records.outcome().await?.is_none() {
                    continue;
                }
                entry.ended = true;
            }
            if entry.next_attempt_ms > now_ms() {
                next = Some(next.map_or(entry.next_attempt_ms, |next| next.min(entry.next_attempt_ms)));
                continue;
            }
            known.remove(&key);
            self.try_delivery(&store, &records, &key, entry).await?;
        }
        Ok(next)
    }

    /// Sends one message; deletes its entry once answered 2xx (or tried
    /// [`MAX_ATTEMPTS`] times), else stores when to try again.
    async fn try_delivery(
        &self,
        store: &TenantStore,
        records: &RunRecords,
        key: &StoreKey,
        mut entry: Notification,
    ) -> Result<(), RunError> {
        let tenant = store.tenant();
        let run = records.run_id();
        let (Some(record), Some(outcome)) = (records.run().await?, records.outcome().await?) else {
            // The run is gone (retention): nothing is left to tell.
            return Ok(store.delete(key).await?);
        };
        if matches!(outcome, Outcome::Continued { .. }) {
            // The chain goes on; its last generation's entry tells its end.
            return Ok(store.delete(key).await?);
        }
        entry.attempts += 1;
        let sent = self.send(tenant, &entry.url, &record, &outcome).await;
        match sent {
            Ok(()) => {
                tracing::info!(%tenant, %run, attempts = entry.attempts, "notification delivered");
                self.metrics.notification(tenant, "delivered");
                return Ok(store.delete(key).await?);
            }
            Err(why) if entry.attempts >= MAX_ATTEMPTS => {
                tracing::error!(%tenant, %run, attempts = entry.attempts, "notification given up: {why}");
                self.metrics.notification(tenant, "given-up");
                return Ok(store.delete(key).await?);
            }
            Err(why) => {
                let wait = backoff(entry.attempts);
                tracing::warn!(%tenant, %run, attempts = entry.attempts, retry_in_ms = millis(wait), "notification not delivered; trying again: {why}");
                self.metrics.notification(tenant, "failed");
                entry.next_attempt_ms = now_ms().saturating_add(millis(wait));
            }
        }
        Ok(store.overwrite(key, Bytes::from(encode(&entry))).await?)
    }

    /// One try: the message POSTed, signed, through the host's egress; what
    /// went wrong, if anything. A redirect is a failed try: it is never
    /// followed.
    async fn send(&self, tenant: &TenantId, url: &str, record: &RunRecord, outcome: &Outcome) -> Result<(), String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
        let origin = origin_of(&uri);
        let name = SecretName::new(SIGNING_KEY_SECRET).expect("a valid secret name");
        let key = match self.secrets.value(tenant, &name).await {
            Ok(Some(key)) => key,
            Ok(None) => return Err(format!("the tenant's secret `{SIGNING_KEY_SECRET}` is gone")),
            Err(e) => return Err(e.to_string()),
        };
        let body = message(record, outcome);
        let request = http::Request::post(uri.clone())
            .header(http::header::HOST, uri.authority().map_or("", |a| a.as_str()))
            .header("content-type", "application/json")
            .header("stepstone-delivery", record.run_id.as_str())
            .header("stepstone-signature", signature(key.as_bytes(), &body))
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("cannot make the request to {origin}: {e}"))?;
        let timeouts = Timeouts {
            connect: SEND_TIMEOUT,
            first_byte: SEND_TIMEOUT,
            between_bytes: SEND_TIMEOUT,
        };
        let allowed = self.policies.of(tenant).outbound.clone();
        let sent = self.egress.send(&allowed, request, timeouts);
        let (answer, _connection) = match tokio::time::timeout(SEND_TIMEOUT, sent).await {
            Err(_) => return Err(format!("{origin} did not answer within {SEND_TIMEOUT:?}")),
            Ok(Err(SendError::Refused(refusal))) => {
                let allow = self.egress.setting().how_to_allow(&refusal);
                return Err(format!("{refusal}: {allow}"));
            }
            Ok(Err(SendError::Http(e))) => return Err(format!("{origin}: {e}")),
            Ok(Ok(answer)) => answer,
        };
        let status = answer.status();
        if status.is_redirection() {
            let location = answer.headers().get(http::header::LOCATION);
            let location: String = location
                .and_then(|l| l.to_str().ok())
                .unwrap_or("nowhere")
                .chars()
                .take(MAX_URL_BYTES)
                .collect();
            return Err(format!(
                "{origin} answered {status}, a redirect to {location:?}, which is not followed: give the receiver's final URL"
            ));
        }
        if !status.is_success() {
            return Err(format!("{origin} answered {status}"));
        }
        Ok(())
    }
}

async fn read_entry(store: &TenantStore, key: &StoreKey) -> Result<Option<Notification>, RunError> {
    let Some(bytes) = store.get(key).await? else {
        return Ok(None);
    };
    decode(&bytes).map(Some).map_err(|reason| {
        crate::journal::JournalError::Corrupt {
            key: key.to_string(),
            reason,
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_hmac_sha256_of_the_body() {
        // RFC 4231, test case 2.
        let mac = signature(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            mac,
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn the_backoff_doubles_from_a_second_to_an_hour() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(MAX_ATTEMPTS), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}
