//! Rescans compared a slice at a time: what the index holds below a directory (each path
//! `lstat`ed), then what the file system holds there (listed; a path the index holds was
//! compared already), each path put on the work list only when it differs from the index. So a rescan of a large tree holds in memory its differences and the directories its
//! walk has still to list, not every path below it.

use std::collections::HashSet;

use super::LocalState;
use crate::print::Print;
use crate::work::Work;

/// Paths read from the index or from a directory listing per step.
const STEP: usize = 256;

/// One rescan of a directory (relative to the root; empty for the root).
pub(crate) struct Scan {
    dir: String,
    /// The held side: `Some(after)` while paths below `dir` are left to compare (those after
    /// `after`, from the start when `None`); `None` when it is through.
    held: Option<Option<String>>,
    /// The walk: directories still to list (depth first), with a set for lookups.
    stack: Vec<String>,
    listing: HashSet<String>,
    /// The directory being listed.
    current: Option<(String, std::fs::ReadDir)>,
}

impl Scan {
    /// What the index holds below `dir`, then, with `walk`, what the file system holds there.
    pub(crate) fn new(dir: &str, walk: bool) -> Scan {
        let stack = if walk { vec![dir.to_string()] } else { Vec::new() };
        let listing = stack.iter().cloned().collect();
        Scan { dir: dir.to_string(), held: Some(None), stack, listing, current: None }
    }

    /// Whether this scan's walk will list `dir`: it, or a directory above it, is still to be
    /// opened (what it holds is found without another walk). One being listed does not count:
    /// a name made there since it was opened may not be listed.
    pub(crate) fn will_list(&self, dir: &str) -> bool {
        let later = |d: &str| self.listing.contains(d);
        !self.listing.is_empty() && (later(dir) || later("") || dir.match_indices('/').any(|(i, _)| later(&dir[..i])))
    }
}

#[cfg(test)]
impl Scan {
    /// Whether `dir` is being listed.
    pub(crate) fn is_listing(&self, dir: &str) -> bool {
        self.current.as_ref().is_some_and(|(c, _)| c == dir)
    }
}

impl LocalState {
    /// Whether held path `rel` must be compared: the file system differs from what the index
    /// holds, it is not held (any more), or it is marked (forced, a directory event's,
    /// unreadable before). One found as held counts as compared.
    fn must_compare(&mut self, rel: &str, work: &Work) -> bool {
        if work.force.contains(rel) || work.directories.contains(rel) || self.unreadable.contains(rel) {
            return true;
        }
        let Some(old) = self.entries.get(rel) else { return true };
        match self.lstat(rel) {
            Ok(md) if Print::at(&self.root, rel, &md, self.posix) == old => {
                self.counts.compared += 1;
                self.counts.unchanged += 1;
                false
            }
            _ => true,
        }
    }

    /// One step of the last scan on the work list: up to [`STEP`] paths the index holds, or
    /// one directory's next entries. `false` when no scan is left.
    pub(crate) fn scan_step(&mut self, work: &mut Work) -> bool {
        let Some(mut scan) = work.scans.pop() else { return false };
        if let Some(after) = scan.held.take() {
            let step = self.entries.below(&scan.dir, after.as_deref(), STEP);
            if step.len() == STEP {
                scan.held = Some(step.last().map(|(k, _)| k.to_string()));
            }
            for (k, _) in step {
                if self.must_compare(&k, work) {
                    work.push_again(k);
                }
            }
        } else if !self.walk_step(&mut scan, work) {
            return true;
        }
        work.scans.push(scan);
        true
    }

    /// The scan's walk lists its next entries; `false` when it is through.
    fn walk_step(&mut self, scan: &mut Scan, work: &mut Work) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let (dir, mut rd) = match scan.current.take() {
            Some(c) => c,
            None => {
                let Some(d) = scan.stack.pop() else { return false };
                scan.listing.remove(&d);
                // The root's path must hold a directory itself: a symlink there is not followed.
                let listed = if self.root_there { std::fs::read_dir(self.root.join(&d)) } else { return true };
                match listed {
                    Ok(rd) => (d, rd),
                    Err(e) => {
                        // Not gone: walked again when compared again (its permissions changed,
                        // or one above it did).
                        if !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) {
                            self.counts.unreadable += 1;
                            self.unreadable.insert(d.into());
                        }
                        return true;
                    }
                }
            }
        };
        for _ in 0..STEP {
            let e = match rd.next() {
                None => return true,
                Some(Ok(e)) => e,
                Some(Err(e)) => {
                    // The rest of the listing is lost: listed again when compared again.
                    tracing::warn!(message = "a directory listing failed part way", dir = %dir, error = %e);
                    self.counts.unreadable += 1;
                    self.unreadable.insert(dir.into());
                    return true;
                }
            };
            let name = e.file_name();
            let Some(name) = crate::event::utf8_name(name.as_bytes(), &dir) else {
                self.counts.not_utf8 += 1;
                continue;
            };
            let rel = crate::walk::join(&dir, name);
            // The type from the listing (std `lstat`s only where it is unknown).
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                scan.listing.insert(rel.clone());
                scan.stack.push(rel.clone());
            }
            // What the index holds, the held side compared (or will): the walk finds what it
            // does not hold.
            if !self.entries.contains_key(&rel) {
                work.push_again(rel.into());
            }
        }
        scan.current = Some((dir, rd));
        true
    }
}
