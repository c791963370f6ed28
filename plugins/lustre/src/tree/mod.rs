//! The FID-keyed directory tree: (parent FID, name) per object, so paths of new objects are
//! built without `fid2path`, and a directory rename moves every descendant at once. Objects
//! that existed before monitoring are resolved once through a [`Resolver`] and cached.
//! Optional LRU eviction bounds memory; evicted entries are resolved again when needed.

use std::num::NonZeroUsize;

use std::sync::Arc;

use icicle_core::traits::StateStore;
use lru::LruCache;

use crate::changelog::{ChangelogRecord, Fid, RecordType, CLF_LAST};
use crate::lookahead::{FutureNaming, FutureRename};

mod records;
mod resolve;

/// Resolves a FID to its current path (relative to the file-system root, starting with `/`).
pub trait Resolver {
    /// `lfs fid2path`; `None` when the object no longer exists.
    fn fid2path(&mut self, fid: &Fid) -> Option<String>;
    /// Every path of `fid` (`lfs fid2path` prints one line per hard link), the one
    /// [`Resolver::fid2path`] gives first; empty when the object no longer exists.
    fn fid2path_all(&mut self, fid: &Fid) -> Vec<String> {
        self.fid2path(fid).into_iter().collect()
    }
    /// Whether `path` is a directory now (lstat on the mount).
    fn is_dir(&mut self, path: &str) -> bool;
    /// Whether `path` is a directory now; `None` when nothing is there (it may have been
    /// renamed since `fid2path` named it).
    fn kind(&mut self, path: &str) -> Option<bool> {
        Some(self.is_dir(path))
    }
    /// The files and links below directory `path`, as paths relative to it.
    fn walk(&mut self, path: &str) -> Vec<String>;
    /// Rename records after index `after`, not applied yet, whose new name is `name`
    /// (ascending). `fid2path` answers with paths that already include them; the tree undoes
    /// them. Called only after a `fid2path` answer, so an answer's renames are all readable.
    fn future_renames(&mut self, _after: u64, _name: &str) -> Vec<FutureRename> {
        Vec::new()
    }
    /// Records after index `after`, not applied yet, that gave an object the free name
    /// `name` (creations, hard links, renames onto a free name), ascending. Called after a
    /// walk: the entries they named were not there at `after`.
    fn future_namings(&mut self, _after: u64, _name: &str) -> Vec<FutureNaming> {
        Vec::new()
    }
    /// `lfs path2fid` of `path` now; `None` when unknown or unsupported.
    fn path2fid(&mut self, _path: &str) -> Option<Fid> {
        None
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
enum Place {
    /// Known by its parent and name.
    Child { parent: Fid, name: Arc<str> },
    /// Resolved through `fid2path`: an absolute path.
    Anchored(Arc<str>),
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Node {
    place: Place,
    is_dir: bool,
    /// The record that gave the object this place (0: resolved, or unknown): the index
    /// cannot hold it under names from before then.
    #[serde(default)]
    named_at: u64,
}

/// What a path needs in the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathOp {
    /// Stat it at emit time and upsert its primary record.
    Update,
    /// Remove its primary record.
    Delete,
}

/// Index operations of a batch, last one per path wins.
pub type Ops = indexmap::IndexMap<String, PathOp, foldhash::fast::RandomState>;

/// State counters.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct TreeCounts {
    pub fid2path_calls: u64,
    pub fid2path_failures: u64,
    /// `path2fid` calls (only for walked entries a later record may have named).
    pub path2fid_calls: u64,
    pub evictions: u64,
    pub unresolved: u64,
    /// Objects not where `fid2path` said by the time they were looked at (moved since).
    pub moved_while_resolved: u64,
}

/// The directory tree of one MDT.
///
/// `fid2path` answers with an object's path *now*, which may include renames the monitor has
/// not processed yet; such answers are rewound through those later renames, so every path
/// the tree works with is the path at the record being applied. A log of this run's
/// directory renames then translates deletes back to the path the index knows.
pub struct DirectoryTree {
    nodes: NodeStore,
    pub counts: TreeCounts,
    renames: Vec<(u64, String, String)>,
    /// Per logged rename: hashes of `/rel` for everything its walk found below the directory.
    /// Their old names were deleted when the rename was applied, so a later delete of such a
    /// path needs no translation through it (or any earlier rename).
    walked: Vec<HashSet<u64>>,
    /// The record being applied.
    current: u64,
    /// The first record of the batch being applied.
    batch_first: Option<u64>,
    /// Time-correct (old, new) paths of not-yet-applied renames, by record index.
    rename_paths: std::collections::HashMap<u64, Option<(String, String)>>,
    /// `fid2path` answers (every line) during one record.
    head_memo: std::collections::HashMap<Fid, Vec<String>>,
    /// Paths that came into being since the last emit: the index cannot hold them yet, so
    /// deleting one needs no delete (an object created and removed between emits produces
    /// nothing).
    born: std::collections::HashSet<String, foldhash::fast::RandomState>,
    /// Paths born in an earlier batch whose update found nothing at emit time (the object
    /// had gone or moved on): the index never held them, so deleting one needs no delete.
    unindexed: std::collections::HashSet<String, foldhash::fast::RandomState>,
    /// Hashes of the paths this monitor sent updates for and has not deleted since: a name
    /// that one of this run's renames produced is in the index only if it is here.
    sent: HashSet<u64>,
    /// Whether `sent` covers the whole run (not after restoring an older checkpoint).
    sent_known: bool,
    /// Hashes of the paths updated since they were last taken (written ahead of delivery).
    fresh_sent: Vec<u64>,
    /// Hashes of the paths a run before the last restart may have delivered without
    /// acknowledging: a replay cannot know them unindexed, nor cancel their creation.
    replayed: HashSet<u64>,
    /// Paths of directories computed since the last change that can move a directory
    /// (directory rename, removal, overwrite): siblings share their parent's walk.
    dir_paths: std::collections::HashMap<Fid, Arc<str>, foldhash::fast::RandomState>,
    /// Whether entries can be evicted (recency is tracked only then).
    bounded: bool,
    /// The other names of files with several hard links (the node holds one): from HLINK
    /// records and from `fid2path`'s extra lines. Not evicted (hard links are rare).
    links: std::collections::HashMap<Fid, Vec<Place>, foldhash::fast::RandomState>,
    /// A directory's attribute change is an update of its path (visibility follows
    /// directory permissions: what is below it is judged again at emit).
    pub dir_attributes: bool,
}

/// The FID directory tree as the Lustre monitor's [`StateStore`].
impl StateStore for DirectoryTree {
    type Event = ChangelogRecord;
    type Env<'e> = dyn Resolver + 'e;
    type Ops = Ops;

