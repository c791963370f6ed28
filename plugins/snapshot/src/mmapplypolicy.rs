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

use crate::fields::{parse_i64, parse_inode, parse_octal, parse_u32, parse_u64, percent_decode};
use crate::tsv::{first_row, read_lines};

/// The SHOW fields of Icicle's NERSC `fs-medium` layout (formats.md §2.3), 18 columns in all.
pub const NERSC18_SHOW: [&str; 13] = ["-", "size", "fileset", "-", "-", "-", "uid", "gid", "mode", "atime", "ctime", "-", "mtime"];

/// `[sources.<id>] type = "mmapplypolicy"`.
#[derive(Debug, Deserialize)]
pub struct MmapplypolicyConfig {
    /// LIST files, directories, or `dir/list.*` patterns.
    pub paths: Vec<PathBuf>,
    /// `nersc18` (default) or `custom` with `show`.
    #[serde(default)]
    pub preset: Option<String>,
    /// Names of the SHOW fields in order: size, uid, gid, mode, atime, ctime, mtime; `-` or
    /// any other name is ignored.
    pub show: Option<Vec<String>>,
    /// Paths were written with `ESCAPE '%...'` (percent-encoded). Default true.
    #[serde(default = "yes")]
    pub escaped: bool,
    #[serde(default)]
    pub strip_prefix: String,
    #[serde(default)]
    pub path_prefix: String,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Default)]
struct ShowMap {
    size: usize,
    uid: usize,
    gid: usize,
    mode: usize,
    atime: usize,
    ctime: usize,
    mtime: usize,
    count: usize,
}

impl ShowMap {
    fn from_names(names: &[String]) -> Result<ShowMap, String> {
        let find = |n: &str| names.iter().position(|x| x == n).ok_or_else(|| format!("`show` lacks `{n}`"));
        Ok(ShowMap {
            size: find("size")?,
            uid: find("uid")?,
            gid: find("gid")?,
            mode: find("mode")?,
            atime: find("atime")?,
            ctime: find("ctime")?,
            mtime: find("mtime")?,
            count: names.len(),
        })
    }
}

/// The `mmapplypolicy` source.
pub struct MmapplypolicySource {
    paths: Vec<PathBuf>,
    show: ShowMap,
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
}

impl MmapplypolicySource {
    /// A source of `paths` in the nersc18 layout (`escaped`: paths written with ESCAPE '%').
    pub fn nersc18(paths: Vec<PathBuf>, escaped: bool) -> MmapplypolicySource {
        let names: Vec<String> = NERSC18_SHOW.iter().map(|s| s.to_string()).collect();
        let show = ShowMap::from_names(&names).unwrap_or_default();
        MmapplypolicySource { paths, show, escaped, strip_prefix: String::new(), path_prefix: String::new(), split_bytes: 64 << 20 }
    }

    /// The path a line names, when it can be decoded (for the scope of a reject).
    fn path_of(&self, line: &[u8]) -> Option<String> {
        let sep = memchr::memmem::find(line, b" -- ")?;
        let raw = &line[sep + 4..];
        let bytes = if self.escaped { percent_decode(raw).ok()? } else { raw.to_vec() };
        let mut out = String::new();
        crate::fields::rewrite_prefix(&String::from_utf8_lossy(&bytes), &self.strip_prefix, &self.path_prefix, &mut out);
        Some(out)
    }

    fn parse<'p>(&self, line: &[u8], scratch: &'p mut Scratch) -> Result<FileRecord<'p>, String> {
        let sep = memchr::memmem::find(line, b" -- ").ok_or("no ` -- ` separator before the path")?;
        let head = &line[..sep];
        let raw_path = &line[sep + 4..];
        let fields = &mut scratch.fields;
        fields.clear();
        let mut i = 0;
        while i < head.len() {
            while i < head.len() && head[i].is_ascii_whitespace() {
                i += 1;
            }
            let s = i;
            while i < head.len() && !head[i].is_ascii_whitespace() {
                i += 1;
            }
            if i > s {
                fields.push((s, i));
            }
        }
        let want = 3 + self.show.count;
        if fields.len() != want {
            return Err(format!("expected {want} fields before ` -- ` (inode gen snapid + {} SHOW fields), found {}", self.show.count, fields.len()));
        }
        let f = |k: usize| -> &[u8] {
            let (s, e) = fields[3 + k];
            &head[s..e]
        };
        let (is, ie) = fields[0];
        let inode = parse_inode(&head[is..ie], "inode")?;
        let m = f(self.show.mode);
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
        let uid = parse_u32(f(self.show.uid), "uid")?;
        let gid = parse_u32(f(self.show.gid), "gid")?;
        let size = parse_u64(f(self.show.size), "size")?;
        let atime = parse_i64(f(self.show.atime), "atime")?;
        let ctime = parse_i64(f(self.show.ctime), "ctime")?;
        let mtime = parse_i64(f(self.show.mtime), "mtime")?;
        let decoded;
        let bytes: &[u8] = if self.escaped {
            decoded = percent_decode(raw_path)?;
            &decoded
        } else {
            raw_path
        };
        let p = std::str::from_utf8(bytes).map_err(|_| format!("path is not valid UTF-8: {}", String::from_utf8_lossy(bytes)))?;
        let path = &mut scratch.path;
        crate::fields::rewrite_prefix(p, &self.strip_prefix, &self.path_prefix, path);
        if path.is_empty() {
            return Err("empty path".into());
        }
        Ok(FileRecord { path: path.as_str(), kind, attrs: Attrs { mode, uid, gid, size, atime, ctime, mtime, inode } })
    }
}

