//! Every dashboard view drawn on ratatui's `TestBackend` from fixed metrics and compared with
//! its golden text (`UPDATE_GOLDEN=1 cargo test -p icicle-tui` rewrites them after a deliberate
//! change; review the diff).

use std::collections::BTreeMap;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use icicle_core::metrics::{MetricsSnapshot, Series};
use icicle_tui::dashboard::{action_for, render, Action, App, KEYS, VIEWS};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

fn series(name: &str, kind: &str, labels: &[(&str, &str)], value: f64) -> Series {
    Series {
        name: name.into(),
        kind: kind.into(),
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
        value,
    }
}

/// Two moments one second apart: a Lustre MDT, a GPFS fileset, two sinks, a snapshot run.
fn fixed(t: f64, k: f64) -> MetricsSnapshot {
    let c = "counter";
    let g = "gauge";
    MetricsSnapshot {
        time: 1_800_000_000.0 + t,
        uptime: 60.0 + t,
        series: vec![
            series("icicle_records_in_total", c, &[("component", "mdt0")], 100_000.0 * k),
            series("icicle_records_in_total", c, &[("component", "fset1")], 50_000.0 * k),
            series("icicle_records_filtered_total", c, &[("component", "mdt0")], 20_000.0 * k),
            series("icicle_rejects_total", c, &[("component", "fset1")], 3.0),
            series("icicle_records_out_total", c, &[("component", "mdt0"), ("op", "update")], 30_000.0 * k),
            series("icicle_records_out_total", c, &[("component", "fset1"), ("op", "delete")], 5_000.0 * k),
            series("icicle_batches_total", c, &[("component", "mdt0")], 100.0 * k),
            series("icicle_batch_size", g, &[("component", "mdt0")], 1000.0),
            series("icicle_batch_seconds", g, &[("component", "mdt0")], 0.012),
            series("icicle_reduce_total", c, &[("component", "mdt0"), ("outcome", "coalesced")], 40_000.0 * k),
            series("icicle_reduce_total", c, &[("component", "mdt0"), ("outcome", "cancelled")], 8_000.0 * k),
            series("icicle_state_entries", g, &[("component", "mdt0")], 123_456.0),
            series("icicle_state_entries", g, &[("component", "fset1")], 7_890.0),
            series("icicle_state_bytes", g, &[("component", "mdt0")], 16_000_000.0),
            series("icicle_state_bytes", g, &[("component", "fset1")], 1_500_000.0),
            series("icicle_state_events_total", c, &[("component", "mdt0"), ("event", "evictions")], 12.0),
            series("icicle_state_events_total", c, &[("component", "mdt0"), ("event", "fid2path_calls")], 34.0),
            series("icicle_queue_depth", g, &[("component", "fset1")], 17.0),
            series("icicle_changelog_index", g, &[("component", "mdt0"), ("mdt", "fs0-MDT0000")], 100_000.0 * k),
            series("icicle_changelog_cleared", g, &[("component", "mdt0"), ("mdt", "fs0-MDT0000")], 99_000.0 * k),
            series("icicle_changelog_lag", g, &[("component", "mdt0"), ("mdt", "fs0-MDT0000")], 1_000.0),
            series(
                "icicle_kafka_committed_offset",
                g,
                &[("component", "fset1"), ("partition", "0"), ("topic", "fset1-topic")],
                25_000.0 * k,
            ),
            series(
                "icicle_kafka_lag",
                g,
                &[("component", "fset1"), ("partition", "0"), ("topic", "fset1-topic")],
                250.0,
            ),
            series("icicle_sink_batches_total", c, &[("kind", "ingest"), ("sink", "out")], 40.0 * k),
            series("icicle_sink_entries_total", c, &[("kind", "ingest"), ("sink", "out")], 30_000.0 * k),
            series("icicle_sink_entries_total", c, &[("kind", "delete"), ("sink", "out")], 5_000.0 * k),
            series("icicle_sink_bytes_total", c, &[("kind", "ingest"), ("sink", "out")], 12_000_000.0 * k),
            series("icicle_sink_errors_total", c, &[("kind", "ingest"), ("sink", "msk")], 1.0),
            series("icicle_sink_last_delivery_seconds", g, &[("sink", "out")], 0.004),
            series("icicle_sink_batches_total", c, &[("kind", "ingest"), ("sink", "globus")], 8.0 * k),
            series("icicle_globus_retries_total", c, &[("reason", "429"), ("sink", "globus")], 3.0),
            series("icicle_globus_last_task_seconds", g, &[("sink", "globus")], 1.25),
            series("icicle_snapshot_work_done_units", g, &[], 600.0 * k),
            series("icicle_snapshot_work_planned_units", g, &[], 2000.0),
            series("icicle_snapshot_eta_seconds", g, &[], 2.0),
            series("icicle_process_resident_bytes", g, &[], 52_428_800.0),
            series("icicle_snapshot_inputs_done", g, &[], 12.0),
            series("icicle_snapshot_inputs_planned", g, &[], 40.0),
            series("icicle_snapshot_rows_total", c, &[("source", "listing")], 2_000_000.0 * k),
        ],
    }
}

