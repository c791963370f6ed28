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
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{c_char, c_int, CStr, CString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use icicle_plugins_prism::catalog::{CatalogEntry, CatalogGone, StatFields};
use icicle_plugins_prism::layout::{EmulatedLayouts, LayoutProvider, LfsLayouts, EMULATED_LAYOUT_ENV};
use libc::{mode_t, FILE};

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

/// Append the catalog entry of `path` (a closed file).
fn record(cfg: &Config, path: &[u8]) {
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
fn record_gone(cfg: &Config, path: &[u8], stat: StatFields) {
    let Ok(text) = std::str::from_utf8(path) else { return };
    if let Ok(rec) = (CatalogGone { path: text.to_string(), stat }).to_text() {
        append(cfg, rec.as_bytes());
    }
}

/// How many recorded paths the agent remembers for renames (the most recent ones).
pub const RECORDED_CAP: usize = 4096;

/// The paths this process recorded most recently, so that renaming one moves its entry.
#[derive(Default)]
struct Recorded {
    /// Path -> generation of its latest insertion.
    map: HashMap<Vec<u8>, u64>,
    /// Insertions, oldest first (stale ones are skipped when evicted).
    order: VecDeque<(u64, Vec<u8>)>,
    generation: u64,
}

impl Recorded {
    fn insert(&mut self, path: &[u8]) {
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

    fn remove(&mut self, path: &[u8]) {
        self.map.remove(path);
        RECORDED_N.store(self.map.len(), Ordering::Relaxed);
    }
}

fn recorded() -> &'static Mutex<Recorded> {
    static RECORDED: OnceLock<Mutex<Recorded>> = OnceLock::new();
    RECORDED.get_or_init(|| Mutex::new(Recorded::default()))
}

static RECORDED_N: AtomicUsize = AtomicUsize::new(0);

fn out_path(cfg: &Config) -> Option<CString> {
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
fn append(cfg: &Config, bytes: &[u8]) {
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

/// The streams that the interposed `fopen`/`freopen` opened onto tracked files and that are
/// not closed yet (keys are `FILE *` addresses): at exit their buffers are flushed before
/// their files are recorded. Held while such a stream is flushed, and taken by `fclose`
/// before the stream is freed, so a stream is never flushed after its `fclose`.
fn streams() -> &'static Mutex<HashSet<usize>> {
    static STREAMS: OnceLock<Mutex<HashSet<usize>>> = OnceLock::new();
    STREAMS.get_or_init(|| Mutex::new(HashSet::new()))
}

static STREAMS_N: AtomicUsize = AtomicUsize::new(0);

/// Nothing tracked, deferred or remembered: `fclose`/`freopen` only pass through.
fn idle() -> bool {
    TRACKED.load(Ordering::Relaxed) == 0 && DEFERRED_N.load(Ordering::Relaxed) == 0 && STREAMS_N.load(Ordering::Relaxed) == 0
}

/// After the real `fopen`/`freopen` returned `s`: track its descriptor when it was opened for
/// writing. The descriptor's access mode (`F_GETFL`) decides: it is what the mode string asked
/// for (`w`, `a` or a `+` write; `r` does not), without parsing glibc's mode extensions.
fn opened_stream(s: *mut FILE) {
    if s.is_null() || forked_child() || busy() {
        return;
    }
    let e = errno();
    // SAFETY: the stream the real fopen/freopen just returned; fileno only reads it.
    let fd = unsafe { libc::fileno(s) };
    // SAFETY: F_GETFL on that stream's descriptor.
    let fl = if fd >= 0 { unsafe { libc::fcntl(fd, libc::F_GETFL) } } else { -1 };
    if fl >= 0 && opened(fd, fl) {
        if let Ok(mut set) = streams().lock() {
            set.insert(s as usize);
            STREAMS_N.store(set.len(), Ordering::Relaxed);
        }
    }
    set_errno(e);
}

/// Forget `s` (about to be closed) as a stream to flush at exit.
fn drop_stream(s: *mut FILE) {
    let e = errno();
    if let Ok(mut set) = streams().lock() {
        set.remove(&(s as usize));
        STREAMS_N.store(set.len(), Ordering::Relaxed);
    }
    set_errno(e);
}

/// Before the real `fclose`/`freopen` of `s` closes its descriptor: forget the stream and its
/// descriptor; returns the tracked file's path. The entry is taken out of the table first, so
/// a `close` that libc might make inside finds nothing to record (no double entry).
fn forget_stream(s: *mut FILE) -> Option<Vec<u8>> {
    drop_stream(s);
    let e = errno();
    // SAFETY: the host's open stream, as it passed it to fclose/freopen; fileno only reads it.
    let fd = unsafe { libc::fileno(s) };
    let path = if fd >= 0 { untrack(fd) } else { None };
    set_errno(e);
    path
}

unsafe fn fopen_with(real_fopen: Option<FopenFn>, path: *const c_char, mode: *const c_char) -> *mut FILE {
    let Some(f) = real_fopen else { return enosys_null() };
    let s = f(path, mode);
    opened_stream(s);
    s
}

/// Interposed `fopen(3)`: glibc opens the file with an internal call the `open` hooks do not
/// see, so the stream's descriptor is tracked here.
///
/// # Safety
/// Called by C code with a valid path and mode.
#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    fopen_with(real().fopen, path, mode)
}

/// Interposed `fopen64`.
///
/// # Safety
/// As [`fopen`].
#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    fopen_with(real().fopen64, path, mode)
}

/// Interposed `_IO_fopen` (glibc's old name of `fopen`).
///
/// # Safety
/// As [`fopen`].
#[no_mangle]
pub unsafe extern "C" fn _IO_fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    fopen_with(real().io_fopen, path, mode)
}

