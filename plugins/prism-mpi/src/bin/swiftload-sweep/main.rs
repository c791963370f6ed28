//! `swiftload-sweep`: the seed's experiments' shape on the OST contention model: the time of
//! the dedup profiler and the augmentation tool against 24, 48, 96 and 192 I/O loaders, with
//! object-level and file-level scheduling. Loaders are virtual ranks on the model's clock
//! ([`contention::simulate`]); what each loader does with its bytes is measured here (one
//! core: BLAKE3 fingerprints of the default chunkings, or the CIFAR-10 transforms) and
//! enters the model as a per-loader speed in series with its I/O (`1 / (1/io + 1/compute)`).
//! Every figure it prints is emulated; the per-core compute speeds are measured. With
//! `--mds-ops-per-s` the metadata is modelled too ([`MetadataModel`]): the file-level baseline
//! walks the namespace before it reads, object-level scheduling loads a catalog.

use std::time::Instant;

use clap::Parser;

mod plot;
use icicle_core::traits::Placement;
use icicle_plugins_prism::augment::{augment_batch, RECORD_BYTES};
use icicle_plugins_prism::contention;
use icicle_plugins_prism::metadata::MetadataModel;
use icicle_plugins_prism::{FileScheduler, Loader, ObjectScheduler};

/// Model the apps' time against the number of I/O loaders.
#[derive(Parser, Debug)]
#[command(name = "swiftload-sweep", version, about)]
struct Args {
    /// Loader counts.
    #[arg(long, value_delimiter = ',', default_value = "24,48,96,192")]
    loaders: Vec<usize>,
    /// Emulated speed of one OST, MB/s.
    #[arg(long, default_value_t = 500.0)]
    ost_mb_s: f64,
    /// Emulated I/O speed of one loader, MB/s.
    #[arg(long, default_value_t = 200.0)]
    io_mb_s: f64,
    /// The loader's cap on processes per OST.
    #[arg(long, default_value_t = 8)]
    cap: u32,
    /// OSTs in the pool.
    #[arg(long, default_value_t = 24)]
    osts: u32,
    /// Use this per-loader compute speed (MB/s) for both apps instead of the measured ones
    /// (e.g. a Python augmentation pipeline's).
    #[arg(long)]
    compute_mb_s: Option<f64>,
    /// The metadata the file-level baseline pays before it reads (its namespace walk: a
    /// `readdir` per directory, an `lstat` per file): the MDS's calls per second for the walk,
    /// in all. 0 (the default): metadata is not modelled, for either policy.
    #[arg(long, default_value_t = 0.0)]
    mds_ops_per_s: f64,
    /// Latency of one metadata call as one loader sees it, ms (with --mds-ops-per-s).
    #[arg(long, default_value_t = 1.0)]
    mds_op_ms: f64,
    /// Seconds object-level scheduling spends per catalog entry loading its catalog (with
    /// --mds-ops-per-s; default the compact catalog's measured warm load, 0.094 s per million).
    #[arg(long, default_value_t = 94e-9)]
    catalog_s_per_entry: f64,
    /// Also draw the curves (seconds against loaders, object vs file, one panel per app) as
    /// a PNG at this path.
    #[arg(long, value_name = "PNG")]
    plot: Option<std::path::PathBuf>,
}

