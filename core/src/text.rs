//! Splittable line-oriented text inputs: memory-mapped files cut into byte ranges at line
//! boundaries so that one huge file is read by every worker.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::error::SourceError;
use crate::traits::Split;

/// Expand `paths` (files, directories, or glob-like `dir/*.ext` patterns) into input files.
pub fn expand_inputs(paths: &[PathBuf]) -> Result<Vec<PathBuf>, SourceError> {
    let mut out = Vec::new();
    for p in paths {
        let s = p.to_string_lossy();
        if let Some(star) = s.find('*') {
            let (dir, pat) = match s[..star].rfind('/') {
                Some(i) => (PathBuf::from(&s[..i.max(1)]), &s[i + 1..]),
                None => (PathBuf::from("."), &s[..]),
            };
            let (pre, post) = pat.split_once('*').unwrap_or((pat, ""));
            let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map_err(|e| SourceError::Io { path: dir.clone(), reason: e.to_string() })?
                .filter_map(|e| e.ok())
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.starts_with(pre) && n.ends_with(post) && n.len() >= pre.len() + post.len()
                })
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect();
            found.sort();
            out.extend(found);
        } else if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| SourceError::Io { path: p.clone(), reason: e.to_string() })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            found.sort();
            out.extend(found);
        } else if p.is_file() {
            out.push(p.clone());
        } else {
            return Err(SourceError::Io { path: p.clone(), reason: "no such file or directory".into() });
        }
    }
    Ok(out)
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
            out.push(Split { name: f.display().to_string(), path: f.clone(), range: Some((start, end)), weight: end - start, scope: None });
            start = end;
        }
    }
    Ok(out)
}

/// Map a file read-only.
pub fn map_file(path: &Path) -> Result<Option<Mmap>, SourceError> {
    let f = File::open(path).map_err(|e| SourceError::Io { path: path.to_path_buf(), reason: e.to_string() })?;
    let len = f.metadata().map_err(|e| SourceError::Io { path: path.to_path_buf(), reason: e.to_string() })?.len();
    if len == 0 {
        return Ok(None);
    }
    // SAFETY: the map is read-only; a concurrent truncation of an input snapshot file is
    // outside what a snapshot reader can defend against (the same holds for read()).
    let m = unsafe { Mmap::map(&f) }.map_err(|e| SourceError::Io { path: path.to_path_buf(), reason: e.to_string() })?;
    // Read front to back: let the kernel read ahead further.
    let _ = m.advise(memmap2::Advice::Sequential);
    Ok(Some(m))
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
}
