//! `icicle-bench` runs: the in-process monitor benchmarks on a small generated stream print
//! one JSON line with their throughput, peak memory and exact record counts.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// A binary of the workspace beside `icicle` (`cargo test --workspace` builds them all).
fn binary(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name(name);
    assert!(p.exists(), "build {name} first (cargo build --workspace)");
    p
}

fn run(bin: &Path, args: &[&str]) -> String {
    let out = Command::new(bin).args(args).output().unwrap();
    assert!(out.status.success(), "{} {args:?}: {}", bin.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_monitor_benchmarks_report_throughput_memory_and_counts() {
    let tmp = test_dir();
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
    for (format, input, extra, n) in [("lustre", &cl, vec!["--fid-map", fidmap.as_str()], records), ("gpfs", &ev, vec![], events)] {
        let mut args = vec!["monitor", "--format", format, "--input", input.to_str().unwrap()];
        args.extend(extra);
        let line: serde_json::Value = serde_json::from_str(run(&bench, &args).trim()).unwrap();
        let input_count = line["records"].as_u64().or(line["events"].as_u64()).unwrap_or(0);
        assert_eq!(input_count, n, "{format}: {line}");
        assert!(line["peak_rss_bytes"].as_u64().unwrap_or(0) > 0, "{format}: {line}");
        assert!(line["updates"].as_u64().unwrap_or(0) > 0, "{format}: {line}");
    }
}
