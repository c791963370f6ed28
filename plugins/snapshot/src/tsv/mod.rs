//! `tsv`: delimited listings with a configurable delimiter and column map, and presets for
//! Icicle's 9-column preprocessed CSV, pwalk CSV and lester's ne2scan.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use icicle_core::record::{parse_mode_string, FileKind, FileRecord, Reject};
use icicle_core::registry::{BuildContext, ComponentConfig};
use icicle_core::text::{self, byte_splits, expand_inputs};
use icicle_core::traits::{RowSink, Split};
use icicle_core::Attrs;
use icicle_core::{ConfigError, Source, SourceError};
use serde::Deserialize;

mod layout;
pub use layout::{Layout, PWALK_HEADER};

use crate::fields::{
    delimiter_mask, parse_i64, parse_inode, parse_octal, parse_u32, parse_u64, split_quoted, unquote, Field,
};

/// How the mode column is written.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ModeFormat {
    /// `33188` (st_mode as a decimal integer, as GUFI stores it).
    Decimal,
    /// `100644` or `0644`.
    Octal,
    /// `-rw-r--r--`.
    Symbolic,
}

/// Zero-based column positions. `kind` is optional (derived from the mode's type bits), and
/// so is `inode` (0, unknown, without it).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Columns {
    /// `type`: the file type, `f`, `l` or `d` (either case).
    #[serde(default, rename = "type")]
    pub kind: Option<usize>,
    /// The mode, written as `mode_format` says.
    pub mode: usize,
    /// The owner's uid.
    pub uid: usize,
    /// The group's gid.
    pub gid: usize,
    /// The size in bytes.
    pub size: usize,
    /// The access time, epoch seconds.
    pub atime: usize,
    /// The change time, epoch seconds.
    pub ctime: usize,
    /// The modification time, epoch seconds.
    pub mtime: usize,
    /// The path.
    pub path: usize,
    /// The inode number.
    #[serde(default)]
    pub inode: Option<usize>,
}

/// Named layouts.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// Icicle's headerless `type,mode,uid,gid,size,atime,ctime,mtime,path` CSV.
    Icicle9,
    /// pwalk's CSV (`inode,parent-inode,directory-depth,"filename",...`), header optional:
    /// 17 columns with `""` quoting (pwalk 2.6.7 on), or the 15 and 16 columns of pwalk
    /// 2.6–2.6.4 (2013-11 to 2017-04) with backslash escapes (`\"`, `\,`, `\\`).
    Pwalk,
    /// lester `fslist` (ne2scan, its default; lustre; extended): `atime|ctime|mtime|uid|gid|
    /// mode(octal)|size|ino|` then, except in extended, the OST objects (and a FID with
    /// `show_fid`), then the path: the path is the first field from the ninth on that starts
    /// with `/`.
    Ne2scan,
}

/// `[sources.<id>] type = "tsv"`.
#[derive(Debug, Deserialize)]
pub struct TsvConfig {
    /// Input files, directories, or `dir/*.csv` patterns.
    pub paths: Vec<PathBuf>,
    /// A named layout; the keys below override it.
    pub preset: Option<Preset>,
    /// One-character delimiter (`"\t"`, `","`, `"|"`).
    pub delimiter: Option<String>,
    /// Where each value is (instead of a preset's columns).
    pub columns: Option<Columns>,
    /// How the mode column is written.
    pub mode_format: Option<ModeFormat>,
    /// The path is the last column and may itself contain the delimiter.
    pub path_last: Option<bool>,
    /// Fields may be `"`-quoted.
    pub quoted: Option<bool>,
    /// Skip the first line of each file.
    pub header: Option<bool>,
    /// Lines starting with this prefix are skipped (ne2scan `#`).
    pub comment: Option<String>,
    /// Remove this prefix from every path...
    #[serde(default)]
    pub strip_prefix: String,
    /// ...and put this one in its place.
    #[serde(default)]
    pub path_prefix: String,
}

/// Reusable per-worker buffers for [`Layout::parse`].
#[derive(Debug, Default)]
pub struct Scratch {
    fields: Vec<Field>,
    bytes: Vec<u8>,
    path: String,
    /// lester's OST objects and FID of the row (ne2scan).
    storage: icicle_core::record::Storage,
}

