//! The paths first published since the last checkpoint, on disk before their batch is
//! delivered (`<id>.fresh-paths.json`, one JSON string per line, appended): a restart after a
//! kill between delivery and checkpoint compares them too. Appending keeps a seed or rescan
//! delivered in many parts (no checkpoint until the last) linear in what it publishes; the
//! file is emptied once a checkpoint covers its paths.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use crate::names::Name;
use crate::LocalError;

/// The journal file of one monitor.
pub struct FreshJournal {
    path: PathBuf,
    file: Option<File>,
    /// How many of the state's fresh paths are in the file.
    written: usize,
    /// The file holds only paths a checkpoint covers: empty it first.
    reset: bool,
    /// Replace the file whole (atomically): the first write of a run (the file may hold paths
    /// no checkpoint covers, carried over a restart) and the one after a failed write.
    rewrite: bool,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> LocalError {
    move |source| LocalError::Io { what, source }
}

impl FreshJournal {
    /// The journal at `path` (read by [`FreshJournal::read`], rewritten by the first sync).
    pub fn new(path: PathBuf) -> FreshJournal {
        FreshJournal { path, file: None, written: 0, reset: false, rewrite: true }
    }

    /// The paths an earlier run journaled (none without a file). A last line cut short (a kill
    /// during an append, before that batch was delivered) is left out; any other line that
    /// does not read is an error naming the file and line, as is a file that cannot be read:
    /// deletes may be owed for its paths. A JSON array (an older release's form) reads too.
    pub fn read(&self) -> Result<Vec<String>, LocalError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(format!("reading {}", self.path.display()))(e)),
        };
        let bad = |line: usize, e: serde_json::Error| LocalError::Checkpoint(format!("{} line {line}: {e}", self.path.display()));
        if bytes.first() == Some(&b'[') {
            return serde_json::from_slice(&bytes).map_err(|e| bad(1, e));
        }
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        if complete < bytes.len() {
            tracing::warn!(message = "the fresh-path journal ends in a line cut short (its batch was never delivered); left out", file = %self.path.display());
        }
        bytes[..complete]
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .enumerate()
            .map(|(i, l)| serde_json::from_slice(l).map_err(|e| bad(i + 1, e)))
            .collect()
    }

    /// The state's fresh paths were cleared (a checkpoint covers them).
    pub fn reset(&mut self) {
        if self.written > 0 {
            self.reset = true;
        }
        self.written = 0;
    }

    /// Make the file hold `fresh`: replaced whole on a run's first write (and after a failed
    /// one), emptied after a reset, then the paths not yet in it appended and synced. Nothing is
    /// written when nothing changed.
    pub fn sync(&mut self, fresh: &[Name]) -> Result<(), LocalError> {
        if self.rewrite {
            return self.rewrite(fresh);
        }
        if !self.reset && self.written == fresh.len() {
            return Ok(());
        }
        let what = || format!("writing {}", self.path.display());
        let Some(file) = self.file.take() else { return self.rewrite(fresh) };
        let start = if self.reset { 0 } else { self.written.min(fresh.len()) };
        let lines = lines(&fresh[start..])?;
        let mut f = &file;
        let written = if self.reset { file.set_len(0) } else { Ok(()) }.and_then(|()| f.write_all(&lines)).and_then(|()| file.sync_data());
        if let Err(e) = written {
            // Perhaps written in part: the next write replaces the file whole.
            self.rewrite = true;
            return Err(io(what())(e));
        }
        (self.file, self.written, self.reset) = (Some(file), fresh.len(), false);
        Ok(())
    }

    /// Replace the file with `fresh` atomically, then keep it open for appending.
    fn rewrite(&mut self, fresh: &[Name]) -> Result<(), LocalError> {
        let what = || format!("writing {}", self.path.display());
        let lines = lines(fresh)?;
        icicle_core::durable::stage(&self.path, true, |w| w.write_all(&lines)).and_then(|s| s.commit(true)).map_err(io(what()))?;
        let file = OpenOptions::new().append(true).open(&self.path).map_err(io(what()))?;
        (self.file, self.written, self.reset, self.rewrite) = (Some(file), fresh.len(), false, false);
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
        let mut fresh = names(&["a", "b \"q\""]);
        j.sync(&fresh).unwrap();
        fresh.push("c".into());
        j.sync(&fresh).unwrap();
        assert_eq!(j.read().unwrap(), ["a", "b \"q\"", "c"]);
        assert_eq!(std::fs::read_to_string(&p).unwrap().lines().count(), 3, "appended, not rewritten");
        fresh.clear();
        j.reset();
        fresh.push("d".into());
        j.sync(&fresh).unwrap();
        assert_eq!(j.read().unwrap(), ["d"]);
        // A restart's first write replaces the file whole (never empties it in place).
        let mut again = FreshJournal::new(p.clone());
        let carried: Vec<Name> = again.read().unwrap().into_iter().map(Name::from).collect();
        again.sync(&carried).unwrap();
        assert_eq!(again.read().unwrap(), ["d"]);
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
