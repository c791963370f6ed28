//! `swiftload-bench`: generate a dataset with emulated layouts and its catalog, then run
//! `swiftload` under `mpirun` with the object and the file policy, on the bare local disk and
//! under the OST contention emulator; print throughput, the object/file ratio and peak
//! memory (a table on stderr, one JSON line on stdout).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use clap::Parser;
use icicle_plugins_prism::dataset::{write_cifar_like_dataset, write_dataset, write_duplicated_dataset, DatasetSpec};
use icicle_plugins_prism::layout::{parse_size, EmulatedLayouts};

/// Benchmark swiftload's object scheduler against file-level scheduling.
#[derive(Parser, Debug)]
#[command(name = "swiftload-bench", version, about)]
struct Args {
    /// MPI processes.
    #[arg(long, default_value_t = 8)]
    np: usize,
    /// Files in the dataset.
    #[arg(long, default_value_t = 128)]
    files: usize,
    /// Smallest file (e.g. 1M).
    #[arg(long, default_value = "1M")]
    min_size: String,
    /// Largest file (e.g. 8M).
    #[arg(long, default_value = "8M")]
    max_size: String,
    /// Emulated layout spec (see ICICLE_EMULATED_LAYOUT).
    #[arg(long, default_value = "pool=113,167,204,231;stripe_size=1M;count=1")]
    layout: String,
    /// Emulated speed of one OST, MB/s.
    #[arg(long, default_value_t = 200.0)]
    ost_mb_s: f64,
    /// Emulated speed of one reading process, MB/s.
    #[arg(long, default_value_t = 100.0)]
    proc_mb_s: f64,
    /// The loader's global cap on processes per OST.
    #[arg(long, default_value_t = 8)]
    cap: u32,
    /// What swiftload does: `read` (checksums), `dedup` (a dataset with repeated blocks) or
    /// `augment` (CIFAR-10-format batches of --min-size bytes each).
    #[arg(long, default_value = "read")]
    app: String,
    /// Work directory (default: a fresh temporary one, removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn swiftload() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let p = exe.with_file_name("swiftload");
    if !p.is_file() {
        bail!("{} not found: build it (cargo build -p icicle-prism-mpi)", p.display());
    }
    Ok(p)
}