/// The `tsv` source.
pub struct TsvSource {
    paths: Vec<PathBuf>,
    layout: Arc<Layout>,
    split_bytes: u64,
}

impl TsvSource {
    /// A source over `paths` with `layout`.
    pub fn new(paths: Vec<PathBuf>, layout: Layout, split_bytes: u64) -> TsvSource {
        TsvSource { paths, layout: Arc::new(layout), split_bytes }
    }
}

/// Read one split of a line-oriented input with `parse`. A rejected row leaves the path it
/// names unknown when `path_of` can still find a valid one there, else everything (the
/// row may have been any file). With an `ending`, an input that cannot be shown complete
/// leaves everything unknown (a versioned run withholds its deletes): one that is empty,
/// whose last line has no newline, or that does not end with its producer's trailer.
pub fn read_lines(
    split: &Split,
    out: &mut dyn RowSink,
    skip: impl Fn(&[u8], u64) -> bool,
    mut parse: impl FnMut(&[u8], &mut dyn FnMut(Result<FileRecord<'_>, String>)),
    path_of: impl Fn(&[u8]) -> Option<String>,
    ending: Option<Ending<'_>>,
) -> Result<(), SourceError> {
    let trailer = match ending {
        Some(Ending::Trailer { header, trailer }) if begins_with(&split.path, header) => Some(trailer),
        _ => None,
    };
    let input = split.name.as_str();
    let start = split.range.map_or(0, |r| r.0);
    let mut last_progress = start;
    let mut end = start;
    let mut ends_with_trailer = false;
    // A whole-file split is checked against the length it was planned with.
    let range = split.range.or(Some((0, split.weight)));
    let ended = text::read_whole_lines(&split.path, range, |line, offset| {
        end = offset + line.len() as u64;
        if line.is_empty() {
            return;
        }
        ends_with_trailer = trailer.is_some_and(|t| line.starts_with(t));
        if skip(line, offset) {
            return;
        }
        parse(line, &mut |res| match res {
            Ok(rec) if rec.kind == FileKind::Dir => out.directory(&rec),
            Ok(rec) => out.record_at(&rec, offset),
            Err(reason) => out.reject(Reject::at_offset(input, offset, reason).naming(path_of(line))),
        });
        if offset - last_progress >= 1 << 20 {
            out.progress(offset - last_progress);
            last_progress = offset;
        }
    })?;
    if let Some(why) = ending.and_then(|_| incomplete(ended, trailer, ends_with_trailer)) {
        out.reject(Reject::not_whole(input, ended.unterminated.unwrap_or(end), why));
    }
    // The whole split is done, its last newline included: the units planned for it.
    let end = split.range.map_or(split.weight, |r| r.1);
    out.progress(end.saturating_sub(last_progress));
    Ok(())
}

/// How a listing shows that it is whole at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending<'a> {
    /// Its last line ends with a newline (pwalk, icicle9, `mmapplypolicy` LIST files).
    Newline,
    /// When it begins with `header`, its last line begins with `trailer`: lester writes the
    /// `#IDENT#` header first and the `#complete#<epoch>` trailer last in its ne2scan format
    /// only (`action-fslist.c` a1c1323, lines 229-254 and 351-358; the `lustre` and
    /// `extended` formats have neither, and are judged by their newline).
    Trailer {
        /// How the producer's first line begins.
        header: &'a [u8],
        /// How its last line begins.
        trailer: &'a [u8],
    },
}

/// Whether the file at `path` begins with `prefix` (a file that cannot be read does not: its
/// read fails on its own).
fn begins_with(path: &std::path::Path, prefix: &[u8]) -> bool {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; prefix.len()];
    std::fs::File::open(path).and_then(|f| f.read_exact_at(&mut buf, 0)).is_ok() && buf == prefix
}

