//! A monitor for any Linux file system: `type = "fanotify"` (a filesystem mark reporting
//! directory file handle plus name, `FAN_REPORT_DFID_NAME`) or `type = "inotify"` (a watch on
//! every directory), run by the runtime's monitor driver. Both backends turn kernel events into
//! paths that may have changed; the state reconciles them with the file system at emit time
//! (lstat, compared with what the index holds), so a lost ordering or an overflow costs a
//! rescan, never a silent gap.
//!
//! The crate in layers: [`event`] is what a backend hands the state; `kernel` reads the
//! kernel's events (fanotify, inotify, the mounts they cover) into them; [`state`] reconciles
//! them with the file system and encodes what changed; `store` keeps what the index holds
//! (entries, their files on disk, the sent-ahead journal). `kernel` never uses `state`, and
//! `store` uses neither.

mod config;
mod error;
pub mod event;
mod kernel;
mod source;
pub mod state;
mod store;

use icicle_core::registry::{build_component, PluginDescriptor, PluginKind};

/// Kernel reads per poll at most (each up to 256 KiB): a steady stream of events, under a
/// filesystem mark perhaps none of them under the root, still ends a poll.
pub(crate) const MAX_READS_PER_POLL: usize = 64;

pub use config::{Backend, FanotifyConfig, InotifyConfig, LocalConfig};
pub use error::LocalError;

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Source,
        name: "fanotify",
        description: "Any Linux file system via fanotify (filesystem mark, FAN_REPORT_DFID_NAME; inotify when not permitted); `icicle monitor`",
        example: "[sources.home]\ntype = \"fanotify\"\nroot = \"/home\"\nstate_dir = \"/var/lib/icicle/local\"\n",
        build: build_component::<FanotifyConfig>, check: icicle_core::registry::check_component::<FanotifyConfig>,
    }
}

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Source,
        name: "inotify",
        description: "Any Linux file system via inotify (a watch on every directory under the root); `icicle monitor`",
        example: "[sources.home]\ntype = \"inotify\"\nroot = \"/home\"\nstate_dir = \"/var/lib/icicle/local\"\n",
        build: build_component::<InotifyConfig>, check: icicle_core::registry::check_component::<InotifyConfig>,
    }
}
