//! This process's own catalog file, opened so that the agent writes into no one else's file,
//! even in a shared, group-writable catalog directory where another member can plant a name
//! for a pid before the process that has it writes there.
//!
//! - The file is created with `O_CREAT | O_EXCL | O_NOFOLLOW`. open(2): with `O_CREAT` and
//!   `O_EXCL`, "symbolic links are not followed: if pathname is a symbolic link, then open()
//!   fails regardless of where the symbolic link points" — a link planted at the name is never
//!   followed, dangling or not.
//! - A file already there (an earlier process with the same pid) is appended to only if, opened
//!   with `O_NOFOLLOW` (open(2): "If the trailing component (i.e., basename) of pathname is a
//!   symbolic link, then the open fails, with the error ELOOP") and `O_NONBLOCK` (a FIFO
//!   never blocks), it is a regular file owned by the agent's effective uid with one link (a
//!   hard link planted to someone's file has two).
//! - Otherwise the name is refused, counted in [`icicle_catalog_agent_refused`] and reported
//!   once on stderr, and the records go to a fresh name, `catalog.<host>.<pid>.<random>.txt`,
//!   created the same way (no record is lost to a planted name).
//! - Each later record reopens the file with `O_NOFOLLOW` and checks that it is still the same
//!   file (device and inode); a file removed or replaced in between is created afresh as above.

use std::ffi::{c_int, CString};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::{errno, real, Config};

/// Names of the agent's catalog file (and collectors) it refused to use: a symbolic link, a
/// file of another user, a file with several links or not a regular file where its catalog file
/// would be, or a collector run by another user. Readable by the host or a debugger
/// (`dlsym(RTLD_DEFAULT, "icicle_catalog_agent_refused")`, a `uint64_t`); a forked child counts
/// its own from zero.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static icicle_catalog_agent_refused: AtomicU64 = AtomicU64::new(0);

/// Whether this process (or the parent it was forked from) has printed the line about a name
/// or collector it refused.
static REFUSAL_REPORTED: AtomicBool = AtomicBool::new(false);

/// How many fresh names are tried after the usual one is refused.
const FRESH_TRIES: usize = 8;

/// The catalog file in use.
struct Current {
    /// The process it was opened for (a forked child makes its own).
    pid: u32,
    path: CString,
    /// Its identity, checked at each reopen.
    dev: u64,
    ino: u64,
}

/// This process's catalog file.
#[derive(Default)]
pub(crate) struct OutFile {
    file: Option<Current>,
    /// A short write could not be cut back off the file: the next record starts with a
    /// newline, so the cut one ends at a line break and reads as one reject.
    pub(crate) ragged: bool,
}

/// Why a name could not be taken as this process's catalog file.
enum Open {
    /// The file there is someone else's, or not a plain file of ours: try a fresh name.
    Refused(String),
    /// The directory cannot be written (errno): the record is lost, as before.
    Failed(c_int),
}

/// Count a refusal and, the first time in this process, say so on stderr in one line.
pub(crate) fn refused(what: &str) {
    icicle_catalog_agent_refused.fetch_add(1, Ordering::Relaxed);
    if REFUSAL_REPORTED.swap(true, Ordering::Relaxed) {
        return;
    }
    let line = format!("icicle catalog agent: refused {what}; counted in icicle_catalog_agent_refused\n");
    // SAFETY: one write of a valid buffer to the host's stderr; its result does not matter.
    unsafe { libc::write(libc::STDERR_FILENO, line.as_ptr().cast(), line.len()) };
}

/// In a forked child: its own count of refusals (the line stays printed once per family).
pub(crate) fn reset_after_fork() {
    icicle_catalog_agent_refused.store(0, Ordering::Relaxed);
}

/// The catalog file of this process, opened for appending (close-on-exec); the errno when
/// none can be opened. Inside a section, under the lock of `out`.
pub(crate) fn open(cfg: &Config, out: &mut OutFile) -> Result<c_int, c_int> {
    let pid = std::process::id();
    if let Some(cur) = out.file.as_ref().filter(|c| c.pid == pid) {
        if let Some(fd) = reopen(cur) {
            return Ok(fd);
        }
    }
    // A new process, or its file removed or replaced: create it.
    let _ = std::fs::create_dir_all(&cfg.catalog_dir);
    let host = host_name();
    let usual = cfg.catalog_dir.join(format!("catalog.{host}.{pid}.txt"));
    let mut why_not_usual = None;
    for attempt in 0..=FRESH_TRIES {
        let path = if attempt == 0 {
            usual.clone()
        } else {
            cfg.catalog_dir.join(format!("catalog.{host}.{pid}.{:016x}.txt", random()))
        };
        let Ok(c) = CString::new(path.as_os_str().as_bytes()) else { return Err(libc::EINVAL) };
        match create(&c) {
            Ok((fd, dev, ino)) => {
                if let Some(why) = why_not_usual {
                    refused(&format!(
                        "{} ({why}): this process's catalog is {} instead",
                        usual.display(),
                        path.display()
                    ));
                }
                out.file = Some(Current { pid, path: c, dev, ino });
                out.ragged = false;
                return Ok(fd);
            }
            Err(Open::Refused(why)) => {
                why_not_usual.get_or_insert(why);
            }
            Err(Open::Failed(e)) => return Err(e),
        }
    }
    if let Some(why) = why_not_usual {
        refused(&format!("{} ({why}) and {FRESH_TRIES} fresh names", usual.display()));
    }
    Err(libc::EEXIST)
}

