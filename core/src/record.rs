//! The record model: file and link metadata read from snapshots, and rejects.

use std::fmt;

use crate::scope::Scope;
use crate::traits::LayoutComponent;

/// Earliest time a record may carry: 1900-01-01T00:00:00Z.
pub const MIN_TIME: i64 = -2_208_988_800;
/// Latest time a record may carry: 2400-01-01T00:00:00Z.
pub const MAX_TIME: i64 = 13_569_465_600;
/// Largest file size POSIX can express (`off_t` is a signed 64-bit integer).
pub const MAX_SIZE: u64 = i64::MAX as u64;
/// Longest name of one path component, in bytes (Linux `NAME_MAX`).
pub const NAME_MAX: usize = 255;

/// Why `path` cannot be a record's path: not absolute, not normalised (empty, `.` or `..`
/// components, a trailing `/`), a name over [`NAME_MAX`] bytes (counted as the file system
/// holds it: [`crate::name::byte_len`]), a NUL byte (escaped: no file name holds one), or a
/// control character other than tab (C0, DEL or C1: sources write those as escapes,
/// [`crate::name`]). `/` itself passes (the root directory).
pub fn check_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("path {path:?} is not absolute"));
    }
    if surely_clean(path.as_bytes()) {
        return Ok(());
    }
    if memchr::memchr(b'\\', path.as_bytes()).is_some() && holds_nul(path) {
        return Err(format!("path {path:?} has a NUL byte (no file name can)"));
    }
    if let Some((i, c)) = path.char_indices().find(|&(_, c)| c.is_control() && c != '\t') {
        return Err(format!("path {:?} has a control character (U+{:04X} at byte {i})", path, c as u32));
    }
    if path == "/" {
        return Ok(());
    }
    for name in path[1..].split('/') {
        match name {
            "" => return Err(format!("path {path:?} is not normalised (an empty component)")),
            "." | ".." => return Err(format!("path {path:?} is not normalised (a `{name}` component)")),
            n if n.len() > NAME_MAX && crate::name::byte_len(n) > NAME_MAX => {
                return Err(format!(
                    "path {path:?} has a name of {} bytes (more than {NAME_MAX})",
                    crate::name::byte_len(n)
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether an escaped path stands for bytes holding NUL.
fn holds_nul(path: &str) -> bool {
    crate::name::unescape(path).contains(&0)
}

/// Bytes of `x` equal to `b` (the high bit of each such byte set; a few others too).
#[inline]
fn bytes_equal(x: u64, b: u8) -> u64 {
    const LO: u64 = 0x0101_0101_0101_0101;
    let y = x ^ (LO * b as u64);
    y.wrapping_sub(LO) & !y & 0x8080_8080_8080_8080
}

/// Whether an absolute path certainly passes [`check_path`], eight bytes at a time: no byte
/// below 0x20, no DEL, no 0xC2 (the lead byte of every C1 character), no backslash (an
/// escaped byte may be NUL), no `/` followed by `/` or `.`, no trailing `/`, and short enough
/// that no name can be too long. `false` means only "look closer" (dot files, tabs, escapes
/// and non-ASCII names get the exact check).
fn surely_clean(b: &[u8]) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    let n = b.len();
    if n > NAME_MAX + 1 || b.last() == Some(&b'/') {
        return false;
    }
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(w)
    };
    let mut flags = 0u64;
    let mut i = 0;
    while i + 9 <= n {
        let (w, next) = (word(i), word(i + 1));
        let below_space = w.wrapping_sub(LO * 0x20) & !w & 0x8080_8080_8080_8080;
        let slash_then = bytes_equal(w, b'/') & (bytes_equal(next, b'/') | bytes_equal(next, b'.'));
        flags |= below_space | bytes_equal(w, 0x7f) | bytes_equal(w, 0xc2) | bytes_equal(w, b'\\') | slash_then;
        i += 8;
    }
    if flags != 0 {
        return false;
    }
    while i < n {
        let c = b[i];
        if c < 0x20 || c == 0x7f || c == 0xc2 || c == b'\\' || (c == b'/' && matches!(b.get(i + 1), Some(b'/' | b'.')))
        {
            return false;
        }
        i += 1;
    }
    true
}

/// What kind of file-system object a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// A regular file (or any non-directory, non-link object).
    File,
    /// A symbolic link.
    Link,
    /// A directory; never a primary record.
    Dir,
}

impl FileKind {
    /// The name used in index documents.
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::File => "file",
            FileKind::Link => "link",
            FileKind::Dir => "dir",
        }
    }

    /// The kind implied by the type bits of an `st_mode`.
    pub fn from_mode(mode: u32) -> FileKind {
        match mode & S_IFMT {
            S_IFDIR => FileKind::Dir,
            S_IFLNK => FileKind::Link,
            _ => FileKind::File,
        }
    }

    /// The `st_mode` type bits for this kind.
    pub fn type_bits(self) -> u32 {
        match self {
            FileKind::File => S_IFREG,
            FileKind::Link => S_IFLNK,
            FileKind::Dir => S_IFDIR,
        }
    }
}

