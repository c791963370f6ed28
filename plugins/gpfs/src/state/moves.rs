//! Renames (paired halves, directory renames that move every descendant, the mount walked for
//! what the state never saw), directory permission changes, and hard-link propagation.

use super::*;

impl GpfsState {
    /// The other names of a hard-linked file share its inode's metadata.
    pub(super) fn propagate(&mut self, path: &str, meta: Meta, ops: &mut Ops) {
        if meta.inode == 0 || meta.is_dir() {
            return;
        }
        let Some(names) = self.links.get(&meta.inode) else { return };
        if names.len() < 2 {
            return;
        }
        let others: Vec<PathName> = names.iter().filter(|p| &***p != path).cloned().collect();
        for p in others {
            self.upsert(&p, meta, ops);
        }
    }

    /// [`GpfsState::propagate`] to the other names of `path`'s file that hold other metadata.
    pub(super) fn propagate_to_stale(&mut self, path: &str, meta: Meta, ops: &mut Ops) {
        if meta.inode == 0 || meta.is_dir() {
            return;
        }
        let Some(names) = self.links.get(&meta.inode) else { return };
        let stale: Vec<PathName> = names
            .iter()
            .filter(|p| &***p != path && self.objects.get(&***p).is_some_and(|m| *m != meta))
            .cloned()
            .collect();
        for p in stale {
            self.upsert(&p, meta, ops);
        }
    }

    /// Whether the state's object at `path`, if any, is not the one with `inode` (both known):
    /// a newer object took the name.
    fn newer_at(&self, path: &str, inode: u64) -> bool {
        inode != 0 && self.objects.get(path).is_some_and(|o| o.inode != 0 && o.inode != inode)
    }

    /// What the state knows below `old` that moves with it: `only` (names and inodes frozen
    /// when a newer object arrived there) when given; nothing when a newer object holds `old`.
    fn moving_below(&self, old: &str, only: Option<&[(String, u64)]>, newer: bool) -> Vec<(PathName, Meta)> {
        match only {
            Some(list) => list
                .iter()
                .filter_map(|(p, i)| {
                    self.objects.get_key_value(p.as_str()).filter(|(_, m)| m.inode == *i).map(|(k, m)| (k.clone(), *m))
                })
                .collect(),
            None if newer => Vec::new(),
            None => self.descendants(old),
        }
    }

    /// Another object (`inode`) arrives at `path`: a directory's rename half still waiting
    /// there keeps what the state knew below its old name until now, so settling the half
    /// later moves or removes those names only, never what the newcomer will hold. (Events
    /// below the old name before that may be the old directory's, read late from another
    /// partition: they move with it.)
    pub(super) fn freeze_pending(&mut self, path: &str, inode: u64) {
        for i in 0..self.pending.len() {
            let m = &self.pending[i];
            if m.meta.is_dir() && m.below.is_none() && path == m.path && inode != m.meta.inode {
                let below =
                    self.descendants(&m.path).into_iter().map(|(p, meta)| (p.to_string(), meta.inode)).collect();
                self.pending[i].below = Some(below);
            }
        }
    }

    /// An IN_MOVED_TO: paired with its waiting IN_MOVED_FROM (by cookie, else by inode), or
    /// with the one name the state knows for the inode; else moved in from outside the
    /// fileset (or its IN_MOVED_FROM comes later, from another partition).
    pub(super) fn moved_to(&mut self, ev: &GpfsEvent, walker: &mut dyn Walker, ops: &mut Ops) {
        let path: &str = &ev.path;
        let pair = self
            .pending
            .iter()
            .position(|m| ev.cookie != 0 && m.cookie == ev.cookie)
            .or_else(|| self.pending.iter().position(|m| m.meta.inode == ev.meta.inode));
        let (old, below) = match pair {
            Some(i) => {
                let m = self.pending.remove(i);
                (Some(m.path), m.below)
            }
            None => match self.links.get(&ev.meta.inode).map(|v| v.as_slice()) {
                // The one name the state knows for this inode.
                Some([only]) if &**only != path => (Some(only.to_string()), None),
                _ => (None, None),
            },
        };
        match old {
            Some(old) => {
                self.rename(&old, path, ev.meta, below.as_deref(), walker, ops);
                // A rename changes the inode's ctime, which its other names share.
                self.propagate(path, ev.meta, ops);
            }
            None => {
                if let Some(old) = self.take_moved_out(ev.cookie, ev.meta) {
                    // Its IN_MOVED_FROM gave up waiting before this came (another partition).
                    self.counts.late_pairs += 1;
                    self.rename(&old, path, ev.meta, None, walker, ops);
                    return;
                }
                self.counts.unpaired_moves += 1;
                self.note_moved_in(ev.cookie, ev.meta, path);
                self.rename(path, path, ev.meta, None, walker, ops);
                // Its other names share the ctime the move gave it (read before its
                // IN_MOVED_FROM, from another partition, the move pairs with nothing).
                self.propagate(path, ev.meta, ops);
                if ev.meta.is_dir() && !walker.sees_files() {
                    if self.counts.moved_in_unwalked == 0 {
                        tracing::warn!(message = "a directory moved into the fileset is not walked (no `mount`): what it holds is indexed only as events name it", path = %path);
                    }
                    self.counts.moved_in_unwalked += 1;
                } else if ev.meta.is_dir() {
                    for (np, m) in walker.walk(path) {
                        self.upsert(&np, m, ops);
                    }
                }
            }
        }
    }

