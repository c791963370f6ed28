//! A versioned snapshot never deletes what still exists: each ordinary accident, fed to a
//! run after a good one, with the default guards, deletes no live subject; a later good run
//! still knows every subject (nothing was dropped from the manifest either).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

const FILES: usize = 1000;
const PARTS: usize = 4;

fn row(i: usize) -> String {
    format!("f,33188,1000,100,{},1700000000,1700000001,1700000002,/fs/d{}/f{i}", i * 7, i % 10)
}

/// The good listing: `PARTS` files of `FILES / PARTS` rows, except the rows in `skip`.
fn write_listing(dir: &Path, skip: &BTreeSet<usize>) {
    std::fs::create_dir_all(dir).unwrap();
    for p in 0..PARTS {
        let rows: String =
            (p * FILES / PARTS..(p + 1) * FILES / PARTS).filter(|i| !skip.contains(i)).map(|i| row(i) + "\n").collect();
        std::fs::write(dir.join(format!("part-{p}.csv")), rows).unwrap();
    }
}

fn all_paths() -> BTreeSet<String> {
    (0..FILES).map(|i| format!("/fs/d{}/f{i}", i % 10)).collect()
}

struct Run {
    code: i32,
    summary: Value,
    err: String,
    out: PathBuf,
}

/// A versioned run of `source` with `state`, delivering to a fresh `tmp/<name>-out`.
fn run_with(
    tmp: &Path,
    name: &str,
    source: &str,
    state: &Path,
    extra: &str,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Run {
    let out = tmp.join(format!("{name}-out"));
    let cfg = config(
        tmp,
        &format!("{name}.toml"),
        &format!(
            "[snapshot]\nworkers = 2\nversion = \"v\"\nstate_dir = \"{}\"\nrejects_file = \"{}/{name}-rejects.jsonl\"\n{extra}\n[records]\nvisible_to = [\"public\"]\n[sources.s]\n{source}\n[sinks.out]\ntype = \"file\"\ndir = \"{}\"\n",
            state.display(),
            tmp.display(),
            out.display()
        ),
    );
    let mut a = vec!["snapshot", "--json", "-c", cfg.to_str().unwrap()];
    a.extend_from_slice(args);
    let (code, stdout, err) = icicle(&a, envs);
    Run { code, summary: serde_json::from_str(&stdout).unwrap_or(Value::Null), err, out }
}

fn run(tmp: &Path, name: &str, source: &str, state: &Path) -> Run {
    run_with(tmp, name, source, state, "", &[], &[])
}

fn tsv(paths: &str) -> String {
    format!("type = \"tsv\"\npaths = [{paths}]\npreset = \"icicle9\"")
}

/// A copy of the good run's state for one accident.
fn fork_state(good: &Path, tmp: &Path, name: &str) -> PathBuf {
    let to = tmp.join(format!("{name}-state"));
    let ok = std::process::Command::new("cp").arg("-a").arg(good).arg(&to).status().unwrap().success();
    assert!(ok);
    to
}

/// After an accident: nothing was deleted, and a good run from the same state finds every
/// subject unchanged (none was dropped from the manifest).
fn assert_nothing_lost(tmp: &Path, name: &str, r: &Run, state: &Path, good_source: &str) {
    assert!(deleted(&r.out).is_empty(), "{name}: deleted {:?}", deleted(&r.out));
    let after = run(tmp, &format!("{name}-after"), good_source, state);
    assert_eq!(after.code, 0, "{name}: {}", after.err);
    let s = &after.summary;
    assert_eq!(
        (s["created"].as_u64(), s["unchanged"].as_u64(), s["deleted"].as_u64()),
        (Some(0), Some(FILES as u64), Some(0)),
        "{name}: {s}"
    );
    assert!(deleted(&after.out).is_empty(), "{name}");
}

#[test]
fn each_accident_after_a_good_run_deletes_no_live_subject() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let listing = t.join("listing");
    write_listing(&listing, &BTreeSet::new());
    let good_source = tsv(&format!("\"{}/*.csv\"", listing.display()));
    let good = t.join("good-state");
    let r = run(t, "good", &good_source, &good);
    assert_eq!((r.code, r.summary["created"].as_u64()), (0, Some(FILES as u64)), "{}", r.err);
    assert_eq!(ingested(&r.out).keys().cloned().collect::<BTreeSet<_>>(), all_paths());

    // Inputs that yield nothing: an error naming them, nothing delivered.
    std::fs::create_dir_all(t.join("empty")).unwrap();
    for (name, paths, why) in [
        ("glob-on-empty-dir", format!("\"{}/empty/*.csv\"", t.display()), "matches no file"),
        ("unmounted", format!("\"{}/not-mounted/listings\"", t.display()), "no such file or directory"),
        ("empty-dir", format!("\"{}/empty\"", t.display()), "holds no file"),
        ("glob-matching-nothing", format!("\"{}/*.tsv\"", listing.display()), "matches no file"),
    ] {
        let state = fork_state(&good, t, name);
        let r = run(t, name, &tsv(&paths), &state);
        assert_eq!(r.code, 1, "{name}: {}", r.err);
        assert!(r.err.contains(why) && r.err.contains("could not be planned"), "{name}: {}", r.err);
        assert!(!r.out.exists(), "{name}: nothing is delivered");
        assert_nothing_lost(t, name, &r, &state, &good_source);
    }

    // A producer added or dropped a column: one error at line 1, nothing delivered.
    for (name, edit) in [("added-column", 0usize), ("dropped-column", 1)] {
        let drift = t.join(name);
        std::fs::create_dir_all(&drift).unwrap();
        for p in 0..PARTS {
            let text = std::fs::read_to_string(listing.join(format!("part-{p}.csv"))).unwrap();
            let changed: String =
                text.lines()
                    .map(|l| {
                        if edit == 0 {
                            format!("1756901806,{l}\n")
                        } else {
                            l.replacen(",1000,100,", ",1000,", 1) + "\n"
                        }
                    })
                    .collect();
            std::fs::write(drift.join(format!("part-{p}.csv")), changed).unwrap();
        }
        let state = fork_state(&good, t, name);
        let r = run(t, name, &tsv(&format!("\"{}/*.csv\"", drift.display())), &state);
        assert_eq!(r.code, 1, "{name}: {}", r.err);
        assert!(r.err.contains("line 1: the file does not match the icicle9 preset"), "{name}: {}", r.err);
        assert!(!r.out.exists(), "{name}");
        assert_nothing_lost(t, name, &r, &state, &good_source);
    }

    // Drift after the first line of one file: a quarter of the rows rejected, past the
    // default ceiling (1 %): the run fails with no deletes.
    {
        let drift = t.join("late-drift");
        write_listing(&drift, &BTreeSet::new());
        let p3 = drift.join("part-3.csv");
        let text = std::fs::read_to_string(&p3).unwrap();
        let changed: String = text
            .lines()
            .enumerate()
            .map(|(i, l)| if i == 0 { format!("{l}\n") } else { format!("1756901806,{l}\n") })
            .collect();
        std::fs::write(&p3, changed).unwrap();
        let p0 = drift.join("part-0.csv");
        let text0 = std::fs::read_to_string(&p0).unwrap();
        std::fs::write(&p0, text0.replace(&row(5), &row(5).replace(",35,", ",36,"))).unwrap();
        let state = fork_state(&good, t, "late-drift");
        let r = run(t, "late-drift", &tsv(&format!("\"{}/*.csv\"", drift.display())), &state);
        assert_eq!(r.code, 3, "{}", r.err);
        assert_eq!(
            (r.summary["rejects"].as_u64(), r.summary["reject_threshold_exceeded"].as_bool()),
            (Some(249), Some(true))
        );
        assert!(ingested(&r.out).is_empty(), "the update read before the drift is not delivered either");
        assert_eq!(r.summary["batches_withheld"], 1);
        assert_nothing_lost(t, "late-drift", &r, &state, &good_source);
    }

    // A producer switched to milliseconds: every row fails the time check, the ceiling
    // stops the run, nothing is delivered.
    {
        let ms = t.join("millis");
        std::fs::create_dir_all(&ms).unwrap();
        for p in 0..PARTS {
            let text = std::fs::read_to_string(listing.join(format!("part-{p}.csv"))).unwrap();
            std::fs::write(ms.join(format!("part-{p}.csv")), text.replace(",1700000002,", ",1700000002000,")).unwrap();
        }
        let state = fork_state(&good, t, "millis");
        let r = run(t, "millis", &tsv(&format!("\"{}/*.csv\"", ms.display())), &state);
        assert_eq!(r.code, 3, "{}", r.err);
        let s = &r.summary;
        assert_eq!((s["rejects"].as_u64(), s["unreadable_inputs"].as_u64()), (Some(FILES as u64), Some(0)), "{s}");
        assert!(ingested(&r.out).is_empty());
        assert_nothing_lost(t, "millis", &r, &state, &good_source);
    }

    // A listing file missing (a quarter of the index): the deletion guard stops the run;
    // the override deletes exactly those.
    {
        let part = t.join("three-parts");
        write_listing(&part, &BTreeSet::new());
        std::fs::remove_file(part.join("part-2.csv")).unwrap();
        // And one file changed: its update is held back with everything else.
        let p0 = part.join("part-0.csv");
        let text0 = std::fs::read_to_string(&p0).unwrap();
        std::fs::write(&p0, text0.replace(&row(5), &row(5).replace(",35,", ",36,"))).unwrap();
        let src = tsv(&format!("\"{}/*.csv\"", part.display()));
        let state = fork_state(&good, t, "guard");
        let r = run(t, "guard", &src, &state);
        assert_eq!(r.code, 4, "{}", r.err);
        let why = r.summary["delete_guard"].as_str().unwrap_or_default().to_string();
        assert!(
            why.contains("250 of the previous run's 1000 subjects (25.0%)") && why.contains("max_delete_ratio = 0.2"),
            "{why}"
        );
        assert!(deleted(&r.out).is_empty());
        assert!(ingested(&r.out).is_empty(), "nothing is delivered, not even the update");
        let s = &r.summary;
        assert_eq!(
            (s["deleted"].as_u64(), s["updated"].as_u64(), s["batches_withheld"].as_u64()),
            (Some(0), Some(1), Some(1)),
            "{s}"
        );
        // The same accident again is stopped again (the manifest was kept).
        let r = run(t, "guard-again", &src, &state);
        assert_eq!(r.code, 4, "{}", r.err);
        let r = run_with(t, "guard-override", &src, &state, "", &["--allow-mass-delete"], &[]);
        assert_eq!(r.code, 0, "{}", r.err);
        let gone: BTreeSet<String> =
            (2 * FILES / PARTS..3 * FILES / PARTS).map(|i| format!("/fs/d{}/f{i}", i % 10)).collect();
        assert_eq!(deleted(&r.out).into_iter().collect::<BTreeSet<_>>(), gone);
        assert_eq!(ingested(&r.out).keys().cloned().collect::<Vec<_>>(), ["/fs/d5/f5"]);
        // A count limit trips too.
        let state = fork_state(&good, t, "count-guard");
        let r = run_with(t, "count-guard", &src, &state, "max_delete_ratio = 1.0\nmax_delete = 100", &[], &[]);
        assert_eq!(r.code, 4, "{}", r.err);
        assert!(r.summary["delete_guard"]
            .as_str()
            .unwrap()
            .contains("250 subjects, more than snapshot.max_delete = 100"));
        assert_nothing_lost(t, "count-guard", &r, &state, &good_source);
    }

    // Rows that fail with their path still readable carry that path over; a row whose path
    // cannot be found leaves everything unknown, so genuine deletes wait for a clean run.
    {
        let gone: BTreeSet<usize> = (0..10).map(|k| k * 97).collect();
        let bad = t.join("bad-rows");
        write_listing(&bad, &gone);
        let p1 = bad.join("part-1.csv");
        let mut text = std::fs::read_to_string(&p1).unwrap();
        // Rows of files 300 and 301 with a bad size, and a line that is no row at all.
        text = text
            .replace(&row(300), "f,33188,1000,100,big,1,2,3,/fs/d0/f300")
            .replace(&row(301), "f,33188,1000,100,-1,1,2,3,/fs/d1/f301");
        std::fs::write(&p1, text + "garbage\n").unwrap();
        let src = tsv(&format!("\"{}/*.csv\"", bad.display()));
        let state = fork_state(&good, t, "bad-rows");
        let r = run(t, "bad-rows", &src, &state);
        assert_eq!(r.code, 0, "{}", r.err);
        let s = &r.summary;
        assert_eq!(
            (s["rejects"].as_u64(), s["deleted"].as_u64(), s["deletes_withheld"].as_u64()),
            (Some(3), Some(0), Some(12)),
            "{s}"
        );
        let scopes: Vec<&str> =
            s["unknown_scopes"].as_array().unwrap().iter().map(|u| u["scope"].as_str().unwrap()).collect();
        assert_eq!(scopes, ["everything", "/fs/d0/f300", "/fs/d1/f301"], "{s}");
        assert!(deleted(&r.out).is_empty());
        // Without the garbage line only the ten really gone files are deleted.
        std::fs::write(&p1, std::fs::read_to_string(&p1).unwrap().replace("garbage\n", "")).unwrap();
        let r = run(t, "bad-rows-2", &src, &state);
        assert_eq!(r.code, 0, "{}", r.err);
        let want: BTreeSet<String> = gone.iter().map(|i| format!("/fs/d{}/f{i}", i % 10)).collect();
        assert_eq!(deleted(&r.out).into_iter().collect::<BTreeSet<_>>(), want);
        assert_eq!(r.summary["deletes_withheld"], 2, "{}", r.summary);
    }

    // Inputs that look complete but cannot be shown whole: a part cut inside its last row
    // (no final newline) and a part of zero bytes. Nothing is deleted, nothing is made of the
    // cut row, and the run says what it withheld.
    for (name, reason) in [("cut-inside-a-row", "the last line has no newline"), ("empty-part", "the file is empty")] {
        let dir = t.join(name);
        write_listing(&dir, &BTreeSet::new());
        let p3 = dir.join("part-3.csv");
        let text = std::fs::read_to_string(&p3).unwrap();
        let cut = if name == "empty-part" { String::new() } else { text[..text.len() - 4].to_string() };
        std::fs::write(&p3, cut).unwrap();
        let state = fork_state(&good, t, name);
        let r = run(t, name, &tsv(&format!("\"{}/*.csv\"", dir.display())), &state);
        assert_eq!(r.code, 0, "{name}: {}", r.err);
        let s = &r.summary;
        let withheld = if name == "empty-part" { FILES / PARTS } else { 1 };
        assert_eq!(
            (s["created"].as_u64(), s["deleted"].as_u64(), s["deletes_withheld"].as_u64()),
            (Some(0), Some(0), Some(withheld as u64)),
            "{name}: {s}"
        );
        let scope = &s["unknown_scopes"][0];
        assert!(
            scope["scope"] == "everything" && scope["reason"].as_str().unwrap_or("").contains(reason),
            "{name}: {s}"
        );
        assert!(ingested(&r.out).is_empty(), "{name}: nothing is made of the cut row");
        assert_nothing_lost(t, name, &r, &state, &good_source);
    }

    // Deletes withheld run after run: the run past `max_withheld_runs` (3) delivers, commits
    // and fails with exit code 5; a good run ends it.
    {
        let dir = t.join("keeps-failing");
        write_listing(&dir, &BTreeSet::new());
        std::fs::write(dir.join("part-1.csv"), "").unwrap();
        let src = tsv(&format!("\"{}/*.csv\"", dir.display()));
        let state = fork_state(&good, t, "keeps-failing");
        for n in 1..=4u64 {
            let r = run(t, &format!("keeps-failing-{n}"), &src, &state);
            assert_eq!(
                (r.code, r.summary["withheld_runs"].as_u64()),
                (if n <= 3 { 0 } else { 5 }, Some(n)),
                "run {n}: {}",
                r.err
            );
            assert!(deleted(&r.out).is_empty(), "run {n}");
            if n == 4 {
                assert!(
                    r.summary["withheld_too_long"].as_str().unwrap_or("").contains("max_withheld_runs = 3"),
                    "{}",
                    r.summary
                );
            }
        }
        let r = run(t, "keeps-failing-fixed", &good_source, &state);
        assert_eq!(
            (r.code, r.summary["withheld_runs"].as_u64(), r.summary["deleted"].as_u64()),
            (0, Some(0), Some(0)),
            "{}",
            r.err
        );
    }
}

