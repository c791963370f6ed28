//! A walk of a directory below the root, depth first, that can stop after any number of
//! entries and go on later: every path, directories included, names escaped
//! ([`icicle_core::name`]). The seed walks in one go; a rescan a step at a time.

use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::event::join;

/// A walk in progress.
pub struct Walker {
    /// Directories still to open (depth first), with a set for lookups.
    stack: Vec<String>,
    to_open: HashSet<String>,
    /// The directory being listed.
    current: Option<(String, std::fs::ReadDir)>,
}

/// What a walk met besides entries.
#[derive(Default)]
pub struct WalkCounts {
    /// Directories that could not be listed, or whose listing failed part way (EACCES, EIO;
    /// not those gone since).
    pub unlisted: Vec<String>,
}

impl Walker {
    /// A walk of `dir` (relative to the root).
    pub fn new(dir: &str) -> Walker {
        Walker { stack: vec![dir.to_string()], to_open: HashSet::from([dir.to_string()]), current: None }
    }

    /// Whether the walk will list `dir`: it, or a directory above it, is still to be opened.
    /// One being listed does not count: a name made there since it was opened may not be
    /// listed.
    pub fn will_list(&self, dir: &str) -> bool {
        let later = |d: &str| self.to_open.contains(d);
        !self.to_open.is_empty() && (later(dir) || later("") || dir.match_indices('/').any(|(i, _)| later(&dir[..i])))
    }

    /// Whether `dir` is being listed.
    #[cfg(test)]
    pub fn is_listing(&self, dir: &str) -> bool {
        self.current.as_ref().is_some_and(|(c, _)| c == dir)
    }

    /// Up to `n` entries below `root` to `visit` (relative path and listing entry; a
    /// directory is descended by the type the listing gives, std `lstat`ing only where it is
    /// unknown); `false` when the walk is through. With `root_there` false (the root's path
    /// holds no directory: a symlink there is not followed) directories are dropped unlisted.
    pub fn step(
        &mut self,
        root: &Path,
        root_there: bool,
        n: usize,
        counts: &mut WalkCounts,
        visit: &mut dyn FnMut(String, &std::fs::DirEntry),
    ) -> bool {
        let (dir, mut rd) = match self.current.take() {
            Some(c) => c,
            None => {
                let Some(d) = self.stack.pop() else { return false };
                self.to_open.remove(&d);
                if !root_there {
                    return true;
                }
                match std::fs::read_dir(icicle_core::name::on(root, &d)) {
                    Ok(rd) => (d, rd),
                    Err(e) => {
                        if !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) {
                            counts.unlisted.push(d);
                        }
                        return true;
                    }
                }
            }
        };
        for _ in 0..n {
            let e = match rd.next() {
                None => return true,
                Some(Ok(e)) => e,
                Some(Err(e)) => {
                    tracing::warn!(message = "a directory listing failed part way; the rest is listed when it is compared again", dir = %dir, error = %e);
                    counts.unlisted.push(dir);
                    return true;
                }
            };
            let name = e.file_name();
            let rel = join(&dir, &crate::event::name_text(name.as_bytes()));
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                self.to_open.insert(rel.clone());
                self.stack.push(rel.clone());
            }
            visit(rel, &e);
        }
        self.current = Some((dir, rd));
        true
    }
}

/// Every path below `dir` (relative to `root`), directories included, to `visit`, with its
/// metadata when `stat` (else `None`); see [`Walker::step`]. Nothing when the root's path holds
/// no directory.
pub fn walk(
    root: &Path,
    dir: &str,
    counts: &mut WalkCounts,
    stat: bool,
    visit: &mut dyn FnMut(String, Option<&std::fs::Metadata>),
) {
    let root_there = crate::kernel::mounts::root_identity(root).is_some();
    let mut w = Walker::new(dir);
    while w.step(root, root_there, usize::MAX, counts, &mut |rel, e| {
        if !stat {
            return visit(rel, None);
        }
        if let Ok(md) = std::fs::symlink_metadata(e.path()) {
            visit(rel, Some(&md));
        }
    }) {}
}
