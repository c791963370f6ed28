//! What the index holds, by path, and the reconciliation of changed paths with the file system.
//!
//! A backend reports paths that may have changed (a directory handle or watch plus a name,
//! resolved to a path) and subtrees to compare again. At emit time every such path is
//! `lstat`ed and compared with its fingerprint (inode, size, mtime, ctime): a new or changed
//! non-directory is an update, a path that is gone a delete (with everything the index holds
//! below it), a directory that is new at its path (created, moved in, replaced) or named by a
//! directory event (it arrived or left) is walked, with what the index holds below it. The
//! other names of a hard-linked file are compared too (a link or unlink changes their ctime).
//! So the result depends only on the file system at emit time and on which paths were
//! reported, never on event order: events for things the seed walk already saw are idempotent.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::path::{Path, PathBuf};

use icicle_core::access::lstat_dir;
use icicle_core::batch::EntryBatch;
use icicle_core::monitor::{reduce_apply, Emit};
use icicle_core::record::FileRecord;
use icicle_gmeta::{subject_for, Judge, PrimaryEncoder, Published};
use serde::{Deserialize, Serialize};

use crate::event::{LocalEvent, RescanReason};
use crate::state::walk::{walk, WalkCounts};
use crate::state::work::Work;
use crate::store::dir_access::{root_changed, RootAccess};
use crate::store::entries_log::{EntriesLog, Fields};
use crate::store::entry_store::EntryStore;
use crate::store::fresh_journal::FreshJournal;
use crate::store::names::Name;
pub use crate::store::print::Print;
use crate::LocalError;

/// Counters of one monitor run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LocalCounts {
    /// Events applied (after the stream dropped those outside the root).
    pub events: u64,
    /// Paths compared with the file system.
    pub compared: u64,
    /// Compared paths found as the index holds them (nothing sent).
    pub unchanged: u64,
    /// Updates sent.
    pub updates: u64,
    /// Deletes sent.
    pub deletes: u64,
    /// Paths refused by the path check.
    pub rejects: u64,
    /// Records withdrawn (sent as deletes): no mapped principal may see the file as it is now.
    pub withdrawn: u64,
    /// Files published again because a directory above them changed mode or owner.
    pub reevaluated: u64,
    /// Subtree rescans, by reason.
    pub rescans: BTreeMap<String, u64>,
    /// Compares that could not read a path (EACCES, EIO): the index kept what it held.
    pub unreadable: u64,
    /// Batches applied.
    pub batches: u64,
    /// Emits that continued a rescan past the emit limit (`max_emit_records`).
    pub continued: u64,
    /// Paths at most on one emit's work list (a rescan queues only what differs).
    pub work_peak: u64,
    /// What the rule table did (events a kept one covers, coalesced).
    pub reduce: icicle_core::traits::ReduceCounts,
}

/// The `ChangeState` of a local monitor.
pub struct LocalState {
    root: PathBuf,
    prefix: String,
    entries: EntryStore,
    enc: PrimaryEncoder,
    seed_emit: bool,
    /// Counters, shared with the stream (which adds its own to the report).
    pub counts: LocalCounts,
    /// Whether a checkpoint was restored (the first event is then a restart rescan).
    pub restored: bool,
    /// Paths first published since the last checkpoint, journaled before delivery: a restart
    /// after a kill between delivery and checkpoint compares them too, so a path the index may
    /// hold but the checkpoint does not is deleted if it is gone by then.
    journal: Option<FreshJournal>,
    /// The restored journal's paths stay in it until the first batch after the restart is
    /// checkpointed.
    carry: bool,
    /// Visibility follows POSIX permissions: judged along the directories at emit time.
    posix: bool,
    /// The root's own mode, owners and ACL (under `posix` only; the root is no entry).
    root_access: Option<RootAccess>,
    /// The entries on disk, written in proportion to what changed (none: the checkpoint holds
    /// every entry).
    log: Option<EntriesLog>,
    /// Paths whose entry changed in this batch.
    changed: HashMap<Name, Option<Print>>,
    /// Updates and deletes at most in one emit.
    emit_limit: usize,
    /// What the last emit left to compare (its limit was reached).
    pending: Option<Work>,
    /// Paths a compare could not read (kept as they were): compared again when a directory
    /// above them changes (its permissions perhaps let them be read now).
    unreadable: BTreeSet<Name>,
    /// A directory is at the root's path (read at each part; a symlink there is not followed).
    root_there: bool,
    /// What to do when the root is gone.
    when_root_gone: crate::config::WhenRootGone,
    /// The backend the stream opened, for the report.
    pub opened: Option<crate::config::Backend>,
}

