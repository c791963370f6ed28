//! The Lustre monitor runtime: `lfs changelog` → parse → filter → reduce → directory tree →
//! stat at emit → primary-record upserts and deletes to the sinks → `lfs changelog_clear`
//! only for what the sinks acknowledged, with the cleared index persisted for restarts.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use icicle_core::access::{lstat_dir, parent_dir, Acl, ChainCache};
use icicle_core::batch::EntryBatch;
use icicle_core::gmeta::{subject_for, PrimaryEncoder};
use icicle_core::record::FileRecord;
use icicle_core::registry::{BuildContext, ChangeSourceConfig};
use icicle_core::sent_ahead::SentAhead;
use icicle_core::traits::{ChangeSource, MonitorContext, OnGap, Reducer, StateStore};
use icicle_core::{ConfigError, IcicleError};
use serde::Deserialize;

use crate::changelog::{ChangelogRecord, Fid};
use crate::reducer::{ReduceCounts, RuleTable};
use crate::tree::{DirectoryTree, Ops, PathOp, Resolver, TreeCounts};

/// `[sources.<id>] type = "lustre"`.
#[derive(Debug, Clone, Deserialize)]
pub struct LustreConfig {
    /// The MDT device, e.g. `fs0-MDT0000`.
    pub mdt: String,
    /// The registered changelog user, e.g. `cl1`.
    #[serde(default = "default_user")]
    pub user: String,
    /// The `lfs` command (and any leading arguments).
    #[serde(default = "default_lfs")]
    pub lfs: Vec<String>,
    /// Where the file system is mounted (stat and directory walks happen here).
    pub mount: PathBuf,
    /// The file-system name given to `lfs fid2path`.
    pub fsname: String,
    /// Prefix of record paths (`/` + path within the file system is appended).
    #[serde(default)]
    pub path_prefix: String,
    /// First record to read when no cleared index was persisted.
    #[serde(default)]
    pub startrec: u64,
    /// Record types dropped at ingestion (high-volume, low-information).
    #[serde(default = "default_filter")]
    pub filter: Vec<String>,
    /// A batch closes at this many records...
    #[serde(default = "default_batch")]
    pub batch_size: usize,
    /// ...or after this long without new records.
    #[serde(default = "default_quiet")]
    pub quiet_period_secs: f64,
    /// How often an idle changelog is polled.
    #[serde(default = "default_poll")]
    pub poll_interval_secs: f64,
    /// Records requested per `lfs changelog` call.
    #[serde(default = "default_read")]
    pub read_size: u64,
    /// Directory-tree entries kept (0 = unbounded); evicted entries are resolved again.
    #[serde(default)]
    pub lru_capacity: usize,
    /// Where the checkpoint (directory tree and last acknowledged index) is kept, per MDT.
    pub state_dir: PathBuf,
    /// `tree` (default): the directory tree; `fsmonitor`: FSMonitor's method, `fid2path`
    /// for every record with a small LRU cache (a baseline for comparisons); `naive`: the
    /// same without the cache (`fid2path` for every record, Icicle's ablation baseline).
    #[serde(default)]
    pub resolution: Resolution,
    /// Cache entries in `fsmonitor` resolution.
    #[serde(default = "default_fsmonitor_cache")]
    pub fsmonitor_cache: usize,
    /// Retries of a failed `lfs changelog` or `changelog_clear` (backing off from 0.2 s to
    /// 10 s) before the monitor stops with the error.
    #[serde(default = "default_lfs_retries")]
    pub lfs_retries: u32,
    /// Records purged before they were read (another changelog user cleared them, or this
    /// user was deregistered): `warn` (default) logs and counts them (`lost_records`) and
    /// goes on; `fail` stops the monitor with the range.
    #[serde(default)]
    pub on_gap: OnGap,
    /// Batch reduction (coalescing, cancellation); `false` applies every record, for
    /// ablation experiments.
    #[serde(default = "default_reduction")]
    pub reduction: bool,
    /// Where records that cannot be parsed are kept (JSON lines); default
    /// `<state_dir>/<mdt>.dead-letters.jsonl`.
    #[serde(default)]
    pub dead_letter: Option<PathBuf>,
}

fn default_reduction() -> bool {
    true
}

fn default_lfs_retries() -> u32 {
    5
}

