//! The benchmarks: throughput and peak memory on generated data.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Subcommand;
use figment::providers::{Format as _, Toml};
use figment::Figment;
use icicle_runtime::snapshot::NoProgress;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};

mod index;
mod monitor;
mod ranks;

/// Benchmarks.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// The snapshot pipeline per source format and sink, on a generated snapshot.
    Snapshot(SnapshotArgs),
    /// Primary, counting and aggregate pipelines over one read of a generated CSV snapshot
    /// shaped like the seed's FS-small (8.46 M rows), to blackhole, compared with DuckDB
    /// computing per-user and per-group counts, totals and quantiles on the same CSV.
    Pipelines(PipelinesArgs),
    /// The monitor's whole processing path in one process over a changelog text file:
    /// parse → filter → reduce → directory tree → emit (stat stubbed) to a counting sink.
    Monitor(MonitorArgs),
    /// The GPFS monitor through a real broker: the events are produced once into a topic with
    /// PARTITIONS partitions, then `icicle monitor --drain` reads them with each consumer count.
    MonitorKafka(MonitorKafkaArgs),
    /// End to end through the fake `lfs`: `icicle monitor --drain` with the directory tree
    /// against the FSMonitor-style mode (fid2path for every record, small LRU).
    MonitorE2e(MonitorE2eArgs),
    /// A generated CSV snapshot (primary and aggregate records) into the embedded index, then
    /// the questions `icicle find` and `icicle du` ask, warm: ingest rate, peak memory, bytes
    /// on disk per record, and each question's latency.
    Index(index::IndexArgs),
    /// One measured run in a fresh process (used by `icicle-bench snapshot`, so that peak memory
    /// covers the pipeline alone, not the generator).
    #[command(hide = true)]
    SnapshotRun(SnapshotRunArgs),
}

/// One measured run in a fresh process.
#[derive(clap::Args, Debug)]
pub struct SnapshotRunArgs {
    #[arg(long)]
    pub format: String,
    #[arg(long)]
    pub sink: String,
    #[arg(long)]
    pub data: PathBuf,
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    /// Also run the counting and aggregate pipelines with this sketch.
    #[arg(long)]
    pub all_pipelines: Option<String>,
    /// With --all-pipelines: only the aggregate pipeline.
    #[arg(long)]
    pub aggregate_only: bool,
    /// Leave the file sink's documents (and the counts) in `--out` instead of removing them,
    /// to compare the output of two builds.
    #[arg(long)]
    pub keep_out: bool,
    /// With --all-pipelines: the deepest directory prefix counted and aggregated
    /// (`directory_max`; the configuration's default, 3, without it).
    #[arg(long)]
    pub directory_max: Option<usize>,
    /// A further line of the source's configuration (e.g. `direct = false` for `gufi`).
    #[arg(long)]
    pub source_option: Vec<String>,
}

/// The snapshot pipeline per source format and sink, on a generated snapshot.
#[derive(clap::Args, Debug)]
pub struct SnapshotArgs {
    /// Files in the generated snapshot.
    #[arg(long, default_value_t = 2_000_000)]
    pub files: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where generated inputs are cached between runs.
    #[arg(long, default_value = "target/bench-data")]
    pub dir: PathBuf,
    /// Comma-separated: tsv, mmapplypolicy, gufi, pwalk, ne2scan, tree.
    #[arg(long, default_value = "tsv,mmapplypolicy,gufi")]
    pub formats: String,
    /// Comma-separated: blackhole, file.
    #[arg(long, default_value = "blackhole,file")]
    pub sinks: String,
    /// Worker threads (0 = one per core).
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
}

/// Primary, counting and aggregate pipelines over one read of a generated CSV snapshot
/// shaped like the seed's FS-small (8.46 M rows), to blackhole, compared with DuckDB
/// computing per-user and per-group counts, totals and quantiles on the same CSV.
#[derive(clap::Args, Debug)]
pub struct PipelinesArgs {
    #[arg(long, default_value_t = 8_456_326)]
    pub files: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, default_value = "target/bench-data")]
    pub dir: PathBuf,
    /// Sketch for the aggregate pipeline.
    #[arg(long, default_value = "ddsketch")]
    pub sketch: String,
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    /// Skip the DuckDB comparison.
    #[arg(long)]
    pub no_duckdb: bool,
    /// The deepest directory prefix counted and aggregated (`directory_max`, default 3).
    #[arg(long)]
    pub directory_max: Option<usize>,
    /// Instead: run over MPI ranks (`icicle-mpi` under `mpirun`), e.g. `1,2`.
    #[arg(long, value_delimiter = ',')]
    pub ranks: Vec<usize>,
}

