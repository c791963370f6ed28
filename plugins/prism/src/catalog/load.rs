//! Loading a catalog directory for a reader such as `swiftload`: text files parsed (on every
//! core), compact files mapped and read in place, `gone` records applied across files and one
//! entry kept per path — the entries of [`Catalog::latest`] over [`Catalog::read_dir`], without
//! copying the compact files' entries.
//!
//! A directory holding a single compact file (what `catalog-bench convert` writes) needs no
//! merging at all: its entries are already one per path in path order.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use icicle_core::traits::ObjectLayout;

use super::compact::{file_is_compact, CompactCatalog, CompactEntry, CompactLines};
use super::{catalog_files, Catalog, CatalogEntry, CatalogError, CatalogReject, LayoutLine, StatFields};

/// One catalog file as loaded.
#[derive(Debug)]
enum Unit {
    Text(Catalog),
    Compact(CompactCatalog),
}

impl Unit {
    fn len(&self) -> usize {
        match self {
            Unit::Text(c) => c.entries.len(),
            Unit::Compact(c) => c.len(),
        }
    }

    fn entry(&self, i: usize) -> Option<EntryRef<'_>> {
        match self {
            Unit::Text(c) => c.entries.get(i).map(EntryRef::Text),
            Unit::Compact(c) => c.entry(i).map(EntryRef::Compact),
        }
    }

    fn for_each_gone<'a>(&'a self, mut f: impl FnMut(&'a str, StatFields)) {
        match self {
            Unit::Text(c) => c.gone.iter().for_each(|g| f(&g.path, g.stat)),
            Unit::Compact(c) => c.gone_records().for_each(|(p, s)| f(p, s)),
        }
    }

    fn gone_count(&self) -> usize {
        match self {
            Unit::Text(c) => c.gone.len(),
            Unit::Compact(c) => c.counts().gone as usize,
        }
    }

    fn superseded(&self) -> usize {
        match self {
            Unit::Text(c) => c.superseded,
            Unit::Compact(c) => c.counts().superseded as usize,
        }
    }
}

/// The entries of a catalog directory, one per path in path order, ready for a reader:
/// borrowed paths, stat fields and layouts (compact files are read in place).
#[derive(Debug)]
pub struct LoadedCatalog {
    units: Vec<Unit>,
    /// `None`: every entry of the single unit, in order; else (unit << 32 | index) per entry.
    selected: Option<Vec<u64>>,
    /// Bad text entries (a compact file is whole or an error).
    pub rejects: Vec<CatalogReject>,
    /// `gone` records read.
    pub gone: usize,
    /// Entries dropped because a `gone` record supersedes them (in their own file or another).
    pub superseded: usize,
    /// Files read.
    pub files: usize,
}

/// Load every catalog file in `dir` (regular files not starting with `.`, text or compact,
/// in name order): the entries [`Catalog::read_dir`]`(dir)?.latest()` gives, faster. The call
/// for `swiftload`: iterate [`LoadedCatalog::iter`] and take `path()`, `size()`,
/// `stat_or_lstat()` and `object_layout()` of each entry.
///
/// A collector may compact its text into its compact file while this reads (renaming the new
/// compact file into place, then emptying the text): a read that could have seen the text
/// emptied but the compact file from before is read again, until the directory's files are
/// the same before and after (at most 10 times).
pub fn load_dir(dir: &Path) -> Result<LoadedCatalog, CatalogError> {
    let mut tries = 0;
    loop {
        let before = identities(dir)?;
        let paths: Vec<PathBuf> = before.iter().map(|(p, _)| p.clone()).collect();
        let loaded = load_files(&paths)?;
        tries += 1;
        if tries >= 10 || identities(dir)? == before {
            return Ok(loaded);
        }
    }
}

/// A catalog file and its (device, inode).
type Identity = (PathBuf, (u64, u64));

/// The catalog files of `dir` with their device and inode (a file replaced by a rename
/// changes inode; an appended or emptied one does not).
fn identities(dir: &Path) -> Result<Vec<Identity>, CatalogError> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    for p in catalog_files(dir)? {
        if let Ok(md) = std::fs::metadata(&p) {
            out.push((p, (md.dev(), md.ino())));
        }
    }
    Ok(out)
}

/// Load these catalog files (text or compact, told apart by the compact magic), in this order.
pub fn load_files(paths: &[PathBuf]) -> Result<LoadedCatalog, CatalogError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(paths.len()).max(1);
    let mut slots: Vec<Option<Result<Unit, CatalogError>>> = (0..paths.len()).map(|_| None).collect();
    if threads == 1 {
        for (slot, p) in slots.iter_mut().zip(paths) {
            *slot = Some(read_unit(p));
        }
    } else {
        let done: Vec<Vec<(usize, Result<Unit, CatalogError>)>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    s.spawn(move || {
                        paths.iter().enumerate().skip(t).step_by(threads).map(|(i, p)| (i, read_unit(p))).collect()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap_or_default()).collect()
        });
        for (i, r) in done.into_iter().flatten() {
            if let Some(slot) = slots.get_mut(i) {
                *slot = Some(r);
            }
        }
    }
    let mut units = Vec::with_capacity(paths.len());
    for (slot, p) in slots.into_iter().zip(paths) {
        // A worker that panicked (it cannot: the readers never panic) leaves its slots empty.
        let unit = slot.unwrap_or_else(|| {
            Err(CatalogError::Corrupt { path: p.clone(), reason: "the reader thread failed".into() })
        })?;
        units.push(unit);
    }
    Ok(LoadedCatalog::from_units(units))
}

