//! The PRISM catalog agent, `libcatalog_agent.so`: load it with `LD_PRELOAD` and it
//! records, in the SwiftLoad catalog format, the metadata and stripe layout of every regular
//! file the application creates or opens for writing under a root.
//!
//! ```text
//! CATALOG_DIR=./catalog ICICLE_CATALOG_ROOT=/scratch/run42 LD_PRELOAD=libcatalog_agent.so ./app
//! ```
//!
//! - Interposes `open`, `open64`, `openat`, `openat64`, `creat`, `creat64`, the fortified
//!   `__open_2`, `__open64_2`, `__openat_2`, `__openat64_2`, the `mkstemp` family (`mkstemp`,
//!   `mkostemp`, `mkstemps`, `mkostemps` and their `64` names), stdio's `fopen`, `fopen64`,
//!   `_IO_fopen`, `freopen`, `freopen64`, `fclose`, `_IO_fclose`, `close`, and `rename`,
//!   `renameat`, `renameat2`; the real functions are looked up once (`dlsym(RTLD_NEXT)`).
//! - An open with `O_CREAT`, `O_WRONLY` or `O_RDWR` that succeeds is tracked when the file's
//!   absolute path (`/proc/self/fd/N`, so relative paths and `openat` directories resolve)
//!   is under `ICICLE_CATALOG_ROOT` (default `/`). Read-only opens are not. For `mkstemp` and
//!   stdio (whose libc opens internally) the new descriptor's access mode decides.
//! - Descriptors inherited open for writing onto such files (a shell's `> out` before it
//!   exec'd the program) are tracked from the start.
//! - On `close` or `fclose` (at exit for files never closed, or still open through a duplicate
//!   descriptor such as a shell redirect's `dup2` onto stdout), the file is `lstat`ed and `stat`ed,
//!   its layout read, and one entry appended to `CATALOG_DIR/catalog.<host>.<pid>.txt` (a file
//!   per process: no interleaving) with one `write` of the whole entry.
//! - The node's collector: when a socket is there (`ICICLE_CATALOG_SOCKET`, else
//!   `CATALOG_DIR/.collector.sock`, where `icicle-catalogd start --dir CATALOG_DIR` listens),
//!   each record is handed to it instead, as one `SOCK_SEQPACKET` message over a connection
//!   the process opens at its first record (a forked child opens its own), and the collector
//!   appends it to `catalog.<host>.collector.txt` and acknowledges it once written (and
//!   compacts that text into `catalog.<host>.collector.icat` when idle and at stop). A record
//!   handed over at close survives the host being killed after it. Any failure (no collector,
//!   the send or the acknowledgement taking over a second, `ICICLE_CATALOG_TIMEOUT_MS`, the
//!   collector gone) puts that record in the per-process file instead, and leaves the
//!   collector alone for two seconds ([`collector`]).
//! - A successful rename of a file this process recorded (one of the last [`RECORDED_CAP`]) or
//!   has open for writing, or onto such a path, or of a directory above such files, moves the
//!   catalog with it: a `gone` record for each old name (and for a file the rename replaced),
//!   then an entry for each new name under the root (an open file's at its close).
//! - Signals: the agent's work (tracking, recording, every lock it takes) runs in sections
//!   with all signals blocked on the thread, restored after; the host's own calls run with its
//!   mask. A handler therefore never runs while its thread is inside the agent, so one that
//!   opens and closes files is tracked and recorded like any other code, and a call the agent
//!   makes itself passes straight through to libc. A signal that arrives during a section is
//!   delivered when it ends (at most one entry's work, including an `lfs getstripe` run).
//! - A child forked without exec records what it opens for writing itself, in its own catalog
//!   file (`catalog.<host>.<childpid>.txt`): at `close` or `fclose`, and at `exit` for files
//!   still open (not at `_exit`, which runs no exit handlers). Descriptors it inherited are its
//!   parent's to record, even if the child closes them; renames of files the parent recorded
//!   are not followed in the child. The `pthread_atfork` child handler abandons the inherited state
//!   (another parent thread may have held a lock at the fork) rather than lock it.
//! - A catalog directory that cannot be created or written (full, read-only, not a
//!   directory): the first failure is reported in one line on stderr, naming the directory
//!   and the errno; every record not written is counted in [`icicle_catalog_agent_lost`]. A
//!   write cut short is cut back off the file (`ftruncate`), so the catalog only ever holds
//!   whole entries (and a reader rejects, with file and line, any entry without its `end`).
//! - Shared catalog directories (a project directory every member of a group writes): the
//!   per-process file is created with `O_CREAT | O_EXCL | O_NOFOLLOW` and reopened with
//!   `O_NOFOLLOW`, checked to be the same file each time, so a symbolic link, a hard link or
//!   another user's file planted at `catalog.<host>.<pid>.txt` is never written: the agent
//!   takes a fresh name (`catalog.<host>.<pid>.<random>.txt`), counts the refusal in
//!   [`catalog_file::icicle_catalog_agent_refused`] and says so once on stderr. A collector
//!   is used only if it runs as the process's effective uid or as root (`SO_PEERCRED`).
//! - Settings are read with `secure_getenv(3)`: in a set-user-ID or set-group-ID program
//!   (`AT_SECURE`) there are none, so the agent only passes calls through there.
//! - Layouts: `ICICLE_CATALOG_LAYOUT=lfs` runs `lfs getstripe` (`ICICLE_CATALOG_LFS` names the
//!   command), `emulate` uses the emulation (`ICICLE_EMULATED_LAYOUT` spec, sidecars), and
//!   `auto` (the default) uses `lfs` when one is on the PATH, else the emulation.
//! - The host is never changed: return values and `errno` are the real call's, nothing is
//!   printed but that one line (and the one about a name or collector refused), and any failure of the agent (or a panic) only loses that
//!   catalog entry. Without `CATALOG_DIR` the agent does nothing but pass calls through.
//!
//! Not seen: files opened by libc internally for its own functions, `open_by_handle_at`,
//! `io_uring`, or closed with `close_range`; renames by another process of files this one
//! wrote. A handler that opens files for writing while its thread is inside `malloc` may
//! deadlock in `malloc` when the agent records them (as any handler that allocates would).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::ffi::{c_char, c_int, CStr};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use icicle_plugins_prism::catalog::{CatalogEntry, CatalogGone, StatFields};
use icicle_plugins_prism::layout::{EmulatedLayouts, LayoutProvider, LfsLayouts, EMULATED_LAYOUT_ENV};
use libc::{mode_t, FILE};

