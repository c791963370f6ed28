//! Splittable line-oriented text inputs: memory-mapped files cut into byte ranges at line
//! boundaries so that one huge file is read by every worker.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::error::SourceError;
use crate::traits::Split;

/// How input names are matched against patterns, for paths and S3 keys alike (the `glob`
/// crate's dialect): `*` and `?` stay within one `/`-separated part, `**` spans parts, `[...]`
/// is a class, and a leading `.` is matched only by a literal one.
pub const GLOB_OPTIONS: glob::MatchOptions =
    glob::MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: true };

/// Expand `paths` into input files: a file; a directory (its files, sorted); or a glob
/// pattern (`*`, `?`, `[a-z]`, and `**` for any depth, e.g. `/listings/**/*.csv`), its
/// matching files sorted. A pattern or directory that yields no file is an error naming
/// it, as is a path that does not exist: an unmounted or empty input must not read as an
/// empty file system. A file named twice is read once.
pub fn expand_inputs(paths: &[PathBuf]) -> Result<Vec<PathBuf>, SourceError> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in paths {
        let s = p.to_str().ok_or_else(|| SourceError::Io { path: p.clone(), reason: "not valid UTF-8".into() })?;
        // A path that exists is read as it is, even with `?` or `[` in its name.
        let mut found: Vec<PathBuf> = if s.contains(['*', '?', '[']) && !p.exists() {
            let paths = glob::glob_with(s, GLOB_OPTIONS)
                .map_err(|e| SourceError::Io { path: p.clone(), reason: format!("not a valid pattern: {e}") })?;
            let mut v = Vec::new();
            for m in paths {
                let m = m.map_err(|e| SourceError::Io {
                    path: e.path().to_path_buf(),
                    reason: format!("while matching {s}: {}", e.error()),
                })?;
                if is_input_file(&m)? {
                    v.push(m);
                }
            }
            if v.is_empty() {
                return Err(SourceError::Io {
                    path: p.clone(),
                    reason: "the pattern matches no file (an empty or unmounted directory?)".into(),
                });
            }
            v
        } else if p.is_dir() {
            let io = |e: std::io::Error| SourceError::Io { path: p.clone(), reason: e.to_string() };
            let mut v = Vec::new();
            for e in std::fs::read_dir(p).map_err(io)? {
                let f = e.map_err(io)?.path();
                if is_input_file(&f)? {
                    v.push(f);
                }
            }
            if v.is_empty() {
                return Err(SourceError::Io {
                    path: p.clone(),
                    reason: "the directory holds no file (empty or unmounted?)".into(),
                });
            }
            v
        } else {
            match std::fs::metadata(p) {
                Ok(md) if md.is_file() => vec![p.clone()],
                Ok(_) => {
                    return Err(SourceError::Io {
                        path: p.clone(),
                        reason: "neither a regular file nor a directory".into(),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(SourceError::Io { path: p.clone(), reason: "no such file or directory".into() })
                }
                Err(e) => return Err(SourceError::Io { path: p.clone(), reason: format!("cannot be checked: {e}") }),
            }
        };
        found.sort();
        out.extend(found.into_iter().filter(|f| seen.insert(f.clone())));
    }
    Ok(out)
}

/// Whether `p`, found in a directory or by a pattern, is an input (a regular file, through
/// symlinks). An entry whose kind cannot be told (a symlink into an unmounted file system,
/// EACCES, EIO, ESTALE) is an error naming it, never skipped: its records would be deleted.
fn is_input_file(p: &Path) -> Result<bool, SourceError> {
    std::fs::metadata(p)
        .map(|md| md.is_file())
        .map_err(|e| SourceError::Io { path: p.to_path_buf(), reason: format!("cannot be checked: {e}") })
}

/// Cut each file into splits of about `split_bytes` (weight = bytes).
pub fn byte_splits(files: &[PathBuf], split_bytes: u64) -> Result<Vec<Split>, SourceError> {
    let mut out = Vec::new();
    let split_bytes = split_bytes.max(1);
    for f in files {
        let len = std::fs::metadata(f).map_err(|e| SourceError::Io { path: f.clone(), reason: e.to_string() })?.len();
        if len <= split_bytes {
            out.push(Split::whole(f.clone(), len));
            continue;
        }
        let mut start = 0;
        while start < len {
            let end = (start + split_bytes).min(len);
            out.push(Split {
                name: f.display().to_string(),
                path: f.clone(),
                range: Some((start, end)),
                weight: end - start,
                scope: None,
                version: None,
            });
            start = end;
        }
    }
    Ok(out)
}

/// Cut a split of [`byte_splits`] (whole or a range) into ranges of about `bytes`, named as
/// it was: the same lines are read as planning with `split_bytes = bytes` would read.
pub fn divide_byte_split(split: &Split, bytes: u64) -> Vec<Split> {
    let (start, end) = split.range.unwrap_or((0, split.weight));
    let bytes = bytes.max(1);
    let mut out = Vec::new();
    let mut at = start;
    while at < end {
        let to = (at + bytes).min(end);
        out.push(Split { range: Some((at, to)), weight: to - at, ..split.clone() });
        at = to;
    }
    if out.is_empty() {
        out.push(split.clone());
    }
    out
}

/// Map a file read-only (for benchmark inputs that the process itself wrote; snapshot
/// inputs are read with [`read_lines`], which a truncated file cannot crash).
pub fn map_file(path: &Path) -> Result<Option<Mmap>, SourceError> {
    let f = File::open(path).map_err(|e| SourceError::Io { path: path.to_path_buf(), reason: e.to_string() })?;
    let len = f.metadata().map_err(|e| SourceError::Io { path: path.to_path_buf(), reason: e.to_string() })?.len();
    if len == 0 {
        return Ok(None);
    }
    // SAFETY: a read-only map of a file this process made and does not change.
    let m =
        unsafe { Mmap::map(&f) }.map_err(|e| SourceError::Io { path: path.to_path_buf(), reason: e.to_string() })?;
    let _ = m.advise(memmap2::Advice::Sequential);
    Ok(Some(m))
}

/// Bytes read from a text input at a time.
const READ_BYTES: usize = 4 << 20;
/// The longest line a text input may have.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Call `f(line, offset)` for every line of `path` that starts inside `range` (the whole
/// file when `None`), without the trailing `\n` or `\r\n`, reading with `pread` into a
/// bounded buffer (memory stays flat however large the input). A file that is shorter than
/// the range, or shrinks while it is read, is an error naming the offsets, never a signal.
pub fn read_lines(path: &Path, range: Option<(u64, u64)>, f: impl FnMut(&[u8], u64)) -> Result<(), SourceError> {
    read_lines_until(path, range, true, f).map(|_| ())
}

/// How a [`read_whole_lines`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinesEnd {
    /// This range holds the file's last line (or the file is empty and the range its start):
    /// the one read that can tell how the file ends.
    pub at_eof: bool,
    /// The offset of the file's last line when it has no `\n` (the file was cut short, or is
    /// still being written): that line was not passed on.
    pub unterminated: Option<u64>,
    /// The file is empty (and the range its start).
    pub empty: bool,
}

