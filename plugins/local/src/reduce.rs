//! The local monitor's rule table, per path: the coalescing rows of a Robinhood-style table
//! (an event that a kept one already covers is dropped; the compare at emit time reads the
//! final state anyway), and no cancellation row. The kernel merges a create and a delete of one
//! name into one event in either order, and events of two processes can arrive out of order
//! (`tests/kernel_merging.rs`), so "created then removed" cannot be told from "removed then
//! made again" by the events: only the compare can.

use std::collections::HashSet;

use icicle_core::traits::{ReduceCounts, Reducer};

use crate::event::{LocalEvent, RescanReason};

/// What a rule does with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathRule {
    /// Kept.
    Keep,
    /// Dropped: a kept event covers it.
    Coalesce,
}

/// Whether a rescan for `reason` compares everything below its directory (what it holds and
/// what is there), so an event below it adds nothing. The seed's and a new directory's
/// rescans are handled apart and cover nothing here.
fn covers_below(reason: RescanReason) -> bool {
    !matches!(reason, RescanReason::Seed | RescanReason::NewDirectory)
}

/// Whether `path` is strictly below `dir` (everything is below the root, `""`).
fn below(path: &str, dir: &str) -> bool {
    if dir.is_empty() {
        !path.is_empty()
    } else {
        path.len() > dir.len() + 1 && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
    }
}

/// The rule table as a [`Reducer`] of local events.
#[derive(Debug, Default, Clone, Copy)]
pub struct PathRules;

impl PathRules {
    /// The rule for `event`, given the batch's full rescans (`scanned`), the names a directory
    /// event names (`directories`), and the events kept so far (`kept`, by kind and path).
    fn rule(event: &LocalEvent, scanned: &[String], directories: &HashSet<String>, kept: &mut HashSet<(u8, String)>) -> PathRule {
        let covered = |p: &str| scanned.iter().any(|d| below(p, d));
        let (kind, path) = match event {
            // A name a directory event names is compared as a new directory: that covers it.
            LocalEvent::Changed(p) if directories.contains(p) || covered(p) => return PathRule::Coalesce,
            LocalEvent::Changed(p) => (0, p),
            LocalEvent::Directory(p) => (1, p),
            LocalEvent::Rescan(d, why) if covers_below(*why) => {
                // Below another full rescan, or the same one again.
                if covered(d) {
                    return PathRule::Coalesce;
                }
                (2, d)
            }
            LocalEvent::Rescan(..) => return PathRule::Keep,
        };
        if kept.insert((kind, path.clone())) {
            PathRule::Keep
        } else {
            PathRule::Coalesce
        }
    }
}

impl Reducer for PathRules {
    type Event = LocalEvent;

    fn reduce(&mut self, batch: &mut Vec<LocalEvent>) -> ReduceCounts {
        let input = batch.len() as u64;
        let directories: HashSet<String> = batch.iter().filter_map(|e| if let LocalEvent::Directory(p) = e { Some(p.clone()) } else { None }).collect();
        let scanned: Vec<String> =
            batch.iter().filter_map(|e| if let LocalEvent::Rescan(d, why) = e { covers_below(*why).then(|| d.clone()) } else { None }).collect();
        let mut kept = HashSet::new();
        batch.retain(|e| Self::rule(e, &scanned, &directories, &mut kept) == PathRule::Keep);
        let passed = batch.len() as u64;
        ReduceCounts { input, passed, coalesced: input - passed, ..Default::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changed(p: &str) -> LocalEvent {
        LocalEvent::Changed(p.into())
    }

    fn rescan(d: &str, why: RescanReason) -> LocalEvent {
        LocalEvent::Rescan(d.into(), why)
    }

    #[test]
    fn covered_events_are_coalesced_and_nothing_is_cancelled() {
        let mut batch = vec![
            changed("a/f"),
            changed("a/f"),
            changed("d"),
            LocalEvent::Directory("d".into()),
            changed("x/y/z"),
            rescan("x", RescanReason::Overflow),
            rescan("x/y", RescanReason::WatchFailed),
            rescan("x", RescanReason::Overflow),
            changed("x"),
            changed("xy/f"),
            rescan("x/new", RescanReason::NewDirectory),
            LocalEvent::Directory("x/moved".into()),
            // Created and removed, or removed and made again: both kept for the compare.
            changed("t"),
            LocalEvent::Directory("d".into()),
        ];
        let counts = PathRules.reduce(&mut batch);
        let want = vec![
            changed("a/f"),
            LocalEvent::Directory("d".into()),
            rescan("x", RescanReason::Overflow),
            changed("x"),
            changed("xy/f"),
            rescan("x/new", RescanReason::NewDirectory),
            LocalEvent::Directory("x/moved".into()),
            changed("t"),
        ];
        assert_eq!(batch, want);
        assert_eq!((counts.input, counts.passed, counts.coalesced, counts.cancelled), (14, 8, 6, 0));
    }

    #[test]
    fn a_root_rescan_covers_every_path_but_a_seed_covers_none() {
        let mut batch = vec![changed("a"), rescan("", RescanReason::Restart), changed("b/c"), rescan("b", RescanReason::Mount)];
        PathRules.reduce(&mut batch);
        assert_eq!(batch, vec![rescan("", RescanReason::Restart)]);
        let mut batch = vec![rescan("", RescanReason::Seed), changed("a")];
        PathRules.reduce(&mut batch);
        assert_eq!(batch.len(), 2);
    }
}
