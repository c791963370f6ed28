//! A listing's resolved layout: where each value is, how the mode is written, which lines
//! are headers and comments, from a preset (pwalk, lester, ne2scan, icicle9) or a column map.

use super::*;

/// A resolved layout.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The byte between fields.
    pub delim: u8,
    /// Where each value is.
    pub cols: Columns,
    /// How the mode column is written.
    pub mode_format: ModeFormat,
    /// The path is the last column and may itself contain the delimiter.
    pub path_last: bool,
    /// Fields may be `"`-quoted.
    pub quoted: bool,
    /// The first line of each file is skipped.
    pub header: bool,
    /// A header line starting like this is skipped even when `header` is false.
    pub header_hint: Option<&'static [u8]>,
    /// Lines starting with this prefix are skipped.
    pub comment: Option<Vec<u8>>,
    /// Remove this prefix from every path...
    pub strip_prefix: String,
    /// ...and put this one in its place.
    pub path_prefix: String,
    /// The path is the first field at or after `cols.path` that starts with `/` (lester's
    /// OST and FID columns may come before it).
    path_slash: bool,
    nfields: usize,
    preset: Option<Preset>,
    /// Columns were given by a column map.
    custom: bool,
}

/// The header line pwalk writes.
pub const PWALK_HEADER: &str = "inode,parent-inode,directory-depth,\"filename\",\"fileExtension\",UID,GID,st_size,st_dev,st_blocks,st_nlink,\"st_mode\",st_atime,st_mtime,st_ctime,pw_fcount,pw_dirsum";

impl Layout {
    /// A column-map layout (what `columns = {...}` and the other keys configure).
    pub fn custom(
        delim: u8,
        cols: Columns,
        mode_format: ModeFormat,
        path_last: bool,
        quoted: bool,
        header: bool,
    ) -> Layout {
        let mut l = Layout::preset(Preset::Icicle9);
        l.nfields = [
            cols.kind.unwrap_or(0),
            cols.mode,
            cols.uid,
            cols.gid,
            cols.size,
            cols.atime,
            cols.ctime,
            cols.mtime,
            cols.path,
            cols.inode.unwrap_or(0),
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
            + 1;
        (l.delim, l.cols, l.mode_format, l.path_last, l.quoted, l.header, l.header_hint, l.custom) =
            (delim, cols, mode_format, path_last, quoted, header, None, true);
        l
    }

    /// The layout of a preset.
    #[allow(clippy::type_complexity)]
    pub fn preset(p: Preset) -> Layout {
        let c = |kind, mode, uid, gid, size, atime, ctime, mtime, path, inode| Columns {
            kind,
            mode,
            uid,
            gid,
            size,
            atime,
            ctime,
            mtime,
            path,
            inode,
        };
        let (delim, cols, mode_format, path_last, quoted, header_hint, comment): (
            u8,
            Columns,
            ModeFormat,
            bool,
            bool,
            Option<&'static [u8]>,
            Option<Vec<u8>>,
        ) = match p {
            Preset::Icicle9 => {
                (b',', c(Some(0), 1, 2, 3, 4, 5, 6, 7, 8, None), ModeFormat::Decimal, true, true, None, None)
            }
            Preset::Pwalk => (
                b',',
                c(None, 11, 5, 6, 7, 12, 14, 13, 3, Some(0)),
                ModeFormat::Octal,
                false,
                true,
                Some(b"inode,"),
                None,
            ),
            Preset::Ne2scan => (
                b'|',
                c(None, 5, 3, 4, 6, 0, 1, 2, 8, Some(7)),
                ModeFormat::Octal,
                true,
                false,
                None,
                Some(b"#".to_vec()),
            ),
        };
        let mut l = Layout {
            delim,
            cols,
            mode_format,
            path_last,
            quoted,
            header: false,
            header_hint,
            comment,
            strip_prefix: String::new(),
            path_prefix: String::new(),
            path_slash: p == Preset::Ne2scan,
            nfields: 0,
            preset: Some(p),
            custom: false,
        };
        l.nfields = l.max_col() + 1;
        if p == Preset::Pwalk {
            l.nfields = 17;
        }
        l
    }

    /// How an input of this layout shows that it is whole.
    pub fn ending(&self) -> Ending<'static> {
        match self.preset {
            Some(Preset::Ne2scan) if !self.custom => Ending::Trailer { header: b"#IDENT#", trailer: b"#complete#" },
            _ => Ending::Newline,
        }
    }

