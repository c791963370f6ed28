//! The reject log: every row that could not become a record, with where and why.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use icicle_core::record::Reject;
use icicle_core::scope::Scope;

/// Rejects kept in memory for the rejects file; beyond this they are only counted.
pub const MAX_KEPT_REJECTS: usize = 1_000_000;

/// Distinct unknown scopes kept; past this the whole run's scope is unknown.
pub const MAX_KEPT_SCOPES: usize = 1_000_000;

/// Collects rejects from all workers.
#[derive(Debug, Default)]
pub struct RejectLog {
    count: AtomicU64,
    /// Of which whole inputs (a file, database or directory) that could not be read.
    inputs: AtomicU64,
    kept: Mutex<Vec<Reject>>,
    /// Every reject's scope with its input and reason (never dropped: past the limit the
    /// scope becomes `All`).
    scopes: Mutex<Vec<(Scope, String, String)>>,
}

impl RejectLog {
    /// Record one reject.
    pub fn push(&self, r: Reject) {
        if let Some(scope) = &r.scope {
            if let Ok(mut s) = self.scopes.lock() {
                if s.len() < MAX_KEPT_SCOPES {
                    s.push((scope.clone(), r.input.clone(), r.reason.clone()));
                } else if s.last().is_none_or(|l| l.0 != Scope::All) {
                    s.push((Scope::All, r.input.clone(), format!("more than {MAX_KEPT_SCOPES} unknown scopes")));
                }
            }
        }
        if r.unreadable {
            self.inputs.fetch_add(1, Ordering::Relaxed);
        }
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

    /// What the rejects left unknown, with the input and reason of each.
    pub fn scopes(&self) -> Vec<(Scope, String, String)> {
        self.scopes
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|_| vec![(Scope::All, String::new(), "reject log poisoned".into())])
    }

    /// How many rows were rejected.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// How many of the rejects were whole inputs that could not be read (their scope is
    /// carried over; they do not count towards the row reject ratio).
    pub fn unreadable_inputs(&self) -> u64 {
        self.inputs.load(Ordering::Relaxed)
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

pub(crate) fn resolve_lines(rejects: &mut [Reject]) {
    let mut by_input: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, r) in rejects.iter().enumerate() {
        if r.line.is_none() && r.offset.is_some() {
            by_input.entry(r.input.clone()).or_default().push(i);
        }
    }
    for (input, mut idx) in by_input {
        let Ok(file) = std::fs::File::open(PathBuf::from(&input)) else {
            continue;
        };
        idx.sort_by_key(|&i| rejects[i].offset);
        if let Err(e) = number_lines(file, &idx, rejects) {
            tracing::warn!(message = "could not count lines to name rejects by line (their offsets stand)", input = %input, error = %e);
        }
    }
}

/// Give each of `rejects[idx]` (sorted by offset) the line its offset is on, counting newlines
/// through `file` in bounded chunks (an input may be far larger than memory).
fn number_lines(mut file: std::fs::File, idx: &[usize], rejects: &mut [Reject]) -> std::io::Result<()> {
    use std::io::Read;
    let mut buf = vec![0u8; 1 << 20];
    // Bytes counted so far, and the line the next byte is on.
    let (mut pos, mut line, mut filled, mut start) = (0u64, 1u64, 0usize, 0usize);
    for &i in idx {
        let off = rejects[i].offset.unwrap_or(0);
        while pos < off {
            if start == filled {
                filled = file.read(&mut buf)?;
                start = 0;
                if filled == 0 {
                    break;
                }
            }
            let take = ((off - pos) as usize).min(filled - start);
            line += memchr::memchr_iter(b'\n', &buf[start..start + take]).count() as u64;
            start += take;
            pos += take as u64;
        }
        rejects[i].line = Some(line);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reject_offsets_become_lines_across_read_chunks() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("big.tsv");
        // 40,000 lines of 80 bytes: 3.2 MB, several of the reader's chunks.
        let text: String = (0..40_000).map(|i| format!("{i:079}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        let input = path.display().to_string();
        let lines = [1u64, 2, 13_108, 13_109, 39_999, 40_000];
        let mut rejects: Vec<Reject> =
            lines.iter().rev().map(|l| Reject::at_offset(&input, (l - 1) * 80, "bad")).collect();
        // Past the end (a file that shrank): the last line counted.
        rejects.push(Reject::at_offset(&input, 10_000_000, "bad"));
        resolve_lines(&mut rejects);
        let got: Vec<u64> = rejects.iter().map(|r| r.line.unwrap()).collect();
        let mut want: Vec<u64> = lines.iter().rev().copied().collect();
        want.push(40_001);
        assert_eq!(got, want);
    }
}
