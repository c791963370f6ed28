//! The local monitor when its root itself goes (real kernel events, as root). By default
//! (`when_root_gone = "fail"`) a root moved away deletes nothing: the source stops naming it,
//! and with `on_failure = "restart"` waits until it is back, then converges. With
//! `when_root_gone = "delete"`: moved away (a symlink to it left at its path), the index loses
//! what it held there (no phantoms of the old tree, whose changes are no longer the root's);
//! made again at the same path, the new directory is indexed and its changes reported;
//! removed, the index is empty. Both backends.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use icicle_testkit::lustre::{Kind, Workload};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() == 0 };
    assert!(
        root || std::env::var_os("CI").is_none(),
        "CI must run the local monitor's tests as root (real fanotify marks)"
    );
    root
}

fn index_of(t: &Path) -> BTreeMap<String, serde_json::Value> {
    let mut index = BTreeMap::new();
    apply(&mut index, &t.join("out"));
    index
}

/// Wait (at most 60 s) until the monitor has noticed the root change `n` times.
fn wait_for_root_change(t: &Path, n: usize) {
    let started = Instant::now();
    while log_of(t).matches("the root was moved, removed or replaced").count() < n {
        assert!(started.elapsed() < Duration::from_secs(60), "root change {n} never noticed: {}", log_of(t));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Wait (at most 60 s) until `ok` holds of the index the monitor has published.
fn wait_for(t: &Path, what: &str, ok: impl Fn(&BTreeMap<String, serde_json::Value>) -> bool) {
    let started = Instant::now();
    while !ok(&index_of(t)) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: never; index {:?}\n{}",
            index_of(t).keys().collect::<Vec<_>>(),
            log_of(t)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 40 files under `t/fs` that predate the monitor, a workload on them, and a local monitor
/// configuration (`top`: sections before `[records]`; `source`: more `[sources.local]` keys).
fn tree_and_config(
    t: &Path,
    seed: u64,
    backend: &str,
    top: &str,
    source: &str,
) -> (std::path::PathBuf, std::path::PathBuf, Workload) {
    let root = t.join("fs");
    let mut w = Workload::open(&root, &t.join("lfs/changelog"), seed).unwrap();
    w.preexisting(40).unwrap();
    let cfg = config(
        t,
        "monitor.toml",
        &format!(
            "{top}[records]\nvisible_to = [\"public\"]\n\
             [sources.local]\ntype = \"{backend}\"\nroot = \"{r}\"\npath_prefix = \"/\"\nstate_dir = \"{t}/state\"\nbatch_size = 50\nquiet_period_secs = 0.05\nfallback = false\n{source}\
             [sinks.o]\ntype = \"file\"\ndir = \"{t}/out\"\n",
            r = root.display(),
            t = t.display(),
        ),
    );
    (root, cfg, w)
}

fn root_goes(backend: &str) {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    let (root, cfg, mut w) = tree_and_config(t, seed, backend, "", "when_root_gone = \"delete\"\n");
    let child = start_monitor(t, &cfg, 8.0);
    w.run(Kind::Filebench, 60, "/work").unwrap();
    drop(w);
    wait_for(t, "the workload published", |i| i.keys().any(|k| k.starts_with("/work/")));
    // Moved away, a symlink to it left in its place (not followed: the root is no entry):
    // nothing at the root's path holds what the index held.
    std::fs::rename(&root, t.join("fs.old")).unwrap();
    std::os::unix::fs::symlink(t.join("fs.old"), &root).unwrap();
    std::fs::write(t.join("fs.old/written-after-the-move"), b"1").unwrap();
    std::fs::create_dir(t.join("fs.old/made-after-the-move")).unwrap();
    std::fs::write(t.join("fs.old/made-after-the-move/f"), b"1").unwrap();
    wait_for(t, "the moved root's records deleted", |i| i.is_empty());
    // Made again: indexed, and its changes reported.
    std::fs::remove_file(&root).unwrap();
    std::fs::create_dir_all(root.join("again/sub")).unwrap();
    for i in 0..12 {
        std::fs::write(root.join(format!("again/sub/f{i}")), b"x").unwrap();
    }
    wait_for_root_change(t, 2);
    wait_for(t, "the new root indexed", |i| i.len() == 12);
    std::fs::write(root.join("again/later"), b"later").unwrap();
    std::fs::create_dir(root.join("again/newdir")).unwrap();
    std::fs::write(root.join("again/newdir/g"), b"g").unwrap();
    std::fs::remove_file(root.join("again/sub/f0")).unwrap();
    std::fs::write(t.join("fs.old/written-later"), b"1").unwrap();
    wait_for(t, "the new root's changes reported", |i| {
        i.contains_key("/again/newdir/g") && !i.contains_key("/again/sub/f0")
    });
    let fresh = walk_snapshot(t, &root, "fresh");
    let (missing, extra, differ) = compare(&index_of(t), &fresh);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "seed {seed}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\n{}",
        log_of(t)
    );
    // Removed: nothing is left.
    std::fs::remove_dir_all(&root).unwrap();
    wait_for_root_change(t, 3);
    wait_for(t, "the removed root's records deleted", |i| i.is_empty());
    let report = finish(t, child);
    let r = &report["local"];
    assert_eq!(r["rescans"]["rootchanged"], 3, "{r}");
    assert!(index_of(t).is_empty(), "{r}");
}

#[test]
fn fanotify_follows_the_root_moved_made_again_and_removed() {
    root_goes("fanotify");
}

#[test]
fn inotify_follows_the_root_moved_made_again_and_removed() {
    root_goes("inotify");
}

/// The default: the root moved away stops nothing but deletes; put back, everything converges.
fn root_moved_away_deletes_nothing(backend: &str) {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    let restart = "[monitor]\non_failure = \"restart\"\nrestart_initial_secs = 0.2\nrestart_max_secs = 1\n";
    let (root, cfg, mut w) = tree_and_config(t, seed, backend, restart, "");
    let child = start_monitor(t, &cfg, 8.0);
    w.run(Kind::Filebench, 60, "/work").unwrap();
    drop(w);
    // The whole workload published before the root goes: what is compared below is then what
    // the monitor kept, not how far it had got.
    let before = walk_snapshot(t, &root, "before");
    wait_for(t, "the workload published", |i| {
        let (missing, extra, differ) = compare(i, &before);
        missing.is_empty() && extra.is_empty() && differ.is_empty()
    });
    let moved = t.join("fs.away");
    std::fs::rename(&root, &moved).unwrap();
    let started = Instant::now();
    while !log_of(t).contains("is gone (moved away, removed or unmounted): nothing was deleted") {
        assert!(started.elapsed() < Duration::from_secs(60), "the gone root was never reported: {}", log_of(t));
        std::thread::sleep(Duration::from_millis(50));
    }
    // Nothing was deleted: the index is the tree as it was moved.
    let (missing, extra, differ) = compare(&index_of(t), &walk_snapshot(t, &moved, "moved"));
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "seed {seed}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}"
    );
    // Back, changed while away: the restart converges.
    std::fs::write(moved.join("written-while-away"), b"1").unwrap();
    std::fs::rename(&moved, &root).unwrap();
    wait_for(t, "the root back and compared", |i| i.contains_key("/written-while-away"));
    let report = finish(t, child);
    assert!(report["local"]["restarts"].as_u64().unwrap_or(0) >= 1, "{report}");
    let (missing, extra, differ) = compare(&index_of(t), &walk_snapshot(t, &root, "fresh"));
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "seed {seed}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\n{}",
        log_of(t)
    );
}

#[test]
fn fanotify_root_moved_away_deletes_nothing_and_converges_when_back() {
    root_moved_away_deletes_nothing("fanotify");
}

#[test]
fn inotify_root_moved_away_deletes_nothing_and_converges_when_back() {
    root_moved_away_deletes_nothing("inotify");
}
