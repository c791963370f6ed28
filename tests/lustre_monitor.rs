//! Ground truth for the Lustre monitor: after a workload, the index built by a snapshot plus
//! the monitor's updates equals a fresh snapshot of the directory (same paths, same metadata),
//! for every workload kind; and the same after the monitor is killed at random points.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use icicle_testkit::lustre::{Kind, Workload};
use serde_json::Value;

fn testkit() -> PathBuf {
    // The testkit binary sits next to the icicle binary.
    let p = Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit");
    assert!(p.exists(), "build icicle-testkit first (cargo build --workspace)");
    p
}

/// Everything up to the journal's last record was acknowledged.
fn assert_all_cleared(tmp: &Path, journal: &Path) {
    let users = std::fs::read_to_string(tmp.join("lfs/changelog.users")).unwrap();
    let last = journal_indexes(journal).last().unwrap().to_string();
    assert_eq!(users.trim(), format!("cl1 {last}"));
}

fn monitor_config(tmp: &Path, root: &Path, journal: &Path, out: &Path, batch: usize, lru: usize) -> PathBuf {
    config(
        tmp,
        "monitor.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n\
             [sources.mdt0]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nuser = \"cl1\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"0\"]\n\
             mount = \"{r}\"\nfsname = \"fs0\"\nbatch_size = {batch}\nquiet_period_secs = 0.0\npoll_interval_secs = 0.02\nread_size = 300\nlru_capacity = {lru}\nstate_dir = \"{t}/state\"\n\
             [sinks.o]\ntype = \"file\"\ndir = \"{o}\"\nfsync = true\n",
            k = testkit().display(),
            j = journal.display(),
            r = root.display(),
            t = tmp.display(),
            o = out.display()
        ),
    )
}

fn ground_truth(kind: Kind, ops: usize, lru: usize) {
    let seed = test_seed();
    let tmp = tempfile::tempdir().unwrap();
    // The index starts from a snapshot taken before monitoring.
    let (root, journal, mut index) = preexisting_fs(tmp.path(), 60, seed);
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    // Half the seeds print names as Amazon FSx for Lustre does (paths in UNLNK, RMDIR and a
    // rename's old name).
    w.fsx_names = seed.is_multiple_of(2);
    w.run(kind, ops, "/work").unwrap();
    if kind == Kind::Mixed {
        // Changes to objects that existed before monitoring.
        w.run(Kind::Mixed, ops / 2, "/old0").unwrap();
    }
    drop(w);
    let out = tmp.path().join("monitor-out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 40, lru);
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let r = &report["mdt0"];
    assert_eq!(r["rejects"], 0, "{r}");
    apply(&mut index, &out);
    let fresh = walk_snapshot(tmp.path(), &root, "after");
    let (missing, extra, differ) = compare(&index, &fresh);
    if !(missing.is_empty() && extra.is_empty() && differ.is_empty()) && std::env::var("KEEP").is_ok() {
        let keep = PathBuf::from("/tmp/lustre-keep");
        let _ = std::fs::remove_dir_all(&keep);
        std::fs::create_dir_all(&keep).unwrap();
        std::fs::copy(&journal, keep.join("changelog")).unwrap();
        std::fs::copy(tmp.path().join("lfs/changelog.baseline"), keep.join("baseline")).unwrap();
        let _ = std::process::Command::new("cp").arg("-a").arg(tmp.path()).arg(keep.join("tmp")).status();
    }
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "{kind:?}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\nreport {r}"
    );
    // Everything was acknowledged, up to the last record.
    assert_all_cleared(tmp.path(), &journal);
}

#[test]
fn eval_out_ground_truth() {
    ground_truth(Kind::EvalOut, 300, 0);
}

#[test]
fn eval_perf_ground_truth() {
    ground_truth(Kind::EvalPerf, 300, 0);
}

#[test]
fn filebench_ground_truth() {
    ground_truth(Kind::Filebench, 600, 0);
}

#[test]
fn mixed_ground_truth() {
    ground_truth(Kind::Mixed, 400, 0);
}

