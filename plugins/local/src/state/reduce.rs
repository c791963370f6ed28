//! The local monitor's rule table, per path: the coalescing rows of a Robinhood-style table
//! (an event that a kept one covers is dropped; the compare at emit time reads the final state
//! anyway), and no cancellation row. The kernel merges a create and a delete of one name into
//! one event in either order, and events of two processes can arrive out of order
//! (`plugins/local/tests/kernel_merging.rs`), so "created then removed" cannot be told from "removed then
//! made again" by the events: only the compare can. Nor does a rescan cover the paths reported
//! below it: its walk finds new paths by listing directories, and a directory that can be
//! entered but not listed (mode 0311, an I/O error) hides them from it, not from a compare.

use std::collections::HashSet;

use icicle_core::traits::{ReduceCounts, Reducer};

use crate::event::LocalEvent;

/// What a rule does with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathRule {
    /// Kept.
    Keep,
    /// Dropped: a kept event covers it.
    Coalesce,
}

/// The rule table as a [`Reducer`] of local events.
#[derive(Debug, Default, Clone, Copy)]
pub struct PathRules;

impl PathRules {
    /// The rule for `event`, given the names a directory event names in the batch
    /// (`directories`) and the events kept so far (`kept`).
    fn rule<'e>(event: &'e LocalEvent, directories: &HashSet<&str>, kept: &mut HashSet<&'e LocalEvent>) -> PathRule {
        // A name a directory event names is compared as a new directory: that covers it.
        if matches!(event, LocalEvent::Changed(p) if directories.contains(p.as_str())) {
            return PathRule::Coalesce;
        }
        // The same event again (a rescan of the same directory for the same reason too).
        if kept.insert(event) {
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
        // Decided over borrowed events first (no copy of any), then dropped in place.
        let directories: HashSet<&str> = batch
            .iter()
            .filter_map(|e| if let LocalEvent::Directory(p) = e { Some(p.as_str()) } else { None })
            .collect();
        let mut kept = HashSet::new();
        let keep: Vec<bool> = batch.iter().map(|e| Self::rule(e, &directories, &mut kept) == PathRule::Keep).collect();
        let mut keep = keep.into_iter();
        batch.retain(|_| keep.next().unwrap_or(true));
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

    #[test]
    fn repeated_events_are_coalesced_and_nothing_is_cancelled() {
        use crate::event::RescanReason;
        let rescan = |d: &str, why| LocalEvent::Rescan(d.into(), why);
        let mut batch = vec![
            changed("a/f"),
            changed("a/f"),
            changed("d"),
            LocalEvent::Directory("d".into()),
            // Below a rescan: kept (its walk may not list what is above it).
            changed("x/y/z"),
            rescan("x", RescanReason::Overflow),
            rescan("x/y", RescanReason::WatchFailed),
            rescan("x", RescanReason::Overflow),
            rescan("x", RescanReason::NewDirectory),
            // Created and removed, or removed and made again: kept for the compare.
            changed("t"),
            LocalEvent::Directory("d".into()),
        ];
        let counts = PathRules.reduce(&mut batch);
        let want = vec![
            changed("a/f"),
            LocalEvent::Directory("d".into()),
            changed("x/y/z"),
            rescan("x", RescanReason::Overflow),
            rescan("x/y", RescanReason::WatchFailed),
            rescan("x", RescanReason::NewDirectory),
            changed("t"),
        ];
        assert_eq!(batch, want);
        assert_eq!((counts.input, counts.passed, counts.coalesced, counts.cancelled), (11, 7, 4, 0));
    }
}
