//! Rename records read ahead of the monitor's position, indexed by their new name, for
//! rewinding `fid2path` answers (which already include renames the monitor has not applied).
//!
//! A rename can only have produced a path one of whose components is the rename's new name,
//! so rewinding a path looks up its components here instead of scanning every future rename.
//! Records that give an object a name where none was (creations, links, renames onto a free
//! name) are indexed the same way: a directory walk made now tells by them which entries were
//! not there yet when an earlier record was applied.

use std::collections::{HashMap, VecDeque};

use crate::changelog::{ChangelogRecord, RecordType};

/// Future renames by new name, ascending by index within each name.
#[derive(Debug, Default)]
pub struct Lookahead {
    by_name: ByName,
    /// Records naming an object on a free name, by that name.
    namings: ByName,
    /// The highest changelog index read.
    pub read_upto: u64,
    /// Records before this index are applied (their renames are dropped lazily).
    applied_before: u64,
    held: usize,
    held_at_prune: usize,
    /// A `fid2path` answer came after the last read: read again before rewinding it.
    pub stale: bool,
}

impl Lookahead {
    /// Start after `read_upto` (records up to it are applied or cleared).
    pub fn new(read_upto: u64) -> Lookahead {
        Lookahead { read_upto, stale: true, ..Default::default() }
    }

    /// Keep `rec` if it is a rename or a naming record not yet applied (records arrive in
    /// ascending order).
    pub fn push(&mut self, rec: ChangelogRecord) {
        use RecordType::*;
        self.read_upto = self.read_upto.max(rec.index);
        if rec.index < self.applied_before {
            return;
        }
        let naming = matches!(rec.kind, Creat | Mknod | Slink | Hlink | Mkdir) || (rec.kind == Renme && rec.target.is_zero());
        if naming {
            if let Some(name) = rec.name.as_deref() {
                push_named(&mut self.namings, name, rec.clone());
                self.held += 1;
            }
        }
        if rec.kind == Renme {
            if let Some(name) = rec.name.clone() {
                push_named(&mut self.by_name, &name, rec);
                self.held += 1;
            }
        }
    }

    /// Index the renames and naming records of `text` (an `lfs changelog` answer); `last` is
    /// the index of its last line, read whatever its type.
    pub fn push_text(&mut self, text: &str, last: Option<u64>) {
        for line in crate::changelog::lines(text) {
            if crate::changelog::line_type_bit(line.as_bytes()) & NAMING_BITS == 0 {
                continue;
            }
            if let Ok(r) = ChangelogRecord::parse(line) {
                self.push(r);
            }
        }
        if let Some(l) = last {
            self.read_upto = self.read_upto.max(l);
        }
    }

    /// A new batch begins at `first`: renames before it are applied. The index is swept
    /// when it has doubled since the last sweep; lookups drop applied entries on the way.
    pub fn next_batch(&mut self, first: u64) {
        self.applied_before = self.applied_before.max(first);
        if self.held > 2 * self.held_at_prune.max(1024) {
            let before = self.applied_before;
            for map in [&mut self.by_name, &mut self.namings] {
                map.retain(|_, q| {
                    while q.front().is_some_and(|r| r.index < before) {
                        q.pop_front();
                    }
                    !q.is_empty()
                });
            }
            self.held = self.by_name.values().chain(self.namings.values()).map(VecDeque::len).sum();
            self.held_at_prune = self.held;
        }
    }

    /// Renames after index `after` whose new name is `name`, ascending.
    pub fn named(&mut self, name: &str, after: u64) -> Vec<ChangelogRecord> {
        later(&mut self.by_name, &mut self.held, self.applied_before, name, after)
    }

    /// Records after index `after` that gave an object the free name `name`, ascending.
    pub fn namings(&mut self, name: &str, after: u64) -> Vec<ChangelogRecord> {
        later(&mut self.namings, &mut self.held, self.applied_before, name, after)
    }

    /// Records held (not yet known to be applied).
    pub fn len(&self) -> usize {
        self.held
    }

    /// Whether no rename is held.
    pub fn is_empty(&self) -> bool {
        self.held == 0
    }
}

type ByName = HashMap<Box<str>, VecDeque<ChangelogRecord>, foldhash::fast::RandomState>;

/// The record types the lookahead keeps (a bit per type number, as `line_type_bit` gives).
const NAMING_BITS: u32 = {
    let mut m = 0u32;
    let types = [1u32, 2, 3, 4, 5, 8];
    let mut i = 0;
    while i < types.len() {
        m |= 1 << types[i];
        i += 1;
    }
    m
};

fn push_named(map: &mut ByName, name: &str, rec: ChangelogRecord) {
    match map.get_mut(name) {
        Some(q) => q.push_back(rec),
        None => {
            map.insert(name.into(), VecDeque::from([rec]));
        }
    }
}

/// The records of `map[name]` after `after`, dropping applied ones (before `applied`) first.
fn later(map: &mut ByName, held: &mut usize, applied: u64, name: &str, after: u64) -> Vec<ChangelogRecord> {
    let Some(q) = map.get_mut(name) else { return Vec::new() };
    while q.front().is_some_and(|r| r.index < applied) {
        q.pop_front();
        *held -= 1;
    }
    let start = q.partition_point(|r| r.index <= after);
    q.range(start..).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rename(index: u64, name: &str) -> ChangelogRecord {
        let line = format!("{index} 08RENME 10:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000401:0x1:0x0] {name} s=[0x200000401:0x2:0x0] sp=[0x200000401:0x1:0x0] before");
        ChangelogRecord::parse(&line).expect("a rename line")
    }

    #[test]
    fn lookups_see_only_later_renames_of_that_name() {
        let mut la = Lookahead::new(0);
        for (i, n) in [(3, "a"), (5, "b"), (7, "a"), (9, "a")] {
            la.push(rename(i, n));
        }
        let idx = |v: Vec<ChangelogRecord>| v.iter().map(|r| r.index).collect::<Vec<_>>();
        assert_eq!(idx(la.named("a", 3)), vec![7, 9]);
        assert_eq!(idx(la.named("b", 0)), vec![5]);
        assert!(la.named("c", 0).is_empty());
        la.next_batch(8);
        assert_eq!(idx(la.named("a", 0)), vec![9]);
        assert_eq!(la.read_upto, 9);
    }
}
