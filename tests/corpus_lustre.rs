//! Every Lustre sample of the corpus (testkit/corpus/lustre) through the real code path: the
//! `icicle monitor` binary reading the fake `lfs` (which serves the sample as a changelog, with
//! its retained range, and answers `fid2path` from the case's baseline), stat'ing a mount that
//! holds what the case says, delivering to the file sink. Each case's index operations must be
//! exactly those its `@expect` lines name; every record is acknowledged.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::*;
use icicle_testkit::corpus::{self, Case, Expect};
use serde_json::Value;

fn testkit() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit")
}

/// The mount a case describes: `@dir`, `@file PATH`, `@file PATH = OTHER` (a hard link),
/// `@file PATH -> TARGET` (a symbolic link).
fn make_mount(case: &Case, mount: &Path) {
    std::fs::create_dir_all(mount).unwrap();
    for d in case.directive("dir") {
        std::fs::create_dir_all(icicle_core::name::on(mount, d)).unwrap();
    }
    for f in case.directive("file") {
        let (path, link) = match (f.split_once(" = "), f.split_once(" -> ")) {
            (Some((p, other)), _) => (p, Some((true, other))),
            (_, Some((p, target))) => (p, Some((false, target))),
            _ => (f, None),
        };
        let at = icicle_core::name::on(mount, path);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        match link {
            Some((true, other)) => std::fs::hard_link(icicle_core::name::on(mount, other), &at).unwrap(),
            Some((false, target)) => std::os::unix::fs::symlink(icicle_core::name::to_os(target), &at).unwrap(),
            None => std::fs::write(&at, b"corpus").unwrap(),
        }
    }
}

/// Run one case; an error says what differs.
fn run_case(case: &Case) -> Result<(), String> {
    let tmp = test_dir();
    let t = tmp.path();
    let mount = t.join("fs");
    make_mount(case, &mount);
    let journal = t.join("lfs/changelog");
    std::fs::create_dir_all(journal.parent().unwrap()).unwrap();
    std::fs::write(&journal, case.data_text()).unwrap();
    let mut baseline = Vec::new();
    for b in case.directive("baseline") {
        let (fid, rest) = b.split_once(' ').unwrap();
        let (path, kind) = rest.rsplit_once(' ').unwrap();
        baseline.extend_from_slice(format!("{fid}\t").as_bytes());
        baseline.extend_from_slice(&icicle_core::name::unescape(path));
        baseline.extend_from_slice(format!("\t{kind}\n").as_bytes());
    }
    std::fs::write(icicle_testkit::lustre::side(&journal, ".baseline"), baseline).unwrap();
    std::fs::write(icicle_testkit::lustre::side(&journal, ".users"), "cl1 0\n").unwrap();
    if let Some(p) = case.directive("purged").next() {
        icicle_testkit::lustre::purge(&journal, p.parse().unwrap()).unwrap();
    }
    let startrec = case.directive("startrec").next().unwrap_or("0");
    let out = t.join("out");
    let cfg = config(
        t,
        "monitor.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n\
             [sources.mdt0]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nuser = \"cl1\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"0\"]\n\
             mount = \"{r}\"\nfsname = \"fs0\"\nstartrec = {startrec}\nbatch_size = 100\nquiet_period_secs = 0.0\npoll_interval_secs = 0.02\nread_size = 3\nstate_dir = \"{t}/state\"\n\
             [sinks.o]\ntype = \"file\"\ndir = \"{o}\"\n",
            k = testkit().display(),
            j = journal.display(),
            r = mount.display(),
            t = t.display(),
            o = out.display()
        ),
    );
    let report = drain_report(&cfg)?;
    let r = &report["mdt0"];
    // What the monitor sent: upserts and deletes, by subject.
    let mut updates = BTreeSet::new();
    let mut deletes = BTreeSet::new();
    for doc in sent_documents(&out) {
        match doc["subjects"].as_array() {
            Some(subjects) => deletes.extend(subjects.iter().filter_map(|s| s.as_str().map(str::to_string))),
            None => updates.extend(
                doc["ingest_data"]["gmeta"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e["subject"].as_str().map(str::to_string)),
            ),
        }
    }
    let want_updates: BTreeSet<String> =
        case.expect.iter().filter_map(|e| if let Expect::Update(p, _) = e { Some(p.clone()) } else { None }).collect();
    let want_deletes: BTreeSet<String> =
        case.expect.iter().filter_map(|e| if let Expect::Delete(p) = e { Some(p.clone()) } else { None }).collect();
    let exact = case.expect.iter().any(|e| matches!(e, Expect::Update(..) | Expect::Delete(_) | Expect::Nothing));
    if exact && (updates != want_updates || deletes != want_deletes) {
        return Err(format!("sent updates {updates:?} deletes {deletes:?}, expected updates {want_updates:?} deletes {want_deletes:?}; report {r}"));
    }
    let rejects = case.expect.iter().find_map(|e| if let Expect::Reject(n) = e { Some(*n) } else { None }).unwrap_or(0);
    if r["dead_letters"].as_u64() != Some(rejects) {
        return Err(format!("{} dead letters, expected {rejects}; report {r}", r["dead_letters"]));
    }
    let lost: Vec<[u64; 2]> =
        case.expect.iter().filter_map(|e| if let Expect::Lost(a, b) = e { Some([*a, *b]) } else { None }).collect();
    let got_lost: Vec<[u64; 2]> = serde_json::from_value(r["lost_ranges"].clone()).unwrap_or_default();
    if got_lost != lost || r["lost_records"].as_u64() != Some(lost.iter().map(|[a, b]| b - a + 1).sum()) {
        return Err(format!("lost {got_lost:?} ({} records), expected {lost:?}; report {r}", r["lost_records"]));
    }
    if case.expect.contains(&Expect::GroundTruth) {
        // The index: the baseline's files, then what was sent; the file system: every file and
        // link on the mount.
        let mut index: std::collections::BTreeMap<String, Value> = case
            .directive("baseline")
            .filter_map(|b| b.strip_suffix(" f")?.split_once(' '))
            .map(|(_, p)| (p.to_string(), Value::Null))
            .collect();
        apply(&mut index, &out);
        let index: BTreeSet<String> = index.into_keys().collect();
        let fresh: BTreeSet<String> = walk_snapshot(t, &mount, "after").keys().cloned().collect();
        if index != fresh {
            return Err(format!("index {index:?}, file system {fresh:?}; report {r}"));
        }
    }
    // Every record was read and acknowledged.
    let last = case
        .data
        .iter()
        .filter_map(|l| std::str::from_utf8(l.split(|&b| b == b' ').next()?).ok()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    let users = std::fs::read_to_string(icicle_testkit::lustre::side(&journal, ".users")).unwrap();
    if users.trim() != format!("cl1 {last}") {
        return Err(format!("cleared `{}`, expected up to {last}; report {r}", users.trim()));
    }
    Ok(())
}

#[test]
fn every_lustre_sample_means_what_its_case_says() {
    let files = corpus::files("lustre");
    assert!(!files.is_empty(), "no Lustre corpus");
    let mut failures = Vec::new();
    let mut n = 0;
    for f in files {
        for case in corpus::load(&f).unwrap_or_else(|e| panic!("{e}")) {
            n += 1;
            if let Err(e) = run_case(&case) {
                failures.push(format!("{} ({}): {e}", case.name, case.at));
            }
        }
    }
    assert!(n >= 30, "{n} cases");
    assert!(failures.is_empty(), "{} of {n} cases failed:\n{}", failures.len(), failures.join("\n"));
}
