//! Time as the host reads it (the system's wall clock, or the virtual time
//! of a test scenario: [`crate::testing`]) and writes it (RFC 3339).
//!
//! Virtual time belongs to one thread: a harness runs each scenario on a
//! thread of its own, in a current-thread tokio runtime whose clock is
//! paused, so every task of that runtime (and every guest it calls into)
//! runs there. On that thread, [`now_ms`] is the scenario's start plus the
//! time tokio's paused clock has advanced, which it does only when every
//! task waits on a timer, straight to the earliest one: sleeps, signal
//! timeouts and retry backoffs pass at once, in timer order. Every other
//! thread reads the system's clock.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::shared_map::lock;

thread_local! {
    static VIRTUAL: Cell<Option<Origin>> = const { Cell::new(None) };
}

/// Where virtual time started: its wall-clock reading, and tokio's instant then.
#[derive(Clone, Copy)]
struct Origin {
    at_ms: u64,
    instant: tokio::time::Instant,
}

/// Milliseconds since the Unix epoch: virtual on a thread running a
/// scenario, the system's everywhere else; off by its process's offset for
/// a task of a simulated host (see [`crate::task`]).
pub fn now_ms() -> u64 {
    let now = match VIRTUAL.with(Cell::get) {
        Some(origin) => {
            let elapsed = tokio::time::Instant::now().saturating_duration_since(origin.instant);
            origin.at_ms.saturating_add(millis(elapsed))
        }
        None => system_now_ms(),
    };
    now.saturating_add_signed(wall_offset_ms())
}

/// How far the wall clock of the current task's process is from the
/// simulation's (0 outside a simulation).
fn wall_offset_ms() -> i64 {
    crate::task::Process::current().map_or(0, |process| process.wall_offset_ms)
}

/// `ms` since the Unix epoch as an RFC 3339 time, for messages.
pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// `text` as milliseconds since the Unix epoch, if it is an RFC 3339
/// `date-time` (as the API's document calls it), or why not. chrono also
/// takes a space between the date and the time, which the RFC's grammar
/// does not.
pub fn parse_time(text: &str) -> Result<i64, String> {
    if text.as_bytes().get(10) == Some(&b' ') {
        return Err("the date and the time are joined by `T`".into());
    }
    let time = chrono::DateTime::parse_from_rfc3339(text).map_err(|e| e.to_string())?;
    Ok(time.timestamp_millis())
}

/// Microseconds since the Unix epoch, from the same clock as [`now_ms`].
pub fn now_us() -> u64 {
    let now = match VIRTUAL.with(Cell::get) {
        Some(origin) => {
            let elapsed = tokio::time::Instant::now().saturating_duration_since(origin.instant);
            origin.at_ms.saturating_mul(1_000).saturating_add(micros(elapsed))
        }
        None => SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, micros),
    };
    now.saturating_add_signed(wall_offset_ms().saturating_mul(1_000))
}

/// Creation instants that never repeat: each reading is [`now_us`], or one
/// microsecond past the previous reading if the clock has not moved past
/// it (two runs created within a microsecond, or a clock set back). So of
/// two runs one host creates one after the other, the later always reads
/// later, and a line ordered by creation is the order they were created in.
#[derive(Debug, Default)]
pub struct CreationClock(AtomicU64);

impl CreationClock {
    /// The next creation instant, in microseconds since the Unix epoch.
    pub fn next_us(&self) -> u64 {
        let now = now_us();
        let previous = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                Some(now.max(last.saturating_add(1)))
            })
            .unwrap_or_else(|last| last);
        now.max(previous.saturating_add(1))
    }
}

/// A reading of the clock hosts' leases are measured by: the time since
/// boot *including* the time the machine was suspended (`CLOCK_BOOTTIME`).
/// `Instant`'s clock (`CLOCK_MONOTONIC`) stops while the machine sleeps, so
/// a host woken from a suspend longer than its lease would still think the
/// lease held, while its peers, whose clocks ran, took its runs over. On a
/// thread on virtual time, the scenario's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BootInstant(Duration);

impl BootInstant {
    /// The boot clock's reading now (on a thread on virtual time, the
    /// scenario's clock).
    pub fn now() -> Self {
        if let Some(origin) = VIRTUAL.with(Cell::get) {
            let elapsed = tokio::time::Instant::now().saturating_duration_since(origin.instant);
            return Self(Duration::from_millis(origin.at_ms).saturating_add(elapsed));
        }
        let since_boot = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let (seconds, nanos) = (since_boot.tv_sec, since_boot.tv_nsec);
        Self(Duration::new(
            u64::try_from(seconds).unwrap_or(0),
            u32::try_from(nanos).unwrap_or(0),
        ))
    }

