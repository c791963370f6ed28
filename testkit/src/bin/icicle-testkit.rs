//! `icicle-testkit`: generators and emulators for tests, demos and benchmarks.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};
use icicle_testkit::globus;
use icicle_testkit::lustre::{fake_lfs, Kind, Workload};

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
    /// Perform a workload as real file operations under ROOT and journal the Lustre
    /// changelog records it would produce (continues an existing journal).
    Workload {
        /// eval_out, eval_perf, filebench or mixed.
        #[arg(long)]
        kind: Kind,
        #[arg(long)]
        ops: usize,
        #[arg(long)]
        root: PathBuf,
        #[arg(long)]
        journal: PathBuf,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Create this many files first, as objects that existed before monitoring.
        #[arg(long, default_value_t = 0)]
        preexisting: usize,
        /// The directory (inside ROOT) the workload works in.
        #[arg(long, default_value = "/work")]
        base: String,
        /// Only journal the records (no file operations): fast benchmark streams.
        #[arg(long)]
        no_fs: bool,
        /// Spread the namespace over this many MDTs (DNE): each MDT's changelog is
        /// JOURNAL.mdtN, read by the fake lfs as device ...-MDT000N.
        #[arg(long, default_value_t = 1)]
        mdts: u32,
        /// Also write the GPFS watch-folder (mmwatch WF_JSON) events, one per line, here
        /// (default with --gpfs-topic: JOURNAL.gpfs.jsonl).
        #[arg(long)]
        gpfs_events: Option<PathBuf>,
        /// The GPFS path of ROOT in the events (default: ROOT itself).
        #[arg(long)]
        gpfs_root: Option<String>,
        /// Whose record shapes the events take: scale-5.0, scale-5.2, cpfs, numbers (JSON
        /// numbers and epoch seconds, Icicle's synthetic shape) or mixed (each event from one of
        /// the three real producers, drawn at random).
        #[arg(long, default_value = "mixed")]
        gpfs_producer: String,
        /// Produce the new events into this Kafka topic (keyed by inode)...
        #[arg(long)]
        gpfs_topic: Option<String>,
        /// ...on this broker.
        #[arg(long, default_value = "127.0.0.1:9092")]
        bootstrap: String,
        /// Partitions of the topic when it is created.
        #[arg(long, default_value_t = 1)]
        partitions: i32,
    },
    /// A fake `lfs` answering from a workload journal: changelog, changelog_clear,
    /// fid2path (with a delay, default 10 ms) and path2fid.
    Lfs {
        #[arg(long)]
        journal: PathBuf,
        /// The mount point `fid2path <mount>` and `path2fid` refer to.
        #[arg(long)]
        mount: Option<PathBuf>,
        #[arg(long, default_value_t = 10)]
        delay_ms: u64,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// A fake `lfs getstripe -v PATH...` for files on a local disk: PRISM's emulated layouts
    /// (`--layouts` spec, else `ICICLE_EMULATED_LAYOUT`, else the default), printed as Lustre's
    /// `lfs` prints them.
    LfsFiles {
        #[arg(long)]
        layouts: Option<String>,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// A Globus Search emulator (HTTP/1.1): `icicle serve`'s Search API over an index
    /// directory per index, with the cloud's token endpoint, limits, index administration,
    /// queued tasks, a rate limit and injected failures in front. Prints
    /// `listening on http://ADDR` and runs until SIGTERM or SIGINT.
    GlobusSearch {
        /// Address to bind (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// An index id that exists (repeatable).
        #[arg(long = "index", required = true)]
        indexes: Vec<String>,
        /// A static bearer token accepted with full access (repeatable).
        #[arg(long = "token")]
        tokens: Vec<String>,
        /// Client id allowed to use client credentials at /v2/oauth2/token...
        #[arg(long, requires = "client_secret")]
        client_id: Option<String>,
        /// ...and its secret.
        #[arg(long, requires = "client_id")]
        client_secret: Option<String>,
        /// Requests per second on /v1 (token bucket); more get 429 with Retry-After.
        #[arg(long)]
        rate_limit: Option<f64>,
        /// Requests that may burst above the rate (default: one second's worth).
        #[arg(long)]
        burst: Option<f64>,
        /// Answer every Nth write request (ingest, deletes) with 503, unapplied.
        #[arg(long)]
        fail_every: Option<u64>,
        /// Let every Nth task end FAILED, unapplied.
        #[arg(long)]
        fail_task_every: Option<u64>,
        /// How long each task stays in PROGRESS before it is applied.
        #[arg(long, default_value_t = 0)]
        task_delay_ms: u64,
        /// `expires_in` of issued access tokens.
        #[arg(long, default_value_t = 172_800)]
        token_lifetime_secs: u64,
        /// Also write the bound address (host:port) to this file.
        #[arg(long)]
        addr_file: Option<PathBuf>,
        /// Where the indexes' directories are made (default: a temporary directory, removed
        /// when it stops on SIGTERM or SIGINT).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::GenSnapshot { files, seed, format, out, rows_per_file, rollup, truth } => {
            let fs = GenFs::generate(&GenSpec::new(files, seed));
            gen::write(&fs, format, &out, rows_per_file, rollup)?;
            if truth {
                write_truth(&fs, format, &out)?;
            }
            eprintln!(
                "wrote {} files in {} directories as {format:?} to {}",
                fs.files.len(),
                fs.dirs.len(),
                out.display()
            );
        }
        Command::Workload {
            kind,
            ops,
            root,
            journal,
            seed,
            preexisting,
            base,
            no_fs,
            mdts,
            gpfs_events,
            gpfs_root,
            gpfs_producer,
            gpfs_topic,
            bootstrap,
            partitions,
        } => {
            let mut w = Workload::open(&root, &journal, seed)?;
            w.real = !no_fs;
            w.set_mdts(mdts, seed)?;
            let events = gpfs_events
                .or_else(|| gpfs_topic.as_ref().map(|_| icicle_testkit::lustre::side(&journal, ".gpfs.jsonl")));
            let already =
                events.as_ref().map_or(0, |f| std::fs::read_to_string(f).map(|s| s.lines().count()).unwrap_or(0));
            if let Some(f) = &events {
                let abs = std::fs::canonicalize(&root)?;
                let fs_root = gpfs_root.unwrap_or_else(|| abs.display().to_string());
                let mut g = icicle_testkit::gpfs::GpfsJournal::open(f, &root, &fs_root, !no_fs)?;
                g.producers = match gpfs_producer.as_str() {
                    "mixed" => icicle_testkit::gpfs::Producer::REAL_SHAPES.to_vec(),
                    one => vec![one.parse().map_err(anyhow::Error::msg)?],
                };
                w.gpfs = Some(g);
            }
            if preexisting > 0 {
                w.preexisting(preexisting)?;
            }
            w.run(kind, ops, &base)?;
            w.write_fid_map()?;
            eprintln!("{kind:?}: {ops} operations, {} changelog records in {}", w.records, journal.display());
            if let (Some(f), Some(topic)) = (&events, &gpfs_topic) {
                produce_events(f, already, &bootstrap, topic, partitions)?;
            }
        }
        Command::GlobusSearch {
            listen,
            indexes,
            tokens,
            client_id,
            client_secret,
            rate_limit,
            burst,
            fail_every,
            fail_task_every,
            task_delay_ms,
            token_lifetime_secs,
            addr_file,
            dir,
        } => {
            let opts = globus::Options {
                indexes,
                tokens,
                client: client_id.zip(client_secret),
                rate_limit,
                burst,
                fail_every,
                fail_task_every,
                refuse_subjects: Vec::new(),
                fail_task_subjects: Vec::new(),
                task_delay: std::time::Duration::from_millis(task_delay_ms),
                token_lifetime: std::time::Duration::from_secs(token_lifetime_secs),
                dir,
            };
            globus_search(&listen, opts, addr_file.as_deref())?;
        }
        Command::LfsFiles { layouts, args } => {
            use icicle_plugins_prism::layout::{EmulatedLayouts, EMULATED_LAYOUT_ENV};
            let spec = layouts.or_else(|| std::env::var(EMULATED_LAYOUT_ENV).ok());
            let layouts = match spec {
                Some(s) => EmulatedLayouts::parse(&s).map_err(|e| anyhow::anyhow!("--layouts {s:?}: {e}"))?,
                None => EmulatedLayouts::default(),
            };
            let (code, out, err) = icicle_testkit::lustre::files_lfs(&layouts, &args);
            use std::io::Write;
            let _ = std::io::stdout().write_all(&out);
            let _ = std::io::stderr().write_all(err.as_bytes());
            std::process::exit(code);
        }
        Command::Lfs { journal, mount, delay_ms, args } => {
            let (code, out, err) = fake_lfs(&journal, mount.as_deref(), delay_ms, &args);
            use std::io::Write;
            let _ = std::io::stdout().write_all(&out);
            let _ = std::io::stderr().write_all(err.as_bytes());
            std::process::exit(code);
        }
    }
    Ok(())
}

