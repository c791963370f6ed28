//! The PRISM catalog agent, `libicicle_catalog_agent.so`: load it with `LD_PRELOAD` and it
//! records, in the SwiftLoad catalog format, the metadata and stripe layout of every regular
//! file the application creates or opens for writing under a root.
//!
//! ```text
//! CATALOG_DIR=./catalog ICICLE_CATALOG_ROOT=/scratch/run42 LD_PRELOAD=libicicle_catalog_agent.so ./app
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
//!   its layout read, and one entry appended with a single `O_APPEND` write to
//!   `CATALOG_DIR/catalog.<host>.<pid>.txt` (a file per process: no interleaving).
//! - A successful rename of a file this process recorded (one of the last [`RECORDED_CAP`]) or
//!   has open for writing, or onto such a path, or of a directory above such files, moves the
//!   catalog with it: a `gone` record for each old name (and for a file the rename replaced),
//!   then an entry for each new name under the root (an open file's at its close).
//! - A forked child records nothing until it execs (a `pthread_atfork` child handler).
//! - Layouts: `ICICLE_CATALOG_LAYOUT=lfs` runs `lfs getstripe` (`ICICLE_CATALOG_LFS` names the
//!   command), `emulate` uses the emulation (`ICICLE_EMULATED_LAYOUT` spec, sidecars), and
//!   `auto` (the default) uses `lfs` when one is on the PATH, else the emulation.
//! - The host is never changed: return values and `errno` are the real call's, nothing is
//!   printed, and any failure of the agent (or a panic) only loses that catalog entry.
//!   Without `CATALOG_DIR` the agent does nothing but pass calls through.
//!
//! Not seen: files opened by libc internally for its own functions, `open_by_handle_at`,
//! `io_uring`, or closed with `close_range`; renames by another process of files this one wrote.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, CStr, CString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use icicle_plugins_prism::catalog::{CatalogEntry, CatalogGone, StatFields};
use icicle_plugins_prism::layout::{EmulatedLayouts, LayoutProvider, LfsLayouts, EMULATED_LAYOUT_ENV};
use libc::{mode_t, FILE};

mod record;
pub mod rename;
pub mod stdio;

use record::*;

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

thread_local! {
    /// Set while the agent itself works: calls it makes (or a forked child makes) pass through.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Set in a forked child (by the `pthread_atfork` child handler) until it execs: the child
/// inherits the parent's table (files the parent still has open) and possibly a mutex another
/// parent thread held at the fork, so it never tracks, records or locks anything.
static FORKED_CHILD: AtomicBool = AtomicBool::new(false);

extern "C" fn in_forked_child() {
    FORKED_CHILD.store(true, Ordering::Relaxed);
}

fn forked_child() -> bool {
    FORKED_CHILD.load(Ordering::Relaxed)
}

/// The agent is at work on this thread (or the thread is being torn down).
fn busy() -> bool {
    BUSY.try_with(Cell::get).unwrap_or(true)
}

/// Runs `f` unless the agent is already busy on this thread (or this is a forked child);
/// panics are contained.
fn guarded(f: impl FnOnce()) {
    if forked_child() {
        return;
    }
    let entered = BUSY.try_with(|b| !b.replace(true)).unwrap_or(false);
    if !entered {
        return;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let _ = BUSY.try_with(|b| b.set(false));
}

/// The agent's settings, read from the environment once.
struct Config {
    catalog_dir: PathBuf,
    root: Vec<u8>,
    out_file: Mutex<Option<(u32, CString)>>,
    provider: Box<dyn LayoutProvider>,
}

fn config() -> Option<&'static Config> {
    static CONFIG: OnceLock<Option<Config>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let dir = std::env::var_os("CATALOG_DIR").filter(|d| !d.is_empty())?;
            let catalog_dir = absolute(Path::new(&dir));
            let root = match std::env::var_os("ICICLE_CATALOG_ROOT").filter(|r| !r.is_empty()) {
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
                let spec = std::env::var(EMULATED_LAYOUT_ENV).unwrap_or_default();
                Box::new(EmulatedLayouts::parse(&spec).unwrap_or_default())
            };
            let lfs = || std::env::var_os("ICICLE_CATALOG_LFS").map(|c| LfsLayouts { cmd: c.into() }).or_else(LfsLayouts::from_path);
            let provider: Box<dyn LayoutProvider> = match std::env::var("ICICLE_CATALOG_LAYOUT").as_deref() {
                Ok("emulate") => emulated(),
                Ok("lfs") => match lfs() {
                    Some(l) => Box::new(l),
                    None => emulated(),
                },
                _ => match lfs() {
                    Some(l) => Box::new(l),
                    None => emulated(),
                },
            };
            Some(Config { catalog_dir, root, out_file: Mutex::new(None), provider })
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
fn table() -> &'static Mutex<HashMap<c_int, Vec<u8>>> {
    static TABLE: OnceLock<Mutex<HashMap<c_int, Vec<u8>>>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(HashMap::new()))
}
static TRACKED: AtomicUsize = AtomicUsize::new(0);

