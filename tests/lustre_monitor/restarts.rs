//! The Lustre monitor's restarts: a renamed hard link, a source restarted after transient
//! failures or stopped after too many, and at every kill point what was acknowledged delivered.

use super::*;

#[test]
fn renaming_one_hard_link_updates_the_ctime_of_every_name() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal, index) = preexisting_fs(tmp.path(), 5, 13);
    let out = tmp.path().join("monitor-out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 40, 0);
    let mut w = Workload::open(&root, &journal, 13).unwrap();
    w.mkdir("/work").unwrap();
    w.create("/work/h", 10).unwrap();
    w.hardlink("/work/h", "/work/h2").unwrap();
    drop(w);
    let (code, _, err) = icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    // ctime has second resolution in the index: let the rename fall in a later second.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let mut w = Workload::open(&root, &journal, 13).unwrap();
    w.rename("/work/h2", "/work/h3").unwrap();
    drop(w);
    drain_and_check(tmp.path(), &cfg, &root, &journal, &out, index, "rename of one hard link");
}

#[test]
fn a_source_restarted_after_a_transient_failure_finishes_the_stream() {
    let seed = test_seed();
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal, mut index) = preexisting_fs(tmp.path(), 30, seed);
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    w.run(Kind::Mixed, 150, "/old0").unwrap();
    drop(w);
    let out = tmp.path().join("monitor-out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 40, 0);
    // The first `lfs changelog` fails (the MDS is unreachable); every later call works.
    let wrapper = tmp.path().join("flaky-lfs");
    let marker = tmp.path().join("failed-once");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = changelog ] && [ ! -e '{m}' ]; then touch '{m}'; echo 'lfs: cannot reach the MDS' >&2; exit 1; fi\nexec '{k}' lfs --journal '{j}' --mount '{r}' --delay-ms 0 \"$@\"\n",
            m = marker.display(),
            k = testkit().display(),
            j = journal.display(),
            r = root.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let text = std::fs::read_to_string(&cfg).unwrap();
    let start = text.find("lfs = [").unwrap();
    let end = start + text[start..].find('\n').unwrap();
    let text = format!(
        "[monitor]\non_failure = \"restart\"\nrestart_initial_secs = 0.05\nmax_restarts = 3\n{}lfs = [\"{}\"]\nlfs_retries = 0{}",
        &text[..start],
        wrapper.display(),
        &text[end..]
    );
    std::fs::write(&cfg, text).unwrap();
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("restarting") && err.contains("cannot reach the MDS"), "{err}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["mdt0"]["restarts"], 1, "{report}");
    apply(&mut index, &out);
    let fresh = walk_snapshot(tmp.path(), &root, "after");
    let (missing, extra, differ) = compare(&index, &fresh);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}"
    );
    assert_all_cleared(tmp.path(), &journal);
}

#[test]
fn a_source_that_keeps_failing_stops_after_its_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    std::fs::create_dir_all(&root).unwrap();
    let cfg = config(
        tmp.path(),
        "monitor.toml",
        &format!(
            "[monitor]\non_failure = \"restart\"\nrestart_initial_secs = 0.01\nmax_restarts = 2\n[records]\nvisible_to = [\"public\"]\n\
             [sources.mdt1]\ntype = \"lustre\"\nmdt = \"fs1-MDT0000\"\nlfs = [\"/bin/sh\", \"-c\", \"echo 'lfs: cannot reach the MDS' >&2; exit 1\", \"lfs\"]\n\
             mount = \"{r}\"\nfsname = \"fs1\"\nlfs_retries = 0\nstate_dir = \"{t}/state\"\n[sinks.o]\ntype = \"blackhole\"\n",
            r = root.display(),
            t = tmp.path().display()
        ),
    );
    let (code, _, err) = icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &[]);
    assert_ne!(code, 0);
    assert!(
        err.contains("source `mdt1` failed")
            && err.contains("after 2 restarts")
            && err.contains("cannot reach the MDS"),
        "{err}"
    );
    assert_eq!(err.matches("restarting").count(), 2, "{err}");
    // An unknown policy names the key and the choices.
    let bad = std::fs::read_to_string(&cfg).unwrap().replace("\"restart\"", "\"retry\"");
    std::fs::write(&cfg, bad).unwrap();
    let (code, _, err) = icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("on_failure") && err.contains("stop") && err.contains("restart"), "{err}");
}

