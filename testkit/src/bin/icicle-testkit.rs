//! `icicle-testkit`: generators and emulators for tests, demos and benchmarks.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};

#[derive(Parser)]
#[command(name = "icicle-testkit", version, about = "Generators and emulators for icicle")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a deterministic snapshot in one format.
    GenSnapshot {
        /// Number of files and links.
        #[arg(long)]
        files: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// gufi, mmapplypolicy, tsv, pwalk, ne2scan or tree.
        #[arg(long)]
        format: Format,
        #[arg(long)]
        out: PathBuf,
        /// Rows per text file (tsv).
        #[arg(long, default_value_t = 1_000_000)]
        rows_per_file: u64,
        /// GUFI: also fill pentries_rollup as gufi_rollup does.
        #[arg(long)]
        rollup: bool,
        /// Also write the ground truth as JSON lines (`truth.jsonl`).
        #[arg(long)]
        truth: bool,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::GenSnapshot { files, seed, format, out, rows_per_file, rollup, truth } => {
            let fs = GenFs::generate(&GenSpec::new(files, seed));
            gen::write(&fs, format, &out, rows_per_file, rollup)?;
            if truth {
                let mut s = String::new();
                for r in fs.records() {
                    s.push_str(&serde_json::to_string(&r)?);
                    s.push('\n');
                }
                std::fs::write(out.join("truth.jsonl"), s)?;
            }
            eprintln!("wrote {} files in {} directories as {format:?} to {}", fs.files.len(), fs.dirs.len(), out.display());
        }
    }
    Ok(())
}
