//! A path listed twice in a versioned run across MPI ranks (real Open MPI, `--oversubscribe`)
//! is decided as in one process (`tests/snapshot_whole_inputs.rs`,
//! `a_path_listed_twice_is_a_reject_naming_both_lines_the_same_every_run`): on 1, 2 and 3
//! ranks reading the listing in small byte ranges, every row naming it is a reject naming all
//! of them (whichever ranks read them), nothing is sent or deleted for it, its previous line
//! is carried over and the new manifest holds no line of it, and the next run decides the same.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Run `icicle-mpi snapshot` on `np` ranks: exit code, rank 0's JSON summary and stderr.
fn mpirun(np: usize, cfg: &Path) -> (Option<i32>, Value, String) {
    let out = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            &np.to_string(),
            env!("CARGO_BIN_EXE_icicle-mpi"),
            "snapshot",
            "-c",
        ])
        .arg(cfg)
        .args(["--json", "--no-progress"])
        // Containers forbid the cross-memory-attach single copy; copy through shared memory.
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .output()
        .expect("mpirun (Open MPI) must be installed");
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The files under `dir` (any depth: one directory per rank) whose names start with `prefix`.
fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().unwrap().to_string_lossy().starts_with(prefix) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Every ingested entry of every rank, by path (a path sent twice fails).
fn ingested(dir: &Path) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for f in files(dir, "ingest-") {
        let doc: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        for e in doc["ingest_data"]["gmeta"].as_array().unwrap() {
            let path = e["content"]["path"].as_str().unwrap().to_string();
            assert!(out.insert(path.clone(), e.clone()).is_none(), "{path} sent twice");
        }
    }
    out
}

/// Every deleted subject of every rank.
fn deleted(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for f in files(dir, "delete-") {
        let doc: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        out.extend(doc["subjects"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()));
    }
    out
}

/// Every rank's rejects of run `name` (`<name>-rejects.jsonl.rank-<R>`): (line, reason), sorted.
fn rejects(t: &Path, name: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    for f in files(t, &format!("{name}-rejects.jsonl.rank-")) {
        for line in std::fs::read_to_string(&f).unwrap().lines() {
            let j: Value = serde_json::from_str(line).unwrap();
            out.push((j["line"].as_u64().unwrap_or(0), j["reason"].as_str().unwrap_or("").to_string()));
        }
    }
    out.sort();
    out
}

/// The lines of the committed manifest that name `path` (its subject, quoted).
fn manifest_lines(state: &Path, path: &str) -> usize {
    let current = std::fs::read_to_string(state.join("CURRENT")).unwrap();
    let dir = state.join(current.trim());
    let quoted = format!("\t\"{path}\"");
    files(&dir, "part-")
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .filter(|l| l.ends_with(&quoted) || l.contains(&format!("{quoted}\t")))
                .count()
        })
        .sum()
}

/// An ne2scan row (lester `fslist`: `atime|ctime|mtime|uid|gid|mode|size|ino|path`) for file `i`.
fn ne2scan_row(i: usize) -> String {
    format!("1700000000|1700000001|1700000002|1000|100|100644|{}|{}|/fs/d{}/f{i}\n", i * 3, 1000 + i, i % 5)
}

/// A versioned run `name` of the listing `file` on `np` ranks, in byte ranges of 4,000 bytes
/// (about 18 of them: every rank reads some).
fn run(np: usize, t: &Path, name: &str, file: &Path) -> (Option<i32>, Value, String) {
    let cfg = t.join(format!("{name}.toml"));
    let text = format!(
        "[snapshot]\nversion = \"v\"\nsplit_bytes = 4000\nstate_dir = \"{t}/state\"\nrejects_file = \"{t}/{name}-rejects.jsonl\"\n\
         [records]\nvisible_to = [\"public\"]\n[sources.s]\ntype = \"tsv\"\npreset = \"ne2scan\"\npaths = [\"{f}\"]\n\
         [sinks.out]\ntype = \"file\"\ndir = \"{t}/{name}-out\"\n",
        t = t.display(),
        f = file.display()
    );
    std::fs::write(&cfg, text).unwrap();
    mpirun(np, &cfg)
}

