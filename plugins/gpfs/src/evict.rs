//! Files the GPFS state let go of to stay within `lru_capacity` while the index still holds
//! them: kept as path hashes (about 16 bytes each instead of the path and its metadata), with
//! a count of such files below every directory, so that a directory rename knows when to
//! look for them where they are now.

use std::collections::{HashMap, HashSet};

use crate::state::path_key;

type Fast = foldhash::fast::RandomState;

/// Evicted file paths (by [`path_key`]) and, per directory, how many lie below it.
#[derive(Default, Debug, Clone)]
pub struct Evicted {
    keys: HashSet<u64, Fast>,
    below: HashMap<u64, u32, Fast>,
}

/// What a checkpoint keeps of [`Evicted`].
#[derive(Default, Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EvictedCheckpoint {
    pub keys: Vec<u64>,
    pub below: Vec<(u64, u32)>,
}

/// The directories above `path`, nearest first, ending with `/`.
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(path);
    std::iter::from_fn(move || {
        let p = rest?;
        match p.rfind('/') {
            Some(0) if p.len() > 1 => {
                rest = Some("/");
                Some("/")
            }
            Some(i) if i > 0 => {
                rest = Some(&p[..i]);
                rest
            }
            _ => {
                rest = None;
                None
            }
        }
    })
}

impl Evicted {
    /// Whether nothing was evicted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Files evicted and still indexed under the name they had.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Approximate heap bytes.
    pub fn approx_bytes(&self) -> usize {
        self.keys.capacity() * 9 + self.below.capacity() * 13
    }

    /// `path` was let go of.
    pub fn insert(&mut self, path: &str) {
        if self.keys.insert(path_key(path)) {
            for dir in ancestors(path) {
                *self.below.entry(path_key(dir)).or_default() += 1;
            }
        }
    }

    /// `path` is known again, or gone from the index; whether it was evicted.
    pub fn remove(&mut self, path: &str) -> bool {
        if self.keys.is_empty() || !self.keys.remove(&path_key(path)) {
            return false;
        }
        for dir in ancestors(path) {
            let k = path_key(dir);
            if let Some(n) = self.below.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    self.below.remove(&k);
                }
            }
        }
        true
    }

    /// Whether `path` was evicted.
    pub fn contains(&self, path: &str) -> bool {
        !self.keys.is_empty() && self.keys.contains(&path_key(path))
    }

    /// Whether a file evicted under directory `dir` (by the names it had then) may be below it.
    pub fn any_below(&self, dir: &str) -> bool {
        !self.below.is_empty() && self.below.contains_key(&path_key(dir))
    }

    /// The state to persist, sorted.
    pub fn checkpoint(&self) -> EvictedCheckpoint {
        let mut keys: Vec<u64> = self.keys.iter().copied().collect();
        keys.sort_unstable();
        let mut below: Vec<(u64, u32)> = self.below.iter().map(|(k, n)| (*k, *n)).collect();
        below.sort_unstable();
        EvictedCheckpoint { keys, below }
    }

    /// Restore from a checkpoint.
    pub fn restore(cp: EvictedCheckpoint) -> Evicted {
        Evicted { keys: cp.keys.into_iter().collect(), below: cp.below.into_iter().collect() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_run_to_the_root() {
        assert_eq!(ancestors("/gpfs/fs0/a/f").collect::<Vec<_>>(), ["/gpfs/fs0/a", "/gpfs/fs0", "/gpfs", "/"]);
        assert_eq!(ancestors("/f").collect::<Vec<_>>(), ["/"]);
    }

    #[test]
    fn counts_below_directories_follow_inserts_and_removals() {
        let mut e = Evicted::default();
        e.insert("/g/a/x");
        e.insert("/g/a/b/y");
        assert!(e.any_below("/g/a") && e.any_below("/g/a/b") && e.any_below("/"));
        assert!(e.remove("/g/a/b/y"));
        assert!(!e.any_below("/g/a/b") && e.any_below("/g/a"));
        assert!(!e.remove("/g/a/b/y"));
        let back = Evicted::restore(e.checkpoint());
        assert!(back.contains("/g/a/x") && back.any_below("/g"));
    }
}
