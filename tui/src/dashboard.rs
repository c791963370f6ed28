//! The live dashboard (ratatui + crossterm): overview charts, per-source, state, sinks,
//! snapshot progress and sketch-comparison views over metrics snapshots — from this process's
//! registry (`--tui`) or a running process's `/status` (`icicle top --connect`).
//!
//! Rendering only reads snapshots; the pipeline only updates the registry. A slow terminal
//! drops frames, never events.

use std::collections::VecDeque;
use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use icicle_core::metrics::{names, MetricsSnapshot};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Cell, Chart, Clear, Dataset, Gauge, GraphType, Paragraph, Row, Table, Tabs};
use ratatui::Frame;

pub use crate::human;

/// The views, in tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Records in and operations out per second, and the headline facts.
    Overview,
    /// Per-source records, rejects and batches.
    Sources,
    /// Per-source state and the process memory.
    State,
    /// Per-sink acknowledged deliveries and errors.
    Sinks,
    /// Snapshot progress, overall and per source.
    Snapshot,
    /// The latest `sketch-compare` summary.
    Sketches,
}

/// Every view, in tab order.
pub const VIEWS: [View; 6] = [View::Overview, View::Sources, View::State, View::Sinks, View::Snapshot, View::Sketches];

impl View {
    /// The tab title.
    pub fn title(self) -> &'static str {
        match self {
            View::Overview => "Overview",
            View::Sources => "Sources",
            View::State => "State",
            View::Sinks => "Sinks",
            View::Snapshot => "Snapshot",
            View::Sketches => "Sketches",
        }
    }
}

/// What a key does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Quit, or close the help screen if it is open.
    Quit,
    /// Go to the next view.
    Next,
    /// Go to the previous view.
    Previous,
    /// Go to the view at this index in [`VIEWS`].
    Go(usize),
    /// Pause or resume updates.
    Pause,
    /// Open or close the help screen.
    Help,
    /// Scroll the view's table by this many rows (negative: up).
    Scroll(i32),
}

/// The key table: it drives both dispatch and the help screen.
pub const KEYS: &[(&str, &str, Action)] = &[
    ("q", "quit", Action::Quit),
    ("Esc", "quit (or close help)", Action::Quit),
    ("Ctrl-C", "quit", Action::Quit),
    ("Tab", "next view", Action::Next),
    ("Shift-Tab", "previous view", Action::Previous),
    ("1..6", "go to view 1..6", Action::Go(0)),
    ("p", "pause / resume updates", Action::Pause),
    ("j", "scroll down (also Down)", Action::Scroll(1)),
    ("k", "scroll up (also Up)", Action::Scroll(-1)),
    ("PgDn", "scroll a page down", Action::Scroll(10)),
    ("PgUp", "scroll a page up", Action::Scroll(-10)),
    ("?", "help", Action::Help),
];

/// The action for a key press, looked up in [`KEYS`].
pub fn action_for(key: &KeyEvent) -> Option<Action> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let name = match key.code {
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => "Ctrl-C".to_string(),
        KeyCode::Char(c @ '1'..='9') => {
            return (c as usize - ('1' as usize) < VIEWS.len()).then_some(Action::Go(c as usize - '1' as usize))
        }
        KeyCode::Char(c) => c.to_string(),
        KeyCode::Esc => "Esc".into(),
        KeyCode::Tab => "Tab".into(),
        KeyCode::BackTab => "Shift-Tab".into(),
        KeyCode::Down => "j".into(),
        KeyCode::Up => "k".into(),
        KeyCode::PageDown => "PgDn".into(),
        KeyCode::PageUp => "PgUp".into(),
        _ => return None,
    };
    KEYS.iter().find(|(k, _, _)| *k == name).map(|(_, _, a)| *a)
}

/// Snapshots over the last minutes and what the operator chose to look at.
pub struct App {
    /// Index of the current view in [`VIEWS`].
    pub view: usize,
    /// Whether new snapshots are ignored.
    pub paused: bool,
    /// Whether the help screen is open.
    pub help: bool,
    /// Whether the operator asked to quit.
    pub quit: bool,
    /// Recent snapshots, oldest first.
    pub history: VecDeque<MetricsSnapshot>,
    /// Where the data comes from (shown in the title).
    pub source: String,
    /// The latest `sketch-compare` summary (CSV text), if any.
    pub sketches: Option<String>,
    /// Snapshots kept.
    pub keep: usize,
    /// Why the last fetch failed, while the source cannot be read.
    pub disconnected: Option<String>,
    /// Rows scrolled past in the current view's table.
    pub scroll: usize,
}

