//! A GUFI `db.db` read without SQLite: its pages parsed directly, for the two tables the
//! source reads. Opening a database through SQLite parses its whole schema (GUFI's has three
//! tables of 22 to 67 columns, and views) for every directory, which bounds the source at
//! about 150 µs a directory; a `db.db` of one directory is a few pages read in one go.
//!
//! Anything this reader does not expect is an error, and the caller then reads the database
//! through SQLite as before: a write-ahead log or unknown format version, a text encoding
//! other than UTF-8, a schema whose columns could be rowid aliases, defaults, generated or
//! REAL-affinity columns, a page or cell out of bounds, a loop in the b-tree.
//!
//! Format facts, from "Database File Format" (sqlite.org/fileformat2.html): §1.3 the header
//! (magic at 0; page size at 16, big-endian, 1 meaning 65536; file format write and read
//! versions at 18 and 19, 2 meaning WAL; reserved bytes per page at 20; text encoding at 56,
//! 1 = UTF-8); §1.6 b-tree pages (the header at offset 100 on page 1, else 0; type 13 a table
//! leaf with an 8-byte header, 5 a table interior with 12, its right-most child at 8; cell
//! count at 3; the cell pointer array after the header; a leaf cell is payload size and
//! rowid varints then the payload, an interior cell a 4-byte left child then the rowid);
//! §1.7 payload overflow (usable size U = page size - reserved; X = U - 35;
//! M = ((U - 12) * 32 / 255) - 23; K = M + ((P - M) mod (U - 4)); K bytes local if K <= X,
//! else M; then a 4-byte first overflow page, each overflow page a 4-byte next page and
//! U - 4 bytes); §1.8 varints (1 to 9 bytes, big-endian, 7 bits a byte with the high bit
//! set on all but the last, the ninth byte whole); §2.1 records (a varint header size, a
//! serial type per column, then the bodies: 0 NULL, 1-6 big-endian two's-complement integers
//! of 1, 2, 3, 4, 6 and 8 bytes, 7 a big-endian IEEE double, 8 and 9 the integers 0 and 1,
//! even N >= 12 a blob of (N - 12) / 2 bytes, odd N >= 13 text of (N - 13) / 2; a record
//! shorter than its table has NULLs, or its default, in the missing columns); §2.6 the
//! schema table (rooted at page 1; type, name, tbl_name, rootpage, sql).

use rusqlite::types::ValueRef;

/// The deepest b-tree this reads (SQLite's own limit is 20).
const MAX_DEPTH: usize = 32;

/// What a scan has used: pages visited, payload bytes left.
struct Walk {
    visited: usize,
    budget: usize,
}

/// A database file held in memory.
pub(super) struct DbFile {
    data: Vec<u8>,
    page_size: usize,
    usable: usize,
    pages: usize,
}

/// Which columns of a record to decode, and into which slot: `slots[column]` is the slot,
/// `u8::MAX` (or past the end) for a column not wanted.
pub(super) struct Projection(Vec<u8>);

impl Projection {
    /// Column `columns[k]` into slot `k`.
    pub fn new(columns: &[usize]) -> Projection {
        let mut slots = vec![u8::MAX; columns.iter().max().map_or(0, |m| m + 1)];
        for (k, &c) in columns.iter().enumerate() {
            slots[c] = u8::try_from(k).unwrap_or(u8::MAX);
        }
        Projection(slots)
    }
}

impl DbFile {
    /// Check the header of the file held in `data`.
    pub fn parse(data: Vec<u8>) -> Result<DbFile, String> {
        if data.len() < 100 || &data[..16] != b"SQLite format 3\0" {
            return Err("not an SQLite 3 database".into());
        }
        let page_size = match u16::from_be_bytes([data[16], data[17]]) {
            1 => 65_536,
            n => n as usize,
        };
        if !(512..=65_536).contains(&page_size) || !page_size.is_power_of_two() {
            return Err(format!("page size {page_size}"));
        }
        if data[18] != 1 || data[19] != 1 {
            return Err(format!("file format versions {} and {} (2 is a write-ahead log)", data[18], data[19]));
        }
        let usable = page_size - data[20] as usize;
        if usable < 480 {
            return Err(format!("usable page size {usable}"));
        }
        if data[21..24] != [64, 32, 32] {
            return Err("payload fractions are not 64, 32, 32".into());
        }
        if !(1..=4).contains(&be32(&data, 44)?) {
            return Err(format!("schema format {}", be32(&data, 44)?));
        }
        if be32(&data, 56)? != 1 {
            return Err("text encoding is not UTF-8".into());
        }
        if !data.len().is_multiple_of(page_size) {
            return Err(format!("{} bytes is not a whole number of {page_size}-byte pages", data.len()));
        }
        let pages = data.len() / page_size;
        // The size in the header counts when its change counter (24) matches the one at 92;
        // SQLite then reads no page past it and calls a file shorter than it corrupt.
        let in_header = be32(&data, 28)? as usize;
        if be32(&data, 24)? == be32(&data, 92)? && in_header != 0 && in_header != pages {
            return Err(format!("the header says {in_header} pages, the file holds {pages}"));
        }
        Ok(DbFile { data, page_size, usable, pages })
    }

