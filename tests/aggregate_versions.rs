//! Versioned runs and aggregate records: a user, group or directory prefix that disappears
//! between runs gets a delete document, unless an unreadable input may hide its files.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::*;
use icicle_gmeta::subject_for;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};

/// A versioned snapshot of `source` with aggregates for prefixes of depth 1 to 3 (unless
/// `aggregate` is false), delivered to `tmp/out<n>`.
fn run(tmp: &Path, source: &str, n: u32, aggregate: bool) -> (serde_json::Value, PathBuf) {
    run_max(tmp, source, n, aggregate, 3)
}

fn run_max(tmp: &Path, source: &str, n: u32, aggregate: bool, max: usize) -> (serde_json::Value, PathBuf) {
    let out = tmp.join(format!("out{n}"));
    let cfg = config(
        tmp,
        "run.toml",
        &format!(
            "[snapshot]\nworkers = 2\nversion = \"v{n}\"\nstate_dir = \"{t}/state\"\nrejects_file = \"{t}/rejects.jsonl\"\nmax_delete_ratio = 1.0\n\
             [records]\nvisible_to = [\"public\"]\n\
             [aggregate]\nenabled = {aggregate}\ndirectory_min = 1\ndirectory_max = {max}\nreference_time = 1767225600\n\
             [sources.s]\n{source}\n[sinks.out]\ntype = \"file\"\ndir = \"{o}\"\n",
            t = tmp.display(),
            o = out.display()
        ),
    );
    let (code, s, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    (s, out)
}

/// The subjects of the aggregate records ingested into a file sink directory.
fn aggregate_subjects(out: &Path) -> BTreeSet<String> {
    let mut v = BTreeSet::new();
    for (_, doc) in documents(out, "ingest-") {
        for e in doc["ingest_data"]["gmeta"].as_array().unwrap() {
            if e["content"]["principal"].is_string() {
                v.insert(e["subject"].as_str().unwrap().to_string());
            }
        }
    }
    v
}

fn sorted(v: impl IntoIterator<Item = impl Into<String>>) -> Vec<String> {
    let mut v: Vec<String> = v.into_iter().map(Into::into).collect();
    v.sort();
    v
}

const ROWS: [&str; 7] = [
    "f,33188,1000,100,10,1,2,3,/fs/a/x/f1",
    "f,33188,1001,100,20,1,2,3,/fs/a/y/f2",
    "f,33188,1002,100,30,1,2,3,/fs/a/x/f3",
    "f,33188,1002,100,35,1,2,3,/fs/b/f4",
    "f,33188,1000,300,40,1,2,3,/fs/c/z/f5",
    "f,33188,1001,300,50,1,2,3,/fs/c/f6",
    "f,33188,1000,100,60,1,2,3,/fs/b/f7",
];

/// All of uid 1002's files and everything under /fs/c (so also group 300) are gone.
const KEPT: [usize; 3] = [0, 1, 6];

fn write_rows(input: &Path, rows: &[usize]) {
    let text: String = rows.iter().map(|&i| format!("{}\n", ROWS[i])).collect();
    std::fs::write(input, text).unwrap();
}

fn tsv(input: &Path) -> String {
    format!("type = \"tsv\"\npaths = [\"{}\"]\npreset = \"icicle9\"", input.display())
}

#[test]
fn vanished_users_groups_and_prefixes_are_deleted_once() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.csv");
    write_rows(&input, &[0, 1, 2, 3, 4, 5, 6]);
    let (s, out) = run(tmp.path(), &tsv(&input), 1, true);
    assert_eq!((s["created"].as_u64(), s["aggregates_deleted"].as_u64()), (Some(7), Some(0)), "{s}");
    let all = [
        "dir:/fs",
        "dir:/fs/a",
        "dir:/fs/a/x",
        "dir:/fs/a/y",
        "dir:/fs/b",
        "dir:/fs/c",
        "dir:/fs/c/z",
        "group:100",
        "group:300",
        "user:1000",
        "user:1001",
        "user:1002",
    ];
    assert_eq!(aggregate_subjects(&out), all.iter().map(|s| s.to_string()).collect());
    assert!(deleted(&out).is_empty());

    write_rows(&input, &KEPT);
    let (s, out) = run(tmp.path(), &tsv(&input), 2, true);
    assert_eq!(
        deleted(&out),
        sorted([
            "/fs/a/x/f3",
            "/fs/b/f4",
            "/fs/c/z/f5",
            "/fs/c/f6",
            "user:1002",
            "group:300",
            "dir:/fs/c",
            "dir:/fs/c/z"
        ])
    );
    assert_eq!(
        (s["deleted"].as_u64(), s["aggregates_deleted"].as_u64(), s["aggregate_deletes_withheld"].as_u64()),
        (Some(4), Some(4), Some(0)),
        "{s}"
    );
    // The aggregates that still exist are re-sent (recomputed), the vanished ones are not.
    let left =
        ["dir:/fs", "dir:/fs/a", "dir:/fs/a/x", "dir:/fs/a/y", "dir:/fs/b", "group:100", "user:1000", "user:1001"];
    assert_eq!(aggregate_subjects(&out), left.iter().map(|s| s.to_string()).collect());

    let (s, out) = run(tmp.path(), &tsv(&input), 3, true);
    assert!(deleted(&out).is_empty(), "{:?}", deleted(&out));
    assert_eq!((s["deleted"].as_u64(), s["aggregates_deleted"].as_u64()), (Some(0), Some(0)), "{s}");
    assert_eq!(aggregate_subjects(&out), left.iter().map(|s| s.to_string()).collect());
}

