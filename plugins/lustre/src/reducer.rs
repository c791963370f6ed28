//! Rule-table reduction of a batch of changelog records, per FID (Robinhood's
//! `record_filters`, as Icicle uses them): update coalescing, create/delete cancellation, and
//! rename override.

use std::collections::{HashMap, HashSet};

use icicle_core::traits::Reducer;

use crate::changelog::{ChangelogRecord, Fid, RecordType};

/// What a rule does with a new record, given the earlier kept records of the same FID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Drop always (MARK).
    IgnoreAlways,
    /// Drop when an earlier kept record of the same FID has one of these types (a bit per
    /// type number): a stat taken when the batch is emitted captures the final state anyway.
    IgnoreMask(u32),
    /// When the newest earlier kept record of the same FID has one of these types, drop
    /// both (a transient object); anything else in between (a rename) keeps both.
    IgnoreCancel(u32),
    /// Always keep.
    Keep,
}

const fn bits(types: &[u32]) -> u32 {
    let mut m = 0;
    let mut i = 0;
    while i < types.len() {
        m |= 1 << types[i];
        i += 1;
    }
    m
}

// Type numbers (lustre_user.h).
const CREAT: u32 = 1;
const MKDIR: u32 = 2;
const HLINK: u32 = 3;
const SLINK: u32 = 4;
const MKNOD: u32 = 5;
const CLOSE: u32 = 11;
const LYOUT: u32 = 12;
const TRUNC: u32 = 13;
const SATTR: u32 = 14;
const XATTR: u32 = 15;
const HSM: u32 = 16;
const MTIME: u32 = 17;
const CTIME: u32 = 18;
const ATIME: u32 = 19;
const FLRW: u32 = 21;
const RESYNC: u32 = 22;

const DATA_MASK: u32 = bits(&[TRUNC, CLOSE, MTIME, CREAT, MKNOD, SLINK, HLINK]);
const MTIME_MASK: u32 = bits(&[TRUNC, CLOSE, MTIME, CREAT, MKNOD, MKDIR, SLINK, HLINK]);
const ATTR_MASK: u32 = bits(&[CTIME, SATTR, CREAT, MKNOD, MKDIR, SLINK, HLINK]);
const ANY_UPDATE: u32 = bits(&[
    TRUNC, CLOSE, MTIME, CTIME, ATIME, SATTR, XATTR, LYOUT, FLRW, RESYNC, HSM, CREAT, MKNOD, MKDIR, SLINK, HLINK,
]);

/// The rule table, by record type name. Robinhood's rows, plus the remaining attribute-only
/// types coalescing into any pending update.
pub const RULES: &[(&str, Rule)] = &[
    ("MARK", Rule::IgnoreAlways),
    ("TRUNC", Rule::IgnoreMask(DATA_MASK)),
    ("CLOSE", Rule::IgnoreMask(DATA_MASK)),
    ("MTIME", Rule::IgnoreMask(MTIME_MASK)),
    ("CTIME", Rule::IgnoreMask(ATTR_MASK)),
    ("SATTR", Rule::IgnoreMask(ATTR_MASK)),
    ("ATIME", Rule::IgnoreMask(ANY_UPDATE)),
    ("XATTR", Rule::IgnoreMask(ANY_UPDATE)),
    ("LYOUT", Rule::IgnoreMask(ANY_UPDATE)),
    ("FLRW", Rule::IgnoreMask(ANY_UPDATE)),
    ("RESYNC", Rule::IgnoreMask(ANY_UPDATE)),
    ("HSM", Rule::IgnoreMask(ANY_UPDATE)),
    ("UNLNK", Rule::IgnoreCancel(bits(&[CREAT, MKNOD, SLINK]))),
    ("RMDIR", Rule::IgnoreCancel(bits(&[MKDIR]))),
];

/// The rule table indexed by type number, built once.
fn table() -> &'static [Rule; 32] {
    static TABLE: std::sync::OnceLock<[Rule; 32]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [Rule::Keep; 32];
        for (name, rule) in RULES {
            if let Some(k) = RecordType::from_name(name) {
                t[k.number() as usize] = *rule;
            }
        }
        t
    })
}

/// The rule for a record type.
pub fn rule_for(kind: &RecordType) -> Rule {
    match kind {
        RecordType::Unknown(..) => Rule::Keep,
        k => table()[k.number() as usize & 31],
    }
}

pub use icicle_core::traits::ReduceCounts;

