//! Process-wide metrics: counters, gauges and latency histograms with small, bounded label sets (component ids,
//! MDTs, partitions, sinks, outcomes — never users or paths), updated per batch, kept in a
//! `prometheus-client` registry and rendered as OpenMetrics text (`/metrics`) and as a JSON snapshot
//! (`/status`, `icicle top`).

pub mod names;
mod server;

pub use names::{Kind, Metric};

pub use server::{serve, ACCEPT_BACKOFF_MAX, CONNECTION_TIMEOUT, HEAD_TIMEOUT, MAX_CONNECTIONS};

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, OnceLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// One series in a [`MetricsSnapshot`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Series {
    /// The metric's name, e.g. `icicle_records_in_total` (a histogram's with `_count` or `_sum`).
    pub name: String,
    /// `counter`, `gauge` or `histogram`.
    pub kind: String,
    /// Label names and values.
    pub labels: BTreeMap<String, String>,
    /// The value when the snapshot was taken.
    pub value: f64,
}

/// Everything at one moment.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MetricsSnapshot {
    /// Seconds since the Unix epoch (fractional).
    pub time: f64,
    /// Seconds since the process started recording.
    pub uptime: f64,
    /// Every series recorded so far.
    pub series: Vec<Series>,
}

impl MetricsSnapshot {
    /// The value of `name` with exactly these labels.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.series
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
    }

    /// Sum of `name` over every series whose labels include these.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.series
            .iter()
            .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
            .map(|s| s.value)
            .sum()
    }

    /// Distinct values of label `key` on series named `name`.
    pub fn label_values(&self, name: &str, key: &str) -> Vec<String> {
        let mut v: Vec<String> =
            self.series.iter().filter(|s| s.name == name).filter_map(|s| s.labels.get(key).cloned()).collect();
        v.sort();
        v.dedup();
        v
    }
}

/// Upper bounds (seconds) of the latency histograms' buckets: 1 ms to 2 min.
pub const LATENCY_BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 10.0, 120.0];

/// A label value, escaped as the exposition format requires when encoded.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct LabelValue(String);

impl prometheus_client::encoding::EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut prometheus_client::encoding::LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// A series' labels, sorted by key.
type Labels = Vec<(&'static str, LabelValue)>;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// A family registered in the exposition registry, kept here too so the JSON snapshot can read it.
enum Handle {
    Counter(Family<Labels, Counter<f64, AtomicU64>>),
    Gauge(Family<Labels, Gauge<f64, AtomicU64>>),
    /// The histogram, and each series' sum and count (the crate does not read them back).
    Histogram(Family<Labels, Histogram, fn() -> Histogram>, BTreeMap<Labels, (f64, u64)>),
}

impl Handle {
    fn kind(&self) -> &'static str {
        match self {
            Handle::Counter(_) => "counter",
            Handle::Gauge(_) => "gauge",
            Handle::Histogram(..) => "histogram",
        }
    }
}

/// A family's handle and the label sets seen on it.
struct Tracked {
    handle: Handle,
    series: std::collections::BTreeSet<Labels>,
}

/// The registry.
pub struct Metrics {
    registry: Mutex<Registry>,
    tracked: Mutex<BTreeMap<&'static str, Tracked>>,
    start: std::time::Instant,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            registry: Mutex::new(Registry::default()),
            tracked: Mutex::new(BTreeMap::new()),
            start: std::time::Instant::now(),
        }
    }
}

