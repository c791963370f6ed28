//! Rename records read ahead of the monitor's position, indexed by their new name, for
//! rewinding `fid2path` answers (which already include renames the monitor has not applied).
//!
//! A rename can only have produced a path one of whose components is the rename's new name,
//! so rewinding a path looks up its components here instead of scanning every future rename.
//! Records that give an object a name where none was (creations, links, renames onto a free
//! name) are indexed the same way: a directory walk made now tells by them which entries were
//! not there yet when an earlier record was applied.
//!
//! Records that take a name away from an object (a directory removed, an object renamed or
//! renamed over) are kept by the object's FID: once the object is gone, `fid2path` cannot
//! place it, and the first such record still to come tells where it was until then.
//!
//! Entries are compact (a rename keeps its names, a naming record only its index and parent)
//! and sit in one queue in changelog order; each name's entries are chained through it, so
//! applied records leave from the front in constant time each.

use std::collections::{HashMap, VecDeque};

use compact_str::CompactString;

use crate::changelog::{ChangelogRecord, Fid, RecordType};
pub use crate::leavings::FuturePlace;
use crate::leavings::Leavings;

/// A rename still to be applied: what rewinding needs of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FutureRename {
    /// The record's changelog index.
    pub index: u64,
    /// `p=`: the new parent.
    pub parent: Option<Fid>,
    /// The new name.
    pub name: CompactString,
    /// `sp=`: the old parent.
    pub source_parent: Option<Fid>,
    /// The old name.
    pub source_name: Option<CompactString>,
}

/// A record still to be applied that gives an object a free name in `parent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FutureNaming {
    /// The record's changelog index.
    pub index: u64,
    /// `p=`: the directory the name is in.
    pub parent: Option<Fid>,
    /// For a hard link (HLINK): the file it is a new name of.
    pub link_of: Option<Fid>,
}

#[derive(Debug)]
struct Entry {
    index: u64,
    parent: Option<Fid>,
    key: u64,
    /// The next entry (queue position) with the same name key, or `NONE`.
    next: u64,
    /// Gives a free name (a creation, a link, a rename onto a free name).
    naming: bool,
    rename: Option<Box<RenameNames>>,
    /// A hard link's file (rare: boxed to keep entries small).
    link_of: Option<Box<Fid>>,
}

#[derive(Debug)]
struct RenameNames {
    name: CompactString,
    source_parent: Option<Fid>,
    source_name: Option<CompactString>,
}

const NONE: u64 = u64::MAX;

/// Future renames and namings by name, in changelog order.
#[derive(Debug, Default)]
pub struct Lookahead {
    entries: VecDeque<Entry>,
    /// Queue position of `entries[0]`.
    base: u64,
    /// Name key → (first, last) queue position of its entries.
    chains: HashMap<u64, (u64, u64), foldhash::fast::RandomState>,
    /// Records that take a name away from an object, by its FID: kept only once asked for
    /// (an object `fid2path` no longer finds), from the first record not applied.
    leavings: Option<Leavings>,
    /// The highest changelog index read.
    pub read_upto: u64,
    /// Records before this index are applied.
    applied_before: u64,
    /// A `fid2path` answer or walk came after the last read: read again before using it.
    pub stale: bool,
}

/// A name's key: the same in every run.
fn key(name: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x1c1c_1e10_0ca4_ead5).hash_one(name)
}

impl Lookahead {
    /// Start after `read_upto` (records up to it are applied or cleared).
    pub fn new(read_upto: u64) -> Lookahead {
        Lookahead { read_upto, stale: true, ..Default::default() }
    }

    /// Keep `rec` if it is a rename or a naming record not yet applied (records arrive in
    /// ascending order).
    pub fn push(&mut self, rec: &ChangelogRecord) {
        use RecordType::*;
        self.read_upto = self.read_upto.max(rec.index);
        if rec.index < self.applied_before {
            return;
        }
        if let Some(l) = &mut self.leavings {
            l.push(rec);
        }
        let naming =
            matches!(rec.kind, Creat | Mknod | Slink | Hlink | Mkdir) || (rec.kind == Renme && rec.target.is_zero());
        if !naming && rec.kind != Renme {
            return;
        }
        let Some(name) = rec.name.as_deref() else { return };
        let rename = (rec.kind == Renme).then(|| {
            Box::new(RenameNames {
                name: name.into(),
                source_parent: rec.source_parent,
                source_name: rec.source_name.clone(),
            })
        });
        let k = key(name);
        let at = self.base + self.entries.len() as u64;
        let link_of = (rec.kind == Hlink).then(|| Box::new(rec.target));
        self.entries.push_back(Entry {
            index: rec.index,
            parent: rec.parent,
            key: k,
            next: NONE,
            naming,
            rename,
            link_of,
        });
        match self.chains.get_mut(&k) {
            Some((_, last)) => {
                let prev = (*last - self.base) as usize;
                if let Some(e) = self.entries.get_mut(prev) {
                    e.next = at;
                }
                *last = at;
            }
            None => {
                self.chains.insert(k, (at, at));
            }
        }
    }

