//! Process-wide metrics: counters, gauges and latency histograms with small, bounded label sets (component ids,
//! MDTs, partitions, sinks, outcomes — never users or paths), updated per batch, rendered as
//! Prometheus text (`/metrics`) and as a JSON snapshot (`/status`, `icicle top`).

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

/// Counter (only grows) or gauge (set to the latest value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricKind {
    Counter,
    Gauge,
}

#[derive(Debug, Clone)]
struct Family {
    kind: MetricKind,
    help: &'static str,
    series: BTreeMap<Vec<(&'static str, String)>, f64>,
}

/// One series in a [`MetricsSnapshot`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Series {
    pub name: String,
    pub kind: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Everything at one moment.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MetricsSnapshot {
    /// Seconds since the Unix epoch (fractional).
    pub time: f64,
    /// Seconds since the process started recording.
    pub uptime: f64,
    pub series: Vec<Series>,
}

impl MetricsSnapshot {
    /// The value of `name` with exactly these labels.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.series
            .iter()
            .find(|s| s.name == name && s.labels.len() == labels.len() && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
            .map(|s| s.value)
    }

    /// Sum of `name` over every series whose labels include these.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.series.iter().filter(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))).map(|s| s.value).sum()
    }

    /// Distinct values of label `key` on series named `name`.
    pub fn label_values(&self, name: &str, key: &str) -> Vec<String> {
        let mut v: Vec<String> = self.series.iter().filter(|s| s.name == name).filter_map(|s| s.labels.get(key).cloned()).collect();
        v.sort();
        v.dedup();
        v
    }
}

/// Upper bounds (seconds) of the latency histograms' buckets: 1 ms to 2 min.
pub const LATENCY_BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 10.0, 120.0];

/// One histogram series: counts per bucket (not cumulative), sum and count.
#[derive(Debug, Clone, Default)]
struct Histogram {
    buckets: [u64; LATENCY_BUCKETS.len()],
    sum: f64,
    count: u64,
}

#[derive(Debug, Clone)]
struct HistogramFamily {
    help: &'static str,
    series: BTreeMap<Vec<(&'static str, String)>, Histogram>,
}

/// The registry.
pub struct Metrics {
    families: Mutex<BTreeMap<&'static str, Family>>,
    histograms: Mutex<BTreeMap<&'static str, HistogramFamily>>,
    start: std::time::Instant,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics { families: Mutex::new(BTreeMap::new()), histograms: Mutex::new(BTreeMap::new()), start: std::time::Instant::now() }
    }
}