#[test]
fn a_manifest_without_aggregate_subjects_deletes_no_aggregates() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.csv");
    write_rows(&input, &[0, 1, 2, 3, 4, 5, 6]);
    run(tmp.path(), &tsv(&input), 1, true);
    // A manifest written before aggregate subjects were remembered has only its parts.
    let manifest = current_manifest(&tmp.path().join("state"));
    let extra: Vec<PathBuf> = std::fs::read_dir(&manifest)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_none_or(|e| e != "tsv") && !p.ends_with("FORMAT"))
        .collect();
    assert_eq!(extra, vec![manifest.join("pipeline-aggregate.jsonl")]);
    std::fs::remove_file(&extra[0]).unwrap();

    write_rows(&input, &KEPT);
    let (s, out) = run(tmp.path(), &tsv(&input), 2, true);
    assert_eq!(deleted(&out), sorted(["/fs/a/x/f3", "/fs/b/f4", "/fs/c/z/f5", "/fs/c/f6"]));
    assert_eq!((s["unchanged"].as_u64(), s["aggregates_deleted"].as_u64()), (Some(3), Some(0)), "{s}");
    // From now on the aggregates are remembered: /fs/b goes next.
    write_rows(&input, &[0, 1]);
    let (_, out) = run(tmp.path(), &tsv(&input), 3, true);
    assert_eq!(deleted(&out), sorted(["/fs/b/f7", "dir:/fs/b"]));
}

#[test]
fn a_run_without_the_aggregate_pipeline_keeps_its_subjects() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.csv");
    write_rows(&input, &[0, 1, 2, 3, 4, 5, 6]);
    run(tmp.path(), &tsv(&input), 1, true);
    write_rows(&input, &KEPT);
    // Aggregates off: only the primary records are compared.
    let (s, out) = run(tmp.path(), &tsv(&input), 2, false);
    assert_eq!(deleted(&out), sorted(["/fs/a/x/f3", "/fs/b/f4", "/fs/c/z/f5", "/fs/c/f6"]));
    assert_eq!(s["aggregates_deleted"], 0, "{s}");
    // On again: the aggregates of the last run that had them are compared.
    let (s, out) = run(tmp.path(), &tsv(&input), 3, true);
    assert_eq!(deleted(&out), sorted(["user:1002", "group:300", "dir:/fs/c", "dir:/fs/c/z"]));
    assert_eq!((s["deleted"].as_u64(), s["aggregates_deleted"].as_u64()), (Some(0), Some(4)), "{s}");
}

/// Aggregates of prefixes down to this depth in the generated tree (home directories are at 3).
const MAX: usize = 6;

