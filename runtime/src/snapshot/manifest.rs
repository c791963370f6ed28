//! Versioned runs: a manifest of the subjects (and content fingerprints) a delivered run
//! produced, so the next run can report created / updated / unchanged / deleted.
//!
//! Layout of `state_dir`: `CURRENT` names the committed `manifest-NNNNNN/` directory, whose
//! `part-N.tsv` files hold lines `HASH128<TAB>FP64<TAB>"subject"` (HASH128 is xxh3-128 of the
//! path, FP64 a fingerprint of the record's content), and `resend.jsonl` the subjects a sink
//! set aside as dead letters (sent again by the next run). A run writes `manifest.new/`, and
//! only after every sink delivered renames it to the next generation and replaces `CURRENT`.
//! `FORMAT` in a manifest directory names its fingerprints' scheme: `2` covers the inode; a
//! directory without it (an earlier release's) is compared with the scheme that lacks it.

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use xxhash_rust::xxh3::{xxh3_128, Xxh3};

use icicle_core::record::FileRecord;

pub use super::sighting::Sighting;
use icicle_gmeta::push_json_str;

/// The previous run's manifest, loaded for lookups.
#[derive(Debug, Default)]
pub struct PreviousManifest {
    map: HashMap<u128, (u64, u32), Fast>,
    /// Per line: 0 while this run has not read its path, else where the run first read it
    /// and how that read was classified ([`Sighting`]).
    seen: Vec<AtomicU64>,
    /// Paths this run read that the previous run did not hold, with their first [`Sighting`]
    /// (kept only when the caller names where a row came from), in shards by hash.
    created: Vec<Mutex<HashMap<u128, u64, Fast>>>,
    files: Vec<PathBuf>,
    dir: Option<PathBuf>,
    pending: Vec<PathBuf>,
    /// Across ranks: only the lines whose hash this rank owns (rank, ranks).
    share: Option<(usize, usize)>,
    /// The committed manifest's fingerprints lack the inode (an earlier release wrote it).
    without_inode: bool,
    /// Then, the fingerprints (with the inode) of pending manifests of this release: a record
    /// is unchanged only when it matches both.
    crossed: HashMap<u128, u64, Fast>,
}

/// The maps' hasher: their keys are already xxh3-128 hashes of paths.
type Fast = foldhash::fast::RandomState;

/// The file naming a manifest directory's fingerprint scheme.
const FORMAT: &str = "FORMAT";

/// The fingerprint scheme this release writes: the inode included.
const SCHEME: &str = "2";

/// Whether the manifest directory `dir` holds fingerprints without the inode (no `FORMAT`);
/// a scheme this release does not know is an error naming the file.
fn lacks_inode(dir: &Path) -> std::io::Result<bool> {
    let file = dir.join(FORMAT);
    match fs::read_to_string(&file) {
        Ok(s) if s.trim() == SCHEME => Ok(false),
        Ok(s) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{}: fingerprint scheme {:?}, this release knows {SCHEME} (and none, before it)",
                file.display(),
                s.trim()
            ),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(e),
    }
}

/// The fingerprint of a subject whose indexed content is not known (a pending manifest's):
/// it never matches, so the record is sent again.
const UNCERTAIN: u64 = u64::MAX;

/// Sealed manifests of runs that began delivering are `manifest-pending-N/` until committed.
const PENDING: &str = "manifest-pending-";