#[async_trait]
impl Source for MmapplypolicySource {
    async fn plan(&self) -> Result<Vec<Split>, SourceError> {
        let files = expand_inputs(&self.paths)?;
        for f in &files {
            // Format drift (another SHOW clause) is one error at the first row.
            if let Some((line, n)) = first_row(f, |_, _| false)? {
                self.parse(&line, &mut Scratch::default()).map_err(|e| SourceError::Io {
                    path: f.clone(),
                    reason: format!("line {n}: the file does not match the configured SHOW fields: {e} (another policy's LIST file?)"),
                })?;
            }
        }
        byte_splits(&files, self.split_bytes)
    }

    fn read(&self, split: &Split, out: &mut dyn RowSink) -> Result<(), SourceError> {
        let mut scratch = Scratch::default();
        read_lines(split, out, |_, _| false, |line, emit| emit(self.parse(line, &mut scratch)), |line| self.path_of(line))
    }
}

impl ComponentConfig for MmapplypolicyConfig {
    type Component = Arc<dyn Source>;

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn Source>, ConfigError> {
        let names: Vec<String> = match (self.preset.as_deref(), &self.show) {
            (_, Some(show)) => show.clone(),
            (None | Some("nersc18"), None) => NERSC18_SHOW.iter().map(|s| s.to_string()).collect(),
            (Some(other), None) => return Err(ctx.invalid("preset", format!("unknown preset `{other}` (available: nersc18; or give `show`)"))),
        };
        let show = ShowMap::from_names(&names).map_err(|e| ctx.invalid("show", e))?;
        if self.paths.is_empty() {
            return Err(ctx.invalid("paths", "list at least one LIST file"));
        }
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
            show: ShowMap::from_names(&NERSC18_SHOW.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap(),
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
            (r.kind, r.attrs.mode, r.attrs.uid, r.attrs.gid, r.attrs.size, r.attrs.atime, r.attrs.ctime, r.attrs.mtime, r.attrs.inode),
            (FileKind::File, 0o100644, 1000, 100, 1234, 10, 20, 30, 37390)
        );
        let dir = b"5 1 0 FAu 4096 proj 4 2 data 0 0 drwxr-sr-x 1 2 0 3 -- %2Fprojectb%2F.snapshots%2F2016-04-15%2Fd";
        assert_eq!(s.parse(dir, &mut sc).unwrap().kind, FileKind::Dir);
    }

    #[test]
    fn bad_lines_give_reasons() {
        let s = src();
        let mut sc = Scratch::default();
        assert!(s.parse(b"1 2 0 -- /x", &mut sc).unwrap_err().contains("expected 16 fields"));
        assert!(s.parse(b"1 2 0 FAu 1", &mut sc).unwrap_err().contains("` -- `"));
        let bad_escape = b"37390 9 0 FAu 1 p 2 1 d 1 1 -rw-r--r-- 1 2 0 3 -- %2Fa%zz";
        assert!(s.parse(bad_escape, &mut sc).unwrap_err().contains("undecodable escape"));
        let not_utf8 = b"37390 9 0 FAu 1 p 2 1 d 1 1 -rw-r--r-- 1 2 0 3 -- %2Fa%FF";
        assert!(s.parse(not_utf8, &mut sc).unwrap_err().contains("UTF-8"));
        let bad_mode = b"37390 9 0 FAu 1 p 2 1 d 1 1 -rw-r--r-x- 1 2 0 3 -- %2Fa";
        assert!(s.parse(bad_mode, &mut sc).is_err());
        let bad_inode = b"37x90 9 0 FAu 1 p 2 1 d 1 1 -rw-r--r-- 1 2 0 3 -- %2Fa";
        assert!(s.parse(bad_inode, &mut sc).unwrap_err().contains("inode: `37x90` is not an integer"));
        let neg_inode = b"-4 9 0 FAu 1 p 2 1 d 1 1 -rw-r--r-- 1 2 0 3 -- %2Fa";
        assert!(s.parse(neg_inode, &mut sc).unwrap_err().contains("inode: `-4` is negative"));
    }
}
