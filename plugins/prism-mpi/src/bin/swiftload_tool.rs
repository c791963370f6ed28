//! `swiftload_tool`: swiftload under the name the seed's instructions use
//! (`mpirun -np N ./swiftload_tool --input_dir <data_path>`, the catalog from
//! `SWIFTLOAD_CATALOG_DIR`).

fn main() -> std::process::ExitCode {
    icicle_prism_mpi::swiftload::main()
}
