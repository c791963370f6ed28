//! What the index holds, by path: in memory (a sorted map and each inode's names), or in a
//! SQLite file whose page cache (least recently used pages evicted) bounds the memory it
//! takes. The file is working space, made anew at each start from the entries files (the
//! durable record); a failure to read or write it stops the batch before anything of it is
//! delivered or recorded.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use lru::LruCache;
use rusqlite::{params, Connection, OptionalExtension};

use crate::store::entries_log::{EntriesView, Fields};
use crate::store::names::{InodeNames, Name};
use crate::store::print::{print_of, Print};
use crate::LocalError;

/// Paths and fingerprints, in path order.
pub(crate) enum EntryStore {
    /// `bytes`: the approximate heap bytes, kept as entries come and go.
    Memory {
        map: BTreeMap<Name, Print>,
        by_ino: InodeNames,
        bytes: usize,
    },
    Disk(DiskEntries),
}

/// Entries in a SQLite file.
pub(crate) struct DiskEntries {
    conn: Connection,
    path: PathBuf,
    len: usize,
    /// The first error met (the batch fails with it).
    failed: std::cell::RefCell<Option<String>>,
    /// What the file holds (or not) at the paths read or written last: a compare reads its
    /// path and the directory above it, and the next batch often the same paths again.
    recent: std::cell::RefCell<LruCache<Name, Option<Print>>>,
}

/// Paths whose entry (or its absence) the file store keeps in memory, at most (about 150
/// bytes each).
const RECENT: usize = 8192;

const SCHEMA: &str = "CREATE TABLE entries(path TEXT PRIMARY KEY, ino INTEGER, size INTEGER, mtime INTEGER, ctime INTEGER, dir INTEGER, mode INTEGER, uid INTEGER, gid INTEGER, acl INTEGER) WITHOUT ROWID;
CREATE INDEX entries_ino ON entries(ino) WHERE dir = 0 AND ino != 0;";

/// The columns of a fingerprint, in [`print_from`]'s order.
macro_rules! columns {
    () => {
        "ino, size, mtime, ctime, dir, mode, uid, gid, acl"
    };
}