/// MB/s of `f` over `bytes` bytes on this core (best of three).
fn speed(bytes: usize, mut f: impl FnMut()) -> f64 {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            f();
            bytes as f64 / 1e6 / t.elapsed().as_secs_f64().max(1e-9)
        })
        .fold(0.0, f64::max)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let data: Vec<u8> = {
        let mut r = icicle_core::rng::Rng::new(1);
        (0..RECORD_BYTES * 2000).map(|_| r.next_u64() as u8).collect()
    };
    let mut out = vec![0u8; data.len()];
    let augment_mb_s = speed(data.len(), || {
        let _ = augment_batch(1, 2, 0, &data, &mut out);
    });
    let dedup_mb_s = speed(data.len(), || {
        for n in [4096, 65536] {
            for c in data.chunks(n) {
                std::hint::black_box(blake3::hash(c));
            }
        }
        for c in fastcdc::v2020::FastCDC::new(&data, 2048, 8192, 32768) {
            std::hint::black_box(blake3::hash(&data[c.offset..c.offset + c.length]));
        }
    });
    eprintln!(
        "model: {} OSTs at {} MB/s, loader I/O {} MB/s, cap {} per OST; measured compute per core: augment {augment_mb_s:.0} MB/s, dedup (fixed:4K, fixed:64K, cdc:8K) {dedup_mb_s:.0} MB/s",
        args.osts, args.ost_mb_s, args.io_mb_s, args.cap
    );
    let meta = MetadataModel {
        mds_ops_per_s: args.mds_ops_per_s,
        op_ms: args.mds_op_ms,
        catalog_s_per_entry: args.catalog_s_per_entry,
    };
    if !meta.is_none() {
        eprintln!(
            "metadata: file-level walks the namespace first (MDS {} calls/s, {} ms a call per loader); object-level loads a catalog ({} s an entry)",
            meta.mds_ops_per_s, meta.op_ms, meta.catalog_s_per_entry
        );
    }
    let mut rows = Vec::new();
    for (name, objects) in icicle_plugins_prism::dataset::seed_shapes(args.osts) {
        let measured = if name.starts_with("augment") { augment_mb_s } else { dedup_mb_s };
        let compute = args.compute_mb_s.unwrap_or(measured);
        let per_loader = 1.0 / (1.0 / args.io_mb_s + 1.0 / compute);
        let model = Loader::uniform(args.ost_mb_s, per_loader, args.cap);
        let bytes: u64 = objects.iter().map(|o| o.size).sum();
        eprintln!("{name}: {} files, {:.1} GB; per loader {per_loader:.0} MB/s", objects.len(), bytes as f64 / 1e9);
        eprintln!("  {:>7} {:>12} {:>12} {:>8}", "loaders", "object s", "file s", "speed-up");
        let dirs = objects
            .iter()
            .map(|o| o.path.rsplit_once('/').map_or("", |(d, _)| d))
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        for &n in &args.loaders {
            let (walk, catalog) = (meta.walk_seconds(objects.len(), dirs, n), meta.catalog_seconds(objects.len()));
            let object = catalog
                + contention::simulate(&ObjectScheduler::new(Some(model.clone())).place(&objects, n), &model).seconds;
            let file = walk + contention::simulate(&FileScheduler.place(&objects, n), &model).seconds;
            eprintln!("  {n:>7} {object:>12.2} {file:>12.2} {:>7.2}x", file / object.max(1e-9));
            rows.push(serde_json::json!({
                "app": name, "loaders": n, "object_seconds": object, "file_seconds": file,
                "object_metadata_seconds": catalog, "file_metadata_seconds": walk,
            }));
        }
    }
    if let Some(png) = &args.plot {
        let caption = format!(
            "{} OSTs at {} MB/s, loader I/O {} MB/s, cap {} per OST{}{} (emulated)",
            args.osts,
            args.ost_mb_s,
            args.io_mb_s,
            args.cap,
            args.compute_mb_s.map(|c| format!(", compute {c} MB/s per loader")).unwrap_or_default(),
            if meta.is_none() { String::new() } else { format!(", MDS {} calls/s", meta.mds_ops_per_s) }
        );
        let curves: Vec<plot::Point> = rows
            .iter()
            .filter_map(|r| {
                Some(plot::Point {
                    app: r["app"].as_str()?.to_string(),
                    loaders: r["loaders"].as_u64()? as usize,
                    object: r["object_seconds"].as_f64()?,
                    file: r["file_seconds"].as_f64()?,
                })
            })
            .collect();
        plot::draw(&curves, &caption, png)?;
        eprintln!("curves drawn in {}", png.display());
    }
    println!(
        "{}",
        serde_json::json!({"emulated": true, "augment_mb_s_per_core": augment_mb_s, "dedup_mb_s_per_core": dedup_mb_s, "rows": rows})
    );
    Ok(())
}
