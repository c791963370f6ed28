//! Snapshot sources: `gufi`, `mmapplypolicy`, `tsv` and `walk`; and the `icicle9` row writer.

pub mod fields;
pub mod gufi;
pub mod icicle9;
pub mod mmapplypolicy;
pub mod show;
pub mod tsv;
pub mod walk;

use icicle_core::registry::{build_component, BuildContext, PluginDescriptor, PluginKind};

/// The `[snapshot] split_bytes` setting, for text sources that cut big files into splits.
pub(crate) fn split_bytes(ctx: &BuildContext<'_>) -> u64 {
    ctx.figment.extract_inner::<u64>("snapshot.split_bytes").unwrap_or(64 << 20)
}

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Source,
        name: "gufi",
        description: "a GUFI index read directly with SQLite (db.db per directory; rolled-up indexes without double counting)",
        example: "[sources.index]\ntype = \"gufi\"\nindex = \"/gufi/index\"\npath_prefix = \"/\"\n",
        build: build_component::<gufi::GufiConfig>, check: icicle_core::registry::check_component::<gufi::GufiConfig>,
    }
}

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Source,
        name: "mmapplypolicy",
        description: "GPFS mmapplypolicy LIST files (inode gen snapid SHOW... -- path), ESCAPE '%' decoding",
        example: "[sources.gpfs]\ntype = \"mmapplypolicy\"\npaths = [\"/policy/list.allfiles\"]\npreset = \"nersc18\"\nescaped = true\n",
        build: build_component::<mmapplypolicy::MmapplypolicyConfig>, check: icicle_core::registry::check_component::<mmapplypolicy::MmapplypolicyConfig>,
    }
}

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Source,
        name: "tsv",
        description: "delimited listings: presets icicle9 (type,mode,uid,gid,size,atime,ctime,mtime,path), pwalk, ne2scan; or a column map",
        example: "[sources.listing]\ntype = \"tsv\"\npaths = [\"/snapshots/*.csv\"]\npreset = \"icicle9\"\n",
        build: build_component::<tsv::TsvConfig>, check: icicle_core::registry::check_component::<tsv::TsvConfig>,
    }
}

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Source,
        name: "walk",
        description: "a parallel lstat walk of a live directory tree (links never followed; one file system unless xdev = false)",
        example: "[sources.home]\ntype = \"walk\"\nroot = \"/home\"\n",
        build: build_component::<walk::WalkConfig>, check: icicle_core::registry::check_component::<walk::WalkConfig>,
    }
}
