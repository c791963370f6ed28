//! Property tests of both monitors' engines over many random seeds: workloads (eval_out,
//! eval_perf, filebench, mixed) inside directories that predate monitoring and in new ones,
//! random batch sizes, random LRU caps, checkpoints restored between batches. The stand-in's
//! namespace answers `fid2path`, directory walks and "stat" as the file system would *now*
//! (after the round of operations, so answers include renames not yet applied). After each
//! stream: the index (snapshot + emitted operations) equals the file system exactly, every
//! name is as fresh as its object's last change (for GPFS, as the update's own metadata says:
//! the stand-in's ctime is the index of the object's last change), and operations out <= 1.2 x
//! minimal, where minimal turns the file system at one batch's end into the next (an operation counts as
//! done once its first event is in a batch). GPFS states started without a seed index are
//! bounded on updates only, plus one per object from before monitoring that events touch.
//! Lustre seeds run a third over one MDT, a third over 2 and a third over 4 MDTs of one
//! namespace (DNE: each MDT's changelog read through the monitor's merge while the workload
//! goes on, `feed.rs`; striped directories, their shards as parents in half the live seeds);
//! `ICICLE_PROPERTY_MDTS=N` runs every seed over N.
//! Seeded, unbounded GPFS states read three seeds in five from 2, 4 or 8 partitions (events
//! keyed by inode, fetched from random partitions in random amounts), exact all the same and
//! within 1.3 x what a reader of one partition needs when batches hold ten events or more a
//! partition (4 x below).
//!
//! `ICICLE_PROPERTY_SEED=N` replays one seed; `ICICLE_PROPERTY_CASES` sets how many run
//! (default 64 per monitor, from a random first seed printed with any failure, or
//! `ICICLE_PROPERTY_FIRST`, to compare two builds on one set of seeds);
//! `ICICLE_PROPERTY_TRACE=1` prints every operation a batch did not need,
//! `ICICLE_PROPERTY_PATH=A|B` (GPFS) every event and operation whose text contains A or B, and
//! `ICICLE_PROPERTY_KEEP=1` keeps each seed's changelog (and events) in /tmp/property-keep;
//! `ICICLE_PROPERTY_GPFS_ANY=unseeded|bounded|all` reads those GPFS states from several
//! partitions too (not exact yet: docs/gpfs-monitor.md, "Several partitions").

use std::collections::{HashMap, HashSet};

use icicle_core::traits::{Reducer, StateStore};
use icicle_plugins_lustre::changelog::{ChangelogRecord, Fid, RecordType, CLF_LAST};
use icicle_plugins_lustre::lookahead::Lookahead;
use icicle_plugins_lustre::namespace::Namespace;
use icicle_plugins_lustre::reducer::RuleTable;
use icicle_plugins_lustre::tree::{DirectoryTree, Ops, PathOp, Resolver};
use icicle_testkit::gen::Rng;
use icicle_testkit::lustre::{Kind, Workload};