#[test]
fn strict_rows_are_rejected_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let csv = t.join("rows.csv");
    let rows: [&[u8]; 11] = [
        b"f,33188,1000,100,1,1,2,3,/ok/a\n",
        b"f,33188,1000,100,1,1,2,3,/nul/a\x00b\n",
        b"f,33188,1000,100,1,1,2,3,/esc/\x1b[31mred\n",
        b"f,33188,1000,100,1,1,2,3,\"/newline/a\nb\"\n",
        b"f,33188,1000,100,1,1,2,3,/dots/../etc\n",
        b"f,33188,1000,100,1,1,2,3,/\n",
        b"f,33188,1000,100,1,1,2,3,relative/x\n",
        b"f,33188,1000,100,1,1,2,99999999999,/time/far\n",
        b"f,33188,1000,100,1,-99999999999,2,3,/time/before\n",
        b"f,33188,1000,100,9223372036854775808,1,2,3,/size/huge\n",
        b"f,33188,1000,100,1,1,2,3,/ok/b\n",
    ];
    std::fs::write(&csv, rows.concat()).unwrap();
    let state = t.join("state");
    let r = run_with(t, "strict", &tsv(&format!("\"{}\"", csv.display())), &state, "max_reject_ratio = 1.0", &[], &[]);
    assert_eq!(r.code, 0, "{}", r.err);
    // Control characters are escaped as every source escapes them (a name may hold them); a
    // NUL byte never is a name's.
    assert_eq!(ingested(&r.out).keys().cloned().collect::<Vec<_>>(), ["/esc/\\x1b[31mred", "/ok/a", "/ok/b"]);
    let rejects: Vec<Value> = std::fs::read_to_string(t.join("strict-rejects.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let reasons: Vec<String> = rejects.iter().map(|r| r["reason"].as_str().unwrap().to_string()).collect();
    for want in [
        "has a NUL byte",
        "unterminated quoted field",
        "a `..` component",
        "`/` is not a file or link",
        "is not absolute",
        "mtime: 99999999999 is outside",
        "atime: -99999999999 is outside",
        "size: `9223372036854775808` is out of range",
    ] {
        assert!(reasons.iter().any(|r| r.contains(want)), "no reject with {want:?}: {reasons:#?}");
    }
    // The reasons quote the path escaped: no raw control byte reaches a terminal or log.
    assert!(reasons.iter().all(|r| !r.contains('\u{1b}') && !r.contains('\0')), "{reasons:?}");
    assert!(!r.err.contains('\u{1b}'), "{}", r.err);
}

#[test]
fn a_crash_at_any_stage_of_the_commit_loses_no_delete() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let listing = t.join("listing");
    write_listing(&listing, &BTreeSet::new());
    let src = tsv(&format!("\"{}/*.csv\"", listing.display()));
    let good = t.join("good-state");
    assert_eq!(run(t, "good", &src, &good).code, 0);
    let gone: BTreeSet<usize> = (0..100).map(|k| k * 10 + 3).collect();
    let want: BTreeSet<String> = gone.iter().map(|i| format!("/fs/d{}/f{i}", i % 10)).collect();
    let fewer = t.join("fewer");
    write_listing(&fewer, &gone);
    let src2 = tsv(&format!("\"{}/*.csv\"", fewer.display()));
    // The crashed run also sees five new files, which are gone again by the next run: if it
    // indexed them, the next run must delete them.
    let with_new = t.join("with-new");
    write_listing(&with_new, &gone);
    let new: Vec<String> =
        (0..5).map(|k| format!("f,33188,1000,100,1,1700000000,1700000001,1700000002,/fs/new/n{k}\n")).collect();
    std::fs::write(with_new.join("part-9.csv"), new.concat()).unwrap();
    let src_new = tsv(&format!("\"{}/*.csv\"", with_new.display()));
    let mut want_all = want.clone();
    want_all.extend((0..5).map(|k| format!("/fs/new/n{k}")));
    for point in [
        "sealed",
        "deletes-planned",
        "deletes-delivered",
        "commit-start",
        "commit-renamed",
        "commit-pointer-written",
        "commit-done",
    ] {
        let state = fork_state(&good, t, point);
        let crashed = run_with(t, &format!("{point}-crash"), &src_new, &state, "", &[], &[("ICICLE_FAULT", point)]);
        assert_ne!(crashed.code, 0, "{point}: the run was meant to die");
        assert!(crashed.err.contains(&format!("fault injected at {point}")), "{point}: {}", crashed.err);
        let next = run(t, &format!("{point}-next"), &src2, &state);
        assert_eq!(next.code, 0, "{point}: {}", next.err);
        let sent: BTreeSet<String> = deleted(&crashed.out).into_iter().chain(deleted(&next.out)).collect();
        assert_eq!(
            sent, want_all,
            "{point}: every owed delete is sent by the crashed run or the next one, and what the crashed run may have indexed is deleted"
        );
        let last = run(t, &format!("{point}-last"), &src2, &state);
        let s = &last.summary;
        assert_eq!(
            (s["unchanged"].as_u64(), s["deleted"].as_u64(), s["created"].as_u64()),
            (Some(900), Some(0), Some(0)),
            "{point}: {s}"
        );
    }
}