/// Files whose tracked descriptor was closed while a duplicate (`dup2` onto stdout, as a
/// shell redirect does) kept them open: recorded at exit, when their data is all there.
fn deferred() -> &'static Mutex<std::collections::BTreeSet<Vec<u8>>> {
    static DEFERRED: OnceLock<Mutex<std::collections::BTreeSet<Vec<u8>>>> = OnceLock::new();
    DEFERRED.get_or_init(|| Mutex::new(std::collections::BTreeSet::new()))
}

static DEFERRED_N: AtomicUsize = AtomicUsize::new(0);

/// Whether some descriptor of this process still refers to the file `path`.
fn still_open(path: &[u8]) -> bool {
    let Ok(md) = std::fs::metadata(Path::new(std::ffi::OsStr::from_bytes(path))) else { return false };
    use std::os::unix::fs::MetadataExt;
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return false };
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<c_int>().ok()) else { continue };
        // SAFETY: fstat into a zeroed struct; a closed fd just fails.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
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
    let mut tracked = false;
    guarded(|| {
        if let Some(cfg) = config() {
            tracked = track(cfg, fd);
        }
    });
    tracked
}

/// Whether the absolute path `p` is under the root and not in the catalog directory.
fn in_scope(cfg: &Config, p: &[u8]) -> bool {
    (p.starts_with(&cfg.root) || p == &cfg.root[..cfg.root.len() - 1]) && !Path::new(std::ffi::OsStr::from_bytes(p)).starts_with(&cfg.catalog_dir)
}

/// Track `fd` (open for writing) when it is a regular file under the root; returns whether it is.
fn track(cfg: &Config, fd: c_int) -> bool {
    let Ok(target) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else { return false };
    let bytes = target.as_os_str().as_bytes();
    if !in_scope(cfg, bytes) {
        return false;
    }
    let old = match table().lock() {
        Ok(mut t) => {
            let old = t.insert(fd, bytes.to_vec());
            if old.is_none() {
                TRACKED.fetch_add(1, Ordering::Relaxed);
            }
            old
        }
        Err(_) => None,
    };
    // The fd was closed behind our back (close_range, a libc-internal close): that file is done.
    if let Some(old) = old {
        if old != bytes {
            record(cfg, &old);
        }
    }
    true
}

/// Stop tracking `fd`; returns its file's path when it was tracked.
fn untrack(fd: c_int) -> Option<Vec<u8>> {
    match table().lock() {
        Ok(mut t) => t.remove(&fd).inspect(|_| {
            TRACKED.fetch_sub(1, Ordering::Relaxed);
        }),
        Err(_) => None,
    }
}

