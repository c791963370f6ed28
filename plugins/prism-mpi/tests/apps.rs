//! `swiftload --app dedup` and `--app augment` under real MPI (`mpirun --oversubscribe`): the
//! dedup counts of a sequential reference (the `fastcdc` and `blake3` crates over whole files)
//! for -np 1, 2, 4 and both policies over many seeds; augmented batches byte-identical for
//! -np 1, 2, 4 and both policies, and equal to the library applied to each whole file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

mod common;
use common::{mpirun, s, summary_of as summary};

use icicle_plugins_prism::augment::{augment_batch, file_key, RECORD_BYTES};
use icicle_plugins_prism::catalog::{CatalogEntry, StatFields};
use icicle_plugins_prism::dataset::{write_duplicated_dataset, DatasetSpec};
use icicle_plugins_prism::layout::EmulatedLayouts;

/// `[chunks, bytes, distinct chunks, distinct bytes]` of `files` cut whole, one after another.
fn reference(files: &[PathBuf], chunking: &str) -> [u64; 4] {
    let (kind, n) = chunking.split_once(':').unwrap();
    let n: usize = n.parse().unwrap();
    let mut seen: HashMap<[u8; 16], ()> = HashMap::new();
    let mut out = [0u64; 4];
    for f in files {
        let data = std::fs::read(f).unwrap();
        let chunks: Vec<&[u8]> = match kind {
            "fixed" => data.chunks(n).collect(),
            _ => fastcdc::v2020::FastCDC::new(&data, n as u32 / 4, n as u32, n as u32 * 4)
                .map(|c| &data[c.offset..c.offset + c.length])
                .collect(),
        };
        for c in chunks {
            let mut fp = [0u8; 16];
            fp.copy_from_slice(&blake3::hash(c).as_bytes()[..16]);
            out[0] += 1;
            out[1] += c.len() as u64;
            if seen.insert(fp, ()).is_none() {
                out[2] += 1;
                out[3] += c.len() as u64;
            }
        }
    }
    out
}

#[test]
fn dedup_counts_equal_a_sequential_reference_for_any_ranks_and_policy() {
    let chunkings = ["fixed:4096", "fixed:100000", "cdc:4096", "cdc:16384"];
    let seeds: Vec<u64> = (0..6).map(|i| 0xded0 + i * 7919).collect();
    let mut fixups = 0;
    for seed in seeds {
        let tmp = tempfile::tempdir().unwrap();
        let (data, catalog) = (tmp.path().join("data"), tmp.path().join("catalog"));
        // Small stripes, so chunks of every chunking straddle stripes and the CDC lead-in
        // (64 KiB for cdc:16384) is as long as a stripe.
        let layouts = EmulatedLayouts::parse("pool=1,2,3,4;stripe_size=64K;pfl=256K:1,1M:2,EOF:3").unwrap();
        let spec = DatasetSpec { files: 10, min_size: 0, max_size: 1_500_000, seed, layouts };
        let ds = write_duplicated_dataset(&data, &catalog.join("catalog.d.1.txt"), &spec, 12).unwrap();
        let want: Vec<[u64; 4]> = chunkings.iter().map(|c| reference(&ds.paths, c)).collect();
        assert!(want[2][2] < want[2][0], "seed {seed}: the dataset has duplicate CDC chunks");
        for (np, policy) in [(1, "object"), (2, "object"), (4, "object"), (3, "file")] {
            let what = format!("seed {seed}, -np {np}, --policy {policy}");
            let v = summary(
                &mpirun(
                    np,
                    &[
                        "--app",
                        "dedup",
                        "--catalog",
                        s(&catalog),
                        "--input-dir",
                        s(&data),
                        "--policy",
                        policy,
                        "--chunking",
                        &chunkings.join(","),
                    ],
                ),
                &what,
            );
            assert_eq!(v["bytes"].as_u64(), Some(ds.bytes), "{what}");
            fixups += v["boundary_fixups"].as_u64().unwrap();
            for (i, c) in chunkings.iter().enumerate() {
                let got = &v["schemes"][i];
                assert_eq!(got["chunking"].as_str(), Some(*c), "{what}");
                let counts = ["chunks", "bytes", "distinct_chunks", "distinct_bytes"].map(|k| got[k].as_u64().unwrap());
                assert_eq!(counts, want[i], "{what}, {c}");
            }
        }
    }
    // Some stripe boundaries were not settled by the lead-in: rank 0's own cuts were exercised.
    assert!(fixups > 0, "no boundary needed rank 0's cuts");
}

