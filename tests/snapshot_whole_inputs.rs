//! Versioned runs on inputs that look complete but are not, and on records that became
//! private, through `icicle snapshot`: an ne2scan listing without lester's `#complete#`
//! trailer, a walk whose directory has another file system mounted over it, records no
//! mapped principal may see any more (withdrawn, not carried over with their old
//! `visible_to`), and a path listed twice (a reject naming both lines, the same every run).

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

struct Run {
    code: i32,
    summary: Value,
    err: String,
    out: PathBuf,
}

/// A versioned run of `source` (a `[sources.s]` body) with `records` and state `tmp/state`.
fn run(tmp: &Path, name: &str, records: &str, source: &str) -> Run {
    let out = tmp.join(format!("{name}-out"));
    let cfg = config(
        tmp,
        &format!("{name}.toml"),
        &format!(
            "[snapshot]\nworkers = 2\nversion = \"v\"\nstate_dir = \"{t}/state\"\nrejects_file = \"{t}/{name}-rejects.jsonl\"\n{records}\n[sources.s]\n{source}\n[sinks.out]\ntype = \"file\"\ndir = \"{o}\"\n",
            t = tmp.display(),
            o = out.display()
        ),
    );
    let (code, stdout, err) = icicle(&["snapshot", "--json", "-c", cfg.to_str().unwrap()], &[]);
    Run { code, summary: serde_json::from_str(&stdout).unwrap_or(Value::Null), err, out }
}

const PUBLIC: &str = "[records]\nvisible_to = [\"public\"]";

/// An ne2scan row (lester `fslist`, `action-fslist.c` a1c1323: `atime|ctime|mtime|uid|gid|
/// mode|size|ino|path`) for file `i`.
fn ne2scan_row(i: usize) -> String {
    format!("1700000000|1700000001|1700000002|1000|100|100644|{}|{}|/fs/d{}/f{i}\n", i * 3, 1000 + i, i % 5)
}

#[test]
fn an_ne2scan_listing_without_its_complete_trailer_deletes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let file = t.join("scan.ne2scan");
    let header = "#IDENT#|1.0|1.47.0|1700000000|Tue Nov 14 22:13:20 GMT 2023|mds1|/dev/md0|0|0|0|0|fs=fs0|\n";
    let rows: String = (0..200).map(ne2scan_row).collect();
    std::fs::write(&file, format!("{header}{rows}#complete#1700000100\n")).unwrap();
    let source = format!("type = \"tsv\"\npreset = \"ne2scan\"\npaths = [\"{}\"]", file.display());
    let r = run(t, "whole", PUBLIC, &source);
    assert_eq!((r.code, r.summary["created"].as_u64()), (0, Some(200)), "{}", r.err);
    // The scan stopped at a line end after 120 rows: no trailer.
    let rows: String = (0..120).map(ne2scan_row).collect();
    std::fs::write(&file, format!("{header}{rows}")).unwrap();
    let r = run(t, "stopped", PUBLIC, &source);
    assert_eq!(r.code, 0, "{}", r.err);
    let s = &r.summary;
    assert_eq!(
        (s["deleted"].as_u64(), s["deletes_withheld"].as_u64(), s["unchanged"].as_u64()),
        (Some(0), Some(80), Some(120)),
        "{s}"
    );
    assert!(s["unknown_scopes"][0]["reason"].as_str().unwrap_or("").contains("no `#complete#` line at the end"), "{s}");
    assert!(deleted(&r.out).is_empty());
    // Finished again (trailer back), with 20 files really gone: exactly those are deleted.
    let rows: String = (0..180).map(ne2scan_row).collect();
    std::fs::write(&file, format!("{header}{rows}#complete#1700000200\n")).unwrap();
    let r = run(t, "finished", PUBLIC, &source);
    assert_eq!((r.code, r.summary["deleted"].as_u64()), (0, Some(20)), "{}", r.err);
    let want: BTreeSet<String> = (180..200).map(|i| format!("/fs/d{}/f{i}", i % 5)).collect();
    assert_eq!(deleted(&r.out).into_iter().collect::<BTreeSet<_>>(), want);
}

