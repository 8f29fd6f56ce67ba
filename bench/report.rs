//! The report: figures grouped in sections, each with the baseline it was
//! measured against in the same run, rendered as docs/BENCHMARKS.md.
//!
//! Invariant: a ratio is only ever computed between two figures of this
//! process, never against a number written down from another run.

use std::fmt::Write;

/// What a figure is compared with.
pub struct Baseline {
    pub name: String,
    pub value: f64,
}

/// A goal from the issue, and whether this run met it.
pub struct Target {
    pub text: String,
    pub met: bool,
}

/// One measured figure.
pub struct Row {
    pub figure: String,
    pub value: f64,
    pub unit: &'static str,
    pub baseline: Option<Baseline>,
    pub target: Option<Target>,
}

impl Row {
    pub fn new(figure: impl Into<String>, value: f64, unit: &'static str) -> Self {
        Self {
            figure: figure.into(),
            value,
            unit,
            baseline: None,
            target: None,
        }
    }

    pub fn against(mut self, name: impl Into<String>, value: f64) -> Self {
        self.baseline = Some(Baseline {
            name: name.into(),
            value,
        });
        self
    }

    /// A target the figure meets when `met`.
    pub fn target(mut self, text: impl Into<String>, met: bool) -> Self {
        self.target = Some(Target { text: text.into(), met });
        self
    }
}

/// A titled group of rows, with a note on how they were measured.
pub struct Section {
    pub title: String,
    pub how: String,
    pub rows: Vec<Row>,
    /// Extra Markdown after the table (plots, remarks).
    pub after: String,
}

impl Section {
    pub fn new(title: impl Into<String>, how: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            how: how.into(),
            rows: Vec::new(),
            after: String::new(),
        }
    }
}

/// A number with as many digits as it deserves.
pub fn number(value: f64) -> String {
    let magnitude = value.abs();
    if value.fract() == 0.0 && magnitude < 1e15 {
        group_thousands(value as i64)
    } else if magnitude >= 100.0 {
        let rounded = value.round() as i64;
        group_thousands(rounded)
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else if magnitude >= 0.1 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

fn group_thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    if n < 0 { format!("-{out}") } else { out }
}

fn ratio(value: f64, baseline: f64) -> String {
    if baseline == 0.0 {
        return "–".into();
    }
    let ratio = value / baseline;
    if ratio >= 10.0 {
        format!("{ratio:.0}×")
    } else {
        format!("{ratio:.2}×")
    }
}

/// The whole report as Markdown.
pub fn render(header: &str, sections: &[Section]) -> String {
    let mut out = String::from(header);
    let targets: Vec<(&Section, &Row, &Target)> = sections
        .iter()
        .flat_map(|s| s.rows.iter().filter_map(move |r| r.target.as_ref().map(|t| (s, r, t))))
        .collect();
    let met = targets.iter().filter(|(_, _, t)| t.met).count();
    let _ = writeln!(out, "\n## Targets: {met} of {} met\n", targets.len());
    out.push_str("| Figure | Measured | Target | |\n|---|---|---|---|\n");
    for (section, row, target) in &targets {
        let _ = writeln!(
            out,
            "| {}: {} | {} {} | {} | {} |",
            section.title,
            row.figure,
            number(row.value),
            row.unit,
            target.text,
            if target.met { "met" } else { "**missed**" }
        );
    }
    for section in sections {
        let _ = writeln!(out, "\n## {}\n\n{}\n", section.title, section.how);
        if !section.rows.is_empty() {
            out.push_str("| Figure | Measured | Baseline (same run) | Ratio | Target |\n|---|---|---|---|---|\n");
            for row in &section.rows {
                let (baseline, ratio) = match &row.baseline {
                    Some(b) => (
                        format!("{}: {} {}", b.name, number(b.value), row.unit),
                        ratio(row.value, b.value),
                    ),
                    None => ("–".into(), "–".into()),
                };
                let target = row.target.as_ref().map_or_else(
                    || "–".to_owned(),
                    |t| format!("{} ({})", t.text, if t.met { "met" } else { "**missed**" }),
                );
                let _ = writeln!(
                    out,
                    "| {} | {} {} | {baseline} | {ratio} | {target} |",
                    row.figure,
                    number(row.value),
                    row.unit
                );
            }
        }
        out.push_str(&section.after);
    }
    out
}
