//! Bad input, versioned runs, batching limits and acknowledgement, through the real binary.

mod common;

use std::io::Write;

use common::*;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};

fn base(tmp: &std::path::Path, source: &str, out: &std::path::Path, extra: &str) -> std::path::PathBuf {
    config(
        tmp,
        "run.toml",
        &format!(
            "[snapshot]\nworkers = 2\nversion = \"v\"\nrejects_file = \"{}/rejects.jsonl\"\nmax_reject_ratio = 1.0\nmax_delete_ratio = 1.0\n{extra}\n[records]\nvisible_to = [\"public\"]\n[sources.s]\n{source}\n[sinks.out]\ntype = \"file\"\ndir = \"{}\"\n",
            tmp.display(),
            out.display()
        ),
    )
}

fn rejects(tmp: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(tmp.join("rejects.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn bad_text_rows_are_rejected_with_file_line_and_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("in.csv");
    let mut f = std::fs::File::create(&csv).unwrap();
    f.write_all(b"f,33188,1000,100,42,1,2,3,/ok/a\n").unwrap();
    f.write_all(b"f,33188,1000,100,forty,1,2,3,/bad/size\n").unwrap();
    f.write_all(b"f,3e188,1000,100,42,1,2,3,/bad/mode\n").unwrap();
    f.write_all(b"f,33188,1000\n").unwrap();
    f.write_all(b"f,33188,1000,100,42,1,2,3,/ok/b\n").unwrap();
    f.write_all(b"f,33188,1000,100,42,1,2,3,\"/bad/unterminated\n").unwrap();
    f.write_all(b"l,41471,1000,100,5,1,2,3,/ok/link\n").unwrap();
    f.write_all(b"f,33188,1000,100,42,1,2").unwrap(); // cut short: no newline, the file is not whole
    drop(f);
    let out = tmp.path().join("out");
    let cfg =
        base(tmp.path(), &format!("type = \"tsv\"\npaths = [\"{}\"]\npreset = \"icicle9\"", csv.display()), &out, "");
    let (code, s, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!((s["rows"].as_u64(), s["records"].as_u64(), s["rejects"].as_u64()), (Some(8), Some(3), Some(5)), "{s}");
    let got = ingested(&out);
    assert_eq!(got.keys().cloned().collect::<Vec<_>>(), vec!["/ok/a", "/ok/b", "/ok/link"]);
    let r = rejects(tmp.path());
    let lines: Vec<u64> = r.iter().map(|r| r["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, vec![2, 3, 4, 6, 8]);
    let input = csv.display().to_string();
    assert!(r.iter().all(|r| r["input"] == input.as_str()));
    assert!(r[0]["reason"].as_str().unwrap().contains("size"), "{}", r[0]);
    assert!(r[1]["reason"].as_str().unwrap().contains("mode"), "{}", r[1]);
    assert!(r[2]["reason"].as_str().unwrap().contains("expected 9 fields"), "{}", r[2]);
    assert!(r[3]["reason"].as_str().unwrap().contains("unterminated"), "{}", r[3]);
    assert!(r[4]["reason"].as_str().unwrap().contains("the last line has no newline"), "{}", r[4]);
    assert_eq!(s["unknown_scopes"][0]["scope"], "everything", "{s}");

    // The same input with a threshold of 4 rejects fails the run.
    let (code, s, _) = snapshot(&cfg, &["--set", "snapshot.max_rejects=4"]);
    assert_eq!(code, 3);
    assert_eq!(s["reject_threshold_exceeded"], true);
    let (code, _, _) = snapshot(&cfg, &["--set", "snapshot.max_rejects=5"]);
    assert_eq!(code, 0);
}

#[test]
fn bad_mmapplypolicy_lines_are_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let list = tmp.path().join("list.allfiles");
    std::fs::write(
        &list,
        "1 2 0 FAu 10 p 1 1 d 1000 100 -rw-r--r-- 1 2 0 3 -- %2Fgpfs%2Fok\n\
         2 2 0 FAu 10 p 1 1 d 1000 100 -rw-r--r-- 1 2 0 3 -- %2Fgpfs%2Fbad%zz\n\
         3 2 0 FAu 10 p 1 1 d 1000 100 -rw-r--r-- 1 2 -- %2Fgpfs%2Fshort\n\
         4 2 0 FAu 10 p 1 1 d 1000 100 -rw-r--r-- 1 2 0 3 %2Fgpfs%2Fnosep\n\
         5 2 0 FAu 10 p 1 1 d 1000 100 drwxr-xr-x 1 2 0 3 -- %2Fgpfs%2Fdir\n\
         6 2 0 FAu 10 p 1 1 d 1000 100 -rw-r-?r-- 1 2 0 3 -- %2Fgpfs%2Fmode\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let cfg = base(tmp.path(), &format!("type = \"mmapplypolicy\"\npaths = [\"{}\"]", list.display()), &out, "");
    let (code, s, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (s["rows"].as_u64(), s["records"].as_u64(), s["directories"].as_u64(), s["rejects"].as_u64()),
        (Some(6), Some(1), Some(1), Some(4))
    );
    let r = rejects(tmp.path());
    assert_eq!(r.iter().map(|r| r["line"].as_u64().unwrap()).collect::<Vec<_>>(), vec![2, 3, 4, 6]);
    assert!(r[0]["reason"].as_str().unwrap().contains("undecodable escape `%zz`"), "{}", r[0]);
}

#[test]
fn broken_gufi_databases_are_rejected_and_the_rest_is_read() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = GenFs::generate(&GenSpec::new(600, 5));
    let data = tmp.path().join("gufi");
    gen::write(&fs, Format::Gufi, &data, 0, false).unwrap();
    // Corrupt one database, delete another, and put a NULL size in a third.
    let dirs: Vec<&gen::GenDir> =
        fs.dirs.iter().filter(|d| fs.files.iter().any(|f| fs.dirs[f.dir].path == d.path)).collect();
    let db = |d: &gen::GenDir| data.join(d.path.trim_start_matches('/')).join("db.db");
    std::fs::write(db(dirs[0]), b"this is not a database").unwrap();
    std::fs::remove_file(db(dirs[1])).unwrap();
    let conn = rusqlite_exec(&db(dirs[2]), "UPDATE entries SET size = NULL WHERE rowid = 1");
    assert!(conn, "sqlite3 CLI needed");
    let lost: usize =
        [0, 1].iter().map(|&i| fs.files.iter().filter(|f| fs.dirs[f.dir].path == dirs[i].path).count()).sum();
    let out = tmp.path().join("out");
    let cfg = base(tmp.path(), &format!("type = \"gufi\"\nindex = \"{}\"", data.display()), &out, "");
    let (code, s, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(s["records"].as_u64().unwrap() as usize, 600 - lost - 1, "{s}");
    assert_eq!(s["rejects"], 3);
    let r = rejects(tmp.path());
    let reasons: Vec<String> = r.iter().map(|r| format!("{} {}", r["input"], r["reason"])).collect();
    assert!(reasons.iter().any(|x| x.contains("missing db.db")), "{reasons:?}");
    assert!(reasons.iter().any(|x| x.contains("not a database")), "{reasons:?}");
    assert!(reasons.iter().any(|x| x.contains("size is NULL")), "{reasons:?}");
    assert!(r.iter().any(|r| r["line"] == 1));
}

fn rusqlite_exec(db: &std::path::Path, sql: &str) -> bool {
    std::process::Command::new("sqlite3").arg(db).arg(sql).status().map(|s| s.success()).unwrap_or(false)
}

#[test]
fn versioned_runs_report_changes_and_emit_deletes() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    let write = |rows: &[(&str, u64)]| {
        let mut s = String::new();
        for (p, size) in rows {
            s.push_str(&format!("f,33188,1000,100,{size},1,2,3,{p}\n"));
        }
        std::fs::write(input.join("a.csv"), s).unwrap();
    };
    write(&[("/fs/a", 1), ("/fs/b", 2), ("/fs/c", 3), ("/fs/d", 4)]);
    let state = tmp.path().join("state");
    let run = |n: u32| {
        let out = tmp.path().join(format!("out{n}"));
        let cfg = base(
            tmp.path(),
            &format!("type = \"tsv\"\npaths = [\"{}/a.csv\"]\npreset = \"icicle9\"", input.display()),
            &out,
            &format!("state_dir = \"{}\"", state.display()),
        );
        let (code, s, err) = snapshot(&cfg, &[]);
        assert_eq!(code, 0, "{err}");
        (s, out)
    };
    let (s, out) = run(1);
    assert_eq!((s["created"].as_u64(), s["unchanged"].as_u64(), s["deleted"].as_u64()), (Some(4), Some(0), Some(0)));
    assert_eq!(ingested(&out).len(), 4);
    // The same snapshot again changes nothing.
    let (s, out) = run(2);
    assert_eq!(
        (s["created"].as_u64(), s["updated"].as_u64(), s["unchanged"].as_u64(), s["deleted"].as_u64()),
        (Some(0), Some(0), Some(4), Some(0))
    );
    assert!(ingested(&out).is_empty());
    assert!(deleted(&out).is_empty());
    // b changes, c and d go, e arrives.
    write(&[("/fs/a", 1), ("/fs/b", 20), ("/fs/e", 5)]);
    let (s, out) = run(3);
    assert_eq!(
        (s["created"].as_u64(), s["updated"].as_u64(), s["unchanged"].as_u64(), s["deleted"].as_u64()),
        (Some(1), Some(1), Some(1), Some(2)),
        "{s}"
    );
    assert_eq!(ingested(&out).keys().cloned().collect::<Vec<_>>(), vec!["/fs/b", "/fs/e"]);
    assert_eq!(deleted(&out), vec!["/fs/c", "/fs/d"]);
    // And the new state is current.
    let (s, _) = run(4);
    assert_eq!((s["unchanged"].as_u64(), s["deleted"].as_u64()), (Some(3), Some(0)));
}

#[test]
fn failed_delivery_is_not_acknowledged() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("a.csv");
    std::fs::write(&input, "f,33188,1000,100,1,1,2,3,/fs/a\n").unwrap();
    let state = tmp.path().join("state");
    // The sink directory cannot be created (its parent is a file): delivery fails.
    let blocker = tmp.path().join("blocker");
    std::fs::write(&blocker, "").unwrap();
    let cfg = base(
        tmp.path(),
        &format!("type = \"tsv\"\npaths = [\"{}\"]\npreset = \"icicle9\"", input.display()),
        &blocker.join("out"),
        &format!("state_dir = \"{}\"", state.display()),
    );
    let (code, _, err) = snapshot(&cfg, &[]);
    assert_ne!(code, 0);
    assert!(err.contains("blocker"), "{err}");
    assert!(!state.join("CURRENT").exists(), "a failed run must not commit its manifest");
    // A good sink afterwards gets the file: the failed run may have indexed it (its manifest
    // was sealed before delivering), so it counts as updated and is sent again.
    let out = tmp.path().join("out");
    let cfg = base(
        tmp.path(),
        &format!("type = \"tsv\"\npaths = [\"{}\"]\npreset = \"icicle9\"", input.display()),
        &out,
        &format!("state_dir = \"{}\"", state.display()),
    );
    let (code, s, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!((s["created"].as_u64(), s["updated"].as_u64()), (Some(0), Some(1)), "{s}");
    assert_eq!(ingested(&out).keys().cloned().collect::<Vec<_>>(), ["/fs/a"]);
}

#[test]
fn unreadable_inputs_withhold_their_deletes() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = GenFs::generate(&GenSpec::new(400, 9));
    let data = tmp.path().join("gufi");
    gen::write(&fs, Format::Gufi, &data, 0, false).unwrap();
    let state = tmp.path().join("state");
    let cfg = |n: u32| {
        base(
            tmp.path(),
            &format!("type = \"gufi\"\nindex = \"{}\"", data.display()),
            &tmp.path().join(format!("out{n}")),
            &format!("state_dir = \"{}\"", state.display()),
        )
    };
    let (code, s, _) = snapshot(&cfg(1), &[]);
    assert_eq!((code, s["created"].as_u64()), (0, Some(400)));
    // One directory's database becomes unreadable: its files are not deleted from the index.
    let d = fs.files.iter().map(|f| &fs.dirs[f.dir]).next().unwrap();
    let in_dir = fs.files.iter().filter(|f| fs.dirs[f.dir].path == d.path).count() as u64;
    std::fs::write(data.join(d.path.trim_start_matches('/')).join("db.db"), "garbage").unwrap();
    let (code, s, _) = snapshot(&cfg(2), &[]);
    assert_eq!(code, 0);
    assert_eq!((s["deleted"].as_u64(), s["deletes_withheld"].as_u64()), (Some(0), Some(in_dir)), "{s}");
    assert!(deleted(&tmp.path().join("out2")).is_empty());
}

#[test]
fn documents_respect_the_size_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = GenFs::generate(&GenSpec::new(2_000, 11));
    let data = tmp.path().join("tsv");
    gen::write(&fs, Format::Tsv, &data, 700, false).unwrap();
    let out = tmp.path().join("out");
    let cfg = base(
        tmp.path(),
        &format!("type = \"tsv\"\npaths = [\"{}/*.csv\"]\npreset = \"icicle9\"", data.display()),
        &out,
        "max_batch_bytes = 20000",
    );
    let (code, s, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    let docs = documents(&out, "ingest-");
    assert!(docs.len() > 30, "{}", docs.len());
    assert!(docs.iter().all(|(bytes, _)| *bytes <= 20_000));
    assert_eq!(docs.iter().map(|(_, d)| d["ingest_data"]["gmeta"].as_array().unwrap().len()).sum::<usize>(), 2_000);
    assert_eq!(s["batches"].as_u64().unwrap() as usize, docs.len());
    assert_eq!(s["bytes"].as_u64().unwrap(), docs.iter().map(|(b, _)| b).sum::<u64>());
}

#[test]
fn a_second_run_never_overwrites_undelivered_documents() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("a.csv");
    std::fs::write(&input, "f,33188,1000,100,1,1,2,3,/fs/a\nf,33188,1000,100,1,1,2,3,/fs/b\n").unwrap();
    let out = tmp.path().join("out");
    let cfg = base(
        tmp.path(),
        &format!("type = \"tsv\"\npaths = [\"{}\"]\npreset = \"icicle9\"", input.display()),
        &out,
        "max_batch_bytes = 500",
    );
    for _ in 0..2 {
        let (code, _, err) = snapshot(&cfg, &[]);
        assert_eq!(code, 0, "{err}");
    }
    let docs = documents(&out, "ingest-");
    assert_eq!(docs.len(), 4, "two runs of two documents each");
    assert_eq!(docs.iter().map(|(_, d)| d["ingest_data"]["gmeta"].as_array().unwrap().len()).sum::<usize>(), 4);
}

