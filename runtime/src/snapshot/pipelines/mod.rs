//! The counting and aggregate pipelines, run by every snapshot worker next to the primary
//! records over the same single read of the input.
//!
//! Counting (`counting`): counts of rows per user, group and directory, sharded as in the
//! seed by the crc32 of each row's Icicle 9-column CSV line, written as a CSV.
//!
//! Aggregate (here): each row expands to its user, its group and every directory prefix between
//! `directory_min` and `directory_max`; per principal, sketches of size and of the ages of
//! atime/ctime/mtime (relative to one reference time per run) plus exact count, total, min
//! and max. Shards (workers) are merged with `Sketch::merge`.
//!
//! Across MPI ranks (`shuffle`): aggregates are rolled up on each rank and then moved to the
//! rank owning each principal, which merges and emits them; counts are gathered on rank 0,
//! which writes the CSV.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

mod counting;
pub mod counts;
mod shuffle;

use crate::snapshot::cluster::Cluster;
use crate::snapshot::{PipelineFinisher, RowProcessor, RowProcessorFactory};
pub use icicle_core::config::{AggregateSettings, CountingSettings};
use icicle_core::policy::RecordPolicy;
use icicle_core::record::{FileKind, FileRecord};
use icicle_core::time::push_iso8601;
use icicle_core::traits::{Sketch, SketchFactory};
use icicle_gmeta::{push_json_str, PrimaryEncoder};

pub use counting::{write_csv, CountRow, Counting};

/// Number of shards rows are spread over.
pub const SHARDS: usize = 64;

/// The directory components of `path`'s parent (`/a/b/c.txt` → `a`, `b`).
fn parent_components(path: &str) -> impl Iterator<Item = &str> {
    let parent = match path.rfind('/') {
        Some(i) => &path[..i],
        None => "",
    };
    parent.split('/').filter(|c| !c.is_empty())
}

/// `/` plus the first `level` directory components of `path`'s parent; `None` when the
/// parent is shallower than `level`.
pub fn dir_prefix(path: &str, level: usize) -> Option<String> {
    let mut out = String::from("/");
    let mut n = 0;
    for c in parent_components(path).take(level) {
        if n > 0 {
            out.push('/');
        }
        out.push_str(c);
        n += 1;
    }
    (n == level).then_some(out)
}

/// The depth of `path`'s parent directory (`/a/b/c.txt` → 2).
pub fn parent_depth(path: &str) -> usize {
    parent_components(path).count()
}

