//! Who may see a file's record, from POSIX permissions along its path, evaluated class by
//! class as the kernel does: owner bits apply to the owner even where group or other bits are
//! wider, group bits to members of the object's group, other bits to everyone else.
//!
//! - [`AccessPolicy::Posix`] (what `ls -l` needs): search (`x`) on every ancestor directory
//!   and read (`r`) on the parent; the file's own mode does not matter.
//! - [`AccessPolicy::PosixRead`]: the same, and read on the file itself.

/// The permission-relevant part of one object on a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Perm {
    /// `st_mode` (only the 0o777 bits are read).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// Which rule decides visibility.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccessPolicy {
    /// Search on every ancestor and read on the parent (listing the name).
    Posix,
    /// [`AccessPolicy::Posix`] and read on the file (never wider than it).
    PosixRead,
}

/// Whom a record could be shown to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asker<'a> {
    /// A user with its primary and supplementary groups; uid 0 sees everything.
    User { uid: u32, groups: &'a [u32] },
    /// The members of a group, as a group: judged by the group class where an object's group
    /// is this one, by the other class elsewhere.
    Group(u32),
    /// Everyone (`public`): the other class along the whole chain.
    Everyone,
}

const R: u32 = 4;
const X: u32 = 1;

/// The `rwx` bits of `p` that apply to `who`.
fn class_bits(p: &Perm, who: &Asker<'_>) -> u32 {
    let (owner, group, other) = ((p.mode >> 6) & 7, (p.mode >> 3) & 7, p.mode & 7);
    match who {
        Asker::User { uid, groups } => {
            if *uid == p.uid {
                owner
            } else if groups.contains(&p.gid) {
                group
            } else {
                other
            }
        }
        Asker::Group(g) => {
            if *g == p.gid {
                group
            } else {
                other
            }
        }
        Asker::Everyone => other,
    }
}

/// Whether `who` may see the record of the file `file` whose directories from the root down
/// are `dirs` (the last one is its parent), under `policy`.
pub fn can_see(policy: AccessPolicy, dirs: &[Perm], file: &Perm, who: &Asker<'_>) -> bool {
    if matches!(who, Asker::User { uid: 0, .. }) {
        return true;
    }
    let Some((parent, above)) = dirs.split_last() else { return false };
    if !above.iter().all(|d| class_bits(d, who) & X != 0) {
        return false;
    }
    let p = class_bits(parent, who);
    if p & X == 0 || p & R == 0 {
        return false;
    }
    match policy {
        AccessPolicy::Posix => true,
        AccessPolicy::PosixRead => class_bits(file, who) & R != 0,
    }
}

/// What is done with a file whose directories' permissions the source cannot know.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnknownDirectories {
    /// Only the owner (and the admins) may see it: never wider than the rule.
    #[default]
    OwnerOnly,
    /// The record is rejected.
    Reject,
}

/// Path depth: `/` is 0, `/a` is 1, `/a/b` is 2.
fn depth(path: &str) -> usize {
    if path == "/" {
        0
    } else {
        path.bytes().filter(|&b| b == b'/').count()
    }
}

