//! `swiftload`: read the files of a SwiftLoad catalog with MPI I/O processes bound to OSTs.
//!
//! ```text
//! mpirun -np N swiftload --catalog DIR --input-dir D [--loader-config F] [--policy PLACEMENT]
//!                        [--emulate F] [--profile-out F]
//! ```
//!
//! Rank 0 reads the catalog (`--catalog`, else `SWIFTLOAD_CATALOG_DIR`), keeps the regular
//! files under `--input-dir`, builds per-OST task queues and assigns them to ranks with the
//! chosen policy (the object scheduler capped by the loader configuration, or whole files
//! round-robin). Every rank `pread`s its chunks and CRC-32s them; rank 0 gathers the chunk
//! checksums, checks every byte of every file was read exactly once, combines them into the
//! CRC-32 of all files concatenated in path order, and prints one JSON line.
//!
//! `--emulate F` (a `[loader]` TOML of OST and per-process speeds) makes each chunk also
//! wait as long as the OST contention model says (a clock per OST shared by all ranks):
//! all OSTs are one local disk here. `--profile-out F` measures per-OST aggregate speed
//! (all ranks on one OST at a time) and one rank's speed, and writes a loader configuration.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Parser;
use icicle_core::traits::{ObjectLayout, ObjectTask, Placement};
use icicle_plugins_prism::contention::{self, OstClock, Throttle};
use icicle_plugins_prism::scheduler::{OstIndex, PlanStats};
use icicle_plugins_prism::{catalog, tasks, Loader, LoaderConfig};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

mod augment;
mod dedup;

use icicle_mpi_comm::{broadcast_bytes, gather_words};

/// Read a catalog's files with I/O processes bound to OSTs.
#[derive(Parser, Debug)]
#[command(name = "swiftload", version, about)]
struct Args {
    /// Catalog directory (per-process catalog files); default `$SWIFTLOAD_CATALOG_DIR`.
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Only files under this directory are read.
    #[arg(long, alias = "input_dir")]
    input_dir: PathBuf,
    /// Loader configuration (a `[loader]` TOML): caps processes per OST (object policy).
    #[arg(long, alias = "loader_config")]
    loader_config: Option<PathBuf>,
    /// A registered placement policy (`icicle plugins`): `object` (processes bound to OSTs,
    /// capped by the loader) or `file` (whole files round-robin).
    #[arg(long, default_value = "object")]
    policy: String,
    /// Emulate OST contention with the speeds of this `[loader]` TOML.
    #[arg(long)]
    emulate: Option<PathBuf>,
    /// Directory for the emulator's shared clock file (default: the system temp dir).
    #[arg(long)]
    clock_dir: Option<PathBuf>,
    /// Profile the OSTs and write a loader configuration here, then exit.
    #[arg(long)]
    profile_out: Option<PathBuf>,
    /// Bytes per OST read when profiling.
    #[arg(long, default_value_t = 8 << 20)]
    profile_bytes: u64,
    /// The cap written into a profiled loader configuration.
    #[arg(long, default_value_t = 8)]
    profile_cap: u32,
    /// What to do with the data: `read` (checksum every byte), `dedup` (count duplicate
    /// chunks) or `augment` (write augmented CIFAR-10 batches to --output-dir).
    #[arg(long, value_enum, default_value = "read")]
    app: App,
    /// dedup: chunkings, e.g. `fixed:4K,fixed:64K,cdc:8K` (the default).
    #[arg(long, value_delimiter = ',')]
    chunking: Vec<String>,
    /// augment: the seed of the random transforms.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// augment: where the augmented batches are written (same names as the inputs).
    #[arg(long)]
    output_dir: Option<PathBuf>,
    /// Skip the stat of every file that checks its size against the catalog's (a file that
    /// changed since is then read as catalogued, and a short one fails the run).
    #[arg(long)]
    trust_catalog: bool,
    /// Also time a walk of --input-dir with lstat and stat of every entry (rank 0), to
    /// compare with the catalog's load time.
    #[arg(long)]
    compare_walk: bool,
}

/// What swiftload does with the bytes it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum App {
    /// Checksum every byte and check each was read exactly once.
    Read,
    /// The deduplication profiler.
    Dedup,
    /// The CIFAR-10 data augmentation tool.
    Augment,
}