    /// For each of `names` (compared case-insensitively), the table of that name from the
    /// schema table, if there is one: its root page and its `CREATE TABLE` statement.
    pub fn tables<const N: usize>(&self, names: [&str; N]) -> Result<[Option<(u32, String)>; N], String> {
        let mut found: [Option<(u32, String)>; N] = std::array::from_fn(|_| None);
        // type, name, rootpage, sql
        let projection = Projection::new(&[0, 1, 3, 4]);
        self.scan(1, &mut |payload| {
            let mut v = [ValueRef::Null; 4];
            record(payload, &projection, &mut v)?;
            let text = |i: usize| match v[i] {
                ValueRef::Text(t) => std::str::from_utf8(t).ok(),
                _ => None,
            };
            if text(0) != Some("table") {
                return Ok(());
            }
            let Some(k) = text(1).and_then(|n| names.iter().position(|w| w.eq_ignore_ascii_case(n))) else {
                return Ok(());
            };
            let root = match v[2] {
                ValueRef::Integer(r) => u32::try_from(r).map_err(|_| format!("root page {r}"))?,
                _ => return Err(format!("table {}: no root page", names[k])),
            };
            let sql = text(3).ok_or_else(|| format!("table {}: no CREATE statement", names[k]))?;
            found[k] = Some((root, sql.to_string()));
            Ok(())
        })?;
        Ok(found)
    }

    /// The file's bytes back, for the next file's read.
    pub fn into_bytes(self) -> Vec<u8> {
        self.data
    }

    /// Each row of the table b-tree rooted at `root`, in rowid order, as its record.
    pub fn scan(&self, root: u32, f: &mut dyn FnMut(&[u8]) -> Result<(), String>) -> Result<(), String> {
        // Pages visited, and payload bytes left: in a sound file every byte belongs to one
        // cell, so cells that share bytes (a crafted file) run out of budget.
        let mut walk = Walk { visited: 0, budget: self.data.len() };
        self.scan_page(root, 0, &mut walk, f)
    }

    fn page(&self, n: u32) -> Result<&[u8], String> {
        let n = n as usize;
        if n == 0 || n > self.pages {
            return Err(format!("page {n} out of range (1 to {})", self.pages));
        }
        Ok(&self.data[(n - 1) * self.page_size..(n - 1) * self.page_size + self.usable])
    }

    fn scan_page(
        &self,
        n: u32,
        depth: usize,
        walk: &mut Walk,
        f: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        walk.visited += 1;
        if depth > MAX_DEPTH || walk.visited > self.pages {
            return Err(format!("page {n}: the b-tree loops"));
        }
        let page = self.page(n)?;
        let h = if n == 1 { 100 } else { 0 };
        let kind = *page.get(h).ok_or("truncated page")?;
        let cells = be16(page, h + 3)?;
        if cells == 0 && depth > 0 {
            return Err(format!("page {n}: a page below the root without cells"));
        }
        match kind {
            13 => {
                for i in 0..cells {
                    let at = be16(page, h + 8 + 2 * i)?;
                    self.leaf_cell(page, at, walk, f)?;
                }
                Ok(())
            }
            5 => {
                for i in 0..cells {
                    let at = be16(page, h + 12 + 2 * i)?;
                    self.scan_page(be32(page, at)?, depth + 1, walk, f)?;
                }
                self.scan_page(be32(page, h + 8)?, depth + 1, walk, f)
            }
            other => Err(format!("page {n}: type {other} is not a table b-tree page")),
        }
    }

