//! The fanotify backend: one filesystem mark (`FAN_MARK_FILESYSTEM`) on the root's file system,
//! events reported as a directory file handle plus a name (`FAN_REPORT_DFID_NAME`, with
//! `FAN_REPORT_FID` for events that carry only the object). A directory handle is resolved once
//! (`open_by_handle_at`, then the descriptor's `/proc/self/fd` link, the counterpart of
//! `fid2path`) and cached until a directory moves; events outside the root are dropped.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use tokio::io::unix::AsyncFd;

use crate::event::{LocalEvent, RescanReason};
use crate::LocalError;

const MASK: u64 = libc::FAN_CREATE
    | libc::FAN_DELETE
    | libc::FAN_MOVED_FROM
    | libc::FAN_MOVED_TO
    | libc::FAN_ATTRIB
    | libc::FAN_MODIFY
    | libc::FAN_CLOSE_WRITE
    | libc::FAN_DELETE_SELF
    | libc::FAN_MOVE_SELF
    | libc::FAN_ONDIR;

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
}

/// A fanotify group with a filesystem mark on the root's file system.
pub struct Fanotify {
    fd: AsyncFd<OwnedFd>,
    mount_fd: OwnedFd,
    root: PathBuf,
    /// Handle bytes (fsid + file handle) to the path below the root, `None` when outside.
    cache: HashMap<Vec<u8>, Option<String>>,
    buf: Vec<u8>,
    /// What was read and dropped.
    pub counts: FanotifyCounts,
    /// The last `read` stopped at its bound with events still queued.
    pub more: bool,
}

