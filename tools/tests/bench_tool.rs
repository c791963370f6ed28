//! `icicle-bench` runs: the in-process monitor benchmarks on a small generated stream print
//! one JSON line with their throughput, peak memory and exact record counts.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `icicle-bench`, or a binary of the workspace beside it (`cargo test --workspace` builds
/// `icicle-testkit` for its own tests).
fn binary(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_icicle-bench")).with_file_name(name);
    assert!(p.exists(), "build {name} first (cargo build --workspace)");
    p
}

/// A random seed per run, printed (`ICICLE_TEST_SEED` replays one).
fn test_seed() -> u64 {
    let seed = std::env::var("ICICLE_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos() as u64).unwrap_or(7)
            % 1_000_000
    });
    println!("workload seed {seed} (replay with ICICLE_TEST_SEED={seed})");
    seed
}

fn run(bin: &Path, args: &[&str]) -> String {
    let out = Command::new(bin).args(args).output().unwrap();
    assert!(out.status.success(), "{} {args:?}: {}", bin.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_monitor_benchmarks_report_throughput_memory_and_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (fs, cl, ev) = (t.join("fs"), t.join("j/cl"), t.join("j/ev.jsonl"));
    std::fs::create_dir_all(t.join("j")).unwrap();
    let seed = test_seed().to_string();
    run(
        &binary("icicle-testkit"),
        &[
            "workload",
            "--no-fs",
            "--kind",
            "filebench",
            "--ops",
            "2000",
            "--preexisting",
            "50",
            "--base",
            "/old0",
            "--seed",
            &seed,
            "--root",
            fs.to_str().unwrap(),
            "--journal",
            cl.to_str().unwrap(),
            "--gpfs-events",
            ev.to_str().unwrap(),
        ],
    );
    let records = std::fs::read_to_string(&cl).unwrap().lines().count() as u64;
    let events = std::fs::read_to_string(&ev).unwrap().lines().count() as u64;
    let bench = binary("icicle-bench");
    let fidmap = format!("{}.fidmap", cl.display());
    for (format, input, extra, n) in
        [("lustre", &cl, vec!["--fid-map", fidmap.as_str()], records), ("gpfs", &ev, vec![], events)]
    {
        let mut args = vec!["monitor", "--format", format, "--input", input.to_str().unwrap()];
        args.extend(extra);
        let line: serde_json::Value = serde_json::from_str(run(&bench, &args).trim()).unwrap();
        let input_count = line["records"].as_u64().or(line["events"].as_u64()).unwrap_or(0);
        assert_eq!(input_count, n, "{format}: {line}");
        assert!(line["peak_rss_bytes"].as_u64().unwrap_or(0) > 0, "{format}: {line}");
        assert!(line["updates"].as_u64().unwrap_or(0) > 0, "{format}: {line}");
    }
}

/// `--help` and `--version` answer (exit 0).
#[test]
fn answers_help_and_version() {
    for flag in ["--help", "--version"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_icicle-bench")).arg(flag).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("icicle-bench"), "{flag}: {text}");
    }
}