/// What rank 0 sends every rank: the files and each rank's tasks.
struct Plan {
    paths: Vec<String>,
    sizes: Vec<u64>,
    per_rank: Vec<Vec<ObjectTask>>,
    rejects: usize,
    clock: Option<PathBuf>,
}

const TASK_WORDS: usize = 6;

impl Plan {
    /// Flatten to bytes: a JSON header (paths, sizes, counts) then the tasks as u64 words.
    fn encode(&self) -> Vec<u8> {
        let header = serde_json::json!({
            "paths": self.paths,
            "sizes": self.sizes,
            "counts": self.per_rank.iter().map(Vec::len).collect::<Vec<_>>(),
            "rejects": self.rejects,
            "clock": self.clock,
        })
        .to_string();
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        for t in self.per_rank.iter().flatten() {
            for w in [t.object as u64, u64::from(t.ost), t.start, t.end, t.interval, t.stripe_size] {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
        out
    }

    fn decode(b: &[u8]) -> anyhow::Result<Plan> {
        let n = u64::from_le_bytes(b.get(..8).context("short plan")?.try_into()?) as usize;
        let header: serde_json::Value = serde_json::from_slice(b.get(8..8 + n).context("short plan")?)?;
        let paths: Vec<String> = serde_json::from_value(header["paths"].clone())?;
        let sizes: Vec<u64> = serde_json::from_value(header["sizes"].clone())?;
        let counts: Vec<usize> = serde_json::from_value(header["counts"].clone())?;
        let rejects = header["rejects"].as_u64().unwrap_or(0) as usize;
        let clock: Option<PathBuf> = serde_json::from_value(header["clock"].clone())?;
        let mut words = b[8 + n..].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
        let mut per_rank = Vec::with_capacity(counts.len());
        for c in counts {
            let mut v = Vec::with_capacity(c);
            for _ in 0..c {
                let mut w = [0u64; TASK_WORDS];
                for x in &mut w {
                    *x = words.next().context("short plan")?;
                }
                v.push(ObjectTask {
                    object: w[0] as usize,
                    ost: w[1] as u32,
                    start: w[2],
                    end: w[3],
                    interval: w[4],
                    stripe_size: w[5],
                });
            }
            per_rank.push(v);
        }
        Ok(Plan { paths, sizes, per_rank, rejects, clock })
    }
}

/// The files (paths, sizes) and tasks of the catalog under `input_dir`, and the rejected entries.
type Loaded = (Vec<String>, Vec<u64>, Vec<ObjectTask>, Vec<ObjectLayout>, usize);

/// Read the catalog (text or compact files, [`catalog::load_dir`]) and keep the regular files
/// under `input_dir`; unless `trust` is set, each one's size on disk is checked against the
/// catalog's (a stat per file). Adds `catalog_load_seconds` and `size_check_seconds` to `timing`.
fn load(
    catalog_dir: &Path,
    input_dir: &Path,
    trust: bool,
    timing: &mut serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<Loaded> {
    let t0 = std::time::Instant::now();
    let cat =
        catalog::load_dir(catalog_dir).with_context(|| format!("reading the catalog in {}", catalog_dir.display()))?;
    timing.insert("catalog_load_seconds".into(), t0.elapsed().as_secs_f64().into());
    let mut rejects = cat.rejects.len();
    for r in &cat.rejects {
        tracing::warn!("{r}");
    }
    let root = std::fs::canonicalize(input_dir).unwrap_or_else(|_| input_dir.to_path_buf());
    let (mut paths, mut sizes, mut all, mut layouts) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut checking = std::time::Duration::ZERO;
    for e in cat.iter() {
        let path = Path::new(e.path());
        if !path.starts_with(&root) && !path.starts_with(input_dir) {
            continue;
        }
        if !e.stat_or_lstat().is_regular() {
            continue;
        }
        let Some(layout) = e.object_layout() else { continue };
        // A file whose size changed since it was catalogued: its layout no longer tiles it.
        if !trust {
            let t = std::time::Instant::now();
            let on_disk = std::fs::metadata(path);
            checking += t.elapsed();
            match on_disk {
                Ok(m) if m.len() == e.size() => {}
                Ok(m) => {
                    tracing::warn!("{}: the catalog says {} bytes, the file has {}", e.path(), e.size(), m.len());
                    rejects += 1;
                    continue;
                }
                Err(err) => {
                    tracing::warn!("{}: {err}", e.path());
                    rejects += 1;
                    continue;
                }
            }
        }
        // The tasks come from the validated layout (clamped to the size), never the raw lines.
        let i = paths.len();
        match tasks::tasks_of(i, &layout) {
            Ok(t) => all.extend(t),
            Err(err) => {
                tracing::warn!("{}: {err}", catalog_dir.display());
                rejects += 1;
                continue;
            }
        }
        paths.push(e.path().to_string());
        sizes.push(e.size());
        layouts.push(layout);
    }
    timing.insert("size_check_seconds".into(), checking.as_secs_f64().into());
    Ok((paths, sizes, all, layouts, rejects))
}

/// The registered placement policy `policy`, given the loader configuration if there is one.
fn placement(policy: &str, loader: Option<&Path>) -> anyhow::Result<std::sync::Arc<dyn Placement>> {
    let mut section = toml::Table::new();
    section.insert("type".into(), toml::Value::String(policy.to_string()));
    if let Some(l) = loader {
        section.insert("loader_file".into(), toml::Value::String(l.to_string_lossy().into_owned()));
    }
    let mut doc = toml::Table::new();
    doc.insert("placement".into(), toml::Value::Table(section));
    let figment = figment::Figment::from(figment::providers::Serialized::defaults(doc));
    icicle_core::registry::placement_at(&figment, "placement").map_err(|e| anyhow::anyhow!("--policy {policy}: {e}"))
}

fn read_loader(path: &Path) -> anyhow::Result<Loader> {
    Ok(LoaderConfig::from_file(path)?.check(path)?)
}

/// What one rank read: per chunk `[object, offset, len, crc]`, and its counters.
struct Read {
    chunks: Vec<u64>,
    bytes: u64,
    errors: u64,
}

fn read_tasks(plan: &Plan, mine: &[ObjectTask], throttle: Option<&Throttle>) -> Read {
    let mut files: HashMap<usize, std::fs::File> = HashMap::new();
    let mut buf = Vec::new();
    let mut out = Read { chunks: Vec::new(), bytes: 0, errors: 0 };
    for t in mine {
        for (off, len) in tasks::chunks(t) {
            let f = match files.entry(t.object) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => match std::fs::File::open(&plan.paths[t.object]) {
                    Ok(f) => v.insert(f),
                    Err(e) => {
                        tracing::error!("{}: {e}", plan.paths[t.object]);
                        out.errors += 1;
                        continue;
                    }
                },
            };
            let deadline = throttle.map(|th| th.reserve(t.ost, len));
            buf.resize(len as usize, 0);
            match f.read_exact_at(&mut buf, off) {
                Ok(()) => {
                    out.chunks.extend([t.object as u64, off, len, u64::from(crc32fast::hash(&buf))]);
                    out.bytes += len;
                }
                Err(e) => {
                    tracing::error!("{} at {off}+{len}: {e}", plan.paths[t.object]);
                    out.errors += 1;
                }
            }
            if let Some(d) = deadline {
                contention::sleep_until(d);
            }
        }
    }
    out
}

/// Check the gathered chunks tile every file exactly once and combine their CRCs (files in
/// path order). Returns (exactly_once, crc32, problems).
fn verify(plan: &Plan, gathered: &[Vec<u64>]) -> (bool, u32, Vec<String>) {
    let mut per_file: Vec<Vec<(u64, u64, u32)>> = vec![Vec::new(); plan.paths.len()];
    for words in gathered {
        for c in words.chunks_exact(4) {
            if let Some(v) = per_file.get_mut(c[0] as usize) {
                v.push((c[1], c[2], c[3] as u32));
            }
        }
    }
    let mut problems = Vec::new();
    let mut order: Vec<usize> = (0..plan.paths.len()).collect();
    order.sort_by(|&a, &b| plan.paths[a].cmp(&plan.paths[b]));
    let mut total = crc32fast::Hasher::new();
    for i in order {
        let v = &mut per_file[i];
        v.sort_unstable();
        let mut at = 0u64;
        for &(off, len, crc) in v.iter() {
            if off != at {
                problems.push(format!(
                    "{}: byte {at} {}",
                    plan.paths[i],
                    if off > at { "never read" } else { "read twice" }
                ));
                break;
            }
            total.combine(&crc32fast::Hasher::new_with_initial_len(crc, len));
            at = off + len;
        }
        if at != plan.sizes[i] && problems.last().is_none_or(|p| !p.starts_with(&plan.paths[i])) {
            problems.push(format!("{}: read {at} of {} bytes", plan.paths[i], plan.sizes[i]));
        }
    }
    (problems.is_empty(), total.finalize(), problems)
}

fn peak_rss_kib() -> u64 {
    // SAFETY: rusage is plain integers; all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the zeroed rusage we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss.max(0) as u64
}

/// Run swiftload with the process's arguments (the `swiftload` and `swiftload_tool` binaries).
pub fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .init();
    let args = Args::parse();
    let Some(universe) = mpi::initialize() else {
        eprintln!("swiftload: MPI could not be initialised");
        return std::process::ExitCode::from(1);
    };
    let world = universe.world();
    match run(&world, &args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            if world.rank() == 0 {
                eprintln!("swiftload: {e:#}");
            }
            std::process::ExitCode::from(1)
        }
    }
}

