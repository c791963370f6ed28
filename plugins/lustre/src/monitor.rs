//! The `lustre` change source: its configuration, the `lfs` commands, resolution through
//! `fid2path` and the mount, and the wiring of the changelog stream ([`crate::stream`]) and
//! the directory-tree state ([`crate::apply`]) into the runtime's monitor driver.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use icicle_core::gmeta::PrimaryEncoder;
use icicle_core::registry::{BuildContext, ChangeSourceConfig};
use icicle_core::sent_ahead::SentAhead;
use icicle_core::traits::{ChangeSource, MonitorContext, OnGap};
use icicle_core::{ConfigError, IcicleError};
use icicle_runtime::monitor::DriverSettings;
use serde::Deserialize;

use crate::apply::TreeState;
use crate::changelog::{ChangelogRecord, Fid};
use crate::reducer::ReduceCounts;
use crate::stream::ChangelogStream;
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
pub(crate) async fn with_retries<T>(what: &str, mdt: &str, retries: u32, mut op: impl FnMut() -> Result<T, String>) -> Result<T, String> {
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
pub(crate) fn fsmonitor_apply(rec: &ChangelogRecord, cache: &mut lru::LruCache<Fid, String>, r: &mut LfsResolver<'_>, counts: &mut TreeCounts, ops: &mut Ops) {
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
            let last = crate::changelog::lines(text.trim_end()).last().and_then(crate::stream::leading_index);
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
    cfg: Arc<LustreConfig>,
}

impl LustreSource {
    fn state_file(&self) -> PathBuf {
        self.cfg.state_dir.join(format!("{}.checkpoint.json", self.cfg.mdt))
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
}

/// Every file and link below `dir` (relative paths, sorted); directories are descended.
pub(crate) fn walk_files(dir: &std::path::Path) -> Vec<String> {
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

#[async_trait]
impl ChangeSource for LustreSource {
    async fn run(&self, ctx: MonitorContext) -> Result<serde_json::Value, IcicleError> {
        let cfg = &self.cfg;
        let (mut tree, cleared) = match self.load_checkpoint() {
            Some(cp) => {
                let idx = cp.index;
                (DirectoryTree::restore(cp, cfg.lru_capacity), idx)
            }
            None => (DirectoryTree::new(cfg.lru_capacity), 0),
        };
        let sent_ahead = SentAhead::new(cfg.state_dir.join(format!("{}.sent-ahead", cfg.mdt)));
        tree.dir_attributes = ctx.policy.access.is_some();
        tree.maybe_sent(sent_ahead.read());
        let counts = Arc::new(Mutex::new(MonitorCounts { cleared_index: cleared, ..Default::default() }));
        let fsm = (cfg.resolution != Resolution::Tree)
            .then(|| lru::LruCache::new(std::num::NonZeroUsize::new(cfg.fsmonitor_cache.max(1)).unwrap_or(std::num::NonZeroUsize::MIN)));
        let mut state = TreeState {
            cfg: cfg.clone(),
            lfs: Lfs { cmd: cfg.lfs.clone() },
            tree,
            lookahead: Lookahead::new(cleared),
            fsm,
            enc: PrimaryEncoder::new(ctx.policy.clone()),
            posix: ctx.policy.access.is_some(),
            counts: counts.clone(),
        };
        let mut stream = ChangelogStream::new(cfg.clone(), ctx.name.clone(), ctx.drain, counts, cleared);
        let settings = DriverSettings {
            batch_size: cfg.batch_size,
            quiet: Duration::from_secs_f64(cfg.quiet_period_secs.max(0.0)),
            state_file: self.state_file(),
            sent_ahead,
            what: format!("MDT {}", cfg.mdt),
        };
        icicle_runtime::monitor::drive(&mut stream, &mut state, &ctx, &settings).await
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
        Ok(Arc::new(LustreSource { cfg: Arc::new(self) }))
    }
}
