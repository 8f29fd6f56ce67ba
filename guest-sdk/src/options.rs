//! [`StepOptions`], the retry and sandbox policy of one step call, and how
//! durations become the contract's milliseconds.

use std::time::Duration;

use crate::bindings::stepstone::workflow::types as wit;

/// The retry and sandbox policy of one step call, built like
/// `StepOptions::new().max_attempts(3).initial_backoff(Duration::from_millis(100))`.
///
/// Whatever is left unset takes the host's default. Limits set here can
/// lower the host's limits, never raise them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[must_use]
pub struct StepOptions {
    max_attempts: Option<u32>,
    initial_backoff: Option<Duration>,
    backoff_rate: Option<f64>,
    max_backoff: Option<Duration>,
    timeout: Option<Duration>,
    fuel: Option<u64>,
    http: HttpBounds,
}

/// What [`StepOptions`] bounds of a step's outgoing HTTP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct HttpBounds {
    max_requests: Option<u32>,
    max_request_bytes: Option<u64>,
    max_response_bytes: Option<u64>,
    connect_timeout: Option<Duration>,
    first_byte_timeout: Option<Duration>,
}

impl StepOptions {
    /// Host defaults for everything (one attempt, no retry).
    pub fn new() -> Self {
        Self::default()
    }

    /// Attempts before the call fails for good; 0 counts as 1.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// Wait before the first retry.
    pub fn initial_backoff(mut self, wait: Duration) -> Self {
        self.initial_backoff = Some(wait);
        self
    }

    /// Each further wait is the previous one times `rate`.
    pub fn backoff_rate(mut self, rate: f64) -> Self {
        self.backoff_rate = Some(rate);
        self
    }

    /// Upper bound of any wait between attempts.
    pub fn max_backoff(mut self, wait: Duration) -> Self {
        self.max_backoff = Some(wait);
        self
    }

    /// Wall-clock limit of one attempt.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// Fuel (roughly: WebAssembly instructions) one attempt may burn.
    pub fn fuel(mut self, fuel: u64) -> Self {
        self.fuel = Some(fuel);
        self
    }

    /// Outgoing HTTP requests one attempt may send (0: none).
    pub fn http_max_requests(mut self, requests: u32) -> Self {
        self.http.max_requests = Some(requests);
        self
    }

    /// Bytes of one outgoing request's body.
    pub fn http_max_request_bytes(mut self, bytes: u64) -> Self {
        self.http.max_request_bytes = Some(bytes);
        self
    }

    /// Bytes of one response's body.
    pub fn http_max_response_bytes(mut self, bytes: u64) -> Self {
        self.http.max_response_bytes = Some(bytes);
        self
    }

    /// How long a connection may take to open.
    pub fn http_connect_timeout(mut self, limit: Duration) -> Self {
        self.http.connect_timeout = Some(limit);
        self
    }

    /// How long an answer's first byte, and each next one, may take.
    pub fn http_first_byte_timeout(mut self, limit: Duration) -> Self {
        self.http.first_byte_timeout = Some(limit);
        self
    }

    /// The HTTP bounds in contract units, if any is set.
    pub(crate) fn http_to_wit(self) -> Option<wit::HttpLimits> {
        let http = self.http;
        (http != HttpBounds::default()).then(|| wit::HttpLimits {
            max_requests: http.max_requests,
            max_request_bytes: http.max_request_bytes,
            max_response_bytes: http.max_response_bytes,
            connect_timeout_ms: http.connect_timeout.map(millis),
            first_byte_timeout_ms: http.first_byte_timeout.map(millis),
        })
    }

    pub(crate) fn to_wit(self) -> wit::StepOptions {
        wit::StepOptions {
            max_attempts: self.max_attempts,
            initial_backoff_ms: self.initial_backoff.map(millis),
            backoff_rate: self.backoff_rate,
            max_backoff_ms: self.max_backoff.map(millis),
            timeout_ms: self.timeout.map(millis),
            fuel: self.fuel,
        }
    }
}

/// A duration in the contract's whole milliseconds. Rounds up, so a wait or
/// a limit is never shorter than asked (a 0.5 ms timeout must not become
/// "no time at all"), and saturates rather than wraps.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_options_leave_every_field_to_the_host() {
        let options = StepOptions::new().to_wit();
        assert_eq!(options.max_attempts, None);
        assert_eq!(options.initial_backoff_ms, None);
        assert_eq!(options.backoff_rate, None);
        assert_eq!(options.max_backoff_ms, None);
        assert_eq!(options.timeout_ms, None);
        assert_eq!(options.fuel, None);
    }

    #[test]
    fn builder_sets_each_field_in_contract_units() {
        let options = StepOptions::new()
            .max_attempts(3)
            .initial_backoff(Duration::from_millis(100))
            .backoff_rate(1.5)
            .max_backoff(Duration::from_secs(2))
            .timeout(Duration::from_secs(30))
            .fuel(1_000_000)
            .to_wit();
        assert_eq!(options.max_attempts, Some(3));
        assert_eq!(options.initial_backoff_ms, Some(100));
        assert_eq!(options.backoff_rate, Some(1.5));
        assert_eq!(options.max_backoff_ms, Some(2_000));
        assert_eq!(options.timeout_ms, Some(30_000));
        assert_eq!(options.fuel, Some(1_000_000));
    }

    #[test]
    fn http_bounds_are_sent_only_when_one_is_set() {
        assert!(StepOptions::new().fuel(1).http_to_wit().is_none());
        let http = StepOptions::new()
            .http_max_requests(0)
            .http_first_byte_timeout(Duration::from_micros(1))
            .http_to_wit()
            .expect("bounds set");
        assert_eq!(http.max_requests, Some(0));
        assert_eq!(http.first_byte_timeout_ms, Some(1));
        assert_eq!(http.max_request_bytes, None);
    }

    #[test]
    fn later_calls_override_earlier_ones() {
        assert_eq!(StepOptions::new().fuel(1).fuel(2), StepOptions::new().fuel(2));
    }

    #[test]
    fn millis_rounds_up_and_saturates() {
        assert_eq!(millis(Duration::ZERO), 0);
        assert_eq!(millis(Duration::from_micros(500)), 1);
        assert_eq!(millis(Duration::from_micros(1_500)), 2);
        assert_eq!(millis(Duration::from_millis(7)), 7);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
