//! The SwiftLoad metadata catalog: a text file of entries, one per file, each
//!
//! ```text
//! lstat
//! <path>
//! st_dev:..; st_ino:..; st_mode:<octal>; st_nlink:..; st_uid:..; st_gid:..; st_rdev:..; st_size:..; st_blksize:..; st_blocks:..; st_atime:..; st_mtime:..; st_ctime:..
//! stat
//! <path>                       (or the single line `None` when stat fails: a dangling link)
//! <the same fields>
//! layout
//! <path> <ost_idx> <start> <end> <interval> <stripe_size> <file_size>   (one line per stripe per component)
//! end
//! ```
//!
//! Non-regular files (directories, links, ...) write `layout` then `None`. The writer
//! ([`CatalogEntry::write_to`]) and the reader ([`Catalog::parse`]) round-trip; the reader
//! names the file, line and reason of every bad entry, counts it, and goes on with the next.
//!
//! A `gone` record ([`CatalogGone`]) says that a path no longer names a file (it was renamed
//! away, replaced by a rename, or moved out of the tracked root):
//!
//! ```text
//! gone
//! <path>
//! <the lstat fields of the file that left the path>
//! end
//! ```
//!
//! It supersedes the entries for that path with the same `st_dev` and `st_ino`: in its own
//! catalog file those written before it, in other files those whose `st_ctime` is not later
//! than its own. Catalogs without `gone` records read as before; a reader that does not know
//! the record rejects it as one bad entry and goes on.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use icicle_core::traits::{LayoutComponent, ObjectLayout, ObjectTask};
use icicle_core::{FileKind, FileRecord};

use crate::tasks;

pub mod compact;
mod compact_check;
mod compact_write;
mod load;
mod parse;
pub mod synth;

pub use compact::{CompactCatalog, CompactCounts, CompactEntry};
pub use load::{load_dir, load_files, EntryRef, LineIter, LoadedCatalog};
use parse::{clip, parse_entry, parse_gone, Lines, Record};

/// An I/O failure reading or writing a catalog (bad *content* is a [`CatalogReject`]).
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A path the catalog formats cannot hold (empty, or a newline in it).
    #[error("path {0:?} is empty or contains a newline: the catalog format cannot hold it")]
    Unrepresentable(String),
    /// An entry the compact form cannot hold (a layout line the reader would reject, or more
    /// records than its 32-bit counts allow).
    #[error("{path}: {reason}")]
    Invalid {
        /// The entry's path ("" for the whole catalog).
        path: String,
        /// What was wrong.
        reason: String,
    },
    /// A compact catalog that is truncated, corrupt, or not one.
    #[error("{path}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
}

/// The `stat(2)` fields a catalog entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatFields {
    /// Device.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// Full mode, type bits included (written in octal).
    pub mode: u32,
    /// Link count.
    pub nlink: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of a special file.
    pub rdev: u64,
    /// Size in bytes.
    pub size: u64,
    /// Preferred I/O block size.
    pub blksize: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Access time, epoch seconds.
    pub atime: i64,
    /// Modification time, epoch seconds.
    pub mtime: i64,
    /// Status-change time, epoch seconds.
    pub ctime: i64,
}

impl StatFields {
    /// The fields of a `std::fs::Metadata`.
    pub fn from_metadata(md: &std::fs::Metadata) -> StatFields {
        use std::os::unix::fs::MetadataExt;
        StatFields {
            dev: md.dev(),
            ino: md.ino(),
            mode: md.mode(),
            nlink: md.nlink(),
            uid: md.uid(),
            gid: md.gid(),
            rdev: md.rdev(),
            size: md.size(),
            blksize: md.blksize(),
            blocks: md.blocks(),
            atime: md.atime(),
            mtime: md.mtime(),
            ctime: md.ctime(),
        }
    }

    /// The fields of a raw `struct stat`.
    pub fn from_libc(st: &libc::stat) -> StatFields {
        StatFields {
            dev: st.st_dev,
            ino: st.st_ino,
            mode: st.st_mode,
            nlink: st.st_nlink,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: st.st_rdev,
            size: st.st_size.max(0) as u64,
            blksize: st.st_blksize.max(0) as u64,
            blocks: st.st_blocks.max(0) as u64,
            atime: st.st_atime,
            mtime: st.st_mtime,
            ctime: st.st_ctime,
        }
    }