    /// A new batch (one emit) begins.
    fn begin_batch(&mut self) {
        self.born.clear();
        self.batch_first = None;
    }

    /// Apply one (reduced) record, adding the index operations it implies to `ops`.
    fn apply(&mut self, rec: &ChangelogRecord, r: &mut (dyn Resolver + '_), ops: &mut Ops) {
        use RecordType::*;
        self.current = rec.index;
        self.batch_first.get_or_insert(rec.index);
        if !self.head_memo.is_empty() {
            self.head_memo.clear();
        }
        if !self.rename_paths.is_empty() {
            self.rename_paths.retain(|i, _| *i > rec.index);
        }
        match &rec.kind {
            Creat | Mknod | Slink | Mkdir => self.on_create(rec, r, ops),
            Hlink => self.on_hard_link(rec, r, ops),
            Unlnk | Rmdir => self.on_unlink(rec, r, ops),
            Renme | Rnmto => self.on_rename(rec, r, ops),
            Mark | Open | Nopen | Gxatr | Unknown(..) => {}
            // Data and attribute changes: the object's current path, stat'ed at emit.
            _ => self.on_change(rec, r, ops),
        }
    }

    /// Number of entries held.
    fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the tree is empty.
    fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Approximate heap bytes of the entries: key, node and the LRU's links and hash slot per
    /// entry, plus a name's allocation (names are shared `Arc<str>`s; 32 bytes assumed).
    fn approx_bytes(&self) -> usize {
        self.nodes.len() * (std::mem::size_of::<Fid>() + std::mem::size_of::<Node>() + 48 + 32)
    }
}

/// The tree's entries: an LRU cache when capped, a plain hash map when not (no recency links
/// to keep, no allocation per entry).
enum NodeStore {
    Lru(LruCache<Fid, Node, foldhash::fast::RandomState>),
    Plain(std::collections::HashMap<Fid, Node, foldhash::fast::RandomState>),
}

impl NodeStore {
    /// The entry, marking it recently used.
    fn get(&mut self, fid: &Fid) -> Option<&Node> {
        match self {
            NodeStore::Lru(c) => c.get(fid),
            NodeStore::Plain(m) => m.get(fid),
        }
    }

