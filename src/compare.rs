//! `icicle sketch-compare`: every sketch over the same snapshot, measured against exact
//! quantiles for every user and group and every attribute, with the seed's two metrics:
//! relative value error |q̂ − q| / |q| and normalized rank error |r̂ − r*| / N.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use icicle_core::config::LoadedConfig;
use icicle_core::record::FileRecord;
use icicle_core::registry;
use icicle_core::traits::SketchFactory;
use icicle_runtime::snapshot::{NoProgress, RowProcessor, RowProcessorFactory, SnapshotJob};

/// The quantiles measured.
pub const QS: [(f64, &str); 6] =
    [(0.10, "p10"), (0.25, "p25"), (0.50, "p50"), (0.75, "p75"), (0.90, "p90"), (0.99, "p99")];
/// The attributes measured (times as ages relative to the reference time).
pub const ATTRS: [&str; 4] = ["size", "atime", "ctime", "mtime"];

/// Per principal, each attribute's values: sizes, and times as read (seconds since the
/// epoch) until [`to_ages`] makes them ages.
type Values = HashMap<String, [Vec<f64>; 4]>;

struct Collector {
    values: Values,
    out: Arc<Mutex<Values>>,
}

impl RowProcessor for Collector {
    fn record(&mut self, rec: &FileRecord<'_>) {
        // Seconds since the epoch are exact in an f64 (under 2^53).
        let v = [rec.attrs.size as f64, rec.attrs.atime as f64, rec.attrs.ctime as f64, rec.attrs.mtime as f64];
        for key in [format!("user:{}", rec.attrs.uid), format!("group:{}", rec.attrs.gid)] {
            let e = self.values.entry(key).or_default();
            for i in 0..4 {
                e[i].push(v[i]);
            }
        }
    }
    fn finish(self: Box<Self>) {
        if let Ok(mut all) = self.out.lock() {
            for (k, v) in self.values {
                let e = all.entry(k).or_default();
                for (i, vals) in v.into_iter().enumerate() {
                    e[i].extend(vals);
                }
            }
        }
    }
}

struct CollectorFactory {
    out: Arc<Mutex<Values>>,
}

impl RowProcessorFactory for CollectorFactory {
    fn make(&self, _worker: usize) -> Box<dyn RowProcessor> {
        Box::new(Collector { values: HashMap::new(), out: self.out.clone() })
    }
}

/// Where the ages are measured from, and why there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference {
    /// `aggregate.reference_time`.
    Configured(i64),
    /// A seeded run without one: the newest time in the snapshot, so the same snapshot and
    /// seed give the same ages whenever they run.
    NewestInSnapshot(i64),
    /// The run's start.
    RunStart(i64),
}

impl Reference {
    /// The time, seconds since the epoch.
    pub fn time(self) -> i64 {
        match self {
            Reference::Configured(t) | Reference::NewestInSnapshot(t) | Reference::RunStart(t) => t,
        }
    }

    fn how(self) -> &'static str {
        match self {
            Reference::Configured(_) => "aggregate.reference_time",
            Reference::NewestInSnapshot(_) => "the newest time in the snapshot (a seeded run)",
            Reference::RunStart(_) => "the run's start",
        }
    }
}

/// The reference of a run: configured, else with a seed the newest time among `values`,
/// else now.
fn reference_for(configured: Option<i64>, seeded: bool, values: &Values) -> Reference {
    match configured {
        Some(t) => Reference::Configured(t),
        None if seeded => {
            let newest = values.values().flat_map(|v| v[1..].iter().flatten()).fold(f64::MIN, |a, &b| a.max(b));
            Reference::NewestInSnapshot(if newest == f64::MIN { 0 } else { newest as i64 })
        }
        None => Reference::RunStart(icicle_core::time::now_epoch()),
    }
}