const GET: &str = concat!("SELECT ", columns!(), " FROM entries WHERE path = ?1");
const INSERT: &str =
    concat!("INSERT OR IGNORE INTO entries(path, ", columns!(), ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
const DELETE: &str = concat!("DELETE FROM entries WHERE path = ?1 RETURNING ", columns!());
const EACH: &str = concat!("SELECT path, ", columns!(), " FROM entries ORDER BY path");
/// Below a directory: from its start or after a path, and up to its end (none: the root).
const BELOW: [&str; 4] = [
    concat!("SELECT path, ", columns!(), " FROM entries WHERE path >= ?1 AND path < ?2 ORDER BY path LIMIT ?3"),
    concat!("SELECT path, ", columns!(), " FROM entries WHERE path > ?1 AND path < ?2 ORDER BY path LIMIT ?3"),
    concat!("SELECT path, ", columns!(), " FROM entries WHERE path >= ?1 AND ?2 IS NULL ORDER BY path LIMIT ?3"),
    concat!("SELECT path, ", columns!(), " FROM entries WHERE path > ?1 AND ?2 IS NULL ORDER BY path LIMIT ?3"),
];

fn print_from(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Print> {
    // u64 fields are stored as their i64 bit patterns.
    Ok(Print {
        ino: r.get::<_, i64>(at)? as u64,
        size: r.get::<_, i64>(at + 1)? as u64,
        mtime: r.get(at + 2)?,
        ctime: r.get(at + 3)?,
        dir: r.get(at + 4)?,
        mode: r.get(at + 5)?,
        uid: r.get(at + 6)?,
        gid: r.get(at + 7)?,
        acl: r.get::<_, i64>(at + 8)? as u64,
    })
}

/// An in-memory entry's approximate heap bytes: its path, the map's node share, its print.
fn entry_bytes(path: &str) -> usize {
    path.len() + 64
}

/// The first path after every path below `below` (`dir/` + 1: `dir0`).
fn past(below: &str) -> Option<String> {
    below.strip_suffix('/').map(|d| format!("{d}0"))
}

impl DiskEntries {
    fn open(path: &Path, cache_mb: usize) -> Result<DiskEntries, LocalError> {
        let fail = |e: rusqlite::Error| LocalError::Checkpoint(format!("{}: {e}", path.display()));
        for stale in [path.to_path_buf(), path.with_extension("sqlite-journal")] {
            if let Err(e) = std::fs::remove_file(&stale) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(LocalError::Io { what: format!("removing {}", stale.display()), source: e });
                }
            }
        }
        let conn = Connection::open(path).map_err(fail)?;
        let pragmas = format!(
            "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA locking_mode=EXCLUSIVE; PRAGMA cache_size=-{};",
            cache_mb.max(1) * 1024
        );
        conn.execute_batch(&pragmas).map_err(fail)?;
        // The bundled SQLite has STAT4, under which a statement whose plan may depend on a
        // bound value (a range of paths) is prepared again at its first step after each new
        // binding (sqlite3_prepare_v2, "the specific value bound to a host parameter in the
        // WHERE clause might influence the choice of query plan"): most of the cost of a
        // compare. The planner's stability guarantee keeps one plan (SQLITE_DBCONFIG_ENABLE_QPSG,
        // sqlite3_db_config): the primary key's range.
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true).map_err(fail)?;
        conn.execute_batch(SCHEMA).map_err(fail)?;
        let recent = LruCache::new(std::num::NonZeroUsize::new(RECENT).unwrap_or(std::num::NonZeroUsize::MIN));
        Ok(DiskEntries { conn, path: path.to_path_buf(), len: 0, failed: Default::default(), recent: recent.into() })
    }

    fn note<T>(&self, r: rusqlite::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                // What was kept may not be what the file holds.
                self.recent.borrow_mut().clear();
                let mut failed = self.failed.borrow_mut();
                if failed.is_none() {
                    *failed = Some(format!("{}: {e}", self.path.display()));
                }
                None
            }
        }
    }

    fn get(&self, rel: &str) -> rusqlite::Result<Option<Print>> {
        if let Some(p) = self.recent.borrow_mut().get(rel) {
            return Ok(*p);
        }
        let mut st = self.conn.prepare_cached(GET)?;
        let p = st.query_row(params![rel], |r| print_from(r, 0)).optional()?;
        self.recent.borrow_mut().put(rel.into(), p);
        Ok(p)
    }

    /// Whether `rel` is new.
    fn put(&self, rel: &str, p: &Print) -> rusqlite::Result<bool> {
        let values =
            params![rel, p.ino as i64, p.size as i64, p.mtime, p.ctime, p.dir, p.mode, p.uid, p.gid, p.acl as i64];
        let mut st = self.conn.prepare_cached(INSERT)?;
        let new = st.execute(values)? == 1;
        self.recent.borrow_mut().put(rel.into(), Some(*p));
        if new {
            return Ok(true);
        }
        let mut st = self.conn.prepare_cached(
            "UPDATE entries SET ino = ?2, size = ?3, mtime = ?4, ctime = ?5, dir = ?6, mode = ?7, uid = ?8, gid = ?9, acl = ?10 WHERE path = ?1",
        )?;
        st.execute(values)?;
        Ok(false)
    }

    fn delete(&self, rel: &str) -> rusqlite::Result<Option<Print>> {
        let mut st = self.conn.prepare_cached(DELETE)?;
        let old = st.query_row(params![rel], |r| print_from(r, 0)).optional()?;
        self.recent.borrow_mut().put(rel.into(), None);
        Ok(old)
    }

    fn below(&self, below: &str, after: Option<&str>, limit: usize) -> rusqlite::Result<Vec<(Name, Print)>> {
        let from = after.unwrap_or(below);
        let upper = past(below);
        let sql = BELOW[usize::from(after.is_some()) + 2 * usize::from(upper.is_none())];
        let mut st = self.conn.prepare_cached(sql)?;
        let rows = st.query_map(params![from, upper, limit as i64], |r| {
            Ok((Name::from(r.get::<_, String>(0)?), print_from(r, 1)?))
        })?;
        rows.collect()
    }

    fn names_of(&self, ino: u64) -> rusqlite::Result<Vec<Name>> {
        let mut st = self.conn.prepare_cached("SELECT path FROM entries WHERE ino = ?1 AND dir = 0 AND ino != 0")?;
        let rows = st.query_map(params![ino as i64], |r| Ok(Name::from(r.get::<_, String>(0)?)))?;
        rows.collect()
    }

    fn each(&self, f: &mut dyn FnMut(&str, Fields) -> std::io::Result<()>) -> std::io::Result<()> {
        let other = |e: rusqlite::Error| std::io::Error::other(format!("{}: {e}", self.path.display()));
        let mut st = self.conn.prepare_cached(EACH).map_err(other)?;
        let mut rows = st.query([]).map_err(other)?;
        while let Some(r) = rows.next().map_err(other)? {
            let path: String = r.get(0).map_err(other)?;
            f(&path, print_from(r, 1).map_err(other)?.into())?;
        }
        Ok(())
    }
}

