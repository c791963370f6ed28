//! Records still to come that take a name away from an object (a directory removed, an
//! object renamed or renamed over), by the object's FID: once the object is gone, `fid2path`
//! cannot place it, and the first such record tells where it was until then. Kept only once
//! asked for (most runs never meet a gone object they do not know).

use std::collections::{HashMap, VecDeque};

use compact_str::CompactString;

use crate::changelog::{ChangelogRecord, Fid, RecordType};

/// A record still to be applied that takes a name away from an object: where the object was
/// until then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuturePlace {
    /// The record's changelog index.
    pub index: u64,
    /// The directory the object was in until then.
    pub parent: Fid,
    /// The object's name there.
    pub name: CompactString,
}

#[derive(Debug)]
struct Leaving {
    index: u64,
    parent: Fid,
    name: CompactString,
    /// A directory removal (RMDIR).
    rmdir: bool,
    /// Renamed over by this object (a directory exactly when the one renamed over is).
    over_by: Option<Fid>,
}

type Fast = foldhash::fast::RandomState;

/// The records that take names away, by FID: the first of each object, the later ones (an
/// object renamed several times in what is read ahead), and their order.
#[derive(Debug, Default)]
pub(crate) struct Leavings {
    first: HashMap<Fid, Leaving, Fast>,
    later: HashMap<Fid, VecDeque<Leaving>, Fast>,
    order: VecDeque<(u64, Fid)>,
}

impl Leavings {
    /// Keep where `rec` takes a name away: the removed directory (RMDIR), the renamed object
    /// (its old name), the object renamed over (the new name).
    pub(crate) fn push(&mut self, rec: &ChangelogRecord) {
        match rec.kind {
            RecordType::Rmdir => self.keep(rec.index, rec.target, rec.parent, rec.name.as_ref(), true, None),
            RecordType::Renme => {
                if let Some(src) = rec.source {
                    self.keep(rec.index, src, rec.source_parent, rec.source_name.as_ref(), false, None);
                }
                self.keep(rec.index, rec.target, rec.parent, rec.name.as_ref(), false, rec.source);
            }
            _ => {}
        }
    }

    fn keep(
        &mut self,
        index: u64,
        fid: Fid,
        parent: Option<Fid>,
        name: Option<&CompactString>,
        rmdir: bool,
        over_by: Option<Fid>,
    ) {
        let (Some(parent), Some(name)) = (parent, name) else { return };
        if fid.is_zero() {
            return;
        }
        let l = Leaving { index, parent, name: name.clone(), rmdir, over_by };
        match self.first.entry(fid) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(l);
            }
            std::collections::hash_map::Entry::Occupied(_) => self.later.entry(fid).or_default().push_back(l),
        }
        self.order.push_back((index, fid));
    }

    /// Records before `first` are applied: they leave.
    pub(crate) fn applied_before(&mut self, first: u64) {
        while self.order.front().is_some_and(|(i, _)| *i < first) {
            let Some((_, fid)) = self.order.pop_front() else { break };
            let next = self.later.get_mut(&fid).and_then(|q| q.pop_front());
            if self.later.get(&fid).is_some_and(|q| q.is_empty()) {
                self.later.remove(&fid);
            }
            match next {
                Some(l) => {
                    self.first.insert(fid, l);
                }
                None => {
                    self.first.remove(&fid);
                }
            }
        }
    }

    /// The records still to come that take a name away from `fid`, after index `after`.
    fn of(&self, fid: &Fid, after: u64) -> impl Iterator<Item = &Leaving> + '_ {
        self.first
            .get(fid)
            .into_iter()
            .chain(self.later.get(fid).into_iter().flatten())
            .filter(move |l| l.index > after)
    }

    pub(crate) fn place_of(&self, fid: &Fid, after: u64) -> Option<FuturePlace> {
        let l = self.of(fid, after).next()?;
        Some(FuturePlace { index: l.index, parent: l.parent, name: l.name.clone() })
    }

    pub(crate) fn is_dir(&self, fid: &Fid, after: u64) -> bool {
        self.of(fid, after).any(|l| l.rmdir)
    }

    pub(crate) fn renamed_over_by(&self, fid: &Fid, after: u64) -> Option<Fid> {
        self.of(fid, after).find_map(|l| l.over_by)
    }

    /// Records kept.
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }
}
