//! A bounded state: the least recently touched files let go of at a batch end (their records
//! stay in the index, their paths remembered by hash), and found again by name or below a
//! renamed directory.

use super::*;

impl GpfsState {
    /// Keep at most `cap` files (0: no bound), evicting the least recently touched at the end
    /// of a batch. An evicted file's record stays in the index; the state remembers its path
    /// by hash and finds it again where a directory rename or a permission change needs it.
    pub fn set_lru_capacity(&mut self, cap: usize) {
        self.lru_capacity = cap;
        if cap > 0 {
            let several = self.links.iter().filter(|(_, v)| v.len() > 1).map(|(i, _)| *i);
            self.linked.extend(several);
        }
        self.recency = (cap > 0).then(|| {
            // In path order, so the same run evicts the same files.
            let mut files: Vec<&PathName> = self.objects.iter().filter(|(_, m)| !m.is_dir()).map(|(p, _)| p).collect();
            files.sort_unstable();
            let mut r = lru::LruCache::unbounded();
            for p in files {
                r.put(p.clone(), ());
            }
            r
        });
    }

    /// Files let go of that the index still holds.
    pub fn evicted_files(&self) -> usize {
        self.evicted.len()
    }

    /// Evict the least recently touched files down to the capacity; files with several
    /// names (hard links: known at once at some point) stay, so a change read under one name
    /// reaches the others.
    pub(super) fn evict(&mut self) {
        let Some(recency) = self.recency.as_mut() else { return };
        let mut out = Vec::new();
        while recency.len() > self.lru_capacity {
            let Some((p, ())) = recency.pop_lru() else { break };
            out.push(p);
        }
        for p in out {
            let Some(m) = self.objects.get(&*p).copied() else { continue };
            if self.links.get(&m.inode).is_some_and(|v| v.len() > 1) || self.linked.contains(&m.inode) {
                continue;
            }
            self.forget(&p);
            self.evicted.insert(&p, &m, m.inode);
            self.counts.evicted += 1;
        }
    }

    /// Whether a file the state let go of may be below directory `dir`: counted under `dir`,
    /// under a name `dir` had before this run's directory renames, or under an older name of
    /// a directory that a rename moved below it.
    pub(super) fn evicted_below(&self, dir: &str) -> bool {
        if self.evicted.is_empty() {
            return false;
        }
        let under = |p: &str, d: &str| p.strip_prefix(d).is_some_and(|r| r.is_empty() || r.starts_with('/'));
        let mut names = vec![dir.to_string()];
        if self.evicted.any_below(dir) {
            return true;
        }
        for (old, new) in self.renames.iter().rev() {
            let mut found = Vec::new();
            for q in &names {
                if under(q, new) {
                    found.push(format!("{old}{}", &q[new.len()..]));
                } else if under(new, q) {
                    found.push(old.clone());
                }
            }
            for p in found {
                if self.evicted.any_below(&p) {
                    return true;
                }
                if !names.contains(&p) {
                    names.push(p);
                }
            }
        }
        false
    }

    /// The name the index holds for `path` (unknown to the state) if the state evicted it:
    /// `path` itself or a name it had before this run's directory renames.
    pub(super) fn evicted_name(&self, path: &str) -> Option<String> {
        if self.evicted.is_empty() {
            return None;
        }
        if self.evicted.contains(path) {
            return Some(path.to_string());
        }
        self.older_names(path).into_iter().find(|p| self.evicted.contains(p))
    }

    /// The names `path` had before this run's directory renames, newest first, undoing the
    /// renames in the order they were read.
    pub(super) fn older_names(&self, path: &str) -> Vec<String> {
        let mut older = Vec::new();
        undo_in_read_order(&self.renames, path.to_string(), &mut older);
        older
    }

    /// Read from several partitions with the mount to check against: the names `path` had if
    /// the last renames happened in another order than they were read (those undone in any
    /// order, the deepest new name first; older ones as read). Empty otherwise. A wrong guess
    /// costs a delete that the mount check turns back into an update.
    pub(super) fn older_names_reordered(&self, path: &str) -> Vec<String> {
        if !self.checked {
            return Vec::new();
        }
        let mut p = path.to_string();
        let mut older = Vec::new();
        let tail = self.renames.len().min(LATE_RENAMES);
        let split = self.renames.len() - tail;
        let mut used = vec![false; tail];
        loop {
            let best = self.renames[split..]
                .iter()
                .enumerate()
                .filter(|(i, (_, new))| !used[*i] && p.strip_prefix(new.as_str()).is_some_and(|r| r.starts_with('/')))
                .max_by_key(|(i, (_, new))| (new.len(), *i));
            let Some((i, (old, new))) = best else { break };
            used[i] = true;
            p = format!("{old}{}", &p[new.len()..]);
            older.push(p.clone());
        }
        undo_in_read_order(&self.renames[..split], p, &mut older);
        older
    }
}

/// Undo `renames` (oldest first) on `p` from the newest back, pushing each older name.
fn undo_in_read_order(renames: &[(String, String)], mut p: String, older: &mut Vec<String>) {
    for (old, new) in renames.iter().rev() {
        if let Some(rest) = p.strip_prefix(new.as_str()).filter(|r| r.starts_with('/')) {
            p = format!("{old}{rest}");
            older.push(p.clone());
        }
    }
}
