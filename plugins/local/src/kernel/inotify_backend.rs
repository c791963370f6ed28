//! The inotify backend: a watch on every directory under the root (the `inotify` crate). A new
//! directory (created or moved in) gets watches for its whole subtree before the state walks it,
//! so files created before the watch are found by the walk and later ones by the watch. A
//! directory moved away loses its watches (its new place, if under the root, gets new ones). An
//! overflow (`IN_Q_OVERFLOW`) re-adds watches everywhere and rescans the root; a watch that
//! cannot be added (`max_user_watches`) has its directory rescanned, and is counted. A file
//! system mounted below the root while it runs (found in the mount table, read every
//! [`MOUNT_CHECK`](crate::kernel::mounts::MOUNT_CHECK), and again right after a read that saw
//! `IN_UNMOUNT`) gets watches and
//! its directory rescanned; an unmount rescans what it uncovered. A directory shown at two
//! places below the root (a bind mount of one of the root's directories) has one watch: the
//! kernel returns the same descriptor for the same inode (inotify_add_watch(2), RETURN VALUE:
//! "If the filesystem object was already being watched (perhaps via a different link to the
//! same object), then the descriptor for the existing watch is returned"), and its events are
//! reported at every place it is watched at.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::io::unix::AsyncFd;

use crate::event::join;
use crate::event::{LocalEvent, RescanReason};
use crate::kernel::mounts::MountTable;
use crate::LocalError;

/// Counters of the inotify reader.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct InotifyCounts {
    /// Events read from the kernel.
    pub read: u64,
    /// Watches added, and those that failed.
    pub watches_added: u64,
    pub watches_failed: u64,
    /// Queue overflows (`IN_Q_OVERFLOW`).
    pub overflows: u64,
}

/// An inotify instance watching every directory under the root.
pub struct InotifyWatch {
    fd: AsyncFd<Inotify>,
    watches: Watches,
    root: PathBuf,
    /// Where each watched directory is (more than one place: shown again by a bind mount).
    by_wd: HashMap<WatchDescriptor, Vec<String>>,
    by_path: BTreeMap<String, WatchDescriptor>,
    buf: Vec<u8>,
    /// The mounts at or below the root.
    mounts: MountTable,
    /// A watched file system was unmounted (`IN_UNMOUNT`), or the root's watch went: read the
    /// mount table (and the root) now.
    check_now: bool,
    /// What was read, added and lost.
    pub counts: InotifyCounts,
    /// The last `read` stopped at its bound with events still queued.
    pub more: bool,
}

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::ATTRIB
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
        | WatchMask::DONT_FOLLOW
}

impl InotifyWatch {
    /// Watch the root and every directory below it (before any walk of it).
    pub fn open(root: &Path, out: &mut Vec<LocalEvent>) -> Result<InotifyWatch, LocalError> {
        let ino = Inotify::init().map_err(|e| LocalError::Io { what: "inotify_init".into(), source: e })?;
        let watches = ino.watches();
        // SAFETY: the Inotify owns its descriptor and keeps it open until dropped.
        let fd = unsafe { AsyncFd::register(ino) }.map_err(|e| LocalError::Io {
            what: "registering the inotify descriptor".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let mut w = InotifyWatch {
            fd,
            watches,
            root: root.to_path_buf(),
            by_wd: HashMap::new(),
            by_path: BTreeMap::new(),
            buf: vec![0u8; 256 * 1024],
            mounts: MountTable::new(root),
            check_now: false,
            counts: InotifyCounts::default(),
            more: false,
        };
        if let Err(source) = w.watch_tree("", out) {
            return Err(LocalError::Io { what: format!("inotify_add_watch {}", root.display()), source });
        }
        Ok(w)
    }

    /// Add watches for `dir` and every directory below it; a failure is a rescan of its
    /// directory. Returns why `dir` itself is not watched, if it is not.
    fn watch_tree(&mut self, dir: &str, out: &mut Vec<LocalEvent>) -> Result<(), std::io::Error> {
        let mut ok = Ok(());
        let mut stack = vec![dir.to_string()];
        while let Some(d) = stack.pop() {
            match self.watches.add(icicle_core::name::on(&self.root, &d), mask()) {
                Ok(wd) => {
                    self.counts.watches_added += 1;
                    self.watched_at(wd, &d);
                }
                Err(e) => {
                    if e.kind() != std::io::ErrorKind::NotFound && e.raw_os_error() != Some(libc::ENOTDIR) {
                        self.counts.watches_failed += 1;
                        tracing::warn!(message = "inotify watch not added; the directory is rescanned instead", dir = %d, error = %e);
                        out.push(LocalEvent::Rescan(d.clone(), RescanReason::WatchFailed));
                    }
                    if d == dir {
                        ok = Err(e);
                    }
                    continue;
                }
            }
            let Ok(rd) = std::fs::read_dir(icicle_core::name::on(&self.root, &d)) else { continue };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(join(&d, &crate::event::name_text(e.file_name().as_encoded_bytes())));
                }
            }
        }
        ok
    }

