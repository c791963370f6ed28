//! The local monitor where one object is reachable under several paths (real kernel events,
//! as root): bind mounts into the root (of a directory outside it, and of one of the root's
//! own directories), and files with hard links outside the root or under a directory whose
//! name is not UTF-8. Changes made through any of the paths reach every path the index holds
//! for the object: after `--until-idle`, the index equals a fresh walk across mounts.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::*;

/// Whether these tests can run (as root); under CI (`CI` set), not being root is a failure.
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() == 0 };
    assert!(
        root || std::env::var_os("CI").is_none(),
        "CI must run the local monitor's tests as root (real fanotify marks, mounts)"
    );
    root
}

fn monitor_config(t: &Path, backend: &str, store: bool) -> PathBuf {
    config(
        t,
        "monitor.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n\
             [sources.local]\ntype = \"{backend}\"\nroot = \"{r}\"\npath_prefix = \"/\"\nstate_dir = \"{t}/state\"\nbatch_size = 20\nmax_emit_records = 9\nquiet_period_secs = 0.05\nfallback = false\n{store}\
             [sinks.o]\ntype = \"file\"\ndir = \"{t}/out\"\n",
            r = t.join("fs").display(),
            t = t.display(),
            store = if store { "entries_cache_mb = 1\n" } else { "" },
        ),
    )
}

/// Unmounts (lazily) when dropped.
struct Bound(PathBuf);

impl Drop for Bound {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).stderr(Stdio::null()).status();
    }
}

fn bind(from: &Path, at: &Path) -> Bound {
    let ok = Command::new("mount").arg("--bind").arg(from).arg(at).status().is_ok_and(|s| s.success());
    assert!(ok, "mount --bind {} {}", from.display(), at.display());
    Bound(at.to_path_buf())
}

/// The index the monitor published so far.
fn index_of(t: &Path) -> BTreeMap<String, serde_json::Value> {
    let mut index = BTreeMap::new();
    apply(&mut index, &t.join("out"));
    index
}

