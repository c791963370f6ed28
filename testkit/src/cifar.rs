//! CIFAR-10-format datasets without a download: `data_batch_1.bin` .. `data_batch_N.bin` (and
//! `batches.meta.txt`, the class names, as the real `cifar-10-batches-bin` holds), each record
//! one label byte (0..=9) and 3,072 pixel bytes (the red, green and blue 32x32 planes, row-major).
//!
//! The images are structured so augmentations show: a background gradient (horizontal,
//! vertical, diagonal or radial) in a random colour, a shape chosen by the label (rectangle,
//! disc, triangle, off-centre bar, L) in a brighter colour at a random place, and a little
//! noise. Labels, colours, places and noise come from [`Rng`] seeded by (seed, batch, record),
//! in integer arithmetic only: the same seed writes the same bytes on every machine.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use icicle_core::rng::Rng;

/// Bytes in one record: 1 label byte and 3 x 32 x 32 pixel bytes.
pub const CIFAR_RECORD_BYTES: usize = 3073;
/// Records in a real CIFAR-10 batch file.
pub const CIFAR_RECORDS_PER_BATCH: usize = 10_000;
/// The ten class names, in label order (`batches.meta.txt`).
pub const CIFAR_CLASSES: [&str; 10] =
    ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"];

const SIDE: usize = 32;
const PLANE: usize = SIDE * SIDE;

/// The `batch`-th batch's file name (`data_batch_1.bin` for batch 1).
pub fn batch_name(batch: usize) -> String {
    format!("data_batch_{batch}.bin")
}

/// One record (label and pixels) of batch `batch`, record `index`, under `seed`.
pub fn cifar_record(seed: u64, batch: u64, index: u64) -> [u8; CIFAR_RECORD_BYTES] {
    let mut rng = Rng::new(
        seed ^ batch.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29),
    );
    let label = rng.below(10) as u8;
    let mut rec = [0u8; CIFAR_RECORD_BYTES];
    rec[0] = label;
    let background: [i64; 3] = std::array::from_fn(|_| rng.below(128) as i64);
    let ink: [i64; 3] =
        std::array::from_fn(|c| 128 + rng.below(128) as i64 - if c == usize::from(label % 3) { 0 } else { 60 });
    let gradient = rng.below(4);
    let steep = 1 + rng.below(3) as i64;
    let size = 6 + rng.below(9) as i64;
    let (cx, cy) = (
        size / 2 + rng.below((SIDE as i64 - size) as u64) as i64,
        size / 2 + rng.below((SIDE as i64 - size) as u64) as i64,
    );
    for y in 0..SIDE as i64 {
        for x in 0..SIDE as i64 {
            let ramp = match gradient {
                0 => x,
                1 => y,
                2 => (x + y) / 2,
                _ => ((x - 16).abs() + (y - 16).abs()) / 2,
            } * steep;
            let inside = in_shape(label, x - cx, y - cy, size);
            for c in 0..3 {
                let noise = rng.below(17) as i64 - 8;
                let v = if inside { ink[c] } else { background[c] + ramp } + noise;
                rec[1 + c * PLANE + y as usize * SIDE + x as usize] = v.clamp(0, 255) as u8;
            }
        }
    }
    rec
}

/// Whether (dx, dy) from the shape's centre is inside the shape of class `label` of `size`.
fn in_shape(label: u8, dx: i64, dy: i64, size: i64) -> bool {
    let h = size / 2;
    match label % 5 {
        0 => dx.abs() <= h && dy.abs() <= h / 2 + 1,
        1 => dx * dx + dy * dy <= h * h,
        // A right triangle with its right angle at the bottom left: not symmetric either way.
        2 => dx >= -h && dy <= h && dx <= dy,
        3 => (0..=2).contains(&(dx - h / 2)) && dy.abs() <= h,
        _ => (dx.abs() <= h && (h - 2..=h).contains(&dy)) || ((-h..=-h + 2).contains(&dx) && dy.abs() <= h),
    }
}

/// Write one batch file of `records` records (batch number `batch` under `seed`).
pub fn write_cifar_batch(path: &Path, records: usize, seed: u64, batch: u64) -> std::io::Result<()> {
    let mut w = BufWriter::new(std::fs::File::create(path)?);
    for i in 0..records {
        w.write_all(&cifar_record(seed, batch, i as u64))?;
    }
    w.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// Write `data_batch_1.bin` .. `data_batch_{batches}.bin` of `records_per_batch` records each
/// and `batches.meta.txt` into `dir` (created if missing); returns the batch files in order.
/// (A real CIFAR-10 batch holds [`CIFAR_RECORDS_PER_BATCH`] records; 5 batches.)
pub fn write_cifar_dataset(
    dir: &Path,
    batches: usize,
    records_per_batch: usize,
    seed: u64,
) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("batches.meta.txt"), CIFAR_CLASSES.join("\n") + "\n")?;
    let mut paths = Vec::with_capacity(batches);
    for b in 1..=batches {
        let path = dir.join(batch_name(b));
        write_cifar_batch(&path, records_per_batch, seed, b as u64)?;
        paths.push(path);
    }
    Ok(paths)
}

