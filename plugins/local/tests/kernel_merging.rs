//! What the kernel's fanotify queue does to event order, with real events (as root): an event
//! joins an earlier queued one with the same directory and name, so "create then delete" and
//! "delete then create" of one name arrive as the same single event. This is why the local
//! monitor reconciles each reported name with the file system instead of replaying events in
//! order through a rule table (docs/local-monitor.md, "State and reduction"). With
//! the object's own handle reported too (`FAN_REPORT_TARGET_FID`), events of different objects
//! stop merging, but one object's link and unlink at a name still arrive alike in either order.
//! And events of different processes never merge, so a later change can join an earlier
//! event and arrive before one that happened first: single-kind events in an order a rule
//! table reads as "nothing left", for a link that exists.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether this can run (as root); under CI not being root is a failure, not a skip.
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() == 0 };
    assert!(root || std::env::var_os("CI").is_none(), "CI must run this as root (a fanotify filesystem mark)");
    root
}

/// A fanotify group reporting directory handles and names, marking the file system of `dir`.
fn group(dir: &Path) -> OwnedFd {
    group_with(dir, libc::FAN_REPORT_DFID_NAME | libc::FAN_REPORT_FID).unwrap_or_else(|e| panic!("fanotify_init: {e}"))
}

/// Directory-entry events: creates, deletes and moves.
const DIR_ENTRY_EVENTS: u64 =
    libc::FAN_CREATE | libc::FAN_DELETE | libc::FAN_MOVED_FROM | libc::FAN_MOVED_TO | libc::FAN_ONDIR;

/// A fanotify group with these `FAN_REPORT_*` flags, marking the file system of `dir`; the
/// error of `fanotify_init` (EINVAL: a flag this kernel does not know).
fn group_with(dir: &Path, report: u32) -> std::io::Result<OwnedFd> {
    group_with_mask(dir, report, DIR_ENTRY_EVENTS)
}

/// [`group_with`], marking these events.
fn group_with_mask(dir: &Path, report: u32, mask: u64) -> std::io::Result<OwnedFd> {
    let flags = libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK | report;
    // SAFETY: plain system calls; the descriptor is owned at once.
    let fd = unsafe { libc::fanotify_init(flags, libc::O_RDONLY as u32) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: c is NUL-terminated; fd is a fanotify group.
    let r = unsafe {
        libc::fanotify_mark(
            fd.as_raw_fd(),
            libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
            mask,
            libc::AT_FDCWD,
            c.as_ptr(),
        )
    };
    assert_eq!(r, 0, "fanotify_mark: {}", std::io::Error::last_os_error());
    Ok(fd)
}

/// The name in an event's directory-handle-and-name record (`FAN_EVENT_INFO_TYPE_DFID_NAME`:
/// a 4-byte header, the 8-byte fsid, the file handle's 8-byte header and bytes, then the name).
fn name_of(event: &[u8], meta: usize) -> Option<&[u8]> {
    let mut at = meta;
    while at + 4 <= event.len() {
        let (kind, len) = (event[at], u16::from_ne_bytes([event[at + 2], event[at + 3]]) as usize);
        let record = event.get(at..at + len.max(4))?;
        if kind == libc::FAN_EVENT_INFO_TYPE_DFID_NAME {
            let handle_bytes = u32::from_ne_bytes(record.get(12..16)?.try_into().ok()?) as usize;
            let name = record.get(20 + handle_bytes..)?;
            return Some(&name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())]);
        }
        at += len.max(4);
    }
    None
}

/// The object's own handle in an event (`FAN_EVENT_INFO_TYPE_FID`: the fsid and file handle,
/// after the 4-byte header), when the group reports it.
fn object_of(event: &[u8], meta: usize) -> Option<Vec<u8>> {
    let mut at = meta;
    while at + 4 <= event.len() {
        let (kind, len) = (event[at], u16::from_ne_bytes([event[at + 2], event[at + 3]]) as usize);
        if kind == libc::FAN_EVENT_INFO_TYPE_FID {
            return event.get(at + 4..at + len).map(<[u8]>::to_vec);
        }
        at += len.max(4);
    }
    None
}

/// The masks of the events queued now whose name is `name`.
fn masks_for(fd: &OwnedFd, name: &str) -> Vec<u64> {
    events_for(fd, name).into_iter().map(|(mask, _)| mask).collect()
}

/// The events queued now whose name is `name`: each one's mask and object handle.
fn events_for(fd: &OwnedFd, name: &str) -> Vec<(u64, Option<Vec<u8>>)> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut events = Vec::new();
    loop {
        // SAFETY: buf is a valid writable buffer of its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            return events;
        }
        let data = &buf[..n as usize];
        let meta = std::mem::size_of::<libc::fanotify_event_metadata>();
        let mut off = 0;
        while off + meta <= data.len() {
            // SAFETY: at least `meta` bytes remain; read_unaligned copes with alignment.
            let m: libc::fanotify_event_metadata = unsafe { std::ptr::read_unaligned(data[off..].as_ptr().cast()) };
            let len = (m.event_len as usize).max(meta);
            let event = &data[off..(off + len).min(data.len())];
            if name_of(event, meta) == Some(name.as_bytes()) {
                events.push((m.mask, object_of(event, meta)));
            }
            off += len;
        }
    }
}

