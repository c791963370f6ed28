//! The collector's server: one thread, one `poll` loop over the listening `SOCK_SEQPACKET`
//! socket, the connected agents and a `signalfd` for `SIGTERM`/`SIGINT`/`SIGHUP`.
//!
//! Safe in a shared directory: the socket is made with mode 0600 whatever the umask, a
//! connection whose peer runs as another user than the collector (root aside) is closed
//! unread (`SO_PEERCRED`), and the merged file is never opened through a link or as someone
//! else's file ([`crate::files`]).
//!
//! Each message is one record; it is appended to the merged catalog file with one `write`
//! (cut back off the file if it cannot be written whole) and answered with `K`, or `E` when it
//! was not written (too large, not ending in a newline, the file failing): the agent then
//! writes it to its own file. The file is `fdatasync`ed at most [`SYNC_MS`] after a write and
//! at stop. At stop, the listening socket is closed and removed, every connection is shut for
//! reading (an agent's later send fails at once and goes to its file) and the records already
//! queued (also on connections not yet accepted) are written and answered, then the file is
//! synced. The text is compacted ([`crate::compact`]) after `--compact-idle-secs` without a
//! record, and at stop.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a written record may wait for its `fdatasync`.
pub const SYNC_MS: u64 = 200;
/// The largest record taken (an entry with a very long layout is a few hundred KiB).
pub const MAX_RECORD: usize = 4 << 20;
/// Records taken from one connection before the others get their turn.
const BATCH: usize = 64;
/// How long accepting pauses when the collector is out of descriptors.
const ACCEPT_PAUSE_MS: u64 = 100;
/// How many refused users are named in the log (each once).
const MAX_LOGGED_UIDS: usize = 64;

/// A running collector.
pub struct Server {
    listen: OwnedFd,
    signals: OwnedFd,
    conns: Vec<OwnedFd>,
    out: File,
    /// The merged catalog file's length after the last whole record.
    len: u64,
    /// Written since the last sync, and when the first such write was.
    dirty: Option<Instant>,
    /// Wakes the thread that syncs the file (so a slow `fdatasync` never delays an answer).
    syncer: Option<(mpsc::SyncSender<()>, JoinHandle<()>)>,
    /// Out of descriptors: connections are left in the backlog until then.
    accept_paused: Option<Instant>,
    buf: Vec<u8>,
    /// The socket path (removed at stop, if it is still the socket bound here).
    socket: PathBuf,
    /// The socket file's device and inode.
    identity: (u64, u64),
    /// Records written.
    pub records: u64,
    /// Connections refused: their peer ran as another user ([`peer_allowed`]).
    pub refused: u64,
    /// The users refused so far (each logged once; at most [`MAX_LOGGED_UIDS`]).
    refused_uids: BTreeSet<libc::uid_t>,
    /// The merged text file's path.
    text: PathBuf,
    /// Compact the text after this long without a record (`None`: only at stop).
    compact_idle: Option<Duration>,
    /// When the last record was written, while the text holds records not yet compacted.
    uncompacted: Option<Instant>,
    /// Compactions done.
    pub compactions: u64,
}

fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// `sockaddr_un` for `path`, and its length.
fn address(path: &Path) -> Result<(libc::sockaddr_un, libc::socklen_t), String> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: a zeroed sockaddr_un, its path filled below within bounds.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(format!(
            "socket path {} is too long (at most {} bytes) or has a NUL",
            path.display(),
            addr.sun_path.len() - 1
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, &s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    Ok((addr, (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t))
}

fn seqpacket(flags: libc::c_int) -> Result<OwnedFd, String> {
    // SAFETY: a new socket, owned at once.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | flags, 0) };
    if fd < 0 {
        return Err(os_err("socket"));
    }
    // SAFETY: a descriptor just opened and not owned elsewhere.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether a collector accepts connections on `path`.
pub fn listening(path: &Path) -> bool {
    let (Ok((addr, len)), Ok(fd)) = (address(path), seqpacket(0)) else { return false };
    // SAFETY: our socket and a valid address of the given length.
    unsafe { libc::connect(fd.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len) == 0 }
}

/// Make room for the socket at `path`: nothing there, or a socket of this user that no
/// collector answers on (removed). A live collector, a socket of another user, or anything
/// else there (a file, a link) is an error: never removed on the collector's word.
fn remove_stale(path: &Path) -> Result<(), String> {
    let md = match std::fs::symlink_metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if !md.file_type().is_socket() {
        return Err(format!("{} exists and is not a socket: refusing to replace it", path.display()));
    }
    if md.uid() != euid {
        return Err(format!("{} is a socket of uid {}: refusing to replace it", path.display(), md.uid()));
    }
    if listening(path) {
        return Err(format!("a collector already listens on {}", path.display()));
    }
    std::fs::remove_file(path).map_err(|e| format!("removing the stale socket {}: {e}", path.display()))
}

/// Whether the peer of `conn` may hand records over: it runs as this collector's effective uid
/// or as root. unix(7), `SO_PEERCRED`: "the credentials of the peer process connected to this
/// socket ... those that were in effect at the time of the call to connect(2)". `Err` carries
/// the peer's uid (`None` when it cannot be read: refused too).
fn peer_allowed(conn: &OwnedFd) -> Result<(), Option<libc::uid_t>> {
    // SAFETY: ucred is plain integers; all zeroes is a valid value.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the ucred we own; the fd is our accepted socket.
    if unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    } != 0
    {
        return Err(None);
    }
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if cred.uid == euid || cred.uid == 0 {
        Ok(())
    } else {
        Err(Some(cred.uid))
    }
}

/// Block the stop signals on this (the only) thread and take them from a `signalfd`.
fn stop_signals() -> Result<OwnedFd, String> {
    // SAFETY: a sigset filled before use; masks only this thread; a new signalfd, owned at once.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err("pthread_sigmask failed".into());
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(os_err("signalfd"));
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// A thread that `fdatasync`s (a second handle of) `file` each time it is asked, until the
/// sender is dropped.
fn spawn_syncer(file: &File, path: &Path) -> Result<(mpsc::SyncSender<()>, JoinHandle<()>), String> {
    let file = file.try_clone().map_err(|e| format!("{}: {e}", path.display()))?;
    let (tx, rx) = mpsc::sync_channel::<()>(1);
    let thread = std::thread::Builder::new()
        .name("sync".into())
        .spawn(move || {
            while rx.recv().is_ok() {
                let _ = file.sync_data();
            }
        })
        .map_err(|e| format!("sync thread: {e}"))?;
    Ok((tx, thread))
}

/// One connection per agent process: raise the soft descriptor limit to the hard one.
fn raise_fd_limit() {
    // SAFETY: get/setrlimit on a zeroed struct.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

impl Server {
    /// Open (append to) the merged catalog `out`, and listen on `socket` (a stale socket file
    /// no collector answers on is replaced; a live one is an error).
    pub fn bind(out: &Path, socket: &Path, compact_idle: Option<Duration>) -> Result<Server, String> {
        let signals = stop_signals()?;
        let file = crate::files::append_own(out)?;
        let len = file.metadata().map_err(|e| format!("{}: {e}", out.display()))?.len();
        remove_stale(socket)?;
        let (addr, alen) = address(socket)?;
        let listen = seqpacket(libc::SOCK_NONBLOCK)?;
        // unix(7): "The socket file has all permissions enabled, other than those that are
        // turned off by the process umask" — so the umask is 0177 while it is made (one thread
        // runs yet): mode 0600, only this user (and root) may connect, whatever the caller's
        // umask.
        // SAFETY: umask has no preconditions; restored right after.
        let umask = unsafe { libc::umask(0o177) };
        // SAFETY: our socket and a valid address of the given length.
        let bound = unsafe { libc::bind(listen.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), alen) } == 0;
        let bind_err = os_err(&format!("bind {}", socket.display()));
        // SAFETY: as above.
        unsafe { libc::umask(umask) };
        if !bound {
            return Err(bind_err);
        }
        let identity = std::fs::symlink_metadata(socket)
            .map(|m| (m.dev(), m.ino()))
            .map_err(|e| format!("{}: {e}", socket.display()))?;
        // SAFETY: our bound socket.
        if unsafe { libc::listen(listen.as_raw_fd(), 512) } != 0 {
            let _ = std::fs::remove_file(socket);
            return Err(os_err("listen"));
        }
        raise_fd_limit();
        let syncer = spawn_syncer(&file, out)?;
        Ok(Server {
            listen,
            signals,
            conns: Vec::new(),
            out: file,
            len,
            dirty: None,
            syncer: Some(syncer),
            accept_paused: None,
            buf: vec![0; MAX_RECORD],
            socket: socket.to_path_buf(),
            identity,
            records: 0,
            refused: 0,
            refused_uids: BTreeSet::new(),
            text: out.to_path_buf(),
            compact_idle,
            // Records left by an earlier run are compacted at the first idle moment.
            uncompacted: (len > 0).then(Instant::now),
            compactions: 0,
        })
    }

    /// Serve until a stop signal, then finish: every record queued written and answered, the
    /// socket removed, the file synced.
    pub fn serve(&mut self) -> Result<(), String> {
        loop {
            self.accept_paused = self.accept_paused.filter(|&t| t > Instant::now());
            let mut fds: Vec<libc::pollfd> = [self.signals.as_raw_fd(), self.listen.as_raw_fd()]
                .into_iter()
                .chain(self.conns.iter().map(AsRawFd::as_raw_fd))
                .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
                .collect();
            if self.accept_paused.is_some() {
                fds[1].events = 0;
            }
            let sync_in = self.dirty.map(|t| Duration::from_millis(SYNC_MS).saturating_sub(t.elapsed()));
            let resume_in = self.accept_paused.map(|t| t.saturating_duration_since(Instant::now()));
            let compact_in = self.uncompacted.zip(self.compact_idle).map(|(t, idle)| idle.saturating_sub(t.elapsed()));
            let timeout = [sync_in, resume_in, compact_in]
                .into_iter()
                .flatten()
                .min()
                .map_or(-1, |d| d.as_millis().min(libc::c_int::MAX as u128) as libc::c_int);
            // SAFETY: a valid array of pollfd of the given length.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return Err(os_err("poll"));
            }
            if n > 0 && fds[0].revents != 0 {
                // Under systemd (`Type=notify`): finishing what is queued, then gone.
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
                break;
            }
            if n > 0 && fds[1].revents != 0 {
                self.accept();
            }
            if n > 0 {
                let ready: Vec<RawFd> = fds[2..].iter().filter(|p| p.revents != 0).map(|p| p.fd).collect();
                let conns = std::mem::take(&mut self.conns);
                for c in conns {
                    // A connection that ended or failed is closed (dropped) here.
                    if !ready.contains(&c.as_raw_fd()) || self.take(&c, BATCH) {
                        self.conns.push(c);
                    }
                }
            }
            if self.dirty.is_some_and(|t| t.elapsed() >= Duration::from_millis(SYNC_MS)) {
                self.sync();
            }
            if self.uncompacted.zip(self.compact_idle).is_some_and(|(t, idle)| t.elapsed() >= idle) {
                if self.worth_compacting() {
                    self.compact(false);
                } else {
                    // Until the text grows (or the collector stops).
                    self.uncompacted = None;
                }
            }
        }
        self.finish();
        self.compact(true);
        Ok(())
    }

    /// Whether an idle compaction pays: the text is at least an eighth of the compact file it
    /// would rewrite, so the rewrites of a growing catalog cost a bounded multiple of its size.
    fn worth_compacting(&self) -> bool {
        let compacted = std::fs::metadata(crate::compact::compact_path(&self.text)).map_or(0, |m| m.len());
        self.len.saturating_mul(8) >= compacted
    }

    /// Compact the text into the compact file ([`crate::compact`]; at stop the text file is
    /// removed); a failure is logged and the text kept (tried again after the next record,
    /// or at stop).
    fn compact(&mut self, at_stop: bool) {
        self.uncompacted = None;
        match crate::compact::compact(&self.text, &self.out, self.len, at_stop) {
            Ok(Some(c)) => {
                self.len = 0;
                self.compactions += 1;
                eprintln!(
                    "icicle-catalogd: compacted {} records into {} ({} entries)",
                    c.text_records,
                    crate::compact::compact_path(&self.text).display(),
                    c.entries
                );
            }
            Ok(None) => {}
            Err(e) => eprintln!("icicle-catalogd: not compacted: {e}"),
        }
    }

    /// Accept every pending connection (non-blocking).
    fn accept(&mut self) {
        loop {
            // SAFETY: our listening socket; the new descriptor is owned at once.
            let fd = unsafe {
                libc::accept4(
                    self.listen.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                if matches!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                    self.accept_paused = Some(Instant::now() + Duration::from_millis(ACCEPT_PAUSE_MS));
                }
                return;
            }
            // SAFETY: just accepted, not owned elsewhere.
            let conn = unsafe { OwnedFd::from_raw_fd(fd) };
            match peer_allowed(&conn) {
                Ok(()) => self.conns.push(conn),
                // Closed unread: the agent gets no answer and writes its own file.
                Err(uid) => self.refuse(uid),
            }
        }
    }

    /// Count a connection refused (its peer ran as `uid`, `None` when unknown) and log the
    /// first one of each user.
    fn refuse(&mut self, uid: Option<libc::uid_t>) {
        self.refused += 1;
        let key = uid.unwrap_or(libc::uid_t::MAX);
        if self.refused_uids.len() < MAX_LOGGED_UIDS && self.refused_uids.insert(key) {
            let who = uid.map_or("a peer whose user cannot be told".to_string(), |u| format!("uid {u}"));
            eprintln!("icicle-catalogd: refused a connection from {who}: only this collector's user and root may hand it records");
        }
    }

    /// Take up to `max` queued records from `conn`, each written and answered; returns whether
    /// the connection stays open (false at its end or an error).
    fn take(&mut self, conn: &OwnedFd, max: usize) -> bool {
        for _ in 0..max {
            // SAFETY: our buffer and its length; MSG_TRUNC returns the message's real length.
            let n = unsafe {
                libc::recv(
                    conn.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            if n < 0 {
                return std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN);
            }
            if n == 0 {
                return false;
            }
            let n = n as usize;
            let written = n <= self.buf.len() && self.write_record(n);
            let answer: &[u8] = if written { b"K" } else { b"E" };
            // SAFETY: a one-byte buffer; a peer gone raises no SIGPIPE.
            unsafe { libc::send(conn.as_raw_fd(), answer.as_ptr().cast(), 1, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        }
        true
    }

    /// Append the record in `buf[..n]` whole, or not at all; returns whether it was written.
    fn write_record(&mut self, n: usize) -> bool {
        let Some(record) = self.buf.get(..n) else { return false };
        if !record.ends_with(b"\n") {
            return false;
        }
        match self.out.write_all(record) {
            Ok(()) => {
                self.len += n as u64;
                self.records += 1;
                self.dirty.get_or_insert_with(Instant::now);
                self.uncompacted = Some(Instant::now());
                true
            }
            Err(_) => {
                // Cut a partial record back off; if even that fails, the reader rejects it.
                let _ = self.out.set_len(self.len);
                false
            }
        }
    }

    /// Have the sync thread `fdatasync` the file (one request pending is enough).
    fn sync(&mut self) {
        if let Some((tx, _)) = self.syncer.as_ref() {
            let _ = tx.try_send(());
        }
        self.dirty = None;
    }

    /// Stop: no new connections, every queued record written and answered, the file synced.
    fn finish(&mut self) {
        // Only the socket bound here: one another collector put there since is left alone.
        if std::fs::symlink_metadata(&self.socket).is_ok_and(|m| (m.dev(), m.ino()) == self.identity) {
            let _ = std::fs::remove_file(&self.socket);
        }
        // Connections made but not yet accepted are served too; then the listening socket is
        // closed (replaced by a placeholder): a connection made after that is reset, and its
        // agent, never answered, writes the record to its own file.
        self.accept();
        if let Ok(placeholder) = seqpacket(0) {
            self.listen = placeholder;
        }
        let conns = std::mem::take(&mut self.conns);
        for c in &conns {
            // SAFETY: our connection; later sends by the agent fail (EPIPE) at once.
            unsafe { libc::shutdown(c.as_raw_fd(), libc::SHUT_RD) };
        }
        for c in &conns {
            while self.take(c, BATCH) {
                let mut p = libc::pollfd { fd: c.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: one pollfd we own, for our open connection; a zero timeout returns at once.
                if unsafe { libc::poll(&mut p, 1, 0) } <= 0 {
                    break;
                }
            }
        }
        drop(conns);
        if let Some((tx, thread)) = self.syncer.take() {
            drop(tx);
            let _ = thread.join();
        }
        let _ = self.out.sync_data();
        self.dirty = None;
    }
}