pub mod catalog_file;
pub mod collector;
pub mod open;
pub mod record;
pub mod rename;
mod section;
pub mod stdio;

use record::*;
use section::{busy, guarded, Shared};
use stdio::*;

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, mode_t) -> c_int;
type Open2Fn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, mode_t) -> c_int;
type CreatFn = unsafe extern "C" fn(*const c_char, mode_t) -> c_int;
type CloseFn = unsafe extern "C" fn(c_int) -> c_int;
type Openat2Fn = unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;
type MkstempFn = unsafe extern "C" fn(*mut c_char) -> c_int;
/// `mkostemp(template, flags)` and `mkstemps(template, suffixlen)`.
type MkstempIntFn = unsafe extern "C" fn(*mut c_char, c_int) -> c_int;
type MkostempsFn = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type FopenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut FILE;
type FreopenFn = unsafe extern "C" fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;
type FcloseFn = unsafe extern "C" fn(*mut FILE) -> c_int;
type RenameFn = unsafe extern "C" fn(*const c_char, *const c_char) -> c_int;
type RenameatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char) -> c_int;
type Renameat2Fn = unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char, libc::c_uint) -> c_int;

/// The next definitions of the interposed functions, looked up once.
struct Real {
    open: Option<OpenFn>,
    open64: Option<OpenFn>,
    open_2: Option<Open2Fn>,
    open64_2: Option<Open2Fn>,
    openat: Option<OpenatFn>,
    openat64: Option<OpenatFn>,
    creat: Option<CreatFn>,
    creat64: Option<CreatFn>,
    close: Option<CloseFn>,
    openat_2: Option<Openat2Fn>,
    openat64_2: Option<Openat2Fn>,
    mkstemp: Option<MkstempFn>,
    mkstemp64: Option<MkstempFn>,
    mkostemp: Option<MkstempIntFn>,
    mkostemp64: Option<MkstempIntFn>,
    mkstemps: Option<MkstempIntFn>,
    mkstemps64: Option<MkstempIntFn>,
    mkostemps: Option<MkostempsFn>,
    mkostemps64: Option<MkostempsFn>,
    fopen: Option<FopenFn>,
    fopen64: Option<FopenFn>,
    io_fopen: Option<FopenFn>,
    freopen: Option<FreopenFn>,
    freopen64: Option<FreopenFn>,
    fclose: Option<FcloseFn>,
    io_fclose: Option<FcloseFn>,
    rename: Option<RenameFn>,
    renameat: Option<RenameatFn>,
    renameat2: Option<Renameat2Fn>,
}