    /// A rename half whose pair never came: the object left the fileset. Its name and what was
    /// below it are removed, except names a newer object holds now.
    pub(super) fn moved_out(&mut self, m: PendingMove, walker: &mut dyn Walker, ops: &mut Ops) {
        self.counts.moved_out += 1;
        self.note_moved_out(m.cookie, m.meta, &m.path);
        let newer = self.newer_at(&m.path, m.meta.inode);
        if m.below.is_none() && !newer {
            self.remove(&m.path, m.meta.is_dir(), ops);
            return;
        }
        self.counts.newer_kept += u64::from(newer);
        if m.meta.is_dir() {
            self.forget_marks(&m.path);
        }
        for (p, meta) in self.moving_below(&m.path, m.below.as_deref(), newer) {
            self.forget(&p);
            if !meta.is_dir() {
                self.delete(&p, ops);
            }
        }
        if !newer {
            self.forget(&m.path);
        } else if self.verify && m.meta.is_dir() {
            // Read from several partitions, the newer directory's events may have come first:
            // what the state holds below the name may be the old one's. The mount tells.
            self.settle_below(&m.path, walker, ops);
        }
    }

    /// Move `old` to `new` (metadata `meta`, from IN_MOVED_TO); `only`: what moves below a
    /// directory, when frozen (see [`GpfsState::freeze_pending`]).
    pub(super) fn rename(
        &mut self,
        old: &str,
        new: &str,
        meta: Meta,
        only: Option<&[(String, u64)]>,
        walker: &mut dyn Walker,
        ops: &mut Ops,
    ) {
        self.counts.renames += 1;
        if old == new {
            if meta.is_dir() {
                // Moved in from outside the fileset: what it holds came with no events.
                self.forget_marks(new);
            }
            self.upsert(new, meta, ops);
            return;
        }
        // A newer object at the old name (created there since, or known from a checkpoint
        // newer than this replayed event) stays, with what is below it.
        let newer = self.newer_at(old, meta.inode);
        self.counts.newer_kept += u64::from(newer);
        let known = !newer && self.forget(old).is_some();
        if meta.is_dir() {
            self.counts.directory_renames += 1;
            if self.renames.len() < RENAME_LOG_CAP {
                self.renames.push((old.to_string(), new.to_string()));
            }
            let below = self.moving_below(old, only, newer);
            for (p, m) in below {
                if self.verify && m.inode != 0 && matches!(walker.lstat(&p), Lookup::Found(now) if now.inode == m.inode)
                {
                    // Still there: a newer directory at the old name holds it (its event was
                    // read first, from another partition).
                    continue;
                }
                let np = format!("{new}{}", &p[old.len()..]);
                let born = self.born.contains(&p);
                self.forget(&p);
                self.counts.moved_descendants += 1;
                if !m.is_dir() {
                    self.delete(&p, ops);
                    // Nothing can be below a directory's new name: the index does not hold
                    // this one (unless a delete of it is still pending).
                    if born || ops.get(np.as_str()) != Some(&Op::Delete) {
                        self.born.insert(np.as_str().into());
                    }
                }
                self.upsert(&np, m, ops);
            }
            self.place_unseen(old, new, newer, walker, ops);
            self.delete_late_names(old, new, ops);
            if self.verify {
                self.settle_below(old, walker, ops);
            }
            if newer || only.is_some() {
                // Another object took the old name meanwhile: which marks were whose is not
                // known any more.
                self.forget_marks(old);
                self.forget_marks(new);
            } else {
                self.move_marks(old, new);
            }
            self.born.remove(old);
        } else if known {
            self.delete(old, ops);
        } else if !newer {
            self.delete_unknown(old, ops);
        }
        if (!self.knows_all_at(new) || !self.evicted.is_empty()) && !self.objects.contains_key(new) {
            // Maybe onto an object the state never saw: the index may hold that one under the
            // names it had before this run's directory renames.
            self.delete_older_names(new, ops);
        }
        if self.objects.contains_key(new) {
            // Renamed over an existing object: the new name now means the moved one.
            self.born.remove(new);
        } else if self.knows_all_at(new) && ops.get(new) != Some(&Op::Delete) && !self.evicted.contains(new) {
            // Onto a free name (a state knowing all names there would know a file): not in the index
            // yet. A state that does not know every file cannot tell: the name may have held
            // an indexed object it never saw.
            self.born.insert(new.into());
        }
        self.upsert(new, meta, ops);
    }