/// Run `op` (an `lfs` call), retrying failures `retries` times with a growing pause.
async fn with_retries<T>(what: &str, mdt: &str, retries: u32, mut op: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    let mut pause = Duration::from_millis(200);
    let mut attempt = 0;
    loop {
        match tokio::task::block_in_place(&mut op) {
            Ok(v) => return Ok(v),
            Err(e) if attempt < retries => {
                attempt += 1;
                tracing::warn!(message = "lfs call failed; retrying", what, mdt, attempt, retries, pause_secs = pause.as_secs_f64(), error = %e);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(10));
            }
            Err(e) => return Err(format!("{e} (after {attempt} retries)")),
        }
    }
}

/// How the monitor turns a record's FIDs into paths.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Resolution {
    /// The directory tree (`fid2path` once per object that predates monitoring).
    #[default]
    Tree,
    /// FSMonitor's method: `fid2path` for every record, with a small LRU cache.
    Fsmonitor,
    /// `fid2path` for every record, no cache.
    Naive,
}
fn default_fsmonitor_cache() -> usize {
    1000
}

/// FSMonitor-style resolution: every record's path from an LRU of FID → path, else
/// `fid2path`; no directory tree, no rename propagation.
fn fsmonitor_apply(rec: &ChangelogRecord, cache: &mut lru::LruCache<Fid, String>, r: &mut LfsResolver<'_>, counts: &mut TreeCounts, ops: &mut Ops) {
    use crate::changelog::RecordType::*;
    let mut resolve = |fid: Fid, cache: &mut lru::LruCache<Fid, String>| -> Option<String> {
        if fid == Fid::ROOT {
            return Some("/".into());
        }
        if let Some(p) = cache.get(&fid) {
            return Some(p.clone());
        }
        counts.fid2path_calls += 1;
        let p = r.fid2path(&fid);
        match &p {
            Some(p) => {
                cache.put(fid, p.clone());
            }
            None => counts.fid2path_failures += 1,
        }
        p
    };
    let child = |p: &str, n: &str| if p == "/" { format!("/{n}") } else { format!("{p}/{n}") };
    match rec.kind {
        Unlnk | Rmdir => {
            let path = cache.pop(&rec.target).or_else(|| match (rec.parent, rec.name.as_deref()) {
                (Some(p), Some(n)) => resolve(p, cache).map(|pp| child(&pp, n)),
                _ => None,
            });
            match path {
                Some(p) if rec.kind == Unlnk => {
                    ops.insert(p, PathOp::Delete);
                }
                Some(_) => {}
                None => counts.unresolved += 1,
            }
        }
        Renme => {
            let (Some(s), Some(sp), Some(sn)) = (rec.source, rec.source_parent, rec.source_name.as_deref()) else { return };
            cache.pop(&s);
            let old = resolve(sp, cache).map(|pp| child(&pp, sn));
            let new = resolve(s, cache);
            if let Some(o) = old {
                ops.insert(o, PathOp::Delete);
            }
            match new {
                Some(n) => {
                    ops.insert(n, PathOp::Update);
                }
                None => counts.unresolved += 1,
            }
        }
        Mark | Open | Nopen | Gxatr | Mkdir | Unknown(..) => {}
        _ => match resolve(rec.target, cache) {
            Some(p) => {
                ops.insert(p, PathOp::Update);
            }
            None => counts.unresolved += 1,
        },
    }
}

fn default_user() -> String {
    "cl1".into()
}
fn default_lfs() -> Vec<String> {
    vec!["lfs".into()]
}
fn default_filter() -> Vec<String> {
    ["OPEN", "NOPEN", "GXATR", "MARK"].iter().map(|s| s.to_string()).collect()
}
fn default_batch() -> usize {
    1000
}
fn default_quiet() -> f64 {
    5.0
}
fn default_poll() -> f64 {
    1.0
}
fn default_read() -> u64 {
    10_000
}

/// `lfs` subprocess calls.
pub struct Lfs {
    pub cmd: Vec<String>,
}

impl Lfs {
    fn run(&self, args: &[&str]) -> Result<std::process::Output, String> {
        let (prog, pre) = self.cmd.split_first().ok_or("empty lfs command")?;
        std::process::Command::new(prog).args(pre).args(args).output().map_err(|e| format!("running {prog}: {e}"))
    }

