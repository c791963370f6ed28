//! The GPFS stand-in: the same workloads as the Lustre stand-in, written as the clustered watch
//! folder (`mmwatch`) events Storage Scale would publish to Kafka — one JSON object per line,
//! with metadata from `lstat` right after each operation — and produced into a real broker.
//!
//! The records are written the way the producers write them ([`Producer`]; the shapes and
//! their sources are in `testkit/corpus/gpfs/` and docs/formats-read.md), not the way the
//! monitor's parser would like them: every value a string, times as
//! `2024-03-13_16:44:58.423+0800` in the producing node's offset, `permissions` as the octal
//! `gpfs_mode_t` with its 0x02000000 bit, and, from some producers, a trailing `/` on a path.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use icicle_plugins_gpfs::{EventKind, Meta};
use icicle_plugins_lustre::changelog::{ChangelogRecord, Fid, RecordType};
use icicle_plugins_lustre::namespace::Namespace;

/// Writes watch-folder events for the changelog records a workload journals.
pub struct GpfsJournal {
    out: fs::File,
    /// The GPFS path of the workload root (event paths are absolute).
    pub fs_root: String,
    root: PathBuf,
    real: bool,
    next_cookie: u64,
    /// The last metadata seen per path (removed objects keep their inode).
    last: HashMap<String, Meta>,
    /// Write opens per object: their CLOSE is IN_CLOSE_WRITE (after IN_MODIFY).
    writing: HashMap<Fid, bool>,
    /// Events written.
    pub events: u64,
    /// (record index, events written after it) per record: which record an event came from.
    pub ends: Vec<(u64, u64)>,
    /// Without the file system: the last record that changed each object's metadata, shown as
    /// its ctime, so that events of a change differ from those before it.
    changed: HashMap<Fid, i64>,
    /// The producers whose record shapes are written, one drawn per event (default: every
    /// real shape, [`producer::REAL`]: a cluster whose nodes run different versions).
    pub producers: Vec<Producer>,
}

mod producer;
pub use producer::{pool_of, scale_time, EventRecord, Producer};

impl GpfsJournal {
    /// Append events to `file`; paths are `fs_root` + the workload path.
    pub fn open(file: &Path, root: &Path, fs_root: &str, real: bool) -> std::io::Result<GpfsJournal> {
        let out = fs::OpenOptions::new().create(true).append(true).open(file)?;
        let next_cookie = fs::read_to_string(file).map(|s| s.lines().count() as u64 + 1).unwrap_or(1);
        Ok(GpfsJournal {
            out,
            fs_root: fs_root.trim_end_matches('/').to_string(),
            root: root.to_path_buf(),
            real,
            next_cookie,
            last: HashMap::new(),
            writing: HashMap::new(),
            events: 0,
            ends: Vec::new(),
            changed: HashMap::new(),
            producers: producer::REAL.to_vec(),
        })
    }

    fn meta(&mut self, path: &str, fid: Fid, is_dir: bool) -> Meta {
        let m = if self.real {
            fs::symlink_metadata(self.root.join(path.trim_start_matches('/'))).ok().map(|md| Meta::from_metadata(&md))
        } else {
            None
        };
        let m = m.unwrap_or_else(|| {
            // What was last written for this path, if it is this object's (a path a directory
            // rename left behind may have named another; an inode is the object's for good).
            let prev = self.last.get(path).copied().filter(|m| m.inode == fid.oid as u64);
            let mut m = prev.unwrap_or(Meta {
                inode: fid.oid as u64,
                mode: if is_dir { 0o040755 } else { 0o100644 },
                ..Default::default()
            });
            if let Some(c) = self.changed.get(&fid) {
                m.ctime = *c;
            }
            m
        });
        self.last.insert(path.to_string(), m);
        m
    }