    /// Whether records that take names away are kept.
    pub fn keeps_leavings(&self) -> bool {
        self.leavings.is_some()
    }

    /// Keep the records that take names away from now on (those read already and not
    /// applied go in with [`Lookahead::add_leavings`]); `false`: stop keeping them (a read
    /// again failed part-way).
    pub fn keep_leavings(&mut self, keep: bool) {
        self.leavings = keep.then(Leavings::default);
    }

    /// Add the records of `text` (an `lfs changelog` answer, read again) that take names
    /// away, read already and not applied.
    pub fn add_leavings(&mut self, text: &str) {
        let Some(l) = &mut self.leavings else { return };
        let mut r = ChangelogRecord::empty();
        for line in crate::changelog::lines(text) {
            if crate::changelog::line_type_bit(line.as_bytes()) & LEAVING_BITS == 0 {
                continue;
            }
            if ChangelogRecord::parse_into(line, &mut r).is_ok()
                && r.index >= self.applied_before
                && r.index <= self.read_upto
            {
                l.push(&r);
            }
        }
    }

    /// The first record not applied.
    pub fn applied_before(&self) -> u64 {
        self.applied_before
    }

    /// Where `fid` was after index `after`: the first record still to come that takes a name
    /// away from it (for an object `fid2path` no longer finds).
    pub fn place_of(&self, fid: &Fid, after: u64) -> Option<FuturePlace> {
        self.leavings.as_ref()?.place_of(fid, after)
    }

    /// Whether a record after index `after` removes `fid` as a directory (RMDIR).
    pub fn is_dir(&self, fid: &Fid, after: u64) -> bool {
        self.leavings.as_ref().is_some_and(|l| l.is_dir(fid, after))
    }

    /// The object a record after index `after` renames over `fid` (a directory exactly when
    /// `fid` is one).
    pub fn renamed_over_by(&self, fid: &Fid, after: u64) -> Option<Fid> {
        self.leavings.as_ref()?.renamed_over_by(fid, after)
    }

    /// Index the renames and naming records of `text` (an `lfs changelog` answer); `last` is
    /// the index of its last line, read whatever its type.
    pub fn push_text(&mut self, text: &str, last: Option<u64>) {
        // One record parsed into again and again: no copy of it per line.
        let mut r = ChangelogRecord::empty();
        let bits = if self.leavings.is_some() { NAMING_BITS | LEAVING_BITS } else { NAMING_BITS };
        for line in crate::changelog::lines(text) {
            if crate::changelog::line_type_bit(line.as_bytes()) & bits == 0 {
                continue;
            }
            if ChangelogRecord::parse_into(line, &mut r).is_ok() {
                self.push(&r);
            }
        }
        if let Some(l) = last {
            self.read_upto = self.read_upto.max(l);
        }
    }

    /// A new batch begins at `first`: records before it are applied and leave the queue.
    pub fn next_batch(&mut self, first: u64) {
        self.applied_before = self.applied_before.max(first);
        if let Some(l) = &mut self.leavings {
            l.applied_before(self.applied_before);
        }
        while self.entries.front().is_some_and(|e| e.index < self.applied_before) {
            let Some(e) = self.entries.pop_front() else { break };
            let at = self.base;
            self.base += 1;
            if let Some((first, _)) = self.chains.get_mut(&e.key) {
                if *first == at {
                    if e.next == NONE {
                        self.chains.remove(&e.key);
                    } else {
                        *first = e.next;
                    }
                }
            }
        }
    }