    /// `lfs changelog MDT START [END]` (without END: everything up to the head).
    pub fn changelog(&self, mdt: &str, start: u64, end: Option<u64>) -> Result<String, String> {
        let (start, end) = (start.to_string(), end.map(|e| e.to_string()));
        let mut args = vec!["changelog", mdt, &start];
        args.extend(end.as_deref());
        let out = self.run(&args)?;
        if !out.status.success() {
            return Err(format!("lfs changelog {mdt}: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `lfs changelog_clear MDT USER ENDREC` (inclusive; never called with 0).
    pub fn clear(&self, mdt: &str, user: &str, endrec: u64) -> Result<(), String> {
        if endrec == 0 {
            return Ok(());
        }
        let out = self.run(&["changelog_clear", mdt, user, &endrec.to_string()])?;
        if !out.status.success() {
            return Err(format!("lfs changelog_clear {mdt} {user} {endrec}: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(())
    }
}

pub use crate::lookahead::Lookahead;

/// Resolves through `lfs fid2path <fsname>` and the mounted file system.
pub struct LfsResolver<'a> {
    pub lfs: &'a Lfs,
    pub fsname: &'a str,
    pub mount: &'a Path,
    pub mdt: &'a str,
    pub lookahead: &'a mut Lookahead,
    /// Records per `lfs changelog` call when reading ahead.
    pub chunk: u64,
}

impl LfsResolver<'_> {
    fn on_mount(&self, path: &str) -> PathBuf {
        self.mount.join(path.trim_start_matches('/'))
    }
}

impl Resolver for LfsResolver<'_> {
    fn fid2path(&mut self, fid: &Fid) -> Option<String> {
        self.fid2path_all(fid).into_iter().next()
    }

    fn fid2path_all(&mut self, fid: &Fid) -> Vec<String> {
        // The answer may include renames appended since the last read-ahead.
        self.lookahead.stale = true;
        let Ok(out) = self.lfs.run(&["fid2path", self.fsname, &fid.to_string()]) else { return Vec::new() };
        if !out.status.success() {
            return Vec::new();
        }
        // One line per hard link; with an fsname, each relative to the root without a
        // leading slash.
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::trim_end)
            .filter(|l| !l.is_empty())
            .map(|l| if l == "/" || l.is_empty() { "/".to_string() } else { format!("/{}", l.trim_start_matches('/')) })
            .collect()
    }

    fn is_dir(&mut self, path: &str) -> bool {
        std::fs::symlink_metadata(self.on_mount(path)).map(|m| m.is_dir()).unwrap_or(false)
    }

    fn walk(&mut self, path: &str) -> Vec<String> {
        // What the walk finds may include records appended since the last read-ahead.
        self.lookahead.stale = true;
        walk_files(&self.on_mount(path))
    }

    fn future_renames(&mut self, after: u64, name: &str) -> Vec<crate::lookahead::FutureRename> {
        self.read_ahead();
        self.lookahead.named(name, after)
    }

    fn path2fid(&mut self, path: &str) -> Option<Fid> {
        let full = self.on_mount(path);
        let out = self.lfs.run(&["path2fid", &full.to_string_lossy()]).ok()?;
        if !out.status.success() {
            return None;
        }
        Fid::parse(String::from_utf8_lossy(&out.stdout).trim()).ok()
    }

    fn future_namings(&mut self, after: u64, name: &str) -> Vec<crate::lookahead::FutureNaming> {
        self.read_ahead();
        self.lookahead.namings(name, after)
    }
}

impl LfsResolver<'_> {
    /// Read what was appended since the last read, once after each `fid2path` answer or walk:
    /// the answer reflects every operation made before it, and each of those has its record
    /// by now (Lustre writes a record with its operation). A read made before that answer
    /// could miss some. Read in chunks of `chunk` records, each call with an end.
    fn read_ahead(&mut self) {
        if !self.lookahead.stale {
            return;
        }
        self.lookahead.stale = false;
        let chunk = self.chunk.max(1);
        loop {
            let start = self.lookahead.read_upto + 1;
            let end = start + chunk - 1;
            let Ok(text) = self.lfs.changelog(self.mdt, start, Some(end)) else { break };
            let last = crate::changelog::lines(text.trim_end()).last().and_then(leading_index);
            self.lookahead.push_text(&text, last);
            if last.is_none_or(|l| l < end) {
                break;
            }
        }
    }
}

/// Counters of one monitor run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct MonitorCounts {
    pub records: u64,
    pub filtered: u64,
    pub rejects: u64,
    pub unknown_types: u64,
    pub reduce: ReduceCounts,
    pub tree: TreeCounts,
    pub updates: u64,
    pub deletes: u64,
    pub vanished: u64,
    /// Files published again because a directory above them changed permissions.
    pub reevaluated: u64,
    pub batches: u64,
    pub cleared_index: u64,
    pub clears: u64,
    /// Records purged before this monitor read them (their changes are missing).
    pub lost_records: u64,
    /// Lines that could not be parsed, kept in the dead-letter file.
    pub dead_letters: u64,
}

/// The `lustre` change source.
pub struct LustreSource {
    cfg: LustreConfig,
}

impl LustreSource {
    fn state_file(&self) -> PathBuf {
        self.cfg.state_dir.join(format!("{}.checkpoint.json", self.cfg.mdt))
    }

