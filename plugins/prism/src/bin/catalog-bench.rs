//! `catalog-bench`: convert SwiftLoad catalogs between the text and compact forms, load one
//! and time it, and benchmark catalog loading against a directory walk + stat.
//!
//! ```text
//! catalog-bench convert IN OUT          IN: a catalog directory or file (text or compact);
//!                                       OUT ending in .icat: compact, else text
//! catalog-bench load DIR [--reader fast|text] [--layouts]   one JSON line
//! catalog-bench generate --out DIR [--entries N] [--files F] [--seed S]
//! catalog-bench walk DIR                walk + lstat + stat of every file, one JSON line
//! catalog-bench bench [--entries 1000000] [--files 16] [--runs 5] [--walk-files 200000]
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use clap::{Parser, Subcommand};
use icicle_plugins_prism::catalog::compact::{self, CompactCatalog};
use icicle_plugins_prism::catalog::synth::{write_synthetic, SynthSpec};
use icicle_plugins_prism::catalog::{self, load_dir, Catalog, EntryRef};
use icicle_plugins_prism::tasks;
use serde_json::{json, Value};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Convert, load and benchmark SwiftLoad catalogs.
#[derive(Parser, Debug)]
#[command(name = "catalog-bench", version, about)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Convert a catalog (directory or file, text or compact) to OUT (`.icat`: compact, else text).
    Convert { input: PathBuf, output: PathBuf },
    /// Load a catalog directory and print one JSON line (seconds, entries, peak RSS).
    Load {
        dir: PathBuf,
        /// `fast`: `catalog::load_dir` (text or compact); `text`: `Catalog::read_dir` + `latest()`.
        #[arg(long, default_value = "fast")]
        reader: String,
        /// Also rebuild every regular file's layout and its tasks, as swiftload does.
        #[arg(long)]
        layouts: bool,
        /// Evict the catalog files from the page cache first (`POSIX_FADV_DONTNEED`): a
        /// first read after the files left memory.
        #[arg(long)]
        cold: bool,
    },
    /// Write a synthetic text catalog (realistic paths, 1-4 stripes per file).
    Generate {
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 1_000_000)]
        entries: usize,
        #[arg(long, default_value_t = 16)]
        files: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Walk a directory tree, `lstat` and `stat` every entry, print one JSON line.
    Walk { dir: PathBuf },
    /// Generate, convert, and time loading (text and compact) against a walk + stat.
    Bench {
        #[arg(long, default_value_t = 1_000_000)]
        entries: usize,
        #[arg(long, default_value_t = 16)]
        files: usize,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Small files created for the walk + stat comparison (0: skip it).
        #[arg(long, default_value_t = 200_000)]
        walk_files: usize,
        /// Work directory (default: a new one in the temp dir, removed afterwards).
        #[arg(long)]
        work: Option<PathBuf>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("catalog-bench: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

fn run(args: Args) -> Res<()> {
    match args.cmd {
        Cmd::Convert { input, output } => convert(&input, &output),
        Cmd::Load { dir, reader, layouts, cold } => {
            if cold {
                evict(&dir)?;
            }
            println!("{}", load(&dir, &reader, layouts)?);
            Ok(())
        }
        Cmd::Generate { out, entries, files, seed } => {
            let s = write_synthetic(&out, &SynthSpec::new(entries, files, seed))?;
            println!(
                "{}",
                json!({"entries": s.entries, "records": s.records, "gone": s.gone, "superseded": s.superseded, "bytes": s.bytes})
            );
            Ok(())
        }
        Cmd::Walk { dir } => {
            println!("{}", walk(&dir)?);
            Ok(())
        }
        Cmd::Bench { entries, files, runs, walk_files, work, seed } => {
            bench(entries, files, runs.max(1), walk_files, work, seed)
        }
    }
}

/// Convert `input` (a directory or file, text or compact) to `output`: compact when it ends
/// in `.icat` ([`compact::write_compact`]: `latest()` and the `gone` records), else text (the
/// `gone` records, then `latest()` in path order; a compact file is streamed).
fn convert(input: &Path, output: &Path) -> Res<()> {
    let t0 = Instant::now();
    let to_compact = output.extension().is_some_and(|e| e == compact::EXTENSION);
    if input.is_file() && !to_compact && compact::file_is_compact(input)? {
        let c = CompactCatalog::open(input)?;
        let mut w = std::io::BufWriter::new(std::fs::File::create(output)?);
        c.write_text(&mut w)?;
        std::io::Write::flush(&mut w)?;
        eprintln!("{} entries -> {} in {:.2} s", c.len(), output.display(), t0.elapsed().as_secs_f64());
        return Ok(());
    }
    let cat = if input.is_dir() { Catalog::read_dir(input)? } else { Catalog::read_file(input)? };
    for r in &cat.rejects {
        eprintln!("{r}");
    }
    if to_compact {
        compact::write_compact(&cat, output)?;
    } else {
        let mut s = String::new();
        for g in &cat.gone {
            g.write_to(&mut s)?;
        }
        for e in cat.latest() {
            e.write_to(&mut s)?;
        }
        std::fs::write(output, s)?;
    }
    eprintln!(
        "{} entries, {} gone records, {} rejects -> {} in {:.2} s",
        cat.latest().len(),
        cat.gone.len(),
        cat.rejects.len(),
        output.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// This process's peak resident set (`VmHWM`; `getrusage` would count the parent's peak
/// before `exec`), KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Load `dir` with one reader and time it; then read every entry's path, size and stat
/// fields (`scan`); with `layouts`, also rebuild every regular file's layout and its tasks.
fn load(dir: &Path, reader: &str, layouts: bool) -> Res<Value> {
    let t0 = Instant::now();
    let text;
    let fast;
    let (entries, files, rejects, superseded): (Vec<EntryRef<'_>>, usize, usize, usize) = match reader {
        "text" => {
            text = Catalog::read_dir(dir)?;
            (text.latest().into_iter().map(EntryRef::Text).collect(), text.files, text.rejects.len(), text.superseded)
        }
        "fast" => {
            fast = load_dir(dir)?;
            (fast.iter().collect(), fast.files, fast.rejects.len(), fast.superseded)
        }
        other => return Err(format!("--reader {other}: `fast` or `text`").into()),
    };
    let load_s = t0.elapsed().as_secs_f64();
    let load_rss = peak_rss_kib();
    let mut check = 0u64;
    for e in &entries {
        let (l, s) = (e.lstat(), e.stat());
        check = check.wrapping_add(e.path().len() as u64 + e.size() + l.ino + s.map_or(0, |s| s.mtime as u64));
    }
    let scan_s = t0.elapsed().as_secs_f64();
    let (mut objects, mut ntasks) = (Vec::new(), 0usize);
    if layouts {
        for e in entries.iter().filter(|e| e.stat_or_lstat().is_regular()) {
            if let Some(l) = e.object_layout() {
                ntasks += tasks::tasks_of(objects.len(), &l).map_or(0, |t| t.len());
                objects.push(l);
            }
        }
    }
    let total = t0.elapsed().as_secs_f64();
    Ok(json!({
        "reader": reader, "dir": dir, "files": files, "entries": entries.len(), "rejects": rejects, "superseded": superseded,
        "load_seconds": load_s, "scan_seconds": scan_s, "total_seconds": total, "layouts": objects.len(), "tasks": ntasks,
        "load_rss_kib": load_rss, "peak_rss_kib": peak_rss_kib(), "check": check,
    }))
}

fn walk(dir: &Path) -> Res<Value> {
    let t0 = Instant::now();
    let (mut stack, mut n, mut bytes) = (vec![dir.to_path_buf()], 0u64, 0u64);
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let p = e?.path();
            let l = std::fs::symlink_metadata(&p)?;
            let s = std::fs::metadata(&p)?;
            if l.is_dir() {
                stack.push(p);
            } else {
                n += 1;
                bytes += s.len();
            }
        }
    }
    let s = t0.elapsed().as_secs_f64();
    Ok(json!({"dir": dir, "files": n, "bytes": bytes, "seconds": s, "peak_rss_kib": peak_rss_kib()}))
}

/// Run `catalog-bench ARGS` in a new process (clean peak RSS) `runs` times.
fn runs_of(args: &[&str], runs: usize) -> Res<Vec<Value>> {
    let exe = std::env::current_exe()?;
    let mut out = Vec::new();
    for _ in 0..runs {
        let o = Command::new(&exe).args(args).output()?;
        if !o.status.success() {
            return Err(format!("catalog-bench {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr)).into());
        }
        out.push(serde_json::from_slice(&o.stdout)?);
    }
    Ok(out)
}

/// (min, median, max) of a field over runs.
fn stats(v: &[Value], key: &str) -> (f64, f64, f64) {
    let mut x: Vec<f64> = v.iter().filter_map(|r| r[key].as_f64()).collect();
    x.sort_by(f64::total_cmp);
    let med = if x.is_empty() { 0.0 } else { x[x.len() / 2] };
    (x.first().copied().unwrap_or(0.0), med, x.last().copied().unwrap_or(0.0))
}

fn du(dir: &Path) -> u64 {
    catalog::catalog_files(dir).map(|v| v.iter().filter_map(|p| p.metadata().ok()).map(|m| m.len()).sum()).unwrap_or(0)
}

fn make_tree(root: &Path, files: usize) -> Res<()> {
    for i in 0..files {
        let d = root.join(format!("d{:04}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&d)?;
        }
        std::fs::write(d.join(format!("f{i:07}.dat")), [b'x'; 64])?;
    }
    Ok(())
}

/// Drop `dir`'s catalog files from the page cache (clean pages go at once).
fn evict(dir: &Path) -> Res<()> {
    use std::os::fd::AsRawFd;
    for p in catalog::catalog_files(dir)? {
        let f = std::fs::File::open(&p)?;
        // SAFETY: an open descriptor we own; advice only.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if r != 0 {
            return Err(format!("posix_fadvise {}: error {r}", p.display()).into());
        }
    }
    Ok(())
}

/// The catalog as the node's collector leaves it: the synthetic entries as its merged text
/// file (one file, as from an earlier run), then `icicle-catalogd run` started and stopped,
/// which compacts at stop. `None` when `icicle-catalogd` is not built beside this binary.
fn collected(work: &Path, entries: usize, seed: u64) -> Res<(Option<PathBuf>, f64)> {
    let catalogd = std::env::current_exe()?.with_file_name("icicle-catalogd");
    if !catalogd.is_file() {
        eprintln!("{} is not built: the collector's row is skipped", catalogd.display());
        return Ok((None, 0.0));
    }
    let (text, dir) = (work.join("collector-text"), work.join("collector"));
    write_synthetic(&text, &SynthSpec::new(entries, 1, seed))?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")?.trim().to_string();
    std::fs::create_dir_all(&dir)?;
    let first = catalog::catalog_files(&text)?.into_iter().next().ok_or("no synthetic catalog written")?;
    std::fs::rename(first, dir.join(format!("catalog.{host}.collector.txt")))?;
    let mut child = Command::new(&catalogd)
        .args(["run", "--compact-idle-secs", "0", "--dir"])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?), &mut line)?;
    let t0 = Instant::now();
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    if !child.wait()?.success() {
        return Err("icicle-catalogd failed".into());
    }
    Ok((Some(dir), t0.elapsed().as_secs_f64()))
}

fn bench(entries: usize, files: usize, runs: usize, walk_files: usize, work: Option<PathBuf>, seed: u64) -> Res<()> {
    let (work, remove) = match work {
        Some(w) => (w, false),
        None => (std::env::temp_dir().join(format!("catalog-bench-{}", std::process::id())), true),
    };
    let (text, one, per_file) = (work.join("text"), work.join("compact"), work.join("compact-per-file"));
    let t0 = Instant::now();
    let s = write_synthetic(&text, &SynthSpec::new(entries, files, seed))?;
    eprintln!(
        "generated {} entries ({} records, {} gone) in {files} text files, {} MB, {:.1} s",
        s.entries,
        s.records,
        s.gone,
        s.bytes >> 20,
        t0.elapsed().as_secs_f64()
    );
    let t0 = Instant::now();
    std::fs::create_dir_all(&one)?;
    compact::write_compact(&Catalog::read_dir(&text)?, &one.join("catalog.all.icat"))?;
    let convert_s = t0.elapsed().as_secs_f64();
    std::fs::create_dir_all(&per_file)?;
    for p in catalog::catalog_files(&text)? {
        let name = p.file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        compact::write_compact(&Catalog::read_file(&p)?, &per_file.join(format!("{name}.icat")))?;
    }
    eprintln!("converted in {convert_s:.1} s");
    let (collected, stop_s) = collected(&work, entries, seed)?;
    let mut configs: Vec<(String, &Path, &str)> = vec![
        ("text, Catalog::read_dir + latest()".into(), &text, "text"),
        ("text, load_dir".into(), &text, "fast"),
        ("compact (1 file), load_dir".into(), &one, "fast"),
        (format!("compact ({files} files), load_dir"), &per_file, "fast"),
        ("text, load_dir, cold".into(), &text, "fast cold"),
    ];
    if let Some(c) = &collected {
        eprintln!("icicle-catalogd compacted its text at stop in {stop_s:.1} s");
        configs.push(("as icicle-catalogd leaves it, load_dir".into(), c, "fast"));
        configs.push(("as icicle-catalogd leaves it, load_dir, cold".into(), c, "fast cold"));
    }
    let mut rows = Vec::new();
    println!("| catalog | bytes | entries | load s min / median | + read every path, size, stat | + layouts & tasks | RSS MB after load / peak |");
    println!("|---|---|---|---|---|---|---|");
    for (label, dir, reader) in configs {
        let d = dir.to_string_lossy().into_owned();
        let (reader, cold) = reader.split_once(' ').map_or((reader, None), |(r, c)| (r, Some(format!("--{c}"))));
        let mut args = vec!["load", &d, "--reader", reader, "--layouts"];
        args.extend(cold.as_deref());
        let v = runs_of(&args, runs)?;
        let got = v.first().and_then(|r| r["entries"].as_u64()).unwrap_or(0);
        if got != entries as u64 {
            return Err(format!("{label}: {got} entries, expected {entries}").into());
        }
        let (lmin, lmed, _) = stats(&v, "load_seconds");
        let (smin, smed, _) = stats(&v, "scan_seconds");
        let (tmin, tmed, _) = stats(&v, "total_seconds");
        let (_, _, load_rss) = stats(&v, "load_rss_kib");
        let (_, _, rss) = stats(&v, "peak_rss_kib");
        println!(
            "| {label} | {} MB | {got} | {lmin:.3} / {lmed:.3} | {smin:.3} / {smed:.3} | {tmin:.3} / {tmed:.3} | {:.0} / {:.0} |",
            du(dir) >> 20,
            load_rss / 1024.0,
            rss / 1024.0
        );
        rows.push(json!({"catalog": label, "bytes": du(dir), "entries": got, "load_min": lmin, "load_median": lmed, "scan_min": smin, "scan_median": smed,
            "total_min": tmin, "total_median": tmed, "load_rss_kib": load_rss, "peak_rss_kib": rss}));
    }
    let mut walk_row = Value::Null;
    if walk_files > 0 {
        let tree = work.join("tree");
        let t0 = Instant::now();
        make_tree(&tree, walk_files)?;
        eprintln!("created {walk_files} files in {:.1} s", t0.elapsed().as_secs_f64());
        let v = runs_of(&["walk", &tree.to_string_lossy()], runs)?;
        let (wmin, wmed, _) = stats(&v, "seconds");
        let per = wmed / walk_files as f64;
        println!(
            "| walk + lstat + stat of {walk_files} small files (warm cache) | | {walk_files} | {wmin:.3} / {wmed:.3} | {:.2} µs per file | **extrapolated** to {entries}: {:.2} s | {:.0} |",
            per * 1e6,
            per * entries as f64,
            stats(&v, "peak_rss_kib").2 / 1024.0
        );
        walk_row = json!({"files": walk_files, "min": wmin, "median": wmed, "per_file_us": per * 1e6, "extrapolated_seconds": per * entries as f64});
    }
    println!(
        "{}",
        json!({"entries": entries, "files": files, "runs": runs, "convert_seconds": convert_s, "collector_stop_seconds": stop_s, "loads": rows, "walk": walk_row})
    );
    if remove {
        std::fs::remove_dir_all(&work)?;
    }
    Ok(())
}