    fn max_col(&self) -> usize {
        let c = &self.cols;
        [c.kind.unwrap_or(0), c.mode, c.uid, c.gid, c.size, c.atime, c.ctime, c.mtime, c.path, c.inode.unwrap_or(0)]
            .into_iter()
            .max()
            .unwrap_or(0)
    }

    /// The layout the layout keys of `cfg` describe (`preset`, `delimiter`, `columns`,
    /// `mode_format`, `path_last`, `quoted`, `header`, `comment`, `strip_prefix`,
    /// `path_prefix`; `paths` is not looked at). Errors name the key in `ctx`'s section, so
    /// other text sources (the `s3` source) reuse it with their own section.
    pub fn from_config(cfg: &TsvConfig, ctx: &BuildContext<'_>) -> Result<Layout, ConfigError> {
        let mut l = match (cfg.preset, &cfg.columns) {
            (Some(p), _) => Layout::preset(p),
            (None, Some(_)) => Layout::preset(Preset::Icicle9),
            (None, None) => return Err(ctx.invalid("preset", "set `preset` (icicle9, pwalk, ne2scan) or `columns`")),
        };
        if let Some(d) = &cfg.delimiter {
            let d = d.as_bytes();
            if d.len() != 1 {
                return Err(ctx.invalid("delimiter", "must be exactly one ASCII character"));
            }
            l.delim = d[0];
        }
        if let Some(c) = &cfg.columns {
            l.cols = c.clone();
            l.nfields = l.max_col() + 1;
            l.header_hint = None;
            l.custom = true;
            l.path_slash = false;
        }
        if let Some(m) = cfg.mode_format {
            l.mode_format = m;
        }
        if let Some(p) = cfg.path_last {
            l.path_last = p;
        }
        if let Some(q) = cfg.quoted {
            l.quoted = q;
        }
        if let Some(h) = cfg.header {
            l.header = h;
        }
        if let Some(c) = &cfg.comment {
            l.comment = (!c.is_empty()).then(|| c.as_bytes().to_vec());
        }
        if l.path_last && l.cols.path != l.max_col() {
            return Err(ctx.invalid("columns.path", "with path_last the path must be the last column"));
        }
        l.strip_prefix = cfg.strip_prefix.clone();
        l.path_prefix = cfg.path_prefix.clone();
        Ok(l)
    }

    /// Whether the line at byte `offset` of its input is not a row: a header (first line,
    /// with `header` or a preset's header hint) or a comment.
    pub fn skips(&self, line: &[u8], offset: u64) -> bool {
        (offset == 0 && (self.header || self.header_hint.is_some_and(|h| line.starts_with(h))))
            || self.comment.as_ref().is_some_and(|c| line.starts_with(c))
    }

    /// The layout's name in messages.
    fn describe(&self) -> String {
        match self.preset {
            Some(p) if !self.custom => format!("{p:?} preset").to_lowercase(),
            _ => "configured column".to_string() + " layout",
        }
    }

    /// Format drift is one error at the first row of a file, not a reject per row: the
    /// first row (after a header or comments) must parse, and a pwalk header must be pwalk's.
    pub fn check_first_row(&self, path: &std::path::Path) -> Result<(), SourceError> {
        let fail = |line: u64, reason: String| SourceError::Io {
            path: path.to_path_buf(),
            reason: format!(
                "line {line}: the file does not match the {}: {reason} (a producer that changed its columns?)",
                self.describe()
            ),
        };
        if self.preset == Some(Preset::Pwalk) && !self.custom {
            if let Some((line, 1)) = first_row(path, |_, _| false)? {
                if line.starts_with(b"inode,") && line != PWALK_HEADER.as_bytes() {
                    return Err(fail(1, format!("the header is not pwalk's `{PWALK_HEADER}`")));
                }
            }
        }
        let Some((line, n)) = first_row(path, |l, o| self.skips(l, o))? else {
            return Ok(());
        };
        self.parse(&line, &mut Scratch::default()).map(|_| ()).map_err(|e| fail(n, e))
    }