/// [`read_lines`], except that a last line without its `\n` is not passed to `f` but
/// reported: a listing cut inside a row would otherwise yield a record for a path that was
/// never there (`.../f1024-217.` for `.../f1024-217.txt`).
pub fn read_whole_lines(
    path: &Path,
    range: Option<(u64, u64)>,
    f: impl FnMut(&[u8], u64),
) -> Result<LinesEnd, SourceError> {
    read_lines_until(path, range, false, f)
}

fn read_lines_until(
    path: &Path,
    range: Option<(u64, u64)>,
    pass_unterminated: bool,
    mut f: impl FnMut(&[u8], u64),
) -> Result<LinesEnd, SourceError> {
    use std::os::unix::fs::FileExt;
    let err = |reason: String| SourceError::Io { path: path.to_path_buf(), reason };
    let file = File::open(path).map_err(|e| err(e.to_string()))?;
    let len = file.metadata().map_err(|e| err(e.to_string()))?.len();
    let (start, end) = range.unwrap_or((0, len));
    let empty = len == 0 && start == 0;
    let mut ended = LinesEnd { at_eof: empty, unterminated: None, empty };
    if len < end {
        return Err(err(format!("the file is {len} bytes, shorter than when it was planned (a split ends at byte {end}): truncated while being read?")));
    }
    let mut buf = vec![0u8; READ_BYTES.min((end - start) as usize + 4096)];
    let mut filled = 0usize;
    // The file offset of buf[0]; reading starts one byte early to see whether `start` begins
    // a line (the line it falls inside belongs to the previous split).
    let mut base = start.saturating_sub(1);
    let mut at_line_start = start == 0;
    loop {
        if filled == buf.len() {
            // A line longer than the buffer: grow it, up to a bound (a file without newlines
            // is no listing, and must not be read into memory whole).
            if buf.len() >= MAX_LINE_BYTES {
                return Err(err(format!(
                    "a line of more than {} MiB at byte {base}: not a text listing?",
                    MAX_LINE_BYTES >> 20
                )));
            }
            buf.resize((buf.len() * 2).min(MAX_LINE_BYTES), 0);
        }
        let at = base + filled as u64;
        let n = loop {
            match file.read_at(&mut buf[filled..], at) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(err(format!("reading at byte {at}: {e}"))),
            }
        };
        let eof = n == 0;
        if eof && at < end {
            return Err(err(format!(
                "the file ended at byte {at} while being read (expected {end}): truncated while being read?"
            )));
        }
        filled += n;
        let mut pos = 0usize;
        if !at_line_start {
            match memchr::memchr(b'\n', &buf[..filled]) {
                Some(i) => {
                    pos = i + 1;
                    at_line_start = true;
                }
                None if eof => return Ok(ended),
                None => {
                    base += filled as u64;
                    filled = 0;
                    continue;
                }
            }
        }
        loop {
            let off = base + pos as u64;
            if off >= end || (eof && pos >= filled) {
                return Ok(ended);
            }
            let stop = match memchr::memchr(b'\n', &buf[pos..filled]) {
                Some(i) => pos + i,
                None if eof && !pass_unterminated => {
                    return Ok(LinesEnd { at_eof: true, unterminated: Some(off), empty: false })
                }
                None if eof => filled,
                None => break,
            };
            let mut line = &buf[pos..stop];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            f(line, off);
            ended.at_eof = off + (stop - pos) as u64 + 1 >= len;
            pos = stop + 1;
        }
        buf.copy_within(pos..filled, 0);
        filled -= pos;
        base += pos as u64;
    }
}

