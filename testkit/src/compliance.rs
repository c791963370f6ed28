//! The component compliance harness: what every `Source`, `Sink` and `Sketch` plugin must do,
//! whatever it is given. An empty input reads as no records (a listing file that is empty is
//! also reported as not whole, leaving everything unknown); a bad input is rejected with the
//! input named and a reason while the rest is read; nothing panics; a sink answers `Ok` only
//! once what it was given is durable, fails on a broken destination, and can be closed twice;
//! a sketch refuses NaN and other types, merges, and decodes what it encodes.
//! `tests/compliance.rs` runs it for every registered plugin.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use figment::providers::{Format, Toml};
use figment::Figment;
use icicle_core::access::Acl;
use icicle_core::batch::{DocumentBatch, EntryBatch};
use icicle_core::record::{FileRecord, Reject};
use icicle_core::registry::{self, BuildContext, Built, PluginKind};
use icicle_core::traits::{RowSink, Sink, Source, Split};

/// What reading every split of a source gave.
#[derive(Debug, Default)]
pub struct Read {
    /// Paths of the records, in reading order.
    pub records: Vec<String>,
    /// Directory rows read.
    pub directories: usize,
    /// Every record and directory row in reading order, with its kind and attributes.
    pub rows: Vec<String>,
    /// Rejects, including a split that failed and a record the runtime's check refuses.
    pub rejects: Vec<Reject>,
}

#[derive(Default)]
struct Collect {
    read: Read,
    spawned: Vec<Split>,
}

impl RowSink for Collect {
    /// A record the runtime's own check refuses (a time past 2400, a NUL in a name) is a
    /// reject, as the runtime counts it.
    fn record(&mut self, rec: &FileRecord<'_>) {
        self.read.rows.push(format!("{} {:?} {:?}", rec.path, rec.kind, rec.attrs));
        match rec.check() {
            Ok(()) => self.read.records.push(rec.path.to_string()),
            Err(e) => self.read.rejects.push(Reject::whole(rec.path, e, None)),
        }
    }
    fn directory(&mut self, rec: &FileRecord<'_>) {
        self.read.rows.push(format!("{} {:?} {:?}", rec.path, rec.kind, rec.attrs));
        self.read.directories += 1;
    }
    fn reject(&mut self, reject: Reject) {
        self.read.rejects.push(reject);
    }
    fn progress(&mut self, _units: u64) {}
    fn spawn(&mut self, split: Split) {
        self.spawned.push(split);
    }
    fn record_with_acl(&mut self, rec: &FileRecord<'_>, _acl: Option<Acl>) {
        self.record(rec)
    }
    fn directory_with_acl(&mut self, rec: &FileRecord<'_>, _acl: Option<Acl>) {
        self.directory(rec)
    }
}

/// Build the plugin configured by `body` (a TOML table with `type`) as section `key`.
pub fn build(kind: PluginKind, key: &str, body: &str) -> Result<Built, String> {
    let figment = Figment::from(Toml::string(&format!("[{key}]\n{body}")));
    let ty_key = format!("{key}.type");
    let ty =
        figment.find_value(&ty_key).ok().and_then(|v| v.into_string()).ok_or_else(|| format!("{key}: no `type`"))?;
    let desc = registry::find(kind, &ty, &ty_key, "the compliance harness").map_err(|e| e.to_string())?;
    (desc.build)(&BuildContext::for_test(&figment, key)).map_err(|e| e.to_string())
}

/// The snapshot source configured by `body`.
pub fn source(body: &str) -> Result<Arc<dyn Source>, String> {
    match build(PluginKind::Source, "sources.s", body)? {
        Built::Source(s) => Ok(s),
        _ => Err("not a snapshot source".into()),
    }
}

/// The sink configured by `body`.
pub fn sink(body: &str) -> Result<Box<dyn Sink>, String> {
    match build(PluginKind::Sink, "sinks.k", body)? {
        Built::Sink(s) => Ok(s),
        _ => Err("not a sink".into()),
    }
}

/// Plan `src` and read every split (and every split it spawns) on this thread; a split that
/// fails is one reject for its input, as the runtime counts it; a panic is an error.
pub fn read_all(src: &dyn Source) -> Result<Read, String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let mut queue: std::collections::VecDeque<Split> =
        rt.block_on(src.plan()).map_err(|e| format!("plan: {e}"))?.into();
    let mut c = Collect::default();
    while let Some(split) = queue.pop_front() {
        let read = std::panic::catch_unwind(AssertUnwindSafe(|| src.read(&split, &mut c)))
            .map_err(|_| format!("reading {} panicked", split.name))?;
        if let Err(e) = read {
            c.read.rejects.push(Reject::whole(&split.name, e.to_string(), None));
        }
        queue.extend(c.spawned.drain(..));
    }
    Ok(c.read)
}

