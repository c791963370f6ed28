//! Handing records to the node's collector (`icicle-catalogd`) over a Unix socket, when one
//! listens; the caller falls back to the per-process catalog file when a record is not taken.
//!
//! Protocol: a `SOCK_SEQPACKET` connection per process, opened at its first record; each record
//! is one message (the exact text of one entry or `gone` record), so the collector receives a
//! whole record or nothing, whatever happens to the host; the collector answers each message
//! with one byte, `K` once the record is written to its merged catalog file (so it survives the
//! host's or the collector's death), anything else when it could not write it. The send and
//! the answer each wait at most [`TIMEOUT_MS`] (`ICICLE_CATALOG_TIMEOUT_MS`); a record not acknowledged in time (or any
//! failure) drops the connection, is written to the per-process file instead, and the collector
//! is left alone for [`RETRY_MS`]. A record the collector wrote but could not acknowledge is
//! then in both files (readers keep one entry per path).
//!
//! Only a collector run by this process's effective uid or by root is used
//! ([`trusted_collector`]): in a shared directory, another user's socket gets no records.
//!
//! The connection's descriptor lives in the host's descriptor table (close-on-exec, moved up
//! to [`HIGH_FD`] when the limit allows): before each use it is checked (`fstat`) to still be
//! the agent's socket, so a host that closed it, or reused its number, is never written to.

use std::ffi::CString;
use std::sync::atomic::{AtomicI32, Ordering};

use libc::c_int;

use crate::section::Shared;

/// How long a send, or the wait for the collector's answer, may block the host, unless
/// `ICICLE_CATALOG_TIMEOUT_MS` says otherwise.
pub const TIMEOUT_MS: i64 = 1000;
/// After a failure, how long records go to the per-process file without trying the collector.
pub const RETRY_MS: u64 = 2000;
/// The lowest descriptor number the connection is moved to (out of the host's usual range).
pub const HIGH_FD: c_int = 900;

/// This process's connection to the collector.
struct Conn {
    /// The process that opened it (a `vfork` child sharing our memory must not use it).
    pid: u32,
    fd: c_int,
    /// The socket's identity, checked before each use.
    dev: u64,
    ino: u64,
}

/// The connection, and when the collector may be tried again after a failure.
#[derive(Default)]
pub(crate) struct Link {
    conn: Option<Conn>,
    /// Monotonic milliseconds before which the collector is not tried.
    quiet_until: u64,
}

fn link() -> &'static Shared<Link> {
    static LINK: Shared<Link> = Shared::new();
    &LINK
}

/// The connection's descriptor, for the fork child handler to close its inherited copy.
static LINK_FD: AtomicI32 = AtomicI32::new(-1);

/// In a forked child (the `pthread_atfork` handler): close the parent's connection inherited
/// here and start without one; the child connects on its own first record. Only an atomic swap
/// and a `close` system call: async-signal-safe.
pub(crate) fn reset_after_fork() {
    let fd = LINK_FD.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: the child's copy of the agent's own socket; a raw system call (no interposition).
        unsafe { libc::syscall(libc::SYS_close, fd as libc::c_long) };
    }
    link().reset();
}