impl App {
    /// An empty dashboard.
    pub fn new(source: &str) -> App {
        App {
            view: 0,
            paused: false,
            help: false,
            quit: false,
            history: VecDeque::new(),
            source: source.to_string(),
            sketches: None,
            keep: 600,
            disconnected: None,
            scroll: 0,
        }
    }

    /// The source could not be read (`reason`): the screen says so until data comes again.
    pub fn disconnected(&mut self, reason: String) {
        self.disconnected = Some(reason);
    }

    /// A new snapshot (ignored while paused).
    pub fn push(&mut self, s: MetricsSnapshot) {
        self.disconnected = None;
        if self.paused {
            return;
        }
        self.history.push_back(s);
        while self.history.len() > self.keep {
            self.history.pop_front();
        }
    }

    /// Whether view `v` has anything to show here: the snapshot's only while a snapshot's
    /// figures come (not to a monitor), the sketches' only with a comparison to show.
    pub fn offers(&self, v: View) -> bool {
        match v {
            View::Snapshot => self.history.back().is_some_and(|s| {
                [names::SNAPSHOT_WORK_PLANNED_UNITS.name, names::SNAPSHOT_INPUTS_PLANNED.name]
                    .iter()
                    .any(|n| s.get(n, &[]).is_some())
            }),
            View::Sketches => self.sketches.is_some(),
            _ => true,
        }
    }

    /// The next view offered from `from`, `step` (+1 or -1) at a time.
    fn step(&self, from: usize, step: isize) -> usize {
        let n = VIEWS.len() as isize;
        (1..=n).map(|k| (from as isize + step * k).rem_euclid(n) as usize).find(|&i| self.offers(VIEWS[i])).unwrap_or(0)
    }

    /// Apply one action.
    pub fn apply(&mut self, a: Action) {
        match a {
            Action::Quit if self.help => self.help = false,
            Action::Quit => self.quit = true,
            Action::Next => (self.view, self.scroll) = (self.step(self.view, 1), 0),
            Action::Previous => (self.view, self.scroll) = (self.step(self.view, -1), 0),
            // A view not offered here is not gone to.
            Action::Go(i) if i < VIEWS.len() && self.offers(VIEWS[i]) => (self.view, self.scroll) = (i, 0),
            Action::Go(_) => {}
            Action::Scroll(n) => self.scroll = self.scroll.saturating_add_signed(n as isize),
            Action::Pause => self.paused = !self.paused,
            Action::Help => self.help = !self.help,
        }
    }

    pub(crate) fn latest(&self) -> MetricsSnapshot {
        self.history.back().cloned().unwrap_or_default()
    }

    /// Per-second rate of the sum of counter `name` over the last two snapshots.
    pub(crate) fn rate(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let n = self.history.len();
        if n < 2 {
            return 0.0;
        }
        let (a, b) = (&self.history[n - 2], &self.history[n - 1]);
        let dt = (b.time - a.time).max(1e-9);
        ((b.sum(name, labels) - a.sum(name, labels)) / dt).max(0.0)
    }

    /// (seconds before now, per-second rate) of counter `name` over the history.
    fn series(&self, name: &str, labels: &[(&str, &str)]) -> Vec<(f64, f64)> {
        let Some(last) = self.history.back() else { return Vec::new() };
        self.history
            .iter()
            .zip(self.history.iter().skip(1))
            .map(|(a, b)| {
                (
                    b.time - last.time,
                    ((b.sum(name, labels) - a.sum(name, labels)) / (b.time - a.time).max(1e-9)).max(0.0),
                )
            })
            .collect()
    }
}

