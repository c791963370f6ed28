//! The reject log: every row that could not become a record, with where and why.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::record::Reject;

/// Rejects kept in memory for the rejects file; beyond this they are only counted.
pub const MAX_KEPT_REJECTS: usize = 1_000_000;

/// Collects rejects from all workers.
#[derive(Debug, Default)]
pub struct RejectLog {
    count: AtomicU64,
    kept: Mutex<Vec<Reject>>,
}

impl RejectLog {
    /// Record one reject.
    pub fn push(&self, r: Reject) {
        let n = self.count.fetch_add(1, Ordering::Relaxed);
        if n < 5 {
            tracing::warn!(message = "rejected row", reject = %r);
        }
        if (n as usize) < MAX_KEPT_REJECTS {
            if let Ok(mut k) = self.kept.lock() {
                k.push(r);
            }
        }
    }

    /// The path prefixes of inputs that could not be read at all.
    pub fn scopes(&self) -> Vec<String> {
        self.kept.lock().map(|k| k.iter().filter_map(|r| r.scope.clone()).collect()).unwrap_or_default()
    }

    /// How many rows were rejected.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Fill in line numbers for rejects that only know their byte offset (by counting
    /// newlines in the input), sort, and write them as JSON lines to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<Vec<Reject>> {
        let mut kept = self.kept.lock().map(|k| k.clone()).unwrap_or_default();
        resolve_lines(&mut kept);
        kept.sort_by(|a, b| (&a.input, a.line, a.offset).cmp(&(&b.input, b.line, b.offset)));
        if let Some(parent) = path.parent() {
            if !parent.as_os_str().is_empty() {
                std::fs::create_dir_all(parent)?;
            }
        }
        let mut w = BufWriter::new(std::fs::File::create(path)?);
        for r in &kept {
            serde_json::to_writer(&mut w, r)?;
            w.write_all(b"\n")?;
        }
        w.flush()?;
        Ok(kept)
    }
}

fn resolve_lines(rejects: &mut [Reject]) {
    let mut by_input: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, r) in rejects.iter().enumerate() {
        if r.line.is_none() && r.offset.is_some() {
            by_input.entry(r.input.clone()).or_default().push(i);
        }
    }
    for (input, mut idx) in by_input {
        let Ok(data) = std::fs::read(PathBuf::from(&input)) else { continue };
        idx.sort_by_key(|&i| rejects[i].offset);
        let (mut pos, mut line) = (0usize, 1u64);
        for i in idx {
            let off = (rejects[i].offset.unwrap_or(0) as usize).min(data.len());
            if off >= pos {
                line += memchr::memchr_iter(b'\n', &data[pos..off]).count() as u64;
                pos = off;
            }
            rejects[i].line = Some(line);
        }
    }
}