    fn write(
        &mut self,
        kind: EventKind,
        path: &str,
        meta: Meta,
        cookie: u64,
        raw_event: Option<&str>,
    ) -> std::io::Result<()> {
        let event = raw_event.unwrap_or(kind.token());
        // A splitmix step of the event count: which producer, node and milliseconds.
        let salt = icicle_core::rng::Rng::new(self.next_cookie.wrapping_mul(0x9E37) ^ self.events).next_u64();
        let producer = self
            .producers
            .get((salt % self.producers.len().max(1) as u64) as usize)
            .copied()
            .unwrap_or(Producer::Scale52);
        let full = format!("{}{}", self.fs_root, path);
        let rec =
            EventRecord { event, path: &full, meta, cookie, now: icicle_core::time::now_epoch(), salt: salt >> 8 };
        let mut line = producer.render(&rec);
        line.push('\n');
        self.events += 1;
        self.out.write_all(line.as_bytes())
    }

    /// The events for `rec`, given the namespace before the record is applied.
    pub fn record(&mut self, rec: &ChangelogRecord, ns: &Namespace) -> std::io::Result<()> {
        if !self.real {
            use RecordType::*;
            let changed: Vec<Fid> = match rec.kind {
                Mark | Open | Nopen | Gxatr | Unknown(..) => vec![],
                Close if rec.flags == 0 => vec![],
                Renme | Rnmto => rec.source.into_iter().chain((!rec.target.is_zero()).then_some(rec.target)).collect(),
                _ => vec![rec.target],
            };
            for f in changed {
                self.changed.insert(f, rec.index as i64);
            }
        }
        let r = self.events_of(rec, ns);
        self.ends.push((rec.index, self.events));
        r
    }