#[derive(Serialize, Deserialize)]
struct Checkpoint {
    root: String,
    /// Every entry (path, inode, size, mtime, ctime, directory, mode, uid, gid, ACL digest),
    /// when the state keeps no entries files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    entries: Vec<Row>,
    /// The entries files' generation and the bytes of its log this checkpoint covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    entries_log: Option<(u64, u64)>,
    /// The root's own mode, owners and ACL (posix visibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    root_access: Option<RootAccess>,
}

/// A checkpoint's inline entry: the path and its fields, or (an older release's) the path
/// followed by the fields without the ACL digest.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Row {
    Now(String, Fields),
    Before(String, u64, u64, i64, i64, bool, u32, u32, u32),
}

impl LocalState {
    /// An empty state for `root`, publishing records as `prefix` + `/` + relative path.
    pub fn new(root: PathBuf, prefix: String, enc: PrimaryEncoder, seed_emit: bool) -> LocalState {
        LocalState {
            root,
            prefix,
            entries: default_entries(),
            enc,
            seed_emit,
            counts: LocalCounts::default(),
            restored: false,
            journal: None,
            carry: false,
            posix: false,
            root_access: None,
            log: None,
            changed: HashMap::new(),
            emit_limit: crate::config::DEFAULT_EMIT_LIMIT,
            pending: None,
            unreadable: BTreeSet::new(),
            root_there: true,
            when_root_gone: crate::config::WhenRootGone::Delete,
            opened: None,
        }
    }

    /// Keep the entries in `dir/<stem>.entries-*` files, written in proportion to what changed.
    pub fn with_entries_files(mut self, dir: &Path, stem: &str) -> LocalState {
        self.log = Some(EntriesLog::new(dir, stem));
        self
    }

    /// Keep the entries in the SQLite file `file` (made anew; the entries files stay the
    /// durable record), `cache_mb` MiB of its pages in memory, instead of all in memory.
    pub fn with_entries_on_disk(mut self, file: &Path, cache_mb: usize) -> Result<LocalState, LocalError> {
        self.entries = EntryStore::on_disk(file, cache_mb)?;
        Ok(self)
    }

    /// Keep the sent-ahead journal of paths in `file`.
    pub fn with_journal(mut self, file: PathBuf) -> LocalState {
        self.journal = Some(FreshJournal::new(file));
        self
    }

    /// Emit at most `n` updates and deletes per batch; the rest of a larger rescan follows in
    /// further emits ([`ChangeState::more`]).
    pub fn with_emit_limit(mut self, n: usize) -> LocalState {
        self.emit_limit = n.max(1);
        self
    }

    /// What to do when the root is gone ([`crate::config::WhenRootGone`]).
    pub fn with_when_root_gone(mut self, w: crate::config::WhenRootGone) -> LocalState {
        self.when_root_gone = w;
        self
    }

    /// Judge visibility along the directories (`records.visible_to = "posix"`).
    pub fn with_posix(mut self, posix: bool) -> LocalState {
        self.posix = posix;
        self
    }

    /// The journal's paths (published after the last checkpoint, perhaps) the entries do not
    /// hold become placeholders (inode 0: a print nothing matches), so the first rescan compares
    /// them: an update if there, a delete if gone. One that does not read (but for a last line
    /// cut short) is damage: the start stops rather than forget paths whose deletes may be owed.
    fn carry_journal(&mut self) -> Result<(), LocalError> {
        let (entries, changed) = (&mut self.entries, &mut self.changed);
        if let Some(j) = self.journal.as_mut() {
            j.read_each(&mut |rel| {
                if !entries.contains_key(rel.as_str()) {
                    let p = Print { ino: 0, size: 0, mtime: 0, ctime: 0, dir: false, mode: 0, uid: 0, gid: 0, acl: 0 };
                    changed.insert(entries.insert(rel.into(), p), Some(p));
                }
            })?;
        }
        self.carry = true;
        Ok(())
    }