/// Make every time of `values` its age at `reference` (seconds before it).
fn to_ages(values: &mut Values, reference: i64) {
    let r = reference as f64;
    for v in values.values_mut() {
        for t in v[1..].iter_mut().flatten() {
            *t = r - *t;
        }
    }
}

/// One measurement.
#[derive(Debug, Clone)]
pub struct Measurement {
    pub sketch: String,
    pub principal: String,
    pub attribute: &'static str,
    pub quantile: &'static str,
    pub n: usize,
    pub exact: f64,
    pub estimate: f64,
    pub value_error: f64,
    pub rank_error: f64,
}

/// Per-sketch cost.
#[derive(Debug, Clone, Default)]
pub struct SketchCost {
    pub sketches: u64,
    pub bytes: u64,
    pub inserts: u64,
    pub insert_ns: f64,
}

/// Relative value error; `q = 0` uses a denominator of 1 (one byte, one second).
pub fn value_error(exact: f64, est: f64) -> f64 {
    (est - exact).abs() / exact.abs().max(1.0)
}

/// Normalized rank error of `est` in `sorted` for quantile `q` (midpoint rank for ties).
pub fn rank_error(sorted: &[f64], q: f64, est: f64) -> f64 {
    let n = sorted.len() as f64;
    let lt = sorted.partition_point(|x| *x < est) as f64;
    let le = sorted.partition_point(|x| *x <= est) as f64;
    ((lt + le) / 2.0 - q * n).abs() / n
}

/// Costs per sketch type.
pub type Costs = Vec<(String, SketchCost)>;

