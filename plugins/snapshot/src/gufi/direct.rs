//! The `gufi` source's direct path: a `db.db`'s `entries` rows and the directory's own
//! `summary` row read with [`super::pages`] instead of SQLite. A database is checked whole
//! (every record of `entries` decoded) before anything of it is emitted, so a database this
//! path cannot read goes to SQLite with nothing sent twice.

use std::cell::RefCell;
use std::io::Read;
use std::path::Path;
use std::rc::Rc;

use rusqlite::types::ValueRef;

use super::pages::{columns, record, DbFile, Projection};

/// The columns of `entries` the source reads, in the order of [`super::COLUMNS`].
const ENTRY_COLUMNS: [&str; 10] = ["name", "type", "mode", "uid", "gid", "size", "atime", "ctime", "mtime", "inode"];

/// The largest `db.db` read whole; a larger one is read by SQLite, page by page.
const MAX_BYTES: u64 = 64 << 20;

/// The summary columns after the constant name and type.
const SUMMARY_COLUMNS: [&str; 8] = ["mode", "uid", "gid", "size", "atime", "ctime", "mtime", "inode"];

/// Where the read columns are in a pair of `entries` and `summary` schemas.
struct Layout {
    entries: Projection,
    summary: Projection,
    /// The value of the summary column that marks the directory's own row (the projection's
    /// ninth slot): `isroot = 1`, or `rectype = 0` before GUFI 0.5.
    own_row: i64,
}

/// The positions of `names` among the columns of the table `sql` creates.
fn positions<const N: usize>(sql: &str, names: [&str; N], what: &str) -> Result<[usize; N], String> {
    let columns = columns(sql).ok_or_else(|| format!("{what}: a schema this reader leaves to SQLite"))?;
    let mut out = [0usize; N];
    for (slot, name) in out.iter_mut().zip(names) {
        *slot = columns.iter().position(|(c, _)| c == name).ok_or_else(|| format!("{what}: no column {name}"))?;
    }
    Ok(out)
}

/// Whether column `name` of the table `sql` creates has INTEGER affinity (a declared type
/// with `INT`), so that `name = 1` compares numbers only.
fn integer_affinity(sql: &str, name: &str) -> bool {
    columns(sql).is_some_and(|c| c.iter().any(|(n, t)| n == name && t.contains("INT")))
}

impl Layout {
    fn of(entries_sql: &str, summary_sql: &str) -> Result<Layout, String> {
        let entries = positions(entries_sql, ENTRY_COLUMNS, "entries")?;
        let s = positions(summary_sql, SUMMARY_COLUMNS, "summary")?;
        let (marker, own_row, name) =
            match (positions(summary_sql, ["isroot"], "summary"), positions(summary_sql, ["rectype"], "summary")) {
                (Ok([c]), _) => (c, 1, "isroot"),
                (Err(_), Ok([c])) => (c, 0, "rectype"),
                (Err(e), Err(_)) => return Err(format!("{e} (nor rectype)")),
            };
        if !integer_affinity(summary_sql, name) {
            return Err(format!("summary: {name} is not an integer column"));
        }
        Ok(Layout {
            entries: Projection::new(&entries),
            summary: Projection::new(&[s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], marker]),
            own_row,
        })
    }

    /// The layout of these schemas, from the few this thread has seen (an index's databases
    /// share their schema; every statement of each is parsed once).
    fn cached(entries_sql: &str, summary_sql: &str) -> Result<Rc<Layout>, String> {
        type Seen = Vec<(Box<str>, Box<str>, Result<Rc<Layout>, String>)>;
        thread_local! {
            static SEEN: RefCell<Seen> = const { RefCell::new(Vec::new()) };
        }
        SEEN.with(|seen| {
            let mut seen = seen.borrow_mut();
            if let Some((_, _, l)) = seen.iter().find(|(e, s, _)| **e == *entries_sql && **s == *summary_sql) {
                return l.clone();
            }
            let l = Layout::of(entries_sql, summary_sql).map(Rc::new);
            if seen.len() >= 16 {
                seen.drain(..1);
            }
            seen.push((entries_sql.into(), summary_sql.into(), l.clone()));
            l
        })
    }
}