/// The aggregate subjects of `fs`'s files, except those in directory `skip`: user, group and
/// every prefix of depth 1 to [`MAX`].
fn expected_subjects(fs: &GenFs, skip: Option<&str>) -> BTreeSet<String> {
    let mut v = BTreeSet::new();
    for f in &fs.files {
        let dir = &fs.dirs[f.dir].path;
        if skip.is_some_and(|d| dir == d) {
            continue;
        }
        v.insert(format!("user:{}", f.attrs.uid));
        v.insert(format!("group:{}", f.attrs.gid));
        let parts: Vec<&str> = dir.split('/').filter(|c| !c.is_empty()).collect();
        for level in 1..=parts.len().min(MAX) {
            v.insert(subject_for(&format!("dir:/{}", parts[..level].join("/"))).into_owned());
        }
    }
    v
}

fn under(path: &str, dir: &str) -> bool {
    path == dir || path.starts_with(&format!("{dir}/"))
}

#[test]
fn unreadable_inputs_withhold_aggregate_deletes() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = GenFs::generate(&GenSpec::new(600, 13));
    let data = tmp.path().join("gufi");
    let write = |fs: &GenFs| {
        let _ = std::fs::remove_dir_all(&data);
        gen::write(fs, Format::Gufi, &data, 0, false).unwrap();
    };
    write(&fs);
    let source = format!("type = \"gufi\"\nindex = \"{}\"", data.display());
    let (s, out) = run_max(tmp.path(), &source, 1, true, MAX);
    assert_eq!(s["created"], 600, "{s}");
    let first = expected_subjects(&fs, None);
    assert_eq!(aggregate_subjects(&out), first);

    // D: a directory of depth ≤ MAX holding files, with none below it, so that `dir:D`
    // exists only through D's own database. P: a prefix of depth 2 away from D, removed entirely.
    // U: a user, all of whose files are removed.
    let depth = |d: &str| d.split('/').filter(|c| !c.is_empty()).count();
    let dirs_with_files: BTreeSet<&str> = fs.files.iter().map(|f| fs.dirs[f.dir].path.as_str()).collect();
    let d = dirs_with_files
        .iter()
        .copied()
        .find(|d| depth(d) >= 3 && depth(d) <= MAX && dirs_with_files.iter().all(|o| o == d || !under(o, d)))
        .expect("a leaf directory of depth 3 to MAX")
        .to_string();
    let p = dirs_with_files
        .iter()
        .filter(|o| depth(o) >= 2)
        .map(|o| format!("/{}", o.split('/').filter(|c| !c.is_empty()).take(2).collect::<Vec<_>>().join("/")))
        .find(|p| !under(&d, p))
        .expect("a prefix of depth 2 away from D");
    let u = fs
        .files
        .iter()
        .map(|f| f.attrs.uid)
        .find(|u| fs.files.iter().any(|f| f.attrs.uid == *u && under(&fs.dirs[f.dir].path, &d)))
        .unwrap();
    let mut fs2 = fs.clone();
    fs2.files.retain(|f| f.attrs.uid != u && !under(&fs.dirs[f.dir].path, &p));
    let removed: Vec<String> =
        fs.files.iter().filter(|f| f.attrs.uid == u || under(&fs.dirs[f.dir].path, &p)).map(|f| fs.path(f)).collect();
    assert!(!removed.is_empty());
    write(&fs2);
    std::fs::write(data.join(d.trim_start_matches('/')).join("db.db"), "garbage").unwrap();

    let (s, out) = run_max(tmp.path(), &source, 2, true, MAX);
    assert_eq!(s["rejects"], 1, "{s}");
    let present = expected_subjects(&fs2, Some(&d));
    assert_eq!(aggregate_subjects(&out), present);
    let gone: BTreeSet<&String> = first.difference(&present).collect();
    // Users and groups may have files anywhere; prefixes only where they meet D.
    let (withheld, deleted_aggs): (Vec<&String>, Vec<&String>) =
        gone.iter().partition(|s| s.strip_prefix("dir:").is_none_or(|x| under(x, &d) || under(&d, x)));
    assert!(withheld.contains(&&format!("user:{u}")), "{withheld:?}");
    assert!(withheld.contains(&&format!("dir:{d}")), "{withheld:?}");
    assert!(deleted_aggs.contains(&&format!("dir:{p}")), "{deleted_aggs:?}");
    let primary = removed.iter().filter(|r| !under(r, &d)).map(|r| subject_for(r).into_owned());
    assert_eq!(deleted(&out), sorted(primary.chain(deleted_aggs.iter().map(|s| s.to_string()))));
    assert_eq!(
        (s["aggregates_deleted"].as_u64(), s["aggregate_deletes_withheld"].as_u64()),
        (Some(deleted_aggs.len() as u64), Some(withheld.len() as u64)),
        "{s}"
    );

    // D is readable again: what it hid and what is really gone is deleted now.
    write(&fs2);
    let (s, out) = run_max(tmp.path(), &source, 3, true, MAX);
    assert_eq!(s["rejects"], 0, "{s}");
    let now = expected_subjects(&fs2, None);
    assert_eq!(aggregate_subjects(&out), now);
    let hidden = removed.iter().filter(|r| under(r, &d)).map(|r| subject_for(r).into_owned());
    let really_gone: Vec<String> = withheld.iter().filter(|s| !now.contains(**s)).map(|s| s.to_string()).collect();
    assert!(really_gone.contains(&format!("user:{u}")));
    assert_eq!(deleted(&out), sorted(hidden.chain(really_gone)));

    let (_, out) = run_max(tmp.path(), &source, 4, true, MAX);
    assert!(deleted(&out).is_empty());
}

