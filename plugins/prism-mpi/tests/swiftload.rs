//! `swiftload` under real MPI (`mpirun --oversubscribe`): every byte read exactly once with the
//! checksum of a sequential read, the loader's caps held, the baseline compared under the
//! contention model, profiling, errors, and the catalog agent's catalog end to end.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};

mod common;
use common::{agent, mpirun, s, summary_of};

use icicle_plugins_prism::dataset::{sequential_checksum, write_dataset, DatasetSpec};
use icicle_plugins_prism::layout::EmulatedLayouts;
use icicle_plugins_prism::LoaderConfig;

fn summary(out: &Output) -> serde_json::Value {
    summary_of(out, "swiftload")
}

/// swiftload on `np` ranks with `policy` under the contention emulator: the catalog, the input
/// directory, the model (the loader configuration and the emulated speeds) and the clock's
/// directory; rank 0's summary.
fn emulated(np: usize, policy: &str, [catalog, input, model, clock]: [&str; 4]) -> serde_json::Value {
    let args = [
        "--catalog",
        catalog,
        "--input-dir",
        input,
        "--policy",
        policy,
        "--loader-config",
        model,
        "--emulate",
        model,
        "--clock-dir",
        clock,
    ];
    summary(&mpirun(np, &args))
}

fn counts(v: &serde_json::Value) -> BTreeMap<String, u64> {
    v.as_object().unwrap().iter().map(|(k, n)| (k.clone(), n.as_u64().unwrap())).collect()
}

