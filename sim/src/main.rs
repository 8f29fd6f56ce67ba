//! `stepstone-sim` (`make sim SEEDS=N`): plays seeds of the simulation and
//! ends with one line naming the seeds run and the violations found.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use stepstone::component::CodeCache;
use stepstone_sim::{FaultCounts, HostFaults, SimConfig, StoreFaults, run_seed};

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
        default_value = "kills=2,pauses=4,restarts=2,partitions=2,outages=1,clones=1,drift=100"
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
const STORE_FAULTS: &str = "latency=30ms,errors=0.02,lost=0.5,stale=3s,stale-rate=0.3";

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
    let (mut played, mut failing, mut violations) = (0u64, Vec::new(), 0usize);
    let (mut host_seconds, mut faults) = (0.0, FaultCounts::default());
    for seed in args.from..args.from.saturating_add(args.seeds) {
        if args.budget.is_some_and(|budget| started.elapsed() >= budget) {
            break;
        }
        let report = run_seed(&config, &guest, &cache, seed).with_context(|| format!("seed {seed}"))?;
        if seed == args.from || args.twice {
            let again =
                run_seed(&config, &guest, &cache, seed).with_context(|| format!("seed {seed}, played again"))?;
            if again.trace != report.trace {
                println!(
                    "seed {seed}: determinism: played twice, it went two ways ({} then {})",
                    report.trace, again.trace
                );
                let apart = report.events.iter().zip(&again.events).position(|(a, b)| a != b);
                let apart = apart.unwrap_or(report.events.len().min(again.events.len()));
                println!(
                    "  first play, from event {apart}: {:?}",
                    report.events.get(apart..(apart + 3).min(report.events.len()))
                );
                println!(
                    "  second play, from event {apart}: {:?}",
                    again.events.get(apart..(apart + 3).min(again.events.len()))
                );
                violations += 1;
                failing.push(seed);
            }
        }
        played += 1;
        host_seconds += report.host_seconds;
        faults += report.faults;
        if args.trace || !report.violations.is_empty() {
            println!("seed {seed} (trace {}):", report.trace);
            for event in &report.events {
                println!("  {event}");
            }
        }
        if !report.violations.is_empty() {
            for violation in &report.violations {
                println!("seed {seed}: {violation}");
            }
            violations += report.violations.len();
            failing.push(seed);
        }
    }
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let host_hours = host_seconds / 3600.0;
    let summary = format!(
        "{violations} violations{}; {host_hours:.1} simulated host-hours ({:.0} a wall-clock minute); faults: {} kills, {} pauses, {} restarts, {} partitions, {} store outages, {} clones; operators: {} runs paused and resumed, {} sleeps advanced, {} runs restarted; store: {}",
        if failing.is_empty() {
            String::new()
        } else {
            format!(" in seeds {failing:?}")
        },
        host_hours / minutes.max(f64::MIN_POSITIVE),
        faults.kills,
        faults.pauses,
        faults.restarts,
        faults.partitions,
        faults.outages,
        faults.clones,
        faults.run_pauses,
        faults.advances,
        faults.run_restarts,
        args.store_text,
    );
    println!(
        "sim: seeds {}..{} ({played} played), {summary}",
        args.from,
        args.from + played
    );
    if let Some(path) = &args.record {
        let result = serde_json::json!({
            "suite": "sim",
            "fault": format!(
                "{} hosts (lease TTL {:?}), {} runs a seed over {:?} (steps, steps together, signals, relays of retries, durable sleeps, children and continue-as-new; concurrency keys; retention; operators pausing and resuming runs through any host, advancing sleeps, restarting runs from a seq beside the old); {}; store faults and stale listings of cluster/",
                args.hosts, args.ttl, args.runs, args.span, format!("each seed {} kills, {} pauses (0.5, 1.2 or 2.5 TTLs, ±10%), {} restarts (same or new id), {} partitions from cluster/ (1.2 or 2.5 TTLs), {} store outages (all calls or 0.7 of them failing for 0.5, 1.2 or 2.5 TTLs), {} clones (a second host with a running host's id), clocks drifting up to {}‰", args.faults.kills, args.faults.pauses, args.faults.restarts, args.faults.partitions, args.faults.outages, args.faults.clones, args.faults.drift_permille)
            ),
            "trials": played,
            "outcome": format!("seeds {}..{}: {summary}", args.from, args.from + played),
            "lost": violations,
        });
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_string_pretty(&result)?)?;
    }
    Ok(if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
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