    /// Directory `d` is watched by `wd`. A descriptor already known at other places is the same
    /// directory: those places still showing it are kept (a bind mount), the others were left
    /// by a move whose events were lost.
    fn watched_at(&mut self, wd: WatchDescriptor, d: &str) {
        use std::os::unix::fs::MetadataExt;
        let root = &self.root;
        let id = |p: &str| std::fs::symlink_metadata(icicle_core::name::on(root, p)).ok().map(|m| (m.dev(), m.ino()));
        let places = self.by_wd.entry(wd.clone()).or_default();
        if !places.iter().any(|p| p == d) {
            if !places.is_empty() {
                let now = id(d);
                let by_path = &mut self.by_path;
                places.retain(|p| {
                    let same = now.is_some() && id(p) == now;
                    if !same && by_path.get(p) == Some(&wd) {
                        by_path.remove(p);
                    }
                    same
                });
            }
            places.push(d.to_string());
        }
        self.by_path.insert(d.to_string(), wd);
    }

    /// Forget the watches of `dir` and everything below it (it moved away or was deleted).
    fn unwatch_tree(&mut self, dir: &str) {
        // A range of the index by path: `rm -r` of many directories costs each one its subtree,
        // not a scan of every watch.
        let below = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        let mut gone: Vec<String> = self
            .by_path
            .range::<str, _>((std::ops::Bound::Included(below.as_str()), std::ops::Bound::Unbounded))
            .take_while(|(p, _)| p.starts_with(&below))
            .map(|(p, _)| p.clone())
            .collect();
        gone.push(dir.to_string());
        for p in gone {
            let Some(wd) = self.by_path.remove(&p) else { continue };
            // The same directory still watched at another place keeps its watch.
            let places = self.by_wd.get_mut(&wd);
            if let Some(places) = places {
                places.retain(|q| *q != p);
                if !places.is_empty() {
                    continue;
                }
            }
            self.by_wd.remove(&wd);
            let _ = self.watches.remove(wd);
        }
    }

    /// Wait until events can be read.
    pub async fn readable(&self) -> Result<(), LocalError> {
        let mut g =
            self.fd.readable().await.map_err(|e| LocalError::Io { what: "waiting for inotify".into(), source: e })?;
        g.clear_ready();
        Ok(())
    }

    /// Read what is queued now (without waiting) into `out`; returns the events read. The
    /// mount table is read when its period has passed, and again at once after `IN_UNMOUNT`.
    pub fn read(&mut self, out: &mut Vec<LocalEvent>) -> Result<usize, LocalError> {
        let mut total = self.check_mounts(false, out);
        total += self.read_queued(out)?;
        if std::mem::take(&mut self.check_now) {
            total += self.check_mounts(true, out);
        }
        Ok(total)
    }

    /// Mounts that came or went (read when due, or `now`): their directories are watched before
    /// the state walks them, then rescanned. Returns the events added.
    fn check_mounts(&mut self, now: bool, out: &mut Vec<LocalEvent>) -> usize {
        let Some(changes) = self.mounts.changes(now) else { return 0 };
        let before = out.len();
        if changes.root_changed {
            // The watches follow the old root: watch what is at its path now (nothing, perhaps).
            self.unwatch_tree("");
            let _ = self.watch_tree("", out);
        }
        for (_, m) in changes.came.iter().chain(&changes.went) {
            if let Some(rel) = m.strip_prefix(&self.root).ok().map(|r| icicle_core::name::from_os(r).into_owned()) {
                let _ = self.watch_tree(&rel, out);
            }
        }
        self.mounts.rescans(&changes, out);
        out.len() - before
    }

