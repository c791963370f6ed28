//! `icicle-mpi`: the snapshot pipelines of a configuration spread over MPI ranks
//! (`mpirun -np N icicle-mpi snapshot -c pipeline.toml`). Rank 0 plans and hands out splits as
//! ranks ask; every rank reads with one worker thread and delivers its primary records through
//! its own sinks (a file or index sink writes to `<dir>/rank-<R>/`); the aggregates are shuffled to the
//! rank owning each principal and the counts gathered on rank 0; rank 0 prints the summary of
//! all ranks. A rank that fails aborts the whole run.

mod summary;
mod transport;

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use mpi::traits::*;

use icicle_core::config::LoadedConfig;
use icicle_plugins_globus as _;
use icicle_plugins_index as _;
use icicle_plugins_kafka as _;
use icicle_plugins_s3 as _;
use icicle_plugins_sinks as _;
use icicle_plugins_sketches as _;
use icicle_plugins_snapshot as _;
use icicle_runtime::snapshot::{NoProgress, Progress};

use transport::MpiCluster;

#[derive(Parser)]
#[command(name = "icicle-mpi", version, about = "icicle's snapshot pipelines across MPI ranks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the snapshot pipelines of a configuration over every rank of the MPI job.
    Snapshot {
        /// Configuration files (later ones override earlier ones).
        #[arg(short, long, required = true)]
        config: Vec<std::path::PathBuf>,
        /// Override one configuration key (`key=value`, TOML value).
        #[arg(long)]
        set: Vec<String>,
        /// Print the summary of all ranks as JSON (rank 0).
        #[arg(long)]
        json: bool,
        /// No progress bar.
        #[arg(long)]
        no_progress: bool,
        /// Serve each rank's `/metrics` and `/status` at HOST:PORT+rank (port 0: any free port).
        #[arg(long)]
        metrics_addr: Option<String>,
    },
}

/// Rank 0's bar: started by the planner, advanced by the split queue as ranks finish splits
/// (the workers' own increments are ignored, so no rank is counted twice).
struct QueueDrivenProgress(Arc<dyn Progress>);

impl Progress for QueueDrivenProgress {
    fn start(&self, total: u64) {
        self.0.start(total)
    }
    fn inc(&self, _: u64) {}
    fn finish(&self) {
        self.0.finish()
    }
}

/// The per-rank overrides: a file or index sink's directory and the rejects file get the rank
/// (an index has one writer: each rank keeps its own); a
/// Globus sink's `max_requests_per_s` is shared equally by the `size` ranks.
fn rank_overrides(cfg: &LoadedConfig, rank: usize, size: usize) -> Vec<String> {
    let mut sets = Vec::new();
    if let Ok(sinks) = cfg.figment.extract_inner::<serde_json::Map<String, serde_json::Value>>("sinks") {
        for (id, sink) in sinks {
            if let (true, Some(rate)) = (sink["type"] == "globus", sink["max_requests_per_s"].as_f64()) {
                sets.push(format!(
                    "sinks.{id}.max_requests_per_s={}",
                    serde_json::Value::from(rate / size.max(1) as f64)
                ));
            }
            if sink["type"] == "file" || sink["type"] == "index" {
                if let Some(dir) = sink["dir"].as_str() {
                    let dir = std::path::Path::new(dir).join(format!("rank-{rank}"));
                    sets.push(format!("sinks.{id}.dir={}", serde_json::Value::from(dir.display().to_string())));
                }
            }
        }
    }
    let rejects = cfg.app.snapshot.rejects_file.clone().unwrap_or_else(|| "rejects.jsonl".into());
    sets.push(format!(
        "snapshot.rejects_file={}",
        serde_json::Value::from(format!("{}.rank-{rank}", rejects.display()))
    ));
    sets
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some((universe, threading)) = mpi::initialize_with_threading(mpi::Threading::Multiple) else {
        eprintln!("icicle-mpi: MPI could not be initialised");
        return ExitCode::from(1);
    };
    let world = universe.world();
    if threading < mpi::Threading::Multiple && world.size() > 1 {
        eprintln!("icicle-mpi: this MPI library does not provide MPI_THREAD_MULTIPLE (got {threading:?}), which rank 0's split queue needs");
        return ExitCode::from(1);
    }
    let rank = world.rank() as usize;
    match run(&cli, world) {
        Ok(code) => code,
        Err(e) => {
            say(&format!("icicle-mpi: rank {rank}: {e:#}"));
            universe.world().abort(2)
        }
    }
}

