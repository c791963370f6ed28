//! Whole directory trees going away, as projects end: the case a monitor started on an
//! existing file system meets first (the trees predate it, so it learns them only by name).

use std::io::Write;

use super::{join, pick, split, Workload};

impl Workload {
    /// `n` times, a random directory (those that predate monitoring included) goes away with
    /// everything below it: removed; or renamed, a file in it removed, renamed again (maybe
    /// into another directory) and removed; or renamed into another directory and left.
    pub fn retire_trees(&mut self, n: usize) -> std::io::Result<()> {
        for _ in 0..n {
            let dirs: Vec<String> = self.dirs().into_iter().filter(|d| d != "/").collect();
            if dirs.is_empty() {
                break;
            }
            let d = pick(&mut self.rng, &dirs);
            match self.rng.below(3) {
                0 => self.remove_tree(&d)?,
                1 => {
                    let first = join(&split(&d).0, &self.unique("retired "));
                    self.rename(&d, &first)?;
                    let inside: Vec<String> =
                        self.files().into_iter().filter(|f| f.starts_with(&format!("{first}/"))).collect();
                    if !inside.is_empty() {
                        let f = pick(&mut self.rng, &inside);
                        self.unlink(&f)?;
                    }
                    let elsewhere: Vec<String> = self
                        .dirs()
                        .into_iter()
                        .filter(|p| p != &first && !p.starts_with(&format!("{first}/")))
                        .collect();
                    let to = join(&pick(&mut self.rng, &elsewhere), &self.unique("gone "));
                    self.rename(&first, &to)?;
                    self.remove_tree(&to)?;
                }
                _ => {
                    let elsewhere: Vec<String> =
                        self.dirs().into_iter().filter(|p| p != &d && !p.starts_with(&format!("{d}/"))).collect();
                    let to = join(&pick(&mut self.rng, &elsewhere), &self.unique("kept "));
                    self.rename(&d, &to)?;
                }
            }
        }
        self.journal.flush()
    }
}
