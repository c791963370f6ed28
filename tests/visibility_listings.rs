//! `visible_to` under a permission rule from listings that lose directory rows: a row that is
//! missing, one that cannot be read, or one that names no path never lets a record (or a
//! directory's statistics) reach further than with the row present; it fails closed. Each case
//! has a control with the row present that publishes more, so the test can fail.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;

const ALICE: &str = "urn:u:1000";
const ADMINS: &str = "urn:admins";
const GROUP: &str = "urn:g:100";

/// An icicle9 row: kind, mode (octal here, written decimal), uid, gid, size, times, path.
fn row(kind: char, mode: u32, uid: u32, path: &str) -> String {
    let ty = if kind == 'd' { 0o040000 } else { 0o100000 };
    format!("{kind},{},{uid},100,1,1,2,3,{path}\n", ty | mode)
}

/// Snapshot `listing` (icicle9) under `posix-read` with directory aggregates.
fn run(tmp: &Path, name: &str, listing: impl AsRef<[u8]>) -> (BTreeMap<String, Vec<String>>, serde_json::Value) {
    std::fs::write(tmp.join(format!("{name}.csv")), listing).unwrap();
    run_source(tmp, name, &format!("type = \"tsv\"\npreset = \"icicle9\"\npaths = [\"{}/{name}.csv\"]", tmp.display()))
}