/// After the real close of a descriptor (whose tracked file was `path`): record it, or defer
/// it while a duplicate still holds it, and record deferred files no longer open.
fn closed(path: Option<Vec<u8>>) {
    guarded(|| {
        let Some(cfg) = config() else { return };
        let Ok(mut d) = deferred().lock() else { return };
        if let Some(path) = path {
            d.remove(&path);
            d.insert(path);
        }
        let done: Vec<Vec<u8>> = d.iter().filter(|p| !still_open(p)).cloned().collect();
        for p in &done {
            d.remove(p);
        }
        DEFERRED_N.store(d.len(), Ordering::Relaxed);
        drop(d);
        for p in done {
            record(cfg, &p);
        }
    });
}

/// After a call that returned a new descriptor without saying how it was opened (the
/// `mkstemp` family opens inside libc): track it when its access mode writes.
fn after_new_fd(fd: c_int) -> c_int {
    if fd >= 0 && !forked_child() {
        let e = errno();
        // SAFETY: F_GETFL on the descriptor just returned.
        let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if fl >= 0 {
            opened(fd, fl);
        }
        set_errno(e);
    }
    fd
}

/// A panic inside the agent prints nothing (the agent never writes to the host's stderr; the
/// panic is caught in [`guarded`] and only loses that entry). The library carries its own
/// copy of std, so this hook sees only the agent's panics, never a Rust host's.
fn quiet_panics() {
    std::panic::set_hook(Box::new(|_| {}));
}

/// At load: descriptors inherited open for writing onto files under the root (a shell
/// opened `> out` and exec'd this program) are tracked as if this process had opened them.
extern "C" fn at_start() {
    let e = errno();
    quiet_panics();
    // SAFETY: registers a handler that only stores to an atomic (async-signal-safe).
    unsafe { libc::pthread_atfork(None, None, Some(in_forked_child)) };
    guarded(|| {
        let Some(cfg) = config() else { return };
        let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
        let fds: Vec<c_int> = dir.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok())).collect();
        for fd in fds {
            // SAFETY: F_GETFL on a descriptor number; a closed one just fails.
            let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
            if fl < 0 || fl & libc::O_ACCMODE == libc::O_RDONLY {
                continue;
            }
            // SAFETY: fstat into a zeroed struct.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
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

/// Common tail of every open: keep errno as the real call left it.
fn after(fd: c_int, flags: c_int) -> c_int {
    if fd >= 0 && wants(flags) {
        let e = errno();
        opened(fd, flags);
        set_errno(e);
    }
    fd
}

/// Interposed `open(2)`.
///
/// # Safety
/// Called by C code with a valid path; `mode` is read only with `O_CREAT`/`O_TMPFILE`, like
/// the variadic original (on x86-64 and aarch64 Linux the third argument is in the same
/// register either way).
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    match real().open {
        Some(f) => after(f(path, flags, mode), flags),
        None => enosys(),
    }
}

/// Interposed `open64(2)`.
///
/// # Safety
/// As [`open`].
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    match real().open64 {
        Some(f) => after(f(path, flags, mode), flags),
        None => enosys(),
    }
}

/// Interposed `__open_2` (what `_FORTIFY_SOURCE` builds call for a two-argument open).
///
/// # Safety
/// As [`open`].
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    match real().open_2 {
        Some(f) => after(f(path, flags), flags),
        None => enosys(),
    }
}

/// Interposed `__open64_2`.
///
/// # Safety
/// As [`open`].
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    match real().open64_2 {
        Some(f) => after(f(path, flags), flags),
        None => enosys(),
    }
}

/// Interposed `openat(2)`.
///
/// # Safety
/// As [`open`].
#[no_mangle]
pub unsafe extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    match real().openat {
        Some(f) => after(f(dirfd, path, flags, mode), flags),
        None => enosys(),
    }
}

/// Interposed `openat64`.
///
/// # Safety
/// As [`open`].
#[no_mangle]
pub unsafe extern "C" fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    match real().openat64 {
        Some(f) => after(f(dirfd, path, flags, mode), flags),
        None => enosys(),
    }
}