    /// Hashes of the paths updated since the last checkpoint, written before each delivery.
    fn sent_ahead(&self) -> SentAhead {
        SentAhead::new(self.cfg.state_dir.join(format!("{}.sent-ahead", self.cfg.mdt)))
    }

    /// Record `i` was read: report the records missing before it (a gap) and expect `i + 1`.
    fn advance_expected(&self, i: u64, expect: &mut Option<u64>, counts: &mut MonitorCounts, ctx: &MonitorContext) -> Result<(), IcicleError> {
        if let Some(e) = expect.filter(|e| i > *e) {
            self.on_gap(e, i - 1, counts, ctx)?;
        }
        *expect = Some(expect.map_or(i + 1, |e| e.max(i + 1)));
        Ok(())
    }

    /// Keep an unparsable line; failing to keep it stops the monitor (nothing past it is
    /// acknowledged).
    /// Returns whether the line was new (not kept before).
    fn dead_letter(
        &self,
        dead: &mut icicle_core::deadletter::DeadLetters,
        position: &str,
        line: &str,
        reason: &str,
        counts: &mut MonitorCounts,
    ) -> Result<bool, IcicleError> {
        // A line not yet acknowledged is read again by the next poll: kept once.
        if !dead.first_time(position, line.as_bytes()) {
            return Ok(false);
        }
        dead.write(&self.cfg.mdt, position, line.as_bytes(), reason)
            .map_err(|e| IcicleError::Internal(format!("{}: writing the dead-letter file {}: {e}", self.cfg.mdt, dead.path().display())))?;
        counts.dead_letters += 1;
        Ok(true)
    }

    /// The last checkpoint: the directory tree as of the last acknowledged index.
    fn load_checkpoint(&self) -> Option<crate::tree::Checkpoint> {
        let data = std::fs::read(self.state_file()).ok()?;
        match serde_json::from_slice(&data) {
            Ok(cp) => Some(cp),
            Err(e) => {
                tracing::warn!(message = "ignoring an unreadable checkpoint", file = %self.state_file().display(), error = %e);
                None
            }
        }
    }