fn key(labels: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut k: Vec<(&'static str, String)> = labels.iter().map(|(a, b)| (*a, b.to_string())).collect();
    k.sort();
    k
}

impl Metrics {
    /// The process-wide registry.
    pub fn global() -> &'static Metrics {
        static M: OnceLock<Metrics> = OnceLock::new();
        M.get_or_init(Metrics::default)
    }

    fn update(&self, name: &'static str, help: &'static str, kind: MetricKind, labels: &[(&'static str, &str)], f: impl FnOnce(&mut f64)) {
        let mut fams = self.families.lock().unwrap_or_else(|p| p.into_inner());
        let fam = fams.entry(name).or_insert_with(|| Family { kind, help, series: BTreeMap::new() });
        f(fam.series.entry(key(labels)).or_insert(0.0));
    }

    /// Add `v` to counter `name`.
    pub fn add(&self, name: &'static str, help: &'static str, labels: &[(&'static str, &str)], v: f64) {
        self.update(name, help, MetricKind::Counter, labels, |x| *x += v);
    }

    /// Set counter `name` to a running total `v` (a component's own cumulative count).
    pub fn set_counter(&self, name: &'static str, help: &'static str, labels: &[(&'static str, &str)], v: f64) {
        self.update(name, help, MetricKind::Counter, labels, |x| *x = x.max(v));
    }

    /// Count one observation `v` (seconds) in latency histogram `name` ([`LATENCY_BUCKETS`]).
    pub fn observe(&self, name: &'static str, help: &'static str, labels: &[(&'static str, &str)], v: f64) {
        let mut hs = self.histograms.lock().unwrap_or_else(|p| p.into_inner());
        let h = hs.entry(name).or_insert_with(|| HistogramFamily { help, series: BTreeMap::new() }).series.entry(key(labels)).or_default();
        if let Some(i) = LATENCY_BUCKETS.iter().position(|b| v <= *b) {
            h.buckets[i] += 1;
        }
        h.sum += v;
        h.count += 1;
    }

    /// Set gauge `name` to `v`.
    pub fn set(&self, name: &'static str, help: &'static str, labels: &[(&'static str, &str)], v: f64) {
        self.update(name, help, MetricKind::Gauge, labels, |x| *x = v);
    }

    /// Process-level gauges, read when asked for.
    fn refresh_process(&self) {
        if !std::ptr::eq(self, Metrics::global()) {
            return;
        }
        // /proc/self/statm: size resident shared ... in pages.
        if let Some(pages) = std::fs::read_to_string("/proc/self/statm").ok().and_then(|t| t.split_whitespace().nth(1).and_then(|x| x.parse::<f64>().ok())) {
            self.set("icicle_process_resident_bytes", "Resident memory of the icicle process.", &[], pages * 4096.0);
        }
    }

    /// Everything now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        self.refresh_process();
        let fams = self.families.lock().unwrap_or_else(|p| p.into_inner());
        let time = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        let mut series = Vec::new();
        for (name, f) in fams.iter() {
            for (labels, v) in &f.series {
                series.push(Series {
                    name: name.to_string(),
                    kind: match f.kind {
                        MetricKind::Counter => "counter".into(),
                        MetricKind::Gauge => "gauge".into(),
                    },
                    labels: labels.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
                    value: *v,
                });
            }
        }
        // Histograms as their count and sum (the dashboard's averages).
        for (name, f) in self.histograms.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            for (labels, h) in &f.series {
                let labels: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
                for (suffix, value) in [("count", h.count as f64), ("sum", h.sum)] {
                    series.push(Series { name: format!("{name}_{suffix}"), kind: "histogram".into(), labels: labels.clone(), value });
                }
            }
        }
        MetricsSnapshot { time, uptime: self.start.elapsed().as_secs_f64(), series }
    }

    /// Prometheus text exposition format (version 0.0.4).
    pub fn prometheus(&self) -> String {
        self.refresh_process();
        let fams = self.families.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        for (name, f) in fams.iter() {
            let kind = match f.kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
            };
            out.push_str(&format!("# HELP {name} {}\n# TYPE {name} {kind}\n", f.help.replace('\\', "\\\\").replace('\n', "\\n")));
            for (labels, v) in &f.series {
                out.push_str(name);
                if !labels.is_empty() {
                    out.push('{');
                    for (i, (k, val)) in labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let esc = val.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
                        out.push_str(&format!("{k}=\"{esc}\""));
                    }
                    out.push('}');
                }
                out.push(' ');
                if v.is_finite() {
                    out.push_str(&format!("{v}"));
                } else if v.is_nan() {
                    out.push_str("NaN");
                } else if *v > 0.0 {
                    out.push_str("+Inf");
                } else {
                    out.push_str("-Inf");
                }
                out.push('\n');
            }
        }
        for (name, f) in self.histograms.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            out.push_str(&format!("# HELP {name} {}\n# TYPE {name} histogram\n", f.help.replace('\\', "\\\\").replace('\n', "\\n")));
            for (labels, h) in &f.series {
                let with = |extra: Option<String>| {
                    let mut parts: Vec<String> =
                        labels.iter().map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n"))).collect();
                    parts.extend(extra);
                    if parts.is_empty() {
                        String::new()
                    } else {
                        format!("{{{}}}", parts.join(","))
                    }
                };
                let mut cumulative = 0;
                for (b, n) in LATENCY_BUCKETS.iter().zip(h.buckets) {
                    cumulative += n;
                    out.push_str(&format!("{name}_bucket{} {cumulative}\n", with(Some(format!("le=\"{b}\"")))));
                }
                out.push_str(&format!("{name}_bucket{} {}\n", with(Some("le=\"+Inf\"".into())), h.count));
                out.push_str(&format!("{name}_sum{} {}\n{name}_count{} {}\n", with(None), h.sum, with(None), h.count));
            }
        }
        out
    }
}

/// What a stream monitor reports after each batch (running totals and the batch's own size).
pub struct BatchReport<'a> {
    pub component: &'a str,
    /// Records or events read (including filtered and rejected ones).
    pub records_in: u64,
    pub filtered: u64,
    pub rejects: u64,
    /// Reduction outcomes by name (coalesced, cancelled, passed, renames, ...).
    pub outcomes: &'a [(&'static str, u64)],
    pub updates: u64,
    pub deletes: u64,
    pub batches: u64,
    pub batch_size: usize,
    pub batch_seconds: f64,
    /// Objects held by the state, and their approximate heap bytes.
    pub state_entries: usize,
    pub state_bytes: usize,
    /// State counters by name (evictions, fid2path_calls, ...).
    pub state_counts: &'a [(&'static str, u64)],
}

