//! The GPFS monitor's state: known objects by path (with an inode index for hard links),
//! rename halves waiting for their pair, and the rules that turn events into index operations:
//! coalescing (the last event's metadata wins), cancellation (an object created and removed
//! between two emits produces nothing), and directory renames that move every descendant.

use std::collections::{BTreeSet, HashMap, HashSet};

use icicle_core::traits::StateStore;

use crate::event::{EventKind, GpfsEvent, Meta};
pub use crate::evict::path_key;
use crate::evict::{Evicted, EvictedCheckpoint};

mod bounded;
mod counts;
mod ignored;
mod late;
mod moves;
mod verify;
mod walk;
mod whole;

pub use counts::GpfsCounts;
pub use ignored::IgnoredEvents;

pub use walk::{Lookup, MountWalker, NoWalk, WalkLeftOut, Walker};

type Fast = foldhash::fast::RandomState;

/// Where an event came from (Kafka partition, offset): pending rename halves hold commits back.
pub type Position = (i32, i64);

/// What a path needs in the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Upsert its primary record with this metadata.
    Update(Meta),
    /// Remove its primary record.
    Delete,
}

/// A path held by the state: one allocation shared by the object map, the inode index, the
/// born set and the pending operations.
pub type PathName = std::sync::Arc<str>;

/// Pending index operations by path, in first-touched order.
pub type Ops = indexmap::IndexMap<PathName, Op, Fast>;

/// A rename's first half, waiting for IN_MOVED_TO.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PendingMove {
    /// `cookie`: pairs it with its IN_MOVED_TO.
    pub cookie: u64,
    /// The old path (the IN_MOVED_FROM's `path`).
    pub path: String,
    /// The object's metadata as the IN_MOVED_FROM reported it.
    pub meta: Meta,
    /// Where the IN_MOVED_FROM came from: offsets are not committed past it while it waits.
    pub position: Position,
    /// Batch boundaries seen while waiting in which its partition delivered later events
    /// (the IN_MOVED_TO, keyed like it, would have come before them).
    pub age: u32,
    /// Batch boundaries seen while waiting, whatever was read: a partition that falls silent
    /// after a move out of the fileset keeps its half waiting this long at most.
    #[serde(default)]
    pub waited: u32,
    /// For a directory: the names (and inodes) the state knew below it when another object
    /// first arrived at or below its old name; settling the half moves or removes these only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below: Option<Vec<(String, u64)>>,
}

/// What a checkpoint holds.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    /// Every known path and its metadata, sorted by path.
    pub objects: Vec<(String, Meta)>,
    /// Rename halves still waiting for their IN_MOVED_TO.
    pub pending: Vec<PendingMove>,
    /// Directory renames of the run (oldest first).
    #[serde(default)]
    pub renames: Vec<(String, String)>,
    /// Hashes of the paths sent and not deleted since (absent in older checkpoints).
    #[serde(default)]
    pub sent: Option<Vec<u64>>,
    /// Whether the state knows every file (seeded from a snapshot's index).
    #[serde(default)]
    pub complete: bool,
    /// Files let go of under `lru_capacity` that the index still holds.
    #[serde(default)]
    pub evicted: EvictedCheckpoint,
    /// Directories created during the run (see `whole`).
    #[serde(default)]
    pub whole: Vec<String>,
    /// What a rename read late from another partition may still need (see `late`).
    #[serde(default)]
    pub late: late::Late,
    /// Inodes once known under several names, when bounded (see `linked`).
    #[serde(default)]
    pub linked: Vec<u64>,
}