fn next_symbol(name: &CStr) -> *mut libc::c_void {
    // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT is valid inside a shared object.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

macro_rules! lookup {
    ($name:literal, $ty:ty) => {{
        let p = next_symbol($name);
        // SAFETY: the symbol, when present, is libc's function of this signature.
        (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, $ty>(p) })
    }};
}

fn real() -> &'static Real {
    static REAL: OnceLock<Real> = OnceLock::new();
    REAL.get_or_init(|| Real {
        open: lookup!(c"open", OpenFn),
        open64: lookup!(c"open64", OpenFn),
        open_2: lookup!(c"__open_2", Open2Fn),
        open64_2: lookup!(c"__open64_2", Open2Fn),
        openat: lookup!(c"openat", OpenatFn),
        openat64: lookup!(c"openat64", OpenatFn),
        creat: lookup!(c"creat", CreatFn),
        creat64: lookup!(c"creat64", CreatFn),
        close: lookup!(c"close", CloseFn),
        openat_2: lookup!(c"__openat_2", Openat2Fn),
        openat64_2: lookup!(c"__openat64_2", Openat2Fn),
        mkstemp: lookup!(c"mkstemp", MkstempFn),
        mkstemp64: lookup!(c"mkstemp64", MkstempFn),
        mkostemp: lookup!(c"mkostemp", MkstempIntFn),
        mkostemp64: lookup!(c"mkostemp64", MkstempIntFn),
        mkstemps: lookup!(c"mkstemps", MkstempIntFn),
        mkstemps64: lookup!(c"mkstemps64", MkstempIntFn),
        mkostemps: lookup!(c"mkostemps", MkostempsFn),
        mkostemps64: lookup!(c"mkostemps64", MkostempsFn),
        fopen: lookup!(c"fopen", FopenFn),
        fopen64: lookup!(c"fopen64", FopenFn),
        io_fopen: lookup!(c"_IO_fopen", FopenFn),
        freopen: lookup!(c"freopen", FreopenFn),
        freopen64: lookup!(c"freopen64", FreopenFn),
        fclose: lookup!(c"fclose", FcloseFn),
        io_fclose: lookup!(c"_IO_fclose", FcloseFn),
        rename: lookup!(c"rename", RenameFn),
        renameat: lookup!(c"renameat", RenameatFn),
        renameat2: lookup!(c"renameat2", Renameat2Fn),
    })
}

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

