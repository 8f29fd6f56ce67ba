//! `stepstone-sim` (`make sim SEEDS=N`): plays seeds of the simulation and
//! ends with one line naming the seeds run and the violations found.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use stepstone::component::CodeCache;
use stepstone_sim::{FaultCounts, HostFaults, SeedReport, SimConfig, StoreCounts, StoreFaults, run_seed};

/// Plays seeds of a simulation of many hosts on one store, and checks them.
#[derive(Parser)]
struct Args {
    /// How many seeds to play.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Hosts at the start of each seed.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=16))]
    hosts: u8,
    /// Runs each seed starts.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=1000))]
    runs: u16,
    /// Runs start, and faults strike, within this span of virtual time.
    #[arg(long, default_value = "5m", value_parser = span)]
    span: Duration,
    /// The hosts' lease TTL (`serve`'s default).
    #[arg(long, default_value = "10s", value_parser = lease_ttl)]
    ttl: Duration,
    /// What the store does to every call.
    #[arg(long = "store", default_value = STORE_FAULTS)]
    store_text: String,
    /// What each seed's hosts suffer.
    #[arg(
        long,
        default_value = "kills=2,pauses=4,restarts=2,partitions=2,outages=1,clones=1,drift=100,offsets=120,stalls=1,seams=3"
    )]
    faults: HostFaults,
    /// Stop starting seeds after this much wall-clock time.
    #[arg(long, value_parser = duration)]
    budget: Option<Duration>,
    /// Print each seed's events.
    #[arg(long)]
    trace: bool,
    /// Play every seed twice and compare (by default only the first).
    #[arg(long)]
    twice: bool,
    /// Stop after the first seed that breaks an invariant (how a mutation
    /// in `sim/mutations/` is measured: seeds to its first violation).
    #[arg(long)]
    until_found: bool,
    /// The workflow guest (built by `make guests`).
    #[arg(long, default_value = "target/guests/bench.wasm")]
    guest: PathBuf,
    /// File the figures for docs/RELIABILITY.md here (JSON).
    #[arg(long)]
    record: Option<PathBuf>,
}

fn duration(text: &str) -> Result<Duration, String> {
    stepstone::durations::parse(text).ok_or_else(|| format!("`{text}` is not a duration: write e.g. 2s or 500ms"))
}

fn span(text: &str) -> Result<Duration, String> {
    let span = duration(text)?;
    if !(Duration::from_secs(1)..=Duration::from_secs(24 * 3600)).contains(&span) {
        return Err(format!("a span from 1s to 24h, not {text}"));
    }
    Ok(span)
}

fn lease_ttl(text: &str) -> Result<Duration, String> {
    let ttl = duration(text)?;
    if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&ttl) {
        return Err(format!("a lease TTL from 1s to 1h, not {text}"));
    }
    Ok(ttl)
}

/// The store's faults unless `--store` says otherwise.
const STORE_FAULTS: &str = "latency=30ms,errors=0.02,lost=0.5,late=0.3,late-by=10s,dup=0.005,stale=3s,stale-rate=0.3";

fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let store: StoreFaults = args.store_text.parse().map_err(|e| anyhow::anyhow!("--store {e}"))?;
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .without_time()
            .with_writer(std::io::stderr)
            .init();
    }
    let guest = std::fs::read(&args.guest)
        .with_context(|| format!("cannot read {}: build it with `make guests`", args.guest.display()))?;
    let guest = bytes::Bytes::from(guest);
    let cache = CodeCache::open(std::path::Path::new("target/sim-code-cache"));
    let config = SimConfig {
        hosts: usize::from(args.hosts),
        runs: usize::from(args.runs),
        ttl: args.ttl,
        span: args.span,
        until: Duration::from_secs(3600),
        store,
        faults: args.faults,
    };
    let started = Instant::now();
    let mut tally = Tally::default();
    for seed in args.from..args.from.saturating_add(args.seeds) {
        if args.budget.is_some_and(|budget| started.elapsed() >= budget) {
            break;
        }
        let report = play(&config, &guest, &cache, seed);
        // The first seed is played twice, to show a seed plays one way; a
        // failing one too, to show its failure is the seed's, not chance's.
        if seed == args.from || args.twice || !report.violations.is_empty() {
            let again = play(&config, &guest, &cache, seed);
            if again.trace != report.trace {
                print_divergence(seed, &report, &again);
                tally.violations += 1;
                tally.failing.push(seed);
            }
        }
        if args.trace || !report.violations.is_empty() {
            println!("seed {seed} (trace {}):", report.trace);
            for event in &report.events {
                println!("  {event}");
            }
        }
        for violation in &report.violations {
            println!("seed {seed}: {violation}");
        }
        tally.add(seed, &report);
        if args.until_found && !tally.failing.is_empty() {
            break;
        }
    }
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let summary = tally.summary(minutes, &args.store_text);
    let played = tally.played;
    println!(
        "sim: seeds {}..{} ({played} played), {summary}",
        args.from,
        args.from + played
    );
    if let Some(path) = &args.record {
        let faults = &args.faults;
        let result = serde_json::json!({
            "suite": "sim",
            "fault": format!(
                "{} hosts (lease TTL {:?}), {} runs a seed over {:?} (steps, steps together, signals, relays of retries, durable sleeps, children and continue-as-new; concurrency keys; retention; runs submitted again under ids retention deleted; operators pausing and resuming runs through any host, advancing sleeps, restarting runs from a seq beside the old); each seed {} kills, {} pauses (0.5, 1.2 or 2.5 TTLs, ±10%), {} restarts (same or new id), {} partitions from cluster/ (1.2 or 2.5 TTLs), {} store outages (all calls or 0.7 of them failing for 0.5, 1.2 or 2.5 TTLs), {} clones (a second host with a running host's id), {} long stalls (seconds to hours), up to {} stalls at the seams between a check and its act, lease clocks drifting up to {}‰, wall clocks up to {} minutes apart; store: {}",
                args.hosts, args.ttl, args.runs, args.span, faults.kills, faults.pauses, faults.restarts, faults.partitions, faults.outages, faults.clones, faults.stalls, faults.seams, faults.drift_permille, faults.offset_minutes, args.store_text,
            ),
            "trials": played,
            "outcome": format!("seeds {}..{}: {summary}", args.from, args.from + played),
            "lost": tally.violations,
        });
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_string_pretty(&result)?)?;
    }
    let violations = tally.violations;
    Ok(if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Plays `seed`. A seed the world could not play to its end (a host's
/// answer no client may be given, a guest that failed to load) is a
/// violation too, named by its error: a mutation that makes the hosts
/// answer nonsense is found, not taken for a crash of the simulator.
fn play(config: &SimConfig, guest: &bytes::Bytes, cache: &CodeCache, seed: u64) -> SeedReport {
    run_seed(config, guest, cache, seed).unwrap_or_else(|e| {
        let error = format!("{e:#}");
        SeedReport {
            seed,
            trace: format!("{:016x}", fnv1a(&error)),
            violations: vec![format!("played: the seed stopped: {error}")],
            ..SeedReport::default()
        }
    })
}

/// A digest of `text`, as a failed seed's trace: two plays that failed
/// alike have the same.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3)
    })
}

/// What the seeds played came to.
#[derive(Default)]
struct Tally {
    played: u64,
    violations: usize,
    failing: Vec<u64>,
    /// Seeds whose store the hosts' probe refused, as it must.
    refused: u64,
    host_seconds: f64,
    faults: FaultCounts,
    store: StoreCounts,
}

impl Tally {
    fn add(&mut self, seed: u64, report: &SeedReport) {
        self.played += 1;
        self.host_seconds += report.host_seconds;
        self.faults += report.faults;
        self.store += report.store;
        self.refused += u64::from(report.refused);
        if !report.violations.is_empty() {
            self.violations += report.violations.len();
            self.failing.push(seed);
        }
    }