/// The seed of the sketch of `kind` over `principal`'s `attribute` in a run seeded with `seed`:
/// FNV-1a over the four (stable everywhere, unlike std's hasher), then SplitMix64's mixer ([`icicle_core::rng::mix64`]), so
/// each sketch's seed depends on what it measures, not on the order sketches are made in.
pub fn sketch_seed(seed: u64, principal: &str, attribute: &str, kind: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [&seed.to_le_bytes()[..], principal.as_bytes(), attribute.as_bytes(), kind.as_bytes()] {
        // Each part ends with a byte no UTF-8 text contains, so parts cannot run together.
        for &b in part.iter().chain(&[0xff]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    icicle_core::rng::mix64(h)
}

/// Measure every sketch on every principal and attribute. With `seed`, every sketch is made
/// with [`SketchFactory::create_seeded`] and a seed from [`sketch_seed`]: the same seed gives
/// the same measurements.
pub fn measure(
    values: &Values,
    factories: &[Arc<dyn SketchFactory>],
    seed: Option<u64>,
) -> anyhow::Result<(Vec<Measurement>, Costs)> {
    let mut keys: Vec<&String> = values.keys().collect();
    keys.sort();
    let mut out = Vec::new();
    let mut costs: Vec<(String, SketchCost)> =
        factories.iter().map(|f| (f.kind().to_string(), SketchCost::default())).collect();
    for key in keys {
        for (ai, attr) in ATTRS.iter().enumerate() {
            let vals = &values[key][ai];
            if vals.is_empty() {
                continue;
            }
            let mut sorted = vals.clone();
            sorted.sort_by(|a, b| a.total_cmp(b));
            for (fi, f) in factories.iter().enumerate() {
                let mut s = match seed {
                    Some(seed) => f.create_seeded(sketch_seed(seed, key, attr, f.kind())),
                    None => f.create(),
                };
                let t = Instant::now();
                for &v in vals {
                    s.insert(v).with_context(|| format!("{} on {key} {attr}", f.kind()))?;
                }
                let ns = t.elapsed().as_nanos() as f64;
                let cost = &mut costs[fi].1;
                cost.sketches += 1;
                cost.bytes += s.memory_bytes() as u64;
                cost.inserts += vals.len() as u64;
                cost.insert_ns += ns;
                for (q, qname) in QS {
                    let exact = sorted[(q * (sorted.len() as f64 - 1.0)) as usize];
                    let est = s.quantile(q).unwrap_or(f64::NAN);
                    out.push(Measurement {
                        sketch: f.kind().to_string(),
                        principal: key.clone(),
                        attribute: attr,
                        quantile: qname,
                        n: sorted.len(),
                        exact,
                        estimate: est,
                        value_error: value_error(exact, est),
                        rank_error: rank_error(&sorted, q, est),
                    });
                }
            }
        }
    }
    Ok((out, costs))
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((p * (v.len() as f64 - 1.0)).round() as usize).min(v.len() - 1)]
}

/// One summary row: (sketch, attribute, quantile, mean/p95/max value error, mean/p95/max rank error).
pub type SummaryRow = (String, String, String, [f64; 6]);

/// Summary rows per sketch, attribute and quantile (and `all`).
pub fn summarize(ms: &[Measurement]) -> Vec<SummaryRow> {
    type Errors = (Vec<f64>, Vec<f64>);
    let mut groups: std::collections::BTreeMap<(String, String, String), Errors> = Default::default();
    for m in ms {
        for (a, q) in [(m.attribute.to_string(), m.quantile.to_string()), ("all".into(), "all".into())] {
            let e = groups.entry((m.sketch.clone(), a, q)).or_default();
            e.0.push(m.value_error);
            e.1.push(m.rank_error);
        }
    }
    groups
        .into_iter()
        .map(|((s, a, q), (mut ve, mut re))| {
            let stats =
                [mean(&ve), pct(&mut ve, 0.95), pct(&mut ve, 1.0), mean(&re), pct(&mut re, 0.95), pct(&mut re, 1.0)];
            (s, a, q, stats)
        })
        .collect()
}

/// Run the experiment over the snapshot configured in `cfg`; `seed` makes it reproducible
/// (see [`measure`]; the snapshot is then read by one worker, so every principal's values
/// arrive in the same order).
pub fn run(cfg: &LoadedConfig, out: &Path, sketches: &[String], seed: Option<u64>) -> anyhow::Result<String> {
    let factories: Vec<Arc<dyn SketchFactory>> =
        sketches.iter().map(|s| registry::default_sketch(s)).collect::<Result<_, _>>()?;
    let (sources, _) = icicle_runtime::compose::components_allow_no_sinks(cfg)?;
    let values = Arc::new(Mutex::new(Values::new()));
    let mut settings = cfg.app.snapshot.clone();
    settings.state_dir = None;
    if seed.is_some() {
        settings.workers = 1;
    }
    let job = SnapshotJob {
        sources,
        sinks: vec![("null".into(), Box::new(icicle_plugins_sinks::BlackholeSink::default()))],
        count_sinks: Vec::new(),
        policy: Arc::new(icicle_runtime::compose::record_policy(cfg)?),
        settings,
        progress: Arc::new(NoProgress),
        processors: vec![Arc::new(CollectorFactory { out: values.clone() })],
        finishers: vec![],
        primary: false,
        cluster: None,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let summary = rt.block_on(icicle_runtime::snapshot::run(job))?;
    let mut values = std::mem::take(&mut *values.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);
    let reference = reference_for(cfg.app.aggregate.reference_time, seed.is_some(), &values);
    to_ages(&mut values, reference.time());
    let (ms, costs) = measure(&values, &factories, seed)?;
    std::fs::create_dir_all(out)?;
    // What the run measured from, beside what it measured (to run it again as it was).
    let run = serde_json::json!({
        "reference_time": reference.time(),
        "reference": reference.how(),
        "seed": seed,
        "sketches": sketches,
    });
    std::fs::write(out.join("run.json"), format!("{run:#}\n"))?;
    let mut w = std::io::BufWriter::new(std::fs::File::create(out.join("measurements.csv"))?);
    writeln!(w, "sketch,principal,attribute,quantile,n,exact,estimate,value_error,rank_error")?;
    for m in &ms {
        writeln!(
            w,
            "{},{},{},{},{},{},{},{:.6e},{:.6e}",
            m.sketch, m.principal, m.attribute, m.quantile, m.n, m.exact, m.estimate, m.value_error, m.rank_error
        )?;
    }
    w.flush()?;
    let rows = summarize(&ms);
    let mut w = std::io::BufWriter::new(std::fs::File::create(out.join("summary.csv"))?);
    writeln!(w, "sketch,attribute,quantile,value_error_mean,value_error_p95,value_error_max,rank_error_mean,rank_error_p95,rank_error_max")?;
    for (s, a, q, st) in &rows {
        writeln!(w, "{s},{a},{q},{:.6e},{:.6e},{:.6e},{:.6e},{:.6e},{:.6e}", st[0], st[1], st[2], st[3], st[4], st[5])?;
    }
    w.flush()?;
    let mut w = std::io::BufWriter::new(std::fs::File::create(out.join("costs.csv"))?);
    writeln!(w, "sketch,bytes_per_sketch,ns_per_insert")?;
    for (s, c) in &costs {
        writeln!(
            w,
            "{s},{:.0},{:.1}",
            c.bytes as f64 / c.sketches.max(1) as f64,
            c.insert_ns / c.inserts.max(1) as f64
        )?;
    }
    w.flush()?;
    #[cfg(feature = "charts")]
    if let Err(e) = crate::chart::scatter(&rows, &out.join("value-vs-rank-error.png"))
        .and_then(|()| crate::chart::ecdf(&ms, &rows, &out.join("error-distributions.png")))
    {
        tracing::warn!(message = "could not draw the charts", error = %e);
    }
    // The table printed for people (and read by the dashboard's sketch view).
    let mut t = String::new();
    t.push_str(&format!(
        "{} rows read; {} users and groups; {} measurements; reference time {} ({})\n\n",
        summary.rows,
        values.len(),
        ms.len(),
        icicle_core::time::iso8601(reference.time()),
        reference.how()
    ));
    t.push_str("| sketch | value error mean | value error p95 | value error max | rank error mean | rank error p95 | rank error max | bytes/sketch | ns/insert |\n|---|---|---|---|---|---|---|---|---|\n");
    for (s, a, _, st) in &rows {
        if a == "all" {
            let c = &costs.iter().find(|(n, _)| n == s).map(|(_, c)| c.clone()).unwrap_or_default();
            t.push_str(&format!(
                "| {s} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.0} | {:.1} |\n",
                st[0],
                st[1],
                st[2],
                st[3],
                st[4],
                st[5],
                c.bytes as f64 / c.sketches.max(1) as f64,
                c.insert_ns / c.inserts.max(1) as f64
            ));
        }
    }
    t.push_str("\nper attribute and quantile (mean value error / mean rank error):\n\n| sketch | attribute | p10 | p25 | p50 | p75 | p90 | p99 |\n|---|---|---|---|---|---|---|---|\n");
    type ByQuantile = Vec<(String, [f64; 6])>;
    let mut by: std::collections::BTreeMap<(String, String), ByQuantile> = Default::default();
    for (s, a, q, st) in &rows {
        if a != "all" {
            by.entry((s.clone(), a.clone())).or_default().push((q.clone(), *st));
        }
    }
    for ((s, a), qs) in by {
        let cell = |name: &str| {
            qs.iter().find(|(q, _)| q == name).map(|(_, st)| format!("{:.4} / {:.4}", st[0], st[3])).unwrap_or_default()
        };
        t.push_str(&format!(
            "| {s} | {a} | {} | {} | {} | {} | {} | {} |\n",
            cell("p10"),
            cell("p25"),
            cell("p50"),
            cell("p75"),
            cell("p90"),
            cell("p99")
        ));
    }
    std::fs::write(out.join("summary.md"), &t)?;
    Ok(t)
}
