//! The simulator's fault language: what a seed's store does to every call
//! (`--store latency=20ms,errors=0.05,lost=0.5,late=0.3,late-by=10s,dup=0.01,stale=3s,stale-rate=0.3,mode=strict`)
//! and what its hosts suffer
//! (`--faults kills=1,pauses=2,restarts=1,partitions=1,outages=1,clones=1,drift=100,offsets=120,stalls=1,seams=2`),
//! the times (and each host's clock drift and wall-clock offset) drawn
//! from the seed.
//!
//! Invariant: a setting is read whole or refused with its name and why
//! (an unknown name, a number out of range, a rate outside 0 to 1); no
//! input makes the simulator panic.

use std::str::FromStr;
use std::time::Duration;

use chacha20::ChaCha20Rng;
use chacha20::rand_core::Rng;

use crate::network::{StoreFaults, StoreMode};

/// The most of one host fault a seed may plan.
pub const MAX_FAULTS: u32 = 1_000;
/// The most a clock may drift, in parts per thousand: 0.9 of its rate.
pub const MAX_DRIFT: u32 = 900;
/// The most a wall clock may be off, in minutes: a day.
pub const MAX_OFFSET_MINUTES: u32 = 24 * 60;
/// The longest a call may be made to wait.
pub const MAX_LATENCY: Duration = Duration::from_secs(60);
/// The latest a write may land after it was sent: within what the hosts
/// allow for (`retention::LATE_WRITES_LAND_WITHIN`, 30 s), with room.
pub const MAX_LATE_BY: Duration = Duration::from_secs(20);

/// What a host suffers, or, for an outage, every host at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HostFault {
    /// Stops for so many lease TTLs, then runs on.
    Pause(f64),
    /// Dies for good.
    Kill,
    /// Dies and starts again, as a new host or with its old id.
    Restart { same_id: bool },
    /// A second host starts with its id, both running on: a cloned
    /// machine.
    Clone,
    /// Reaches the hosts' shared folder (`cluster/`) only after so many
    /// lease TTLs, its runs' records at once: its heartbeats stall while
    /// its journal writes go on, so peers judge it dead while it drives.
    Partition(f64),
    /// The store fails this share of every host's calls (all of them, or
    /// most: a storm of throttling) for so many lease TTLs: longer than the
    /// store layer's retries, so callers see calls fail, any call of all.
    Outage { ttls: f64, rate: f64 },
    /// Stops for this long, over an hour (a process stopped, a VM frozen),
    /// then runs on: past every lease and the phantom judgement.
    Stall(Duration),
}

/// How many of each fault a seed plans.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostFaults {
    pub kills: u32,
    pub pauses: u32,
    pub restarts: u32,
    pub partitions: u32,
    pub outages: u32,
    pub clones: u32,
    /// Each host's lease clock runs up to this many parts per thousand
    /// fast or slow, drawn per host.
    pub drift_permille: u32,
    /// Each host's wall clock reads up to this many minutes early or late,
    /// drawn per host.
    pub offset_minutes: u32,
    /// Stalls of over an hour, at drawn times.
    pub stalls: u32,
    /// Stalls at the protocol's seams (between a check and its act), at
    /// most so many a seed, drawn as hosts pass them.
    pub seams: u32,
}

/// The faults a seed suffered, by kind, and the operators' controls played.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub kills: u64,
    pub pauses: u64,
    pub restarts: u64,
    pub partitions: u64,
    pub outages: u64,
    pub clones: u64,
    /// Long stalls, at drawn times and at seams.
    pub stalls: u64,
    /// Stalls at seams, of any length.
    pub seam_stalls: u64,
    /// Runs an operator paused (each resumed later).
    pub run_pauses: u64,
    /// Sleeps an operator advanced.
    pub advances: u64,
    /// Runs an operator restarted from a seq.
    pub run_restarts: u64,
    /// Runs submitted again under an id retention deleted a run of.
    pub resubmissions: u64,
}

impl std::ops::AddAssign for FaultCounts {
    fn add_assign(&mut self, other: Self) {
        self.kills += other.kills;
        self.pauses += other.pauses;
        self.restarts += other.restarts;
        self.partitions += other.partitions;
        self.outages += other.outages;
        self.clones += other.clones;
        self.stalls += other.stalls;
        self.seam_stalls += other.seam_stalls;
        self.run_pauses += other.run_pauses;
        self.advances += other.advances;
        self.run_restarts += other.run_restarts;
        self.resubmissions += other.resubmissions;
    }
}

/// Pauses last this many TTLs: shorter than the lease, longer, and past
/// the point where peers clean the host's heartbeat up; each drawn within
/// a tenth of it either way (`PAUSE_SPREAD`), so that a pause ends at any
/// moment of its peers' looks around, a cleanup's included.
const PAUSES: [f64; 3] = [0.5, 1.2, 2.5];