unsafe fn freopen_with(real_freopen: Option<FreopenFn>, path: *const c_char, mode: *const c_char, s: *mut FILE) -> *mut FILE {
    let Some(f) = real_freopen else { return enosys_null() };
    let live = !s.is_null() && !idle() && !forked_child();
    let watch = live && !busy();
    let old = if watch { forget_stream(s) } else { None };
    if live && !watch {
        drop_stream(s);
    }
    let r = f(path, mode, s);
    let e = errno();
    // The old descriptor is closed (or, for a standard stream, replaced by `dup3`) by now.
    if watch {
        closed(old);
    }
    opened_stream(r);
    set_errno(e);
    r
}

/// Interposed `freopen(3)`: the file the stream had open is recorded as closed, the new one
/// tracked as by [`fopen`].
///
/// # Safety
/// Called by C code with a valid mode, a valid or null path and a valid stream.
#[no_mangle]
pub unsafe extern "C" fn freopen(path: *const c_char, mode: *const c_char, stream: *mut FILE) -> *mut FILE {
    freopen_with(real().freopen, path, mode, stream)
}

/// Interposed `freopen64`.
///
/// # Safety
/// As [`freopen`].
#[no_mangle]
pub unsafe extern "C" fn freopen64(path: *const c_char, mode: *const c_char, stream: *mut FILE) -> *mut FILE {
    freopen_with(real().freopen64, path, mode, stream)
}

unsafe fn fclose_with(real_fclose: Option<FcloseFn>, s: *mut FILE) -> c_int {
    let Some(f) = real_fclose else { return enosys() };
    if s.is_null() || idle() || forked_child() {
        return f(s);
    }
    if busy() {
        // Nothing is recorded now, but a freed stream must never be flushed at exit.
        drop_stream(s);
        return f(s);
    }
    // The file is recorded after the real fclose, from the path saved here: fclose writes the
    // stream's buffer out before it closes the descriptor, so only then is the size on disk
    // the file's final size (recording first would miss the buffered tail, and an `fflush`
    // of our own would change when the host's data reaches the file).
    let path = forget_stream(s);
    let rc = f(s);
    let e = errno();
    closed(path);
    set_errno(e);
    rc
}

/// Interposed `fclose(3)`: glibc closes the descriptor internally, without `close`, so the
/// stream's tracked file (from `fopen`, `open` + `fdopen`, or inherited) is recorded here.
///
/// # Safety
/// Called by C code with a valid stream.
#[no_mangle]
pub unsafe extern "C" fn fclose(stream: *mut FILE) -> c_int {
    fclose_with(real().fclose, stream)
}

/// Interposed `_IO_fclose` (glibc's old name of `fclose`).
///
/// # Safety
/// As [`fclose`].
#[no_mangle]
pub unsafe extern "C" fn _IO_fclose(stream: *mut FILE) -> c_int {
    fclose_with(real().io_fclose, stream)
}