/// `st_mode` type mask.
pub const S_IFMT: u32 = 0o170000;
/// Regular file type bits.
pub const S_IFREG: u32 = 0o100000;
/// Directory type bits.
pub const S_IFDIR: u32 = 0o040000;
/// Symbolic link type bits.
pub const S_IFLNK: u32 = 0o120000;

/// The metadata every source reports of an object, as `lstat` gives it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Attrs {
    /// Full `st_mode` including the type bits.
    pub mode: u32,
    /// Owner uid.
    pub uid: u32,
    /// Group gid.
    pub gid: u32,
    /// Size in bytes (a link's size is the length of its target).
    pub size: u64,
    /// Last access, epoch seconds.
    pub atime: i64,
    /// Last status change, epoch seconds.
    pub ctime: i64,
    /// Last modification, epoch seconds.
    pub mtime: i64,
    /// Inode number (0 when the source has none); hard links share it.
    #[serde(default)]
    pub inode: u64,
}

impl Attrs {
    /// The attributes in `lstat` metadata.
    pub fn from_metadata(md: &std::fs::Metadata) -> Attrs {
        use std::os::unix::fs::MetadataExt;
        Attrs {
            mode: md.mode(),
            uid: md.uid(),
            gid: md.gid(),
            size: md.size(),
            atime: md.atime(),
            ctime: md.ctime(),
            mtime: md.mtime(),
            inode: md.ino(),
        }
    }

    /// Whether the type bits say directory.
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
}

/// Where the file system keeps an object, as far as its source can tell: each part only when
/// the source reads it (a GPFS event names its fileset and pool; `lfs getstripe -v` gives a
/// Lustre file's FID and layout, `lfs project -d` its project; a lester listing prints OST
/// objects and FIDs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Storage {
    /// Lustre's File IDentifier, as `lfs path2fid` prints it: `[0x200000401:0x1:0x0]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fid: Option<String>,
    /// The project ID (Lustre and ext4/XFS project quotas; `lfs project`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<u32>,
    /// The GPFS fileset, as the producer names it (`fileSetID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fileset: Option<String>,
    /// The storage pool: GPFS's `poolName`, or the Lustre OST pool of the layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Stripes of the layout (over its instantiated components, the largest count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stripe_count: Option<u32>,
    /// OST indexes holding the object's data, each once, in layout order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub osts: Vec<u32>,
    /// The instantiated components of the file's layout (of its first mirror), as PRISM's
    /// placement reads them: extent, stripe size and OSTs in stripe order. Empty when the
    /// layout was not read, or its data does not start on OSTs (a Data-on-MDT first
    /// component, a released file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layout: Vec<LayoutComponent>,
}

impl Storage {
    /// Whether no part is known.
    pub fn is_empty(&self) -> bool {
        *self == Storage::default()
    }
}

/// Metadata of one file, link or directory, borrowed from the reader's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileRecord<'a> {
    /// Absolute path as text: the names' bytes through [`crate::name::escape`].
    pub path: &'a str,
    /// Object kind.
    pub kind: FileKind,
    /// Its `lstat` metadata.
    pub attrs: Attrs,
    /// Where the file system keeps it, when the source knows.
    pub storage: Option<&'a Storage>,
}