    /// The entry, recency untouched.
    fn peek(&self, fid: &Fid) -> Option<&Node> {
        match self {
            NodeStore::Lru(c) => c.peek(fid),
            NodeStore::Plain(m) => m.get(fid),
        }
    }

    fn peek_mut(&mut self, fid: &Fid) -> Option<&mut Node> {
        match self {
            NodeStore::Lru(c) => c.peek_mut(fid),
            NodeStore::Plain(m) => m.get_mut(fid),
        }
    }

    /// Insert or replace; true when another entry was evicted to make room.
    fn put(&mut self, fid: Fid, node: Node) -> bool {
        match self {
            NodeStore::Lru(c) => {
                let evicts = c.len() == c.cap().get() && !c.contains(&fid);
                c.put(fid, node);
                evicts
            }
            NodeStore::Plain(m) => {
                m.insert(fid, node);
                false
            }
        }
    }

    fn pop(&mut self, fid: &Fid) -> Option<Node> {
        match self {
            NodeStore::Lru(c) => c.pop(fid),
            NodeStore::Plain(m) => m.remove(fid),
        }
    }

    fn promote(&mut self, fid: &Fid) {
        if let NodeStore::Lru(c) = self {
            c.promote(fid);
        }
    }

    fn len(&self) -> usize {
        match self {
            NodeStore::Lru(c) => c.len(),
            NodeStore::Plain(m) => m.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every entry, least recently used first (any order when unbounded).
    fn oldest_first(&self) -> Box<dyn Iterator<Item = (&Fid, &Node)> + '_> {
        match self {
            NodeStore::Lru(c) => Box::new(c.iter().rev()),
            NodeStore::Plain(m) => Box::new(m.iter()),
        }
    }
}

/// Whether `place` is the name (parent, name), or the anchored `path`.
fn same_place(place: &Place, parent: Option<Fid>, name: Option<&str>, path: Option<&str>) -> bool {
    match place {
        Place::Child { parent: p, name: n } => Some(*p) == parent && Some(&**n) == name,
        Place::Anchored(a) => Some(&**a) == path,
    }
}

fn under<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    path.strip_prefix(prefix).filter(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// What a checkpoint holds: the tree and its logs as of one changelog index.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    pub index: u64,
    nodes: Vec<(String, Node)>,
    renames: Vec<(u64, String, String)>,
    #[serde(default)]
    walked: Vec<Vec<u64>>,
    /// Other names of hard-linked files.
    #[serde(default)]
    links: Vec<(String, Vec<Place>)>,
    /// Hashes of the paths sent and not deleted since (absent in older checkpoints).
    #[serde(default)]
    sent: Option<Vec<u64>>,
}

/// Renames kept in the log.
const LOG_CAP: usize = 200_000;

/// Directory paths remembered between directory moves.
const DIR_PATHS_CAP: usize = 65_536;

impl DirectoryTree {
    /// A tree holding at most `cap` entries (0 = unbounded).
    pub fn new(cap: usize) -> DirectoryTree {
        let nodes = match NonZeroUsize::new(cap) {
            Some(c) => NodeStore::Lru(LruCache::with_hasher(c, Default::default())),
            None => NodeStore::Plain(Default::default()),
        };
        DirectoryTree {
            nodes,
            counts: TreeCounts::default(),
            renames: Vec::new(),
            walked: Vec::new(),
            current: 0,
            batch_first: None,
            rename_paths: std::collections::HashMap::new(),
            head_memo: std::collections::HashMap::new(),
            born: Default::default(),
            unindexed: Default::default(),
            sent: HashSet::default(),
            sent_known: true,
            dir_paths: Default::default(),
            bounded: cap != 0,
            links: Default::default(),
            dir_attributes: false,
            fresh_sent: Vec::new(),
            replayed: Default::default(),
        }
    }

    /// The emit found nothing at `path` for its update (called right after the batch).
    pub fn vanished(&mut self, path: &str) {
        if self.born.contains(path) && !self.maybe_delivered(path) {
            self.unindexed.insert(path.to_string());
        }
    }

    /// Whether a run before the last restart may have delivered `path` unacknowledged.
    fn maybe_delivered(&self, path: &str) -> bool {
        !self.replayed.is_empty() && self.replayed.contains(&rel_hash(path))
    }

