//! `make bench`: runs every benchmark of the host through its library API
//! and writes docs/BENCHMARKS.md (with its plots under docs/bench/).
//!
//! Invariant: every ratio in the report is between two figures measured by
//! this process (or its memory, tracing and HTTP clients' children) in this run.

mod console;
mod control;
mod fixtures;
mod http_clients;
mod invocation;
mod measure;
mod memory;
mod object_storage;
mod plot;
mod recovery;
mod report;
mod scaling;
mod scenarios;
mod throughput;
mod traces;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::process::Command;
use std::time::Instant;

use report::Section;

type Benchmark<'a> = Pin<Box<dyn Future<Output = anyhow::Result<Section>> + 'a>>;

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    if std::env::args().any(|arg| arg == memory::CHILD_ARG) {
        return runtime.block_on(memory::measure_in_child());
    }
    if std::env::args().any(|arg| arg == http_clients::CHILD_ARG) {
        return runtime.block_on(http_clients::clients_in_child());
    }
    if std::env::args().any(|arg| arg == traces::CHILD_ARG) {
        let telemetry = traces::telemetry_in_child()?;
        let measured = runtime.block_on(traces::measure_in_child());
        telemetry.shutdown();
        return measured;
    }
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let images = docs.join("bench");
    std::fs::create_dir_all(&images)?;
    let started = Instant::now();
    let load_before = read_trimmed("/proc/loadavg");
    let benchmarks: Vec<(&str, Benchmark)> = vec![
        ("step invocation", Box::pin(invocation::step_invocation())),
        ("journaled steps", Box::pin(throughput::journaled_steps())),
        ("small runs", Box::pin(throughput::small_runs())),
        ("peer shapes", Box::pin(throughput::peer_shapes())),
        ("object storage", Box::pin(object_storage::object_storage())),
        ("replay", Box::pin(recovery::replay())),
        ("cold start", Box::pin(recovery::cold_start())),
        ("fuel", Box::pin(invocation::fuel_cost())),
        ("outgoing http", Box::pin(invocation::outgoing_http())),
        ("memory", Box::pin(memory::suspended_runs())),
        ("tracing overhead", Box::pin(traces::tracing_overhead())),
        ("scaling", Box::pin(scaling::scaling(&images, "bench/"))),
        (
            "testing on virtual time",
            Box::pin(async { scenarios::day_long_saga() }),
        ),
        ("console runs page", Box::pin(console::runs_page())),
        ("operator controls", Box::pin(control::operator_controls())),
    ];
    // `cargo bench -p stepstone-bench -- replay journal` runs only the
    // benchmarks whose names contain a given word, into target/ instead.
    let only: Vec<String> = std::env::args().skip(1).filter(|arg| !arg.starts_with("--")).collect();
    let selected = |name: &str| only.is_empty() || only.iter().any(|word| name.contains(word.as_str()));
    let mut sections = Vec::new();
    for (name, benchmark) in benchmarks.into_iter().filter(|(name, _)| selected(name)) {
        eprintln!("bench: {name}…");
        let began = Instant::now();
        let section = runtime.block_on(benchmark).unwrap_or_else(|e| {
            let mut failed = Section::new(name, format!("**This benchmark failed:** {e:#}"));
            failed.rows.clear();
            failed
        });
        eprintln!("bench: {name} took {:.1} s", began.elapsed().as_secs_f64());
        sections.push(section);
    }
    fixtures::remove_scratch();
    let header = header(started.elapsed().as_secs_f64(), &load_before);
    let mut report = report::render(&header, &sections);
    let path = if only.is_empty() {
        docs.join("BENCHMARKS.md")
    } else {
        docs.join("../target/BENCHMARKS-partial.md")
    };
    report.push_str(&peers_section(&docs.join("BENCHMARKS.md")));
    report.push_str(NOTES);
    std::fs::write(&path, report)?;
    eprintln!(
        "bench: wrote {} in {:.0} s",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What the figures alone do not say: how the build was chosen, what was
/// optimised and what it bought, and why targets are missed.
const NOTES: &str = include_str!("NOTES.md");

/// The peer table `make bench-peers` wrote into `report` (bench/peers/run.py),
/// kept as it is: its figures come from a run of their own.
fn peers_section(report: &std::path::Path) -> String {
    const BEGIN: &str = "<!-- bench-peers: begin -->";
    const END: &str = "<!-- bench-peers: end -->";
    let old = std::fs::read_to_string(report).unwrap_or_default();
    match (old.find(BEGIN), old.find(END)) {
        (Some(begin), Some(end)) if begin < end => format!("\n{}\n", &old[begin..end + END.len()]),
        _ => String::new(),
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default().trim().to_owned()
}

fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// The machine and the conditions of this run.
fn header(seconds: f64, load_before: &str) -> String {
    let cpu = read_trimmed("/proc/cpuinfo")
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let memory = read_trimmed("/proc/meminfo")
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    let profile = std::env::var("STEPSTONE_BENCH_PROFILE").unwrap_or_else(|_| "unknown".into());
    format!(
        "# Stepstone benchmarks\n\n\
         Generated by `make bench` (bench/main.rs); do not edit by hand. Every ratio compares two figures \
         measured in this same run, on this machine; absolute numbers vary with the machine and its load.\n\n\
         * Date: {date}\n\
         * Machine: {cpu}, {cores} cores available; {memory}; Linux {kernel}\n\
         * Load average before the run: {load_before}; after: {load_after}\n\
         * Build: {profile}\n\
         * Duration of the benchmarks (excluding the build): {seconds:.0} s\n",
        date = command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        kernel = read_trimmed("/proc/sys/kernel/osrelease"),
        load_after = read_trimmed("/proc/loadavg"),
    )
}