/// crc32 of the record's Icicle 9-column CSV line (as written), modulo 64.
pub fn shard_of(rec: &FileRecord<'_>) -> usize {
    thread_local! {
        static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    LINE.with(|line| {
        let mut line = line.borrow_mut();
        line.clear();
        line.push(if rec.kind == FileKind::Link { b'l' } else { b'f' });
        let mut b = itoa::Buffer::new();
        for v in [rec.attrs.mode as i64, rec.attrs.uid as i64, rec.attrs.gid as i64] {
            line.push(b',');
            line.extend_from_slice(b.format(v).as_bytes());
        }
        line.push(b',');
        line.extend_from_slice(b.format(rec.attrs.size).as_bytes());
        for v in [rec.attrs.atime, rec.attrs.ctime, rec.attrs.mtime] {
            line.push(b',');
            line.extend_from_slice(b.format(v).as_bytes());
        }
        line.push(b',');
        // The path as the CSV holds it: its bytes, not their escaped text.
        let path = icicle_core::name::unescape(rec.path);
        if path.iter().any(|&c| c == b',' || c == b'"') {
            line.push(b'"');
            for &c in path.iter() {
                if c == b'"' {
                    line.push(b'"');
                }
                line.push(c);
            }
            line.push(b'"');
        } else {
            line.extend_from_slice(&path);
        }
        (crc32fast::hash(&line) as usize) % SHARDS
    })
}

// ---------------------------------------------------------------------------------------
// Aggregate

/// The statistics of one principal.
pub struct PrincipalStats {
    /// Records of the principal.
    pub count: u64,
    /// Sum of their sizes in bytes.
    pub total_size: u128,
    /// min/max of size, atime, ctime, mtime.
    pub min: [i64; 4],
    /// Maximum of size, atime, ctime, mtime (as `min`).
    pub max: [i64; 4],
    /// Sketches of size and of the ages of atime, ctime, mtime.
    pub sketches: [Box<dyn Sketch>; 4],
}

impl PrincipalStats {
    fn new(f: &dyn SketchFactory) -> PrincipalStats {
        PrincipalStats {
            count: 0,
            total_size: 0,
            min: [i64::MAX; 4],
            max: [i64::MIN; 4],
            sketches: [f.create(), f.create(), f.create(), f.create()],
        }
    }

    fn add(&mut self, v: [i64; 4], reference: i64) -> Result<(), String> {
        self.count += 1;
        self.total_size += v[0] as u128;
        for (i, &x) in v.iter().enumerate() {
            self.min[i] = self.min[i].min(x);
            self.max[i] = self.max[i].max(x);
            // Size as is; times as ages relative to the reference.
            let value = if i == 0 { x as f64 } else { (reference - x) as f64 };
            self.sketches[i].insert(value).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn merge(&mut self, o: &PrincipalStats) -> Result<(), String> {
        self.count += o.count;
        self.total_size += o.total_size;
        for i in 0..4 {
            self.min[i] = self.min[i].min(o.min[i]);
            self.max[i] = self.max[i].max(o.max[i]);
            self.sketches[i].merge(o.sketches[i].as_ref()).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Approximate memory held.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.sketches.iter().map(|s| s.memory_bytes()).sum::<usize>()
    }
}

/// The quantiles reported for every attribute.
pub const QUANTILES: [(f64, &str); 6] =
    [(0.10, "p10"), (0.25, "p25"), (0.50, "p50"), (0.75, "p75"), (0.90, "p90"), (0.99, "p99")];

/// The aggregate pipeline.
pub struct Aggregate {
    settings: AggregateSettings,
    factory: Arc<dyn SketchFactory>,
    reference: i64,
    merged: Mutex<(HashMap<String, PrincipalStats>, Vec<String>)>,
    /// Directory prefixes were already rolled up (before a shuffle across ranks).
    rolled: std::sync::atomic::AtomicBool,
    /// Bytes this rank sent to other ranks in the shuffle.
    shuffled: std::sync::atomic::AtomicU64,
    /// What each principal's file count is checked against, once set.
    counts: Mutex<Option<ExpectedCounts>>,
    /// Across ranks, (this rank, ranks): the principals this rank owns after the shuffle.
    share: Mutex<Option<(usize, usize)>>,
}

/// The counts the aggregate pipeline checks its file counts against.
#[derive(Clone)]
pub enum ExpectedCounts {
    /// A counts CSV read before the run (`[aggregate] counts`), by aggregate subject.
    File(std::path::PathBuf, Arc<HashMap<String, u64>>),
    /// The counting pipeline of the same run.
    Pipeline(Arc<Counting>),
}

struct AggregateWorker {
    parent: Arc<Aggregate>,
    index: HashMap<String, usize>,
    stats: Vec<(String, PrincipalStats)>,
    users: HashMap<u32, usize>,
    groups: HashMap<u32, usize>,
    last_parent: String,
    last_dirs: Vec<usize>,
    last_user: (u32, usize),
    last_group: (u32, usize),
    errors: Vec<String>,
}

impl AggregateWorker {
    fn slot(&mut self, key: String) -> usize {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.stats.len();
        self.stats.push((key.clone(), PrincipalStats::new(self.parent.factory.as_ref())));
        self.index.insert(key, i);
        i
    }
}

impl AggregateWorker {
    /// The slot of `user:<id>` or `group:<id>`, remembering the last one (rows come in runs).
    fn id_slot(&mut self, group: bool, id: u32) -> usize {
        let last = if group { self.last_group } else { self.last_user };
        if last.0 == id && last.1 != usize::MAX {
            return last.1;
        }
        let known = if group { self.groups.get(&id) } else { self.users.get(&id) }.copied();
        let i = match known {
            Some(i) => i,
            None => {
                let i = self.slot(format!("{}:{id}", if group { "group" } else { "user" }));
                if group {
                    self.groups.insert(id, i)
                } else {
                    self.users.insert(id, i)
                };
                i
            }
        };
        if group {
            self.last_group = (id, i);
        } else {
            self.last_user = (id, i);
        }
        i
    }
}

impl RowProcessor for AggregateWorker {
    fn record(&mut self, rec: &FileRecord<'_>) {
        let v = [rec.attrs.size.min(i64::MAX as u64) as i64, rec.attrs.atime, rec.attrs.ctime, rec.attrs.mtime];
        let u = self.id_slot(false, rec.attrs.uid);
        let g = self.id_slot(true, rec.attrs.gid);
        let parent = rec.path.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
        if parent != self.last_parent {
            self.last_parent.clear();
            self.last_parent.push_str(parent);
            self.last_dirs.clear();
            // Only the deepest prefix is updated per row; shallower prefixes receive it when
            // the statistics are rolled up after the read (merges are exact for DDSketch).
            let depth = parent_depth(rec.path);
            let hi = self.parent.settings.directory_max.min(depth);
            if hi >= self.parent.settings.directory_min {
                if let Some(p) = dir_prefix(rec.path, hi) {
                    let i = self.slot(format!("dir:{p}"));
                    self.last_dirs.push(i);
                }
            }
        }
        let reference = self.parent.reference;
        let mut err = None;
        for i in [u, g].into_iter().chain(self.last_dirs.iter().copied()) {
            if let Err(e) = self.stats[i].1.add(v, reference) {
                err = Some(e);
            }
        }
        if let Some(e) = err {
            if self.errors.len() < 10 {
                self.errors.push(format!("{}: {e}", rec.path));
            }
        }
    }

    fn finish(self: Box<Self>) {
        let Ok(mut m) = self.parent.merged.lock() else { return };
        let (map, errors) = &mut *m;
        errors.extend(self.errors);
        for (k, s) in self.stats {
            match map.get_mut(&k) {
                Some(existing) => {
                    if let Err(e) = existing.merge(&s) {
                        errors.push(format!("{k}: {e}"));
                    }
                }
                None => {
                    map.insert(k, s);
                }
            }
        }
    }
}

struct AggregateHandle(Arc<Aggregate>);

impl RowProcessorFactory for AggregateHandle {
    fn make(&self, _worker: usize) -> Box<dyn RowProcessor> {
        Box::new(AggregateWorker {
            parent: self.0.clone(),
            index: HashMap::new(),
            stats: Vec::new(),
            users: HashMap::new(),
            groups: HashMap::new(),
            last_parent: "\0".into(),
            last_dirs: Vec::new(),
            last_user: (0, usize::MAX),
            last_group: (0, usize::MAX),
            errors: Vec::new(),
        })
    }
}

fn push_int(out: &mut Vec<u8>, v: impl itoa::Integer) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(v).as_bytes());
}

impl Aggregate {
    /// An aggregate pipeline over sketches from `factory`, ages measured from `reference`.
    pub fn new(
        settings: AggregateSettings,
        factory: Arc<dyn SketchFactory>,
        reference: i64,
    ) -> (Arc<Aggregate>, Arc<dyn RowProcessorFactory>) {
        let a = Arc::new(Aggregate {
            settings,
            factory,
            reference,
            merged: Mutex::new((HashMap::new(), Vec::new())),
            rolled: Default::default(),
            shuffled: Default::default(),
            counts: Mutex::new(None),
            share: Mutex::new(None),
        });
        (a.clone(), Arc::new(AggregateHandle(a)))
    }

    /// Check every principal's file count against `counts` when the records are made.
    pub fn check_counts(&self, counts: ExpectedCounts) {
        if let Ok(mut c) = self.counts.lock() {
            *c = Some(counts);
        }
    }

    /// Roll the deepest-prefix statistics up into every shallower prefix down to
    /// `directory_min`. Runs once, after all workers finished.
    fn roll_up(&self, map: &mut HashMap<String, PrincipalStats>, errors: &mut Vec<String>) {
        let min = self.settings.directory_min;
        let depth = |d: &str| if d == "/" { 0 } else { d.matches('/').count() };
        let mut dirs: Vec<(usize, String)> =
            map.keys().filter_map(|k| k.strip_prefix("dir:").map(|d| (depth(d), d.to_string()))).collect();
        dirs.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        // Process deepest first so each level is complete before it is merged upward.
        let mut i = 0;
        while i < dirs.len() {
            let (d, dir) = dirs[i].clone();
            i += 1;
            if d <= min {
                continue;
            }
            let parent = match dir.rfind('/') {
                Some(0) => "/".to_string(),
                Some(j) => dir[..j].to_string(),
                None => continue,
            };
            let pkey = format!("dir:{parent}");
            let Some(child) = map.remove(&format!("dir:{dir}")) else { continue };
            if !map.contains_key(&pkey) {
                map.insert(pkey.clone(), PrincipalStats::new(self.factory.as_ref()));
                // Insert the new parent in depth order so it is rolled up in turn.
                let pos = dirs[i..].iter().position(|(pd, _)| *pd < d).map(|p| p + i).unwrap_or(dirs.len());
                dirs.insert(pos, (d - 1, parent.clone()));
            }
            if let Some(p) = map.get_mut(&pkey) {
                if let Err(e) = p.merge(&child) {
                    errors.push(format!("dir:{dir}: {e}"));
                }
            }
            map.insert(format!("dir:{dir}"), child);
        }
    }

    /// The merged statistics, by subject.
    pub fn with_stats<R>(&self, f: impl FnOnce(&HashMap<String, PrincipalStats>) -> R) -> Option<R> {
        self.merged.lock().ok().map(|m| f(&m.0))
    }

    /// Encode one GMetaEntry per principal (sorted by subject) and a report.
    pub fn entries(&self, policy: &Arc<RecordPolicy>) -> (Vec<Vec<u8>>, serde_json::Value) {
        let Ok(mut m) = self.merged.lock() else { return (Vec::new(), serde_json::Value::Null) };
        let (map, errors) = &mut *m;
        if !self.rolled.swap(true, std::sync::atomic::Ordering::Relaxed) {
            self.roll_up(map, errors);
        }
        let (map, errors) = (&*map, &*errors);
        let mut keys: Vec<&String> = map.keys().collect();
        keys.sort();
        let mut enc = PrimaryEncoder::new(policy.clone());
        let mut dir_policy = (**policy).clone();
        dir_policy.visible_to =
            self.settings.dir_visible_to.iter().filter_map(|s| icicle_core::policy::VisibleTo::parse(s).ok()).collect();
        dir_policy.visible_to.extend(
            policy
                .visible_to
                .iter()
                .filter(|v| {
                    matches!(v, icicle_core::policy::VisibleTo::Public | icicle_core::policy::VisibleTo::Principal(_))
                })
                .cloned(),
        );
        // A directory's aggregate is never made public by the fallback.
        dir_policy.fallback.retain(|f| f != "public");
        let mut dir_enc = PrimaryEncoder::new(Arc::new(dir_policy));
        let mut out = Vec::with_capacity(keys.len());
        let mut without = 0u64;
        let mut memory = 0usize;
        // A directory's statistics cover everything below it: shown to whoever may list it all.
        let dir_paths: Vec<String> = if policy.access.is_some() { policy.dirs.paths() } else { Vec::new() };
        for k in keys {
            let s = &map[k];
            memory += s.memory_bytes();
            let vis = if policy.access.is_some() {
                self.posix_visible_to(k, policy, &dir_paths)
            } else if let Some(uid) = k.strip_prefix("user:").and_then(|u| u.parse::<u32>().ok()) {
                enc.visible_to_parts(Some(uid), None)
            } else if let Some(gid) = k.strip_prefix("group:").and_then(|g| g.parse::<u32>().ok()) {
                enc.visible_to_parts(None, Some(gid))
            } else {
                dir_enc.visible_to_parts(None, None)
            };
            let Ok(vis) = vis else {
                without += 1;
                continue;
            };
            out.push(self.encode(k, s, &vis, &policy.version));
        }
        let share = self.share.lock().ok().and_then(|s| *s);
        let owns = |k: &str| share.is_none_or(|(rank, size)| crate::snapshot::cluster::owner(k, size) == rank);
        let depths = (self.settings.directory_min, self.settings.directory_max);
        let check = self.counts.lock().ok().and_then(|c| c.clone()).map(|c| match c {
            ExpectedCounts::File(path, m) => counts::check(&m, map, &path.display().to_string(), depths, owns),
            ExpectedCounts::Pipeline(p) => counts::check(&p.expected(), map, "the counting pipeline", depths, owns),
        });
        let mut report = serde_json::json!({
            "principals": map.len(),
            "records": out.len(),
            "without_visible_to": without,
            "sketch": self.factory.kind(),
            "sketch_config": self.factory.describe(),
            "sketch_memory_bytes": memory,
            "reference_time": self.reference,
            "shuffled_bytes": self.shuffled.load(std::sync::atomic::Ordering::Relaxed),
            "errors": errors,
        });
        if let (Some(serde_json::Value::Object(c)), Some(r)) = (check, report.as_object_mut()) {
            r.extend(c);
        }
        (out, report)
    }

    /// Under the POSIX rules: `user:U` to U, `group:G` to G, `dir:/a/b` to whoever may see
    /// `/a/b` itself and list every directory below it (`dir_paths`: every known directory,
    /// sorted), and `dir_visible_to`; root's principal and the admins always.
    fn posix_visible_to(&self, subject: &str, policy: &RecordPolicy, dir_paths: &[String]) -> Result<Vec<u8>, String> {
        let map = &policy.principals;
        let none = || "no visible_to principal".to_string();
        if let Some(uid) = subject.strip_prefix("user:").and_then(|u| u.parse::<u32>().ok()) {
            let own: Vec<&str> = map.user(uid).into_iter().collect();
            return icicle_gmeta::aggregate_principals(policy, &own).ok_or_else(none);
        }
        if let Some(gid) = subject.strip_prefix("group:").and_then(|g| g.parse::<u32>().ok()) {
            let own: Vec<&str> = map.group(gid).into_iter().collect();
            return icicle_gmeta::aggregate_principals(policy, &own).ok_or_else(none);
        }
        let dir = subject.strip_prefix("dir:").unwrap_or(subject);
        let mut own: Vec<&str> =
            self.settings.dir_visible_to.iter().filter(|p| p.starts_with("urn:")).map(String::as_str).collect();
        // The directory itself is judged as a file in its parent: an unknown directory or
        // parent leaves only the configured principals (a directory has no owner-only fallback).
        let perm = policy.dirs.get(dir);
        let chain = if dir == "/" { None } else { policy.dirs.chain(icicle_core::access::parent_dir(dir)) };
        let judged = match (policy.access, perm, chain) {
            (Some(_), Some(perm), Some(chain)) => icicle_gmeta::subtree_principals(
                policy,
                &chain,
                &perm,
                subtree(dir, dir_paths).map(|p| policy.dirs.chain(p)),
            ),
            _ => Vec::new(),
        };
        own.extend(judged);
        icicle_gmeta::aggregate_principals(policy, &own).ok_or_else(none)
    }

    fn encode(&self, subject: &str, s: &PrincipalStats, vis: &[u8], version: &str) -> Vec<u8> {
        let mut o = Vec::with_capacity(1024);
        o.extend_from_slice(br#"{"subject":"#);
        push_json_str(&mut o, &icicle_gmeta::subject_for(subject));
        o.extend_from_slice(br#","visible_to":"#);
        o.extend_from_slice(vis);
        let (kind, id) = subject.split_once(':').unwrap_or(("dir", subject));
        o.extend_from_slice(br#","content":{"principal":"#);
        push_json_str(&mut o, subject);
        o.extend_from_slice(br#","kind":"#);
        push_json_str(&mut o, kind);
        o.extend_from_slice(br#","id":"#);
        push_json_str(&mut o, id);
        o.extend_from_slice(br#","file_count":"#);
        push_int(&mut o, s.count);
        o.extend_from_slice(br#","sketch":"#);
        push_json_str(&mut o, self.factory.kind());
        o.extend_from_slice(br#","version":"#);
        push_json_str(&mut o, version);
        // Size.
        let avg = if s.count > 0 { (s.total_size / s.count as u128) as u64 } else { 0 };
        o.extend_from_slice(br#","size":{"total":"#);
        push_int(&mut o, s.total_size);
        o.extend_from_slice(br#","min":"#);
        push_int(&mut o, s.min[0].max(0));
        o.extend_from_slice(br#","max":"#);
        push_int(&mut o, s.max[0].max(0));
        o.extend_from_slice(br#","average":"#);
        push_int(&mut o, avg);
        for (q, name) in QUANTILES {
            o.extend_from_slice(format!(",\"{name}\":").as_bytes());
            push_int(&mut o, s.sketches[0].quantile(q).unwrap_or(0.0).round().max(0.0) as u64);
        }
        o.push(b'}');
        // Times: ISO 8601 in the attribute, epoch seconds under `raw`.
        let mut raw = Vec::with_capacity(512);
        for (i, name) in [(1usize, "atime"), (2, "ctime"), (3, "mtime")] {
            let mut vals: Vec<(&str, i64)> = vec![("min", s.min[i]), ("max", s.max[i])];
            let avg_age = if s.count > 0 { s.sketches[i].sum() / s.count as f64 } else { 0.0 };
            vals.push(("average", self.reference - avg_age.round() as i64));
            for (q, qname) in QUANTILES {
                // The q-quantile of a time is the (1 − q)-quantile of its age.
                let age = s.sketches[i].quantile(1.0 - q).unwrap_or(0.0);
                vals.push((qname, self.reference - age.round() as i64));
            }
            o.extend_from_slice(format!(",\"{name}\":{{").as_bytes());
            raw.extend_from_slice(format!("{}\"{name}\":{{", if i > 1 { "," } else { "" }).as_bytes());
            for (j, (k, v)) in vals.iter().enumerate() {
                let sep = if j > 0 { "," } else { "" };
                o.extend_from_slice(format!("{sep}\"{k}\":\"").as_bytes());
                push_iso8601(&mut o, *v);
                o.push(b'"');
                raw.extend_from_slice(format!("{sep}\"{k}\":").as_bytes());
                push_int(&mut raw, *v);
            }
            o.push(b'}');
            raw.push(b'}');
        }
        o.extend_from_slice(br#","raw":{"#);
        o.extend_from_slice(&raw);
        o.extend_from_slice(b"}}}");
        o
    }
}

impl PipelineFinisher for Aggregate {
    fn name(&self) -> &'static str {
        "aggregate"
    }
    fn distribute(&self, cluster: &dyn Cluster) -> Result<(), String> {
        self.shuffle(cluster)
    }
    fn finish(&self, policy: &Arc<RecordPolicy>) -> Result<(Vec<Vec<u8>>, serde_json::Value), String> {
        Ok(self.entries(policy))
    }
}

#[cfg(test)]
mod tests;

/// `dir` and the directories below it, from `paths` (every known directory, sorted).
fn subtree<'a>(dir: &'a str, paths: &'a [String]) -> impl Iterator<Item = &'a str> + 'a {
    let prefix = if dir == "/" { "/".to_string() } else { format!("{dir}/") };
    let start = paths.partition_point(|p| p.as_str() < prefix.as_str());
    std::iter::once(dir).chain(paths[start..].iter().take_while(move |p| p.starts_with(&prefix)).map(String::as_str))
}