impl<'a> FileRecord<'a> {
    /// The record of `path` from its `lstat` metadata.
    pub fn from_metadata(path: &'a str, md: &std::fs::Metadata) -> FileRecord<'a> {
        let attrs = Attrs::from_metadata(md);
        FileRecord { path, kind: FileKind::from_mode(attrs.mode), attrs, storage: None }
    }

    /// Whether every field is within the documented ranges: the path passes [`check_path`]
    /// (and is not `/` unless a directory), the size fits `off_t`, times lie within
    /// [`MIN_TIME`]..=[`MAX_TIME`], the mode within 16 bits. The reason names the field.
    pub fn check(&self) -> Result<(), String> {
        check_path(self.path)?;
        if self.path == "/" && self.kind != FileKind::Dir {
            return Err("`/` is not a file or link".into());
        }
        self.check_fields()
    }

    /// The non-path part of [`FileRecord::check`].
    pub fn check_fields(&self) -> Result<(), String> {
        let a = &self.attrs;
        if a.size > MAX_SIZE {
            return Err(format!("size: {} is larger than a file can be ({MAX_SIZE})", a.size));
        }
        if a.mode > 0o177777 {
            return Err(format!("mode: {:o} has bits beyond st_mode", a.mode));
        }
        for (name, t) in [("atime", a.atime), ("ctime", a.ctime), ("mtime", a.mtime)] {
            if !(MIN_TIME..=MAX_TIME).contains(&t) {
                return Err(format!("{name}: {t} is outside 1900-01-01..2400-01-01 ({MIN_TIME}..={MAX_TIME})"));
            }
        }
        Ok(())
    }

    /// The last path component.
    pub fn name(&self) -> &str {
        let b = self.path.as_bytes();
        let mut end = b.len();
        while end > 0 && b[end - 1] == b'/' {
            end -= 1;
        }
        let start = memchr::memrchr(b'/', &b[..end]).map_or(0, |i| i + 1);
        // Both ends are next to a `/` or at an end of the path: char boundaries.
        self.path.get(start..end).unwrap_or("")
    }

    /// An owned copy.
    pub fn to_owned_record(&self) -> OwnedFileRecord {
        OwnedFileRecord {
            path: self.path.to_string(),
            kind: self.kind,
            attrs: self.attrs,
            storage: self.storage.cloned(),
        }
    }
}

/// An owned [`FileRecord`], for tests and state.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct OwnedFileRecord {
    /// Absolute path as text, as in [`FileRecord::path`].
    pub path: String,
    /// Object kind.
    pub kind: FileKind,
    /// Its `lstat` metadata.
    #[serde(flatten)]
    pub attrs: Attrs,
    /// Where the file system keeps it, when the source knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Storage>,
}

impl OwnedFileRecord {
    /// Borrow as a [`FileRecord`].
    pub fn as_record(&self) -> FileRecord<'_> {
        FileRecord { path: &self.path, kind: self.kind, attrs: self.attrs, storage: self.storage.as_ref() }
    }
}

/// Render the permission bits of an `st_mode` like `ls -l` (`-rw-r--r--`).
pub fn mode_string(mode: u32) -> [u8; 10] {
    let mut s = *b"----------";
    s[0] = match mode & S_IFMT {
        S_IFDIR => b'd',
        S_IFLNK => b'l',
        0o020000 => b'c',
        0o060000 => b'b',
        0o010000 => b'p',
        0o140000 => b's',
        _ => b'-',
    };
    const RWX: [u8; 3] = *b"rwx";
    for i in 0..9 {
        if mode & (0o400 >> i) != 0 {
            s[1 + i] = RWX[i % 3];
        }
    }
    let special = [(0o4000, 3, b's', b'S'), (0o2000, 6, b's', b'S'), (0o1000, 9, b't', b'T')];
    for (bit, pos, with_x, without_x) in special {
        if mode & bit != 0 {
            s[pos] = if s[pos] == b'x' { with_x } else { without_x };
        }
    }
    s
}