/// The absolute path that `path` names relative to `dirfd` (`AT_FDCWD`: the working
/// directory): its directory canonicalised, its last component kept as it is (a rename acts on
/// that name, not on what a link there points to).
fn resolve_at(dirfd: c_int, path: *const c_char) -> Option<Vec<u8>> {
    if path.is_null() {
        return None;
    }
    // SAFETY: the host passed a NUL-terminated path.
    let raw = unsafe { CStr::from_ptr(path) }.to_bytes();
    let mut full = match raw.first() {
        None => return None,
        Some(b'/') => raw.to_vec(),
        Some(_) => {
            let base = if dirfd == libc::AT_FDCWD { std::env::current_dir().ok()? } else { std::fs::read_link(format!("/proc/self/fd/{dirfd}")).ok()? };
            let mut b = base.into_os_string().into_vec();
            b.push(b'/');
            b.extend_from_slice(raw);
            b
        }
    };
    while full.len() > 1 && full.last() == Some(&b'/') {
        full.pop();
    }
    let cut = full.iter().rposition(|&c| c == b'/')?;
    let (dir, name) = (&full[..cut.max(1)], &full[cut + 1..]);
    if name.is_empty() || name == b"." || name == b".." {
        return None;
    }
    let mut out = std::fs::canonicalize(std::ffi::OsStr::from_bytes(dir)).ok()?.into_os_string().into_vec();
    if out.last() != Some(&b'/') {
        out.push(b'/');
    }
    out.extend_from_slice(name);
    Some(out)
}

/// `lstat` of an absolute path, with whether it is a regular file and whether a directory.
fn lstat_bytes(p: &[u8]) -> Option<(StatFields, bool, bool)> {
    let md = std::fs::symlink_metadata(std::ffi::OsStr::from_bytes(p)).ok()?;
    Some((StatFields::from_metadata(&md), md.file_type().is_file(), md.file_type().is_dir()))
}

/// One file that a rename gives a new name.
struct Move {
    from: Vec<u8>,
    to: Vec<u8>,
    /// Its `lstat` before the rename (used when it cannot be `lstat`ed after).
    before: Option<StatFields>,
}

/// What a rename hook found before the real call: the files of this process it moves, and
/// the file it replaces.
struct PendingRename {
    moves: Vec<Move>,
    replaced: Option<(Vec<u8>, StatFields)>,
}

/// The paths of this process's files (recorded, or open for writing: tracked or deferred)
/// that `keep` selects.
fn our_paths(keep: impl Fn(&[u8]) -> bool) -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>> = Vec::new();
    if let Ok(r) = recorded().lock() {
        all.extend(r.map.keys().filter(|p| keep(p)).cloned());
    }
    if let Ok(t) = table().lock() {
        all.extend(t.values().filter(|p| keep(p)).cloned());
    }
    if let Ok(d) = deferred().lock() {
        all.extend(d.iter().filter(|p| keep(p)).cloned());
    }
    all
}

/// Whether `p` is strictly below the directory `dir`.
fn is_below(p: &[u8], dir: &[u8]) -> bool {
    p.len() > dir.len() && p.starts_with(dir) && p[dir.len()] == b'/'
}

/// Before a rename of `from` to `to` (absolute): which of this process's files it moves.
/// `None` when it moves none of them and replaces none (then nothing is written).
fn before_rename(from: Vec<u8>, to: Vec<u8>, exchange: bool) -> Option<PendingRename> {
    let (from_st, from_file, from_dir) = lstat_bytes(&from)?;
    let target = lstat_bytes(&to);
    if let Some((t, ..)) = &target {
        // Two links to one file: rename does nothing.
        if (t.dev, t.ino) == (from_st.dev, from_st.ino) {
            return None;
        }
    }
    let mut moves = Vec::new();
    if from_file {
        if our_paths(|p| p == from || p == to).is_empty() {
            return None;
        }
        moves.push(Move { from: from.clone(), to: to.clone(), before: Some(from_st) });
        if let Some((t, true, _)) = target.filter(|_| exchange) {
            moves.push(Move { from: to.clone(), to: from.clone(), before: Some(t) });
        }
    } else if from_dir {
        // Every file of ours below the directory (and, exchanged, below the other one).
        let mut below = |dir: &[u8], dest: &[u8]| {
            for p in our_paths(|p| is_below(p, dir)) {
                if !moves.iter().any(|m: &Move| m.from == p) {
                    let mut to = dest.to_vec();
                    to.extend_from_slice(&p[dir.len()..]);
                    moves.push(Move { from: p, to, before: None });
                }
            }
        };
        below(&from, &to);
        if exchange && target.as_ref().is_some_and(|t| t.2) {
            below(&to, &from);
        }
        if moves.is_empty() {
            return None;
        }
    } else {
        return None;
    }
    let replaced = match target {
        Some((t, true, _)) if !exchange && from_file => Some((to, t)),
        _ => None,
    };
    Some(PendingRename { moves, replaced })
}