fn errno() -> c_int {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

fn enosys() -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

fn enosys_null() -> *mut FILE {
    set_errno(libc::ENOSYS);
    std::ptr::null_mut()
}

/// The agent's settings, read from the environment once.
struct Config {
    catalog_dir: PathBuf,
    root: Vec<u8>,
    provider: Box<dyn LayoutProvider>,
    /// Where the node's collector listens (`ICICLE_CATALOG_SOCKET`, else
    /// `CATALOG_DIR/.collector.sock`); used only while a socket is there.
    socket: Option<std::ffi::CString>,
    /// How long a hand-over may wait, each way (`ICICLE_CATALOG_TIMEOUT_MS`, default 1 s).
    timeout_ms: i64,
}

extern "C" {
    /// glibc's `secure_getenv(3)`: "just like getenv() except that it returns NULL in cases
    /// where "secure execution" is required", that is when the process runs with
    /// `AT_SECURE` set (a set-user-ID or set-group-ID program, file capabilities).
    fn secure_getenv(name: *const c_char) -> *mut c_char;
}

/// The value of the environment variable `name`, or `None` when it is unset or the process
/// runs with `AT_SECURE` (`secure_getenv(3)`): a set-user-ID program that loads the agent
/// (`/etc/ld.so.preload`, a link to the library) never takes its catalog directory, `lfs`
/// command or socket from the user who started it, so the agent does nothing there.
fn env(name: &CStr) -> Option<std::ffi::OsString> {
    // SAFETY: a NUL-terminated name; the value is copied out at once.
    let v = unsafe { secure_getenv(name.as_ptr()) };
    if v.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated string in the environment.
    let bytes = unsafe { CStr::from_ptr(v) }.to_bytes();
    Some(std::ffi::OsString::from_vec(bytes.to_vec()))
}

/// [`env`], as UTF-8 text.
fn env_text(name: &CStr) -> Option<String> {
    env(name).and_then(|v| v.into_string().ok())
}

fn config() -> Option<&'static Config> {
    static CONFIG: OnceLock<Option<Config>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            // Under AT_SECURE this is None: nothing below (PATH for `lfs` included) is read.
            let dir = env(c"CATALOG_DIR").filter(|d| !d.is_empty())?;
            let catalog_dir = absolute(Path::new(&dir));
            let root = match env(c"ICICLE_CATALOG_ROOT").filter(|r| !r.is_empty()) {
                Some(r) => {
                    let r = absolute(Path::new(&r));
                    std::fs::canonicalize(&r).unwrap_or(r)
                }
                None => PathBuf::from("/"),
            };
            let mut root = root.as_os_str().as_bytes().to_vec();
            if root.last() != Some(&b'/') {
                root.push(b'/');
            }
            let emulated = || -> Box<dyn LayoutProvider> {
                let spec =
                    std::ffi::CString::new(EMULATED_LAYOUT_ENV).ok().and_then(|n| env_text(&n)).unwrap_or_default();
                Box::new(EmulatedLayouts::parse(&spec).unwrap_or_default())
            };
            let lfs =
                || env(c"ICICLE_CATALOG_LFS").map(|c| LfsLayouts { cmd: c.into() }).or_else(LfsLayouts::from_path);
            let provider: Box<dyn LayoutProvider> = match env_text(c"ICICLE_CATALOG_LAYOUT").as_deref() {
                Some("emulate") => emulated(),
                Some("lfs") => match lfs() {
                    Some(l) => Box::new(l),
                    None => emulated(),
                },
                _ => match lfs() {
                    Some(l) => Box::new(l),
                    None => emulated(),
                },
            };
            let socket = match env(c"ICICLE_CATALOG_SOCKET").filter(|s| !s.is_empty()) {
                Some(s) => absolute(Path::new(&s)),
                None => catalog_dir.join(".collector.sock"),
            };
            let socket = std::ffi::CString::new(socket.into_os_string().into_vec()).ok();
            let timeout_ms = env_text(c"ICICLE_CATALOG_TIMEOUT_MS")
                .and_then(|t| t.parse().ok())
                .filter(|&t: &i64| t > 0)
                .unwrap_or(collector::TIMEOUT_MS);
            Some(Config { catalog_dir, root, provider, socket, timeout_ms })
        })
        .as_ref()
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map(|c| c.join(p)).unwrap_or_else(|_| p.to_path_buf())
    }
}

/// fd -> absolute path of the files being tracked.
fn table() -> &'static Shared<HashMap<c_int, Vec<u8>>> {
    static TABLE: Shared<HashMap<c_int, Vec<u8>>> = Shared::new();
    &TABLE
}
static TRACKED: AtomicUsize = AtomicUsize::new(0);

/// Files whose tracked descriptor was closed while a duplicate (`dup2` onto stdout, as a
/// shell redirect does) kept them open: recorded at exit, when their data is all there.
fn deferred() -> &'static Shared<BTreeSet<Vec<u8>>> {
    static DEFERRED: Shared<BTreeSet<Vec<u8>>> = Shared::new();
    &DEFERRED
}

