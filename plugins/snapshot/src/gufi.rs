//! `gufi`: read a GUFI index: one `db.db` per directory, `entries` holding the directory's
//! files and links. Only `entries` is read, never `pentries_rollup`, so rolled-up indexes are
//! not double counted. Each database is read from its pages ([`pages`], [`direct`]); one that
//! path does not expect is read through SQLite.

mod direct;
mod pages;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use icicle_core::record::{FileKind, FileRecord, OwnedFileRecord, Reject};
use icicle_core::registry::{BuildContext, ComponentConfig};
use icicle_core::scope::Scope;
use icicle_core::traits::{RowSink, Split};
use icicle_core::Attrs;
use icicle_core::{ConfigError, Source, SourceError};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde::Deserialize;

use crate::fields::parse_inode;

/// GUFI's per-directory database name.
pub const DBNAME: &str = "db.db";

/// `[sources.<id>] type = "gufi"`.
#[derive(Debug, Deserialize)]
pub struct GufiConfig {
    /// The index directory (the `GUFI_tree_parent` given to `gufi_dir2index`).
    pub index: PathBuf,
    /// The source path that the index directory stands for (default `/`).
    #[serde(default = "root")]
    pub path_prefix: String,
    /// Read each `db.db` from its pages (default), falling back to SQLite for a database that
    /// reader does not expect; `false`: every database through SQLite.
    #[serde(default = "yes")]
    pub direct: bool,
}

fn yes() -> bool {
    true
}

fn root() -> String {
    "/".into()
}

/// The `gufi` source.
pub struct GufiSource {
    index: PathBuf,
    path_prefix: String,
    direct: bool,
}

impl GufiSource {
    /// A source over the index at `index`, mapping it to `path_prefix`.
    pub fn new(index: PathBuf, path_prefix: String) -> GufiSource {
        GufiSource { index, path_prefix, direct: true }
    }

    /// Whether each `db.db` is read from its pages first (see [`GufiConfig::direct`]).
    pub fn with_direct(mut self, direct: bool) -> GufiSource {
        self.direct = direct;
        self
    }

    /// The source path of index directory `dir` (names as bytes, escaped as every source
    /// escapes them: [`icicle_core::name`]).
    fn source_dir(&self, dir: &Path) -> Result<String, String> {
        let rel = dir.strip_prefix(&self.index).map_err(|_| "directory outside the index".to_string())?;
        Ok(self.source_path(&icicle_core::name::from_os(rel)))
    }

    /// The source path of `rel`, a directory relative to the index.
    fn source_path(&self, rel: &str) -> String {
        let mut s = self.path_prefix.trim_end_matches('/').to_string();
        if !rel.is_empty() {
            s.push('/');
            s.push_str(rel);
        }
        if s.is_empty() {
            s.push('/');
        }
        s
    }
}

/// SQLite's unix VFS refuses paths of 512 bytes or more, which deep indexes exceed: such a
/// `db.db` is read from a temporary copy (removed on drop).
struct ShortPath {
    original: PathBuf,
    copy: Option<PathBuf>,
}

impl ShortPath {
    fn for_db(db: &Path) -> std::io::Result<ShortPath> {
        if db.as_os_str().len() < 500 {
            return Ok(ShortPath { original: db.to_path_buf(), copy: None });
        }
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let copy = std::env::temp_dir().join(format!("icicle-gufi-{}-{n}.db", std::process::id()));
        std::fs::copy(db, &copy)?;
        Ok(ShortPath { original: db.to_path_buf(), copy: Some(copy) })
    }

    fn path(&self) -> &Path {
        self.copy.as_deref().unwrap_or(&self.original)
    }
}

impl Drop for ShortPath {
    fn drop(&mut self) {
        if let Some(c) = &self.copy {
            let _ = std::fs::remove_file(c);
        }
    }
}

/// A `file:` URI for `path` with `mode=ro&immutable=1`, percent-encoding what URIs reserve.
fn sqlite_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?mode=ro&immutable=1");
    uri
}