fn listed_twice_on(np: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let file = t.join("scan.ne2scan");
    let header = "#IDENT#|1.0|1.47.0|1700000000|Tue Nov 14 22:13:20 GMT 2023|mds1|/dev/md0|0|0|0|0|fs=fs0|\n";
    let rows: String = (0..1000).map(ne2scan_row).collect();
    std::fs::write(&file, format!("{header}{rows}#complete#1700000100\n")).unwrap();
    let (code, s, err) = run(np, t, "first", &file);
    assert_eq!((code, s["created"].as_u64()), (Some(0), Some(1000)), "-np {np}: {s}\n{err}");
    assert!(s["splits"].as_u64().unwrap() >= 10, "-np {np}: the listing is read in byte ranges: {s}");
    // f7 (line 9) listed again at line 1002 with another size (4 rejects in 1,003 rows: within
    // the default 1 %); a new path at lines 1003 and 1004.
    let again = "1700000000|1700000001|1700000002|1000|100|100644|999|1007|/fs/d2/f7\n";
    let new = "1700000000|1700000001|1700000002|1000|100|100644|5|5000|/fs/new\n";
    std::fs::write(&file, format!("{header}{rows}{again}{new}{new}#complete#1700000200\n")).unwrap();
    let mut decided = Vec::new();
    for name in ["twice", "twice-again"] {
        let (code, s, err) = run(np, t, name, &file);
        assert_eq!(code, Some(0), "-np {np} {name}: {err}");
        let keys = [
            "rows",
            "records",
            "rejects",
            "created",
            "updated",
            "unchanged",
            "deleted",
            "deletes_withheld",
            "emitted",
            "unknown_scope_count",
        ];
        let counts = keys.map(|k| s[k].as_u64().unwrap_or(u64::MAX));
        assert_eq!(counts, [1003, 999, 4, 0, 0, 999, 0, 1, 0, 2], "-np {np} {name}: {keys:?}: {s}");
        // Neither row of either path is sent (nothing else changed), nothing is deleted.
        let out = t.join(format!("{name}-out"));
        assert!(
            ingested(&out).is_empty() && deleted(&out).is_empty(),
            "-np {np} {name}: {:?} {:?}",
            ingested(&out).keys(),
            deleted(&out)
        );
        let lines = rejects(t, name);
        assert_eq!(lines.iter().map(|l| l.0).collect::<Vec<_>>(), [9, 1002, 1003, 1004], "-np {np} {name}: {lines:?}");
        let f = file.display();
        let f7 = format!("\"/fs/d2/f7\": read 2 times ({f} line 9, {f} line 1002): ");
        let fnew = format!("\"/fs/new\": read 2 times ({f} line 1003, {f} line 1004): ");
        assert!(lines[0].1.starts_with(&f7) && lines[0].1 == lines[1].1, "-np {np} {name}: {lines:?}");
        assert!(lines[2].1.starts_with(&fnew) && lines[2].1 == lines[3].1, "-np {np} {name}: {lines:?}");
        // f7's previous line is carried over (once); /fs/new has none.
        let state = t.join("state");
        assert_eq!(
            (
                manifest_lines(&state, "/fs/d2/f7"),
                manifest_lines(&state, "/fs/new"),
                manifest_lines(&state, "/fs/d3/f8")
            ),
            (1, 0, 1),
            "-np {np} {name}"
        );
        decided.push((counts, lines));
    }
    assert_eq!(decided[0], decided[1], "-np {np}: the second run decides the same");
    // Listed once again: f7 is updated (its size from line 1002), the new path created.
    std::fs::write(
        &file,
        format!("{header}{}{again}{new}#complete#1700000300\n", rows.replace("|/fs/d2/f7\n", "|/fs/d2/f7-gone\n")),
    )
    .unwrap();
    let (code, s, err) = run(np, t, "once", &file);
    let counts = ["rejects", "created", "updated", "deleted", "emitted"].map(|k| s[k].as_u64().unwrap_or(u64::MAX));
    assert_eq!((code, counts), (Some(0), [0, 2, 1, 0, 3]), "-np {np}: {s}\n{err}");
    let sent = ingested(&t.join("once-out"));
    assert_eq!(sent["/fs/d2/f7"]["content"]["size"], 999, "-np {np}: {:?}", sent.keys());
    assert!(
        sent.contains_key("/fs/new") && sent.contains_key("/fs/d2/f7-gone") && sent.len() == 3,
        "-np {np}: {:?}",
        sent.keys()
    );
}

#[test]
fn a_path_listed_twice_is_a_reject_naming_both_lines_on_any_number_of_ranks() {
    for np in [1, 2, 3] {
        listed_twice_on(np);
    }
}