    /// Write the tree as of `idx` durably (temporary file, fsync, rename) before `idx` is
    /// acknowledged upstream, so a restart resumes exactly there with the same state.
    fn persist_checkpoint(&self, tree: &DirectoryTree, idx: u64) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.cfg.state_dir)?;
        let tmp = self.state_file().with_extension("tmp");
        let data = serde_json::to_vec(&tree.checkpoint(idx)).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, data)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, self.state_file())
    }

    /// Emit one batch's operations: stat every update now, skip what vanished. When
    /// visibility follows directory permissions, each record is judged along its
    /// directories as they are now, and a directory whose attributes changed has everything
    /// below it published again.
    async fn emit(
        &self,
        ops: Ops,
        tree: &mut DirectoryTree,
        ctx: &MonitorContext,
        enc: &mut PrimaryEncoder,
        counts: &mut MonitorCounts,
    ) -> Result<(), IcicleError> {
        let mut chunk = EntryBatch::default();
        let mut deletes = Vec::new();
        let posix = ctx.policy.access.is_some();
        let mut chains = ChainCache::new("/");
        let mut changed_dirs = Vec::new();
        let mut files = Vec::with_capacity(ops.len());
        for (path, op) in &ops {
            match op {
                PathOp::Delete => {
                    tree.unindexed(path);
                    deletes.push(subject_for(&self.full_path(path)).into_owned());
                }
                PathOp::Update => {
                    let Ok(md) = std::fs::symlink_metadata(self.on_mount(path)) else {
                        counts.vanished += 1;
                        tree.vanished(path);
                        continue;
                    };
                    if !md.is_dir() {
                        files.push((path, md));
                        continue;
                    }
                    // A directory's attributes changed (a SATTR carries no mode: what is
                    // below was published with permissions that may differ from these).
                    if posix {
                        changed_dirs.push(path.clone());
                    } else {
                        counts.vanished += 1;
                        tree.vanished(path);
                    }
                }
            }
        }
        for (path, md) in files {
            self.encode_update(path, &md, posix, &mut chains, &mut chunk, tree, enc, counts);
        }
        for dir in changed_dirs {
            for rel in walk_files(&self.on_mount(&dir)) {
                let path = if dir == "/" { format!("/{rel}") } else { format!("{dir}/{rel}") };
                if ops.contains_key(&path) {
                    continue;
                }
                if let Ok(md) = std::fs::symlink_metadata(self.on_mount(&path)) {
                    counts.reevaluated += 1;
                    self.encode_update(&path, &md, posix, &mut chains, &mut chunk, tree, enc, counts);
                }
            }
        }
        counts.deletes += deletes.len() as u64;
        // A restart that replays this batch may resolve other paths (the file system moved
        // on): it must still know that the index may hold these.
        let fresh = tree.take_fresh_sent();
        if !fresh.is_empty() {
            let j = self.sent_ahead();
            j.append(&fresh).map_err(|e| IcicleError::Internal(format!("writing {}: {e}", j.path().display())))?;
        }
        let mut sinks = ctx.sinks.lock().await;
        icicle_core::batch::deliver_emit(&mut sinks, &chunk, deletes, ctx.max_batch_bytes).await?;
        Ok(())
    }

    /// `path` (relative to the file system) where the file system is mounted.
    fn on_mount(&self, path: &str) -> std::path::PathBuf {
        self.cfg.mount.join(path.trim_start_matches('/'))
    }

    /// `path` as records name it.
    fn full_path(&self, path: &str) -> String {
        format!("{}{}", self.cfg.path_prefix.trim_end_matches('/'), path)
    }

    /// Encode the update of file `path` (metadata `md`) into `chunk`.
    #[allow(clippy::too_many_arguments)]
    fn encode_update(
        &self,
        path: &str,
        md: &std::fs::Metadata,
        posix: bool,
        chains: &mut ChainCache,
        chunk: &mut EntryBatch,
        tree: &mut DirectoryTree,
        enc: &mut PrimaryEncoder,
        counts: &mut MonitorCounts,
    ) {
        let full = self.full_path(path);
        let rec = FileRecord::from_metadata(&full, md);
        let dirs = if posix { chains.chain(parent_dir(path), &mut |d| lstat_dir(&self.on_mount(d))) } else { None };
        let acl = if posix { Acl::read(&self.on_mount(path)).map(std::sync::Arc::new) } else { None };
        match chunk.encode_in(enc, &rec, acl, dirs.as_ref()) {
            Ok(()) => {
                counts.updates += 1;
                tree.indexed(path);
            }
            Err(e) => {
                counts.rejects += 1;
                tracing::warn!(message = "update not encodable", path = %full, error = %e);
            }
        }
    }
}

/// Every file and link below `dir` (relative paths, sorted); directories are descended.
fn walk_files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, rel)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push((e.path(), r)),
                Ok(_) => out.push(r),
                Err(_) => {}
            }
        }
    }
    out.sort();
    out
}