    /// Paths the index holds (directories included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the index holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.len() == 0
    }

    fn full(&self, rel: &str) -> String {
        format!("{}/{rel}", self.prefix)
    }

    /// The index holds `p` at `rel` (sharing the key the entries already have for it).
    fn insert(&mut self, rel: Name, p: Print) {
        let key = self.entries.insert(rel, p);
        self.changed.insert(key, Some(p));
    }

    /// The other names of inode `ino` go back on the work list, even those compared earlier
    /// in this batch (before this change: the event that reported it named another path);
    /// with `now` (the inode as just compared), not again for the same fingerprint: one change
    /// seen through N names queues each name once, not N times.
    fn other_names(&self, ino: u64, rel: &str, now: Option<Print>, work: &mut Work) {
        if ino == 0 {
            return;
        }
        let others: Vec<Name> = self.entries.names_of(ino).into_iter().filter(|n| &**n != rel).collect();
        // A file of one name (almost all) is not remembered: the work list stays in proportion
        // to the differences.
        if others.is_empty() {
            return;
        }
        if let Some(p) = now {
            if work.requeued.get(&ino) == Some(&p) {
                return;
            }
            work.requeued.insert(ino, p);
        }
        for n in others {
            work.push_again(n);
        }
    }

    /// Whether the index holds anything below `rel`.
    fn holds_below(&self, rel: &str) -> bool {
        !self.entries.below(rel, None, 1).is_empty()
    }

    /// Forget `rel` and everything below it; deletes for what was published. At most `room`
    /// entries go in this part; when more are left below, `rel` itself stays until the next.
    fn remove_subtree(&mut self, rel: &Name, room: usize, deletes: &mut Vec<String>, work: &mut Work) {
        if self.remove_below(rel, room, deletes, work) {
            self.forget(rel.clone(), deletes, work);
        }
    }

    /// Forget everything below `rel` (not `rel` itself), at most `room` entries in this part;
    /// deletes for what was published. `false` when more are left below: `rel` goes to the
    /// front of the work list, so one removed tree is delivered in parts like any other work.
    fn remove_below(&mut self, rel: &Name, room: usize, deletes: &mut Vec<String>, work: &mut Work) -> bool {
        let room = room.max(1);
        let gone: Vec<Name> = self.entries.below(rel, None, room + 1).into_iter().map(|(k, _)| k).collect();
        let left = gone.len() > room;
        for k in gone.into_iter().take(room) {
            self.forget(k, deletes, work);
        }
        if left {
            work.push_front(rel.clone());
        }
        !left
    }

    /// Forget the entry at `k`: a delete if it was published, its inode's other names compared.
    fn forget(&mut self, k: Name, deletes: &mut Vec<String>, work: &mut Work) {
        let Some(old) = self.entries.remove(&k) else { return };
        if !old.dir {
            work.delete(&k, subject_for(&self.full(&k)).into_owned(), deletes);
            self.other_names(old.ino, &k, None, work);
        }
        self.changed.insert(k, None);
    }

    /// Everything below `dir` that the file system or the index holds is compared with the
    /// other, a slice at a time as the work list empties ([`Scan`]).
    fn rescan(&mut self, dir: &str, reason: RescanReason, work: &mut Work) {
        // A new directory a rescan's walk is still to list (its entries are found then: walking
        // it again would make a new tree cost its size times its depth): only what the index
        // holds below it is compared (a directory replaced after that scan passed its entries).
        if reason == RescanReason::NewDirectory && work.will_list(dir) {
            work.scans.push(Scan::new(dir, false));
            return;
        }
        *self.counts.rescans.entry(format!("{reason:?}").to_lowercase()).or_default() += 1;
        if reason != RescanReason::NewDirectory {
            tracing::info!(message = "rescanning", root = %self.root.display(), dir = %dir, reason = ?reason);
        }
        // The root's mode, owners or ACL changed while the monitor was not running.
        if dir.is_empty() && self.posix && root_changed(&mut self.root_access, &self.root) {
            let judged = self.root_access.as_ref().is_some_and(|a| work.judged_as("/", a.access()));
            self.republish_below(dir, judged, work);
        }
        if reason == RescanReason::Seed && !self.seed_emit {
            let (root, mut walked) = (self.root.clone(), WalkCounts::default());
            let (posix, carried) = (self.posix, self.journal.as_ref().is_some_and(|j| j.holds_any()));
            // Every entry goes into a new generation of the entries files, not path by path.
            if let Some(log) = self.log.as_mut() {
                log.whole();
            }
            let entries = &mut self.entries;
            walk(&root, dir, &mut walked, true, &mut |rel, md| {
                // A placeholder (a path a killed run published) stays one, to be compared.
                let placeholder = carried && entries.get(rel.as_str()).is_some_and(|p| p.ino == 0 && !p.dir);
                if let Some(md) = md.filter(|_| !placeholder) {
                    let p = Print::at(&root, &rel, md, posix);
                    entries.insert(rel.into(), p);
                }
            });
            self.walked(walked);
            // The placeholders are compared (what the walk inserted is found as held).
            if carried {
                work.scans.push(Scan::new(dir, false));
            }
            return;
        }
        work.scans.push(Scan::new(dir, true));
    }

    /// What a walk met: directories it could not list (walked again when compared again:
    /// their permissions changed, or one above them did).
    fn walked(&mut self, walked: WalkCounts) {
        for d in walked.unlisted {
            self.counts.unreadable += 1;
            self.unreadable.insert(d.into());
        }
    }

    /// Every file the index holds below `dir` is published again (its visibility may differ);
    /// with `judged`, not those published in this part (judged with `dir` as it is now).
    fn republish_below(&mut self, dir: &str, judged: bool, work: &mut Work) {
        work.chains.clear();
        let files: Vec<Name> =
            self.entries.below(dir, None, usize::MAX).into_iter().filter(|(_, p)| !p.dir).map(|(k, _)| k).collect();
        for f in files {
            if judged && work.sent.contains(&f) {
                continue;
            }
            self.counts.reevaluated += 1;
            work.force.insert(f.clone());
            // Perhaps compared (unchanged) earlier in this batch: compare again.
            work.push_again(f);
        }
    }

    /// The paths below `dir` that could not be read go back on the work list.
    fn requeue_unreadable_below(&mut self, dir: &str, work: &mut Work) {
        if self.unreadable.is_empty() {
            return;
        }
        let below = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        let again: Vec<Name> = self
            .unreadable
            .range::<str, _>((Bound::Included(below.as_str()), Bound::Unbounded))
            .take_while(|k| k.starts_with(&below))
            .cloned()
            .collect();
        for p in again {
            self.unreadable.remove(&p);
            work.push_again(p);
        }
    }

    /// `lstat` of `rel`, when the nearest ancestor the index knows is a directory; one it knows
    /// as something else (a directory replaced by a symlink: `lstat` would follow it) makes
    /// `rel` not there (`ENOTDIR`).
    fn lstat(&self, rel: &str) -> std::io::Result<std::fs::Metadata> {
        if !self.root_there {
            return Err(std::io::Error::from_raw_os_error(libc::ENOENT));
        }
        let mut at = rel;
        while let Some(i) = at.rfind('/') {
            at = &rel[..i];
            // A placeholder (a journaled path, no inode known) tells nothing of what is there.
            if let Some(p) = self.entries.get(at).filter(|p| p.dir || p.ino != 0) {
                if !p.dir {
                    return Err(std::io::Error::from_raw_os_error(libc::ENOTDIR));
                }
                break;
            }
        }
        std::fs::symlink_metadata(icicle_core::name::on(&self.root, rel))
    }

    /// Compare one path with the file system.
    fn compare(&mut self, rel: &Name, chunk: &mut EntryBatch, deletes: &mut Vec<String>, work: &mut Work) {
        if rel.is_empty() {
            // The root is no entry; under posix its mode, owners and ACL decide who sees
            // everything.
            if self.posix && root_changed(&mut self.root_access, &self.root) {
                let judged = self.root_access.as_ref().is_some_and(|a| work.judged_as("/", a.access()));
                self.republish_below(rel, judged, work);
                self.requeue_unreadable_below(rel, work);
            }
            return;
        }
        self.counts.compared += 1;
        let old = self.entries.get(rel);
        let md = match self.lstat(rel) {
            Ok(md) => md,
            Err(e) if !is_gone(&e) => {
                // Not read (EACCES, EIO, a path too long): what the index holds stays, and the
                // path is compared again when a directory above it changes.
                self.counts.unreadable += 1;
                self.unreadable.insert(rel.clone());
                if let Some(n) = crate::event::unreadable_to_log() {
                    tracing::warn!(message = "could not compare a path; the index keeps what it holds (the first 20 are logged, then one in 10,000)", path = %rel, error = %e, seen = n);
                }
                return;
            }
            Err(_) => {
                tracing::trace!(message = "compared: gone", path = %rel, old = ?old);
                if !self.unreadable.is_empty() {
                    self.unreadable.remove(&**rel);
                }
                // What the index holds at and below it goes, even when it never held the name
                // itself: a file an event reported is compared before the walk that finds its
                // directory, which may be gone by then.
                if old.is_some() || self.holds_below(rel) {
                    let room = self.emit_limit.saturating_sub(chunk.len() + deletes.len());
                    self.remove_subtree(rel, room, deletes, work);
                } else {
                    self.counts.unchanged += 1;
                }
                return;
            }
        };
        // Could not be read (or, a directory, listed) before: walked again below.
        let was_unreadable = !self.unreadable.is_empty() && self.unreadable.remove(&**rel);
        let new = Print::at(&self.root, rel, &md, self.posix);
        tracing::trace!(message = "compared", path = %rel, old = ?old, new = ?new);
        let arrived = work.directories.contains(&**rel);
        // Forced by a directory above that changed; once published, no longer (the file may be
        // queued twice).
        let forced = work.force.contains(rel);
        if old == Some(new) && !forced && !(arrived && new.dir) {
            self.counts.unchanged += 1;
            return;
        }
        if !new.dir && old.is_none_or(|o| o.dir) {
            // Not a directory (any more): nothing can be below it, though the index may hold
            // paths there (a directory's, or ones events reported before anything compared
            // this name). Its own entry is replaced below, once nothing is left there.
            let room = self.emit_limit.saturating_sub(chunk.len() + deletes.len());
            if !self.remove_below(rel, room, deletes, work) {
                return;
            }
        }
        if let Some(o) = old {
            if !o.dir && new.dir {
                work.delete(rel, subject_for(&self.full(rel)).into_owned(), deletes);
            }
            if !o.dir {
                self.other_names(o.ino, rel, None, work);
            }
        }
        self.insert(rel.clone(), new);
        // Compared as arrived once in the batch: after that the name is an ordinary one (a
        // rescan of a tree above it would compare it, and so rescan it, again and again).
        if arrived {
            work.directories.remove(&**rel);
        }
        if new.dir {
            self.requeue_unreadable_below(rel, work);
            // New at this path (created, moved in, replaced): what it holds was never reported;
            // or it could not be listed when it was walked.
            // One a rescan's walk will still list needs no walk of its own, nor, when the index
            // holds nothing below it and held no directory there, a compare of what is below
            // (so a new tree made parents first costs its size, not its size times its depth).
            let new_here = arrived || was_unreadable || old.is_none_or(|o| !o.dir || o.ino != new.ino);
            if new_here && (old.is_some_and(|o| o.dir) || !work.will_list(rel) || self.holds_below(rel)) {
                self.rescan(rel, RescanReason::NewDirectory, work);
            }
            // Who may see what is below it changed (also for one that left and came back): its
            // mode, owners or ACL.
            if self.posix && old.is_some_and(|o| o.dir && !o.same_access(&new)) {
                // Files published in this part were judged with the directory as cached then:
                // as it is now, or changed since (published again).
                let judged = work.judged_as(&format!("/{rel}"), new.access());
                self.republish_below(rel, judged, work);
            }
            return;
        }
        self.other_names(new.ino, rel, Some(new), work);
        if old.is_none_or(|o| o.dir) {
            if let Some(j) = self.journal.as_mut() {
                j.push(rel.clone());
            }
        }
        self.publish(rel, &md, chunk, deletes, work);
    }

    /// Publish the file at `rel` (metadata `md`): under posix judged along its directories as
    /// they are now. A file no mapped principal may see is withdrawn: the index must not keep
    /// a record that shows it to whoever could see it before.
    fn publish(
        &mut self,
        rel: &Name,
        md: &std::fs::Metadata,
        chunk: &mut EntryBatch,
        deletes: &mut Vec<String>,
        work: &mut Work,
    ) {
        let full = self.full(rel);
        // The row checks every published record passes (the names come from the kernel, so
        // what was stat'ed is a real name below the root).
        if let Err(e) = icicle_core::record::check_path(&full) {
            self.counts.rejects += 1;
            tracing::warn!(message = "path refused", path = %full, error = %e);
            return;
        }
        let rec = FileRecord::from_metadata(&full, md);
        let (p, file) = if self.posix {
            (format!("/{rel}"), Some(icicle_core::name::on(&self.root, rel)))
        } else {
            (String::new(), None)
        };
        let root = &self.root;
        let (chains, judged_with) = (&mut work.chains, &mut work.judged_with);
        let mut lookup = |d: &str| {
            let perm = lstat_dir(&icicle_core::name::on(root, d));
            if let Some(perm) = &perm {
                crate::state::work::judging_with(judged_with, d, perm);
            }
            perm
        };
        let judge = file.as_deref().map(|file| Judge { chains, path: &p, lookup: &mut lookup, acl_at: Some(file) });
        let published = self.enc.publish(chunk, deletes, &rec, judge);
        work.force.remove(rel);
        match published {
            Published::Sent => {
                self.counts.updates += 1;
                work.sent.insert(rel.clone());
                work.published(rel);
            }
            Published::Withdrawn => {
                self.counts.withdrawn += 1;
                work.deleted_here(rel);
            }
        }
    }

    /// Apply a batch of events: the index operations that make the index match the file system
    /// at every path they name.
    pub fn apply_events(&mut self, mut batch: Vec<LocalEvent>) -> Result<Emit, LocalError> {
        // The monitor's twin of the snapshot's deletion guard: a root that went away empties
        // nothing unless asked to (before anything of the batch is applied). `root_there` is
        // left as it was: a restart's restore reads through it.
        let root_gone = crate::kernel::mounts::root_identity(&self.root).is_none();
        if root_gone
            && self.when_root_gone == crate::config::WhenRootGone::Fail
            && !self.entries.below("", None, 1).is_empty()
        {
            return Err(LocalError::RootGone(self.root.display().to_string()));
        }
        self.counts.batches += 1;
        // The previous batch is checkpointed by now: its fresh paths are in the checkpoint (not
        // so when this continues a rescan: the checkpoint comes after its last part).
        let carried = std::mem::take(&mut self.carry);
        if !carried && self.pending.is_none() {
            if let Some(j) = self.journal.as_mut() {
                j.reset();
            }
            if let Some(log) = self.log.as_mut() {
                log.checkpointed();
            }
        }
        self.counts.events += batch.len() as u64;
        if self.pending.is_some() {
            self.counts.continued += 1;
        }
        let mut work = self.pending.take().unwrap_or_default();
        // A new part of a larger emit: the file system went on in between (the earlier parts
        // were delivered), so directories are read again and what they outdated is sent again.
        work.new_part();
        // Each path an event names goes on the work list (see the `StateStore` in `change`).
        let reduced = reduce_apply(Some(&mut crate::state::reduce::PathRules), self, &mut batch, &mut (), &mut work);
        self.counts.reduce.add(&reduced);
        let mut chunk = EntryBatch::default();
        let mut deletes = Vec::new();
        loop {
            let Some(p) = work.pop() else {
                if self.scan_step(&mut work) {
                    continue;
                }
                break;
            };
            self.compare(&p, &mut chunk, &mut deletes, &mut work);
            if chunk.len() + deletes.len() >= self.emit_limit && work.has_more() {
                break;
            }
        }
        self.counts.work_peak = self.counts.work_peak.max(work.peak as u64);
        let prefix = &self.prefix;
        work.settle(&mut deletes, |p| subject_for(&format!("{prefix}/{p}")).into_owned());
        if work.has_more() {
            self.pending = Some(work);
        }
        self.counts.deletes += deletes.len() as u64;
        // Nothing of a batch the entries could not be read or written for is delivered.
        if let Some(e) = self.entries.take_error() {
            return Err(e);
        }
        if let Some(log) = self.log.as_mut() {
            log.record(self.changed.iter().map(|(k, p)| (&**k, p.map(Into::into))), &self.entries)?;
        }
        self.entries.commit();
        // Nor one whose entries were recorded from a failed read (the checkpoint will not name
        // those bytes).
        if let Some(e) = self.entries.take_error() {
            return Err(e);
        }
        self.changed.clear();
        if let Some(j) = self.journal.as_mut() {
            j.sync()?;
        }
        Ok(Emit { chunk, deletes, sent: Vec::new() })
    }
}

/// Every entry in memory; in this crate's tests, in a SQLite file when
/// `ICICLE_TEST_ENTRIES_ON_DISK` is set (the suite runs with either store).
fn default_entries() -> EntryStore {
    #[cfg(test)]
    if std::env::var_os("ICICLE_TEST_ENTRIES_ON_DISK").is_some() {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = std::env::temp_dir().join(format!("icicle-entries-{}-{n}.sqlite", std::process::id()));
        if let Ok(store) = EntryStore::on_disk(&file, 1) {
            // Open already: the name is not needed (and not left behind).
            let _ = std::fs::remove_file(&file);
            return store;
        }
    }
    EntryStore::memory()
}

/// Whether an `lstat` error means the path is not there: nothing at the name, a component
/// that is no directory, or one reached through a symlink loop (no path of the tree itself).
fn is_gone(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP))
}

mod change;
mod reduce;
mod scan;
mod walk;
mod work;
pub(crate) use scan::Scan;

#[cfg(test)]
mod tests;