fn read_unit(path: &Path) -> Result<Unit, CatalogError> {
    if file_is_compact(path)? {
        return CompactCatalog::open(path).map(Unit::Compact);
    }
    let bytes = std::fs::read(path).map_err(|source| CatalogError::Io { path: path.to_path_buf(), source })?;
    Ok(Unit::Text(Catalog::parse(path, &bytes)))
}

const INDEX_BITS: u32 = 32;

fn unpack(id: u64) -> (usize, usize) {
    ((id >> INDEX_BITS) as usize, (id & ((1 << INDEX_BITS) - 1)) as usize)
}

impl LoadedCatalog {
    fn from_units(mut units: Vec<Unit>) -> LoadedCatalog {
        // An empty text file (a collector's text just compacted) changes nothing: without it
        // a single compact file is read in place.
        let files = units.len();
        units.retain(
            |u| !matches!(u, Unit::Text(c) if c.entries.is_empty() && c.gone.is_empty() && c.rejects.is_empty()),
        );
        let mut rejects = Vec::new();
        for u in &mut units {
            if let Unit::Text(c) = u {
                rejects.append(&mut c.rejects);
            }
        }
        let gone = units.iter().map(Unit::gone_count).sum();
        let mut superseded = units.iter().map(Unit::superseded).sum();
        let selected = match units.as_slice() {
            [Unit::Compact(c)] if c.is_latest() => None,
            _ => {
                let (ids, dropped) = resolve(&units);
                superseded += dropped;
                Some(ids)
            }
        };
        LoadedCatalog { units, selected, rejects, gone, superseded, files }
    }

    /// Number of entries (one per path).
    pub fn len(&self) -> usize {
        match &self.selected {
            None => self.units.first().map_or(0, Unit::len),
            Some(ids) => ids.len(),
        }
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entry `i` (in path order).
    pub fn get(&self, i: usize) -> Option<EntryRef<'_>> {
        match &self.selected {
            None => self.units.first()?.entry(i),
            Some(ids) => self.by_id(*ids.get(i)?),
        }
    }

    fn by_id(&self, id: u64) -> Option<EntryRef<'_>> {
        let (u, i) = unpack(id);
        self.units.get(u)?.entry(i)
    }

    /// The entries in path order.
    pub fn iter(&self) -> impl Iterator<Item = EntryRef<'_>> + '_ {
        (0..self.len()).filter_map(move |i| self.get(i))
    }

    /// The entries as owned [`CatalogEntry`]s (for tests and conversions; a reader should
    /// use [`LoadedCatalog::iter`]).
    pub fn to_entries(&self) -> Vec<CatalogEntry> {
        self.iter().map(|e| e.to_entry()).collect()
    }
}

/// `gone` records by (dev, ino): path, the unit that holds the record, ctime.
type GoneIndex<'a> = HashMap<(u64, u64), Vec<(&'a str, usize, i64)>>;

/// A compact unit with one entry per path in path order (looked up by binary search).
fn is_sorted_unit(u: &Unit) -> bool {
    matches!(u, Unit::Compact(c) if c.is_latest())
}

/// For each sorted compact unit, the (sorted, distinct) indices of its entries that other
/// files' `gone` records supersede: each record looks its path up.
fn sorted_superseded(units: &[Unit]) -> Vec<Vec<usize>> {
    let mut dead = vec![Vec::new(); units.len()];
    for (u, unit) in units.iter().enumerate() {
        let Unit::Compact(c) = unit else { continue };
        if !c.is_latest() {
            continue;
        }
        for (_, other) in units.iter().enumerate().filter(|&(gu, _)| gu != u) {
            other.for_each_gone(|path, g| {
                if let Some((i, e)) = c.find(path) {
                    let l = e.lstat();
                    if l.dev == g.dev && l.ino == g.ino && l.ctime <= g.ctime {
                        dead[u].push(i);
                    }
                }
            });
        }
        dead[u].sort_unstable();
        dead[u].dedup();
    }
    dead
}