fn key(labels: &[(&'static str, &str)]) -> Labels {
    let mut k: Labels = labels.iter().map(|(a, b)| (*a, LabelValue(b.to_string()))).collect();
    k.sort();
    k
}

impl Metrics {
    /// The process-wide registry.
    pub fn global() -> &'static Metrics {
        static M: OnceLock<Metrics> = OnceLock::new();
        M.get_or_init(Metrics::default)
    }

    /// The family `name`, registered on first use as a `kind`; `f` runs on it with the
    /// series' labels, under the lock. A name already registered with another kind is left alone.
    fn with(
        &self,
        metric: &Metric,
        kind: &'static str,
        labels: &[(&'static str, &str)],
        f: impl FnOnce(&mut Handle, &Labels),
    ) {
        let (name, help) = (metric.name, metric.help);
        debug_assert!(
            labels.iter().all(|(k, _)| metric.labels.contains(k)),
            "{name}: labels {labels:?} beyond {:?}",
            metric.labels
        );
        let mut tracked = self.tracked.lock().unwrap_or_else(|p| p.into_inner());
        let t = tracked.entry(name).or_insert_with(|| {
            let handle = match kind {
                "counter" => Handle::Counter(Family::default()),
                "gauge" => Handle::Gauge(Family::default()),
                _ => Handle::Histogram(
                    Family::new_with_constructor(latency_histogram as fn() -> Histogram),
                    BTreeMap::new(),
                ),
            };
            let mut registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
            // The exposition ends HELP with a full stop.
            let help = help.strip_suffix('.').unwrap_or(help);
            match &handle {
                // The exposition appends `_total` to a counter's name.
                Handle::Counter(fam) => {
                    registry.register(name.strip_suffix("_total").unwrap_or(name), help, fam.clone())
                }
                Handle::Gauge(fam) => registry.register(name, help, fam.clone()),
                Handle::Histogram(fam, _) => registry.register(name, help, fam.clone()),
            }
            Tracked { handle, series: Default::default() }
        });
        if t.handle.kind() != kind {
            tracing::debug!(message = "metric used with two kinds", name, first = t.handle.kind(), now = kind);
            return;
        }
        let labels = key(labels);
        f(&mut t.handle, &labels);
        t.series.insert(labels);
    }

    /// Add `v` to counter `metric`.
    pub fn add(&self, metric: &Metric, labels: &[(&'static str, &str)], v: f64) {
        self.with(metric, "counter", labels, |h, l| {
            if let Handle::Counter(fam) = h {
                fam.get_or_create(l).inc_by(v.max(0.0));
            }
        });
    }

    /// Set counter `metric` to a running total `v` (a component's own cumulative count); it never goes down.
    pub fn set_counter(&self, metric: &Metric, labels: &[(&'static str, &str)], v: f64) {
        self.with(metric, "counter", labels, |h, l| {
            if let Handle::Counter(fam) = h {
                let c = fam.get_or_create(l);
                let now = c.get();
                if v > now {
                    c.inc_by(v - now);
                }
            }
        });
    }

    /// Count one observation `v` (seconds) in latency histogram `metric` ([`LATENCY_BUCKETS`]).
    pub fn observe(&self, metric: &Metric, labels: &[(&'static str, &str)], v: f64) {
        self.with(metric, "histogram", labels, |h, l| {
            if let Handle::Histogram(fam, totals) = h {
                fam.get_or_create(l).observe(v);
                let t = totals.entry(l.clone()).or_default();
                t.0 += v;
                t.1 += 1;
            }
        });
    }

    /// Set gauge `metric` to `v`.
    pub fn set(&self, metric: &Metric, labels: &[(&'static str, &str)], v: f64) {
        self.with(metric, "gauge", labels, |h, l| {
            if let Handle::Gauge(fam) = h {
                // The encoder has no spelling for infinities.
                fam.get_or_create(l).set(if v.is_finite() { v } else { f64::NAN });
            }
        });
    }

    /// Process-level gauges, read when asked for.
    fn refresh_process(&self) {
        if !std::ptr::eq(self, Metrics::global()) {
            return;
        }
        // /proc/self/statm: size resident shared ... in pages.
        if let Some(pages) = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|t| t.split_whitespace().nth(1).and_then(|x| x.parse::<f64>().ok()))
        {
            self.set(&names::PROCESS_RESIDENT_BYTES, &[], pages * 4096.0);
        }
        // SAFETY: getrusage fills the struct it is given.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `u` is a valid rusage.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } == 0 {
            let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            self.set_counter(&names::PROCESS_CPU_SECONDS_TOTAL, &[], s(u.ru_utime) + s(u.ru_stime));
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            // The directory's own descriptor, open while it is read, is not counted.
            self.set(&names::PROCESS_OPEN_FDS, &[], fds.count().saturating_sub(1) as f64);
        }
        if let Some(t) = process_start_time() {
            self.set(&names::PROCESS_START_TIME_SECONDS, &[], t);
        }
    }

    /// `icicle_build_info{version, commit} 1`: which binary is running (set once at start).
    pub fn set_build_info(&self, version: &str, commit: &str) {
        self.set(&names::BUILD_INFO, &[("version", version), ("commit", commit)], 1.0);
    }

    /// Everything now (counters under the names they were recorded with, histograms as their
    /// `_count` and `_sum`).
    pub fn snapshot(&self) -> MetricsSnapshot {
        self.refresh_process();
        let tracked = self.tracked.lock().unwrap_or_else(|p| p.into_inner());
        let time =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        let mut series = Vec::new();
        let named = |labels: &Labels| {
            labels.iter().map(|(k, v)| (k.to_string(), v.0.clone())).collect::<BTreeMap<String, String>>()
        };
        for (name, t) in tracked.iter() {
            for labels in &t.series {
                let mut push = |name: String, value: f64| {
                    series.push(Series { name, kind: t.handle.kind().into(), labels: named(labels), value })
                };
                match &t.handle {
                    Handle::Counter(fam) => push(name.to_string(), fam.get_or_create(labels).get()),
                    Handle::Gauge(fam) => push(name.to_string(), fam.get_or_create(labels).get()),
                    Handle::Histogram(_, totals) => {
                        let (sum, count) = totals.get(labels).copied().unwrap_or_default();
                        push(format!("{name}_count"), count as f64);
                        push(format!("{name}_sum"), sum);
                    }
                }
            }
        }
        MetricsSnapshot { time, uptime: self.start.elapsed().as_secs_f64(), series }
    }

    /// OpenMetrics text exposition (1.0.0).
    pub fn openmetrics(&self) -> String {
        self.refresh_process();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            tracing::warn!(message = "could not encode the metrics", error = %e);
        }
        out
    }

    /// Prometheus text exposition (0.0.4), for scrapers that do not ask for OpenMetrics.
    pub fn prometheus(&self) -> String {
        prometheus_from_openmetrics(&self.openmetrics())
    }
}

/// The 0.0.4 spelling of an OpenMetrics text: a counter family is named with its `_total`, and
/// there is no `# EOF`.
fn prometheus_from_openmetrics(text: &str) -> String {
    let counters: std::collections::HashSet<&str> =
        text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.strip_suffix(" counter")).collect();
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line == "# EOF" {
            continue;
        }
        let family = ["# HELP ", "# TYPE "].iter().find_map(|p| line.strip_prefix(p).map(|rest| (*p, rest)));
        match family {
            Some((prefix, rest)) if rest.split(' ').next().is_some_and(|n| counters.contains(n)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(&format!("{prefix}{name}_total {tail}\n"));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// What a stream monitor reports after each batch (running totals and the batch's own size).
pub struct BatchReport<'a> {
    /// The monitor's component id (the `component` label).
    pub component: &'a str,
    /// Records or events read (including filtered and rejected ones).
    pub records_in: u64,
    /// Records dropped by filters.
    pub filtered: u64,
    /// Records rejected.
    pub rejects: u64,
    /// Reduction outcomes by name (coalesced, cancelled, passed, renames, ...).
    pub outcomes: &'a [(&'static str, u64)],
    /// Updates emitted.
    pub updates: u64,
    /// Deletes emitted.
    pub deletes: u64,
    /// Batches applied.
    pub batches: u64,
    /// Records in this batch.
    pub batch_size: usize,
    /// Seconds this batch took to process and deliver.
    pub batch_seconds: f64,
    /// Objects held by the state.
    pub state_entries: usize,
    /// The state's approximate heap bytes.
    pub state_bytes: usize,
    /// State counters by name (evictions, fid2path_calls, ...).
    pub state_counts: &'a [(&'static str, u64)],
}

/// Record one monitor batch in the global registry.
pub fn record_batch(r: &BatchReport<'_>) {
    let m = Metrics::global();
    let c = [("component", r.component)];
    m.set_counter(&names::RECORDS_IN_TOTAL, &c, r.records_in as f64);
    m.set_counter(&names::RECORDS_FILTERED_TOTAL, &c, r.filtered as f64);
    m.set_counter(&names::REJECTS_TOTAL, &c, r.rejects as f64);
    for (outcome, n) in r.outcomes {
        m.set_counter(&names::REDUCE_TOTAL, &[("component", r.component), ("outcome", outcome)], *n as f64);
    }
    m.set_counter(&names::RECORDS_OUT_TOTAL, &[("component", r.component), ("op", "update")], r.updates as f64);
    m.set_counter(&names::RECORDS_OUT_TOTAL, &[("component", r.component), ("op", "delete")], r.deletes as f64);
    m.set_counter(&names::BATCHES_TOTAL, &c, r.batches as f64);
    m.set(&names::BATCH_SIZE, &c, r.batch_size as f64);
    m.set(&names::BATCH_SECONDS, &c, r.batch_seconds);
    m.observe(&names::BATCH_DURATION_SECONDS, &c, r.batch_seconds);
    m.set(&names::STATE_ENTRIES, &c, r.state_entries as f64);
    m.set(&names::STATE_BYTES, &c, r.state_bytes as f64);
    for (what, n) in r.state_counts {
        m.set_counter(&names::STATE_EVENTS_TOTAL, &[("component", r.component), ("event", what)], *n as f64);
    }
}

/// The content type of [`Metrics::openmetrics`].
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of [`Metrics::prometheus`].
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// When this process started, seconds since the epoch: its start in clock ticks after boot
/// (`/proc/self/stat`, field 22) plus the boot time (`/proc/stat`, `btime`); proc(5).
fn process_start_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let after = &stat[stat.rfind(')')? + 1..];
    let ticks: f64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let btime: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| btime + ticks / hz as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const X_DURATION: Metric =
        Metric { name: "icicle_x_duration_seconds", help: "X.", kind: Kind::Histogram, labels: &["sink"] };
    const RECORDS_IN: Metric =
        Metric { name: "icicle_records_in_total", help: "Records read.", kind: Kind::Counter, labels: &["component"] };
    const REJECTS: Metric =
        Metric { name: "icicle_rejects_total", help: "Rejected.", kind: Kind::Counter, labels: &["component"] };
    const LAG: Metric = Metric {
        name: "icicle_changelog_lag",
        help: "Records not yet cleared.",
        kind: Kind::Gauge,
        labels: &["component", "mdt"],
    };
    const WEIRD: Metric =
        Metric { name: "icicle_weird", help: "A \"quoted\" label.", kind: Kind::Gauge, labels: &["component"] };

    /// The process's own figures: CPU time spent, descriptors open, a start in the last day.
    #[test]
    fn process_figures_are_read_when_asked_for() {
        let g = Metrics::global();
        g.set_build_info("0.1.0", "abc");
        let s = g.snapshot();
        let one = |name: &str| s.get(name, &[]).unwrap_or_else(|| panic!("{name} missing"));
        assert!(one("icicle_process_cpu_seconds_total") > 0.0);
        assert!(one("icicle_process_open_fds") >= 3.0, "stdin, stdout, stderr at least");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        let start = one("icicle_process_start_time_seconds");
        assert!(start <= now + 1.0 && start > now - 86_400.0, "{start} vs {now}");
        assert_eq!(s.get("icicle_build_info", &[("version", "0.1.0"), ("commit", "abc")]), Some(1.0));
    }

    #[test]
    fn histograms_are_cumulative_buckets_sum_and_count() {
        let m = Metrics::default();
        for v in [0.0005, 0.003, 0.003, 7.0, 500.0] {
            m.observe(&X_DURATION, &[("sink", "a")], v);
        }
        let text = m.openmetrics();
        assert!(
            text.starts_with("# HELP icicle_x_duration_seconds X.\n# TYPE icicle_x_duration_seconds histogram\n"),
            "{text}"
        );
        assert!(text.contains("icicle_x_duration_seconds_sum{sink=\"a\"} 507.0065\n"), "{text}");
        assert!(text.contains("icicle_x_duration_seconds_count{sink=\"a\"} 5\n"), "{text}");
        assert!(text.contains("icicle_x_duration_seconds_bucket{le=\"0.001\",sink=\"a\"} 1\n"), "{text}");
        assert!(text.contains("icicle_x_duration_seconds_bucket{le=\"0.005\",sink=\"a\"} 3\n"), "{text}");
        assert!(text.contains("icicle_x_duration_seconds_bucket{le=\"10.0\",sink=\"a\"} 4\n"), "{text}");
        assert!(text.contains("icicle_x_duration_seconds_bucket{le=\"+Inf\",sink=\"a\"} 5\n"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        let s = m.snapshot();
        assert_eq!(s.get("icicle_x_duration_seconds_count", &[("sink", "a")]), Some(5.0));
        assert_eq!(s.get("icicle_x_duration_seconds_sum", &[("sink", "a")]), Some(0.0005 + 0.006 + 7.0 + 500.0));
    }

    #[test]
    fn counters_gauges_and_the_exposition_format() {
        let m = Metrics::default();
        m.add(&RECORDS_IN, &[("component", "mdt0")], 5.0);
        m.add(&RECORDS_IN, &[("component", "mdt0")], 2.0);
        m.set_counter(&RECORDS_IN, &[("component", "mdt0")], 3.0);
        m.set_counter(&REJECTS, &[("component", "mdt0")], 4.0);
        m.set_counter(&REJECTS, &[("component", "mdt0")], 2.0);
        m.set(&LAG, &[("component", "mdt0"), ("mdt", "fs0-MDT0000")], 3.0);
        m.set(&LAG, &[("mdt", "fs0-MDT0000"), ("component", "mdt0")], 1.0);
        m.set(&WEIRD, &[("component", "a\"b\\c\nd")], f64::INFINITY);
        // A name keeps its first kind.
        m.set(&REJECTS, &[("component", "mdt0")], 9.0);
        let text = m.openmetrics();
        assert_eq!(
            text,
            "# HELP icicle_records_in Records read.\n# TYPE icicle_records_in counter\nicicle_records_in_total{component=\"mdt0\"} 7.0\n\
             # HELP icicle_rejects Rejected.\n# TYPE icicle_rejects counter\nicicle_rejects_total{component=\"mdt0\"} 4.0\n\
             # HELP icicle_changelog_lag Records not yet cleared.\n# TYPE icicle_changelog_lag gauge\nicicle_changelog_lag{component=\"mdt0\",mdt=\"fs0-MDT0000\"} 1.0\n\
             # HELP icicle_weird A \"quoted\" label.\n# TYPE icicle_weird gauge\nicicle_weird{component=\"a\\\"b\\\\c\\nd\"} NaN\n# EOF\n"
        );
        assert_eq!(
            m.prometheus(),
            "# HELP icicle_records_in_total Records read.\n# TYPE icicle_records_in_total counter\nicicle_records_in_total{component=\"mdt0\"} 7.0\n\
             # HELP icicle_rejects_total Rejected.\n# TYPE icicle_rejects_total counter\nicicle_rejects_total{component=\"mdt0\"} 4.0\n\
             # HELP icicle_changelog_lag Records not yet cleared.\n# TYPE icicle_changelog_lag gauge\nicicle_changelog_lag{component=\"mdt0\",mdt=\"fs0-MDT0000\"} 1.0\n\
             # HELP icicle_weird A \"quoted\" label.\n# TYPE icicle_weird gauge\nicicle_weird{component=\"a\\\"b\\\\c\\nd\"} NaN\n"
        );
        let s = m.snapshot();
        assert_eq!(s.get("icicle_records_in_total", &[("component", "mdt0")]), Some(7.0));
        assert_eq!(s.get("icicle_rejects_total", &[("component", "mdt0")]), Some(4.0));
        assert_eq!(s.sum("icicle_changelog_lag", &[]), 1.0);
        assert_eq!(s.label_values("icicle_changelog_lag", "mdt"), vec!["fs0-MDT0000".to_string()]);
        assert_eq!(s.label_values("icicle_weird", "component"), vec!["a\"b\\c\nd".to_string()]);
    }
}
