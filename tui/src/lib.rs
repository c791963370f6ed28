//! Terminal presentation: a progress bar for snapshot runs (stderr, only on a terminal)
//! and the final summary table; the live dashboard in [`dashboard`], run on a terminal (or as
//! log lines) by [`session`]. The dashboard (ratatui, crossterm) is the `dashboard` feature,
//! on by default; without it the progress bar and the summary table are all there is.

#[cfg(feature = "dashboard")]
pub mod dashboard;
#[cfg(feature = "dashboard")]
pub mod session;

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use icicle_runtime::snapshot::{Progress, SinkDelivery, SnapshotSummary};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar on stderr when it is a terminal; periodic log lines otherwise.
pub struct TerminalProgress {
    bar: Option<ProgressBar>,
    done: AtomicU64,
    total: AtomicU64,
    last_line: Mutex<Instant>,
    started: Instant,
    /// Each sink's deliveries, as last reported.
    sinks: Mutex<std::collections::BTreeMap<String, SinkDelivery>>,
    /// When "delivering" was last written as a line (no terminal).
    last_delivery_line: Mutex<Option<Instant>>,
}

impl TerminalProgress {
    /// Choose the bar or log lines depending on whether stderr is a terminal.
    pub fn new(enabled: bool) -> TerminalProgress {
        let bar = (enabled && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(4));
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] [{wide_bar}] {percent}% ({eta} left) {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b
        });
        TerminalProgress {
            bar,
            done: AtomicU64::new(0),
            total: AtomicU64::new(0),
            last_line: Mutex::new(Instant::now()),
            started: Instant::now(),
            sinks: Mutex::new(std::collections::BTreeMap::new()),
            last_delivery_line: Mutex::new(None),
        }
    }
}

