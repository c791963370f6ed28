//! Synthetic catalogs for tests and benchmarks: per-process text files as the agent writes
//! them for an application's output tree, with files closed twice, atomic renames and moves
//! recorded as `gone` records, so that the live entries are exactly known.

use std::path::Path;

use icicle_core::rng::Rng;
use icicle_core::traits::LayoutComponent;

use super::{CatalogEntry, CatalogError, CatalogGone, StatFields};

/// What to generate.
#[derive(Debug, Clone)]
pub struct SynthSpec {
    /// Live entries (distinct paths) the catalog must hold.
    pub entries: usize,
    /// Per-process catalog files (`catalog.node<k>.<pid>.txt`).
    pub files: usize,
    /// Seed of every choice.
    pub seed: u64,
    /// Per mille of files written under a temporary name and renamed (an entry and a `gone`
    /// record in the same file supersede the temporary one).
    pub renamed_per_mille: u64,
    /// Per mille of files closed twice by different processes (the newer entry wins).
    pub rewritten_per_mille: u64,
    /// Per mille of files that another process moved away (an extra entry at the old path,
    /// superseded by a `gone` record in another catalog file).
    pub moved_per_mille: u64,
}

impl SynthSpec {
    /// `entries` live entries over `files` catalog files, with 1% renames, 0.5% rewrites and
    /// 0.2% moves.
    pub fn new(entries: usize, files: usize, seed: u64) -> SynthSpec {
        SynthSpec {
            entries,
            files: files.max(1),
            seed,
            renamed_per_mille: 10,
            rewritten_per_mille: 5,
            moved_per_mille: 2,
        }
    }
}

/// What was generated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SynthSummary {
    /// Live entries (= the spec's `entries`: what `latest()` must hold).
    pub entries: usize,
    /// Entry records written.
    pub records: usize,
    /// `gone` records written.
    pub gone: usize,
    /// Entries the `gone` records supersede.
    pub superseded: usize,
    /// Text bytes written.
    pub bytes: u64,
}

const PROJECTS: [&str; 8] =
    ["climate-ens", "cosmo-sim", "genomics", "md-protein", "cfd-wing", "lattice-qcd", "seismic", "llm-pretrain"];
const USERS: [&str; 6] = ["jdoe", "akim", "mlopez", "rsingh", "twang", "ebrown"];
const EXTS: [&str; 6] = ["h5", "nc", "bin", "ckpt", "dat", "tfrecord"];
const POOL: [u32; 8] = [10, 60, 86, 105, 113, 167, 204, 231];
const BASE_TIME: i64 = 1_717_000_000;

/// The path of file `k`: distinct for every `k`.
fn path_of(k: usize) -> String {
    let run = k / 100_000;
    let proj = PROJECTS[run % PROJECTS.len()];
    let user = USERS[(run / PROJECTS.len()) % USERS.len()];
    let ext = EXTS[k % EXTS.len()];
    format!("/lustre/scratch/{proj}/{user}/run-{run:03}/step-{:04}/out/rank-{:04}.{ext}", (k / 1000) % 100, k % 1000)
}

/// Metadata and a plain layout of 1-4 stripes for file `k` of `size` bytes.
fn entry(path: String, k: usize, size: u64, ctime: i64, rng: &mut Rng) -> CatalogEntry {
    let user = (k / 100_000 / PROJECTS.len()) % USERS.len();
    let st = StatFields {
        dev: 0x2c3_5a01,
        ino: 144_115_188_075_855_873 + k as u64,
        mode: 0o100644,
        nlink: 1,
        uid: 1000 + user as u32,
        gid: 100,
        rdev: 0,
        size,
        blksize: 4 << 20,
        blocks: size.div_ceil(512),
        atime: ctime,
        mtime: ctime,
        ctime,
    };
    let count = 1 + rng.below(4) as usize;
    let first = rng.below(POOL.len() as u64) as usize;
    let osts = (0..count).map(|i| POOL[(first + i) % POOL.len()]).collect();
    let comps = [LayoutComponent { start: 0, end: u64::MAX, stripe_size: 1 << 20, osts }];
    CatalogEntry::new(path, st, Some(st), Some(&comps))
}

/// Write the catalog files into `dir` (created if needed).
pub fn write_synthetic(dir: &Path, spec: &SynthSpec) -> Result<SynthSummary, CatalogError> {
    let io = |source| CatalogError::Io { path: dir.to_path_buf(), source };
    std::fs::create_dir_all(dir).map_err(io)?;
    let files = spec.files.max(1);
    let mut texts: Vec<String> = vec![String::new(); files];
    let mut rng = Rng::new(spec.seed);
    let mut sum = SynthSummary { entries: spec.entries, ..SynthSummary::default() };
    for k in 0..spec.entries {
        // Rank k % 1000 of a run writes into its own process's file.
        let f = (k % 1000 + k / 100_000) % files;
        // Sizes log-uniform from 1 KiB to 1 GiB.
        let size = (2f64.powf(10.0 + 20.0 * rng.f64())) as u64;
        let ctime = BASE_TIME + (k / 64) as i64;
        let path = path_of(k);
        let roll = rng.below(1000);
        let (renamed, rewritten, moved) = (
            roll < spec.renamed_per_mille,
            (spec.renamed_per_mille..spec.renamed_per_mille + spec.rewritten_per_mille).contains(&roll),
            (spec.renamed_per_mille + spec.rewritten_per_mille
                ..spec.renamed_per_mille + spec.rewritten_per_mille + spec.moved_per_mille)
                .contains(&roll),
        );
        let text = &mut texts[f];
        if renamed {
            let tmp = entry(format!("{path}.tmp.{k:x}"), k, size, ctime, &mut rng);
            tmp.write_to(text)?;
            CatalogGone { path: tmp.path.clone(), stat: tmp.lstat }.write_to(text)?;
            (sum.records, sum.gone, sum.superseded) = (sum.records + 1, sum.gone + 1, sum.superseded + 1);
        }
        if moved {
            // Another process wrote the file at an old name; this one moved it, then wrote it.
            let old = entry(format!("{path}.old"), k, size, ctime, &mut rng);
            old.write_to(&mut texts[(f + 1) % files])?;
            CatalogGone { path: old.path.clone(), stat: old.lstat }.write_to(&mut texts[f])?;
            // Superseded by the record: across files (same ctime: a tie goes to the record),
            // or in order when there is one file.
            (sum.records, sum.gone, sum.superseded) = (sum.records + 1, sum.gone + 1, sum.superseded + 1);
        }
        let e = entry(path, k, size, ctime, &mut rng);
        if rewritten {
            // An older close of the same file by another process (smaller, a second earlier).
            let mut older = e.clone();
            older.lstat.ctime -= 1;
            older.lstat.size /= 2;
            older.stat = Some(older.lstat);
            older.write_to(&mut texts[(f + 1) % files])?;
            sum.records += 1;
        }
        e.write_to(&mut texts[f])?;
        sum.records += 1;
    }
    for (i, t) in texts.iter().enumerate() {
        let name = dir.join(format!("catalog.node{:02}.{}.txt", i % 16, 4000 + i));
        std::fs::write(&name, t).map_err(|source| CatalogError::Io { path: name.clone(), source })?;
        sum.bytes += t.len() as u64;
    }
    Ok(sum)
}