/// The Robinhood-style rule table as a [`Reducer`] of changelog records.
#[derive(Debug, Default, Clone, Copy)]
pub struct RuleTable;

impl Reducer for RuleTable {
    type Event = ChangelogRecord;

    fn reduce(&mut self, batch: &mut Vec<ChangelogRecord>) -> ReduceCounts {
        reduce_batch(batch, true)
    }
}

impl RuleTable {
    /// [`Reducer::reduce`] without cancellation (a create and the unlink of the same object
    /// both kept): for records a run before a restart may have delivered in part, whose
    /// create the index may hold already.
    pub fn reduce_keeping_pairs(batch: &mut Vec<ChangelogRecord>) -> ReduceCounts {
        reduce_batch(batch, false)
    }
}

/// The rule table as a monitor's batch is reduced: with cancellation, or without it
/// ([`RuleTable::reduce_keeping_pairs`]) for the first batch after a restart, which reads
/// again what a killed run may have delivered.
#[derive(Debug, Clone, Copy)]
pub struct Reduction {
    /// Keep a create and the unlink of the same object (no cancellation).
    pub keeping_pairs: bool,
}

impl Reducer for Reduction {
    type Event = ChangelogRecord;

    fn reduce(&mut self, batch: &mut Vec<ChangelogRecord>) -> ReduceCounts {
        if self.keeping_pairs {
            RuleTable::reduce_keeping_pairs(batch)
        } else {
            RuleTable.reduce(batch)
        }
    }
}

fn slot_key(r: &ChangelogRecord) -> Fid {
    match (&r.kind, r.source) {
        (RecordType::Renme, Some(s)) => s,
        _ => r.target,
    }
}

/// The records of one FID, newest first, following the `prev` links from `j`.
fn chain(prev: &[u32], mut j: u32) -> impl Iterator<Item = usize> + '_ {
    std::iter::from_fn(move || {
        (j != u32::MAX).then(|| {
            let cur = j;
            j = prev[j as usize];
            cur as usize
        })
    })
}

/// Reduce one batch in place: the dropped records are removed, the kept ones stay in
/// changelog order. Without `cancel`, the `IgnoreCancel` rows keep both records.
fn reduce_batch(batch: &mut Vec<ChangelogRecord>, cancel: bool) -> ReduceCounts {
    type Fast = foldhash::fast::RandomState;
    const NONE: u32 = u32::MAX;
    let mut counts = ReduceCounts { input: batch.len() as u64, ..Default::default() };
    // Directories that renames move things into or out of: their MKDIR/RMDIR never cancel
    // (rename override), since the rename needs their paths.
    let rename_parents: HashSet<Fid, Fast> = batch
        .iter()
        .filter(|r| r.kind == RecordType::Renme)
        .flat_map(|r| [r.parent, r.source_parent])
        .flatten()
        .collect();
    // Per FID, the newest kept record; each kept record links to the previous one of its FID.
    let mut newest: HashMap<Fid, u32, Fast> = HashMap::with_capacity_and_hasher(batch.len(), Fast::default());
    let mut prev = vec![NONE; batch.len()];
    let mut keep = vec![false; batch.len()];
    for (i, r) in batch.iter().enumerate() {
        let key = slot_key(r);
        let head = newest.get(&key).copied().unwrap_or(NONE);
        let kept = match rule_for(&r.kind) {
            Rule::IgnoreAlways => {
                counts.ignored += 1;
                false
            }
            Rule::IgnoreMask(mask) => {
                let masked = chain(&prev, head).any(|j| keep[j] && batch[j].kind.bit() & mask != 0);
                if masked {
                    counts.coalesced += 1;
                }
                !masked
            }
            Rule::IgnoreCancel(mask) => match chain(&prev, head).find(|&j| keep[j]) {
                Some(j) if cancel && batch[j].kind.bit() & mask != 0 && !rename_parents.contains(&key) => {
                    keep[j] = false;
                    counts.cancelled += 2;
                    false
                }
                _ => true,
            },
            Rule::Keep => true,
        };
        if kept {
            keep[i] = true;
            prev[i] = head;
            newest.insert(key, i as u32);
        }
    }
    let mut flags = keep.into_iter();
    batch.retain(|_| flags.next().unwrap_or(false));
    counts.passed = batch.len() as u64;
    counts
}
#[cfg(test)]
mod tests {
    use super::*;

    fn reduce(mut batch: Vec<ChangelogRecord>) -> (Vec<ChangelogRecord>, ReduceCounts) {
        let counts = RuleTable.reduce(&mut batch);
        (batch, counts)
    }

