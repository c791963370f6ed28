//! The paths first published since the last checkpoint, on disk before their batch is
//! delivered (`<id>.fresh-paths.json`, one JSON string per line, appended): a restart after a
//! kill between delivery and checkpoint compares them too. Appending keeps a seed or rescan
//! delivered in many parts (no checkpoint until the last) linear in what it publishes; the
//! file is emptied once a checkpoint covers its paths.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;

use crate::store::names::Name;
use crate::LocalError;

/// The journal file of one monitor. Only the paths of the batch being built are in memory;
/// those of earlier batches are in the file.
pub struct FreshJournal {
    path: PathBuf,
    file: Option<File>,
    /// Paths first published in this batch, not in the file yet.
    unsynced: Vec<Name>,
    /// Paths in the file that a checkpoint does not cover (carried over a restart included).
    written: usize,
    /// The file holds only paths a checkpoint covers: empty it first.
    reset: bool,
    /// Replace the file whole (atomically), keeping its complete lines unless reset: the first
    /// write of a run (the file may hold paths no checkpoint covers, carried over a restart)
    /// and the one after a failed write.
    rewrite: bool,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> LocalError {
    move |source| LocalError::Io { what, source }
}

impl FreshJournal {
    /// The journal at `path` (read by [`FreshJournal::read_each`], rewritten by the first sync).
    pub fn new(path: PathBuf) -> FreshJournal {
        FreshJournal { path, file: None, unsynced: Vec::new(), written: 0, reset: false, rewrite: true }
    }

    /// Every path `read_each` gives, at once.
    #[cfg(test)]
    pub fn read(&self) -> Result<Vec<String>, LocalError> {
        let mut out = Vec::new();
        self.each(&mut |p| out.push(p))?;
        Ok(out)
    }

    /// The paths an earlier run journaled (none without a file), a path at a time; their count
    /// is kept (they stay in the file until a checkpoint covers them). A last line cut short
    /// (a kill during an append, before that batch was delivered) is left out; any other line
    /// that does not read is an error naming the file and line, as is a file that cannot be
    /// read: deletes may be owed for its paths. A JSON array (an older release's form) reads
    /// too.
    pub fn read_each(&mut self, f: &mut dyn FnMut(String)) -> Result<(), LocalError> {
        let mut n = 0;
        self.each(&mut |p| {
            n += 1;
            f(p)
        })?;
        self.written = n;
        Ok(())
    }

    fn each(&self, f: &mut dyn FnMut(String)) -> Result<(), LocalError> {
        let file = match File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(format!("reading {}", self.path.display()))(e)),
        };
        let bad = |line: usize, e: serde_json::Error| {
            LocalError::Checkpoint(format!("{} line {line}: {e}", self.path.display()))
        };
        let mut read = BufReader::new(file);
        let (mut line, mut at) = (Vec::new(), 0);
        loop {
            line.clear();
            let n = read.read_until(b'\n', &mut line).map_err(io(format!("reading {}", self.path.display())))?;
            if n == 0 {
                return Ok(());
            }
            at += 1;
            if at == 1 && line.first() == Some(&b'[') {
                let mut rest = line.clone();
                std::io::Read::read_to_end(&mut read, &mut rest)
                    .map_err(io(format!("reading {}", self.path.display())))?;
                let all: Vec<String> = serde_json::from_slice(&rest).map_err(|e| bad(1, e))?;
                all.into_iter().for_each(f);
                return Ok(());
            }
            if line.last() != Some(&b'\n') {
                tracing::warn!(message = "the fresh-path journal ends in a line cut short (its batch was never delivered); left out", file = %self.path.display());
                return Ok(());
            }
            if line.len() > 1 {
                f(serde_json::from_slice(&line[..line.len() - 1]).map_err(|e| bad(at, e))?);
            }
        }
    }

    /// Whether paths no checkpoint covers are journaled (or about to be).
    pub fn holds_any(&self) -> bool {
        self.written > 0 || !self.unsynced.is_empty()
    }

    /// `path` was first published in this batch.
    pub fn push(&mut self, path: Name) {
        self.unsynced.push(path);
    }

    /// A checkpoint covers every path journaled so far.
    pub fn reset(&mut self) {
        if self.written > 0 {
            self.reset = true;
        }
        self.written = 0;
        self.unsynced.clear();
    }

    /// Make the file hold this batch's paths too: replaced whole on a run's first write (and
    /// after a failed one), emptied after a reset, then appended to and synced. Nothing is
    /// written when nothing changed.
    pub fn sync(&mut self) -> Result<(), LocalError> {
        if self.rewrite {
            return self.rewrite();
        }
        if !self.reset && self.unsynced.is_empty() {
            return Ok(());
        }
        let what = || format!("writing {}", self.path.display());
        let Some(file) = self.file.take() else { return self.rewrite() };
        let lines = lines(&self.unsynced)?;
        let mut f = &file;
        let written = if self.reset { file.set_len(0) } else { Ok(()) }
            .and_then(|()| f.write_all(&lines))
            .and_then(|()| file.sync_data());
        if let Err(e) = written {
            // Perhaps written in part: the next write replaces the file whole.
            self.rewrite = true;
            return Err(io(what())(e));
        }
        self.written += std::mem::take(&mut self.unsynced).len();
        (self.file, self.reset) = (Some(file), false);
        Ok(())
    }

    /// Replace the file atomically with its complete lines (none after a reset) and this
    /// batch's paths, then keep it open for appending.
    fn rewrite(&mut self) -> Result<(), LocalError> {
        let what = || format!("writing {}", self.path.display());
        let new = lines(&self.unsynced)?;
        let mut kept = 0;
        let copy = |w: &mut std::io::BufWriter<&File>| -> std::io::Result<()> {
            // The paths the file holds, each as a line again (an older release's array too).
            if !self.reset {
                let mut failed = None;
                self.each(&mut |p| {
                    kept += 1;
                    if failed.is_none() {
                        failed =
                            lines(&[Name::from(p)]).map_err(std::io::Error::other).and_then(|l| w.write_all(&l)).err();
                    }
                })
                .map_err(std::io::Error::other)?;
                if let Some(e) = failed {
                    return Err(e);
                }
            }
            w.write_all(&new)
        };
        icicle_core::durable::stage(&self.path, true, copy).and_then(|s| s.commit(true)).map_err(io(what()))?;
        let file = OpenOptions::new().append(true).open(&self.path).map_err(io(what()))?;
        self.written = kept + std::mem::take(&mut self.unsynced).len();
        (self.file, self.reset, self.rewrite) = (Some(file), false, false);
        Ok(())
    }
}