/// How far a pause's length is drawn from its share of `PAUSES`, in
/// thousandths of it either way.
const PAUSE_SPREAD: u64 = 100;

/// Partitions last this many TTLs: past the lease, and past the cleanup.
const PARTITIONS: [f64; 2] = [1.2, 2.5];

/// Outages of the store last this many TTLs: each past the store layer's
/// retries (about 2.5 s), the longer past a host's lease and the secrets'
/// cache, so that every caller meets a failed call.
const OUTAGES: [f64; 3] = [0.5, 1.2, 2.5];

/// The share of calls an outage fails: all, or most (then a call of eight
/// tries fails one time in eighteen, wherever it is made).
const OUTAGE_RATES: [f64; 2] = [1.0, 0.7];

/// A long stall lasts from this long, past the phantom judgement's hour...
pub const STALL_FROM: Duration = Duration::from_secs(65 * 60);
/// ...to twice that.
pub const STALL_TO: Duration = Duration::from_secs(130 * 60);

/// A long stall's length, drawn.
pub fn stall_length(rng: &mut ChaCha20Rng) -> Duration {
    let spread = u64::try_from((STALL_TO - STALL_FROM).as_millis()).unwrap_or(u64::MAX);
    STALL_FROM + Duration::from_millis(rng.next_u64() % spread.max(1))
}

impl HostFaults {
    /// The faults, each at a time within `span` and on one of `hosts`.
    pub fn draw(&self, rng: &mut ChaCha20Rng, hosts: usize, span: Duration) -> Vec<(Duration, usize, HostFault)> {
        let span_ms = u64::try_from(span.as_millis()).unwrap_or(u64::MAX).max(1);
        let at = |rng: &mut ChaCha20Rng| Duration::from_millis(rng.next_u64() % span_ms);
        let mut faults = Vec::new();
        let hosts = hosts.max(1) as u64;
        for _ in 0..self.kills {
            faults.push((at(rng), (rng.next_u64() % hosts) as usize, HostFault::Kill));
        }
        for _ in 0..self.pauses {
            let ttls = PAUSES[(rng.next_u64() % PAUSES.len() as u64) as usize];
            let spread = (rng.next_u64() % (2 * PAUSE_SPREAD + 1)) as f64 - PAUSE_SPREAD as f64;
            let ttls = ttls * (1.0 + spread / 1000.0);
            faults.push((at(rng), (rng.next_u64() % hosts) as usize, HostFault::Pause(ttls)));
        }
        for _ in 0..self.partitions {
            let ttls = PARTITIONS[(rng.next_u64() % PARTITIONS.len() as u64) as usize];
            faults.push((at(rng), (rng.next_u64() % hosts) as usize, HostFault::Partition(ttls)));
        }
        for _ in 0..self.outages {
            let ttls = OUTAGES[(rng.next_u64() % OUTAGES.len() as u64) as usize];
            let rate = OUTAGE_RATES[(rng.next_u64() % OUTAGE_RATES.len() as u64) as usize];
            faults.push((at(rng), 0, HostFault::Outage { ttls, rate }));
        }
        for _ in 0..self.clones {
            faults.push((at(rng), (rng.next_u64() % hosts) as usize, HostFault::Clone));
        }
        for _ in 0..self.stalls {
            let lasts = stall_length(rng);
            faults.push((at(rng), (rng.next_u64() % hosts) as usize, HostFault::Stall(lasts)));
        }
        for _ in 0..self.restarts {
            let same_id = rng.next_u64().is_multiple_of(2);
            faults.push((
                at(rng),
                (rng.next_u64() % hosts) as usize,
                HostFault::Restart { same_id },
            ));
        }
        faults
    }
}

/// A setting that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{setting}`: {reason}")]
pub struct BadSetting {
    setting: String,
    reason: String,
}

fn settings(text: &str) -> impl Iterator<Item = Result<(&str, &str), BadSetting>> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|setting| {
        setting.split_once('=').ok_or_else(|| BadSetting {
            setting: setting.to_owned(),
            reason: "write NAME=VALUE".into(),
        })
    })
}

fn bad(name: &str, value: &str, reason: &str) -> BadSetting {
    BadSetting {
        setting: format!("{name}={value}"),
        reason: reason.to_owned(),
    }
}

impl FromStr for HostFaults {
    type Err = BadSetting;

