//! Parsing what a fanotify group reports with `FAN_REPORT_DFID_NAME | FAN_REPORT_FID`: each
//! event's metadata, then info records (a directory handle plus a name, or the object's own
//! handle) turned into paths below the root. Handles are resolved through a caller's lookup
//! (`open_by_handle_at` in the monitor) and cached; a directory's move prunes the cached paths
//! below its old name. A path that bind mounts show again below the root is reported at each
//! place ([`Views`]); a change outside the root to a file with more than one link is reported
//! as its inode ([`LocalEvent::Object`]), whose names inside the root the state knows.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lru::LruCache;

use crate::event::{join, LocalEvent, RescanReason};
use crate::kernel::handle_cache::{HandleCache, Place};
use crate::kernel::views::Views;

/// Counters of the fanotify reader.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FanotifyCounts {
    /// Events read from the kernel.
    pub read: u64,
    /// Events about objects outside the root (the mark covers the whole file system).
    pub outside_root: u64,
    /// Events whose handle could not be resolved (the directory was deleted since).
    pub unresolved: u64,
    /// Handles resolved with `open_by_handle_at`.
    pub handle_lookups: u64,
    /// Queue overflows (`FAN_Q_OVERFLOW`).
    pub overflows: u64,
    /// Records cut short or malformed (the rest of the read is skipped).
    pub malformed: u64,
    /// Cached directory paths evicted (least recently used) to stay within the capacity.
    pub evicted: u64,
    /// File systems marked (the root's, and those mounted below it).
    pub marked_file_systems: u64,
    /// File systems mounted below the root that could not be marked (their changes are not
    /// reported).
    pub unmarked_mounts: u64,
    /// Events outside the root on a file with more than one link (its names inside the root
    /// compared).
    pub outside_links: u64,
    /// Events reported again at another place below the root that shows the same directory
    /// (a bind mount).
    pub aliased: u64,
}

/// Directory handles whose places are cached, by default.
pub const DEFAULT_LRU_CAPACITY: usize = 100_000;

/// Objects outside the root whose link count is remembered, at most.
const LINKED_CAPACITY: usize = 8192;

/// Turns a read's bytes into [`LocalEvent`]s.
pub struct EventParser {
    root: PathBuf,
    /// Handle bytes (fsid + file handle) to where the directory is, least recently used
    /// evicted.
    cache: HandleCache,
    /// Object handles met outside the root: the inode number of those with more than one link.
    /// A link added to a file is reported as an event carrying only the object's handle
    /// (`fsnotify_link_count`, include/linux/fsnotify.h), which forgets it here.
    linked: LruCache<Vec<u8>, Option<u64>>,
    /// The places below the root that show one directory (bind mounts).
    views: Arc<Views>,
    /// What was read and dropped.
    pub counts: FanotifyCounts,
}

/// What a handle names now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Its absolute path (empty unless asked for).
    pub path: PathBuf,
    /// Its inode number.
    pub ino: u64,
    /// Not a directory, and more than one link.
    pub linked: bool,
}

/// Resolves handle bytes (the 8-byte fsid, then the kernel's `struct file_handle`) to the
/// object as it is now, its current absolute path too when asked (`true`); `None` when it no
/// longer exists or its file system is not marked.
pub type Lookup<'a> = dyn FnMut(&[u8], bool) -> Option<Found> + 'a;

impl EventParser {
    /// A parser for events under `root`, caching the places of at most `lru_capacity`
    /// directory handles.
    pub fn new(root: &Path, lru_capacity: usize) -> EventParser {
        EventParser {
            root: root.to_path_buf(),
            cache: HandleCache::new(lru_capacity),
            linked: LruCache::new(NonZeroUsize::new(LINKED_CAPACITY).unwrap_or(NonZeroUsize::MIN)),
            views: Arc::default(),
            counts: FanotifyCounts::default(),
        }
    }

    /// Forget every cached handle (resolved again as events come).
    pub fn forget_handles(&mut self) {
        self.cache.clear();
        self.linked.clear();
    }