#[test]
fn mixed_ground_truth_with_a_tiny_lru() {
    // Evicted entries are resolved again: correctness must not depend on the cap.
    ground_truth(Kind::Mixed, 400, 8);
}

#[test]
fn a_monitor_killed_at_random_points_loses_nothing() {
    let seed = test_seed();
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal, index) = preexisting_fs(tmp.path(), 40, seed);
    let out = tmp.path().join("monitor-out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 15, 0);
    let text = std::fs::read_to_string(&cfg).unwrap().replace("\"--delay-ms\", \"0\"", "\"--delay-ms\", \"2\"");
    std::fs::write(&cfg, text).unwrap();
    // A long workload, then monitors started and killed with SIGKILL at random points while
    // they work through it. (The stand-in cannot make a file operation and its changelog
    // record appear atomically to a concurrent observer, as Lustre does, so the workload is
    // not run concurrently here.)
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    for round in 0..6 {
        w.run(if round % 2 == 0 { Kind::Mixed } else { Kind::EvalOut }, 150, "/work").unwrap();
    }
    drop(w);
    let mut x = Rng::new(seed ^ 1);
    let kills = test_kills();
    for _ in 0..kills {
        // Long enough for a run to deliver and clear batches before its kill (a debug
        // build's first batch through the fake lfs takes about a second).
        run_monitor_then_kill(&cfg, &mut x, 300, 2700);
    }
    kill_until_delivered(&cfg, &mut x, &tmp.path().join("state/fs0-MDT0000.checkpoint.json"));
    drain_and_check(tmp.path(), &cfg, &root, &journal, &out, index, &format!("after {kills} kills"));
}

/// Until one killed run has delivered a batch (its checkpoint exists), more runs killed
/// later each time: on a loaded machine the first batch may take longer than the kill points
/// drawn (no wall-clock bound: the runs only grow longer).
fn kill_until_delivered(cfg: &Path, x: &mut Rng, checkpoint: &Path) {
    let mut spread = 2700;
    for _ in 0..10 {
        if checkpoint.exists() {
            return;
        }
        run_monitor_then_kill(cfg, x, 300 + spread, spread);
        spread *= 2;
    }
    assert!(checkpoint.exists(), "no killed run delivered a batch, even after runs of {} ms", spread / 2);
}

/// Drain with a final monitor run, then: the index (snapshot + every delivered update and
/// delete) equals a fresh snapshot, and every record was cleared. `KEEP=1` keeps a failing
/// run's files in /tmp/lustre-keep.
fn drain_and_check(
    tmp: &Path,
    cfg: &Path,
    root: &Path,
    journal: &Path,
    out: &Path,
    mut index: BTreeMap<String, Value>,
    what: &str,
) -> Value {
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    apply(&mut index, out);
    let fresh = walk_snapshot(tmp, root, "after");
    let (missing, extra, differ) = compare(&index, &fresh);
    if !(missing.is_empty() && extra.is_empty() && differ.is_empty()) && std::env::var("KEEP").is_ok() {
        let _ = std::fs::remove_dir_all("/tmp/lustre-keep");
        let _ = std::process::Command::new("cp").arg("-a").arg(tmp).arg("/tmp/lustre-keep").status();
    }
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "{what}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\nindex {:?}\nfresh {:?}\nreport {report}",
        differ.iter().map(|p| &index[p]).collect::<Vec<_>>(),
        differ.iter().map(|p| &fresh[p]).collect::<Vec<_>>()
    );
    assert_all_cleared(tmp, journal);
    report["mdt0"].clone()
}

