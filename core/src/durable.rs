//! Durable file replacement: readers see the old file or the new one, never a torn one.
//!
//! [`stage`] writes the new content to a hidden temporary beside the file (fsync'ed when asked);
//! [`Staged::commit`] renames it into place (and fsyncs the directory when asked).
//! [`write_atomic`] does both, fully durable. For content written piece by piece (a part file,
//! a format patched after the fact), [`create`] opens the temporary as a [`Staging`] writer
//! whose [`Staging::finish`] gives the [`Staged`] file ([`Staging::commit`]: fully durable).

use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// New content for a file, written beside it and not yet in place.
#[derive(Debug)]
#[must_use = "a staged file is not in place until it is committed"]
pub struct Staged {
    tmp: PathBuf,
    path: PathBuf,
}

/// The directory `path` is in (`.` for a bare name).
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// The temporary of `path`: `.<name>.tmp` beside it, its directory created if needed.
fn temporary_of(path: &Path) -> std::io::Result<PathBuf> {
    let dir = dir_of(path);
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(dir.join(format!(".{name}.tmp")))
}

/// Write the new content of `path` through `body` into `.<name>.tmp` beside it (creating the
/// directory if needed), fsync'ed when `fsync`. A failed write removes the temporary.
pub fn stage(
    path: &Path,
    fsync: bool,
    body: impl FnOnce(&mut BufWriter<&std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<Staged> {
    let tmp = temporary_of(path)?;
    let written = (|| {
        let f = std::fs::File::create(&tmp)?;
        let mut w = BufWriter::with_capacity(1 << 20, &f);
        body(&mut w)?;
        w.flush()?;
        drop(w);
        if fsync {
            f.sync_all()?;
        }
        Ok(())
    })();
    match written {
        Ok(()) => Ok(Staged { tmp, path: path.to_path_buf() }),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

impl Staged {
    /// Where the new content waits.
    pub fn temporary(&self) -> &Path {
        &self.tmp
    }

    /// Rename the new content over the file; fsync the directory when `sync_dir`. A failed
    /// rename removes the temporary.
    pub fn commit(self, sync_dir: bool) -> std::io::Result<()> {
        if let Err(e) = std::fs::rename(&self.tmp, &self.path) {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(e);
        }
        if sync_dir {
            std::fs::File::open(dir_of(&self.path))?.sync_all()?;
        }
        Ok(())
    }
}

/// New content for a file, being written piece by piece (`Write`, `Seek`) into `.<name>.tmp`
/// beside it; dropped before [`Staging::finish`], the temporary is removed.
#[derive(Debug)]
#[must_use = "a staging file is removed unless it is finished and committed"]
pub struct Staging {
    w: Option<BufWriter<std::fs::File>>,
    tmp: PathBuf,
    path: PathBuf,
}

/// Start new content for `path`: `.<name>.tmp` beside it, created (or emptied) for writing,
/// the directory created if needed. The [`stage`] of content written piece by piece.
pub fn create(path: &Path) -> std::io::Result<Staging> {
    let tmp = temporary_of(path)?;
    let f = std::fs::File::create(&tmp)?;
    Ok(Staging { w: Some(BufWriter::with_capacity(1 << 20, f)), tmp, path: path.to_path_buf() })
}

impl Staging {
    /// Where the new content is being written.
    pub fn temporary(&self) -> &Path {
        &self.tmp
    }

    fn writer(&mut self) -> &mut BufWriter<std::fs::File> {
        self.w.as_mut().expect("a staging file is open until finished")
    }

    /// Flush the content (and fsync it when `fsync`): staged, ready to commit. A failure
    /// removes the temporary.
    pub fn finish(mut self, fsync: bool) -> std::io::Result<Staged> {
        let w = self.w.take().expect("a staging file is open until finished");
        let done = w.into_inner().map_err(|e| e.into_error()).and_then(|f| if fsync { f.sync_all() } else { Ok(()) });
        match done {
            Ok(()) => Ok(Staged { tmp: std::mem::take(&mut self.tmp), path: std::mem::take(&mut self.path) }),
            Err(e) => {
                let _ = std::fs::remove_file(&self.tmp);
                Err(e)
            }
        }
    }

    /// Put the content in place, fully durable: fsync it, rename it over the file, fsync the
    /// directory. A failure before the rename removes the temporary.
    pub fn commit(self) -> std::io::Result<()> {
        self.finish(true)?.commit(true)
    }
}

impl Write for Staging {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writer().write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.writer().write_all(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.writer().flush()
    }
}

impl Seek for Staging {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.writer().seek(pos)
    }
}

impl Drop for Staging {
    /// Unfinished content was never put in place: removed, not left hidden.
    fn drop(&mut self) {
        if self.w.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Replace `path` with `bytes` atomically and durably: write a temporary file beside it,
/// fsync it, rename it over `path`, fsync the directory. Creates the directory if needed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    stage(path, true, |w| w.write_all(bytes))?.commit(true)
}

/// An exclusive lock on a state file, held until dropped (`flock` on `path`, created if
/// missing): two runs sharing one state would empty or overwrite each other's files.
#[derive(Debug)]
pub struct StateLock {
    _file: std::fs::File,
}

impl StateLock {
    /// Take the lock at `path` (its directory created if needed), or fail at once when
    /// another process holds it, naming the file.
    pub fn acquire(path: &Path) -> std::io::Result<StateLock> {
        std::fs::create_dir_all(dir_of(path))?;
        let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
        match f.try_lock() {
            Ok(()) => Ok(StateLock { _file: f }),
            Err(std::fs::TryLockError::WouldBlock) => Err(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                format!("{} is held by another run on the same state (a run still going, or two configurations naming one state_dir)", path.display()),
            )),
            Err(std::fs::TryLockError::Error(e)) => Err(std::io::Error::new(e.kind(), format!("locking {}: {e}", path.display()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    fn names(dir: &std::path::Path) -> Vec<std::ffi::OsString> {
        let mut v: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("state/x.checkpoint.json");
        super::write_atomic(&p, b"one").unwrap();
        super::write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(names(p.parent().unwrap()), vec![std::ffi::OsString::from("x.checkpoint.json")]);
    }

    #[test]
    fn a_staged_file_is_not_in_place_until_committed_and_a_failed_one_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("CURRENT");
        super::write_atomic(&p, b"old\n").unwrap();
        let staged = super::stage(&p, false, |w| w.write_all(b"new\n")).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"old\n");
        staged.commit(false).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new\n");
        let failed = super::stage(&p, true, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"new\n");
        assert_eq!(names(tmp.path()), vec![std::ffi::OsString::from("CURRENT")]);
    }

    #[test]
    fn a_staging_file_is_written_in_pieces_and_removed_unless_finished() {
        use std::io::{Seek, SeekFrom};
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("out/part-1.csv");
        let mut s = super::create(&p).unwrap();
        assert_eq!(s.temporary(), tmp.path().join("out/.part-1.csv.tmp"));
        s.write_all(b"xxxx body\n").unwrap();
        s.seek(SeekFrom::Start(0)).unwrap();
        s.write_all(b"head").unwrap();
        assert!(!p.exists());
        s.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"head body\n");
        let mut dropped = super::create(&p).unwrap();
        dropped.write_all(b"half").unwrap();
        drop(dropped);
        let staged = super::create(&p).unwrap().finish(false).unwrap();
        assert_eq!(
            names(p.parent().unwrap()),
            vec![std::ffi::OsString::from(".part-1.csv.tmp"), std::ffi::OsString::from("part-1.csv")]
        );
        std::fs::create_dir(tmp.path().join("blocker")).unwrap();
        std::fs::write(tmp.path().join("blocker/x"), b"").unwrap();
        // A rename over a non-empty directory fails: the temporary goes with it.
        let over_dir = super::create(&tmp.path().join("blocker")).unwrap();
        assert!(over_dir.commit().is_err());
        assert!(!tmp.path().join(".blocker.tmp").exists());
        staged.commit(false).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"");
        assert_eq!(names(p.parent().unwrap()), vec![std::ffi::OsString::from("part-1.csv")]);
    }

    #[test]
    fn a_state_lock_is_held_once_until_dropped() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("state/run.lock");
        let first = super::StateLock::acquire(&path).unwrap();
        let e = super::StateLock::acquire(&path).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        assert!(e.to_string().contains("run.lock") && e.to_string().contains("another run"), "{e}");
        drop(first);
        super::StateLock::acquire(&path).unwrap();
    }
}