    fn from_str(text: &str) -> Result<Self, BadSetting> {
        let mut faults = Self::default();
        for setting in settings(text) {
            let (name, value) = setting?;
            if name == "drift" {
                faults.drift_permille = value
                    .parse::<u32>()
                    .ok()
                    .filter(|drift| *drift <= MAX_DRIFT)
                    .ok_or_else(|| bad(name, value, &format!("parts per thousand, from 0 to {MAX_DRIFT}")))?;
                continue;
            }
            if name == "offsets" {
                faults.offset_minutes = value
                    .parse::<u32>()
                    .ok()
                    .filter(|minutes| *minutes <= MAX_OFFSET_MINUTES)
                    .ok_or_else(|| bad(name, value, &format!("minutes, from 0 to {MAX_OFFSET_MINUTES}")))?;
                continue;
            }
            let count = value
                .parse::<u32>()
                .ok()
                .filter(|count| *count <= MAX_FAULTS)
                .ok_or_else(|| bad(name, value, &format!("a count from 0 to {MAX_FAULTS}")))?;
            match name {
                "kills" => faults.kills = count,
                "pauses" => faults.pauses = count,
                "restarts" => faults.restarts = count,
                "partitions" => faults.partitions = count,
                "outages" => faults.outages = count,
                "clones" => faults.clones = count,
                "stalls" => faults.stalls = count,
                "seams" => faults.seams = count,
                _ => {
                    let known = "kills, pauses, restarts, partitions, outages, clones, stalls, seams, drift or offsets";
                    return Err(bad(name, value, &format!("no such fault: {known}")));
                }
            }
        }
        Ok(faults)
    }
}

impl FromStr for StoreFaults {
    type Err = BadSetting;

    fn from_str(text: &str) -> Result<Self, BadSetting> {
        let mut faults = StoreFaults {
            max_latency: Duration::ZERO,
            error_rate: 0.0,
            lost_reply_rate: 0.0,
            late_rate: 0.0,
            late_by: Duration::ZERO,
            duplicate_rate: 0.0,
            stale: Duration::ZERO,
            stale_rate: 0.0,
            mode: StoreMode::Strict,
        };
        for setting in settings(text) {
            let (name, value) = setting?;
            let rate = || {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|rate| (0.0..=1.0).contains(rate))
                    .ok_or_else(|| bad(name, value, "a rate from 0 to 1"))
            };
            match name {
                "latency" => {
                    faults.max_latency = stepstone::durations::parse(value)
                        .filter(|latency| *latency <= MAX_LATENCY)
                        .ok_or_else(|| bad(name, value, "a duration up to 60s, e.g. 20ms"))?;
                }
                "stale" => {
                    faults.stale = stepstone::durations::parse(value)
                        .filter(|stale| *stale <= MAX_LATENCY)
                        .ok_or_else(|| bad(name, value, "a duration up to 60s, e.g. 3s"))?;
                }
                "late-by" => {
                    faults.late_by = stepstone::durations::parse(value)
                        .filter(|late_by| *late_by <= MAX_LATE_BY)
                        .ok_or_else(|| {
                            bad(
                                name,
                                value,
                                "a duration up to 20s (retention holds an id 30s), e.g. 10s",
                            )
                        })?;
                }
                "errors" => faults.error_rate = rate()?,
                "lost" => faults.lost_reply_rate = rate()?,
                "late" => faults.late_rate = rate()?,
                "dup" => faults.duplicate_rate = rate()?,
                "stale-rate" => faults.stale_rate = rate()?,
                "mode" => faults.mode = value.parse().map_err(|why: String| bad(name, value, &why))?,
                _ => {
                    let known = "latency, errors, lost, late, late-by, dup, stale, stale-rate or mode";
                    return Err(bad(name, value, &format!("no such setting: {known}")));
                }
            }
        }
        if faults.mode == StoreMode::StaleReads && faults.stale.is_zero() {
            return Err(bad(
                "mode",
                "stale-reads",
                "a store whose reads lag needs `stale=` (how long a key read absent is read so after it is written), e.g. stale=3s",
            ));
        }
        Ok(faults)
    }
}