#[test]
fn a_monitor_killed_while_the_workload_runs_loses_nothing() {
    let seed = test_seed() ^ 0x5eed;
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal, index) = preexisting_fs(tmp.path(), 40, seed);
    let out = tmp.path().join("monitor-out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 15, 0);
    // The workload runs in its own thread while monitors are started and SIGKILLed: the file
    // system is ahead of the changelog (the stand-in performs each operation, then appends its
    // records, one write a line), as on Lustre, where a record never precedes its operation.
    let (r2, j2) = (root.clone(), journal.clone());
    let workload = std::thread::spawn(move || {
        let mut w = Workload::open(&r2, &j2, seed).unwrap();
        for round in 0..24 {
            let kind = [Kind::Mixed, Kind::EvalOut, Kind::Filebench, Kind::EvalPerf][round % 4];
            // One round changes objects that existed before monitoring.
            let base = if round == 5 { "/old0".to_string() } else { format!("/w{round}") };
            w.run(if round == 5 { Kind::Mixed } else { kind }, 40, &base).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
    });
    let mut x = Rng::new(seed ^ 7);
    let mut kills = 0;
    while !workload.is_finished() || kills < test_kills() {
        run_monitor_then_kill(&cfg, &mut x, 300, 2700);
        kills += 1;
    }
    workload.join().unwrap();
    kill_until_delivered(&cfg, &mut x, &tmp.path().join("state/fs0-MDT0000.checkpoint.json"));
    drain_and_check(
        tmp.path(),
        &cfg,
        &root,
        &journal,
        &out,
        index,
        &format!("after {kills} kills during the workload"),
    );
}

#[test]
fn several_mdts_in_one_process_each_keep_their_own_state() {
    let tmp = tempfile::tempdir().unwrap();
    let fs_names = ["a", "b"];
    for (i, n) in fs_names.iter().enumerate() {
        let mut w = Workload::open(
            &tmp.path().join(format!("fs-{n}")),
            &tmp.path().join(format!("lfs-{n}/changelog")),
            11 + i as u64,
        )
        .unwrap();
        w.preexisting(30).unwrap();
    }
    // One snapshot of both file systems: /a/... and /b/...
    let snap = |name: &str| -> BTreeMap<String, Value> {
        let out = tmp.path().join(name);
        let mut toml = format!("[snapshot]\nversion = \"v\"\n[records]\nvisible_to = [\"public\"]\n[sinks.o]\ntype = \"file\"\ndir = \"{}\"\n", out.display());
        for n in fs_names {
            toml.push_str(&format!(
                "[sources.{n}]\ntype = \"walk\"\nroot = \"{}\"\npath_prefix = \"/{n}\"\n",
                tmp.path().join(format!("fs-{n}")).display()
            ));
        }
        let cfg = config(tmp.path(), &format!("{name}.toml"), &toml);
        let (code, s, err) = snapshot(&cfg, &[]);
        assert_eq!((code, s["rejects"].as_u64()), (0, Some(0)), "{err}");
        ingested(&out)
    };
    let mut index = snap("before");
    for (i, n) in fs_names.iter().enumerate() {
        let mut w = Workload::open(
            &tmp.path().join(format!("fs-{n}")),
            &tmp.path().join(format!("lfs-{n}/changelog")),
            11 + i as u64,
        )
        .unwrap();
        w.run(Kind::Mixed, 250, "/work").unwrap();
    }
    let out = tmp.path().join("monitor-out");
    let mut toml =
        format!("[records]\nvisible_to = [\"public\"]\n[sinks.o]\ntype = \"file\"\ndir = \"{}\"\n", out.display());
    for n in fs_names {
        let (root, journal) = (tmp.path().join(format!("fs-{n}")), tmp.path().join(format!("lfs-{n}/changelog")));
        toml.push_str(&format!(
            "[sources.mdt_{n}]\ntype = \"lustre\"\nmdt = \"fs{n}-MDT0000\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"0\"]\nmount = \"{r}\"\nfsname = \"fs{n}\"\npath_prefix = \"/{n}\"\nbatch_size = 30\nquiet_period_secs = 0.0\npoll_interval_secs = 0.02\nstate_dir = \"{t}/state\"\n",
            k = testkit().display(),
            j = journal.display(),
            r = root.display(),
            t = tmp.path().display()
        ));
    }
    let cfg = config(tmp.path(), "monitor2.toml", &toml);
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        report["mdt_a"]["records"].as_u64().unwrap() > 0 && report["mdt_b"]["records"].as_u64().unwrap() > 0,
        "{report}"
    );
    apply(&mut index, &out);
    let fresh = snap("after");
    let (missing, extra, differ) = compare(&index, &fresh);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}"
    );
    for n in fs_names {
        assert!(tmp.path().join(format!("state/fs{n}-MDT0000.checkpoint.json")).exists());
        let users = std::fs::read_to_string(tmp.path().join(format!("lfs-{n}/changelog.users"))).unwrap();
        let last = journal_indexes(&tmp.path().join(format!("lfs-{n}/changelog"))).last().unwrap().to_string();
        assert_eq!(users.trim(), format!("cl1 {last}"));
    }
}

