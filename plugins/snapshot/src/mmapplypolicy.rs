//! `mmapplypolicy`: GPFS `mmapplypolicy -I defer` LIST files,
//! `InodeNumber GenNumber SnapId [SHOW fields] -- FullPathToFile`.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use icicle_core::record::{parse_mode_string, FileKind, FileRecord, S_IFMT};
use icicle_core::registry::{BuildContext, ComponentConfig};
use icicle_core::text::{byte_splits, expand_inputs};
use icicle_core::traits::{RowSink, Split};
use icicle_core::Attrs;
use icicle_core::{ConfigError, Source, SourceError};
use serde::Deserialize;

use crate::fields::{parse_inode, parse_octal, parse_u32, parse_u64, percent_decode};
use crate::show::{parse_time, ShowLayout};
use crate::tsv::{first_row, read_lines, Ending};

/// The SHOW fields of Icicle's NERSC `fs-medium` layout (formats.md §2.3), 18 columns in all.
pub const NERSC18_SHOW: [&str; 13] =
    ["-", "size", "fileset", "-", "-", "-", "uid", "gid", "mode", "atime", "ctime", "-", "mtime"];

/// `[sources.<id>] type = "mmapplypolicy"`.
#[derive(Debug, Deserialize)]
pub struct MmapplypolicyConfig {
    /// LIST files, directories, or `dir/list.*` patterns.
    pub paths: Vec<PathBuf>,
    /// `nersc18` (default) or `custom` with `show`.
    #[serde(default)]
    pub preset: Option<String>,
    /// Names of the SHOW values in order: size, uid, gid, mode, atime, ctime, mtime, and
    /// where the policy shows them fileset (`FILESET_NAME`) and pool (`POOL_NAME`), which
    /// records carry as `storage`; `-` or any other name is ignored.
    pub show: Option<Vec<String>>,
    /// The one character between SHOW values (default: runs of spaces), e.g. `"|"` for
    /// `SHOW('|' || varchar(file_size) || '|' || ...)`.
    pub show_delimiter: Option<String>,
    /// SHOW text of `key=value` pairs: the key the policy prints for each of size, uid, gid,
    /// mode, atime, ctime, mtime, and optionally fileset and pool (e.g. `{ size = "s", uid =
    /// "u", ... }`); instead of `show`.
    pub show_keys: Option<std::collections::BTreeMap<String, String>>,
    /// Paths were written with `ESCAPE '%...'` (percent-encoded). Default true.
    #[serde(default = "yes")]
    pub escaped: bool,
    /// Remove this prefix from every path...
    #[serde(default)]
    pub strip_prefix: String,
    /// ...and put this one in its place.
    #[serde(default)]
    pub path_prefix: String,
}

fn yes() -> bool {
    true
}

/// The `mmapplypolicy` source.
pub struct MmapplypolicySource {
    paths: Vec<PathBuf>,
    show: ShowLayout,
    escaped: bool,
    strip_prefix: String,
    path_prefix: String,
    split_bytes: u64,
}

/// Reusable per-worker buffers.
#[derive(Default)]
struct Scratch {
    fields: Vec<(usize, usize)>,
    path: String,
    /// The line's fileset and pool, when the policy shows them.
    storage: icicle_core::record::Storage,
}

impl MmapplypolicySource {
    /// A source of `paths` in the nersc18 layout (`escaped`: paths written with ESCAPE '%').
    pub fn nersc18(paths: Vec<PathBuf>, escaped: bool) -> MmapplypolicySource {
        let names: Vec<String> = NERSC18_SHOW.iter().map(|s| s.to_string()).collect();
        let show = ShowLayout::positional(&names, None).unwrap_or(ShowLayout::Positional {
            at: [None; 9],
            count: 0,
            delimiter: None,
        });
        MmapplypolicySource {
            paths,
            show,
            escaped,
            strip_prefix: String::new(),
            path_prefix: String::new(),
            split_bytes: 64 << 20,
        }
    }

    /// The path a line names, when it can be decoded (for the scope of a reject).
    fn path_of(&self, line: &[u8]) -> Option<String> {
        let sep = memchr::memmem::find(line, b" -- ")?;
        let mut out = String::new();
        self.path_text(&line[sep + 4..], &mut out).ok()?;
        Some(out)
    }

    /// The record path of a line's raw path: percent-decoded when the policy had `ESCAPE`,
    /// its bytes escaped as every source escapes them ([`icicle_core::name`]), the prefix
    /// rewritten.
    fn path_text(&self, raw: &[u8], out: &mut String) -> Result<(), String> {
        let decoded;
        let bytes: &[u8] = if self.escaped {
            decoded = percent_decode(raw)?;
            &decoded
        } else {
            raw
        };
        let text = icicle_core::name::escape(bytes);
        crate::fields::rewrite_prefix(&text, &self.strip_prefix, &self.path_prefix, out);
        if out.is_empty() {
            return Err("empty path".into());
        }
        Ok(())
    }