/// The monitor's whole processing path in one process over a changelog text file:
/// parse → filter → reduce → directory tree → emit (stat stubbed) to a counting sink.
#[derive(clap::Args, Debug)]
pub struct MonitorArgs {
    /// `lustre` (changelog text) or `gpfs` (one mmwatch WF_JSON event a line).
    #[arg(long, default_value = "lustre")]
    pub format: String,
    /// The changelog text (`lfs changelog` lines) or the events (JSON lines).
    #[arg(long)]
    pub input: PathBuf,
    /// `FID<TAB>path` lines answering fid2path (as `lfs fid2path <fsname>` prints).
    #[arg(long)]
    pub fid_map: Option<PathBuf>,
    /// `stub`: metadata is synthesized instead of stat'ed.
    #[arg(long, default_value = "stub")]
    pub stat: String,
    /// Write every emitted operation, in order, as JSON lines.
    #[arg(long)]
    pub emit: Option<PathBuf>,
    #[arg(long, default_value_t = 1000)]
    pub batch_size: usize,
    /// GPFS: events dropped before parsing, as the source's `filter` (e.g. IN_ACCESS).
    #[arg(long, value_delimiter = ',')]
    pub filter: Vec<String>,
    /// GPFS: files the state keeps (`lru_capacity`; 0 = unbounded).
    #[arg(long, default_value_t = 0)]
    pub lru: usize,
}

/// The GPFS monitor through a real broker: the events are produced once into a topic with
/// PARTITIONS partitions, then `icicle monitor --drain` reads them with each consumer count.
#[derive(clap::Args, Debug)]
pub struct MonitorKafkaArgs {
    /// Events, one WF_JSON object a line (`icicle-testkit workload --gpfs-events`).
    #[arg(long)]
    pub input: PathBuf,
    #[arg(long)]
    pub bootstrap: String,
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
    /// Consumer counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub consumers: Vec<usize>,
    #[arg(long, default_value_t = 1000)]
    pub batch_size: usize,
}

/// End to end through the fake `lfs`: `icicle monitor --drain` with the directory tree
/// against the FSMonitor-style mode (fid2path for every record, small LRU).
#[derive(clap::Args, Debug)]
pub struct MonitorE2eArgs {
    /// A workload journal (`icicle-testkit workload`).
    #[arg(long)]
    pub journal: PathBuf,
    /// The workload's root directory.
    #[arg(long)]
    pub root: PathBuf,
    /// fid2path latency of the fake lfs (the seed measured about 10 ms).
    #[arg(long, default_value_t = 10)]
    pub delay_ms: u64,
    #[arg(long, default_value_t = 1000)]
    pub batch_size: usize,
    /// FSMonitor's cache size.
    #[arg(long, default_value_t = 1000)]
    pub cache: usize,
    /// Modes to run, the first compared with each other: `tree`, `fsmonitor`, `naive`
    /// (fid2path for every record, no cache), `tree-unreduced` (no batch reduction), `fsmonitor-unreduced` (neither tree nor reduction).
    #[arg(long, value_delimiter = ',', default_value = "tree,fsmonitor")]
    pub modes: Vec<String>,
}

/// One `icicle-bench snapshot-run` in a fresh process (so peak memory covers that run alone);
/// prints and returns its JSON line.
fn measured_run(
    format: &str,
    sink: &str,
    workers: usize,
    data: &Path,
    out: &Path,
    extra: &[&str],
) -> anyhow::Result<serde_json::Value> {
    let child = std::process::Command::new(std::env::current_exe()?)
        .args(["snapshot-run", "--format", format, "--sink", sink, "--workers", &workers.to_string()])
        .args(extra)
        .arg("--data")
        .arg(data)
        .arg("--out")
        .arg(out)
        .stderr(std::process::Stdio::inherit())
        .output()?;
    anyhow::ensure!(child.status.success(), "bench run {format} → {sink} {extra:?} failed");
    let text = String::from_utf8_lossy(&child.stdout).trim().to_string();
    println!("{text}");
    Ok(serde_json::from_str(&text)?)
}

/// The `icicle` binary beside this one (the monitor benchmarks run it as users do).
fn icicle_binary() -> anyhow::Result<PathBuf> {
    let p = std::env::current_exe()?.with_file_name("icicle");
    anyhow::ensure!(p.exists(), "{} not found: build the workspace binaries", p.display());
    Ok(p)
}