fn int(v: ValueRef<'_>, col: &str) -> Result<i64, String> {
    match v {
        ValueRef::Integer(i) => Ok(i),
        // Only integers a double holds exactly (|x| <= 2^53): `1e300` is not a size.
        ValueRef::Real(f) if f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_992.0 => Ok(f as i64),
        ValueRef::Real(f) => Err(format!("{col}: `{f:?}` is not an integer in range")),
        ValueRef::Text(t) => std::str::from_utf8(t)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("{col}: `{}` is not an integer", String::from_utf8_lossy(t))),
        ValueRef::Null => Err(format!("{col} is NULL")),
        other => Err(format!("{col}: unexpected {:?} value", other.data_type())),
    }
}

/// `entries.inode`: TEXT since GUFI 0.6.3, INT64 before; NULL is unknown (0).
fn inode(v: ValueRef<'_>) -> Result<u64, String> {
    match v {
        ValueRef::Null => Ok(0),
        ValueRef::Integer(i) => u64::try_from(i).map_err(|_| format!("inode: `{i}` is negative")),
        ValueRef::Real(f) if f.fract() == 0.0 && f >= 0.0 => Ok(f as u64),
        ValueRef::Real(f) => Err(format!("inode: `{f}` is not a non-negative integer")),
        ValueRef::Text(t) => parse_inode(t.trim_ascii(), "inode"),
        ValueRef::Blob(_) => Err("inode: unexpected Blob value".into()),
    }
}

/// A name as the file system has it: `gufi_dir2index` and `gufi_trace2index` store names,
/// link names and summary names escaped with `sqlite3_mprintf("%q")` (a `'` doubled) and
/// bind the result, so `it''s` in a database is the file `it's` (GUFI `src/dbutils.c`
/// `insertdbgo`, every release since the 2017 code drop). `%q` leaves only even runs of `'`:
/// a name with an odd run was not written that way and is kept as it is.
pub fn unescape_name(stored: &str) -> std::borrow::Cow<'_, str> {
    if !stored.contains("''") {
        return std::borrow::Cow::Borrowed(stored);
    }
    let odd_run = stored.split(|c| c != '\'').any(|run| run.len() % 2 == 1);
    if odd_run {
        std::borrow::Cow::Borrowed(stored)
    } else {
        std::borrow::Cow::Owned(stored.replace("''", "'"))
    }
}

/// A `db.db` held in `bytes`, read from its pages as the source reads it: each `entries`
/// row's path under `/d` or why it is rejected, then the directory's own summary row (`/d`)
/// if there is one; `Err` when the source would read it through SQLite instead. For fuzzing
/// and tests.
pub fn read_pages(bytes: Vec<u8>) -> Result<Vec<Result<String, String>>, String> {
    let db = direct::DirectDb::from_bytes(bytes)?;
    let mut out = Vec::new();
    let mut path = String::new();
    db.entries(&mut |row| out.push(parse_row(row, "/d", &mut path).map(|r| r.path.to_string())))?;
    if let Some(own) = db.own_summary(|row| owned_summary(row).map(|_| "/d".to_string()))? {
        out.push(own);
    }
    Ok(out)
}

/// A row's values by column position: an SQLite row, or the values the page reader decoded.
pub trait RowValues {
    /// The value of column `i`.
    fn value(&self, i: usize) -> Result<ValueRef<'_>, String>;
}

impl RowValues for rusqlite::Row<'_> {
    fn value(&self, i: usize) -> Result<ValueRef<'_>, String> {
        self.get_ref(i).map_err(|e| e.to_string())
    }
}

impl RowValues for [ValueRef<'_>] {
    fn value(&self, i: usize) -> Result<ValueRef<'_>, String> {
        self.get(i).copied().ok_or_else(|| format!("no column {i}"))
    }
}

/// The `name` of a row, unescaped; rejected when empty or holding a `/`. GUFI stores the
/// bytes `readdir` gave (TEXT, never checked as UTF-8): they are escaped as every source
/// escapes them ([`icicle_core::name`]).
fn row_name<R: RowValues + ?Sized>(row: &R) -> Result<String, String> {
    let name = match row.value(0)? {
        ValueRef::Text(t) | ValueRef::Blob(t) => t,
        ValueRef::Null => return Err("name is NULL".into()),
        _ => return Err("name is not text".into()),
    };
    let name = icicle_core::name::escape(name);
    if name.is_empty() || name.contains('/') {
        return Err(format!("invalid name {name:?}"));
    }
    Ok(unescape_name(&name).into_owned())
}