/// Interposed `creat(2)` (`open` with `O_CREAT|O_WRONLY|O_TRUNC`).
///
/// # Safety
/// Called by C code with a valid path.
#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    match real().creat {
        Some(f) => after(f(path, mode), libc::O_CREAT | libc::O_WRONLY),
        None => enosys(),
    }
}

/// Interposed `creat64`.
///
/// # Safety
/// As [`creat`].
#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    match real().creat64 {
        Some(f) => after(f(path, mode), libc::O_CREAT | libc::O_WRONLY),
        None => enosys(),
    }
}

/// Interposed `__openat_2` (what `_FORTIFY_SOURCE` builds call for a three-argument `openat`
/// whose flags are not a constant).
///
/// # Safety
/// As [`open`].
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    match real().openat_2 {
        Some(f) => after(f(dirfd, path, flags), flags),
        None => enosys(),
    }
}

/// Interposed `__openat64_2`.
///
/// # Safety
/// As [`open`].
#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    match real().openat64_2 {
        Some(f) => after(f(dirfd, path, flags), flags),
        None => enosys(),
    }
}

/// Defines an interposed function of the `mkstemp` family: the real call, then
/// [`after_new_fd`].
macro_rules! mkstemp_hook {
    ($name:ident, $field:ident, ($($arg:ident: $ty:ty),*)) => {
        #[doc = concat!("Interposed `", stringify!($name), "`.")]
        ///
        /// # Safety
        /// Called by C code with a writable, NUL-terminated template.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            match real().$field {
                Some(f) => after_new_fd(f($($arg),*)),
                None => enosys(),
            }
        }
    };
}

mkstemp_hook!(mkstemp, mkstemp, (template: *mut c_char));
mkstemp_hook!(mkstemp64, mkstemp64, (template: *mut c_char));
mkstemp_hook!(mkostemp, mkostemp, (template: *mut c_char, flags: c_int));
mkstemp_hook!(mkostemp64, mkostemp64, (template: *mut c_char, flags: c_int));
mkstemp_hook!(mkstemps, mkstemps, (template: *mut c_char, suffixlen: c_int));
mkstemp_hook!(mkstemps64, mkstemps64, (template: *mut c_char, suffixlen: c_int));
mkstemp_hook!(mkostemps, mkostemps, (template: *mut c_char, suffixlen: c_int, flags: c_int));
mkstemp_hook!(mkostemps64, mkostemps64, (template: *mut c_char, suffixlen: c_int, flags: c_int));

/// Interposed `close(2)`: a tracked file is recorded once the real close has returned (or,
/// when a duplicate descriptor still holds it, at a later `close` that finds it gone).
///
/// # Safety
/// Called by C code.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let Some(real_close) = real().close else { return enosys() };
    if TRACKED.load(Ordering::Relaxed) == 0 && DEFERRED_N.load(Ordering::Relaxed) == 0 || forked_child() || busy() {
        return real_close(fd);
    }
    let e = errno();
    let path = untrack(fd);
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
/// may then miss what is still buffered), as are other `FILE`s (`fdopen`).
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
    if let Ok(mut set) = streams().lock() {
        for &s in set.iter() {
            flush(s as *mut FILE);
        }
        set.clear();
        STREAMS_N.store(0, Ordering::Relaxed);
    }
}

/// At exit: record the files still open (the kernel closes them without a `close` call).
extern "C" fn at_exit() {
    let e = errno();
    guarded(|| {
        let Some(cfg) = config() else { return };
        let mut left: std::collections::BTreeSet<Vec<u8>> = match deferred().lock() {
            Ok(mut d) => std::mem::take(&mut *d),
            Err(_) => return,
        };
        DEFERRED_N.store(0, Ordering::Relaxed);
        if let Ok(mut t) = table().lock() {
            left.extend(t.drain().map(|(_, p)| p));
        }
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
