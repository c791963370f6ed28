//! The `icicle-testkit` binary as the monitor's tests use it: a workload journaled, then the
//! fake `lfs` answering `changelog`, `changelog_clear`, `fid2path` and `path2fid` from it.
//! (Having this test also makes `cargo test` build the binary the other tests run.)

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

fn testkit(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_icicle-testkit")).args(args).output().expect("run icicle-testkit");
    (out.status.code().unwrap_or(-1), escaped_lines(&out.stdout), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Output as the monitor reads it: each line's bytes escaped (a name may not be UTF-8).
fn escaped_lines(b: &[u8]) -> String {
    let mut s = String::new();
    for line in b.split_inclusive(|&c| c == b'\n') {
        let (body, nl) = line.strip_suffix(b"\n").map_or((line, false), |l| (l, true));
        icicle_core::name::escape_into(body, &mut s);
        if nl {
            s.push('\n');
        }
    }
    s
}

fn lfs(journal: &Path, mount: &Path, args: &[&str]) -> (i32, String, String) {
    let mut all =
        vec!["lfs", "--journal", journal.to_str().unwrap(), "--mount", mount.to_str().unwrap(), "--delay-ms", "0"];
    all.extend_from_slice(args);
    testkit(&all)
}

#[test]
fn a_journaled_workload_is_served_by_the_fake_lfs() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    std::fs::create_dir_all(&root).unwrap();
    let journal = tmp.path().join("journal.log");
    let (code, _, err) = testkit(&[
        "workload",
        "--kind",
        "mixed",
        "--ops",
        "300",
        "--root",
        root.to_str().unwrap(),
        "--journal",
        journal.to_str().unwrap(),
        "--preexisting",
        "20",
    ]);
    assert_eq!(code, 0, "workload: {err}");
    // The journal holds one record a line, names escaped; lfs prints the names' bytes (the
    // mixed workload makes Latin-1 ones), read back escaped.
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(text.contains("caf\\xe9"), "a Latin-1 name among the records");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 300, "{} records for 300 operations", lines.len());
    let indices: Vec<u64> = lines.iter().map(|l| l.split(' ').next().unwrap().parse().unwrap()).collect();
    assert!(indices.windows(2).all(|w| w[1] == w[0] + 1), "indices are consecutive");
    let (first, last) = (indices[0], *indices.last().unwrap());

    // changelog: everything, then an inclusive range.
    let (code, out, _) = lfs(&journal, &root, &["changelog", "lustre-MDT0000"]);
    assert_eq!(code, 0);
    assert_eq!(out, text);
    let (_, out, _) =
        lfs(&journal, &root, &["changelog", "lustre-MDT0000", &(first + 10).to_string(), &(first + 14).to_string()]);
    assert_eq!(out.lines().collect::<Vec<_>>(), lines[10..15]);

    // changelog_clear is inclusive and per user; an unknown user and an index past the end fail.
    let (code, _, _) = lfs(&journal, &root, &["changelog_clear", "lustre-MDT0000", "cl1", &(first + 99).to_string()]);
    assert_eq!(code, 0);
    let (_, out, _) = lfs(&journal, &root, &["changelog", "lustre-MDT0000"]);
    assert_eq!(out.lines().next(), Some(lines[100]));
    let (code, _, err) = lfs(&journal, &root, &["changelog_clear", "lustre-MDT0000", "cl9", "1"]);
    assert_eq!(code, 2);
    assert!(err.contains("no changelog user: cl9"), "{err}");
    let (code, _, err) = lfs(&journal, &root, &["changelog_clear", "lustre-MDT0000", "cl1", &(last + 1).to_string()]);
    assert_eq!(code, 22);
    assert!(err.contains("out of range"), "{err}");
    // Below what the user cleared already: EINVAL too, as lfs 2.10 to 2.17.0 answer.
    let (code, _, err) = lfs(&journal, &root, &["changelog_clear", "lustre-MDT0000", "cl1", &(first + 50).to_string()]);
    assert_eq!((code, err.trim()), (22, format!("changelog_clear: record out of range: {}", first + 50).as_str()));

    // A retained range: records purged below it are gone; a ranged read that ends below the
    // retained start prints nothing (it stops at the first record past END), and one from 0
    // starts at the oldest record kept.
    icicle_testkit::lustre::purge(&journal, first + 199).unwrap();
    let (_, out, _) = lfs(&journal, &root, &["changelog", "lustre-MDT0000", "0", &(first + 150).to_string()]);
    assert_eq!(out, "");
    let (_, out, _) = lfs(&journal, &root, &["changelog", "lustre-MDT0000", "0"]);
    assert_eq!(out.lines().next(), Some(lines[200]));
    let (_, out, _) =
        lfs(&journal, &root, &["changelog", "lustre-MDT0000", &(first + 10).to_string(), &(first + 205).to_string()]);
    assert_eq!(out.lines().collect::<Vec<_>>(), lines[200..206]);

    // path2fid and fid2path agree with the real files the workload left under the root.
    let (mut checked, mut multi) = (0, 0);
    let mut paths = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if std::fs::symlink_metadata(&path).unwrap().is_dir() {
                stack.push(path.clone());
            }
            paths.push(path);
        }
    }
    for path in paths {
        let (code, fid, err) = lfs(&journal, &root, &["path2fid", path.to_str().unwrap()]);
        assert_eq!(code, 0, "path2fid {}: {err}", path.display());
        let fid = fid.trim();
        assert!(fid.starts_with("[0x") && fid.ends_with(']'), "{fid}");
        let (code, back, err) = lfs(&journal, &root, &["fid2path", root.to_str().unwrap(), fid]);
        assert_eq!(code, 0, "fid2path {fid}: {err}");
        // One line per hard link, each naming the same file, this path among them.
        let names: Vec<&Path> = back.lines().map(Path::new).collect();
        assert!(names.contains(&path.as_path()), "fid2path {fid} -> {names:?}, not {}", path.display());
        let b = std::fs::symlink_metadata(&path).unwrap();
        for name in &names {
            let a = std::fs::symlink_metadata(name).unwrap();
            assert_eq!(
                (a.dev(), a.ino()),
                (b.dev(), b.ino()),
                "fid2path {fid} -> {} for {}",
                name.display(),
                path.display()
            );
        }
        assert_eq!(names.len() as u64, if b.is_dir() { 1 } else { b.nlink() }, "{}", path.display());
        multi += usize::from(names.len() > 1);
        checked += 1;
    }
    assert!(checked > 50, "{checked} paths");
    assert!(multi > 0, "the workload left hard-linked files");
    let (code, _, err) = lfs(&journal, &root, &["fid2path", root.to_str().unwrap(), "[0x200000bad:0x1:0x0]"]);
    assert_eq!(code, 2);
    assert!(err.contains("No such file or directory"), "{err}");
}