fn run(np: usize, args: &[&str]) -> anyhow::Result<serde_json::Value> {
    let out = Command::new("mpirun")
        .args(["--oversubscribe", "--bind-to", "none", "-np", &np.to_string()])
        .arg(swiftload()?)
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .output()
        .context("running mpirun (install openmpi-bin)")?;
    if !out.status.success() {
        bail!("swiftload {args:?}: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).context("no JSON summary")?;
    Ok(serde_json::from_str(line)?)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tmp;
    let dir: &Path = match &args.dir {
        Some(d) => d,
        None => {
            tmp = tempdir()?;
            &tmp.0
        }
    };
    let layouts = EmulatedLayouts::parse(&args.layout).map_err(anyhow::Error::msg)?;
    let spec = DatasetSpec {
        files: args.files,
        min_size: parse_size(&args.min_size).map_err(anyhow::Error::msg)?,
        max_size: parse_size(&args.max_size).map_err(anyhow::Error::msg)?,
        seed: 20250325,
        layouts,
    };
    let data = dir.join("data");
    let catalog = dir.join("catalog");
    let cat_file = catalog.join("catalog.bench.0.txt");
    let ds = match args.app.as_str() {
        "read" => write_dataset(&data, &cat_file, &spec)?,
        "dedup" => write_duplicated_dataset(&data, &cat_file, &spec, 64)?,
        "augment" => write_cifar_like_dataset(&data, &cat_file, &spec)?,
        other => bail!("--app {other}: known: read, dedup, augment"),
    };
    let out_dir = dir.join("augmented");
    let o = out_dir.to_string_lossy();
    let loader = dir.join("loader.toml");
    std::fs::write(
        &loader,
        format!(
            "[loader]\nper_process_mb_s = {}\nmax_processes_per_ost = {}\ndefault_ost_mb_s = {}\n",
            args.proc_mb_s, args.cap, args.ost_mb_s
        ),
    )?;
    let (c, d, l) = (catalog.to_string_lossy(), data.to_string_lossy(), loader.to_string_lossy());
    let mut rows = Vec::new();
    for emulate in [false, true] {
        for policy in ["object", "file"] {
            let mut a =
                vec!["--app", &args.app, "--catalog", &c, "--input-dir", &d, "--policy", policy, "--loader-config", &l];
            if args.app == "augment" {
                a.extend(["--output-dir", &o]);
            }
            if emulate {
                a.extend(["--emulate", &l]);
            }
            let v = run(args.np, &a)?;
            if args.app == "read" && (v["crc32"] != format!("{:08x}", ds.crc32) || v["bytes"] != ds.bytes) {
                bail!(
                    "{policy}: read {} bytes crc {}, expected {} crc {:08x}",
                    v["bytes"],
                    v["crc32"],
                    ds.bytes,
                    ds.crc32
                );
            }
            rows.push((policy, emulate, v));
        }
    }
    eprintln!(
        "{} files, {:.1} MB, {} processes; emulated OST {} MB/s, process {} MB/s",
        args.files,
        ds.bytes as f64 / 1e6,
        args.np,
        args.ost_mb_s,
        args.proc_mb_s
    );
    eprintln!(
        "{:<8} {:<9} {:>9} {:>10} {:>12} {:>13} {:>14}",
        "policy", "emulated", "seconds", "MB/s", "max procs/OST", "model seconds", "peak RSS KiB"
    );
    for (p, e, v) in &rows {
        eprintln!(
            "{:<8} {:<9} {:>9.3} {:>10.1} {:>12} {:>13} {:>14}",
            p,
            e,
            v["seconds"].as_f64().unwrap_or(0.0),
            v["mb_s"].as_f64().unwrap_or(0.0),
            v["max_processes_on_an_ost"],
            v["model_seconds"].as_f64().map_or("-".into(), |s| format!("{s:.3}")),
            v["peak_rss_kib_max"]
        );
    }
    if let Some(schemes) = rows[0].2["schemes"].as_array() {
        let ratios: Vec<String> = schemes
            .iter()
            .map(|s| format!("{} {:.2}x", s["chunking"].as_str().unwrap_or("?"), s["ratio"].as_f64().unwrap_or(0.0)))
            .collect();
        eprintln!("dedup ratios: {}", ratios.join(", "));
    }
    eprintln!("catalog load {:.3} s", rows[0].2["catalog_load_seconds"].as_f64().unwrap_or(0.0));
    let secs = |policy: &str, emulated: bool| {
        rows.iter()
            .find(|(p, e, _)| *p == policy && *e == emulated)
            .and_then(|(_, _, v)| v["seconds"].as_f64())
            .unwrap_or(0.0)
    };
    let model = |policy: &str| {
        rows.iter()
            .find(|(p, e, _)| *p == policy && *e)
            .and_then(|(_, _, v)| v["model_seconds"].as_f64())
            .unwrap_or(0.0)
    };
    let ratio = secs("file", true) / secs("object", true).max(1e-9);
    let model_ratio = model("file") / model("object").max(1e-9);
    eprintln!("emulated file/object time ratio {ratio:.2} (model {model_ratio:.2})");
    let summary = serde_json::json!({
        "files": args.files, "bytes": ds.bytes, "np": args.np,
        "raw_mb_s": {"object": rows[0].2["mb_s"], "file": rows[1].2["mb_s"]},
        "emulated_mb_s": {"object": rows[2].2["mb_s"], "file": rows[3].2["mb_s"]},
        "emulated_ratio": ratio, "model_ratio": model_ratio,
        "peak_rss_kib_max": rows.iter().map(|(_, _, v)| v["peak_rss_kib_max"].as_u64().unwrap_or(0)).max(),
    });
    println!("{summary}");
    Ok(())
}

/// A temporary directory removed on drop (no extra dependency for one directory).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir() -> anyhow::Result<TempDir> {
    let p = std::env::temp_dir().join(format!("swiftload-bench-{}", std::process::id()));
    std::fs::create_dir_all(&p)?;
    Ok(TempDir(p))
}
