//! `icicle-bench pipelines --ranks 1,2`: the three snapshot pipelines over MPI ranks
//! (`mpirun -np N icicle-mpi snapshot`, one worker thread per rank) on the same CSV snapshot:
//! rows per second and per CPU-second of each rank, the speed-up over one rank, peak RSS per
//! rank and the bytes the aggregate shuffle moved.

use std::path::Path;
use std::time::Instant;

/// Run the pipelines on each rank count of `ranks` over the icicle9 files of `data`.
pub fn run(ranks: &[usize], data: &Path, out: &Path, sketch: &str) -> anyhow::Result<()> {
    let bin = std::env::current_exe()?.with_file_name("icicle-mpi");
    anyhow::ensure!(bin.exists(), "{} not found: build the workspace binaries", bin.display());
    std::fs::create_dir_all(out)?;
    let cfg = out.join("ranks.toml");
    std::fs::write(
        &cfg,
        format!(
            "[snapshot]\nversion = \"bench\"\nrejects_file = \"{o}/rejects.jsonl\"\n[records]\nvisible_to = [\"owner\", \"group\"]\nprincipals = \"{d}/principals.tsv\"\n\
             [counting]\nenabled = true\noutput = \"{o}/counts.csv\"\n[aggregate]\nenabled = true\ndir_visible_to = [\"urn:globus:groups:id:admins\"]\n\
             [aggregate.sketch]\ntype = \"{sketch}\"\n[sources.s]\ntype = \"tsv\"\npaths = [\"{d}/*.csv\"]\npreset = \"icicle9\"\n[sinks.k]\ntype = \"blackhole\"\n",
            o = out.display(),
            d = data.display()
        ),
    )?;
    let mut base = None;
    for &np in ranks {
        let t = Instant::now();
        let child = std::process::Command::new("mpirun")
            .args(["--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", &np.to_string()])
            .arg(&bin)
            .args(["snapshot", "--json", "--no-progress", "-c"])
            .arg(&cfg)
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
            .stderr(std::process::Stdio::inherit())
            .output()?;
        let wall = t.elapsed().as_secs_f64();
        anyhow::ensure!(child.status.success(), "mpirun -np {np} icicle-mpi failed");
        let s: serde_json::Value = serde_json::from_slice(&child.stdout)?;
        let rows = s["rows"].as_f64().unwrap_or(0.0);
        let base_wall = *base.get_or_insert(wall);
        eprintln!(
            "{np} rank(s): {rows:.0} rows in {wall:.2} s wall (mpirun included) = {:.0} rows/s; speed-up {:.2}x; shuffled {} KiB",
            rows / wall,
            base_wall / wall,
            s["pipelines"]["aggregate"]["shuffled_bytes"].as_u64().unwrap_or(0) >> 10
        );
        for r in s["ranks"].as_array().into_iter().flatten() {
            let (rows, secs, cpu) = (
                r["rows"].as_f64().unwrap_or(0.0),
                r["seconds"].as_f64().unwrap_or(0.0),
                r["cpu_seconds"].as_f64().unwrap_or(0.0),
            );
            eprintln!(
                "  rank {}: {rows:.0} rows, {:.0} rows/s, {:.0} rows/CPU-s, peak RSS {} MiB, shuffled {} KiB",
                r["rank"],
                rows / secs.max(1e-9),
                rows / cpu.max(1e-9),
                r["peak_rss_bytes"].as_u64().unwrap_or(0) >> 20,
                r["shuffled_bytes"].as_u64().unwrap_or(0) >> 10
            );
        }
        println!("{}", serde_json::json!({"bench": "ranks", "ranks": np, "wall_seconds": wall, "summary": s}));
    }
    Ok(())
}