fn sqlite(db: &Path, sql: &str) -> String {
    let out = std::process::Command::new("sqlite3").arg(db).arg(sql).output().expect("the sqlite3 CLI");
    assert!(out.status.success(), "sqlite3 {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Every `db.db` under an index directory (but the empty one in the index parent).
fn db_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            // The sqlite3 CLI cannot open paths of 512 bytes or more.
            if p.as_os_str().len() < 500 {
                out.push(p.join("db.db"));
            }
            out.extend(db_files(&p));
        }
    }
    out
}

/// A GUFI index of a generated file system whose busiest directory also holds `extra`
/// more rows, and the path of that directory's `db.db`.
fn gufi_index(t: &Path, extra: usize) -> (PathBuf, PathBuf, u64) {
    use icicle_testkit::gen::{self, Format, GenFs, GenSpec};
    let fs = GenFs::generate(&GenSpec::new(1_500, 3));
    let data = t.join("gufi");
    gen::write(&fs, Format::Gufi, &data, 0, false).unwrap();
    let mut per_dir = std::collections::BTreeMap::<&str, usize>::new();
    for f in &fs.files {
        *per_dir.entry(fs.dirs[f.dir].path.as_str()).or_default() += 1;
    }
    let (busiest, _) = per_dir.iter().max_by_key(|(_, n)| **n).unwrap();
    let db = data.join(busiest.trim_start_matches('/')).join("db.db");
    sqlite(
        &db,
        &format!(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {extra}) \
             INSERT INTO entries(name, type, inode, mode, nlink, uid, gid, size, blksize, blocks, atime, mtime, ctime) \
             SELECT 'extra-' || x, 'f', 900000 + x, 33188, 1, 1000, 100, x, 4096, 1, 1700000000, 1700000000, 1700000000 FROM c"
        ),
    );
    let total = fs.files.len() as u64 + extra as u64;
    (data, db, total)
}

