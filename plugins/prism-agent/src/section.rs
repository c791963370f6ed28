//! Where the agent does its work: sections that no signal handler can interrupt and that a
//! call made from inside them passes through, and the agent's shared state, which a forked
//! child starts afresh.
//!
//! Every piece of agent work (tracking a descriptor, recording a file, any lock) runs inside
//! [`guarded`]: all signals are blocked on the thread for its duration and restored after, so a
//! handler runs only between sections, never while this thread holds one of the agent's locks
//! or is inside an allocation the agent made; a call into an interposed function made inside a
//! section (the agent's own `std::fs` calls) finds the thread busy and goes straight to libc.
//! The host's own calls (the real `open`, `close`, ...) always run outside sections, with the
//! host's signal mask.

use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

thread_local! {
    /// Set while the agent works on this thread (inside [`guarded`]).
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// The agent is at work on this thread (or the thread is being torn down): a call made now
/// passes straight through to libc.
pub(crate) fn busy() -> bool {
    BUSY.try_with(Cell::get).unwrap_or(true)
}

/// Runs `f` as a section: all signals blocked on this thread (glibc keeps its own two), the
/// thread marked busy, panics contained. Returns `None` when the thread is already busy (a
/// call the agent itself made) or `f` panicked.
pub(crate) fn guarded<R>(f: impl FnOnce() -> R) -> Option<R> {
    if busy() {
        return None;
    }
    // SAFETY: sigset_t values filled by sigfillset / pthread_sigmask before they are read.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigset_t is plain integers; all zeroes is a valid (empty) set.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to the two sets; pthread_sigmask changes only this thread's mask.
    let blocked =
        unsafe { libc::sigfillset(&mut all) == 0 && libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old) == 0 };
    let entered = BUSY.try_with(|b| !b.replace(true)).unwrap_or(false);
    let out = if entered {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok();
        let _ = BUSY.try_with(|b| b.set(false));
        r
    } else {
        None
    };
    if blocked {
        // SAFETY: restores the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, ptr::null_mut()) };
    }
    out
}

/// A value behind a mutex that a forked child can abandon: the child of a multithreaded
/// process may inherit the mutex locked by a thread that does not exist there, so
/// [`Shared::reset`] forgets it (it is leaked) and the next use makes a fresh, default one.
/// Locked only inside [`guarded`] sections.
pub(crate) struct Shared<T> {
    ptr: AtomicPtr<Mutex<T>>,
}

impl<T: Default> Shared<T> {
    /// Empty until first used.
    pub(crate) const fn new() -> Shared<T> {
        Shared { ptr: AtomicPtr::new(ptr::null_mut()) }
    }

    fn get(&self) -> &'static Mutex<T> {
        let p = self.ptr.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: set below from a leaked Box; never freed.
            return unsafe { &*p };
        }
        let fresh = Box::into_raw(Box::new(Mutex::new(T::default())));
        match self.ptr.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: leaked above, never freed.
            Ok(_) => unsafe { &*fresh },
            Err(current) => {
                // SAFETY: `fresh` was never shared; `current` is another thread's leaked Box.
                unsafe {
                    drop(Box::from_raw(fresh));
                    &*current
                }
            }
        }
    }

    /// Lock it (a panic inside an earlier section does not lose the value).
    pub(crate) fn lock(&self) -> MutexGuard<'static, T> {
        debug_assert!(busy(), "agent state locked outside a section");
        self.get().lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// In a forked child (one thread, inside the `pthread_atfork` child handler): forget the
    /// parent's value and its mutex, whatever state another parent thread left them in. Only
    /// an atomic store: async-signal-safe.
    pub(crate) fn reset(&self) {
        self.ptr.store(ptr::null_mut(), Ordering::Release);
    }
}
