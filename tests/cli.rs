//! The command line: plugin listing, configuration layering and error messages, example configs.

mod common;

use common::*;

#[test]
fn plugins_lists_the_expected_set() {
    let (code, out, _) = icicle(&["plugins", "--json"], &[]);
    assert_eq!(code, 0);
    let v: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let got: Vec<String> =
        v.iter().map(|p| format!("{}:{}", p["kind"].as_str().unwrap(), p["type"].as_str().unwrap())).collect();
    assert_eq!(
        got,
        vec![
            "source:fanotify",
            "source:gpfs",
            "source:gufi",
            "source:inotify",
            "source:lustre",
            "source:mmapplypolicy",
            "source:s3",
            "source:tsv",
            "source:walk",
            "sketch:ddsketch",
            "sketch:exact",
            "sketch:hybrid",
            "sketch:kll",
            "sketch:req",
            "sketch:tdigest",
            "sink:blackhole",
            "sink:file",
            "sink:globus",
            "sink:index",
            "sink:kafka",
            "sink:stdout",
            "placement:file",
            "placement:object",
        ]
    );
    let (code, out, _) = icicle(&["plugins"], &[]);
    assert_eq!(code, 0);
    assert!(out.contains("source:\n  fanotify"), "{out}");
}

#[test]
fn unknown_plugin_types_list_the_available_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), "c.toml", "[sources.x]\ntype = \"lustre-nope\"\n[sinks.y]\ntype = \"stdout\"\n");
    let (code, _, err) = icicle(&["snapshot", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 1);
    assert!(
        err.contains("unknown source type `lustre-nope`")
            && err.contains("available: fanotify, gpfs, gufi, inotify, lustre, mmapplypolicy, s3, tsv, walk"),
        "{err}"
    );
    assert!(err.contains("c.toml"), "{err}");
}

#[test]
fn unknown_keys_in_plugin_sections_name_key_and_file() {
    let tmp = tempfile::tempdir().unwrap();
    let base = config(tmp.path(), "base.toml", "[sinks.y]\ntype = \"stdout\"\n");
    let cfg = config(
        tmp.path(),
        "src.toml",
        "[sources.x]\ntype = \"tsv\"\npaths = [\"a.csv\"]\npreset = \"icicle9\"\ndelimeter = \",\"\n",
    );
    let (code, _, err) = icicle(&["snapshot", "-c", base.to_str().unwrap(), "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown key `sources.x.delimeter`") && err.contains("src.toml"), "{err}");
    let bad_type =
        config(tmp.path(), "t.toml", "[sources.x]\ntype = \"tsv\"\npaths = \"a.csv\"\npreset = \"icicle9\"\n");
    let (code, _, err) = icicle(&["snapshot", "-c", base.to_str().unwrap(), "-c", bad_type.to_str().unwrap()], &[]);
    assert_eq!(code, 1);
    assert!(err.contains("sources.x.paths") && err.contains("t.toml"), "{err}");
}

