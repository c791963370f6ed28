//! `lfs changelog` text records, parsed by key (never by position): formats.md §3.2.
//!
//! `IDX TYPE HH:MM:SS.nnnnnnnnn YYYY.MM.DD 0xFLAGS t=[FID] [j=JOB] [ef=0xX] [u=U:G] [nid=NID]
//! [m=MODE] [x=XATTR] [p=[FID]] [NAME] [s=[FID] sp=[FID] OLDNAME]` — names may contain spaces.

use std::fmt;

mod scan;

use scan::*;
pub use scan::{leading_index, line_type_bit, lines, rename_lines, Lines};
/// A Lustre FID `[seq:oid:ver]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Fid {
    /// The sequence (`f_seq`): which MDT or OST range the object was allocated from.
    pub seq: u64,
    /// The object id within the sequence (`f_oid`).
    pub oid: u32,
    /// The version (`f_ver`), 0 for MDT objects.
    pub ver: u32,
}

impl Fid {
    /// The root FID `[0x200000007:0x1:0x0]`.
    pub const ROOT: Fid = Fid { seq: 0x2_0000_0007, oid: 1, ver: 0 };

    /// Whether this is the zero FID (`[0:0x0:0x0]`).
    pub fn is_zero(&self) -> bool {
        self.seq == 0 && self.oid == 0 && self.ver == 0
    }

    /// Parse `[0x200000401:0x3:0x0]` (brackets optional; a zero sequence may print as `0`).
    pub fn parse(s: &str) -> Result<Fid, String> {
        let t = s.trim().as_bytes();
        let t = t.strip_prefix(b"[").unwrap_or(t);
        let t = t.strip_suffix(b"]").unwrap_or(t);
        let mut parts = [0u64; 3];
        let mut pos = 0usize;
        for (i, what) in ["sequence", "object id", "version"].iter().enumerate() {
            let bad = || format!("FID `{s}`: bad {what}");
            if pos > t.len() {
                return Err(format!("FID `{s}` lacks its {what}"));
            }
            let field = &t[pos..];
            let end = memchr::memchr(b':', field).unwrap_or(field.len());
            let h = &field[..end];
            let h = h.strip_prefix(b"0x").unwrap_or(h);
            if h.is_empty() || h.len() > 16 {
                return Err(bad());
            }
            let mut v = 0u64;
            for &c in h {
                let d = match c {
                    b'0'..=b'9' => c - b'0',
                    b'a'..=b'f' => c - b'a' + 10,
                    b'A'..=b'F' => c - b'A' + 10,
                    _ => return Err(bad()),
                };
                v = (v << 4) | d as u64;
            }
            parts[i] = v;
            pos += end + 1;
        }
        if pos <= t.len() || parts[1] > u32::MAX as u64 || parts[2] > u32::MAX as u64 {
            return Err(format!("FID `{s}` is malformed"));
        }
        Ok(Fid { seq: parts[0], oid: parts[1] as u32, ver: parts[2] as u32 })
    }
}

impl serde::Serialize for Fid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for Fid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Fid, D::Error> {
        let s = String::deserialize(d)?;
        Fid::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Fid {
    /// `DFID`: `[%#llx:0x%x:0x%x]` (a zero sequence prints as `0`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.seq == 0 {
            write!(f, "[0:0x{:x}:0x{:x}]", self.oid, self.ver)
        } else {
            write!(f, "[0x{:x}:0x{:x}:0x{:x}]", self.seq, self.oid, self.ver)
        }
    }
}