    /// Read the queued events.
    fn read_queued(&mut self, out: &mut Vec<LocalEvent>) -> Result<usize, LocalError> {
        let mut total = 0;
        self.more = false;
        for reads in 0.. {
            // Under a steady stream the queue never drains: hand back a bounded amount.
            if reads == crate::MAX_READS_PER_POLL {
                self.more = true;
                return Ok(total);
            }
            let mut buf = std::mem::take(&mut self.buf);
            let events: Vec<(WatchDescriptor, EventMask, Option<Vec<u8>>)> = match self
                .fd
                .get_mut()
                .read_events(&mut buf)
            {
                Ok(evs) => evs.map(|e| (e.wd, e.mask, e.name.map(|n| n.as_bytes().to_vec()))).collect(),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::Interrupted => {
                    Vec::new()
                }
                Err(e) => {
                    self.buf = buf;
                    return Err(LocalError::Io { what: "reading inotify events".into(), source: e });
                }
            };
            self.buf = buf;
            if events.is_empty() {
                return Ok(total);
            }
            total += events.len();
            for (wd, m, name) in events {
                self.one(wd, m, name, out);
            }
        }
        Ok(total)
    }

    fn one(&mut self, wd: WatchDescriptor, m: EventMask, name: Option<Vec<u8>>, out: &mut Vec<LocalEvent>) {
        self.counts.read += 1;
        if m.contains(EventMask::Q_OVERFLOW) {
            self.counts.overflows += 1;
            tracing::warn!(message = "inotify queue overflow: events were lost; re-adding watches and rescanning the root", root = %self.root.display());
            let _ = self.watch_tree("", out);
            out.push(LocalEvent::Rescan(String::new(), RescanReason::Overflow));
            return;
        }
        if m.contains(EventMask::UNMOUNT) {
            self.check_now = true;
            return;
        }
        if m.contains(EventMask::IGNORED) {
            // The root's own watch is gone (removed, or moved away and its watch dropped): a
            // directory made again there may have the same inode, which the check would miss.
            if self.by_wd.get(&wd).is_some_and(|ps| ps.iter().any(|p| p.is_empty())) {
                self.mounts.force_root_check();
                self.check_now = true;
            }
            for p in self.by_wd.remove(&wd).unwrap_or_default() {
                if self.by_path.get(&p) == Some(&wd) {
                    self.by_path.remove(&p);
                }
            }
            return;
        }
        tracing::trace!(message = "inotify event", wd = ?wd, mask = ?m, name = %name.as_deref().map(|n| n.escape_ascii().to_string()).unwrap_or_default(), dir = ?self.by_wd.get(&wd));
        let Some(dirs) = self.by_wd.get(&wd).cloned() else { return };
        for dir in dirs {
            self.one_at(dir, m, name.as_deref(), out);
        }
    }

    /// One event of the directory watched at `dir`.
    fn one_at(&mut self, dir: String, m: EventMask, name: Option<&[u8]>, out: &mut Vec<LocalEvent>) {
        let path = match name {
            Some(n) => join(&dir, &crate::event::name_text(n)),
            None => dir,
        };
        let dir_entry = m.contains(EventMask::ISDIR) && name.is_some();
        if dir_entry && m.intersects(EventMask::MOVED_FROM | EventMask::DELETE) {
            self.unwatch_tree(&path);
            out.push(LocalEvent::Directory(path));
        } else if dir_entry && m.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
            // Watched before the state walks it (at the emit, as a new directory): what was
            // created in it before the watches existed is found by the walk, later changes by
            // the watches.
            let _ = self.watch_tree(&path, out);
            out.push(LocalEvent::Directory(path));
        } else {
            out.push(LocalEvent::Changed(path));
        }
    }
}

#[cfg(test)]
mod tests {
    /// A directory's watches go with it, and no sibling's whose name only starts the same.
    #[tokio::test]
    async fn unwatching_a_tree_leaves_its_siblings() {
        let t = tempfile::tempdir().unwrap();
        for d in ["a/b/c", "a-x/b", "a.y", "ab", "z"] {
            std::fs::create_dir_all(t.path().join(d)).unwrap();
        }
        let mut w = super::InotifyWatch::open(t.path(), &mut Vec::new()).unwrap();
        w.unwatch_tree("a");
        let left: Vec<&str> = w.by_path.keys().map(String::as_str).collect();
        assert_eq!(left, ["", "a-x", "a-x/b", "a.y", "ab", "z"]);
        assert_eq!(w.by_wd.len(), left.len());
        w.unwatch_tree("");
        assert!(w.by_path.is_empty() && w.by_wd.is_empty());
    }
}