#[test]
fn unknown_enum_values_list_the_known_ones_with_key_and_file() {
    let tmp = tempfile::tempdir().unwrap();
    let sink = "[sinks.y]\ntype = \"stdout\"\n";
    let cases = [
        ("lustre.toml", "[sources.m]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nmount = \"/mnt\"\nstate_dir = \"s\"\nresolution = \"fast\"\n", "sources.m.resolution", "unknown variant: found `fast`, expected one of `tree`, `fsmonitor`, `naive`"),
        ("gap.toml", "[sources.m]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nmount = \"/mnt\"\nstate_dir = \"s\"\non_gap = \"ignore\"\n", "sources.m.on_gap", "unknown variant: found `ignore`, expected `warn` or `fail`"),
        ("gpfs.toml", "[sources.g]\ntype = \"gpfs\"\ntopic = \"t\"\nfs_root = \"/gpfs\"\nstate_dir = \"s\"\nstart = \"newest\"\nconnection = { bootstrap = \"127.0.0.1:1\" }\n", "sources.g.start", "unknown variant: found `newest`, expected `earliest` or `latest`"),
        ("pairs.toml", "[sources.g]\ntype = \"gpfs\"\ntopic = \"t\"\nfs_root = \"/gpfs\"\nstate_dir = \"s\"\npair_batches = 0\nconnection = { bootstrap = \"127.0.0.1:1\" }\n", "sources.g.pair_batches", "must be at least 1"),
        ("nomdt.toml", "[sources.m]\ntype = \"lustre\"\nmount = \"/mnt\"\nfsname = \"fs0\"\nstate_dir = \"s\"\n", "sources.m.mdt", "or `mdts`"),
        ("mdts.toml", "[sources.m]\ntype = \"lustre\"\nmdts = [\"fs0-MDT0000\", \"\"]\nmount = \"/mnt\"\nfsname = \"fs0\"\nstate_dir = \"s\"\n", "sources.m.mdts", "name each MDT"),
        ("startrec.toml", "[sources.m]\ntype = \"lustre\"\nmdts = [\"fs0-MDT0000\", \"fs0-MDT0001\"]\nstartrec = 7\nmount = \"/mnt\"\nfsname = \"fs0\"\nstate_dir = \"s\"\n", "sources.m.startrec", "each MDT starts"),
        ("unseeded.toml", "[sources.g]\ntype = \"gpfs\"\ntopic = \"t\"\nfs_root = \"/gpfs\"\nstate_dir = \"s\"\nconnection = { bootstrap = \"127.0.0.1:1\" }\n", "sources.g.seed_index", "or `unseeded = true`"),
        ("both.toml", "[sources.g]\ntype = \"gpfs\"\ntopic = \"t\"\nfs_root = \"/gpfs\"\nstate_dir = \"s\"\nseed_index = \"snap\"\nunseeded = true\nconnection = { bootstrap = \"127.0.0.1:1\" }\n", "sources.g.unseeded", "not both"),
    ];
    for (file, text, key, known) in cases {
        let cfg = config(tmp.path(), file, &format!("{text}{sink}"));
        let (code, _, err) = icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &[]);
        assert_ne!(code, 0, "{file}");
        assert!(err.contains(key) && err.contains(known) && err.contains(file), "{file}: {err}");
    }
}

/// The local monitor refuses a state directory inside its root (its own writes would be events
/// without end) and a quiet period that is no number of seconds, naming the key and the file.
#[test]
fn local_monitor_settings_that_cannot_work_name_key_and_file() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = tmp.path().join("fs");
    std::fs::create_dir_all(&fs).unwrap();
    let sink = "[sinks.y]\ntype = \"stdout\"\n";
    let cases = [
        (
            "inside.toml",
            format!("state_dir = \"{}/.icicle/state\"\n", fs.display()),
            "sources.m.state_dir",
            "is inside the root",
        ),
        (
            "quiet.toml",
            format!("state_dir = \"{}/s\"\nquiet_period_secs = 1e30\n", tmp.path().display()),
            "sources.m.quiet_period_secs",
            "from 0 to 86400",
        ),
    ];
    for (file, extra, key, why) in cases {
        let text = format!("[sources.m]\ntype = \"inotify\"\nroot = \"{}\"\n{extra}{sink}", fs.display());
        let cfg = config(tmp.path(), file, &text);
        let (code, _, err) = icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &[]);
        assert_ne!(code, 0, "{file}");
        assert!(err.contains(key) && err.contains(why) && err.contains(file), "{file}: {err}");
    }
}

#[test]
fn layers_defaults_files_env_and_set() {
    let tmp = tempfile::tempdir().unwrap();
    let a = config(tmp.path(), "a.toml", "[snapshot]\nworkers = 3\nmax_batch_bytes = 5000\nsplit_bytes = 1000\n");
    let (code, out, err) = icicle(
        &["config", "show", "-c", a.to_str().unwrap(), "--set", "snapshot.max_batch_bytes=7000"],
        &[("ICICLE__SNAPSHOT__WORKERS", "4"), ("ICICLE__SNAPSHOT__SPLIT_BYTES", "2000")],
    );
    assert_eq!(code, 0, "{err}");
    let v: toml::Table = toml::from_str(&out).unwrap();
    assert_eq!(v["snapshot"]["workers"].as_integer(), Some(4));
    assert_eq!(v["snapshot"]["max_batch_bytes"].as_integer(), Some(7000));
    assert_eq!(v["snapshot"]["split_bytes"].as_integer(), Some(2000));
    assert_eq!(v["snapshot"]["flush_interval_secs"].as_float(), Some(5.0));
    let (code, _, err) = icicle(&["config", "show"], &[("ICICLE__SNAPSHOT__WORKRS", "4")]);
    assert_eq!(code, 1);
    assert!(err.contains("snapshot.workrs") && err.contains("ICICLE__"), "{err}");
}