/// Changelog record types (`lustre_user.h`), with unknown ones kept by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RecordType {
    /// `CL_MARK`: a marker of the changelog itself; no object changed.
    Mark,
    /// `CL_CREATE`: a regular file created.
    Creat,
    /// `CL_MKDIR`: a directory created.
    Mkdir,
    /// `CL_HARDLINK`: a hard link made.
    Hlink,
    /// `CL_SOFTLINK`: a symbolic link created.
    Slink,
    /// `CL_MKNOD`: a device, FIFO or socket created.
    Mknod,
    /// `CL_UNLINK`: a name removed ([`CLF_LAST`] when it was the last link).
    Unlnk,
    /// `CL_RMDIR`: a directory removed.
    Rmdir,
    /// `CL_RENAME`: a rename (`s=`, `sp=` and the old name say what was renamed).
    Renme,
    /// `CL_EXT`: the second record of a two-record rename (Lustre 2.0-2.2).
    Rnmto,
    /// `CL_OPEN`: a file opened.
    Open,
    /// `CL_CLOSE`: a file closed.
    Close,
    /// `CL_LAYOUT`: a file's layout (striping) changed.
    Lyout,
    /// `CL_TRUNC`: a file truncated.
    Trunc,
    /// `CL_SETATTR`: attributes set (mode, owner, times).
    Sattr,
    /// `CL_SETXATTR`: an extended attribute set (`x=` names it).
    Xattr,
    /// `CL_HSM`: an HSM event (archive, restore, release...; the flags say which).
    Hsm,
    /// `CL_MTIME`: the modification time changed.
    Mtime,
    /// `CL_CTIME`: the change time changed.
    Ctime,
    /// `CL_ATIME`: the access time changed.
    Atime,
    /// `CL_MIGRATE`: an object migrated to another MDT (its FID changes, its path stays).
    Migrt,
    /// `CL_FLRW`: a mirrored (FLR) file written for the first time.
    Flrw,
    /// `CL_RESYNC`: a mirrored (FLR) file resynchronised.
    Resync,
    /// `CL_GETXATTR`: an extended attribute read.
    Gxatr,
    /// `CL_DN_OPEN`: an open denied.
    Nopen,
    /// A type this version does not know: kept and counted, never fatal.
    Unknown(u32, compact_str::CompactString),
}

const NAMES: [&str; 25] = [
    "MARK", "CREAT", "MKDIR", "HLINK", "SLINK", "MKNOD", "UNLNK", "RMDIR", "RENME", "RNMTO", "OPEN", "CLOSE", "LYOUT",
    "TRUNC", "SATTR", "XATTR", "HSM", "MTIME", "CTIME", "ATIME", "MIGRT", "FLRW", "RESYNC", "GXATR", "NOPEN",
];

impl RecordType {
    /// The type for number `n` and name `name`.
    pub fn from_parts(n: u32, name: &str) -> RecordType {
        use RecordType::*;
        let t = match n {
            0 => Mark,
            1 => Creat,
            2 => Mkdir,
            3 => Hlink,
            4 => Slink,
            5 => Mknod,
            6 => Unlnk,
            7 => Rmdir,
            8 => Renme,
            9 => Rnmto,
            10 => Open,
            11 => Close,
            12 => Lyout,
            13 => Trunc,
            14 => Sattr,
            15 => Xattr,
            16 => Hsm,
            17 => Mtime,
            18 => Ctime,
            19 => Atime,
            20 => Migrt,
            21 => Flrw,
            22 => Resync,
            23 => Gxatr,
            24 => Nopen,
            _ => return Unknown(n, name.into()),
        };
        if NAMES[n as usize] == name {
            t
        } else {
            Unknown(n, name.into())
        }
    }

    /// A bit per known type (for rule masks); unknown types have none.
    pub fn bit(&self) -> u32 {
        match self {
            RecordType::Unknown(..) => 0,
            t => 1 << t.number(),
        }
    }

    /// The type named `name` (`CREAT`, `UNLNK`, ...).
    pub fn from_name(name: &str) -> Option<RecordType> {
        NAMES.iter().position(|n| *n == name).map(|i| RecordType::from_parts(i as u32, name))
    }

    /// The number printed before the name.
    pub fn number(&self) -> u32 {
        use RecordType::*;
        match self {
            Unknown(n, _) => *n,
            Mark => 0,
            Creat => 1,
            Mkdir => 2,
            Hlink => 3,
            Slink => 4,
            Mknod => 5,
            Unlnk => 6,
            Rmdir => 7,
            Renme => 8,
            Rnmto => 9,
            Open => 10,
            Close => 11,
            Lyout => 12,
            Trunc => 13,
            Sattr => 14,
            Xattr => 15,
            Hsm => 16,
            Mtime => 17,
            Ctime => 18,
            Atime => 19,
            Migrt => 20,
            Flrw => 21,
            Resync => 22,
            Gxatr => 23,
            Nopen => 24,
        }
    }

