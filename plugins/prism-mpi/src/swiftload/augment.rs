//! `swiftload --app augment`: CIFAR-10 batches read through the object scheduler, each record
//! augmented ([`icicle_plugins_prism::augment`]) and written at the same offset of a file of
//! the same name under `--output-dir`.
//!
//! A record belongs to the piece (one stripe of one file) its first byte lies in; that
//! piece's reader reads the whole record, past the piece's end when it straddles one, so every
//! record is read exactly once. A record's transforms depend only on the seed, the file's
//! name and the record's index, so the output is the same for any number of ranks and any
//! placement.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use icicle_core::traits::ObjectTask;
use icicle_plugins_prism::augment::{augment_batch, file_key, RECORD_BYTES};
use icicle_plugins_prism::contention::{self, Throttle};
use icicle_plugins_prism::tasks;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use icicle_mpi_comm as comm;

const R: u64 = RECORD_BYTES as u64;

/// The output file of input `path` under `out_dir`.
fn output_path(out_dir: &Path, path: &str) -> anyhow::Result<PathBuf> {
    let name = Path::new(path).file_name().with_context(|| format!("{path}: no file name"))?;
    Ok(out_dir.join(name))
}

/// Rank 0, while planning: check the inputs are whole records with distinct names, and create
/// the output files at their final sizes.
pub fn prepare(paths: &[String], sizes: &[u64], out_dir: Option<&Path>) -> anyhow::Result<()> {
    let out_dir = out_dir.context("--app augment needs --output-dir")?;
    std::fs::create_dir_all(out_dir).with_context(|| format!("--output-dir {}", out_dir.display()))?;
    let mut names = std::collections::BTreeSet::new();
    for (p, &size) in paths.iter().zip(sizes) {
        if size % R != 0 {
            bail!("{p}: {size} bytes is not a whole number of {R}-byte CIFAR-10 records");
        }
        let out = output_path(out_dir, p)?;
        if !names.insert(out.clone()) {
            bail!("{p}: a second input named {}", out.display());
        }
        if std::fs::canonicalize(&out).ok() == std::fs::canonicalize(p).ok() {
            bail!("{p}: --output-dir would overwrite the input");
        }
        let f = std::fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?;
        f.set_len(size).with_context(|| format!("sizing {}", out.display()))?;
    }
    Ok(())
}

/// Counters of one rank: `[records, bytes, errors]`.
fn augment_tasks(
    paths: &[String],
    sizes: &[u64],
    mine: &[ObjectTask],
    seed: u64,
    out_dir: &Path,
    throttle: Option<&Throttle>,
) -> [u64; 3] {
    let mut c = [0u64; 3];
    let mut files: std::collections::HashMap<usize, (std::fs::File, std::fs::File)> = std::collections::HashMap::new();
    let (mut input, mut output) = (Vec::new(), Vec::new());
    for t in mine {
        let path = &paths[t.object];
        let key = file_key(Path::new(path).file_name().map(|n| n.to_string_lossy()).unwrap_or_default().as_ref());
        for (a, len) in tasks::chunks(t) {
            let (first, end) = (a.div_ceil(R), (a + len).div_ceil(R));
            if first >= end {
                continue;
            }
            let (from, to) = (first * R, (end * R).min(sizes[t.object]));
            let pair = match files.entry(t.object) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    let opened = output_path(out_dir, path).and_then(|out| {
                        let i = std::fs::File::open(path).with_context(|| path.clone())?;
                        let o = std::fs::OpenOptions::new()
                            .write(true)
                            .open(&out)
                            .with_context(|| out.display().to_string())?;
                        Ok((i, o))
                    });
                    match opened {
                        Ok(p) => v.insert(p),
                        Err(e) => {
                            tracing::error!("{e:#}");
                            c[2] += 1;
                            continue;
                        }
                    }
                }
            };
            let deadline = throttle.map(|th| th.reserve(t.ost, to - from));
            input.resize((to - from) as usize, 0);
            output.resize(input.len(), 0);
            let done = pair
                .0
                .read_exact_at(&mut input, from)
                .map_err(|e| format!("{path} at {from}: {e}"))
                .and_then(|()| {
                    augment_batch(seed, key, first, &input, &mut output).map_err(|e| format!("{path} at {from}: {e}"))
                })
                .and_then(|n| {
                    pair.1
                        .write_all_at(&output, from)
                        .map(|()| n)
                        .map_err(|e| format!("{} at {from}: {e}", out_dir.display()))
                });
            match done {
                Ok(n) => {
                    c[0] += n as u64;
                    c[1] += to - from;
                }
                Err(e) => {
                    tracing::error!("{e}");
                    c[2] += 1;
                }
            }
            if let Some(d) = deadline {
                contention::sleep_until(d);
            }
        }
    }
    c
}

/// Augment this rank's records; the summary's part on rank 0.
pub fn run(
    world: &SimpleCommunicator,
    paths: &[String],
    sizes: &[u64],
    mine: &[ObjectTask],
    seed: u64,
    out_dir: Option<&Path>,
    throttle: Option<&Throttle>,
) -> anyhow::Result<Option<serde_json::Value>> {
    let out_dir = out_dir.context("--app augment needs --output-dir")?;
    world.barrier();
    let t0 = mpi::time();
    let c = augment_tasks(paths, sizes, mine, seed, out_dir, throttle);
    world.barrier();
    let seconds = mpi::time() - t0;
    let sums = comm::all_sum(world, &c);
    if world.rank() != 0 {
        return Ok(None);
    }
    let expected: u64 = sizes.iter().map(|s| s / R).sum();
    if sums[2] > 0 {
        bail!("{} read, augment or write errors", sums[2]);
    }
    if sums[0] != expected {
        bail!("{} of {expected} records augmented", sums[0]);
    }
    Ok(Some(serde_json::json!({
        "records": sums[0],
        "bytes": sums[1],
        "seconds": seconds,
        "mb_s": if seconds > 0.0 { sums[1] as f64 / 1e6 / seconds } else { 0.0 },
        "records_per_s": if seconds > 0.0 { sums[0] as f64 / seconds } else { 0.0 },
        "seed": seed,
        "output_dir": out_dir,
    })))
}