impl EntryStore {
    /// Every entry in memory.
    pub(crate) fn memory() -> EntryStore {
        EntryStore::Memory { map: BTreeMap::new(), by_ino: InodeNames::default(), bytes: 0 }
    }

    /// Entries in the SQLite file `path` (made anew), `cache_mb` MiB of its pages cached.
    pub(crate) fn on_disk(path: &Path, cache_mb: usize) -> Result<EntryStore, LocalError> {
        Ok(EntryStore::Disk(DiskEntries::open(path, cache_mb)?))
    }

    /// The error that failed an operation since the last call, if any (the batch must fail).
    pub(crate) fn take_error(&mut self) -> Option<LocalError> {
        match self {
            EntryStore::Memory { .. } => None,
            EntryStore::Disk(d) => d.failed.take().map(LocalError::Checkpoint),
        }
    }

    /// What the index holds at `rel`.
    pub(crate) fn get(&self, rel: &str) -> Option<Print> {
        match self {
            EntryStore::Memory { map, .. } => map.get(rel).copied(),
            EntryStore::Disk(d) => {
                let r = d.get(rel);
                d.note(r).flatten()
            }
        }
    }

    /// Whether the index holds `rel`.
    pub(crate) fn contains_key(&self, rel: &str) -> bool {
        self.get(rel).is_some()
    }

    /// The index holds `p` at `rel`: the key as kept (shared with the map's).
    pub(crate) fn insert(&mut self, rel: Name, p: Print) -> Name {
        match self {
            EntryStore::Memory { map, by_ino, bytes } => {
                let key = map.get_key_value(&*rel).map_or(rel, |(k, _)| k.clone());
                let old = map.insert(key.clone(), p);
                if old.is_none() {
                    *bytes += entry_bytes(&key);
                }
                if let Some(o) = old.filter(|o| !o.dir) {
                    by_ino.remove(o.ino, &key);
                }
                // Inode 0: a placeholder for a journaled path (no inode known), nobody's other name.
                if !p.dir && p.ino != 0 {
                    by_ino.add(p.ino, key.clone());
                }
                key
            }
            EntryStore::Disk(d) => {
                let r = d.put(&rel, &p);
                if d.note(r) == Some(true) {
                    d.len += 1;
                }
                rel
            }
        }
    }

    /// The index no longer holds `rel`: what it held.
    pub(crate) fn remove(&mut self, rel: &str) -> Option<Print> {
        match self {
            EntryStore::Memory { map, by_ino, bytes } => {
                let old = map.remove(rel)?;
                *bytes -= entry_bytes(rel);
                if !old.dir {
                    by_ino.remove(old.ino, rel);
                }
                Some(old)
            }
            EntryStore::Disk(d) => {
                let r = d.delete(rel);
                let old = d.note(r).flatten();
                if old.is_some() {
                    d.len -= 1;
                }
                old
            }
        }
    }

    /// At most `limit` entries strictly below `dir` (everything, for the root), in path order,
    /// after `after` when given.
    pub(crate) fn below(&self, dir: &str, after: Option<&str>, limit: usize) -> Vec<(Name, Print)> {
        let below = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        // A position before the range is its start.
        let after = after.filter(|a| *a >= below.as_str());
        match self {
            EntryStore::Memory { map, .. } => {
                let from = after.map_or(Bound::Included(below.as_str()), Bound::Excluded);
                map.range::<str, _>((from, Bound::Unbounded))
                    .take_while(|(k, _)| k.starts_with(&below))
                    .take(limit)
                    .map(|(k, p)| (k.clone(), *p))
                    .collect()
            }
            EntryStore::Disk(d) => {
                let r = d.below(&below, after, limit);
                d.note(r).unwrap_or_default()
            }
        }
    }