/// The file `cur` names, opened again if it is still the same file.
fn reopen(cur: &Current) -> Option<c_int> {
    let (open, close) = (real().open?, real().close?);
    // SAFETY: a NUL-terminated path; the real open.
    let fd = unsafe {
        open(
            cur.path.as_ptr(),
            libc::O_WRONLY | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return None;
    }
    match identity(fd) {
        Some((_, dev, ino, _, _)) if (dev, ino) == (cur.dev, cur.ino) => Some(fd),
        _ => {
            // SAFETY: our own descriptor.
            unsafe { close(fd) };
            None
        }
    }
}

/// `(mode, dev, ino, uid, nlink)` of the open file `fd`.
fn identity(fd: c_int) -> Option<(libc::mode_t, u64, u64, libc::uid_t, u64)> {
    // SAFETY: stat is plain integers; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into the stat we own; `fd` is an open descriptor.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_mode, st.st_dev, st.st_ino, st.st_uid, st.st_nlink))
}

/// Create `path` as a new file of ours, or open the file of ours already there (see the module
/// documentation); returns the descriptor and the file's device and inode.
fn create(path: &CString) -> Result<(c_int, u64, u64), Open> {
    let r = real();
    let (Some(open), Some(close)) = (r.open, r.close) else { return Err(Open::Failed(libc::ENOSYS)) };
    let append = libc::O_WRONLY | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path; the real open.
    let fd = unsafe { open(path.as_ptr(), append | libc::O_CREAT | libc::O_EXCL, 0o644) };
    let fd = if fd >= 0 {
        fd
    } else if errno() == libc::EEXIST {
        // SAFETY: as above; O_NONBLOCK: opening a FIFO planted there does not wait for a reader
        // (and is ignored for the regular file it must be).
        let fd = unsafe { open(path.as_ptr(), append | libc::O_NONBLOCK, 0) };
        if fd < 0 {
            let e = errno();
            return Err(match e {
                libc::ELOOP => Open::Refused("a symbolic link".into()),
                libc::EROFS | libc::ENOSPC | libc::EDQUOT | libc::EIO | libc::ENOMEM | libc::EMFILE | libc::ENFILE => {
                    Open::Failed(e)
                }
                _ => Open::Refused(format!("cannot be opened: errno {e}")),
            });
        }
        fd
    } else {
        return Err(Open::Failed(errno()));
    };
    let Some((mode, dev, ino, uid, nlink)) = identity(fd) else {
        let e = errno();
        // SAFETY: our own descriptor.
        unsafe { close(fd) };
        return Err(Open::Failed(e));
    };
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let refusal = if mode & libc::S_IFMT != libc::S_IFREG {
        Some("not a regular file".to_string())
    } else if uid != euid {
        Some(format!("owned by uid {uid}"))
    } else if nlink != 1 {
        Some(format!("a file with {nlink} links"))
    } else {
        None
    };
    match refusal {
        None => Ok((fd, dev, ino)),
        Some(why) => {
            // SAFETY: our own descriptor, closed without a byte written.
            unsafe { close(fd) };
            Err(Open::Refused(why))
        }
    }
}

/// This machine's host name ("localhost" if it cannot be read).
fn host_name() -> String {
    let mut host = [0u8; 256];
    // SAFETY: a buffer of the given length.
    if unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) } != 0 {
        return "localhost".into();
    }
    let end = host.iter().position(|&b| b == 0).unwrap_or(host.len());
    String::from_utf8_lossy(&host[..end]).into_owned()
}

/// 64 bits no one can guess (`getrandom`), or the clock's and the pid's when it is not ready.
fn random() -> u64 {
    let mut v = 0u64;
    // SAFETY: an 8-byte buffer; GRND_NONBLOCK never waits.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, libc::GRND_NONBLOCK) };
    if n == 8 {
        return v;
    }
    // SAFETY: timespec is plain integers; all zeroes is a valid value.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ((ts.tv_nsec as u64) << 20) ^ (ts.tv_sec as u64) ^ (u64::from(std::process::id()) << 40)
}