    /// The fields icicle's own metadata has (snapshot and monitor records); device, inode,
    /// rdev are 0, the link count 1, blocks the size rounded up to 512-byte blocks.
    pub fn from_record(rec: &FileRecord<'_>) -> StatFields {
        StatFields {
            mode: rec.attrs.mode,
            nlink: 1,
            uid: rec.attrs.uid,
            gid: rec.attrs.gid,
            size: rec.attrs.size,
            blksize: 4096,
            blocks: rec.attrs.size.div_ceil(512),
            atime: rec.attrs.atime,
            mtime: rec.attrs.mtime,
            ctime: rec.attrs.ctime,
            ..StatFields::default()
        }
    }

    /// Whether the mode is a regular file's.
    pub fn is_regular(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }

    fn write(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "st_dev:{}; st_ino:{}; st_mode:{:o}; st_nlink:{}; st_uid:{}; st_gid:{}; st_rdev:{}; st_size:{}; st_blksize:{}; st_blocks:{}; st_atime:{}; st_mtime:{}; st_ctime:{}",
            self.dev, self.ino, self.mode, self.nlink, self.uid, self.gid, self.rdev, self.size, self.blksize, self.blocks, self.atime, self.mtime, self.ctime
        );
    }

    fn parse(line: &str) -> Result<StatFields, String> {
        match parse::parse_stat_canonical(line) {
            Some(f) => Ok(f),
            None => StatFields::parse_general(line),
        }
    }

    /// Any `key:value; ...` line (spaces, order, unknown keys); `parse` tries the writer's
    /// exact form first.
    fn parse_general(line: &str) -> Result<StatFields, String> {
        let mut f = StatFields::default();
        let (mut has_mode, mut has_size) = (false, false);
        for tok in line.split(';').map(str::trim).filter(|t| !t.is_empty()) {
            let (k, v) = tok.split_once(':').ok_or_else(|| format!("stat field `{tok}` is not key:value"))?;
            let (k, v) = (k.trim(), v.trim());
            let bad = |e: &dyn std::fmt::Display| format!("stat field `{k}`: `{v}`: {e}");
            match k {
                "st_dev" => f.dev = v.parse().map_err(|e| bad(&e))?,
                "st_ino" => f.ino = v.parse().map_err(|e| bad(&e))?,
                "st_mode" => {
                    f.mode = u32::from_str_radix(v, 8).map_err(|e| bad(&e))?;
                    has_mode = true;
                }
                "st_nlink" => f.nlink = v.parse().map_err(|e| bad(&e))?,
                "st_uid" => f.uid = v.parse().map_err(|e| bad(&e))?,
                "st_gid" => f.gid = v.parse().map_err(|e| bad(&e))?,
                "st_rdev" => f.rdev = v.parse().map_err(|e| bad(&e))?,
                "st_size" => {
                    f.size = v.parse().map_err(|e| bad(&e))?;
                    has_size = true;
                }
                "st_blksize" => f.blksize = v.parse().map_err(|e| bad(&e))?,
                "st_blocks" => f.blocks = v.parse().map_err(|e| bad(&e))?,
                "st_atime" => f.atime = v.parse().map_err(|e| bad(&e))?,
                "st_mtime" => f.mtime = v.parse().map_err(|e| bad(&e))?,
                "st_ctime" => f.ctime = v.parse().map_err(|e| bad(&e))?,
                // Unknown fields are kept out of the model but do not make the entry bad.
                _ => {}
            }
        }
        if !has_mode || !has_size {
            return Err("stat line lacks st_mode or st_size".into());
        }
        Ok(f)
    }
}

/// One layout line: the bytes of the file on one OST in one component (an [`ObjectTask`]
/// plus the file size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutLine {
    /// OST index.
    pub ost: u32,
    /// First chunk's offset (`comp_start + i * stripe_size`).
    pub start: u64,
    /// Component end clamped to the file size.
    pub end: u64,
    /// Stripe count x stripe size.
    pub interval: u64,
    /// Stripe size.
    pub stripe_size: u64,
    /// The file size when the layout was read.
    pub file_size: u64,
}

/// One catalog entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogEntry {
    /// Absolute path.
    pub path: String,
    /// `lstat` fields.
    pub lstat: StatFields,
    /// `stat` fields; `None` when `stat` failed (a dangling link).
    pub stat: Option<StatFields>,
    /// Layout lines; `None` for non-regular files (`layout\nNone`).
    pub layout: Option<Vec<LayoutLine>>,
}

