//! The compact catalog (`catalog.<name>.icat`): the same entries as the text form, in
//! fixed-size little-endian records read in place through `mmap`.
//!
//! ```text
//! header   96 bytes: magic `ICICLCAT`, version u32, flags u32, then u64 counts: entries,
//!          stats, gone, comps, osts, string bytes, superseded, file length; CRC-32 u32 of
//!          bytes [0, 80) then [96, end); 12 reserved zero bytes
//! entries  128 bytes each: path offset u64, path length u32, flags u32 (bits 0-1: stat
//!          None / same as lstat / own record; bit 2: has a layout), first comp u64, comp
//!          count u32, stat index u32, then the lstat record (96 bytes)
//! stats    96 bytes each (the `stat` records that differ from their entry's lstat): dev, ino,
//!          nlink, rdev, size, blksize, blocks u64; atime, mtime, ctime i64; mode, uid, gid
//!          u32; 4 zero bytes
//! gone     112 bytes each: path offset u64, path length u32, 4 zero bytes, lstat record
//! comps    48 bytes each, a run of layout lines: start, end, interval, stripe size, file size
//!          u64, first OST u32, line count u32 (line k: OST osts[first + k], start + k x
//!          stripe size; the rest shared)
//! osts     u32 each, the OST index of every layout line
//! strings  the paths, UTF-8, no newline
//! ```
//!
//! Entries are `Catalog::latest()` of what was converted (one per path, sorted by path:
//! flag bit 0), so a reader needs no de-duplication; the `gone` records are kept so that they
//! still supersede entries of other catalog files read beside this one (as a text file's
//! would). Opening validates the whole file (length, checksum, every offset, count and
//! layout rule): a corrupt or truncated file is one error naming it and the reason; after
//! that, access reads the mapped records in place.

use std::io::Write;
use std::path::{Path, PathBuf};

use icicle_core::traits::ObjectLayout;

use super::parse::check_line;
use super::{layout_from_lines, Catalog, CatalogEntry, CatalogError, CatalogGone, LayoutLine, StatFields};

pub use super::compact_write::{encode, write_compact};

/// The first eight bytes of a compact catalog.
pub const MAGIC: [u8; 8] = *b"ICICLCAT";
/// The format version this code writes and reads.
pub const VERSION: u32 = 1;
/// The file name extension of compact catalogs.
pub const EXTENSION: &str = "icat";

pub(super) const HEADER: usize = 96;
pub(super) const CHECKSUM_AT: usize = 80;
pub(super) const STAT: usize = 96;
pub(super) const ENTRY: usize = 32 + STAT;
pub(super) const GONE: usize = 16 + STAT;
pub(super) const COMP: usize = 48;
pub(super) const OST: usize = 4;
/// Header flag: entries are one per path, in strictly increasing path order.
pub(super) const FLAG_LATEST: u32 = 1;
pub(super) const STAT_NONE: u32 = 0;
pub(super) const STAT_SAME: u32 = 1;
pub(super) const STAT_OWN: u32 = 2;
pub(super) const STAT_MASK: u32 = 3;
pub(super) const HAS_LAYOUT: u32 = 4;

/// What a compact catalog holds (its header's counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompactCounts {
    /// Entries (one per path).
    pub entries: u64,
    /// `stat` records that differ from their entry's `lstat`.
    pub stats: u64,
    /// `gone` records.
    pub gone: u64,
    /// Runs of layout lines.
    pub comps: u64,
    /// Layout lines (one OST index each).
    pub osts: u64,
    /// Bytes of paths.
    pub strings: u64,
    /// Entries the converted catalog had dropped as superseded (information only).
    pub superseded: u64,
}

/// Byte offsets of the sections, derived from the counts.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Sections {
    pub entries: usize,
    pub stats: usize,
    pub gone: usize,
    pub comps: usize,
    pub osts: usize,
    pub strings: usize,
    pub end: usize,
}

impl Sections {
    /// The sections of a file with these counts; `None` when the sizes overflow.
    pub(super) fn of(c: &CompactCounts) -> Option<Sections> {
        let size = |n: u64, each: usize| usize::try_from(n).ok()?.checked_mul(each);
        let entries = HEADER;
        let stats = entries.checked_add(size(c.entries, ENTRY)?)?;
        let gone = stats.checked_add(size(c.stats, STAT)?)?;
        let comps = gone.checked_add(size(c.gone, GONE)?)?;
        let osts = comps.checked_add(size(c.comps, COMP)?)?;
        let strings = osts.checked_add(size(c.osts, OST)?)?;
        let end = strings.checked_add(size(c.strings, 1)?)?;
        Some(Sections { entries, stats, gone, comps, osts, strings, end })
    }
}

pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at.wrapping_add(4)).and_then(|s| <[u8; 4]>::try_from(s).ok()).map_or(0, u32::from_le_bytes)
}

pub(super) fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at.wrapping_add(8)).and_then(|s| <[u8; 8]>::try_from(s).ok()).map_or(0, u64::from_le_bytes)
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    u64_at(b, at) as i64
}

/// Decode a 96-byte stat record.
pub(super) fn read_stat(b: &[u8]) -> StatFields {
    StatFields {
        dev: u64_at(b, 0),
        ino: u64_at(b, 8),
        nlink: u64_at(b, 16),
        rdev: u64_at(b, 24),
        size: u64_at(b, 32),
        blksize: u64_at(b, 40),
        blocks: u64_at(b, 48),
        atime: i64_at(b, 56),
        mtime: i64_at(b, 64),
        ctime: i64_at(b, 72),
        mode: u32_at(b, 80),
        uid: u32_at(b, 84),
        gid: u32_at(b, 88),
    }
}

/// Encode a 96-byte stat record.
pub(super) fn stat_bytes(s: &StatFields) -> [u8; STAT] {
    let mut b = [0u8; STAT];
    let words =
        [s.dev, s.ino, s.nlink, s.rdev, s.size, s.blksize, s.blocks, s.atime as u64, s.mtime as u64, s.ctime as u64];
    for (k, w) in words.iter().enumerate() {
        b[k * 8..k * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    b[80..84].copy_from_slice(&s.mode.to_le_bytes());
    b[84..88].copy_from_slice(&s.uid.to_le_bytes());
    b[88..92].copy_from_slice(&s.gid.to_le_bytes());
    b
}

/// Whether `bytes` start like a compact catalog.
pub fn is_compact(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// Whether the file at `path` starts like a compact catalog (reads its first eight bytes).
pub fn file_is_compact(path: &Path) -> Result<bool, CatalogError> {
    use std::io::Read;
    let io = |source| CatalogError::Io { path: path.to_path_buf(), source };
    let mut head = Vec::with_capacity(MAGIC.len());
    std::fs::File::open(path).map_err(io)?.take(MAGIC.len() as u64).read_to_end(&mut head).map_err(io)?;
    Ok(is_compact(&head))
}

enum Backing {
    Map(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// A validated compact catalog, mapped (or held) in memory; entries are read in place.
pub struct CompactCatalog {
    path: PathBuf,
    data: Backing,
    counts: CompactCounts,
    flags: u32,
    sec: Sections,
}

impl std::fmt::Debug for CompactCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompactCatalog").field("path", &self.path).field("counts", &self.counts).finish()
    }
}

impl CompactCatalog {
    /// Map and validate the compact catalog at `path`.
    pub fn open(path: &Path) -> Result<CompactCatalog, CatalogError> {
        let io = |source| CatalogError::Io { path: path.to_path_buf(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < HEADER as u64 {
            return Err(corrupt(path, format!("truncated: {len} bytes, the header alone is {HEADER}")));
        }
        // Ask for the whole file ahead (asynchronous readahead of every page) before the
        // map's populate faults them in: a cold file then comes off the disk in large
        // requests instead of one readahead window at a time. Advice only: failure is ignored.
        {
            use std::os::fd::AsRawFd;
            // SAFETY: a valid open descriptor; the call only advises the page cache.
            let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_WILLNEED) };
        }
        // SAFETY: the map is read-only and compact catalogs are written whole under a
        // temporary name and renamed into place (`write_compact`), never changed in place; the
        // contents are validated before any access.
        let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }.map_err(io)?;
        CompactCatalog::validated(path, Backing::Map(map))
    }

    /// Validate a compact catalog held in memory (`name` is used in errors).
    pub fn from_bytes(name: &Path, bytes: Vec<u8>) -> Result<CompactCatalog, CatalogError> {
        CompactCatalog::validated(name, Backing::Owned(bytes))
    }

    fn validated(path: &Path, data: Backing) -> Result<CompactCatalog, CatalogError> {
        let (counts, flags, sec) = super::compact_check::validate(data.bytes()).map_err(|r| corrupt(path, r))?;
        Ok(CompactCatalog { path: path.to_path_buf(), data, counts, flags, sec })
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The header's counts.
    pub fn counts(&self) -> CompactCounts {
        self.counts
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.counts.entries as usize
    }

    /// Whether it has no entries.
    pub fn is_empty(&self) -> bool {
        self.counts.entries == 0
    }

    /// Whether the entries are one per path in path order (always, for files this code writes).
    pub fn is_latest(&self) -> bool {
        self.flags & FLAG_LATEST != 0
    }

    fn section(&self, from: usize, to: usize) -> &[u8] {
        self.data.bytes().get(from..to).unwrap_or_default()
    }

    fn strings(&self) -> &str {
        let b = self.section(self.sec.strings, self.sec.end);
        // SAFETY: `validate` checked that the string section is UTF-8; the bytes do not change
        // while mapped (see `open`).
        unsafe { std::str::from_utf8_unchecked(b) }
    }

    /// The path at `off`, `len` of the string table (checked at open; "" if out of range).
    fn path_at(&self, off: u64, len: u32) -> &str {
        let (off, len) = (off as usize, len as usize);
        self.strings().get(off..off.saturating_add(len)).unwrap_or_default()
    }

    /// Entry `i`.
    pub fn entry(&self, i: usize) -> Option<CompactEntry<'_>> {
        let at = i.checked_mul(ENTRY)?.checked_add(self.sec.entries)?;
        let rec = self.data.bytes().get(at..at.checked_add(ENTRY)?.min(self.sec.stats))?;
        (rec.len() == ENTRY).then_some(CompactEntry { cat: self, rec })
    }

    /// The entry for `path` and its index, by binary search (only when [`is_latest`]: one
    /// entry per path in path order; else `None`).
    ///
    /// [`is_latest`]: CompactCatalog::is_latest
    pub fn find(&self, path: &str) -> Option<(usize, CompactEntry<'_>)> {
        if !self.is_latest() {
            return None;
        }
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.entry(mid)?.path().cmp(path) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some((mid, self.entry(mid)?)),
            }
        }
        None
    }

    /// Every entry, in order.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = CompactEntry<'_>> + '_ {
        self.section(self.sec.entries, self.sec.stats)
            .chunks_exact(ENTRY)
            .map(move |rec| CompactEntry { cat: self, rec })
    }

    /// Every `gone` record: the path and the lstat fields of the file that left it.
    pub fn gone_records(&self) -> impl ExactSizeIterator<Item = (&str, StatFields)> + '_ {
        self.section(self.sec.gone, self.sec.comps)
            .chunks_exact(GONE)
            .map(move |r| (self.path_at(u64_at(r, 0), u32_at(r, 8)), read_stat(&r[16..])))
    }

    /// The catalog as owned entries and `gone` records (what [`Catalog::read_file`] returns).
    pub fn to_catalog(&self) -> Catalog {
        Catalog {
            entries: self.entries().map(|e| e.to_entry()).collect(),
            gone: self.gone_records().map(|(p, stat)| CatalogGone { path: p.to_string(), stat }).collect(),
            superseded: self.counts.superseded as usize,
            rejects: Vec::new(),
            files: 1,
        }
    }

    /// Write the catalog as text: the `gone` records first (so they supersede none of the
    /// entries after them in that file, as in this one), then the entries in path order.
    pub fn write_text(&self, w: &mut impl Write) -> Result<(), CatalogError> {
        let io = |source| CatalogError::Io { path: self.path.clone(), source };
        let mut buf = String::with_capacity(1 << 20);
        for (path, stat) in self.gone_records() {
            CatalogGone { path: path.to_string(), stat }.write_to(&mut buf)?;
            if buf.len() > 1 << 20 {
                w.write_all(buf.as_bytes()).map_err(io)?;
                buf.clear();
            }
        }
        for e in self.entries() {
            e.to_entry().write_to(&mut buf)?;
            if buf.len() > 1 << 20 {
                w.write_all(buf.as_bytes()).map_err(io)?;
                buf.clear();
            }
        }
        w.write_all(buf.as_bytes()).map_err(io)
    }
}

