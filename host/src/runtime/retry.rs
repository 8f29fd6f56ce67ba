//! Retry policy of a step call: how many attempts, and how long to wait
//! between them.

use std::time::Duration;

use crate::contract::bindings::StepOptions;

/// A step call's retry policy, with the defaults users of durable engines
/// expect: one attempt, then 1 s, doubling, capped at 1 h.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub backoff_rate: f64,
    pub max_backoff: Duration,
}

impl RetryPolicy {
    pub fn from_options(options: &StepOptions) -> Self {
        let rate = options
            .backoff_rate
            .filter(|r| r.is_finite() && *r > 0.0)
            .unwrap_or(2.0);
        Self {
            // 0 attempts makes no sense; it means "no retry", like 1.
            max_attempts: options.max_attempts.unwrap_or(1).max(1),
            initial_backoff: Duration::from_millis(options.initial_backoff_ms.unwrap_or(1_000)),
            backoff_rate: rate,
            max_backoff: Duration::from_millis(options.max_backoff_ms.unwrap_or(3_600_000)),
        }
    }

    /// The wait after the `failures`-th failed attempt (1-based):
    /// `initial × rate^(failures-1)`, capped. A silly rate saturates at the
    /// cap instead of overflowing.
    pub fn backoff(&self, failures: u32) -> Duration {
        let exponent = i32::try_from(failures.saturating_sub(1)).unwrap_or(i32::MAX);
        let secs = self.initial_backoff.as_secs_f64() * self.backoff_rate.powi(exponent);
        match Duration::try_from_secs_f64(secs) {
            Ok(wait) => wait.min(self.max_backoff),
            Err(_) => self.max_backoff,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn defaults_are_one_attempt_one_second_doubling() {
        let policy = RetryPolicy::from_options(&options());
        assert_eq!(policy.max_attempts, 1);
        assert_eq!(policy.backoff(1), Duration::from_secs(1));
        assert_eq!(policy.backoff(3), Duration::from_secs(4));
    }

    #[test]
    fn zero_attempts_means_one() {
        let policy = RetryPolicy::from_options(&StepOptions {
            max_attempts: Some(0),
            ..options()
        });
        assert_eq!(policy.max_attempts, 1);
    }

    #[test]
    fn huge_rates_saturate_at_the_cap() {
        let policy = RetryPolicy::from_options(&StepOptions {
            backoff_rate: Some(1e300),
            max_backoff_ms: Some(5_000),
            ..options()
        });
        assert_eq!(policy.backoff(2), Duration::from_secs(5));
        assert_eq!(policy.backoff(u32::MAX), Duration::from_secs(5));
        let nan = RetryPolicy::from_options(&StepOptions {
            backoff_rate: Some(f64::NAN),
            ..options()
        });
        assert_eq!(nan.backoff_rate, 2.0);
    }
}