/// A source's three cases: `empty` configures an empty input, `good` a readable one, `bad`
/// the same input with at least one unreadable row or entry added. Returns the good records.
pub fn check_source(empty: &str, good: &str, bad: &str) -> Result<usize, String> {
    let r = read_all(source(empty)?.as_ref())?;
    // An empty listing file cannot be shown whole: at most that is reported, never a record.
    let not_whole =
        |j: &Reject| j.incomplete && j.scope == Some(icicle_core::scope::Scope::All) && !j.reason.trim().is_empty();
    if !r.records.is_empty() || !r.rejects.iter().all(not_whole) {
        return Err(format!("an empty input gave {} records and rejects {:?}", r.records.len(), r.rejects));
    }
    let g = read_all(source(good)?.as_ref())?;
    if g.records.is_empty() || !g.rejects.is_empty() {
        return Err(format!("a good input gave {} records and rejects {:?}", g.records.len(), g.rejects));
    }
    let r = read_all(source(bad)?.as_ref())?;
    if r.rejects.is_empty() {
        return Err("a bad input gave no reject".into());
    }
    if let Some(j) = r.rejects.iter().find(|j| j.input.is_empty() || j.reason.trim().is_empty()) {
        return Err(format!("a reject names no input or no reason: {j:?}"));
    }
    let (mut want, mut got) = (g.records.clone(), r.records.clone());
    want.sort();
    got.sort();
    if got != want {
        return Err(format!("a bad input gave {} records, not the {} of the good input", got.len(), want.len()));
    }
    Ok(g.records.len())
}

/// One primary entry for `subject`, in the encoder's shape (no entry id).
fn entry(subject: &str) -> Vec<u8> {
    serde_json::json!({"subject": subject, "visible_to": ["public"], "content": {"path": subject, "type": "file"}})
        .to_string()
        .into_bytes()
}

/// A sink: `ok` delivers to a working destination, and `durable()` counts the documents that
/// are durably there (`None`: nothing to observe, e.g. stdout); `broken` (if any) points at a
/// destination that cannot take anything. Ingest and delete documents are delivered; `Ok`
/// from `sync` after `deliver` must mean durable; a broken destination must fail; close twice
/// must be fine.
pub async fn check_sink(
    ok: &str,
    broken: Option<&str>,
    durable: Option<&(dyn Fn() -> usize + Sync)>,
) -> Result<(), String> {
    let mut s = sink(ok)?;
    let mut batch = EntryBatch::default();
    batch.push(&entry("/compliance/a"));
    batch.push(&entry("/compliance/b"));
    let before = durable.map(|d| d());
    s.deliver(&DocumentBatch::Ingest(batch)).await.map_err(|e| format!("ingest: {e}"))?;
    s.sync().await.map_err(|e| format!("sync after ingest: {e}"))?;
    if let (Some(d), Some(b)) = (durable, before) {
        if d() <= b {
            return Err("the sink said Ok before the ingest document was durable".into());
        }
    }
    let before = durable.map(|d| d());
    s.deliver(&DocumentBatch::Delete(vec!["/compliance/a".into()])).await.map_err(|e| format!("delete: {e}"))?;
    s.sync().await.map_err(|e| format!("sync after delete: {e}"))?;
    if let (Some(d), Some(b)) = (durable, before) {
        if d() <= b {
            return Err("the sink said Ok before the delete document was durable".into());
        }
    }
    s.close().await.map_err(|e| format!("close: {e}"))?;
    s.close().await.map_err(|e| format!("a second close: {e}"))?;
    if let Some(b) = broken {
        let mut s = match sink(b) {
            Ok(s) => s,
            // Refused when built: nothing can be acknowledged either.
            Err(_) => return Ok(()),
        };
        let mut batch = EntryBatch::default();
        batch.push(&entry("/compliance/c"));
        if s.deliver(&DocumentBatch::Ingest(batch)).await.is_ok() {
            return Err("a sink with a broken destination said Ok".into());
        }
    }
    Ok(())
}

/// A sketch type with its default configuration.
pub fn check_sketch(kind: &str) -> Result<(), String> {
    let f = registry::default_sketch(kind).map_err(|e| e.to_string())?;
    let mut a = f.create();
    if a.count() != 0 || a.quantile(0.5).is_some() {
        return Err("an empty sketch has a count or a quantile".into());
    }
    if a.insert(f64::NAN).is_ok() {
        return Err("NaN was accepted".into());
    }
    let mut rng = icicle_core::rng::Rng::new(11);
    for _ in 0..2000 {
        a.insert((rng.f64() * 1e6).floor()).map_err(|e| e.to_string())?;
    }
    let q = |s: &dyn icicle_core::traits::Sketch| [0.1, 0.5, 0.9, 0.99].map(|p| s.quantile(p));
    let before = q(a.as_ref());
    if before.windows(2).any(|w| w[0] > w[1]) {
        return Err(format!("quantiles not monotone: {before:?}"));
    }
    a.merge(f.create().as_ref()).map_err(|e| format!("merging an empty sketch: {e}"))?;
    if q(a.as_ref()) != before || a.count() != 2000 {
        return Err("merging an empty sketch changed it".into());
    }
    let decoded = f.decode(&a.to_bytes()).map_err(|e| format!("decoding: {e}"))?;
    if q(decoded.as_ref()) != before || decoded.count() != a.count() {
        return Err("a decoded sketch differs".into());
    }
    let mut b = f.create();
    b.merge(a.as_ref()).map_err(|e| e.to_string())?;
    b.merge(a.as_ref()).map_err(|e| e.to_string())?;
    if b.count() != 4000 {
        return Err(format!("two merges of 2000 values count {}", b.count()));
    }
    let other =
        registry::plugins().into_iter().find(|p| p.kind == PluginKind::Sketch && p.name != kind).map(|p| p.name);
    if let Some(o) = other {
        let g = registry::default_sketch(o).map_err(|e| e.to_string())?;
        let mut x = g.create();
        x.insert(1.0).map_err(|e| e.to_string())?;
        if a.merge(x.as_ref()).is_ok() {
            return Err(format!("a `{o}` sketch merged into a `{kind}` sketch"));
        }
    }
    if f.decode(b"\xff\x00 not a sketch").is_ok() {
        return Err("garbage decoded as a sketch".into());
    }
    Ok(())
}