/// Snapshot the `[sources.s]` body `source` under `posix-read` with directory aggregates;
/// visible_to of every record by path and of every `dir:` aggregate by its principal.
fn run_source(tmp: &Path, name: &str, source: &str) -> (BTreeMap<String, Vec<String>>, serde_json::Value) {
    std::fs::write(tmp.join("principals.tsv"), "uid 1000 urn:u:1000\ngid 100 urn:g:100\n").unwrap();
    let out = tmp.join(format!("{name}-out"));
    let cfg = config(
        tmp,
        &format!("{name}.toml"),
        &format!(
            "[snapshot]\nversion = \"v\"\nmax_reject_ratio = 1.0\nrejects_file = \"{t}/{name}-rejects.jsonl\"\n\
             [records]\nvisible_to = \"posix-read\"\nprincipals = \"{t}/principals.tsv\"\neveryone = \"public\"\nadmins = [\"{ADMINS}\"]\n\
             [aggregate]\nenabled = true\ndirectory_min = 1\ndirectory_max = 3\nreference_time = 1767225600\n\
             [sources.s]\n{source}\n[sinks.o]\ntype = \"file\"\ndir = \"{o}\"\n",
            t = tmp.display(),
            o = out.display()
        ),
    );
    let (code, summary, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{name}: {err}");
    let mut got = BTreeMap::new();
    for (_, doc) in documents(&out, "ingest-") {
        for e in doc["ingest_data"]["gmeta"].as_array().unwrap() {
            let key = e["content"]["principal"].as_str().or(e["content"]["path"].as_str()).unwrap().to_string();
            let mut vis: Vec<String> =
                e["visible_to"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
            vis.sort();
            got.insert(key, vis);
        }
    }
    (got, summary)
}

fn v(list: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// The directory of a listed file has no row, and is the shallowest directory the listing
/// knows: judging from the deeper rows alone would skip it (it is 0700).
#[test]
fn a_files_parent_without_a_row_is_judged_unknown_not_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let rows =
        [row('f', 0o644, 1000, "/x/a/g"), row('d', 0o755, 1000, "/x/a/c"), row('f', 0o644, 1000, "/x/a/c/f")].concat();
    let (got, s) = run(tmp.path(), "missing", &rows);
    assert_eq!(got["/x/a/c/f"], v(&[ALICE, ADMINS]), "{s}");
    assert_eq!(got["/x/a/g"], v(&[ALICE, ADMINS]));
    // With the row, and it open: public.
    let (got, _) = run(tmp.path(), "control", [row('d', 0o755, 0, "/x/a"), rows].concat());
    assert_eq!(got["/x/a/c/f"], v(&[ALICE, GROUP, "public", ADMINS]));
}

/// A directory row that cannot be read (a uid of -1) is no row: what is below it is unknown.
#[test]
fn a_directory_row_that_cannot_be_read_makes_what_is_below_it_unknown() {
    let tmp = tempfile::tempdir().unwrap();
    let below = [row('d', 0o755, 1000, "/y/a/b/c"), row('f', 0o644, 1000, "/y/a/b/c/f")].concat();
    let bad = row('d', 0o755, 0, "/y/a/b").replacen(",0,100,", ",-1,100,", 1);
    // A good first row: a bad first row is taken for a producer's changed columns.
    let (got, s) = run(tmp.path(), "bad", [below.clone(), bad].concat());
    assert_eq!(s["rejects"], 1, "{s}");
    assert_eq!(got["/y/a/b/c/f"], v(&[ALICE, ADMINS]), "{s}");
    let (got, _) = run(tmp.path(), "control", [row('d', 0o755, 0, "/y/a/b"), below].concat());
    assert_eq!(got["/y/a/b/c/f"], v(&[ALICE, GROUP, "public", ADMINS]));
}

/// A row that may be a directory's and names no path (cut short) could be any directory's:
/// every chain is unknown in that run.
#[test]
fn a_row_that_may_be_a_directory_and_names_no_path_makes_every_chain_unknown() {
    let tmp = tempfile::tempdir().unwrap();
    let rows = [row('d', 0o755, 0, "/w"), row('f', 0o644, 1000, "/w/f")].concat();
    let (got, s) = run(tmp.path(), "cut", [rows.clone(), "d,16832,0,100\n".to_string()].concat());
    assert_eq!(s["rejects"], 1, "{s}");
    assert_eq!(got["/w/f"], v(&[ALICE, ADMINS]), "{s}");
    // A row cut short that is surely no directory's changes nothing.
    let (got, s) = run(tmp.path(), "control", [rows, "f,33188,0,100\n".to_string()].concat());
    assert_eq!(s["rejects"], 1, "{s}");
    assert_eq!(got["/w/f"], v(&[ALICE, GROUP, "public", ADMINS]));
}

/// A row whose own name is bad (a NUL byte, which no file name holds) is placed by its
/// directory: it does not make the run's chains unknown, and its directory counts for the top.
#[test]
fn rows_with_bad_names_are_placed_by_their_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let good = [row('d', 0o755, 0, "/w"), row('f', 0o644, 1000, "/w/f")].concat();
    let mut listing = good.into_bytes();
    listing.extend_from_slice(b"f,33188,1000,100,1,1,2,3,/w/bad\x00\n");
    listing.extend_from_slice(b"d,16877,1000,100,1,1,2,3,/w/dir\x00\n");
    let (got, s) = run(tmp.path(), "nul", &listing);
    assert_eq!(s["rejects"], 2, "{s}");
    assert_eq!(got["/w/f"], v(&[ALICE, GROUP, "public", ADMINS]), "{s}");
    // The only file listed in /x/a has a NUL in its name; /x/a has no row.
    let rows =
        [row('d', 0o755, 1000, "/x/a/c"), row('f', 0o644, 1000, "/x/a/c/f"), row('f', 0o644, 1000, "/x/a/g\u{0}")]
            .concat();
    let (got, s) = run(tmp.path(), "nul-only-file", &rows);
    assert_eq!(s["rejects"], 1, "{s}");
    assert_eq!(got["/x/a/c/f"], v(&[ALICE, ADMINS]), "{s}");
}

/// A directory known only as a file's parent (no row) is in the subtree a `dir:` statistic
/// covers: the statistic is shown to nobody but the admins, not to whoever may list the top.
#[test]
fn a_directory_known_only_as_a_files_parent_keeps_its_ancestors_statistics_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let rows = [row('d', 0o755, 0, "/z"), row('d', 0o755, 0, "/z/a"), row('f', 0o644, 1000, "/z/a/b/f")].concat();
    let (got, s) = run(tmp.path(), "parent", &rows);
    assert_eq!(got["dir:/z/a"], v(&[ADMINS]), "{s}");
    let (got, _) = run(tmp.path(), "control", [row('d', 0o755, 0, "/z/a/b"), rows].concat());
    assert_eq!(got["dir:/z/a"], v(&[GROUP, "public", ADMINS]));
}