/// CIFAR-10-format batches (label byte, then 3,072 pixel bytes) and their catalog.
fn cifar(dir: &Path, catalog: &Path, batches: usize, records: usize, seed: u64) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    let layouts = EmulatedLayouts::parse("pool=10,11,12;stripe_size=64K;count=3").unwrap();
    let mut rng = icicle_core::rng::Rng::new(seed);
    let mut text = String::new();
    let mut paths = Vec::new();
    for b in 1..=batches {
        let name = format!("data_batch_{b}.bin");
        let path = dir.join(&name);
        let bytes: Vec<u8> = (0..records)
            .flat_map(|_| {
                std::iter::once(rng.below(10) as u8).chain((0..3072).map(|_| rng.next_u64() as u8)).collect::<Vec<_>>()
            })
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        let st = StatFields::from_metadata(&std::fs::metadata(&path).unwrap());
        let comps = layouts.assign(Path::new(&name), bytes.len() as u64);
        CatalogEntry::new(path.to_string_lossy(), st, Some(st), Some(&comps)).write_to(&mut text).unwrap();
        paths.push(path);
    }
    std::fs::create_dir_all(catalog).unwrap();
    std::fs::write(catalog.join("catalog.c.1.txt"), text).unwrap();
    paths
}

#[test]
fn augmented_batches_are_identical_for_any_ranks_and_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, catalog) = (tmp.path().join("cifar"), tmp.path().join("catalog"));
    let inputs = cifar(&data, &catalog, 3, 400, 0xc1fa);
    let seed = "4242";
    let mut outputs: Vec<Vec<Vec<u8>>> = Vec::new();
    for (np, policy) in [(1, "object"), (2, "object"), (4, "object"), (3, "file")] {
        let out = tmp.path().join(format!("out-{np}-{policy}"));
        let what = format!("-np {np}, --policy {policy}");
        let v = summary(
            &mpirun(
                np,
                &[
                    "--app",
                    "augment",
                    "--catalog",
                    s(&catalog),
                    "--input-dir",
                    s(&data),
                    "--policy",
                    policy,
                    "--seed",
                    seed,
                    "--output-dir",
                    s(&out),
                ],
            ),
            &what,
        );
        assert_eq!(v["records"].as_u64(), Some(1200), "{what}");
        outputs.push(inputs.iter().map(|p| std::fs::read(out.join(p.file_name().unwrap())).unwrap()).collect());
    }
    for o in &outputs[1..] {
        assert!(o == &outputs[0], "augmented batches differ between runs");
    }
    for (p, got) in inputs.iter().zip(&outputs[0]) {
        let input = std::fs::read(p).unwrap();
        let mut want = vec![0u8; input.len()];
        let key = file_key(p.file_name().unwrap().to_str().unwrap());
        assert_eq!(augment_batch(4242, key, 0, &input, &mut want).unwrap(), input.len() / RECORD_BYTES);
        assert!(got == &want, "{}: not the library's augmentation of the whole file", p.display());
        assert!(got != &input, "{}: nothing was transformed", p.display());
        assert!(got.chunks(RECORD_BYTES).zip(input.chunks(RECORD_BYTES)).all(|(a, b)| a[0] == b[0]), "labels kept");
    }
    // Another seed, other pixels.
    let out = tmp.path().join("out-seed");
    summary(
        &mpirun(
            2,
            &[
                "--app",
                "augment",
                "--catalog",
                s(&catalog),
                "--input-dir",
                s(&data),
                "--seed",
                "7",
                "--output-dir",
                s(&out),
            ],
        ),
        "seed 7",
    );
    assert!(std::fs::read(out.join("data_batch_1.bin")).unwrap() != outputs[0][0]);
}

#[test]
fn augment_refuses_partial_records_and_a_missing_output_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, catalog) = (tmp.path().join("cifar"), tmp.path().join("catalog"));
    cifar(&data, &catalog, 1, 10, 1);
    let out = mpirun(2, &["--app", "augment", "--catalog", s(&catalog), "--input-dir", s(&data)]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--output-dir"), "{}", String::from_utf8_lossy(&out.stderr));
    // A file that is not whole records is named.
    let odd = data.join("data_batch_1.bin");
    let mut bytes = std::fs::read(&odd).unwrap();
    bytes.truncate(bytes.len() - 5);
    std::fs::write(&odd, &bytes).unwrap();
    let st = StatFields::from_metadata(&std::fs::metadata(&odd).unwrap());
    let comps =
        EmulatedLayouts::parse("pool=10;stripe_size=64K;count=1").unwrap().assign(Path::new("x"), bytes.len() as u64);
    let mut text = String::new();
    CatalogEntry::new(odd.to_string_lossy(), st, Some(st), Some(&comps)).write_to(&mut text).unwrap();
    std::fs::write(catalog.join("catalog.c.1.txt"), text).unwrap();
    let o = tmp.path().join("o");
    let out =
        mpirun(2, &["--app", "augment", "--catalog", s(&catalog), "--input-dir", s(&data), "--output-dir", s(&o)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("data_batch_1.bin") && err.contains("whole number"), "{err}");
}
