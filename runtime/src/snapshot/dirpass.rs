//! The directory pre-pass of a run whose visibility follows directory permissions: sources
//! that may list a file before its directories (listings, GUFI's per-directory databases)
//! have their directory rows read first, into the policy's [`DirectoryTable`].

use std::sync::{Arc, Mutex};

use icicle_core::access::{Acl, DirectoryParts, DirectoryTable, Perm};
use icicle_core::record::{FileRecord, Reject};
use icicle_core::scope::Scope;
use icicle_core::traits::{RowSink, Split};
use icicle_core::Source;

use super::cluster::{decode_splits, encode_splits, put_bytes, Cluster, Fields};

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
/// that read parents first are skipped unless `parents_first_too`: in one process their
/// directories arrive before their files. A split a read discovers is read by the same thread.
pub fn collect_directories(
    sources: &[Arc<dyn Source>],
    splits: Vec<(usize, Split)>,
    table: &DirectoryTable,
    workers: usize,
    parents_first_too: bool,
) -> PrepassCounts {
    let queue: Mutex<Vec<(usize, Split)>> = Mutex::new(
        splits.into_iter().filter(|(i, _)| parents_first_too || !sources[*i].parents_first()).rev().collect(),
    );
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

/// The pre-pass across ranks (collective): rank 0's `planned` splits (`None` elsewhere) are
/// dealt over the ranks, heaviest first, each to the least loaded; each rank reads its share's
/// directory rows, parents-first sources included (a walk's later directories are read by
/// whichever rank asks, which must know the ones above them); then every rank's table is
/// merged into every other's, so each judges every record as one process would. Returns the
/// counts summed over the ranks.
pub fn collect_directories_across(
    cluster: &dyn Cluster,
    sources: &[Arc<dyn Source>],
    planned: Option<Vec<(usize, Split)>>,
    table: &DirectoryTable,
) -> Result<PrepassCounts, String> {
    let plan = cluster.broadcast(planned.as_deref().map(encode_splits).unwrap_or_default())?;
    let splits = decode_splits(&plan).map_err(|e| format!("rank 0's plan: {e}"))?;
    let mine = share_of(&splits, cluster.rank(), cluster.size());
    let c = collect_directories(sources, mine, table, 1, true);
    let gathered = cluster.gather(encode_parts(&table.export()))?;
    let mut all = Vec::new();
    for part in gathered.into_iter().flatten() {
        put_bytes(&mut all, &part);
    }
    let all = cluster.broadcast(all)?;
    let mut f = Fields::new(&all);
    while !f.is_empty() {
        table.absorb(decode_parts(f.bytes()?).map_err(|e| format!("a rank's directory table: {e}"))?);
    }
    let sums = cluster.all_sum(&[c.splits, c.directories, c.failed])?;
    Ok(PrepassCounts { splits: sums[0], directories: sums[1], failed: sums[2] })
}

/// `rank`'s share of `splits` over `size` ranks: heaviest first, each to the least loaded
/// rank (the lowest on a tie); the same on every rank.
fn share_of(splits: &[(usize, Split)], rank: usize, size: usize) -> Vec<(usize, Split)> {
    let mut order: Vec<usize> = (0..splits.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(splits[i].1.weight), i));
    let mut load = vec![0u64; size.max(1)];
    let mut mine = Vec::new();
    for i in order {
        let r = (0..load.len()).min_by_key(|&r| (load[r], r)).unwrap_or(0);
        load[r] += splits[i].1.weight.max(1);
        if r == rank {
            mine.push(i);
        }
    }
    mine.sort_unstable();
    mine.into_iter().map(|i| splits[i].clone()).collect()
}

fn put_u64s(out: &mut Vec<u8>, values: &[u64]) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// A table's parts as bytes for another rank.
fn encode_parts(p: &DirectoryParts) -> Vec<u8> {
    let mut out = Vec::with_capacity(p.dirs.len() * 64 + p.named.len() * 32 + 32);
    put_u64s(&mut out, &[p.top as u64, u64::from(p.unplaced), p.dirs.len() as u64]);
    for (path, perm) in &p.dirs {
        put_bytes(&mut out, path.as_bytes());
        put_u64s(&mut out, &[perm.mode.into(), perm.uid.into(), perm.gid.into()]);
        let Some(acl) = &perm.acl else {
            put_u64s(&mut out, &[0]);
            continue;
        };
        put_u64s(&mut out, &[1, acl.user_obj.into(), acl.group_obj.into(), acl.other.into()]);
        put_u64s(&mut out, &[acl.mask.map_or(0, |m| 1 + u64::from(m)), u64::from(acl.unreadable)]);
        for named in [&acl.users, &acl.groups] {
            put_u64s(&mut out, &[named.len() as u64]);
            for (id, bits) in named {
                put_u64s(&mut out, &[(*id).into(), (*bits).into()]);
            }
        }
    }
    put_u64s(&mut out, &[p.named.len() as u64]);
    for n in &p.named {
        put_bytes(&mut out, n.as_bytes());
    }
    out
}