    /// The names the index holds for file inode `ino`.
    pub(crate) fn names_of(&self, ino: u64) -> Vec<Name> {
        match self {
            EntryStore::Memory { by_ino, .. } => by_ino.get(ino).to_vec(),
            EntryStore::Disk(d) => {
                let r = d.names_of(ino);
                d.note(r).unwrap_or_default()
            }
        }
    }

    /// Writes until [`EntryStore::commit`] go together (one transaction on disk: a batch's
    /// writes are not each their own).
    pub(crate) fn begin(&mut self) {
        if let EntryStore::Disk(d) = self {
            if d.conn.is_autocommit() {
                let r = d.conn.execute_batch("BEGIN");
                d.note(r);
            }
        }
    }

    /// The writes since [`EntryStore::begin`] are done.
    pub(crate) fn commit(&mut self) {
        if let EntryStore::Disk(d) = self {
            if !d.conn.is_autocommit() {
                let r = d.conn.execute_batch("COMMIT");
                d.note(r);
            }
        }
    }

    /// Paths held.
    pub(crate) fn len(&self) -> usize {
        match self {
            EntryStore::Memory { map, .. } => map.len(),
            EntryStore::Disk(d) => d.len,
        }
    }

    /// Approximate bytes of memory the entries take (on disk: what the page cache may take).
    pub(crate) fn approx_bytes(&self) -> usize {
        match self {
            EntryStore::Memory { bytes, .. } => *bytes,
            EntryStore::Disk(d) => {
                let pages: i64 = d.conn.query_row("PRAGMA cache_size", [], |r| r.get(0)).unwrap_or(0);
                (-pages).max(0) as usize * 1024
            }
        }
    }

    /// The file's table goes (tests: every later read or write fails).
    #[cfg(test)]
    pub(crate) fn break_for_tests(&self) {
        if let EntryStore::Disk(d) = self {
            let _ = d.conn.execute_batch("DROP TABLE entries");
        }
    }

    /// Every path held, in order (tests).
    #[cfg(test)]
    pub(crate) fn keys(&self) -> Vec<Name> {
        self.below("", None, usize::MAX).into_iter().map(|(k, _)| k).collect()
    }

    /// Every entry, in order (tests).
    #[cfg(test)]
    pub(crate) fn rows(&self) -> Vec<(Name, Print)> {
        self.below("", None, usize::MAX)
    }

    /// Load rows read from the entries files (a `None` removes).
    pub(crate) fn load(&mut self, rel: String, fields: Option<Fields>) {
        match fields {
            Some(f) => {
                self.insert(rel.into(), print_of(f));
            }
            None => {
                self.remove(&rel);
            }
        }
    }
}

impl EntriesView for EntryStore {
    fn count(&self) -> usize {
        self.len()
    }