#[test]
fn nothing_is_acknowledged_when_the_sink_cannot_deliver() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    let journal = tmp.path().join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, 3).unwrap();
    // Creates first, so the very first batch has something to deliver (a batch whose records
    // all cancel out delivers nothing and may be acknowledged).
    w.run(Kind::Filebench, 100, "/fb").unwrap();
    w.run(Kind::EvalPerf, 30, "/work").unwrap();
    drop(w);
    // The sink directory's parent is a file: every delivery fails.
    let blocker = tmp.path().join("blocker");
    std::fs::write(&blocker, "").unwrap();
    let cfg = monitor_config(tmp.path(), &root, &journal, &blocker.join("out"), 40, 0);
    let registered = std::fs::read_to_string(tmp.path().join("lfs/changelog.users")).unwrap();
    let (code, _, err) = icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("blocker"), "{err}");
    assert_eq!(std::fs::read_to_string(tmp.path().join("lfs/changelog.users")).unwrap(), registered);
    assert!(!tmp.path().join("state/fs0-MDT0000.checkpoint.json").exists());
    // A working sink afterwards gets everything, from the first record.
    let out = tmp.path().join("monitor-out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 40, 0);
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let total = journal_indexes(&journal).len() as u64;
    assert_eq!(report["mdt0"]["records"], total);
    assert_all_cleared(tmp.path(), &journal);
}

/// A second monitor on the same state (the first still running) fails at once naming the
/// lock, and acknowledges nothing.
#[test]
fn a_second_monitor_on_the_same_state_fails_and_acknowledges_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    let journal = tmp.path().join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, 5).unwrap();
    w.run(Kind::Filebench, 50, "/fb").unwrap();
    drop(w);
    let out = tmp.path().join("out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 40, 0);
    std::fs::create_dir_all(tmp.path().join("state")).unwrap();
    let held = std::fs::File::create(tmp.path().join("state/fs0-MDT0000.lock")).unwrap();
    held.try_lock().unwrap();
    let registered = std::fs::read_to_string(tmp.path().join("lfs/changelog.users")).unwrap();
    let (code, _, err) = icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("fs0-MDT0000.lock") && err.contains("another run"), "{err}");
    assert_eq!(std::fs::read_to_string(tmp.path().join("lfs/changelog.users")).unwrap(), registered);
    drop(held);
    let (code, _, err) = icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    assert_all_cleared(tmp.path(), &journal);
}

