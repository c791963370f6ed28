//! Operations checked against the mount before they are sent, when events come from several
//! partitions. Kafka orders a topic's messages within a partition only, and the stand-in (as
//! far as is known, Storage Scale too: an open question in docs/gpfs-monitor.md) keys them
//! by inode, so one object's events stay in order but an event read from one partition may
//! be older than one already applied from another: a file's IN_CREATE under a directory's old
//! name read after the directory's rename, an IN_DELETE of a name a newer file already holds.
//! Event times cannot order them (to the second in `WF_JSON` 0.0.1, to the millisecond since,
//! and a node's clock is its own). What the mount shows now is newer than every event read,
//! so each name an operation touches is made what the mount holds there; a renamed
//! directory is walked there (see `rename`), so what its late events named under the old name
//! is found under the new one.

use super::{GpfsState, Lookup, Op, Ops, PathName, Walker};

impl GpfsState {
    /// Make every operation of `ops` agree with the mount (only when [`GpfsState::verify`]
    /// is set and the walker sees the file system): an update sends the file's metadata as
    /// the mount shows it; an update of a name that is gone, or is a directory now, becomes a
    /// delete (or nothing, when the name was born in this batch); an update of a name that
    /// holds another file, or a delete of a name that holds a file, becomes an update of it.
    pub(super) fn verify_ops(&mut self, walker: &mut dyn Walker, ops: &mut Ops) {
        if !self.verify || !walker.sees_files() {
            return;
        }
        // A create cancelled by a removal read late from another partition: the file may be
        // there all the same (the removal was an older one's).
        for name in std::mem::take(&mut self.cancelled_here) {
            if !ops.contains_key(&name) {
                if let Lookup::Found(now) = walker.lstat(&name) {
                    if !now.is_dir() {
                        self.send_as_found(name, now, ops);
                    }
                }
            }
        }
        let names: Vec<PathName> = ops.keys().cloned().collect();
        for name in names {
            let Some(&op) = ops.get(&name) else { continue };
            match (op, walker.lstat(&name)) {
                (_, Lookup::Unknown) => {}
                // The file itself: sent as it is now (a directory rename read late may have
                // moved an older state of it onto metadata read first).
                (Op::Update(m), Lookup::Found(now)) if !now.is_dir() && (m.inode == 0 || m.inode == now.inode) => {
                    if now != m {
                        self.know_name(name.clone(), now);
                        ops.insert(name, Op::Update(now));
                    }
                }
                (Op::Delete, Lookup::Absent) => {}
                (Op::Delete, Lookup::Found(now)) if now.is_dir() => {}
                (_, Lookup::Found(now)) if !now.is_dir() => self.send_as_found(name, now, ops),
                (Op::Update(_), _) => {
                    self.counts.corrected += 1;
                    self.forget(&name);
                    self.delete(&name, ops);
                    // Seeded, the state knew every older file there: a removal of this name
                    // can only be this one's. (Unseeded, it may be an older file's.)
                    if self.complete && !ops.contains_key(&name) {
                        if self.unindexed.len() >= super::UNINDEXED_CAP {
                            self.unindexed.clear();
                        }
                        self.unindexed.insert(name);
                    }
                }
                (Op::Delete, _) => {}
            }
        }
    }

    /// `name` holds another file than the state or the operation said: know it and send it
    /// as the mount shows it.
    fn send_as_found(&mut self, name: PathName, now: super::Meta, ops: &mut Ops) {
        self.counts.corrected += 1;
        self.know_name(name.clone(), now);
        ops.insert(name, Op::Update(now));
    }

    /// A walk found the file `inode` at `path`: its other names the state knows are checked
    /// on the mount (see [`GpfsState::settle`]); a directory rename applied late leaves what
    /// the state knew below the old name where it was.
    pub(super) fn settle_names(&mut self, path: &str, inode: u64, walker: &mut dyn Walker, ops: &mut Ops) {
        if inode == 0 {
            return;
        }
        let others: Vec<PathName> =
            self.links.get(&inode).map(|v| v.iter().filter(|p| &***p != path).cloned().collect()).unwrap_or_default();
        for name in others {
            self.settle(name, inode, walker, ops);
        }
    }

