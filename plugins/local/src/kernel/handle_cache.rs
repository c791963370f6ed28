//! Where directory handles are: an LRU bounded by a capacity, indexed by path so that a
//! directory leaving a name forgets what was cached at and below it in time proportional to
//! that, not to the whole cache.

use std::collections::{BTreeSet, HashSet};
use std::num::NonZeroUsize;

use lru::LruCache;

/// Where a handle or an event's name is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// Below the root (relative, `""` for the root itself).
    Inside(String),
    /// Outside the root.
    Outside,
}

/// Handle bytes (fsid + file handle) to places, least recently used evicted.
pub(crate) struct HandleCache {
    lru: LruCache<Vec<u8>, Place>,
    /// The cached places below the root, by path, with their handles.
    by_path: BTreeSet<(String, Vec<u8>)>,
    /// The handles cached as outside the root.
    others: HashSet<Vec<u8>>,
}

impl HandleCache {
    /// A cache of at most `capacity` handles (at least one).
    pub fn new(capacity: usize) -> HandleCache {
        HandleCache {
            lru: LruCache::new(NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN)),
            by_path: BTreeSet::new(),
            others: HashSet::new(),
        }
    }

    /// The place of `handle`, if cached (now the most recently used).
    pub fn get(&mut self, handle: &[u8]) -> Option<Place> {
        self.lru.get(handle).cloned()
    }

    /// Cache `place` for `handle`; returns whether another handle was evicted for it.
    pub fn insert(&mut self, handle: Vec<u8>, place: Place) -> bool {
        let evicted = match self.lru.push(handle.clone(), place.clone()) {
            Some((old_handle, old)) => {
                match old {
                    Place::Inside(p) => self.by_path.remove(&(p, old_handle.clone())),
                    _ => self.others.remove(&old_handle),
                };
                old_handle != handle
            }
            None => false,
        };
        match place {
            Place::Inside(p) => self.by_path.insert((p, handle)),
            _ => self.others.insert(handle),
        };
        evicted
    }

    /// Forget the handles cached at `dir` or below it.
    pub fn forget_below(&mut self, dir: &str) {
        let at = self.by_path.range((dir.to_string(), Vec::new())..).take_while(|(p, _)| p == dir);
        // Paths below `dir` sort between `dir/` and `dir0` ('0' follows '/').
        let below = self.by_path.range((format!("{dir}/"), Vec::new())..(format!("{dir}0"), Vec::new()));
        let gone: Vec<(String, Vec<u8>)> = at.chain(below).cloned().collect();
        for key in gone {
            self.lru.pop(&key.1);
            self.by_path.remove(&key);
        }
    }

    /// Forget the handles whose place is `place` (outside the root).
    pub fn forget_place(&mut self, place: &Place) {
        let gone: Vec<Vec<u8>> = self.others.iter().filter(|h| self.lru.peek(*h) == Some(place)).cloned().collect();
        for h in gone {
            self.lru.pop(&h);
            self.others.remove(&h);
        }
    }

    /// Forget everything.
    pub fn clear(&mut self) {
        self.lru.clear();
        self.by_path.clear();
        self.others.clear();
    }

    /// Handles cached.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lru.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inside(p: &str) -> Place {
        Place::Inside(p.to_string())
    }

    #[test]
    fn forgetting_a_directory_takes_it_and_what_is_below_it_only() {
        let mut c = HandleCache::new(100);
        for (h, p) in [(1, "a"), (2, "a/b"), (3, "a/b/c"), (4, "a-x"), (5, "a0"), (6, "ab"), (7, ""), (8, "z/a")] {
            c.insert(vec![h], inside(p));
        }
        c.insert(vec![9], Place::Outside);
        c.forget_below("a");
        let left: Vec<u8> = (1..=9).filter(|h| c.get(&[*h]).is_some()).collect();
        assert_eq!(left, [4, 5, 6, 7, 8, 9]);
        c.forget_place(&Place::Outside);
        assert!(c.get(&[9]).is_none() && c.len() == 5);
        // Cached as outside, then inside: the outside set lets go of it.
        c.insert(vec![11], Place::Outside);
        c.insert(vec![11], inside("q"));
        assert!(c.others.is_empty());
    }

    #[test]
    fn a_handle_cached_again_or_evicted_leaves_no_stale_path() {
        let mut c = HandleCache::new(2);
        c.insert(vec![1], inside("a"));
        // Moved: cached again under its new name; forgetting the old name keeps it.
        assert!(!c.insert(vec![1], inside("b")));
        c.forget_below("a");
        assert_eq!(c.get(&[1]), Some(inside("b")));
        c.insert(vec![2], inside("c"));
        // 1 was used last: 2 is evicted, and its path with it.
        c.get(&[1]);
        assert!(c.insert(vec![3], inside("c/d")));
        assert!(c.get(&[2]).is_none());
        c.forget_below("c");
        assert_eq!((c.get(&[1]), c.get(&[3]), c.by_path.len()), (Some(inside("b")), None, 1));
    }
}
