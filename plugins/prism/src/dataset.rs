//! Test and benchmark data: files of deterministic content with emulated layouts, and the
//! catalog describing them (what the catalog agent would have written for them).

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::catalog::{CatalogEntry, StatFields};
use crate::layout::EmulatedLayouts;

/// What to generate.
#[derive(Debug, Clone)]
pub struct DatasetSpec {
    /// Number of files.
    pub files: usize,
    /// Smallest file size, bytes.
    pub min_size: u64,
    /// Largest file size, bytes.
    pub max_size: u64,
    /// Seed for sizes and content.
    pub seed: u64,
    /// Layouts given to the files.
    pub layouts: EmulatedLayouts,
}

/// What was generated.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The files, in path order (the catalog's order).
    pub paths: Vec<PathBuf>,
    /// Their total size.
    pub bytes: u64,
    /// CRC-32 of all files' contents concatenated in path order.
    pub crc32: u32,
}

/// Write the files under `data_dir` and their catalog to `catalog_file`.
pub fn write_dataset(data_dir: &Path, catalog_file: &Path, spec: &DatasetSpec) -> std::io::Result<Dataset> {
    write_files(data_dir, catalog_file, spec, |s, size, w| {
        let mut left = size;
        while left > 0 {
            let word = s.next_u64().to_le_bytes();
            let n = left.min(8) as usize;
            w.write_all(&word[..n])?;
            left -= n as u64;
        }
        Ok(())
    })
}

/// [`write_dataset`] with content that repeats itself: each file is a run of pieces, most
/// of them copies of one of `blocks` shared blocks (1 KiB to 96 KiB, cut short at the end of
/// the file), the rest fresh random bytes (up to 20 KiB); the copies start at any byte, so
/// duplicates straddle chunk and stripe boundaries.
pub fn write_duplicated_dataset(
    data_dir: &Path,
    catalog_file: &Path,
    spec: &DatasetSpec,
    blocks: usize,
) -> std::io::Result<Dataset> {
    let mut pool_rng = icicle_core::rng::Rng::new(spec.seed ^ 0xd0_0b1e);
    let pool: Vec<Vec<u8>> = (0..blocks.max(1))
        .map(|_| {
            let n = 1024 + pool_rng.below(95 * 1024) as usize;
            (0..n).map(|_| pool_rng.next_u64() as u8).collect()
        })
        .collect();
    write_files(data_dir, catalog_file, spec, |s, size, w| {
        let mut left = size;
        while left > 0 {
            let piece: Vec<u8> = if s.below(10) < 7 {
                pool[s.below(pool.len() as u64) as usize].clone()
            } else {
                (0..1 + s.below(20 * 1024)).map(|_| s.next_u64() as u8).collect()
            };
            let n = (piece.len() as u64).min(left) as usize;
            w.write_all(&piece[..n])?;
            left -= n as u64;
        }
        Ok(())
    })
}

/// [`write_dataset`] whose files are CIFAR-10-format batches: `spec.min_size` is rounded down
/// to whole 3,073-byte records (a label byte 0-9, then 3,072 pixel bytes) and every file has
/// that size (`max_size` is ignored).
pub fn write_cifar_like_dataset(data_dir: &Path, catalog_file: &Path, spec: &DatasetSpec) -> std::io::Result<Dataset> {
    let record = crate::augment::RECORD_BYTES as u64;
    let size = spec.min_size / record * record;
    let spec = DatasetSpec { min_size: size, max_size: size, ..spec.clone() };
    write_files(data_dir, catalog_file, &spec, |s, size, w| {
        let mut rec = [0u8; crate::augment::RECORD_BYTES];
        for _ in 0..size / record {
            rec[0] = s.below(10) as u8;
            for c in rec[1..].chunks_mut(8) {
                let word = s.next_u64().to_le_bytes();
                c.copy_from_slice(&word[..c.len()]);
            }
            w.write_all(&rec)?;
        }
        Ok(())
    })
}