/// One JSON string per path, a line each.
fn lines(paths: &[Name]) -> Result<Vec<u8>, LocalError> {
    let mut buf = Vec::with_capacity(paths.len() * 48);
    for p in paths {
        serde_json::to_writer(&mut buf, &**p).map_err(|e| LocalError::Checkpoint(e.to_string()))?;
        buf.push(b'\n');
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<Name> {
        v.iter().map(|s| Name::from(*s)).collect()
    }

    #[test]
    fn paths_are_appended_emptied_after_a_reset_and_read_back() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("j");
        let mut j = FreshJournal::new(p.clone());
        assert!(j.read().unwrap().is_empty());
        for n in names(&["a", "b \"q\""]) {
            j.push(n);
        }
        j.sync().unwrap();
        j.push("c".into());
        j.sync().unwrap();
        assert_eq!(j.read().unwrap(), ["a", "b \"q\"", "c"]);
        assert_eq!(std::fs::read_to_string(&p).unwrap().lines().count(), 3, "appended, not rewritten");
        j.reset();
        j.push("d".into());
        j.sync().unwrap();
        assert_eq!(j.read().unwrap(), ["d"]);
        // A restart's first write replaces the file whole (never empties it in place), keeping
        // the carried paths, an earlier release's array form too; a line cut short is left out.
        std::fs::write(&p, "\"d\"\n\"cut").unwrap();
        let mut again = FreshJournal::new(p.clone());
        let mut carried = Vec::new();
        again.read_each(&mut |p| carried.push(p)).unwrap();
        assert!(again.holds_any());
        again.push("e".into());
        again.sync().unwrap();
        assert_eq!(again.read().unwrap(), ["d", "e"]);
        std::fs::write(&p, "[\"x\",\"y\"]").unwrap();
        let mut old = FreshJournal::new(p.clone());
        old.sync().unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "\"x\"\n\"y\"\n");
    }

    #[test]
    fn a_line_cut_short_is_left_out_and_a_bad_line_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("j");
        std::fs::write(&p, "\"a\"\n\"b\"\n\"c").unwrap();
        assert_eq!(FreshJournal::new(p.clone()).read().unwrap(), ["a", "b"]);
        std::fs::write(&p, "\"a\"\nnot json\n\"c\"\n").unwrap();
        let e = FreshJournal::new(p.clone()).read().unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        std::fs::write(&p, "[\"x\",\"y\"]").unwrap();
        assert_eq!(FreshJournal::new(p).read().unwrap(), ["x", "y"]);
    }
}