impl CatalogEntry {
    /// An entry from metadata and a layout (`None` for non-regular files): the layout lines
    /// are the layout's object tasks.
    pub fn new(
        path: impl Into<String>,
        lstat: StatFields,
        stat: Option<StatFields>,
        layout: Option<&[LayoutComponent]>,
    ) -> CatalogEntry {
        let path = path.into();
        let size = stat.unwrap_or(lstat).size;
        let layout = layout.map(|comps| {
            let mut lines = Vec::new();
            for c in comps {
                lines.extend(tasks::component_tasks(0, size, c).map(|t| LayoutLine {
                    ost: t.ost,
                    start: t.start,
                    end: t.end,
                    interval: t.interval,
                    stripe_size: t.stripe_size,
                    file_size: size,
                }));
                if c.end >= size {
                    break;
                }
            }
            lines
        });
        CatalogEntry { path, lstat, stat, layout }
    }

    /// An entry from icicle's own metadata (a snapshot or monitor record) and, for regular
    /// files, a layout. Links get `stat` `None` (icicle records do not follow them).
    pub fn from_record(rec: &FileRecord<'_>, layout: Option<&[LayoutComponent]>) -> CatalogEntry {
        let f = StatFields::from_record(rec);
        let stat = (rec.kind != FileKind::Link).then_some(f);
        let layout = if rec.kind == FileKind::File && f.is_regular() { layout } else { None };
        CatalogEntry::new(rec.path, f, stat, layout)
    }

    /// Append the entry's text to `out`.
    pub fn write_to(&self, out: &mut String) -> Result<(), CatalogError> {
        record_head(out, "lstat", &self.path)?;
        self.lstat.write(out);
        out.push_str("stat\n");
        match &self.stat {
            Some(s) => {
                out.push_str(&self.path);
                out.push('\n');
                s.write(out);
            }
            None => out.push_str("None\n"),
        }
        out.push_str("layout\n");
        match &self.layout {
            Some(lines) => {
                for l in lines {
                    let _ = writeln!(
                        out,
                        "{} {} {} {} {} {} {}",
                        self.path, l.ost, l.start, l.end, l.interval, l.stripe_size, l.file_size
                    );
                }
            }
            None => out.push_str("None\n"),
        }
        out.push_str("end\n");
        Ok(())
    }

    /// The entry's text.
    pub fn to_text(&self) -> Result<String, CatalogError> {
        record_text(|s| self.write_to(s))
    }

    /// The file size (from `stat`, else `lstat`).
    pub fn size(&self) -> u64 {
        self.stat.unwrap_or(self.lstat).size
    }

    /// The object tasks of this entry (its layout lines), for the file at index `object`.
    pub fn tasks(&self, object: usize) -> Vec<ObjectTask> {
        self.layout
            .iter()
            .flatten()
            .map(|l| ObjectTask {
                object,
                ost: l.ost,
                start: l.start,
                end: l.end,
                interval: l.interval,
                stripe_size: l.stripe_size,
            })
            .collect()
    }

    /// The layout rebuilt from the lines (`None` for non-regular files): consecutive lines
    /// of one component share interval and stripe size and step by one stripe; a component
    /// has `interval / stripe_size` lines. Component ends are the clamped ends.
    pub fn object_layout(&self) -> Option<ObjectLayout> {
        let lines = self.layout.as_ref()?;
        Some(layout_from_lines(&self.path, self.size(), lines.iter().copied()))
    }
}

/// The layout of a file of `size` bytes rebuilt from its layout lines (see
/// [`CatalogEntry::object_layout`]): text and compact entries share it, so both give the
/// same layout.
pub(crate) fn layout_from_lines(path: &str, size: u64, lines: impl Iterator<Item = LayoutLine>) -> ObjectLayout {
    let mut comps: Vec<LayoutComponent> = Vec::new();
    let mut want = 0u64;
    for l in lines {
        let continues = comps.last().is_some_and(|c| {
            (c.osts.len() as u64) < want
                && c.stripe_size == l.stripe_size
                && (c.osts.len() as u64).checked_mul(c.stripe_size).and_then(|d| c.start.checked_add(d))
                    == Some(l.start)
        });
        if continues {
            if let Some(c) = comps.last_mut() {
                c.osts.push(l.ost);
            }
        } else {
            want = l.interval / l.stripe_size.max(1);
            let mut osts = Vec::with_capacity(want.clamp(1, 64) as usize);
            osts.push(l.ost);
            comps.push(LayoutComponent { start: l.start, end: l.end, stripe_size: l.stripe_size, osts });
        }
    }
    // A clamped end equal to the file size means "to the end": keep later components'
    // starts consistent by ending each component where the next begins.
    for i in 0..comps.len().saturating_sub(1) {
        comps[i].end = comps[i + 1].start;
    }
    if let Some(last) = comps.last_mut() {
        last.end = u64::MAX;
    }
    ObjectLayout { path: path.to_string(), size, components: comps }
}