#[test]
fn a_write_through_any_hard_link_updates_every_name() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal, index) = preexisting_fs(tmp.path(), 20, 11);
    let old_file = index.keys().find(|p| p.ends_with(".dat") && !p.contains("link")).unwrap().clone();
    let out = tmp.path().join("monitor-out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 40, 0);
    // Each phase is emitted before the next one changes anything, so a name the monitor does
    // not update after a change keeps its old metadata in the index.
    let phase = |f: &dyn Fn(&mut Workload)| {
        let mut w = Workload::open(&root, &journal, 11).unwrap();
        f(&mut w);
        drop(w);
        let (code, _, err) = icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &[]);
        assert_eq!(code, 0, "{err}");
    };
    phase(&|w| {
        w.mkdir("/work").unwrap();
        w.create("/work/h", 10).unwrap();
        w.hardlink("/work/h", "/work/h2").unwrap();
        w.hardlink(&old_file, "/work/old link").unwrap();
    });
    phase(&|w| {
        // Writes through one name, a chmod through another.
        w.append("/work/h2", 100).unwrap();
        w.chmod("/work/h", 0o600).unwrap();
        w.append("/work/old link", 7).unwrap();
    });
    phase(&|w| w.rename("/work/h2", "/work/h3").unwrap());
    let mut w = Workload::open(&root, &journal, 11).unwrap();
    w.append("/work/h", 5).unwrap();
    w.truncate(&old_file, 3).unwrap();
    drop(w);
    drain_and_check(tmp.path(), &cfg, &root, &journal, &out, index, "hard links");
}

/// Append records of `n` file creates in new directory `dir` to the journal.
fn more_records(root: &Path, journal: &Path, dir: &str, n: usize, seed: u64) {
    let mut w = Workload::open(root, journal, seed).unwrap();
    w.mkdir(dir).unwrap();
    for i in 0..n {
        w.create(&format!("{dir}/f{i}"), 1).unwrap();
    }
}

fn last_index(journal: &Path) -> u64 {
    *journal_indexes(journal).last().unwrap()
}

/// A changelog whose oldest retained record is 9,345,804 (as a real MDT's, with everything
/// before it purged): a monitor with no checkpoint reads it from that record on, reads every
/// record, reports nothing lost and clears to the last one. A read of `0..read_size` would
/// print nothing here.
#[test]
fn a_changelog_that_starts_at_record_9345804_is_read_from_there() {
    let seed = test_seed();
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal, index) = preexisting_fs(tmp.path(), 40, seed);
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    w.start_at(9_345_804).unwrap();
    w.run(Kind::Mixed, 300, "/work").unwrap();
    drop(w);
    let first = journal_indexes(&journal)[0];
    assert_eq!(first, 9_345_804);
    let out = tmp.path().join("monitor-out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 40, 0);
    let total = journal_indexes(&journal).len() as u64;
    let report = drain_and_check(tmp.path(), &cfg, &root, &journal, &out, index, "start at 9,345,804");
    assert_eq!((report["records"].as_u64(), report["lost_records"].as_u64()), (Some(total), Some(0)), "{report}");
}

/// 50,000 and more records purged while the monitor is down (its changelog user idle, the
/// records garbage-collected): the next run reports exactly that range as lost, reads every
/// record after it and clears to the last one; the index still equals the file system (the
/// purged records' files came and went).
#[test]
fn fifty_thousand_records_purged_between_two_runs_are_reported_and_the_rest_read() {
    let seed = test_seed();
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal, index) = preexisting_fs(tmp.path(), 40, seed);
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    w.run(Kind::Mixed, 200, "/work").unwrap();
    drop(w);
    let out = tmp.path().join("monitor-out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 40, 0);
    let (code, _, err) = icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let cleared = last_index(&journal);
    let mut w = Workload::open(&root, &journal, seed ^ 1).unwrap();
    w.run(Kind::EvalPerf, 25_100, "/churn").unwrap();
    drop(w);
    let purged = last_index(&journal);
    assert!(purged - cleared >= 50_000, "{} records", purged - cleared);
    icicle_testkit::lustre::purge(&journal, purged).unwrap();
    let mut w = Workload::open(&root, &journal, seed ^ 2).unwrap();
    w.run(Kind::Mixed, 200, "/work").unwrap();
    drop(w);
    let after = last_index(&journal) - purged;
    let report = drain_and_check(tmp.path(), &cfg, &root, &journal, &out, index, "50,000 purged");
    assert_eq!(report["lost_records"].as_u64(), Some(purged - cleared), "{report}");
    assert_eq!(report["lost_ranges"], serde_json::json!([[cleared + 1, purged]]), "{report}");
    assert_eq!(report["records"].as_u64(), Some(after), "{report}");
}