/// What only rank 0 knows after planning.
struct RootInfo {
    stats: PlanStats,
    loader: Option<Loader>,
    /// `catalog_load_seconds`, `plan_seconds` and (with --compare-walk) `walk_stat_seconds`.
    metadata: serde_json::Map<String, serde_json::Value>,
}

fn run(world: &SimpleCommunicator, args: &Args) -> anyhow::Result<()> {
    let rank = world.rank();
    let size = world.size() as usize;
    // Rank 0 plans; a failure there is broadcast so every rank stops.
    let mut root = None;
    let encoded = if rank == 0 {
        match plan_on_root(args, size) {
            Ok((plan, info)) => {
                root = Some(info);
                let mut b = vec![1u8];
                b.extend(plan.encode());
                b
            }
            Err(e) => {
                let mut b = vec![0u8];
                b.extend(format!("{e:#}").into_bytes());
                b
            }
        }
    } else {
        Vec::new()
    };
    let encoded = broadcast_bytes(world, encoded)?;
    if encoded.first() != Some(&1) {
        bail!("{}", String::from_utf8_lossy(encoded.get(1..).unwrap_or_default()));
    }
    let plan = Plan::decode(&encoded[1..])?;
    let all: Vec<ObjectTask> = plan.per_rank.iter().flatten().copied().collect();
    let index = OstIndex::of(&all);
    // Opened on every rank: one that fails must not leave the others in the app's collectives.
    let opened = (|| -> anyhow::Result<_> {
        let model = match &args.emulate {
            Some(f) => Some(read_loader(f)?),
            None => None,
        };
        let throttle = match (&model, &plan.clock) {
            (Some(m), Some(clock)) => {
                Some(Throttle::new(OstClock::open(clock, index.len())?, index.clone(), m.clone()))
            }
            _ => None,
        };
        Ok((model, throttle))
    })();
    if let Err(e) = &opened {
        eprintln!("swiftload: rank {rank}: {e:#}");
    }
    let failed = icicle_mpi_comm::refusals(world, opened.is_ok());
    let (model, throttle) = match opened {
        Ok(o) if failed == 0 => o,
        _ => bail!("{failed} rank(s) could not open the emulation's loader model or OST clock (each printed why)"),
    };
    if let Some(out) = &args.profile_out {
        return profile(world, &plan, &index, throttle.as_ref(), args, out);
    }
    let mine = plan.per_rank.get(rank as usize).cloned().unwrap_or_default();
    let outcome = match args.app {
        App::Read => read_app(world, &plan, &mine, throttle.as_ref()),
        App::Dedup => dedup::schemes(&args.chunking)
            .and_then(|schemes| dedup::run(world, &plan.paths, &plan.sizes, &mine, &schemes, throttle.as_ref()))
            .map(|v| v.map(|v| (v, Ok(())))),
        App::Augment => augment::run(
            world,
            &plan.paths,
            &plan.sizes,
            &mine,
            args.seed,
            args.output_dir.as_deref(),
            throttle.as_ref(),
        )
        .map(|v| v.map(|v| (v, Ok(())))),
    };
    let rss = gather_words(world, &[peak_rss_kib()])?;
    if let Some(clock) = &plan.clock {
        world.barrier();
        if rank == 0 {
            let _ = std::fs::remove_file(clock);
        }
    }
    let Some((app_summary, verdict)) = outcome? else { return Ok(()) };
    let info = root.context("no plan on rank 0")?;
    let (stats, loader) = (&info.stats, &info.loader);
    let caps: Option<BTreeMap<String, u32>> =
        loader.as_ref().map(|l| stats.per_ost_processes.keys().map(|&o| (o.to_string(), l.max_processes(o))).collect());
    let model_seconds = model.as_ref().map(|m| contention::simulate(&plan.per_rank, m).seconds);
    let mut summary = serde_json::json!({
        "app": format!("{:?}", args.app).to_lowercase(),
        "policy": args.policy,
        "ranks": size,
        "files": plan.paths.len(),
        "rejects": plan.rejects,
        "per_ost_processes": stats.per_ost_processes.iter().map(|(o, n)| (o.to_string(), n)).collect::<BTreeMap<_, _>>(),
        "max_processes_on_an_ost": stats.max_processes_on_an_ost,
        "caps": caps,
        "over_cap": loader.as_ref().map(|l| contention::over_limits(&plan.per_rank, l).len()),
        "emulated": throttle.is_some(),
        "model_seconds": model_seconds,
        "peak_rss_kib_max": rss.iter().filter_map(|c| c.first()).max().copied().unwrap_or(0),
    });
    if let (Some(obj), serde_json::Value::Object(extra)) = (summary.as_object_mut(), app_summary) {
        obj.extend(info.metadata);
        obj.extend(extra);
    }
    println!("{summary}");
    verdict
}