/// Cross-file supersession and one entry per path: the ids kept, in path order, and how many
/// entries `gone` records of other files dropped.
fn resolve(units: &[Unit]) -> (Vec<u64>, usize) {
    let dead = sorted_superseded(units);
    // Other units are probed entry by entry against every other file's records.
    let mut gone: GoneIndex<'_> = HashMap::new();
    if units.iter().any(|u| !is_sorted_unit(u)) {
        for (u, unit) in units.iter().enumerate() {
            unit.for_each_gone(|path, st| gone.entry((st.dev, st.ino)).or_default().push((path, u, st.ctime)));
        }
    }
    let mut keyed: Vec<(&str, u64)> = Vec::with_capacity(units.iter().map(Unit::len).sum());
    let mut dropped = dead.iter().map(Vec::len).sum();
    for (u, unit) in units.iter().enumerate() {
        let (sorted, mut dead) = (is_sorted_unit(unit), dead.get(u).map_or(&[][..], Vec::as_slice));
        for i in 0..unit.len() {
            let Some(e) = unit.entry(i) else { continue };
            if sorted {
                if dead.first() == Some(&i) {
                    dead = &dead[1..];
                    continue;
                }
            } else if !gone.is_empty() {
                let l = e.lstat();
                let hit = gone
                    .get(&(l.dev, l.ino))
                    .is_some_and(|v| v.iter().any(|&(p, gu, ctime)| gu != u && l.ctime <= ctime && p == e.path()));
                if hit {
                    dropped += 1;
                    continue;
                }
            }
            keyed.push((e.path(), ((u as u64) << INDEX_BITS) | i as u64));
        }
    }
    let key = |id: u64| {
        let (u, i) = unpack(id);
        units.get(u).and_then(|x| x.entry(i)).map(|e| e.stat_or_lstat()).map(|s| (s.ctime, s.size, s.mtime))
    };
    // Stable: entries of one path stay in read order, so a tie goes to the later one read.
    // Each file's entries are mostly in order already (compact ones entirely): runs merge.
    keyed.sort_by(|a, b| a.0.cmp(b.0));
    let mut out: Vec<u64> = Vec::with_capacity(keyed.len());
    let mut last_path = None;
    for (path, id) in keyed {
        match out.last_mut() {
            Some(last) if last_path == Some(path) => {
                if key(id) >= key(*last) {
                    *last = id;
                }
            }
            _ => {
                out.push(id);
                last_path = Some(path);
            }
        }
    }
    (out, dropped)
}

/// One loaded entry: a parsed text entry or a compact one read in place.
#[derive(Debug, Clone, Copy)]
pub enum EntryRef<'a> {
    /// From a text catalog file.
    Text(&'a CatalogEntry),
    /// From a compact catalog file.
    Compact(CompactEntry<'a>),
}

impl<'a> EntryRef<'a> {
    /// Absolute path.
    pub fn path(&self) -> &'a str {
        match self {
            EntryRef::Text(e) => &e.path,
            EntryRef::Compact(e) => e.path(),
        }
    }

    /// `lstat` fields.
    pub fn lstat(&self) -> StatFields {
        match self {
            EntryRef::Text(e) => e.lstat,
            EntryRef::Compact(e) => e.lstat(),
        }
    }

    /// `stat` fields; `None` when `stat` failed (a dangling link).
    pub fn stat(&self) -> Option<StatFields> {
        match self {
            EntryRef::Text(e) => e.stat,
            EntryRef::Compact(e) => e.stat(),
        }
    }

    /// The `stat` fields, else the `lstat` ones.
    pub fn stat_or_lstat(&self) -> StatFields {
        match self {
            EntryRef::Text(e) => e.stat.unwrap_or(e.lstat),
            EntryRef::Compact(e) => e.stat_or_lstat(),
        }
    }

    /// The file size (from `stat`, else `lstat`).
    pub fn size(&self) -> u64 {
        match self {
            EntryRef::Text(e) => e.size(),
            EntryRef::Compact(e) => e.size(),
        }
    }

    /// Whether the entry has a layout (regular files).
    pub fn has_layout(&self) -> bool {
        match self {
            EntryRef::Text(e) => e.layout.is_some(),
            EntryRef::Compact(e) => e.has_layout(),
        }
    }

    /// The layout lines (none without a layout).
    pub fn lines(&self) -> LineIter<'a> {
        match self {
            EntryRef::Text(e) => LineIter::Text(e.layout.as_deref().unwrap_or_default().iter()),
            EntryRef::Compact(e) => LineIter::Compact(e.lines()),
        }
    }

    /// The layout rebuilt from the lines ([`CatalogEntry::object_layout`]); `None` for
    /// non-regular files. Allocates the layout (and its copy of the path).
    pub fn object_layout(&self) -> Option<ObjectLayout> {
        match self {
            EntryRef::Text(e) => e.object_layout(),
            EntryRef::Compact(e) => e.object_layout(),
        }
    }

    /// The entry as an owned [`CatalogEntry`].
    pub fn to_entry(&self) -> CatalogEntry {
        match self {
            EntryRef::Text(e) => (*e).clone(),
            EntryRef::Compact(e) => e.to_entry(),
        }
    }
}

/// The layout lines of an [`EntryRef`].
#[derive(Debug, Clone)]
pub enum LineIter<'a> {
    /// A text entry's lines.
    Text(std::slice::Iter<'a, LayoutLine>),
    /// A compact entry's runs, expanded.
    Compact(CompactLines<'a>),
}

impl Iterator for LineIter<'_> {
    type Item = LayoutLine;

    fn next(&mut self) -> Option<LayoutLine> {
        match self {
            LineIter::Text(it) => it.next().copied(),
            LineIter::Compact(it) => it.next(),
        }
    }
}
