//! Paths in the tree: resolving an object's names (through the tree, else `fid2path` once,
//! rewound over renames not applied yet), hard links, and deletes translated back through
//! this run's directory renames to names the index can hold.

use std::sync::Arc;

use super::*;
use crate::lookahead::FutureRename;

/// One step of walking up to a known path: continue from (parent, name), or the path found.
type Step = Result<(Fid, Arc<str>), Arc<str>>;

impl DirectoryTree {
    /// `fid2path` now (memoized for the record being applied).
    pub(super) fn head(&mut self, fid: Fid, r: &mut dyn Resolver) -> Option<String> {
        if fid == Fid::ROOT {
            return Some("/".into());
        }
        self.head_all(fid, r).into_iter().next()
    }

    /// Every `fid2path` line now, one per hard link (memoized for the record being applied).
    pub(super) fn head_all(&mut self, fid: Fid, r: &mut dyn Resolver) -> Vec<String> {
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
    pub(super) fn link_paths(&mut self, fid: Fid, r: &mut dyn Resolver) -> Vec<String> {
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
    pub(super) fn update_every_name(&mut self, fid: Fid, r: &mut dyn Resolver, ops: &mut Ops) {
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
    pub(super) fn learn_other_names(&mut self, fid: Fid, name: &str, r: &mut dyn Resolver) {
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
    pub(super) fn linked_later(&mut self, fid: Fid, line: &str, r: &mut dyn Resolver) -> bool {
        let name = line.rsplit('/').next().unwrap_or(line);
        let parents: Vec<Option<Fid>> =
            r.future_namings(self.current, name).iter().filter(|n| n.link_of == Some(fid)).map(|n| n.parent).collect();
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
    pub(super) fn named_later(&mut self, dir: Fid, at: &str, now: &str, rel: &str, r: &mut dyn Resolver) -> bool {
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
    pub(super) fn known_path(&self, fid: Fid) -> Option<String> {
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
    pub(super) fn named_at(&self, fid: Fid, parent: Option<Fid>, name: Option<&str>, path: Option<&str>) -> u64 {
        match self.nodes.peek(&fid) {
            Some(n) if n.named_at > 0 && same_place(&n.place, parent, name, path) => n.named_at,
            // Evicted since it got that name (and perhaps resolved again, when unknown).
            _ => self
                .evicted_named_at
                .get(&fid)
                .filter(|(place, _)| same_place(place, parent, name, path))
                .map_or(0, |(_, at)| *at),
        }
    }

    /// Which of `fid`'s other links is the name (parent, name) at `path`.
    pub(super) fn link_index(
        &self,
        fid: Fid,
        parent: Option<Fid>,
        name: Option<&str>,
        path: Option<&str>,
    ) -> Option<usize> {
        self.links.get(&fid)?.iter().position(|place| same_place(place, parent, name, path))
    }

    /// Name (parent, name) at `path` of `fid` went away but `fid` has other links: drop that
    /// name, and when it was the node's, let another link take its place.
    pub(super) fn remove_name(&mut self, fid: Fid, parent: Option<Fid>, name: Option<&str>, path: Option<&str>) {
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
    pub(super) fn rename_paths(&mut self, rec: &FutureRename, r: &mut dyn Resolver) -> Option<(String, String)> {
        if let Some(v) = self.rename_paths.get(&rec.index) {
            return v.clone();
        }
        let at =
            |t: &mut DirectoryTree, fid: Option<Fid>, name: Option<&str>, r: &mut dyn Resolver| -> Option<String> {
                let p = t.path_at(fid?, rec.index, r, 0)?;
                Some(child_of(&p, name?))
            };
        let old = at(self, rec.source_parent, rec.source_name.as_deref(), r);
        let new = at(self, rec.parent, Some(&rec.name), r);
        let v = old.zip(new);
        self.rename_paths.insert(rec.index, v.clone());
        v
    }

    /// The path of directory `fid` as of record `at` (later than the one being applied):
    /// `fid2path` rewound to it, or, for a directory gone since, where the first record after
    /// `at` that takes its name says it was.
    fn path_at(&mut self, fid: Fid, at: u64, r: &mut dyn Resolver, depth: usize) -> Option<String> {
        if let Some(head) = self.head(fid, r) {
            return Some(self.rewind(head, at, r));
        }
        if depth > 4096 {
            return None;
        }
        let place = r.future_place(at, &fid)?;
        let parent = self.path_at(place.parent, at, r, depth + 1)?;
        Some(child_of(&parent, &place.name))
    }

    /// Undo, newest first, the renames after index `after` that `path` (a `fid2path`
    /// answer) already reflects. Only renames whose new name is a component of the path
    /// (as it is rewound) can have produced it; the others are never resolved.
    pub(super) fn rewind(&mut self, mut path: String, after: u64, r: &mut dyn Resolver) -> String {
        let mut candidates: std::collections::BTreeMap<u64, FutureRename> = Default::default();
        let mut looked: std::collections::HashSet<String, foldhash::fast::RandomState> = Default::default();
        let mut before = u64::MAX;
        loop {
            for c in path.split('/').filter(|c| !c.is_empty()) {
                if looked.insert(c.to_string()) {
                    candidates.extend(
                        r.future_renames(after, c).into_iter().filter(|x| x.index > after).map(|x| (x.index, x)),
                    );
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
        self.walk_path(fid, None, r)
    }

    /// [`DirectoryTree::path`] by walking up to the root, the first remembered directory,
    /// or the first object that must be resolved; `is_dir` when the caller knows the type
    /// (a parent is a directory).
    pub(super) fn walk_path(&mut self, fid: Fid, is_dir: Option<bool>, r: &mut dyn Resolver) -> Option<String> {
        let mut parts: Vec<Arc<str>> = Vec::new();
        let fid = self.unalias(fid);
        let mut cur = fid;
        for _ in 0..4096 {
            cur = self.unalias(cur);
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
                None if !self.stranded.is_empty() && self.stranded.contains_key(&cur) => {
                    Err(self.stranded[&cur].clone())
                }
                None if cur == fid => self.resolve_self(cur, is_dir, r)?,
                // An ancestor: a directory.
                None => match self.head(cur, r) {
                    Some(head) if self.shard_of(cur, &head, r) => continue,
                    Some(head) => {
                        let p: Arc<str> = Arc::from(self.rewind(head, self.current, r));
                        self.insert(cur, Node { place: Place::Anchored(p.clone()), is_dir: true, named_at: 0 });
                        Err(p)
                    }
                    None => Ok(self.place_later(cur, r)?),
                },
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

    /// The first step of [`DirectoryTree::walk_path`] for an object the tree does not hold:
    /// resolved with `fid2path` (every hard link; those that records still to come create
    /// are left out), or, when it is gone, placed by a record still to come. `Ok` is a
    /// (parent, name) to continue from, `Err` the object's path.
    fn resolve_self(&mut self, cur: Fid, is_dir: Option<bool>, r: &mut dyn Resolver) -> Option<Step> {
        let lines = self.head_all(cur, r);
        if lines.is_empty() {
            // Gone. A directory (one name, no hard links) is placed by the record still to
            // come that takes its name; a file's records name its parent, never the file.
            let dir = is_dir.unwrap_or_else(|| self.gone_is_dir(cur, r, 0));
            return if dir { self.place_later(cur, r).map(Ok) } else { None };
        }
        let present: Vec<String> = lines.into_iter().filter(|l| !self.linked_later(cur, l, r)).collect();
        // Nothing but links still to come: the names it had at this record were all removed
        // since, and later records speak for its names (a later link rewound through directory
        // renames is a name that did not exist yet).
        let mut all = present.into_iter();
        let mut head = all.next()?;
        let is_dir = match is_dir {
            Some(d) => d,
            None => self.kind_now(cur, &mut head, r),
        };
        if is_dir && self.shard_of(cur, &head, r) {
            let dir = self.unalias(cur);
            return self.walk_path(dir, Some(true), r).map(|p| Err(Arc::from(p)));
        }
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
        Some(Err(p))
    }

    /// The striped directory `fid` is a shard of, or `fid`.
    fn unalias(&self, fid: Fid) -> Fid {
        // On every step of every path walk: no hashing while there is no shard (one MDT).
        if self.aliases.is_empty() {
            return fid;
        }
        self.aliases.get(&fid).copied().unwrap_or(fid)
    }

    /// Whether directory `fid`, found at `head` now, is a shard of a striped directory: the
    /// object at its path is another, which `fid2path` finds there too (`lfs fid2path` of a
    /// shard prints its directory's path: lustre-release `mdt_path_current`). Remembered.
    fn shard_of(&mut self, fid: Fid, head: &str, r: &mut dyn Resolver) -> bool {
        if !self.striped {
            return false;
        }
        let Some(dir) = r.path2fid(head).filter(|d| *d != fid && !d.is_zero()) else { return false };
        // Both still there (no rename swapped them meanwhile), and no alias back.
        if r.fid2path(&dir).as_deref() != Some(head) || r.fid2path(&fid).as_deref() != Some(head) {
            return false;
        }
        if self.unalias(dir) == fid {
            return false;
        }
        self.aliases.insert(fid, dir);
        self.counts.shards += 1;
        true
    }

    /// Directory `fid`, which `fid2path` no longer finds (removed since this record), placed
    /// by the first record still to come that takes its name, and remembered so.
    fn place_later(&mut self, fid: Fid, r: &mut dyn Resolver) -> Option<(Fid, Arc<str>)> {
        let at = r.future_place(self.current, &fid)?;
        let name: Arc<str> = Arc::from(at.name.as_str());
        self.counts.placed_by_later_records += 1;
        self.insert(
            fid,
            Node { place: Place::Child { parent: at.parent, name: name.clone() }, is_dir: true, named_at: 0 },
        );
        Some((at.parent, name))
    }

    pub(super) fn child_path(
        &mut self,
        parent: Option<Fid>,
        name: Option<&str>,
        r: &mut dyn Resolver,
    ) -> Option<String> {
        let parent = self.unalias(parent?);
        let p = match self.dir_paths.get(&parent) {
            Some(p) => {
                if self.bounded {
                    self.nodes.promote(&parent);
                }
                p.clone()
            }
            None => {
                let p: Arc<str> = Arc::from(self.walk_path(parent, Some(true), r)?);
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
    pub(super) fn forget_dir_paths(&mut self) {
        self.dir_paths.clear();
    }

    /// Delete `path` as computed for record `index`, plus the paths the index may hold it
    /// under: translated back through this run's earlier directory renames. A name a rename
    /// produced is deleted only if this monitor sent it (a walk in an earlier batch may have
    /// sent it, seeing the file system past a rename of this batch); its older name always.
    /// Renames before `since` (when the object got its name) are not translated through.
    pub(super) fn delete(&mut self, index: u64, path: String, since: u64, ops: &mut Ops) {
        if self.never_indexed(&path) {
            ops.shift_remove(&path);
            return;
        }
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
            // `p` is a name rename `i` produced: in the index only if it was sent since
            // (also when `i` is in this batch: an earlier batch may have resolved a path
            // through the file system as it is now, after rename `i`, and sent it).
            if self.may_hold(&p) {
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
    pub(super) fn never_indexed(&mut self, path: &str) -> bool {
        let never = self.born.remove(path) | (!self.unindexed.is_empty() && self.unindexed.remove(path));
        never && !self.maybe_delivered(path)
    }

    /// Whether `fid` is a directory: from the tree, else where it is now.
    pub(super) fn is_dir(&mut self, fid: Fid, r: &mut dyn Resolver) -> bool {
        if let Some(n) = self.nodes.peek(&fid) {
            return n.is_dir;
        }
        match self.head(fid, r) {
            Some(mut now) => self.kind_now(fid, &mut now, r),
            None => self.gone_is_dir(fid, r, 0),
        }
    }

    /// Whether `fid`, which `fid2path` no longer finds, is a directory: a later RMDIR removes
    /// it, or a later rename puts a directory over it.
    fn gone_is_dir(&mut self, fid: Fid, r: &mut dyn Resolver, depth: usize) -> bool {
        if r.dir_by_later_records(self.current, &fid) {
            return true;
        }
        let Some(over) = r.renamed_over_later(self.current, &fid) else { return false };
        if let Some(n) = self.nodes.peek(&over) {
            return n.is_dir;
        }
        match self.head(over, r) {
            Some(mut now) => self.kind_now(over, &mut now, r),
            None => depth < 64 && self.gone_is_dir(over, r, depth + 1),
        }
    }

    /// Whether `fid`, which `fid2path` put at `head`, is a directory. Nothing at `head` means
    /// it moved after the answer (the file system runs ahead of the records): `fid2path` is
    /// asked again, and `head` follows, a few times; still nothing reads as "not a directory".
    pub(super) fn kind_now(&mut self, fid: Fid, head: &mut String, r: &mut dyn Resolver) -> bool {
        for _ in 0..4 {
            if let Some(d) = r.kind(head) {
                return d;
            }
            self.counts.moved_while_resolved += 1;
            self.head_memo.remove(&fid);
            // As in the first answer, a line a later link makes is no name yet.
            let mut again = None;
            for l in self.head_all(fid, r) {
                if !self.linked_later(fid, &l, r) {
                    again = Some(l);
                    break;
                }
            }
            match again {
                Some(l) => *head = l,
                None => return false,
            }
        }
        false
    }
}
