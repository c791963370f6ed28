//! The FID-keyed directory tree: (parent FID, name) per object, so paths of new objects are
//! built without `fid2path`, and a directory rename moves every descendant at once. Objects
//! that existed before monitoring are resolved once through a [`Resolver`] and cached.
//! Optional LRU eviction bounds memory; evicted entries are resolved again when needed.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;

use lru::LruCache;

use crate::changelog::{ChangelogRecord, Fid, RecordType, CLF_LAST};

/// Resolves a FID to its current path (relative to the file-system root, starting with `/`).
pub trait Resolver {
    /// `lfs fid2path`; `None` when the object no longer exists.
    fn fid2path(&mut self, fid: &Fid) -> Option<String>;
    /// Whether `path` is a directory now (lstat on the mount).
    fn is_dir(&mut self, path: &str) -> bool;
    /// The files and links below directory `path`, as paths relative to it.
    fn walk(&mut self, path: &str) -> Vec<String>;
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
enum Place {
    /// Known by its parent and name.
    Child { parent: Fid, name: String },
    /// Resolved through `fid2path`: an absolute path.
    Anchored(String),
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Node {
    place: Place,
    is_dir: bool,
}

/// What a path needs in the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathOp {
    /// Stat it at emit time and upsert its primary record.
    Update,
    /// Remove its primary record.
    Delete,
}

/// Index operations of a batch, last one per path wins.
pub type Ops = BTreeMap<String, PathOp>;

/// State counters.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct TreeCounts {
    pub fid2path_calls: u64,
    pub fid2path_failures: u64,
    pub evictions: u64,
    pub unresolved: u64,
}

/// The directory tree of one MDT.
///
/// `fid2path` answers with an object's path *now*, which may already include renames the
/// monitor has not processed yet. Two logs keep deletes right anyway: directory renames seen
/// in this run (to translate a delete back to the path the index knows), and deletes whose
/// path came from such a lookup (to repeat them under a directory's old name when its rename
/// is processed later).
pub struct DirectoryTree {
    nodes: LruCache<Fid, Node>,
    pub counts: TreeCounts,
    renames: Vec<(u64, String, String)>,
    looked_up_deletes: Vec<(u64, String)>,
    touched_anchor: bool,
}

/// What a checkpoint holds: the tree and its logs as of one changelog index.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    pub index: u64,
    nodes: Vec<(String, Node)>,
    renames: Vec<(u64, String, String)>,
    looked_up_deletes: Vec<(u64, String)>,
}

/// Entries kept in each of the two logs.
const LOG_CAP: usize = 200_000;

fn under<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    path.strip_prefix(prefix).filter(|rest| rest.is_empty() || rest.starts_with('/'))
}

impl DirectoryTree {
    /// A tree holding at most `cap` entries (0 = unbounded).
    pub fn new(cap: usize) -> DirectoryTree {
        let nodes = match NonZeroUsize::new(cap) {
            Some(c) => LruCache::new(c),
            None => LruCache::unbounded(),
        };
        DirectoryTree { nodes, counts: TreeCounts::default(), renames: Vec::new(), looked_up_deletes: Vec::new(), touched_anchor: false }
    }

    /// The state as of changelog `index` (everything up to it applied).
    pub fn checkpoint(&self, index: u64) -> Checkpoint {
        // Oldest first, so restoring keeps the LRU order.
        let nodes = self.nodes.iter().rev().map(|(f, n)| (f.to_string(), n.clone())).collect();
        Checkpoint { index, nodes, renames: self.renames.clone(), looked_up_deletes: self.looked_up_deletes.clone() }
    }

    /// Restore a checkpoint into a tree with room for `cap` entries (0 = unbounded).
    pub fn restore(cp: Checkpoint, cap: usize) -> DirectoryTree {
        let mut t = DirectoryTree::new(cap);
        for (f, n) in cp.nodes {
            if let Ok(fid) = Fid::parse(&f) {
                t.nodes.put(fid, n);
            }
        }
        t.renames = cp.renames;
        t.looked_up_deletes = cp.looked_up_deletes;
        t
    }