static DEFERRED_N: AtomicUsize = AtomicUsize::new(0);

/// Whether some descriptor of this process still refers to the file `path`.
fn still_open(path: &[u8]) -> bool {
    let Ok(md) = std::fs::metadata(Path::new(std::ffi::OsStr::from_bytes(path))) else { return false };
    use std::os::unix::fs::MetadataExt;
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return false };
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<c_int>().ok()) else { continue };
        // SAFETY: stat is plain integers; all zeroes is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into the stat we own; a closed fd just fails.
        if unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_dev == md.dev() && st.st_ino == md.ino() {
            return true;
        }
    }
    false
}

fn wants(flags: c_int) -> bool {
    flags & (libc::O_CREAT | libc::O_WRONLY | libc::O_RDWR) != 0
}

/// After a successful open for writing: track `fd` if its file is under the root. Returns
/// whether `fd` is tracked.
fn opened(fd: c_int, flags: c_int) -> bool {
    if fd < 0 || !wants(flags) {
        return false;
    }
    guarded(|| config().is_some_and(|cfg| track(cfg, fd))).unwrap_or(false)
}

/// Whether the absolute path `p` is under the root and not in the catalog directory.
fn in_scope(cfg: &Config, p: &[u8]) -> bool {
    (p.starts_with(&cfg.root) || p == &cfg.root[..cfg.root.len() - 1])
        && !Path::new(std::ffi::OsStr::from_bytes(p)).starts_with(&cfg.catalog_dir)
}

/// Track `fd` (open for writing) when it is a regular file under the root; returns whether it
/// is. Inside a section.
fn track(cfg: &Config, fd: c_int) -> bool {
    let Ok(target) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else { return false };
    let bytes = target.as_os_str().as_bytes();
    if !in_scope(cfg, bytes) {
        return false;
    }
    let old = {
        let mut t = table().lock();
        let old = t.insert(fd, bytes.to_vec());
        if old.is_none() {
            TRACKED.fetch_add(1, Ordering::Relaxed);
        }
        old
    };
    // The fd was closed behind our back (close_range, a libc-internal close): that file is done.
    if let Some(old) = old {
        if old != bytes {
            record(cfg, &old);
        }
    }
    true
}

/// Stop tracking `fd`; returns its file's path when it was tracked. Inside a section.
fn untrack(fd: c_int) -> Option<Vec<u8>> {
    table().lock().remove(&fd).inspect(|_| {
        TRACKED.fetch_sub(1, Ordering::Relaxed);
    })
}

/// After the real close of a descriptor (whose tracked file was `path`): record it, or defer
/// it while a duplicate still holds it, and record deferred files no longer open.
fn closed(path: Option<Vec<u8>>) {
    guarded(|| {
        let Some(cfg) = config() else { return };
        let done: Vec<Vec<u8>> = {
            let mut d = deferred().lock();
            if let Some(path) = path {
                d.insert(path);
            }
            let done: Vec<Vec<u8>> = d.iter().filter(|p| !still_open(p)).cloned().collect();
            for p in &done {
                d.remove(p);
            }
            DEFERRED_N.store(d.len(), Ordering::Relaxed);
            done
        };
        for p in done {
            record(cfg, &p);
        }
    });
}

/// A panic inside the agent prints nothing (the panic is caught in [`guarded`] and only loses
/// that entry). The library carries its own copy of std, so this hook sees only the agent's
/// panics, never a Rust host's.
fn quiet_panics() {
    std::panic::set_hook(Box::new(|_| {}));
}

/// The `pthread_atfork` child handler: the child of a fork without exec records the files it
/// writes itself, in its own catalog file. It starts with nothing tracked, deferred, or
/// remembered for renames: what it inherited open is the parent's to record, and the
/// parent's state (with any lock another parent thread held at the fork) is abandoned, not
/// locked. Only atomic stores: async-signal-safe.
extern "C" fn after_fork_in_child() {
    table().reset();
    deferred().reset();
    streams().reset();
    recorded().reset();
    TRACKED.store(0, Ordering::Relaxed);
    DEFERRED_N.store(0, Ordering::Relaxed);
    STREAMS_N.store(0, Ordering::Relaxed);
    RECORDED_N.store(0, Ordering::Relaxed);
    record::reset_after_fork();
    collector::reset_after_fork();
}