/// Write the ground truth of `fs` to `out/truth.jsonl`, one record a line.
fn write_truth(fs: &GenFs, format: Format, out: &Path) -> anyhow::Result<()> {
    let mut s = String::new();
    for mut r in fs.records() {
        // Formats without inodes (icicle9 text; real files get the disk's).
        if !format.has_inode() {
            r.attrs.inode = 0;
        }
        s.push_str(&serde_json::to_string(&r)?);
        s.push('\n');
    }
    std::fs::write(out.join("truth.jsonl"), s)?;
    Ok(())
}

/// Produce the watch-folder events of `events` after its first `already` lines into `topic`
/// (created with `partitions` partitions) on the broker at `bootstrap`.
fn produce_events(events: &Path, already: usize, bootstrap: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let msgs = icicle_testkit::gpfs::messages(events, already)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let n = rt.block_on(async {
        icicle_plugins_kafka::produce::create_topic(bootstrap, topic, partitions).await.map_err(anyhow::Error::msg)?;
        icicle_plugins_kafka::produce::produce(bootstrap, topic, msgs).await.map_err(anyhow::Error::msg)
    })?;
    eprintln!("produced {n} watch-folder events to `{topic}` on {bootstrap}");
    Ok(())
}

/// Serve the Globus Search emulator on `listen` until SIGINT or SIGTERM, after printing the
/// bound address (and writing it to `addr_file`).
fn globus_search(listen: &str, opts: globus::Options, addr_file: Option<&Path>) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| anyhow::anyhow!("--listen {listen}: {e}"))?;
        let addr = listener.local_addr()?;
        if let Some(f) = addr_file {
            // Written whole, then renamed: a reader never sees half an address.
            icicle_core::durable::write_atomic(f, format!("{addr}\n").as_bytes())?;
        }
        {
            use std::io::Write;
            let mut out = std::io::stdout();
            writeln!(out, "listening on http://{addr}")?;
            out.flush()?;
        }
        let stop = async {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
            }
        };
        globus::serve(listener, opts, stop).await?;
        anyhow::Ok(())
    })
}
