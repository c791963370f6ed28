pub mod cifar;
pub mod compliance;
pub mod corpus;
pub mod gen;
pub mod globus;
pub mod gpfs;
pub mod lustre;
pub mod monitor_compliance;
