//! Catalog entries appended to this process's own catalog file, one `O_APPEND` write each, and
//! the files recorded lately (a rename of one moves its entry).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::*;

/// Append the catalog entry of `path` (a closed file).
pub(crate) fn record(cfg: &Config, path: &[u8]) {
    let p = Path::new(std::ffi::OsStr::from_bytes(path));
    let Ok(lmd) = std::fs::symlink_metadata(p) else { return };
    if !lmd.file_type().is_file() {
        return;
    }
    let Ok(text) = std::str::from_utf8(path) else { return };
    let lstat = StatFields::from_metadata(&lmd);
    let stat = std::fs::metadata(p).ok().map(|m| StatFields::from_metadata(&m));
    let size = stat.unwrap_or(lstat).size;
    // A layout that cannot be read leaves an empty layout: the entry is still recorded.
    let comps = cfg.provider.layout(p, size).unwrap_or_default();
    let Ok(entry) = CatalogEntry::new(text, lstat, stat, Some(&comps)).to_text() else { return };
    append(cfg, entry.as_bytes());
    if let Ok(mut r) = recorded().lock() {
        r.insert(path);
    }
}

/// Append a `gone` record: `path` no longer names the file `stat` describes.
pub(crate) fn record_gone(cfg: &Config, path: &[u8], stat: StatFields) {
    let Ok(text) = std::str::from_utf8(path) else { return };
    if let Ok(rec) = (CatalogGone { path: text.to_string(), stat }).to_text() {
        append(cfg, rec.as_bytes());
    }
}

/// How many recorded paths the agent remembers for renames (the most recent ones).
pub const RECORDED_CAP: usize = 4096;

/// The paths this process recorded most recently, so that renaming one moves its entry.
#[derive(Default)]
pub(crate) struct Recorded {
    /// Path -> generation of its latest insertion.
    pub(crate) map: HashMap<Vec<u8>, u64>,
    /// Insertions, oldest first (stale ones are skipped when evicted).
    pub(crate) order: VecDeque<(u64, Vec<u8>)>,
    pub(crate) generation: u64,
}

impl Recorded {
    pub(crate) fn insert(&mut self, path: &[u8]) {
        self.generation += 1;
        self.map.insert(path.to_vec(), self.generation);
        self.order.push_back((self.generation, path.to_vec()));
        while self.map.len() > RECORDED_CAP || self.order.len() > 2 * RECORDED_CAP {
            let Some((g, p)) = self.order.pop_front() else { break };
            if self.map.get(&p) == Some(&g) {
                self.map.remove(&p);
            }
        }
        RECORDED_N.store(self.map.len(), Ordering::Relaxed);
    }

    pub(crate) fn remove(&mut self, path: &[u8]) {
        self.map.remove(path);
        RECORDED_N.store(self.map.len(), Ordering::Relaxed);
    }
}

pub(crate) fn recorded() -> &'static Mutex<Recorded> {
    static RECORDED: OnceLock<Mutex<Recorded>> = OnceLock::new();
    RECORDED.get_or_init(|| Mutex::new(Recorded::default()))
}

pub(crate) static RECORDED_N: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn out_path(cfg: &Config) -> Option<CString> {
    let pid = std::process::id();
    let mut slot = cfg.out_file.lock().ok()?;
    if let Some((p, path)) = slot.as_ref() {
        if *p == pid {
            return Some(path.clone());
        }
    }
    // Keyed by pid: a file per process (a forked child records nothing until it execs).
    let _ = std::fs::create_dir_all(&cfg.catalog_dir);
    let mut host = [0u8; 256];
    // SAFETY: a buffer of the given length.
    let host = if unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) } == 0 {
        let end = host.iter().position(|&b| b == 0).unwrap_or(host.len());
        String::from_utf8_lossy(&host[..end]).into_owned()
    } else {
        "localhost".into()
    };
    let path = cfg.catalog_dir.join(format!("catalog.{host}.{pid}.txt"));
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    *slot = Some((pid, c.clone()));
    Some(c)
}

/// One `O_APPEND` write of the whole entry, through the real functions; the file is opened
/// and closed each time so no descriptor of ours lives in the application's table.
pub(crate) fn append(cfg: &Config, bytes: &[u8]) {
    let Some(path) = out_path(cfg) else { return };
    let r = real();
    let Some(open) = r.open else { return };
    // SAFETY: a NUL-terminated path; the real open.
    let fd = unsafe { open(path.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC, 0o644) };
    if fd < 0 {
        return;
    }
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: a valid buffer and length.
        let n = unsafe { libc::write(fd, bytes[done..].as_ptr().cast(), bytes.len() - done) };
        if n <= 0 {
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            break;
        }
        done += n as usize;
    }
    if let Some(close) = r.close {
        // SAFETY: our own descriptor.
        unsafe { close(fd) };
    }
}
