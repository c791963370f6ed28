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

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use icicle_core::traits::{LayoutComponent, ObjectLayout, ObjectTask};
use icicle_core::{FileKind, FileRecord};

use crate::tasks;

mod parse;

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
    /// A path the text format cannot hold (a newline in it).
    #[error("path {0:?} contains a newline: the catalog format cannot hold it")]
    Unrepresentable(String),
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
    pub fn new(path: impl Into<String>, lstat: StatFields, stat: Option<StatFields>, layout: Option<&[LayoutComponent]>) -> CatalogEntry {
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
                    let _ = writeln!(out, "{} {} {} {} {} {} {}", self.path, l.ost, l.start, l.end, l.interval, l.stripe_size, l.file_size);
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
            .map(|l| ObjectTask { object, ost: l.ost, start: l.start, end: l.end, interval: l.interval, stripe_size: l.stripe_size })
            .collect()
    }

    /// The layout rebuilt from the lines (`None` for non-regular files): consecutive lines
    /// of one component share interval and stripe size and step by one stripe; a component
    /// has `interval / stripe_size` lines. Component ends are the clamped ends.
    pub fn object_layout(&self) -> Option<ObjectLayout> {
        let lines = self.layout.as_ref()?;
        let mut comps: Vec<LayoutComponent> = Vec::new();
        let mut want = 0u64;
        for l in lines {
            let continues = comps.last().is_some_and(|c| {
                (c.osts.len() as u64) < want
                    && c.stripe_size == l.stripe_size
                    && (c.osts.len() as u64).checked_mul(c.stripe_size).and_then(|d| c.start.checked_add(d)) == Some(l.start)
            });
            if continues {
                if let Some(c) = comps.last_mut() {
                    c.osts.push(l.ost);
                }
            } else {
                want = l.interval / l.stripe_size.max(1);
                comps.push(LayoutComponent { start: l.start, end: l.end, stripe_size: l.stripe_size, osts: vec![l.ost] });
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
        Some(ObjectLayout { path: self.path.clone(), size: self.size(), components: comps })
    }
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
        loop {
            // Skip blank lines between entries.
            let (n, first) = match lines.next_line() {
                None => break,
                Some((n, Ok(l))) if l.trim().is_empty() => {
                    let _ = n;
                    continue;
                }
                Some(x) => x,
            };
            let result = match first {
                Ok("lstat") => parse_entry(&mut lines).map(Record::Entry),
                Ok("gone") => parse_gone(&mut lines).map(Record::Gone),
                Ok(other) => Err((n, format!("expected `lstat` or `gone`, found `{}`", clip(other)))),
                Err(e) => Err((n, e)),
            };
            match result {
                Ok(Record::Entry(e)) => cat.entries.push(e),
                Ok(Record::Gone(g)) => {
                    // In one file the order is the order of events: every earlier entry of
                    // the file at that path goes, whatever its ctime; later ones stay.
                    let before = cat.entries.len();
                    cat.entries.retain(|e| !g.names(e));
                    cat.superseded += before - cat.entries.len();
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
        cat
    }

    /// Read one catalog file.
    pub fn read_file(path: &Path) -> Result<Catalog, CatalogError> {
        let bytes = std::fs::read(path).map_err(|source| CatalogError::Io { path: path.to_path_buf(), source })?;
        Ok(Catalog::parse(path, &bytes))
    }

    /// Read every catalog file in `dir` (regular files not starting with `.`), in name order.
    pub fn read_dir(dir: &Path) -> Result<Catalog, CatalogError> {
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
        let mut cat = Catalog::default();
        for p in names {
            cat.extend(Catalog::read_file(&p)?);
        }
        Ok(cat)
    }

    /// Append another catalog's entries, `gone` records and rejects (the two must come from
    /// different files): each side's `gone` records drop the other side's entries they
    /// supersede ([`CatalogGone::supersedes`]).
    pub fn extend(&mut self, mut other: Catalog) {
        let before = self.entries.len() + other.entries.len();
        if !other.gone.is_empty() {
            self.entries.retain(|e| !other.gone.iter().any(|g| g.supersedes(e)));
        }
        if !self.gone.is_empty() {
            other.entries.retain(|e| !self.gone.iter().any(|g| g.supersedes(e)));
        }
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
mod tests {
    use super::*;

    fn st(mode: u32, size: u64) -> StatFields {
        StatFields {
            dev: 2049,
            ino: 77,
            mode,
            nlink: 1,
            uid: 1000,
            gid: 100,
            size,
            blksize: 4096,
            blocks: size.div_ceil(512),
            atime: 1,
            mtime: 2,
            ctime: 3,
            rdev: 0,
        }
    }

    fn sample() -> Vec<CatalogEntry> {
        const M: u64 = 1 << 20;
        let pfl = [
            LayoutComponent { start: 0, end: 4 * M, stripe_size: M, osts: vec![113] },
            LayoutComponent { start: 4 * M, end: u64::MAX, stripe_size: M, osts: vec![167, 204] },
        ];
        vec![
            CatalogEntry::new("/scratch/a file", st(0o100644, 6 * M + 1), Some(st(0o100644, 6 * M + 1)), Some(&pfl)),
            CatalogEntry::new("/scratch/dir", st(0o040755, 4096), Some(st(0o040755, 4096)), None),
            CatalogEntry::new("/scratch/dangling", st(0o120777, 7), None, None),
        ]
    }

    #[test]
    fn entries_are_written_in_the_swiftload_format_and_read_back() {
        let mut text = String::new();
        for e in sample() {
            e.write_to(&mut text).unwrap();
        }
        let expected = "lstat\n/scratch/a file\nst_dev:2049; st_ino:77; st_mode:100644; st_nlink:1; st_uid:1000; st_gid:100; st_rdev:0; st_size:6291457; st_blksize:4096; st_blocks:12289; st_atime:1; st_mtime:2; st_ctime:3\nstat\n/scratch/a file\nst_dev:2049; st_ino:77; st_mode:100644; st_nlink:1; st_uid:1000; st_gid:100; st_rdev:0; st_size:6291457; st_blksize:4096; st_blocks:12289; st_atime:1; st_mtime:2; st_ctime:3\nlayout\n/scratch/a file 113 0 4194304 1048576 1048576 6291457\n/scratch/a file 167 4194304 6291457 2097152 1048576 6291457\n/scratch/a file 204 5242880 6291457 2097152 1048576 6291457\nend\n";
        assert!(text.starts_with(expected), "{text}");
        assert!(text.contains("lstat\n/scratch/dir\n") && text.contains("layout\nNone\nend\n"));
        assert!(text.contains("stat\nNone\nlayout\nNone\nend\n"));
        let cat = Catalog::parse(Path::new("c.txt"), text.as_bytes());
        assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
        assert_eq!(cat.entries, sample());
        let l = cat.entries[0].object_layout().unwrap();
        assert_eq!(l.components.len(), 2);
        assert_eq!(l.components[1].osts, vec![167, 204]);
        assert_eq!(crate::tasks::tasks_of(0, &l).unwrap(), cat.entries[0].tasks(0));
        assert!(cat.entries[1].object_layout().is_none());
    }

    #[test]
    fn bad_entries_name_file_line_and_reason_and_reading_goes_on() {
        let good = sample()[0].to_text().unwrap();
        let mut text = String::new();
        text.push_str(&good); // lines 1-11
        text.push_str("garbage\n"); // 12
        text.push_str("lstat\n/x\nst_mode:zz; st_size:1\nstat\nNone\nlayout\nNone\nend\n"); // 13-20, bad mode on 15
        text.push_str(&good.replace("113 0 4194304", "113 0 4194304 9")); // 21-31: 7 numbers -> path mismatch on 28
        text.push_str("lstat\n/y\nst_mode:100644; st_size:1\nstat\nNone\nlayout\n/y 1 0 1 0 1 1\nend\n"); // 32-39, interval 0 on 38
        text.push_str(&sample()[1].to_text().unwrap()); // 40-48 good
        text.push_str("lstat\n/z\nst_mode:100644; st_size:1\nstat\n"); // truncated
        let cat = Catalog::parse(Path::new("/cat/c1.txt"), text.as_bytes());
        let got: Vec<String> = cat.rejects.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            got,
            vec![
                "/cat/c1.txt:12: expected `lstat` or `gone`, found `garbage`",
                "/cat/c1.txt:15: stat field `st_mode`: `zz`: invalid digit found in string",
                "/cat/c1.txt:28: layout line names `/scratch/a file 113`, not the entry's path",
                "/cat/c1.txt:38: interval 0 is not a multiple of stripe size 1",
                "/cat/c1.txt:52: truncated entry: end of file where a path or `None` was expected",
            ]
        );
        assert_eq!(cat.entries.len(), 2);
        assert_eq!(cat.entries[1].path, "/scratch/dir");
        // Not UTF-8 and random bytes: rejects, never a panic.
        let cat = Catalog::parse(Path::new("b"), b"lstat\n/\xff\xfe\nend\n");
        assert_eq!(cat.rejects.len(), 1);
        assert!(cat.rejects[0].reason.contains("not UTF-8"), "{:?}", cat.rejects);
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..500 {
            let mut b = good.clone().into_bytes();
            for _ in 0..rng.usize(1..6) {
                let i = rng.usize(0..b.len());
                b[i] = rng.u8(..);
            }
            let _ = Catalog::parse(Path::new("fuzz"), &b);
        }
    }

    #[test]
    fn a_truncated_entry_is_one_reject_and_the_next_entry_parses() {
        let good = sample()[0].to_text().unwrap();
        // Cut short in its stat, in its layout lines, and before its `end`.
        for cut in ["lstat\n/z\nst_mode:100644; st_size:1\nstat\n", "lstat\n/z\nst_mode:100644; st_size:1\nstat\nNone\nlayout\n/z 1 0 1 1 1 1\n", "lstat\n/z\n"]
        {
            let text = format!("{cut}{good}");
            let cat = Catalog::parse(Path::new("t"), text.as_bytes());
            let at = cut.lines().count() + 1;
            assert_eq!(cat.rejects.len(), 1, "{:?}", cat.rejects);
            assert_eq!(cat.rejects[0].line, at, "{:?}", cat.rejects);
            assert!(cat.rejects[0].reason.starts_with("truncated entry: a new entry (`lstat`)"), "{:?}", cat.rejects);
            assert_eq!(cat.entries, vec![sample()[0].clone()]);
        }
    }

    #[test]
    fn a_crlf_catalog_parses() {
        let mut text = String::new();
        for e in sample() {
            e.write_to(&mut text).unwrap();
        }
        let crlf = text.replace('\n', "\r\n");
        let cat = Catalog::parse(Path::new("w"), crlf.as_bytes());
        assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
        assert_eq!(cat.entries, sample());
        // A bad CRLF entry still resynchronises at the next `end`.
        let bad = format!("lstat\r\n/x\r\nst_mode:zz\r\nstat\r\nNone\r\nlayout\r\nNone\r\nend\r\n{crlf}");
        let cat = Catalog::parse(Path::new("w"), bad.as_bytes());
        assert_eq!(cat.rejects.len(), 1, "{:?}", cat.rejects);
        assert_eq!(cat.entries, sample());
    }

    #[test]
    fn layout_lines_past_the_file_size_or_with_absurd_stripes_are_rejected() {
        let entry = |line: &str| format!("lstat\n/d/f\nst_mode:100644; st_size:10\nstat\nNone\nlayout\n{line}\nend\n");
        let mut text = String::new();
        text.push_str(&entry("/d/f 5 0 18446744073709551615 1 1 10")); // 1-8, line 7
        text.push_str(&entry("/d/f 5 4 2 1 1 10")); // 9-16, line 15
        text.push_str(&entry("/d/f 5 0 10 8589934592 8589934592 10")); // 17-24, line 23
        text.push_str(&entry("/d/f 5 0 10 18446744073709551615 1 10")); // 25-32, line 31
        text.push_str(&entry("/d/f 5 0 10 2 1 10\n/d/f 6 1 10 2 1 10")); // 33-41 good
        let cat = Catalog::parse(Path::new("c"), text.as_bytes());
        let got: Vec<String> = cat.rejects.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            got,
            vec![
                "c:7: end 18446744073709551615 is past the file size 10",
                "c:15: start 4 is past end 2",
                "c:23: stripe size 8589934592 is over 4294967296",
                "c:31: stripe count 18446744073709551615 (interval / stripe size) is over 65536",
            ]
        );
        assert_eq!(cat.entries.len(), 1);
        let l = cat.entries[0].object_layout().unwrap();
        assert_eq!(crate::tasks::tasks_of(0, &l).unwrap().iter().map(crate::tasks::task_bytes).sum::<u64>(), 10);
        // Offsets near 2^64: rebuilding the layout must not overflow.
        let max = u64::MAX;
        let lines = format!("/d/f 1 {} {max} 8 4 {max}\n/d/f 2 {} {max} 8 4 {max}", max - 1, max - 1);
        let cat = Catalog::parse(Path::new("c"), entry(&lines).as_bytes());
        assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
        assert_eq!(cat.entries[0].object_layout().unwrap().components.len(), 2);
    }

    #[test]
    fn latest_keeps_one_entry_per_path_and_records_convert() {
        let a = CatalogEntry::new("/p", st(0o100644, 5), Some(st(0o100644, 5)), Some(&[]));
        let mut newer = st(0o100644, 9);
        newer.ctime = 10;
        let b = CatalogEntry::new("/p", newer, Some(newer), Some(&[]));
        let cat = Catalog { entries: vec![b.clone(), a.clone()], files: 1, ..Catalog::default() };
        assert_eq!(cat.latest(), vec![&b]);
        // Same ctime (whole seconds): the larger size wins whatever the read order, then the
        // later mtime.
        let mut bigger = st(0o100644, 7);
        bigger.mtime = 1;
        let c = CatalogEntry::new("/p", bigger, Some(bigger), Some(&[]));
        for entries in [vec![c.clone(), a.clone()], vec![a.clone(), c.clone()]] {
            assert_eq!(Catalog { entries, files: 1, ..Catalog::default() }.latest(), vec![&c]);
        }
        let mut later = st(0o100644, 5);
        later.mtime = 9;
        let d = CatalogEntry::new("/p", later, Some(later), Some(&[]));
        for entries in [vec![d.clone(), a.clone()], vec![a.clone(), d.clone()]] {
            assert_eq!(Catalog { entries, files: 1, ..Catalog::default() }.latest(), vec![&d]);
        }

        let rec = FileRecord {
            path: "/scratch/r",
            kind: FileKind::File,
            attrs: icicle_core::Attrs { mode: 0o100600, uid: 5, gid: 6, size: 3000, atime: 1, ctime: 2, mtime: 3, inode: 0 },
        };
        let comps = [LayoutComponent { start: 0, end: u64::MAX, stripe_size: 1024, osts: vec![204, 113] }];
        let e = CatalogEntry::from_record(&rec, Some(&comps));
        let text = e.to_text().unwrap();
        assert!(text.contains("/scratch/r 204 0 3000 2048 1024 3000\n/scratch/r 113 1024 3000 2048 1024 3000\n"), "{text}");
        assert_eq!(Catalog::parse(Path::new("r"), text.as_bytes()).entries, vec![e]);
        let link = FileRecord { kind: FileKind::Link, attrs: icicle_core::Attrs { mode: 0o120777, ..icicle_core::Attrs::default() }, ..rec };
        let e = CatalogEntry::from_record(&link, Some(&comps));
        assert!(e.stat.is_none() && e.layout.is_none());
        assert!(matches!(CatalogEntry { path: "a\nb".into(), ..e }.to_text(), Err(CatalogError::Unrepresentable(_))));
    }

    #[test]
    fn gone_records_supersede_the_entries_of_their_file_before_them_and_older_ones_elsewhere() {
        let at = |path: &str, ino: u64, ctime: i64, size: u64| {
            let mut f = st(0o100644, size);
            (f.ino, f.ctime) = (ino, ctime);
            CatalogEntry::new(path, f, Some(f), Some(&[]))
        };
        let gone = |e: &CatalogEntry| CatalogGone { path: e.path.clone(), stat: e.lstat };
        // tmp written, renamed over /d/f (whose old file, inode 1, goes too), then renamed back
        // and forth within one second: in one file the order decides.
        let (f_old, tmp, f_new) = (at("/d/f", 1, 5, 100), at("/d/tmp", 2, 5, 7), at("/d/f", 2, 5, 7));
        let (tmp_back, f_back) = (at("/d/tmp", 2, 5, 7), at("/d/f", 2, 5, 7));
        let mut text = String::new();
        for r in [
            f_old.to_text(),
            tmp.to_text(),
            gone(&f_old).to_text(),
            gone(&tmp).to_text(),
            f_new.to_text(),
            gone(&f_new).to_text(),
            tmp_back.to_text(),
            gone(&tmp_back).to_text(),
            f_back.to_text(),
        ] {
            text.push_str(&r.unwrap());
        }
        assert!(text.contains("end\ngone\n/d/f\nst_dev:2049; st_ino:1; st_mode:100644; "), "{text}");
        let cat = Catalog::parse(Path::new("c"), text.as_bytes());
        assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
        assert_eq!((cat.entries.clone(), cat.superseded, cat.gone.len()), (vec![f_back.clone()], 4, 4));
        assert_eq!(cat.latest(), vec![&f_back]);

        // Across files: an entry no later than the record goes, whichever file is read first; a
        // later entry (the path written again afterwards) and another file's other inode stay.
        let tmp_dir = tempfile::tempdir().unwrap();
        let later = at("/d/f", 1, 6, 50);
        let other = at("/d/g", 1, 5, 9);
        std::fs::write(
            tmp_dir.path().join("catalog.h.1.txt"),
            [gone(&f_old).to_text().unwrap(), gone(&tmp).to_text().unwrap(), f_new.to_text().unwrap()].concat(),
        )
        .unwrap();
        std::fs::write(tmp_dir.path().join("catalog.h.2.txt"), [f_old.to_text().unwrap(), tmp.to_text().unwrap(), other.to_text().unwrap()].concat()).unwrap();
        std::fs::write(tmp_dir.path().join("catalog.h.3.txt"), later.to_text().unwrap()).unwrap();
        let cat = Catalog::read_dir(tmp_dir.path()).unwrap();
        assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
        assert_eq!((cat.entries.clone(), cat.superseded), (vec![f_new.clone(), other.clone(), later.clone()], 2));
        assert_eq!(cat.latest(), vec![&later, &other]);
        let mut one = Catalog::read_file(&tmp_dir.path().join("catalog.h.2.txt")).unwrap();
        one.extend(Catalog::read_file(&tmp_dir.path().join("catalog.h.1.txt")).unwrap());
        assert_eq!((one.entries, one.superseded), (vec![other, f_new], 2));

        // Bad or cut-short records are rejects like bad entries; the next record still parses.
        let good = f_old.to_text().unwrap();
        let text = format!("gone\n/d/f\nst_mode:zz; st_size:1\nend\ngone\n/d/f\n{good}lstat\n/x\n{}", gone(&f_old).to_text().unwrap());
        let cat = Catalog::parse(Path::new("b"), text.as_bytes());
        let got: Vec<String> = cat.rejects.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            got,
            vec![
                "b:3: stat field `st_mode`: `zz`: invalid digit found in string",
                "b:7: truncated entry: a new entry (`lstat`) where the lstat fields was expected",
                "b:17: truncated entry: a new entry (`gone`) where the lstat fields was expected",
            ]
        );
        assert_eq!((cat.entries.len(), cat.gone.len(), cat.superseded), (0, 1, 1));
        assert!(matches!(CatalogGone { path: "a\nb".into(), stat: f_old.lstat }.to_text(), Err(CatalogError::Unrepresentable(_))));
    }

    #[test]
    fn read_dir_merges_per_process_files_in_name_order() {
        let tmp = tempfile::tempdir().unwrap();
        let s = sample();
        std::fs::write(tmp.path().join("catalog.h.2.txt"), s[1].to_text().unwrap()).unwrap();
        std::fs::write(tmp.path().join("catalog.h.1.txt"), s[0].to_text().unwrap()).unwrap();
        std::fs::write(tmp.path().join(".hidden"), "junk").unwrap();
        let cat = Catalog::read_dir(tmp.path()).unwrap();
        assert_eq!(cat.files, 2);
        assert_eq!(cat.entries, vec![s[0].clone(), s[1].clone()]);
        let err = Catalog::read_dir(&tmp.path().join("missing")).unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
    }
}
