//! What a backend hands the state: a path (relative to the root) that may have changed, or a
//! subtree to compare with the file system again.

use std::sync::atomic::AtomicU64;

/// Why a subtree is rescanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RescanReason {
    /// The first start: the seed walk (files that predate monitoring).
    Seed,
    /// A restart: the checkpoint holds no stream position, so the root is compared again.
    Restart,
    /// The kernel queue overflowed (`FAN_Q_OVERFLOW`, `IN_Q_OVERFLOW`): events were lost.
    Overflow,
    /// A directory appeared (created or moved in): what it holds was never reported.
    NewDirectory,
    /// A watch could not be added (inotify): the directory is compared now, once.
    WatchFailed,
    /// A file system was mounted or unmounted at or below the root (fanotify marks each file
    /// system, a new one when it is found): its directory is compared again.
    Mount,
    /// The root is another directory, or none, than at the last check (moved away, removed,
    /// made again): everything is compared with what is at its path now.
    RootChanged,
}

/// One event, as the state applies it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LocalEvent {
    /// The entry at this path (relative to the root, `/`-separated, empty for the root) may have
    /// been created, changed, renamed away or deleted.
    Changed(String),
    /// A directory arrived at or left this name (created, moved in or away, removed). Whatever
    /// is there now is compared as a new directory, with everything the index holds below the
    /// name, even when the index already knows it: an event the kernel merged into an earlier
    /// one may have named a change below it by a path it no longer has, and an inode number
    /// may be reused.
    Directory(String),
    /// Everything below this directory (relative path) is compared with the file system.
    Rescan(String, RescanReason),
    /// A file with more than one link changed through a name outside the root (fanotify
    /// reports the object's handle with the event): its inode number. Every name the index
    /// holds for that inode is compared.
    Object(u64),
}

/// Paths a compare could not read, met by this process.
static UNREADABLE: AtomicU64 = AtomicU64::new(0);

use icicle_core::log_sample::count_to_log;

/// Count one more path a compare could not read; its number when it is to be logged.
pub(crate) fn unreadable_to_log() -> Option<u64> {
    count_to_log(&UNREADABLE)
}

/// `name` in directory `dir` (relative to the root; empty for the root itself).
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// A name's text: its bytes escaped as every source escapes them ([`icicle_core::name`]), so
/// a name that is not UTF-8 is indexed, and deleted, under the same subject a snapshot gives it.
pub fn name_text(name: &[u8]) -> std::borrow::Cow<'_, str> {
    icicle_core::name::escape(name)
}

/// The metrics label of a rescan reason as the state counts it (its name run together).
pub(crate) fn rescan_label(k: &str) -> &'static str {
    match k {
        "seed" => "rescans_seed",
        "restart" => "rescans_restart",
        "overflow" => "rescans_overflow",
        "newdirectory" => "rescans_new_directory",
        "mount" => "rescans_mount",
        "rootchanged" => "rescans_root_changed",
        _ => "rescans_watch_failed",
    }
}
