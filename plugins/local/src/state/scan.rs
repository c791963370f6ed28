//! Rescans compared a slice at a time: what the index holds below a directory (each path
//! `lstat`ed), then what the file system holds there (listed; a path the index holds was
//! compared already), each path put on the work list only when it differs from the index. So a
//! rescan of a large tree holds in memory its differences and the directories its walk has
//! still to list, not every path below it.

use super::LocalState;
use crate::state::walk::{WalkCounts, Walker};
use crate::state::work::Work;
use crate::store::print::Print;

/// Paths read from the index or from a directory listing per step (a few in tests, so their
/// small trees take many steps).
const STEP: usize = if cfg!(test) { 3 } else { 256 };

/// One rescan of a directory (relative to the root; empty for the root).
pub(crate) struct Scan {
    dir: String,
    /// The held side: `Some(after)` while paths below `dir` are left to compare (those after
    /// `after`, from the start when `None`); `None` when it is through.
    held: Option<Option<String>>,
    /// The walk (none: only what the index holds is compared).
    walk: Option<Walker>,
}

impl Scan {
    /// What the index holds below `dir`, then, with `walk`, what the file system holds there.
    pub(crate) fn new(dir: &str, walk: bool) -> Scan {
        Scan { dir: dir.to_string(), held: Some(None), walk: walk.then(|| Walker::new(dir)) }
    }

    /// Whether this scan's walk will list `dir` (what it holds is found without another walk).
    pub(crate) fn will_list(&self, dir: &str) -> bool {
        self.walk.as_ref().is_some_and(|w| w.will_list(dir))
    }

    /// Whether `dir` is being listed.
    #[cfg(test)]
    pub(crate) fn is_listing(&self, dir: &str) -> bool {
        self.walk.as_ref().is_some_and(|w| w.is_listing(dir))
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

    /// The scan's walk lists its next entries; `false` when it is through. What the index
    /// holds, the held side compared (or will): the walk queues what it does not hold.
    fn walk_step(&mut self, scan: &mut Scan, work: &mut Work) -> bool {
        let Some(walker) = scan.walk.as_mut() else { return false };
        let mut walked = WalkCounts::default();
        let entries = &self.entries;
        let more = walker.step(&self.root, self.root_there, STEP, &mut walked, &mut |rel, _| {
            if !entries.contains_key(&rel) {
                work.push_again(rel.into());
            }
        });
        self.walked(walked);
        more
    }
}

#[cfg(test)]
mod tests;