/// After the rename succeeded: `gone` records for the old names (and the replaced file), the
/// open descriptors' paths moved (or dropped, when the new name is out of scope), and entries
/// for the new names under the root that nothing holds open.
fn after_rename(cfg: &Config, p: PendingRename) {
    if let Some((path, st)) = &p.replaced {
        if in_scope(cfg, path) {
            record_gone(cfg, path, *st);
        }
    }
    for m in &p.moves {
        let now = lstat_bytes(&m.to).map(|(st, ..)| st).or(m.before);
        if let (true, Some(st)) = (in_scope(cfg, &m.from), now) {
            record_gone(cfg, &m.from, st);
        }
    }
    // One pass, so that an exchange swaps the two names.
    let moved = |path: &[u8]| p.moves.iter().find(|m| m.from == path).map(|m| m.to.clone());
    // New names some descriptor still holds: recorded at its close, not now.
    let mut open: HashSet<Vec<u8>> = HashSet::new();
    let mut held = |path: &[u8]| {
        if p.moves.iter().any(|m| m.to == path) {
            open.insert(path.to_vec());
        }
    };
    if let Ok(mut t) = table().lock() {
        t.retain(|_, path| match moved(path) {
            Some(to) if in_scope(cfg, &to) => {
                *path = to;
                held(path);
                true
            }
            Some(_) => {
                TRACKED.fetch_sub(1, Ordering::Relaxed);
                false
            }
            None => {
                held(path);
                true
            }
        });
    }
    if let Ok(mut d) = deferred().lock() {
        let old = std::mem::take(&mut *d);
        for path in old {
            match moved(&path) {
                Some(to) if in_scope(cfg, &to) => {
                    d.insert(to);
                }
                Some(_) => {}
                None => {
                    d.insert(path);
                }
            }
        }
        d.iter().for_each(|path| held(path));
        DEFERRED_N.store(d.len(), Ordering::Relaxed);
    }
    if let Ok(mut r) = recorded().lock() {
        for m in &p.moves {
            r.remove(&m.from);
        }
    }
    for m in &p.moves {
        if in_scope(cfg, &m.to) && !open.contains(&m.to) {
            record(cfg, &m.to);
        }
    }
}

/// Common body of the rename hooks: `call` is the real rename of `old` (relative to
/// `olddirfd`) to `new` (relative to `newdirfd`).
unsafe fn rename_with(olddirfd: c_int, old: *const c_char, newdirfd: c_int, new: *const c_char, flags: libc::c_uint, call: impl FnOnce() -> c_int) -> c_int {
    let nothing = TRACKED.load(Ordering::Relaxed) == 0 && DEFERRED_N.load(Ordering::Relaxed) == 0 && RECORDED_N.load(Ordering::Relaxed) == 0;
    if nothing || forked_child() || busy() {
        return call();
    }
    let e = errno();
    let mut pending = None;
    guarded(|| {
        if config().is_some() {
            if let (Some(from), Some(to)) = (resolve_at(olddirfd, old), resolve_at(newdirfd, new)) {
                pending = before_rename(from, to, flags & libc::RENAME_EXCHANGE != 0);
            }
        }
    });
    set_errno(e);
    let rc = call();
    if rc == 0 {
        if let Some(p) = pending {
            let e = errno();
            guarded(|| {
                if let Some(cfg) = config() {
                    after_rename(cfg, p);
                }
            });
            set_errno(e);
        }
    }
    rc
}

/// Interposed `rename(2)`: when it moves a file this process recorded or has open for
/// writing (or replaces one), the catalog follows: `gone` records and new entries.
///
/// # Safety
/// Called by C code with valid paths.
#[no_mangle]
pub unsafe extern "C" fn rename(old: *const c_char, new: *const c_char) -> c_int {
    let Some(f) = real().rename else { return enosys() };
    rename_with(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0, || f(old, new))
}

/// Interposed `renameat(2)`.
///
/// # Safety
/// As [`rename`].
#[no_mangle]
pub unsafe extern "C" fn renameat(olddirfd: c_int, old: *const c_char, newdirfd: c_int, new: *const c_char) -> c_int {
    let Some(f) = real().renameat else { return enosys() };
    rename_with(olddirfd, old, newdirfd, new, 0, || f(olddirfd, old, newdirfd, new))
}

/// Interposed `renameat2(2)`: `RENAME_NOREPLACE` that fails changes nothing;
/// `RENAME_EXCHANGE` swaps the two names in the catalog.
///
/// # Safety
/// As [`rename`].
#[no_mangle]
pub unsafe extern "C" fn renameat2(olddirfd: c_int, old: *const c_char, newdirfd: c_int, new: *const c_char, flags: libc::c_uint) -> c_int {
    let Some(f) = real().renameat2 else { return enosys() };
    rename_with(olddirfd, old, newdirfd, new, flags, || f(olddirfd, old, newdirfd, new, flags))
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