/// Draw the whole dashboard.
pub fn render(f: &mut Frame<'_>, app: &App) {
    let [tabs, body, footer] =
        f.area().layout(&Layout::vertical([Constraint::Length(3), Constraint::Min(5), Constraint::Length(1)]));
    // The views offered here, under their own numbers (a monitor has no snapshot view).
    let offered: Vec<usize> = (0..VIEWS.len()).filter(|&i| app.offers(VIEWS[i])).collect();
    let titles: Vec<Line<'_>> =
        offered.iter().map(|&i| Line::from(format!("{} {}", i + 1, VIEWS[i].title()))).collect();
    // A view no longer offered (the figures changed) shows the overview.
    let view = if offered.contains(&app.view) { app.view } else { 0 };
    let title = format!(" icicle top — {}{} ", app.source, if app.paused { " — PAUSED" } else { "" });
    let mut block = Block::bordered().title(title);
    if app.disconnected.is_some() {
        block = block.border_style(Style::new().fg(Color::Red));
    }
    f.render_widget(
        Tabs::new(titles)
            .select(offered.iter().position(|&i| i == view))
            .block(block)
            .highlight_style(Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED)),
        tabs,
    );
    let s = app.latest();
    match VIEWS[view] {
        View::Overview => overview(f, body, app, &s),
        View::Sources => sources(f, body, &s, app),
        View::State => state(f, body, &s),
        View::Sinks => sinks(f, body, &s, app),
        View::Snapshot => snapshot(f, body, &s, app),
        View::Sketches => sketches(f, body, app),
    }
    if let Some(reason) = &app.disconnected {
        let text = format!(" DISCONNECTED — last data {} — {reason} · q quit", last_seen(app));
        f.render_widget(
            Paragraph::new(text).style(Style::new().fg(Color::White).bg(Color::Red).add_modifier(Modifier::BOLD)),
            footer,
        );
    } else {
        let up = if s.uptime > 0.0 { format!("up {:.0} s", s.uptime) } else { "waiting for data".into() };
        f.render_widget(
            Paragraph::new(format!(" q quit · Tab/1-6 views · p pause · ? help · {up}"))
                .style(Style::new().fg(Color::DarkGray)),
            footer,
        );
    }
    if app.help {
        help(f, f.area());
    }
}

/// When data last came, as UTC time of day (`never` before the first).
fn last_seen(app: &App) -> String {
    match app.history.back() {
        Some(s) if s.time > 0.0 => {
            let t = s.time as i64;
            format!("{:02}:{:02}:{:02} UTC", t.rem_euclid(86_400) / 3600, t.rem_euclid(3600) / 60, t.rem_euclid(60))
        }
        _ => "never".into(),
    }
}

fn overview(f: &mut Frame<'_>, area: Rect, app: &App, s: &MetricsSnapshot) {
    let [chart, facts] = area.layout(&Layout::vertical([Constraint::Min(6), Constraint::Length(7)]));
    let inn = app.series(names::RECORDS_IN_TOTAL.name, &[]);
    let out = app.series(names::RECORDS_OUT_TOTAL.name, &[]);
    let ymax = inn.iter().chain(&out).map(|p| p.1).fold(1.0f64, f64::max);
    let xmin = inn.first().map_or(-60.0, |p| p.0.min(-1.0));
    let datasets = vec![
        Dataset::default()
            .name("records in/s")
            .marker(symbols::Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(Color::Cyan))
            .data(&inn),
        Dataset::default()
            .name("operations out/s")
            .marker(symbols::Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(Color::Green))
            .data(&out),
    ];
    let c = Chart::new(datasets)
        // The legend stays at 80 columns (by default it hides below a quarter of the area).
        .hidden_legend_constraints((Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)))
        .block(Block::bordered().title(" throughput "))
        .x_axis(Axis::default().bounds([xmin, 0.0]).labels([Line::from(format!("{xmin:.0} s")), Line::from("now")]))
        .y_axis(Axis::default().bounds([0.0, ymax * 1.1]).labels([Line::from("0"), Line::from(human(ymax))]));
    f.render_widget(c, chart);
    let (rin, rout) = (s.sum(names::RECORDS_IN_TOTAL.name, &[]), s.sum(names::RECORDS_OUT_TOTAL.name, &[]));
    let ratio = if rin > 0.0 { format!("{:.1}%", 100.0 * rout / rin) } else { "-".into() };
    let lines = vec![
        Line::from(vec![
            Span::raw("records in      "),
            Span::styled(
                format!("{:>10}  ({}/s)", human(rin), human(app.rate(names::RECORDS_IN_TOTAL.name, &[]))),
                Style::new().fg(Color::Cyan),
            ),
        ]),
        Line::from(vec![
            Span::raw("operations out  "),
            Span::styled(
                format!("{:>10}  ({}/s)", human(rout), human(app.rate(names::RECORDS_OUT_TOTAL.name, &[]))),
                Style::new().fg(Color::Green),
            ),
        ]),
        Line::from(format!("reduction       {:>10}  of records in became index operations", ratio)),
        Line::from(format!(
            "lag             {:>10}  changelog records · {} Kafka messages",
            human(s.sum(names::CHANGELOG_LAG.name, &[])),
            human(s.sum(names::KAFKA_LAG.name, &[]))
        )),
        Line::from(format!(
            "errors          {:>10}  rejects · {} sink errors",
            human(s.sum(names::REJECTS_TOTAL.name, &[])),
            human(s.sum(names::SINK_ERRORS_TOTAL.name, &[]))
        )),
    ];
    f.render_widget(Paragraph::new(lines).block(Block::bordered().title(" totals ")), facts);
}

