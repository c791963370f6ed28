//! Directories created during this run. Such a directory was empty when it came to be, and
//! everything that came into it since came with an event (IN_CREATE, IN_MOVED_TO), so the
//! state knows every name in it the index may hold, as a state seeded from a snapshot knows
//! every name anywhere. A state without `seed_index` uses this to send, in those
//! directories, what a seeded one sends: no delete for a name that was never indexed
//! (unbounded states only: a bounded one lets go of files it knew).

use super::{parent_of, GpfsState};

impl GpfsState {
    /// Whether the state knows every name the index may hold directly in `dir`. A bounded
    /// state (`lru_capacity`) lets go of files, so only a seeded one knows them all.
    pub(super) fn knows_all_in(&self, dir: &str) -> bool {
        self.complete || (self.lru_capacity == 0 && !self.verify && self.whole.contains(dir))
    }

    /// Whether the state knows every name the index may hold beside `path` (in its directory).
    pub(super) fn knows_all_at(&self, path: &str) -> bool {
        self.knows_all_in(parent_of(path))
    }

    /// `dir` was just created: empty, so the state knows all it will hold (unless it already
    /// holds names below it: events read out of order).
    pub(super) fn created_dir(&mut self, dir: &str) {
        // A bounded state, or one reading several partitions, never uses marks
        // (`knows_all_in`): keep none.
        if !self.complete && self.lru_capacity == 0 && !self.verify && !self.children.contains_key(dir) {
            // Marks below this name are an older directory's (one moved away, its rename
            // half still waiting).
            self.forget_marks(dir);
            self.whole.insert(dir.to_string());
        }
    }

    /// The marks of `dir` and of the directories below it, taken out.
    fn take_marks(&mut self, dir: &str) -> Vec<String> {
        let below = |m: &String| m.len() == dir.len() || m.as_bytes().get(dir.len()) == Some(&b'/');
        let marks: Vec<String> = self
            .whole
            .range(dir.to_string()..)
            .take_while(|m| m.starts_with(dir))
            .filter(|m| below(m))
            .cloned()
            .collect();
        for m in &marks {
            self.whole.remove(m);
        }
        marks
    }

    /// `dir` is gone (removed, or moved out of the fileset), or what was below it may now be
    /// another object's: nothing at or below it is known whole any more.
    pub(super) fn forget_marks(&mut self, dir: &str) {
        self.take_marks(dir);
    }

    /// Directory `old` is now `new`, with everything below it.
    pub(super) fn move_marks(&mut self, old: &str, new: &str) {
        // Whatever the new name held before was replaced (a rename onto an empty directory).
        self.take_marks(new);
        for m in self.take_marks(old) {
            self.whole.insert(format!("{new}{}", &m[old.len()..]));
        }
    }

    /// The marks, for the checkpoint.
    pub(super) fn marks(&self) -> Vec<String> {
        self.whole.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_move_and_go_with_their_directory_only() {
        let mut s = GpfsState::new(1);
        for d in ["/a", "/a/b", "/a-x", "/ab", "/c"] {
            s.created_dir(d);
        }
        s.move_marks("/a", "/c/z");
        assert_eq!(s.marks(), ["/a-x", "/ab", "/c", "/c/z", "/c/z/b"]);
        assert!(s.knows_all_at("/c/z/b/f") && !s.knows_all_at("/a/b/f"));
        s.forget_marks("/c");
        assert_eq!(s.marks(), ["/a-x", "/ab"]);
    }
}