impl LustreSource {
    /// Reduce, apply, emit and deliver one batch, then acknowledge everything up to `upto`.
    #[allow(clippy::too_many_arguments)]
    async fn process(
        &self,
        batch: Vec<ChangelogRecord>,
        upto: u64,
        lfs: &Lfs,
        tree: &mut DirectoryTree,
        lookahead: &mut Lookahead,
        fsm: &mut Option<lru::LruCache<Fid, String>>,
        ctx: &MonitorContext,
        enc: &mut PrimaryEncoder,
        counts: &mut MonitorCounts,
    ) -> Result<(), IcicleError> {
        let cfg = &self.cfg;
        let started = Instant::now();
        let batch_size = batch.len();
        if !batch.is_empty() {
            let mut kept = batch;
            let rc = if cfg.reduction {
                RuleTable.reduce(&mut kept)
            } else {
                ReduceCounts { input: kept.len() as u64, passed: kept.len() as u64, ..Default::default() }
            };
            counts.reduce.add(&rc);
            let mut ops = Ops::default();
            tree.begin_batch();
            lookahead.next_batch(kept.first().map(|r| r.index).unwrap_or(0));
            tokio::task::block_in_place(|| {
                let mut r = LfsResolver { lfs, fsname: &cfg.fsname, mount: &cfg.mount, mdt: &cfg.mdt, lookahead, chunk: cfg.read_size };
                match fsm {
                    Some(cache) => {
                        let naive = cfg.resolution == Resolution::Naive;
                        for rec in &kept {
                            if naive {
                                cache.clear();
                            }
                            fsmonitor_apply(rec, cache, &mut r, &mut tree.counts, &mut ops);
                        }
                    }
                    None => {
                        for rec in &kept {
                            tree.apply(rec, &mut r, &mut ops);
                        }
                    }
                }
            });
            self.emit(ops, tree, ctx, enc, counts).await?;
            counts.batches += 1;
        }
        // Everything up to `upto` is delivered: checkpoint, then acknowledge upstream.
        if upto > counts.cleared_index {
            self.persist_checkpoint(tree, upto).map_err(|e| IcicleError::Internal(format!("writing the checkpoint: {e}")))?;
            self.sent_ahead().clear();
            with_retries("changelog_clear", &cfg.mdt, cfg.lfs_retries, || lfs.clear(&cfg.mdt, &cfg.user, upto))
                .await
                .map_err(|e| IcicleError::Source(icicle_core::SourceError::External(e)))?;
            counts.cleared_index = upto;
            counts.clears += 1;
        }
        let r = &counts.reduce;
        let t = &tree.counts;
        icicle_core::metrics::record_batch(&icicle_core::metrics::BatchReport {
            component: &ctx.name,
            records_in: counts.records,
            filtered: counts.filtered,
            rejects: counts.rejects,
            outcomes: &[("passed", r.passed), ("coalesced", r.coalesced), ("cancelled", r.cancelled), ("ignored", r.ignored)],
            updates: counts.updates,
            deletes: counts.deletes,
            batches: counts.batches,
            batch_size,
            batch_seconds: started.elapsed().as_secs_f64(),
            state_entries: tree.len(),
            state_bytes: tree.approx_bytes(),
            state_counts: &[
                ("evictions", t.evictions),
                ("fid2path_calls", t.fid2path_calls),
                ("fid2path_failures", t.fid2path_failures),
                ("vanished", counts.vanished),
                ("lost_records", counts.lost_records),
            ],
        });
        let labels = [("component", ctx.name.as_str()), ("mdt", cfg.mdt.as_str())];
        icicle_core::metrics::Metrics::global().set(
            "icicle_changelog_cleared",
            "Last changelog index cleared (acknowledged) per MDT.",
            &labels,
            counts.cleared_index as f64,
        );
        Ok(())
    }
}

impl LustreSource {
    /// Records `first..=last` were purged before they were read.
    fn on_gap(&self, first: u64, last: u64, counts: &mut MonitorCounts, ctx: &MonitorContext) -> Result<(), IcicleError> {
        let cfg = &self.cfg;
        let n = last - first + 1;
        counts.lost_records += n;
        let labels = [("component", ctx.name.as_str()), ("mdt", cfg.mdt.as_str())];
        icicle_core::metrics::Metrics::global().set(
            "icicle_changelog_lost",
            "Changelog records purged before they were read, per MDT.",
            &labels,
            counts.lost_records as f64,
        );
        let why = format!(
            "changelog records {first}..={last} of {} were purged before they were read (another changelog user cleared them, or user {} was deregistered): \
             the index misses their changes until a snapshot run re-indexes the file system",
            cfg.mdt, cfg.user
        );
        if cfg.on_gap == OnGap::Fail {
            return Err(IcicleError::Source(icicle_core::SourceError::External(format!("{why}; stopping (on_gap = \"fail\")"))));
        }
        tracing::error!(message = "lost changelog records", mdt = %cfg.mdt, first, last, records = n, detail = %why);
        Ok(())
    }
}

