//! The rename interposers (`rename`, `renameat`, `renameat2`): a rename that moves a recorded
//! or open file, or a directory above such files, moves their catalog entries with it.

use std::collections::HashSet;
use std::ffi::{c_char, c_int};
use std::sync::atomic::Ordering;

use crate::*;

/// The absolute path that `path` names relative to `dirfd` (`AT_FDCWD`: the working
/// directory): its directory canonicalised, its last component kept as it is (a rename acts on
/// that name, not on what a link there points to).
pub(crate) fn resolve_at(dirfd: c_int, path: *const c_char) -> Option<Vec<u8>> {
    if path.is_null() {
        return None;
    }
    // SAFETY: the host passed a NUL-terminated path.
    let raw = unsafe { CStr::from_ptr(path) }.to_bytes();
    let mut full = match raw.first() {
        None => return None,
        Some(b'/') => raw.to_vec(),
        Some(_) => {
            let base = if dirfd == libc::AT_FDCWD {
                std::env::current_dir().ok()?
            } else {
                std::fs::read_link(format!("/proc/self/fd/{dirfd}")).ok()?
            };
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
pub(crate) fn lstat_bytes(p: &[u8]) -> Option<(StatFields, bool, bool)> {
    let md = std::fs::symlink_metadata(std::ffi::OsStr::from_bytes(p)).ok()?;
    Some((StatFields::from_metadata(&md), md.file_type().is_file(), md.file_type().is_dir()))
}

/// One file that a rename gives a new name.
pub(crate) struct Move {
    from: Vec<u8>,
    to: Vec<u8>,
    /// Its `lstat` before the rename (used when it cannot be `lstat`ed after).
    before: Option<StatFields>,
}

/// What a rename hook found before the real call: the files of this process it moves, and
/// the file it replaces.
pub(crate) struct PendingRename {
    moves: Vec<Move>,
    replaced: Option<(Vec<u8>, StatFields)>,
}

/// The paths of this process's files (recorded, or open for writing: tracked or deferred)
/// that `keep` selects.
pub(crate) fn our_paths(keep: impl Fn(&[u8]) -> bool) -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>> = Vec::new();
    all.extend(recorded().lock().map.keys().filter(|p| keep(p)).cloned());
    all.extend(table().lock().values().filter(|p| keep(p)).cloned());
    all.extend(deferred().lock().iter().filter(|p| keep(p)).cloned());
    all
}

/// Whether `p` is strictly below the directory `dir`.
pub(crate) fn is_below(p: &[u8], dir: &[u8]) -> bool {
    p.len() > dir.len() && p.starts_with(dir) && p[dir.len()] == b'/'
}

/// Before a rename of `from` to `to` (absolute): which of this process's files it moves.
/// `None` when it moves none of them and replaces none (then nothing is written).
pub(crate) fn before_rename(from: Vec<u8>, to: Vec<u8>, exchange: bool) -> Option<PendingRename> {
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
pub(crate) fn after_rename(cfg: &Config, p: PendingRename) {
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
    {
        table().lock().retain(|_, path| match moved(path) {
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
    {
        let mut d = deferred().lock();
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
    {
        let mut r = recorded().lock();
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
unsafe fn rename_with(
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    flags: libc::c_uint,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let nothing = TRACKED.load(Ordering::Relaxed) == 0
        && DEFERRED_N.load(Ordering::Relaxed) == 0
        && RECORDED_N.load(Ordering::Relaxed) == 0;
    if nothing || busy() {
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
pub unsafe extern "C" fn renameat2(
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    flags: libc::c_uint,
) -> c_int {
    let Some(f) = real().renameat2 else { return enosys() };
    rename_with(olddirfd, old, newdirfd, new, flags, || f(olddirfd, old, newdirfd, new, flags))
}