#[test]
fn every_example_config_runs_on_demo_data() {
    use icicle_testkit::gen::{self, Format, GenFs, GenSpec};
    let tmp = tempfile::tempdir().unwrap();
    let fs = GenFs::generate(&GenSpec::new(800, 1));
    for (f, dir) in
        [(Format::Tsv, "tsv"), (Format::Gufi, "gufi"), (Format::Mmapplypolicy, "mmapplypolicy"), (Format::Tree, "tree")]
    {
        gen::write(&fs, f, &tmp.path().join("demo-data").join(dir), 1_000_000, false).unwrap();
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        // Monitors, and the GPFS monitor's seed snapshot (a walk of the GPFS demo's fileset),
        // run in the_example_gpfs_config_runs_against_the_stand_in_and_the_broker.
        if p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("monitor-") || n == "snapshot-gpfs-seed.toml")
        {
            continue;
        }
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_icicle"));
        cmd.args(["snapshot", "--json", "-c", p.to_str().unwrap()]).current_dir(tmp.path());
        // The Globus example runs against the testkit's emulator (its index id, a token in the env).
        let emulator = p.file_name().is_some_and(|n| n == "snapshot-globus.toml").then(|| {
            let cfg: toml::Table = toml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            let index = cfg["sinks"]["globus"]["index_id"].as_str().unwrap().to_string();
            let emu = GlobusEmulator::spawn(&index, "example-token");
            cmd.args(["--set", &format!("sinks.globus.base_url=http://{}", emu.addr)])
                .env("GLOBUS_SEARCH_TOKEN", "example-token");
            (emu, index)
        });
        // The S3 example reads the demo listing uploaded to a fresh bucket of the test server.
        if p.file_name().is_some_and(|n| n == "snapshot-s3.toml") {
            let cfg: toml::Table = toml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            let prefix = cfg["sources"]["listing"]["prefix"].as_str().unwrap().to_string();
            let url = std::env::var("ICICLE_TEST_S3")
                .or_else(|_| {
                    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/run/s3.addr"))
                        .map(|s| s.trim().to_string())
                })
                .expect("no S3 server: run the tests with scripts/test.sh (or bash scripts/services.sh start)");
            let store = icicle_plugins_s3::ObjectStore::connect(&url, "test", "test").unwrap();
            let bucket = format!("icicle-example-{}-{}", std::process::id(), icicle_core::time::now_epoch());
            store.create_bucket(&bucket).unwrap();
            for f in std::fs::read_dir(tmp.path().join("demo-data/tsv")).unwrap() {
                let f = f.unwrap().path();
                if f.extension().is_some_and(|x| x == "csv") {
                    store
                        .put(
                            &bucket,
                            &format!("{prefix}{}", f.file_name().unwrap().to_string_lossy()),
                            std::fs::read(&f).unwrap(),
                        )
                        .unwrap();
                }
            }
            cmd.args([
                "--set",
                &format!("sources.listing.bucket={bucket}"),
                "--set",
                &format!("sources.listing.endpoint_url={url}"),
            ])
            .args(["--set", "sources.listing.force_path_style=true"])
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test");
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {stderr}", p.display());
        if let Some((emu, index)) = &emulator {
            let got = icicle_testkit::globus::block_on(
                icicle_testkit::globus::Client::new(&format!("http://{}", emu.addr), "example-token").scroll_all(index),
            )
            .unwrap();
            assert_eq!(got.len(), 800, "{}", p.display());
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        // The summary is the last JSON document on stdout (a stdout sink prints records before it).
        let start = stdout.rfind("\n{\n").map(|i| i + 1).unwrap_or(0);
        let summary: serde_json::Value =
            serde_json::from_str(&stdout[start..]).unwrap_or_else(|e| panic!("{}: {e}: {stdout}", p.display()));
        assert_eq!(summary["records"], 800, "{}", p.display());
        if summary["pipelines"]["aggregate"].is_object() {
            assert!(summary["aggregate_records"].as_u64().unwrap() > 0, "{}", p.display());
        }
        assert_eq!(summary["rejects"], 0, "{}", p.display());
        n += 1;
    }
    assert!(n >= 6, "expected the example configs, found {n}");
}

/// `icicle-testkit globus-search` as its own process, stopped when dropped.
struct GlobusEmulator {
    child: std::process::Child,
    addr: String,
}

impl GlobusEmulator {
    fn spawn(index: &str, token: &str) -> GlobusEmulator {
        let testkit = std::path::Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit");
        let mut child = std::process::Command::new(testkit)
            .args(["globus-search", "--listen", "127.0.0.1:0", "--index", index, "--token", token])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_string();
        GlobusEmulator { child, addr }
    }
}

impl Drop for GlobusEmulator {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

#[test]
fn the_example_monitor_config_runs_against_the_stand_in() {
    use icicle_testkit::lustre::{Kind, Workload};
    let tmp = tempfile::tempdir().unwrap();
    let mut w =
        Workload::open(&tmp.path().join("demo-data/lustre-fs"), &tmp.path().join("demo-data/lustre/changelog"), 1)
            .unwrap();
    w.preexisting(20).unwrap();
    w.run(Kind::Mixed, 100, "/work").unwrap();
    drop(w);
    let testkit = std::path::Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit");
    let cfg = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/monitor-lustre.toml");
    let lfs = format!(
        "sources.mdt0.lfs=[\"{}\", \"lfs\", \"--journal\", \"demo-data/lustre/changelog\", \"--mount\", \"demo-data/lustre-fs\", \"--delay-ms\", \"0\"]",
        testkit.display()
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_icicle"))
        .args(["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap(), "--set", &lfs])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["mdt0"]["records"].as_u64().unwrap() > 100, "{report}");
    assert_eq!(report["mdt0"]["rejects"], 0);
    assert!(tmp.path().join("demo-state/lustre/fs0-MDT0000.checkpoint.json").exists());
}

#[test]
fn the_example_local_config_indexes_a_directory_and_catches_up_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("demo-data/watched");
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    for f in ["one", "a/two", "a/b/three"] {
        std::fs::write(root.join(f), f).unwrap();
    }
    let cfg = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/monitor-local.toml");
    let run = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_icicle"))
            .args(["monitor", "--until-idle", "1", "--json", "-c", cfg.to_str().unwrap()])
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["watched"].clone()
    };
    let r = run();
    assert_eq!(
        (r["updates"].as_u64(), r["deletes"].as_u64(), r["rejects"].as_u64()),
        (Some(3), Some(0), Some(0)),
        "{r}"
    );
    // Changed while no monitor ran: the restart rescans and sends exactly the difference.
    std::fs::remove_file(root.join("a/two")).unwrap();
    std::fs::write(root.join("four"), "four").unwrap();
    let r = run();
    assert_eq!((r["updates"].as_u64(), r["deletes"].as_u64()), (Some(1), Some(1)), "{r}");
    assert!(r["rescans"]["restart"].as_u64().unwrap_or(0) >= 1, "{r}");
    let docs: String = std::fs::read_dir(tmp.path().join("demo-out/watched"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    for s in ["/watched/one", "/watched/a/two", "/watched/a/b/three", "/watched/four"] {
        assert!(docs.contains(&format!("\"{s}\"")), "{s} in {docs}");
    }
}

#[test]
fn the_example_gpfs_config_runs_against_the_stand_in_and_the_broker() {
    let kafka = std::env::var("ICICLE_TEST_KAFKA")
        .or_else(|_| {
            std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/run/kafka.addr"))
                .map(|s| s.trim().to_string())
        })
        .expect("no Kafka broker: run the tests with scripts/test.sh");
    let tmp = tempfile::tempdir().unwrap();
    let testkit = std::path::Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit");
    let topic = format!("fset1-cli-{}", std::process::id());
    // As the config's comment and the demo run it: the fileset before monitoring, its
    // snapshot (the monitor's seed_index), then the workload with its events.
    let workload = |more: &[&str]| {
        let st = std::process::Command::new(&testkit)
            .args(["workload", "--kind", "mixed", "--root", "demo-data/gpfs-fs", "--journal", "demo-data/gpfs/journal"])
            .args(["--gpfs-root", "/gpfs/fs1", "--gpfs-topic", &topic, "--bootstrap", &kafka])
            .args(more)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    };
    workload(&["--ops", "0", "--preexisting", "20"]);
    let seed_cfg = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/snapshot-gpfs-seed.toml");
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_icicle"))
        .args(["snapshot", "--no-progress", "-c", seed_cfg.to_str().unwrap()])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    workload(&["--ops", "100"]);
    let cfg = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/monitor-gpfs.toml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_icicle"))
        .args(["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()])
        .args([
            "--set",
            &format!("sources.fset1.topic={topic}"),
            "--set",
            &format!("sources.fset1.connection.bootstrap={kafka}"),
        ])
        .args([
            "--set",
            &format!("sinks.msk.connection.bootstrap={kafka}"),
            "--set",
            &format!("sinks.msk.topic={topic}-index"),
        ])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &report["fset1"];
    assert!(r["messages"].as_u64().unwrap() > 100, "{report}");
    assert_eq!(r["rejects"], 0);
    assert!(r["updates"].as_u64().unwrap() > 0, "{report}");
    assert!(tmp.path().join(format!("demo-state/gpfs/gpfs-{topic}.checkpoint.json")).exists());
    // What the shipped configs built (the snapshot, then the monitor's output) is the file
    // system as it is now.
    let mut index = ingested(&tmp.path().join("demo-out/gpfs-snapshot"));
    let files = index.values().filter(|e| e["content"]["type"] == "file").count();
    assert_eq!(files, 22, "the snapshot: 20 files from before monitoring and 2 more names of them");
    let fresh = walk_snapshot(tmp.path(), &tmp.path().join("demo-data/gpfs-fs"), "fresh");
    // The seeded default sends at most 1.2 x the minimal operations: an upsert per name new or
    // changed since the snapshot, a delete per name gone (the stream is one batch).
    assert_eq!(r["batches"], 1, "{report}");
    let (new, gone, changed) = compare(&index, &fresh);
    let minimal = (new.len() + gone.len() + changed.len()) as f64;
    let sent = (r["updates"].as_u64().unwrap() + r["deletes"].as_u64().unwrap()) as f64;
    assert!(minimal >= 20.0 && sent <= 1.2 * minimal, "sent {sent}, minimal {minimal}: {report}");
    eprintln!("shipped GPFS config: {sent} operations sent, {minimal} minimal");
    apply(&mut index, &tmp.path().join("demo-out/gpfs"));
    let (missing, extra, differ) = compare(&index, &fresh);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\n{report}"
    );
}

#[test]
fn output_into_a_closed_pipe_is_not_a_failure() {
    // The reader goes away before icicle writes (`icicle plugins --json | head -0`).
    for args in [&["plugins", "--json"][..], &["plugins"][..], &["config", "show"][..]] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_icicle"))
            .args(args)
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_failed_run_with_json_still_prints_a_json_document() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-listing.csv");
    let cfg = config(
        tmp.path(),
        "c.toml",
        &format!(
            "[sources.s]\ntype = \"tsv\"\npreset = \"icicle9\"\npaths = [\"{}\"]\n[sinks.o]\ntype = \"blackhole\"\n",
            missing.display()
        ),
    );
    let (code, out, err) = icicle(&["snapshot", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {out:?}"));
    assert_eq!(v["ok"], false);
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains("no-such-listing.csv"), "{msg}");
    assert!(err.contains("no-such-listing.csv"), "{err}");
}

/// `icicle config check` runs nothing and names every problem: a misspelt plugin key, a
/// misspelt plugin type and a misspelt top-level key each with the nearest known name, and a
/// TOML syntax error with the file and line; every shipped configuration checks clean.
#[test]
fn config_check_names_each_problem_with_the_nearest_known_name() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(
        tmp.path(),
        "typos.toml",
        "[snapshot]\nworker = 2\n[sources.x]\ntype = \"tsv\"\npaths = [\"a.csv\"]\npreset = \"icicle9\"\ndelimeter = \",\"\n[sources.g]\ntype = \"gufii\"\n[sinks.y]\ntype = \"stdout\"\n",
    );
    let check = |cfg: &std::path::Path| icicle(&["config", "check", "-c", cfg.to_str().unwrap()], &[]);
    // The top-level key is found first (the layers are read before any component).
    let (code, _, err) = check(&cfg);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("unknown key `snapshot.worker` in file") && err.contains("typos.toml"), "{err}");
    assert!(err.contains("(did you mean `workers`?)"), "{err}");
    let cfg = config(tmp.path(), "plugins.toml", &std::fs::read_to_string(&cfg).unwrap().replace("worker = 2\n", ""));
    let (code, out, err) = check(&cfg);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "both components' problems, not only the first: {err}");
    assert!(
        err.contains("unknown key `sources.x.delimeter` in file") && err.contains("(did you mean `delimiter`?)"),
        "{err}"
    );
    assert!(
        err.contains("unknown source type `gufii` for `sources.g.type`") && err.contains("(did you mean `gufi`?)"),
        "{err}"
    );
    let (code, out, _) = icicle(&["config", "check", "--json", "-c", cfg.to_str().unwrap()], &[]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((code, v["ok"].as_bool(), v["problems"].as_array().map(Vec::len)), (1, Some(false), Some(2)), "{v}");
    assert_eq!(
        v["checked"],
        serde_json::json!(["sinks.y (stdout)", "aggregate.sketch (ddsketch)"]),
        "the default sketch too"
    );
    // A syntax error: the file and where in it, never an empty key.
    let broken = config(tmp.path(), "broken.toml", "[sinks.y]\ntype = \"stdout\n");
    let (code, _, err) = check(&broken);
    assert_eq!(code, 1);
    assert!(err.contains("broken.toml") && err.contains("line 2") && !err.contains("``"), "{err}");
    // Every shipped configuration checks clean (the Globus example's token is read from the
    // environment by the check, as by the run).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(root.join("configs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let (code, out, err) =
                icicle(&["config", "check", "-c", path.to_str().unwrap()], &[("GLOBUS_SEARCH_TOKEN", "example-token")]);
            assert_eq!(code, 0, "{}: {err}", path.display());
            assert!(out.starts_with("ok: "), "{}: {out}", path.display());
        }
    }
}

/// `icicle config check` runs each plugin's value checks too (ranges, required combinations),
/// not only the keys and types: every such problem named by key and file, exit 1, and
/// nothing built (no index directory created). A secret the configuration names is read.
#[test]
fn config_check_runs_the_plugins_value_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx");
    let text = format!(
        "[sources.fset1]\ntype = \"gpfs\"\ntopic = \"fset1-topic\"\nfs_root = \"/gpfs/fs1\"\n\
         state_dir = \"{state}\"\nseed_index = \"{seed}\"\npair_batches = 0\n\
         connection = {{ bootstrap = \"127.0.0.1:9092\" }}\n\
         [sinks.idx]\ntype = \"index\"\ndir = \"{index}\"\nthreads = 0\n\
         [sinks.files]\ntype = \"file\"\ndir = \"{files}\"\nsync_group_bytes = 0\n\
         [sinks.print]\ntype = \"stdout\"\n\
         [aggregate.sketch]\ntype = \"kll\"\nk = 2\n",
        state = tmp.path().join("state").display(),
        seed = tmp.path().join("seed").display(),
        index = index.display(),
        files = tmp.path().join("files").display(),
    );
    let cfg = config(tmp.path(), "values.toml", &text);
    let (code, out, err) = icicle(&["config", "check", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    for (key, why) in [
        ("sources.fset1.pair_batches", "must be at least 1"),
        ("sinks.idx.threads", "must be 1 to 8"),
        ("sinks.files.sync_group_bytes", "must be at least 1"),
        ("aggregate.sketch.k", "must be at least 8"),
    ] {
        let line = err.lines().find(|l| l.contains(&format!("`{key}`"))).unwrap_or_else(|| panic!("{key}: {err}"));
        assert!(line.contains("in file ") && line.contains("values.toml") && line.contains(why), "{key}: {line}");
    }
    assert_eq!(err.lines().count(), 4, "every problem, and the stdout sink is fine: {err}");
    assert!(!index.exists() && !tmp.path().join("files").exists(), "the check builds nothing");
    // The same with --json: the clean section is listed as checked.
    let (code, out, _) = icicle(&["config", "check", "--json", "-c", cfg.to_str().unwrap()], &[]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((code, v["problems"].as_array().map(Vec::len)), (1, Some(4)), "{v}");
    assert_eq!(v["checked"], serde_json::json!(["sinks.print (stdout)"]), "{v}");
    // A token the configuration names but the environment lacks fails the check, as the run.
    let globus = config(
        tmp.path(),
        "globus.toml",
        "[sinks.g]\ntype = \"globus\"\nindex_id = \"00000000-0000-4000-8000-000000000000\"\n\
         token_env = \"ICICLE_TEST_NO_SUCH_TOKEN\"\n",
    );
    let (code, _, err) = icicle(&["config", "check", "-c", globus.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("`sinks.g.token_env`") && err.contains("globus.toml") && err.contains("is not set"), "{err}");
}

/// `--help` and `--version` answer (exit 0), and `icicle --version` names the commit built.
#[test]
fn the_binaries_answer_help_and_version_with_the_commit() {
    for exe in [std::path::PathBuf::from(env!("CARGO_BIN_EXE_icicle")), testkit_bin()] {
        let name = exe.file_name().unwrap().to_string_lossy().into_owned();
        for flag in ["--help", "--version"] {
            let out = std::process::Command::new(&exe).arg(flag).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success() && !text.is_empty(), "{name} {flag}: {text}");
            if flag == "--version" {
                assert!(text.starts_with(&format!("{name} {}", env!("CARGO_PKG_VERSION"))), "{text}");
            }
        }
    }
    let (code, out, _) = icicle(&["--version"], &[]);
    assert_eq!(code, 0);
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        Some(h) => assert_eq!(out.trim(), format!("icicle {} ({h})", env!("CARGO_PKG_VERSION"))),
        None => assert!(out.starts_with("icicle "), "{out}"),
    }
}

/// `[log] format = "json"`: every log line is one JSON object (level, message and fields),
/// for log shippers.
#[test]
fn json_logs_are_one_object_a_line() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(root.join("d")).unwrap();
    std::fs::write(root.join("d/f"), b"x").unwrap();
    let cfg = config(
        tmp.path(),
        "walk.toml",
        &format!(
            "[log]\nformat = \"json\"\n[sources.w]\ntype = \"walk\"\nroot = \"{}\"\n[sinks.b]\ntype = \"blackhole\"\n",
            root.display()
        ),
    );
    // The summary goes to stdout: stderr is the log alone.
    let (code, _, err) = icicle(&["snapshot", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> =
        err.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect();
    assert!(!lines.is_empty(), "no log line");
    for l in &lines {
        assert!(l["level"].is_string() && l["timestamp"].is_string() && l["fields"]["message"].is_string(), "{l}");
    }
    // The file no mapped principal may see (root's, no principals file) is logged with its
    // path as a field of its own.
    assert!(
        lines.iter().any(|l| l["level"] == "WARN" && l["fields"]["path"].as_str().is_some_and(|p| p.ends_with("/d/f"))),
        "{err}"
    );
}

/// `icicle completions SHELL` generates a script for every shell clap knows; bash's completes
/// subcommands and options as a shell would ask it to.
#[test]
fn completions_generate_and_complete_subcommands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, out, err) = icicle(&["completions", shell], &[]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(out.contains("snapshot") && out.contains("sketch-compare"), "{shell}: {out}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let (_, script, _) = icicle(&["completions", "bash"], &[]);
    std::fs::write(tmp.path().join("icicle.bash"), script).unwrap();
    // What bash does on `icicle sn<TAB>` and `icicle config check --j<TAB>`.
    let ask = |words: &str| -> Vec<String> {
        let line = format!(
            "source {}/icicle.bash; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMP_LINE=\"{words}\"; COMP_POINT=${{#COMP_LINE}}; _icicle icicle \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            tmp.path().display()
        );
        let out = std::process::Command::new("bash").args(["-c", &line]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
    };
    assert_eq!(ask("icicle sn"), ["snapshot"]);
    assert!(ask("icicle config \x27\x27").contains(&"check".to_string()));
    assert_eq!(ask("icicle config check --j"), ["--json"]);
}

/// `icicle man --dir DIR` writes a page per command, each rendered by man(1) without a
/// warning; `icicle man` prints the top page.
#[test]
fn manual_pages_render_for_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("man1");
    let (code, _, err) = icicle(&["man", "--dir", dir.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let mut pages: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    pages.sort();
    let mut want: Vec<String> = [
        "",
        "completions",
        "config",
        "config-check",
        "config-show",
        "counts",
        "counts-rebuild",
        "catalog",
        "du",
        "find",
        "man",
        "monitor",
        "plugins",
        "preprocess",
        "serve",
        "sketch-compare",
        "snapshot",
        "top",
    ]
    .iter()
    .map(|s| if s.is_empty() { "icicle.1".to_string() } else { format!("icicle-{s}.1") })
    .collect();
    want.sort();
    assert_eq!(pages, want);
    for p in &pages {
        let out = std::process::Command::new("man")
            .args(["--warnings", "-l"])
            .arg(dir.join(p))
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "80")
            .output()
            .expect("man(1): install man-db");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && out.stderr.is_empty(), "{p}: {}", String::from_utf8_lossy(&out.stderr));
        let name = p.trim_end_matches(".1");
        assert!(text.contains("NAME") && text.contains("SYNOPSIS") && text.contains(name), "{p}: {text}");
    }
    let snapshot = std::fs::read_to_string(dir.join("icicle-snapshot.1")).unwrap();
    assert!(snapshot.contains("allow\\-mass\\-delete"), "{snapshot}");
    let (code, out, _) = icicle(&["man"], &[]);
    assert_eq!(code, 0);
    assert!(out.starts_with(".ie") || out.contains(".TH icicle 1"), "{out}");
}

/// `icicle config check --connect` reaches every broker, bucket and search index a
/// configuration names, changing nothing there, and says what it found; one that cannot be
/// reached is a problem naming the key and the reason.
#[test]
fn config_check_connect_reaches_brokers_buckets_and_indexes() {
    use icicle_testkit::globus::{Emulator, Options};
    const INDEX: &str = "0f5c3a52-7d6e-4a8b-9c1d-2e3f4a5b6c7d";
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let kafka = kafka();
    let topic = format!("icicle-check-{}-{}", std::process::id(), icicle_core::time::now_epoch());
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(icicle_plugins_kafka::produce::create_topic(&kafka, &topic, 3))
        .unwrap();
    let s3 = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/run/s3.addr"))
        .map(|s| s.trim().to_string())
        .or_else(|_| std::env::var("ICICLE_TEST_S3"))
        .expect("an S3 server: scripts/services.sh start");
    let store = icicle_plugins_s3::ObjectStore::connect(&s3, "test", "test").unwrap();
    let bucket = format!("icicle-check-{}", std::process::id());
    let _ = store.create_bucket(&bucket);
    let emu = Emulator::start(Options::new(INDEX, "tok-check")).unwrap();
    std::fs::write(t.join("principals.tsv"), "").unwrap();
    let cfg = |name: &str, topic: &str, bucket: &str, index: &str| {
        config(
            t,
            name,
            &format!(
                "[records]\nvisible_to = [\"public\"]\nprincipals = \"{p}\"\n\
                 [sources.listing]\ntype = \"s3\"\nbucket = \"{bucket}\"\nprefix = \"fs/\"\nendpoint_url = \"{s3}\"\nforce_path_style = true\nmax_attempts = 1\npreset = \"icicle9\"\n\
                 [sinks.msk]\ntype = \"kafka\"\ntopic = \"{topic}\"\nconnection = {{ bootstrap = \"{kafka}\" }}\n\
                 [sinks.search]\ntype = \"globus\"\nindex_id = \"{index}\"\nbase_url = \"{u}\"\ntoken_env = \"ICICLE_TEST_GLOBUS_TOKEN\"\n",
                p = t.join("principals.tsv").display(),
                u = emu.url()
            ),
        )
    };
    let env =
        [("ICICLE_TEST_GLOBUS_TOKEN", "tok-check"), ("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")];
    let good = cfg("good.toml", &topic, &bucket, INDEX);
    // Without --connect nothing is reached: a config naming nothing that exists checks clean.
    let (code, out, err) = icicle(&["config", "check", "-c", good.to_str().unwrap()], &env);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = icicle(&["config", "check", "--connect", "--json", "-c", good.to_str().unwrap()], &env);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let checked: Vec<&str> = v["checked"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert!(
        checked.contains(&format!("sinks.msk (kafka): topic `{topic}` on {kafka}: 3 partitions, 1 brokers").as_str()),
        "{checked:?}"
    );
    assert!(
        checked.iter().any(|c| c.starts_with(&format!("sinks.search (globus): index {INDEX} at {}", emu.url()))),
        "{checked:?}"
    );
    assert!(
        checked.contains(
            &format!("sources.listing (s3): s3://{bucket}/fs/ at {s3}: listed (no object under the prefix)").as_str()
        ),
        "{checked:?}"
    );

    // Nothing of it there: three problems, each naming its key; nothing was created.
    let other = "11111111-2222-3333-4444-555555555555";
    let bad = cfg("bad.toml", &format!("{topic}-absent"), &format!("{bucket}-absent"), other);
    let (code, out, err) = icicle(&["config", "check", "--connect", "--json", "-c", bad.to_str().unwrap()], &env);
    assert_eq!(code, 1, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let problems: Vec<&str> = v["problems"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(
        problems.iter().any(|p| p.contains("sinks.msk.topic") && p.contains(&format!("`{topic}-absent`"))),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("sources.listing.bucket") && p.contains("NoSuchBucket")),
        "{problems:?}"
    );
    assert!(problems.iter().any(|p| p.contains("sinks.search.index_id") && p.contains("404")), "{problems:?}");
    // Asked again, the topic is still absent: the first probe created nothing.
    let (code, out, _) = icicle(&["config", "check", "--connect", "--json", "-c", bad.to_str().unwrap()], &env);
    assert_eq!(code, 1);
    assert!(
        out.contains(&format!(
            "answer about `{topic}-absent`: UnknownTopicOrPartition (Broker: Unknown topic or partition)"
        )),
        "{out}"
    );
}