/// The state of one monitored fileset.
#[derive(Default)]
pub struct GpfsState {
    objects: HashMap<PathName, Meta, Fast>,
    /// Directory path → the known paths directly in it (for directory removals and renames).
    children: HashMap<PathName, HashSet<PathName, Fast>, Fast>,
    links: HashMap<u64, smallvec::SmallVec<[PathName; 1]>, Fast>,
    pending: Vec<PendingMove>,
    /// Paths that came into being since the last emit (not in the index yet).
    born: HashSet<PathName, Fast>,
    /// Bytes of path text held (objects and the inode index).
    path_bytes: usize,
    /// A rename half waits this many batch boundaries for its pair.
    pub pair_batches: u32,
    /// The state knows every file (seeded from a snapshot's index): a name
    /// it does not know is not in the index either.
    pub complete: bool,
    /// Directories created during this run, by their names now: the state knows every name
    /// in them the index may hold.
    whole: BTreeSet<String>,
    /// This run's directory renames (old, new), oldest first: a path the state does not know
    /// may be in the index under the name it had before them.
    renames: Vec<(String, String)>,
    /// Hashes of the paths sent as updates (once a directory was renamed) and not deleted
    /// since: a name one of this run's renames produced is in the index only if it is here.
    sent: HashSet<u64, Fast>,
    /// Whether `sent` covers the whole run (not after restoring an older checkpoint).
    sent_unknown: bool,
    /// A directory's attribute change publishes what is below it again (visibility follows
    /// directory permissions).
    pub dir_attributes: bool,
    /// Events come from several partitions, in no order across them: every operation is
    /// checked against the mount before it is sent, and renamed directories are walked.
    pub verify: bool,
    /// Names whose creation a removal cancelled in this batch (checked against the mount
    /// when events come from several partitions).
    cancelled_here: Vec<PathName>,
    /// Per partition, the last offset read in this batch (with several partitions).
    read_to: HashMap<i32, i64, Fast>,
    /// Names whose creation the check dropped (gone from the mount before it was sent): not
    /// in the index, so their removal sends nothing (at most `UNINDEXED_CAP`, then cleared:
    /// an extra delete is harmless).
    unindexed: HashSet<PathName, Fast>,
    /// Keys of the paths a run before the last restart may have delivered without
    /// committing: a replay (whose batches may be cut elsewhere) never cancels their creation.
    replayed: HashSet<u64, Fast>,
    /// Files kept at most (0: no bound); files with several known names always stay.
    lru_capacity: usize,
    /// Inodes once known under several names at the same time (hard links), when bounded:
    /// never let go of, whatever names are known of them now.
    linked: HashSet<u64, Fast>,
    /// Files in least-recently-touched order, when bounded.
    recency: Option<lru::LruCache<PathName, ()>>,
    /// Files let go of that the index still holds.
    evicted: Evicted,
    /// Removals and moves in read ahead of the directory renames that explain them.
    late: late::Late,
    /// `verify`, with a mount to check against.
    checked: bool,

    /// What the state has done so far.
    pub counts: GpfsCounts,
}

/// Directory renames kept in the log.
const RENAME_LOG_CAP: usize = 200_000;

/// The last directory renames that, read from several partitions, are undone in any order.
const LATE_RENAMES: usize = 256;

/// A rename half whose partition delivers nothing after it waits this many times
/// `pair_batches` batch boundaries.
const SILENT_PARTITION_FACTOR: u32 = 16;

/// Names remembered as dropped by the check before they were sent.
const UNINDEXED_CAP: usize = 1 << 16;

/// The directory a path is in (`/` for a top-level name).
fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

impl GpfsState {
    /// An empty state; rename halves wait `pair_batches` batch boundaries.
    pub fn new(pair_batches: u32) -> GpfsState {
        GpfsState { pair_batches, ..Default::default() }
    }

    /// Restore a checkpoint.
    pub fn restore(cp: Checkpoint, pair_batches: u32) -> GpfsState {
        let mut s = GpfsState::new(pair_batches);
        for (p, m) in cp.objects {
            s.know(&p, m);
        }
        s.pending = cp.pending;
        s.complete = cp.complete;
        s.evicted = Evicted::restore(cp.evicted);
        s.whole = cp.whole.into_iter().collect();
        s.renames = cp.renames;
        s.late = cp.late;
        s.linked = cp.linked.into_iter().collect();
        match cp.sent {
            Some(sent) => s.sent = sent.into_iter().collect(),
            None => s.sent_unknown = !s.renames.is_empty(),
        }
        s
    }

