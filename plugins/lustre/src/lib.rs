//! The Lustre monitor: changelog records parsed by key, reduced by a rule table, applied to
//! a FID-keyed directory tree that builds paths without `fid2path`.

pub mod changelog;
pub mod reducer;
pub mod tree;
