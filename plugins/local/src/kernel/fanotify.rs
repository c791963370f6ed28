//! The fanotify backend: one filesystem mark (`FAN_MARK_FILESYSTEM`) on the root's file system,
//! events reported as a directory file handle plus a name (`FAN_REPORT_DFID_NAME`, with
//! `FAN_REPORT_FID` for events that carry only the object). A directory handle is resolved once
//! (`open_by_handle_at`, then the descriptor's `/proc/self/fd` link, the counterpart of
//! `fid2path`) and cached (least recently used evicted) until a directory moves; events outside
//! the root are dropped.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use tokio::io::unix::AsyncFd;

use crate::event::LocalEvent;
pub use crate::kernel::fanotify_events::FanotifyCounts;
use crate::kernel::fanotify_events::{EventParser, Found};
use crate::kernel::mounts::{Mount, MountTable};
use crate::kernel::views::Views;
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

/// A fanotify group with a filesystem mark on the root's file system and on each file system
/// mounted below the root.
pub struct Fanotify {
    fd: AsyncFd<OwnedFd>,
    root: PathBuf,
    /// The root's file system: its id and a descriptor on it (for `open_by_handle_at`).
    root_fsid: [u8; 8],
    root_fd: OwnedFd,
    /// The mount `root_fd` is on (handles of the root's file system are resolved there).
    root_mount: Option<u64>,
    /// Where bind mounts show a directory again below the root.
    views: std::sync::Arc<Views>,
    /// The other file systems marked, by id: device and a mount point below the root (opened
    /// only to resolve a handle, so the monitor never keeps a mount busy).
    marked: HashMap<[u8; 8], (u64, PathBuf)>,
    /// The mounts at or below the root.
    mounts: MountTable,
    buf: Vec<u8>,
    /// Turns what is read into events, and counts what it drops.
    pub parser: EventParser,
    /// The last `read` stopped at its bound with events still queued.
    pub more: bool,
}