#[test]
fn gufi_databases_broken_mid_table_or_missing_a_column_delete_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (data, db, total) = gufi_index(t, 4_000);
    let src = format!("type = \"gufi\"\nindex = \"{}\"", data.display());
    let good = t.join("good-state");
    let r = run(t, "good", &src, &good);
    assert_eq!((r.code, r.summary["created"].as_u64()), (0, Some(total)), "{}", r.err);
    let in_db: u64 = sqlite(&db, "SELECT count(*) FROM entries").parse().unwrap();

    // Overwrite one page in the middle of the file: the scan of `entries` fails part-way.
    let state = fork_state(&good, t, "corrupt");
    let saved = std::fs::read(&db).unwrap();
    let mut bytes = saved.clone();
    let page = 4096;
    let mid = bytes.len() / page / 2 * page;
    bytes[mid..mid + page].fill(0xA5);
    std::fs::write(&db, &bytes).unwrap();
    let r = run(t, "corrupt", &src, &state);
    assert_eq!(r.code, 0, "{}", r.err);
    let s = &r.summary;
    let rejects = std::fs::read_to_string(t.join("corrupt-rejects.jsonl")).unwrap();
    assert!(rejects.contains("database error after"), "{rejects}");
    let read_before: u64 = rejects
        .split("database error after ")
        .nth(1)
        .and_then(|x| x.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(read_before > 0 && read_before < in_db, "the error came part-way: after {read_before} of {in_db} rows");
    assert_eq!((s["deleted"].as_u64(), s["deletes_withheld"].as_u64()), (Some(0), Some(in_db - read_before)), "{s}");
    assert!(deleted(&r.out).is_empty());
    std::fs::write(&db, &saved).unwrap();
    let again = run(t, "corrupt-after", &src, &state);
    assert_eq!(
        (again.summary["unchanged"].as_u64(), again.summary["deleted"].as_u64()),
        (Some(total), Some(0)),
        "{}",
        again.summary
    );

    // A database whose `entries` lacks `inode`: one clear error, its directory unknown.
    let state = fork_state(&good, t, "no-inode");
    sqlite(
        &db,
        "CREATE TABLE e2 AS SELECT name, type, mode, nlink, uid, gid, size, blksize, blocks, atime, mtime, ctime, linkname, xattr_names, crtime FROM entries; \
         DROP TABLE entries; ALTER TABLE e2 RENAME TO entries;",
    );
    let r = run(t, "no-inode", &src, &state);
    assert_eq!(r.code, 0, "{}", r.err);
    let rejects = std::fs::read_to_string(t.join("no-inode-rejects.jsonl")).unwrap();
    assert_eq!(rejects.lines().count(), 1, "{rejects}");
    assert!(rejects.contains("reading `entries`: no such column: inode"), "{rejects}");
    let s = &r.summary;
    assert_eq!(
        (s["rejects"].as_u64(), s["deleted"].as_u64(), s["deletes_withheld"].as_u64()),
        (Some(1), Some(0), Some(in_db)),
        "{s}"
    );
    assert!(deleted(&r.out).is_empty());
}

