//! The FID-keyed directory tree: (parent FID, name) per object, so paths of new objects are
//! built without `fid2path`, and a directory rename moves every descendant at once. Objects
//! that existed before monitoring are resolved once through a [`Resolver`] and cached.
//! Optional LRU eviction bounds memory; evicted entries are resolved again when needed.

use std::num::NonZeroUsize;

use std::sync::Arc;

use icicle_core::traits::StateStore;
use lru::LruCache;

use crate::changelog::{ChangelogRecord, Fid, RecordType, CLF_LAST};
use crate::lookahead::{FutureNaming, FuturePlace, FutureRename};

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
    /// Where `fid` was after record `after`: the first record still to come that takes a
    /// name away from it (asked when `fid2path` finds the object no more).
    fn future_place(&mut self, _after: u64, _fid: &Fid) -> Option<FuturePlace> {
        None
    }
    /// Whether a record after `after` removes `fid` as a directory (RMDIR).
    fn dir_by_later_records(&mut self, _after: u64, _fid: &Fid) -> bool {
        false
    }
    /// The object a record after `after` renames over `fid` (a directory exactly when `fid`
    /// is one).
    fn renamed_over_later(&mut self, _after: u64, _fid: &Fid) -> Option<Fid> {
        None
    }
    /// The last changelog index written by now (read ahead first): every record of what a
    /// walk just saw is at or before it. `u64::MAX` when unknown.
    fn read_position(&mut self) -> u64 {
        u64::MAX
    }
    /// `lfs path2fid` of `path` now; `None` when unknown or unsupported.
    fn path2fid(&mut self, _path: &str) -> Option<Fid> {
        None
    }
    /// A batch's first record to apply is `first` (told before it is applied): the records
    /// before it are applied, and what was read ahead of them can go.
    fn batch_begins(&mut self, _first: u64) {}
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
    /// `fid2path` calls.
    pub fid2path_calls: u64,
    /// `fid2path` calls that found no path.
    pub fid2path_failures: u64,
    /// `path2fid` calls (only for walked entries a later record may have named).
    pub path2fid_calls: u64,
    /// Objects evicted from the tree to stay within `lru_capacity`.
    pub evictions: u64,
    /// Objects a record touched that could not be given a path.
    pub unresolved: u64,
    /// Objects not where `fid2path` said by the time they were looked at (moved since).
    pub moved_while_resolved: u64,
    /// Objects `fid2path` no longer found, placed by a record still to come that takes
    /// their name (a directory removed or renamed after the record being applied).
    pub placed_by_later_records: u64,
    /// Striped directories' shards found (an entry's parent that is a shard).
    pub shards: u64,
    /// Directory renames the log had no room for (deletes below them may leave phantoms).
    pub rename_log_full: u64,
}