    /// Check the state's `name`, which it takes for file `inode` (0: any), on the mount: another
    /// file there is known and sent instead; nothing (or a directory) there, the name goes.
    fn settle(&mut self, name: PathName, inode: u64, walker: &mut dyn Walker, ops: &mut Ops) {
        match walker.lstat(&name) {
            Lookup::Found(now) if !now.is_dir() && (inode == 0 || now.inode == inode) => {}
            Lookup::Unknown => {}
            Lookup::Found(now) if !now.is_dir() => self.send_as_found(name, now, ops),
            _ => {
                self.counts.corrected += 1;
                self.forget(&name);
                self.delete(&name, ops);
            }
        }
    }

    /// What the state still knows below `dir` after a directory rename moved it away: the
    /// names a newer object there holds stay, those the mount no longer shows go (they were
    /// the renamed directory's, but an event read first from another partition made the state
    /// take the name for a newer object's).
    pub(super) fn settle_below(&mut self, dir: &str, walker: &mut dyn Walker, ops: &mut Ops) {
        for (name, m) in self.descendants(dir) {
            if !m.is_dir() {
                self.settle(name, m.inode, walker, ops);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use icicle_core::traits::StateStore;

    use super::super::{GpfsEvent, Meta};
    use super::*;
    use crate::event::EventKind::{self, *};

    /// The mount as a map of GPFS paths (directories included).
    struct Mount(BTreeMap<String, Meta>);

    impl Walker for Mount {
        fn walk(&mut self, dir: &str) -> Vec<(String, Meta)> {
            let below = format!("{dir}/");
            self.0.iter().filter(|(p, m)| p.starts_with(&below) && !m.is_dir()).map(|(p, m)| (p.clone(), *m)).collect()
        }
        fn lstat(&mut self, path: &str) -> Lookup {
            self.0.get(path).map_or(Lookup::Absent, |m| Lookup::Found(*m))
        }
    }

    /// A directory `/g/e` (inode 10) holding file `a` (inode 1).
    fn dir_with_a_file() -> Mount {
        Mount(BTreeMap::from([("/g/e".to_string(), meta(10, true)), ("/g/e/a".to_string(), meta(1, false))]))
    }

    fn meta(inode: u64, dir: bool) -> Meta {
        Meta { inode, mode: if dir { 0o040755 } else { 0o100644 }, ..Default::default() }
    }

    fn ev(kind: EventKind, path: &str, inode: u64, dir: bool, cookie: u64) -> GpfsEvent {
        GpfsEvent { kind, path: path.into(), meta: meta(inode, dir), cookie, storage: crate::event::StorageId::NONE }
    }

    /// One batch read from `partition`; the operations as (path, inode of an update).
    fn batch(s: &mut GpfsState, mount: &mut Mount, partition: i32, evs: &[GpfsEvent]) -> Vec<(String, Option<u64>)> {
        let mut ops = Ops::default();
        s.begin_batch();
        for (i, e) in evs.iter().enumerate() {
            s.apply(&(e.clone(), (partition, i as i64)), mount, &mut ops);
        }
        s.end_batch(mount, &mut ops);
        let mut v: Vec<(String, Option<u64>)> = ops
            .into_iter()
            .map(|(p, o)| (p.to_string(), if let Op::Update(m) = o { Some(m.inode) } else { None }))
            .collect();
        v.sort();
        v
    }

    fn seeded(files: &[(&str, u64)]) -> GpfsState {
        let mut s = GpfsState::new(1);
        for (p, i) in files {
            s.seed(p, meta(*i, false));
        }
        s.verify = true;
        s
    }

    /// A file created under a directory just before the directory's rename, its IN_CREATE
    /// read from another partition after the rename: indexed where it is, never under the
    /// old name.
    #[test]
    fn an_event_read_late_under_a_renamed_directory_is_indexed_where_its_file_is() {
        let mut s = seeded(&[("/g/d/a", 1)]);
        let mut mount = Mount(BTreeMap::from([
            ("/g/e".to_string(), meta(10, true)),
            ("/g/e/a".to_string(), meta(1, false)),
            ("/g/e/b".to_string(), meta(2, false)),
        ]));
        let renamed =
            batch(&mut s, &mut mount, 1, &[ev(MovedFrom, "/g/d", 10, true, 5), ev(MovedTo, "/g/e", 10, true, 5)]);
        assert_eq!(renamed, [("/g/d/a".into(), None), ("/g/e/a".into(), Some(1)), ("/g/e/b".into(), Some(2))]);
        // The old name is never sent; until the check the state takes the two names for hard
        // links of one file, so the one where it is goes again.
        let late = batch(&mut s, &mut mount, 0, &[ev(Created, "/g/d/b", 2, false, 0)]);
        assert_eq!(late, [("/g/e/b".into(), Some(2))]);
        assert_eq!(s.counts.corrected, 1);
        assert_eq!(
            s.checkpoint().objects.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
            ["/g/e", "/g/e/a", "/g/e/b"]
        );
    }

    /// An older file's IN_DELETE read after the IN_CREATE of the newer file at its name: the
    /// newer one stays indexed.
    #[test]
    fn a_delete_read_after_the_name_was_taken_again_keeps_the_newer_file() {
        let mut s = seeded(&[("/g/x", 3)]);
        let mut mount = Mount(BTreeMap::from([("/g/x".to_string(), meta(4, false))]));
        let got = batch(&mut s, &mut mount, 0, &[ev(Created, "/g/x", 4, false, 0), ev(Removed, "/g/x", 3, false, 0)]);
        assert_eq!(got, [("/g/x".into(), Some(4))]);
        // Without the check (one partition), the order read is the order that was.
        let mut one = seeded(&[("/g/x", 3)]);
        one.verify = false;
        let got = batch(&mut one, &mut mount, 0, &[ev(Created, "/g/x", 4, false, 0), ev(Removed, "/g/x", 3, false, 0)]);
        assert_eq!(got, [("/g/x".into(), None)]);
    }

    /// A file created, removed and created again under one name, its removal read last (from
    /// another partition than the second file's creation): the second file stays indexed.
    #[test]
    fn a_removal_read_after_the_name_was_taken_again_is_the_older_file_s() {
        let mut s = seeded(&[]);
        let mut mount = Mount(BTreeMap::from([("/g/x".to_string(), meta(4, false))]));
        let got = batch(
            &mut s,
            &mut mount,
            0,
            &[ev(Created, "/g/x", 3, false, 0), ev(Created, "/g/x", 4, false, 0), ev(Removed, "/g/x", 3, false, 0)],
        );
        assert_eq!(got, [("/g/x".into(), Some(4))]);
        assert_eq!((s.counts.cancelled, s.counts.corrected), (1, 1));
    }

    /// Without a seed: a file's removal below a directory's new name, read before the
    /// directory's rename (from another partition): the rename deletes the name the index
    /// holds.
    #[test]
    fn a_removal_read_before_its_directory_s_rename_deletes_the_old_name() {
        let mut s = GpfsState::new(1);
        s.verify = true;
        let mut mount = Mount(BTreeMap::from([("/g/e".to_string(), meta(10, true))]));
        let removed = batch(&mut s, &mut mount, 0, &[ev(Removed, "/g/e/x", 2, false, 0)]);
        assert_eq!(removed, [("/g/e/x".into(), None)]);
        let renamed =
            batch(&mut s, &mut mount, 1, &[ev(MovedFrom, "/g/d", 10, true, 5), ev(MovedTo, "/g/e", 10, true, 5)]);
        assert_eq!(renamed, [("/g/d/x".into(), None)]);
        assert_eq!(s.counts.late_deletes, 1);
    }

    /// Without a seed: a directory's IN_MOVED_TO read before its IN_MOVED_FROM: when that
    /// comes, the old names of what is below the directory now go.
    #[test]
    fn a_directory_move_read_backwards_deletes_the_old_names() {
        let mut s = GpfsState::new(1);
        s.verify = true;
        let mut mount = dir_with_a_file();
        let to = batch(&mut s, &mut mount, 1, &[ev(MovedTo, "/g/e", 10, true, 5)]);
        assert_eq!(to, [("/g/e/a".into(), Some(1))]);
        let from = batch(&mut s, &mut mount, 0, &[ev(MovedFrom, "/g/d", 10, true, 5)]);
        assert_eq!(from, [("/g/d/a".into(), None)]);
        assert_eq!(s.counts.late_pairs, 1);
        assert!(s.pending().is_empty());
    }

    /// Renames read in the order they happened, where a name is taken again (`mv /a /P/sub;
    /// mv /P /R; mv /Q /P`): a removal below the newest `/P/sub` deletes `/Q/sub/f`; the guess
    /// of another order (`/a/f`) holds a newer file on the mount, which stays indexed.
    #[test]
    fn a_name_taken_again_is_translated_in_the_order_read() {
        let mut s = GpfsState::new(1);
        s.verify = true;
        let mut mount = Mount(BTreeMap::from([
            ("/R".to_string(), meta(11, true)),
            ("/R/sub".to_string(), meta(10, true)),
            ("/P".to_string(), meta(12, true)),
            ("/P/sub".to_string(), meta(13, true)),
            ("/a".to_string(), meta(14, true)),
            ("/a/f".to_string(), meta(7, false)),
        ]));
        let got = batch(
            &mut s,
            &mut mount,
            0,
            &[
                ev(MovedFrom, "/a", 10, true, 1),
                ev(MovedTo, "/P/sub", 10, true, 1),
                ev(MovedFrom, "/P", 11, true, 2),
                ev(MovedTo, "/R", 11, true, 2),
                ev(MovedFrom, "/Q", 12, true, 3),
                ev(MovedTo, "/P", 12, true, 3),
                ev(Removed, "/P/sub/f", 5, false, 0),
            ],
        );
        // The guess costs one update of the file that holds /a/f, never its delete.
        assert_eq!(got, [("/Q/sub/f".into(), None), ("/a/f".into(), Some(7))]);
    }

    /// Without a seed: a directory's IN_MOVED_FROM gave up waiting (its partition's pair far
    /// behind) before the IN_MOVED_TO came: that settles it as a rename after all.
    #[test]
    fn a_directory_move_completed_after_its_half_gave_up_deletes_the_old_names() {
        let mut s = GpfsState::new(1);
        s.verify = true;
        let mut mount = dir_with_a_file();
        assert_eq!(batch(&mut s, &mut mount, 0, &[ev(MovedFrom, "/g/d", 10, true, 5)]), []);
        for _ in 0..super::super::SILENT_PARTITION_FACTOR {
            batch(&mut s, &mut mount, 0, &[]);
        }
        assert!(s.pending().is_empty(), "the half gave up");
        let to = batch(&mut s, &mut mount, 1, &[ev(MovedTo, "/g/e", 10, true, 5)]);
        assert_eq!(to, [("/g/d/a".into(), None), ("/g/e/a".into(), Some(1))]);
        assert_eq!(s.counts.late_pairs, 1);
    }

    /// A seeded state bounded to `cap` files, let go of all it may after one batch.
    fn bounded(files: &[(&str, u64)], cap: usize, mount: &mut Mount) -> GpfsState {
        let mut s = seeded(files);
        s.set_lru_capacity(cap);
        batch(&mut s, mount, 0, &[]);
        s
    }

    /// Seeded and bounded: a directory's IN_MOVED_TO read before its IN_MOVED_FROM. The walk
    /// at the IN_MOVED_TO knows the files where they are; the rename, once complete, deletes
    /// the old name of the file let go of too.
    #[test]
    fn a_file_let_go_of_goes_under_its_old_name_when_its_directory_move_is_read_backwards() {
        let mut mount = Mount(BTreeMap::from([
            ("/g/e".to_string(), meta(10, true)),
            ("/g/e/a".to_string(), meta(1, false)),
            ("/g/e/b".to_string(), meta(2, false)),
        ]));
        let mut s = bounded(&[("/g/d/a", 1), ("/g/d/b", 2)], 1, &mut mount);
        assert_eq!(s.evicted_files(), 1);
        let to = batch(&mut s, &mut mount, 1, &[ev(MovedTo, "/g/e", 10, true, 5)]);
        assert_eq!(to, [("/g/e/a".into(), Some(1)), ("/g/e/b".into(), Some(2))]);
        let from = batch(&mut s, &mut mount, 0, &[ev(MovedFrom, "/g/d", 10, true, 5)]);
        // What the rename moves is sent again where it is (the walk knew it already).
        assert_eq!(
            from,
            [("/g/d/a".into(), None), ("/g/d/b".into(), None), ("/g/e/a".into(), Some(1)), ("/g/e/b".into(), Some(2))]
        );
    }

    /// Seeded and bounded: a directory's rename read before its parent's (from another
    /// partition) names its old place under the parent's new name; the parent's rename read
    /// later deletes the names the index holds for the files let go of.
    #[test]
    fn a_file_let_go_of_goes_when_its_parent_s_rename_is_read_after_its_directory_s() {
        let mut mount = Mount(BTreeMap::from([
            ("/g/q".to_string(), meta(20, true)),
            ("/g/e".to_string(), meta(10, true)),
            ("/g/e/a".to_string(), meta(1, false)),
            ("/g/e/b".to_string(), meta(2, false)),
        ]));
        let mut s = bounded(&[("/g/p/d/a", 1), ("/g/p/d/b", 2)], 1, &mut mount);
        let (evicted, kept) = if s.checkpoint().objects.iter().any(|(p, _)| p == "/g/p/d/a") {
            ("/g/p/d/b", "/g/p/d/a")
        } else {
            ("/g/p/d/a", "/g/p/d/b")
        };
        let child =
            batch(&mut s, &mut mount, 1, &[ev(MovedFrom, "/g/q/d", 10, true, 5), ev(MovedTo, "/g/e", 10, true, 5)]);
        assert!(child.contains(&(kept.into(), None)), "{child:?}");
        assert!(!child.contains(&(evicted.into(), None)), "{child:?}");
        let parent =
            batch(&mut s, &mut mount, 0, &[ev(MovedFrom, "/g/p", 20, true, 6), ev(MovedTo, "/g/q", 20, true, 6)]);
        assert_eq!(parent, [(evicted.into(), None)]);
        assert_eq!(s.counts.late_deletes, 1);
    }

    /// Bounded: the names of a file with hard links are never let go of, so a change read
    /// under one name reaches the others even after another name was forgotten for a while.
    #[test]
    fn hard_links_are_never_let_go_of() {
        let mut mount = Mount(BTreeMap::from([
            ("/g/0".to_string(), meta(2, false)),
            ("/g/a".to_string(), meta(1, false)),
            ("/g/b".to_string(), meta(1, false)),
            ("/g/n".to_string(), meta(5, false)),
        ]));
        let mut s = bounded(&[("/g/0", 2), ("/g/a", 1), ("/g/b", 1)], 1, &mut mount);
        assert_eq!(s.evicted_files(), 1, "only /g/0");
        mount.0.remove("/g/b");
        let removed =
            batch(&mut s, &mut mount, 0, &[ev(Removed, "/g/b", 1, false, 0), ev(Modified, "/g/a", 1, false, 0)]);
        // /g/a unchanged: touched, not sent.
        assert_eq!(removed, [("/g/b".into(), None)]);
        // Over the bound again, with /g/a the least recently touched and its only name known.
        batch(&mut s, &mut mount, 0, &[ev(Created, "/g/n", 5, false, 0)]);
        assert_eq!(s.evicted_files(), 1);
        let s = GpfsState::restore(s.checkpoint(), 1);
        let cp = s.checkpoint();
        assert!(cp.objects.iter().any(|(p, _)| p == "/g/a"));
        assert_eq!(cp.linked, [1]);
    }
}