/// Manifests that were sealed but never became current: `manifest-pending-N/`, and a
/// generation directory newer than the current one (a commit that died before `CURRENT`).
fn uncommitted(state_dir: &Path, current: Option<&Path>) -> std::io::Result<Vec<PathBuf>> {
    let gen = current.map(generation).unwrap_or(0);
    let mut out = Vec::new();
    for e in fs::read_dir(state_dir)? {
        let e = e?;
        let n = e.file_name();
        let Some(n) = n.to_str() else { continue };
        let newer = n.strip_prefix("manifest-").and_then(|g| g.parse::<u64>().ok()).is_some_and(|g| g > gen);
        if (n.starts_with(PENDING) || newer) && e.file_type()?.is_dir() {
            out.push(e.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Shards of [`PreviousManifest`]'s map of created paths (workers insert concurrently).
const CREATED_SHARDS: usize = 64;

/// What a record is relative to the previous run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The previous run did not hold its path.
    Created,
    /// The previous run held its path with another fingerprint.
    Updated,
    /// The previous run held its path with the same fingerprint.
    Unchanged,
}

/// Counts of a versioned run.
#[derive(Debug, Default)]
pub struct ChangeCounts {
    /// Records classified [`Change::Created`].
    pub created: AtomicU64,
    /// Records classified [`Change::Updated`].
    pub updated: AtomicU64,
    /// Records classified [`Change::Unchanged`].
    pub unchanged: AtomicU64,
}

fn part_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tsv"))
        .collect();
    files.sort();
    Ok(files)
}

/// `HASH128 FP64 "subject" ["path"]`: the path follows when the subject is not the path (a
/// hashed long path), so a scope check can still place it.
fn parse_line(line: &str) -> Option<(u128, u64, &str, Option<&str>)> {
    let mut it = line.splitn(4, '\t');
    let h = u128::from_str_radix(it.next()?, 16).ok()?;
    let fp = u64::from_str_radix(it.next()?, 16).ok()?;
    Some((h, fp, it.next()?, it.next()))
}

/// A subject of the previous run that this run did not see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gone {
    /// The subject as the manifest holds it: the path, or its hash when the path is too long.
    pub subject: String,
    /// The path, when known (manifests of earlier versions lack it for hashed subjects).
    pub path: Option<String>,
    /// The xxh3-128 hash of the path (the line's HASH128).
    pub hash: u128,
    /// The fingerprint of the record's content as loaded; `u64::MAX` (matches nothing) when
    /// the committed manifest's fingerprints lack the inode.
    pub fingerprint: u64,
}

impl PreviousManifest {
    /// Load the current manifest of `state_dir` (empty when there was no previous run), and
    /// the pending ones: sealed manifests of runs that began delivering and did not commit.
    /// Its subjects may or may not be in the index: those it does not share with the current
    /// manifest (or shares with another fingerprint) are re-sent if seen, deleted if gone.
    pub fn load(state_dir: &Path) -> std::io::Result<PreviousManifest> {
        PreviousManifest::load_share(state_dir, None)
    }

    /// [`PreviousManifest::load`], keeping only the subjects whose path hash `share` (rank,
    /// ranks) owns: a run across ranks holds a share of the previous manifest on each.
    pub fn load_share(state_dir: &Path, share: Option<(usize, usize)>) -> std::io::Result<PreviousManifest> {
        let owned = |h: u128| share.is_none_or(|(rank, n)| super::cluster::hash_owner(h, n) == rank);
        let current = current_dir(state_dir)?;
        let pending = if state_dir.is_dir() { uncommitted(state_dir, current.as_deref())? } else { Vec::new() };
        let without_inode = match &current {
            Some(d) => lacks_inode(d)?,
            None => false,
        };
        let mut files = Vec::new();
        // Per file: from a pending manifest; and of this release's scheme while the current
        // one lacks the inode (a run of this release that sealed and did not commit).
        let mut from_pending = Vec::new();
        for (d, pend) in current.iter().map(|d| (d, false)).chain(pending.iter().map(|d| (d, true))) {
            let f = part_files(d)?;
            let crossed = pend && without_inode && !lacks_inode(d)?;
            from_pending.extend(std::iter::repeat_n((pend, crossed), f.len()));
            files.extend(f);
        }
        let resend = match &current {
            Some(d) => resend_subjects(d)?,
            None => Default::default(),
        };
        let mut map: HashMap<u128, (u64, u32), Fast> = HashMap::default();
        let mut crossed: HashMap<u128, u64, Fast> = HashMap::default();
        let mut duplicates = Vec::new();
        let mut idx = 0u32;
        for (f, &(pend, cross)) in files.iter().zip(&from_pending) {
            for line in BufReader::new(fs::File::open(f)?).lines() {
                let line = line?;
                let (h, fp, subject, _) = parse_line(&line).ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{}: malformed manifest line {}", f.display(), idx + 1),
                    )
                })?;
                if !owned(h) {
                    continue;
                }
                // A dead letter's content is not in the index: it never matches.
                let fp = if resend.contains(subject) { UNCERTAIN } else { fp };
                if cross {
                    // Not comparable with the current manifest's: a record matches it too.
                    crossed.entry(h).and_modify(|c| *c = if *c == fp { fp } else { UNCERTAIN }).or_insert(fp);
                }
                match map.get_mut(&h) {
                    Some(_) if cross => duplicates.push(idx),
                    // The same subject twice (two rows named one path, or current and pending
                    // both hold it): one entry decides, the other is never reported gone.
                    Some(e) => {
                        if e.0 != fp {
                            e.0 = UNCERTAIN;
                        }
                        duplicates.push(idx);
                    }
                    None => {
                        map.insert(h, (if pend { UNCERTAIN } else { fp }, idx));
                    }
                }
                idx += 1;
            }
        }
        let seen: Vec<AtomicU64> = (0..idx).map(|_| AtomicU64::new(0)).collect();
        for d in duplicates {
            seen[d as usize].store(Sighting::ELSEWHERE.stored(Change::Unchanged), Ordering::Relaxed);
        }
        let created = (0..CREATED_SHARDS).map(|_| Mutex::new(HashMap::default())).collect();
        Ok(PreviousManifest { map, seen, created, files, dir: current, pending, share, without_inode, crossed })
    }

    /// The manifest directories loaded: the committed one, then the pending ones.
    pub fn dirs(&self) -> impl Iterator<Item = &Path> {
        self.dir.iter().chain(self.pending.iter()).map(PathBuf::as_path)
    }

    /// Number of distinct subjects in the previous run (a pending manifest repeats most of
    /// the committed one's).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there was no previous run (or it was empty).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// `rec`'s fingerprint in the committed manifest's scheme and in this release's (the new
    /// manifest's): the two differ only after an upgrade, until a run commits.
    pub fn fingerprints(&self, rec: &FileRecord<'_>, visible_to: &[u8]) -> (u64, u64) {
        let now = fingerprint(rec, visible_to);
        (if self.without_inode { fingerprint_without_inode(rec, visible_to) } else { now }, now)
    }

    /// Classify a record and mark it seen.
    pub fn classify(&self, hash: u128, fp: u64) -> Change {
        self.classify_both(hash, fp, fp)
    }

    /// Classify a record by its fingerprint in the committed manifest's scheme (`was`) and in
    /// this release's (`now`), and mark it seen.
    pub fn classify_both(&self, hash: u128, was: u64, now: u64) -> Change {
        match self.map.get(&hash) {
            None => Change::Created,
            Some(&(old, idx)) => {
                let change = self.compare(hash, old, was, now);
                self.seen[idx as usize].store(Sighting::ELSEWHERE.stored(change), Ordering::Relaxed);
                change
            }
        }
    }

    /// [`PreviousManifest::classify_both`] of the row read `at`, unless this run already read
    /// its path: then where it first read it and how that read was classified.
    pub fn classify_at(&self, hash: u128, was: u64, now: u64, at: Sighting) -> Result<Change, (Sighting, Change)> {
        let first = match self.map.get(&hash) {
            None => {
                let shard = &self.created[(hash as usize) % CREATED_SHARDS];
                let mut created = shard.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                match created.entry(hash) {
                    std::collections::hash_map::Entry::Occupied(e) => *e.get(),
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(at.stored(Change::Created));
                        return Ok(Change::Created);
                    }
                }
            }
            Some(&(old, idx)) => {
                let change = self.compare(hash, old, was, now);
                match self.seen[idx as usize].compare_exchange(
                    0,
                    at.stored(change),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Ok(change),
                    Err(first) => first,
                }
            }
        };
        Err(Sighting::from_stored(first))
    }

    /// A path this run read more than once: its previous line counts as not seen, so it is
    /// carried over (under the unknown scope its rejects leave) rather than re-classified.
    pub fn forget(&self, hash: u128) {
        if let Some(&(_, idx)) = self.map.get(&hash) {
            self.seen[idx as usize].store(0, Ordering::Relaxed);
        }
    }

    fn compare(&self, hash: u128, old: u64, was: u64, now: u64) -> Change {
        if old == was && self.crossed.get(&hash).is_none_or(|c| *c == now) {
            Change::Unchanged
        } else {
            Change::Updated
        }
    }

    /// The subjects (with hash and fingerprint as loaded) of the previous run that this run did
    /// not see.
    pub fn deleted_subjects(&self) -> std::io::Result<Vec<Gone>> {
        let mut out = Vec::new();
        let mut idx = 0usize;
        for f in &self.files {
            for line in BufReader::new(fs::File::open(f)?).lines() {
                let line = line?;
                let parsed = parse_line(&line);
                if let (Some((rank, n)), Some((h, ..))) = (self.share, parsed) {
                    if super::cluster::hash_owner(h, n) != rank {
                        continue;
                    }
                }
                if self.seen[idx].load(Ordering::Relaxed) == 0 {
                    if let Some((hash, fingerprint, subj, path)) = parsed {
                        let bad = |e| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
                        let subject: String = serde_json::from_str(subj).map_err(bad)?;
                        let path = match path {
                            Some(p) => Some(serde_json::from_str::<String>(p).map_err(bad)?),
                            None if subject.starts_with('/') => Some(subject.clone()),
                            None => None,
                        };
                        // As loaded: a subject a failed run or a dead letter left owed stays
                        // owed when it is carried over.
                        let fingerprint = self.map.get(&hash).map_or(fingerprint, |e| e.0);
                        // Carried into a manifest of this release's scheme: it matches nothing.
                        let fingerprint = if self.without_inode { UNCERTAIN } else { fingerprint };
                        out.push(Gone { subject, path, hash, fingerprint });
                    }
                }
                idx += 1;
            }
        }
        Ok(out)
    }
}