/// `--app read`: every byte read and checksummed; on rank 0 the summary's part and whether
/// every byte was read exactly once without error.
fn read_app(
    world: &SimpleCommunicator,
    plan: &Plan,
    mine: &[ObjectTask],
    throttle: Option<&Throttle>,
) -> anyhow::Result<Option<(serde_json::Value, anyhow::Result<()>)>> {
    world.barrier();
    let t0 = mpi::time();
    let read = read_tasks(plan, mine, throttle);
    world.barrier();
    let seconds = mpi::time() - t0;
    let gathered = gather_words(world, &read.chunks)?;
    let counters = gather_words(world, &[read.bytes, read.errors])?;
    if world.rank() != 0 {
        return Ok(None);
    }
    let (exactly_once, crc, problems) = verify(plan, &gathered);
    for p in problems.iter().take(10) {
        tracing::error!("{p}");
    }
    let bytes: u64 = counters.iter().map(|c| c[0]).sum();
    let errors: u64 = counters.iter().map(|c| c[1]).sum();
    let part = serde_json::json!({
        "bytes": bytes,
        "seconds": seconds,
        "mb_s": if seconds > 0.0 { bytes as f64 / 1e6 / seconds } else { 0.0 },
        "per_rank_bytes": counters.iter().map(|c| c[0]).collect::<Vec<_>>(),
        "exactly_once": exactly_once,
        "crc32": format!("{crc:08x}"),
        "errors": errors,
    });
    let verdict = if !exactly_once || errors > 0 {
        Err(anyhow::anyhow!("{} problems, {errors} read errors", problems.len()))
    } else {
        Ok(())
    };
    Ok(Some((part, verdict)))
}

