//! The open interposers (`open`, `openat`, `creat`, their `64` and fortified names, and the
//! `mkstemp` family): the real call, then the new descriptor tracked when it writes.

use std::ffi::{c_char, c_int};

use libc::mode_t;

use crate::*;

/// Common tail of every open: keep errno as the real call left it.
fn after(fd: c_int, flags: c_int) -> c_int {
    if fd >= 0 && wants(flags) {
        let e = errno();
        opened(fd, flags);
        set_errno(e);
    }
    fd
}

/// After a call that returned a new descriptor without saying how it was opened (the
/// `mkstemp` family opens inside libc): track it when its access mode writes.
fn after_new_fd(fd: c_int) -> c_int {
    if fd >= 0 {
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