/// The file of a manifest directory listing subjects to send again.
const RESEND: &str = "resend.jsonl";

/// The subjects `dir` lists to send again (`resend.jsonl`, and `resend.rank-<R>.jsonl` from
/// a run across ranks), as the JSON strings their lines hold.
fn resend_subjects(dir: &Path) -> std::io::Result<std::collections::HashSet<String>> {
    let mut out = std::collections::HashSet::new();
    for e in fs::read_dir(dir)? {
        let name = e?.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("resend") && name.ends_with(".jsonl") {
            out.extend(fs::read_to_string(dir.join(name))?.lines().map(str::to_string));
        }
    }
    Ok(out)
}

/// List in the `sealed` manifest the subjects a sink set aside as dead letters, so the next
/// run classifies them as changed and sends them again (written and synced before the commit).
pub fn mark_resend(sealed: &Path, subjects: &[&str]) -> std::io::Result<()> {
    mark_resend_as(sealed, RESEND, subjects)
}

/// Keep in the `sealed` manifest the subjects whose deletes a sink set aside as dead letters:
/// the next run finds them gone again and sends their deletes again.
pub fn keep_owed_deletes(sealed: &Path, owed: &[&Gone]) -> std::io::Result<()> {
    if owed.is_empty() {
        return Ok(());
    }
    let mut w = ManifestWriter::create_in(sealed, "part-owed-deletes.tsv")?;
    for g in owed {
        w.push(g.hash, g.fingerprint, &g.subject, g.path.as_deref())?;
    }
    w.finish()
}