/// Peak resident set size of this process, in bytes (VmHWM).
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
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
        BenchCommand::Snapshot(a) => snapshot(a),
        BenchCommand::Pipelines(a) => pipelines(a),
        BenchCommand::Monitor(a) => monitor::monitor(a),
        BenchCommand::MonitorKafka(a) => monitor::monitor_kafka(a),
        BenchCommand::MonitorE2e(a) => monitor::monitor_e2e(a),
        BenchCommand::Index(a) => index::index(a),
        BenchCommand::SnapshotRun(a) => snapshot_run(a),
    }
}

/// `icicle-bench snapshot`.
fn snapshot(args: SnapshotArgs) -> anyhow::Result<ExitCode> {
    let SnapshotArgs { files, seed, dir, formats, sinks, workers } = args;
    std::fs::create_dir_all(&dir)?;
    let mut fs = None;
    let mut table = Vec::new();
    for f in formats.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let format: Format = f.parse().map_err(anyhow::Error::msg)?;
        let data = ensure_data(&dir, format, files, seed, &mut fs)?;
        for sink in sinks.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let out = dir.join(format!("out-{f}-{sink}"));
            let v = measured_run(f, sink, workers, &data, &out, &[])?;
            let num = |k: &str| v[k].as_f64().unwrap_or(0.0);
            table.push(format!(
                "| {f} | {sink} | {} | {:.2} | {:.0} | {:.0} | {:.0} |",
                num("rows"),
                num("seconds"),
                num("rows_per_s"),
                num("rows") / num("cpu_seconds").max(1e-9),
                num("peak_rss_bytes") / (1u64 << 20) as f64
            ));
        }
    }
    eprintln!(
        "\n| source | sink | rows | seconds | rows/s | rows/CPU-s | peak RSS MiB |\n|---|---|---|---|---|---|---|"
    );
    for l in table {
        eprintln!("{l}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `icicle-bench pipelines`.
fn pipelines(args: PipelinesArgs) -> anyhow::Result<ExitCode> {
    let PipelinesArgs { files, seed, dir, sketch, workers, no_duckdb, directory_max, ranks } = args;
    let depth = directory_max.map(|d| d.to_string());
    let depth_args: Vec<&str> = depth.as_deref().map(|d| vec!["--directory-max", d]).unwrap_or_default();
    std::fs::create_dir_all(&dir)?;
    let mut fs = None;
    let data = ensure_data(&dir, Format::Tsv, files, seed, &mut fs)?;
    drop(fs);
    if !ranks.is_empty() {
        ranks::run(&ranks, &data, &dir.join("out-ranks"), &sketch)?;
        return Ok(ExitCode::SUCCESS);
    }
    let out = dir.join("out-pipelines");
    let ours = measured_run(
        "tsv",
        "blackhole",
        workers,
        &data,
        &out,
        &[&["--all-pipelines", &sketch][..], &depth_args].concat(),
    )?;
    let our_secs = ours["seconds"].as_f64().unwrap_or(0.0);
    eprintln!(
        "icicle: {} rows, primary + counting + aggregate ({sketch}) in {:.2} s = {:.0} rows/s, {:.0} rows/CPU-s, peak RSS {} MiB, {} aggregate records",
        ours["rows"],
        our_secs,
        ours["rows_per_s"].as_f64().unwrap_or(0.0),
        ours["rows"].as_f64().unwrap_or(0.0) / ours["cpu_seconds"].as_f64().unwrap_or(1.0).max(1e-9),
        ours["peak_rss_bytes"].as_u64().unwrap_or(0) >> 20,
        ours["aggregate_records"]
    );
    if !no_duckdb {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/bench_duckdb.py");
        let py = std::process::Command::new("python3").arg(&script).arg(&data).output();
        match py {
            Ok(o) if o.status.success() => {
                let v: serde_json::Value = serde_json::from_slice(&o.stdout)?;
                let approx = v["approx_quantile_seconds"].as_f64().unwrap_or(0.0);
                let exact = v["quantile_cont_seconds"].as_f64().unwrap_or(0.0);
                println!("{v}");
                // The like-for-like run: aggregates only (no primary records, no counting).
                let agg = measured_run(
                    "tsv",
                    "blackhole",
                    workers,
                    &data,
                    &out,
                    &[&["--all-pipelines", &sketch, "--aggregate-only"][..], &depth_args].concat(),
                )?;
                let agg_secs = agg["seconds"].as_f64().unwrap_or(0.0);
                eprintln!(
                    "icicle aggregate only (users, groups and directory prefixes): {agg_secs:.2} s, peak RSS {} MiB",
                    agg["peak_rss_bytes"].as_u64().unwrap_or(0) >> 20
                );
                eprintln!(
                    "duckdb (users and groups only): approx_quantile {approx:.2} s, quantile_cont {exact:.2} s, peak RSS {} MiB; icicle aggregate-only is {:.2}x / {:.2}x faster, all three pipelines {:.2}x / {:.2}x",
                    v["peak_rss_bytes"].as_u64().unwrap_or(0) >> 20,
                    approx / agg_secs.max(1e-9),
                    exact / agg_secs.max(1e-9),
                    approx / our_secs.max(1e-9),
                    exact / our_secs.max(1e-9)
                );
            }
            Ok(o) => {
                eprintln!("duckdb comparison skipped (pip install duckdb):\n{}", String::from_utf8_lossy(&o.stderr))
            }
            Err(e) => eprintln!("duckdb comparison skipped: {e}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `icicle-bench snapshot-run`.
fn snapshot_run(args: SnapshotRunArgs) -> anyhow::Result<ExitCode> {
    let SnapshotRunArgs {
        format,
        sink,
        data,
        out,
        workers,
        all_pipelines,
        aggregate_only,
        keep_out,
        directory_max,
        source_option,
    } = args;
    let depth = directory_max.map(|d| format!("directory_max = {d}\n")).unwrap_or_default();
    let fmt: Format = format.parse().map_err(anyhow::Error::msg)?;
    let _ = std::fs::remove_dir_all(&out);
    let sink_toml = match sink.as_str() {
        "blackhole" => "type = \"blackhole\"".to_string(),
        "file" => format!("type = \"file\"\ndir = \"{}\"", out.display()),
        "index" => format!("type = \"index\"\ndir = \"{}\"\nmemory_mb = 256", out.display()),
        other => anyhow::bail!("unknown bench sink `{other}` (blackhole, file, index)"),
    };
    let extra = match &all_pipelines {
        Some(sketch) if aggregate_only => format!(
            "[aggregate]\nenabled = true\n{depth}dir_visible_to = [\"urn:globus:groups:id:admins\"]\n[aggregate.sketch]\ntype = \"{sketch}\"\n"
        ),
        Some(sketch) => format!(
            "[counting]\nenabled = true\n{depth}output = \"{}/counts.csv\"\n[aggregate]\nenabled = true\n{depth}dir_visible_to = [\"urn:globus:groups:id:admins\"]\n[aggregate.sketch]\ntype = \"{sketch}\"\n",
            out.display()
        ),
        None => String::new(),
    };
    let toml = format!(
        "[snapshot]\nprimary = {}\nworkers = {workers}\nversion = \"bench\"\n[records]\nprincipals = \"{}/principals.tsv\"\n{extra}[sources.s]\n{}\n{}\n[sinks.k]\n{sink_toml}\n",
        !aggregate_only,
        data.display(),
        source_toml(fmt, &data),
        source_option.join("\n")
    );
    let cfg = icicle_core::config::from_figment(Figment::from(Toml::string(&toml)))?;
    let job = icicle_runtime::compose::snapshot_job(&cfg, Arc::new(NoProgress))?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let t = Instant::now();
    let cpu0 = cpu_seconds();
    let summary = rt.block_on(icicle_runtime::snapshot::run(job))?;
    let secs = t.elapsed().as_secs_f64();
    let line = serde_json::json!({
        "bench": "snapshot", "format": format, "sink": sink, "rows": summary.rows, "records": summary.records,
        "rejects": summary.rejects, "seconds": secs, "rows_per_s": summary.rows as f64 / secs,
        "cpu_seconds": cpu_seconds() - cpu0, "bytes": summary.bytes, "peak_rss_bytes": peak_rss_bytes(),
        "aggregate_records": summary.aggregate_records, "pipelines": summary.pipelines,
    });
    println!("{line}");
    if !keep_out {
        let _ = std::fs::remove_dir_all(&out);
    }
    Ok(ExitCode::SUCCESS)
}

/// CPU time (user + system) used by this process so far.
pub fn cpu_seconds() -> f64 {
    // SAFETY: rusage is plain integers; all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the zeroed rusage we own.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("icicle-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