/// A table whose columns are as wide as their header or widest cell, in `width` columns of
/// screen: the leading columns that fit whole are drawn, the rest left out and counted in the
/// title, so a number never loses its unit (`123.5 k` cut to `123.5`).
fn table<'a>(header: &'a [&'a str], rows: Vec<Vec<String>>, title: &'a str, width: u16) -> Table<'a> {
    let widths: Vec<u16> = (0..header.len())
        .map(|i| {
            rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).chain([header[i].len()]).max().unwrap_or(4)
                as u16
        })
        .collect();
    // Inside the borders; one column of space between columns.
    let room = width.saturating_sub(2);
    let (mut used, mut keep) = (0u16, 0usize);
    for (i, w) in widths.iter().enumerate() {
        let need = w + u16::from(i > 0);
        if i > 0 && used + need > room {
            break;
        }
        used += need;
        keep = i + 1;
    }
    let left_out = header.len() - keep;
    let title = if left_out > 0 {
        // First, where a narrow title is still whole.
        format!(" +{left_out} column{} (widen) ·{title}", if left_out == 1 { "" } else { "s" })
    } else {
        title.to_string()
    };
    Table::new(
        rows.into_iter().map(|r| Row::new(r.into_iter().take(keep).map(Cell::from))),
        widths[..keep].iter().map(|w| Constraint::Length(*w)),
    )
    .header(Row::new(header[..keep].iter().map(|h| Cell::from(*h))).style(Style::new().add_modifier(Modifier::BOLD)))
    .block(Block::bordered().title(title))
}

fn components(s: &MetricsSnapshot) -> Vec<String> {
    let mut c = s.label_values(names::RECORDS_IN_TOTAL.name, "component");
    for x in s.label_values(names::STATE_ENTRIES.name, "component") {
        if !c.contains(&x) {
            c.push(x);
        }
    }
    c.sort();
    c
}

