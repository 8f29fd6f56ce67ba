//! Scaling curves as small SVG line charts, one series per chart, on a
//! logarithmic x axis.
//!
//! Written out by hand rather than with plotters: plotters turns on
//! num-traits' `std` feature, which changes the features of the host's own
//! dependencies and rebuilds them whenever one switches between `make test`
//! and `make bench`.

use std::fmt::Write;
use std::path::Path;

/// One chart's labels.
pub struct Chart<'a> {
    pub title: &'a str,
    pub x: &'a str,
    pub y: &'a str,
}

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 400.0;
/// Room for the axes' labels: left, right, top, bottom.
const MARGIN: (f64, f64, f64, f64) = (80.0, 30.0, 40.0, 50.0);
const GRID_LINES: usize = 5;

/// Draws `points` (every x > 0) into an SVG file at `path`.
pub fn line_chart(path: &Path, chart: &Chart, points: &[(f64, f64)]) -> anyhow::Result<()> {
    std::fs::write(path, svg(chart, points))?;
    Ok(())
}

fn svg(chart: &Chart, points: &[(f64, f64)]) -> String {
    let (left, right, top, bottom) = MARGIN;
    let (plot_w, plot_h) = (WIDTH - left - right, HEIGHT - top - bottom);
    let log_min = points.iter().map(|p| p.0.log10()).fold(f64::INFINITY, f64::min);
    let log_max = points.iter().map(|p| p.0.log10()).fold(f64::NEG_INFINITY, f64::max);
    let log_span = (log_max - log_min).max(1e-9);
    let y_max = points.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.15;
    let x_at = |x: f64| left + (x.log10() - log_min) / log_span * plot_w;
    let y_at = |y: f64| top + plot_h - y / y_max * plot_h;
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="24" text-anchor="middle" font-size="16">{}</text>
"#,
        WIDTH / 2.0,
        chart.title
    );
    for i in 0..=GRID_LINES {
        let value = y_max * i as f64 / GRID_LINES as f64;
        let y = y_at(value);
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + plot_w,
            left - 6.0,
            y + 4.0,
            crate::report::number(value)
        );
    }
    for &(x, _) in points {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x_at(x),
            top + plot_h + 18.0,
            crate::report::number(x)
        );
    }
    let line: Vec<String> = points
        .iter()
        .map(|&(x, y)| format!("{:.1},{:.1}", x_at(x), y_at(y)))
        .collect();
    let _ = writeln!(
        out,
        r#"<polyline points="{}" fill="none" stroke="steelblue" stroke-width="2"/>"#,
        line.join(" ")
    );
    for &(x, y) in points {
        let _ = writeln!(
            out,
            r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="steelblue"><title>{}: {}</title></circle>"#,
            x_at(x),
            y_at(y),
            crate::report::number(x),
            crate::report::number(y)
        );
    }
    let _ = write!(
        out,
        r#"<line x1="{left}" y1="{top}" x2="{left}" y2="{:.1}" stroke="black"/>
<line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="black"/>
<text x="{:.1}" y="{:.1}" text-anchor="middle">{} (log scale)</text>
<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">{}</text>
</svg>
"#,
        top + plot_h,
        top + plot_h,
        left + plot_w,
        top + plot_h,
        left + plot_w / 2.0,
        HEIGHT - 10.0,
        chart.x,
        top + plot_h / 2.0,
        chart.y
    );
    out
}