    /// Where the path field begins in `line`, for a layout whose path is the last field (as
    /// the row holds it: quoted, perhaps, and before any prefix rewrite).
    pub(super) fn path_start(&self, line: &[u8]) -> Option<usize> {
        let mut pos = 0;
        for _ in 0..self.cols.path {
            pos += memchr::memchr(self.delim, &line[pos..])? + 1;
        }
        if self.path_slash {
            // Past lester's OST objects and FID, to the field that starts with `/`.
            while line.get(pos) != Some(&b'/') {
                pos += memchr::memchr(self.delim, &line[pos..])? + 1;
            }
        }
        Some(pos)
    }

    /// The columns of a pwalk row of `n` fields (pwalk's own history: 17 since 2017-04-27,
    /// 16 from 2017-03-21 (st_nlink), 15 before (no st_dev, no st_nlink)); None when `n` is
    /// no pwalk's.
    fn pwalk_columns(n: usize) -> Option<Columns> {
        let c = |mode, size, atime, mtime, ctime| Columns {
            kind: None,
            mode,
            uid: 5,
            gid: 6,
            size,
            atime,
            ctime,
            mtime,
            path: 3,
            inode: Some(0),
        };
        match n {
            17 => Some(c(11, 7, 12, 13, 14)),
            16 => Some(c(10, 7, 11, 12, 13)),
            15 => Some(c(9, 7, 10, 11, 12)),
            _ => None,
        }
    }

    /// The path a row names, when its fields split as a row's do (for the scope of a
    /// reject; escaped, [`icicle_core::name`]).
    pub fn path_of(&self, line: &[u8]) -> Option<String> {
        let mut s = Scratch::default();
        let cols = self.split_fields(line, &mut s.fields, &mut s.bytes).ok()?;
        let field = *s.fields.get(cols.as_ref().unwrap_or(&self.cols).path)?;
        let raw = icicle_core::name::escape(field.get(line, &s.bytes));
        crate::fields::rewrite_prefix(&raw, &self.strip_prefix, &self.path_prefix, &mut s.path);
        Some(s.path)
    }