/// Record one monitor batch in the global registry.
pub fn record_batch(r: &BatchReport<'_>) {
    let m = Metrics::global();
    let c = [("component", r.component)];
    m.set_counter("icicle_records_in_total", "Records or events read by a source.", &c, r.records_in as f64);
    m.set_counter("icicle_records_filtered_total", "Records dropped by type at ingestion.", &c, r.filtered as f64);
    m.set_counter("icicle_rejects_total", "Input that could not be used (reported with its position).", &c, r.rejects as f64);
    for (outcome, n) in r.outcomes {
        m.set_counter("icicle_reduce_total", "Reduction outcomes.", &[("component", r.component), ("outcome", outcome)], *n as f64);
    }
    m.set_counter("icicle_records_out_total", "Index operations emitted.", &[("component", r.component), ("op", "update")], r.updates as f64);
    m.set_counter("icicle_records_out_total", "Index operations emitted.", &[("component", r.component), ("op", "delete")], r.deletes as f64);
    m.set_counter("icicle_batches_total", "Batches processed and acknowledged.", &c, r.batches as f64);
    m.set("icicle_batch_size", "Records in the last batch.", &c, r.batch_size as f64);
    m.set("icicle_batch_seconds", "Processing and delivery time of the last batch.", &c, r.batch_seconds);
    m.observe("icicle_batch_duration_seconds", "Processing and delivery time of a batch.", &c, r.batch_seconds);
    m.set("icicle_state_entries", "Objects held by the monitor's state.", &c, r.state_entries as f64);
    m.set("icicle_state_bytes", "Approximate heap bytes of the monitor's state.", &c, r.state_bytes as f64);
    for (what, n) in r.state_counts {
        m.set_counter("icicle_state_events_total", "State events (evictions, fid2path calls, ...).", &[("component", r.component), ("event", what)], *n as f64);
    }
}