    fn rec(i: u64, kind: &str, t: u32, p: u32, name: &str) -> ChangelogRecord {
        let fid = |o: u32| Fid { seq: 0x200000401, oid: o, ver: 0 };
        ChangelogRecord {
            index: i,
            kind: RecordType::from_name(kind).unwrap(),
            time: "00:00:00.000000000 2026.01.01".into(),
            flags: 0,
            target: fid(t),
            jobid: None,
            extra_flags: None,
            uid_gid: None,
            nid: None,
            open_mode: None,
            xattr: None,
            parent: (p > 0).then(|| fid(p)),
            name: (!name.is_empty()).then(|| name.into()),
            source: None,
            source_parent: None,
            source_name: None,
        }
    }

    fn kinds(v: &[ChangelogRecord]) -> Vec<String> {
        v.iter().map(|r| format!("{}:{}", r.index, r.kind.name())).collect()
    }

    #[test]
    fn create_then_unlink_cancels_and_updates_coalesce() {
        let batch = vec![
            rec(1, "CREAT", 5, 1, "a"),
            rec(2, "CLOSE", 5, 0, ""),
            rec(3, "SATTR", 5, 0, ""),
            rec(4, "UNLNK", 5, 1, "a"),
            rec(5, "CREAT", 6, 1, "b"),
            rec(6, "CLOSE", 6, 0, ""),
            rec(7, "MTIME", 7, 0, ""),
            rec(8, "MTIME", 7, 0, ""),
            rec(9, "MARK", 1, 0, ""),
        ];
        let (out, c) = reduce(batch);
        assert_eq!(kinds(&out), vec!["5:CREAT", "7:MTIME"]);
        assert_eq!(c, ReduceCounts { input: 9, passed: 2, coalesced: 4, cancelled: 2, ignored: 1 });
    }

    #[test]
    fn keeping_pairs_cancels_nothing_and_still_coalesces() {
        let mut batch = vec![rec(1, "CREAT", 5, 1, "a"), rec(2, "CLOSE", 5, 0, ""), rec(3, "UNLNK", 5, 1, "a")];
        let c = RuleTable::reduce_keeping_pairs(&mut batch);
        assert_eq!(kinds(&batch), vec!["1:CREAT", "3:UNLNK"]);
        assert_eq!((c.cancelled, c.coalesced), (0, 1));
    }

    #[test]
    fn an_unlink_of_an_old_file_is_kept() {
        let (out, _) = reduce(vec![rec(1, "CLOSE", 5, 0, ""), rec(2, "UNLNK", 5, 1, "a")]);
        assert_eq!(kinds(&out), vec!["1:CLOSE", "2:UNLNK"]);
    }

    #[test]
    fn a_rename_between_create_and_unlink_keeps_both() {
        let mut mv = rec(2, "RENME", 0, 1, "b");
        mv.target = Fid::default();
        mv.source = Some(Fid { seq: 0x200000401, oid: 5, ver: 0 });
        mv.source_parent = Some(Fid { seq: 0x200000401, oid: 1, ver: 0 });
        mv.source_name = Some("a".into());
        let (out, c) = reduce(vec![rec(1, "CREAT", 5, 1, "a"), mv, rec(3, "UNLNK", 5, 1, "b")]);
        assert_eq!(kinds(&out), vec!["1:CREAT", "2:RENME", "3:UNLNK"]);
        assert_eq!(c.cancelled, 0);
    }

    #[test]
    fn mkdir_rmdir_cancels_unless_a_rename_uses_the_directory() {
        let (out, _) = reduce(vec![rec(1, "MKDIR", 9, 1, "d"), rec(2, "RMDIR", 9, 1, "d")]);
        assert!(out.is_empty());
        let mut mv = rec(3, "RENME", 0, 1, "x");
        mv.target = Fid::default();
        mv.source = Some(Fid { seq: 0x200000401, oid: 5, ver: 0 });
        mv.source_parent = Some(Fid { seq: 0x200000401, oid: 9, ver: 0 });
        mv.source_name = Some("x".into());
        let (out, _) =
            reduce(vec![rec(1, "MKDIR", 9, 1, "d"), rec(2, "CREAT", 5, 9, "x"), mv, rec(4, "RMDIR", 9, 1, "d")]);
        assert_eq!(kinds(&out), vec!["1:MKDIR", "2:CREAT", "3:RENME", "4:RMDIR"]);
    }
}
