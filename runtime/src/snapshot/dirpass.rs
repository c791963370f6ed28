//! The directory pre-pass of a run whose visibility follows directory permissions: sources
//! that may list a file before its directories (listings, GUFI's per-directory databases)
//! have their directory rows read first, into the policy's [`DirectoryTable`].

use std::sync::{Arc, Mutex};

use icicle_core::access::{Acl, DirectoryTable, Perm};
use icicle_core::record::{FileRecord, Reject};
use icicle_core::scope::Scope;
use icicle_core::traits::{RowSink, Split};
use icicle_core::Source;

/// Takes directory rows into the table; everything else is read again by the main pass.
struct DirectoryCollector<'t> {
    table: &'t DirectoryTable,
    spawned: Vec<Split>,
    rows: u64,
    /// The parent of the last file row (noted once per run of rows in one directory).
    last_parent: String,
}

impl RowSink for DirectoryCollector<'_> {
    fn record(&mut self, rec: &FileRecord<'_>) {
        // Normalised as the main pass normalises it.
        let path = icicle_core::name::normalise(rec.path);
        let dir = icicle_core::access::parent_dir(&path);
        if dir != self.last_parent {
            self.last_parent.clear();
            self.last_parent.push_str(dir);
            self.table.note_below(&path);
        }
    }

    fn directory(&mut self, rec: &FileRecord<'_>) {
        self.directory_with_acl(rec, None)
    }

    fn directory_with_acl(&mut self, rec: &FileRecord<'_>, acl: Option<Acl>) {
        let path = icicle_core::name::normalise(rec.path);
        let rec = &FileRecord { path: &path, ..*rec };
        if rec.check().is_ok() {
            self.rows += 1;
            self.table.insert(
                rec.path,
                Perm { mode: rec.attrs.mode, uid: rec.attrs.uid, gid: rec.attrs.gid, acl: acl.map(Arc::new) },
            );
        } else {
            self.table.note_unknown(rec.path);
        }
    }

    fn wants_acls(&self) -> bool {
        true
    }

    /// A row that could not be read may have been a directory's: what it leaves unknown is
    /// unknown to the table too (its chains fail closed, never shorter).
    fn reject(&mut self, reject: Reject) {
        // No scope: it hides nothing (a file gone while it was read). A row whose own name
        // is bad is placed by its directory.
        if reject.incomplete {
            // The rows read were read; what the input may have held after them is the
            // main pass's to report.
            return;
        }
        match (&reject.scope, &reject.placed) {
            (_, Some(p)) => lost(self.table, &Scope::Exact(p.clone()), &reject.input),
            (Some(scope), None) => lost(self.table, scope, &reject.input),
            (None, None) => {}
        }
    }

    fn progress(&mut self, _units: u64) {}

    fn spawn(&mut self, split: Split) {
        self.spawned.push(split);
    }
}

/// Rows lost over a known scope, met by this process (their warnings are sampled).
static LOST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Rows were lost over `scope` (a bad row, a split not read): the table knows them unknown.
fn lost(table: &DirectoryTable, scope: &Scope, input: &str) {
    if *scope != Scope::All {
        if let Some(n) = icicle_core::log_sample::count_to_log(&LOST) {
            tracing::warn!(message = "directory pre-pass: a row (perhaps a directory's) could not be read; chains through its path are judged unknown (the first 20 are logged, then one in 10,000)", input = %input, scope = %scope.to_string().escape_debug(), seen = n);
        }
    }
    match scope {
        // Its parent is a directory, and itself has no row.
        Scope::Exact(p) => table.note_below(p),
        Scope::Subtree(d) | Scope::Children(d) => table.note_unknown(d),
        Scope::All => {
            if !table.is_unplaced() {
                tracing::warn!(message = "directory pre-pass: rows that may be directories' were lost where no path places them; every directory's permissions are unknown in this run", input = %input);
            }
            table.note_unplaced();
        }
    }
}

/// What the pre-pass read.
#[derive(Debug, Default, Clone, Copy)]
pub struct PrepassCounts {
    pub splits: u64,
    pub directories: u64,
    /// Splits that could not be read (their directories stay unknown; the main pass reports them).
    pub failed: u64,
}

/// Read the directory rows of `splits` (source index, split) on `workers` threads. Sources
/// that read parents first are skipped: their directories arrive before their files. A split
/// a read discovers is read by the same thread.
pub fn collect_directories(
    sources: &[Arc<dyn Source>],
    splits: Vec<(usize, Split)>,
    table: &DirectoryTable,
    workers: usize,
) -> PrepassCounts {
    let queue: Mutex<Vec<(usize, Split)>> =
        Mutex::new(splits.into_iter().filter(|(i, _)| !sources[*i].parents_first()).rev().collect());
    let counts = Mutex::new(PrepassCounts::default());
    std::thread::scope(|scope| {
        for _ in 0..workers.max(1) {
            scope.spawn(|| {
                let mut mine = PrepassCounts::default();
                let mut local: Vec<(usize, Split)> = Vec::new();
                while let Some((si, split)) = local.pop().or_else(|| queue.lock().ok()?.pop()) {
                    let mut c = DirectoryCollector { table, spawned: Vec::new(), rows: 0, last_parent: String::new() };
                    mine.splits += 1;
                    if let Err(e) = sources[si].read_directories(&split, &mut c) {
                        tracing::warn!(message = "directory pre-pass could not read a split; the directories it covers are unknown", split = %split.name, error = %e);
                        lost(table, split.scope.as_ref().unwrap_or(&Scope::All), &split.name);
                        mine.failed += 1;
                    }
                    mine.directories += c.rows;
                    local.extend(c.spawned.into_iter().map(|s| (si, s)));
                }
                if let Ok(mut c) = counts.lock() {
                    c.splits += mine.splits;
                    c.directories += mine.directories;
                    c.failed += mine.failed;
                }
            });
        }
    });
    counts.into_inner().unwrap_or_default()
}