    /// The emit sent an update of `path`: the index holds it.
    pub fn indexed(&mut self, path: &str) {
        if !self.unindexed.is_empty() {
            self.unindexed.remove(path);
        }
        let h = rel_hash(path);
        self.fresh_sent.push(h);
        if !self.renames.is_empty() {
            self.sent.insert(h);
        }
    }

    /// The hashes of the paths sent since the last call: the monitor writes them down before
    /// delivering, so that a restart that replays the batch knows the index may hold them.
    pub fn take_fresh_sent(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.fresh_sent)
    }

    /// Paths a delivery before the last restart may have sent (by hash).
    pub fn maybe_sent(&mut self, hashes: impl IntoIterator<Item = u64>) {
        for h in hashes {
            self.sent.insert(h);
            self.replayed.insert(h);
        }
    }

    /// The emit sent a delete of `path`.
    pub fn unindexed(&mut self, path: &str) {
        if !self.sent.is_empty() {
            self.sent.remove(&rel_hash(path));
        }
    }

    /// Whether the index may hold `path`, a name one of this run's renames produced.
    fn may_hold(&self, path: &str) -> bool {
        !self.sent_known || self.sent.contains(&rel_hash(path))
    }

    /// The state as of changelog `index` (everything up to it applied).
    pub fn checkpoint(&self, index: u64) -> Checkpoint {
        // Oldest first, so restoring keeps the LRU order.
        let nodes = self.nodes.oldest_first().map(|(f, n)| (f.to_string(), n.clone())).collect();
        let walked = self.walked.iter().map(|w| w.iter().copied().collect()).collect();
        let mut links: Vec<(String, Vec<Place>)> = self.links.iter().map(|(f, l)| (f.to_string(), l.clone())).collect();
        links.sort_by(|a, b| a.0.cmp(&b.0));
        let mut sent: Vec<u64> = self.sent.iter().copied().collect();
        sent.sort_unstable();
        Checkpoint { index, nodes, renames: self.renames.clone(), walked, links, sent: self.sent_known.then_some(sent) }
    }

    /// Restore a checkpoint into a tree with room for `cap` entries (0 = unbounded).
    pub fn restore(cp: Checkpoint, cap: usize) -> DirectoryTree {
        let mut t = DirectoryTree::new(cap);
        for (f, n) in cp.nodes {
            if let Ok(fid) = Fid::parse(&f) {
                let _ = t.nodes.put(fid, n);
            }
        }
        t.renames = cp.renames;
        t.links = cp.links.into_iter().filter_map(|(f, l)| Some((Fid::parse(&f).ok()?, l))).collect();
        // Older checkpoints have no walk hashes: every rename then translates (safe, wordier).
        t.walked = cp.walked.into_iter().map(|w| w.into_iter().collect()).collect();
        t.walked.resize_with(t.renames.len(), HashSet::default);
        match cp.sent {
            Some(sent) => t.sent = sent.into_iter().collect(),
            None => t.sent_known = t.renames.is_empty(),
        }
        t
    }

    /// The entry of `fid`, marked as recently used when the tree is bounded.
    fn node(&mut self, fid: Fid) -> Option<&Node> {
        if self.bounded {
            self.nodes.get(&fid)
        } else {
            self.nodes.peek(&fid)
        }
    }