/// [`mark_resend`] into the file `name` (one per rank of a run across ranks).
pub fn mark_resend_as(sealed: &Path, name: &str, subjects: &[&str]) -> std::io::Result<()> {
    if subjects.is_empty() {
        return Ok(());
    }
    let mut text = Vec::new();
    for s in subjects {
        push_json_str(&mut text, s);
        text.push(b'\n');
    }
    icicle_core::durable::write_atomic(&sealed.join(name), &text)
}

/// The hash identifying a path across runs.
pub fn path_hash(path: &str) -> u128 {
    xxh3_128(path.as_bytes())
}

/// A fingerprint of everything in a primary record except the version.
pub fn fingerprint(rec: &FileRecord<'_>, visible_to: &[u8]) -> u64 {
    fingerprint_of(rec, visible_to, Some(rec.attrs.inode))
}

/// The fingerprint an earlier release wrote: everything but the version and the inode.
pub fn fingerprint_without_inode(rec: &FileRecord<'_>, visible_to: &[u8]) -> u64 {
    fingerprint_of(rec, visible_to, None)
}

fn fingerprint_of(rec: &FileRecord<'_>, visible_to: &[u8], inode: Option<u64>) -> u64 {
    let mut h = Xxh3::new();
    h.update(&[rec.kind as u8]);
    for v in [rec.attrs.mode as u64, rec.attrs.uid as u64, rec.attrs.gid as u64, rec.attrs.size] {
        h.update(&v.to_le_bytes());
    }
    for v in [rec.attrs.atime, rec.attrs.ctime, rec.attrs.mtime] {
        h.update(&v.to_le_bytes());
    }
    h.update(visible_to);
    if let Some(ino) = inode {
        h.update(&ino.to_le_bytes());
    }
    // Where the file system keeps the file, when the source read it: a layout read for the
    // first time, or changed (a migration to other OSTs), is a change to publish. Records
    // without it keep the fingerprint they always had.
    if let Some(st) = rec.storage.filter(|s| !s.is_empty()) {
        h.update(b"storage");
        h.update(&serde_json::to_vec(st).unwrap_or_default());
    }
    h.digest()
}