/// Why a read that ended as `ended` cannot be shown to have read the whole input, if so.
fn incomplete(ended: text::LinesEnd, trailer: Option<&[u8]>, ends_with_trailer: bool) -> Option<String> {
    if !ended.at_eof {
        return None;
    }
    if ended.empty {
        return Some(
            "the file is empty: a listing part whose producer failed? (its rows are unknown; deletes are withheld)"
                .into(),
        );
    }
    if ended.unterminated.is_some() {
        return Some(
            "the last line has no newline: the listing was cut short (its rows are unknown; deletes are withheld)"
                .into(),
        );
    }
    match trailer {
        Some(t) if !ends_with_trailer => Some(format!(
            "no `{}` line at the end: the scan did not finish (its rows are unknown; deletes are withheld)",
            String::from_utf8_lossy(t)
        )),
        _ => None,
    }
}

/// The first row of `path` that `skip` does not skip, with its 1-based line number, read
/// from at most the first 1 MiB.
pub fn first_row(
    path: &std::path::Path,
    skip: impl Fn(&[u8], u64) -> bool,
) -> Result<Option<(Vec<u8>, u64)>, SourceError> {
    let mut found = None;
    let mut lineno = 0u64;
    let len =
        std::fs::metadata(path).map_err(|e| SourceError::Io { path: path.to_path_buf(), reason: e.to_string() })?.len();
    text::read_lines(path, Some((0, len.min(1 << 20))), |line, offset| {
        lineno += 1;
        if found.is_none() && !line.is_empty() && !skip(line, offset) {
            found = Some((line.to_vec(), lineno));
        }
    })?;
    Ok(found)
}

#[async_trait]
impl Source for TsvSource {
    async fn plan(&self) -> Result<Vec<Split>, SourceError> {
        let files = expand_inputs(&self.paths)?;
        for f in &files {
            self.layout.check_first_row(f)?;
        }
        byte_splits(&files, self.split_bytes)
    }

    fn divide(&self, split: &Split, bytes: u64) -> Option<Vec<Split>> {
        Some(icicle_core::text::divide_byte_split(split, bytes))
    }

    fn read(&self, split: &Split, out: &mut dyn RowSink) -> Result<(), SourceError> {
        let l = &*self.layout;
        let mut scratch = Scratch::default();
        read_lines(
            split,
            out,
            |line, offset| l.skips(line, offset),
            |line, emit| emit(l.parse(line, &mut scratch)),
            |line| l.path_of(line),
            Some(l.ending()),
        )
    }

    /// Only rows that may be directories are parsed; every other row is handed over by its
    /// path alone (a file record with no attributes): its parent is a directory.
    fn read_directories(&self, split: &Split, out: &mut dyn RowSink) -> Result<(), SourceError> {
        let l = &*self.layout;
        let mut scratch = Scratch::default();
        // Rows in a run of one directory name it once (the field up to its last `/`).
        let mut last_parent = Vec::new();
        let parse = |line: &[u8], emit: &mut dyn FnMut(Result<FileRecord<'_>, String>)| {
            if !l.surely_not_directory(line) {
                return emit(l.parse(line, &mut scratch));
            }
            let Some(raw) = l.path_start(line).filter(|_| l.path_last).map(|at| &line[at..]) else { return };
            let parent = &raw[..memchr::memrchr(b'/', raw).unwrap_or(0)];
            if parent != last_parent.as_slice() {
                last_parent.clear();
                last_parent.extend_from_slice(parent);
                // Placed even when its own name is bad (not UTF-8, a control character).
                if let Some(path) = l.path_of(line).filter(|p| icicle_core::scope::placeable(p)) {
                    emit(Ok(FileRecord { path: &path, kind: FileKind::File, attrs: Default::default(), storage: None }))
                }
            }
        };
        // The main pass reports an input that is not whole.
        read_lines(split, out, |line, offset| l.skips(line, offset), parse, |line| l.path_of(line), None)
    }
}

impl ComponentConfig for TsvConfig {
    type Component = Arc<dyn Source>;

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        Layout::from_config(self, ctx)?;
        if self.paths.is_empty() {
            return Err(ctx.invalid("paths", "list at least one input file"));
        }
        Ok(())
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn Source>, ConfigError> {
        self.validate(ctx)?;
        let layout = Layout::from_config(&self, ctx)?;
        Ok(Arc::new(TsvSource::new(self.paths, layout, crate::split_bytes(ctx))))
    }
}

#[cfg(test)]
mod tests;