/// What a clear up to `cleared` promises, checked on the index delivered so far (no final
/// drain, nothing re-stat'ed): every file whose object no record after `cleared` touches has
/// its record, with the file system's content; no file gone by `cleared` is still indexed.
fn assert_acknowledged_is_delivered(
    tmp: &Path,
    root: &Path,
    journal: &Path,
    out: &Path,
    seed_index: &BTreeMap<String, Value>,
    fresh: &BTreeMap<String, Value>,
    what: &str,
) {
    use icicle_plugins_lustre::changelog::ChangelogRecord;
    use icicle_plugins_lustre::namespace::Namespace;
    let users = std::fs::read_to_string(tmp.join("lfs/changelog.users")).unwrap();
    let cleared: u64 = users.split_whitespace().nth(1).unwrap().parse().unwrap();
    let records: Vec<ChangelogRecord> =
        journal_lines(journal).iter().map(|l| ChangelogRecord::parse(l).unwrap()).collect();
    let files = |ns: &Namespace| -> BTreeMap<String, _> {
        ns.by_path
            .iter()
            .filter(|(_, f)| ns.by_fid.get(f).is_some_and(|o| !o.is_dir))
            .map(|(p, f)| (p.clone(), *f))
            .collect()
    };
    let mut at_clear = Namespace::load(&tmp.join("lfs/changelog.baseline"), Path::new("/nonexistent")).unwrap();
    // Every object (file or directory) each name has had up to the clear.
    let mut ever: BTreeMap<String, std::collections::HashSet<_>> = BTreeMap::new();
    let mut note = |ns: &Namespace| {
        for (p, f) in &ns.by_path {
            ever.entry(p.clone()).or_default().insert(*f);
        }
    };
    note(&at_clear);
    for r in records.iter().filter(|r| r.index <= cleared) {
        at_clear.apply(r);
        note(&at_clear);
    }
    let later: std::collections::HashSet<_> = records
        .iter()
        .filter(|r| r.index > cleared)
        .flat_map(|r| [Some(r.target), r.source, r.parent, r.source_parent])
        .flatten()
        .collect();
    let fin = Namespace::load(&tmp.join("lfs/changelog.baseline"), journal).unwrap();
    let (then, now) = (files(&at_clear), files(&fin));
    let mut index = seed_index.clone();
    apply(&mut index, out);
    let (got, want) = (comparable(&index), comparable(fresh));
    let _ = root;
    for (p, f) in &then {
        if now.get(p) == Some(f) && !later.contains(f) {
            assert_eq!(
                got.get(p),
                want.get(p),
                "{what}: {p} (unchanged after the clear at {cleared}) is not delivered as it is"
            );
        }
    }
    // A name gone by the clear may leave with a later record that touches an object it or
    // one of its directories has named (a directory renamed while the object had already
    // moved on: its walk could not see it; that later record translates the delete back).
    for p in got.keys() {
        let prefixes = p.match_indices('/').map(|(i, _)| &p[..i]).filter(|q| !q.is_empty()).chain([p.as_str()]);
        let pending = prefixes.into_iter().any(|q| ever.get(q).is_some_and(|fs| fs.iter().any(|f| later.contains(f))));
        assert!(
            then.contains_key(p) || now.contains_key(p) || pending,
            "{what}: {p} was gone by the clear at {cleared} and is still indexed"
        );
    }
}

#[test]
fn every_kill_point_has_delivered_what_it_acknowledged() {
    let seed = test_seed() ^ 0xac4;
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal, seed_index) = preexisting_fs(tmp.path(), 40, seed);
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    for round in 0..6 {
        let base = if round % 3 == 0 { "/old0" } else { "/work" };
        w.run(if round % 2 == 0 { Kind::Mixed } else { Kind::EvalOut }, 120, base).unwrap();
    }
    drop(w);
    let fresh = walk_snapshot(tmp.path(), &root, "fresh");
    let out = tmp.path().join("monitor-out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 15, 0);
    let text = std::fs::read_to_string(&cfg).unwrap().replace("\"--delay-ms\", \"0\"", "\"--delay-ms\", \"2\"");
    std::fs::write(&cfg, text).unwrap();
    let mut x = Rng::new(seed ^ 3);
    // Kill points spread over a whole run (start-up and resolution take a good part of it).
    for kill in 0..test_kills() {
        run_monitor_then_kill(&cfg, &mut x, 100, 1200);
        assert_acknowledged_is_delivered(
            tmp.path(),
            &root,
            &journal,
            &out,
            &seed_index,
            &fresh,
            &format!("kill {kill}"),
        );
    }
    drain_and_check(tmp.path(), &cfg, &root, &journal, &out, seed_index, "after the kills");
}

/// A run delivers a file's create and is killed before its checkpoint; the file is removed
/// before the restart, whose first batch then holds the create and the unlink. The index
/// holds the file from the killed run: the restart deletes it (a pair cancelled in the rule
/// table would leave it for good).
#[test]
fn a_create_delivered_before_a_kill_and_unlinked_after_is_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    let journal = tmp.path().join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, 21).unwrap();
    w.mkdir("/d").unwrap();
    w.create("/d/a", 10).unwrap();
    let out = tmp.path().join("out");
    let cfg = monitor_config(tmp.path(), &root, &journal, &out, 1000, 0);
    let registered = std::fs::read_to_string(tmp.path().join("lfs/changelog.users")).unwrap();
    let (code, _, err) =
        icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &[("ICICLE_FAULT", "monitor-delivered")]);
    assert_ne!(code, 0);
    assert!(err.contains("fault injected at monitor-delivered"), "{err}");
    assert!(ingested(&out).contains_key("/d/a"), "delivered before the kill");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("lfs/changelog.users")).unwrap(),
        registered,
        "nothing acknowledged"
    );
    w.unlink("/d/a").unwrap();
    w.create("/d/b", 5).unwrap();
    drop(w);
    let (code, _, err) = icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let mut index = BTreeMap::new();
    apply(&mut index, &out);
    let paths: Vec<&String> = index.keys().collect();
    assert_eq!(paths, ["/d/b"], "the killed run's /d/a is deleted");
    assert_all_cleared(tmp.path(), &journal);
}