impl Fanotify {
    /// Initialise the group and mark the file system (before any walk, so nothing after the
    /// walk starts is missed). Errors keep the kernel's code: EPERM means no CAP_SYS_ADMIN.
    pub fn open(root: &Path) -> Result<Fanotify, LocalError> {
        let flags = libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK | libc::FAN_REPORT_DFID_NAME | libc::FAN_REPORT_FID;
        // SAFETY: a plain system call; the returned descriptor is owned below.
        let fd = unsafe { libc::fanotify_init(flags, (libc::O_RDONLY | libc::O_CLOEXEC) as u32) };
        if fd < 0 {
            return Err(LocalError::last_os("fanotify_init(FAN_REPORT_DFID_NAME)"));
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let croot = std::ffi::CString::new(root.as_os_str().as_bytes())
            .map_err(|e| LocalError::Io { what: format!("{}", root.display()), source: std::io::Error::other(e) })?;
        // SAFETY: fd is a valid fanotify descriptor and croot a NUL-terminated path.
        let r = unsafe { libc::fanotify_mark(fd.as_raw_fd(), libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM, MASK, libc::AT_FDCWD, croot.as_ptr()) };
        if r < 0 {
            return Err(LocalError::last_os(format!("fanotify_mark(FAN_MARK_FILESYSTEM, {})", root.display())));
        }
        let mount_fd: OwnedFd = std::fs::File::open(root).map_err(|e| LocalError::Io { what: format!("open {}", root.display()), source: e })?.into();
        // SAFETY: the OwnedFd stays open, unchanged, for as long as the AsyncFd owns it.
        let fd = unsafe { AsyncFd::register(fd) }
            .map_err(|e| LocalError::Io { what: "registering the fanotify descriptor".into(), source: std::io::Error::other(e.to_string()) })?;
        Ok(Fanotify {
            fd,
            mount_fd,
            root: root.to_path_buf(),
            cache: HashMap::new(),
            buf: vec![0u8; 256 * 1024],
            counts: FanotifyCounts::default(),
            more: false,
        })
    }

    /// Wait until events can be read.
    pub async fn readable(&self) -> Result<(), LocalError> {
        let mut g = self.fd.readable().await.map_err(|e| LocalError::Io { what: "waiting for fanotify".into(), source: e })?;
        g.clear_ready();
        Ok(())
    }

    /// Read what is queued now (without waiting) into `out`; returns the events read.
    pub fn read(&mut self, out: &mut Vec<LocalEvent>) -> Result<usize, LocalError> {
        let mut total = 0;
        self.more = false;
        for reads in 0.. {
            // Under a steady stream the queue never drains: hand back a bounded amount.
            if reads == crate::MAX_READS_PER_POLL {
                self.more = true;
                return Ok(total);
            }
            // SAFETY: buf is a valid writable buffer of its length.
            let n = unsafe { libc::read(self.fd.get_ref().as_raw_fd(), self.buf.as_mut_ptr().cast(), self.buf.len()) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::Interrupted {
                    return Ok(total);
                }
                return Err(LocalError::Io { what: "reading fanotify events".into(), source: e });
            }
            if n == 0 {
                return Ok(total);
            }
            let buf = std::mem::take(&mut self.buf);
            total += self.parse(&buf[..n as usize], out);
            self.buf = buf;
        }
        Ok(total)
    }

    /// Parse the events in `data` (whole events, as one read returns them).
    fn parse(&mut self, data: &[u8], out: &mut Vec<LocalEvent>) -> usize {
        let meta_len = std::mem::size_of::<libc::fanotify_event_metadata>();
        let mut off = 0;
        let mut n = 0;
        while off + meta_len <= data.len() {
            // SAFETY: at least meta_len bytes remain; read_unaligned copes with alignment.
            let m: libc::fanotify_event_metadata = unsafe { std::ptr::read_unaligned(data[off..].as_ptr().cast()) };
            let len = m.event_len as usize;
            if len < meta_len || off + len > data.len() {
                break;
            }
            if m.fd >= 0 {
                // SAFETY: the kernel gave us this descriptor (not expected with FID reporting).
                drop(unsafe { OwnedFd::from_raw_fd(m.fd) });
            }
            n += 1;
            self.counts.read += 1;
            let event = &data[off..off + len];
            off += len;
            if m.mask & libc::FAN_Q_OVERFLOW != 0 {
                self.counts.overflows += 1;
                tracing::warn!(message = "fanotify queue overflow: events were lost; rescanning the root", root = %self.root.display());
                out.push(LocalEvent::Rescan(String::new(), RescanReason::Overflow));
                continue;
            }
            let infos = &event[(m.metadata_len as usize).min(event.len())..];
            match self.event_path(infos) {
                Some(Some(p)) => out.push(LocalEvent::Changed(p)),
                Some(None) => self.counts.outside_root += 1,
                None => self.counts.unresolved += 1,
            }
            let moved = libc::FAN_MOVED_FROM | libc::FAN_MOVED_TO | libc::FAN_MOVE_SELF | libc::FAN_DELETE_SELF;
            if (m.mask & libc::FAN_ONDIR != 0 && m.mask & moved != 0) || self.cache.len() > 100_000 {
                // A directory moved: cached paths below it are stale.
                self.cache.clear();
            }
        }
        n
    }

    /// The path (below the root) an event's info records name: `Some(None)` outside the root,
    /// `None` when its handle no longer resolves.
    fn event_path(&mut self, mut infos: &[u8]) -> Option<Option<String>> {
        let mut object: Option<&[u8]> = None;
        while infos.len() >= 4 {
            let (kind, len) = (infos[0], u16::from_ne_bytes([infos[2], infos[3]]) as usize);
            if len < 4 || len > infos.len() {
                break;
            }
            let rec = &infos[..len];
            infos = &infos[len..];
            // header (4) + fsid (8) + file_handle { handle_bytes: u32, handle_type: i32, f_handle }
            if rec.len() < 20 {
                continue;
            }
            let hb = u32::from_ne_bytes([rec[12], rec[13], rec[14], rec[15]]) as usize;
            let Some(handle) = rec.get(4..20 + hb) else { continue };
            match kind {
                libc::FAN_EVENT_INFO_TYPE_DFID_NAME => {
                    let tail = &rec[20 + hb..];
                    let name = &tail[..tail.iter().position(|b| *b == 0).unwrap_or(tail.len())];
                    let dir = self.resolve(handle)?;
                    return Some(dir.map(|d| match name {
                        b"" | b"." => d,
                        _ => join(&d, &String::from_utf8_lossy(name)),
                    }));
                }
                libc::FAN_EVENT_INFO_TYPE_DFID => return self.resolve(handle),
                libc::FAN_EVENT_INFO_TYPE_FID => object = Some(handle),
                _ => {}
            }
        }
        // Only the object (a self event, a link count change): one of its names.
        self.lookup(object?)
    }

    /// A directory handle's path below the root, cached.
    fn resolve(&mut self, handle: &[u8]) -> Option<Option<String>> {
        if let Some(p) = self.cache.get(handle) {
            return Some(p.clone());
        }
        let p = self.lookup(handle)?;
        self.cache.insert(handle.to_vec(), p.clone());
        Some(p)
    }

    /// `open_by_handle_at` and the descriptor's path (`None`: deleted or gone).
    fn lookup(&mut self, handle: &[u8]) -> Option<Option<String>> {
        self.counts.handle_lookups += 1;
        let fh = &handle[8..];
        let mut words = vec![0u64; fh.len().div_ceil(8) + 1];
        // SAFETY: words holds at least fh.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(fh.as_ptr(), words.as_mut_ptr().cast::<u8>(), fh.len()) };
        // SAFETY: words holds a struct file_handle as the kernel wrote it; the result is owned below.
        let fd = unsafe { libc::open_by_handle_at(self.mount_fd.as_raw_fd(), words.as_mut_ptr().cast(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let target = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
        let t = target.to_string_lossy();
        if t.ends_with(" (deleted)") {
            return None;
        }
        Some(relative(&self.root, &target))
    }
}

/// `path` relative to `root` (`""` for the root itself), `None` outside it.
pub fn relative(root: &Path, path: &Path) -> Option<String> {
    path.strip_prefix(root).ok().map(|r| r.to_string_lossy().into_owned())
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}
