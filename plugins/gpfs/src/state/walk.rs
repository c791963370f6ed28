//! What the state asks of the file system (`Walker`: walks of renamed or moved-in
//! directories whose contents the events never named, and `lstat` of a name), and its walk of
//! the mount, counting what it could not read.

use std::path::{Path, PathBuf};

use super::Meta;

/// The file system as it is now: what is below a renamed directory (files only, with
/// metadata), so that descendants the state never saw (objects that predate monitoring) move
/// too, and what is at one name (to check operations when events come out of order).
pub trait Walker {
    /// `(path, metadata)` of every file and link below GPFS path `dir`.
    fn walk(&mut self, dir: &str) -> Vec<(String, Meta)>;
    /// What walks left out: entries that could not be read, and names that are not UTF-8.
    fn left_out(&self) -> WalkLeftOut {
        WalkLeftOut::default()
    }
    /// Whether walks see the file system (false: no `mount`, every walk is empty).
    fn sees_files(&self) -> bool {
        true
    }
    /// What is at GPFS path `path` now (`lstat`, not following a last symbolic link).
    fn lstat(&mut self, _path: &str) -> Lookup {
        Lookup::Unknown
    }
}

/// What [`Walker::lstat`] found at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Nothing is there.
    Absent,
    /// This object is there.
    Found(Meta),
    /// It could not be told (no `mount`, or the `lstat` failed otherwise than with ENOENT).
    Unknown,
}

/// What walks of the mount left out (each also logged, the first 20 then one in 10,000).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct WalkLeftOut {
    /// Directories that could not be listed and entries that could not be `lstat`ed (EACCES,
    /// ESTALE, EIO): what is below them keeps what the index holds under its old names.
    pub unreadable: u64,
}

/// No walking: only descendants the state knows move.
pub struct NoWalk;

impl Walker for NoWalk {
    fn walk(&mut self, _dir: &str) -> Vec<(String, Meta)> {
        Vec::new()
    }
    fn sees_files(&self) -> bool {
        false
    }
}

/// Walks the file system where it is mounted: GPFS path `fs_root/x` is `mount/x`.
pub struct MountWalker {
    /// Where the file system is mounted here.
    pub mount: PathBuf,
    /// The GPFS path the mount shows (`fs_root/x` is `mount/x`).
    pub fs_root: String,
    /// What the walks left out.
    pub left_out: WalkLeftOut,
}

/// Whether the `n`th problem of a kind is logged: the first 20, then one in 10,000.
fn logged(n: u64) -> bool {
    n <= 20 || n.is_multiple_of(10_000)
}

impl Walker for MountWalker {
    fn walk(&mut self, dir: &str) -> Vec<(String, Meta)> {
        let Some(rel) = dir.strip_prefix(self.fs_root.trim_end_matches('/')) else { return Vec::new() };
        let mut out = Vec::new();
        let mut stack = vec![(icicle_core::name::on(&self.mount, rel), dir.to_string())];
        while let Some((real, gpfs)) = stack.pop() {
            let rd = match std::fs::read_dir(&real) {
                Ok(rd) => rd,
                // Gone again since: nothing to index there.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    self.unreadable(&real, &e);
                    continue;
                }
            };
            for e in rd {
                let e = match e {
                    Ok(e) => e,
                    Err(err) => {
                        self.unreadable(&real, &err);
                        continue;
                    }
                };
                // Names as bytes, escaped as every source escapes them (icicle_core::name).
                let name = icicle_core::name::escape(e.file_name().as_encoded_bytes()).into_owned();
                let (r, g) = (e.path(), format!("{gpfs}/{name}"));
                let md = match std::fs::symlink_metadata(&r) {
                    Ok(md) => md,
                    // Gone since it was listed: nothing to index.
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(err) => {
                        self.unreadable(&r, &err);
                        continue;
                    }
                };
                if md.is_dir() {
                    stack.push((r, g));
                } else {
                    out.push((g, Meta::from_metadata(&md)));
                }
            }
        }
        out
    }

    fn left_out(&self) -> WalkLeftOut {
        self.left_out
    }

    fn lstat(&mut self, path: &str) -> Lookup {
        let Some(rel) = path.strip_prefix(self.fs_root.trim_end_matches('/')) else { return Lookup::Unknown };
        let real = icicle_core::name::on(&self.mount, rel);
        match std::fs::symlink_metadata(&real) {
            Ok(md) => Lookup::Found(Meta::from_metadata(&md)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Lookup::Absent,
            // Below a name that is a file now: nothing is there.
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Lookup::Absent,
            Err(e) => {
                self.unreadable(&real, &e);
                Lookup::Unknown
            }
        }
    }
}

impl MountWalker {
    /// A walk of the mount at `mount`, GPFS path `fs_root`.
    pub fn new(mount: PathBuf, fs_root: String) -> MountWalker {
        MountWalker { mount, fs_root, left_out: WalkLeftOut::default() }
    }

    /// Count and (rate-limited) log what a walk could not read.
    fn unreadable(&mut self, path: &Path, e: &std::io::Error) {
        self.left_out.unreadable += 1;
        if logged(self.left_out.unreadable) {
            tracing::warn!(message = "walk: could not read (what is below keeps its old names in the index; the first 20 are logged, then one in 10,000)", path = %path.display(), error = %e);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    #[test]
    fn a_name_that_is_not_utf8_is_escaped_as_every_source_escapes_it() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("d/e")).unwrap();
        std::fs::write(t.path().join("d/e/ok"), b"1").unwrap();
        std::fs::write(t.path().join("d").join(std::ffi::OsStr::from_bytes(b"bad\xff")), b"1").unwrap();
        let mut w = MountWalker::new(t.path().to_path_buf(), "/gpfs/fs1".into());
        let got: Vec<String> = w.walk("/gpfs/fs1/d").into_iter().map(|(p, _)| p).collect();
        let mut got = got;
        got.sort();
        assert_eq!(got, ["/gpfs/fs1/d/bad\\xff", "/gpfs/fs1/d/e/ok"]);
        assert_eq!(w.left_out(), WalkLeftOut { unreadable: 0 });
        // A directory gone since is nothing to index, not a failure.
        assert!(w.walk("/gpfs/fs1/missing").is_empty());
        assert_eq!(w.left_out().unreadable, 0);
    }
}