fn leading_index(line: &str) -> Option<u64> {
    line.split_whitespace().next()?.parse().ok()
}

#[async_trait]
impl ChangeSource for LustreSource {
    async fn run(&self, ctx: MonitorContext) -> Result<serde_json::Value, IcicleError> {
        let cfg = &self.cfg;
        let lfs = Lfs { cmd: cfg.lfs.clone() };
        let filter: HashSet<&str> = cfg.filter.iter().map(String::as_str).collect();
        let filter_bits: u32 = cfg.filter.iter().filter_map(|t| crate::changelog::RecordType::from_name(t)).map(|t| t.bit()).fold(0, |a, b| a | b);
        let mut enc = PrimaryEncoder::new(ctx.policy.clone());
        let mut counts = MonitorCounts::default();
        let (mut tree, cleared) = match self.load_checkpoint() {
            Some(cp) => {
                let idx = cp.index;
                (DirectoryTree::restore(cp, cfg.lru_capacity), idx)
            }
            None => (DirectoryTree::new(cfg.lru_capacity), 0),
        };
        tree.dir_attributes = ctx.policy.access.is_some();
        tree.maybe_sent(self.sent_ahead().read());
        counts.cleared_index = cleared;
        let mut lookahead = Lookahead::new(cleared);
        let mut fsm = (cfg.resolution != Resolution::Tree)
            .then(|| lru::LruCache::new(std::num::NonZeroUsize::new(cfg.fsmonitor_cache.max(1)).unwrap_or(std::num::NonZeroUsize::MIN)));
        let mut next = cfg.startrec.max(if cleared > 0 { cleared + 1 } else { 0 });
        // The index the next record must have; unknown until the first read when starting
        // from nothing (records before a new user registered are not ours to miss).
        let mut expect: Option<u64> = (next > 0).then_some(next);
        let mut pending: Vec<ChangelogRecord> = Vec::new();
        let mut covered: Option<u64> = None; // highest index read, delivered or not
        let mut last_new = Instant::now();
        let quiet = Duration::from_secs_f64(cfg.quiet_period_secs.max(0.0));
        let mut stop = ctx.stop.clone();
        let mut dead =
            icicle_core::deadletter::DeadLetters::new(cfg.dead_letter.clone().unwrap_or_else(|| cfg.state_dir.join(format!("{}.dead-letters.jsonl", cfg.mdt))));
        loop {
            if *stop.borrow() {
                if !pending.is_empty() || covered.is_some_and(|c| c > counts.cleared_index) {
                    let batch = std::mem::take(&mut pending);
                    self.process(batch, covered.unwrap_or(0), &lfs, &mut tree, &mut lookahead, &mut fsm, &ctx, &mut enc, &mut counts).await?;
                }
                tracing::info!(message = "stopped by a signal after delivering and acknowledging what was read", mdt = %cfg.mdt, cleared = counts.cleared_index);
                break;
            }
            let text = with_retries("changelog", &cfg.mdt, cfg.lfs_retries, || lfs.changelog(&cfg.mdt, next, Some(next + cfg.read_size.max(1) - 1)))
                .await
                .map_err(|e| IcicleError::Source(icicle_core::SourceError::External(e)))?;
            let mut got = 0u64;
            let asked = next..=next + cfg.read_size.max(1) - 1;
            // `got` counts what is new: a parsed record, or a line kept for the first time (an
            // unparsable record is read again until a later one moves past it).
            for line in crate::changelog::lines(&text).filter(|l| !l.trim().is_empty()) {
                // A line outside the range asked for is no record of ours: kept as a dead
                // letter, it moves nothing.
                let Some(i) = leading_index(line).filter(|i| asked.contains(i)) else {
                    let reason = format!("not a changelog record of {}..={}", asked.start(), asked.end());
                    got += u64::from(self.dead_letter(&mut dead, "-", line, &reason, &mut counts)?);
                    continue;
                };
                if crate::changelog::line_type_bit(line.as_bytes()) & filter_bits != 0 {
                    got += 1;
                    self.advance_expected(i, &mut expect, &mut counts, &ctx)?;
                    counts.records += 1;
                    counts.filtered += 1;
                    covered = Some(covered.map_or(i, |c| c.max(i)));
                    next = next.max(i + 1);
                    continue;
                }
                // Parsed where it will wait for its batch.
                pending.push(ChangelogRecord::empty());
                let last = pending.len() - 1;
                match ChangelogRecord::parse_into(line, &mut pending[last]) {
                    Ok(()) => {
                        // Only a parsed record moves what is read next and what may be
                        // acknowledged; an unparsable one is acknowledged with a later one.
                        got += 1;
                        self.advance_expected(i, &mut expect, &mut counts, &ctx)?;
                        covered = Some(covered.map_or(i, |c| c.max(i)));
                        next = next.max(i + 1);
                        let r = &pending[last];
                        counts.records += 1;
                        if matches!(r.kind, crate::changelog::RecordType::Unknown(..)) {
                            counts.unknown_types += 1;
                        }
                        let filtered = match &r.kind {
                            crate::changelog::RecordType::Unknown(_, name) => filter.contains(name.as_str()),
                            k => k.bit() & filter_bits != 0,
                        };
                        if filtered {
                            counts.filtered += 1;
                            pending.pop();
                        }
                    }
                    Err(e) => {
                        pending.pop();
                        // The record in sequence is not a gap; one further ahead moves nothing.
                        if expect == Some(i) {
                            expect = Some(i + 1);
                        }
                        if self.dead_letter(&mut dead, &i.to_string(), line, &e, &mut counts)? {
                            got += 1;
                            counts.rejects += 1;
                            tracing::warn!(message = "rejected changelog record", mdt = %cfg.mdt, line = %line.escape_debug(), reason = %e);
                        }
                    }
                }
            }
            if got > 0 {
                last_new = Instant::now();
            }
            let idle = got == 0;
            // Full batches close at the size limit...
            while pending.len() >= cfg.batch_size {
                let batch: Vec<ChangelogRecord> = pending.drain(..cfg.batch_size).collect();
                let upto = batch.last().map(|r| r.index).unwrap_or(0);
                self.process(batch, upto, &lfs, &mut tree, &mut lookahead, &mut fsm, &ctx, &mut enc, &mut counts).await?;
            }
            // ...the rest after a quiet period (or at once when draining).
            let quiet_over = ctx.drain || last_new.elapsed() >= quiet;
            if idle && quiet_over && (!pending.is_empty() || covered.is_some_and(|c| c > counts.cleared_index)) {
                let batch = std::mem::take(&mut pending);
                self.process(batch, covered.unwrap_or(0), &lfs, &mut tree, &mut lookahead, &mut fsm, &ctx, &mut enc, &mut counts).await?;
            }
            if let Some(c) = covered {
                let labels = [("component", ctx.name.as_str()), ("mdt", cfg.mdt.as_str())];
                let m = icicle_core::metrics::Metrics::global();
                m.set("icicle_changelog_index", "Highest changelog index read per MDT.", &labels, c as f64);
                m.set("icicle_changelog_lag", "Changelog records read but not yet cleared, per MDT.", &labels, c.saturating_sub(counts.cleared_index) as f64);
            }
            if idle {
                if ctx.drain && pending.is_empty() {
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs_f64(cfg.poll_interval_secs.max(0.01))) => {}
                    _ = stop.changed() => {}
                }
            }
        }
        counts.tree = tree.counts;
        serde_json::to_value(&counts).map_err(|e| IcicleError::Internal(e.to_string()))
    }
}

impl ChangeSourceConfig for LustreConfig {
    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn ChangeSource>, ConfigError> {
        if self.lfs.is_empty() {
            return Err(ctx.invalid("lfs", "give the lfs command"));
        }
        if self.batch_size == 0 {
            return Err(ctx.invalid("batch_size", "must be at least 1"));
        }
        for t in &self.filter {
            if crate::changelog::RecordType::from_name(t).is_none() {
                return Err(ctx.invalid("filter", format!("`{t}` is not a changelog record type")));
            }
        }
        Ok(Arc::new(LustreSource { cfg: self }))
    }
}