fn sources(f: &mut Frame<'_>, area: Rect, s: &MetricsSnapshot, app: &App) {
    let [top, bottom] = area.layout(&Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]));
    let rows = components(s)
        .into_iter()
        .map(|c| {
            let l = [("component", c.as_str())];
            vec![
                c.clone(),
                human(s.sum(names::RECORDS_IN_TOTAL.name, &l)),
                format!("{}/s", human(app.rate(names::RECORDS_IN_TOTAL.name, &l))),
                human(s.sum(names::RECORDS_FILTERED_TOTAL.name, &l)),
                human(s.sum(names::REJECTS_TOTAL.name, &l)),
                human(s.sum(names::BATCHES_TOTAL.name, &l)),
                human(s.sum(names::BATCH_SIZE.name, &l)),
                format!("{:.3} s", s.sum(names::BATCH_SECONDS.name, &l) + 0.0),
            ]
        })
        .collect();
    f.render_widget(
        table(
            &["source", "in", "rate", "filtered", "rejects", "batches", "batch", "took"],
            rows,
            " sources (last batch: size, took) ",
            top.width,
        ),
        top,
    );
    let mut rows: Vec<Vec<String>> = Vec::new();
    for x in s.series.iter().filter(|x| x.name == names::CHANGELOG_INDEX.name) {
        let (c, m) =
            (x.labels.get("component").cloned().unwrap_or_default(), x.labels.get("mdt").cloned().unwrap_or_default());
        let l = [("component", c.as_str()), ("mdt", m.as_str())];
        rows.push(vec![
            c.clone(),
            format!("MDT {m}"),
            human(x.value),
            human(s.sum(names::CHANGELOG_CLEARED.name, &l)),
            human(s.sum(names::CHANGELOG_LAG.name, &l)),
        ]);
    }
    for x in s.series.iter().filter(|x| x.name == names::KAFKA_COMMITTED_OFFSET.name) {
        let (c, p) = (
            x.labels.get("component").cloned().unwrap_or_default(),
            x.labels.get("partition").cloned().unwrap_or_default(),
        );
        let l = [("component", c.as_str()), ("partition", p.as_str())];
        rows.push(vec![
            c.clone(),
            format!("partition {p}"),
            "-".into(),
            human(x.value),
            human(s.sum(names::KAFKA_LAG.name, &l)),
        ]);
    }
    f.render_widget(
        table(
            &["source", "stream", "read", "acknowledged", "lag"],
            rows,
            " changelogs (MDTs) and partitions ",
            bottom.width,
        ),
        bottom,
    );
}

fn state(f: &mut Frame<'_>, area: Rect, s: &MetricsSnapshot) {
    let rows = components(s)
        .into_iter()
        .map(|c| {
            let l = [("component", c.as_str())];
            let ev = |e: &str| human(s.sum(names::STATE_EVENTS_TOTAL.name, &[("component", c.as_str()), ("event", e)]));
            vec![
                c.clone(),
                human(s.sum(names::STATE_ENTRIES.name, &l)),
                format!("{}B", human(s.sum(names::STATE_BYTES.name, &l))),
                ev("evictions"),
                ev("fid2path_calls"),
                ev("moved_descendants"),
                ev("pending_moves"),
                human(s.sum(names::QUEUE_DEPTH.name, &l)),
                human(s.sum(names::REDUCE_TOTAL.name, &[("component", c.as_str()), ("outcome", "coalesced")])),
                human(s.sum(names::REDUCE_TOTAL.name, &[("component", c.as_str()), ("outcome", "cancelled")])),
            ]
        })
        .collect();
    let [t, m] = area.layout(&Layout::vertical([Constraint::Min(4), Constraint::Length(3)]));
    f.render_widget(
        table(
            &["source", "entries", "bytes", "evicted", "fid2path", "moved", "pending", "queue", "merged", "cancel"],
            rows,
            " state and memory (merged, cancel: reduction) ",
            t.width,
        ),
        t,
    );
    let rss = s.sum(names::PROCESS_RESIDENT_BYTES.name, &[]);
    f.render_widget(Paragraph::new(format!("process resident memory {}B", human(rss))).block(Block::bordered()), m);
}