/// Serve `/metrics` (Prometheus text) and `/status` (JSON snapshot) on `addr` until the
/// process ends. Returns the bound address (port 0 picks a free one).
pub async fn serve(addr: &str) -> std::io::Result<std::net::SocketAddr> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut n = 0;
                // Read the request head (a GET has no body).
                while n < buf.len() {
                    match sock.read(&mut buf[n..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(k) => n += k,
                    }
                    if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                let head = String::from_utf8_lossy(&buf[..n]);
                let mut words = head.split_whitespace();
                let method = words.next().unwrap_or("");
                // The query string does not change what is served.
                let path = words.next().unwrap_or("/").split('?').next().unwrap_or("/");
                let (status, ctype, body) = match (method, path) {
                    ("GET" | "HEAD", "/metrics") => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", Metrics::global().prometheus()),
                    ("GET" | "HEAD", "/status") => {
                        ("200 OK", "application/json", serde_json::to_string(&Metrics::global().snapshot()).unwrap_or_else(|_| "{}".into()))
                    }
                    (_, "/metrics" | "/status") => ("405 Method Not Allowed\r\nAllow: GET, HEAD", "text/plain", "GET or HEAD only\n".to_string()),
                    _ => ("404 Not Found", "text/plain", "try /metrics or /status\n".to_string()),
                };
                let body = if method == "HEAD" { String::new() } else { body };
                let resp = format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                let _ = sock.write_all(resp.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_buckets_sum_and_count() {
        let m = Metrics::default();
        for v in [0.0005, 0.003, 0.003, 7.0, 500.0] {
            m.observe("icicle_x_duration_seconds", "X.", &[("sink", "a")], v);
        }
        let text = m.prometheus();
        assert!(text.contains("# TYPE icicle_x_duration_seconds histogram\n"), "{text}");
        assert!(text.contains("icicle_x_duration_seconds_bucket{sink=\"a\",le=\"0.001\"} 1\n"), "{text}");
        assert!(text.contains("icicle_x_duration_seconds_bucket{sink=\"a\",le=\"0.005\"} 3\n"), "{text}");
        assert!(text.contains("icicle_x_duration_seconds_bucket{sink=\"a\",le=\"10\"} 4\n"), "{text}");
        assert!(text.contains("icicle_x_duration_seconds_bucket{sink=\"a\",le=\"+Inf\"} 5\n"), "{text}");
        assert!(text.contains("icicle_x_duration_seconds_count{sink=\"a\"} 5\n"), "{text}");
        let s = m.snapshot();
        assert_eq!(s.get("icicle_x_duration_seconds_count", &[("sink", "a")]), Some(5.0));
        assert_eq!(s.get("icicle_x_duration_seconds_sum", &[("sink", "a")]), Some(0.0005 + 0.006 + 7.0 + 500.0));
    }

    #[test]
    fn counters_gauges_and_the_exposition_format() {
        let m = Metrics::default();
        m.add("icicle_records_in_total", "Records read.", &[("component", "mdt0")], 5.0);
        m.add("icicle_records_in_total", "Records read.", &[("component", "mdt0")], 2.0);
        m.set("icicle_changelog_lag", "Records not yet cleared.", &[("component", "mdt0"), ("mdt", "fs0-MDT0000")], 3.0);
        m.set("icicle_changelog_lag", "Records not yet cleared.", &[("component", "mdt0"), ("mdt", "fs0-MDT0000")], 1.0);
        m.set("icicle_weird", "A \"quoted\" label.", &[("component", "a\"b")], f64::INFINITY);
        let text = m.prometheus();
        assert_eq!(
            text,
            "# HELP icicle_changelog_lag Records not yet cleared.\n# TYPE icicle_changelog_lag gauge\nicicle_changelog_lag{component=\"mdt0\",mdt=\"fs0-MDT0000\"} 1\n\
             # HELP icicle_records_in_total Records read.\n# TYPE icicle_records_in_total counter\nicicle_records_in_total{component=\"mdt0\"} 7\n\
             # HELP icicle_weird A \"quoted\" label.\n# TYPE icicle_weird gauge\nicicle_weird{component=\"a\\\"b\"} +Inf\n"
        );
        let s = m.snapshot();
        assert_eq!(s.get("icicle_records_in_total", &[("component", "mdt0")]), Some(7.0));
        assert_eq!(s.sum("icicle_changelog_lag", &[]), 1.0);
        assert_eq!(s.label_values("icicle_changelog_lag", "mdt"), vec!["fs0-MDT0000".to_string()]);
    }
}