thread_local! {
    /// The last database's bytes, reused for the next one read on this thread.
    static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A `db.db` read into memory and checked.
pub(super) struct DirectDb {
    file: Option<DbFile>,
    entries_root: u32,
    summary_root: u32,
    layout: Rc<Layout>,
}

impl DirectDb {
    /// Read and check the database at `db`.
    pub fn open(db: &Path) -> Result<DirectDb, String> {
        let mut data = BUFFER.take();
        data.clear();
        let read = std::fs::File::open(db).and_then(|mut f| {
            let len = f.metadata()?.len();
            if len > MAX_BYTES {
                return Err(std::io::Error::other(format!("{len} bytes: larger than this reader takes")));
            }
            f.read_to_end(&mut data)
        });
        if let Err(e) = read {
            BUFFER.set(data);
            return Err(e.to_string());
        }
        DirectDb::from_bytes(data)
    }

    /// Check the database held in `data`.
    pub fn from_bytes(data: Vec<u8>) -> Result<DirectDb, String> {
        let file = DbFile::parse(data)?;
        let [entries, summary] = file.tables(["entries", "summary"])?;
        let (entries_root, entries_sql) = entries.ok_or("no entries table")?;
        let (summary_root, summary_sql) = summary.ok_or("no summary table")?;
        let layout = Layout::cached(&entries_sql, &summary_sql)?;
        // Every record of both tables decodes, so that nothing fails once emitting has begun.
        file.scan(entries_root, &mut |payload| record(payload, &layout.entries, &mut [ValueRef::Null; 10]))?;
        file.scan(summary_root, &mut |payload| record(payload, &layout.summary, &mut [ValueRef::Null; 9]))?;
        Ok(DirectDb { file: Some(file), entries_root, summary_root, layout })
    }

    fn file(&self) -> Result<&DbFile, String> {
        self.file.as_ref().ok_or_else(|| "closed".to_string())
    }

    /// Each row of `entries` in rowid order (as SQLite scans it), as the values of
    /// [`super::COLUMNS`].
    pub fn entries(&self, f: &mut dyn FnMut(&[ValueRef<'_>])) -> Result<(), String> {
        self.file()?.scan(self.entries_root, &mut |payload| {
            let mut row = [ValueRef::Null; 10];
            record(payload, &self.layout.entries, &mut row)?;
            f(&row);
            Ok(())
        })
    }

    /// The directory's own summary row (the first whose `isroot` is 1, or `rectype` 0), as
    /// the values of [`super::COLUMNS`] with name and type `d`; `None` when there is none.
    pub fn own_summary<T>(&self, f: impl FnOnce(&[ValueRef<'_>]) -> T) -> Result<Option<T>, String> {
        let (mut f, mut out) = (Some(f), None);
        let wanted = self.layout.own_row;
        // Stop at the first match: an error is how the scan is cut short.
        const FOUND: &str = "\u{0}found";
        let scanned = self.file()?.scan(self.summary_root, &mut |payload| {
            // The eight columns, then the marker.
            let mut v = [ValueRef::Null; 9];
            record(payload, &self.layout.summary, &mut v)?;
            // `WHERE isroot = 1` on an INTEGER-affinity column: integers and reals compare
            // by value, text and blobs never equal a number, NULL matches nothing.
            let hit = match v[8] {
                ValueRef::Integer(i) => i == wanted,
                ValueRef::Real(r) => r == wanted as f64,
                _ => false,
            };
            if !hit {
                return Ok(());
            }
            let row = [ValueRef::Text(b"d"), ValueRef::Text(b"d"), v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]];
            if let Some(f) = f.take() {
                out = Some(f(&row));
            }
            Err(FOUND.into())
        });
        match scanned {
            Err(e) if e != FOUND => Err(e),
            _ => Ok(out),
        }
    }
}

impl Drop for DirectDb {
    fn drop(&mut self) {
        // Kept for the next database unless it was a large one.
        if let Some(bytes) = self.file.take().map(DbFile::into_bytes).filter(|b| b.capacity() <= 1 << 20) {
            BUFFER.set(bytes);
        }
    }
}
