//! The output formats of `gen-snapshot` and the encodings their text needs.

use std::fmt::Write as _;

/// Output formats of `gen-snapshot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// GUFI index: `db.db` per directory (entries + summary).
    Gufi,
    /// GPFS `mmapplypolicy` LIST file, NERSC 18-column layout, `ESCAPE '%'`.
    Mmapplypolicy,
    /// Icicle's 9-column CSV.
    Tsv,
    /// pwalk CSV with header (directories included).
    Pwalk,
    /// lester ne2scan.
    Ne2scan,
    /// A real directory tree under `tree/` (sparse files, real owners, modes and times).
    Tree,
}

impl Format {
    /// Whether the format carries the generated inode numbers (icicle9 has none; a real
    /// `tree` gets the kernel's).
    pub fn has_inode(self) -> bool {
        !matches!(self, Format::Tsv | Format::Tree)
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        Ok(match s {
            "gufi" => Format::Gufi,
            "mmapplypolicy" => Format::Mmapplypolicy,
            "tsv" => Format::Tsv,
            "pwalk" => Format::Pwalk,
            "ne2scan" => Format::Ne2scan,
            "tree" => Format::Tree,
            _ => return Err(format!("unknown format `{s}` (gufi, mmapplypolicy, tsv, pwalk, ne2scan, tree)")),
        })
    }
}

/// A CSV field, quoted when it holds a comma or a quote.
pub(super) fn csv_quote(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains(',') || s.contains('"') {
        std::borrow::Cow::Owned(format!("\"{}\"", s.replace('"', "\"\"")))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// Percent-encode everything except RFC 3986 unreserved characters (mmapplypolicy `ESCAPE '%'`).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 16);
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `ls -l` style mode string (`-rw-r--r--`).
pub(super) fn mode_str(m: u32) -> String {
    String::from_utf8_lossy(&icicle_core::record::mode_string(m)).into_owned()
}

/// GUFI's `entries` and `summary` schema (formats.md §1.2), plus `pentries_rollup`.
pub const GUFI_SCHEMA: &str = "
CREATE TABLE entries(name TEXT, type TEXT, inode TEXT, mode INT64, nlink INT64, uid INT64, gid INT64, size INT64, blksize INT64, blocks INT64, atime INT64, mtime INT64, ctime INT64, linkname TEXT, xattr_names BLOB, crtime INT64, ossint1 INT64, ossint2 INT64, ossint3 INT64, ossint4 INT64, osstext1 TEXT, osstext2 TEXT);
CREATE TABLE summary(name TEXT, type TEXT, inode TEXT, mode INT64, nlink INT64, uid INT64, gid INT64, size INT64, blksize INT64, blocks INT64, atime INT64, mtime INT64, ctime INT64, linkname TEXT, xattr_names BLOB, crtime INT64, totfiles INT64, totlinks INT64, minuid INT64, maxuid INT64, mingid INT64, maxgid INT64, minsize INT64, maxsize INT64, totzero INT64, totltk INT64, totmtk INT64, totltm INT64, totmtm INT64, totmtg INT64, totmtt INT64, totsize INT64, minctime INT64, maxctime INT64, totctime INT64, minmtime INT64, maxmtime INT64, totmtime INT64, minatime INT64, maxatime INT64, totatime INT64, minblocks INT64, maxblocks INT64, totblocks INT16, totxattr INT64, depth INT64, mincrtime INT64, maxcrtime INT64, totcrtime INT64, minossint1 INT64, maxossint1 INT64, totossint1 INT64, minossint2 INT64, maxossint2 INT64, totossint2 INT64, minossint3 INT64, maxossint3 INT64, totossint3 INT64, minossint4 INT64, maxossint4 INT64, totossint4 INT64, rectype INT64, pinode TEXT, isroot INT64, canrollup INT64, isrolledup INT64);
CREATE TABLE pentries_rollup(name TEXT, type TEXT, inode TEXT, mode INT64, nlink INT64, uid INT64, gid INT64, size INT64, blksize INT64, blocks INT64, atime INT64, mtime INT64, ctime INT64, linkname TEXT, xattr_names BLOB, crtime INT64, ossint1 INT64, ossint2 INT64, ossint3 INT64, ossint4 INT64, osstext1 TEXT, osstext2 TEXT, pinode TEXT, ppinode TEXT);
";

/// A name as `gufi_dir2index` stores it: `sqlite3_mprintf("%q")` doubles every `'`, and the
/// result is bound as it is.
pub(super) fn gufi_q(name: &str) -> String {
    name.replace('\'', "''")
}
