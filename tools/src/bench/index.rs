//! `icicle-bench index`: a generated CSV snapshot (primary and aggregate records) into the
//! embedded index, then the questions `find` and `du` ask, warm, with their latencies.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use icicle_plugins_index::search::{Record, Span};
use icicle_plugins_index::{Filter, Reader, Visibility};
use icicle_testkit::gen::{Format, NOW_REF};

/// Ingest throughput and query latency of the embedded index.
#[derive(clap::Args, Debug)]
pub struct IndexArgs {
    /// Files in the generated snapshot (the seed's FS-small: 8456326).
    #[arg(long, default_value_t = 2_000_000)]
    pub files: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where generated data and the index go.
    #[arg(long, default_value = "target/bench-data")]
    pub dir: PathBuf,
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    /// Times each question is asked (after one warm-up).
    #[arg(long, default_value_t = 30)]
    pub repeat: usize,
    /// Ask the questions of an index already built there (skip the ingest).
    #[arg(long)]
    pub reuse: bool,
    /// Skip the same questions asked of DuckDB (`scripts/bench_duckdb_index.py`, needing
    /// `pip install duckdb`) over the same CSV.
    #[arg(long)]
    pub no_duckdb: bool,
}

/// Bytes of every file under `dir`.
fn disk_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()?.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