    fn parse<'p>(&self, line: &[u8], scratch: &'p mut Scratch) -> Result<FileRecord<'p>, String> {
        let sep = memchr::memmem::find(line, b" -- ").ok_or("no ` -- ` separator before the path")?;
        let head = skip_node_prefix(&line[..sep]);
        let raw_path = &line[sep + 4..];
        // InodeNumber GenNumber SnapId, then the SHOW text.
        let mut i = 0;
        let mut fixed = [(0usize, 0usize); 3];
        for (k, slot) in fixed.iter_mut().enumerate() {
            while i < head.len() && head[i].is_ascii_whitespace() {
                i += 1;
            }
            let s = i;
            while i < head.len() && !head[i].is_ascii_whitespace() {
                i += 1;
            }
            if i == s {
                return Err(format!("expected inode, generation and snapshot id before ` -- `, found {k} fields"));
            }
            *slot = (s, i);
        }
        let show_text = &head[i..];
        let v =
            self.show.values(show_text, &mut scratch.fields).map_err(|e| format!("{e} ({})", self.show.describe()))?;
        let inode = parse_inode(&head[fixed[0].0..fixed[0].1], "inode")?;
        let m = v[3];
        let mode = if m.len() == 10 && !m[0].is_ascii_digit() {
            parse_mode_string(std::str::from_utf8(m).map_err(|_| "mode is not UTF-8".to_string())?)?
        } else {
            let v = parse_octal(m, "mode")?;
            if v & S_IFMT == 0 {
                v | icicle_core::record::S_IFREG
            } else {
                v
            }
        };
        let kind = FileKind::from_mode(mode);
        let uid = parse_u32(v[1], "uid")?;
        let gid = parse_u32(v[2], "gid")?;
        let size = parse_u64(v[0], "size")?;
        let atime = parse_time(v[4], "atime")?;
        let ctime = parse_time(v[5], "ctime")?;
        let mtime = parse_time(v[6], "mtime")?;
        let Scratch { path, storage, .. } = scratch;
        self.path_text(raw_path, path)?;
        // FILESET_NAME and POOL_NAME where the policy shows them.
        let text = |b: &[u8]| std::str::from_utf8(b).ok().map(str::trim).filter(|t| !t.is_empty()).map(str::to_string);
        (storage.fileset, storage.pool) = (text(v[7]), text(v[8]));
        let known = (!storage.is_empty()).then_some(&*storage);
        Ok(FileRecord {
            path: path.as_str(),
            kind,
            attrs: Attrs { mode, uid, gid, size, atime, ctime, mtime, inode },
            storage: known,
        })
    }
}

/// A line's head without the `<N> ` mmapplypolicy prints before each record in its own log
/// (NCAR hpc-usage-queries `fs_scans/tests/data/*.list.list_all.log`).
fn skip_node_prefix(head: &[u8]) -> &[u8] {
    if head.first() == Some(&b'<') {
        if let Some(end) = head.iter().position(|&c| c == b'>') {
            if head[1..end].iter().all(u8::is_ascii_digit) {
                return &head[end + 1..];
            }
        }
    }
    head
}

/// Whether a line is one of mmapplypolicy's own messages (`[I] ...`, `[W] ...`, `[E] ...`)
/// rather than a record: a captured log holds both.
pub fn is_message(line: &[u8], _offset: u64) -> bool {
    matches!(line, [b'[', c, b']', ..] if c.is_ascii_uppercase())
}

#[async_trait]
impl Source for MmapplypolicySource {
    async fn plan(&self) -> Result<Vec<Split>, SourceError> {
        let files = expand_inputs(&self.paths)?;
        for f in &files {
            // Format drift (another SHOW clause) is one error at the first row.
            if let Some((line, n)) = first_row(f, is_message)? {
                self.parse(&line, &mut Scratch::default()).map_err(|e| SourceError::Io {
                    path: f.clone(),
                    reason: format!("line {n}: the file does not match the configured SHOW fields: {e} (another policy's LIST file?)"),
                })?;
            }
        }
        byte_splits(&files, self.split_bytes)
    }

    fn divide(&self, split: &Split, bytes: u64) -> Option<Vec<Split>> {
        Some(icicle_core::text::divide_byte_split(split, bytes))
    }

    fn read(&self, split: &Split, out: &mut dyn RowSink) -> Result<(), SourceError> {
        let mut scratch = Scratch::default();
        read_lines(
            split,
            out,
            is_message,
            |line, emit| emit(self.parse(line, &mut scratch)),
            |line| self.path_of(line),
            Some(Ending::Newline),
        )
    }
}