#[test]
fn records_purged_before_they_were_read_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal, _) = preexisting_fs(tmp.path(), 10, 5);
    more_records(&root, &journal, "/more", 20, 5);
    let out = tmp.path().join("monitor-out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 40, 0);
    let (code, _, err) = icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let done = last_index(&journal);
    // More records, of which someone else purges the first 30 before the monitor reads
    // them (as a second changelog user's clear with this one deregistered would).
    more_records(&root, &journal, "/more2", 40, 6);
    std::fs::write(tmp.path().join("lfs/changelog.users"), format!("cl1 {}\n", done + 30)).unwrap();
    let (code, _, err) =
        icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap(), "--set", "sources.mdt0.on_gap=fail"], &[]);
    assert_ne!(code, 0);
    let range =
        format!("changelog records {}..={} of fs0-MDT0000 were purged before they were read", done + 1, done + 30);
    assert!(err.contains(&range), "{err}");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("lfs/changelog.users")).unwrap().trim(),
        format!("cl1 {}", done + 30),
        "nothing acknowledged"
    );
    // By default: logged, counted, and the rest is processed.
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&range), "{err}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["mdt0"]["lost_records"], 30);
    assert_eq!(report["mdt0"]["records"], last_index(&journal) - done - 30);
    assert_all_cleared(tmp.path(), &journal);
}

#[test]
fn a_failing_lfs_changelog_is_retried() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal, _) = preexisting_fs(tmp.path(), 10, 8);
    more_records(&root, &journal, "/more", 30, 8);
    // An lfs whose first two `changelog` and first `changelog_clear` calls fail.
    let script = tmp.path().join("flaky-lfs");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nop=\"${{9}}\"; n=$(cat {c}.$op 2>/dev/null || echo 0); echo $((n+1)) > {c}.$op\n\
             case \"$op:$n\" in changelog:0|changelog:1|changelog_clear:0) echo 'lfs: Resource temporarily unavailable' >&2; exit 11;; esac\n\
             exec \"$@\"\n",
            c = tmp.path().join("calls").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = tmp.path().join("monitor-out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 40, 0);
    let text = std::fs::read_to_string(&cfg).unwrap();
    let k = testkit();
    let flaky = text.replacen(
        &format!("lfs = [\"{}\"", k.display()),
        &format!("lfs = [\"{}\", \"{}\"", script.display(), k.display()),
        1,
    );
    assert_ne!(flaky, text);
    std::fs::write(&cfg, &flaky).unwrap();
    // No retries: the first failure stops the monitor with lfs's message.
    let (code, _, err) =
        icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap(), "--set", "sources.mdt0.lfs_retries=0"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("Resource temporarily unavailable"), "{err}");
    // With retries (the default), the second failure is retried too, and so is the clear.
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("retrying"), "{err}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["mdt0"]["records"], journal_indexes(&journal).len() as u64);
    let clears = report["mdt0"]["clears"].as_u64().unwrap();
    assert!(clears > 0);
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("calls.changelog_clear")).unwrap().trim(),
        (clears + 1).to_string()
    );
    assert_all_cleared(tmp.path(), &journal);
}

