//! The collector's own files in the catalog directory (the merged catalog, the log, the pid
//! file), opened so that a name planted there by another user of a shared directory never
//! makes the collector write into, truncate or trust someone else's file.
//!
//! open(2): with `O_CREAT | O_EXCL`, "symbolic links are not followed: if pathname is a
//! symbolic link, then open() fails regardless of where the symbolic link points"; with
//! `O_NOFOLLOW`, "If the trailing component (i.e., basename) of pathname is a symbolic link,
//! then the open fails, with the error ELOOP".

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Why the existing file `f` at `path` is not ours to use: not a regular file, owned by another
/// user than the collector's effective uid, or with several links (a hard link to someone's
/// file); `None` when it is ours.
fn not_ours(f: &File) -> Result<Option<String>, std::io::Error> {
    let md = f.metadata()?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    Ok(if !md.file_type().is_file() {
        Some("is not a regular file".into())
    } else if md.uid() != euid {
        Some(format!("is owned by uid {}, not by this collector's uid {euid}", md.uid()))
    } else if md.nlink() != 1 {
        Some(format!("has {} links (a hard link to another file)", md.nlink()))
    } else {
        None
    })
}

/// The message for an open of `path` that failed with `e`.
fn open_error(path: &Path, e: &std::io::Error) -> String {
    if e.raw_os_error() == Some(libc::ELOOP) {
        format!("{} is a symbolic link: refusing to follow it", path.display())
    } else {
        format!("{}: {e}", path.display())
    }
}

/// `path` opened for appending: created (mode 0644 less the umask) if it is not there, else
/// taken only if it is a regular file of ours with one link; a symbolic link is never followed.
pub fn append_own(path: &Path) -> Result<File, String> {
    let created =
        OpenOptions::new().append(true).create_new(true).mode(0o644).custom_flags(libc::O_NOFOLLOW).open(path);
    let file = match created {
        Ok(f) => return Ok(f),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            // O_NONBLOCK: a FIFO planted there does not wait for a reader.
            OpenOptions::new()
                .append(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(path)
                .map_err(|e| open_error(path, &e))?
        }
        Err(e) => return Err(open_error(path, &e)),
    };
    if let Some(why) = not_ours(&file).map_err(|e| open_error(path, &e))? {
        return Err(format!("{} {why}: refusing to write to it", path.display()));
    }
    // Back to blocking writes (O_NONBLOCK is ignored for regular files, but is not kept).
    // SAFETY: F_GETFL/F_SETFL on our own descriptor.
    unsafe {
        let fl = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// Write `text` to a new file `path` (any file or link already there is removed first, never
/// followed: `O_CREAT | O_EXCL`).
pub fn write_new(path: &Path, text: &str) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| open_error(path, &e))?;
    f.write_all(text.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))
}

/// The text of `path` if it is a regular file of ours with one link (a pid file), `None` if it
/// is not there; an error if something else is there (a link, someone else's file).
pub fn read_own(path: &Path) -> Result<Option<String>, String> {
    let mut f = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(open_error(path, &e)),
    };
    if let Some(why) = not_ours(&f).map_err(|e| open_error(path, &e))? {
        return Err(format!("{} {why}: not trusting it", path.display()));
    }
    let mut text = String::new();
    f.read_to_string(&mut text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(text))
}
