//! icicle runtime: the snapshot engine (plan, read, encode, deliver, version), the counting
//! and aggregate pipelines that run beside it over the same read, and the composition of
//! configured components into a runnable job.

pub mod cluster;
pub mod compose;
pub mod deletes;
pub mod deliver;
pub mod dirpass;
pub mod fault;
pub mod manifest;
pub mod monitor;
pub mod pipelines;
pub mod rejects;
pub mod sighting;
pub mod snapshot;
pub mod spool;