#[test]
fn gufi_names_are_the_file_systems_in_plain_and_rolled_up_indexes() {
    use icicle_testkit::gen::{self, Format, GenFs, GenSpec};
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let fs = GenFs::generate(&GenSpec::new(3_000, 8));
    let truth: BTreeSet<String> = fs.records().into_iter().map(|r| r.path).collect();
    let quoted: Vec<&String> = truth.iter().filter(|p| p.contains('\'')).collect();
    assert!(quoted.len() >= 3, "the generator makes names with quotes: {quoted:?}");
    for rollup in [false, true] {
        let data = t.join(format!("gufi-{rollup}"));
        gen::write(&fs, Format::Gufi, &data, 0, rollup).unwrap();
        // Written as gufi_dir2index writes them: `it's` is stored `it''s`.
        let dir = quoted[0].rsplit_once('/').unwrap().0;
        let stored = sqlite(
            &data.join(dir.trim_start_matches('/')).join("db.db"),
            "SELECT count(*) FROM entries WHERE name LIKE '%''''%'",
        );
        assert_ne!(stored, "0");
        if rollup {
            let rolled: u64 = db_files(&data)
                .iter()
                .map(|db| sqlite(db, "SELECT count(*) FROM summary WHERE isroot = 0").parse::<u64>().unwrap())
                .sum();
            assert!(rolled > 0, "rolled-up summary rows");
        }
        let r = run(
            t,
            &format!("names-{rollup}"),
            &format!("type = \"gufi\"\nindex = \"{}\"", data.display()),
            &t.join(format!("state-{rollup}")),
        );
        assert_eq!((r.code, r.summary["rejects"].as_u64()), (0, Some(0)), "{}", r.err);
        let got: BTreeSet<String> = ingested(&r.out).into_keys().collect();
        assert_eq!(got, truth, "rollup = {rollup}");
    }
}