    fn each(&self, f: &mut dyn FnMut(&str, Fields) -> std::io::Result<()>) -> std::io::Result<()> {
        match self {
            EntryStore::Memory { map, .. } => map.iter().try_for_each(|(k, p)| f(k, (*p).into())),
            EntryStore::Disk(d) => d.each(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random inserts, replacements and removals (hard links, directories, placeholders) on
    /// both stores: every answer the same, over many seeds.
    #[test]
    fn the_file_store_answers_as_the_memory_store_does() {
        let first = std::env::var("ICICLE_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| icicle_core::rng::Rng::new(std::process::id() as u64).next_u64());
        let dir = tempfile::tempdir().unwrap();
        for run in 0..20u64 {
            let seed = first.wrapping_add(run);
            let mut rng = icicle_core::rng::Rng::new(seed);
            let (mut mem, mut disk) =
                (EntryStore::memory(), EntryStore::on_disk(&dir.path().join(format!("{run}.sqlite")), 1).unwrap());
            let path = |rng: &mut icicle_core::rng::Rng| -> String {
                let depth = 1 + rng.below(3);
                (0..depth)
                    .map(|_| ["a", "a.b", "a0", "b", "é", "a/"][rng.below(5) as usize].to_string())
                    .collect::<Vec<_>>()
                    .join("/")
            };
            for op in 0..600 {
                let p = path(&mut rng);
                let ctx = format!("seed {seed} (ICICLE_TEST_SEED replays) op {op} path {p}");
                match rng.below(4) {
                    0 => assert_eq!(mem.remove(&p), disk.remove(&p), "{ctx}"),
                    _ => {
                        let dir = rng.below(3) == 0;
                        let ino = if dir { 1000 + rng.below(50) } else { rng.below(12) };
                        let pr = Print {
                            ino,
                            size: rng.below(9),
                            mtime: -(rng.below(3) as i64),
                            ctime: 7,
                            dir,
                            mode: 0o644,
                            uid: 1,
                            gid: 2,
                            acl: u64::MAX - rng.below(2),
                        };
                        assert_eq!(mem.insert(p.clone().into(), pr), disk.insert(p.clone().into(), pr), "{ctx}");
                    }
                }
                assert_eq!(mem.len(), disk.len(), "{ctx}");
                let q = path(&mut rng);
                assert_eq!(mem.get(&q), disk.get(&q), "{ctx} get {q}");
                let (limit, after) = (1 + rng.below(4) as usize, rng.below(2) == 0);
                let after = after.then(|| path(&mut rng));
                for d in ["", "a", "a/a", q.as_str()] {
                    assert_eq!(
                        mem.below(d, after.as_deref(), limit),
                        disk.below(d, after.as_deref(), limit),
                        "{ctx} below {d} after {after:?}"
                    );
                }
                let ino = rng.below(12);
                let (mut m, mut f) = (mem.names_of(ino), disk.names_of(ino));
                m.sort();
                f.sort();
                assert_eq!(m, f, "{ctx} names of {ino}");
            }
            assert_eq!(mem.rows(), disk.rows(), "seed {seed}");
            // The memory store's running byte count is what a count from scratch gives.
            assert_eq!(mem.approx_bytes(), mem.keys().iter().map(|k| entry_bytes(k)).sum::<usize>(), "seed {seed}");
            let (mut m, mut f) = (Vec::new(), Vec::new());
            for (store, out) in [(&mem, &mut m), (&disk, &mut f)] {
                store
                    .each(&mut |k, r| {
                        out.push((k.to_string(), r));
                        Ok(())
                    })
                    .unwrap();
            }
            assert_eq!(m, f, "seed {seed}");
            assert!(disk.take_error().is_none());
        }
    }

    /// A compare's lookups keep their prepared statements: a range of paths bound anew each
    /// time is not planned again (STAT4 would, at every step after a new binding, without the
    /// planner's stability guarantee), and the paths read last are answered from memory.
    #[test]
    fn lookups_are_not_prepared_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut disk = EntryStore::on_disk(&dir.path().join("p.sqlite"), 1).unwrap();
        let file = Print { ino: 1, size: 1, mtime: 1, ctime: 1, dir: false, mode: 0o644, uid: 0, gid: 0, acl: 0 };
        for i in 0..200 {
            disk.insert(format!("d{}/f{i}", i % 7).into(), Print { ino: i, ..file });
        }
        for i in 0..200 {
            assert_eq!(
                disk.below(&format!("d{}", i % 9), None, 1 + i % 3).len(),
                if i % 9 < 7 { 1 + i % 3 } else { 0 }
            );
            assert_eq!(disk.below(&format!("d{}/f{i}", i % 7), None, 1).len(), 0);
            assert_eq!(disk.get(&format!("d{}/f{i}", i % 7)).map(|p| p.ino), Some(i as u64));
        }
        let EntryStore::Disk(d) = &disk else { unreachable!() };
        let reprepared = d.conn.prepare_cached(BELOW[0]).unwrap().get_status(rusqlite::StatementStatus::RePrepare);
        assert_eq!(reprepared, 0);
        assert!(d.recent.borrow().len() >= 200);
        assert!(disk.take_error().is_none());
    }

    /// A file store that can no longer be written reports it (the batch fails, naming the
    /// file) rather than answering as if the entry were absent.
    #[test]
    fn a_failing_file_store_reports_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m.sqlite");
        let mut disk = EntryStore::on_disk(&file, 1).unwrap();
        disk.break_for_tests();
        assert_eq!(disk.get("a"), None);
        let e = disk.take_error().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("m.sqlite") && e.contains("no such table"), "{e}");
        assert!(disk.take_error().is_none(), "reported once");
    }
}
