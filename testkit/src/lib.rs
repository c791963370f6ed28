pub mod gen;
pub mod lustre;
