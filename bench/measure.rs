//! Timing: samples of a duration, their median and spread, and rates.
//!
//! Invariant: every figure is computed from samples taken in this process,
//! so a ratio between two figures compares measurements made minutes apart
//! on the same machine under the same load.

use std::time::{Duration, Instant};

/// Durations of repeated measurements of one thing.
#[derive(Debug, Clone, Default)]
pub struct Samples(Vec<Duration>);

impl Samples {
    pub fn push(&mut self, sample: Duration) {
        self.0.push(sample);
    }

    fn sorted(&self) -> Vec<Duration> {
        let mut sorted = self.0.clone();
        sorted.sort();
        sorted
    }

    /// The value below which `fraction` of the samples fall.
    pub fn quantile(&self, fraction: f64) -> Duration {
        let sorted = self.sorted();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        let index = ((sorted.len() - 1) as f64 * fraction).round() as usize;
        sorted[index]
    }

    pub fn median(&self) -> Duration {
        self.quantile(0.5)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// Times `f` once.
pub async fn time<T, F: Future<Output = T>>(f: F) -> (Duration, T) {
    let started = Instant::now();
    let value = f.await;
    (started.elapsed(), value)
}

/// Events per second: `count` events in `took`.
pub fn rate(count: usize, took: Duration) -> f64 {
    count as f64 / took.as_secs_f64().max(1e-9)
}

/// Microseconds, as a float, for tables.
pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Milliseconds, as a float, for tables.
pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
