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

/// A goal from the issues: a bound on a figure, or on its ratio to its
/// baseline.
pub struct Target {
    pub text: String,
    bound: Bound,
    on_ratio: bool,
}

/// Which side of a limit a goal lies on.
#[derive(Clone, Copy)]
pub enum Bound {
    AtMost(f64),
    AtLeast(f64),
}

impl Target {
    /// By how many times the row falls short of the goal: at most 1 when
    /// it is met.
    fn shortfall(&self, row: &Row) -> f64 {
        let measured = match (&row.baseline, self.on_ratio) {
            (Some(baseline), true) => row.value / baseline.value,
            _ => row.value,
        };
        match self.bound {
            Bound::AtMost(limit) => measured / limit,
            Bound::AtLeast(limit) => limit / measured,
        }
    }

    fn met(&self, row: &Row) -> bool {
        self.shortfall(row) <= 1.0
    }

    /// "met", or by how much it was missed.
    fn verdict(&self, row: &Row) -> String {
        let shortfall = self.shortfall(row);
        if shortfall <= 1.0 {
            "met".into()
        } else {
            format!("**missed** by {shortfall:.1}×")
        }
    }
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

    /// A goal on the figure itself.
    pub fn target(mut self, text: impl Into<String>, bound: Bound) -> Self {
        self.target = Some(Target {
            text: text.into(),
            bound,
            on_ratio: false,
        });
        self
    }

    /// A goal on the figure's ratio to its baseline.
    pub fn ratio_target(mut self, text: impl Into<String>, bound: Bound) -> Self {
        self.target = Some(Target {
            text: text.into(),
            bound,
            on_ratio: true,
        });
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
    let met = targets.iter().filter(|(_, row, t)| t.met(row)).count();
    let _ = writeln!(out, "\n## Targets: {met} of {} met\n", targets.len());
    out.push_str("| Figure | Measured | Target | |\n|---|---|---|---|\n");
    for (section, row, target) in &targets {
        let measured = match (&row.baseline, target.on_ratio) {
            (Some(b), true) => format!("{} of {}", ratio(row.value, b.value), b.name),
            _ => format!("{} {}", number(row.value), row.unit),
        };
        let _ = writeln!(
            out,
            "| {}: {} | {measured} | {} | {} |",
            section.title,
            row.figure,
            target.text,
            target.verdict(row)
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
                let target = row
                    .target
                    .as_ref()
                    .map_or_else(|| "–".to_owned(), |t| format!("{} ({})", t.text, t.verdict(row)));
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
