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
        let name = rec.name.as_deref();
        self.current = rec.index;
        self.batch_first.get_or_insert(rec.index);
        if !self.head_memo.is_empty() {
            self.head_memo.clear();
        }
        if !self.rename_paths.is_empty() {
            self.rename_paths.retain(|i, _| *i > rec.index);
        }
        match &rec.kind {
            Creat | Mknod | Slink | Mkdir => {
                let (Some(parent), Some(n)) = (rec.parent, name) else { return };
                let is_dir = rec.kind == Mkdir;
                self.insert(rec.target, Node { place: Place::Child { parent, name: Arc::from(n) }, is_dir, named_at: rec.index });
                if !is_dir {
                    match self.path(rec.target, r) {
                        Some(p) => {
                            // New to the index, unless the index still holds an object
                            // deleted at this path earlier in the batch.
                            if ops.get(&p) != Some(&PathOp::Delete) {
                                self.born.insert(p.clone());
                            }
                            ops.insert(p, PathOp::Update);
                        }
                        None => self.counts.unresolved += 1,
                    }
                }
            }
            Hlink => {
                // A new name for an existing file; every name's ctime (and nlink) changed.
                let new = self.child_path(rec.parent, name, r);
                // Resolve the file first (a file from before monitoring): `fid2path` may
                // already list the new name.
                self.update_every_name(rec.target, r, ops);
                if let (Some(parent), Some(n), Some(p)) = (rec.parent, name, new) {
                    let known = self.link_paths(rec.target, r).contains(&p) || self.path(rec.target, r).as_ref() == Some(&p);
                    if !known {
                        self.links.entry(rec.target).or_default().push(Place::Child { parent, name: Arc::from(n) });
                    }
                    if ops.get(&p) != Some(&PathOp::Delete) {
                        self.born.insert(p.clone());
                    }
                    ops.insert(p, PathOp::Update);
                }
            }
            Unlnk | Rmdir => {
                let path = self.child_path(rec.parent, name, r);
                let was_dir = rec.kind == Rmdir;
                if was_dir {
                    self.forget_dir_paths();
                }
                let since = self.named_at(rec.target, rec.parent, name, path.as_deref());
                if rec.flags & CLF_LAST != 0 || was_dir {
                    self.nodes.pop(&rec.target);
                    self.links.remove(&rec.target);
                } else {
                    self.remove_name(rec.target, rec.parent, name, path.as_deref());
                }
                match path {
                    Some(p) if !was_dir => {
                        self.delete(rec.index, p, since, ops);
                        if rec.flags & CLF_LAST == 0 {
                            // Other links remain: their ctime changed.
                            self.update_every_name(rec.target, r, ops);
                        }
                    }
                    Some(_) => {}
                    None => self.counts.unresolved += 1,
                }
            }
            Renme | Rnmto => {
                let (Some(src), Some(sp)) = (rec.source, rec.source_parent) else { return };
                let old = self.child_path(Some(sp), rec.source_name.as_deref(), r);
                let new = self.child_path(rec.parent, name, r);
                // The new name continues the overwritten target's (the index may hold it
                // under that one's older names).
                let named_at = if rec.target.is_zero() { rec.index } else { self.named_at(rec.target, rec.parent, name, new.as_deref()) };
                if !rec.target.is_zero() {
                    // The overwritten target's name is gone (it now names the renamed object);
                    // the target itself only when that was its last link.
                    if rec.flags & CLF_LAST != 0 {
                        self.nodes.pop(&rec.target);
                        self.links.remove(&rec.target);
                    } else {
                        self.remove_name(rec.target, rec.parent, name, new.as_deref());
                        // Its other links remain: their ctime changed.
                        self.update_every_name(rec.target, r, ops);
                    }
                    self.forget_dir_paths();
                }
                let Some(new) = new else {
                    tracing::debug!(message = "rename target unresolved", index = rec.index, parent = ?rec.parent);
                    self.counts.unresolved += 1;
                    return;
                };
                let is_dir = self.is_dir(src, r);
                let unseen_file = !is_dir && self.nodes.peek(&src).is_none();
                let since = self.named_at(src, Some(sp), rec.source_name.as_deref(), old.as_deref());
                if is_dir {
                    self.forget_dir_paths();
                    if let Some(old) = &old {
                        // Anchored entries below the old name move with it.
                        let moved: Vec<(Fid, Arc<str>)> = self
                            .nodes
                            .oldest_first()
                            .filter_map(|(f, n)| match &n.place {
                                Place::Anchored(p) => under(p, old).map(|rest| (*f, Arc::<str>::from(format!("{new}{rest}")))),
                                _ => None,
                            })
                            .collect();
                        for (f, p) in moved {
                            if let Some(n) = self.nodes.peek_mut(&f) {
                                n.place = Place::Anchored(p);
                            }
                        }
                        for places in self.links.values_mut() {
                            for place in places.iter_mut() {
                                if let Place::Anchored(p) = place {
                                    if let Some(rest) = under(p, old) {
                                        *place = Place::Anchored(Arc::from(format!("{new}{rest}")));
                                    }
                                }
                            }
                        }
                    }
                }
                if let (Some(parent), Some(n)) = (rec.parent, name) {
                    let place = Place::Child { parent, name: Arc::from(n) };
                    // One name of a hard-linked file moved: that name, not the node's.
                    let extra = if is_dir { None } else { self.link_index(src, Some(sp), rec.source_name.as_deref(), old.as_deref()) };
                    match extra {
                        Some(i) => {
                            if let Some(l) = self.links.get_mut(&src) {
                                l[i] = place;
                            }
                        }
                        // A name of a hard-linked file that neither the node nor the links
                        // hold as such: forget the links (resolved again when needed)
                        // rather than overwrite another name with this one.
                        None if !is_dir
                            && self.links.contains_key(&src)
                            && !self.nodes.peek(&src).is_some_and(|n| same_place(&n.place, Some(sp), rec.source_name.as_deref(), old.as_deref())) =>
                        {
                            self.links.remove(&src);
                            self.nodes.pop(&src);
                        }
                        None => self.insert(src, Node { place, is_dir, named_at }),
                    }
                }
                if is_dir {
                    // Every descendant moved, the ones never seen too: walk where the
                    // directory is now, upsert what is there, delete the old names.
                    let now = self.head(src, r);
                    tracing::debug!(message = "directory rename", index = rec.index, old = ?old, new = %new, now = ?now);
                    let mut walked = HashSet::default();
                    if let Some(now) = now {
                        for rel in r.walk(&now) {
                            if self.named_later(src, &new, &now, &rel, r) {
                                // Not there yet at this record: its own record indexes it.
                                continue;
                            }
                            if let Some(old) = &old {
                                self.delete(rec.index, format!("{old}/{rel}"), 0, ops);
                            }
                            walked.insert(rel_hash(&format!("/{rel}")));
                            ops.insert(format!("{now}/{rel}"), PathOp::Update);
                        }
                    }
                    if let Some(old) = old {
                        if self.renames.len() < LOG_CAP {
                            self.renames.push((rec.index, old, new.clone()));
                            self.walked.push(walked);
                        }
                    }
                } else {
                    if let Some(old) = old {
                        self.delete(rec.index, old, since, ops);
                    }
                    if rec.target.is_zero() && ops.get(&new) != Some(&PathOp::Delete) {
                        // Nothing was at the new name: it is new since the last emit.
                        self.born.insert(new.clone());
                    } else {
                        self.born.remove(&new);
                    }
                    if unseen_file {
                        self.learn_other_names(src, &new, r);
                    }
                    ops.insert(new, PathOp::Update);
                    // A rename sets the object's ctime, which its other names show too.
                    if self.links.contains_key(&src) {
                        self.update_every_name(src, r, ops);
                    }
                }
            }
            Mark | Open | Nopen | Gxatr | Unknown(..) => {}
            // Data and attribute changes: the object's current path, stat'ed at emit.
            _ => {
                let known_dir = self.nodes.peek(&rec.target).is_some_and(|n| n.is_dir);
                if known_dir || rec.target == Fid::ROOT {
                    if self.dir_attributes && matches!(rec.kind, Sattr | Xattr) {
                        if let Some(p) = if rec.target == Fid::ROOT { Some("/".to_string()) } else { self.path(rec.target, r) } {
                            ops.insert(p, PathOp::Update);
                        }
                    }
                    return;
                }
                self.update_every_name(rec.target, r, ops);
            }
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

    /// `fid2path` now (memoized for the record being applied).
    fn head(&mut self, fid: Fid, r: &mut dyn Resolver) -> Option<String> {
        if fid == Fid::ROOT {
            return Some("/".into());
        }
        self.head_all(fid, r).into_iter().next()
    }

    /// Every `fid2path` line now, one per hard link (memoized for the record being applied).
    fn head_all(&mut self, fid: Fid, r: &mut dyn Resolver) -> Vec<String> {
        if fid == Fid::ROOT {
            return vec!["/".into()];
        }
        if let Some(all) = self.head_memo.get(&fid) {
            return all.clone();
        }
        self.counts.fid2path_calls += 1;
        let all = r.fid2path_all(&fid);
        if all.is_empty() {
            self.counts.fid2path_failures += 1;
        }
        self.head_memo.insert(fid, all.clone());
        all
    }

    /// The paths of `fid`'s other hard links.
    fn link_paths(&mut self, fid: Fid, r: &mut dyn Resolver) -> Vec<String> {
        let Some(places) = self.links.get(&fid).cloned() else { return Vec::new() };
        places
            .iter()
            .filter_map(|place| match place {
                Place::Child { parent, name } => self.child_path(Some(*parent), Some(name), r),
                Place::Anchored(p) => Some(p.to_string()),
            })
            .collect()
    }

    /// Upsert every name of file `fid`.
    fn update_every_name(&mut self, fid: Fid, r: &mut dyn Resolver, ops: &mut Ops) {
        match self.path(fid, r) {
            Some(p) => {
                ops.insert(p, PathOp::Update);
            }
            None => self.counts.unresolved += 1,
        }
        for p in self.link_paths(fid, r) {
            ops.insert(p, PathOp::Update);
        }
    }

    /// A file first seen in a rename (it predates monitoring, or was evicted): the names
    /// `fid2path` lists besides `name` (the rename's new one) are its other hard links.
    fn learn_other_names(&mut self, fid: Fid, name: &str, r: &mut dyn Resolver) {
        for other in self.head_all(fid, r) {
            if self.linked_later(fid, &other, r) {
                continue;
            }
            let other = self.rewind(other, self.current, r);
            if other != name && !self.link_paths(fid, r).contains(&other) {
                self.links.entry(fid).or_default().push(Place::Anchored(Arc::from(other)));
            }
        }
    }

    /// Whether `line`, a name of `fid` now (a `fid2path` line), is one a hard link still to
    /// come gives it (an HLINK of `fid` with that name, after the record being applied).
    fn linked_later(&mut self, fid: Fid, line: &str, r: &mut dyn Resolver) -> bool {
        let name = line.rsplit('/').next().unwrap_or(line);
        let parents: Vec<Option<Fid>> = r.future_namings(self.current, name).iter().filter(|n| n.link_of == Some(fid)).map(|n| n.parent).collect();
        if parents.is_empty() {
            return false;
        }
        // The same name may also be a link made earlier in another directory: tell by the
        // directory the line is in now.
        self.counts.path2fid_calls += 1;
        match r.path2fid(icicle_core::access::parent_dir(line)) {
            Some(dir) => parents.contains(&Some(dir)),
            None => true,
        }
    }

    /// Whether the walked entry `rel` below directory `dir` (at `at` as of the record being
    /// applied, at `now` now) got its name after that record: a creation or move still to
    /// come into `dir` or a directory below it (known to the tree, or found by `path2fid`).
    fn named_later(&mut self, dir: Fid, at: &str, now: &str, rel: &str, r: &mut dyn Resolver) -> bool {
        let (mut prefix, mut now_prefix) = (at.to_string(), now.to_string());
        for (k, c) in rel.split('/').enumerate() {
            let later = r.future_namings(self.current, c);
            let mut fid_now = None;
            for x in later {
                let Some(p) = x.parent else { continue };
                if p == dir || (k > 0 && self.known_path(p).as_deref() == Some(prefix.as_str())) {
                    return true;
                }
                if k > 0 {
                    let f = *fid_now.get_or_insert_with(|| {
                        self.counts.path2fid_calls += 1;
                        r.path2fid(&now_prefix)
                    });
                    if f == Some(p) {
                        return true;
                    }
                }
            }
            prefix = child_of(&prefix, c);
            now_prefix = child_of(&now_prefix, c);
        }
        false
    }

    /// The path of `fid` when the tree can tell it without resolving anything.
    fn known_path(&self, fid: Fid) -> Option<String> {
        let mut parts: Vec<Arc<str>> = Vec::new();
        let mut cur = fid;
        for _ in 0..4096 {
            if cur == Fid::ROOT {
                return Some(join("", &parts));
            }
            if let Some(p) = self.dir_paths.get(&cur) {
                return Some(join(if &**p == "/" { "" } else { p }, &parts));
            }
            match &self.nodes.peek(&cur)?.place {
                Place::Child { parent, name } => {
                    parts.push(name.clone());
                    cur = *parent;
                }
                Place::Anchored(p) => return Some(join(if &**p == "/" { "" } else { p }, &parts)),
            }
        }
        None
    }

    /// When `fid` got the name (parent, name) at `path`, if the tree holds that name as its
    /// node's (0 otherwise).
    fn named_at(&self, fid: Fid, parent: Option<Fid>, name: Option<&str>, path: Option<&str>) -> u64 {
        self.nodes.peek(&fid).filter(|n| same_place(&n.place, parent, name, path)).map_or(0, |n| n.named_at)
    }

    /// Which of `fid`'s other links is the name (parent, name) at `path`.
    fn link_index(&self, fid: Fid, parent: Option<Fid>, name: Option<&str>, path: Option<&str>) -> Option<usize> {
        self.links.get(&fid)?.iter().position(|place| same_place(place, parent, name, path))
    }

    /// Name (parent, name) at `path` of `fid` went away but `fid` has other links: drop that
    /// name, and when it was the node's, let another link take its place.
    fn remove_name(&mut self, fid: Fid, parent: Option<Fid>, name: Option<&str>, path: Option<&str>) {
        if let Some(i) = self.link_index(fid, parent, name, path) {
            if let Some(l) = self.links.get_mut(&fid) {
                l.swap_remove(i);
                if l.is_empty() {
                    self.links.remove(&fid);
                }
            }
            return;
        }
        let primary = self.nodes.peek(&fid).is_some_and(|n| same_place(&n.place, parent, name, path));
        if primary {
            let next = self.links.get_mut(&fid).and_then(|l| l.pop());
            if self.links.get(&fid).is_some_and(|l| l.is_empty()) {
                self.links.remove(&fid);
            }
            match next {
                Some(place) => self.insert(fid, Node { place, is_dir: false, named_at: 0 }),
                None => {
                    self.nodes.pop(&fid);
                }
            }
        }
    }

    /// The time-correct (old, new) paths of rename record `rec` (not applied yet).
    fn rename_paths(&mut self, rec: &FutureRename, r: &mut dyn Resolver) -> Option<(String, String)> {
        if let Some(v) = self.rename_paths.get(&rec.index) {
            return v.clone();
        }
        let at = |t: &mut DirectoryTree, fid: Option<Fid>, name: Option<&str>, r: &mut dyn Resolver| -> Option<String> {
            let head = t.head(fid?, r)?;
            let p = t.rewind(head, rec.index, r);
            Some(child_of(&p, name?))
        };
        let old = at(self, rec.source_parent, rec.source_name.as_deref(), r);
        let new = at(self, rec.parent, Some(&rec.name), r);
        let v = old.zip(new);
        self.rename_paths.insert(rec.index, v.clone());
        v
    }

    /// Undo, newest first, the renames after index `after` that `path` (a `fid2path`
    /// answer) already reflects. Only renames whose new name is a component of the path
    /// (as it is rewound) can have produced it; the others are never resolved.
    fn rewind(&mut self, mut path: String, after: u64, r: &mut dyn Resolver) -> String {
        let mut candidates: std::collections::BTreeMap<u64, FutureRename> = Default::default();
        let mut looked: std::collections::HashSet<String, foldhash::fast::RandomState> = Default::default();
        let mut before = u64::MAX;
        loop {
            for c in path.split('/').filter(|c| !c.is_empty()) {
                if looked.insert(c.to_string()) {
                    candidates.extend(r.future_renames(after, c).into_iter().filter(|x| x.index > after).map(|x| (x.index, x)));
                }
            }
            let Some((&index, _)) = candidates.range(..before).next_back() else { return path };
            before = index;
            let Some(rec) = candidates.remove(&index) else { return path };
            if let Some((old, new)) = self.rename_paths(&rec, r) {
                if let Some(rest) = under(&path, &new) {
                    path = format!("{old}{rest}");
                }
            }
        }
    }

    /// The path of `fid` at the record being applied (`/` for the root); unknown objects
    /// (and ancestors) are resolved once with `fid2path`, rewound, and cached.
    pub fn path(&mut self, fid: Fid, r: &mut dyn Resolver) -> Option<String> {
        // Most objects are a name in a directory whose path is already known.
        if let Some(Node { place: Place::Child { parent, name }, .. }) = self.node(fid) {
            let (parent, name) = (*parent, name.clone());
            return self.child_path(Some(parent), Some(&name), r);
        }
        self.walk_path(fid, r)
    }

    /// [`DirectoryTree::path`] by walking up to the root, the first remembered directory,
    /// or the first object that must be resolved.
    fn walk_path(&mut self, fid: Fid, r: &mut dyn Resolver) -> Option<String> {
        let mut parts: Vec<Arc<str>> = Vec::new();
        let mut cur = fid;
        for _ in 0..4096 {
            if cur == Fid::ROOT {
                return Some(join("", &parts));
            }
            if cur != fid {
                if let Some(p) = self.dir_paths.get(&cur) {
                    return Some(join(if &**p == "/" { "" } else { p }, &parts));
                }
            }
            // Names are shared (`Arc<str>`): walking up clones no strings.
            let step = self.node(cur).map(|n| match &n.place {
                Place::Child { parent, name } => Ok((*parent, name.clone())),
                Place::Anchored(p) => Err(p.clone()),
            });
            let step = match step {
                Some(s) => s,
                None if cur == fid => {
                    // The object itself: `fid2path` lists every hard link, also those that
                    // records still to come create (their own records name them then).
                    let lines = self.head_all(cur, r);
                    let (present, future): (Vec<String>, Vec<String>) = lines.into_iter().partition(|l| !self.linked_later(cur, l, r));
                    let mut all = if present.is_empty() { future.into_iter() } else { present.into_iter() };
                    let head = all.next()?;
                    let is_dir = r.is_dir(&head);
                    let p: Arc<str> = Arc::from(self.rewind(head, self.current, r));
                    self.insert(cur, Node { place: Place::Anchored(p.clone()), is_dir, named_at: 0 });
                    if !is_dir {
                        // The node's name is not also another link (after an eviction the
                        // links may already hold it).
                        if let Some(i) = self.link_paths(cur, r).iter().position(|l| **l == *p) {
                            if let Some(l) = self.links.get_mut(&cur) {
                                l.remove(i);
                            }
                        }
                        for other in all {
                            let other = self.rewind(other, self.current, r);
                            if *other != *p && !self.link_paths(cur, r).contains(&other) {
                                self.links.entry(cur).or_default().push(Place::Anchored(Arc::from(other)));
                            }
                        }
                        if self.links.get(&cur).is_some_and(|l| l.is_empty()) {
                            self.links.remove(&cur);
                        }
                    }
                    Err(p)
                }
                None => {
                    // An ancestor: a directory.
                    let head = self.head(cur, r)?;
                    let p: Arc<str> = Arc::from(self.rewind(head, self.current, r));
                    self.insert(cur, Node { place: Place::Anchored(p.clone()), is_dir: true, named_at: 0 });
                    Err(p)
                }
            };
            match step {
                Err(p) => return Some(join(if &*p == "/" { "" } else { &p }, &parts)),
                Ok((parent, name)) => {
                    parts.push(name);
                    cur = parent;
                }
            }
        }
        None
    }

    fn child_path(&mut self, parent: Option<Fid>, name: Option<&str>, r: &mut dyn Resolver) -> Option<String> {
        let parent = parent?;
        let p = match self.dir_paths.get(&parent) {
            Some(p) => {
                if self.bounded {
                    self.nodes.promote(&parent);
                }
                p.clone()
            }
            None => {
                let p: Arc<str> = Arc::from(self.walk_path(parent, r)?);
                if self.dir_paths.len() >= DIR_PATHS_CAP {
                    self.dir_paths.clear();
                }
                self.dir_paths.insert(parent, p.clone());
                p
            }
        };
        Some(child_of(&p, name?))
    }

    /// Something that can move or remove directories happened: forget computed paths.
    fn forget_dir_paths(&mut self) {
        self.dir_paths.clear();
    }

    /// Delete `path` as computed for record `index`, plus the paths the index may hold it
    /// under: translated back through this run's earlier directory renames. A name that a
    /// rename of this batch produced was not in the index when the batch began: only its
    /// older name is deleted. Renames before `since` (when the object got its name) are
    /// not translated through.
    fn delete(&mut self, index: u64, path: String, since: u64, ops: &mut Ops) {
        if self.never_indexed(&path) {
            ops.shift_remove(&path);
            return;
        }
        let first = self.batch_first.unwrap_or(index);
        let mut p = path;
        for k in (0..self.renames.len().min(self.walked.len())).rev() {
            let (i, old, new) = &self.renames[k];
            let i = *i;
            if i >= index {
                continue;
            }
            if i <= since {
                break;
            }
            let Some(rest) = under(&p, new) else { continue };
            let found = self.walked[k].contains(&rel_hash(rest));
            let older = format!("{old}{rest}");
            // `p` is a name rename `i` produced: in the index only if it was sent since.
            if i < first && self.may_hold(&p) {
                ops.insert(std::mem::replace(&mut p, older), PathOp::Delete);
            } else {
                p = older;
            }
            if self.never_indexed(&p) {
                // Born at that older name this batch (the rename's walk did not find it
                // there any more): never in the index under any name.
                ops.shift_remove(&p);
                return;
            }
            if found {
                // That rename's walk found it and deleted its older names then.
                return;
            }
        }
        ops.insert(p, PathOp::Delete);
    }

    /// Whether `path` was never in the index (born since the last emit, or born earlier and
    /// found by nothing at emit) and no earlier run may have sent it; forgets it as such.
    fn never_indexed(&mut self, path: &str) -> bool {
        let never = self.born.remove(path) | (!self.unindexed.is_empty() && self.unindexed.remove(path));
        never && !self.maybe_delivered(path)
    }

    /// Whether `fid` is a directory: from the tree, else where it is now.
    fn is_dir(&mut self, fid: Fid, r: &mut dyn Resolver) -> bool {
        if let Some(n) = self.nodes.peek(&fid) {
            return n.is_dir;
        }
        match self.head(fid, r) {
            Some(now) => r.is_dir(&now),
            None => false,
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