    /// The places below the root that show one directory, from now on.
    pub fn set_views(&mut self, views: Arc<Views>) {
        self.views = views;
    }

    /// Parse the events in `data` (whole events, as one read returns them) into `out`;
    /// returns how many were read. A descriptor an event carries goes to `fds` (the caller
    /// closes it: only the kernel's are real).
    pub fn parse(
        &mut self,
        data: &[u8],
        out: &mut Vec<LocalEvent>,
        fds: &mut Vec<i32>,
        lookup: &mut Lookup<'_>,
    ) -> usize {
        let meta_len = std::mem::size_of::<libc::fanotify_event_metadata>();
        let mut off = 0;
        let mut n = 0;
        while off < data.len() {
            if off + meta_len > data.len() {
                self.counts.malformed += 1;
                break;
            }
            // SAFETY: at least meta_len bytes remain; read_unaligned copes with alignment.
            let m: libc::fanotify_event_metadata = unsafe { std::ptr::read_unaligned(data[off..].as_ptr().cast()) };
            let len = m.event_len as usize;
            if len < meta_len || off + len > data.len() {
                self.counts.malformed += 1;
                break;
            }
            if m.fd >= 0 {
                fds.push(m.fd);
            }
            n += 1;
            self.counts.read += 1;
            let event = &data[off..off + len];
            off += len;
            if m.mask & libc::FAN_Q_OVERFLOW != 0 {
                self.counts.overflows += 1;
                tracing::warn!(message = "fanotify queue overflow: events were lost; rescanning the root", root = %self.root.display());
                // A directory move among the lost events would leave cached names stale.
                self.cache.clear();
                out.push(LocalEvent::Rescan(String::new(), RescanReason::Overflow));
                continue;
            }
            let infos = &event[(m.metadata_len as usize).min(event.len())..];
            let ondir = m.mask & libc::FAN_ONDIR != 0;
            let (place, linked) = self.event_place(infos, ondir, lookup);
            tracing::trace!(message = "fanotify event", mask = format_args!("{:#x}", m.mask), place = ?place);
            let dir_entry = ondir
                && m.mask & (libc::FAN_CREATE | libc::FAN_MOVED_TO | libc::FAN_MOVED_FROM | libc::FAN_DELETE) != 0;
            match &place {
                Some(Place::Inside(p)) => {
                    let event = |p: String| if dir_entry { LocalEvent::Directory(p) } else { LocalEvent::Changed(p) };
                    for a in self.views.aliases(p) {
                        self.counts.aliased += 1;
                        out.push(event(a));
                    }
                    out.push(event(p.clone()));
                }
                Some(Place::Outside) => self.counts.outside_root += 1,
                None => self.counts.unresolved += 1,
            }
            if let Some(ino) = linked {
                out.push(LocalEvent::Object(ino));
            }
            // A directory that left (moved away or removed) leaves stale cached places below
            // its name; one removed outside the root cannot come back inside.
            let outside = matches!(place, Some(Place::Outside));
            if dir_entry && (m.mask & libc::FAN_MOVED_FROM != 0 || (m.mask & libc::FAN_DELETE != 0 && !outside)) {
                self.forget_below(place.as_ref());
            }
        }
        n
    }

    /// A directory left the name `place` (moved away or removed): cached places at or below
    /// it are stale. One that left from outside the root may be inside now: such cached places
    /// go; when the old name is not known at all, every cached place may be stale.
    fn forget_below(&mut self, place: Option<&Place>) {
        match place {
            Some(Place::Inside(dir)) if !dir.is_empty() => self.cache.forget_below(dir),
            Some(p @ Place::Outside) => self.cache.forget_place(p),
            _ => self.cache.clear(),
        }
    }

