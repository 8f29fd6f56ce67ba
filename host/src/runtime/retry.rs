//! Retry policy of a step call: how many attempts, and how long to wait
//! between them.

use std::time::Duration;

use crate::config::RetryLimits;
use crate::contract::bindings::StepOptions;

/// A step call's retry policy, with the defaults users of durable engines
/// expect (one attempt, then 1 s, doubling, capped at 1 h), kept within the
/// host's [`RetryLimits`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included: 1 means no retry.
    pub max_attempts: u32,
    /// The wait after the first failed attempt.
    pub initial_backoff: Duration,
    /// What each wait is multiplied by for the next.
    pub backoff_rate: f64,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
    /// The host's floor under every wait.
    min_backoff: Duration,
}

impl RetryPolicy {
    /// The policy `options` ask for, within `limits`. Every value means
    /// something: 0 attempts is 1 ("no retry"), attempts above the host's
    /// cap are the cap; waits are kept between the host's floor and ceiling;
    /// a NaN, zero or negative rate is the default 2.0, an infinite one
    /// goes to the longest wait at once.
    pub fn from_options(options: &StepOptions, limits: &RetryLimits) -> Self {
        let rate = options.backoff_rate.filter(|r| !r.is_nan() && *r > 0.0).unwrap_or(2.0);
        let wait = |ms: Option<u64>, default: u64| {
            Duration::from_millis(ms.unwrap_or(default))
                .clamp(limits.min_backoff, limits.max_backoff.max(limits.min_backoff))
        };
        Self {
            max_attempts: options.max_attempts.unwrap_or(1).clamp(1, limits.max_attempts.max(1)),
            initial_backoff: wait(options.initial_backoff_ms, 1_000),
            backoff_rate: rate,
            max_backoff: wait(options.max_backoff_ms, 3_600_000),
            min_backoff: limits.min_backoff,
        }
    }

    /// The wait after the `failures`-th failed attempt (1-based):
    /// `initial × rate^(failures-1)`, between the host's floor and the
    /// policy's cap. A silly rate saturates at the cap instead of
    /// overflowing.
    pub fn backoff(&self, failures: u32) -> Duration {
        let exponent = i32::try_from(failures.saturating_sub(1)).unwrap_or(i32::MAX);
        let secs = self.initial_backoff.as_secs_f64() * self.backoff_rate.powi(exponent);
        let wait = match Duration::try_from_secs_f64(secs) {
            Ok(wait) => wait.min(self.max_backoff),
            Err(_) => self.max_backoff,
        };
        wait.max(self.min_backoff)
    }

