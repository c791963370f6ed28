//! Where one object shows below the root: every mount at or below it is a window onto a
//! directory of its file system (`/proc/self/mountinfo`'s 4th field, the root of the mount
//! within its file system, and 5th, its mount point: proc(5), /proc/pid/mountinfo). A bind
//! mount shows a directory a second time, perhaps one outside the root. fanotify resolves a
//! handle to one path, through the mount of the descriptor given to `open_by_handle_at`
//! (open_by_handle_at(2): the handle is opened on that mount; the descriptor's
//! `/proc/self/fd` link is its path there, fs/d_path.c), so the other places that show the
//! same directory are found here: the path within the file system, then each window whose
//! directory holds it.

use std::path::{Path, PathBuf};

/// One line of `/proc/self/mountinfo`: what proc(5) calls mount ID, major:minor, root and
/// mount point (octal escapes undone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountLine {
    /// The mount's id.
    pub id: u64,
    /// The file system's device (`major:minor`).
    pub dev: Vec<u8>,
    /// The directory of the file system at the mount point.
    pub fs_root: PathBuf,
    /// Where it is mounted.
    pub point: PathBuf,
}

/// The lines of a `/proc/self/mountinfo` (those that do not parse are skipped).
pub fn parse(mountinfo: &[u8]) -> Vec<MountLine> {
    mountinfo
        .split(|&b| b == b'\n')
        .filter_map(|l| {
            let mut f = l.split(|&b| b == b' ');
            let id = std::str::from_utf8(f.next()?).ok()?.parse().ok()?;
            let dev = f.nth(1)?.to_vec();
            let fs_root = crate::kernel::mounts::unescape(f.next()?);
            let point = crate::kernel::mounts::unescape(f.next()?);
            Some(MountLine { id, dev, fs_root, point })
        })
        .collect()
}

/// A window: a directory of a file system (`fs`) shown at `rel` below the root.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Window {
    dev: Vec<u8>,
    fs: PathBuf,
    /// Relative to the root (escaped text, `""` for the root).
    rel: String,
}

/// The windows at and below a root, and the mounts handles are resolved through.
#[derive(Debug, Clone, Default)]
pub struct Views {
    root: PathBuf,
    /// The root's window first, then each mount below the root (the last mounted at a point:
    /// the one visible there).
    windows: Vec<Window>,
    /// Every mount, to translate a resolved path back into its file system.
    lines: Vec<MountLine>,
    /// Some directory shows at two places (two windows of one file system).
    shared: bool,
}

impl Views {
    /// The windows of `root`, whose directory is on mount `root_mount` (its id; unknown: the
    /// mount with the longest mount point above the root).
    pub fn new(lines: Vec<MountLine>, root: &Path, root_mount: Option<u64>) -> Views {
        let holds_root = |l: &&MountLine| root.starts_with(&l.point);
        let above = root_mount
            .and_then(|id| lines.iter().filter(holds_root).rfind(|l| l.id == id))
            .or_else(|| lines.iter().filter(holds_root).max_by_key(|l| l.point.as_os_str().len()));
        let mut windows = Vec::new();
        if let Some(m) = above {
            let rest = root.strip_prefix(&m.point).unwrap_or(Path::new(""));
            windows.push(Window { dev: m.dev.clone(), fs: join_fs(&m.fs_root, rest), rel: String::new() });
        }
        for (i, l) in lines.iter().enumerate() {
            let Ok(rel) = l.point.strip_prefix(root) else { continue };
            // Mounted over later at the same point: hidden.
            if lines[i + 1..].iter().any(|o| o.point == l.point) || rel.as_os_str().is_empty() {
                continue;
            }
            windows.push(Window {
                dev: l.dev.clone(),
                fs: l.fs_root.clone(),
                rel: icicle_core::name::from_os(rel).into_owned(),
            });
        }
        let shared = windows.iter().enumerate().any(|(i, w)| windows[i + 1..].iter().any(|o| o.dev == w.dev));
        Views { root: root.to_path_buf(), windows, lines, shared }
    }

    /// The views of `root` now.
    pub fn read(root: &Path, root_mount: Option<u64>) -> Views {
        let info = std::fs::read("/proc/self/mountinfo").unwrap_or_default();
        Views::new(parse(&info), root, root_mount)
    }

    /// Whether any directory shows at more than one place at or below the root.
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// A path below the root that shows `path`, a path resolved through mount `mount` (its id)
    /// that is outside the root: a bind mount of its directory, perhaps.
    pub fn inside(&self, mount: u64, path: &Path) -> Option<PathBuf> {
        if !self.shared {
            return None;
        }
        let m = self.lines.iter().rfind(|l| l.id == mount)?;
        let fs = join_fs(&m.fs_root, path.strip_prefix(&m.point).ok()?);
        let rel = self.places(&m.dev, &fs).next()?;
        Some(icicle_core::name::on(&self.root, &rel))
    }

    /// The mount visible at `point` (its id), if one is mounted there.
    pub fn mount_at(&self, point: &Path) -> Option<u64> {
        self.lines.iter().rfind(|l| l.point == point).map(|l| l.id)
    }

