//! What each changelog record does to the tree, and the index operations it implies.

use std::sync::Arc;

use super::*;
use crate::changelog::RecordType::{Mkdir, Rmdir};

impl DirectoryTree {
    /// A creation (file, device, symlink, directory): a new name in the tree; a file is new to the index.
    pub(super) fn on_create(&mut self, rec: &ChangelogRecord, r: &mut dyn Resolver, ops: &mut Ops) {
        let name = rec.name.as_deref();
        let (Some(parent), Some(n)) = (rec.parent, name) else { return };
        let is_dir = rec.kind == Mkdir;
        self.insert(
            rec.target,
            Node { place: Place::Child { parent, name: Arc::from(n) }, is_dir, named_at: rec.index },
        );
        if is_dir && !self.stranded.is_empty() {
            if let Some(p) = self.path(rec.target, r) {
                self.unstrand(&p);
            }
        }
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

    /// A new name for an existing file; every name's ctime (and nlink) changed.
    pub(super) fn on_hard_link(&mut self, rec: &ChangelogRecord, r: &mut dyn Resolver, ops: &mut Ops) {
        let name = rec.name.as_deref();
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

    /// A name removed (the object too when it was the last link, or a directory).
    pub(super) fn on_unlink(&mut self, rec: &ChangelogRecord, r: &mut dyn Resolver, ops: &mut Ops) {
        let name = rec.name.as_deref();
        let path = self.child_path(rec.parent, name, r);
        let was_dir = rec.kind == Rmdir;
        if was_dir {
            self.forget_dir_paths();
        }
        let since = self.named_at(rec.target, rec.parent, name, path.as_deref());
        if rec.flags & CLF_LAST != 0 || was_dir {
            self.nodes.pop(&rec.target);
            self.links.remove(&rec.target);
            self.stranded.remove(&rec.target);
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

    /// A rename (or a rename over an existing name): descendants of a directory move with it.
    pub(super) fn on_rename(&mut self, rec: &ChangelogRecord, r: &mut dyn Resolver, ops: &mut Ops) {
        let name = rec.name.as_deref();
        let (Some(src), Some(sp)) = (rec.source, rec.source_parent) else { return };
        // A directory stranded at its old path (below) leaves from there.
        let old = self
            .child_path(Some(sp), rec.source_name.as_deref(), r)
            .or_else(|| self.stranded.get(&src).map(|p| p.to_string()));
        let new = self.child_path(rec.parent, name, r);
        // The new name continues the overwritten target's (the index may hold it
        // under that one's older names).
        let named_at =
            if rec.target.is_zero() { rec.index } else { self.named_at(rec.target, rec.parent, name, new.as_deref()) };
        if !rec.target.is_zero() {
            // The overwritten target's name is gone (it now names the renamed object);
            // the target itself only when that was its last link.
            if rec.flags & CLF_LAST != 0 {
                self.nodes.pop(&rec.target);
                self.links.remove(&rec.target);
                self.stranded.remove(&rec.target);
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
            // A parent no record places (a gone striped directory's shard, which only the
            // records of its entries name up to Lustre 2.15): a file's old name is gone all
            // the same, and the file is resolved again if a later record names it. A
            // directory stays at its old path (not under its old parent, which may go): what
            // later records remove below it is deleted under the names the index holds, and
            // what they update there is not found at emit.
            if self.is_dir(src, r) {
                if let Some(old) = old {
                    self.forget_dir_paths();
                    let old: Arc<str> = Arc::from(old);
                    self.stranded.insert(src, old.clone());
                    self.insert(src, Node { place: Place::Anchored(old), is_dir: true, named_at });
                }
            } else {
                let since = self.named_at(src, Some(sp), rec.source_name.as_deref(), old.as_deref());
                if let Some(old) = old {
                    self.delete(rec.index, old, since, ops);
                }
                self.links.remove(&src);
                self.nodes.pop(&src);
            }
            return;
        };
        let is_dir = self.is_dir(src, r);
        self.stranded.remove(&src);
        let unseen_file = !is_dir && self.nodes.peek(&src).is_none();
        let since = self.named_at(src, Some(sp), rec.source_name.as_deref(), old.as_deref());
        if is_dir {
            self.forget_dir_paths();
            if let Some(old) = &old {
                self.move_anchored(old, &new);
            }
        }
        if let (Some(parent), Some(n)) = (rec.parent, name) {
            let place = Place::Child { parent, name: Arc::from(n) };
            // One name of a hard-linked file moved: that name, not the node's.
            let extra =
                if is_dir { None } else { self.link_index(src, Some(sp), rec.source_name.as_deref(), old.as_deref()) };
            match extra {
                Some(i) => {
                    if let Some(l) = self.links.get_mut(&src) {
                        l[i] = place;
                    }
                }
                // A name of a hard-linked file that neither the node nor the links
                // hold as such (a name `fid2path` no longer showed when the file was
                // resolved, being removed since, is one): forget the node and the links
                // (resolved again when needed) rather than overwrite another name with this one.
                None if !is_dir
                    && (self.links.contains_key(&src) || self.nodes.peek(&src).is_some())
                    && !self.nodes.peek(&src).is_some_and(|n| {
                        same_place(&n.place, Some(sp), rec.source_name.as_deref(), old.as_deref())
                    }) =>
                {
                    self.links.remove(&src);
                    self.nodes.pop(&src);
                }
                None => self.insert(src, Node { place, is_dir, named_at }),
            }
        }
        if is_dir {
            self.unstrand(&new);
            self.walk_renamed_dir(rec, src, old, &new, r, ops);
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

    /// A data or attribute change: every name of the object (a directory only when its
    /// permissions decide visibility).
    pub(super) fn on_change(&mut self, rec: &ChangelogRecord, r: &mut dyn Resolver, ops: &mut Ops) {
        let known_dir = self.nodes.peek(&rec.target).is_some_and(|n| n.is_dir);
        if known_dir || rec.target == Fid::ROOT {
            // Any change record: the rule table folds a later SATTR or XATTR (a chmod, an ACL)
            // into an earlier record of the same directory (a CTIME, an MTIME).
            if self.dir_attributes {
                if let Some(p) = if rec.target == Fid::ROOT { Some("/".to_string()) } else { self.path(rec.target, r) }
                {
                    ops.insert(p, PathOp::Update);
                }
            }
            return;
        }
        self.update_every_name(rec.target, r, ops);
    }

    /// A directory now takes `path`: one stranded there (renamed into a parent nothing
    /// places) is not there, and is forgotten rather than taken for the new one.
    fn unstrand(&mut self, path: &str) {
        let gone: Vec<Fid> = self.stranded.iter().filter(|(_, p)| ***p == *path).map(|(f, _)| *f).collect();
        for f in gone {
            self.stranded.remove(&f);
            self.nodes.pop(&f);
        }
    }

    /// Anchored entries (and anchored hard-link names) below `old` move to `new`.
    fn move_anchored(&mut self, old: &str, new: &str) {
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
        for p in self.stranded.values_mut() {
            if let Some(rest) = under(p, old) {
                *p = Arc::from(format!("{new}{rest}"));
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

    /// Every descendant of a renamed directory moved, the ones never seen too: walk where the
    /// directory is now, upsert what is there, delete the old names; log the rename.
    fn walk_renamed_dir(
        &mut self,
        rec: &ChangelogRecord,
        src: Fid,
        old: Option<String>,
        new: &str,
        r: &mut dyn Resolver,
        ops: &mut Ops,
    ) {
        let now = self.head(src, r);
        tracing::debug!(message = "directory rename", index = rec.index, old = ?old, new = %new, now = ?now);
        let mut walked = HashSet::default();
        if let Some(now) = now {
            for rel in r.walk(&now) {
                if self.named_later(src, new, &now, &rel, r) {
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
            let until = r.read_position();
            self.log_rename(rec.index, old, new, walked, until);
        }
    }
}