fn monotonic_ms() -> u64 {
    // SAFETY: timespec is plain integers; all zeroes is a valid value.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Hand `bytes` (one whole record) to the collector listening on `socket`, waiting at most
/// `timeout_ms` for the send and again for the answer; returns whether it acknowledged the
/// record (otherwise the caller writes it to the per-process file). Inside a section.
pub(crate) fn hand_over(socket: &CString, timeout_ms: i64, bytes: &[u8]) -> bool {
    let mut l = link().lock();
    let pid = std::process::id();
    if let Some(c) = l.conn.as_ref() {
        if c.pid != pid {
            // A vfork child: the connection is its parent's.
            return false;
        }
        if !still_ours(c) {
            // The host closed the descriptor (or reused its number): not ours to close.
            l.conn = None;
            LINK_FD.store(-1, Ordering::Relaxed);
        }
    }
    let now = monotonic_ms();
    if l.conn.is_none() {
        if now < l.quiet_until {
            return false;
        }
        match connect(socket, pid, timeout_ms) {
            Some(c) => {
                LINK_FD.store(c.fd, Ordering::Relaxed);
                l.conn = Some(c);
            }
            None => {
                l.quiet_until = now + RETRY_MS;
                return false;
            }
        }
    }
    let Some(c) = l.conn.as_ref() else { return false };
    match exchange(c.fd, bytes) {
        Exchange::Taken => return true,
        // Larger than a message can be (hundreds of KiB): that record goes to the file alone.
        Exchange::TooBig => return false,
        Exchange::Failed => {}
    }
    // SAFETY: our own socket, checked above.
    unsafe { libc::close(c.fd) };
    l.conn = None;
    LINK_FD.store(-1, Ordering::Relaxed);
    l.quiet_until = monotonic_ms() + RETRY_MS;
    false
}

/// Whether `c.fd` is still the socket the agent opened.
fn still_ours(c: &Conn) -> bool {
    // SAFETY: stat is plain integers; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into the stat we own; a closed descriptor just fails.
    unsafe { libc::fstat(c.fd, &mut st) == 0 && st.st_dev == c.dev && st.st_ino == c.ino }
}

/// Connect to the collector at `socket` when a socket is there: close-on-exec, send and
/// receive timeouts set, moved up to [`HIGH_FD`] when it can be.
fn connect(socket: &CString, pid: u32, timeout_ms: i64) -> Option<Conn> {
    // SAFETY: stat is plain integers; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: stat of a NUL-terminated path writes into the stat we own.
    if unsafe { libc::stat(socket.as_ptr(), &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return None;
    }
    let bytes = socket.as_bytes();
    // SAFETY: a zeroed sockaddr_un, its path filled below within bounds.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return None;
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, &s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    // SAFETY: a new socket of our own.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    let tv = libc::timeval { tv_sec: timeout_ms / 1000, tv_usec: (timeout_ms % 1000 * 1000) as libc::suseconds_t };
    let tvp = (&tv as *const libc::timeval).cast();
    let tvlen = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
    let len = (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    // SAFETY: our socket; valid option values and address of the given lengths.
    let ok = unsafe {
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDTIMEO, tvp, tvlen) == 0
            && libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, tvp, tvlen) == 0
            && libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len) == 0
    };
    if !ok || !trusted_collector(fd, socket) {
        // SAFETY: our own socket.
        unsafe { libc::close(fd) };
        return None;
    }
    // SAFETY: duplicates our socket to a free number >= HIGH_FD (fails past the limit).
    let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, HIGH_FD) };
    let fd = if high >= 0 {
        // SAFETY: our own socket, now also at `high`.
        unsafe { libc::close(fd) };
        high
    } else {
        fd
    };
    // SAFETY: stat is plain integers; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat of our socket writes into the stat we own.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        // SAFETY: our own socket.
        unsafe { libc::close(fd) };
        return None;
    }
    Some(Conn { pid, fd, dev: st.st_dev, ino: st.st_ino })
}

/// Whether the collector at the other end of `fd` runs as this process's effective uid or as
/// root; another user's collector (a socket planted in a shared directory) is refused, counted
/// and reported once, and the records go to the per-process file. unix(7), `SO_PEERCRED`:
/// "the credentials of the peer process connected to this socket ... those that were in
/// effect at the time of the call to connect(2), listen(2), or socketpair(2)" — here the
/// collector's at its `listen`.
fn trusted_collector(fd: c_int, socket: &CString) -> bool {
    // SAFETY: ucred is plain integers; all zeroes is a valid value.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the ucred we own; `fd` is our connected socket.
    let got = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len)
    } == 0;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if got && (cred.uid == euid || cred.uid == 0) {
        return true;
    }
    let who = if got { format!("run by uid {}", cred.uid) } else { "whose user cannot be told".to_string() };
    crate::catalog_file::refused(&format!(
        "the collector at {} ({who}): records go to this process's own catalog file",
        String::from_utf8_lossy(socket.as_bytes())
    ));
    false
}

/// What became of a record sent to the collector.
enum Exchange {
    /// Written by the collector.
    Taken,
    /// Too large for one message: not sent; the connection is still good.
    TooBig,
    /// Not acknowledged in time, refused, or the collector is gone: drop the connection.
    Failed,
}

/// Send one record as one message and wait for the collector's answer. `MSG_NOSIGNAL`: a
/// collector gone raises no `SIGPIPE` (it would stay pending in the section and kill the host
/// after it).
fn exchange(fd: c_int, bytes: &[u8]) -> Exchange {
    // SAFETY: a valid buffer and length on our socket; signals are blocked (no EINTR).
    let n = unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) };
    if n < 0 && crate::errno() == libc::EMSGSIZE {
        return Exchange::TooBig;
    }
    if n < 0 || n as usize != bytes.len() {
        return Exchange::Failed;
    }
    let mut answer = [0u8; 1];
    // SAFETY: a one-byte buffer on our socket.
    let n = unsafe { libc::recv(fd, answer.as_mut_ptr().cast(), 1, 0) };
    if n == 1 && answer[0] == b'K' {
        Exchange::Taken
    } else {
        Exchange::Failed
    }
}