/// Wait until the monitor has published every path of `want`; the monitor stopping first (it
/// stops when idle) is a failure.
fn wait_published(t: &Path, child: &mut Child, want: &[&str]) {
    loop {
        let index = index_of(t);
        if want.iter().all(|p| index.contains_key(*p)) {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the monitor stopped ({status}) before publishing {want:?}: {:?}\n{}",
                index.keys().collect::<Vec<_>>(),
                log_of(t)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn append(p: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    f.write_all(text.as_bytes()).unwrap();
}

fn assert_converged(t: &Path, report: &serde_json::Value, what: &str) {
    let fresh = walk_snapshot_across_mounts(t, &t.join("fs"), "fresh");
    let (missing, extra, differ) = compare(&index_of(t), &fresh);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "{what}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\nreport {}",
        report["local"]
    );
}

/// A directory outside the root bound at `fs/bound`, and the root's own `fs/own` bound at
/// `fs/own-bound`, both while the monitor runs: the mount is found and rescanned, then files
/// created, written, chmod'ed and removed through every path (the bind, the original outside
/// the root, the root's own directory) reach the index at every path that shows them.
fn binds(backend: &str, store: bool) {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let tmp = test_dir();
    let t = tmp.path();
    let (fs, outside) = (t.join("fs"), t.join("outside"));
    for d in [fs.join("own/sub"), fs.join("bound"), fs.join("own-bound"), outside.join("d")] {
        std::fs::create_dir_all(d).unwrap();
    }
    for f in [fs.join("plain"), fs.join("own/f1"), fs.join("own/sub/g"), outside.join("a"), outside.join("d/b")] {
        std::fs::write(f, b"1").unwrap();
    }
    let cfg = monitor_config(t, backend, store);
    let mut child = start_monitor(t, &cfg, 2.0);
    let _bound = bind(&outside, &fs.join("bound"));
    let _own = bind(&fs.join("own"), &fs.join("own-bound"));
    // Found in the mount table and rescanned.
    wait_published(t, &mut child, &["/bound/a", "/bound/d/b", "/own-bound/f1", "/own-bound/sub/g"]);
    // Through the bind mounts.
    std::fs::write(fs.join("bound/new"), b"new").unwrap();
    append(&fs.join("bound/a"), "more");
    std::fs::create_dir(fs.join("bound/nd")).unwrap();
    std::fs::write(fs.join("bound/nd/x"), b"x").unwrap();
    std::fs::remove_file(fs.join("bound/d/b")).unwrap();
    std::fs::write(fs.join("own-bound/sub/h"), b"h").unwrap();
    append(&fs.join("own-bound/f1"), "more");
    // Through the original paths.
    std::fs::write(outside.join("via-outside"), b"o").unwrap();
    std::fs::set_permissions(outside.join("d"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(outside.join("d/c"), b"c").unwrap();
    std::fs::write(fs.join("own/f2"), b"2").unwrap();
    std::fs::set_permissions(fs.join("own/sub/g"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::remove_file(fs.join("own/sub/h")).unwrap();
    let report = finish(t, child);
    assert_converged(t, &report, &format!("{backend} bind mounts (entries_cache_mb: {store})"));
}

#[test]
fn fanotify_reports_changes_through_bind_mounts() {
    binds("fanotify", false);
}

#[test]
fn fanotify_reports_changes_through_bind_mounts_with_the_entries_file() {
    binds("fanotify", true);
}

#[test]
fn inotify_reports_changes_through_bind_mounts() {
    binds("inotify", false);
}

/// A file with a hard link outside the root, and one with a hard link under a directory whose
/// name is not UTF-8: written and chmod'ed through the other name, the record converges.
/// inotify does not see a change made through a name outside its watches: there (the
/// documented limit) the outside link's change is found by the restart's rescan.
fn links(backend: &str, store: bool) {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let tmp = test_dir();
    let t = tmp.path();
    let (fs, outside) = (t.join("fs"), t.join("outside"));
    let bad = fs.join(OsStr::from_bytes(b"bad\xff"));
    for d in [fs.join("in"), outside.clone(), bad.clone()] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(fs.join("in/linked"), b"1").unwrap();
    std::fs::hard_link(fs.join("in/linked"), outside.join("linked-out")).unwrap();
    std::fs::write(fs.join("in/other"), b"1").unwrap();
    std::fs::hard_link(fs.join("in/other"), bad.join("alias")).unwrap();
    let cfg = monitor_config(t, backend, store);
    let child = start_monitor(t, &cfg, 2.0);
    append(&outside.join("linked-out"), "written outside");
    std::fs::set_permissions(outside.join("linked-out"), std::fs::Permissions::from_mode(0o640)).unwrap();
    append(&bad.join("alias"), "written under a name that is not UTF-8");
    std::fs::set_permissions(bad.join("alias"), std::fs::Permissions::from_mode(0o604)).unwrap();
    let report = finish(t, child);
    if backend == "inotify" {
        // The change under the name that is not UTF-8 is seen; the one outside is not...
        let fresh = walk_snapshot_across_mounts(t, &fs, "fresh");
        let (missing, extra, differ) = compare(&index_of(t), &fresh);
        assert!(
            missing.is_empty() && extra.is_empty() && differ == ["/in/linked"],
            "missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\n{}",
            report["local"]
        );
        // ...until the restart's rescan compares every entry.
        let child = start_monitor(t, &cfg, 1.0);
        let report = finish(t, child);
        assert_converged(t, &report, "inotify hard links, after a restart");
        return;
    }
    assert_converged(t, &report, &format!("{backend} hard links (entries_cache_mb: {store})"));
}

#[test]
fn fanotify_reports_changes_through_hard_links_outside_the_root() {
    links("fanotify", false);
}

#[test]
fn fanotify_reports_changes_through_hard_links_outside_the_root_with_the_entries_file() {
    links("fanotify", true);
}

#[test]
fn inotify_finds_changes_through_hard_links_outside_the_root_at_a_restart() {
    links("inotify", false);
}