/// The directory tree of one MDT.
///
/// `fid2path` answers with an object's path *now*, which may include renames the monitor has
/// not processed yet; such answers are rewound through those later renames, so every path
/// the tree works with is the path at the record being applied. A log of this run's
/// directory renames then translates deletes back to the path the index knows.
pub struct DirectoryTree {
    nodes: NodeStore,
    /// What the tree has done so far.
    pub counts: TreeCounts,
    renames: Vec<(u64, String, String)>,
    /// Per logged rename: the last record its walk could have missed a change by (the
    /// changelog's end after the walk). Once it is applied the rename needs no translating.
    renames_until: Vec<u64>,
    /// Evicted objects' names and when they got them (names newer than the oldest logged
    /// rename), so that deleting such a name does not translate it through older renames.
    evicted_named_at: std::collections::HashMap<Fid, (Place, u64), foldhash::fast::RandomState>,
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
    /// Shards of striped directories (Lustre up to 2.15 names a shard as an entry's parent),
    /// each with its directory: found when a shard is resolved, kept (few; not evicted).
    aliases: std::collections::HashMap<Fid, Fid, foldhash::fast::RandomState>,
    /// Directories renamed into a parent no record places, kept at their old paths (not
    /// evicted: nothing could find them again).
    stranded: std::collections::HashMap<Fid, Arc<str>, foldhash::fast::RandomState>,
    /// Whether entries can be evicted (recency is tracked only then).
    bounded: bool,
    /// The other names of files with several hard links (the node holds one): from HLINK
    /// records and from `fid2path`'s extra lines. Not evicted (hard links are rare).
    links: std::collections::HashMap<Fid, Vec<Place>, foldhash::fast::RandomState>,
    /// A directory's attribute change is an update of its path (visibility follows
    /// directory permissions: what is below it is judged again at emit).
    pub dir_attributes: bool,
    /// The file system has several MDTs, so directories may be striped: a directory resolved
    /// with `fid2path` is checked for being a shard (one `path2fid` more).
    pub striped: bool,
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
        self.prune_renames();
    }

    /// Apply one (reduced) record, adding the index operations it implies to `ops`.
    fn apply(&mut self, rec: &ChangelogRecord, r: &mut (dyn Resolver + '_), ops: &mut Ops) {
        use RecordType::*;
        self.current = rec.index;
        if self.batch_first.is_none() {
            self.batch_first = Some(rec.index);
            r.batch_begins(rec.index);
        }
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
        (self.nodes.len() + self.evicted_named_at.len())
            * (std::mem::size_of::<Fid>() + std::mem::size_of::<Node>() + 48 + 32)
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

    /// Insert or replace; the entry evicted to make room, if one was.
    fn put(&mut self, fid: Fid, node: Node) -> Option<(Fid, Node)> {
        match self {
            NodeStore::Lru(c) => c.push(fid, node).filter(|(k, _)| *k != fid),
            NodeStore::Plain(m) => {
                m.insert(fid, node);
                None
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
    /// The changelog index cleared when it was taken: the monitor reads on from the next one.
    pub index: u64,
    nodes: Vec<(String, Node)>,
    renames: Vec<(u64, String, String)>,
    /// Per rename, the record after which it needs no translating (absent: never).
    #[serde(default)]
    renames_until: Vec<u64>,
    #[serde(default)]
    walked: Vec<Vec<u64>>,
    /// Other names of hard-linked files.
    #[serde(default)]
    links: Vec<(String, Vec<Place>)>,
    /// Hashes of the paths sent and not deleted since (absent in older checkpoints).
    #[serde(default)]
    sent: Option<Vec<u64>>,
    /// Striped directories' shards and their directories.
    #[serde(default)]
    aliases: Vec<(String, String)>,
    /// Directories renamed into a parent no record places, at their old paths.
    #[serde(default)]
    stranded: Vec<(String, String)>,
    /// With several MDTs read as one sequence, where each MDT stood at `index`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mdts: Option<Vec<crate::dne::MdtPosition>>,
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
            renames_until: Vec::new(),
            evicted_named_at: Default::default(),
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
            aliases: Default::default(),
            stranded: Default::default(),
            bounded: cap != 0,
            links: Default::default(),
            dir_attributes: false,
            striped: false,
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
        Checkpoint {
            index,
            nodes,
            renames: self.renames.clone(),
            renames_until: self.renames_until.clone(),
            walked,
            links,
            sent: self.sent_known.then_some(sent),
            aliases: self.aliases.iter().map(|(s, d)| (s.to_string(), d.to_string())).collect(),
            stranded: self.stranded.iter().map(|(f, p)| (f.to_string(), p.to_string())).collect(),
            mdts: None,
        }
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
        t.renames_until = cp.renames_until;
        t.renames_until.resize(t.renames.len(), u64::MAX);
        t.links = cp.links.into_iter().filter_map(|(f, l)| Some((Fid::parse(&f).ok()?, l))).collect();
        // Older checkpoints have no walk hashes: every rename then translates (safe, wordier).
        t.walked = cp.walked.into_iter().map(|w| w.into_iter().collect()).collect();
        t.walked.resize_with(t.renames.len(), HashSet::default);
        match cp.sent {
            Some(sent) => t.sent = sent.into_iter().collect(),
            None => t.sent_known = t.renames.is_empty(),
        }
        t.aliases = cp.aliases.iter().filter_map(|(s, d)| Some((Fid::parse(s).ok()?, Fid::parse(d).ok()?))).collect();
        t.stranded = cp.stranded.into_iter().filter_map(|(f, p)| Some((Fid::parse(&f).ok()?, Arc::from(p)))).collect();
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
        if node.named_at > 0 && !self.evicted_named_at.is_empty() {
            self.evicted_named_at.remove(&fid);
        }
        if let Some((gone, old)) = self.nodes.put(fid, node) {
            self.counts.evictions += 1;
            // About as many as the tree holds (a backlog's first rename stays logged long).
            let room = self.evicted_named_at.len() < self.nodes.len() + 1024;
            if room && self.renames.first().is_some_and(|(oldest, ..)| old.named_at >= *oldest) {
                self.evicted_named_at.insert(gone, (old.place, old.named_at));
            }
        }
    }

    /// Log directory rename `index` (`old` to `new`, its walk having found `walked`), needed
    /// until record `until` is applied.
    fn log_rename(&mut self, index: u64, old: String, new: &str, walked: HashSet<u64>, until: u64) {
        if self.renames.len() >= LOG_CAP {
            if self.counts.rename_log_full == 0 {
                tracing::warn!(
                    message = "rename log full: deletes below later directory renames may leave phantoms",
                    cap = LOG_CAP,
                    index
                );
            }
            self.counts.rename_log_full += 1;
            return;
        }
        // A delete translated through this rename goes on through the earlier ones its old
        // name lies under: they are needed as long as this one is.
        let mut p = old.clone();
        for k in (0..self.renames.len()).rev() {
            let (_, o, n) = &self.renames[k];
            if let Some(rest) = under(&p, n) {
                p = format!("{o}{rest}");
                self.renames_until[k] = self.renames_until[k].max(until);
            }
        }
        self.renames.push((index, old, new.to_string()));
        self.renames_until.push(until);
        self.walked.push(walked);
    }

    /// Forget the logged renames every record of whose walk is applied.
    fn prune_renames(&mut self) {
        if !self.renames_until.iter().any(|u| *u <= self.current) {
            return;
        }
        let keep: Vec<bool> = self.renames_until.iter().map(|u| *u > self.current).collect();
        let mut k = keep.iter();
        self.renames.retain(|_| *k.next().unwrap_or(&true));
        let mut k = keep.iter();
        self.walked.retain(|_| *k.next().unwrap_or(&true));
        self.renames_until.retain(|u| *u > self.current);
        let oldest = self.renames.first().map_or(u64::MAX, |r| r.0);
        self.evicted_named_at.retain(|_, (_, at)| *at >= oldest);
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
mod tests;