/// A GUFI index whose directory lost its summary row: a directory holding only files (its
/// parent's statistics cover it), and the top directory (deeper ones would be judged alone).
#[test]
fn gufi_directories_without_a_summary_row_are_unknown() {
    use icicle_core::record::{Attrs, FileKind};
    use icicle_testkit::gen::{self, Format, GenDir, GenFile, GenFs};
    let tmp = tempfile::tempdir().unwrap();
    let attrs = |ty: u32, mode: u32, uid: u32, inode: u64| Attrs {
        mode: ty | mode,
        uid,
        gid: 100,
        size: 1,
        atime: 1,
        ctime: 2,
        mtime: 3,
        inode,
    };
    let dir = |path: &str, parent: usize, mode: u32, uid: u32, inode: u64| GenDir {
        path: path.into(),
        attrs: attrs(0o040000, mode, uid, inode),
        parent,
    };
    let file = |dir: usize, name: &str, inode: u64| GenFile {
        dir,
        name: name.into(),
        kind: FileKind::File,
        attrs: attrs(0o100000, 0o644, 1000, inode),
        target: None,
    };
    let fs = GenFs {
        dirs: vec![
            dir("/g", usize::MAX, 0o755, 0, 1),
            dir("/g/p", 0, 0o755, 0, 2),
            dir("/g/p/d", 1, 0o700, 1000, 3),
            dir("/g/p/q", 1, 0o755, 1000, 4),
        ],
        // A file in /g too: a root db.db without rows looks like GUFI's parent template.
        files: vec![file(0, "top", 7), file(2, "f", 5), file(3, "f2", 6)],
        users: vec![1000],
        groups: vec![100],
    };
    // `index` the tree's parent (GUFI's layout), or with `at_root` the tree itself.
    let snap = |name: &str, lose: Option<&str>, at_root: bool| {
        let data = tmp.path().join(name);
        gen::write(&fs, Format::Gufi, &data, 0, false).unwrap();
        let (index, prefix) = if at_root { (data.join("g"), "/g") } else { (data.clone(), "/") };
        if let Some(d) = lose {
            let db = data.join(d).join("db.db");
            let ok = std::process::Command::new("sqlite3")
                .arg(&db)
                .arg("DELETE FROM summary WHERE isroot = 1")
                .status()
                .unwrap()
                .success();
            assert!(ok, "{}", db.display());
        }
        run_source(
            tmp.path(),
            name,
            &format!("type = \"gufi\"\nindex = \"{}\"\npath_prefix = \"{prefix}\"", index.display()),
        )
    };
    let (control, s) = snap("control", None, false);
    assert_eq!(control["/g/p/q/f2"], v(&[ALICE, GROUP, "public", ADMINS]), "{s}");
    // d (0700) is below: nobody the rule names may list every directory under /g/p.
    assert_eq!(control["dir:/g/p"], v(&[ADMINS]), "{s}");
    assert_eq!(control["dir:/g/p/q"], v(&[ALICE, GROUP, "public", ADMINS]), "{s}");
    let (got, s) = snap("leaf", Some("g/p/d"), false);
    assert_eq!(got["dir:/g/p"], v(&[ADMINS]), "{s}");
    let (got, s) = snap("top", Some("g"), false);
    assert_eq!(got["/g/p/q/f2"], v(&[ALICE, ADMINS]), "{s}");
    // The index is the tree itself: its root's summary without the root's own row.
    let (got, s) = snap("root-control", None, true);
    assert_eq!(got["/g/p/q/f2"], v(&[ALICE, GROUP, "public", ADMINS]), "{s}");
    let (got, s) = snap("root", Some("g"), true);
    assert_eq!(got["/g/p/q/f2"], v(&[ALICE, ADMINS]), "{s}");
}
