//! The wall-clock deadline of a stretch of guest code, enforced on both
//! sides of the sandbox wall: inside guest code by the epoch callback
//! ([`new_store`](super::new_store)), and around host calls by
//! [`Deadline::bound`], which abandons the whole call once the deadline has
//! passed.
//!
//! Invariant: no guest outlives its deadline, not even by blocking inside a
//! host call (a WASI sleep, a poll, a read): epochs only interrupt guest
//! code, so every call into a guest runs under [`Deadline::bound`].
//!
//! Deadlines are tokio instants, so a scenario on virtual time (see
//! [`crate::clock`]) sees a guest's deadline pass when its virtual time
//! does, in step with the watchdog's timer.
//!
//! A deadline can be *paused* while the host does durable work on the
//! guest's behalf (a workflow awaiting a step, a timer, a signal): that time
//! is the host's, bounded by the host's own limits, and not the guest's.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use wasmtime::Trap;

/// How an abandoned call's [`Trap::Interrupt`] is worded, so a report can
/// tell it from an interruption inside guest code.
pub const INSIDE_HOST_CALL: &str =
    "wall-clock limit reached while the guest was inside a host call (a WASI wait or read)";

/// When the guest code of one store must have stopped; `None` while paused.
/// Cheap to clone: the epoch callback, the watchdog and the store data share
/// one.
#[derive(Clone, Debug)]
pub struct Deadline(Arc<watch::Sender<Option<Instant>>>);

/// The instant `duration` from now, or one so far ahead that it never comes,
/// where `duration` is too large to add (a limit of `u64::MAX` ms).
pub fn instant_after(duration: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    let now = Instant::now();
    now.checked_add(duration.min(FAR)).unwrap_or(now)
}

impl Deadline {
    /// A deadline `duration` from now.
    pub fn after(duration: Duration) -> Self {
        Self(Arc::new(watch::Sender::new(Some(instant_after(duration)))))
    }

    /// Moves the deadline to `duration` from now (a new activation).
    ///
    /// The watchdog ([`expired`](Self::expired)) wakes at the deadline it
    /// last saw and looks again, so only a deadline that comes sooner than
    /// the one it holds, or one after a pause, wakes it: a workflow renews
    /// and pauses at every durable call, and waking the watchdog each time
    /// was a tenth of a replay's cost.
    pub fn renew(&self, duration: Duration) {
        let at = instant_after(duration);
        self.0.send_if_modified(|current| {
            let sooner = current.is_none_or(|held| at < held);
            *current = Some(at);
            sooner
        });
    }

    /// Stops the clock until the next [`renew`](Self::renew): the host is
    /// working on the guest's behalf. The watchdog is not woken: at the
    /// deadline it held it finds none and waits for the next renewal.
    pub fn pause(&self) {
        self.0.send_if_modified(|current| {
            *current = None;
            false
        });
    }

    /// Whether the deadline has passed (never while paused).
    pub fn passed(&self) -> bool {
        self.0.borrow().is_some_and(|at| Instant::now() >= at)
    }

    /// Resolves once the deadline has passed, following every renewal and
    /// pause made meanwhile.
    async fn expired(&self) {
        let mut changes = self.0.subscribe();
        loop {
            let current = *changes.borrow_and_update();
            match current {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => if self.passed() { return },
                        _ = changes.changed() => {}
                    }
                }
                // The sender lives as long as `self`: `changed` only ends
                // with a change.
                None => {
                    let _ = changes.changed().await;
                }
            }
        }
    }

    /// Runs `call` (a call into guest code) until it returns or the
    /// deadline passes, whichever comes first. Past the deadline the call is
    /// dropped, which unwinds the guest wherever it is, and the result is the
    /// same [`Trap::Interrupt`] an epoch interruption gives, so a caller
    /// classifies both as `timed-out`.
    pub async fn bound<T>(&self, call: impl Future<Output = wasmtime::Result<T>>) -> wasmtime::Result<T> {
        tokio::select! {
            biased;
            result = call => result,
            () = self.expired() => Err(wasmtime::Error::new(Trap::Interrupt).context(INSIDE_HOST_CALL)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Far longer than any deadline below: a call still running when this
    /// is up was not abandoned.
    const BLOCKED: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn a_host_call_past_the_deadline_is_abandoned_as_an_interrupt() {
        let deadline = Deadline::after(Duration::from_millis(20));
        let started = Instant::now();
        let error = deadline
            .bound(async {
                tokio::time::sleep(BLOCKED).await;
                Ok(())
            })
            .await
            .expect_err("the deadline ends the call");
        assert_eq!(error.downcast_ref::<Trap>(), Some(&Trap::Interrupt));
        assert!(started.elapsed() < BLOCKED / 2, "{:?}", started.elapsed());
        assert!(deadline.passed());
    }

    #[tokio::test]
    async fn paused_time_does_not_count_and_a_renewal_moves_the_deadline() {
        let deadline = Deadline::after(Duration::from_millis(10));
        let watchdog = deadline.clone();
        let call = deadline.bound(async move {
            watchdog.pause();
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(!watchdog.passed(), "paused time is the host's");
            watchdog.renew(Duration::from_millis(20));
            tokio::time::sleep(BLOCKED).await;
            Ok("not abandoned")
        });
        let started = Instant::now();
        assert!(call.await.is_err());
        assert!(
            started.elapsed() >= Duration::from_millis(120),
            "{:?}",
            started.elapsed()
        );
        assert!(started.elapsed() < BLOCKED / 2);
    }

    #[tokio::test]
    async fn a_sooner_renewal_wakes_the_watchdog_and_a_later_one_defers_it() {
        let deadline = Deadline::after(BLOCKED);
        let watchdog = deadline.clone();
        let started = Instant::now();
        let sooner = deadline.bound(async move {
            watchdog.renew(Duration::from_millis(20));
            tokio::time::sleep(BLOCKED).await;
            Ok(())
        });
        assert!(sooner.await.is_err(), "the sooner deadline ends the call");
        assert!(started.elapsed() < BLOCKED / 2, "{:?}", started.elapsed());

        let deadline = Deadline::after(Duration::from_millis(10));
        let watchdog = deadline.clone();
        let later = deadline.bound(async move {
            watchdog.renew(Duration::from_millis(200));
            tokio::time::sleep(Duration::from_millis(60)).await;
            Ok("past the first deadline, within the renewed one")
        });
        assert!(later.await.is_ok());
    }

    #[test]
    fn an_unrepresentable_deadline_lies_far_ahead_instead_of_panicking() {
        let deadline = Deadline::after(Duration::MAX);
        assert!(!deadline.passed());
        assert!(instant_after(Duration::from_millis(u64::MAX)) > Instant::now() + Duration::from_secs(3600));
    }
}