    /// Where an event's info records name (`None` when its handle no longer resolves), and the
    /// inode of a file with more than one link that the event names outside the root or only
    /// by its own handle (its other names may be the index's).
    fn event_place(&mut self, infos: &[u8], ondir: bool, lookup: &mut Lookup<'_>) -> (Option<Place>, Option<u64>) {
        let (named, object) = self.records(infos);
        let Some((handle, name)) = named else {
            // Only the object (a self event, a link count change): one of its names.
            let Some(object) = object else { return (None, None) };
            self.linked.pop(object);
            return match self.lookup(object, lookup) {
                Some((place, found)) => (Some(place), found.linked.then_some(found.ino)),
                None => (None, None),
            };
        };
        let place = match self.resolve(handle, lookup) {
            Some(Place::Inside(d)) => match name {
                None | Some(b"" | b".") => Some(Place::Inside(d)),
                Some(name) => Some(Place::Inside(join(&d, &crate::event::name_text(name)))),
            },
            other => other,
        };
        let linked = match (&place, object) {
            (Some(Place::Outside), Some(object)) if !ondir => self.linked_outside(object, lookup),
            _ => None,
        };
        (place, linked)
    }

    /// The inode of a file named outside the root when it has more than one link (remembered).
    fn linked_outside(&mut self, object: &[u8], lookup: &mut Lookup<'_>) -> Option<u64> {
        let ino = match self.linked.get(object) {
            Some(ino) => *ino,
            None => {
                self.counts.handle_lookups += 1;
                let ino = lookup(object, false).and_then(|f| f.linked.then_some(f.ino));
                self.linked.push(object.to_vec(), ino);
                ino
            }
        };
        self.counts.outside_links += u64::from(ino.is_some());
        ino
    }

    /// An event's directory handle and name (none for DFID alone), and the object's handle.
    fn records<'d>(&mut self, mut infos: &'d [u8]) -> (Option<Named<'d>>, Option<&'d [u8]>) {
        let (mut named, mut object) = (None, None);
        while infos.len() >= 4 {
            let (kind, len) = (infos[0], u16::from_ne_bytes([infos[2], infos[3]]) as usize);
            if len < 4 || len > infos.len() {
                self.counts.malformed += 1;
                break;
            }
            let rec = &infos[..len];
            infos = &infos[len..];
            // header (4) + fsid (8) + file_handle { handle_bytes: u32, handle_type: i32, f_handle }
            if rec.len() < 20 {
                continue;
            }
            let hb = u32::from_ne_bytes([rec[12], rec[13], rec[14], rec[15]]) as usize;
            let Some(handle) = rec.get(4..20 + hb) else {
                self.counts.malformed += 1;
                continue;
            };
            match kind {
                libc::FAN_EVENT_INFO_TYPE_DFID_NAME if named.is_none() => {
                    let tail = &rec[20 + hb..];
                    named = Some((handle, Some(&tail[..tail.iter().position(|b| *b == 0).unwrap_or(tail.len())])));
                }
                libc::FAN_EVENT_INFO_TYPE_DFID if named.is_none() => named = Some((handle, None)),
                libc::FAN_EVENT_INFO_TYPE_FID => object = Some(handle),
                _ => {}
            }
        }
        (named, object)
    }

    /// A directory handle's place, cached.
    fn resolve(&mut self, handle: &[u8], lookup: &mut Lookup<'_>) -> Option<Place> {
        if let Some(p) = self.cache.get(handle) {
            return Some(p);
        }
        let (p, _) = self.lookup(handle, lookup)?;
        if self.cache.insert(handle.to_vec(), p.clone()) {
            self.counts.evicted += 1;
        }
        Some(p)
    }

    /// The object's place now, and what it is (`None`: deleted or gone).
    fn lookup(&mut self, handle: &[u8], lookup: &mut Lookup<'_>) -> Option<(Place, Found)> {
        self.counts.handle_lookups += 1;
        let found = lookup(handle, true)?;
        let place = match found.path.strip_prefix(&self.root) {
            Ok(rel) => Place::Inside(icicle_core::name::from_os(rel).into_owned()),
            Err(_) => Place::Outside,
        };
        Some((place, found))
    }
}

/// A directory's handle and the name an event gives below it (none: the directory itself).
type Named<'d> = (&'d [u8], Option<&'d [u8]>);

#[cfg(test)]
mod tests;