    /// The state to persist.
    pub fn checkpoint(&self) -> Checkpoint {
        let mut objects: Vec<(String, Meta)> = self.objects.iter().map(|(p, m)| (p.to_string(), *m)).collect();
        objects.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut sent: Vec<u64> = self.sent.iter().copied().collect();
        sent.sort_unstable();
        Checkpoint {
            objects,
            pending: self.pending.clone(),
            complete: self.complete,
            renames: self.renames.clone(),
            sent: (!self.sent_unknown).then_some(sent),
            evicted: self.evicted.checkpoint(),
            whole: self.marks(),
            late: self.late.clone(),
            linked: {
                let mut v: Vec<u64> = self.linked.iter().copied().collect();
                v.sort_unstable();
                v
            },
        }
    }

    /// Rename halves waiting for their pair.
    pub fn pending(&self) -> &[PendingMove] {
        &self.pending
    }

    /// A message was read at `position` in this batch (parsed or not, kept or dropped; the
    /// engine tells every one before applying the batch): with several partitions, a rename
    /// half ages only at batches its partition went past it in.
    pub fn read(&mut self, position: Position) {
        if self.verify {
            let to = self.read_to.entry(position.0).or_insert(position.1);
            *to = (*to).max(position.1);
        }
    }

    fn set_op(&mut self, path: PathName, op: Op, ops: &mut Ops) {
        if ops.insert(path, op).is_some() {
            self.counts.coalesced += 1;
        }
    }

    /// Hang `name` under its directory, and that directory under its own up to the root, so
    /// that everything known below a directory is reachable from it even when the
    /// directories between were never seen (objects seeded from a snapshot of files).
    fn link_up(&mut self, name: PathName) {
        let mut child = name;
        loop {
            let dir = parent_of(&child);
            if &*child == dir {
                return;
            }
            match self.children.get_mut(dir) {
                Some(set) => {
                    set.insert(child);
                    return;
                }
                None => {
                    let dir: PathName = dir.into();
                    self.children.insert(dir.clone(), HashSet::from_iter([child]));
                    child = dir;
                }
            }
        }
    }

    /// Unhang `path` from its directory; directories left empty that are not objects
    /// themselves go too.
    fn unlink_up(&mut self, path: &str) {
        let mut child: PathName = path.into();
        loop {
            let dir = parent_of(&child).to_string();
            if *child == *dir {
                return;
            }
            let Some(set) = self.children.get_mut(dir.as_str()) else { return };
            set.remove(&*child);
            if !set.is_empty() {
                return;
            }
            self.children.remove(dir.as_str());
            if self.objects.contains_key(dir.as_str()) {
                return;
            }
            child = dir.into();
        }
    }

    fn forget(&mut self, path: &str) -> Option<Meta> {
        let m = self.objects.remove(path)?;
        if let Some(r) = self.recency.as_mut() {
            r.pop(path);
        }
        if !self.children.contains_key(path) {
            self.unlink_up(path);
        }
        self.path_bytes = self.path_bytes.saturating_sub(path.len());
        if let Some(v) = self.links.get_mut(&m.inode) {
            v.retain(|p| &**p != path);
            if v.is_empty() {
                self.links.remove(&m.inode);
            }
        }
        Some(m)
    }

    /// Record `path`'s metadata (one walk down the map); returns the shared name and whether
    /// the path was new to the state.
    fn know(&mut self, path: &str, meta: Meta) -> (PathName, bool) {
        self.know_name(PathName::from(path), meta)
    }

    /// [`GpfsState::know`] for a path already shared (an event's): no copy of its text.
    fn know_name(&mut self, name: PathName, meta: Meta) -> (PathName, bool) {
        use std::collections::hash_map::Entry;
        let path_text = name.clone();
        let path: &str = &path_text;
        let (name, old) = match self.objects.entry(name) {
            Entry::Occupied(mut e) => {
                let old = std::mem::replace(e.get_mut(), meta);
                (e.key().clone(), Some(old))
            }
            Entry::Vacant(e) => {
                let name = e.key().clone();
                e.insert(meta);
                self.path_bytes += path.len();
                self.link_up(name.clone());
                if !self.unindexed.is_empty() {
                    self.unindexed.remove(path);
                }
                if self.evicted.remove(path) {
                    self.counts.evicted_found += 1;
                }
                (name, None)
            }
        };
        if let Some(r) = self.recency.as_mut() {
            if !meta.is_dir() {
                r.put(name.clone(), ());
            }
        }
        if let Some(old) = old {
            if old.inode == meta.inode {
                return (name, false);
            }
            if let Some(v) = self.links.get_mut(&old.inode) {
                v.retain(|p| &**p != path);
            }
        }
        // Only files join names by inode: a directory may reuse a removed file's inode, and
        // a replay of that file's events must not reach it.
        if meta.inode != 0 && !meta.is_dir() {
            let names = self.links.entry(meta.inode).or_default();
            names.push(name.clone());
            if names.len() > 1 && self.lru_capacity > 0 {
                self.linked.insert(meta.inode);
            }
        }
        (name, old.is_none())
    }