    /// The 5-character name.
    pub fn name(&self) -> &str {
        use RecordType::*;
        match self {
            Unknown(_, s) => s,
            Mark => "MARK",
            Creat => "CREAT",
            Mkdir => "MKDIR",
            Hlink => "HLINK",
            Slink => "SLINK",
            Mknod => "MKNOD",
            Unlnk => "UNLNK",
            Rmdir => "RMDIR",
            Renme => "RENME",
            Rnmto => "RNMTO",
            Open => "OPEN",
            Close => "CLOSE",
            Lyout => "LYOUT",
            Trunc => "TRUNC",
            Sattr => "SATTR",
            Xattr => "XATTR",
            Hsm => "HSM",
            Mtime => "MTIME",
            Ctime => "CTIME",
            Atime => "ATIME",
            Migrt => "MIGRT",
            Flrw => "FLRW",
            Resync => "RESYNC",
            Gxatr => "GXATR",
            Nopen => "NOPEN",
        }
    }
}

/// `CLF_UNLINK_LAST` / `CLF_RENAME_LAST`: the last link went away.
pub const CLF_LAST: u32 = 0x1;

/// A record's time as printed, `HH:MM:SS.nnnnnnnnn YYYY.MM.DD` (UTC), kept inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RecordTime {
    len: u8,
    bytes: [u8; RecordTime::CAPACITY],
}

impl RecordTime {
    /// The longest time text kept.
    pub const CAPACITY: usize = 38;

    /// `clock date`; None when longer than [`RecordTime::CAPACITY`].
    pub fn new(clock: &str, date: &str) -> Option<RecordTime> {
        let mut t = RecordTime::EMPTY;
        t.set(clock, date).then_some(t)
    }

    /// No time.
    pub const EMPTY: RecordTime = RecordTime { len: 0, bytes: [0; RecordTime::CAPACITY] };

    /// Set to `clock date` where the time is kept (a record parsed in place copies its time
    /// once); false, leaving it unchanged, when longer than [`RecordTime::CAPACITY`].
    pub fn set(&mut self, clock: &str, date: &str) -> bool {
        let len = clock.len() + 1 + date.len();
        if len > Self::CAPACITY {
            return false;
        }
        let bytes = &mut self.bytes;
        if let (Ok(c), Ok(d)) = (<&[u8; 18]>::try_from(clock.as_bytes()), <&[u8; 10]>::try_from(date.as_bytes())) {
            // The usual `HH:MM:SS.nnnnnnnnn YYYY.MM.DD`: fixed-size copies.
            bytes[..18].copy_from_slice(c);
            bytes[18] = b' ';
            bytes[19..29].copy_from_slice(d);
        } else {
            bytes[..clock.len()].copy_from_slice(clock.as_bytes());
            bytes[clock.len()] = b' ';
            bytes[clock.len() + 1..len].copy_from_slice(date.as_bytes());
        }
        self.len = len as u8;
        true
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Built only from two &str and a space.
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl From<&str> for RecordTime {
    /// `"HH:MM:SS.n YYYY.MM.DD"` (split at the first space; truncated to the capacity).
    fn from(s: &str) -> RecordTime {
        let (clock, date) = s.split_once(' ').unwrap_or((s, ""));
        RecordTime::new(clock, date).unwrap_or(RecordTime::EMPTY)
    }
}

impl fmt::Display for RecordTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for RecordTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// One changelog record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangelogRecord {
    /// `IDX`: the record's number in the MDT's changelog (what `changelog_clear` takes).
    pub index: u64,
    /// `TYPE`: the record type, printed as its number and name (`01CREAT`).
    pub kind: RecordType,
    /// `HH:MM:SS.nnnnnnnnn YYYY.MM.DD`, UTC, as printed.
    pub time: RecordTime,
    /// `0xFLAGS`: the record's flags (e.g. [`CLF_LAST`]).
    pub flags: u32,
    /// `t=`: the target (for RENME: the overwritten target, zero if none).
    pub target: Fid,
    /// `j=`: the job id of the process that made the change; None without `j=`.
    /// Short values (job ids, NIDs) are stored inline: no allocation, no shared counts.
    pub jobid: Option<compact_str::CompactString>,
    /// `ef=`: the extra-field flags (which of `u=`, `nid=`, `m=`, `x=` are present); None without `ef=`.
    pub extra_flags: Option<u64>,
    /// `u=UID:GID`: the user and group of the caller; None without `u=`.
    pub uid_gid: Option<(u32, u32)>,
    /// `nid=`: the client's network id (`10.0.0.1@tcp`); None without `nid=`.
    pub nid: Option<compact_str::CompactString>,
    /// `m=`: the open mode as printed (`-w-`: OPEN, CLOSE, NOPEN); None without `m=`.
    pub open_mode: Option<compact_str::CompactString>,
    /// `x=`: the extended attribute's name (XATTR, GXATR); None without `x=`.
    pub xattr: Option<compact_str::CompactString>,
    /// `p=`: the parent (for RENME: the new parent).
    pub parent: Option<Fid>,
    /// The name (for RENME: the new name); short names are stored inline.
    pub name: Option<compact_str::CompactString>,
    /// `s=` (RENME): the renamed object.
    pub source: Option<Fid>,
    /// `sp=` (RENME): the renamed object's old parent.
    pub source_parent: Option<Fid>,
    /// RENME: the renamed object's old name.
    pub source_name: Option<compact_str::CompactString>,
}

impl ChangelogRecord {
    /// A record with nothing set (what [`ChangelogRecord::parse_into`] fills).
    pub fn empty() -> ChangelogRecord {
        ChangelogRecord {
            index: 0,
            kind: RecordType::Mark,
            time: RecordTime::EMPTY,
            flags: 0,
            target: Fid::default(),
            jobid: None,
            extra_flags: None,
            uid_gid: None,
            nid: None,
            open_mode: None,
            xattr: None,
            parent: None,
            name: None,
            source: None,
            source_parent: None,
            source_name: None,
        }
    }