/// At load: the real functions and the settings are looked up (so a fork never finds them
/// half-initialised), and descriptors inherited open for writing onto files under the root
/// (a shell opened `> out` and exec'd this program) are tracked as if this process had
/// opened them.
extern "C" fn at_start() {
    let e = errno();
    quiet_panics();
    real();
    // SAFETY: registers a handler that only makes atomic stores (async-signal-safe).
    unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    guarded(|| {
        let Some(cfg) = config() else { return };
        let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
        let fds: Vec<c_int> =
            dir.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok())).collect();
        for fd in fds {
            // SAFETY: F_GETFL on a descriptor number; a closed one just fails.
            let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
            if fl < 0 || fl & libc::O_ACCMODE == libc::O_RDONLY {
                continue;
            }
            // SAFETY: stat is plain integers; all zeroes is a valid value.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: fstat writes into the stat we own; a closed fd just fails.
            if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
                continue;
            }
            track(cfg, fd);
        }
    });
    set_errno(e);
}

#[used]
#[link_section = ".init_array"]
static AT_START: extern "C" fn() = at_start;

/// Interposed `close(2)`: a tracked file is recorded once the real close has returned (or,
/// when a duplicate descriptor still holds it, at a later `close` that finds it gone).
///
/// # Safety
/// Called by C code.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let Some(real_close) = real().close else { return enosys() };
    if TRACKED.load(Ordering::Relaxed) == 0 && DEFERRED_N.load(Ordering::Relaxed) == 0 || busy() {
        return real_close(fd);
    }
    let e = errno();
    let path = guarded(|| untrack(fd)).flatten();
    set_errno(e);
    let rc = real_close(fd);
    let e = errno();
    closed(path);
    set_errno(e);
    rc
}

extern "C" {
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
    fn ftrylockfile(f: *mut libc::FILE) -> c_int;
    fn funlockfile(f: *mut libc::FILE);
}

/// exit() flushes stdio after the fini functions run: flush stdout, stderr and the streams
/// the agent saw opened onto tracked files now, so the sizes recorded include what is still
/// buffered. Never `fflush(NULL)`: that locks every stream, and another thread may hold one
/// for good (stdin in `getline`). A stream another thread holds is skipped (its file's entry
/// may then miss what is still buffered), as are other `FILE`s (`fdopen`). Inside a section.
fn flush_streams() {
    // SAFETY: a stream is flushed only while this thread holds its lock (recursive, so
    // fflush's own locking succeeds), then released.
    let flush = |f: *mut FILE| unsafe {
        if !f.is_null() && ftrylockfile(f) == 0 {
            libc::fflush(f);
            funlockfile(f);
        }
    };
    // SAFETY: glibc's stdout/stderr pointers, read once.
    unsafe {
        flush(stdout);
        flush(stderr);
    }
    // Under the lock `fclose` takes before freeing a stream: every one left is still open.
    let mut set = streams().lock();
    for &s in set.iter() {
        flush(s as *mut FILE);
    }
    set.clear();
    STREAMS_N.store(0, Ordering::Relaxed);
}

/// At exit (also of a forked child that calls `exit`): record the files still open (the
/// kernel closes them without a `close` call).
extern "C" fn at_exit() {
    let e = errno();
    guarded(|| {
        let Some(cfg) = config() else { return };
        let mut left: BTreeSet<Vec<u8>> = std::mem::take(&mut *deferred().lock());
        DEFERRED_N.store(0, Ordering::Relaxed);
        left.extend(table().lock().drain().map(|(_, p)| p));
        TRACKED.store(0, Ordering::Relaxed);
        if !left.is_empty() {
            flush_streams();
        }
        for p in left {
            record(cfg, &p);
        }
    });
    set_errno(e);
}

#[used]
#[link_section = ".fini_array"]
static AT_EXIT: extern "C" fn() = at_exit;
