//! The sketch comparison's charts (PNG, 1200 px wide): value error against rank error in one
//! panel per attribute, every quantile marked and labelled, with the α line (DDSketch's
//! relative-accuracy bound); and the distributions (ECDF) of both errors per sketch.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::compare::{Measurement, SummaryRow, ATTRS};

/// DDSketch's default relative accuracy: its value error stays under it.
const ALPHA: f64 = 0.01;
const COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    BLACK,
];

/// Register a system font under "sans-serif"; without one the charts carry no text.
fn font() -> bool {
    [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    ]
    .iter()
    .find_map(|p| std::fs::read(p).ok())
    .is_some_and(|bytes| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, Box::leak(bytes.into_boxed_slice())).is_ok()
    })
}

/// A log axis label: `0.01`, `1e-5`.
fn short(v: f64) -> String {
    if (1e-3..1e4).contains(&v) {
        format!("{}", (v * 1e6).round() / 1e6)
    } else {
        format!("{v:.0e}")
    }
}

fn sketches(rows: &[SummaryRow]) -> Vec<String> {
    let mut v: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    v.sort();
    v.dedup();
    v
}

/// Value error (mean) against rank error (mean) per sketch and quantile, one panel per attribute.
pub fn scatter(rows: &[SummaryRow], path: &Path) -> anyhow::Result<()> {
    let text = font();
    let root = BitMapBackend::new(path, (1200, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = if text {
        root.titled(
            "sketch-compare: mean value error vs mean rank error, per attribute and quantile",
            ("sans-serif", 24),
        )?
    } else {
        root
    };
    let names = sketches(rows);
    // One scale for every panel, fitted to the points (and the α line), a factor 2 around them.
    let pts = rows.iter().filter(|r| r.1 != "all");
    let span = |v: Vec<f64>| -> (f64, f64) {
        let lo = v.iter().copied().filter(|x| *x > 0.0).fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0f64, f64::max);
        if lo.is_finite() && hi > 0.0 {
            (lo / 2.0, hi * 2.0)
        } else {
            (1e-5, 1.0)
        }
    };
    let x = span(pts.clone().map(|r| r.3[3]).collect());
    let y = span(pts.map(|r| r.3[0]).chain([ALPHA]).collect());
    for (panel, attr) in root.split_evenly((2, 2)).iter().zip(ATTRS) {
        panel_scatter(panel, rows, &names, attr, (x, y), text)?;
    }
    root.present()?;
    Ok(())
}

/// Axis ranges: (x from, x to), (y from, y to).
type Ranges = ((f64, f64), (f64, f64));

fn panel_scatter(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    rows: &[SummaryRow],
    names: &[String],
    attr: &str,
    (x, y): Ranges,
    text: bool,
) -> anyhow::Result<()> {
    let mut b = ChartBuilder::on(area);
    b.margin(12);
    if text {
        b.caption(attr, ("sans-serif", 20)).x_label_area_size(40).y_label_area_size(60);
    }
    let mut chart = b.build_cartesian_2d((x.0..x.1).log_scale(), (y.0..y.1).log_scale())?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc("normalized rank error |r(est) - r*| / N")
            .y_desc("relative value error |est - exact| / |exact|")
            .label_style(("sans-serif", 13))
            .x_label_formatter(&|v| short(*v))
            .y_label_formatter(&|v| short(*v));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw()?;
    // The α line: DDSketch's guarantee on value error.
    let alpha = chart.draw_series(LineSeries::new(
        [(x.0, ALPHA), (x.1, ALPHA)],
        ShapeStyle::from(&BLACK.mix(0.6)).stroke_width(2),
    ))?;
    if text {
        alpha
            .label(format!("α = {ALPHA} (DDSketch bound)"))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.mix(0.6)));
    }
    for (i, name) in names.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64, &str)> = rows
            .iter()
            .filter(|r| &r.0 == name && r.1 == attr)
            .map(|r| (r.3[3].clamp(x.0, x.1), r.3[0].clamp(y.0, y.1), r.2.as_str()))
            .collect();
        let s = chart.draw_series(pts.iter().map(|(x, y, _)| Circle::new((*x, *y), 5, c.filled())))?;
        if text {
            s.label(name.as_str()).legend(move |(x, y)| Circle::new((x + 10, y), 5, c.filled()));
            chart.draw_series(pts.iter().map(|(x, y, q)| {
                Text::new(q.to_string(), (*x * 1.15, *y), ("sans-serif", 12).into_font().color(&c))
            }))?;
        }
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()?;
    }
    Ok(())
}

/// The empirical CDF of value errors and of rank errors per sketch, over every measurement.
pub fn ecdf(ms: &[Measurement], rows: &[SummaryRow], path: &Path) -> anyhow::Result<()> {
    let text = font();
    let root = BitMapBackend::new(path, (1200, 550)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = if text {
        root.titled(
            "sketch-compare: distribution of errors over every principal, attribute and quantile",
            ("sans-serif", 22),
        )?
    } else {
        root
    };
    let names = sketches(rows);
    let (left, right) = root.split_horizontally(600);
    for (area, what, pick) in [(&left, "relative value error", 0usize), (&right, "normalized rank error", 1)] {
        let mut b = ChartBuilder::on(area);
        b.margin(14);
        if text {
            b.caption(what, ("sans-serif", 18)).x_label_area_size(40).y_label_area_size(55);
        }
        let all: Vec<f64> = ms
            .iter()
            .map(|m| if pick == 0 { m.value_error } else { m.rank_error })
            .filter(|x| x.is_finite() && *x > 0.0)
            .collect();
        let lo = all.iter().copied().fold(f64::INFINITY, f64::min).min(if pick == 0 { ALPHA } else { f64::INFINITY });
        let hi = all.iter().copied().fold(0.0f64, f64::max).max(if pick == 0 { ALPHA } else { 0.0 });
        let (lo, hi) = if lo.is_finite() && hi > 0.0 { (lo / 2.0, hi * 2.0) } else { (1e-6, 10.0) };
        let mut chart = b.build_cartesian_2d((lo..hi).log_scale(), 0f64..1.0f64)?;
        let mut mesh = chart.configure_mesh();
        if text {
            mesh.x_desc(what)
                .y_desc("fraction of measurements ≤ x")
                .label_style(("sans-serif", 13))
                .x_label_formatter(&|v| short(*v));
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw()?;
        if pick == 0 {
            let a = chart.draw_series(LineSeries::new(
                [(ALPHA, 0.0), (ALPHA, 1.0)],
                ShapeStyle::from(&BLACK.mix(0.6)).stroke_width(2),
            ))?;
            if text {
                a.label(format!("α = {ALPHA}"))
                    .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.mix(0.6)));
            }
        }
        for (i, name) in names.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let mut v: Vec<f64> = ms
                .iter()
                .filter(|m| &m.sketch == name)
                .map(|m| if pick == 0 { m.value_error } else { m.rank_error })
                .filter(|x| x.is_finite())
                .collect();
            v.sort_by(|a, b| a.total_cmp(b));
            let n = v.len().max(1) as f64;
            let steps = v.iter().enumerate().map(|(k, x)| (x.clamp(lo, hi), (k + 1) as f64 / n));
            let s = chart.draw_series(LineSeries::new(steps, ShapeStyle::from(&c).stroke_width(2)))?;
            if text {
                s.label(name.as_str()).legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], ShapeStyle::from(&c).stroke_width(2))
                });
            }
        }
        if text {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .draw()?;
        }
    }
    root.present()?;
    Ok(())
}