fn draw(app: &App) -> String {
    draw_at(app, 100, 28)
}

fn draw_at(app: &App, width: u16, height: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(width, height)).unwrap();
    t.draw(|f| render(f, app)).unwrap();
    let buf = t.backend().buffer();
    let mut out = String::new();
    for y in 0..buf.area.height {
        let line: String = (0..buf.area.width).map(|x| buf[(x, y)].symbol().to_string()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn app() -> App {
    let mut a = App::new("127.0.0.1:9898");
    a.push(fixed(0.0, 1.0));
    a.push(fixed(1.0, 1.1));
    a.sketches = Some(
        "sketch,bytes,median rank error,p99 rank error\nddsketch,2048,0.0021,0.0094\nkll,1600,0.0047,0.0102\n".into(),
    );
    a
}

fn golden(name: &str, got: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.txt"));
    if std::env::var("UPDATE_GOLDEN").is_ok() {
        std::fs::write(&path, got).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} missing: run with UPDATE_GOLDEN=1 and review it", path.display()));
    assert_eq!(got, want, "{name} differs from {}:\n{got}", path.display());
}

#[test]
fn every_view_matches_its_golden_text() {
    let mut a = app();
    for (i, v) in VIEWS.iter().enumerate() {
        a.apply(Action::Go(i));
        golden(&v.title().to_lowercase(), &draw(&a));
    }
    a.apply(Action::Help);
    golden("help", &draw(&a));
}

#[test]
fn the_sketches_view_scrolls_through_every_row() {
    let mut a = app();
    let mut csv = String::from("sketch,attribute,rank error\n");
    for i in 0..40 {
        csv.push_str(&format!("s{i:02},size,0.00{i}\n"));
    }
    a.sketches = Some(csv);
    a.apply(Action::Go(5));
    let first = draw_at(&a, 80, 24);
    assert!(first.contains("s00") && !first.contains("s39") && first.contains("rows 1-"), "{first}");
    for _ in 0..100 {
        a.apply(Action::Scroll(10));
    }
    let last = draw_at(&a, 80, 24);
    assert!(last.contains("s39") && !last.contains("s00") && last.contains("of 40"), "{last}");
    a.apply(Action::Scroll(-1000));
    assert_eq!(draw_at(&a, 80, 24), first);
}

#[test]
fn every_view_fits_80_columns() {
    let mut a = app();
    for (i, v) in VIEWS.iter().enumerate() {
        a.apply(Action::Go(i));
        let got = draw_at(&a, 80, 24);
        // Nothing cut: every header of the view's tables is whole.
        for h in ["last siz", "evictio", "fid2pat"] {
            assert!(!got.contains(&format!("{h}│")), "{}: a header is cut:\n{got}", v.title());
        }
        golden(&format!("{}-80x24", v.title().to_lowercase()), &got);
    }
}

#[test]
fn one_key_table_drives_dispatch_and_help() {
    let key = |c: KeyCode, m: KeyModifiers| action_for(&KeyEvent::new(c, m));
    assert_eq!(key(KeyCode::Char('q'), KeyModifiers::NONE), Some(Action::Quit));
    assert_eq!(key(KeyCode::Esc, KeyModifiers::NONE), Some(Action::Quit));
    assert_eq!(key(KeyCode::Char('c'), KeyModifiers::CONTROL), Some(Action::Quit));
    assert_eq!(key(KeyCode::Tab, KeyModifiers::NONE), Some(Action::Next));
    assert_eq!(key(KeyCode::BackTab, KeyModifiers::SHIFT), Some(Action::Previous));
    assert_eq!(key(KeyCode::Char('3'), KeyModifiers::NONE), Some(Action::Go(2)));
    assert_eq!(key(KeyCode::Char('9'), KeyModifiers::NONE), None);
    assert_eq!(key(KeyCode::Char('p'), KeyModifiers::NONE), Some(Action::Pause));
    assert_eq!(key(KeyCode::Char('?'), KeyModifiers::NONE), Some(Action::Help));
    assert_eq!(key(KeyCode::Char('x'), KeyModifiers::NONE), None);
    assert_eq!(key(KeyCode::Down, KeyModifiers::NONE), Some(Action::Scroll(1)));
    assert_eq!(key(KeyCode::PageUp, KeyModifiers::NONE), Some(Action::Scroll(-10)));
    let mut a = app();
    a.apply(Action::Help);
    let screen = draw(&a);
    for (k, d, _) in KEYS {
        assert!(screen.contains(k) && screen.contains(d), "help lacks {k} {d}");
    }
    // Esc closes help before it quits; Tab wraps; pause freezes the data.
    a.apply(Action::Quit);
    assert!(!a.help && !a.quit);
    a.apply(Action::Previous);
    assert_eq!(a.view, VIEWS.len() - 1);
    a.apply(Action::Pause);
    let n = a.history.len();
    a.push(fixed(2.0, 1.2));
    assert_eq!(a.history.len(), n);
}

/// The tables of a drawing: each header (its column starts) and rows, inside the borders.
fn tables(drawing: &str) -> Vec<(Vec<usize>, Vec<String>)> {
    let mut out: Vec<(Vec<usize>, Vec<String>)> = Vec::new();
    let mut open = false;
    for line in drawing.lines() {
        let inner: String = line.chars().skip(1).collect::<String>().trim_end_matches('│').to_string();
        if line.starts_with('└') || line.starts_with('┌') {
            open = false;
        } else if line.starts_with("│source ") || line.starts_with("│sink ") {
            let starts: Vec<usize> = inner
                .char_indices()
                .filter(|(i, c)| *c != ' ' && (*i == 0 || inner[..*i].ends_with(' ')))
                .map(|(i, _)| i)
                .collect();
            out.push((starts, Vec::new()));
            open = true;
        } else if open && !inner.trim().is_empty() {
            if let Some(t) = out.last_mut() {
                t.1.push(inner);
            }
        }
    }
    out
}

/// Narrower than 80 columns, a table keeps the columns that fit whole and says how many it
/// left out: each row is the same row drawn wide, up to the first column left out (no cell
/// cut, no unit lost: `123.5 k` never shows as `123.5`).
#[test]
fn narrow_tables_leave_columns_out_instead_of_cutting_them() {
    let mut a = app();
    for (i, v) in VIEWS.iter().enumerate() {
        a.apply(Action::Go(i));
        let wide = tables(&draw_at(&a, 200, 28));
        for width in [40u16, 52, 64, 72] {
            let drawn = draw_at(&a, width, 28);
            let narrow = tables(&drawn);
            assert_eq!(narrow.len(), wide.len(), "{v:?} at {width}:\n{drawn}");
            for ((n_cols, n_rows), (w_cols, w_rows)) in narrow.iter().zip(&wide) {
                let kept = n_cols.len();
                assert!(kept >= 1 && kept <= w_cols.len());
                for (n, w) in n_rows.iter().zip(w_rows) {
                    let end = w_cols.get(kept).copied().unwrap_or(w.len()).min(w.len());
                    assert_eq!(n.trim_end(), w[..end].trim_end(), "{v:?} at {width} columns cut a cell:\n{drawn}");
                }
            }
        }
    }
    a.apply(Action::Go(2));
    assert!(draw_at(&a, 64, 28).contains("┌ +2 columns (widen) · state and memory"), "{}", draw_at(&a, 64, 28));
}

/// Attached to a monitor (no snapshot figures) without a sketch comparison, the dashboard
/// offers neither the snapshot view nor the sketches': not in the tabs, not by key, skipped by
/// Tab; they come once their figures do.
#[test]
fn views_with_nothing_to_show_are_not_offered() {
    let monitor = |t: f64, k: f64| {
        let mut s = fixed(t, k);
        s.series.retain(|x| !x.name.starts_with("icicle_snapshot_"));
        s
    };
    let mut a = App::new("127.0.0.1:9898");
    a.push(monitor(0.0, 1.0));
    a.push(monitor(1.0, 1.1));
    let screen = draw(&a);
    assert!(screen.contains("4 Sinks") && !screen.contains("5 Snapshot") && !screen.contains("6 Sketches"), "{screen}");
    a.apply(Action::Go(4));
    assert_eq!(a.view, 0, "the snapshot view is not offered");
    a.apply(Action::Go(3));
    a.apply(Action::Next);
    assert_eq!(a.view, 0, "Tab from the last offered view wraps to the first");
    a.apply(Action::Previous);
    assert_eq!(a.view, 3);
    // A snapshot's figures arrive: its view is offered.
    a.push(fixed(2.0, 1.2));
    assert!(draw(&a).contains("5 Snapshot"));
    a.apply(Action::Go(4));
    assert_eq!(a.view, 4);
}