fn sinks(f: &mut Frame<'_>, area: Rect, s: &MetricsSnapshot, app: &App) {
    let mut names = s.label_values(names::SINK_BATCHES_TOTAL.name, "sink");
    for n in s.label_values(names::SINK_ERRORS_TOTAL.name, "sink") {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    let rows = names
        .into_iter()
        .map(|n| {
            let l = [("sink", n.as_str())];
            vec![
                n.clone(),
                human(s.sum(names::SINK_BATCHES_TOTAL.name, &l)),
                human(s.sum(names::SINK_ENTRIES_TOTAL.name, &[("sink", n.as_str()), ("kind", "ingest")])),
                human(s.sum(names::SINK_ENTRIES_TOTAL.name, &[("sink", n.as_str()), ("kind", "delete")])),
                format!("{}B", human(s.sum(names::SINK_BYTES_TOTAL.name, &l))),
                format!("{}B/s", human(app.rate(names::SINK_BYTES_TOTAL.name, &l))),
                human(s.sum(names::SINK_ERRORS_TOTAL.name, &l)),
                human(s.sum(names::GLOBUS_RETRIES_TOTAL.name, &l)),
                format!("{:.3} s", s.sum(names::SINK_LAST_DELIVERY_SECONDS.name, &l) + 0.0),
                // Globus Search: from submission to SUCCESS of the last task.
                s.get(names::GLOBUS_LAST_TASK_SECONDS.name, &l).map_or_else(|| "-".into(), |t| format!("{t:.2} s")),
            ]
        })
        .collect();
    let header = ["sink", "batches", "upserts", "deletes", "bytes", "rate", "errors", "retry", "last", "task"];
    f.render_widget(
        table(&header, rows, " sinks (acknowledged deliveries; retry and task: Globus) ", area.width),
        area,
    );
}

fn snapshot(f: &mut Frame<'_>, area: Rect, s: &MetricsSnapshot, app: &App) {
    let [g, t, per] =
        area.layout(&Layout::vertical([Constraint::Length(3), Constraint::Length(7), Constraint::Min(3)]));
    let (done, total) =
        (s.sum(names::SNAPSHOT_WORK_DONE_UNITS.name, &[]), s.sum(names::SNAPSHOT_WORK_PLANNED_UNITS.name, &[]));
    let ratio = if total > 0.0 { (done / total).clamp(0.0, 1.0) } else { 0.0 };
    f.render_widget(
        Gauge::default()
            .block(Block::bordered().title(" snapshot progress "))
            .gauge_style(Style::new().fg(Color::Green))
            .ratio(ratio)
            .label(format!("{:.1}%", ratio * 100.0)),
        g,
    );
    let eta = s.sum(names::SNAPSHOT_ETA_SECONDS.name, &[]);
    let lines = vec![
        Line::from(format!(
            "inputs          {} of {} read",
            human(s.sum(names::SNAPSHOT_INPUTS_DONE.name, &[])),
            human(s.sum(names::SNAPSHOT_INPUTS_PLANNED.name, &[]))
        )),
        Line::from(format!(
            "work done       {} of {} ({}/s; bytes of text inputs, one per database)",
            human(done),
            human(total),
            human(app.rate(names::SNAPSHOT_WORK_DONE_UNITS.name, &[]))
        )),
        Line::from(format!(
            "time left       {}",
            if eta >= 0.0 && total > 0.0 { format!("{eta:.0} s") } else { "-".into() }
        )),
        Line::from(format!("entries out     {}", human(s.sum(names::SINK_ENTRIES_TOTAL.name, &[("kind", "ingest")])))),
        Line::from(format!("deletes out     {}", human(s.sum(names::SINK_ENTRIES_TOTAL.name, &[("kind", "delete")])))),
    ];
    f.render_widget(Paragraph::new(lines).block(Block::bordered().title(" pipeline ")), t);
    let rows = s
        .label_values(names::SNAPSHOT_ROWS_TOTAL.name, "source")
        .into_iter()
        .map(|src| {
            let l = [("source", src.as_str())];
            vec![
                src.clone(),
                human(s.sum(names::SNAPSHOT_ROWS_TOTAL.name, &l)),
                format!("{}/s", human(app.rate(names::SNAPSHOT_ROWS_TOTAL.name, &l))),
            ]
        })
        .collect();
    f.render_widget(table(&["source", "rows", "rate"], rows, " rows per source ", per.width), per);
}

fn sketches(f: &mut Frame<'_>, area: Rect, app: &App) {
    let Some(csv) = &app.sketches else {
        f.render_widget(
            Paragraph::new("No sketch comparison yet: run `icicle sketch-compare --out DIR` and start the dashboard with `--sketches DIR`.")
                .block(Block::bordered().title(" sketches ")),
            area,
        );
        return;
    };
    let mut lines = csv.lines();
    let header: Vec<String> = lines.next().unwrap_or("").split(',').map(str::to_string).collect();
    // Numbers to four significant digits, so that a row fits.
    let cell = |v: &str| match v.parse::<f64>() {
        Ok(x) if x != 0.0 && (x.abs() < 1e-3 || x.abs() >= 1e6) => format!("{x:.3e}"),
        Ok(x) if x.fract() != 0.0 => format!("{x:.4}"),
        _ => v.to_string(),
    };
    let all: Vec<Vec<String>> = lines.map(|l| l.split(',').map(cell).collect()).collect();
    // The rows that fit below the header, from the scroll position (kept within the table).
    let visible = area.height.saturating_sub(3).max(1) as usize;
    let first = app.scroll.min(all.len().saturating_sub(visible));
    let title = if all.len() > visible {
        format!(
            " latest sketch-compare summary — rows {}-{} of {} (j/k, PgDn/PgUp) ",
            first + 1,
            (first + visible).min(all.len()),
            all.len()
        )
    } else {
        " latest sketch-compare summary ".to_string()
    };
    let rows: Vec<Vec<String>> = all.iter().skip(first).take(visible).cloned().collect();
    let w: Vec<Constraint> = (0..header.len())
        .map(|i| {
            let widest =
                rows.iter().filter_map(|r| r.get(i)).map(|c| c.len()).chain([header[i].len()]).max().unwrap_or(8);
            Constraint::Length(widest.min(22) as u16 + 1)
        })
        .collect();
    let t = Table::new(rows.into_iter().map(|r| Row::new(r.into_iter().map(Cell::from))), w)
        .header(Row::new(header.into_iter().map(Cell::from)).style(Style::new().add_modifier(Modifier::BOLD)))
        .block(Block::bordered().title(title));
    f.render_widget(t, area);
}

fn help(f: &mut Frame<'_>, area: Rect) {
    let w = 50.min(area.width);
    let h = (KEYS.len() as u16 + 2).min(area.height);
    let r = Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h };
    let lines: Vec<Line<'_>> = KEYS
        .iter()
        .map(|(k, d, _)| {
            Line::from(vec![
                Span::styled(format!("{k:>10}  "), Style::new().add_modifier(Modifier::BOLD)),
                Span::raw(*d),
            ])
        })
        .collect();
    f.render_widget(Clear, r);
    f.render_widget(Paragraph::new(lines).block(Block::bordered().title(" keys ")), r);
}