/// Run `icicle` as the unprivileged user `nobody` when the tests run as root, so that
/// permissions apply (root reads every directory).
fn icicle_as_nobody(args: &[&str]) -> (i32, String, String) {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_icicle"));
    cmd.args(args).env_remove("RUST_LOG");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.uid(65534).gid(65534);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_walk_never_deletes_below_a_directory_it_could_not_search() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let chmod = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    chmod(t, 0o755);
    let root = t.join("tree");
    for d in ["a", "b/sub", "c"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    for i in 0..30 {
        std::fs::write(root.join(format!("a/f{i}")), "x").unwrap();
    }
    std::fs::write(root.join("b/g"), "x").unwrap();
    std::fs::write(root.join("b/sub/h"), "x").unwrap();
    std::fs::write(root.join("c/k"), "x").unwrap();
    let work = t.join("work");
    std::fs::create_dir(&work).unwrap();
    chmod(&work, 0o777);
    let go = |n: &str| {
        let out = work.join(format!("{n}-out"));
        let cfg = config(
            &work,
            &format!("{n}.toml"),
            &format!(
                "[snapshot]\nversion = \"v\"\nstate_dir = \"{w}/state\"\nrejects_file = \"{w}/{n}-rejects.jsonl\"\n[records]\nvisible_to = [\"public\"]\n\
                 [sources.s]\ntype = \"walk\"\nroot = \"{r}\"\npath_prefix = \"/t\"\n[sinks.out]\ntype = \"file\"\ndir = \"{o}\"\n",
                w = work.display(),
                r = root.display(),
                o = out.display()
            ),
        );
        let (code, stdout, err) = icicle_as_nobody(&["snapshot", "--json", "-c", cfg.to_str().unwrap()]);
        (code, serde_json::from_str::<Value>(&stdout).unwrap_or(Value::Null), err, out)
    };
    let (code, s, err, _) = go("good");
    assert_eq!((code, s["created"].as_u64()), (0, Some(33)), "{err}");
    // b readable but not searchable, c not readable, and a/f0 really removed.
    chmod(&root.join("b"), 0o644);
    chmod(&root.join("c"), 0o311);
    std::fs::remove_file(root.join("a/f0")).unwrap();
    let (code, s, err, out) = go("locked");
    chmod(&root.join("b"), 0o755);
    chmod(&root.join("c"), 0o755);
    assert_eq!(code, 0, "{err}");
    assert_eq!(deleted(&out), ["/t/a/f0"], "{s}");
    assert_eq!(s["deletes_withheld"], 3, "{s}");
    let scopes: BTreeSet<&str> =
        s["unknown_scopes"].as_array().unwrap().iter().map(|u| u["scope"].as_str().unwrap()).collect();
    assert_eq!(scopes, ["/t/b/g/**", "/t/b/sub/**", "/t/c/**"].into_iter().collect(), "{s}");
    let (code, s, err, out) = go("unlocked");
    assert_eq!((code, s["unchanged"].as_u64(), s["deleted"].as_u64()), (0, Some(32), Some(0)), "{err} {s}");
    assert!(deleted(&out).is_empty());
}

/// A record a failed run owed the index, then held back by a run that could not read it (its
/// row rejected), is still owed: the next good run sends it.
#[test]
fn a_record_owed_by_a_failed_run_and_then_unreadable_is_still_sent() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let listing = t.join("listing");
    write_listing(&listing, &BTreeSet::new());
    let state = t.join("state");
    assert_eq!(run(t, "good", &tsv(&format!("\"{}/*.csv\"", listing.display())), &state).code, 0);
    let owed = "/fs/new/y";
    let with_y = |name: &str, row: &str| {
        let dir = t.join(name);
        write_listing(&dir, &BTreeSet::new());
        // A good first row: a bad first row is taken for a producer's changed columns.
        std::fs::write(
            dir.join("part-9.csv"),
            format!("f,33188,1000,100,1,1700000000,1700000001,1700000002,/fs/new/x\n{row}\n"),
        )
        .unwrap();
        tsv(&format!("\"{}/*.csv\"", dir.display()))
    };
    let good_y = with_y("good-y", &format!("f,33188,1000,100,5,1700000000,1700000001,1700000002,{owed}"));
    // The run that first sees it seals its manifest, then dies before delivering.
    let crashed = run_with(t, "crashed", &good_y, &state, "", &[], &[("ICICLE_FAULT", "sealed")]);
    assert_ne!(crashed.code, 0, "{}", crashed.err);
    assert!(!ingested(&crashed.out).contains_key(owed));
    // The next run cannot read its row: it neither sends nor deletes it.
    let bad_y = with_y("bad-y", &format!("f,not-a-mode,1000,100,5,1700000000,1700000001,1700000002,{owed}"));
    let unreadable = run(t, "unreadable", &bad_y, &state);
    assert_eq!(unreadable.code, 0, "{}", unreadable.err);
    assert_eq!(unreadable.summary["rejects"].as_u64(), Some(1), "{}", unreadable.summary);
    assert!(!ingested(&unreadable.out).contains_key(owed) && !deleted(&unreadable.out).contains(&owed.to_string()));
    // Readable again, unchanged since the crashed run: the index has never had it.
    let again = run(t, "again", &good_y, &state);
    assert_eq!(again.code, 0, "{}", again.err);
    assert!(ingested(&again.out).contains_key(owed), "{owed} is never sent: {}", again.summary);
}