    /// Parse one line of `lfs changelog` output.
    pub fn parse(line: &str) -> Result<ChangelogRecord, String> {
        let mut rec = ChangelogRecord::empty();
        ChangelogRecord::parse_into(line, &mut rec)?;
        Ok(rec)
    }

    /// [`ChangelogRecord::parse`] into `rec` (every field is set; on an error `rec` holds
    /// part of the line): a batch's records are parsed where they will stay.
    pub fn parse_into(line: &str, rec: &mut ChangelogRecord) -> Result<(), String> {
        let line = line.trim_end_matches(['\n', '\r']);
        let b = line.as_bytes();
        // Every range below starts and ends at an ASCII byte (a space, `=`, `]`) or at an end
        // of the line, so it is a valid &str slice.
        let text = |start: usize, end: usize| cut(line, start, end);
        // The fixed prefix: index, type, time, date, flags (separated by runs of spaces).
        let mut spaces = Spaces::new(b);
        let (s, e) = spaces.token(0);
        if s == e {
            return Err("missing record index".into());
        }
        let index = dec(&b[s..e]).ok_or("record index is not a number")?;
        let (s, e) = spaces.token(e);
        if s == e {
            return Err("missing record type".into());
        }
        let ty = &b[s..e];
        if ty.len() < 3 || !ty[0].is_ascii_digit() || !ty[1].is_ascii_digit() {
            return Err(format!("record type `{}` is not NNNAME", text(s, e)));
        }
        let kind = RecordType::from_parts(((ty[0] - b'0') * 10 + (ty[1] - b'0')) as u32, text(s + 2, e));
        let (cs, ce) = spaces.token(e);
        if cs == ce {
            return Err("missing time".into());
        }
        let (ds, de) = spaces.token(ce);
        if ds == de {
            return Err("missing date".into());
        }
        let (fs, fe) = spaces.token(de);
        if fs == fe {
            return Err("missing flags".into());
        }
        let flags = hex(&b[fs..fe])
            .and_then(|f| u32::try_from(f).ok())
            .ok_or_else(|| format!("flags `{}` are not hex", text(fs, fe)))?;
        if !rec.time.set(text(cs, ce), text(ds, de)) {
            return Err(format!("time `{} {}` is too long", text(cs, ce), text(ds, de)));
        }
        let mut i = fe + (b.get(fe) == Some(&b' ')) as usize;
        if b.get(i..i + 2) != Some(b"t=") {
            return Err("missing t=".into());
        }
        i += 2;
        let (target, n) = bracketed_fid(&b[i..]).ok_or_else(|| fid_error(text(i, b.len()), "t="))?;
        rec.index = index;
        rec.kind = kind;
        rec.flags = flags;
        rec.target = target;
        rec.jobid = None;
        rec.extra_flags = None;
        rec.uid_gid = None;
        rec.nid = None;
        rec.open_mode = None;
        rec.xattr = None;
        rec.parent = None;
        rec.name = None;
        rec.source = None;
        rec.source_parent = None;
        rec.source_name = None;
        i += n;
        i += (b.get(i) == Some(&b' ')) as usize;
        // Keyed fields, in any order, until the name.
        loop {
            let key_len = match &b[i..] {
                [b'j', b'=', ..] | [b'u', b'=', ..] | [b'm', b'=', ..] | [b'x', b'=', ..] | [b'p', b'=', ..] => 1,
                [b'e', b'f', b'=', ..] => 2,
                [b'n', b'i', b'd', b'=', ..] => 3,
                _ => break,
            };
            let key = b[i];
            let vs = i + key_len + 1;
            if key == b'p' {
                let (parent, n) = bracketed_fid(&b[vs..]).ok_or_else(|| fid_error(text(vs, b.len()), "p="))?;
                rec.parent = Some(parent);
                i = vs + n;
                i += (b.get(i) == Some(&b' ')) as usize;
                // The name runs to the end of the line (or to ` s=[` for renames).
                break;
            }
            // A jobid may hold spaces (`%e.%u` with a process named `VM Thread`): it runs to the
            // next known key.
            let ve = if key == b'j' { jobid_end(b, &mut spaces, vs) } else { spaces.next(vs) };
            let val = &b[vs..ve];
            match key {
                b'j' => rec.jobid = Some(text(vs, ve).into()),
                b'e' => rec.extra_flags = Some(hex(val).ok_or_else(|| format!("ef `{}`", text(vs, ve)))?),
                b'u' => {
                    let id = |t: &[u8]| dec(t).and_then(|v| u32::try_from(v).ok());
                    let ids = find_byte(val, b':').and_then(|c| Some((id(&val[..c])?, id(&val[c + 1..])?)));
                    rec.uid_gid = Some(ids.ok_or_else(|| format!("u `{}`", text(vs, ve)))?);
                }
                b'n' => rec.nid = Some(text(vs, ve).into()),
                b'm' => rec.open_mode = Some(text(vs, ve).into()),
                _ => rec.xattr = Some(text(vs, ve).into()),
            }
            i = ve + (ve < b.len()) as usize;
        }
        if i < b.len() {
            // Only a rename carries a second name: any other name is the rest of the line,
            // ` s=[` and all.
            if matches!(rec.kind, RecordType::Renme | RecordType::Rnmto) {
                Self::parse_names(line, &mut spaces, i, rec)?;
            } else {
                rec.name = Some(text(i, b.len()).into());
            }
        }
        // Amazon FSx for Lustre prints some names as paths (`/cl8/b.txt`); a name never holds
        // `/`, so such a name (one after `p=`, as namespace records print it) is the path's
        // last component.
        let names = if rec.parent.is_some() { [&mut rec.name, &mut rec.source_name] } else { [&mut None, &mut None] };
        for slot in names {
            if let Some(n) = slot.as_mut().filter(|n| n.contains('/')) {
                let leaf = icicle_core::name::leaf(n);
                // A "name" of slashes only names nothing.
                *slot = (!leaf.is_empty()).then(|| leaf.into());
            }
        }
        complete(rec)
    }

