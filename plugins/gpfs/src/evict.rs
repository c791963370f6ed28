//! Files the GPFS state let go of to stay within `lru_capacity` while the index still holds
//! them: kept as a hash of the path and one of the metadata sent (about 20 bytes instead of
//! the path and its metadata), with a count of such files below every directory, so that a
//! directory rename knows when to look for them where they are now.

use std::collections::HashMap;
use std::hash::BuildHasher;

/// A path's key in `sent`, in the sent-ahead journal and among evicted files: the same in
/// every run.
pub fn path_key(path: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x9f5e_4e17_a11c_0de5).hash_one(path)
}

type Fast = foldhash::fast::RandomState;

/// Evicted file paths (by [`path_key`], with a hash of the metadata the index holds) and,
/// per directory, how many lie below it.
#[derive(Default, Debug, Clone)]
pub struct Evicted {
    /// Path key → (metadata hash, inode).
    keys: HashMap<u64, (u64, u64), Fast>,
    below: HashMap<u64, u32, Fast>,
    /// Inode → evicted names of it.
    inodes: HashMap<u64, u32, Fast>,
}

/// What a checkpoint keeps of [`Evicted`].
#[derive(Default, Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EvictedCheckpoint {
    /// (path key, metadata hash, inode).
    pub keys: Vec<(u64, u64, u64)>,
    /// (directory path key, evicted files below it).
    pub below: Vec<(u64, u32)>,
}

/// A hash of metadata, the same in every run (checkpoints keep it).
fn meta_hash<M: std::hash::Hash>(meta: &M) -> u64 {
    foldhash::fast::FixedState::with_seed(0x5e17_a11c_0de5_0002).hash_one(meta)
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
        self.keys.capacity() * 25 + self.below.capacity() * 13 + self.inodes.capacity() * 13
    }

    /// `path` (of `inode`) was let go of; the index holds it with metadata `meta`.
    pub fn insert<M: std::hash::Hash>(&mut self, path: &str, meta: &M, inode: u64) {
        if let Some((_, old)) = self.keys.insert(path_key(path), (meta_hash(meta), inode)) {
            self.forget_inode(old);
        } else {
            for dir in ancestors(path) {
                *self.below.entry(path_key(dir)).or_default() += 1;
            }
        }
        *self.inodes.entry(inode).or_default() += 1;
    }

    fn forget_inode(&mut self, inode: u64) {
        if let Some(n) = self.inodes.get_mut(&inode) {
            *n -= 1;
            if *n == 0 {
                self.inodes.remove(&inode);
            }
        }
    }

    /// Whether a name of `inode` was let go of.
    pub fn has_inode(&self, inode: u64) -> bool {
        !self.inodes.is_empty() && self.inodes.contains_key(&inode)
    }

    /// `path` is known again, or gone from the index; whether it was evicted.
    pub fn remove(&mut self, path: &str) -> bool {
        let Some((_, inode)) = (!self.keys.is_empty()).then(|| self.keys.remove(&path_key(path))).flatten() else {
            return false;
        };
        self.forget_inode(inode);
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
        !self.keys.is_empty() && self.keys.contains_key(&path_key(path))
    }

    /// Whether `path` was evicted while the index held exactly `meta` for it.
    pub fn holds<M: std::hash::Hash>(&self, path: &str, meta: &M) -> bool {
        !self.keys.is_empty() && self.keys.get(&path_key(path)).is_some_and(|(m, _)| *m == meta_hash(meta))
    }

    /// Whether a file evicted under directory `dir` (by the names it had then) may be below it.
    pub fn any_below(&self, dir: &str) -> bool {
        !self.below.is_empty() && self.below.contains_key(&path_key(dir))
    }

    /// The state to persist, sorted.
    pub fn checkpoint(&self) -> EvictedCheckpoint {
        let mut keys: Vec<(u64, u64, u64)> = self.keys.iter().map(|(k, (m, i))| (*k, *m, *i)).collect();
        keys.sort_unstable();
        let mut below: Vec<(u64, u32)> = self.below.iter().map(|(k, n)| (*k, *n)).collect();
        below.sort_unstable();
        EvictedCheckpoint { keys, below }
    }

    /// Restore from a checkpoint.
    pub fn restore(cp: EvictedCheckpoint) -> Evicted {
        let mut inodes: HashMap<u64, u32, Fast> = HashMap::default();
        for (_, _, i) in &cp.keys {
            *inodes.entry(*i).or_default() += 1;
        }
        Evicted {
            keys: cp.keys.into_iter().map(|(k, m, i)| (k, (m, i))).collect(),
            below: cp.below.into_iter().collect(),
            inodes,
        }
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
        e.insert("/g/a/x", &1u8, 7);
        e.insert("/g/a/b/y", &2u8, 8);
        assert!(e.holds("/g/a/x", &1u8) && !e.holds("/g/a/x", &2u8) && e.has_inode(8));
        assert!(e.any_below("/g/a") && e.any_below("/g/a/b") && e.any_below("/"));
        assert!(e.remove("/g/a/b/y"));
        assert!(!e.any_below("/g/a/b") && e.any_below("/g/a") && !e.has_inode(8));
        assert!(!e.remove("/g/a/b/y"));
        let back = Evicted::restore(e.checkpoint());
        assert!(back.contains("/g/a/x") && back.any_below("/g"));
    }
}