/// The path of entry `name` in directory `dir`.
fn join(dir: &str, name: &str, path: &mut String) {
    path.clear();
    path.push_str(dir);
    if !dir.ends_with('/') {
        path.push('/');
    }
    path.push_str(name);
}

/// The columns read from `entries` (and the summary's own row), unquoted so that a missing
/// one is an error for the database, not a string literal in every row.
pub const COLUMNS: &str = "name, type, mode, uid, gid, size, atime, ctime, mtime, inode";

/// Decode one row of [`COLUMNS`] into a record of directory `dir` (the path in `path`).
pub fn parse_row<'p, R: RowValues + ?Sized>(
    row: &R,
    dir: &str,
    path: &'p mut String,
) -> Result<FileRecord<'p>, String> {
    let name = row_name(row)?;
    let kind = match row.value(1)? {
        ValueRef::Text(b"f") => FileKind::File,
        ValueRef::Text(b"l") => FileKind::Link,
        ValueRef::Text(b"d") => FileKind::Dir,
        ValueRef::Text(t) => return Err(format!("type `{}` is not f, l or d", String::from_utf8_lossy(t))),
        _ => return Err("type is not text".into()),
    };
    let g = |i: usize, c: &str| row.value(i).and_then(|v| int(v, c));
    let mode = u32::try_from(g(2, "mode")?).map_err(|_| "mode out of range".to_string())?;
    let uid = u32::try_from(g(3, "uid")?).map_err(|_| "uid out of range".to_string())?;
    let gid = u32::try_from(g(4, "gid")?).map_err(|_| "gid out of range".to_string())?;
    let size = u64::try_from(g(5, "size")?).map_err(|_| "size is negative".to_string())?;
    let (atime, ctime, mtime) = (g(6, "atime")?, g(7, "ctime")?, g(8, "mtime")?);
    let inode = inode(row.value(9)?)?;
    join(dir, &name, path);
    Ok(FileRecord {
        path: path.as_str(),
        kind,
        attrs: Attrs { mode, uid, gid, size, atime, ctime, mtime, inode },
        storage: None,
    })
}

#[async_trait]
impl Source for GufiSource {
    async fn plan(&self) -> Result<Vec<Split>, SourceError> {
        if !self.index.is_dir() {
            return Err(SourceError::Io { path: self.index.clone(), reason: "not a directory".into() });
        }
        let mut out = Vec::new();
        let mut stack = vec![self.index.clone()];
        while let Some(dir) = stack.pop() {
            let rd =
                std::fs::read_dir(&dir).map_err(|e| SourceError::Io { path: dir.clone(), reason: e.to_string() })?;
            let mut subdirs = Vec::new();
            // An entry that cannot be read may be a directory whose databases would then be
            // missed, and their files deleted: planning fails instead.
            let fail =
                |e: std::io::Error| SourceError::Io { path: dir.clone(), reason: format!("listing the index: {e}") };
            for e in rd {
                let e = e.map_err(fail)?;
                if e.file_type().map_err(fail)?.is_dir() {
                    subdirs.push(e.path());
                }
            }
            subdirs.sort();
            stack.extend(subdirs.into_iter().rev());
            let scope = self.source_dir(&dir).ok().map(Scope::Children);
            out.push(Split {
                name: dir.join(DBNAME).display().to_string(),
                path: dir,
                range: None,
                weight: 1,
                scope,
                version: None,
            });
        }
        Ok(out)
    }