    /// The names at byte `i` of `line` to its end: the name, or a rename's new name, ` s=[FID]
    /// sp=[FID] ` and the old name.
    #[inline]
    fn parse_names(line: &str, spaces: &mut Spaces<'_>, i: usize, rec: &mut ChangelogRecord) -> Result<(), String> {
        let b = line.as_bytes();
        let text = |start: usize, end: usize| cut(line, start, end);
        // A rename's new name ends at the first ` s=[FID] sp=[FID] ` (a name may hold ` s=[`).
        let mut from = i;
        let split = loop {
            let sp = spaces.next(from);
            if sp == b.len() {
                break None;
            }
            if b[sp..].starts_with(b" s=[") && source_fields_at(&b[sp + 3..]) {
                break Some(sp);
            }
            from = sp + 1;
        };
        match split {
            Some(at) => {
                rec.name = Some(text(i, at).into());
                let fs = at + 3;
                let (source, n) = bracketed_fid(&b[fs..]).ok_or_else(|| fid_error(text(fs, b.len()), "s="))?;
                rec.source = Some(source);
                let mut k = fs + n;
                if !b[k..].starts_with(b" sp=") {
                    return Err("s= without sp=".into());
                }
                k += 4;
                let (source_parent, n) = bracketed_fid(&b[k..]).ok_or_else(|| fid_error(text(k, b.len()), "sp="))?;
                rec.source_parent = Some(source_parent);
                k += n;
                if b.get(k) != Some(&b' ') {
                    return Err("rename without the old name".into());
                }
                rec.source_name = Some(text(k + 1, b.len()).into());
            }
            None => rec.name = Some(text(i, b.len()).into()),
        }
        Ok(())
    }

