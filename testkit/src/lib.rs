pub mod gen;
pub mod gpfs;
pub mod lustre;