#[test]
fn misspelt_principals_stop_the_run_and_directory_aggregates_are_never_public_by_fallback() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.csv");
    write_rows(&input, &[0, 1, 2, 3, 4, 5, 6]);
    let out = tmp.path().join("out");
    let body = |records: &str, aggregate: &str| {
        format!(
            "[snapshot]\nversion = \"v1\"\n[records]\n{records}\n[aggregate]\nenabled = true\ndirectory_min = 1\ndirectory_max = 2\nreference_time = 1767225600\n{aggregate}\n\
             [sources.s]\ntype = \"tsv\"\npaths = [\"{i}\"]\npreset = \"icicle9\"\n[sinks.out]\ntype = \"file\"\ndir = \"{o}\"\n",
            i = input.display(),
            o = out.display()
        )
    };
    // A typo in a literal principal is a configuration error naming the key and the file.
    let cfg = config(tmp.path(), "typo.toml", &body("visible_to = [\"owner\"]\nfallback = [\"pubic\"]", ""));
    let (code, _, err) = snapshot(&cfg, &[]);
    assert_ne!(code, 0);
    assert!(err.contains("records.fallback[0]") && err.contains("pubic") && err.contains("typo.toml"), "{err}");
    let cfg = config(
        tmp.path(),
        "dirs.toml",
        &body("visible_to = [\"owner\"]\nfallback = [\"public\"]", "dir_visible_to = [\"admins\"]"),
    );
    let (code, _, err) = snapshot(&cfg, &[]);
    assert_ne!(code, 0);
    assert!(
        err.contains("aggregate.dir_visible_to[0]") && err.contains("admins") && err.contains("dirs.toml"),
        "{err}"
    );
    // With a public fallback for unmapped owners, primary records fall back to public; a
    // directory aggregate with no principal of its own is held back, never made public.
    let cfg = config(tmp.path(), "ok.toml", &body("visible_to = [\"owner\"]\nfallback = [\"public\"]", ""));
    let (code, s, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    let mut primaries = 0;
    for (_, doc) in documents(&out, "ingest-") {
        for e in doc["ingest_data"]["gmeta"].as_array().unwrap() {
            let subject = e["subject"].as_str().unwrap();
            let vis: Vec<&str> = e["visible_to"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
            match e["content"]["principal"].as_str() {
                Some(p) => assert!(!(p.starts_with("dir:") && vis.contains(&"public")), "{subject} is public: {vis:?}"),
                None => {
                    primaries += 1;
                    assert_eq!(vis, vec!["public"], "{subject}");
                }
            }
        }
    }
    assert_eq!(primaries, 7);
    assert!(s["pipelines"]["aggregate"]["without_visible_to"].as_u64().unwrap() > 0, "{s}");
}