    /// Number of entries held.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn insert(&mut self, fid: Fid, node: Node) {
        if self.nodes.len() == self.nodes.cap().get() && !self.nodes.contains(&fid) {
            self.counts.evictions += 1;
        }
        self.nodes.put(fid, node);
    }

    /// The current path of `fid` (`/` for the root), resolving unknown ancestors once.
    pub fn path(&mut self, fid: Fid, r: &mut dyn Resolver) -> Option<String> {
        let mut parts: Vec<String> = Vec::new();
        let mut cur = fid;
        for _ in 0..4096 {
            if cur == Fid::ROOT {
                return Some(join("", &parts));
            }
            let node = match self.nodes.get(&cur) {
                Some(n) => n.clone(),
                None => {
                    self.counts.fid2path_calls += 1;
                    match r.fid2path(&cur) {
                        Some(p) => {
                            let is_dir = cur != fid || r.is_dir(&p);
                            let n = Node { place: Place::Anchored(p), is_dir };
                            self.insert(cur, n.clone());
                            n
                        }
                        None => {
                            self.counts.fid2path_failures += 1;
                            return None;
                        }
                    }
                }
            };
            match node.place {
                Place::Anchored(p) => {
                    self.touched_anchor = true;
                    return Some(join(if p == "/" { "" } else { &p }, &parts));
                }
                Place::Child { parent, name } => {
                    parts.push(name);
                    cur = parent;
                }
            }
        }
        None
    }

    fn child_path(&mut self, parent: Option<Fid>, name: Option<&str>, r: &mut dyn Resolver) -> Option<String> {
        let p = self.path(parent?, r)?;
        let name = name?;
        Some(if p == "/" { format!("/{name}") } else { format!("{p}/{name}") })
    }

    /// Delete `path` as computed for record `index`, plus the paths the index may hold it
    /// under: translated back through this run's earlier directory renames.
    fn delete(&mut self, index: u64, path: String, anchored: bool, ops: &mut Ops) {
        let mut p = path.clone();
        for (i, old, new) in self.renames.iter().rev() {
            if *i >= index {
                continue;
            }
            if let Some(rest) = under(&p, new) {
                p = format!("{old}{rest}");
                ops.insert(p.clone(), PathOp::Delete);
            }
        }
        if anchored && self.looked_up_deletes.len() < LOG_CAP {
            self.looked_up_deletes.push((index, path.clone()));
        }
        ops.insert(path, PathOp::Delete);
    }

    fn is_dir(&mut self, fid: Fid, path: &str, r: &mut dyn Resolver) -> bool {
        match self.nodes.peek(&fid) {
            Some(n) => n.is_dir,
            None => r.is_dir(path),
        }
    }

    /// Apply one (reduced) record, adding the index operations it implies to `ops`.
    pub fn apply(&mut self, rec: &ChangelogRecord, r: &mut dyn Resolver, ops: &mut Ops) {
        use RecordType::*;
        let name = rec.name.as_deref();
        self.touched_anchor = false;
        match &rec.kind {
            Creat | Mknod | Slink | Mkdir => {
                let (Some(parent), Some(n)) = (rec.parent, name) else { return };
                let is_dir = rec.kind == Mkdir;
                self.insert(rec.target, Node { place: Place::Child { parent, name: n.to_string() }, is_dir });
                if !is_dir {
                    match self.path(rec.target, r) {
                        Some(p) => {
                            ops.insert(p, PathOp::Update);
                        }
                        None => self.counts.unresolved += 1,
                    }
                }
            }
            Hlink => {
                // A new name for an existing file; every name's ctime (and nlink) changed.
                if let Some(p) = self.child_path(rec.parent, name, r) {
                    ops.insert(p, PathOp::Update);
                }
                if let Some(p) = self.path(rec.target, r) {
                    ops.insert(p, PathOp::Update);
                }
            }
            Unlnk | Rmdir => {
                let path = self.child_path(rec.parent, name, r);
                let anchored = self.touched_anchor;
                let was_dir = rec.kind == Rmdir;
                let same_name = matches!(self.nodes.peek(&rec.target), Some(Node { place: Place::Child { parent, name: n }, .. })
                    if Some(*parent) == rec.parent && Some(n.as_str()) == name);
                if rec.flags & CLF_LAST != 0 || was_dir || same_name {
                    self.nodes.pop(&rec.target);
                }
                match path {
                    Some(p) if !was_dir => {
                        self.delete(rec.index, p, anchored, ops);
                        if rec.flags & CLF_LAST == 0 {
                            // Other links remain: their ctime changed.
                            if let Some(other) = self.path(rec.target, r) {
                                ops.insert(other, PathOp::Update);
                            }
                        }
                    }
                    Some(_) => {}
                    None => self.counts.unresolved += 1,
                }
            }
            Renme | Rnmto => {
                let (Some(src), Some(sp)) = (rec.source, rec.source_parent) else { return };
                self.touched_anchor = false;
                let old = self.child_path(Some(sp), rec.source_name.as_deref(), r);
                let old_anchored = self.touched_anchor;
                let new = self.child_path(rec.parent, name, r);
                if !rec.target.is_zero() {
                    // The overwritten target is gone (its path now names the renamed object).
                    self.nodes.pop(&rec.target);
                }
                let Some(new) = new else {
                    self.counts.unresolved += 1;
                    return;
                };
                let is_dir = self.is_dir(src, &new, r);
                if let (Some(parent), Some(n)) = (rec.parent, name) {
                    self.insert(src, Node { place: Place::Child { parent, name: n.to_string() }, is_dir });
                }
                if is_dir {
                    // Every descendant moved: the known ones and the ones never seen.
                    for rel in r.walk(&new) {
                        if let Some(old) = &old {
                            self.delete(rec.index, format!("{old}/{rel}"), old_anchored, ops);
                        }
                        ops.insert(format!("{new}/{rel}"), PathOp::Update);
                    }
                    if let Some(old) = old {
                        // Paths logged earlier from lookups that already saw this rename use
                        // the new name: rewind them to the old one (and repeat those deletes).
                        for (i, o, n) in self.renames.iter_mut() {
                            if *i < rec.index {
                                if let Some(rest) = under(o, &new) {
                                    *o = format!("{old}{rest}");
                                }
                                if let Some(rest) = under(n, &new) {
                                    *n = format!("{old}{rest}");
                                }
                            }
                        }
                        for (i, p) in self.looked_up_deletes.iter_mut() {
                            if *i < rec.index {
                                if let Some(rest) = under(p, &new) {
                                    *p = format!("{old}{rest}");
                                    ops.insert(p.clone(), PathOp::Delete);
                                }
                            }
                        }
                        if self.renames.len() < LOG_CAP {
                            self.renames.push((rec.index, old, new.clone()));
                        }
                    }
                } else {
                    if let Some(old) = old {
                        self.delete(rec.index, old, old_anchored, ops);
                    }
                    ops.insert(new, PathOp::Update);
                }
            }
            Mark | Open | Nopen | Gxatr | Unknown(..) => {}
            // Data and attribute changes: the object's current path, stat'ed at emit.
            _ => {
                let known_dir = self.nodes.peek(&rec.target).is_some_and(|n| n.is_dir);
                if known_dir || rec.target == Fid::ROOT {
                    return;
                }
                match self.path(rec.target, r) {
                    Some(p) => {
                        ops.insert(p, PathOp::Update);
                    }
                    None => self.counts.unresolved += 1,
                }
            }
        }
    }
}