    /// After directory `old` was renamed to `new`: what the walk of `new` finds that the state
    /// never saw (files from before monitoring, files it let go of, and with several
    /// partitions files whose events name the old name late) is indexed where it is now, and
    /// the names the index may hold for it from before go.
    fn place_unseen(&mut self, old: &str, new: &str, newer: bool, walker: &mut dyn Walker, ops: &mut Ops) {
        // Descendants the state never saw (they predate monitoring): where they are now.
        // A complete state knows everything the index holds, and what it does not know
        // yet will come with its own events: no walk.
        // Files it let go of below are found where they are now.
        // Events from several partitions (`verify`) may name what is below under the old
        // name after this rename: found where it is now all the same.
        let walk = !self.complete || self.evicted_below(old) || self.verify;
        let unseen = if walk { walker.walk(new) } else { Vec::new() };
        for (np, m) in unseen {
            let op = format!("{old}{}", &np[new.len()..]);
            if self.verify {
                self.settle_names(&np, m.inode, walker, ops);
            }
            if self.knows_all_at(&op) {
                if self.objects.contains_key(np.as_str()) {
                    // Known where it is now (a walk of its directory moved in, read before
                    // this rename's other half): a name it was let go of under still goes.
                    if let Some(name) = self.evicted_name(&op) {
                        self.delete(&name, ops);
                        self.counts.evicted_found += 1;
                    }
                } else if let Some(name) = self.evicted_name(&op) {
                    self.delete(&name, ops);
                    self.counts.evicted_found += 1;
                    self.upsert(&np, m, ops);
                } else if self.verify {
                    // Not indexed under the old name (the state knows all there), unless
                    // `old` is itself a name that a directory rename still to be read (from
                    // another partition) gave: one it let go of may be found then.
                    self.note_unknown_delete(&op);
                    if ops.get(np.as_str()) != Some(&Op::Delete) {
                        self.born.insert(np.as_str().into());
                    }
                    self.counts.moved_descendants += 1;
                    self.upsert(&np, m, ops);
                }
                continue;
            }
            if self.objects.contains_key(np.as_str()) {
                // Known where it is now (moved above, or seen by an earlier walk that ran
                // ahead of its events): its old name may still be in the index.
                if !self.objects.contains_key(op.as_str()) && !ops.contains_key(op.as_str()) {
                    self.delete_unknown(&op, ops);
                }
                continue;
            }
            if !(newer && self.objects.contains_key(op.as_str())) {
                self.forget(&op);
                self.delete_unknown(&op, ops);
            }
            self.counts.moved_descendants += 1;
            self.upsert(&np, m, ops);
        }
    }

    /// A directory's attributes changed: when visibility follows permissions, know them, and
    /// when they changed (or, with the mount, may have: an ACL), publish everything below it
    /// again.
    pub(super) fn dir_attrib(&mut self, path: &str, meta: Meta, walker: &mut dyn Walker, ops: &mut Ops) {
        if !self.dir_attributes {
            return;
        }
        let before = self.objects.get(path).copied();
        self.know(path, meta);
        let perm = |m: &Meta| (m.mode & 0o7777, m.uid, m.gid);
        // With the mount, judging reads ACLs there, and an IN_ATTRIB with the same mode and
        // owners may be an ACL's change (events do not carry ACLs): judge again.
        if before.is_some_and(|b| perm(&b) == perm(&meta)) && !walker.sees_files() {
            return;
        }
        for (p, m) in self.descendants(path) {
            if !m.is_dir() && ops.get(&p) != Some(&Op::Delete) {
                self.counts.reevaluated += 1;
                ops.insert(p, Op::Update(m));
            }
        }
        if !self.complete || self.evicted_below(path) {
            for (p, m) in walker.walk(path) {
                if !self.objects.contains_key(p.as_str()) && (!self.complete || self.evicted_name(&p).is_some()) {
                    self.counts.reevaluated += 1;
                    self.upsert(&p, m, ops);
                }
            }
        }
    }
}
