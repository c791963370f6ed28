//! The file systems mounted at or below a root (`/proc/self/mountinfo`) and the root's own
//! identity, read again every [`MOUNT_CHECK`] by both backends, and a file system's id as
//! fanotify reports it (`statfs`'s `f_fsid`).

use std::ffi::CString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::event::{LocalEvent, RescanReason};

/// How often the mounts at or below the root are read again.
pub const MOUNT_CHECK: Duration = Duration::from_secs(2);

/// A mount: its id (telling a file system mounted again at the same point from the one that
/// was there) and its mount point.
pub type Mount = (u64, PathBuf);

/// The mounts at or below a root as last read, and the root's identity.
pub struct MountTable {
    root: PathBuf,
    known: Vec<Mount>,
    /// The root directory's device and inode (none: no directory there).
    root_id: Option<(u64, u64)>,
    read_at: Instant,
}

/// What changed between two reads of the mount table.
pub struct MountChanges {
    /// Mounted since the last read.
    pub came: Vec<Mount>,
    /// Unmounted since the last read.
    pub went: Vec<Mount>,
    /// The root is another directory, or none, than at the last read: moved away, removed,
    /// or made again (the kernel's marks and watches follow the old one).
    pub root_changed: bool,
}

/// The device and inode of the directory at `root`, if one is there.
pub fn root_identity(root: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(root).ok().filter(|m| m.is_dir()).map(|m| (m.dev(), m.ino()))
}

impl MountTable {
    /// The mounts at or below `root` now.
    pub fn new(root: &Path) -> MountTable {
        MountTable {
            root: root.to_path_buf(),
            known: current(root),
            root_id: root_identity(root),
            read_at: Instant::now(),
        }
    }

    /// The mounts as last read.
    pub fn known(&self) -> &[Mount] {
        &self.known
    }

    /// The next read takes the root for changed, whatever it finds (its watch went: a
    /// directory made again at the path may reuse the inode number).
    pub fn force_root_check(&mut self) {
        self.root_id = Some((u64::MAX, u64::MAX));
    }

    /// When [`MOUNT_CHECK`] has passed since the last read (or `now`), read again and say
    /// what came and went (`None`: nothing did).
    pub fn changes(&mut self, now: bool) -> Option<MountChanges> {
        if !now && self.read_at.elapsed() < MOUNT_CHECK {
            return None;
        }
        self.read_at = Instant::now();
        let fresh = current(&self.root);
        let came: Vec<Mount> = fresh.iter().filter(|m| !self.known.contains(m)).cloned().collect();
        let went: Vec<Mount> = self.known.iter().filter(|m| !fresh.contains(m)).cloned().collect();
        self.known = fresh;
        let id = root_identity(&self.root);
        let root_changed = id != self.root_id;
        self.root_id = id;
        (root_changed || !came.is_empty() || !went.is_empty()).then_some(MountChanges { came, went, root_changed })
    }

    /// The directory (relative to the root) of each mount that came or went, rescanned: what
    /// the index holds there was hidden or uncovered; and the root, when it changed.
    pub fn rescans(&self, changes: &MountChanges, out: &mut Vec<LocalEvent>) {
        let mut root_rescanned = false;
        for (_, m) in changes.came.iter().chain(&changes.went) {
            if let Some(rel) = m.strip_prefix(&self.root).ok().map(icicle_core::name::from_os) {
                tracing::info!(message = "a mount below the root came or went; rescanning its directory", mount = %m.display());
                root_rescanned |= rel.is_empty();
                out.push(LocalEvent::Rescan(rel.to_string(), RescanReason::Mount));
            }
        }
        if changes.root_changed && !root_rescanned {
            let now = if self.root_id.is_some() { "another directory is there now" } else { "nothing is there now" };
            tracing::warn!(message = "the root was moved, removed or replaced; rescanning it (what the index holds that is not there now is deleted)", root = %self.root.display(), now);
            out.push(LocalEvent::Rescan(String::new(), RescanReason::RootChanged));
        }
    }
}

/// Undo mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
pub(crate) fn unescape(b: &[u8]) -> PathBuf {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// Mounts at or below `root` in `mountinfo` (bytes: mount points need not be UTF-8): (mount
/// id, mount point), sorted, each once. The id tells a file system mounted again at the same
/// point from the one that was there.
pub fn mount_points_below(mountinfo: &[u8], root: &Path) -> Vec<Mount> {
    let mut v: Vec<Mount> = mountinfo
        .split(|&b| b == b'\n')
        .filter_map(|l| {
            let mut f = l.split(|&b| b == b' ');
            let id = std::str::from_utf8(f.next()?).ok()?.parse().ok()?;
            Some((id, unescape(f.nth(3)?)))
        })
        .filter(|(_, m)| m.starts_with(root))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The mounts at or below `root` now (none when mountinfo cannot be read).
fn current(root: &Path) -> Vec<Mount> {
    std::fs::read("/proc/self/mountinfo").map(|m| mount_points_below(&m, root)).unwrap_or_default()
}

/// The id of the file system at `path` (the 8 bytes fanotify puts before each file handle).
pub fn fsid(path: &Path) -> Option<[u8; 8]> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs is plain old data; zeroed is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is NUL-terminated and st is a valid statfs to fill.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    // SAFETY: fsid_t is two 32-bit integers (8 bytes), read as the kernel laid them out.
    Some(unsafe { std::ptr::read_unaligned(std::ptr::addr_of!(st.f_fsid).cast::<[u8; 8]>()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_below_the_root_are_read_and_unescaped() {
        let info = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                    40 22 0:35 / /data rw - xfs /dev/sdb rw\n\
                    41 40 0:36 / /data/proj\\040one rw - tmpfs none rw\n\
                    42 40 0:37 / /data/scratch rw shared:3 - tmpfs none rw\n\
                    43 22 0:38 / /database rw - tmpfs none rw\n\
                    44 40 0:36 / /data/proj\\040one rw - tmpfs none rw\n";
        let got = mount_points_below(info.as_bytes(), Path::new("/data"));
        let want = [(40, "/data"), (41, "/data/proj one"), (42, "/data/scratch"), (44, "/data/proj one")];
        assert_eq!(got, want.map(|(i, p)| (i, PathBuf::from(p))));
        assert!(mount_points_below(b"garbage\n\n", Path::new("/data")).is_empty());
    }

    #[test]
    fn the_root_file_system_has_an_id() {
        assert!(fsid(Path::new("/")).is_some());
        assert!(fsid(Path::new("/no/such/path")).is_none());
    }
}
