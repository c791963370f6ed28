//! The `lustre` source's configuration and the counters of a monitor run.

use std::path::PathBuf;

use icicle_core::monitor::OnGap;
use serde::Deserialize;

use crate::reducer::ReduceCounts;
use crate::tree::TreeCounts;

/// `[sources.<id>] type = "lustre"`.
#[derive(Debug, Clone, Deserialize)]
pub struct LustreConfig {
    /// The MDT device, e.g. `fs0-MDT0000`; with `mdts`, the name of the source's checkpoint,
    /// dead letters and metrics (default `<fsname>-MDTs`).
    #[serde(default)]
    pub mdt: String,
    /// Every MDT of one namespace (DNE), read as one changelog into one directory tree
    /// (`["fs0-MDT0000", "fs0-MDT0001"]`): a directory renamed on one MDT moves what the
    /// others log below it. Instead of one `mdt`.
    #[serde(default)]
    pub mdts: Vec<String>,
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
    /// Lines read per `lfs changelog` call (then the rest of the record they end in).
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
    /// Read each updated file's layout with `lfs getstripe -v` (one call per batch for up to
    /// 256 files; kept per file while its inode, size and ctime stay) and publish its FID,
    /// pool, stripe count and OSTs (`storage` in the record). Off by default: no call is made.
    #[serde(default)]
    pub layout: bool,
    /// Read each updated file's project ID with `lfs project -d` (one call per batch, kept as
    /// layouts are) and publish it (`storage.project_id`). Off by default.
    #[serde(default)]
    pub project: bool,
    /// Files whose layout and project ID are kept between batches (with `layout` or
    /// `project`).
    #[serde(default = "default_layout_cache")]
    pub layout_cache: usize,
}

fn default_layout_cache() -> usize {
    65_536
}

fn default_reduction() -> bool {
    true
}

fn default_lfs_retries() -> u32 {
    5
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

/// How many purged ranges a run's report lists.
pub const LOST_RANGES_KEPT: usize = 100;

/// Counters of one monitor run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct MonitorCounts {
    /// Changelog records read (parsed or dropped by the filter).
    pub records: u64,
    /// Records dropped at ingestion by [`LustreConfig::filter`].
    pub filtered: u64,
    /// Records that could not be parsed and paths that may not be published.
    pub rejects: u64,
    /// Records withdrawn (sent as deletes): no mapped principal may see the file as it is now.
    pub withdrawn: u64,
    /// Records of a type this version does not know.
    pub unknown_types: u64,
    /// What batch reduction did with the records.
    pub reduce: ReduceCounts,
    /// The directory tree's counters (`fid2path` calls, evictions...).
    pub tree: TreeCounts,
    /// Records sent (upserts of files as they are now).
    pub updates: u64,
    /// Deletes sent.
    pub deletes: u64,
    /// Paths to update that were gone by the time they were stat'ed.
    pub vanished: u64,
    /// Files published again because a directory above them changed permissions.
    pub reevaluated: u64,
    /// Batches applied.
    pub batches: u64,
    /// The last index cleared (`lfs changelog_clear`), or restored from the checkpoint.
    pub cleared_index: u64,
    /// `lfs changelog_clear` calls made.
    pub clears: u64,
    /// Records purged before this monitor read them (their changes are missing).
    pub lost_records: u64,
    /// The first [`LOST_RANGES_KEPT`] purged ranges, `[first, last]` (every one is logged).
    pub lost_ranges: Vec<[u64; 2]>,
    /// Lines that could not be parsed, kept in the dead-letter file.
    pub dead_letters: u64,
    /// Files whose layout or project ID `lfs` was asked for (with `layout` or `project`).
    pub layouts_read: u64,
    /// Files whose layout or project ID could not be read: published with the attributes
    /// last read for them (none the first time), and asked again with the next update.
    pub layouts_failed: u64,
}

impl MonitorCounts {
    /// These counts with `other`'s added: the state's and the stream's, which each count their
    /// own fields (the later cleared index; `other`'s lost ranges after these, up to the kept
    /// number).
    pub fn merged(&self, other: &MonitorCounts) -> MonitorCounts {
        let mut reduce = self.reduce;
        reduce.add(&other.reduce);
        let mut lost_ranges = self.lost_ranges.clone();
        lost_ranges.extend(other.lost_ranges.iter().copied());
        lost_ranges.truncate(LOST_RANGES_KEPT);
        MonitorCounts {
            records: self.records + other.records,
            filtered: self.filtered + other.filtered,
            rejects: self.rejects + other.rejects,
            withdrawn: self.withdrawn + other.withdrawn,
            unknown_types: self.unknown_types + other.unknown_types,
            reduce,
            tree: self.tree,
            updates: self.updates + other.updates,
            deletes: self.deletes + other.deletes,
            vanished: self.vanished + other.vanished,
            reevaluated: self.reevaluated + other.reevaluated,
            batches: self.batches + other.batches,
            cleared_index: self.cleared_index.max(other.cleared_index),
            clears: self.clears + other.clears,
            lost_records: self.lost_records + other.lost_records,
            lost_ranges,
            dead_letters: self.dead_letters + other.dead_letters,
            layouts_read: self.layouts_read + other.layouts_read,
            layouts_failed: self.layouts_failed + other.layouts_failed,
        }
    }
}