/// The directory a path is in (`/` for a top-level name).
pub fn parent_dir(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// Directory permissions by path, filled from a snapshot's directory rows. The shallowest
/// directory seen is the top: directories above it are outside what the source covers and
/// are not judged; every directory from the top down to a file's parent must be known.
#[derive(Debug)]
pub struct DirectoryTable {
    map: std::sync::RwLock<std::collections::HashMap<Box<str>, Perm>>,
    top: std::sync::atomic::AtomicUsize,
}

impl Default for DirectoryTable {
    fn default() -> Self {
        DirectoryTable { map: Default::default(), top: std::sync::atomic::AtomicUsize::new(usize::MAX) }
    }
}

impl DirectoryTable {
    /// Record directory `path`'s permissions.
    pub fn insert(&self, path: &str, perm: Perm) {
        self.top.fetch_min(depth(path), std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut m) = self.map.write() {
            m.insert(path.into(), perm);
        }
    }

    /// Directory `path`'s permissions, when known.
    pub fn get(&self, path: &str) -> Option<Perm> {
        self.map.read().ok()?.get(path).copied()
    }

    /// The permissions of the directories from the top down to `dir` (inclusive); `None`
    /// when `dir` is above the top or one of them is unknown.
    pub fn chain(&self, dir: &str) -> Option<std::sync::Arc<[Perm]>> {
        let top = self.top.load(std::sync::atomic::Ordering::Relaxed);
        if depth(dir) < top {
            return None;
        }
        let m = self.map.read().ok()?;
        let mut out = Vec::with_capacity(depth(dir) + 1 - top);
        let mut p = dir;
        loop {
            out.push(*m.get(p)?);
            if depth(p) <= top {
                break;
            }
            p = parent_dir(p);
        }
        out.reverse();
        Some(out.into())
    }

    /// Directories known.
    pub fn len(&self) -> usize {
        self.map.read().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether no directory is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Directory chains built on demand from a lookup (a mounted file system, a monitor's
/// state) and cached until cleared; `top` is the shallowest directory judged.
#[derive(Debug, Default)]
pub struct ChainCache {
    top: String,
    cache: std::collections::HashMap<String, Option<std::sync::Arc<[Perm]>>>,
}

impl ChainCache {
    /// Chains from `top` down.
    pub fn new(top: &str) -> ChainCache {
        let top = if top.len() > 1 { top.trim_end_matches('/') } else { top };
        ChainCache { top: top.to_string(), cache: Default::default() }
    }

    /// Forget every cached chain (directories may have changed).
    pub fn clear(&mut self) {
        self.cache.clear();
    }

    /// The permissions of the directories from the top down to `dir`, each from `lookup`;
    /// `None` when `dir` is not below the top or one of them is unknown.
    pub fn chain(&mut self, dir: &str, lookup: &mut dyn FnMut(&str) -> Option<Perm>) -> Option<std::sync::Arc<[Perm]>> {
        if let Some(c) = self.cache.get(dir) {
            return c.clone();
        }
        let below_top = dir == self.top || self.top == "/" || dir.strip_prefix(self.top.as_str()).is_some_and(|r| r.starts_with('/'));
        if !below_top {
            return None;
        }
        let above = if dir == self.top { Some(std::sync::Arc::from(Vec::new())) } else { self.chain(parent_dir(dir), lookup) };
        let c = above.and_then(|a| {
            let me = lookup(dir)?;
            let mut v = a.to_vec();
            v.push(me);
            Some(std::sync::Arc::from(v))
        });
        self.cache.insert(dir.to_string(), c.clone());
        c
    }
}

/// A directory's permissions by `lstat` of `path` (`None` if it is not a directory).
pub fn lstat_dir(path: &std::path::Path) -> Option<Perm> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::symlink_metadata(path).ok()?;
    md.is_dir().then(|| Perm { mode: md.mode(), uid: md.uid(), gid: md.gid() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(mode: u32, uid: u32, gid: u32) -> Perm {
        Perm { mode, uid, gid }
    }

    #[test]
    fn a_home_directory_hides_what_is_in_it() {
        let root = p(0o755, 0, 0);
        let home = p(0o755, 0, 0);
        let alice = p(0o700, 1000, 100);
        let dirs = [root, home, alice];
        let (open, private) = (p(0o644, 1000, 100), p(0o600, 1000, 100));
        for policy in [AccessPolicy::Posix, AccessPolicy::PosixRead] {
            assert!(can_see(policy, &dirs, &open, &Asker::User { uid: 1000, groups: &[100] }));
            assert!(!can_see(policy, &dirs, &open, &Asker::Group(100)), "{policy:?}: alice's group is kept out by 0700");
            assert!(!can_see(policy, &dirs, &open, &Asker::Everyone));
            assert!(!can_see(policy, &dirs, &private, &Asker::User { uid: 1001, groups: &[100] }));
            assert!(can_see(policy, &dirs, &private, &Asker::User { uid: 0, groups: &[] }));
        }
    }

    #[test]
    fn a_private_file_in_a_group_project_is_not_public() {
        let dirs = [p(0o755, 0, 0), p(0o750, 1000, 200)];
        let file = p(0o600, 1000, 200);
        for policy in [AccessPolicy::Posix, AccessPolicy::PosixRead] {
            assert!(!can_see(policy, &dirs, &file, &Asker::Everyone), "{policy:?}");
        }
        // The group may list it, but not read it.
        assert!(can_see(AccessPolicy::Posix, &dirs, &file, &Asker::Group(200)));
        assert!(!can_see(AccessPolicy::PosixRead, &dirs, &file, &Asker::Group(200)));
    }

    #[test]
    fn owner_bits_apply_to_the_owner_even_when_narrower() {
        let dirs = [p(0o755, 0, 0), p(0o077, 1000, 100)];
        let file = p(0o644, 1000, 100);
        assert!(!can_see(AccessPolicy::Posix, &dirs, &file, &Asker::User { uid: 1000, groups: &[100] }));
        assert!(can_see(AccessPolicy::Posix, &dirs, &file, &Asker::User { uid: 1001, groups: &[100] }));
    }

    #[test]
    fn the_table_judges_from_its_top_down_and_knows_no_gaps() {
        let t = DirectoryTable::default();
        t.insert("/fs/home", p(0o755, 0, 0));
        t.insert("/fs/home/alice", p(0o700, 1000, 100));
        t.insert("/fs/home/alice/a/b", p(0o755, 1000, 100));
        assert_eq!(t.chain("/fs/home/alice").as_deref(), Some(&[p(0o755, 0, 0), p(0o700, 1000, 100)][..]));
        assert_eq!(t.chain("/fs/home").as_deref(), Some(&[p(0o755, 0, 0)][..]));
        assert!(t.chain("/fs").is_none(), "above the top");
        assert!(t.chain("/fs/home/bob").is_none(), "unknown parent");
        assert!(t.chain("/fs/home/alice/a/b").is_none(), "a gap (/fs/home/alice/a)");
        t.insert("/", p(0o755, 0, 0));
        assert!(t.chain("/fs/home").is_none(), "the top is now `/`, and /fs is unknown");
    }

    #[test]
    fn chains_are_built_from_the_top_and_cached() {
        let mut c = ChainCache::new("/gpfs/fs1/");
        let mut calls = 0;
        let mut look = |d: &str| {
            calls += 1;
            (d != "/gpfs/fs1/gone").then_some(p(0o755, d.len() as u32, 0))
        };
        assert_eq!(c.chain("/gpfs/fs1/a/b", &mut look).map(|v| v.len()), Some(3));
        assert_eq!(c.chain("/gpfs/fs1/a", &mut look).map(|v| v.len()), Some(2));
        assert!(c.chain("/gpfs/other", &mut look).is_none());
        assert!(c.chain("/gpfs/fs1/gone/x", &mut look).is_none());
        assert_eq!(calls, 4, "each directory looked up once");
    }
}
