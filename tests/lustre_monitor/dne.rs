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
    let index = walk_snapshot(tmp.path(), &root, "before");
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    w.set_mdts(mdts, seed).unwrap();
    w.run(Kind::Mixed, 300, "/work").unwrap();
    w.run(Kind::Mixed, 150, "/old0").unwrap();
    drop(w);
    let out = tmp.path().join("monitor-out");
    let cfg = dne_config(tmp.path(), &root, &journal, &out, mdts, 40);
    drain_to_ground_truth(tmp.path(), &cfg, (&root, &journal, &out), index, mdts, &format!("seed {seed}, {mdts} MDTs"));
}

#[test]
fn one_namespace_over_two_and_four_mdts_equals_a_fresh_walk() {
    let seed = test_seed();
    for (i, mdts) in [2, 4, 2].into_iter().enumerate() {
        dne_ground_truth(mdts, seed + i as u64);
    }
}

/// Monitors of a two-MDT namespace started and SIGKILLed at random points while the workload
/// runs, then one drained to the end: nothing acknowledged on any MDT was left undelivered.
#[test]
fn a_dne_monitor_killed_while_the_workload_runs_loses_nothing() {
    let seed = test_seed() ^ 0xd7e;
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal) = (tmp.path().join("fs"), tmp.path().join("lfs/changelog"));
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    w.set_mdts(2, seed).unwrap();
    w.preexisting(40).unwrap();
    drop(w);
    let index = walk_snapshot(tmp.path(), &root, "before");
    let out = tmp.path().join("monitor-out");
    let cfg = dne_config(tmp.path(), &root, &journal, &out, 2, 15);
    let (r2, j2) = (root.clone(), journal.clone());
    let workload = std::thread::spawn(move || {
        let mut w = Workload::open(&r2, &j2, seed).unwrap();
        w.set_mdts(2, seed).unwrap();
        for round in 0..16 {
            let kind = [Kind::Mixed, Kind::EvalOut, Kind::Mixed, Kind::EvalPerf][round % 4];
            let base = if round == 5 { "/old0".to_string() } else { format!("/w{}", round % 3) };
            w.run(kind, 40, &base).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
    });
    let mut x = Rng::new(seed ^ 7);
    let mut kills = 0;
    while !workload.is_finished() || kills < test_kills() {
        // Long enough for a run to deliver and clear some batches before its kill (the first
        // batch of a debug build through the fake lfs takes about a second).
        run_monitor_then_kill(&cfg, &mut x, 300, 2700);
        kills += 1;
    }
    workload.join().unwrap();
    let checkpoint = tmp.path().join("state/fs0-MDTs.checkpoint.json");
    super::kill_until_delivered(&cfg, &mut x, &checkpoint);
    let what = format!("seed {seed}, after {kills} kills");
    drain_to_ground_truth(tmp.path(), &cfg, (&root, &journal, &out), index, 2, &what);
}

/// Drain with one more run, then: the snapshot `index` plus everything delivered equals a
/// fresh walk of `root`, and each of the `mdts` changelogs was cleared to its end.
fn drain_to_ground_truth(
    tmp: &Path,
    cfg: &Path,
    (root, journal, out): (&Path, &Path, &Path),
    mut index: BTreeMap<String, Value>,
    mdts: u32,
    what: &str,
) {
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{what}: {err}");
    apply(&mut index, out);
    let fresh = walk_snapshot(tmp, root, "after");
    let (missing, extra, differ) = compare(&index, &fresh);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "{what}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\nreport {stdout}"
    );
    for n in 0..mdts {
        let mdt_journal = icicle_testkit::lustre::mdt_journal(journal, n);
        let users = std::fs::read_to_string(icicle_testkit::lustre::side(&mdt_journal, ".users")).unwrap();
        if let Some(last) = journal_indexes(&mdt_journal).last() {
            assert_eq!(users.trim(), format!("cl1 {last}"), "{what}: MDT {n}");
        }
    }
}