/// Everything a seed is played with.
#[derive(Debug, Clone, Copy)]
pub struct SimConfig {
    pub hosts: usize,
    pub runs: usize,
    /// The hosts' lease TTL.
    pub ttl: Duration,
    /// Runs start, and faults strike, within this span from the start.
    pub span: Duration,
    /// How long after the plan the runs have to end.
    pub until: Duration,
    pub store: StoreFaults,
    pub faults: HostFaults,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_is_read_at_its_edges() {
        let faults: HostFaults = "kills=0, pauses=1000,restarts=7,partitions=1000,outages=1000,clones=1000,drift=900"
            .parse()
            .expect("valid");
        assert_eq!(faults.drift_permille, 900);
        assert_eq!(
            (
                faults.kills,
                faults.pauses,
                faults.restarts,
                faults.partitions,
                faults.outages,
                faults.clones
            ),
            (0, 1000, 7, 1000, 1000, 1000)
        );
        assert_eq!("".parse::<HostFaults>(), Ok(HostFaults::default()));
        let store: StoreFaults = "latency=60s,errors=1,lost=0,stale=60s,stale-rate=1"
            .parse()
            .expect("valid");
        assert_eq!(store.max_latency, Duration::from_secs(60));
        assert_eq!(store.error_rate, 1.0);
        assert_eq!((store.stale, store.stale_rate), (Duration::from_secs(60), 1.0));
        let store: StoreFaults = "errors=0".parse().expect("valid");
        assert_eq!((store.error_rate, store.max_latency), (0.0, Duration::ZERO));
        let faults: HostFaults = "offsets=1440,stalls=1000,seams=0".parse().expect("valid");
        assert_eq!((faults.offset_minutes, faults.stalls, faults.seams), (1440, 1000, 0));
        let store: StoreFaults = "late=1,late-by=20s,dup=0,mode=non-atomic".parse().expect("valid");
        assert_eq!((store.late_rate, store.late_by), (1.0, Duration::from_secs(20)));
        assert_eq!((store.duplicate_rate, store.mode), (0.0, StoreMode::NonAtomic));
        for mode in ["strict", "stale-reads"] {
            let store: StoreFaults = format!("stale=1ms,mode={mode}").parse().expect("valid");
            assert_eq!(store.mode.to_string(), mode);
        }
    }

    #[test]
    fn a_bad_setting_is_refused_with_its_name_and_why() {
        for (bad, says) in [
            ("kills=1001", "from 0 to 1000"),
            ("partitions=1001", "from 0 to 1000"),
            ("outages=1001", "from 0 to 1000"),
            ("outages=-1", "from 0 to 1000"),
            ("clones=1001", "from 0 to 1000"),
            ("drift=901", "from 0 to 900"),
            ("drift=-1", "from 0 to 900"),
            ("drift=0.5", "from 0 to 900"),
            ("kills=-1", "from 0 to 1000"),
            ("kills=1.5", "from 0 to 1000"),
            ("kills=99999999999999999999", "from 0 to 1000"),
            ("offsets=1441", "minutes, from 0 to 1440"),
            ("offsets=-1", "minutes, from 0 to 1440"),
            ("stalls=1001", "from 0 to 1000"),
            ("seams=NaN", "from 0 to 1000"),
            ("floods=1", "no such fault"),
            ("kills", "NAME=VALUE"),
        ] {
            let refused = bad.parse::<HostFaults>().expect_err(bad).to_string();
            assert!(refused.contains(says), "{bad}: {refused}");
        }
        for (bad, says) in [
            ("errors=1.01", "from 0 to 1"),
            ("errors=NaN", "from 0 to 1"),
            ("lost=-0.1", "from 0 to 1"),
            ("lost=inf", "from 0 to 1"),
            ("latency=61s", "up to 60s"),
            ("latency=fast", "up to 60s"),
            ("latency=99999999999999999999y", "up to 60s"),
            ("stale=1m1s", "up to 60s"),
            ("stale-rate=2", "from 0 to 1"),
            ("late-by=21s", "up to 20s"),
            ("late=1.5", "from 0 to 1"),
            ("dup=2", "from 0 to 1"),
            ("mode=eventual", "strict, non-atomic or stale-reads"),
            ("mode=stale-reads", "needs `stale=`"),
            ("jitter=1", "no such setting"),
        ] {
            let refused = bad.parse::<StoreFaults>().expect_err(bad).to_string();
            assert!(refused.contains(says), "{bad}: {refused}");
        }
    }

    #[test]
    fn faults_are_drawn_within_the_span_on_the_hosts_there_are() {
        use chacha20::rand_core::SeedableRng;
        let faults = HostFaults {
            kills: 50,
            pauses: 50,
            restarts: 50,
            partitions: 50,
            outages: 50,
            clones: 50,
            drift_permille: 0,
            offset_minutes: 0,
            stalls: 50,
            seams: 3,
        };
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let drawn = faults.draw(&mut rng, 3, Duration::from_secs(10));
        assert_eq!(drawn.len(), 350, "seams are drawn as hosts pass them, not here");
        assert!(
            drawn
                .iter()
                .all(|(at, host, _)| *at < Duration::from_secs(10) && *host < 3)
        );
        let mut again = ChaCha20Rng::seed_from_u64(7);
        assert_eq!(
            faults.draw(&mut again, 3, Duration::from_secs(10)),
            drawn,
            "the same seed, the same faults"
        );
        assert!(
            faults
                .draw(&mut rng, 0, Duration::ZERO)
                .iter()
                .all(|(at, host, _)| at.is_zero() && *host == 0)
        );
    }
}