    /// The other paths below the root that show what is at `rel` (none without bind mounts).
    pub fn aliases(&self, rel: &str) -> Vec<String> {
        if !self.shared {
            return Vec::new();
        }
        let Some(w) = self.window_of(rel) else { return Vec::new() };
        let rest = rel.strip_prefix(w.rel.as_str()).unwrap_or(rel).trim_start_matches('/');
        let fs = join_fs(&w.fs, &icicle_core::name::to_os(rest));
        self.places(&w.dev, &fs).filter(|p| p != rel).collect()
    }

    /// The window that shows `rel` (the deepest one whose place holds it).
    fn window_of(&self, rel: &str) -> Option<&Window> {
        self.windows.iter().filter(|w| under(rel, &w.rel)).max_by_key(|w| w.rel.len())
    }

    /// Every path below the root showing `fs`, a path within file system `dev`, not hidden by
    /// another mount.
    fn places<'a>(&'a self, dev: &'a [u8], fs: &'a Path) -> impl Iterator<Item = String> + 'a {
        self.windows.iter().filter(move |w| w.dev == dev).filter_map(move |w| {
            let rest = fs.strip_prefix(&w.fs).ok()?;
            let rel = join_rel(&w.rel, &icicle_core::name::from_os(rest));
            // Below a mount point deeper than the window: hidden by that mount.
            (self.window_of(&rel) == Some(w)).then_some(rel)
        })
    }
}

/// `rest` (relative) below the file system directory `dir`.
fn join_fs(dir: &Path, rest: &Path) -> PathBuf {
    if rest.as_os_str().is_empty() {
        dir.to_path_buf()
    } else {
        dir.join(rest)
    }
}

fn join_rel(dir: &str, rest: &str) -> String {
    match (dir.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_string(),
        (_, true) => dir.to_string(),
        _ => format!("{dir}/{rest}"),
    }
}

/// Whether `rel` is `dir` or below it (relative paths, `""` the root).
fn under(rel: &str, dir: &str) -> bool {
    dir.is_empty() || rel.strip_prefix(dir).is_some_and(|r| r.is_empty() || r.as_bytes()[0] == b'/')
}

/// The id of the mount a descriptor is on (`mnt_id` in `/proc/self/fdinfo/<fd>`, proc(5)).
pub fn mount_of(fd: std::os::fd::RawFd) -> Option<u64> {
    let info = std::fs::read(format!("/proc/self/fdinfo/{fd}")).ok()?;
    let line = info.split(|&b| b == b'\n').find_map(|l| l.strip_prefix(b"mnt_id:"))?;
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "27 1 254:0 / / rw - ext4 /dev/vda rw\n\
                        50 27 0:60 / /data rw - tmpfs t rw\n\
                        60 27 254:0 /tmp/out /r/bound rw - ext4 /dev/vda rw\n\
                        61 27 254:0 /r/own /r/own-bound rw - ext4 /dev/vda rw\n\
                        62 27 0:60 /sub /r/t\\040mp rw - tmpfs t rw\n\
                        63 27 0:61 / /r/other rw - tmpfs u rw\n";

    fn views() -> Views {
        Views::new(parse(INFO.as_bytes()), Path::new("/r"), Some(27))
    }

    #[test]
    fn a_bind_mount_shows_a_directory_again() {
        let v = views();
        assert!(v.shared());
        // The root's own directory, bound below the root.
        assert_eq!(v.aliases("own/f"), ["own-bound/f"]);
        assert_eq!(v.aliases("own-bound/sub/g"), ["own/sub/g"]);
        assert_eq!(v.aliases("own"), ["own-bound"]);
        assert!(v.aliases("owner/f").is_empty() && v.aliases("plain").is_empty());
        // A directory outside the root, and another file system's.
        assert_eq!(v.inside(27, Path::new("/tmp/out/d/x")), Some(PathBuf::from("/r/bound/d/x")));
        assert_eq!(v.inside(27, Path::new("/tmp/elsewhere")), None);
        assert_eq!(v.inside(50, Path::new("/data/sub/x")), Some(PathBuf::from("/r/t mp/x")));
        assert_eq!(v.aliases("t mp/x"), Vec::<String>::new());
        assert_eq!(v.mount_at(Path::new("/r/t mp")), Some(62));
        // Hidden below a mount point by the mount.
        assert_eq!(v.inside(27, Path::new("/r/own-bound/z")), None);
        // Shown once: nothing else shows the directory outside the root.
        assert!(v.aliases("bound/x").is_empty());
    }

    #[test]
    fn without_two_windows_onto_one_file_system_nothing_is_shared() {
        let info = "27 1 254:0 / / rw - ext4 /dev/vda rw\n63 27 0:61 / /r/other rw - tmpfs u rw\n";
        let v = Views::new(parse(info.as_bytes()), Path::new("/r"), None);
        assert!(!v.shared());
        assert!(v.aliases("other/x").is_empty());
        assert_eq!(v.inside(27, Path::new("/tmp/x")), None);
        // Mounted twice at one point: only the last shows.
        let info = "27 1 254:0 / / rw - ext4 /dev/vda rw\n63 27 254:0 /a /r/m rw - ext4 d rw\n64 63 0:61 / /r/m rw - tmpfs u rw\n";
        assert!(!Views::new(parse(info.as_bytes()), Path::new("/r"), None).shared());
    }
}