    /// One line: the violations, and what the seeds suffered.
    fn summary(&self, minutes: f64, store_text: &str) -> String {
        let (faults, store) = (&self.faults, &self.store);
        let host_hours = self.host_seconds / 3600.0;
        let failing = match self.failing.is_empty() {
            true => String::new(),
            false => format!(" in seeds {:?}", self.failing),
        };
        let refused = match self.refused {
            0 => String::new(),
            refused => format!(" ({refused} refused by the hosts' probe of the store, as they must be)"),
        };
        format!(
            "{} violations{failing}{refused}; {host_hours:.1} simulated host-hours ({:.0} a wall-clock minute); faults: {} kills, {} pauses, {} restarts, {} partitions, {} store outages, {} clones, {} long stalls, {} stalls at seams; operators: {} runs paused and resumed, {} sleeps advanced, {} runs restarted, {} ids used again; store: {} calls, {} failed, {} replies lost, {} writes landed late, {} twice, {} stale listings ({store_text})",
            self.violations,
            host_hours / minutes.max(f64::MIN_POSITIVE),
            faults.kills,
            faults.pauses,
            faults.restarts,
            faults.partitions,
            faults.outages,
            faults.clones,
            faults.stalls,
            faults.seam_stalls,
            faults.run_pauses,
            faults.advances,
            faults.run_restarts,
            faults.resubmissions,
            store.calls,
            store.failed,
            store.lost_replies,
            store.late_landings,
            store.duplicates,
            store.stale_listings,
        )
    }
}

/// Says where two plays of `seed` went apart.
fn print_divergence(seed: u64, first: &SeedReport, second: &SeedReport) {
    println!(
        "seed {seed}: determinism: played twice, it went two ways ({} then {})",
        first.trace, second.trace
    );
    let apart = first.events.iter().zip(&second.events).position(|(a, b)| a != b);
    let apart = apart.unwrap_or(first.events.len().min(second.events.len()));
    for (play, report) in [("first", first), ("second", second)] {
        println!(
            "  {play} play, from event {apart}: {:?}",
            report.events.get(apart..(apart + 3).min(report.events.len()))
        );
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Args;

    fn parse(flags: &[&str]) -> Result<Args, String> {
        Args::try_parse_from(["stepstone-sim"].iter().chain(flags)).map_err(|e| e.to_string())
    }

    /// Every flag's edges: the last value allowed passes, the first beyond
    /// it is refused with a reason.
    #[test]
    fn every_flag_is_read_at_its_edges() {
        for good in [
            &["--hosts", "1"][..],
            &["--hosts", "16"],
            &["--runs", "1"],
            &["--runs", "1000"],
            &["--ttl", "1s"],
            &["--ttl", "1h"],
            &["--span", "1s"],
            &["--span", "24h"],
            &["--seeds", "0"],
            &["--seeds", "18446744073709551615", "--from", "18446744073709551615"],
            &["--budget", "0s"],
        ] {
            assert!(parse(good).is_ok(), "{good:?}: {:?}", parse(good).err());
        }
        for (bad, why) in [
            (&["--hosts", "0"][..], "0 is not in 1..=16"),
            (&["--hosts", "17"], "17 is not in 1..=16"),
            (&["--runs", "0"], "0 is not in 1..=1000"),
            (&["--runs", "1001"], "1001 is not in 1..=1000"),
            (&["--ttl", "999ms"], "a lease TTL from 1s to 1h"),
            (&["--ttl", "61m"], "a lease TTL from 1s to 1h"),
            (&["--span", "999ms"], "a span from 1s to 24h"),
            (&["--span", "25h"], "a span from 1s to 24h"),
            (&["--span", "NaN"], "is not a duration"),
            (&["--budget=-1s"], "is not a duration"),
            (&["--seeds", "18446744073709551616"], "number too large"),
            (&["--faults", "kills=-1"], "kills"),
        ] {
            let refused = parse(bad).err().unwrap_or_default();
            assert!(refused.contains(why), "{bad:?}: {refused}");
        }
    }
}
