//! icicle testkit: deterministic snapshot generators, file-system and service emulators, the
//! corpus of real producer output and the compliance harnesses.

pub mod cifar;
pub mod compliance;
pub mod corpus;
pub mod gen;
pub mod globus;
pub mod gpfs;
pub mod lustre;
pub mod monitor_compliance;