    fn insert(&mut self, fid: Fid, node: Node) {
        if self.nodes.put(fid, node) {
            self.counts.evictions += 1;
        }
    }
}

/// Walked relative paths, by a hash that is the same in every run (checkpoints keep them).
type HashSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

/// The run-independent hash of a relative path `/rel`.
fn rel_hash(rest: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x1c1c_1e5e_ed00_0001).hash_one(rest)
}

fn child_of(parent: &str, name: &str) -> String {
    let parent = if parent == "/" { "" } else { parent };
    let mut s = String::with_capacity(parent.len() + 1 + name.len());
    s.push_str(parent);
    s.push('/');
    s.push_str(name);
    s
}

fn join(base: &str, rev_parts: &[Arc<str>]) -> String {
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
        /// A file with several links maps to its paths joined by newlines.
        fn fid2path(&mut self, fid: &Fid) -> Option<String> {
            self.fid2path_all(fid).into_iter().next()
        }
        fn fid2path_all(&mut self, fid: &Fid) -> Vec<String> {
            self.calls += 1;
            self.paths.get(fid).map(|p| p.lines().map(String::from).collect()).unwrap_or_default()
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
        let mut ops = Ops::default();
        t.apply(&line("1 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x3:0x0] p=[0x200000007:0x1:0x0] d"), &mut r, &mut ops);
        t.apply(&line("2 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x4:0x0] p=[0x200000401:0x3:0x0] a b"), &mut r, &mut ops);
        assert_eq!(r.calls, 0);
        t.apply(&line("3 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000401:0x2:0x0] x"), &mut r, &mut ops);
        t.apply(&line("4 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x6:0x0] p=[0x200000401:0x2:0x0] y"), &mut r, &mut ops);
        assert_eq!(r.calls, 1, "the old parent is resolved once and cached");
        t.apply(&line("5 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x9:0x0]"), &mut r, &mut ops);
        t.apply(&line("6 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x9:0x0] p=[0x200000401:0x2:0x0] f"), &mut r, &mut ops);
        let mut got: Vec<(String, PathOp)> = ops.into_iter().collect();
        got.sort();
        assert_eq!(
            got,
            vec![("/d/a b".into(), PathOp::Update), ("/old/f".into(), PathOp::Delete), ("/old/x".into(), PathOp::Update), ("/old/y".into(), PathOp::Update)]
        );
    }

    /// The file system ahead of the records: nothing is where `fid2path` said any more.
    struct MovedOn {
        paths: HashMap<Fid, String>,
        walked: HashMap<String, Vec<String>>,
    }

    impl Resolver for MovedOn {
        fn fid2path(&mut self, fid: &Fid) -> Option<String> {
            self.paths.get(fid).cloned()
        }
        fn is_dir(&mut self, _path: &str) -> bool {
            false
        }
        fn kind(&mut self, _path: &str) -> Option<bool> {
            None
        }
        fn walk(&mut self, path: &str) -> Vec<String> {
            self.walked.get(path).cloned().unwrap_or_default()
        }
    }

    #[test]
    fn a_directory_first_seen_as_a_parent_is_a_directory_even_when_it_has_moved_on() {
        // /old3 predates monitoring; by the time a creation in it is applied, the file system
        // has renamed it already, so nothing is at the path `fid2path` gives.
        let mut r = MovedOn { paths: HashMap::from([(fid(4), "/old3".to_string())]), walked: HashMap::new() };
        let mut t = DirectoryTree::new(0);
        let mut ops = Ops::default();
        t.apply(&line("1 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x6d:0x0] p=[0x200000401:0x4:0x0] m file"), &mut r, &mut ops);
        assert_eq!(ops.keys().collect::<Vec<_>>(), vec!["/old3/m file"]);
        ops.clear();
        t.begin_batch();
        // Its rename is a directory rename: what is below moves with it.
        r.paths.insert(fid(4), "/rdir".into());
        r.walked.insert("/rdir".into(), vec!["m file".into(), "pre 17.dat".into()]);
        t.apply(
            &line(
                "2 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] rdir s=[0x200000401:0x4:0x0] sp=[0x200000007:0x1:0x0] old3",
            ),
            &mut r,
            &mut ops,
        );
        let mut got: Vec<(String, PathOp)> = ops.into_iter().collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                ("/old3/m file".into(), PathOp::Delete),
                ("/old3/pre 17.dat".into(), PathOp::Delete),
                ("/rdir/m file".into(), PathOp::Update),
                ("/rdir/pre 17.dat".into(), PathOp::Update)
            ]
        );
    }

    /// The file system ahead of the records: a file from before monitoring whose only name
    /// now is a hard link a later record makes.
    struct LinkedLater;

    impl Resolver for LinkedLater {
        fn fid2path(&mut self, f: &Fid) -> Option<String> {
            (*f == fid(0x1e)).then(|| "/w1/hard 63".to_string())
        }
        fn is_dir(&mut self, path: &str) -> bool {
            path == "/w1"
        }
        fn walk(&mut self, _path: &str) -> Vec<String> {
            Vec::new()
        }
        fn future_namings(&mut self, after: u64, name: &str) -> Vec<crate::lookahead::FutureNaming> {
            let link = crate::lookahead::FutureNaming { index: 329, parent: Some(fid(0x39)), link_of: Some(fid(0x1e)) };
            if after < 329 && name == "hard 63" {
                vec![link]
            } else {
                Vec::new()
            }
        }
        fn path2fid(&mut self, path: &str) -> Option<Fid> {
            (path == "/w1").then(|| fid(0x39))
        }
    }

    #[test]
    fn a_name_only_a_later_link_makes_is_not_updated_before_that_link() {
        let mut r = LinkedLater;
        let mut t = DirectoryTree::new(0);
        let mut ops = Ops::default();
        // A change to the file at record 4: its names then are gone, its name now comes at 329.
        t.apply(&line("4 14SATTR 00:00:00.000000000 2026.01.01 0x64 t=[0x200000401:0x1e:0x0]"), &mut r, &mut ops);
        assert!(ops.is_empty(), "{ops:?}");
        t.apply(&line("61 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x39:0x0] p=[0x200000007:0x1:0x0] w1"), &mut r, &mut ops);
        t.apply(&line("329 03HLINK 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x1e:0x0] p=[0x200000401:0x39:0x0] hard 63"), &mut r, &mut ops);
        assert_eq!(ops.into_iter().collect::<Vec<_>>(), vec![("/w1/hard 63".to_string(), PathOp::Update)]);
    }

    #[test]
    fn renaming_a_name_the_tree_never_saw_keeps_the_name_it_knows() {
        // A file from before monitoring, resolved when `fid2path` showed one name (its other
        // name is removed later, so the answer no longer listed it).
        let mut r = MapResolver {
            paths: HashMap::from([(fid(0xb), "/d/link".to_string()), (fid(6), "/x".to_string())]),
            dirs: vec!["/x".into(), "/d".into()],
            calls: 0,
        };
        let mut t = DirectoryTree::new(0);
        let mut ops = Ops::default();
        t.apply(&line("81 14SATTR 00:00:00.000000000 2026.01.01 0x14 t=[0x200000401:0xb:0x0]"), &mut r, &mut ops);
        assert_eq!(ops.keys().collect::<Vec<_>>(), vec!["/d/link"]);
        ops.clear();
        t.begin_batch();
        // Its other name is renamed: both names now.
        r.paths.insert(fid(0xb), "/d/link\n/x/moved".into());
        t.apply(
            &line("159 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000401:0x6:0x0] moved s=[0x200000401:0xb:0x0] sp=[0x200000401:0x6:0x0] orig"),
            &mut r,
            &mut ops,
        );
        ops.clear();
        t.begin_batch();
        t.apply(&line("375 14SATTR 00:00:00.000000000 2026.01.01 0x14 t=[0x200000401:0xb:0x0]"), &mut r, &mut ops);
        let mut got: Vec<&String> = ops.keys().collect();
        got.sort();
        assert_eq!(got, vec!["/d/link", "/x/moved"], "a change reaches every name");
    }

    #[test]
    fn directory_renames_move_every_descendant() {
        let mut r = MapResolver { paths: HashMap::from([(fid(3), "/new".to_string())]), dirs: vec!["/new".into()], calls: 0 };
        let mut t = DirectoryTree::new(0);
        let mut ops = Ops::default();
        t.apply(&line("1 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x3:0x0] p=[0x200000007:0x1:0x0] old"), &mut r, &mut ops);
        t.apply(&line("2 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x4:0x0] p=[0x200000401:0x3:0x0] sub"), &mut r, &mut ops);
        t.apply(&line("3 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000401:0x4:0x0] f2"), &mut r, &mut ops);
        // Emitted: the next batch begins.
        ops.clear();
        t.begin_batch();
        t.apply(
            &line("4 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] new s=[0x200000401:0x3:0x0] sp=[0x200000007:0x1:0x0] old"),
            &mut r,
            &mut ops,
        );
        let mut got: Vec<(String, PathOp)> = ops.into_iter().collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                ("/new/f1".into(), PathOp::Update),
                ("/new/sub/f2".into(), PathOp::Update),
                ("/old/f1".into(), PathOp::Delete),
                ("/old/sub/f2".into(), PathOp::Delete)
            ]
        );
        // Known descendants now have their new paths without any lookup (the one call
        // located the renamed directory to walk it).
        assert_eq!(t.path(fid(5), &mut r).as_deref(), Some("/new/sub/f2"));
        assert_eq!(r.calls, 1);
    }

    #[test]
    fn created_and_removed_between_emits_produces_nothing() {
        let mut r = MapResolver { paths: HashMap::new(), dirs: vec![], calls: 0 };
        let mut t = DirectoryTree::new(0);
        let mut ops = Ops::default();
        t.apply(&line("1 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"), &mut r, &mut ops);
        t.apply(
            &line("2 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] b s=[0x200000401:0x5:0x0] sp=[0x200000007:0x1:0x0] a"),
            &mut r,
            &mut ops,
        );
        t.apply(&line("3 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] b"), &mut r, &mut ops);
        assert!(ops.is_empty(), "{ops:?}");
        // Across an emit, the delete is needed.
        t.apply(&line("4 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x6:0x0] p=[0x200000007:0x1:0x0] c"), &mut r, &mut ops);
        ops.clear();
        t.begin_batch();
        t.apply(&line("5 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x6:0x0] p=[0x200000007:0x1:0x0] c"), &mut r, &mut ops);
        assert_eq!(ops.into_iter().collect::<Vec<_>>(), vec![("/c".to_string(), PathOp::Delete)]);
    }

    #[test]
    fn a_name_deleted_then_reused_and_deleted_again_in_one_batch_is_deleted() {
        let mut r = MapResolver { paths: HashMap::new(), dirs: vec![], calls: 0 };
        let mut t = DirectoryTree::new(0);
        let mut ops = Ops::default();
        t.apply(&line("1 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"), &mut r, &mut ops);
        ops.clear();
        t.begin_batch();
        // The index holds /a; in one batch it is removed, a new /a is made, then removed.
        t.apply(&line("2 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"), &mut r, &mut ops);
        t.apply(&line("3 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x6:0x0] p=[0x200000007:0x1:0x0] a"), &mut r, &mut ops);
        t.apply(&line("4 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x6:0x0] p=[0x200000007:0x1:0x0] a"), &mut r, &mut ops);
        assert_eq!(ops.into_iter().collect::<Vec<_>>(), vec![("/a".to_string(), PathOp::Delete)]);
    }

    #[test]
    fn evicted_entries_are_resolved_again() {
        let mut r = MapResolver { paths: HashMap::from([(fid(3), "/d".to_string())]), dirs: vec!["/d".into()], calls: 0 };
        let mut t = DirectoryTree::new(1);
        let mut ops = Ops::default();
        t.apply(&line("1 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x3:0x0] p=[0x200000007:0x1:0x0] d"), &mut r, &mut ops);
        for i in 4..8 {
            t.apply(
                &line(&format!("{i} 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x{i:x}:0x0] p=[0x200000401:0x3:0x0] f{i}")),
                &mut r,
                &mut ops,
            );
        }
        assert!(t.len() <= 1);
        assert!(t.counts.evictions > 0);
        let paths: Vec<String> = ops.keys().cloned().collect();
        assert_eq!(paths, vec!["/d/f4", "/d/f5", "/d/f6", "/d/f7"]);
        assert!(r.calls > 0);
    }

    fn sorted(ops: &mut Ops) -> Vec<(String, PathOp)> {
        let mut got: Vec<(String, PathOp)> = ops.drain(..).collect();
        got.sort();
        got
    }

    #[test]
    fn every_hard_link_of_a_file_is_updated_renamed_and_removed_by_name() {
        let mut r = MapResolver { paths: HashMap::new(), dirs: vec![], calls: 0 };
        for cap in [0, 2] {
            let mut t = DirectoryTree::new(cap);
            let mut ops = Ops::default();
            let up = |p: &str| (p.to_string(), PathOp::Update);
            let del = |p: &str| (p.to_string(), PathOp::Delete);
            t.apply(&line("1 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"), &mut r, &mut ops);
            t.apply(&line("2 03HLINK 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] b"), &mut r, &mut ops);
            assert_eq!(sorted(&mut ops), vec![up("/a"), up("/b")]);
            t.begin_batch();
            // A later write reaches every name.
            t.apply(&line("3 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0]"), &mut r, &mut ops);
            assert_eq!(sorted(&mut ops), vec![up("/a"), up("/b")], "cap {cap}");
            t.begin_batch();
            // One name renamed: that name moves, the other stays (and shows the new ctime).
            t.apply(
                &line("4 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] c s=[0x200000401:0x5:0x0] sp=[0x200000007:0x1:0x0] b"),
                &mut r,
                &mut ops,
            );
            assert_eq!(sorted(&mut ops), vec![up("/a"), del("/b"), up("/c")]);
            t.begin_batch();
            t.apply(&line("5 13TRUNC 00:00:00.000000000 2026.01.01 0xe t=[0x200000401:0x5:0x0]"), &mut r, &mut ops);
            assert_eq!(sorted(&mut ops), vec![up("/a"), up("/c")]);
            t.begin_batch();
            // The node's own name removed (not the last link): the other name carries on.
            t.apply(&line("6 06UNLNK 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"), &mut r, &mut ops);
            assert_eq!(sorted(&mut ops), vec![del("/a"), up("/c")]);
            t.begin_batch();
            t.apply(&line("7 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0]"), &mut r, &mut ops);
            assert_eq!(sorted(&mut ops), vec![up("/c")]);
            t.begin_batch();
            t.apply(&line("8 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] c"), &mut r, &mut ops);
            assert_eq!(sorted(&mut ops), vec![del("/c")]);
            assert!(t.links.is_empty());
            assert_eq!(r.calls, 0, "names made while monitoring need no fid2path");
        }
    }

    #[test]
    fn a_hard_linked_file_from_before_monitoring_has_every_name_from_fid2path() {
        let mut r = MapResolver { paths: HashMap::from([(fid(9), "/d/x\n/e/y".to_string())]), dirs: vec![], calls: 0 };
        let mut t = DirectoryTree::new(0);
        let mut ops = Ops::default();
        t.apply(&line("1 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x9:0x0]"), &mut r, &mut ops);
        assert_eq!(sorted(&mut ops), vec![("/d/x".to_string(), PathOp::Update), ("/e/y".to_string(), PathOp::Update)]);
        assert_eq!(r.calls, 1);
        // A rename over one of its names (not its last link): that name is gone, the
        // other one's ctime changed.
        t.begin_batch();
        t.apply(&line("2 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0xa:0x0] p=[0x200000007:0x1:0x0] tmp"), &mut r, &mut ops);
        r.paths.insert(fid(4), "/e".into());
        r.dirs.push("/e".into());
        ops.clear();
        t.begin_batch();
        t.apply(&line("3 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x9:0x0] p=[0x200000401:0x4:0x0] y s=[0x200000401:0xa:0x0] sp=[0x200000007:0x1:0x0] tmp"), &mut r, &mut ops);
        assert_eq!(sorted(&mut ops), vec![("/d/x".to_string(), PathOp::Update), ("/e/y".to_string(), PathOp::Update), ("/tmp".to_string(), PathOp::Delete)]);
        t.begin_batch();
        t.apply(&line("4 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x9:0x0]"), &mut r, &mut ops);
        assert_eq!(sorted(&mut ops), vec![("/d/x".to_string(), PathOp::Update)], "/e/y is another file now");
    }

    #[test]
    fn hard_links_survive_a_checkpoint() {
        let mut r = MapResolver { paths: HashMap::new(), dirs: vec![], calls: 0 };
        let mut t = DirectoryTree::new(0);
        let mut ops = Ops::default();
        t.apply(&line("1 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"), &mut r, &mut ops);
        t.apply(&line("2 03HLINK 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] b"), &mut r, &mut ops);
        let mut t = DirectoryTree::restore(serde_json::from_str(&serde_json::to_string(&t.checkpoint(2)).unwrap()).unwrap(), 0);
        ops.clear();
        t.apply(&line("3 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0]"), &mut r, &mut ops);
        assert_eq!(sorted(&mut ops), vec![("/a".to_string(), PathOp::Update), ("/b".to_string(), PathOp::Update)]);
    }

    #[test]
    fn a_link_resolved_again_after_eviction_is_not_held_twice() {
        // fid2path lists /b first: after the node is evicted, /b becomes the node's name,
        // and the link entry for b must not stay beside it.
        let mut r = MapResolver { paths: HashMap::from([(fid(5), "/b\n/a".to_string())]), dirs: vec![], calls: 0 };
        let mut t = DirectoryTree::new(1);
        let mut ops = Ops::default();
        t.apply(&line("1 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"), &mut r, &mut ops);
        t.apply(&line("2 03HLINK 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] b"), &mut r, &mut ops);
        // Another object evicts the file's node.
        t.apply(&line("3 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x6:0x0] p=[0x200000007:0x1:0x0] c"), &mut r, &mut ops);
        ops.clear();
        t.begin_batch();
        t.apply(&line("4 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0]"), &mut r, &mut ops);
        assert_eq!(sorted(&mut ops), vec![("/a".to_string(), PathOp::Update), ("/b".to_string(), PathOp::Update)]);
        t.begin_batch();
        r.paths.insert(fid(5), "/a".into());
        t.apply(&line("5 06UNLNK 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] b"), &mut r, &mut ops);
        assert_eq!(sorted(&mut ops), vec![("/a".to_string(), PathOp::Update), ("/b".to_string(), PathOp::Delete)]);
    }
}