    /// Render in `lfs changelog` format (the inverse of [`ChangelogRecord::parse`]).
    pub fn to_line(&self) -> String {
        let mut s = format!(
            "{} {:02}{:<5} {} 0x{:x} t={}",
            self.index,
            self.kind.number(),
            self.kind.name(),
            self.time,
            self.flags,
            self.target
        );
        if let Some(j) = &self.jobid {
            s.push_str(&format!(" j={j}"));
        }
        // lfs prints these only with ef=; a line that has them without it prints them anyway,
        // so that what was parsed prints again (a name is what follows the last key).
        if let Some(ef) = self.extra_flags {
            s.push_str(&format!(" ef=0x{ef:x}"));
        }
        if let Some((u, g)) = self.uid_gid {
            s.push_str(&format!(" u={u}:{g}"));
        }
        if let Some(n) = &self.nid {
            s.push_str(&format!(" nid={n}"));
        }
        if let Some(m) = &self.open_mode {
            s.push_str(&format!(" m={m}"));
        }
        if let Some(x) = &self.xattr {
            s.push_str(&format!(" x={x}"));
        }
        // Even a zero parent: without `p=`, a name such as `ef=0x1` would read as a key.
        if let Some(p) = &self.parent {
            s.push_str(&format!(" p={p}"));
        }
        if let Some(n) = &self.name {
            s.push(' ');
            s.push_str(n);
        }
        if let (Some(sf), Some(sp), Some(sn)) = (&self.source, &self.source_parent, &self.source_name) {
            s.push_str(&format!(" s={sf} sp={sp} {sn}"));
        }
        s
    }
}

/// Whether `rec` holds what its type needs: a rename its source, a namespace record its
/// directory and name. One that cannot be applied is a reject (kept as a dead letter), never a
/// record silently dropped.
fn complete(rec: &ChangelogRecord) -> Result<(), String> {
    use RecordType::*;
    if matches!(rec.kind, Renme | Rnmto) && rec.source.is_none() {
        // Lustre 2.0-2.2 wrote a rename as two records (RENME, then RNMTO), and a bare RNMTO
        // is a DNE partial operation: neither says both names.
        return Err(format!(
            "{} without s= and sp= (a two-record rename of Lustre 2.0-2.2, or a partial DNE operation)",
            rec.kind.name()
        ));
    }
    if rec.kind == Renme && rec.source_name.is_none() {
        return Err("RENME without the old name".into());
    }
    let namespace = matches!(rec.kind, Creat | Mkdir | Hlink | Slink | Mknod | Unlnk | Rmdir | Renme);
    if namespace && (rec.parent.is_none() || rec.name.as_deref().is_none_or(str::is_empty)) {
        return Err(format!("{} without {}", rec.kind.name(), if rec.parent.is_none() { "p=" } else { "a name" }));
    }
    Ok(())
}

/// Where a `j=` value that starts at `vs` ends: at the next space followed by another key
/// (`ef=`, `u=`, `nid=`, `m=`, `x=`, `p=[`), or at the end of the line.
fn jobid_end(b: &[u8], spaces: &mut Spaces<'_>, vs: usize) -> usize {
    let mut from = vs;
    loop {
        let sp = spaces.next(from);
        if sp == b.len() {
            return sp;
        }
        let rest = &b[sp + 1..];
        if [&b"ef="[..], b"u=", b"nid=", b"m=", b"x=", b"p=["].iter().any(|k| rest.starts_with(k)) {
            return sp;
        }
        from = sp + 1;
    }
}

/// Whether `b` starts with `[FID] sp=[FID] ` (a rename's source fields).
fn source_fields_at(b: &[u8]) -> bool {
    let Some((_, n)) = bracketed_fid(b) else { return false };
    let Some(rest) = b[n..].strip_prefix(b" sp=") else { return false };
    bracketed_fid(rest).is_some_and(|(_, m)| rest.get(m) == Some(&b' '))
}

#[cfg(test)]
mod tests;