/// A file replaced by another with the same attributes but a new inode is an update (the
/// record shows the inode); a manifest an earlier release wrote (fingerprints without the
/// inode, no `FORMAT`) is compared as such: nothing is sent again for it.
#[test]
fn an_inode_change_alone_is_an_update_and_an_earlier_manifest_is_read_as_it_was() {
    use icicle_core::record::{Attrs, FileKind, FileRecord};
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    let attrs =
        |ino: u64| Attrs { mode: 0o100644, uid: 1000, gid: 100, size: 7, atime: 1, ctime: 2, mtime: 3, inode: ino };
    let write = |rows: &[(&str, u64)]| {
        let s: String = rows.iter().map(|(p, ino)| format!("1|2|3|1000|100|100644|7|{ino}|{p}\n")).collect();
        std::fs::write(input.join("a.list"), s).unwrap();
    };
    let state = tmp.path().join("state");
    let run = |n: u32| {
        let out = tmp.path().join(format!("out{n}"));
        let source = format!(
            "type = \"tsv\"\npaths = [\"{}/a.list\"]\ndelimiter = \"|\"\ncolumns = {{ atime = 0, ctime = 1, mtime = 2, uid = 3, gid = 4, mode = 5, size = 6, inode = 7, path = 8 }}\nmode_format = \"octal\"\npath_last = true\nquoted = false",
            input.display()
        );
        let cfg = base(tmp.path(), &source, &out, &format!("state_dir = \"{}\"", state.display()));
        let (code, s, err) = snapshot(&cfg, &[]);
        assert_eq!(code, 0, "{err}");
        let counts = ["created", "updated", "unchanged", "deleted"].map(|k| s[k].as_u64().unwrap_or(u64::MAX));
        (counts, ingested(&out))
    };
    let current = || state.join(std::fs::read_to_string(state.join("CURRENT")).unwrap().trim());
    write(&[("/fs/a", 11), ("/fs/b", 12)]);
    assert_eq!(run(1).0, [2, 0, 0, 0]);
    assert_eq!(std::fs::read_to_string(current().join("FORMAT")).unwrap(), "2\n");
    write(&[("/fs/a", 11), ("/fs/b", 13)]);
    let (counts, got) = run(2);
    assert_eq!(counts, [0, 1, 1, 0]);
    assert_eq!(got.keys().collect::<Vec<_>>(), ["/fs/b"]);
    assert_eq!(got["/fs/b"]["content"]["raw"]["inode"], 13);
    // The current manifest as an earlier release wrote it: no FORMAT, fingerprints without
    // the inode.
    let dir = current();
    std::fs::remove_file(dir.join("FORMAT")).unwrap();
    let vis = serde_json::to_vec(&["public"]).unwrap();
    for part in std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tsv"))
    {
        let text = std::fs::read_to_string(&part).unwrap();
        let lines: Vec<String> = text
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                let path: String = serde_json::from_str(f[2]).unwrap();
                let ino = if path == "/fs/a" { 11 } else { 13 };
                let rec = FileRecord { path: &path, kind: FileKind::File, attrs: attrs(ino), storage: None };
                let old = icicle_runtime::snapshot::manifest::fingerprint_without_inode(&rec, &vis);
                assert_ne!(format!("{old:016x}"), f[1], "the fingerprints differ by the inode");
                format!("{}\t{old:016x}\t{}\n", f[0], f[2..].join("\t"))
            })
            .collect();
        std::fs::write(&part, lines.concat()).unwrap();
    }
    // A run of this release that sealed its manifest and died before its commit leaves a
    // pending manifest of the other scheme: still nothing is sent again.
    let out = tmp.path().join("crashed");
    let source = std::fs::read_to_string(tmp.path().join("run.toml")).unwrap();
    let crashed = config(
        tmp.path(),
        "crashed.toml",
        &source.replace(&tmp.path().join("out2").display().to_string(), &out.display().to_string()),
    );
    let (code, _, _) = icicle(&["snapshot", "--json", "-c", crashed.to_str().unwrap()], &[("ICICLE_FAULT", "sealed")]);
    assert_ne!(code, 0);
    assert!(std::fs::read_dir(&state).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("manifest-pending-")));
    let (counts, got) = run(3);
    assert_eq!(counts, [0, 0, 2, 0], "an earlier release's manifest sends nothing again");
    assert!(got.is_empty());
    assert_eq!(std::fs::read_to_string(current().join("FORMAT")).unwrap(), "2\n");
    write(&[("/fs/a", 14), ("/fs/b", 13)]);
    assert_eq!(run(4).0, [0, 1, 1, 0]);
    // A scheme this release does not know stops the run, naming the file.
    std::fs::write(current().join("FORMAT"), "9\n").unwrap();
    let cfg = tmp.path().join("run.toml");
    let (code, _, err) = snapshot(&cfg, &[]);
    assert_ne!(code, 0);
    assert!(err.contains("FORMAT") && err.contains("scheme"), "{err}");
}