/// A `gone` record: `path` no longer names the file `stat` describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogGone {
    /// Absolute path the file left.
    pub path: String,
    /// The file's `lstat` fields at (or just after) it left; `st_dev`, `st_ino` and `st_ctime`
    /// decide which entries it supersedes.
    pub stat: StatFields,
}

/// The text one record's writer appends.
fn record_text(write: impl FnOnce(&mut String) -> Result<(), CatalogError>) -> Result<String, CatalogError> {
    let mut s = String::new();
    write(&mut s)?;
    Ok(s)
}

/// A record's first two lines: its kind and the path (which must fit on one line).
fn record_head(out: &mut String, kind: &str, path: &str) -> Result<(), CatalogError> {
    if path.contains('\n') || path.is_empty() {
        return Err(CatalogError::Unrepresentable(path.to_string()));
    }
    out.push_str(kind);
    out.push('\n');
    out.push_str(path);
    out.push('\n');
    Ok(())
}

impl CatalogGone {
    /// Append the record's text to `out`.
    pub fn write_to(&self, out: &mut String) -> Result<(), CatalogError> {
        record_head(out, "gone", &self.path)?;
        self.stat.write(out);
        out.push_str("end\n");
        Ok(())
    }

    /// The record's text.
    pub fn to_text(&self) -> Result<String, CatalogError> {
        record_text(|s| self.write_to(s))
    }

    /// Whether `e` describes the same file at the same path.
    fn names(&self, e: &CatalogEntry) -> bool {
        e.path == self.path && e.lstat.dev == self.stat.dev && e.lstat.ino == self.stat.ino
    }

    /// Whether this record, read from another catalog file, supersedes `e`: the same file at
    /// the same path, recorded no later than it left (whole seconds: a tie goes to the record).
    pub fn supersedes(&self, e: &CatalogEntry) -> bool {
        self.names(e) && e.lstat.ctime <= self.stat.ctime
    }
}

/// Drop the entries that `gone` records from another file supersede.
fn supersede(entries: &mut Vec<CatalogEntry>, gone: &[CatalogGone]) {
    if gone.is_empty() {
        return;
    }
    let mut by_file: HashMap<(u64, u64), Vec<&CatalogGone>> = HashMap::new();
    for g in gone {
        by_file.entry((g.stat.dev, g.stat.ino)).or_default().push(g);
    }
    entries.retain(|e| !by_file.get(&(e.lstat.dev, e.lstat.ino)).is_some_and(|v| v.iter().any(|g| g.supersedes(e))));
}

/// The catalog files of `dir`: regular files whose names do not start with `.`, in name order.
pub fn catalog_files(dir: &Path) -> Result<Vec<PathBuf>, CatalogError> {
    let io = |source| CatalogError::Io { path: dir.to_path_buf(), source };
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io)? {
        let e = e.map_err(io)?;
        let hidden = e.file_name().to_string_lossy().starts_with('.');
        if !hidden && e.file_type().map_err(io)?.is_file() {
            names.push(e.path());
        }
    }
    names.sort();
    Ok(names)
}

/// A bad entry: where and why. Reading goes on with the next entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogReject {
    /// The catalog file.
    pub file: PathBuf,
    /// 1-based line number.
    pub line: usize,
    /// What was wrong.
    pub reason: String,
}

impl std::fmt::Display for CatalogReject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.reason)
    }
}

/// Entries read from one or more catalog files, and the rejected ones.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// Good entries no `gone` record supersedes, in file then line order.
    pub entries: Vec<CatalogEntry>,
    /// The `gone` records read.
    pub gone: Vec<CatalogGone>,
    /// Entries dropped because a `gone` record supersedes them.
    pub superseded: usize,
    /// Bad entries.
    pub rejects: Vec<CatalogReject>,
    /// Files read.
    pub files: usize,
}