fn plan_on_root(args: &Args, size: usize) -> anyhow::Result<(Plan, RootInfo)> {
    let catalog = match &args.catalog {
        Some(c) => c.clone(),
        None => std::env::var_os("SWIFTLOAD_CATALOG_DIR")
            .map(PathBuf::from)
            .context("no --catalog and no SWIFTLOAD_CATALOG_DIR")?,
    };
    // Checked before any collective work: a failure here reaches every rank with the plan.
    if let Some(out) = &args.profile_out {
        check_writable(out)?;
    }
    let mut metadata = serde_json::Map::new();
    let (paths, sizes, all, layouts, rejects) = load(&catalog, &args.input_dir, args.trust_catalog, &mut metadata)?;
    if args.compare_walk {
        let t = std::time::Instant::now();
        let entries = walk_and_stat(&args.input_dir);
        metadata.insert("walk_stat_seconds".into(), t.elapsed().as_secs_f64().into());
        metadata.insert("walk_entries".into(), entries.into());
    }
    let t1 = std::time::Instant::now();
    let loader = match &args.loader_config {
        Some(f) => Some(read_loader(f)?),
        None => None,
    };
    let per_rank = placement(&args.policy, args.loader_config.as_deref())?.place(&layouts, size);
    let stats = PlanStats::of(&per_rank);
    if args.app == App::Augment {
        augment::prepare(&paths, &sizes, args.output_dir.as_deref())?;
    }
    metadata.insert("plan_seconds".into(), t1.elapsed().as_secs_f64().into());
    let clock = match &args.emulate {
        Some(_) => {
            let dir = args.clock_dir.clone().unwrap_or_else(std::env::temp_dir);
            let p = dir.join(format!("swiftload-clock-{}-{}", std::process::id(), contention::monotonic_ns()));
            OstClock::create(&p, OstIndex::of(&all).len())
                .with_context(|| format!("creating the emulator clock {}", p.display()))?;
            Some(p)
        }
        None => None,
    };
    Ok((Plan { paths, sizes, per_rank, rejects, clock }, RootInfo { stats, loader, metadata }))
}