/// Parse a symbolic mode (`-rw-r--r--`, `drwxr-sr-x`, `lrwxrwxrwx`) into a numeric `st_mode`.
/// `ls -l`'s eleventh character may follow: `.` (a security context) or `@` (extended
/// attributes) say nothing about access; `+` (an ACL the listing does not give) is an error.
pub fn parse_mode_string(s: &str) -> Result<u32, String> {
    let b = match s.as_bytes() {
        [b @ .., b'.' | b'@'] if b.len() == 10 => b,
        [_, .., b'+'] if s.len() == 11 => {
            return Err(format!("symbolic mode `{s}` has an ACL the listing does not give"))
        }
        b => b,
    };
    if b.len() != 10 {
        return Err(format!("symbolic mode `{s}` is not 10 characters"));
    }
    let mut mode = match b[0] {
        b'-' => S_IFREG,
        b'd' => S_IFDIR,
        b'l' => S_IFLNK,
        b'c' => 0o020000,
        b'b' => 0o060000,
        b'p' => 0o010000,
        b's' => 0o140000,
        c => return Err(format!("unknown file type `{}` in mode `{s}`", c as char)),
    };
    for i in 0..9 {
        let c = b[1 + i];
        let expect = b"rwx"[i % 3];
        let bit = 0o400 >> i;
        match c {
            b'-' => {}
            c if c == expect => mode |= bit,
            b's' if i == 2 || i == 5 => mode |= bit | if i == 2 { 0o4000 } else { 0o2000 },
            b'S' if i == 2 || i == 5 => mode |= if i == 2 { 0o4000 } else { 0o2000 },
            b't' if i == 8 => mode |= bit | 0o1000,
            b'T' if i == 8 => mode |= 0o1000,
            _ => return Err(format!("unexpected `{}` at position {} in mode `{s}`", c as char, i + 1)),
        }
    }
    Ok(mode)
}

/// The octal digits of an `st_mode` read as a decimal integer (`0o100644` → `100644`).
pub fn mode_octal_as_int(mode: u32) -> u64 {
    let mut out = 0u64;
    let mut mult = 1u64;
    let mut m = mode;
    while m > 0 {
        out += (m & 7) as u64 * mult;
        mult *= 10;
        m >>= 3;
    }
    out
}

/// A row that could not be turned into a record: where it was and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reject {
    /// The input (file, database, topic/partition) the row came from.
    pub input: String,
    /// 1-based line or row number, when known.
    pub line: Option<u64>,
    /// Byte offset of the row in the input, when known.
    pub offset: Option<u64>,
    /// Why it was rejected.
    pub reason: String,
    /// What this reject leaves unknown (a whole input, a directory, one path), so that a
    /// versioned run does not mistake the records there for deleted files; `None` when it
    /// hides nothing (a file that vanished while it was read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    /// Not a bad row but an input (or the rest of one) that could not be read: its scope is
    /// carried over, and it does not count towards the row reject ratio.
    #[serde(skip)]
    pub unreadable: bool,
    /// A row whose path is not well formed, whose scope is therefore everything: its path
    /// (escaped, [`crate::name`]), when only its own name is bad. The directory pre-pass places it by its
    /// directory; deletes still take the scope (the name may be a corrupt copy of another).
    #[serde(skip)]
    pub placed: Option<String>,
    /// The input cannot be shown whole (empty, cut short, no producer trailer): the rows read
    /// are good, those it may have held after them are unknown. Deletes are withheld; the
    /// directory pre-pass keeps the directories it read.
    #[serde(skip)]
    pub incomplete: bool,
}

impl Reject {
    /// A reject at a byte offset of a text input (the line is filled in later).
    pub fn at_offset(input: &str, offset: u64, reason: impl Into<String>) -> Reject {
        Reject {
            input: input.to_string(),
            line: None,
            offset: Some(offset),
            reason: reason.into(),
            scope: None,
            unreadable: false,
            placed: None,
            incomplete: false,
        }
    }

    /// A reject of a row naming `path` (escaped, [`crate::name`]), when known: scoped to the path
    /// when it is well formed, else to everything, and placed when only its own name is bad.
    pub fn naming(mut self, path: Option<String>) -> Reject {
        self.scope = Some(Scope::of_rejected_row(path.as_deref()));
        if self.scope == Some(Scope::All) {
            self.placed = path.filter(|p| crate::scope::placeable(p));
        }
        self
    }

    /// A reject at a row number of an input.
    pub fn at_row(input: &str, row: u64, reason: impl Into<String>) -> Reject {
        Reject {
            input: input.to_string(),
            line: Some(row),
            offset: None,
            reason: reason.into(),
            scope: None,
            unreadable: false,
            placed: None,
            incomplete: false,
        }
    }

    /// A whole input that could not be read, covering the records under `scope`.
    pub fn whole(input: &str, reason: impl Into<String>, scope: Option<Scope>) -> Reject {
        Reject {
            input: input.to_string(),
            line: None,
            offset: None,
            reason: reason.into(),
            scope,
            unreadable: true,
            placed: None,
            incomplete: false,
        }
    }

    /// A row of `input` (where in it unknown) that could not become a record.
    pub fn row(input: &str, reason: impl Into<String>, scope: Option<Scope>) -> Reject {
        Reject { unreadable: false, ..Reject::whole(input, reason, scope) }
    }

