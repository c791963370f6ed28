//! `icicle sketch-compare` on a generated snapshot reproduces the seed's finding: DDSketch
//! keeps the mean relative value error below 0.01, the rank sketches do better on rank error;
//! `--seed` makes the measurements reproducible.

mod common;

use common::*;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};

/// The generated snapshot (20,000 files) and a config reading it, its ages measured from
/// `reference` (else from the run's start, or with a seed from the snapshot's newest time).
fn generated_snapshot(tmp: &std::path::Path, reference: Option<i64>) -> (GenFs, std::path::PathBuf) {
    let fs = GenFs::generate(&GenSpec::new(20_000, 3));
    gen::write(&fs, Format::Tsv, &tmp.join("data"), 1_000_000, false).unwrap();
    let aggregate = reference.map(|r| format!("[aggregate]\nreference_time = {r}\n")).unwrap_or_default();
    let cfg = config(
        tmp,
        "c.toml",
        &format!(
            "{aggregate}[sources.s]\ntype = \"tsv\"\npaths = [\"{}/data/*.csv\"]\npreset = \"icicle9\"\n",
            tmp.display()
        ),
    );
    (fs, cfg)
}

#[test]
fn sketch_compare_reproduces_the_value_vs_rank_tradeoff() {
    let tmp = tempfile::tempdir().unwrap();
    let (fs, cfg) = generated_snapshot(tmp.path(), Some(1767225600));
    let out = tmp.path().join("cmp");
    let (code, stdout, err) =
        icicle(&["sketch-compare", "-c", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("| ddsketch |"), "{stdout}");
    let principals = fs.users.len() + fs.groups.len();
    let measurements = std::fs::read_to_string(out.join("measurements.csv")).unwrap();
    assert_eq!(measurements.lines().count(), 1 + principals * 4 * 6 * 4);
    // Both charts, 1200 px wide (PNG: width in the IHDR chunk, bytes 16..20).
    for chart in ["value-vs-rank-error.png", "error-distributions.png"] {
        let png = std::fs::read(out.join(chart)).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{chart}");
        assert_eq!(u32::from_be_bytes([png[16], png[17], png[18], png[19]]), 1200, "{chart}");
    }
    let summary = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    let overall = |sketch: &str| -> (f64, f64) {
        let line = summary.lines().find(|l| l.starts_with(&format!("{sketch},all,all,"))).unwrap();
        let f: Vec<f64> = line.split(',').skip(3).map(|x| x.parse().unwrap()).collect();
        (f[0], f[3])
    };
    let (dd_value, dd_rank) = overall("ddsketch");
    assert!(dd_value < 0.01, "ddsketch mean value error {dd_value}");
    let rank_sketches = ["kll", "req", "tdigest"].map(overall);
    for (v, _) in rank_sketches {
        assert!(v > dd_value, "rank sketches trade value accuracy: {v} vs {dd_value}");
    }
    let mean_rank = rank_sketches.iter().map(|(_, r)| r).sum::<f64>() / 3.0;
    assert!(mean_rank < dd_rank, "rank sketches should win on rank error: {mean_rank} vs {dd_rank}");
    assert!(overall("kll").1 < dd_rank && overall("tdigest").1 < dd_rank);
    let costs = std::fs::read_to_string(out.join("costs.csv")).unwrap();
    assert_eq!(costs.lines().count(), 5);
}

#[test]
fn sketch_compare_with_a_seed_is_reproducible() {
    let tmp = tempfile::tempdir().unwrap();
    // No reference time configured: a seeded run measures ages from the snapshot's newest
    // time, so runs seconds apart agree byte for byte.
    let (_, cfg) = generated_snapshot(tmp.path(), None);
    let run = |seed: &str, dir: &str| -> (String, String, serde_json::Value) {
        let out = tmp.path().join(dir);
        let (code, _, err) = icicle(
            &["sketch-compare", "-c", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--seed", seed],
            &[],
        );
        assert_eq!(code, 0, "{err}");
        (
            std::fs::read_to_string(out.join("measurements.csv")).unwrap(),
            std::fs::read_to_string(out.join("summary.csv")).unwrap(),
            serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap(),
        )
    };
    let first = run("7", "a");
    // Another second: a reference taken from the clock would move every age.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let again = run("7", "b");
    assert_eq!(first.2["reference"], "the newest time in the snapshot (a seeded run)");
    assert_eq!(first.2["reference_time"], again.2["reference_time"]);
    assert_eq!(first.2["seed"], 7);
    assert!(first.0 == again.0, "--seed 7 twice: measurements.csv differs");
    assert!(first.1 == again.1, "--seed 7 twice: summary.csv differs");
    let other = run("8", "c");
    let rows = |csv: &str, sketch: &str| -> Vec<String> {
        csv.lines().filter(|l| l.starts_with(&format!("{sketch},"))).map(String::from).collect()
    };
    assert!(!rows(&first.0, "kll").is_empty());
    assert_ne!(rows(&first.0, "kll"), rows(&other.0, "kll"), "another seed, other kll measurements");
    // The deterministic sketches do not depend on the seed.
    assert_eq!(rows(&first.0, "ddsketch"), rows(&other.0, "ddsketch"));
}