/// The report of one drain over a fresh mixed workload with `--set` overrides.
fn drain_with(sets: &[&str], check_ground_truth: bool) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal, index) = preexisting_fs(tmp.path(), 30, 21);
    let mut w = Workload::open(&root, &journal, 21).unwrap();
    w.run(Kind::Mixed, 300, "/work").unwrap();
    drop(w);
    let out = tmp.path().join("monitor-out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 40, 0);
    let mut args = vec!["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()];
    for s in sets {
        args.extend(["--set", s]);
    }
    let (code, stdout, err) = icicle(&args, &[]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    if check_ground_truth {
        let mut index = index;
        apply(&mut index, &out);
        let fresh = walk_snapshot(tmp.path(), &root, "after");
        let (missing, extra, differ) = compare(&index, &fresh);
        assert!(
            missing.is_empty() && extra.is_empty() && differ.is_empty(),
            "{sets:?}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}"
        );
    }
    assert_all_cleared(tmp.path(), &journal);
    report["mdt0"].clone()
}

#[test]
fn ablation_modes_reduction_off_and_naive_resolution() {
    // Without reduction every record is applied, and the index is still right.
    let on = drain_with(&[], true);
    let off = drain_with(&["sources.mdt0.reduction=false"], true);
    assert!(on["reduce"]["coalesced"].as_u64().unwrap() > 0, "{on}");
    assert_eq!(off["reduce"]["coalesced"], 0, "{off}");
    assert_eq!(off["reduce"]["cancelled"], 0, "{off}");
    let applied =
        off["records"].as_u64().unwrap() - off["filtered"].as_u64().unwrap() - off["rejects"].as_u64().unwrap();
    assert_eq!(off["reduce"]["passed"], applied, "{off}");
    assert_eq!(on["records"], off["records"]);
    // Naive resolution asks fid2path for every record: more calls than FSMonitor's cache.
    let fsm = drain_with(&["sources.mdt0.resolution=fsmonitor"], false);
    let naive = drain_with(&["sources.mdt0.resolution=naive"], false);
    let calls = |r: &Value| r["tree"]["fid2path_calls"].as_u64().unwrap();
    assert!(calls(&naive) > calls(&fsm), "naive {} vs fsmonitor {}", calls(&naive), calls(&fsm));
    assert!(calls(&fsm) > calls(&on), "fsmonitor {} vs tree {}", calls(&fsm), calls(&on));
}

#[test]
fn a_failing_source_stops_the_monitor_with_its_name() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    let journal = tmp.path().join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, 5).unwrap();
    w.run(Kind::EvalPerf, 20, "/work").unwrap();
    drop(w);
    let out = tmp.path().join("out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 40, 0);
    // A second MDT whose lfs always fails; the first keeps polling forever (no --drain).
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(&format!(
        "[sources.mdt1]\ntype = \"lustre\"\nmdt = \"fs1-MDT0000\"\nuser = \"cl1\"\nlfs = [\"/bin/sh\", \"-c\", \"echo 'lfs: cannot reach the MDS' >&2; exit 1\", \"lfs\"]\n\
         mount = \"{r}\"\nfsname = \"fs1\"\npath_prefix = \"/one\"\nlfs_retries = 0\nstate_dir = \"{t}/state\"\n",
        r = root.display(),
        t = tmp.path().display()
    ));
    std::fs::write(&cfg, text).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_icicle"))
        .args(["monitor", "-c", cfg.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Hang detection only: the run is expected to end by itself long before this.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the monitor kept running after a source failed");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(err.contains("source `mdt1` failed") && err.contains("cannot reach the MDS"), "{err}");
}

#[test]
fn sigterm_delivers_the_batch_in_hand_acknowledges_it_and_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    let journal = tmp.path().join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, 9).unwrap();
    w.run(Kind::EvalPerf, 40, "/work").unwrap();
    drop(w);
    let last = last_index(&journal);
    let out = tmp.path().join("out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 7, 0);
    // A long quiet period: the records after the last full batch wait for the signal.
    let text = std::fs::read_to_string(&cfg).unwrap().replace("quiet_period_secs = 0.0", "quiet_period_secs = 3600.0");
    std::fs::write(&cfg, text).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_icicle"))
        .args(["monitor", "--json", "-c", cfg.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until full batches were acknowledged (the checkpoint exists), then stop it.
    let checkpoint = tmp.path().join("state/fs0-MDT0000.checkpoint.json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while !checkpoint.exists() {
        assert!(std::time::Instant::now() < deadline, "no batch was ever acknowledged");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let cleared = || std::fs::read_to_string(tmp.path().join("lfs/changelog.users")).unwrap().trim().to_string();
    assert_ne!(cleared(), format!("cl1 {last}"), "the tail waits for the quiet period");
    // SAFETY: kill sends a signal; the pid is our child's, not yet waited for.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let done = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{err}");
    assert!(err.contains("stopping after the current batch"), "{err}");
    let report: Value = serde_json::from_slice(&done.stdout).unwrap();
    assert_eq!(report["mdt0"]["cleared_index"].as_u64(), Some(last), "{report}");
    assert_eq!(cleared(), format!("cl1 {last}"), "everything read was delivered and cleared");
}

#[test]
fn poison_lines_are_dead_letters_and_acknowledge_nothing_past_the_real_records() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    let journal = tmp.path().join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, 4).unwrap();
    w.run(Kind::EvalPerf, 30, "/work").unwrap();
    drop(w);
    let text = std::fs::read_to_string(&journal).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let last: u64 = lines.last().unwrap().split(' ').next().unwrap().parse().unwrap();
    let poison = last + 250;
    // A record whose body is garbage, a line far past the last record, a non-UTF-8 tail.
    let victim = lines.len() / 2;
    let victim_index: u64 = lines[victim].split(' ').next().unwrap().parse().unwrap();
    let mut poisoned: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    poisoned[victim] = format!("{victim_index} <garbage> \u{e9}\u{1b}[2J");
    poisoned.push(format!("{poison} <garbage>"));
    std::fs::write(&journal, poisoned.join("\n") + "\n").unwrap();
    let out = tmp.path().join("out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 40, 0);
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (report["mdt0"]["dead_letters"].as_u64(), report["mdt0"]["lost_records"].as_u64()),
        (Some(2), Some(0)),
        "{report}"
    );
    assert_eq!(report["mdt0"]["cleared_index"].as_u64(), Some(last), "{report}");
    let users = std::fs::read_to_string(tmp.path().join("lfs/changelog.users")).unwrap();
    assert_eq!(users.trim(), format!("cl1 {last}"), "cleared up to the last real record, not the poison's index");
    let letters: Vec<Value> = std::fs::read_to_string(tmp.path().join("state/fs0-MDT0000.dead-letters.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(letters.len(), 2, "{letters:?}");
    assert_eq!(letters[0]["position"], victim_index.to_string());
    assert!(letters[0]["raw"].as_str().unwrap().contains("<garbage>"));
    assert_eq!(letters[1]["position"], poison.to_string());
    assert!(!err.contains('\u{1b}'), "no raw escape reaches the log");
    // A restart reads nothing again and keeps no letter twice.
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["mdt0"]["dead_letters"].as_u64(), Some(0), "{report}");
}

#[path = "lustre_monitor/restarts.rs"]
mod restarts;

#[test]
fn trees_that_predate_monitoring_removed_or_renamed_away_leave_no_phantoms() {
    // The monitor reads the records after the trees are gone: `fid2path` knows none of
    // their directories any more, only the records still to come name them.
    let first = test_seed();
    for seed in first..first + 6 {
        let tmp = tempfile::tempdir().unwrap();
        let (root, journal, mut index) = preexisting_fs(tmp.path(), 60, seed);
        let mut w = Workload::open(&root, &journal, seed).unwrap();
        w.run(Kind::Mixed, 60, "/work").unwrap();
        w.retire_trees(4).unwrap();
        drop(w);
        let out = tmp.path().join("monitor-out");
        let lru = if seed % 2 == 0 { 0 } else { 4 };
        let cfg = monitor_config(tmp.path(), &root, &journal, &out, 40, lru);
        let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
        assert_eq!(code, 0, "seed {seed}: {err}");
        let report: Value = serde_json::from_str(&stdout).unwrap();
        apply(&mut index, &out);
        let (missing, extra, differ) = compare(&index, &walk_snapshot(tmp.path(), &root, "after"));
        assert!(
            missing.is_empty() && extra.is_empty() && differ.is_empty(),
            "seed {seed} (replay with ICICLE_TEST_SEED={seed}), lru {lru}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\nreport {}",
            report["mdt0"]
        );
        assert_all_cleared(tmp.path(), &journal);
    }
}

#[path = "lustre_monitor/dne.rs"]
mod dne;