#[test]
fn both_policies_read_every_byte_once_and_the_object_policy_holds_the_loader_caps() {
    let tmp = tempfile::tempdir().unwrap();
    let layouts = EmulatedLayouts::parse("pool=113,204,7,4000,86;stripe_size=256K;pfl=512K:1,2M:2,EOF:3").unwrap();
    let spec = DatasetSpec { files: 20, min_size: 0, max_size: 2_600_000, seed: 11, layouts };
    let data = tmp.path().join("data");
    let catalog = tmp.path().join("catalog");
    let ds = write_dataset(&data, &catalog.join("catalog.a.1.txt"), &spec).unwrap();
    // A second catalog file with one bad entry and a file outside the input dir.
    std::fs::write(
        catalog.join("catalog.a.2.txt"),
        "lstat\n/elsewhere/x\nst_mode:100644; st_size:1\nstat\nNone\nlayout\n/elsewhere/x 7 0 1 1 1 1\nend\nlstat\n/bad\nst_mode:100644; st_size:oops\n",
    )
    .unwrap();
    let loader = tmp.path().join("loader.toml");
    // Caps: 113 -> 1, 4000 -> 4, others (default 200) -> 2.
    std::fs::write(
        &loader,
        "[loader]\nper_process_mb_s = 100.0\nmax_processes_per_ost = 8\ndefault_ost_mb_s = 200.0\n[loader.ost_mb_s]\n113 = 100.0\n4000 = 400.0\n",
    )
    .unwrap();
    let (c, d, l) = (s(&catalog), s(&data), s(&loader));

    let obj = summary(&mpirun(8, &["--catalog", c, "--input-dir", d, "--policy", "object", "--loader-config", l]));
    assert_eq!(obj["files"], 20);
    assert_eq!(obj["rejects"], 1);
    assert_eq!(obj["bytes"], ds.bytes);
    assert_eq!(obj["crc32"], format!("{:08x}", ds.crc32));
    assert_eq!(obj["exactly_once"], true);
    assert_eq!(obj["errors"], 0);
    assert_eq!(obj["per_rank_bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).sum::<u64>(), ds.bytes);
    // 8 processes over 5 OSTs (7, 86, 113, 204, 4000), each OST read, 113 by one process
    // only (its limit), none past its limit.
    let per_ost = counts(&obj["per_ost_processes"]);
    assert_eq!(per_ost.len(), 5, "{per_ost:?}");
    assert!(per_ost.values().all(|n| *n >= 1) && per_ost["113"] == 1, "{per_ost:?}");
    let caps = counts(&obj["caps"]);
    assert!(per_ost.iter().all(|(o, n)| *n <= caps[o]), "{per_ost:?} over {caps:?}");
    assert_eq!(obj["over_cap"], 0);

    let file = summary(&mpirun(8, &["--catalog", c, "--input-dir", d, "--policy", "file", "--loader-config", l]));
    assert_eq!(
        (file["bytes"].clone(), file["crc32"].clone(), file["exactly_once"].clone()),
        (obj["bytes"].clone(), obj["crc32"].clone(), serde_json::json!(true))
    );
    // Whole files round-robin ignore the caps: some OST has more readers than it should.
    assert!(file["over_cap"].as_u64().unwrap() > 0, "{file}");
    assert!(file["max_processes_on_an_ost"].as_u64().unwrap() > obj["max_processes_on_an_ost"].as_u64().unwrap());
}

#[test]
fn under_the_contention_emulator_the_object_policy_wins_and_profiling_writes_a_loader() {
    let tmp = tempfile::tempdir().unwrap();
    // Single-stripe files on 4 sparse OSTs; an OST serves two processes' worth.
    let layouts = EmulatedLayouts::parse("pool=113,167,204,231;stripe_size=128K;count=1").unwrap();
    let spec = DatasetSpec { files: 24, min_size: 100_000, max_size: 600_000, seed: 5, layouts };
    let data = tmp.path().join("data");
    let catalog = tmp.path().join("catalog");
    let ds = write_dataset(&data, &catalog.join("c.txt"), &spec).unwrap();
    let model = tmp.path().join("model.toml");
    std::fs::write(&model, "[loader]\nper_process_mb_s = 100.0\ndefault_ost_mb_s = 200.0\n").unwrap();
    let (c, d, m, t) = (s(&catalog), s(&data), s(&model), s(tmp.path()));
    let run = |policy: &str| emulated(8, policy, [c, d, m, t]);
    let obj = run("object");
    let file = run("file");
    for v in [&obj, &file] {
        assert_eq!(v["emulated"], true);
        assert_eq!(
            (v["bytes"].as_u64(), v["crc32"].as_str()),
            (Some(ds.bytes), Some(format!("{:08x}", ds.crc32).as_str()))
        );
    }
    assert_eq!(obj["max_processes_on_an_ost"], 2);
    // The model's makespan of each plan (deterministic; the measured seconds are reported,
    // not asserted).
    let (mo, mf) = (obj["model_seconds"].as_f64().unwrap(), file["model_seconds"].as_f64().unwrap());
    assert!(mo < mf, "object {mo} vs file {mf}");
    // The clock files are gone.
    assert!(!std::fs::read_dir(tmp.path()).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("swiftload-clock")));

    // Profiling: every OST of the catalog gets a speed; the result is a loader configuration.
    let prof = tmp.path().join("profiled.toml");
    let out = mpirun(
        2,
        &[
            "--catalog",
            c,
            "--input-dir",
            d,
            "--emulate",
            m,
            "--clock-dir",
            t,
            "--profile-out",
            s(&prof),
            "--profile-bytes",
            "1000000",
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cfg = LoaderConfig::from_file(&prof).unwrap();
    assert_eq!(cfg.ost_mb_s.keys().cloned().collect::<Vec<_>>(), vec!["113", "167", "204", "231"]);
    assert!(cfg.per_process_mb_s > 0.0 && cfg.ost_mb_s.values().all(|&v| v > 0.0), "{cfg:?}");
    cfg.check(&prof).unwrap();
}

#[test]
fn a_missing_catalog_or_a_bad_policy_stops_every_rank_with_a_clear_error() {
    let out = mpirun(2, &["--catalog", "/nonexistent/catalog", "--input-dir", "/tmp"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/catalog"), "{err}");
    let tmp = tempfile::tempdir().unwrap();
    let out = mpirun(2, &["--catalog", s(tmp.path()), "--input-dir", "/tmp", "--policy", "random"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--policy random"));
    // An unwritable --profile-out: every rank stops with the message (rank 0 used to fail
    // after the profile while the others waited in a barrier).
    let out = Command::new("timeout")
        .args(["60", "mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2"])
        .arg(env!("CARGO_BIN_EXE_swiftload"))
        .args(["--catalog", s(tmp.path()), "--input-dir", "/tmp", "--profile-out", "/nonexistent/dir/loader.toml"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_ne!(out.status.code(), Some(124), "timed out");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--profile-out /nonexistent/dir/loader.toml: cannot be written"), "{err}");
}

#[test]
fn layout_lines_that_disagree_with_the_file_are_rejected_or_clamped_never_walked() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let catalog = tmp.path().join("catalog");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&catalog).unwrap();
    let data = std::fs::canonicalize(&data).unwrap();
    let mut text = String::new();
    for (name, size, lines) in [
        // Lines past the entry's size but within their own file_size field: the tasks come
        // from the rebuilt layout, clamped to the 10 bytes.
        ("a", 10, vec!["5 0 20 1 1 20"]),
        // The catalog's size is not the file's: skipped.
        ("b", 5, vec!["5 0 5 1 1 5"]),
        // An end of 2^64-1 for a 10-byte file: rejected by the reader (this used to walk
        // ~2^64 chunks).
        ("c", 10, vec!["5 0 18446744073709551615 1 1 10"]),
        // A stripe size of 2^40: rejected by the reader.
        ("d", 10, vec!["5 0 10 1099511627776 1099511627776 10"]),
        ("e", 10, vec!["5 0 10 4 2 10", "6 2 10 4 2 10"]),
    ] {
        let p = data.join(name);
        std::fs::write(&p, b"0123456789").unwrap();
        let p = p.to_str().unwrap();
        text.push_str(&format!(
            "lstat\n{p}\nst_mode:100644; st_size:{size}\nstat\n{p}\nst_mode:100644; st_size:{size}\nlayout\n"
        ));
        for l in lines {
            text.push_str(&format!("{p} {l}\n"));
        }
        text.push_str("end\n");
    }
    std::fs::write(catalog.join("c.txt"), text).unwrap();
    let out = Command::new("timeout")
        .args(["120", "mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2"])
        .arg(env!("CARGO_BIN_EXE_swiftload"))
        .args(["--catalog", s(&catalog), "--input-dir", s(&data)])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .output()
        .unwrap();
    let v = summary(&out);
    assert_eq!(v["files"], 2, "{v}");
    assert_eq!(v["rejects"], 3, "{v}");
    assert_eq!(v["bytes"], 20);
    assert_eq!(v["errors"], 0);
    assert_eq!(v["exactly_once"], true);
}

#[test]
fn files_written_under_the_agent_are_read_back_by_swiftload() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("run");
    let catalog = tmp.path().join("catalog");
    std::fs::create_dir_all(&data).unwrap();
    // An "application": a shell writing 12 files of 0.1-3.3 MB.
    let st = Command::new("sh")
        .arg("-c")
        .arg("cd \"$1\" && i=0; while [ $i -lt 12 ]; do head -c $(( (i * 277 + 100) * 1000 )) /dev/urandom > out.$i; i=$((i+1)); done")
        .arg("sh")
        .arg(&data)
        .env("LD_PRELOAD", agent())
        .env("CATALOG_DIR", &catalog)
        .env("ICICLE_CATALOG_ROOT", &data)
        .env("ICICLE_CATALOG_LAYOUT", "emulate")
        .env("ICICLE_EMULATED_LAYOUT", "pool=113,167,204,10,60,86;stripe_size=256K;pfl=1M:1,EOF:3")
        .status()
        .unwrap();
    assert!(st.success());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&data).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert_eq!(files.len(), 12);
    let (bytes, crc) = sequential_checksum(&files).unwrap();
    let v = summary(&mpirun(4, &["--catalog", s(&catalog), "--input-dir", s(&data)]));
    assert_eq!(v["files"], 12);
    assert_eq!(v["rejects"], 0);
    assert_eq!((v["bytes"].as_u64(), v["crc32"].as_str()), (Some(bytes), Some(format!("{crc:08x}").as_str())));
    assert_eq!(v["exactly_once"], true);
}

#[test]
fn a_compact_catalog_reads_the_same_bytes_as_its_text_form() {
    let tmp = tempfile::tempdir().unwrap();
    let layouts = EmulatedLayouts::parse("pool=113,204,7;stripe_size=256K;pfl=512K:1,EOF:2").unwrap();
    let spec = DatasetSpec { files: 12, min_size: 0, max_size: 1_500_000, seed: 23, layouts };
    let (data, text, compact) = (tmp.path().join("data"), tmp.path().join("text"), tmp.path().join("compact"));
    let ds = write_dataset(&data, &text.join("catalog.t.1.txt"), &spec).unwrap();
    std::fs::create_dir_all(&compact).unwrap();
    let cat = icicle_plugins_prism::Catalog::read_dir(&text).unwrap();
    icicle_plugins_prism::catalog::compact::write_compact(&cat, &compact.join("catalog.all.icat")).unwrap();
    let want = format!("{:08x}", ds.crc32);
    for (dir, extra) in [(&text, None), (&compact, None), (&compact, Some("--trust-catalog"))] {
        let mut args = vec!["--catalog", s(dir), "--input-dir", s(&data)];
        args.extend(extra);
        let v = summary(&mpirun(3, &args));
        assert_eq!(
            (v["crc32"].as_str(), v["bytes"].as_u64(), v["files"].as_u64()),
            (Some(want.as_str()), Some(ds.bytes), Some(12)),
            "{args:?}"
        );
        assert!(v["catalog_load_seconds"].as_f64().is_some() && v["size_check_seconds"].as_f64().is_some(), "{v}");
    }
}

/// `swiftload-sweep --plot` draws the curves: a 1200 × 520 PNG with an object-level (blue)
/// and a file-level (red) line in each app's panel, beside the JSON rows.
#[test]
fn the_sweep_draws_its_curves() {
    let tmp = tempfile::tempdir().unwrap();
    let png = tmp.path().join("sweep.png");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_swiftload-sweep"))
        .args(["--loaders", "8,16,32", "--plot"])
        .arg(&png)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 6, "{v}");
    let decoder = png::Decoder::new(std::fs::File::open(&png).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1200, 520));
    assert_eq!(info.color_type, png::ColorType::Rgb);
    // Pixels of each line's colour in the left and the right panel.
    let count = |rgb: [u8; 3], left: bool| {
        buf.chunks(3)
            .enumerate()
            .filter(|(i, px)| *px == rgb && ((*i as u32 % info.width) < info.width / 2) == left)
            .count()
    };
    for left in [true, false] {
        assert!(count([31, 119, 180], left) > 300, "no object-level line (left panel: {left})");
        assert!(count([214, 39, 40], left) > 300, "no file-level line (left panel: {left})");
    }
}

/// With `--mds-ops-per-s` the file-level rows carry the namespace walk (files and
/// directories at the MDS's rate, or the loaders' when fewer) and the object-level rows the
/// catalog load, each on top of the same reading time.
#[test]
fn the_sweep_adds_the_walk_to_file_level_and_the_catalog_to_object_level() {
    let sweep = |extra: &[&str]| -> Vec<serde_json::Value> {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_swiftload-sweep"))
            .args(["--loaders", "2,24", "--compute-mb-s", "100"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["rows"].as_array().unwrap().clone()
    };
    let plain = sweep(&[]);
    let meta = sweep(&["--mds-ops-per-s", "1000", "--mds-op-ms", "1", "--catalog-s-per-entry", "0.001"]);
    for (p, m) in plain.iter().zip(&meta) {
        let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
        assert_eq!((f(p, "file_metadata_seconds"), f(p, "object_metadata_seconds")), (0.0, 0.0));
        // dedup: 2,000 files in one directory; augment: 6 files at the top. 2 loaders issue
        // 2,000 calls/s, above the MDS's 1,000.
        let files = if m["app"].as_str().unwrap().starts_with("dedup") { 2000.0 } else { 6.0 };
        assert!((f(m, "file_metadata_seconds") - (files + 1.0) / 1000.0).abs() < 1e-9, "{m}");
        assert!((f(m, "object_metadata_seconds") - files * 0.001).abs() < 1e-9, "{m}");
        assert!((f(m, "file_seconds") - f(p, "file_seconds") - f(m, "file_metadata_seconds")).abs() < 1e-9, "{m}");
        assert!((f(m, "object_seconds") - f(p, "object_seconds") - f(m, "object_metadata_seconds")).abs() < 1e-9);
    }
}

/// The conditions docs/prism.md states for the seed's figures give them: Python-speed loaders
/// uncapped by a cap meant for fast ones scale CIFAR-10 linearly from 24 to 192 loaders (the
/// seed: 47.8 s to 5.3 s), and a 47.6 s namespace walk puts dedup's best gain near 5.63×.
#[test]
fn the_model_gives_the_seeds_figures_under_the_stated_conditions() {
    let rows = |args: &[&str]| -> Vec<serde_json::Value> {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_swiftload-sweep")).args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["rows"].as_array().unwrap().clone()
    };
    let of = |rows: &[serde_json::Value], app: &str, k: &str| -> Vec<f64> {
        rows.iter().filter(|r| r["app"].as_str().unwrap().starts_with(app)).map(|r| r[k].as_f64().unwrap()).collect()
    };
    let cifar = rows(&["--compute-mb-s", "0.16", "--cap", "64"]);
    let object = of(&cifar, "augment", "object_seconds");
    assert!((object[0] / object[3] - 8.0).abs() < 0.5 && (object[3] - 6.56).abs() < 0.1, "{object:?}");
    let dedup = rows(&["--compute-mb-s", "650", "--mds-ops-per-s", "42"]);
    let (o, f) = (of(&dedup, "dedup", "object_seconds"), of(&dedup, "dedup", "file_seconds"));
    let best = o.iter().zip(&f).map(|(o, f)| f / o).fold(0.0, f64::max);
    assert!((best - 5.68).abs() < 0.1, "object {o:?} file {f:?}");
    assert!(of(&dedup, "dedup", "file_metadata_seconds").iter().all(|w| (w - 47.64).abs() < 0.01));
}

/// `--help` and `--version` answer (exit 0) for every binary of the package.
#[test]
fn the_binaries_answer_help_and_version() {
    for (name, exe) in [
        ("swiftload", env!("CARGO_BIN_EXE_swiftload")),
        ("swiftload", env!("CARGO_BIN_EXE_swiftload_tool")),
        ("swiftload-bench", env!("CARGO_BIN_EXE_swiftload-bench")),
        ("swiftload-sweep", env!("CARGO_BIN_EXE_swiftload-sweep")),
    ] {
        for flag in ["--help", "--version"] {
            let out = std::process::Command::new(exe).arg(flag).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success() && text.contains(name), "{name} {flag}: {text}");
        }
    }
}

/// The seed's two steps, verbatim, in a directory holding the agent and the tool under the
/// seed's names (`libcatalog_agent.so`, built so named, and `swiftload_tool`): an application
/// writes its output under the agent, then `mpirun -np 4 ./swiftload_tool --input_dir <data>`
/// reads every byte of it exactly once from the catalog named by `SWIFTLOAD_CATALOG_DIR`. Only
/// the environment adds what Open MPI needs here (root, more ranks than cores).
#[test]
fn the_seeds_two_steps_run_as_written() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path();
    let agent = agent();
    assert_eq!(agent.file_name().unwrap(), "libcatalog_agent.so");
    std::os::unix::fs::symlink(&agent, work.join("libcatalog_agent.so")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_swiftload_tool"), work.join("swiftload_tool")).unwrap();
    let app = work.join("your_application");
    std::fs::write(
        &app,
        "#!/bin/sh\nmkdir -p results\ni=0\nwhile [ $i -lt 9 ]; do head -c $(( (i * 331 + 50) * 1000 )) /dev/urandom > results/part.$i; i=$((i+1)); done\n",
    )
    .unwrap();
    std::fs::set_permissions(&app, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let step = |script: &str| {
        let out = Command::new("sh")
            .args(["-c", script])
            .current_dir(work)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
            .env("OMPI_MCA_hwloc_base_binding_policy", "none")
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
            .env_remove("SWIFTLOAD_CATALOG_DIR")
            .env_remove("CATALOG_DIR")
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
        out
    };
    step("export CATALOG_DIR=./catalog\nLD_PRELOAD=./libcatalog_agent.so  ./your_application");
    let out = step("export SWIFTLOAD_CATALOG_DIR=./catalog\nmpirun -np 4 ./swiftload_tool --input_dir results");
    let v = summary(&out);
    let mut files: Vec<PathBuf> = std::fs::read_dir(work.join("results")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert_eq!(files.len(), 9);
    let (bytes, crc) = sequential_checksum(&files).unwrap();
    assert_eq!((v["files"].as_u64(), v["rejects"].as_u64()), (Some(9), Some(0)), "{v}");
    assert_eq!((v["bytes"].as_u64(), v["crc32"].as_str()), (Some(bytes), Some(format!("{crc:08x}").as_str())), "{v}");
    assert_eq!(v["exactly_once"], true);
}

/// Measured under the contention emulator at 4, 8 and 16 ranks, in the order the model gives:
/// three files of 8 MiB striped 4 ways over 8 OSTs (20 MB/s each; a process pulls 10 MB/s).
/// Whole files keep three ranks busy, objects every rank: the model says object-level is
/// faster at each count (1.3× at 4 ranks, more beyond), and the measured read times agree.
/// The emulator's clock makes each read last about a second or more, far above the noise of
/// starting the ranks; the times themselves are not asserted, only their order.
#[test]
fn measured_runs_under_the_emulator_follow_the_models_ordering() {
    let tmp = tempfile::tempdir().unwrap();
    let layouts = EmulatedLayouts::parse("pool=10,20,30,40,50,60,70,80;stripe_size=256K;count=4").unwrap();
    let spec = DatasetSpec { files: 3, min_size: 8 << 20, max_size: 8 << 20, seed: 3, layouts };
    let data = tmp.path().join("data");
    let catalog = tmp.path().join("catalog");
    let ds = write_dataset(&data, &catalog.join("c.txt"), &spec).unwrap();
    let model = tmp.path().join("model.toml");
    std::fs::write(&model, "[loader]\nper_process_mb_s = 10.0\ndefault_ost_mb_s = 20.0\n").unwrap();
    let (c, d, m, t) = (s(&catalog), s(&data), s(&model), s(tmp.path()));
    for np in [4, 8, 16] {
        let run = |policy: &str| emulated(np, policy, [c, d, m, t]);
        let (object, file) = (run("object"), run("file"));
        for v in [&object, &file] {
            assert_eq!(
                (v["bytes"].as_u64(), v["exactly_once"].as_bool()),
                (Some(ds.bytes), Some(true)),
                "np {np}: {v}"
            );
        }
        let (mo, mf) = (object["model_seconds"].as_f64().unwrap(), file["model_seconds"].as_f64().unwrap());
        let (so, sf) = (object["seconds"].as_f64().unwrap(), file["seconds"].as_f64().unwrap());
        eprintln!("np {np}: model object {mo:.3} s, file {mf:.3} s; measured object {so:.3} s, file {sf:.3} s");
        assert!(mo < mf, "np {np}: the model has object {mo} s, file {mf} s");
        assert!(
            so < sf,
            "np {np}: measured object {so:.3} s against file {sf:.3} s, where the model has {mo:.3} and {mf:.3}"
        );
    }
}
