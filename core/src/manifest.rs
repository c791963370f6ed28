//! Versioned runs: a manifest of the subjects (and content fingerprints) a delivered run
//! produced, so the next run can report created / updated / unchanged / deleted.
//!
//! Layout of `state_dir`: `manifest/part-N.tsv`, lines `HASH128<TAB>FP64<TAB>"subject"` where
//! HASH128 is xxh3-128 of the path and FP64 a fingerprint of the record's content. A run
//! writes `manifest.new/` and renames it over `manifest/` only after every sink delivered.

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use xxhash_rust::xxh3::{xxh3_128, Xxh3};

use crate::gmeta::push_json_str;
use crate::record::FileRecord;

/// The previous run's manifest, loaded for lookups.
#[derive(Debug, Default)]
pub struct PreviousManifest {
    map: HashMap<u128, (u64, u32)>,
    seen: Vec<AtomicBool>,
    files: Vec<PathBuf>,
}

/// What a record is relative to the previous run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Created,
    Updated,
    Unchanged,
}

/// Counts of a versioned run.
#[derive(Debug, Default)]
pub struct ChangeCounts {
    pub created: AtomicU64,
    pub updated: AtomicU64,
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

fn parse_line(line: &str) -> Option<(u128, u64, &str)> {
    let mut it = line.splitn(3, '\t');
    let h = u128::from_str_radix(it.next()?, 16).ok()?;
    let fp = u64::from_str_radix(it.next()?, 16).ok()?;
    Some((h, fp, it.next()?))
}

impl PreviousManifest {
    /// Load `state_dir/manifest/` (empty when there was no previous run).
    pub fn load(state_dir: &Path) -> std::io::Result<PreviousManifest> {
        let dir = state_dir.join("manifest");
        if !dir.is_dir() {
            return Ok(PreviousManifest::default());
        }
        let files = part_files(&dir)?;
        let mut map = HashMap::new();
        let mut idx = 0u32;
        for f in &files {
            for line in BufReader::new(fs::File::open(f)?).lines() {
                let line = line?;
                let (h, fp, _) = parse_line(&line).ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: malformed manifest line {}", f.display(), idx + 1))
                })?;
                map.insert(h, (fp, idx));
                idx += 1;
            }
        }
        let seen = (0..idx).map(|_| AtomicBool::new(false)).collect();
        Ok(PreviousManifest { map, seen, files })
    }

    /// Number of subjects in the previous run.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether there was no previous run (or it was empty).
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Classify a record and mark it seen.
    pub fn classify(&self, hash: u128, fp: u64) -> Change {
        match self.map.get(&hash) {
            None => Change::Created,
            Some(&(old, idx)) => {
                self.seen[idx as usize].store(true, Ordering::Relaxed);
                if old == fp {
                    Change::Unchanged
                } else {
                    Change::Updated
                }
            }
        }
    }

    /// The subjects (with hash and fingerprint) of the previous run that this run did not see.
    pub fn deleted_subjects(&self) -> std::io::Result<Vec<(String, u128, u64)>> {
        let mut out = Vec::new();
        let mut idx = 0usize;
        for f in &self.files {
            for line in BufReader::new(fs::File::open(f)?).lines() {
                let line = line?;
                if !self.seen[idx].load(Ordering::Relaxed) {
                    if let Some((h, fp, subj)) = parse_line(&line) {
                        let s: String = serde_json::from_str(subj)
                            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
                        out.push((s, h, fp));
                    }
                }
                idx += 1;
            }
        }
        Ok(out)
    }
}

/// The hash identifying a path across runs.
pub fn path_hash(path: &str) -> u128 {
    xxh3_128(path.as_bytes())
}

/// A fingerprint of everything in a primary record except the version.
pub fn fingerprint(rec: &FileRecord<'_>, visible_to: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(&[rec.kind as u8]);
    for v in [rec.mode as u64, rec.uid as u64, rec.gid as u64, rec.size] {
        h.update(&v.to_le_bytes());
    }
    for v in [rec.atime, rec.ctime, rec.mtime] {
        h.update(&v.to_le_bytes());
    }
    h.update(visible_to);
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
        let dir = state_dir.join("manifest.new");
        fs::create_dir_all(&dir)?;
        let f = fs::File::create(dir.join(format!("part-{n:04}.tsv")))?;
        Ok(ManifestWriter { out: BufWriter::with_capacity(1 << 20, f), line: Vec::with_capacity(256) })
    }

    /// Append one subject.
    pub fn push(&mut self, hash: u128, fp: u64, subject: &str) -> std::io::Result<()> {
        self.line.clear();
        write!(self.line, "{hash:032x}\t{fp:016x}\t")?;
        push_json_str(&mut self.line, subject);
        self.line.push(b'\n');
        self.out.write_all(&self.line)
    }

    /// Flush and sync.
    pub fn finish(mut self) -> std::io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_all()
    }
}

/// Start a new manifest (removes a leftover `manifest.new/` of a failed run).
pub fn begin(state_dir: &Path) -> std::io::Result<()> {
    let new = state_dir.join("manifest.new");
    if new.exists() {
        fs::remove_dir_all(&new)?;
    }
    fs::create_dir_all(&new)
}

/// Make the new manifest current: the acknowledgement of a fully delivered run.
pub fn commit(state_dir: &Path) -> std::io::Result<()> {
    let cur = state_dir.join("manifest");
    let old = state_dir.join("manifest.old");
    if old.exists() {
        fs::remove_dir_all(&old)?;
    }
    if cur.exists() {
        fs::rename(&cur, &old)?;
    }
    fs::rename(state_dir.join("manifest.new"), &cur)?;
    if old.exists() {
        fs::remove_dir_all(&old)?;
    }
    Ok(())
}