impl Catalog {
    /// Parse the text of one catalog file (`name` is used in rejects). Never panics.
    pub fn parse(name: &Path, bytes: &[u8]) -> Catalog {
        let mut cat = Catalog { files: 1, ..Catalog::default() };
        let mut lines = Lines { bytes, pos: 0, line: 0 };
        // Entries by (dev, ino), built at the first `gone` record; superseded entries' indices.
        let mut index: Option<HashMap<(u64, u64), Vec<usize>>> = None;
        let mut dead: Vec<usize> = Vec::new();
        loop {
            // Skip blank lines between entries.
            let (n, first) = match lines.next_line() {
                None => break,
                Some((_, Ok(l))) if l.trim().is_empty() => continue,
                Some(x) => x,
            };
            let result = match first {
                Ok("lstat") => parse_entry(&mut lines).map(Record::Entry),
                Ok("gone") => parse_gone(&mut lines).map(Record::Gone),
                Ok(other) => Err((n, format!("expected `lstat` or `gone`, found `{}`", clip(other)))),
                Err(e) => Err((n, e)),
            };
            match result {
                Ok(Record::Entry(e)) => {
                    if let Some(ix) = index.as_mut() {
                        ix.entry((e.lstat.dev, e.lstat.ino)).or_default().push(cat.entries.len());
                    }
                    cat.entries.push(e);
                }
                Ok(Record::Gone(g)) => {
                    // In one file the order is the order of events: every earlier entry of
                    // the file at that path goes, whatever its ctime; later ones stay.
                    let ix = index.get_or_insert_with(|| {
                        let mut ix: HashMap<(u64, u64), Vec<usize>> = HashMap::new();
                        for (i, e) in cat.entries.iter().enumerate() {
                            ix.entry((e.lstat.dev, e.lstat.ino)).or_default().push(i);
                        }
                        ix
                    });
                    if let Some(v) = ix.get_mut(&(g.stat.dev, g.stat.ino)) {
                        v.retain(|&i| match cat.entries.get(i) {
                            Some(e) if e.path == g.path => {
                                dead.push(i);
                                false
                            }
                            _ => true,
                        });
                    }
                    cat.gone.push(g);
                }
                Err((line, reason)) => {
                    cat.rejects.push(CatalogReject { file: name.to_path_buf(), line, reason });
                    // Resynchronise: skip to the line after the next `end`, or stop before a
                    // line that starts a new entry.
                    lines.skip_to_entry();
                }
            }
        }
        if !dead.is_empty() {
            let mut keep = vec![true; cat.entries.len()];
            for &i in &dead {
                if let Some(k) = keep.get_mut(i) {
                    *k = false;
                }
            }
            let mut k = keep.iter();
            cat.entries.retain(|_| k.next().copied().unwrap_or(true));
            cat.superseded = dead.len();
        }
        cat
    }

    /// Read one catalog file, text or compact ([`compact`]; a corrupt compact file is an
    /// error, bad text entries are rejects).
    pub fn read_file(path: &Path) -> Result<Catalog, CatalogError> {
        let bytes = std::fs::read(path).map_err(|source| CatalogError::Io { path: path.to_path_buf(), source })?;
        if compact::is_compact(&bytes) {
            return Ok(CompactCatalog::from_bytes(path, bytes)?.to_catalog());
        }
        Ok(Catalog::parse(path, &bytes))
    }

    /// Read every catalog file in `dir` (regular files not starting with `.`, text or
    /// compact), in name order. [`load_dir`] reads the same files faster.
    pub fn read_dir(dir: &Path) -> Result<Catalog, CatalogError> {
        let mut cat = Catalog::default();
        for p in catalog_files(dir)? {
            cat.extend(Catalog::read_file(&p)?);
        }
        Ok(cat)
    }

    /// Append another catalog's entries, `gone` records and rejects (the two must come from
    /// different files): each side's `gone` records drop the other side's entries they
    /// supersede ([`CatalogGone::supersedes`]).
    pub fn extend(&mut self, mut other: Catalog) {
        let before = self.entries.len() + other.entries.len();
        supersede(&mut self.entries, &other.gone);
        supersede(&mut other.entries, &self.gone);
        self.superseded += other.superseded + before - self.entries.len() - other.entries.len();
        self.entries.extend(other.entries);
        self.gone.extend(other.gone);
        self.rejects.extend(other.rejects);
        self.files += other.files;
    }

    /// One entry per path: a file closed several times (or by several processes) has
    /// several entries; the one with the newest `ctime` wins; on a tie (timestamps are whole
    /// seconds) the larger `st_size`, then the later `mtime`, then the later one read.
    /// Sorted by path.
    pub fn latest(&self) -> Vec<&CatalogEntry> {
        let mut by_path: std::collections::BTreeMap<&str, &CatalogEntry> = std::collections::BTreeMap::new();
        for e in &self.entries {
            let key = |e: &CatalogEntry| {
                let s = e.stat.unwrap_or(e.lstat);
                (s.ctime, s.size, s.mtime)
            };
            match by_path.get(e.path.as_str()) {
                Some(old) if key(old) > key(e) => {}
                _ => {
                    by_path.insert(&e.path, e);
                }
            }
        }
        by_path.into_values().collect()
    }
}

#[cfg(test)]
mod compact_tests;
#[cfg(test)]
mod tests;
