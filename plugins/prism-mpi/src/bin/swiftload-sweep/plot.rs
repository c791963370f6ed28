//! `swiftload-sweep --plot`: the seed's result as a curve: seconds against I/O loaders,
//! object-level against file-level scheduling, one panel per application (log–log, PNG).

use std::path::Path;

use plotters::prelude::*;

/// One modelled run.
pub struct Point {
    /// The application (`augment (CIFAR-10)`, `dedup (app outputs)`).
    pub app: String,
    /// I/O loaders.
    pub loaders: usize,
    /// Seconds with object-level scheduling.
    pub object: f64,
    /// Seconds with file-level scheduling.
    pub file: f64,
}

const OBJECT: RGBColor = RGBColor(31, 119, 180);
const FILE: RGBColor = RGBColor(214, 39, 40);

/// Register a system font under "sans-serif"; without one the chart has no text.
fn font() -> bool {
    [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    ]
    .iter()
    .find_map(|p| std::fs::read(p).ok())
    .is_some_and(|b| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, Box::leak(b.into_boxed_slice())).is_ok()
    })
}

/// Draw `points` (every app's loader counts) into a 1200 × 520 PNG at `path`.
pub fn draw(points: &[Point], caption: &str, path: &Path) -> anyhow::Result<()> {
    let text = font();
    let mut apps: Vec<&str> = points.iter().map(|p| p.app.as_str()).collect();
    apps.dedup();
    let root = BitMapBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = if text { root.titled(&format!("swiftload-sweep: {caption}"), ("sans-serif", 20))? } else { root };
    for (panel, app) in root.split_evenly((1, apps.len().max(1))).iter().zip(&apps) {
        let mine: Vec<&Point> = points.iter().filter(|p| p.app == *app).collect();
        let (lo_n, hi_n) = mine.iter().fold((usize::MAX, 0), |(a, b), p| (a.min(p.loaders), b.max(p.loaders)));
        let secs = mine.iter().flat_map(|p| [p.object, p.file]).filter(|s| *s > 0.0);
        let (lo_s, hi_s) = secs.fold((f64::INFINITY, 0.0f64), |(a, b), s| (a.min(s), b.max(s)));
        if mine.is_empty() || !lo_s.is_finite() {
            continue;
        }
        let mut chart = ChartBuilder::on(panel);
        chart.margin(16);
        if text {
            chart.caption(*app, ("sans-serif", 18)).x_label_area_size(40).y_label_area_size(60);
        }
        let ticks: Vec<f64> = mine.iter().map(|p| p.loaders as f64).collect();
        let mut chart = chart.build_cartesian_2d(
            ((lo_n as f64 / 1.3)..(hi_n as f64 * 1.3)).log_scale().with_key_points(ticks),
            ((lo_s / 1.5)..(hi_s * 1.5)).log_scale().with_key_points(steps(lo_s / 1.5, hi_s * 1.5)),
        )?;
        if text {
            chart
                .configure_mesh()
                .x_desc("I/O loaders")
                .y_desc("seconds (model)")
                .x_label_formatter(&|v| format!("{v:.0}"))
                .y_label_formatter(&|v| format!("{v}"))
                .draw()?;
        }
        for (label, color, pick) in
            [("object-level", OBJECT, (|p: &Point| p.object) as fn(&Point) -> f64), ("file-level", FILE, |p| p.file)]
        {
            let line: Vec<(f64, f64)> = mine.iter().map(|p| (p.loaders as f64, pick(p))).collect();
            let series = chart.draw_series(LineSeries::new(line.clone(), color.stroke_width(3)))?;
            if text {
                series
                    .label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
            }
            chart.draw_series(line.iter().map(|&(x, y)| Circle::new((x, y), 5, color.filled())))?;
        }
        if text {
            chart.configure_series_labels().background_style(WHITE.mix(0.9)).border_style(BLACK).draw()?;
        }
    }
    root.present()?;
    Ok(())
}

/// The 1–2–5 values between `lo` and `hi` (a log axis's labels).
fn steps(lo: f64, hi: f64) -> Vec<f64> {
    (-3..6).flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e))).filter(|v| (lo..=hi).contains(v)).collect()
}
