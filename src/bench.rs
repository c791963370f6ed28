//! `icicle bench`: throughput and peak-memory benchmarks on generated data.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Subcommand;
use figment::providers::{Format as _, Toml};
use figment::Figment;
use icicle_core::snapshot::NoProgress;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};

/// Benchmarks.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// The snapshot pipeline per source format and sink, on a generated snapshot.
    Snapshot {
        /// Files in the generated snapshot.
        #[arg(long, default_value_t = 2_000_000)]
        files: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where generated inputs are cached between runs.
        #[arg(long, default_value = "target/bench-data")]
        dir: PathBuf,
        /// Comma-separated: tsv, mmapplypolicy, gufi, pwalk, ne2scan, tree.
        #[arg(long, default_value = "tsv,mmapplypolicy,gufi")]
        formats: String,
        /// Comma-separated: blackhole, file.
        #[arg(long, default_value = "blackhole,file")]
        sinks: String,
        /// Worker threads (0 = one per core).
        #[arg(long, default_value_t = 0)]
        workers: usize,
    },
}

/// Peak resident set size of this process, in bytes (VmHWM).
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok()))
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// Reset the peak RSS counter so the next measurement covers only what follows.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn ensure_data(dir: &Path, format: Format, files: u64, seed: u64, fs: &mut Option<GenFs>) -> anyhow::Result<PathBuf> {
    let out = dir.join(format!("{format:?}-{files}-{seed}").to_lowercase());
    let marker = out.join(".complete");
    if !marker.exists() {
        if out.exists() {
            std::fs::remove_dir_all(&out)?;
        }
        let fs = fs.get_or_insert_with(|| GenFs::generate(&GenSpec::new(files, seed)));
        let t = Instant::now();
        gen::write(fs, format, &out, 1_000_000, false)?;
        std::fs::write(&marker, "")?;
        eprintln!("generated {format:?} ({files} files) in {:.1} s", t.elapsed().as_secs_f64());
    }
    Ok(out)
}

fn source_toml(format: Format, data: &Path) -> String {
    let d = data.display();
    match format {
        Format::Tsv => format!("type = \"tsv\"\npaths = [\"{d}/*.csv\"]\npreset = \"icicle9\""),
        Format::Pwalk => format!("type = \"tsv\"\npaths = [\"{d}/pwalk.csv\"]\npreset = \"pwalk\""),
        Format::Ne2scan => format!("type = \"tsv\"\npaths = [\"{d}/fslist.ne2scan\"]\npreset = \"ne2scan\""),
        Format::Mmapplypolicy => format!("type = \"mmapplypolicy\"\npaths = [\"{d}/list.allfiles\"]"),
        Format::Gufi => format!("type = \"gufi\"\nindex = \"{d}\""),
        Format::Tree => format!("type = \"walk\"\nroot = \"{d}/tree\"\npath_prefix = \"/\""),
    }
}

/// Run the benchmarks.
pub fn run(cmd: BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Snapshot { files, seed, dir, formats, sinks, workers } => {
            std::fs::create_dir_all(&dir)?;
            let mut fs = None;
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
            let mut table = Vec::new();
            for f in formats.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let format: Format = f.parse().map_err(anyhow::Error::msg)?;
                let data = ensure_data(&dir, format, files, seed, &mut fs)?;
                for sink in sinks.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    let out = dir.join(format!("out-{f}-{sink}"));
                    let _ = std::fs::remove_dir_all(&out);
                    let sink_toml = match sink {
                        "blackhole" => "type = \"blackhole\"".to_string(),
                        "file" => format!("type = \"file\"\ndir = \"{}\"", out.display()),
                        other => anyhow::bail!("unknown bench sink `{other}` (blackhole, file)"),
                    };
                    let toml = format!(
                        "[snapshot]\nworkers = {workers}\nversion = \"bench\"\n[records]\nprincipals = \"{}/principals.tsv\"\n[sources.s]\n{}\n[sinks.k]\n{sink_toml}\n",
                        data.display(),
                        source_toml(format, &data)
                    );
                    let cfg = icicle_core::config::from_figment(Figment::from(Toml::string(&toml)))?;
                    let job = crate::pipeline::snapshot_job(&cfg, Arc::new(NoProgress))?;
                    reset_peak_rss();
                    let t = Instant::now();
                    let cpu0 = cpu_seconds();
                    let summary = rt.block_on(icicle_core::snapshot::run(job))?;
                    let secs = t.elapsed().as_secs_f64();
                    let cpu = cpu_seconds() - cpu0;
                    let peak = peak_rss_bytes();
                    let line = serde_json::json!({
                        "bench": "snapshot", "format": f, "sink": sink, "rows": summary.rows, "records": summary.records,
                        "rejects": summary.rejects, "seconds": secs, "rows_per_s": summary.rows as f64 / secs,
                        "cpu_seconds": cpu, "bytes": summary.bytes, "peak_rss_bytes": peak,
                    });
                    println!("{line}");
                    table.push(format!(
                        "| {f} | {sink} | {} | {:.2} | {:.0} | {:.0} | {} |",
                        summary.rows,
                        secs,
                        summary.rows as f64 / secs,
                        summary.rows as f64 / cpu.max(1e-9),
                        peak / (1 << 20)
                    ));
                    let _ = std::fs::remove_dir_all(&out);
                }
            }
            eprintln!("\n| source | sink | rows | seconds | rows/s | rows/CPU-s | peak RSS MiB |\n|---|---|---|---|---|---|---|");
            for l in table {
                eprintln!("{l}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// CPU time (user + system) used by this process so far.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