    /// The entries named `name` after index `after`, ascending.
    fn chain(&self, name: &str, after: u64) -> impl Iterator<Item = &Entry> + '_ {
        let mut at = self.chains.get(&key(name)).map_or(NONE, |c| c.0);
        std::iter::from_fn(move || loop {
            if at == NONE {
                return None;
            }
            let e = self.entries.get(at.checked_sub(self.base)? as usize)?;
            at = e.next;
            if e.index > after {
                return Some(e);
            }
        })
    }

    /// Renames after index `after` whose new name is `name`, ascending.
    pub fn named(&self, name: &str, after: u64) -> Vec<FutureRename> {
        self.chain(name, after)
            .filter_map(|e| {
                let r = e.rename.as_ref().filter(|r| r.name == name)?;
                Some(FutureRename {
                    index: e.index,
                    parent: e.parent,
                    name: r.name.clone(),
                    source_parent: r.source_parent,
                    source_name: r.source_name.clone(),
                })
            })
            .collect()
    }

    /// Records after index `after` that gave an object the free name `name`, ascending.
    pub fn namings(&self, name: &str, after: u64) -> Vec<FutureNaming> {
        self.chain(name, after)
            .filter(|e| e.naming)
            .map(|e| FutureNaming { index: e.index, parent: e.parent, link_of: e.link_of.as_deref().copied() })
            .collect()
    }

    /// Records held (not yet known to be applied).
    pub fn len(&self) -> usize {
        self.entries.len() + self.leavings.as_ref().map_or(0, Leavings::len)
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.leavings.as_ref().is_none_or(|l| l.len() == 0)
    }
}

/// The record types the lookahead keeps (a bit per type number, as `line_type_bit` gives):
/// CREAT, MKDIR, HLINK, SLINK, MKNOD, RENME.
const NAMING_BITS: u32 = (1 << 1) | (1 << 2) | (1 << 3) | (1 << 4) | (1 << 5) | (1 << 8);

/// RMDIR, RENME: the records [`Leavings`] keeps.
const LEAVING_BITS: u32 = (1 << 7) | (1 << 8);

#[cfg(test)]
mod tests {
    use super::*;

    fn rename(index: u64, name: &str, over: bool) -> ChangelogRecord {
        let t = if over { "[0x200000401:0x9:0x0]" } else { "[0:0x0:0x0]" };
        let line = format!(
            "{index} 08RENME 10:00:00.000000000 2026.01.01 0x0 t={t} p=[0x200000401:0x1:0x0] {name} s=[0x200000401:0x2:0x0] sp=[0x200000401:0x1:0x0] before"
        );
        ChangelogRecord::parse(&line).expect("a rename line")
    }

    #[test]
    fn lookups_see_only_later_records_of_that_name() {
        let mut la = Lookahead::new(0);
        for (i, n, over) in [(3, "a", false), (5, "b", false), (7, "a", true), (9, "a", false)] {
            la.push(&rename(i, n, over));
        }
        let idx = |v: Vec<FutureRename>| v.iter().map(|r| r.index).collect::<Vec<_>>();
        assert_eq!(idx(la.named("a", 3)), vec![7, 9]);
        assert_eq!(idx(la.named("b", 0)), vec![5]);
        assert!(la.named("c", 0).is_empty());
        // A rename over an existing target gives no free name.
        assert_eq!(la.namings("a", 0).iter().map(|n| n.index).collect::<Vec<_>>(), vec![3, 9]);
        la.next_batch(8);
        assert_eq!(idx(la.named("a", 0)), vec![9]);
        assert_eq!(la.len(), 1, "rename 9 (no records that take names away kept: none was asked for)");
        la.next_batch(10);
        assert!(la.is_empty() && la.named("a", 0).is_empty());
        la.push(&rename(11, "a", false));
        assert_eq!(idx(la.named("a", 0)), vec![11]);
        assert_eq!(la.read_upto, 11);
    }

    #[test]
    fn a_gone_object_is_placed_by_the_first_record_still_to_come_that_takes_its_name() {
        let d = "[0x200000401:0x2:0x0]";
        let lines = [
            format!("4 08RENME 10:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000401:0x1:0x0] later s={d} sp=[0x200000007:0x1:0x0] first"),
            format!("6 07RMDIR 10:00:00.000000000 2026.01.01 0x1 t={d} p=[0x200000401:0x1:0x0] later"),
        ];
        let mut la = Lookahead::new(0);
        la.keep_leavings(true);
        la.push_text(&lines.join("\n"), Some(6));
        let fid = Fid::parse(d).expect("a FID");
        let at = |la: &Lookahead, after| la.place_of(&fid, after).map(|p| (p.index, p.name.to_string()));
        assert_eq!(at(&la, 2), Some((4, "first".into())));
        assert_eq!(at(&la, 4), Some((6, "later".into())));
        assert_eq!(at(&la, 6), None);
        assert!(la.is_dir(&fid, 4) && !la.is_dir(&fid, 6));
        la.next_batch(5);
        assert_eq!(at(&la, 0), Some((6, "later".into())));
        la.next_batch(7);
        assert!(la.is_empty());
    }
}
