//! PRISM's SwiftLoad over MPI: [`swiftload`] is the tool, run by the `swiftload` binary and,
//! under the name the seed's instructions use, `swiftload_tool`.

pub mod swiftload;