/// The seeds of one run: one given, or `cases` from a random start.
fn seeds(salt: u64) -> Vec<u64> {
    if let Some(s) = std::env::var("ICICLE_PROPERTY_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![s];
    }
    let cases: u64 = std::env::var("ICICLE_PROPERTY_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1);
    let first = std::env::var("ICICLE_PROPERTY_FIRST")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or((nanos ^ salt) % 1_000_000_000);
    (first..first + cases).collect()
}

/// Run `case` for every seed; a failure names the seed to replay.
fn for_seeds(salt: u64, case: fn(u64) -> Result<String, String>) {
    let mut failures = Vec::new();
    let mut summary = Vec::new();
    for seed in seeds(salt) {
        match std::panic::catch_unwind(|| case(seed)) {
            Ok(Ok(line)) => summary.push(line),
            Ok(Err(e)) => failures.push(format!("seed {seed}: {e}")),
            Err(p) => failures.push(format!(
                "seed {seed}: panicked: {:?}",
                p.downcast_ref::<String>().map(String::as_str).or(p.downcast_ref::<&str>().copied())
            )),
        }
    }
    for l in &summary {
        eprintln!("{l}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed (replay one with ICICLE_PROPERTY_SEED=N):\n{}",
        failures.len(),
        failures.len() + summary.len(),
        failures.join("\n")
    );
}

/// What one seed runs.
struct Plan {
    kind: Kind,
    base: &'static str,
    preexisting_base: bool,
    live: bool,
    rounds: usize,
    ops: usize,
    batch: usize,
    lru: usize,
    /// Lustre: MDTs of one namespace (DNE), each logging what it runs, read as one.
    mdts: u32,
}

impl Plan {
    /// The workload and how it is read, for messages.
    fn describe(&self) -> String {
        format!(
            "{:?} in {} (pre-existing: {}, {}), {} rounds x {} ops, batch {}, {} MDT(s)",
            self.kind,
            self.base,
            self.preexisting_base,
            if self.live { "live" } else { "backlog" },
            self.rounds,
            self.ops,
            self.batch,
            self.mdts
        )
    }
}

/// With `ICICLE_PROPERTY_KEEP`, copy a seed's inputs to /tmp/property-keep/SEED.EXT.
fn keep_inputs(seed: u64, files: &[(&std::path::Path, &str)]) {
    if std::env::var("ICICLE_PROPERTY_KEEP").is_err() {
        return;
    }
    let keep = std::path::Path::new("/tmp/property-keep");
    let _ = std::fs::create_dir_all(keep);
    for (f, ext) in files {
        let _ = std::fs::copy(f, keep.join(format!("{seed}.{ext}")));
    }
}

fn plan(seed: u64) -> Plan {
    let mut rng = Rng::new(seed);
    let kind = [Kind::EvalOut, Kind::EvalPerf, Kind::Filebench, Kind::Mixed][(seed % 4) as usize];
    let preexisting_base = (seed / 4).is_multiple_of(2);
    let lru = if rng.below(3) == 0 { 4 + rng.below(60) as usize } else { 0 };
    // Live: the monitor keeps up (a few operations between reads). Backlog: it starts
    // behind, so every answer from the file system is ahead of the record applied.
    let live = (seed / 8).is_multiple_of(2);
    let (rounds, ops) = if live {
        (10 + rng.below(10) as usize, 4 + rng.below(12) as usize)
    } else {
        (1 + rng.below(3) as usize, 60 + rng.below(240) as usize)
    };
    let span = if rng.below(2) == 0 { 12 } else { 300 };
    Plan {
        kind,
        base: if preexisting_base { "/old0" } else { "/work" },
        preexisting_base,
        live,
        rounds,
        ops,
        batch: 1 + rng.below(span) as usize,
        lru,
        // `ICICLE_PROPERTY_MDTS=N` runs every seed over N.
        mdts: std::env::var("ICICLE_PROPERTY_MDTS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or([1, 2, 4][((seed / 16) % 3) as usize]),
    }
}

/// A journal as the monitor's stream reads it (one record a line, names escaped).
fn journal_text(journal: &std::path::Path) -> Result<String, String> {
    std::fs::read_to_string(journal).map_err(|e| e.to_string())
}

/// The bound on operations out / minimal operations, on every stream.
const RATIO_BOUND: f64 = 1.2;

/// Operations out over minimal for an unseeded, unbounded GPFS state (see `gpfs_case`).
const UNSEEDED_BOUND: f64 = 3.0;

/// Operations out over minimal for a GPFS topic of several partitions read in batches of
/// fewer than ten events a partition (see `gpfs_case`).
const PARTITIONS_BOUND: f64 = 4.0;

/// The same, keyed by inode, in batches of ten events or more a partition (at most 1.31 x
/// seen: events read ahead on one partition count against a later batch's minimal).
const PARTITIONS_LARGE_BOUND: f64 = 1.4;

/// Files (not directories) of a namespace, by path.
fn files(ns: &Namespace) -> HashMap<String, Fid> {
    ns.by_path
        .iter()
        .filter(|(_, f)| ns.by_fid.get(f).is_some_and(|o| !o.is_dir))
        .map(|(p, f)| (p.clone(), *f))
        .collect()
}

/// Objects whose metadata a record changes (what an update must capture). A read's CLOSE
/// changes only the access time, which GPFS events do not report (`reads` false).
fn touched(r: &ChangelogRecord, reads: bool) -> Vec<Fid> {
    use RecordType::*;
    match r.kind {
        Close if !reads && r.flags == 0 => vec![],
        Mark | Open | Nopen | Gxatr | Unknown(..) => vec![],
        Renme | Rnmto => {
            let mut v: Vec<Fid> = r.source.into_iter().collect();
            if !r.target.is_zero() && r.flags & CLF_LAST == 0 {
                v.push(r.target);
            }
            v
        }
        Unlnk if r.flags & CLF_LAST != 0 => vec![],
        _ => vec![r.target],
    }
}

/// Minimal operations turning the index at `before` into the index at `after`.
/// Returns (updates, deletes).
fn minimal(before: &HashMap<String, Fid>, after: &HashMap<String, Fid>, changed: &HashSet<Fid>) -> (u64, u64) {
    let deletes = before.keys().filter(|p| !after.contains_key(*p)).count();
    let updates = after.iter().filter(|(p, f)| before.get(*p) != Some(f) || changed.contains(f)).count();
    (updates as u64, deletes as u64)
}

/// `fid2path`, walks and lstat from the stand-in's namespace as it is now.
struct NsResolver<'a> {
    ns: &'a Namespace,
    /// Striped directories' shards → the directory (`lfs fid2path` of a shard).
    shards: &'a HashMap<Fid, Fid>,
    lookahead: &'a mut Lookahead,
    /// The last record read (the read-ahead's end).
    last: u64,
}

impl Resolver for NsResolver<'_> {
    fn fid2path(&mut self, fid: &Fid) -> Option<String> {
        self.fid2path_all(fid).into_iter().next()
    }
    fn fid2path_all(&mut self, fid: &Fid) -> Vec<String> {
        let fid = self.shards.get(fid).unwrap_or(fid);
        self.ns.by_fid.get(fid).map(|o| o.paths.clone()).unwrap_or_default()
    }
    fn is_dir(&mut self, path: &str) -> bool {
        self.ns.by_path.get(path).and_then(|f| self.ns.by_fid.get(f)).is_some_and(|o| o.is_dir)
    }
    fn walk(&mut self, path: &str) -> Vec<String> {
        let prefix = format!("{}/", path.trim_end_matches('/'));
        let mut v: Vec<String> =
            files(self.ns).into_keys().filter_map(|p| p.strip_prefix(&prefix).map(str::to_string)).collect();
        v.sort();
        v
    }
    fn future_renames(&mut self, after: u64, name: &str) -> Vec<icicle_plugins_lustre::lookahead::FutureRename> {
        self.lookahead.named(name, after)
    }
    fn future_namings(&mut self, after: u64, name: &str) -> Vec<icicle_plugins_lustre::lookahead::FutureNaming> {
        self.lookahead.namings(name, after)
    }
    fn path2fid(&mut self, path: &str) -> Option<Fid> {
        self.ns.by_path.get(path).copied()
    }
    fn future_place(&mut self, after: u64, fid: &Fid) -> Option<icicle_plugins_lustre::lookahead::FuturePlace> {
        self.lookahead.place_of(fid, after)
    }
    fn dir_by_later_records(&mut self, after: u64, fid: &Fid) -> bool {
        self.lookahead.is_dir(fid, after)
    }
    fn renamed_over_later(&mut self, after: u64, fid: &Fid) -> Option<Fid> {
        self.lookahead.renamed_over_by(fid, after)
    }
    fn read_position(&mut self) -> u64 {
        self.last
    }
}

/// An index entry: the object a path names and the changelog index it was "stat'ed" at.
type Index = HashMap<String, (Fid, u64)>;

fn lustre_case(seed: u64) -> Result<String, String> {
    let p = plan(seed);
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let journal = tmp.path().join("changelog");
    let mut w = Workload::open(&tmp.path().join("fs"), &journal, seed).map_err(|e| e.to_string())?;
    w.real = false;
    // A third of the seeds print names as Amazon FSx for Lustre does; every seed's changelog
    // starts where the stand-in puts it (anywhere up to 2^36).
    w.fsx_names = seed.is_multiple_of(3);
    w.set_mdts(p.mdts, seed).map_err(|e| e.to_string())?;
    // Entries of striped directories name the directory's shard up to Lustre 2.15 (half the
    // live seeds), the directory from 2.16. A monitor that starts behind cannot place a
    // shard whose directory was removed before it caught up (docs/lustre-monitor.md).
    w.set_shard_pfid(p.live && seed.is_multiple_of(2));
    let mut feed = Feed::new(&journal, p.mdts, seed);
    w.preexisting(60).map_err(|e| e.to_string())?;
    let old1 = w.ns.by_path.keys().find(|p| p.ends_with("/old1")).cloned().unwrap_or_else(|| "/old1".into());
    // The snapshot before monitoring, and the replayed truth.
    let mut truth = w.ns.clone();
    let mut index: Index = files(&truth).into_iter().map(|(p, f)| (p, (f, 0))).collect();
    let mut last_change: HashMap<Fid, u64> = HashMap::new();
    let mut tree = DirectoryTree::new(p.lru);
    tree.striped = p.mdts > 1;
    let mut rng = Rng::new(seed ^ 0xba7c);
    let (mut out, mut min) = (0u64, 0u64);
    for round in 0..p.rounds {
        // Filebench populates its base: each round gets a fresh one.
        let base =
            if p.kind == Kind::Filebench && round > 0 { format!("{}/r{round}", p.base) } else { p.base.to_string() };
        w.run(p.kind, p.ops, &base).map_err(|e| e.to_string())?;
        if p.kind == Kind::Mixed || round + 1 == p.rounds {
            // Changes to objects that predate monitoring.
            w.run(Kind::Mixed, p.ops / 3, &old1).map_err(|e| e.to_string())?;
        }
        if round + 1 == p.rounds {
            // Whole trees go away, those that predate monitoring included.
            w.retire_trees(3).map_err(|e| e.to_string())?;
        }
        let round = feed.round(&w)?;
        let mut lookahead = Lookahead::new(0);
        lookahead.keep_leavings(true);
        lookahead.push_text(&round.text, None);
        let (records, now) = (round.records, round.last);
        let shards = icicle_testkit::lustre::shards(&journal);
        for chunk in records.chunks(p.batch) {
            let before = files(&truth);
            let mut changed = HashSet::new();
            for r in chunk {
                // The truth's namespace knows directories, not their shards.
                let mut master = r.clone();
                for p in [&mut master.parent, &mut master.source_parent].into_iter().flatten() {
                    *p = shards.get(p).copied().unwrap_or(*p);
                }
                truth.apply(&master);
                for f in touched(r, true) {
                    changed.insert(f);
                    last_change.insert(f, r.index);
                }
            }
            let (u, d) = minimal(&before, &files(&truth), &changed);
            min += u + d;
            // The monitor: ingestion filter, reduction, tree, emit (stat now).
            let mut kept: Vec<ChangelogRecord> = chunk
                .iter()
                .filter(|r| {
                    !matches!(r.kind, RecordType::Open | RecordType::Nopen | RecordType::Gxatr | RecordType::Mark)
                })
                .cloned()
                .collect();
            RuleTable.reduce(&mut kept);
            lookahead.next_batch(chunk[0].index);
            let mut ops = Ops::default();
            tree.begin_batch();
            let mut r = NsResolver { ns: &w.ns, shards: &shards, lookahead: &mut lookahead, last: now };
            for rec in &kept {
                tree.apply(rec, &mut r, &mut ops);
            }
            let now_files = files(&w.ns);
            if std::env::var("ICICLE_PROPERTY_TRACE").is_ok() {
                let after = files(&truth);
                for (path, op) in &ops {
                    let needed = match op {
                        PathOp::Delete => before.contains_key(path) && !after.contains_key(path),
                        PathOp::Update => {
                            after.get(path).is_some_and(|f| before.get(path) != Some(f) || changed.contains(f))
                        }
                    };
                    if !needed && (*op == PathOp::Delete || now_files.contains_key(path)) {
                        eprintln!("batch {}..{}: unneeded {op:?} {path}", chunk[0].index, chunk[chunk.len() - 1].index);
                    }
                }
            }
            if let Ok(pat) = std::env::var("ICICLE_PROPERTY_OPS") {
                for (path, op) in ops.iter().filter(|(p, _)| p.contains(&pat)) {
                    eprintln!("batch {}..{}: {op:?} {path}", chunk[0].index, chunk[chunk.len() - 1].index);
                }
            }
            for (path, op) in ops {
                match op {
                    PathOp::Update => match now_files.get(&path) {
                        Some(f) => {
                            tree.indexed(&path);
                            index.insert(path, (*f, now));
                            out += 1;
                        }
                        None => tree.vanished(&path),
                    },
                    PathOp::Delete => {
                        tree.unindexed(&path);
                        index.remove(&path);
                        out += 1;
                    }
                }
            }
            if rng.below(4) == 0 {
                let last = chunk[chunk.len() - 1].index;
                let cp = serde_json::to_string(&tree.checkpoint(last)).map_err(|e| e.to_string())?;
                tree = DirectoryTree::restore(serde_json::from_str(&cp).map_err(|e| e.to_string())?, p.lru);
                tree.striped = p.mdts > 1;
            }
        }
    }
    let what = p.describe();
    keep_inputs(seed, &[(&journal, "changelog")]);
    check_index(&index, &files(&w.ns), &last_change, true, &what)?;
    let calls = tree.counts.fid2path_calls;
    if out as f64 > RATIO_BOUND * min as f64 {
        return Err(format!("{what}: {out} operations out, minimal {min} (bound {RATIO_BOUND}x)"));
    }
    let shards = tree.counts.shards;
    Ok(format!("lustre seed {seed}: {what}: {out} operations / {min} minimal, {calls} fid2path calls, {shards} shards"))
}

/// The index equals the file system (same paths, same objects) and no name is older than its
/// object's last change (without `fresh`, except names of objects with several). Returns how
/// many names are stale.
fn check_index(
    index: &Index,
    fs: &HashMap<String, Fid>,
    last_change: &HashMap<Fid, u64>,
    fresh: bool,
    what: &str,
) -> Result<usize, String> {
    let missing: Vec<&String> = fs.keys().filter(|p| !index.contains_key(*p)).collect();
    let extra: Vec<&String> = index.keys().filter(|p| !fs.contains_key(*p)).collect();
    let wrong: Vec<&String> =
        fs.iter().filter(|(p, f)| index.get(*p).is_some_and(|(g, _)| g != *f)).map(|(p, _)| p).collect();
    let stale: Vec<String> = index
        .iter()
        .filter(|(_, (f, at))| last_change.get(f).is_some_and(|c| c > at))
        .map(|(p, (f, at))| format!("{p} ({f}: stat'ed at {at}, changed at {})", last_change[f]))
        .collect();
    // Not `fresh`: only the names of objects with several names may be stale.
    let names = |f: &Fid| fs.values().filter(|g| *g == f).count();
    let single_stale =
        index.iter().filter(|(_, (f, at))| last_change.get(f).is_some_and(|c| c > at) && names(f) < 2).count();
    if missing.is_empty() && extra.is_empty() && wrong.is_empty() && (stale.is_empty() || (!fresh && single_stale == 0))
    {
        return Ok(stale.len());
    }
    Err(format!("{what}: missing {missing:?}\nextra (phantoms) {extra:?}\nwrong object {wrong:?}\nstale {stale:?}"))
}

#[test]
fn lustre_monitor_index_equals_the_file_system_with_near_minimal_operations() {
    for_seeds(0x1057e, lustre_case);
}

#[path = "monitor_properties/gpfs.rs"]
mod gpfs;

#[path = "monitor_properties/feed.rs"]
mod feed;
use feed::Feed;