/// One worker's part of the new manifest.
pub struct ManifestWriter {
    out: BufWriter<fs::File>,
    line: Vec<u8>,
}

impl ManifestWriter {
    /// Create `state_dir/manifest.new/part-<n>.tsv`.
    pub fn create(state_dir: &Path, n: usize) -> std::io::Result<ManifestWriter> {
        ManifestWriter::create_in(&state_dir.join("manifest.new"), &format!("part-{n:04}.tsv"))
    }

    /// Create the part `name` (ending in `.tsv`) in manifest directory `dir`.
    pub fn create_in(dir: &Path, name: &str) -> std::io::Result<ManifestWriter> {
        fs::create_dir_all(dir)?;
        let f = fs::File::create(dir.join(name))?;
        Ok(ManifestWriter { out: BufWriter::with_capacity(1 << 20, f), line: Vec::with_capacity(256) })
    }

    /// Append one subject, with its path when the subject is not the path itself.
    pub fn push(&mut self, hash: u128, fp: u64, subject: &str, path: Option<&str>) -> std::io::Result<()> {
        self.line.clear();
        write!(self.line, "{hash:032x}\t{fp:016x}\t")?;
        push_json_str(&mut self.line, subject);
        if let Some(p) = path.filter(|p| *p != subject) {
            self.line.push(b'\t');
            push_json_str(&mut self.line, p);
        }
        self.line.push(b'\n');
        self.out.write_all(&self.line)
    }

    /// Flush and sync.
    pub fn finish(mut self) -> std::io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_all()
    }
}

/// The file naming the current manifest directory; replacing it is the commit.
const CURRENT: &str = "CURRENT";

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// The directory of the last committed manifest, if any: the one `CURRENT` names; else a
/// manifest of the earlier two-rename layout (`manifest/`, or `manifest.old/` when a run
/// died between its renames).
pub fn current_dir(state_dir: &Path) -> std::io::Result<Option<PathBuf>> {
    match fs::read_to_string(state_dir.join(CURRENT)) {
        Ok(name) => {
            let name = name.trim();
            if name.is_empty() || name.contains('/') || name.starts_with('.') {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: not a manifest name: {name:?}", state_dir.join(CURRENT).display()),
                ));
            }
            let dir = state_dir.join(name);
            if !dir.is_dir() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{} names {}, which is missing", state_dir.join(CURRENT).display(), dir.display()),
                ));
            }
            Ok(Some(dir))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(["manifest", "manifest.old"].iter().map(|n| state_dir.join(n)).find(|d| d.is_dir()))
        }
        Err(e) => Err(e),
    }
}

