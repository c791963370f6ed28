//! `icicle-bench`: the benchmarks and experiments that need generated data. Kept out of the
//! `icicle` binary so the product ships no test code.

mod bench;

use std::process::ExitCode;

use clap::Parser;

// Link the plugin crates so their `inventory` registrations are present.
use icicle_plugins_globus as _;
use icicle_plugins_gpfs as _;
use icicle_plugins_index as _;
use icicle_plugins_kafka as _;
use icicle_plugins_lustre as _;
use icicle_plugins_s3 as _;
use icicle_plugins_sinks as _;
use icicle_plugins_sketches as _;
use icicle_plugins_snapshot as _;

/// The same allocator as `icicle`, so the figures are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Benchmarks that print throughput and peak memory, one JSON line per run.
#[derive(Parser, Debug)]
#[command(name = "icicle-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: bench::BenchCommand,
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    bench::run(cli.command)
}
