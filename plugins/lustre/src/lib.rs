//! The Lustre monitor: changelog records parsed by key, reduced by a rule table, applied to
//! a FID-keyed directory tree that builds paths without `fid2path`.

mod apply;
pub mod changelog;
mod config;
pub mod dne;
mod leavings;
mod lfs;
pub mod lfs_records;
pub mod lookahead;
pub mod monitor;
pub mod namespace;
pub mod reducer;
mod resolve;
mod stream;
pub mod tree;

use icicle_core::registry::{build_component, PluginDescriptor, PluginKind};

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Source,
        name: "lustre",
        description: "Lustre changelogs via `lfs changelog` (one MDT, or every MDT of a namespace with `mdts`), reduced and applied to a FID directory tree; `icicle monitor`",
        example: "[sources.mdt0]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nuser = \"cl1\"\nmount = \"/mnt/fs0\"\nfsname = \"fs0\"\nstate_dir = \"/var/lib/icicle/lustre\"\n",
        build: build_component::<monitor::LustreConfig>, check: icicle_core::registry::check_component::<monitor::LustreConfig>,
    }
}