fn run(cli: &Cli, world: mpi::topology::SimpleCommunicator) -> anyhow::Result<ExitCode> {
    let Command::Snapshot { config, set, json, no_progress, metrics_addr } = &cli.command;
    let rank = world.rank() as usize;
    let base = icicle_core::config::load(config, set)?;
    let mut sets = set.clone();
    sets.extend(rank_overrides(&base, rank, world.size() as usize));
    let cfg = icicle_core::config::load(config, &sets)?;
    let level = if rank == 0 { cfg.app.log.level.clone() } else { "warn".to_string() };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new(level))
        .init();

    let bar: Arc<dyn Progress> = Arc::new(icicle_tui::TerminalProgress::new(rank == 0 && !no_progress && !json));
    let job_progress: Arc<dyn Progress> =
        if rank == 0 { Arc::new(QueueDrivenProgress(bar.clone())) } else { Arc::new(NoProgress) };
    let cluster = MpiCluster::new(world.duplicate(), bar);
    let mut job = icicle_runtime::compose::snapshot_job(&cfg, job_progress)?;
    job.cluster = Some(cluster.clone());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    if let Some(addr) = metrics_addr {
        let (host, port) =
            addr.rsplit_once(':').ok_or_else(|| anyhow::anyhow!("--metrics-addr {addr}: expected HOST:PORT"))?;
        let port: u16 = port.parse().map_err(|e| anyhow::anyhow!("--metrics-addr {addr}: {e}"))?;
        let port = if port == 0 {
            0
        } else {
            port.checked_add(rank as u16)
                .ok_or_else(|| anyhow::anyhow!("--metrics-addr {addr}: port + rank over 65535"))?
        };
        let bound = rt.block_on(icicle_core::metrics::serve(&format!("{host}:{port}")))?;
        say(&format!("icicle-mpi: rank {rank}: metrics on http://{bound}/metrics"));
    }
    let summary =
        rt.block_on(icicle_runtime::snapshot::run(job)).map_err(|e| anyhow::anyhow!("snapshot run failed: {e}"))?;
    let mut mine = serde_json::to_value(&summary)?;
    mine["peak_rss_bytes"] = serde_json::Value::from(summary::peak_rss_bytes());
    mine["cpu_seconds"] = serde_json::Value::from(summary::cpu_seconds());
    let gathered = icicle_runtime::snapshot::cluster::Cluster::gather(cluster.as_ref(), serde_json::to_vec(&mine)?)
        .map_err(anyhow::Error::msg)?;
    let Some(parts) = gathered else { return Ok(ExitCode::SUCCESS) };
    let ranks: Vec<serde_json::Value> = parts.iter().map(|p| serde_json::from_slice(p)).collect::<Result<_, _>>()?;
    let all = summary::combine(&ranks);
    if *json {
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        eprint!("{}", summary::table(&all));
    }
    Ok(if all["reject_threshold_exceeded"] == true { ExitCode::from(3) } else { ExitCode::SUCCESS })
}

/// Print one line on stderr with a single write, so that lines of other ranks and of
/// `mpirun` (which share the stream) never land inside it.
fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(format!("{line}\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rank_gets_its_directory_its_rejects_and_a_share_of_the_request_rate() {
        let dir = tempfile::tempdir().unwrap();
        let cfg_file = dir.path().join("p.toml");
        std::fs::write(
            &cfg_file,
            "[snapshot]\nrejects_file = \"r.jsonl\"\n[sources.s]\ntype = \"tsv\"\npaths = [\"x\"]\npreset = \"icicle9\"\n\
             [sinks.f]\ntype = \"file\"\ndir = \"out\"\n[sinks.g]\ntype = \"globus\"\nindex_id = \"00000000-0000-0000-0000-000000000000\"\n\
             token_env = \"T\"\nmax_requests_per_s = 10.0\n[sinks.h]\ntype = \"globus\"\nindex_id = \"00000000-0000-0000-0000-000000000000\"\ntoken_env = \"T\"\n\
             [sinks.i]\ntype = \"index\"\ndir = \"idx\"\n",
        )
        .unwrap();
        let cfg = icicle_core::config::load(&[cfg_file], &[]).unwrap();
        let mut sets = rank_overrides(&cfg, 3, 4);
        sets.sort();
        assert_eq!(
            sets,
            [
                "sinks.f.dir=\"out/rank-3\"",
                "sinks.g.max_requests_per_s=2.5",
                "sinks.i.dir=\"idx/rank-3\"",
                "snapshot.rejects_file=\"r.jsonl.rank-3\""
            ]
        );
    }
}