    fn leaf_cell(
        &self,
        page: &[u8],
        at: usize,
        walk: &mut Walk,
        f: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        let (size, a) = varint(page, at)?;
        let (_rowid, b) = varint(page, at + a)?;
        let start = at + a + b;
        let size = usize::try_from(size).map_err(|_| "payload size".to_string())?;
        walk.budget = walk.budget.checked_sub(size).ok_or("cells hold more bytes than the file")?;
        let u = self.usable;
        let x = u - 35;
        if size <= x {
            return f(page.get(start..start + size).ok_or("payload past the page")?);
        }
        let m = ((u - 12) * 32 / 255) - 23;
        let k = m + ((size - m) % (u - 4));
        let local = if k <= x { k } else { m };
        if size > self.data.len() {
            return Err(format!("payload of {size} bytes is larger than the file"));
        }
        let mut payload = Vec::with_capacity(size);
        payload.extend_from_slice(page.get(start..start + local).ok_or("payload past the page")?);
        let mut next = be32(page, start + local)?;
        let mut hops = 0usize;
        while payload.len() < size {
            hops += 1;
            if hops > self.pages {
                return Err("overflow chain loops".into());
            }
            let ov = self.page(next)?;
            next = be32(ov, 0)?;
            let take = (u - 4).min(size - payload.len());
            payload.extend_from_slice(&ov[4..4 + take]);
        }
        f(&payload)
    }
}

/// Decode a record, every value checked, into `out`: the slots of `projection` get their
/// columns' values (borrowing from `payload`), NULL when the record is shorter.
pub(super) fn record<'a>(payload: &'a [u8], projection: &Projection, out: &mut [ValueRef<'a>]) -> Result<(), String> {
    out.iter_mut().for_each(|v| *v = ValueRef::Null);
    let (header, mut h) = varint(payload, 0)?;
    let header = usize::try_from(header).map_err(|_| "record header size".to_string())?;
    if header > payload.len() || header < h {
        return Err(format!("record header of {header} bytes in a payload of {}", payload.len()));
    }
    let mut body = header;
    let mut column = 0usize;
    while h < header {
        let (t, n) = varint(payload, h)?;
        h += n;
        let len = match t {
            0 | 8 | 9 => 0,
            1..=4 => t as usize,
            5 => 6,
            6 | 7 => 8,
            10 | 11 => return Err(format!("reserved serial type {t}")),
            t => usize::try_from((t - 12) / 2).map_err(|_| "value length".to_string())?,
        };
        let bytes = payload.get(body..body.saturating_add(len)).ok_or("value past the record")?;
        body += len;
        if let Some(&k) = projection.0.get(column).filter(|&&k| k != u8::MAX) {
            out[k as usize] = match t {
                0 => ValueRef::Null,
                8 => ValueRef::Integer(0),
                9 => ValueRef::Integer(1),
                1..=6 => ValueRef::Integer(signed(bytes)),
                // SQLite reads a stored NaN as NULL.
                7 => match f64::from_bits(signed(bytes) as u64) {
                    r if r.is_nan() => ValueRef::Null,
                    r => ValueRef::Real(r),
                },
                t if t % 2 == 0 => ValueRef::Blob(bytes),
                _ => ValueRef::Text(bytes),
            };
        }
        column += 1;
    }
    if h != header {
        return Err("record header overruns its size".into());
    }
    Ok(())
}

/// A big-endian two's-complement integer of 1 to 8 bytes.
fn signed(bytes: &[u8]) -> i64 {
    let mut v: i64 = if bytes.first().is_some_and(|b| b & 0x80 != 0) { -1 } else { 0 };
    for &b in bytes {
        v = (v << 8) | b as i64;
    }
    v
}

/// A varint at `at`: its value and length.
fn varint(b: &[u8], at: usize) -> Result<(u64, usize), String> {
    let mut v = 0u64;
    for i in 0..9 {
        let byte = *b.get(at + i).ok_or("truncated varint")?;
        if i == 8 {
            return Ok(((v << 8) | byte as u64, 9));
        }
        v = (v << 7) | (byte & 0x7f) as u64;
        if byte & 0x80 == 0 {
            return Ok((v, i + 1));
        }
    }
    Err("varint".into())
}

fn be16(b: &[u8], at: usize) -> Result<usize, String> {
    let s = b.get(at..at + 2).ok_or("truncated page")?;
    Ok(u16::from_be_bytes([s[0], s[1]]) as usize)
}

