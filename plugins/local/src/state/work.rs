//! One batch's work list: the paths to compare in order, each once, and what the part of the
//! emit being built has published and deleted.

use std::collections::{HashMap, HashSet, VecDeque};

use icicle_core::access::{ChainCache, Perm};

use crate::store::dir_access::Access;
use crate::store::names::Name;

/// The access `perm` gives.
fn access_of(perm: &Perm) -> Access {
    (perm.mode, perm.uid, perm.gid, crate::store::dir_access::digest_of(perm.acl.as_deref()))
}

/// Directory `dir` (`/`-rooted) read as `perm` to judge a file published in this part (kept in
/// [`Work::judged_with`]).
pub(crate) fn judging_with(judged_with: &mut HashMap<String, (Access, bool)>, dir: &str, perm: &Perm) {
    let a = access_of(perm);
    match judged_with.get_mut(dir) {
        Some((first, mixed)) => *mixed |= *first != a,
        None => {
            judged_with.insert(dir.to_string(), (a, false));
        }
    }
}

/// One batch's work: paths to compare, in order, each once (the state's pending operations as
/// its events apply: the module is private, so outside the crate the type cannot be named).
pub struct Work {
    pub(crate) queue: VecDeque<Name>,
    pub(crate) seen: HashSet<Name>,
    /// Queued and not compared yet.
    pub(crate) pending: HashSet<Name>,
    /// Per inode, the fingerprint its other names were last queued again for.
    pub(crate) requeued: HashMap<u64, crate::store::print::Print>,
    /// Published again even when unchanged (a directory above changed permissions).
    pub(crate) force: HashSet<Name>,
    /// Published in this part of the emit (judged with the directories as they are now).
    pub(crate) sent: HashSet<Name>,
    /// Directory permissions, as the file system has them during this emit.
    pub(crate) chains: ChainCache,
    /// Each directory's access (mode, owner, group, ACL digest) as the files published in this
    /// part were judged with it: the first one read, and whether another was read later.
    pub(crate) judged_with: HashMap<String, (Access, bool)>,
    /// Paths on the work list at most.
    pub(crate) peak: usize,
    /// Rescans not through yet (the last one steps first).
    pub(crate) scans: Vec<crate::state::Scan>,
    /// Names a directory arrived at or left (compared as new directories whatever the index holds).
    pub(crate) directories: HashSet<String>,
    /// Paths deleted in this part, and those of them published again after their delete (a
    /// sink applies a part's updates before its deletes: such a delete is dropped).
    pub(crate) deleted: HashSet<Name>,
    pub(crate) revived: HashSet<Name>,
}

impl Default for Work {
    fn default() -> Work {
        Work::new()
    }
}

impl Work {
    pub(crate) fn new() -> Work {
        Work {
            queue: VecDeque::new(),
            seen: HashSet::new(),
            pending: HashSet::new(),
            requeued: HashMap::new(),
            force: HashSet::new(),
            sent: HashSet::new(),
            chains: ChainCache::new("/"),
            judged_with: HashMap::new(),
            peak: 0,
            scans: Vec::new(),
            directories: HashSet::new(),
            deleted: HashSet::new(),
            revived: HashSet::new(),
        }
    }

    /// Whether a rescan's walk will list `dir` (everything below it is found without
    /// another walk).
    pub(crate) fn will_list(&self, dir: &str) -> bool {
        self.scans.iter().any(|s| s.will_list(dir))
    }

    /// Whether paths or rescans are left.
    pub(crate) fn has_more(&self) -> bool {
        !self.queue.is_empty() || !self.scans.is_empty()
    }

    /// A delete of `path` (its record's `subject`) in this part.
    pub(crate) fn delete(&mut self, path: &Name, subject: String, deletes: &mut Vec<String>) {
        self.deleted_here(path);
        deletes.push(subject);
    }

    /// `path` was deleted in this part (its delete is in the part's deletes already).
    pub(crate) fn deleted_here(&mut self, path: &Name) {
        self.revived.remove(path);
        self.deleted.insert(path.clone());
    }

    /// Whether every file published in this part below `dir` was judged with `dir` as `now`
    /// (none was: trivially).
    pub(crate) fn judged_as(&self, dir: &str, now: Access) -> bool {
        self.judged_with.get(dir).is_none_or(|(first, mixed)| !mixed && *first == now)
    }

    /// A new part: directories are read again, and paths compared in earlier parts may be
    /// queued again (so what is kept to tell them is no larger than the work list).
    pub(crate) fn new_part(&mut self) {
        let pending = &self.pending;
        self.seen.retain(|p| pending.contains(p));
        self.sent.clear();
        self.chains.clear();
        self.judged_with.clear();
    }

    /// `path` published in this part: a delete of it earlier in the part no longer holds.
    pub(crate) fn published(&mut self, path: &Name) {
        if self.deleted.contains(path) {
            self.revived.insert(path.clone());
        }
    }

    /// The part is complete: drop the deletes that a later update of the same path undid
    /// (`subject`: a path's record subject).
    pub(crate) fn settle(&mut self, deletes: &mut Vec<String>, subject: impl Fn(&str) -> String) {
        if !self.revived.is_empty() {
            let undone: HashSet<String> = self.revived.iter().map(|p| subject(p)).collect();
            deletes.retain(|d| !undone.contains(d));
        }
        self.deleted.clear();
        self.revived.clear();
    }

    pub(crate) fn push(&mut self, p: Name) {
        if !self.seen.contains(&p) {
            self.seen.insert(p.clone());
            self.pending.insert(p.clone());
            self.queue.push_back(p);
            self.peak = self.peak.max(self.queue.len());
        }
    }

    /// Queue `p` again, even when compared earlier in this batch (unless still waiting).
    pub(crate) fn push_again(&mut self, p: Name) {
        if !self.pending.contains(&p) {
            self.seen.remove(&p);
            self.push(p);
        }
    }

    /// `p` to the front of the work list (a part of it left for the next part of the emit).
    pub(crate) fn push_front(&mut self, p: Name) {
        self.seen.insert(p.clone());
        self.pending.insert(p.clone());
        self.queue.push_front(p);
    }

    /// The next path to compare.
    pub(crate) fn pop(&mut self) -> Option<Name> {
        let p = self.queue.pop_front()?;
        self.pending.remove(&p);
        Some(p)
    }
}