    fn read(&self, split: &Split, out: &mut dyn RowSink) -> Result<(), SourceError> {
        let db = split.path.join(DBNAME);
        let fail = |reason: String| SourceError::Io { path: db.clone(), reason };
        let dir = self.source_dir(&split.path).map_err(fail)?;
        let input = db.display().to_string();
        let children = Scope::Children(dir.clone());
        let mut path = String::with_capacity(256);
        if self.direct && split.path != self.index {
            match direct::DirectDb::open(&db) {
                Ok(d) => {
                    let mut rowno = 0u64;
                    let read = d.entries(&mut |row| {
                        rowno += 1;
                        emit_row(row, &dir, &mut path, &input, rowno, &children, out);
                    });
                    // Checked whole at open: a scan that fails now is a bug, not the file.
                    if let Err(e) = read {
                        return Err(fail(format!("read after its check: {e}")));
                    }
                    let own = d.own_summary(|row| owned_summary(row)).map_err(|e| e.to_string());
                    emit_summary(own, &input, &dir, false, false, || false, out);
                    out.progress(1);
                    return Ok(());
                }
                Err(e) => tracing::debug!(message = "db.db read through SQLite", input = %input, reason = %e),
            }
        }
        // Only now, for the database the page reader did not take (or a missing one): the
        // reader's own open tells a present database without a `stat` of its whole path.
        let present = db_present(&db).map_err(fail)?;
        if !present && split.path == self.index {
            out.progress(1);
            return Ok(());
        }
        if !present {
            // The index root's parent holds an empty db.db, but a directory in the tree
            // without one lost its metadata: that is a reject, not an empty directory.
            return Err(fail("missing db.db".into()));
        }
        let (_local, conn) = open_db(&db).map_err(fail)?;
        let mut stmt = match conn.prepare(&format!("SELECT {COLUMNS} FROM entries")) {
            Ok(s) => s,
            Err(e) => {
                // The empty db.db GUFI places in the index parent has no tables; anything
                // else without an `entries` table is not a GUFI database.
                let tables: i64 = conn
                    .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
                    .map_err(|e| fail(e.to_string()))?;
                if tables == 0 && split.path == self.index {
                    out.progress(1);
                    return Ok(());
                }
                return Err(fail(if tables == 0 {
                    "no `entries` table (not a GUFI index database)".to_string()
                } else {
                    format!("reading `entries`: {e}")
                }));
            }
        };
        let mut rows = stmt.query([]).map_err(|e| fail(e.to_string()))?;
        let mut rowno = 0u64;
        loop {
            let row = match rows.next() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    // The rest of the table is unreadable: the directory's entries are unknown.
                    out.reject(
                        Reject::at_row(&input, rowno + 1, format!("database error after {rowno} rows: {e}"))
                            .scoped(children.clone())
                            .unreadable(),
                    );
                    break;
                }
            };
            rowno += 1;
            emit_row(row, &dir, &mut path, &input, rowno, &children, out);
        }
        drop(rows);
        drop(stmt);
        self.read_summary(&conn, &input, &dir, split.path == self.index, false, out);
        out.progress(1);
        Ok(())
    }

    /// The directory's own summary row only (each directory has one database).
    fn read_directories(&self, split: &Split, out: &mut dyn RowSink) -> Result<(), SourceError> {
        let db = split.path.join(DBNAME);
        let fail = |reason: String| SourceError::Io { path: db.clone(), reason };
        let dir = self.source_dir(&split.path).map_err(fail)?;
        let input = db.display().to_string();
        if self.direct && split.path != self.index {
            if let Ok(d) = direct::DirectDb::open(&db) {
                let own = d.own_summary(|row| owned_summary(row)).map_err(|e| e.to_string());
                emit_summary(own, &input, &dir, false, true, || false, out);
                return Ok(());
            }
        }
        if !db_present(&db).map_err(fail)? {
            // As in `read`: only the index root may lack one.
            return if split.path == self.index { Ok(()) } else { Err(fail("missing db.db".into())) };
        }
        let (_local, conn) = open_db(&db).map_err(fail)?;
        self.read_summary(&conn, &input, &dir, split.path == self.index, true, out);
        Ok(())
    }
}

/// Whether `conn` holds no rows at all: no tables, or GUFI's template with empty `entries` and
/// `summary` (what `gufi_dir2index` leaves in the index parent).
fn is_empty_db(conn: &Connection) -> bool {
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).ok();
    match count("SELECT count(*) FROM sqlite_master WHERE type = 'table'") {
        Some(0) => true,
        Some(_) => count("SELECT (SELECT count(*) FROM entries) + (SELECT count(*) FROM summary)") == Some(0),
        None => false,
    }
}

/// Open `db` read-only (through a short path when it is deep); the guard must outlive the
/// connection.
fn open_db(db: &Path) -> Result<(ShortPath, Connection), String> {
    let local = ShortPath::for_db(db).map_err(|e| format!("copying a deep db.db: {e}"))?;
    // `immutable=1`: a snapshot index does not change while it is read, so SQLite can
    // skip locking and journal checks.
    let conn = Connection::open_with_flags(
        sqlite_uri(local.path()),
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
    )
    .map_err(|e| e.to_string())?;
    Ok((local, conn))
}