pub(super) fn corrupt(path: &Path, reason: String) -> CatalogError {
    CatalogError::Corrupt { path: path.to_path_buf(), reason }
}

/// One entry of a [`CompactCatalog`], read in place.
#[derive(Clone, Copy)]
pub struct CompactEntry<'a> {
    cat: &'a CompactCatalog,
    rec: &'a [u8],
}

impl std::fmt::Debug for CompactEntry<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompactEntry").field("path", &self.path()).finish()
    }
}

impl<'a> CompactEntry<'a> {
    fn flags(&self) -> u32 {
        u32_at(self.rec, 12)
    }

    /// Absolute path (borrowed from the map, no allocation).
    pub fn path(&self) -> &'a str {
        self.cat.path_at(u64_at(self.rec, 0), u32_at(self.rec, 8))
    }

    /// `lstat` fields.
    pub fn lstat(&self) -> StatFields {
        read_stat(&self.rec[32..])
    }

    fn stat_record(&self) -> Option<&'a [u8]> {
        match self.flags() & STAT_MASK {
            STAT_SAME => self.rec.get(32..),
            STAT_OWN => {
                let at = (u32_at(self.rec, 28) as usize).checked_mul(STAT)?.checked_add(self.cat.sec.stats)?;
                self.cat.data.bytes().get(at..at.checked_add(STAT)?)
            }
            _ => None,
        }
    }

    /// `stat` fields; `None` when `stat` failed (a dangling link).
    pub fn stat(&self) -> Option<StatFields> {
        self.stat_record().map(read_stat)
    }

    /// The `stat` fields, else the `lstat` ones (what sizes and `latest` go by).
    pub fn stat_or_lstat(&self) -> StatFields {
        self.stat().unwrap_or_else(|| self.lstat())
    }

    /// The file size (from `stat`, else `lstat`), without decoding the other fields.
    pub fn size(&self) -> u64 {
        u64_at(self.stat_record().unwrap_or(&self.rec[32..]), 32)
    }

    /// Whether the entry has layout lines (`layout` then `None` in text when not).
    pub fn has_layout(&self) -> bool {
        self.flags() & HAS_LAYOUT != 0
    }

    /// The layout lines (none when there is no layout).
    pub fn lines(&self) -> CompactLines<'a> {
        let sec = &self.cat.sec;
        let first = u64_at(self.rec, 16) as usize;
        let count = u32_at(self.rec, 24) as usize;
        let from = first.saturating_mul(COMP).saturating_add(sec.comps);
        let to = from.saturating_add(count.saturating_mul(COMP)).min(sec.osts);
        CompactLines { comps: self.cat.section(from, to), osts: self.cat.section(sec.osts, sec.strings), k: 0 }
    }

    /// The entry as an owned [`CatalogEntry`].
    pub fn to_entry(&self) -> CatalogEntry {
        let layout = self.has_layout().then(|| self.lines().collect());
        CatalogEntry { path: self.path().to_string(), lstat: self.lstat(), stat: self.stat(), layout }
    }

    /// The layout rebuilt from the lines, as [`CatalogEntry::object_layout`] does.
    pub fn object_layout(&self) -> Option<ObjectLayout> {
        self.has_layout().then(|| layout_from_lines(self.path(), self.size(), self.lines()))
    }
}