/// After a run that failed while delivering (its sealed manifest pending, repeating the
/// committed one), the deletion guard still counts each previous subject once: a run that
/// would delete 30% of them is stopped.
#[test]
fn the_deletion_guard_counts_each_subject_once_after_a_failed_run() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let listing = t.join("listing");
    write_listing(&listing, &BTreeSet::new());
    let src = tsv(&format!("\"{}/*.csv\"", listing.display()));
    let state = t.join("state");
    assert_eq!(run(t, "good", &src, &state).code, 0);
    let crashed = run_with(t, "crashed", &src, &state, "", &[], &[("ICICLE_FAULT", "sealed")]);
    assert_ne!(crashed.code, 0, "{}", crashed.err);
    let fewer = t.join("fewer");
    // 300 rows gone from two parts (no part left empty: an empty part withholds deletes).
    write_listing(&fewer, &(FILES / 20..FILES / 20 + FILES * 3 / 10).collect());
    let r = run(t, "fewer", &tsv(&format!("\"{}/*.csv\"", fewer.display())), &state);
    assert_ne!(r.code, 0, "the guard stops it: {}", r.summary);
    assert!(r.err.contains("would delete 300 of the previous run's 1000 subjects"), "{}", r.err);
    assert!(deleted(&r.out).is_empty());
}

/// Two runs on one state directory (an overlapping cron run): the second fails at once,
/// naming the lock, and touches nothing; the state is intact for the next run.
#[test]
fn a_second_run_on_the_same_state_fails_and_touches_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let listing = t.join("listing");
    write_listing(&listing, &BTreeSet::new());
    let src = tsv(&format!("\"{}/*.csv\"", listing.display()));
    let state = t.join("state");
    assert_eq!(run(t, "good", &src, &state).code, 0);
    let held = std::fs::File::open(state.join("snapshot.lock")).unwrap();
    held.try_lock().unwrap();
    let second = run(t, "second", &tsv(&format!("\"{}/empty-glob-*.csv\"", listing.display())), &state);
    assert_ne!(second.code, 0);
    assert!(second.err.contains("snapshot.lock") && second.err.contains("another run"), "{}", second.err);
    assert!(!second.out.exists());
    drop(held);
    assert_nothing_lost(t, "second", &second, &state, &src);
}