/// The rejects a run wrote (its `rejects_file`).
fn rejects_of(tmp: &Path, name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(tmp.join(format!("{name}-rejects.jsonl"))).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn a_path_listed_twice_is_a_reject_naming_both_lines_the_same_every_run() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let file = t.join("scan.ne2scan");
    let header = "#IDENT#|1.0|1.47.0|1700000000|Tue Nov 14 22:13:20 GMT 2023|mds1|/dev/md0|0|0|0|0|fs=fs0|\n";
    let rows: String = (0..1000).map(ne2scan_row).collect();
    std::fs::write(&file, format!("{header}{rows}#complete#1700000100\n")).unwrap();
    let source = format!("type = \"tsv\"\npreset = \"ne2scan\"\npaths = [\"{}\"]", file.display());
    let r = run(t, "first", PUBLIC, &source);
    assert_eq!((r.code, r.summary["created"].as_u64()), (0, Some(1000)), "{}", r.err);
    // f7 (line 9) listed again at line 1002 with another size (4 rejects in 1,003 rows: within the default 1 %); a new path at lines 1003 and 1004.
    let again = "1700000000|1700000001|1700000002|1000|100|100644|999|1007|/fs/d2/f7\n";
    let new = "1700000000|1700000001|1700000002|1000|100|100644|5|5000|/fs/new\n";
    std::fs::write(&file, format!("{header}{rows}{again}{new}{new}#complete#1700000200\n")).unwrap();
    for name in ["twice", "twice-again"] {
        let r = run(t, name, PUBLIC, &source);
        let s = &r.summary;
        assert_eq!(r.code, 0, "{name}: {}", r.err);
        let counts = ["rejects", "created", "updated", "unchanged", "deleted", "deletes_withheld", "emitted"]
            .map(|k| s[k].as_u64().unwrap_or(u64::MAX));
        assert_eq!(
            counts,
            [4, 0, 0, 999, 0, 1, 0],
            "{name}: rejects created updated unchanged deleted withheld emitted: {s}"
        );
        // Neither row of either path is sent, nothing is deleted.
        assert!(ingested(&r.out).is_empty() && deleted(&r.out).is_empty(), "{name}");
        let rejects = rejects_of(t, name);
        let mut lines: Vec<(String, u64)> =
            rejects.iter().map(|j| (j["reason"].as_str().unwrap().to_string(), j["line"].as_u64().unwrap())).collect();
        lines.sort_by_key(|l| l.1);
        assert_eq!(lines.iter().map(|l| l.1).collect::<Vec<_>>(), [9, 1002, 1003, 1004], "{name}: {rejects:?}");
        let f7 = format!("{} line 9, {} line 1002", file.display(), file.display());
        assert!(
            lines[0].0.contains("\"/fs/d2/f7\": read 2 times") && lines[0].0.contains(&f7) && lines[0].0 == lines[1].0,
            "{name}: {lines:?}"
        );
        assert!(
            lines[2].0.contains("line 1003") && lines[2].0.contains("line 1004") && lines[2].0 == lines[3].0,
            "{name}: {lines:?}"
        );
    }
    // Listed once again: f7 is updated, the new path created.
    std::fs::write(
        &file,
        format!("{header}{}{again}{new}#complete#1700000300\n", rows.replace("|/fs/d2/f7\n", "|/fs/d2/f7-gone\n")),
    )
    .unwrap();
    let r = run(t, "once", PUBLIC, &source);
    let s = &r.summary;
    let counts = ["rejects", "created", "updated", "deleted"].map(|k| s[k].as_u64().unwrap_or(u64::MAX));
    assert_eq!((r.code, counts), (0, [0, 2, 1, 0]), "{s}\n{}", r.err);
    let sent = ingested(&r.out);
    assert_eq!(sent["/fs/d2/f7"]["content"]["size"], 999, "{sent:?}");
    assert!(sent.contains_key("/fs/new") && sent.contains_key("/fs/d2/f7-gone"), "{sent:?}");
}