    /// How long ago this reading was taken (zero for a later one).
    pub fn elapsed(self) -> Duration {
        Self::now().duration_since(self)
    }

    /// How long after `earlier` this reading was taken (zero if before).
    pub fn duration_since(self, earlier: Self) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// The reading `duration` later.
    pub fn after(self, duration: Duration) -> Self {
        Self(self.0.saturating_add(duration))
    }
}

/// Whether this thread runs on virtual time.
/// The boot clock as one host's lease and failure detector read it: the
/// boot clock itself, or, for a host of a simulation, one that drifts from
/// it by some parts per thousand since it was made (each host of a real
/// cluster has a crystal of its own; a simulation gives each its own
/// drift).
#[derive(Debug, Clone, Copy)]
pub struct LeaseClock {
    drift_permille: i32,
    origin: BootInstant,
}

impl LeaseClock {
    /// A clock `drift_permille` parts per thousand fast (below 0: slow),
    /// within ±1000 (from standing still to twice the rate); 0 is the boot
    /// clock.
    pub fn drifting(drift_permille: i32) -> Self {
        Self {
            drift_permille: drift_permille.clamp(-1000, 1000),
            origin: BootInstant::now(),
        }
    }

    /// This clock's reading now: the boot clock's, run fast or slow by its
    /// drift since the clock was made.
    pub fn now(&self) -> BootInstant {
        let now = BootInstant::now();
        if self.drift_permille == 0 {
            return now;
        }
        let rate = 1.0 + f64::from(self.drift_permille) / 1000.0;
        self.origin.after(now.duration_since(self.origin).mul_f64(rate))
    }

    /// How long since `earlier`, by this clock.
    pub fn since(&self, earlier: BootInstant) -> Duration {
        self.now().duration_since(earlier)
    }
}

pub(crate) fn is_virtual() -> bool {
    VIRTUAL.with(Cell::get).is_some()
}

fn system_now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, millis)
}

/// `duration` in whole milliseconds, at most `u64::MAX`: what times in
/// records and log fields are counted in.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// Since when this host has seen each thing its looks find, by the scope
/// it looked at, on its own boot clock: how a host tells that something
/// has stayed a while without comparing its clock with another host's
/// (issue 55: notes of runs without a record, segments of runs dropped).
///
/// Invariant: a scope holds only what its latest look found, each at its
/// first sight, so never more than is there; a host started again sees
/// everything afresh, which only makes what it finds younger.
pub(crate) struct Sightings<S, K> {
    seen: Mutex<HashMap<S, BTreeMap<K, BootInstant>>>,
}

impl<S, K> Default for Sightings<S, K> {
    fn default() -> Self {
        Self {
            seen: Mutex::new(HashMap::new()),
        }
    }
}

impl<S: Eq + Hash, K: Ord + Clone> Sightings<S, K> {
    /// Keeps `found`, what a look at `scope` found, in place of what the
    /// last look there found (each keeping its first sight); returns those
    /// seen for `age` or longer.
    pub fn look(&self, scope: S, found: impl IntoIterator<Item = K>, age: Duration) -> Vec<K> {
        let now = BootInstant::now();
        let mut seen = lock(&self.seen);
        let before = seen.remove(&scope).unwrap_or_default();
        let kept: BTreeMap<K, BootInstant> = found
            .into_iter()
            .map(|key| {
                let first = before.get(&key).copied().unwrap_or(now);
                (key, first)
            })
            .collect();
        let aged = kept
            .iter()
            .filter(|(_, first)| now.duration_since(**first) >= age)
            .map(|(key, _)| key.clone())
            .collect();
        if !kept.is_empty() {
            seen.insert(scope, kept);
        }
        aged
    }

    /// Notes `key` in `scope` as seen from now, unless seen already.
    pub fn note(&self, scope: S, key: K) {
        lock(&self.seen)
            .entry(scope)
            .or_default()
            .entry(key)
            .or_insert_with(BootInstant::now);
    }

    /// Whether anything of `scope` is kept.
    #[cfg(test)]
    pub fn holds(&self, scope: &S) -> bool {
        lock(&self.seen).contains_key(scope)
    }
}