/// Call `f(line, offset)` for every line that starts inside `range` of `data` (without the
/// trailing `\n` or `\r\n`). `f` returns progress-worthy byte counts via the return value.
pub fn for_each_line(data: &[u8], range: Option<(u64, u64)>, mut f: impl FnMut(&[u8], u64)) {
    let (start, end) = match range {
        Some((s, e)) => (s as usize, (e as usize).min(data.len())),
        None => (0, data.len()),
    };
    let mut pos = if start == 0 {
        0
    } else {
        match memchr::memchr(b'\n', &data[start - 1..]) {
            Some(i) => start + i,
            None => return,
        }
    };
    while pos < end {
        let stop = memchr::memchr(b'\n', &data[pos..]).map(|i| pos + i).unwrap_or(data.len());
        let mut line = &data[pos..stop];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        f(line, pos as u64);
        pos = stop + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cover_every_line_exactly_once() {
        let mut text = Vec::new();
        for i in 0..1000 {
            text.extend_from_slice(format!("line {i} {}\n", "x".repeat(i % 37)).as_bytes());
        }
        text.extend_from_slice(b"last line without newline");
        for chunk in [1usize, 7, 64, 1000, 100_000] {
            let mut seen = Vec::new();
            let mut s = 0;
            while s < text.len() {
                let e = (s + chunk).min(text.len());
                for_each_line(&text, Some((s as u64, e as u64)), |l, off| seen.push((off, l.to_vec())));
                s = e;
            }
            let mut whole = Vec::new();
            for_each_line(&text, None, |l, off| whole.push((off, l.to_vec())));
            assert_eq!(seen, whole, "chunk {chunk}");
            assert_eq!(whole.len(), 1001);
        }
    }

    #[test]
    fn the_file_reader_agrees_with_the_slice_reader() {
        let tmp = tempfile::tempdir().unwrap();
        let mut text = Vec::new();
        let mut rng = crate::rng::Rng::new(7);
        for i in 0..600 {
            let width = (rng.next_u64() % 9000) as usize;
            text.extend_from_slice(format!("{i} {}\r\n", "y".repeat(width)).as_bytes());
        }
        text.extend_from_slice(b"\n\nno newline at the end");
        let path = tmp.path().join("in.txt");
        std::fs::write(&path, &text).unwrap();
        let mut whole = Vec::new();
        for_each_line(&text, None, |l, off| whole.push((off, l.to_vec())));
        for chunk in [997u64, 4096, 100_000, 1 << 30] {
            let mut seen = Vec::new();
            let mut s = 0u64;
            while s < text.len() as u64 {
                let e = (s + chunk).min(text.len() as u64);
                read_lines(&path, Some((s, e)), |l, off| seen.push((off, l.to_vec()))).unwrap();
                s = e;
            }
            assert_eq!(seen.len(), whole.len(), "chunk {chunk}");
            assert!(seen == whole, "chunk {chunk}");
        }
        let mut all = Vec::new();
        read_lines(&path, None, |l, off| all.push((off, l.to_vec()))).unwrap();
        assert!(all == whole);
    }

    #[test]
    fn a_file_without_newlines_is_an_error_not_an_allocation() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("zeros");
        std::fs::File::create(&path).unwrap().set_len(40 << 20).unwrap();
        let e = read_lines(&path, None, |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("a line of more than 16 MiB at byte 0"), "{e}");
    }

    #[test]
    fn a_truncated_file_is_an_error_not_a_signal() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("in.txt");
        std::fs::write(&path, "a\nb\nc\n").unwrap();
        let e = read_lines(&path, Some((0, 100)), |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("shorter than when it was planned"), "{e}");
        // Shrinks between two reads of the same split.
        let mut big = Vec::new();
        for i in 0..2_000_000 {
            big.extend_from_slice(format!("{i}\n").as_bytes());
        }
        std::fs::write(&path, &big).unwrap();
        let len = big.len() as u64;
        let mut n = 0;
        let e = read_lines(&path, Some((0, len)), |_, _| {
            n += 1;
            if n == 10 {
                std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(1000).unwrap();
            }
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("ended at byte") && e.contains("truncated"), "{e}");
    }

    #[test]
    fn globs_and_empty_inputs() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        std::fs::create_dir(t.join("empty")).unwrap();
        for f in ["a/x/p1-1.csv", "a/y/p2-2.csv", "a/y/q.csv", "a/top.csv"] {
            std::fs::create_dir_all(t.join(f).parent().unwrap()).unwrap();
            std::fs::write(t.join(f), "x").unwrap();
        }
        let names = |pats: &[&str]| -> Result<Vec<String>, String> {
            let paths: Vec<PathBuf> = pats.iter().map(|p| t.join(p)).collect();
            expand_inputs(&paths)
                .map(|v| v.iter().map(|p| p.strip_prefix(t).unwrap().display().to_string()).collect())
                .map_err(|e| e.to_string())
        };
        assert_eq!(names(&["a/*/p*-*.csv"]).unwrap(), ["a/x/p1-1.csv", "a/y/p2-2.csv"]);
        assert_eq!(names(&["a/**/*.csv"]).unwrap(), ["a/top.csv", "a/x/p1-1.csv", "a/y/p2-2.csv", "a/y/q.csv"]);
        assert_eq!(names(&["a/y/?.csv", "a/y/q.csv"]).unwrap(), ["a/y/q.csv"], "named twice, read once");
        assert!(names(&["a/*.tsv"]).unwrap_err().contains("matches no file"));
        assert!(names(&["empty"]).unwrap_err().contains("holds no file"));
        assert!(names(&["missing.csv"]).unwrap_err().contains("no such file"));
        std::fs::write(t.join("run[1].csv"), "x").unwrap();
        assert_eq!(names(&["run[1].csv"]).unwrap(), ["run[1].csv"], "an existing path is literal");
        // A listing that is a link into a file system not mounted now: an error naming it,
        // whether found in a directory or by a pattern.
        std::os::unix::fs::symlink(t.join("unmounted/fs2.csv"), t.join("a/y/fs2.csv")).unwrap();
        for pat in ["a/y", "a/y/*.csv", "a/y/fs2.csv"] {
            let e = names(&[pat]).unwrap_err();
            assert!(
                e.contains("fs2.csv") && (e.contains("cannot be checked") || e.contains("no such file")),
                "{pat}: {e}"
            );
        }
    }

    /// Cut pieces cover the split's bytes once, in order, keeping its name and version.
    #[test]
    fn divided_splits_cover_the_bytes_once() {
        let mut whole = Split::whole(PathBuf::from("/in/a.csv"), 1000);
        whole.version = Some("etag".into());
        let parts = divide_byte_split(&whole, 300);
        let ranges: Vec<(u64, u64)> = parts.iter().map(|p| p.range.unwrap()).collect();
        assert_eq!(ranges, [(0, 300), (300, 600), (600, 900), (900, 1000)]);
        assert!(parts.iter().all(|p| p.name == "/in/a.csv" && p.version.as_deref() == Some("etag")));
        assert_eq!(parts.iter().map(|p| p.weight).sum::<u64>(), 1000);
        let range = Split { range: Some((500, 800)), weight: 300, ..whole.clone() };
        let parts: Vec<(u64, u64)> = divide_byte_split(&range, 200).iter().map(|p| p.range.unwrap()).collect();
        assert_eq!(parts, [(500, 700), (700, 800)]);
        let empty = Split::whole(PathBuf::from("/in/empty.csv"), 0);
        assert_eq!(divide_byte_split(&empty, 10).len(), 1);
    }
}