/// Unmounts `path` when dropped.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_file_system_mounted_over_a_walked_directory_deletes_nothing_below_it() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        eprintln!("skipped: mounting needs root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let root = t.join("fs");
    for (dir, n) in [("home", 850), ("proj", 150)] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        for i in 0..n {
            std::fs::write(root.join(dir).join(format!("f{i}")), b"x").unwrap();
        }
    }
    let source = format!("type = \"walk\"\nroot = \"{}\"\npath_prefix = \"/\"", root.display());
    let r = run(t, "good", PUBLIC, &source);
    assert_eq!((r.code, r.summary["created"].as_u64()), (0, Some(1000)), "{}", r.err);
    // An empty file system mounted over the project directory (or the project's own one
    // unmounted, leaving the empty mount point): not entered, kept.
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "none"])
        .arg(root.join("proj"))
        .status()
        .unwrap()
        .success();
    assert!(ok, "mount");
    let mounted = Mounted(root.join("proj"));
    let r = run(t, "mounted", PUBLIC, &source);
    assert_eq!(r.code, 0, "{}", r.err);
    let s = &r.summary;
    assert_eq!(
        (s["deleted"].as_u64(), s["deletes_withheld"].as_u64(), s["unchanged"].as_u64()),
        (Some(0), Some(150), Some(850)),
        "{s}"
    );
    assert_eq!(s["unknown_scopes"][0]["scope"], "/proj/**", "{s}");
    assert!(deleted(&r.out).is_empty());
    drop(mounted);
    let r = run(t, "unmounted", PUBLIC, &source);
    assert_eq!(
        (r.code, r.summary["unchanged"].as_u64(), r.summary["deleted"].as_u64()),
        (0, Some(1000), Some(0)),
        "{}",
        r.summary
    );
}

#[test]
fn records_nobody_may_see_any_more_are_withdrawn_not_carried_over() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        eprintln!("skipped: other owners need root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let root = t.join("fs");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (uid, n) in [(1000u32, 45), (1001, 5)] {
        for i in 0..n {
            let f = root.join(format!("u{uid}-f{i}"));
            std::fs::write(&f, b"x").unwrap();
            std::os::unix::fs::chown(&f, Some(uid), Some(100)).unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
    }
    let records = |uids: &[u32]| {
        let map: String = uids.iter().map(|u| format!("uid\t{u}\turn:u:{u}\n")).collect();
        std::fs::write(t.join("principals.tsv"), map).unwrap();
        format!("[records]\nvisible_to = \"posix-read\"\nprincipals = \"{}/principals.tsv\"", t.display())
    };
    let source = format!("type = \"walk\"\nroot = \"{}\"\npath_prefix = \"/\"", root.display());
    let r = run(t, "both-mapped", &records(&[1000, 1001]), &source);
    assert_eq!(
        (r.code, r.summary["created"].as_u64(), r.summary["withdrawn"].as_u64()),
        (0, Some(50), Some(0)),
        "{}",
        r.err
    );
    assert_eq!(ingested(&r.out)["/u1001-f0"]["visible_to"], serde_json::json!(["urn:u:1001"]));
    // uid 1001 removed from the map: its files are withdrawn, so it no longer sees them.
    let r = run(t, "one-removed", &records(&[1000]), &source);
    assert_eq!(r.code, 0, "{}", r.err);
    let s = &r.summary;
    assert_eq!(
        (s["withdrawn"].as_u64(), s["deleted"].as_u64(), s["deletes_withheld"].as_u64(), s["rejects"].as_u64()),
        (Some(5), Some(5), Some(0), Some(0)),
        "{s}"
    );
    let want: BTreeSet<String> = (0..5).map(|i| format!("/u1001-f{i}")).collect();
    assert_eq!(deleted(&r.out).into_iter().collect::<BTreeSet<_>>(), want);
    // Mapped again: published again.
    let r = run(t, "mapped-again", &records(&[1000, 1001]), &source);
    assert_eq!(
        (r.code, r.summary["created"].as_u64(), r.summary["deleted"].as_u64()),
        (0, Some(5), Some(0)),
        "{}",
        r.summary
    );
}