impl GufiSource {
    /// The directory's own row of `summary` (`isroot = 1`) as a directory record; rolled-up
    /// rows (`isroot = 0`) describe subdirectories, which have their own `db.db`.
    fn read_summary(
        &self,
        conn: &Connection,
        input: &str,
        dir: &str,
        is_index_root: bool,
        prepass: bool,
        out: &mut dyn RowSink,
    ) {
        // The path comes from the index tree on disk (real names): the row's name is unused.
        // GUFI before 0.5 has no `isroot` (and no rollups): there the directory's own row is
        // its one `rectype = 0` row (GUFI 0.4.0-rc1 and v0.1.0 `src/dbutils.c`, summary schema).
        let sql = "SELECT 'd' AS name, 'd' AS type, mode, uid, gid, size, atime, ctime, mtime, inode FROM summary WHERE isroot = 1 LIMIT 1";
        let old = "SELECT 'd' AS name, 'd' AS type, mode, uid, gid, size, atime, ctime, mtime, inode FROM summary WHERE rectype = 0 LIMIT 1";
        let res = conn
            .prepare(sql)
            .or_else(|_| conn.prepare(old))
            .and_then(|mut st| {
                let mut rows = st.query([])?;
                Ok(rows.next()?.map(owned_summary))
            })
            .map_err(|e| e.to_string());
        emit_summary(res, input, dir, is_index_root, prepass, || is_empty_db(conn), out);
    }
}

/// The directory's own summary row as a record (its path set by [`emit_summary`]).
fn owned_summary<R: RowValues + ?Sized>(row: &R) -> Result<OwnedFileRecord, String> {
    let mut path = String::new();
    parse_row(row, "/", &mut path).map(|r| r.to_owned_record())
}

/// One row of `entries` (the `rowno`-th of `input`) to `out`: a directory, a record, or a
/// reject scoped to its name (to the whole directory when the name cannot be read).
fn emit_row<R: RowValues + ?Sized>(
    row: &R,
    dir: &str,
    path: &mut String,
    input: &str,
    rowno: u64,
    children: &Scope,
    out: &mut dyn RowSink,
) {
    match parse_row(row, dir, path) {
        Ok(rec) if rec.kind == FileKind::Dir => out.directory(&rec),
        Ok(rec) => out.record(&rec),
        Err(reason) => {
            let scope = match row_name(row) {
                Ok(name) => {
                    let mut p = String::new();
                    join(dir, &name, &mut p);
                    Scope::Exact(p)
                }
                Err(_) => children.clone(),
            };
            out.reject(Reject::at_row(input, rowno, reason).scoped(scope))
        }
    }
}

/// The directory's own summary row, as read (`res`), to `out`: the directory record, or a
/// reject; in the directory pre-pass (`prepass`) a missing or bad row withholds the
/// directory's children (their chains fail closed). `is_empty` tells whether the database
/// holds no rows at all (only asked at the index root).
fn emit_summary(
    res: Result<Option<Result<OwnedFileRecord, String>>, String>,
    input: &str,
    dir: &str,
    is_index_root: bool,
    prepass: bool,
    is_empty: impl Fn() -> bool,
    out: &mut dyn RowSink,
) {
    match res {
        Ok(Some(Ok(mut rec))) => {
            rec.path = dir.to_string();
            rec.kind = FileKind::Dir;
            out.directory(&rec.as_record());
        }
        // In the directory pre-pass the directory's permissions are then unknown (its
        // chains fail closed); the main pass reports the row and withholds nothing.
        Ok(Some(Err(reason))) => out.reject(Reject::whole(
            input,
            format!("summary: {reason}"),
            prepass.then(|| Scope::Children(dir.to_string())),
        )),
        // The index parent's db.db (GUFI's empty template, or no tables at all) has no row;
        // at an index that is the tree itself, a root without one is damage, as anywhere.
        Ok(None) | Err(_) if is_index_root && (!prepass || is_empty()) => {}
        Ok(None) if prepass => out.reject(Reject::whole(
            input,
            "summary: no row of the directory itself",
            Some(Scope::Children(dir.to_string())),
        )),
        Err(e) if prepass => {
            out.reject(Reject::whole(input, format!("summary: {e}"), Some(Scope::Children(dir.to_string()))))
        }
        Ok(None) => {}
        Err(e) => tracing::debug!(message = "no directory summary", input = %input, error = %e),
    }
}