    /// Parse one line into a record whose path is borrowed from `line`, or from `scratch`
    /// when it was quoted or its prefix is rewritten.
    pub fn parse<'p>(&self, line: &'p [u8], scratch: &'p mut Scratch) -> Result<FileRecord<'p>, String> {
        let Scratch { fields, bytes, path, storage } = scratch;
        let pwalk_cols = self.split_fields(line, fields, bytes)?;
        let (fields, bytes): (&Vec<Field>, &'p Vec<u8>) = (fields, bytes);
        let c = pwalk_cols.as_ref().unwrap_or(&self.cols);
        let f = |i: usize| -> &'p [u8] { fields[i].get(line, bytes) };
        let mut mode = self.parse_mode(f(c.mode))?;
        let kind = match c.kind {
            Some(k) => match f(k) {
                b"f" | b"F" => FileKind::File,
                b"l" | b"L" => FileKind::Link,
                b"d" | b"D" => FileKind::Dir,
                other => return Err(format!("type: `{}` is not f, l or d", String::from_utf8_lossy(other))),
            },
            None => FileKind::from_mode(mode),
        };
        if mode & icicle_core::record::S_IFMT == 0 {
            mode |= kind.type_bits();
        }
        let uid = parse_u32(f(c.uid), "uid")?;
        let gid = parse_u32(f(c.gid), "gid")?;
        let size = parse_u64(f(c.size), "size")?;
        let atime = parse_i64(f(c.atime), "atime")?;
        let ctime = parse_i64(f(c.ctime), "ctime")?;
        let mtime = parse_i64(f(c.mtime), "mtime")?;
        let inode = match c.inode {
            Some(i) => parse_inode(f(i), "inode")?,
            None => 0,
        };
        let raw_path = f(c.path);
        // Names as bytes: what is not UTF-8 (or a control character) is escaped, as every
        // source escapes it.
        let plain = std::str::from_utf8(raw_path).ok().filter(|p| icicle_core::name::is_plain_str(p));
        let path: &'p str =
            if let Some(p) = plain.filter(|_| self.strip_prefix.is_empty() && self.path_prefix.is_empty()) {
                p
            } else {
                let text = icicle_core::name::escape(raw_path);
                crate::fields::rewrite_prefix(&text, &self.strip_prefix, &self.path_prefix, path);
                let path: &'p String = path;
                path
            };
        if path.is_empty() {
            return Err("empty path".into());
        }
        // lester's fields between the inode and the path: OST objects, then (show_fid) a FID.
        let mut known = None;
        if self.path_slash {
            if let (Some(Field::Line(_, e)), Some(Field::Line(s, _))) = (fields.get(c.path - 1), fields.get(c.path)) {
                if *s > e + 1 {
                    lester_storage(&line[e + 1..s - 1], self.delim, storage);
                    known = (!storage.is_empty()).then_some(&*storage);
                }
            }
        }
        let attrs = Attrs { mode, uid, gid, size, atime, ctime, mtime, inode };
        Ok(FileRecord { path, kind, attrs, storage: known })
    }

    fn is_pwalk(&self) -> bool {
        self.preset == Some(Preset::Pwalk) && !self.custom
    }

    /// Where `line`'s fields are (`fields`), unquoted into `bytes` where they were quoted;
    /// for an older pwalk row, the columns of its version.
    fn split_fields(
        &self,
        line: &[u8],
        fields: &mut Vec<Field>,
        bytes: &mut Vec<u8>,
    ) -> Result<Option<Columns>, String> {
        fields.clear();
        bytes.clear();
        if self.path_last && self.path_slash {
            let start = self
                .path_start(line)
                .ok_or_else(|| format!("expected {} fields and a path starting with `/`", self.cols.path))?;
            let mut pos = 0;
            while fields.len() < self.cols.path {
                let i = pos + memchr::memchr(self.delim, &line[pos..]).unwrap_or(line.len() - pos);
                fields.push(Field::Line(pos, i));
                pos = i + 1;
            }
            fields.push(Field::Line(start, line.len()));
            return Ok(None);
        }
        if self.path_last {
            // The delimiters of the short leading fields from one mask, the rest (if any)
            // found one after the other.
            let mut pos = 0;
            let mut mask = delimiter_mask(line, self.delim);
            while fields.len() < self.cols.path && mask != 0 {
                let i = mask.trailing_zeros() as usize;
                mask &= mask - 1;
                fields.push(Field::Line(pos, i));
                pos = i + 1;
            }
            while fields.len() < self.cols.path {
                match memchr::memchr(self.delim, &line[pos..]) {
                    Some(i) => {
                        fields.push(Field::Line(pos, pos + i));
                        pos += i + 1;
                    }
                    None => return Err(format!("expected {} fields, found {}", self.cols.path + 1, fields.len() + 1)),
                }
            }
            fields.push(if self.quoted {
                unquote(line, pos, line.len(), bytes)?
            } else {
                Field::Line(pos, line.len())
            });
            return Ok(None);
        }
        if self.is_pwalk() {
            // pwalk 2.6.7 on: 17 fields, `""` inside quotes, st_mode quoted (`\"%07o\"` in every
            // version); before: 15 or 16 fields with backslash escapes
            // (fizwit/filesystem-reporting-tools pwalk.c history).
            if split_quoted(line, self.delim, fields, bytes).is_ok()
                && fields.len() == 17
                && matches!(fields[11], Field::Scratch(..))
            {
                return Ok(None);
            }
            fields.clear();
            bytes.clear();
            crate::fields::split_backslash_quoted(line, self.delim, fields, bytes)?;
            return match Self::pwalk_columns(fields.len()) {
                Some(c) if fields.len() < 17 => Ok(Some(c)),
                _ => Err(format!(
                    "expected 17 fields with a quoted st_mode (pwalk 2.6.7 on) or 15 or 16 (older pwalk), found {}",
                    fields.len()
                )),
            };
        }
        if self.quoted {
            split_quoted(line, self.delim, fields, bytes)?;
        } else {
            let mut pos = 0;
            for part in line.split(|&b| b == self.delim) {
                fields.push(Field::Line(pos, pos + part.len()));
                pos += part.len() + 1;
            }
        }
        if fields.len() != self.nfields {
            return Err(format!("expected {} fields, found {}", self.nfields, fields.len()));
        }
        Ok(None)
    }

    /// The mode column's value, as `mode_format` writes it.
    fn parse_mode(&self, field: &[u8]) -> Result<u32, String> {
        match self.mode_format {
            ModeFormat::Decimal => parse_u32(field, "mode"),
            ModeFormat::Octal => parse_octal(field, "mode"),
            ModeFormat::Symbolic => {
                parse_mode_string(std::str::from_utf8(field).map_err(|_| "mode is not UTF-8".to_string())?)
            }
        }
    }

    /// Whether [`Layout::parse`] would certainly not return a directory for `line` (the
    /// directory pre-pass skips such rows unparsed). Only layouts with the path last are
    /// judged: the type column (or, without one, the mode) is found as `parse` finds it; a
    /// row too short to have it is rejected by `parse`, which is not a directory either.
    pub(super) fn surely_not_directory(&self, line: &[u8]) -> bool {
        let col = self.cols.kind.unwrap_or(self.cols.mode);
        if !self.path_last || col >= self.cols.path {
            return false;
        }
        let mut pos = 0;
        for _ in 0..col {
            match memchr::memchr(self.delim, &line[pos..]) {
                Some(i) => pos += i + 1,
                None => return true,
            }
        }
        let Some(len) = memchr::memchr(self.delim, &line[pos..]) else { return true };
        let field = &line[pos..pos + len];
        match self.cols.kind {
            Some(_) => !matches!(field, b"d" | b"D"),
            None => self.parse_mode(field).map_or(true, |m| FileKind::from_mode(m) != FileKind::Dir),
        }
    }
}

/// lester's OST objects (`1:3b2d4f,0:3b2c11`: `%u:%lx` per stripe, last stripe first; empty
/// without objects; `UNKNOWN LOV ...` for a composite layout) and, with `show_fid`, the FID
/// (`0x200000401:0x1c:0x0`), as `action-fslist.c` prints them (ORNL-TechInt/lester@a1c1323,
/// `report_osts`, `report_fid`); what does not have these shapes is left out.
fn lester_storage(text: &[u8], delim: u8, st: &mut icicle_core::record::Storage) {
    st.osts.clear();
    st.fid = None;
    st.stripe_count = None;
    let mut parts = text.split(|&b| b == delim);
    if let Some(objects) = parts.next().filter(|o| !o.is_empty()) {
        let osts: Option<Vec<u32>> = objects
            .split(|&b| b == b',')
            .map(|o| {
                let (ost, obj) = std::str::from_utf8(o).ok()?.split_once(':')?;
                u64::from_str_radix(obj, 16).ok()?;
                ost.parse::<u32>().ok()
            })
            .collect();
        if let Some(osts) = osts {
            st.stripe_count = Some(osts.len() as u32);
            for o in osts.into_iter().rev() {
                if !st.osts.contains(&o) {
                    st.osts.push(o);
                }
            }
        }
    }
    if let Some(fid) = parts.next().and_then(|f| std::str::from_utf8(f).ok()) {
        let hex =
            |x: &str| x.strip_prefix("0x").is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()));
        if fid.split(':').count() == 3 && fid.split(':').all(hex) {
            st.fid = Some(format!("[{fid}]"));
        }
    }
}