impl Fanotify {
    /// Initialise the group and mark the file system (before any walk, so nothing after the
    /// walk starts is missed). Errors keep the kernel's code: EPERM means no CAP_SYS_ADMIN.
    /// `lru_capacity`: directory handles whose paths are cached.
    pub fn open(root: &Path, lru_capacity: usize) -> Result<Fanotify, LocalError> {
        let flags = libc::FAN_CLASS_NOTIF
            | libc::FAN_CLOEXEC
            | libc::FAN_NONBLOCK
            | libc::FAN_REPORT_DFID_NAME
            | libc::FAN_REPORT_FID;
        // SAFETY: a plain system call; the returned descriptor is owned below.
        let fd = unsafe { libc::fanotify_init(flags, (libc::O_RDONLY | libc::O_CLOEXEC) as u32) };
        if fd < 0 {
            return Err(LocalError::last_os("fanotify_init(FAN_REPORT_DFID_NAME)"));
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: the OwnedFd stays open, unchanged, for as long as the AsyncFd owns it.
        let fd = unsafe { AsyncFd::register(fd) }.map_err(|e| LocalError::Io {
            what: "registering the fanotify descriptor".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        mark_file_system(&fd, root)?;
        let root_fsid = crate::kernel::mounts::fsid(root).ok_or_else(|| LocalError::Io {
            what: format!("statfs {}", root.display()),
            source: std::io::Error::last_os_error(),
        })?;
        let root_fd: OwnedFd = std::fs::File::open(root)
            .map_err(|e| LocalError::Io { what: format!("open {}", root.display()), source: e })?
            .into();
        check_resolvable(root, &root_fd)?;
        let root_mount = crate::kernel::views::mount_of(root_fd.as_raw_fd());
        let mut f = Fanotify {
            fd,
            root: root.to_path_buf(),
            root_fsid,
            root_fd,
            root_mount,
            views: std::sync::Arc::default(),
            marked: HashMap::new(),
            mounts: MountTable::new(root),
            buf: vec![0u8; 256 * 1024],
            parser: EventParser::new(root, lru_capacity),
            more: false,
        };
        f.parser.counts.marked_file_systems = 1;
        // What is mounted below the root now is walked with it: marked, not rescanned.
        let known = f.mounts.known().to_vec();
        f.mark_mounts(&known);
        f.read_views();
        Ok(f)
    }

    /// Read where bind mounts show directories again below the root (at the start and when
    /// the mounts change).
    fn read_views(&mut self) {
        self.views = std::sync::Arc::new(Views::read(&self.root, self.root_mount));
        self.parser.set_views(self.views.clone());
    }

    /// Put a filesystem mark on the file system mounted at `path` (once per file system).
    fn mark(&mut self, path: &Path) -> Result<(), LocalError> {
        use std::os::unix::fs::MetadataExt;
        let fsid = crate::kernel::mounts::fsid(path).ok_or_else(|| LocalError::Io {
            what: format!("statfs {}", path.display()),
            source: std::io::Error::last_os_error(),
        })?;
        let dev = std::fs::metadata(path)
            .map_err(|e| LocalError::Io { what: format!("stat {}", path.display()), source: e })?
            .dev();
        if fsid == self.root_fsid {
            return Ok(());
        }
        match self.marked.get_mut(&fsid) {
            Some((d, at)) if *d == dev => {
                *at = path.to_path_buf();
                return Ok(());
            }
            Some(_) => {
                let e = std::io::Error::other(
                    "another file system already marked has the same fsid (a cloned file system?)",
                );
                return Err(LocalError::Io {
                    what: format!("fanotify_mark(FAN_MARK_FILESYSTEM, {})", path.display()),
                    source: e,
                });
            }
            None => {}
        }
        mark_file_system(&self.fd, path)?;
        self.marked.insert(fsid, (dev, path.to_path_buf()));
        self.parser.counts.marked_file_systems += 1;
        Ok(())
    }

    /// Mark the file systems of `mounts` (those below the root); a failure is logged and
    /// counted.
    fn mark_mounts(&mut self, mounts: &[Mount]) {
        for (_, m) in mounts {
            if *m == self.root {
                continue;
            }
            if let Err(e) = self.mark(m) {
                self.parser.counts.unmarked_mounts += 1;
                tracing::warn!(message = "a file system mounted below the root cannot be marked: its changes are not reported until a restart or an overflow rescans the root", mount = %m.display(), error = %e);
            }
        }
    }

    /// Another directory (or none) is at the root's path: handles are resolved through it
    /// from now on, its file system marked when it is another one. Cached places are stale
    /// (the caller forgets them).
    fn root_moved(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        // A directory, not a symlink to one: the root is no entry to follow.
        let open =
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY).open(&self.root);
        let Ok(dir) = open else { return };
        let Some(fsid) = crate::kernel::mounts::fsid(&self.root) else { return };
        if fsid != self.root_fsid {
            if let Err(e) = mark_file_system(&self.fd, &self.root) {
                self.parser.counts.unmarked_mounts += 1;
                tracing::warn!(message = "the root's new file system cannot be marked: its changes are not reported until a restart", root = %self.root.display(), error = %e);
                return;
            }
            self.parser.counts.marked_file_systems += 1;
            self.root_fsid = fsid;
        }
        self.root_mount = crate::kernel::views::mount_of(dir.as_raw_fd());
        self.root_fd = dir.into();
    }

    /// Wait until events can be read.
    pub async fn readable(&self) -> Result<(), LocalError> {
        let mut g =
            self.fd.readable().await.map_err(|e| LocalError::Io { what: "waiting for fanotify".into(), source: e })?;
        g.clear_ready();
        Ok(())
    }

    /// Read what is queued now (without waiting) into `out`; returns the events read.
    pub fn read(&mut self, out: &mut Vec<LocalEvent>) -> Result<usize, LocalError> {
        let mut total = 0;
        self.more = false;
        if let Some(changes) = self.mounts.changes(false) {
            if changes.root_changed {
                self.root_moved();
            }
            self.mark_mounts(&changes.came);
            // A file system no longer mounted below the root is resolved no more.
            let now = self.mounts.known();
            self.marked.retain(|_, (_, at)| now.iter().any(|(_, m)| m == at));
            // A file system unmounted and mounted elsewhere (or moved) keeps its handles:
            // places cached for them are stale. Resolved again as events come.
            self.parser.forget_handles();
            self.read_views();
            let before = out.len();
            self.mounts.rescans(&changes, out);
            total += out.len() - before;
        }
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

    /// Parse one read's events, resolving handles with `open_by_handle_at`. A path outside the
    /// root that a bind mount shows below it is given as that place.
    fn parse(&mut self, data: &[u8], out: &mut Vec<LocalEvent>) -> usize {
        let (root_fsid, root_fd, marked) = (self.root_fsid, self.root_fd.as_raw_fd(), &self.marked);
        let (root, root_mount, views) = (&self.root, self.root_mount, &self.views);
        let mut fds = Vec::new();
        let n = self.parser.parse(data, out, &mut fds, &mut |handle, path| {
            let (fsid, fh) = handle.split_first_chunk::<8>()?;
            let (mut found, mount) = if *fsid == root_fsid {
                (open_by_handle(root_fd, fh, path)?, root_mount)
            } else {
                let at = &marked.get(fsid)?.1;
                let dir = std::fs::File::open(at).ok()?;
                (open_by_handle(dir.as_raw_fd(), fh, path)?, views.mount_at(at))
            };
            if path && views.shared() && !found.path.starts_with(root) {
                if let Some(inside) = mount.and_then(|m| views.inside(m, &found.path)) {
                    found.path = inside;
                }
            }
            Some(found)
        });
        for fd in fds {
            // SAFETY: the kernel gave us this descriptor (not expected with FID reporting).
            drop(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        n
    }
}

/// Add a filesystem mark for the file system at `path` to the group `fd` (the error keeps the
/// kernel's code).
fn mark_file_system(fd: &AsyncFd<OwnedFd>, path: &Path) -> Result<(), LocalError> {
    let what = || format!("fanotify_mark(FAN_MARK_FILESYSTEM, {})", path.display());
    let cpath = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| LocalError::Io { what: what(), source: std::io::Error::other(e) })?;
    // SAFETY: fd is a valid fanotify descriptor and cpath a NUL-terminated path.
    let r = unsafe {
        libc::fanotify_mark(
            fd.get_ref().as_raw_fd(),
            libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
            MASK,
            libc::AT_FDCWD,
            cpath.as_ptr(),
        )
    };
    if r < 0 {
        let source = std::io::Error::last_os_error();
        return Err(LocalError::Io { what: what(), source });
    }
    Ok(())
}

/// Resolve the root's own handle once: `open_by_handle_at` needs CAP_DAC_READ_SEARCH, which a
/// process may lack while holding CAP_SYS_ADMIN (enough to mark). Refused then (EPERM), so the
/// source falls back or says why, instead of marking and resolving no event.
fn check_resolvable(root: &Path, root_fd: &OwnedFd) -> Result<(), LocalError> {
    let what =
        || format!("open_by_handle_at of {} (resolving fanotify's handles needs CAP_DAC_READ_SEARCH)", root.display());
    let fail = || LocalError::Io { what: what(), source: std::io::Error::last_os_error() };
    let cpath = std::ffi::CString::new(root.as_os_str().as_bytes())
        .map_err(|e| LocalError::Io { what: what(), source: std::io::Error::other(e) })?;
    // A struct file_handle: its 8-byte header, then up to MAX_HANDLE_SZ (128) bytes.
    let mut words = [0u64; 1 + 128 / 8];
    let fh = words.as_mut_ptr().cast::<libc::file_handle>();
    let mut mount_id = 0;
    // SAFETY: fh points to a zeroed buffer with room for 128 handle bytes, which the header says.
    let r = unsafe {
        (*fh).handle_bytes = 128;
        libc::name_to_handle_at(libc::AT_FDCWD, cpath.as_ptr(), fh, &mut mount_id, 0)
    };
    if r < 0 {
        return Err(fail());
    }
    // SAFETY: fh holds the handle the kernel just wrote; the descriptor is owned at once.
    let fd = unsafe { libc::open_by_handle_at(root_fd.as_raw_fd(), fh, libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(fail());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok(())
}

/// `open_by_handle_at` of the `struct file_handle` bytes `fh`: what it is, and with `path` the
/// descriptor's path (`None`: deleted or gone).
fn open_by_handle(mount_fd: std::os::fd::RawFd, fh: &[u8], path: bool) -> Option<Found> {
    let mut words = vec![0u64; fh.len().div_ceil(8) + 1];
    // SAFETY: words holds at least fh.len() bytes.
    unsafe { std::ptr::copy_nonoverlapping(fh.as_ptr(), words.as_mut_ptr().cast::<u8>(), fh.len()) };
    // SAFETY: words holds a struct file_handle as the kernel wrote it; the result is owned below.
    let fd = unsafe { libc::open_by_handle_at(mount_fd, words.as_mut_ptr().cast(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // Removed since (the link would read "<path> (deleted)"; a real name may end so too).
    // SAFETY: fd is open; st is plain data the kernel fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 || st.st_nlink == 0 {
        return None;
    }
    let linked = st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_nlink > 1;
    let path =
        if path { std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()? } else { PathBuf::new() };
    Some(Found { path, ino: st.st_ino, linked })
}