    /// Every known path below directory `dir`, with its metadata, in path order.
    fn descendants(&self, dir: &str) -> Vec<(PathName, Meta)> {
        let mut out = Vec::new();
        let mut stack: Vec<&str> = vec![dir];
        while let Some(d) = stack.pop() {
            let Some(set) = self.children.get(d) else { continue };
            for c in set {
                if &**c == d {
                    continue;
                }
                if let Some(m) = self.objects.get(c) {
                    out.push((c.clone(), *m));
                }
                stack.push(c);
            }
        }
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Know an object that existed before monitoring (from the snapshot's index); a state
    /// seeded so knows every file.
    pub fn seed(&mut self, path: &str, meta: Meta) {
        self.complete = true;
        self.know(path, meta);
    }

    /// Paths (by [`path_key`]) a delivery before the last restart may have sent.
    pub fn maybe_delivered(&mut self, keys: impl IntoIterator<Item = u64>) {
        for k in keys {
            self.replayed.insert(k);
            self.sent.insert(k);
        }
    }

    /// Delete `path`'s record, or drop its pending create when it was born in this batch.
    fn delete(&mut self, path: &str, ops: &mut Ops) {
        if self.born.remove(path) && (self.replayed.is_empty() || !self.replayed.contains(&path_key(path))) {
            if ops.shift_remove(path).is_some() {
                self.counts.cancelled += 1;
                if self.verify {
                    // The removal may be an older object's, read late: checked at the end.
                    self.cancelled_here.push(path.into());
                }
            }
            return;
        }
        self.evicted.remove(path);
        self.set_op(path.into(), Op::Delete, ops);
    }

    /// Know `path` and schedule its upsert; returns its name and whether it was new.
    fn upsert(&mut self, path: &str, meta: Meta, ops: &mut Ops) -> (PathName, bool) {
        self.upsert_name(PathName::from(path), meta, ops)
    }

    /// [`GpfsState::upsert`] for a path already shared (an event's).
    fn upsert_name(&mut self, name: PathName, meta: Meta, ops: &mut Ops) -> (PathName, bool) {
        let (name, new) = self.know_name(name, meta);
        if !meta.is_dir() {
            self.set_op(name.clone(), Op::Update(meta), ops);
        }
        (name, new)
    }

    /// Remove `path` and, for a directory, everything still known below it.
    fn remove(&mut self, path: &str, is_dir: bool, ops: &mut Ops) {
        let known = self.forget(path);
        if (is_dir || known.is_some_and(|m| m.is_dir())) && self.evicted.any_below(path) {
            self.counts.evicted_unreachable += 1;
            tracing::warn!(message = "directory removed or moved out with evicted files below: their records stay", path = %path);
        }
        if is_dir || known.is_some_and(|m| m.is_dir()) {
            let below: Vec<PathName> = self.descendants(path).into_iter().map(|(p, _)| p).collect();
            for p in below {
                if let Some(m) = self.forget(&p) {
                    if !m.is_dir() {
                        self.delete(&p, ops);
                    }
                }
            }
            self.born.remove(path);
            self.forget_marks(path);
        } else if known.is_some() {
            self.delete(path, ops);
        } else {
            self.delete_unknown(path, ops);
        }
    }

    /// Delete `path`, which the state does not know: unless the state knows every indexed
    /// file, the index may also hold it under its names before this run's directory renames.
    fn delete_unknown(&mut self, path: &str, ops: &mut Ops) {
        self.note_unknown_delete(path);
        if !self.unindexed.is_empty() && self.unindexed.remove(path) {
            return;
        }
        if self.knows_all_at(path) || !self.produced(path) || self.may_hold(path) {
            self.delete(path, ops);
        }
        self.delete_older_names(path, ops);
    }

    /// Whether one of this run's directory renames produced `path` (it is below a new name).
    fn produced(&self, path: &str) -> bool {
        self.renames.iter().any(|(_, new)| path.strip_prefix(new.as_str()).is_some_and(|r| r.starts_with('/')))
    }

    /// Whether the index may hold `path`, a name one of this run's renames produced.
    fn may_hold(&self, path: &str) -> bool {
        self.sent_unknown || self.sent.contains(&path_key(path))
    }

    /// The names the index may hold for `path` (not known to the state) from before this
    /// run's directory renames: delete them, unless the state knows every indexed file.
    fn delete_older_names(&mut self, path: &str, ops: &mut Ops) {
        if self.knows_all_at(path) {
            // Only a file the state let go of can be indexed under a name it does not know.
            if let Some(name) = self.evicted_name(path).filter(|n| n != path) {
                self.delete(&name, ops);
            }
            return;
        }
        let older = self.older_names(path);
        let reordered = self.older_names_reordered(path);
        let reordered = if reordered == older { Vec::new() } else { reordered };
        // The oldest name may be from before monitoring; the ones between were produced by
        // this run's renames, in the index only if sent.
        for chain in [older, reordered] {
            let last = chain.len().saturating_sub(1);
            for (i, o) in chain.into_iter().enumerate() {
                if i == last || self.may_hold(&o) {
                    self.delete(&o, ops);
                }
            }
        }
    }

    /// The permissions of directory `path`, when the state knows it.
    pub fn dir_perm(&self, path: &str) -> Option<icicle_core::access::Perm> {
        self.objects.get(path).filter(|m| m.is_dir()).map(|m| icicle_core::access::Perm::new(m.mode, m.uid, m.gid))
    }

    /// Everything that must be given up at the end of the stream (drain): pending halves
    /// become removals.
    pub fn finish(&mut self, walker: &mut dyn Walker, ops: &mut Ops) {
        for m in std::mem::take(&mut self.pending) {
            self.moved_out(m, walker, ops);
        }
        self.verify_ops(walker, ops);
        self.note_sent(ops);
    }

    /// The batch's operations are final (they are sent next): remember what the index holds.
    fn note_sent(&mut self, ops: &Ops) {
        if self.renames.is_empty() {
            return;
        }
        for (p, op) in ops {
            match op {
                Op::Update(m) if !m.is_dir() => {
                    self.sent.insert(path_key(p));
                }
                Op::Update(_) => {}
                Op::Delete => {
                    self.sent.remove(&path_key(p));
                }
            }
        }
    }
}

/// The path map as the GPFS monitor's [`StateStore`]; events come with their position.
impl StateStore for GpfsState {
    type Event = (GpfsEvent, Position);
    type Env<'e> = dyn Walker + 'e;
    type Ops = Ops;

    /// A new batch (one emit) begins.
    fn begin_batch(&mut self) {
        self.born.clear();
        self.cancelled_here.clear();
    }

    /// Apply one event (and where it came from), adding the index operations it implies to `ops`.
    fn apply(&mut self, event: &(GpfsEvent, Position), walker: &mut (dyn Walker + '_), ops: &mut Ops) {
        let (ev, position) = (&event.0, event.1);
        self.counts.events += 1;
        if self.verify {
            self.checked = walker.sees_files();
        }
        let path: &str = &ev.path;
        if !self.pending.is_empty() && matches!(ev.kind, EventKind::Created | EventKind::MovedTo | EventKind::Modified)
        {
            self.freeze_pending(path, ev.meta.inode);
        }
        match ev.kind {
            // Dropped by the reducer (`IgnoredEvents`), which counts them.
            EventKind::Ignored => {}
            EventKind::Created => {
                // Not in the index yet, unless the state already knew it (a replay) or the
                // index still holds an object deleted at this path earlier in the batch.
                let deleted_here = ops.get(path) == Some(&Op::Delete) || self.evicted.contains(path);
                if ev.meta.inode != 0 && !ev.meta.is_dir() && self.evicted.has_inode(ev.meta.inode) {
                    // A new link of a file whose other name was let go of: that name joins it
                    // when an event next names it (IN_ATTRIB on the linked file does).
                    self.counts.evicted_links += 1;
                    tracing::debug!(message = "hard link to an evicted file", path = %path, inode = ev.meta.inode);
                }
                let (name, new) = self.upsert_name(ev.path.clone(), ev.meta, ops);
                if new && ev.meta.is_dir() {
                    self.created_dir(path);
                }
                if new && !deleted_here {
                    self.born.insert(name);
                }
                self.propagate(path, ev.meta, ops);
            }
            EventKind::Modified => {
                // The index already holds exactly this (an IN_MODIFY and the IN_CLOSE_WRITE
                // after it, emitted in two batches): nothing to send.
                if !ops.contains_key(path)
                    && (self.objects.get(path) == Some(&ev.meta) || self.evicted.holds(path, &ev.meta))
                {
                    self.counts.unchanged += 1;
                    // Known again all the same: it may be a link of a name known now.
                    self.know_name(ev.path.clone(), ev.meta);
                    // A walk or the mount may have given this name the metadata first: its
                    // other names still wait for it.
                    self.propagate_to_stale(path, ev.meta, ops);
                    return;
                }
                if !self.objects.contains_key(path) {
                    self.delete_older_names(path, ops);
                }
                self.upsert_name(ev.path.clone(), ev.meta, ops);
                self.propagate(path, ev.meta, ops);
            }
            EventKind::Removed => self.remove(path, ev.meta.is_dir(), ops),
            EventKind::DirAttrib => self.dir_attrib(path, ev.meta, walker, ops),
            EventKind::MovedFrom => {
                // Read again after a restart (commits are held back at a waiting half, which
                // the checkpoint also keeps): the same half once.
                if self.pending.iter().any(|m| m.position == position) {
                    self.counts.replayed_halves += 1;
                    return;
                }
                if let Some(new) = self.take_moved_in(ev.cookie, ev.meta) {
                    // Its IN_MOVED_TO came first, from another partition.
                    self.counts.late_pairs += 1;
                    self.rename(path, &new, ev.meta, None, walker, ops);
                    return;
                }
                self.pending.push(PendingMove {
                    cookie: ev.cookie,
                    path: ev.path.to_string(),
                    meta: ev.meta,
                    position,
                    age: 0,
                    waited: 0,
                    below: None,
                });
            }
            EventKind::MovedTo => self.moved_to(ev, walker, ops),
        }
    }

    /// A batch ends: rename halves that waited too long were moved out of the fileset.
    fn end_batch(&mut self, walker: &mut (dyn Walker + '_), ops: &mut Ops) {
        for m in &mut self.pending {
            m.waited += 1;
            // One partition: every batch after the half counts, as it always did.
            if !self.verify || self.read_to.get(&m.position.0).is_some_and(|to| *to > m.position.1) {
                m.age += 1;
            }
        }
        self.read_to.clear();
        let window = self.late_window();
        self.late.tick(window);
        let (pair, silent) = (self.pair_batches, self.pair_batches.saturating_mul(SILENT_PARTITION_FACTOR));
        let (expired, keep): (Vec<PendingMove>, Vec<PendingMove>) =
            std::mem::take(&mut self.pending).into_iter().partition(|m| m.age > pair || m.waited > silent);
        self.pending = keep;
        for m in expired {
            self.moved_out(m, walker, ops);
        }
        self.verify_ops(walker, ops);
        self.note_sent(ops);
        self.evict();
    }

    /// Objects known.
    fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether nothing is known.
    fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Approximate heap bytes: path text twice (object map and inode index) plus per-entry
    /// map overhead and metadata.
    fn approx_bytes(&self) -> usize {
        self.path_bytes
            + self.objects.len() * (std::mem::size_of::<Meta>() + 3 * std::mem::size_of::<PathName>() + 64)
            + self.children.len() * 96
            + self.recency.as_ref().map_or(0, |r| r.len() * 64)
            + self.evicted.approx_bytes()
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tree_tests;
