//! Events read late from another partition: a name removed below a directory's new name
//! before the directory's rename was read, a directory's IN_MOVED_TO read before its
//! IN_MOVED_FROM, or after that half gave up waiting. Without a seed the state does not know
//! what was below the old name, so these are remembered for a while (four times as long as a
//! rename half waits for a silent partition), and the rename read later removes the old names
//! they imply.

use std::collections::VecDeque;

use super::*;

/// Entries remembered of each kind at most (the oldest go first).
const LATE_CAP: usize = 1 << 16;

/// What a rename read later may still need (with several partitions only).
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Late {
    /// Batches ended so far (the clock the entries expire by).
    batch: u64,
    /// Names the state did not know when their removal was read, with its batch, each with
    /// the older names this run's renames gave it then (newest first).
    deleted: VecDeque<(u64, Vec<String>)>,
    /// Directories moved in with no IN_MOVED_FROM read yet: (batch, cookie, inode, path).
    moved_in: VecDeque<(u64, u64, u64, String)>,
    /// Directories whose IN_MOVED_FROM gave up waiting: (batch, cookie, inode, old path).
    #[serde(default)]
    moved_out: VecDeque<(u64, u64, u64, String)>,
}

fn push<T>(q: &mut VecDeque<T>, v: T) {
    if q.len() >= LATE_CAP {
        q.pop_front();
    }
    q.push_back(v);
}

fn below<'a>(path: &'a str, dir: &str) -> Option<&'a str> {
    path.strip_prefix(dir).filter(|r| r.starts_with('/'))
}

impl Late {
    /// A batch ended: forget what is older than `window` batches.
    pub(super) fn tick(&mut self, window: u64) {
        self.batch += 1;
        let keep = |b: u64| b + window >= self.batch;
        while self.deleted.front().is_some_and(|(b, _)| !keep(*b)) {
            self.deleted.pop_front();
        }
        while self.moved_in.front().is_some_and(|(b, ..)| !keep(*b)) {
            self.moved_in.pop_front();
        }
        while self.moved_out.front().is_some_and(|(b, ..)| !keep(*b)) {
            self.moved_out.pop_front();
        }
    }
}

impl GpfsState {
    /// A name the state did not know was removed: a directory rename read later may show
    /// the name the index holds for it.
    pub(super) fn note_unknown_delete(&mut self, path: &str) {
        if self.late_names_matter() {
            let mut names = vec![path.to_string()];
            names.extend(self.older_names(path));
            names.extend(self.older_names_reordered(path));
            push(&mut self.late.deleted, (self.late.batch, names));
        }
    }

    /// Directory `old` was renamed to `new`: names removed below `new` (under any of their
    /// names then) before this was read had their older names below `old` (removed now;
    /// [`GpfsState::delete_unknown`] removes the names before those).
    pub(super) fn delete_late_names(&mut self, old: &str, new: &str, ops: &mut Ops) {
        if !self.late_names_matter() || self.late.deleted.is_empty() {
            return;
        }
        let older: Vec<String> = self
            .late
            .deleted
            .iter()
            .filter_map(|(_, names)| names.iter().find_map(|p| below(p, new)).map(|rest| format!("{old}{rest}")))
            .collect();
        for op in older {
            if self.complete {
                // Only a file it let go of can be indexed under a name the state does not know.
                if let Some(name) = self.evicted_name(&op) {
                    self.delete(&name, ops);
                    self.counts.evicted_found += 1;
                    self.counts.late_deletes += 1;
                }
            } else if !self.objects.contains_key(op.as_str()) && !ops.contains_key(op.as_str()) {
                self.delete_unknown(&op, ops);
                self.counts.late_deletes += u64::from(ops.get(op.as_str()) == Some(&Op::Delete));
            }
        }
    }

    /// Whether names read late may hide names the index holds that the state cannot list:
    /// with several partitions, a state without a seed, or one that let files go.
    fn late_names_matter(&self) -> bool {
        self.verify && (!self.complete || !self.evicted.is_empty())
    }

    /// A directory's IN_MOVED_TO paired with nothing (its IN_MOVED_FROM may come later, from
    /// another partition).
    pub(super) fn note_moved_in(&mut self, cookie: u64, meta: Meta, path: &str) {
        if self.verify && cookie != 0 && meta.is_dir() {
            push(&mut self.late.moved_in, (self.late.batch, cookie, meta.inode, path.to_string()));
        }
    }

    /// The IN_MOVED_FROM of a directory whose IN_MOVED_TO was read first: where it went.
    pub(super) fn take_moved_in(&mut self, cookie: u64, meta: Meta) -> Option<String> {
        if !self.verify || cookie == 0 || !meta.is_dir() {
            return None;
        }
        let i = self.late.moved_in.iter().position(|(_, c, inode, _)| *c == cookie && *inode == meta.inode)?;
        self.late.moved_in.remove(i).map(|(.., path)| path)
    }

    /// A directory's IN_MOVED_FROM gave up waiting (moved out of the fileset, or its
    /// IN_MOVED_TO is still to come from a partition further behind).
    pub(super) fn note_moved_out(&mut self, cookie: u64, meta: Meta, path: &str) {
        if self.verify && (!self.complete || self.evicted_below(path)) && cookie != 0 && meta.is_dir() {
            push(&mut self.late.moved_out, (self.late.batch, cookie, meta.inode, path.to_string()));
        }
    }

    /// The IN_MOVED_TO of a directory whose IN_MOVED_FROM gave up waiting: where it was.
    pub(super) fn take_moved_out(&mut self, cookie: u64, meta: Meta) -> Option<String> {
        if !self.verify || cookie == 0 || !meta.is_dir() || self.late.moved_out.is_empty() {
            return None;
        }
        let i = self.late.moved_out.iter().position(|(_, c, inode, _)| *c == cookie && *inode == meta.inode)?;
        self.late.moved_out.remove(i).map(|(.., path)| path)
    }

    /// How many batches late entries are kept: four times as long as a rename half waits
    /// for a partition that falls silent (entries are small, and capped).
    pub(super) fn late_window(&self) -> u64 {
        4 * u64::from(self.pair_batches.saturating_mul(SILENT_PARTITION_FACTOR))
    }
}
