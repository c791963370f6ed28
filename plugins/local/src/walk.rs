//! A walk of a directory below the root: every path, directories included, names that are not
//! UTF-8 left out and counted.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `name` in directory `dir` (relative to the root; empty for the root itself).
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Every path below `dir` (relative to `root`), directories included, to `visit`, with its
/// metadata when `stat` (else `None`: the listing's entry type is enough to descend, and the
/// compare `lstat`s each path anyway); names that are not UTF-8 (and what is below them) are
/// left out and counted in `not_utf8`. Returns the directories that could not be listed
/// (EACCES, EIO; not those gone since).
pub fn walk(root: &Path, dir: &str, not_utf8: &mut u64, stat: bool, visit: &mut dyn FnMut(String, Option<&std::fs::Metadata>)) -> Vec<String> {
    let mut unlisted = Vec::new();
    // The root's path must hold a directory itself: a symlink there is not followed.
    if crate::mounts::root_identity(root).is_none() {
        return unlisted;
    }
    let mut stack = vec![dir.to_string()];
    while let Some(d) = stack.pop() {
        let rd = match std::fs::read_dir(root.join(&d)) {
            Ok(rd) => rd,
            Err(e) => {
                if !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) {
                    unlisted.push(d);
                }
                continue;
            }
        };
        for e in rd {
            let Ok(e) = e else {
                // The rest of the listing is lost: like one that could not be listed.
                unlisted.push(d.clone());
                break;
            };
            let name = e.file_name();
            let Some(name) = crate::event::utf8_name(name.as_bytes(), &d) else {
                *not_utf8 += 1;
                continue;
            };
            let rel = join(&d, name);
            let md = if stat {
                match std::fs::symlink_metadata(e.path()) {
                    Ok(md) => Some(md),
                    Err(_) => continue,
                }
            } else {
                None
            };
            // Without `stat`, the type from the listing (std `lstat`s only where it is unknown).
            let is_dir = match &md {
                Some(md) => md.is_dir(),
                None => e.file_type().is_ok_and(|t| t.is_dir()),
            };
            if is_dir {
                stack.push(rel.clone());
            }
            visit(rel, md.as_ref());
        }
    }
    unlisted
}