/// Walk `dir` as a file-level loader does (`readdir`, then `lstat` and `stat` of every
/// entry); returns the entries seen.
fn walk_and_stat(dir: &Path) -> u64 {
    let mut stack = vec![dir.to_path_buf()];
    let mut n = 0;
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            n += 1;
            if let Ok(m) = std::fs::symlink_metadata(&p) {
                let _ = std::fs::metadata(&p);
                if m.is_dir() {
                    stack.push(p);
                }
            }
        }
    }
    n
}

/// Whether `path` can be written (created when missing, and removed again then).
fn check_writable(path: &Path) -> anyhow::Result<()> {
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .with_context(|| format!("--profile-out {}: cannot be written", path.display()))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Per OST in turn: every rank reads its share of up to `profile_bytes` of that OST's chunks
/// at once (aggregate MB/s); then rank 0 alone reads from the first OST (one process's MB/s).
fn profile(
    world: &SimpleCommunicator,
    plan: &Plan,
    index: &OstIndex,
    throttle: Option<&Throttle>,
    args: &Args,
    out: &Path,
) -> anyhow::Result<()> {
    let rank = world.rank() as usize;
    let size = world.size() as usize;
    let all: Vec<ObjectTask> = plan.per_rank.iter().flatten().copied().collect();
    let budget = |ost: u32| -> Vec<ObjectTask> {
        let mut left = args.profile_bytes;
        let mut v = Vec::new();
        for t in all.iter().filter(|t| t.ost == ost) {
            for c in tasks::split_chunks(t) {
                if left == 0 {
                    return v;
                }
                left = left.saturating_sub(c.end - c.start);
                v.push(c);
            }
        }
        v
    };
    let mut ost_mb_s = BTreeMap::new();
    for &ost in index.osts() {
        let chunks = budget(ost);
        let mine: Vec<ObjectTask> =
            chunks.iter().enumerate().filter(|(i, _)| i % size == rank).map(|(_, c)| *c).collect();
        world.barrier();
        let t0 = mpi::time();
        let r = read_tasks(plan, &mine, throttle);
        world.barrier();
        let dt = mpi::time() - t0;
        let total: u64 = gather_words(world, &[r.bytes])?.iter().map(|c| c[0]).sum();
        if rank == 0 && dt > 0.0 {
            ost_mb_s.insert(ost, total as f64 / 1e6 / dt);
        }
    }
    let first = index.osts().first().copied();
    world.barrier();
    // Rank 0 always reaches the last barrier, even when writing fails: the others wait there.
    let mut written = Ok(());
    if rank == 0 {
        let chunks = first.map(budget).unwrap_or_default();
        let t0 = mpi::time();
        let r = read_tasks(plan, &chunks, throttle);
        let dt = mpi::time() - t0;
        let per_process = if dt > 0.0 { r.bytes as f64 / 1e6 / dt } else { 1.0 };
        let cfg = icicle_plugins_prism::loader::from_profile(
            (per_process * 10.0).round() / 10.0,
            &ost_mb_s,
            args.profile_cap,
        );
        written = std::fs::write(out, cfg.to_toml()).with_context(|| format!("writing {}", out.display()));
        if written.is_ok() {
            println!(
                "{}",
                serde_json::json!({"profile": out, "per_process_mb_s": cfg.per_process_mb_s, "ost_mb_s": cfg.ost_mb_s})
            );
        }
    }
    world.barrier();
    if let (Some(clock), 0) = (&plan.clock, rank) {
        let _ = std::fs::remove_file(clock);
    }
    written
}
