//! `swiftload`: see [`icicle_prism_mpi::swiftload`].

fn main() -> std::process::ExitCode {
    icicle_prism_mpi::swiftload::main()
}
