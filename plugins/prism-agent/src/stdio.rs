//! The stdio interposers (`fopen`, `freopen`, `fclose` and glibc's old names): glibc opens and
//! closes their descriptors internally, so the streams' files are tracked here.

use std::collections::HashSet;
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::FILE;

use crate::*;

/// The streams that the interposed `fopen`/`freopen` opened onto tracked files and that are
/// not closed yet (keys are `FILE *` addresses): at exit their buffers are flushed before
/// their files are recorded. Held while such a stream is flushed, and taken by `fclose`
/// before the stream is freed, so a stream is never flushed after its `fclose`.
pub(crate) fn streams() -> &'static Shared<HashSet<usize>> {
    static STREAMS: Shared<HashSet<usize>> = Shared::new();
    &STREAMS
}

pub(crate) static STREAMS_N: AtomicUsize = AtomicUsize::new(0);

/// Nothing tracked, deferred or remembered: `fclose`/`freopen` only pass through.
pub(crate) fn idle() -> bool {
    TRACKED.load(Ordering::Relaxed) == 0
        && DEFERRED_N.load(Ordering::Relaxed) == 0
        && STREAMS_N.load(Ordering::Relaxed) == 0
}

/// After the real `fopen`/`freopen` returned `s`: track its descriptor when it was opened for
/// writing. The descriptor's access mode (`F_GETFL`) decides: it is what the mode string asked
/// for (`w`, `a` or a `+` write; `r` does not), without parsing glibc's mode extensions.
pub(crate) fn opened_stream(s: *mut FILE) {
    if s.is_null() || busy() {
        return;
    }
    let e = errno();
    // SAFETY: the stream the real fopen/freopen just returned; fileno only reads it.
    let fd = unsafe { libc::fileno(s) };
    // SAFETY: F_GETFL on that stream's descriptor.
    let fl = if fd >= 0 { unsafe { libc::fcntl(fd, libc::F_GETFL) } } else { -1 };
    if fl >= 0 && wants(fl) {
        guarded(|| {
            if config().is_some_and(|cfg| track(cfg, fd)) {
                let mut set = streams().lock();
                set.insert(s as usize);
                STREAMS_N.store(set.len(), Ordering::Relaxed);
            }
        });
    }
    set_errno(e);
}

/// Forget `s` (about to be closed) as a stream to flush at exit. Inside a section.
fn drop_stream(s: *mut FILE) {
    let mut set = streams().lock();
    set.remove(&(s as usize));
    STREAMS_N.store(set.len(), Ordering::Relaxed);
}

/// Before the real `fclose`/`freopen` of `s` closes its descriptor: forget the stream and its
/// descriptor; returns the tracked file's path. The entry is taken out of the table first, so
/// a `close` that libc might make inside finds nothing to record (no double entry).
fn forget_stream(s: *mut FILE) -> Option<Vec<u8>> {
    let e = errno();
    let path = guarded(|| {
        drop_stream(s);
        // SAFETY: the host's open stream, as it passed it to fclose/freopen; fileno only reads it.
        let fd = unsafe { libc::fileno(s) };
        if fd >= 0 {
            untrack(fd)
        } else {
            None
        }
    });
    set_errno(e);
    path.flatten()
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

unsafe fn freopen_with(
    real_freopen: Option<FreopenFn>,
    path: *const c_char,
    mode: *const c_char,
    s: *mut FILE,
) -> *mut FILE {
    let Some(f) = real_freopen else { return enosys_null() };
    // Inside a section (the agent's own call) the stream passes through: the agent never
    // reopens or closes a stream of the host's there.
    let watch = !s.is_null() && !idle() && !busy();
    let old = if watch { forget_stream(s) } else { None };
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
    // Busy: a call from inside a section, where the agent never closes a host's stream.
    if s.is_null() || idle() || busy() {
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
