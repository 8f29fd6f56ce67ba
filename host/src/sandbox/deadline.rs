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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use wasmtime::Trap;

use crate::shared_map::lock;

/// How an abandoned call's [`Trap::Interrupt`] is worded, so a report can
/// tell it from an interruption inside guest code.
pub const INSIDE_HOST_CALL: &str =
    "wall-clock limit reached while the guest was inside a host call (a WASI wait or read)";

/// When the guest code of one store must have stopped. Cheap to clone: the
/// epoch callback, the watchdog and the store data share one.
#[derive(Clone, Debug)]
pub struct Deadline(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    times: Mutex<Times>,
    /// Wakes the watchdogs to look at `times` again.
    sooner: Notify,
}

/// Invariant: no watchdog sleeps past `watched` without being notified, so
/// a new deadline before `watched` (or any, while it is `None`) must wake
/// them, and one after it need not: a watchdog waking early looks again.
#[derive(Debug)]
struct Times {
    /// The deadline; `None` while paused.
    at: Option<Instant>,
    /// The soonest instant a watchdog was last told; `None` when one waits
    /// for any renewal.
    watched: Option<Instant>,
}

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
        let times = Times {
            at: Some(instant_after(duration)),
            watched: None,
        };
        Self(Arc::new(Shared {
            times: Mutex::new(times),
            sooner: Notify::new(),
        }))
    }

    /// Moves the deadline to `duration` from now (a new activation).
    ///
    /// Only a deadline sooner than the one the watchdog
    /// ([`expired`](Self::expired)) sleeps until wakes it; it wakes at that
    /// one anyway and looks again. A workflow pauses and renews at every
    /// durable call, and waking the watchdog each time was a tenth of a
    /// replay's cost, then, with `tokio::sync::watch`, still 6 %.
    pub fn renew(&self, duration: Duration) {
        let at = instant_after(duration);
        let wake = {
            let mut times = lock(&self.0.times);
            times.at = Some(at);
            let wake = times.watched.is_none_or(|watched| at < watched);
            if wake {
                times.watched = Some(at);
            }
            wake
        };
        if wake {
            self.0.sooner.notify_waiters();
        }
    }

    /// Stops the clock until the next [`renew`](Self::renew): the host is
    /// working on the guest's behalf. The watchdog is not woken: at the
    /// deadline it held it finds none and waits for the next renewal.
    pub fn pause(&self) {
        lock(&self.0.times).at = None;
    }

    /// Whether the deadline has passed (never while paused).
    pub fn passed(&self) -> bool {
        lock(&self.0.times).at.is_some_and(|at| Instant::now() >= at)
    }

    /// The deadline a watchdog is to sleep until, recorded as watched.
    fn watch(&self) -> Option<Instant> {
        let mut times = lock(&self.0.times);
        times.watched = times.at;
        times.at
    }

    /// Resolves once the deadline has passed, following every renewal and
    /// pause made meanwhile.
    async fn expired(&self) {
        loop {
            let sooner = self.0.sooner.notified();
            tokio::pin!(sooner);
            // Registered before the deadline is read, so a renewal made
            // after the read is not missed.
            sooner.as_mut().enable();
            match self.watch() {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => if self.passed() { return },
                        () = &mut sooner => {}
                    }
                }
                None => sooner.await,
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

    /// How long a call bound by a deadline `first` from now ran before it
    /// was abandoned, while `meanwhile` worked the deadline (paused it,
    /// renewed it) and the call then blocked past any deadline.
    async fn abandoned_after<F: Future<Output = ()>>(
        first: Duration,
        meanwhile: impl FnOnce(Deadline) -> F,
    ) -> Duration {
        let deadline = Deadline::after(first);
        let started = Instant::now();
        let meanwhile = meanwhile(deadline.clone());
        let call = deadline.bound(async move {
            meanwhile.await;
            tokio::time::sleep(BLOCKED).await;
            Ok(())
        });
        assert!(call.await.is_err(), "the deadline ends the call");
        started.elapsed()
    }

    #[tokio::test]
    async fn paused_time_does_not_count_and_a_renewal_moves_the_deadline() {
        let took = abandoned_after(Duration::from_millis(10), |watchdog| async move {
            watchdog.pause();
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(!watchdog.passed(), "paused time is the host's");
            watchdog.renew(Duration::from_millis(20));
        })
        .await;
        assert!(took >= Duration::from_millis(120), "{took:?}");
        assert!(took < BLOCKED / 2);
    }

    #[tokio::test]
    async fn a_sooner_renewal_wakes_the_watchdog_and_a_later_one_defers_it() {
        let took = abandoned_after(BLOCKED, |watchdog| async move {
            watchdog.renew(Duration::from_millis(20));
        })
        .await;
        assert!(took < BLOCKED / 2, "the sooner deadline ends the call: {took:?}");

        let deadline = Deadline::after(Duration::from_millis(10));
        let watchdog = deadline.clone();
        let later = deadline.bound(async move {
            watchdog.renew(Duration::from_millis(200));
            tokio::time::sleep(Duration::from_millis(60)).await;
            Ok("past the first deadline, within the renewed one")
        });
        assert!(later.await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_watchdog_that_found_the_deadline_paused_wakes_at_the_next_renewal() {
        let took = abandoned_after(Duration::from_millis(10), |watchdog| async move {
            watchdog.pause();
            // Past the first deadline: the watchdog woke there, found the
            // clock paused, and waits for a renewal.
            tokio::time::sleep(Duration::from_millis(50)).await;
            // Later than any deadline the watchdog was told of, yet it must
            // wake for it.
            watchdog.renew(Duration::from_secs(1));
        })
        .await;
        assert_eq!(took, Duration::from_millis(1050));
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_that_come_later_leave_the_watchdog_at_the_deadline_they_end_at() {
        let took = abandoned_after(Duration::from_millis(100), |watchdog| async move {
            for _ in 0..50 {
                watchdog.pause();
                tokio::time::sleep(Duration::from_millis(10)).await;
                watchdog.renew(Duration::from_millis(100));
            }
        })
        .await;
        // 50 pauses of 10 ms, then the last renewal's 100 ms.
        assert_eq!(took, Duration::from_millis(600));
    }

    #[test]
    fn an_unrepresentable_deadline_lies_far_ahead_instead_of_panicking() {
        let deadline = Deadline::after(Duration::MAX);
        assert!(!deadline.passed());
        assert!(instant_after(Duration::from_millis(u64::MAX)) > Instant::now() + Duration::from_secs(3600));
    }
}