/// The inverse of [`encode_parts`].
fn decode_parts(buf: &[u8]) -> Result<DirectoryParts, String> {
    let mut f = Fields::new(buf);
    let u32_of = |v: u64| u32::try_from(v).map_err(|_| format!("{v} is not a 32-bit value"));
    let top = usize::try_from(f.u64()?).unwrap_or(usize::MAX);
    let unplaced = f.u64()? != 0;
    let n = f.u64()?;
    let mut dirs = Vec::new();
    for _ in 0..n {
        let path = f.str()?.to_string();
        let (mode, uid, gid) = (u32_of(f.u64()?)?, u32_of(f.u64()?)?, u32_of(f.u64()?)?);
        let acl = if f.u64()? == 0 {
            None
        } else {
            let (user_obj, group_obj, other) = (u32_of(f.u64()?)?, u32_of(f.u64()?)?, u32_of(f.u64()?)?);
            let mask = match f.u64()? {
                0 => None,
                m => Some(u32_of(m - 1)?),
            };
            let unreadable = f.u64()? != 0;
            let mut named = [Vec::new(), Vec::new()];
            for list in &mut named {
                for _ in 0..f.u64()? {
                    list.push((u32_of(f.u64()?)?, u32_of(f.u64()?)?));
                }
            }
            let [users, groups] = named;
            Some(Arc::new(Acl { user_obj, users, group_obj, groups, mask, other, unreadable }))
        };
        dirs.push((path, Perm { mode, uid, gid, acl }));
    }
    let named = (0..f.u64()?).map(|_| f.str().map(str::to_string)).collect::<Result<_, _>>()?;
    Ok(DirectoryParts { dirs, named, top, unplaced })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A table's parts come back as they went, ACLs, unknown directories and flags included.
    #[test]
    fn parts_survive_the_codec() {
        let t = DirectoryTable::default();
        t.insert("/a", Perm::new(0o40755, 1, 2));
        let acl = Acl {
            user_obj: 7,
            users: vec![(1000, 5)],
            group_obj: 5,
            groups: vec![(50, 7), (51, 0)],
            mask: Some(7),
            other: 0,
            unreadable: false,
        };
        t.insert("/a/b", Perm { mode: 0o40750, uid: 3, gid: 4, acl: Some(Arc::new(acl)) });
        t.insert(
            "/a/c",
            Perm { mode: 0o40700, uid: 3, gid: 4, acl: Some(Arc::new(Acl { unreadable: true, ..Acl::default() })) },
        );
        t.note_unknown("/a/d");
        t.note_below("/a/e/f");
        let parts = t.export();
        assert_eq!(decode_parts(&encode_parts(&parts)).unwrap(), parts);
        t.note_unplaced();
        let parts = t.export();
        assert_eq!(decode_parts(&encode_parts(&parts)).unwrap(), parts);
        assert!(decode_parts(&encode_parts(&parts)[..20]).is_err());
        // Merged into an empty table: the same chains.
        let u = DirectoryTable::default();
        u.absorb(parts.clone());
        assert_eq!(u.export(), parts);
    }

    /// Every split goes to exactly one rank, and the heavy ones are spread.
    #[test]
    fn shares_cover_every_split_once() {
        let splits: Vec<(usize, Split)> = (0..13u64)
            .map(|i| {
                let mut s = Split::whole(PathBuf::from(format!("/in/{i}")), 0);
                s.weight = if i < 3 { 1000 } else { i };
                (0, s)
            })
            .collect();
        for size in 1..6 {
            let mut seen: Vec<String> =
                (0..size).flat_map(|r| share_of(&splits, r, size)).map(|(_, s)| s.name).collect();
            seen.sort();
            let mut want: Vec<String> = splits.iter().map(|(_, s)| s.name.clone()).collect();
            want.sort();
            assert_eq!(seen, want, "{size} ranks");
            if size >= 3 {
                for r in 0..3 {
                    assert_eq!(share_of(&splits, r, size).iter().filter(|(_, s)| s.weight == 1000).count(), 1);
                }
            }
        }
    }
}
