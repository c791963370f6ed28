//! Catalog records appended to this process's own catalog file, one `write` each, never left
//! cut short; the one report of a catalog directory that cannot be written; and the files
//! recorded lately (a rename of one moves its entry).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::*;

/// Append the catalog entry of `path` (a closed file). Inside a section.
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
    recorded().lock().insert(path);
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

pub(crate) fn recorded() -> &'static Shared<Recorded> {
    static RECORDED: Shared<Recorded> = Shared::new();
    &RECORDED
}

pub(crate) static RECORDED_N: AtomicUsize = AtomicUsize::new(0);

/// Catalog records (entries and `gone` records) this process could not write to its catalog
/// file: the directory could not be created, the file opened, or the whole record written.
/// Readable by the host or a debugger (`dlsym(RTLD_DEFAULT, "icicle_catalog_agent_lost")`,
/// a `uint64_t`); a forked child counts its own from zero.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static icicle_catalog_agent_lost: AtomicU64 = AtomicU64::new(0);

/// Whether this process (or the parent it was forked from) has printed the line about a
/// catalog directory it cannot write.
static REPORTED: AtomicBool = AtomicBool::new(false);

/// Held while a record is appended: one writer at a time, so a short write's tail is cut
/// back without touching another thread's record.
fn out_file() -> &'static Shared<crate::catalog_file::OutFile> {
    static OUT: Shared<crate::catalog_file::OutFile> = Shared::new();
    &OUT
}

/// In a forked child (the `pthread_atfork` handler): a catalog file of its own, and its own
/// count of lost records.
pub(crate) fn reset_after_fork() {
    out_file().reset();
    icicle_catalog_agent_lost.store(0, Ordering::Relaxed);
    crate::catalog_file::reset_after_fork();
}

/// Hand one record to the node's collector when one listens ([`crate::collector`]), else (or
/// when it does not take it) append it with a single `write` of the whole record to this
/// process's catalog file ([`crate::catalog_file`]: opened and closed each time, so no
/// descriptor of ours lives in the application's table; never through a planted link). A
/// write that stops short (a full file system) is tried once more for the rest, which
/// succeeds or tells why; if it fails, the file is cut back (`ftruncate`) to where the
/// record began, so a reader never sees part of one. A record that cannot be written is
/// counted in [`icicle_catalog_agent_lost`], and the first one of the process reported.
pub(crate) fn append(cfg: &Config, bytes: &[u8]) {
    if cfg.socket.as_ref().is_some_and(|s| crate::collector::hand_over(s, cfg.timeout_ms, bytes)) {
        return;
    }
    let mut out = out_file().lock();
    let Some(close) = real().close else { return };
    let fd = match crate::catalog_file::open(cfg, &mut out) {
        Ok(fd) => fd,
        Err(e) => return lost(cfg, e),
    };
    let failed = write_record(fd, bytes, &mut out);
    // SAFETY: our own descriptor.
    unsafe { close(fd) };
    if let Some(e) = failed {
        lost(cfg, e);
    }
}

/// Write `bytes` at the end of the catalog file `fd` (appends serialised by the caller);
/// returns the errno when it could not be written whole, after cutting off any part written.
fn write_record(fd: c_int, bytes: &[u8], out: &mut crate::catalog_file::OutFile) -> Option<c_int> {
    // SAFETY: our own descriptor.
    let start = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
    if start < 0 {
        return Some(errno());
    }
    let record: std::borrow::Cow<[u8]> =
        if out.ragged && start > 0 { [&b"\n"[..], bytes].concat().into() } else { bytes.into() };
    let mut done = 0usize;
    let mut err = libc::EIO;
    for _ in 0..2 {
        let rest = &record[done..];
        // SAFETY: a valid buffer and length; signals are blocked in a section, so no EINTR.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        if n < 0 {
            err = errno();
            break;
        }
        done += n as usize;
        if done == record.len() {
            out.ragged = false;
            return None;
        }
    }
    // SAFETY: our own descriptor, cut back to its length before this record.
    if done > 0 && unsafe { libc::ftruncate(fd, start) } != 0 {
        out.ragged = true;
    }
    Some(err)
}

/// Count a record that could not be written (`errno` `e`) and, the first time, say so on
/// stderr in one line: the only thing the agent ever prints.
fn lost(cfg: &Config, e: c_int) {
    icicle_catalog_agent_lost.fetch_add(1, Ordering::Relaxed);
    if REPORTED.swap(true, Ordering::Relaxed) {
        return;
    }
    let line = format!(
        "icicle catalog agent: cannot write the catalog in {}: {} (errno {e}); records not written are lost and counted in icicle_catalog_agent_lost\n",
        cfg.catalog_dir.display(),
        strerror(e),
    );
    // SAFETY: one write of a valid buffer to the host's stderr; its result does not matter.
    unsafe { libc::write(libc::STDERR_FILENO, line.as_ptr().cast(), line.len()) };
}

/// The text of errno `e` ("No space left on device").
fn strerror(e: c_int) -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the XSI strerror_r into a buffer of the given length, NUL-terminated on success.
    if unsafe { libc::strerror_r(e, buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return format!("error {e}");
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
