//! Parsing what a fanotify group reports with `FAN_REPORT_DFID_NAME | FAN_REPORT_FID`: each
//! event's metadata, then info records (a directory handle plus a name, or the object's own
//! handle) turned into paths below the root. Handles are resolved through a caller's lookup
//! (`open_by_handle_at` in the monitor) and cached; a directory's move prunes the cached paths
//! below its old name.

use std::path::{Path, PathBuf};

use crate::event::{LocalEvent, RescanReason};
use crate::handle_cache::{HandleCache, Place};

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
}

/// Directory handles whose places are cached, by default.
pub const DEFAULT_LRU_CAPACITY: usize = 100_000;

/// Turns a read's bytes into [`LocalEvent`]s.
pub struct EventParser {
    root: PathBuf,
    /// Handle bytes (fsid + file handle) to where the directory is, least recently used
    /// evicted.
    cache: HandleCache,
    /// What was read and dropped.
    pub counts: FanotifyCounts,
}

/// Resolves handle bytes (the 8-byte fsid, then the kernel's `struct file_handle`) to the
/// object's current absolute path; `None` when it no longer exists or its file system is not
/// marked.
pub type Lookup<'a> = dyn FnMut(&[u8]) -> Option<PathBuf> + 'a;

impl EventParser {
    /// A parser for events under `root`, caching the places of at most `lru_capacity`
    /// directory handles.
    pub fn new(root: &Path, lru_capacity: usize) -> EventParser {
        EventParser { root: root.to_path_buf(), cache: HandleCache::new(lru_capacity), counts: FanotifyCounts::default() }
    }

    /// Forget every cached handle (resolved again as events come).
    pub fn forget_handles(&mut self) {
        self.cache.clear();
    }

    /// Parse the events in `data` (whole events, as one read returns them) into `out`;
    /// returns how many were read. A descriptor an event carries goes to `fds` (the caller
    /// closes it: only the kernel's are real).
    pub fn parse(&mut self, data: &[u8], out: &mut Vec<LocalEvent>, fds: &mut Vec<i32>, lookup: &mut Lookup<'_>) -> usize {
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
            let place = self.event_place(infos, lookup);
            tracing::trace!(message = "fanotify event", mask = format_args!("{:#x}", m.mask), place = ?place);
            let dir_entry = m.mask & libc::FAN_ONDIR != 0 && m.mask & (libc::FAN_CREATE | libc::FAN_MOVED_TO | libc::FAN_MOVED_FROM | libc::FAN_DELETE) != 0;
            match &place {
                Some(Place::Inside(p)) if dir_entry => out.push(LocalEvent::Directory(p.clone())),
                Some(Place::Inside(p)) => out.push(LocalEvent::Changed(p.clone())),
                Some(Place::Outside) => self.counts.outside_root += 1,
                None => self.counts.unresolved += 1,
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

    /// Where an event's info records name: `None` when its handle no longer resolves.
    fn event_place(&mut self, mut infos: &[u8], lookup: &mut Lookup<'_>) -> Option<Place> {
        let mut object: Option<&[u8]> = None;
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
                libc::FAN_EVENT_INFO_TYPE_DFID_NAME => {
                    let tail = &rec[20 + hb..];
                    let name = &tail[..tail.iter().position(|b| *b == 0).unwrap_or(tail.len())];
                    return Some(match self.resolve(handle, lookup)? {
                        Place::Inside(d) => match name {
                            b"" | b"." => Place::Inside(d),
                            _ => Place::Inside(join(&d, &crate::event::name_text(name))),
                        },
                        other => other,
                    });
                }
                libc::FAN_EVENT_INFO_TYPE_DFID => return self.resolve(handle, lookup),
                libc::FAN_EVENT_INFO_TYPE_FID => object = Some(handle),
                _ => {}
            }
        }
        // Only the object (a self event, a link count change): one of its names.
        let object = object?;
        self.lookup(object, lookup)
    }

    /// A directory handle's place, cached.
    fn resolve(&mut self, handle: &[u8], lookup: &mut Lookup<'_>) -> Option<Place> {
        if let Some(p) = self.cache.get(handle) {
            return Some(p);
        }
        let p = self.lookup(handle, lookup)?;
        if self.cache.insert(handle.to_vec(), p.clone()) {
            self.counts.evicted += 1;
        }
        Some(p)
    }

    /// The object's place now (`None`: deleted or gone).
    fn lookup(&mut self, handle: &[u8], lookup: &mut Lookup<'_>) -> Option<Place> {
        self.counts.handle_lookups += 1;
        let target = lookup(handle)?;
        let rel = match target.strip_prefix(&self.root) {
            Ok(rel) => rel,
            Err(_) => return Some(Place::Outside),
        };
        Some(Place::Inside(icicle_core::name::from_os(rel).into_owned()))
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
#[path = "fanotify_events_tests.rs"]
mod tests;