fn join(base: &str, rev_parts: &[String]) -> String {
    if rev_parts.is_empty() {
        return if base.is_empty() { "/".into() } else { base.to_string() };
    }
    let mut s = base.to_string();
    for p in rev_parts.iter().rev() {
        s.push('/');
        s.push_str(p);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct MapResolver {
        paths: HashMap<Fid, String>,
        dirs: Vec<String>,
        calls: u64,
    }

    impl Resolver for MapResolver {
        fn fid2path(&mut self, fid: &Fid) -> Option<String> {
            self.calls += 1;
            self.paths.get(fid).cloned()
        }
        fn is_dir(&mut self, path: &str) -> bool {
            self.dirs.iter().any(|d| d == path)
        }
        fn walk(&mut self, path: &str) -> Vec<String> {
            if path == "/new" {
                vec!["f1".into(), "sub/f2".into()]
            } else {
                vec![]
            }
        }
    }

    fn fid(o: u32) -> Fid {
        Fid { seq: 0x200000401, oid: o, ver: 0 }
    }

    fn line(s: &str) -> ChangelogRecord {
        ChangelogRecord::parse(s).unwrap()
    }

    #[test]
    fn new_objects_need_no_fid2path_and_old_ones_resolve_once() {
        let mut r = MapResolver { paths: HashMap::from([(fid(2), "/old".to_string()), (fid(9), "/old/f".to_string())]), dirs: vec!["/old".into()], calls: 0 };
        let mut t = DirectoryTree::new(0);
        let mut ops = Ops::new();
        t.apply(&line("1 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x3:0x0] p=[0x200000007:0x1:0x0] d"), &mut r, &mut ops);
        t.apply(&line("2 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x4:0x0] p=[0x200000401:0x3:0x0] a b"), &mut r, &mut ops);
        assert_eq!(r.calls, 0);
        t.apply(&line("3 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000401:0x2:0x0] x"), &mut r, &mut ops);
        t.apply(&line("4 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x6:0x0] p=[0x200000401:0x2:0x0] y"), &mut r, &mut ops);
        assert_eq!(r.calls, 1, "the old parent is resolved once and cached");
        t.apply(&line("5 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x9:0x0]"), &mut r, &mut ops);
        t.apply(&line("6 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x9:0x0] p=[0x200000401:0x2:0x0] f"), &mut r, &mut ops);
        let got: Vec<(String, PathOp)> = ops.into_iter().collect();
        assert_eq!(
            got,
            vec![("/d/a b".into(), PathOp::Update), ("/old/f".into(), PathOp::Delete), ("/old/x".into(), PathOp::Update), ("/old/y".into(), PathOp::Update)]
        );
    }

    #[test]
    fn directory_renames_move_every_descendant() {
        let mut r = MapResolver { paths: HashMap::new(), dirs: vec![], calls: 0 };
        let mut t = DirectoryTree::new(0);
        let mut ops = Ops::new();
        t.apply(&line("1 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x3:0x0] p=[0x200000007:0x1:0x0] old"), &mut r, &mut ops);
        t.apply(&line("2 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x4:0x0] p=[0x200000401:0x3:0x0] sub"), &mut r, &mut ops);
        t.apply(&line("3 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000401:0x4:0x0] f2"), &mut r, &mut ops);
        ops.clear();
        t.apply(&line("4 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] new s=[0x200000401:0x3:0x0] sp=[0x200000007:0x1:0x0] old"), &mut r, &mut ops);
        let got: Vec<(String, PathOp)> = ops.into_iter().collect();
        assert_eq!(
            got,
            vec![
                ("/new/f1".into(), PathOp::Update),
                ("/new/sub/f2".into(), PathOp::Update),
                ("/old/f1".into(), PathOp::Delete),
                ("/old/sub/f2".into(), PathOp::Delete)
            ]
        );
        // Known descendants now have their new paths without any lookup.
        assert_eq!(t.path(fid(5), &mut r).as_deref(), Some("/new/sub/f2"));
        assert_eq!(r.calls, 0);
    }

    #[test]
    fn evicted_entries_are_resolved_again() {
        let mut r = MapResolver { paths: HashMap::from([(fid(3), "/d".to_string())]), dirs: vec!["/d".into()], calls: 0 };
        let mut t = DirectoryTree::new(1);
        let mut ops = Ops::new();
        t.apply(&line("1 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x3:0x0] p=[0x200000007:0x1:0x0] d"), &mut r, &mut ops);
        for i in 4..8 {
            t.apply(&line(&format!("{i} 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x{i:x}:0x0] p=[0x200000401:0x3:0x0] f{i}")), &mut r, &mut ops);
        }
        assert!(t.len() <= 1);
        assert!(t.counts.evictions > 0);
        let paths: Vec<String> = ops.keys().cloned().collect();
        assert_eq!(paths, vec!["/d/f4", "/d/f5", "/d/f6", "/d/f7"]);
        assert!(r.calls > 0);
    }
}
