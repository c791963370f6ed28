//! Every listing sample of the corpus (testkit/corpus/listings: pwalk, lester, mmapplypolicy,
//! GUFI) through `icicle snapshot` with the source its case configures: the primary records
//! (path, kind, mode, owner, size, times, inode) must be exactly those its `@expect record`
//! lines name, the directory rows and rejects as many as it says. A case whose every line is
//! a reject is format drift: the run stops at planning, naming the file and the line.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::*;
use icicle_testkit::corpus::{self, Case, Expect};
use serde_json::Value;

/// The GUFI index a case's `@gufi_db` and `@sql` directives describe.
fn gufi_index(case: &Case, index: &Path) -> Result<(), String> {
    std::fs::create_dir_all(index).map_err(|e| e.to_string())?;
    let mut conn: Option<rusqlite::Connection> = None;
    for (name, value) in &case.directives {
        match name.as_str() {
            "gufi_db" => {
                let dir = index.join(value);
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                conn = Some(rusqlite::Connection::open(dir.join("db.db")).map_err(|e| e.to_string())?);
            }
            "sql" => conn
                .as_ref()
                .ok_or("@sql before @gufi_db")?
                .execute_batch(value)
                .map_err(|e| format!("{value}: {e}"))?,
            _ => {}
        }
    }
    Ok(())
}

fn run_case(case: &Case) -> Result<(), String> {
    let tmp = test_dir();
    let t = tmp.path();
    let source: Vec<&str> = case.directive("source_config").collect();
    let gufi = source.iter().any(|l| l.replace(' ', "") == "type=\"gufi\"");
    let input: PathBuf = if gufi {
        let index = t.join("index");
        gufi_index(case, &index)?;
        index
    } else {
        let f = t.join("listing.txt");
        std::fs::write(&f, case.data_bytes()).map_err(|e| e.to_string())?;
        f
    };
    let where_key =
        if gufi { format!("index = \"{}\"", input.display()) } else { format!("paths = [\"{}\"]", input.display()) };
    let out = t.join("out");
    let cfg = config(
        t,
        "snapshot.toml",
        &format!(
            "[snapshot]\nmax_reject_ratio = 1.0\nrejects_file = \"{}/rejects.jsonl\"\n[records]\nvisible_to = [\"public\"]\n[sources.l]\n{}\n{where_key}\n[sinks.o]\ntype = \"file\"\ndir = \"{}\"\n",
            t.display(),
            source.join("\n"),
            out.display()
        ),
    );
    let (code, s, err) = snapshot(&cfg, &[]);
    let rejects = case.expect.iter().find_map(|e| if let Expect::Reject(n) = e { Some(*n) } else { None }).unwrap_or(0);
    let rows = case.data.iter().filter(|l| !l.starts_with(b"#") && !l.starts_with(b"[")).count() as u64;
    if !gufi && rejects > 0 && rejects == rows {
        // Nothing in the file parses: the producer is not the one configured.
        return match code {
            0 => Err(format!("every line is a reject, but the run succeeded: {s}")),
            _ if err.contains("does not match") && err.contains("line ") => Ok(()),
            _ => Err(format!("exit {code} without naming the drift: {err}")),
        };
    }
    if code != 0 {
        return Err(format!("snapshot exited {code}: {err} {s}"));
    }
    let mut got = BTreeSet::new();
    for doc in sent_documents(&out) {
        for e in doc["ingest_data"]["gmeta"].as_array().into_iter().flatten() {
            let c = &e["content"];
            let n = |v: &Value| v.as_i64().map_or_else(|| v.to_string(), |i| i.to_string());
            got.insert(format!(
                "{} {} {} {} {} {} {} {} {} {}",
                c["path"].as_str().unwrap_or(""),
                c["type"].as_str().unwrap_or(""),
                n(&c["raw"]["mode"]),
                n(&c["uid"]),
                n(&c["gid"]),
                n(&c["size"]),
                n(&c["raw"]["atime"]),
                n(&c["raw"]["ctime"]),
                n(&c["raw"]["mtime"]),
                c["raw"].get("inode").map_or("0".to_string(), n)
            ));
        }
    }
    let want: BTreeSet<String> = case
        .expect
        .iter()
        .filter_map(|e| match e {
            Expect::Record(p, k, mode, uid, gid, size, a, c, m, ino) => {
                Some(format!("{p} {k} {mode:o} {uid} {gid} {size} {a} {c} {m} {ino}"))
            }
            _ => None,
        })
        .collect();
    if got != want {
        let missing: Vec<&String> = want.difference(&got).collect();
        let extra: Vec<&String> = got.difference(&want).collect();
        return Err(format!("records differ: missing {missing:#?}\nunexpected {extra:#?}\nsummary {s}"));
    }
    let dirs = case.expect.iter().filter(|e| matches!(e, Expect::Directory(_))).count() as u64;
    if s["directories"].as_u64() != Some(dirs) {
        return Err(format!("{} directories, expected {dirs}; {s}", s["directories"]));
    }
    if s["rejects"].as_u64() != Some(rejects) {
        let text = std::fs::read_to_string(t.join("rejects.jsonl")).unwrap_or_default();
        return Err(format!("{} rejects, expected {rejects}; {s}\n{text}", s["rejects"]));
    }
    Ok(())
}

#[test]
fn every_listing_sample_reads_as_its_case_says() {
    let files = corpus::files("listings");
    assert!(files.len() >= 4, "{files:?}");
    let (mut failures, mut n) = (Vec::new(), 0);
    for f in files {
        for case in corpus::load(&f).unwrap_or_else(|e| panic!("{e}")) {
            n += 1;
            if let Err(e) = run_case(&case) {
                failures.push(format!("{} ({}): {e}", case.name, case.at));
            }
        }
    }
    assert!(n >= 20, "{n} cases");
    assert!(failures.is_empty(), "{} of {n} cases failed:\n{}", failures.len(), failures.join("\n"));
}