impl MmapplypolicyConfig {
    /// The SHOW layout the settings describe; errors name the key.
    fn show_layout(&self, ctx: &BuildContext<'_>) -> Result<ShowLayout, ConfigError> {
        let delimiter = match self.show_delimiter.as_deref().map(str::as_bytes) {
            None => None,
            Some([d]) if d.is_ascii() && *d != b'\n' => Some(*d),
            Some(_) => return Err(ctx.invalid("show_delimiter", "must be exactly one ASCII character")),
        };
        let show = match (self.preset.as_deref(), &self.show, &self.show_keys) {
            (_, Some(_), Some(_)) => {
                return Err(ctx
                    .invalid("show_keys", "give `show` (values in order) or `show_keys` (key=value pairs), not both"))
            }
            (_, None, Some(keys)) => ShowLayout::keyed(keys).map_err(|e| ctx.invalid("show_keys", e))?,
            (_, Some(show), None) => ShowLayout::positional(show, delimiter).map_err(|e| ctx.invalid("show", e))?,
            (None | Some("nersc18"), None, None) => {
                let names: Vec<String> = NERSC18_SHOW.iter().map(|s| s.to_string()).collect();
                ShowLayout::positional(&names, delimiter).map_err(|e| ctx.invalid("show", e))?
            }
            (Some(other), None, None) => {
                return Err(ctx.invalid(
                    "preset",
                    format!("unknown preset `{other}` (available: nersc18; or give `show` or `show_keys`)"),
                ))
            }
        };
        Ok(show)
    }
}

impl ComponentConfig for MmapplypolicyConfig {
    type Component = Arc<dyn Source>;

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        self.show_layout(ctx)?;
        if self.paths.is_empty() {
            return Err(ctx.invalid("paths", "list at least one LIST file"));
        }
        Ok(())
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn Source>, ConfigError> {
        self.validate(ctx)?;
        let show = self.show_layout(ctx)?;
        Ok(Arc::new(MmapplypolicySource {
            paths: self.paths,
            show,
            escaped: self.escaped,
            strip_prefix: self.strip_prefix,
            path_prefix: self.path_prefix,
            split_bytes: crate::split_bytes(ctx),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src() -> MmapplypolicySource {
        MmapplypolicySource {
            paths: vec![],
            show: ShowLayout::positional(&NERSC18_SHOW.iter().map(|s| s.to_string()).collect::<Vec<_>>(), None)
                .unwrap(),
            escaped: true,
            strip_prefix: "/projectb/.snapshots/2016-04-15".into(),
            path_prefix: "/projectb".into(),
            split_bytes: 1 << 20,
        }
    }

    #[test]
    fn nersc18_line() {
        let s = src();
        let mut sc = Scratch::default();
        let line = b"37390 999490048 0 FAu 1234 proj 2 1 data 1000 100 -rw-r--r-- 10 20 0 30 -- %2Fprojectb%2F.snapshots%2F2016-04-15%2Fa%20b%25.txt";
        let r = s.parse(line, &mut sc).unwrap().to_owned_record();
        assert_eq!(r.path, "/projectb/a b%.txt");
        assert_eq!(
            (
                r.kind,
                r.attrs.mode,
                r.attrs.uid,
                r.attrs.gid,
                r.attrs.size,
                r.attrs.atime,
                r.attrs.ctime,
                r.attrs.mtime,
                r.attrs.inode
            ),
            (FileKind::File, 0o100644, 1000, 100, 1234, 10, 20, 30, 37390)
        );
        let dir = b"5 1 0 FAu 4096 proj 4 2 data 0 0 drwxr-sr-x 1 2 0 3 -- %2Fprojectb%2F.snapshots%2F2016-04-15%2Fd";
        assert_eq!(s.parse(dir, &mut sc).unwrap().kind, FileKind::Dir);
    }

    #[test]
    fn bad_lines_give_reasons() {
        let s = src();
        let mut sc = Scratch::default();
        assert!(s.parse(b"1 2 0 -- /x", &mut sc).unwrap_err().contains("expected 13 SHOW values"));
        assert!(s.parse(b"1 2 0 FAu 1", &mut sc).unwrap_err().contains("` -- `"));
        let bad_escape = b"37390 9 0 FAu 1 p 2 1 d 1 1 -rw-r--r-- 1 2 0 3 -- %2Fa%zz";
        assert!(s.parse(bad_escape, &mut sc).unwrap_err().contains("undecodable escape"));
        // A name that is not UTF-8 keeps its bytes, escaped.
        let not_utf8 =
            b"37390 9 0 FAu 1 p 2 1 d 1 1 -rw-r--r-- 1 2 0 3 -- %2Fprojectb%2F.snapshots%2F2016-04-15%2Fa%FF";
        assert_eq!(s.parse(not_utf8, &mut sc).unwrap().path, "/projectb/a\\xff");
        let bad_mode = b"37390 9 0 FAu 1 p 2 1 d 1 1 -rw-r--r-x- 1 2 0 3 -- %2Fa";
        assert!(s.parse(bad_mode, &mut sc).is_err());
        let bad_inode = b"37x90 9 0 FAu 1 p 2 1 d 1 1 -rw-r--r-- 1 2 0 3 -- %2Fa";
        assert!(s.parse(bad_inode, &mut sc).unwrap_err().contains("inode: `37x90` is not an integer"));
        let neg_inode = b"-4 9 0 FAu 1 p 2 1 d 1 1 -rw-r--r-- 1 2 0 3 -- %2Fa";
        assert!(s.parse(neg_inode, &mut sc).unwrap_err().contains("inode: `-4` is negative"));
    }
}