/// Write `test_batch.bin` of `records` records into `dir` (batch number 0 under `seed`).
pub fn write_cifar_test_batch(dir: &Path, records: usize, seed: u64) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("test_batch.bin");
    write_cifar_batch(&path, records, seed, 0)?;
    Ok(path)
}

/// Read a batch file's records; a length that is not a whole number of records is
/// `InvalidData` naming the file.
pub fn read_cifar_batch(path: &Path) -> std::io::Result<Vec<[u8; CIFAR_RECORD_BYTES]>> {
    let bytes = std::fs::read(path)?;
    let (records, rest) = bytes.as_chunks::<CIFAR_RECORD_BYTES>();
    if !rest.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{}: {} bytes is not a whole number of {CIFAR_RECORD_BYTES}-byte records",
                path.display(),
                bytes.len()
            ),
        ));
    }
    Ok(records.to_vec())
}

/// Write one record's image as a binary PPM (P6, 32x32), to look at an augmentation.
pub fn write_ppm(path: &Path, record: &[u8; CIFAR_RECORD_BYTES]) -> std::io::Result<()> {
    let mut out = format!("P6\n{SIDE} {SIDE}\n255\n").into_bytes();
    for i in 0..PLANE {
        out.extend((0..3).map(|c| record[1 + c * PLANE + i]));
    }
    std::fs::write(path, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cifar_dataset_is_deterministic_and_well_formed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let paths = write_cifar_dataset(&tmp.path().join("a"), 3, 400, 7).expect("write");
        let names: Vec<_> = paths.iter().filter_map(|p| p.file_name()?.to_str()).collect();
        assert_eq!(names, ["data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin"]);
        let again = write_cifar_dataset(&tmp.path().join("b"), 3, 400, 7).expect("write");
        let other = write_cifar_dataset(&tmp.path().join("c"), 1, 400, 8).expect("write");
        let mut labels = [0usize; 10];
        for (p, q) in paths.iter().zip(&again) {
            let bytes = std::fs::read(p).expect("read");
            assert_eq!(bytes.len(), 400 * CIFAR_RECORD_BYTES);
            assert_eq!(bytes, std::fs::read(q).expect("read"), "same seed, same bytes");
            for rec in read_cifar_batch(p).expect("whole records") {
                labels[usize::from(rec[0])] += 1;
            }
        }
        assert!(labels.iter().all(|&n| n > 80), "every class appears: {labels:?}");
        assert_ne!(std::fs::read(&paths[0]).ok(), std::fs::read(&other[0]).ok(), "another seed, other bytes");
        assert_ne!(std::fs::read(&paths[0]).ok(), std::fs::read(&paths[1]).ok(), "batches differ");
        let meta = std::fs::read_to_string(tmp.path().join("a/batches.meta.txt")).expect("meta");
        assert_eq!(meta.lines().count(), 10);
        let test = write_cifar_test_batch(tmp.path(), 5, 7).expect("test batch");
        assert_eq!(read_cifar_batch(&test).expect("records").len(), 5);
    }

    #[test]
    fn cifar_images_have_structure() {
        for index in 0..50 {
            let rec = cifar_record(1, 1, index);
            // Not flat, and not symmetric left to right (so a flip shows).
            let red = &rec[1..1 + PLANE];
            let (lo, hi) = (red.iter().min().copied().unwrap_or(0), red.iter().max().copied().unwrap_or(0));
            assert!(hi - lo > 40, "record {index}: range {lo}..{hi}");
            let mirrored = (0..PLANE).filter(|&i| red[i] == red[(i / SIDE) * SIDE + SIDE - 1 - i % SIDE]).count();
            assert!(mirrored < PLANE / 2, "record {index}: {mirrored} pixels equal their mirror");
        }
    }

    #[test]
    fn cifar_reader_refuses_partial_records_and_ppm_writes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let p = tmp.path().join("data_batch_1.bin");
        std::fs::write(&p, vec![0u8; CIFAR_RECORD_BYTES + 10]).expect("write");
        let err = read_cifar_batch(&p).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("data_batch_1.bin") && err.contains("3083 bytes"), "{err}");
        let ppm = tmp.path().join("r.ppm");
        write_ppm(&ppm, &cifar_record(1, 1, 0)).expect("ppm");
        assert_eq!(std::fs::read(&ppm).expect("read").len(), "P6\n32 32\n255\n".len() + 3 * PLANE);
    }
}