    /// When to make the attempt after one that failed at `failed_at_ms`
    /// (the `failures`-th failure), in ms since the epoch; saturating, so
    /// no recorded time or policy can overflow it.
    pub fn next_attempt_at_ms(&self, failed_at_ms: u64, failures: u32) -> u64 {
        let wait_ms = u64::try_from(self.backoff(failures).as_millis()).unwrap_or(u64::MAX);
        failed_at_ms.saturating_add(wait_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LimitRequest, StepLimits};

    fn options() -> StepOptions {
        StepOptions {
            max_attempts: None,
            initial_backoff_ms: None,
            backoff_rate: None,
            max_backoff_ms: None,
            timeout_ms: None,
            fuel: None,
        }
    }

    fn bounded(options: &StepOptions) -> RetryPolicy {
        RetryPolicy::from_options(options, &RetryLimits::default())
    }

    #[test]
    fn defaults_are_one_attempt_one_second_doubling() {
        let policy = bounded(&options());
        assert_eq!(policy.max_attempts, 1);
        assert_eq!(policy.backoff(1), Duration::from_secs(1));
        assert_eq!(policy.backoff(3), Duration::from_secs(4));
    }

    #[test]
    fn zero_attempts_means_one() {
        let policy = bounded(&StepOptions {
            max_attempts: Some(0),
            ..options()
        });
        assert_eq!(policy.max_attempts, 1);
    }

    #[test]
    fn huge_rates_saturate_at_the_cap() {
        let policy = bounded(&StepOptions {
            backoff_rate: Some(1e300),
            max_backoff_ms: Some(5_000),
            ..options()
        });
        assert_eq!(policy.backoff(2), Duration::from_secs(5));
        assert_eq!(policy.backoff(u32::MAX), Duration::from_secs(5));
        let nan = bounded(&StepOptions {
            backoff_rate: Some(f64::NAN),
            ..options()
        });
        assert_eq!(nan.backoff_rate, 2.0);
    }

    #[test]
    fn the_host_caps_attempts_and_floors_and_ceils_every_wait() {
        let limits = RetryLimits {
            max_attempts: 5,
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(60),
        };
        let endless = RetryPolicy::from_options(
            &StepOptions {
                max_attempts: Some(u32::MAX),
                initial_backoff_ms: Some(0),
                backoff_rate: Some(-3.0),
                max_backoff_ms: Some(u64::MAX),
                ..options()
            },
            &limits,
        );
        assert_eq!(endless.max_attempts, 5);
        assert_eq!(endless.backoff(1), Duration::from_millis(100));
        assert_eq!(endless.backoff_rate, 2.0);
        assert_eq!(endless.backoff(40), Duration::from_secs(60));
        let infinite = RetryPolicy::from_options(
            &StepOptions {
                backoff_rate: Some(f64::INFINITY),
                ..options()
            },
            &limits,
        );
        assert_eq!(infinite.backoff(1), Duration::from_secs(1));
        assert_eq!(infinite.backoff(2), Duration::from_secs(60));
    }

    #[test]
    fn the_next_attempt_time_saturates() {
        let huge = bounded(&StepOptions {
            initial_backoff_ms: Some(u64::MAX),
            max_backoff_ms: Some(u64::MAX),
            max_attempts: Some(3),
            ..options()
        });
        assert_eq!(huge.backoff(1), RetryLimits::default().max_backoff);
        assert_eq!(huge.next_attempt_at_ms(u64::MAX - 1, 1), u64::MAX);
        assert_eq!(huge.next_attempt_at_ms(1_000, 0), 1_000 + 24 * 3600 * 1000);
    }

    proptest::proptest! {
        /// No step options, however extreme, panic the host or escape its
        /// bounds: neither the retry policy nor the attempt's limits and
        /// deadline.
        #[test]
        fn any_options_give_a_bounded_policy(
            max_attempts in proptest::option::of(proptest::num::u32::ANY),
            initial_backoff_ms in proptest::option::of(proptest::num::u64::ANY),
            backoff_rate in proptest::option::of(proptest::num::f64::ANY),
            max_backoff_ms in proptest::option::of(proptest::num::u64::ANY),
            timeout_ms in proptest::option::of(proptest::num::u64::ANY),
            fuel in proptest::option::of(proptest::num::u64::ANY),
            failures in proptest::num::u32::ANY,
            failed_at_ms in proptest::num::u64::ANY,
        ) {
            let limits = RetryLimits::default();
            let options = StepOptions { max_attempts, initial_backoff_ms, backoff_rate, max_backoff_ms, timeout_ms, fuel };
            let policy = RetryPolicy::from_options(&options, &limits);
            let host = StepLimits::default();
            let attempt = host.lowered_by(&LimitRequest { fuel, timeout_ms, ..LimitRequest::default() });
            proptest::prop_assert!(attempt.fuel <= host.fuel && attempt.timeout <= host.timeout);
            let deadline = crate::sandbox::Deadline::after(attempt.timeout);
            if attempt.timeout >= Duration::from_secs(1) {
                proptest::prop_assert!(!deadline.passed());
            }
            proptest::prop_assert!((1..=limits.max_attempts).contains(&policy.max_attempts));
            let wait = policy.backoff(failures);
            proptest::prop_assert!(wait >= limits.min_backoff && wait <= limits.max_backoff, "{wait:?}");
            proptest::prop_assert!(policy.next_attempt_at_ms(failed_at_ms, failures) >= failed_at_ms);
        }
    }
}
