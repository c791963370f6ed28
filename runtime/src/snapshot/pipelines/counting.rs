//! The counting pipeline (as in the seed): every row gets shard `crc32(row) % 64`, where the
//! row is the record's Icicle 9-column CSV line; counts are kept per (principal, shard) for
//! `u<uid>`, `g<gid>` and the file's directory truncated to `directory_max` (non-recursive),
//! then shards are merged and recursive directory counts built, and written as a CSV.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::{Arc, Mutex};

use super::{dir_prefix, parent_depth, shard_of, CountingSettings, SHARDS};
use crate::snapshot::cluster::Cluster;
use crate::snapshot::{PipelineFinisher, RowProcessor, RowProcessorFactory};
use icicle_core::policy::RecordPolicy;
use icicle_core::record::FileRecord;

pub(super) type ShardCounts = Box<[u64; SHARDS]>;

#[derive(Default)]
pub(super) struct CountMaps {
    pub(super) users: HashMap<u32, ShardCounts>,
    pub(super) groups: HashMap<u32, ShardCounts>,
    pub(super) dirs: HashMap<String, ShardCounts>,
}

fn bump<K: std::hash::Hash + Eq>(m: &mut HashMap<K, ShardCounts>, k: K, shard: usize) {
    m.entry(k).or_insert_with(|| Box::new([0; SHARDS]))[shard] += 1;
}

impl CountMaps {
    fn merge(&mut self, o: CountMaps) {
        fn add<K: std::hash::Hash + Eq>(a: &mut HashMap<K, ShardCounts>, b: HashMap<K, ShardCounts>) {
            for (k, v) in b {
                let e = a.entry(k).or_insert_with(|| Box::new([0; SHARDS]));
                for i in 0..SHARDS {
                    e[i] += v[i];
                }
            }
        }
        add(&mut self.users, o.users);
        add(&mut self.groups, o.groups);
        add(&mut self.dirs, o.dirs);
    }
}

/// One row of the counting output.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CountRow {
    /// `u<uid>`, `g<gid>`, or a directory path.
    pub principal: String,
    /// Records of the user or group, or whose directory (truncated to `directory_max`) this is.
    pub count: u64,
    /// `count` plus, for a directory, the counts of every directory below it.
    pub recursive_count: u64,
}

/// The counting pipeline: a [`RowProcessorFactory`] whose workers merge into one result.
pub struct Counting {
    settings: CountingSettings,
    pub(super) merged: Mutex<CountMaps>,
    /// Another rank writes the counts of a distributed run.
    pub(super) elsewhere: std::sync::atomic::AtomicBool,
    /// The counts by aggregate subject, once made (rank 0's on every rank of a distributed run).
    pub(super) shared_expected: Mutex<Option<Arc<HashMap<String, u64>>>>,
}

struct CountingWorker {
    maps: CountMaps,
    max: usize,
    last_parent: String,
    last_dir: String,
    parent: Arc<Counting>,
}

impl RowProcessor for CountingWorker {
    fn record(&mut self, rec: &FileRecord<'_>) {
        let shard = shard_of(rec);
        bump(&mut self.maps.users, rec.attrs.uid, shard);
        bump(&mut self.maps.groups, rec.attrs.gid, shard);
        let parent = rec.path.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
        if parent != self.last_parent {
            self.last_parent.clear();
            self.last_parent.push_str(parent);
            let depth = parent_depth(rec.path).min(self.max);
            self.last_dir = dir_prefix(rec.path, depth).unwrap_or_else(|| "/".into());
        }
        match self.maps.dirs.get_mut(self.last_dir.as_str()) {
            Some(c) => c[shard] += 1,
            None => bump(&mut self.maps.dirs, self.last_dir.clone(), shard),
        }
    }

    fn finish(self: Box<Self>) {
        if let Ok(mut m) = self.parent.merged.lock() {
            m.merge(self.maps);
        }
    }
}

struct CountingHandle(Arc<Counting>);

impl RowProcessorFactory for CountingHandle {
    fn make(&self, _worker: usize) -> Box<dyn RowProcessor> {
        Box::new(CountingWorker {
            maps: CountMaps::default(),
            max: self.0.settings.directory_max,
            last_parent: "\0".into(),
            last_dir: String::new(),
            parent: self.0.clone(),
        })
    }
}

impl Counting {
    /// A counting pipeline and the factory to hand to the snapshot runtime.
    pub fn new(settings: CountingSettings) -> (Arc<Counting>, Arc<dyn RowProcessorFactory>) {
        let c = Arc::new(Counting {
            settings,
            merged: Mutex::new(CountMaps::default()),
            elsewhere: Default::default(),
            shared_expected: Mutex::new(None),
        });
        (c.clone(), Arc::new(CountingHandle(c)))
    }

    /// Merge shards and build recursive directory counts.
    pub fn rows(&self) -> Vec<CountRow> {
        self.merged.lock().map(|m| rows_of(&m)).unwrap_or_default()
    }