impl Progress for TerminalProgress {
    fn start(&self, total: u64) {
        self.total.store(total, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            if total == 0 {
                b.set_style(
                    ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
            }
            b.set_length(total);
        }
    }

    fn inc(&self, units: u64) {
        let done = self.done.fetch_add(units, Ordering::Relaxed) + units;
        if let Some(b) = &self.bar {
            b.inc(units);
            return;
        }
        if let Ok(mut last) = self.last_line.try_lock() {
            if last.elapsed().as_secs() >= 10 {
                *last = Instant::now();
                let total = self.total.load(Ordering::Relaxed);
                let pct =
                    if total > 0 { format!(" ({:.1}%)", 100.0 * done as f64 / total as f64) } else { String::new() };
                eprintln!("progress: {done}/{total}{pct} after {:.0} s", self.started.elapsed().as_secs_f64());
            }
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }

    /// Once reading is over, the bar becomes a spinner saying what each sink has delivered and
    /// which one is busy (without a terminal: a line when delivery outlasts reading, then at
    /// most every 10 s).
    fn delivery(&self, sink: &str, done: &SinkDelivery) {
        let Ok(mut sinks) = self.sinks.lock() else { return };
        sinks.insert(sink.to_string(), *done);
        let total = self.total.load(Ordering::Relaxed);
        if self.done.load(Ordering::Relaxed) < total {
            return;
        }
        let line = delivery_line(&sinks);
        drop(sinks);
        if let Some(b) = &self.bar {
            if b.message().is_empty() {
                b.set_style(
                    ProgressStyle::with_template("{spinner} [{elapsed_precise}] reading done; {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                b.enable_steady_tick(std::time::Duration::from_millis(250));
            }
            b.set_message(line);
            return;
        }
        if let Ok(mut last) = self.last_delivery_line.lock() {
            if last.is_none_or(|t| t.elapsed().as_secs() >= 10) && done.busy {
                *last = Some(Instant::now());
                eprintln!("reading done; {line} after {:.0} s", self.started.elapsed().as_secs_f64());
            }
        }
    }
}

/// `delivering: globus 12 documents (busy), out 40 documents`.
fn delivery_line(sinks: &std::collections::BTreeMap<String, SinkDelivery>) -> String {
    let parts: Vec<String> = sinks
        .iter()
        .map(|(name, d)| {
            format!(
                "{name} {} document{}{}",
                d.documents,
                if d.documents == 1 { "" } else { "s" },
                if d.busy { " (one in flight)" } else { "" }
            )
        })
        .collect();
    format!("delivering: {}", parts.join(", "))
}

/// `1.23 M` style.
pub fn human(n: f64) -> String {
    // An empty sum is -0.0: show it as 0.
    let n = n + 0.0;
    if n >= 1e9 {
        format!("{:.2} G", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.2} M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1} k", n / 1e3)
    } else if n.fract() == 0.0 {
        format!("{n:.0}")
    } else {
        format!("{n:.1}")
    }
}

/// One sink's line of the summary: `40 documents (2 of deletes), 12345 entries, 1.2 MB in
/// 17.2 s; requests 85, retries 3, tasks submitted 40, ...`.
fn sink_facts(f: &serde_json::Value) -> String {
    let n = |k: &str| f[k].as_u64().unwrap_or(0);
    let mut line = format!(
        "{} documents ({} of deletes), {} entries, {}B in {:.1} s",
        n("documents"),
        n("delete_documents"),
        n("entries"),
        human(n("bytes") as f64),
        f["seconds"].as_f64().unwrap_or(0.0)
    );
    if n("dead_lettered") > 0 {
        line.push_str(&format!(", {} dead-lettered", n("dead_lettered")));
    }
    if let Some(own) = f["sink"].as_object() {
        let told: Vec<String> = own
            .iter()
            .filter(|(_, v)| v.is_number() || v.is_boolean())
            .map(|(k, v)| format!("{} {v}", k.replace('_', " ")))
            .collect();
        if !told.is_empty() {
            line.push_str("; ");
            line.push_str(&told.join(", "));
        }
    }
    line
}

/// The final summary table of a snapshot run.
pub fn summary_table(s: &SnapshotSummary) -> String {
    let mut rows: Vec<(&str, String)> = vec![
        ("rows read", s.rows.to_string()),
        ("  records", s.records.to_string()),
        ("  directories", s.directories.to_string()),
        ("  rejects", s.rejects.to_string()),
        ("  withdrawn (nobody may see)", s.withdrawn.to_string()),
        ("records emitted", s.emitted.to_string()),
        ("  dead-lettered", s.dead_lettered.to_string()),
        ("inputs (splits)", s.splits.to_string()),
        ("batches", s.batches.to_string()),
        ("bytes", format!("{} ({}B)", s.bytes, human(s.bytes as f64))),
    ];
    if s.versioned {
        rows.push(("created", s.created.to_string()));
        rows.push(("updated", s.updated.to_string()));
        rows.push(("unchanged", s.unchanged.to_string()));
        rows.push(("deleted", s.deleted.to_string()));
        if s.deletes_withheld > 0 {
            rows.push(("deletes withheld", s.deletes_withheld.to_string()));
        }
        if s.withheld_runs > 0 {
            rows.push(("runs in a row withholding deletes", s.withheld_runs.to_string()));
        }
    }
    if s.aggregate_records > 0 {
        rows.push(("aggregate records", s.aggregate_records.to_string()));
    }
    for (name, report) in &s.pipelines {
        let line = match name.as_str() {
            "counting" => format!("{} principals → {}", report["principals"], report["output"].as_str().unwrap_or("")),
            "aggregate" => format!(
                "{} principals, {} sketch ({}), {} B of sketches",
                report["principals"],
                report["sketch"].as_str().unwrap_or(""),
                report["sketch_config"].as_str().unwrap_or(""),
                report["sketch_memory_bytes"]
            ),
            _ => report.to_string(),
        };
        rows.push((if name == "counting" { "counting" } else { "aggregate" }, line));
    }
    for (name, facts) in &s.sinks {
        rows.push(("sink", format!("{name}: {}", sink_facts(facts))));
    }
    rows.push(("seconds", format!("{:.3}", s.seconds)));
    rows.push(("rows/s", human(s.rows_per_s)));
    if let Some(p) = &s.rejects_file {
        rows.push(("rejects file", p.display().to_string()));
    }
    let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in rows {
        out.push_str(&format!("{k:<w$}  {v}\n"));
    }
    out.push_str(&format!(
        "check: rows {} = records {} + directories {} + rejects {} + withdrawn {}{}\n",
        s.rows,
        s.records,
        s.directories,
        s.rejects,
        s.withdrawn,
        if s.rows == s.records + s.directories + s.rejects + s.withdrawn { "" } else { "  (MISMATCH)" }
    ));
    if s.unknown_scope_count > 0 {
        out.push_str(&format!(
            "not read ({} scopes; what the last run indexed there is kept, not deleted):\n",
            s.unknown_scope_count
        ));
        for u in &s.unknown_scopes {
            out.push_str(&format!(
                "  {}  ({}: {}{})\n",
                u.scope,
                u.input,
                u.reason,
                if u.count > 1 { format!("; {} rejects", u.count) } else { String::new() }
            ));
        }
        if s.unknown_scope_count > s.unknown_scopes.len() as u64 {
            out.push_str(&format!(
                "  ... {} more in the rejects file\n",
                s.unknown_scope_count - s.unknown_scopes.len() as u64
            ));
        }
    }
    if s.reject_threshold_exceeded {
        out.push_str(
            "FAILED: rejects exceed the configured threshold (snapshot.max_rejects, snapshot.max_reject_ratio): nothing deleted, the manifest is kept\n",
        );
    }
    if let Some(why) = &s.delete_guard {
        out.push_str(&format!("FAILED: deletion guard: {why}: nothing deleted, the manifest is kept (rerun with --allow-mass-delete if this is intended)\n"));
    }
    out
}