fn generation(dir: &Path) -> u64 {
    dir.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("manifest-"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Start a new manifest: `manifest.new/`, emptied of what a failed run left there.
pub fn begin(state_dir: &Path) -> std::io::Result<()> {
    let new = state_dir.join("manifest.new");
    if new.exists() {
        fs::remove_dir_all(&new)?;
    }
    fs::create_dir_all(&new)?;
    icicle_core::durable::write_atomic(&new.join(FORMAT), format!("{SCHEME}\n").as_bytes())
}

/// Leave out of the new manifest (`manifest.new/`: every part, or only part `part`, as a rank
/// rewrites its own) the lines of `hashes` (paths this run read more than once); returns the
/// path of each line left out.
pub fn drop_new_lines(
    state_dir: &Path,
    hashes: &std::collections::HashSet<u128>,
    part: Option<usize>,
) -> std::io::Result<HashMap<u128, String>> {
    let mut dropped = HashMap::new();
    if hashes.is_empty() {
        return Ok(dropped);
    }
    let new = state_dir.join("manifest.new");
    let parts = match part {
        Some(n) => vec![new.join(format!("part-{n:04}.tsv"))],
        None => part_files(&new)?,
    };
    for part in parts {
        let input = BufReader::new(fs::File::open(&part)?);
        let staged = icicle_core::durable::stage(&part, true, |w| {
            for line in input.lines() {
                let line = line?;
                match parse_line(&line).filter(|(h, ..)| hashes.contains(h)) {
                    Some((h, _, subject, path)) => {
                        dropped.extend(serde_json::from_str::<String>(path.unwrap_or(subject)).ok().map(|p| (h, p)));
                    }
                    None => writeln!(w, "{line}")?,
                }
            }
            Ok(())
        })?;
        staged.commit(true)?;
    }
    Ok(dropped)
}

/// Seal the new manifest before anything is delivered: `manifest.new/` becomes
/// `manifest-pending-N/` (earlier pending ones are kept: their owed deletes may not have been
/// sent yet), so that a run dying between its first delivery and its commit leaves later
/// runs the list of what it may have indexed. Returns the sealed directory.
pub fn seal(state_dir: &Path) -> std::io::Result<PathBuf> {
    let mut n = 0u64;
    for e in fs::read_dir(state_dir)? {
        let name = e?.file_name();
        if let Some(k) = name.to_str().and_then(|s| s.strip_prefix(PENDING)).and_then(|k| k.parse::<u64>().ok()) {
            n = n.max(k);
        }
    }
    let sealed = state_dir.join(format!("{PENDING}{:06}", n + 1));
    let new = state_dir.join("manifest.new");
    sync_dir(&new)?;
    fs::rename(&new, &sealed)?;
    sync_dir(state_dir)?;
    crate::fault::fault_point("sealed");
    Ok(sealed)
}

/// Make the `sealed` manifest current: the acknowledgement of a fully delivered run. The
/// directory is renamed to its generation's name, then `CURRENT` is replaced by one rename:
/// a crash at any point leaves either the previous manifest (and the uncommitted ones) or
/// the new one current. Every other manifest directory is removed after.
pub fn commit(state_dir: &Path, sealed: &Path) -> std::io::Result<()> {
    crate::fault::fault_point("commit-start");
    let previous = current_dir(state_dir)?;
    let gen = previous.as_deref().map(generation).unwrap_or(0) + 1;
    // A generation directory left by a commit that died is one of the uncommitted manifests
    // this run has read: a newer number, not the same one, keeps it until `CURRENT` moves.
    let mut gen = gen;
    while state_dir.join(format!("manifest-{gen:06}")).exists() {
        gen += 1;
    }
    let name = format!("manifest-{gen:06}");
    let dir = state_dir.join(&name);
    fs::rename(sealed, &dir)?;
    sync_dir(state_dir)?;
    crate::fault::fault_point("commit-renamed");
    let pointer = icicle_core::durable::stage(&state_dir.join(CURRENT), true, |w| writeln!(w, "{name}"))?;
    crate::fault::fault_point("commit-pointer-written");
    pointer.commit(true)?;
    crate::fault::fault_point("commit-done");
    collect_garbage(state_dir, &name)
}

/// Remove every manifest directory but `keep` (earlier generations, the old layout's).
fn collect_garbage(state_dir: &Path, keep: &str) -> std::io::Result<()> {
    // Every other manifest: earlier generations, uncommitted ones (their subjects were read by
    // this run and are now deleted, re-sent or carried), the old layout's.
    for e in fs::read_dir(state_dir)? {
        let e = e?;
        let n = e.file_name();
        let Some(n) = n.to_str() else { continue };
        let stale = n == "manifest" || n == "manifest.old" || (n.starts_with("manifest-") && n != keep);
        if stale && e.file_type()?.is_dir() {
            fs::remove_dir_all(e.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(state: &Path, subjects: &[&str]) {
        begin(state).unwrap();
        let mut w = ManifestWriter::create(state, 0).unwrap();
        for s in subjects {
            w.push(path_hash(s), 1, s, Some(s)).unwrap();
        }
        w.finish().unwrap();
    }

    fn write_and_commit(state: &Path, subjects: &[&str]) {
        write(state, subjects);
        let sealed = seal(state).unwrap();
        commit(state, &sealed).unwrap();
    }

    #[test]
    fn a_pending_manifest_is_re_sent_or_deleted_and_duplicates_are_never_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let st = tmp.path();
        write_and_commit(st, &["/a", "/b", "/b"]);
        // A run sealed /a (changed), /c (new) and died before committing.
        begin(st).unwrap();
        let mut w = ManifestWriter::create(st, 0).unwrap();
        w.push(path_hash("/a"), 2, "/a", None).unwrap();
        w.push(path_hash("/c"), 1, "/c", None).unwrap();
        w.finish().unwrap();
        seal(st).unwrap();
        let prev = PreviousManifest::load(st).unwrap();
        assert_eq!(prev.classify(path_hash("/b"), 1), Change::Unchanged);
        assert_eq!(prev.classify(path_hash("/a"), 2), Change::Updated, "current and pending disagree: sent again");
        let gone: Vec<String> = prev.deleted_subjects().unwrap().into_iter().map(|g| g.subject).collect();
        assert_eq!(gone, ["/c"], "a pending subject not seen is deleted; the duplicate /b is not");
    }

    #[test]
    fn commits_replace_the_current_manifest_by_one_rename() {
        let tmp = tempfile::tempdir().unwrap();
        let st = tmp.path();
        assert!(PreviousManifest::load(st).unwrap().is_empty());
        write_and_commit(st, &["/a", "/b"]);
        assert_eq!(PreviousManifest::load(st).unwrap().len(), 2);
        write_and_commit(st, &["/a"]);
        let dirs: Vec<String> =
            fs::read_dir(st).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert!(
            dirs.contains(&"manifest-000002".to_string()) && !dirs.contains(&"manifest-000001".to_string()),
            "{dirs:?}"
        );
        assert_eq!(PreviousManifest::load(st).unwrap().len(), 1);
    }

    #[test]
    fn the_two_rename_layout_is_still_read() {
        let tmp = tempfile::tempdir().unwrap();
        let st = tmp.path();
        write(st, &["/a", "/b", "/c"]);
        // A run of the earlier layout that died between its two renames.
        fs::rename(st.join("manifest.new"), st.join("manifest.old")).unwrap();
        assert_eq!(PreviousManifest::load(st).unwrap().len(), 3);
        write_and_commit(st, &["/a"]);
        assert!(!st.join("manifest.old").exists());
        assert_eq!(PreviousManifest::load(st).unwrap().len(), 1);
    }
}
