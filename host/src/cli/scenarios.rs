//! `stepstone test`: runs scenario files against their components on
//! virtual time, prints how each went, and writes JUnit XML for CI.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use stepstone::testing::junit::{self, JunitCase};
use stepstone::testing::{Harness, HarnessError, Scenario, ScenarioReport};

use super::read_file;

#[derive(Args)]
pub struct TestArgs {
    /// Scenario files (TOML; see the README's "Testing workflows").
    #[arg(required = true, value_name = "SCENARIO")]
    scenarios: Vec<PathBuf>,
    /// The component to test; without it, the one each scenario's
    /// `component` names.
    #[arg(long)]
    component: Option<PathBuf>,
    /// Also replay every scenario's journal against this build (the next
    /// version, say): one it does not replay identically fails the
    /// scenario, so a change that would break runs in flight fails here.
    #[arg(long, value_name = "BUILD.wasm")]
    replay_with: Option<PathBuf>,
    /// Run each scenario N more times with its steps' completions shuffled
    /// (each attempt takes a pseudo-random extra moment, seeded 1 to N), to
    /// catch logic that depends on which fanned-out step finishes first.
    #[arg(long, value_name = "N", num_args = 0..=1, require_equals = true, default_missing_value = "3")]
    shuffle_completions: Option<u64>,
    /// Write the results as JUnit XML to this file.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

/// What became of one scenario file.
struct Tried {
    source: String,
    name: String,
    /// Its runs (one per completion order), or why none could start.
    runs: Result<Vec<Result<ScenarioReport, HarnessError>>, String>,
}

pub fn run(args: TestArgs, cache_dir: &Path) -> anyhow::Result<ExitCode> {
    let replay_with = match &args.replay_with {
        Some(path) => Some((path.display().to_string(), read_file(path)?)),
        None => None,
    };
    let seeds: Vec<Option<u64>> = std::iter::once(None)
        .chain((1..=args.shuffle_completions.unwrap_or(0)).map(Some))
        .collect();
    let mut harnesses: BTreeMap<PathBuf, Harness> = BTreeMap::new();
    let mut tried = Vec::new();
    for path in &args.scenarios {
        let source = path.display().to_string();
        let name = path
            .file_stem()
            .map_or_else(|| source.clone(), |stem| stem.to_string_lossy().into_owned());
        let runs = prepare(path, args.component.as_deref(), &mut harnesses, cache_dir, &replay_with).map(
            |(harness, scenario)| {
                seeds
                    .iter()
                    .map(|seed| {
                        let ran = match seed {
                            None => harness.run(&scenario),
                            Some(seed) => harness.run_shuffled(&scenario, *seed),
                        };
                        match &ran {
                            Ok(report) => println!("{report}"),
                            Err(e) => println!("ERROR {name}: {e}"),
                        }
                        ran
                    })
                    .collect()
            },
        );
        if let Err(e) = &runs {
            println!("ERROR {name}: {e}");
        }
        tried.push(Tried { source, name, runs });
    }
    let (passed, total) = tally(&tried);
    println!("{passed} of {total} scenario runs passed");
    if let Some(path) = &args.junit {
        write_junit(path, &tried)?;
    }
    Ok(if passed == total {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The scenario at `path` and the harness of its component (made once per
/// component file), or why it cannot run.
fn prepare<'h>(
    path: &Path,
    component: Option<&Path>,
    harnesses: &'h mut BTreeMap<PathBuf, Harness>,
    cache_dir: &Path,
    replay_with: &Option<(String, bytes::Bytes)>,
) -> Result<(&'h Harness, Scenario), String> {
    let scenario = Scenario::load(path).map_err(|e| e.to_string())?;
    let component = component
        .map(Path::to_owned)
        .or_else(|| scenario.component.clone())
        .ok_or("the scenario names no component: give `component = \"FILE.wasm\"` in it, or --component")?;
    if !harnesses.contains_key(&component) {
        let bytes = read_file(&component).map_err(|e| format!("{e:#}"))?;
        let mut harness = Harness::new(bytes)
            .labelled(&component.display().to_string())
            .cache_dir(cache_dir);
        if let Some((label, build)) = replay_with {
            harness = harness.replay_with(label, build.clone());
        }
        harnesses.insert(component.clone(), harness);
    }
    let harness = harnesses.get(&component).ok_or("the component's harness is missing")?;
    Ok((harness, scenario))
}

/// How many scenario runs passed, of how many (a file that could not run
/// counts as one that failed).
fn tally(tried: &[Tried]) -> (usize, usize) {
    tried.iter().fold((0, 0), |(passed, total), file| match &file.runs {
        Ok(runs) => (
            passed
                + runs
                    .iter()
                    .filter(|run| run.as_ref().is_ok_and(ScenarioReport::passed))
                    .count(),
            total + runs.len(),
        ),
        Err(_) => (passed, total + 1),
    })
}

fn write_junit(path: &Path, tried: &[Tried]) -> anyhow::Result<()> {
    let mut cases = Vec::new();
    for file in tried {
        let case = |result| JunitCase {
            source: &file.source,
            result,
        };
        match &file.runs {
            Ok(runs) => cases.extend(runs.iter().map(|run| match run {
                Ok(report) => case(Ok(report)),
                Err(e) => case(Err((&file.name, e.to_string()))),
            })),
            Err(e) => cases.push(case(Err((&file.name, e.clone())))),
        }
    }
    let xml = junit::render("stepstone test", &cases).context("cannot write the JUnit report")?;
    std::fs::write(path, xml).with_context(|| format!("cannot write {}", path.display()))
}
