//! Scaling curves: steps/s as a workflow grows longer, runs/s as more runs
//! run at once; the cost per step should stay flat. Plotted into SVGs
//! beside the report.

use std::path::Path;

use crate::fixtures::{Backend, Host, served_config};
use crate::measure::{micros, rate};
use crate::plot::{Chart, line_chart};
use crate::report::{Row, Section};

/// Steps run for each point of the length curve, at least.
const STEPS_PER_POINT: u32 = 2000;

pub async fn scaling(images: &Path, link_prefix: &str) -> anyhow::Result<Section> {
    let mut section = Section::new(
        "Scaling (local FS)",
        "Workflow length: runs of `sequential` with 10 to 10,000 steps, one at a time, repeated until \
         each point ran at least 2,000 steps. Concurrency: runs of `three-steps`, 1 to 1,000 at once \
         (at least 200 runs, or twice the concurrency). Baseline of each row: the first point of its \
         curve, so the ratio is how the cost per step moved.",
    );
    let host = Host::new(Backend::LocalFs, served_config()).await?;
    host.run("sequential", 10).await?;
    let mut by_length = Vec::new();
    let mut first_cost = None;
    for length in [10u32, 100, 1000, 10_000] {
        let runs = (STEPS_PER_POINT / length).max(1) as usize;
        let took = host.run_many("sequential", length, runs, 1).await?;
        let steps = runs * length as usize;
        let cost = micros(took) / steps as f64;
        let first = *first_cost.get_or_insert(cost);
        by_length.push((f64::from(length), rate(steps, took)));
        section.rows.push(
            Row::new(format!("workflow of {length} steps: cost per step"), cost, "µs").against("10 steps", first),
        );
    }
    let mut by_concurrency = Vec::new();
    let mut first_cost = None;
    for concurrency in [1usize, 10, 100, 1000] {
        let runs = (2 * concurrency).max(200);
        let took = host.run_many("three-steps", 3, runs, concurrency).await?;
        let cost = micros(took) / (runs * 3) as f64;
        let first = *first_cost.get_or_insert(cost);
        by_concurrency.push((concurrency as f64, rate(runs, took)));
        section.rows.push(
            Row::new(format!("{concurrency} runs at once: wall time per step"), cost, "µs").against("1 at once", first),
        );
    }
    let length_chart = Chart {
        title: "Journaled steps/s by workflow length (local FS)",
        x: "steps in the workflow",
        y: "steps/s",
    };
    line_chart(&images.join("scaling-length.svg"), &length_chart, &by_length)?;
    let concurrency_chart = Chart {
        title: "Runs/s of a 3-step workflow by concurrent runs (local FS)",
        x: "runs at once",
        y: "runs/s",
    };
    line_chart(
        &images.join("scaling-concurrency.svg"),
        &concurrency_chart,
        &by_concurrency,
    )?;
    section.after = format!(
        "\n![steps/s by workflow length]({link_prefix}scaling-length.svg)\n\n\
         ![runs/s by concurrent runs]({link_prefix}scaling-concurrency.svg)\n"
    );
    Ok(section)
}
