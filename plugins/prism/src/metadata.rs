//! The metadata half of the seed's comparison: before it reads, file-level scheduling finds
//! its input by walking the namespace, and object-level scheduling loads a catalog instead
//! (the seed: metadata I/O of "tens of seconds" file-level, "catalog cache loading only
//! (under 1 second)" with SwiftLoad).
//!
//! The walk is mpiFileUtils' (the public SwiftLoad is built on its `dcp`): a `readdir` per
//! directory and an `lstat` per entry (hpc/mpifileutils `src/common/mfu_flist.c`,
//! `mfu_walk_opts_new`: `use_stat = 1`, "Do stat files in walk by default"; on Lustre a stat
//! asks the MDS and, for the size, every OST the file is striped over, as the same file's
//! `LUSTRE_STAT` comment says). The model: every call costs one loader `op_ms` of latency,
//! the loaders issue them in parallel, and the MDS answers at most `mds_ops_per_s` in all
//! (a busy MDS shared with other jobs answers far fewer than an idle one). The catalog is
//! loaded once, at a measured cost per entry.

/// What discovering the input costs each policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetadataModel {
    /// Calls per second the MDS answers this walk, in all (0: metadata is not modelled).
    pub mds_ops_per_s: f64,
    /// Latency of one call as one loader sees it, milliseconds.
    pub op_ms: f64,
    /// Seconds to load one catalog entry (the compact catalog's warm load: 0.094 s for
    /// 1,000,000 entries on this project's 2-core VM, docs/performance.md).
    pub catalog_s_per_entry: f64,
}

impl MetadataModel {
    /// No metadata cost at all: the OST model alone.
    pub const NONE: MetadataModel = MetadataModel { mds_ops_per_s: 0.0, op_ms: 0.0, catalog_s_per_entry: 0.0 };

    /// Whether it adds anything.
    pub fn is_none(&self) -> bool {
        self.mds_ops_per_s <= 0.0
    }

    /// Seconds the file-level walk of `files` files in `dirs` directories takes with
    /// `loaders` loaders: `files + dirs` calls at `min(loaders × 1000 / op_ms, mds_ops_per_s)`
    /// calls per second.
    pub fn walk_seconds(&self, files: usize, dirs: usize, loaders: usize) -> f64 {
        if self.is_none() {
            return 0.0;
        }
        let by_loaders = if self.op_ms > 0.0 { loaders.max(1) as f64 * 1000.0 / self.op_ms } else { f64::INFINITY };
        (files + dirs) as f64 / by_loaders.min(self.mds_ops_per_s)
    }

    /// Seconds object-level scheduling spends loading a catalog of `entries` entries.
    pub fn catalog_seconds(&self, entries: usize) -> f64 {
        if self.is_none() {
            return 0.0;
        }
        entries as f64 * self.catalog_s_per_entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_is_bound_by_the_loaders_then_by_the_mds() {
        let m = MetadataModel { mds_ops_per_s: 20_000.0, op_ms: 1.0, catalog_s_per_entry: 94e-9 };
        // 24 loaders issue 24,000 calls/s: the MDS's 20,000 bound them.
        assert!((m.walk_seconds(199_999, 1, 24) - 10.0).abs() < 1e-9);
        // 8 loaders: 8,000 calls/s.
        assert!((m.walk_seconds(199_999, 1, 8) - 25.0).abs() < 1e-9);
        assert!((m.catalog_seconds(1_000_000) - 0.094).abs() < 1e-9);
        assert_eq!((MetadataModel::NONE.walk_seconds(10, 1, 4), MetadataModel::NONE.catalog_seconds(10)), (0.0, 0.0));
    }
}