impl ComponentConfig for GufiConfig {
    type Component = Arc<dyn Source>;

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        if !self.path_prefix.starts_with('/') {
            return Err(ctx.invalid("path_prefix", "must be an absolute path"));
        }
        Ok(())
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn Source>, ConfigError> {
        self.validate(ctx)?;
        Ok(Arc::new(GufiSource::new(self.index, self.path_prefix).with_direct(self.direct)))
    }
}

/// Whether a directory's database is there; an error when that cannot be told (EACCES, EIO),
/// so its entries are unknown rather than absent.
fn db_present(db: &Path) -> Result<bool, String> {
    match std::fs::metadata(db) {
        Ok(md) => Ok(md.is_file()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("cannot be checked: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_names_and_inexact_reals() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!(
            "CREATE TABLE entries({COLUMNS});
             INSERT INTO entries VALUES ('it''''s', 'f', 33188, 1, 2, 3, 4, 5, 6, 7), ('big', 'f', 33188, 1, 2, 1e300, 4, 5, 6, 7),
               ('two.0', 'f', 33188, 1, 2, 2.0, 4, 5, 6, 7), ('''''''''', 'l', 41471, 1, 2, 3, 4, 5, 6, 7);"
        ))
        .unwrap();
        let mut st = conn.prepare(&format!("SELECT {COLUMNS} FROM entries")).unwrap();
        let mut rows = st.query([]).unwrap();
        let mut got = Vec::new();
        while let Some(r) = rows.next().unwrap() {
            let mut path = String::new();
            got.push(parse_row(r, "/d", &mut path).map(|r| (r.path.to_string(), r.attrs.size)));
        }
        assert_eq!(got[0], Ok(("/d/it's".to_string(), 3)), "stored `it''s`, as gufi_dir2index writes `it's`");
        assert!(got[1].as_ref().unwrap_err().contains("size: `1e300` is not an integer in range"), "{:?}", got[1]);
        assert_eq!(got[2], Ok(("/d/two.0".to_string(), 2)));
        assert_eq!(got[3], Ok(("/d/''".to_string(), 3)), "stored `''''`");
        assert_eq!(unescape_name("a''b''''c"), "a'b''c");
    }

    #[test]
    fn inode_column_text_int_null_and_bad() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE entries(name TEXT, type TEXT, inode TEXT, mode INT64, uid INT64, gid INT64, size INT64, atime INT64, ctime INT64, mtime INT64);
             INSERT INTO entries VALUES ('t','f','18446744073709551615',33188,1,2,3,4,5,6), ('i','f',NULL,33188,1,2,3,4,5,6),
               ('n','f','-3',33188,1,2,3,4,5,6), ('x','f','12a',33188,1,2,3,4,5,6);
             CREATE TABLE old(name TEXT, type TEXT, inode INT64, mode INT64, uid INT64, gid INT64, size INT64, atime INT64, ctime INT64, mtime INT64);
             INSERT INTO old VALUES ('o','l',77,41471,1,2,3,4,5,6), ('m','l',-1,41471,1,2,3,4,5,6);",
        )
        .unwrap();
        let read = |table: &str| -> Vec<Result<u64, String>> {
            let mut st = conn
                .prepare(&format!("SELECT name,type,mode,uid,gid,size,atime,ctime,mtime,inode FROM {table}"))
                .unwrap();
            let mut rows = st.query([]).unwrap();
            let mut out = Vec::new();
            let mut path = String::new();
            while let Some(r) = rows.next().unwrap() {
                out.push(parse_row(r, "/d", &mut path).map(|r| r.attrs.inode));
            }
            out
        };
        let got = read("entries");
        assert_eq!(got[0], Ok(u64::MAX));
        assert_eq!(got[1], Ok(0), "NULL is unknown");
        assert!(got[2].as_ref().unwrap_err().contains("inode: `-3` is negative"), "{:?}", got[2]);
        assert!(got[3].as_ref().unwrap_err().contains("inode: `12a` is not an integer"), "{:?}", got[3]);
        let got = read("old");
        assert_eq!(got[0], Ok(77));
        assert!(got[1].as_ref().unwrap_err().contains("negative"), "{:?}", got[1]);
    }
}