fn be32(b: &[u8], at: usize) -> Result<u32, String> {
    let s = b.get(at..at + 4).ok_or("truncated page")?;
    Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// The columns of a `CREATE TABLE` statement: names and declared types, upper case; `None`
/// for what this reader leaves to SQLite: rowid aliases or other keys, defaults, generated
/// columns (`AS`), REAL affinity, `WITHOUT ROWID`, collations, quoting, comments, bytes past
/// ASCII and whitespace SQLite does not take as such.
pub(super) fn columns(sql: &str) -> Option<Vec<(String, String)>> {
    let plain = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let allowed = |b: u8| plain(b) || b" \t\n\r\x0c(),".contains(&b);
    if !sql.bytes().all(allowed) {
        return None;
    }
    let upper = sql.to_ascii_uppercase();
    let refused = ["PRIMARY", "WITHOUT", "DEFAULT", "GENERATED", "AS", "COLLATE"];
    if upper.split(|c: char| !plain(c as u8)).any(|w| refused.contains(&w)) {
        return None;
    }
    if ["REAL", "FLOA", "DOUB"].iter().any(|w| upper.contains(w)) {
        return None;
    }
    let (open, close) = (upper.find('(')?, upper.rfind(')')?);
    let body = upper.get(open + 1..close)?;
    let mut defs = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in body.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => {
                defs.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return None;
    }
    defs.push(&body[start..]);
    let mut out = Vec::new();
    for def in defs {
        let mut words = def.split(|c: char| c.is_ascii_whitespace() || c == '(').filter(|t| !t.is_empty());
        let name = words.next()?;
        if ["CONSTRAINT", "UNIQUE", "CHECK", "FOREIGN"].contains(&name) {
            break;
        }
        out.push((name.to_ascii_lowercase(), words.next().unwrap_or("").to_string()));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_records_and_columns() {
        assert_eq!(varint(&[0x7f], 0), Ok((127, 1)));
        assert_eq!(varint(&[0x81, 0x00], 0), Ok((128, 2)));
        assert_eq!(varint(&[0xff; 9], 0), Ok((u64::MAX, 9)));
        assert!(varint(&[0x81], 0).is_err());
        assert_eq!(signed(&[0xff, 0xfe]), -2);
        assert_eq!(signed(&[0x00, 0x80, 0x00]), 32_768);
        // Header 4 bytes: NULL, an 8-bit 5, text "ab" (17); then the bodies.
        let mut v = [ValueRef::Blob(b"x"); 4];
        record(&[4, 0, 1, 17, 5, b'a', b'b'], &Projection::new(&[2, 1, 0, 3]), &mut v).unwrap();
        assert_eq!(v, [ValueRef::Text(b"ab"), ValueRef::Integer(5), ValueRef::Null, ValueRef::Null]);
        assert!(record(&[3, 0, 17, b'a'], &Projection::new(&[0]), &mut v).is_err(), "text past the record");
        assert!(record(&[2, 10], &Projection::new(&[]), &mut v).is_err(), "reserved serial type");
        let names =
            |sql: &str| columns(sql).map(|c| c.into_iter().map(|(n, t)| format!("{n}:{t}")).collect::<Vec<_>>());
        assert_eq!(
            names("CREATE TABLE entries(name TEXT, type TEXT, inode TEXT, mode INT64)").unwrap(),
            ["name:TEXT", "type:TEXT", "inode:TEXT", "mode:INT64"]
        );
        assert_eq!(names("CREATE TABLE t(a NUMERIC(10, 2), b, UNIQUE(a))").unwrap(), ["a:NUMERIC", "b:"]);
        for refused in [
            "CREATE TABLE t(a INTEGER PRIMARY KEY, b)",
            "CREATE TABLE t(a DEFAULT 3)",
            "CREATE TABLE t(\"a b\" TEXT)",
            "CREATE TABLE t)(",
            "CREATE TABLE t(a, (b)",
            "CREATE TABLE t(v INT AS(0), name TEXT)",
            "CREATE TABLE t(x /*, y */, name TEXT)",
            "CREATE TABLE t(x -- y\n, name TEXT)",
            "CREATE TABLE t(a\u{a0}b TEXT)",
            "CREATE TABLE t(a\u{b}b TEXT)",
            "CREATE TABLE t(a REAL)",
        ] {
            assert_eq!(columns(refused), None, "{refused}");
        }
    }
}
