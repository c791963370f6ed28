//! A replayable namespace: FIDs and paths from a baseline plus changelog records. The
//! testkit's workload and fake `lfs` use it to answer `fid2path` the way Lustre would at
//! the moment of the call.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::changelog::{ChangelogRecord, Fid, RecordType};

/// One object: its paths (several for hard links) and whether it is a directory.
#[derive(Debug, Clone)]
pub struct Object {
    /// Its paths from the file system's root (`/a/b`), in the order they were made.
    pub paths: Vec<String>,
    /// Whether it is a directory.
    pub is_dir: bool,
}

/// FID ↔ path maps of a whole file system.
#[derive(Debug, Clone, Default)]
pub struct Namespace {
    /// Every object, by FID.
    pub by_fid: HashMap<Fid, Object>,
    /// Every path's object.
    pub by_path: HashMap<String, Fid>,
    /// The highest record index applied.
    pub last_index: Option<u64>,
    /// The highest object id seen, for minting new FIDs.
    pub max_oid: u32,
}

fn child(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

impl Namespace {
    /// An empty namespace holding only the root.
    pub fn new() -> Namespace {
        let mut ns = Namespace::default();
        ns.by_fid.insert(Fid::ROOT, Object { paths: vec!["/".into()], is_dir: true });
        ns.by_path.insert("/".into(), Fid::ROOT);
        ns
    }

    /// Load `baseline` (lines `FID<TAB>path<TAB>d|f`) and replay `journal` (changelog lines).
    pub fn load(baseline: &Path, journal: &Path) -> std::io::Result<Namespace> {
        let mut ns = Namespace::new();
        if baseline.exists() {
            for line in BufReader::new(std::fs::File::open(baseline)?).split(b'\n') {
                let line = icicle_core::name::escape(&line?).into_owned();
                let mut f = line.splitn(3, '\t');
                let (Some(fid), Some(path), Some(kind)) = (f.next(), f.next(), f.next()) else { continue };
                let Ok(fid) = Fid::parse(fid) else { continue };
                ns.add(fid, path.to_string(), kind == "d");
            }
        }
        if journal.exists() {
            let data = std::fs::read(journal)?;
            // Only complete lines: a writer may be appending the last one right now.
            let complete = match data.iter().rposition(|&b| b == b'\n') {
                Some(i) => &data[..=i],
                None => &data[..0],
            };
            // One record a line, names escaped as the monitor reads them.
            for line in complete.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let Ok(text) = std::str::from_utf8(line) else { continue };
                if let Ok(r) = ChangelogRecord::parse(text) {
                    ns.apply(&r);
                }
            }
        }
        Ok(ns)
    }

    /// Add an object at `path`.
    pub fn add(&mut self, fid: Fid, path: String, is_dir: bool) {
        self.max_oid = self.max_oid.max(fid.oid);
        self.by_path.insert(path.clone(), fid);
        self.by_fid.entry(fid).or_insert_with(|| Object { paths: Vec::new(), is_dir }).paths.push(path);
    }

    fn remove_path(&mut self, path: &str) {
        if let Some(fid) = self.by_path.remove(path) {
            if let Some(o) = self.by_fid.get_mut(&fid) {
                o.paths.retain(|p| p != path);
                if o.paths.is_empty() {
                    self.by_fid.remove(&fid);
                }
            }
        }
    }

    /// The first path of `fid`.
    pub fn path(&self, fid: &Fid) -> Option<&str> {
        self.by_fid.get(fid).and_then(|o| o.paths.first()).map(String::as_str)
    }

    /// Apply one record.
    pub fn apply(&mut self, r: &ChangelogRecord) {
        use RecordType::*;
        self.last_index = Some(self.last_index.map_or(r.index, |l| l.max(r.index)));
        for f in [Some(r.target), r.parent, r.source, r.source_parent].into_iter().flatten() {
            if f.seq == Fid::ROOT.seq || f.seq >= 0x2_0000_0400 {
                self.max_oid = self.max_oid.max(f.oid);
            }
        }
        let at = |ns: &Namespace, p: Option<Fid>, n: Option<&str>| -> Option<String> { Some(child(ns.path(&p?)?, n?)) };
        match r.kind {
            Creat | Mknod | Slink | Mkdir | Hlink => {
                if let Some(path) = at(self, r.parent, r.name.as_deref()) {
                    self.add(r.target, path, r.kind == Mkdir);
                }
            }
            Unlnk | Rmdir => {
                if let Some(path) = at(self, r.parent, r.name.as_deref()) {
                    self.remove_path(&path);
                }
            }
            Renme => {
                let (Some(old), Some(new)) =
                    (at(self, r.source_parent, r.source_name.as_deref()), at(self, r.parent, r.name.as_deref()))
                else {
                    return;
                };
                if !r.target.is_zero() {
                    self.remove_path(&new);
                }
                let Some(src) = r.source else { return };
                let is_dir = self.by_fid.get(&src).is_some_and(|o| o.is_dir);
                self.by_path.remove(&old);
                self.by_path.insert(new.clone(), src);
                if let Some(o) = self.by_fid.get_mut(&src) {
                    for p in o.paths.iter_mut() {
                        if *p == old {
                            *p = new.clone();
                        }
                    }
                }
                if is_dir {
                    let prefix = format!("{old}/");
                    let moved: Vec<(String, Fid)> = self
                        .by_path
                        .iter()
                        .filter(|(p, _)| p.starts_with(&prefix))
                        .map(|(p, f)| (p.clone(), *f))
                        .collect();
                    for (p, f) in moved {
                        let np = format!("{new}/{}", &p[prefix.len()..]);
                        self.by_path.remove(&p);
                        self.by_path.insert(np.clone(), f);
                        if let Some(o) = self.by_fid.get_mut(&f) {
                            for x in o.paths.iter_mut() {
                                if *x == p {
                                    *x = np.clone();
                                }
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
}