/// The latencies (seconds) of `repeat` answers to `ask`, after a warm-up; and its answer.
fn timed(repeat: usize, mut ask: impl FnMut() -> anyhow::Result<u64>) -> anyhow::Result<(u64, Vec<f64>)> {
    let answer = ask()?;
    let mut lat = Vec::with_capacity(repeat);
    for _ in 0..repeat {
        let t = Instant::now();
        let a = ask()?;
        lat.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(a == answer, "the same question answered {a}, then {answer}");
    }
    lat.sort_by(f64::total_cmp);
    Ok((answer, lat))
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted.get(((sorted.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0)
}

/// `icicle-bench index`.
pub fn index(args: IndexArgs) -> anyhow::Result<ExitCode> {
    let IndexArgs { files, seed, dir, workers, repeat, reuse, no_duckdb } = args;
    std::fs::create_dir_all(&dir)?;
    let out = dir.join(format!("index-{files}-{seed}"));
    let data = super::ensure_data(&dir, Format::Tsv, files, seed, &mut None)?;
    if !reuse {
        let _ = std::fs::remove_dir_all(&out);
        let v =
            super::measured_run("tsv", "index", workers, &data, &out, &["--all-pipelines", "ddsketch", "--keep-out"])?;
        let records = v["records"].as_u64().unwrap_or(0) + v["aggregate_records"].as_u64().unwrap_or(0);
        let bytes = disk_bytes(&out);
        eprintln!(
            "ingest: {records} records ({} primary) in {:.1} s, {:.0} rows/s, {:.0} rows per CPU-s, peak RSS {} MiB; {} MiB on disk, {:.0} bytes a record",
            v["records"],
            v["seconds"].as_f64().unwrap_or(0.0),
            v["rows_per_s"].as_f64().unwrap_or(0.0),
            v["rows"].as_f64().unwrap_or(0.0) / v["cpu_seconds"].as_f64().unwrap_or(1.0).max(1e-9),
            v["peak_rss_bytes"].as_u64().unwrap_or(0) >> 20,
            bytes >> 20,
            bytes as f64 / records.max(1) as f64
        );
    }
    let reader = Reader::open(&out)?;
    let all = Visibility::All;
    let files_only = Filter { record: Some(Record::File), ..Filter::default() };
    // A directory aggregate near 10,000 files, for `du`.
    let mut best: Option<(u64, String)> = None;
    reader.entries(
        &Filter { record: Some(Record::Aggregate), kind: Some("dir".into()), ..Filter::default() },
        &all,
        None,
        |e| {
            let v: serde_json::Value = serde_json::from_slice(e).unwrap_or_default();
            let (n, id) = (
                v["content"]["file_count"].as_u64().unwrap_or(0),
                v["content"]["id"].as_str().unwrap_or("").to_string(),
            );
            if best.as_ref().is_none_or(|(b, _)| n.abs_diff(10_000) < b.abs_diff(10_000)) {
                best = Some((n, id));
            }
        },
    )?;
    let (du_files, du_dir) = best.unwrap_or((0, "/".into()));
    let year_ago = NOW_REF - 365 * 86_400;
    let questions: Vec<(String, Filter)> = vec![
        (
            "owner 1000 and size > 1 MiB".into(),
            Filter {
                uid: Some(1000),
                size: Span { lo: std::ops::Bound::Excluded(1 << 20), hi: std::ops::Bound::Unbounded },
                ..files_only.clone()
            },
        ),
        ("below /fs/home/user1000".into(), Filter { under: Some("/fs/home/user1000".into()), ..files_only.clone() }),
        ("name *.py".into(), Filter { name_glob: Some("*.py".into()), ..files_only.clone() }),
        (
            "mtime over a year before 2026-01-01".into(),
            Filter {
                mtime: Span { lo: std::ops::Bound::Unbounded, hi: std::ops::Bound::Included(year_ago) },
                ..files_only.clone()
            },
        ),
    ];
    eprintln!("\n| question | matches | count p50 ms | count p99 ms | first 100 p50 ms | first 100 p99 ms |\n|---|---|---|---|---|---|");
    for (what, f) in &questions {
        let (n, count) = timed(repeat, || Ok(reader.count(f, &all)?))?;
        let (_, first) = timed(repeat, || Ok(reader.rows(f, &all, Some(100), |_| {})?))?;
        let ms = |l: &[f64], q| quantile(l, q) * 1e3;
        eprintln!(
            "| {what} | {n} | {:.2} | {:.2} | {:.2} | {:.2} |",
            ms(&count, 0.5),
            ms(&count, 0.99),
            ms(&first, 0.5),
            ms(&first, 0.99)
        );
        println!(
            "{}",
            serde_json::json!({"bench": "index-query", "question": what, "matches": n, "count_p50_s": quantile(&count, 0.5), "count_p99_s": quantile(&count, 0.99), "first100_p50_s": quantile(&first, 0.5), "first100_p99_s": quantile(&first, 0.99)})
        );
    }
    // `du DIR`: the directory's aggregate record and its children's.
    let du = |dir: &str| -> anyhow::Result<u64> {
        let base = Filter { record: Some(Record::Aggregate), kind: Some("dir".into()), ..Filter::default() };
        let own = reader.entries(&Filter { path: Some(dir.into()), ..base.clone() }, &all, None, |_| {})?;
        Ok(own + reader.entries(&Filter { parent: Some(dir.into()), ..base }, &all, None, |_| {})?)
    };
    let (n, lat) = timed(repeat, || du(&du_dir))?;
    eprintln!(
        "| du {du_dir} ({du_files} files below) | {n} records | | | {:.2} | {:.2} |",
        quantile(&lat, 0.5) * 1e3,
        quantile(&lat, 0.99) * 1e3
    );
    println!(
        "{}",
        serde_json::json!({"bench": "index-du", "dir": du_dir, "files_below": du_files, "records": n, "p50_s": quantile(&lat, 0.5), "p99_s": quantile(&lat, 0.99)})
    );
    if !no_duckdb {
        duckdb(&data, &dir.join(format!("duckdb-{files}-{seed}.db")), repeat, year_ago, &du_dir)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The same questions asked of DuckDB over the same CSV (its own process: Python).
fn duckdb(data: &Path, db: &Path, repeat: usize, year_ago: i64, du_dir: &str) -> anyhow::Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/bench_duckdb_index.py");
    let o = std::process::Command::new("python3")
        .arg(&script)
        .arg(data)
        .arg(db)
        .args([repeat.to_string(), "1000".into(), "/fs/home/user1000".into(), ".py".into(), year_ago.to_string()])
        .arg(du_dir)
        .output()?;
    if !o.status.success() {
        eprintln!(
            "DuckDB beside it: skipped ({}); `pip install duckdb`, or --no-duckdb",
            String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("python3 failed")
        );
        return Ok(());
    }
    let _ = std::fs::remove_file(db);
    eprintln!("\nDuckDB over the same CSV:");
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        println!("{line}");
        let v: serde_json::Value = serde_json::from_str(line)?;
        let ms = |k: &str| v[k].as_f64().unwrap_or(0.0) * 1e3;
        match v["bench"].as_str() {
            Some("duckdb-ingest") => eprintln!(
                "ingest: {} rows in {:.1} s, {:.0} rows/s, {:.0} rows per CPU-s; {} MiB on disk",
                v["rows"],
                v["seconds"].as_f64().unwrap_or(0.0),
                v["rows_per_s"].as_f64().unwrap_or(0.0),
                v["rows"].as_f64().unwrap_or(0.0) / v["cpu_seconds"].as_f64().unwrap_or(1.0).max(1e-9),
                v["bytes_on_disk"].as_u64().unwrap_or(0) >> 20
            ),
            Some("duckdb-query") => eprintln!(
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
                v["question"].as_str().unwrap_or(""),
                v["matches"],
                ms("count_p50_s"),
                ms("count_p99_s"),
                ms("first100_p50_s"),
                ms("first100_p99_s")
            ),
            _ => eprintln!(
                "| du {} ({} files below) | {} children | | | {:.2} | {:.2} |; peak RSS {} MiB",
                v["dir"].as_str().unwrap_or(""),
                v["files_below"],
                v["children"],
                ms("p50_s"),
                ms("p99_s"),
                v["peak_rss_bytes"].as_u64().unwrap_or(0) >> 20
            ),
        }
    }
    Ok(())
}
