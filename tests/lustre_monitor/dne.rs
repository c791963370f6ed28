//! One namespace over several MDTs (DNE): each MDT logs the operations it runs in its own
//! changelog (the stand-in's rules: testkit/src/lustre/dne.rs); one `lustre` source reads them
//! all as one sequence (`mdts`); the index after `--drain` equals a fresh walk.

use super::*;

/// One source reading the `mdts` MDTs of one file system as one changelog (`mdts = [...]`).
fn dne_config(tmp: &Path, root: &Path, journal: &Path, out: &Path, mdts: u32, batch: usize) -> PathBuf {
    let names: Vec<String> = (0..mdts).map(|n| format!("\"fs0-MDT{n:04x}\"")).collect();
    config(
        tmp,
        "dne.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n[sinks.o]\ntype = \"file\"\ndir = \"{o}\"\nfsync = true\n\
             [sources.fs0]\ntype = \"lustre\"\nmdts = [{m}]\nuser = \"cl1\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"0\"]\n\
             mount = \"{r}\"\nfsname = \"fs0\"\nbatch_size = {batch}\nquiet_period_secs = 0.0\npoll_interval_secs = 0.02\nread_size = 300\nstate_dir = \"{t}/state\"\n",
            m = names.join(", "),
            k = testkit().display(),
            j = journal.display(),
            r = root.display(),
            t = tmp.display(),
            o = out.display(),
        ),
    )
}

/// A mixed workload (directory renames across MDTs, remote directories) over `mdts` MDTs of
/// one namespace, in a tree that predates monitoring and one made during it.
fn dne_ground_truth(mdts: u32, seed: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal) = (tmp.path().join("fs"), tmp.path().join("lfs/changelog"));
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    w.set_mdts(mdts, seed).unwrap();
    w.preexisting(60).unwrap();
    drop(w);
    let mut index = walk_snapshot(tmp.path(), &root, "before");
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    w.set_mdts(mdts, seed).unwrap();
    w.run(Kind::Mixed, 300, "/work").unwrap();
    w.run(Kind::Mixed, 150, "/old0").unwrap();
    drop(w);
    let out = tmp.path().join("monitor-out");
    let cfg = dne_config(tmp.path(), &root, &journal, &out, mdts, 40);
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "seed {seed}: {err}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    apply(&mut index, &out);
    let fresh = walk_snapshot(tmp.path(), &root, "after");
    let (missing, extra, differ) = compare(&index, &fresh);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "seed {seed}, {mdts} MDTs: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\nreport {report}"
    );
    for n in 0..mdts {
        // Each MDT's changelog was read and cleared to its end.
        let mdt_journal = icicle_testkit::lustre::mdt_journal(&journal, n);
        let users = std::fs::read_to_string(icicle_testkit::lustre::side(&mdt_journal, ".users")).unwrap();
        let last = journal_indexes(&mdt_journal).last().copied();
        if let Some(last) = last {
            assert_eq!(users.trim(), format!("cl1 {last}"), "seed {seed}, MDT {n}");
        }
    }
}

#[test]
fn one_namespace_over_two_and_four_mdts_equals_a_fresh_walk() {
    let seed = test_seed();
    for (i, mdts) in [2, 4, 2].into_iter().enumerate() {
        dne_ground_truth(mdts, seed + i as u64);
    }
}