/// Virtual time on this thread, from its creation until it is dropped:
/// for the scenario harness, and for a simulation of many hosts.
pub struct VirtualTime(());

impl VirtualTime {
    /// Starts virtual time on this thread at `at_ms`. Call it inside a
    /// current-thread tokio runtime whose clock is paused (`start_paused`):
    /// only then does tokio's clock, and so this one, move virtually.
    pub fn start(at_ms: u64) -> Self {
        let origin = Origin {
            at_ms,
            instant: tokio::time::Instant::now(),
        };
        VIRTUAL.with(|cell| cell.set(Some(origin)));
        Self(())
    }
}

impl Drop for VirtualTime {
    fn drop(&mut self) {
        VIRTUAL.with(|cell| cell.set(None));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A current-thread runtime whose clock is paused: virtual time's.
    fn paused_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime")
    }

    #[test]
    fn virtual_time_starts_where_told_and_follows_the_paused_clock() {
        let runtime = paused_runtime();
        runtime.block_on(async {
            let system = now_ms();
            let _virtual = VirtualTime::start(1_000);
            assert!(is_virtual());
            assert_eq!(now_ms(), 1_000);
            assert_eq!(now_us(), 1_000_000);
            tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
            assert_eq!(now_ms(), 1_000 + 24 * 3600 * 1000, "a day passed at once");
            let elsewhere = std::thread::spawn(now_ms).join().expect("the thread ends");
            assert!(elsewhere >= system, "another thread reads the system's clock");
        });
        assert!(!is_virtual(), "virtual time ends with its guard");
    }

    /// A drifting lease clock runs at its rate from its making, at the
    /// edges too: 0 is the boot clock, -1000 stands still, and a drift
    /// beyond ±1000 is held to it.
    #[test]
    fn a_drifting_lease_clock_runs_at_its_rate() {
        let runtime = paused_runtime();
        runtime.block_on(async {
            let _virtual = VirtualTime::start(1_000);
            let start = BootInstant::now();
            let clocks =
                [0, 100, -100, 900, -1000, i32::MIN, i32::MAX].map(|drift| (drift, LeaseClock::drifting(drift)));
            tokio::time::sleep(Duration::from_secs(10)).await;
            for (drift, clock) in clocks {
                let expected = match drift {
                    0 => 10_000,
                    100 => 11_000,
                    -100 => 9_000,
                    900 => 19_000,
                    i32::MAX => 20_000,
                    _ => 0,
                };
                assert_eq!(clock.since(start).as_millis(), expected, "drift {drift}");
            }
        });
    }

    #[test]
    fn the_boot_clock_moves_with_the_monotonic_one_and_never_back() {
        let (boot, monotonic) = (BootInstant::now(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (boot_elapsed, monotonic_elapsed) = (boot.elapsed(), monotonic.elapsed());
        assert!(boot_elapsed >= Duration::from_millis(20), "{boot_elapsed:?}");
        // Without a suspend in between, the two clocks agree closely.
        let apart = boot_elapsed.abs_diff(monotonic_elapsed);
        assert!(
            apart < Duration::from_millis(5),
            "{boot_elapsed:?} against {monotonic_elapsed:?}"
        );
        assert_eq!(
            boot.duration_since(BootInstant::now()),
            Duration::ZERO,
            "never negative"
        );
        assert_eq!(boot.after(Duration::MAX).duration_since(boot), Duration::MAX - boot.0);
    }

    #[test]
    fn creation_instants_strictly_increase_even_within_one_microsecond() {
        let clock = CreationClock::default();
        let readings: Vec<u64> = (0..10_000).map(|_| clock.next_us()).collect();
        assert!(
            readings.windows(2).all(|pair| pair[0] < pair[1]),
            "not strictly increasing"
        );
        let system = now_us();
        assert!(readings[0] <= system, "a reading is the clock's while it moves on");
        let ahead = CreationClock(AtomicU64::new(u64::MAX - 1));
        assert_eq!(ahead.next_us(), u64::MAX, "one past a clock set back");
        assert_eq!(ahead.next_us(), u64::MAX, "saturates at the end of time");
    }

    #[test]
    fn virtual_time_saturates_at_the_end_of_time() {
        let runtime = paused_runtime();
        runtime.block_on(async {
            let _virtual = VirtualTime::start(u64::MAX - 5);
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(now_ms(), u64::MAX);
        });
    }
}