    /// The same reject, marking the rest of its input unreadable (not a bad row).
    pub fn unreadable(mut self) -> Reject {
        self.unreadable = true;
        self
    }

    /// An input that cannot be shown whole (see [`Reject::incomplete`]), at `offset`: everything
    /// is left unknown.
    pub fn not_whole(input: &str, offset: u64, reason: impl Into<String>) -> Reject {
        Reject {
            scope: Some(Scope::All),
            unreadable: true,
            incomplete: true,
            ..Reject::at_offset(input, offset, reason)
        }
    }

    /// The same reject, leaving `scope` unknown.
    pub fn scoped(mut self, scope: Scope) -> Reject {
        self.scope = Some(scope);
        self
    }
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.input)?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        if let Some(o) = self.offset {
            write!(f, " (byte {o})")?;
        }
        write!(f, ": {}", self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_strings_round_trip() {
        for (m, s) in [
            (0o100644, "-rw-r--r--"),
            (0o040755, "drwxr-xr-x"),
            (0o120777, "lrwxrwxrwx"),
            (0o104755, "-rwsr-xr-x"),
            (0o102644, "-rw-r-Sr--"),
            (0o041777, "drwxrwxrwt"),
            (0o041776, "drwxrwxrwT"),
        ] {
            assert_eq!(std::str::from_utf8(&mode_string(m)).unwrap(), s);
            assert_eq!(parse_mode_string(s).unwrap(), m, "{s}");
        }
        assert!(parse_mode_string("-rw-r--r-").is_err());
        assert_eq!(parse_mode_string("drwxr-x---.").unwrap(), 0o40750, "a security context says nothing about access");
        assert_eq!(parse_mode_string("-rw-r--r--@").unwrap(), 0o100644);
        assert!(parse_mode_string("drwxr-x---+").unwrap_err().contains("ACL"));
        assert!(parse_mode_string("?rw-r--r--").is_err());
        assert!(parse_mode_string("-rq-r--r--").is_err());
    }

    #[test]
    fn octal_digits_as_int() {
        assert_eq!(mode_octal_as_int(0o100644), 100644);
        assert_eq!(mode_octal_as_int(0o120777), 120777);
        assert_eq!(mode_octal_as_int(0), 0);
    }

    #[test]
    fn strict_paths_and_fields() {
        for ok in ["/", "/a", "/a b/c.txt", "/é/日本", "/tab\tname"] {
            assert!(check_path(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("a/b", "not absolute"),
            ("", "not absolute"),
            ("/a//b", "empty component"),
            ("/a/", "empty component"),
            ("/a/../b", "`..`"),
            ("/a/./b", "`.`"),
            ("/a\0b", "U+0000"),
            ("/a\nb", "U+000A"),
            ("/a\u{1b}[31mred", "U+001B"),
            ("/a\u{9b}b", "U+009B"),
        ] {
            let e = check_path(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert!(check_path(&format!("/{}", "x".repeat(256))).unwrap_err().contains("256 bytes"));
        let r = FileRecord {
            path: "/a",
            kind: FileKind::File,
            attrs: Attrs { mode: 0o100644, ..Attrs::default() },
            storage: None,
        };
        assert!(r.check().is_ok());
        assert!(FileRecord { path: "/", ..r }.check().unwrap_err().contains("not a file"));
        assert!(FileRecord { path: "/", kind: FileKind::Dir, ..r }.check().is_ok());
        assert!(FileRecord { attrs: Attrs { size: MAX_SIZE + 1, ..r.attrs }, ..r }
            .check()
            .unwrap_err()
            .starts_with("size"));
        assert!(FileRecord { attrs: Attrs { mtime: MAX_TIME + 1, ..r.attrs }, ..r }
            .check()
            .unwrap_err()
            .starts_with("mtime"));
        assert!(FileRecord { attrs: Attrs { atime: MIN_TIME - 1, ..r.attrs }, ..r }
            .check()
            .unwrap_err()
            .starts_with("atime"));
        assert!(FileRecord { attrs: Attrs { mode: 0o1177777, ..r.attrs }, ..r }
            .check()
            .unwrap_err()
            .starts_with("mode"));
    }

    #[test]
    fn names() {
        let r = FileRecord { path: "/a/b c", kind: FileKind::File, attrs: Attrs::default(), storage: None };
        assert_eq!(r.name(), "b c");
    }
}