/// The facts of the latest snapshot on one line (the log form of the overview).
pub fn status_line(app: &App) -> String {
    let s = app.latest();
    format!(
        "status: in {} ({}/s) · out {} ({}/s) · changelog lag {} · kafka lag {} · rejects {} · sink errors {}",
        human(s.sum(names::RECORDS_IN_TOTAL.name, &[])),
        human(app.rate(names::RECORDS_IN_TOTAL.name, &[])),
        human(s.sum(names::RECORDS_OUT_TOTAL.name, &[])),
        human(app.rate(names::RECORDS_OUT_TOTAL.name, &[])),
        human(s.sum(names::CHANGELOG_LAG.name, &[])),
        human(s.sum(names::KAFKA_LAG.name, &[])),
        human(s.sum(names::REJECTS_TOTAL.name, &[])),
        human(s.sum(names::SINK_ERRORS_TOTAL.name, &[])),
    )
}

/// `/status` of a running icicle (`addr`: HOST:PORT of its `--metrics-addr`): refused with
/// the reason when nothing answers within 3 s, the answer is no success, or it is not an
/// icicle's `/status`.
pub fn fetch_status(addr: &str) -> std::io::Result<MetricsSnapshot> {
    let err = |what: String| std::io::Error::other(what);
    let url = format!("http://{addr}/status");
    let client = reqwest::blocking::Client::builder()
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| err(format!("an HTTP client: {e}")))?;
    // reqwest's message leaves the cause (`Connection refused`) to its sources.
    let why = |e: &dyn std::error::Error| {
        let mut text = e.to_string();
        let mut cause = e.source();
        while let Some(c) = cause {
            text = format!("{text}: {c}");
            cause = c.source();
        }
        text
    };
    let resp = client.get(&url).send().map_err(|e| err(format!("{url}: {}", why(&e))))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(err(format!("{url} answered {status}: not an icicle metrics endpoint?")));
    }
    let body = resp.bytes().map_err(|e| err(format!("{url}: {}", why(&e))))?;
    serde_json::from_slice(&body)
        .map_err(|e| err(format!("{url} is not an icicle's /status (is --connect the --metrics-addr of icicle?): {e}")))
}