/// The files (`size` bytes each, contents from `content` given a per-file generator) and
/// their catalog.
fn write_files(
    data_dir: &Path,
    catalog_file: &Path,
    spec: &DatasetSpec,
    mut content: impl FnMut(&mut icicle_core::rng::Rng, u64, &mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<Dataset> {
    std::fs::create_dir_all(data_dir)?;
    let mut rng = icicle_core::rng::Rng::new(spec.seed);
    let mut catalog = String::new();
    let mut paths = Vec::new();
    for i in 0..spec.files {
        let span = spec.max_size.saturating_sub(spec.min_size) + 1;
        let size = spec.min_size + rng.below(span);
        let path = data_dir.join(format!("part-{i:05}.bin"));
        let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
        let mut s = icicle_core::rng::Rng::new(rng.next_u64());
        content(&mut s, size, &mut w)?;
        w.flush()?;
        drop(w);
        let md = std::fs::symlink_metadata(&path)?;
        let st = StatFields::from_metadata(&md);
        // Layouts from the file name (not the full path), so a dataset is the same wherever
        // it is written.
        let comps = spec.layouts.assign(Path::new(&format!("part-{i:05}.bin")), size);
        let entry = CatalogEntry::new(path.to_string_lossy(), st, Some(st), Some(&comps));
        entry.write_to(&mut catalog).map_err(std::io::Error::other)?;
        paths.push(path);
    }
    if let Some(dir) = catalog_file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(catalog_file, catalog)?;
    paths.sort();
    let (bytes, crc32) = sequential_checksum(&paths)?;
    Ok(Dataset { paths, bytes, crc32 })
}

/// Read `paths` front to back, one after the other: (bytes, CRC-32 of the concatenation).
pub fn sequential_checksum(paths: &[PathBuf]) -> std::io::Result<(u64, u32)> {
    use std::io::Read;
    let mut h = crc32fast::Hasher::new();
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for p in paths {
        let mut f = std::fs::File::open(p)?;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            bytes += n as u64;
        }
    }
    Ok((bytes, h.finalize()))
}

/// The seed's two experiments' shapes as layouts only (no data), over `osts` OSTs (indices
/// 0..osts, 1 MiB stripes): CIFAR-10 for augmentation (the 5 training batches and the test
/// batch, 30,730,000 bytes each, striped over 4 OSTs) and an application-output tree for the
/// dedup profiler (2,000 files of 1 MB to 256 MB, log-uniform, PFL 1 to 4 stripes).
pub fn seed_shapes(osts: u32) -> Vec<(&'static str, Vec<icicle_core::traits::ObjectLayout>)> {
    let pool: Vec<String> = (0..osts.max(1)).map(|o| o.to_string()).collect();
    let spec = |extra: &str| EmulatedLayouts::parse(&format!("pool={};stripe_size=1M;{extra}", pool.join(",")));
    let layout = |l: &EmulatedLayouts, name: String, size: u64| icicle_core::traits::ObjectLayout {
        components: l.assign(Path::new(&name), size),
        path: name,
        size,
    };
    let (Ok(cifar), Ok(tree)) = (spec("count=4"), spec("pfl=4M:1,64M:2,EOF:4")) else { return Vec::new() };
    let batches = (1..=6).map(|b| layout(&cifar, format!("data_batch_{b}.bin"), 30_730_000)).collect();
    let mut rng = icicle_core::rng::Rng::new(5_630);
    let outputs = (0..2000)
        .map(|i| {
            let size = (1e6 * 256f64.powf(rng.below(1_000_000) as f64 / 1e6)) as u64;
            layout(&tree, format!("run/out-{i:04}.dat"), size)
        })
        .collect();
    vec![("augment (CIFAR-10)", batches), ("dedup (app outputs)", outputs)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    #[test]
    fn a_dataset_and_its_catalog_agree() {
        let tmp = tempfile::tempdir().unwrap();
        let spec = DatasetSpec {
            files: 5,
            min_size: 0,
            max_size: 3 << 20,
            seed: 42,
            layouts: EmulatedLayouts::parse("pool=113,204,7;stripe_size=256K;pfl=1M:1,EOF:2").unwrap(),
        };
        let ds = write_dataset(&tmp.path().join("data"), &tmp.path().join("cat/catalog.0.txt"), &spec).unwrap();
        let cat = Catalog::read_dir(&tmp.path().join("cat")).unwrap();
        assert!(cat.rejects.is_empty());
        assert_eq!(cat.entries.len(), 5);
        let sizes: u64 = cat.entries.iter().map(|e| e.size()).sum();
        assert_eq!(sizes, ds.bytes);
        for e in &cat.entries {
            let l = e.object_layout().unwrap();
            crate::tasks::validate(&l).unwrap();
            assert!(l.components.iter().flat_map(|c| &c.osts).all(|o| [113, 204, 7].contains(o)));
        }
        // Same seed, same bytes.
        let again = write_dataset(&tmp.path().join("data2"), &tmp.path().join("cat2/c.txt"), &spec).unwrap();
        assert_eq!((again.bytes, again.crc32), (ds.bytes, ds.crc32));
    }
}