    /// Each principal's count by its aggregate subject (`user:<uid>`, `group:<gid>`,
    /// `dir:<path>` with its recursive count): what the aggregate pipeline checks against.
    pub fn expected(&self) -> Arc<HashMap<String, u64>> {
        if let Some(e) = self.shared_expected.lock().ok().and_then(|e| e.clone()) {
            return e;
        }
        Arc::new(super::counts::by_subject(&self.rows()))
    }

    /// The counts for the sinks of `[counting] sinks` (see [`super::counts::shard_entries`]).
    pub fn shard_entries(&self, version: &str) -> Vec<Vec<u8>> {
        if self.elsewhere.load(std::sync::atomic::Ordering::Relaxed) {
            return Vec::new();
        }
        self.merged.lock().map(|m| super::counts::shard_entries(&m, version)).unwrap_or_default()
    }

    /// Write the compact CSV and return a report; the rows by aggregate subject are kept for
    /// the aggregate pipeline's check ([`Counting::expected`]).
    pub fn write(&self) -> std::io::Result<serde_json::Value> {
        let rows = self.rows();
        write_csv(&self.settings.output, &rows)?;
        if let Ok(mut e) = self.shared_expected.lock() {
            e.get_or_insert_with(|| Arc::new(super::counts::by_subject(&rows)));
        }
        Ok(serde_json::json!({"output": &self.settings.output, "principals": rows.len()}))
    }
}

/// Merge shards and build recursive directory counts.
pub(super) fn rows_of(m: &CountMaps) -> Vec<CountRow> {
    {
        let total = |c: &ShardCounts| c.iter().sum::<u64>();
        let mut out = Vec::new();
        let mut users: Vec<_> = m.users.iter().map(|(k, v)| (*k, total(v))).collect();
        users.sort();
        out.extend(users.into_iter().map(|(u, c)| CountRow {
            principal: format!("u{u}"),
            count: c,
            recursive_count: c,
        }));
        let mut groups: Vec<_> = m.groups.iter().map(|(k, v)| (*k, total(v))).collect();
        groups.sort();
        out.extend(groups.into_iter().map(|(g, c)| CountRow {
            principal: format!("g{g}"),
            count: c,
            recursive_count: c,
        }));
        // Every directory with a count, and all its ancestors.
        let mut dirs: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for (d, v) in m.dirs.iter() {
            let c = total(v);
            let e = dirs.entry(d.clone()).or_default();
            e.0 += c;
            let mut p = d.as_str();
            while p != "/" {
                p = match p.rfind('/') {
                    Some(0) => "/",
                    Some(i) => &p[..i],
                    None => break,
                };
                dirs.entry(p.to_string()).or_default();
            }
        }
        let mut by_depth: Vec<(usize, String)> =
            dirs.keys().map(|d| (if d == "/" { 0 } else { d.matches('/').count() }, d.clone())).collect();
        by_depth.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, d) in &by_depth {
            let (own, sub) = dirs[d];
            let rec = own + sub;
            if d != "/" {
                let p = match d.rfind('/') {
                    Some(0) => "/".to_string(),
                    Some(i) => d[..i].to_string(),
                    None => continue,
                };
                if let Some(e) = dirs.get_mut(&p) {
                    e.1 += rec;
                }
            }
        }
        out.extend(dirs.into_iter().map(|(d, (own, sub))| CountRow {
            principal: d,
            count: own,
            recursive_count: own + sub,
        }));
        out
    }
}

/// Write `rows` as the compact CSV `principal,count,recursive_count`.
pub fn write_csv(path: &std::path::Path, rows: &[CountRow]) -> std::io::Result<()> {
    if let Some(p) = path.parent() {
        if !p.as_os_str().is_empty() {
            std::fs::create_dir_all(p)?;
        }
    }
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(w, "principal,count,recursive_count")?;
    for r in rows {
        let p = if r.principal.contains(',') || r.principal.contains('"') {
            format!("\"{}\"", r.principal.replace('"', "\"\""))
        } else {
            r.principal.clone()
        };
        writeln!(w, "{p},{},{}", r.count, r.recursive_count)?;
    }
    w.flush()
}

impl PipelineFinisher for Counting {
    fn name(&self) -> &'static str {
        "counting"
    }
    fn distribute(&self, cluster: &dyn Cluster) -> Result<(), String> {
        self.gather_counts(cluster)?;
        self.share_expected(cluster)
    }
    fn finish(&self, _policy: &Arc<RecordPolicy>) -> Result<(Vec<Vec<u8>>, serde_json::Value), String> {
        if self.elsewhere.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok((Vec::new(), serde_json::json!({"written_by_rank": 0})));
        }
        let report = self.write().map_err(|e| format!("writing {}: {e}", self.settings.output.display()))?;
        Ok((Vec::new(), report))
    }
    fn side_entries(&self, policy: &Arc<RecordPolicy>) -> Vec<Vec<u8>> {
        self.shard_entries(&policy.version)
    }
}