/// The layout lines of one compact entry, expanded from its runs.
#[derive(Debug, Clone)]
pub struct CompactLines<'a> {
    comps: &'a [u8],
    osts: &'a [u8],
    k: u32,
}

impl Iterator for CompactLines<'_> {
    type Item = LayoutLine;

    fn next(&mut self) -> Option<LayoutLine> {
        loop {
            let c = self.comps.get(..COMP)?;
            if self.k < u32_at(c, 44) {
                let k = self.k;
                self.k += 1;
                let ost_at = (u32_at(c, 40) as usize).saturating_add(k as usize).saturating_mul(OST);
                let stripe_size = u64_at(c, 24);
                return Some(LayoutLine {
                    ost: u32_at(self.osts, ost_at),
                    start: u64_at(c, 0).wrapping_add(u64::from(k).wrapping_mul(stripe_size)),
                    end: u64_at(c, 8),
                    interval: u64_at(c, 16),
                    stripe_size,
                    file_size: u64_at(c, 32),
                });
            }
            self.comps = self.comps.get(COMP..).unwrap_or_default();
            self.k = 0;
        }
    }
}

/// Check one run of `n` layout lines (the rules the text reader applies to each line).
pub(super) fn check_run(first: &LayoutLine, n: u32) -> Result<(), String> {
    check_line(first)?;
    let last_start = u64::from(n.saturating_sub(1))
        .checked_mul(first.stripe_size)
        .and_then(|d| first.start.checked_add(d))
        .ok_or_else(|| format!("a run of {n} stripes from {} overflows", first.start))?;
    check_line(&LayoutLine { start: last_start, ..*first })
}