#[test]
fn create_then_delete_and_delete_then_create_arrive_as_the_same_single_event() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let fd = group(t.path());
    // Created, then removed: nothing is left to index.
    std::fs::write(t.path().join("transient"), b"1").unwrap();
    std::fs::remove_file(t.path().join("transient")).unwrap();
    let create_delete = masks_for(&fd, "transient");
    // An existing file removed, then a new one created at the name: the new one must be indexed.
    std::fs::write(t.path().join("replaced"), b"1").unwrap();
    let _ = masks_for(&fd, "replaced");
    std::fs::remove_file(t.path().join("replaced")).unwrap();
    std::fs::write(t.path().join("replaced"), b"2").unwrap();
    let delete_create = masks_for(&fd, "replaced");
    let both = libc::FAN_CREATE | libc::FAN_DELETE;
    assert_eq!(create_delete, vec![both], "create, delete: one merged event");
    assert_eq!(delete_create, vec![both], "delete, create: the same one merged event");
}

#[test]
fn with_the_objects_handle_a_link_then_unlink_and_an_unlink_then_link_still_arrive_alike() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    // The object's handle on every directory-entry event (Linux 5.17): a FID-keyed rule table's
    // best case. Events of different objects at one name no longer merge...
    let fd = match group_with(t.path(), libc::FAN_REPORT_DFID_NAME_TARGET) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            eprintln!("skipped: this kernel has no FAN_REPORT_TARGET_FID (Linux 5.17): {e}");
            return;
        }
        Err(e) => panic!("fanotify_init: {e}"),
    };
    std::fs::write(t.path().join("swapped"), b"1").unwrap();
    let _ = events_for(&fd, "swapped");
    std::fs::remove_file(t.path().join("swapped")).unwrap();
    std::fs::write(t.path().join("swapped"), b"2").unwrap();
    let replaced = events_for(&fd, "swapped");
    assert_eq!(
        replaced.iter().map(|e| e.0).collect::<Vec<_>>(),
        vec![libc::FAN_DELETE, libc::FAN_CREATE],
        "two objects: two events"
    );
    assert_ne!(replaced[0].1, replaced[1].1, "each with its own object");
    // ...but one object's second name, linked then unlinked (nothing to index at `second`)
    // and unlinked then linked again (`second` must be indexed), arrives as one identical event.
    let g = t.path().join("target");
    std::fs::write(&g, b"x").unwrap();
    let _ = events_for(&fd, "target");
    std::fs::hard_link(&g, t.path().join("second")).unwrap();
    std::fs::remove_file(t.path().join("second")).unwrap();
    let link_unlink = events_for(&fd, "second");
    std::fs::hard_link(&g, t.path().join("second")).unwrap();
    let _ = events_for(&fd, "second");
    std::fs::remove_file(t.path().join("second")).unwrap();
    std::fs::hard_link(&g, t.path().join("second")).unwrap();
    let unlink_link = events_for(&fd, "second");
    let both = libc::FAN_CREATE | libc::FAN_DELETE;
    assert_eq!(link_unlink.iter().map(|e| e.0).collect::<Vec<_>>(), vec![both], "link, unlink: one merged event");
    assert_eq!(link_unlink, unlink_link, "unlink, link: the same event, same object");
    assert!(link_unlink[0].1.is_some(), "the object's handle is reported");
}

#[test]
fn events_of_two_processes_arrive_in_an_order_the_rule_table_cancels_for_a_link_that_exists() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    // The events the local monitor marks.
    let monitored = DIR_ENTRY_EVENTS
        | libc::FAN_ATTRIB
        | libc::FAN_MODIFY
        | libc::FAN_CLOSE_WRITE
        | libc::FAN_DELETE_SELF
        | libc::FAN_MOVE_SELF;
    let fd = group_with_mask(t.path(), libc::FAN_REPORT_DFID_NAME | libc::FAN_REPORT_FID, monitored)
        .unwrap_or_else(|e| panic!("fanotify_init: {e}"));
    let kept = t.path().join("kept");
    // This process makes the symbolic link `kept`, another removes it, this one makes it
    // again: the third change joins this process's queued create, so the delete arrives last.
    // (Nothing else names it: a link is not opened, written or closed.)
    std::os::unix::fs::symlink("target", &kept).unwrap();
    let rm = std::process::Command::new("rm").arg(&kept).status().unwrap();
    assert!(rm.success());
    std::os::unix::fs::symlink("target", &kept).unwrap();
    let masks = masks_for(&fd, "kept");
    assert_eq!(masks, vec![libc::FAN_CREATE, libc::FAN_DELETE], "create, then delete, each alone");
    assert!(kept.symlink_metadata().is_ok(), "yet the link exists");
    // The Lustre monitor's rule table, given them as changelog records of one object (these
    // events name a directory and a name, not the link), drops both: nothing would be indexed.
    let record = |i: u64, kind: &str| {
        let line = format!(
            "{i} {kind} 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000401:0x1:0x0] kept"
        );
        icicle_plugins_lustre::changelog::ChangelogRecord::parse(&line).unwrap()
    };
    let mut batch = vec![record(1, "04SLINK"), record(2, "06UNLNK")];
    let counts = icicle_core::traits::Reducer::reduce(&mut icicle_plugins_lustre::reducer::RuleTable, &mut batch);
    assert!(batch.is_empty(), "the rule table cancels the pair: {batch:?}");
    assert_eq!(counts.cancelled, 2);
}