    fn events_of(&mut self, rec: &ChangelogRecord, ns: &Namespace) -> std::io::Result<()> {
        use RecordType::*;
        let path_of = |f: &Fid| ns.path(f).map(str::to_string);
        let child = |p: Option<Fid>, n: Option<&str>| -> Option<String> {
            let pp = ns.path(&p?)?;
            let n = n?;
            Some(if pp == "/" { format!("/{n}") } else { format!("{pp}/{n}") })
        };
        match &rec.kind {
            Creat | Mknod | Slink | Mkdir => {
                let Some(p) = child(rec.parent, rec.name.as_deref()) else { return Ok(()) };
                let m = self.meta(&p, rec.target, rec.kind == Mkdir);
                self.write(EventKind::Created, &p, m, 0, None)?;
                // A nested create also modifies its directory (formats.md §4.2).
                match (rec.parent, rec.parent.as_ref().and_then(&path_of)) {
                    (Some(pf), Some(pp)) if pp != "/" => {
                        let pm = self.meta(&pp, pf, true);
                        self.write(EventKind::Modified, &pp, pm, 0, Some("IN_MODIFY"))
                    }
                    _ => Ok(()),
                }
            }
            Hlink => {
                let Some(p) = child(rec.parent, rec.name.as_deref()) else { return Ok(()) };
                let m = self.meta(&p, rec.target, false);
                self.write(EventKind::Created, &p, m, 0, None)?;
                if let Some(other) = path_of(&rec.target) {
                    let m = self.meta(&other, rec.target, false);
                    self.write(EventKind::Modified, &other, m, 0, Some("IN_ATTRIB"))?;
                }
                Ok(())
            }
            Unlnk | Rmdir => {
                let Some(p) = child(rec.parent, rec.name.as_deref()) else { return Ok(()) };
                let mut m = self
                    .last
                    .remove(&p)
                    .filter(|m| m.inode == rec.target.oid as u64)
                    .unwrap_or(Meta { inode: rec.target.oid as u64, ..Default::default() });
                m.mode = if rec.kind == Rmdir { 0o040755 } else { m.mode & !0o170000 | 0o100000 };
                self.write(EventKind::Removed, &p, m, 0, None)?;
                if rec.kind == Unlnk {
                    // Other links remain: their link count (and ctime) changed.
                    if let Some(obj) = ns.by_fid.get(&rec.target) {
                        for other in obj.paths.iter().filter(|o| **o != p).cloned().collect::<Vec<_>>() {
                            let m = self.meta(&other, rec.target, false);
                            self.write(EventKind::Modified, &other, m, 0, Some("IN_ATTRIB"))?;
                        }
                    }
                }
                Ok(())
            }
            Renme | Rnmto => {
                let (Some(old), Some(new)) =
                    (child(rec.source_parent, rec.source_name.as_deref()), child(rec.parent, rec.name.as_deref()))
                else {
                    return Ok(());
                };
                let src = rec.source.unwrap_or_default();
                let is_dir = ns.by_fid.get(&src).is_some_and(|o| o.is_dir);
                // Without the file system, the moved object keeps its own metadata (not that of
                // a target it replaces).
                let moved = self.last.remove(&old).filter(|m| m.inode == src.oid as u64);
                self.last.remove(&new);
                if let Some(m) = moved {
                    self.last.insert(new.clone(), m);
                }
                let m = self.meta(&new, src, is_dir);
                let cookie = self.next_cookie;
                self.next_cookie += 1;
                self.write(EventKind::MovedFrom, &old, m, cookie, None)?;
                self.write(EventKind::MovedTo, &new, m, cookie, None)?;
                // A replaced file that keeps other links lost one: their link count and ctime
                // changed (as for an unlink).
                if !rec.target.is_zero() {
                    if let Some(obj) = ns.by_fid.get(&rec.target) {
                        for other in obj.paths.iter().filter(|o| **o != new && **o != old).cloned().collect::<Vec<_>>()
                        {
                            let m = self.meta(&other, rec.target, false);
                            self.write(EventKind::Modified, &other, m, 0, Some("IN_ATTRIB"))?;
                        }
                    }
                }
                Ok(())
            }
            Open => {
                let Some(p) = path_of(&rec.target) else { return Ok(()) };
                self.writing.insert(rec.target, rec.open_mode.as_deref().is_some_and(|m| m.contains('w')));
                let m = self.meta(&p, rec.target, false);
                self.write(EventKind::Ignored, &p, m, 0, Some("IN_OPEN"))
            }
            Close => {
                let Some(p) = path_of(&rec.target) else { return Ok(()) };
                let m = self.meta(&p, rec.target, false);
                if self.writing.remove(&rec.target).unwrap_or(false) {
                    self.write(EventKind::Modified, &p, m, 0, Some("IN_MODIFY"))?;
                    self.write(EventKind::Modified, &p, m, 0, Some("IN_CLOSE_WRITE"))
                } else {
                    // A read: the access (its atime), then the close.
                    self.write(EventKind::Modified, &p, m, 0, Some("IN_ACCESS"))?;
                    self.write(EventKind::Ignored, &p, m, 0, Some("IN_CLOSE_NOWRITE"))
                }
            }
            Trunc => {
                let Some(p) = path_of(&rec.target) else { return Ok(()) };
                let m = self.meta(&p, rec.target, false);
                self.write(EventKind::Modified, &p, m, 0, Some("IN_MODIFY"))
            }
            Mark | Nopen | Gxatr | Unknown(..) => Ok(()),
            _ => {
                let Some(p) = path_of(&rec.target) else { return Ok(()) };
                let is_dir = ns.by_fid.get(&rec.target).is_some_and(|o| o.is_dir);
                let m = self.meta(&p, rec.target, is_dir);
                self.write(EventKind::Modified, &p, m, 0, Some("IN_ATTRIB"))
            }
        }
    }
}

/// The `(key, value)` messages of an events file from line `skip` on: keyed by inode, so one
/// object's events keep their order within a partition.
pub fn messages(file: &Path, skip: usize) -> std::io::Result<Vec<(String, String)>> {
    let text = fs::read_to_string(file)?;
    Ok(text
        .lines()
        .skip(skip)
        .map(|l| {
            let key = serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| {
                    v["inode"].as_str().map(str::to_string).or_else(|| v["inode"].as_u64().map(|n| n.to_string()))
                })
                .unwrap_or_default();
            (key, l.to_string())
        })
        .collect())
}
