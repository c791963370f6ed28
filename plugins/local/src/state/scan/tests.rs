//! Rescans a slice at a time: the work list holds what differs, not the tree.

use std::collections::BTreeSet;
use std::sync::Arc;

use icicle_core::policy::{RecordPolicy, VisibleTo};

use icicle_core::monitor::ChangeState;

use crate::state::*;

fn state(root: &Path, seed_emit: bool) -> LocalState {
    let policy = RecordPolicy { visible_to: vec![VisibleTo::Public], version: "t".into(), ..Default::default() };
    LocalState::new(root.to_path_buf(), String::new(), PrimaryEncoder::new(Arc::new(policy)), seed_emit)
}

fn rescan(why: RescanReason) -> Vec<LocalEvent> {
    vec![LocalEvent::Rescan(String::new(), why)]
}

/// Every part of the emit `first` begins: (updates, deletes) summed.
fn drain(s: &mut LocalState, first: Vec<LocalEvent>) -> (usize, usize) {
    let e = s.apply_events(first).unwrap();
    let (mut updates, mut deletes) = (e.chunk.len(), e.deletes.len());
    while s.more() {
        let e = s.apply_events(Vec::new()).unwrap();
        (updates, deletes) = (updates + e.chunk.len(), deletes + e.deletes.len());
    }
    (updates, deletes)
}

/// Every path below `root`, directories included, as the entries name them.
fn on_disk(root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    crate::state::walk::walk(root, "", &mut Default::default(), false, &mut |rel, _| {
        out.insert(rel);
    });
    out
}

fn held(s: &LocalState) -> BTreeSet<String> {
    s.entries.keys().iter().map(|k| k.to_string()).collect()
}

/// The paths only the index holds, and those only the file system does.
fn differences(s: &LocalState, root: &Path) -> (Vec<String>, Vec<String>) {
    let (held, there) = (held(s), on_disk(root));
    (held.difference(&there).cloned().collect(), there.difference(&held).cloned().collect())
}

/// `dirs` directories of `files` files each below `root`.
fn tree(root: &Path, dirs: usize, files: usize) {
    for d in 0..dirs {
        std::fs::create_dir_all(root.join(format!("d{d}"))).unwrap();
        for f in 0..files {
            std::fs::write(root.join(format!("d{d}/f{f}")), b"1").unwrap();
        }
    }
}

/// A rescan of a root of 4,000 files where a few changed: exactly those are sent, and the
/// work list never held more than a slice of the tree.
#[test]
fn a_rescan_queues_only_what_differs() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    tree(r, 40, 100);
    let mut s = state(r, false);
    drain(&mut s, rescan(RescanReason::Seed));
    for f in ["d3/f1", "d3/f2", "d17/f50", "d39/f99", "d0/f0"] {
        std::fs::write(r.join(f), b"changed").unwrap();
    }
    for f in ["d5/f5", "d6/f6"] {
        std::fs::remove_file(r.join(f)).unwrap();
    }
    std::fs::create_dir_all(r.join("new/deep")).unwrap();
    for f in ["d1/new", "new/a", "new/deep/b"] {
        std::fs::write(r.join(f), b"new").unwrap();
    }
    assert_eq!(drain(&mut s, rescan(RescanReason::Overflow)), (8, 2));
    assert_eq!(differences(&s, r), (vec![], vec![]));
    // The differences and the new directories: not the 4,040 paths the index holds.
    assert!(s.counts.work_peak <= 12, "work list peak {}", s.counts.work_peak);
    // Changed: 5 files, 2 removed and the 3 directories a removal or creation touched.
    assert_eq!(s.counts.unchanged, 4040 - 10, "{:?}", s.counts);
}

/// The seed of a root larger than an emit, published in parts: the work list holds about one
/// step of the walk, not the root.
#[test]
fn a_published_seed_holds_a_step_of_the_walk_at_a_time() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    tree(r, 3, 1000);
    let mut s = state(r, true).with_emit_limit(100);
    assert_eq!(drain(&mut s, rescan(RescanReason::Seed)), (3000, 0));
    assert_eq!(differences(&s, r), (vec![], vec![]));
    assert!(s.counts.work_peak <= 2 * 256, "work list peak {}", s.counts.work_peak);
    assert!(s.counts.continued >= 29, "{:?}", s.counts);
}

/// A directory replaced between two parts of a rescan (its entries compared in the first as
/// they were, then moved away with it): what it held goes, what was moved is found at its
/// new name, whatever the walk had listed by then.
#[test]
fn a_directory_replaced_between_parts_of_a_rescan_converges() {
    for skew in 0..4 {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("a/sub")).unwrap();
        for f in ["a/f1", "a/f2", "a/sub/f3"] {
            std::fs::write(r.join(f), b"1").unwrap();
        }
        tree(r, 2, 150);
        let mut s = state(r, false).with_emit_limit(40 + 60 * skew);
        drain(&mut s, rescan(RescanReason::Seed));
        // New files enough for a rescan of several parts.
        for i in 0..250 {
            std::fs::write(r.join(format!("d{}/n{i}", i % 2)), b"n").unwrap();
        }
        let first = s.apply_events(rescan(RescanReason::Overflow)).unwrap();
        assert!(s.more(), "skew {skew}: one part only ({} updates)", first.chunk.len());
        std::fs::rename(r.join("a"), r.join("moved")).unwrap();
        std::fs::create_dir(r.join("a")).unwrap();
        std::fs::write(r.join("a/new"), b"n").unwrap();
        let events = vec![LocalEvent::Directory("a".into()), LocalEvent::Directory("moved".into())];
        drain(&mut s, events);
        assert_eq!(differences(&s, r), (vec![], vec![]), "skew {skew}");
    }
}

/// The directory being listed when a part ends is replaced before the next (a tree moved in at
/// its name): what is at the name now is walked, not only what the open listing still gives.
#[test]
fn a_directory_replaced_while_it_is_listed_is_walked_again() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path().join("fs");
    for i in 0..600 {
        std::fs::create_dir_all(r.join("p")).unwrap();
        std::fs::write(r.join(format!("p/f{i}")), b"1").unwrap();
    }
    let stage = t.path().join("stage");
    std::fs::create_dir_all(stage.join("n/deep")).unwrap();
    std::fs::write(stage.join("n/deep/g"), b"1").unwrap();
    let mut s = state(&r, true).with_emit_limit(100);
    s.apply_events(rescan(RescanReason::Seed)).unwrap();
    assert!(
        s.pending.as_ref().is_some_and(|w| w.scans.iter().any(|sc| sc.is_listing("p"))),
        "a part ended while p was listed"
    );
    // Files of one name are not remembered for their other names.
    assert_eq!(s.pending.as_ref().map(|w| w.requeued.len()), Some(0));
    std::fs::rename(r.join("p"), t.path().join("p.old")).unwrap();
    std::fs::rename(&stage, r.join("p")).unwrap();
    drain(&mut s, vec![LocalEvent::Directory("p".into())]);
    assert_eq!(differences(&s, &r), (vec![], vec![]));
}

/// A quiet seed (not published) writes its entries as a new generation of the entries files:
/// a restart restores every one.
#[tokio::test]
async fn a_quiet_seed_s_entries_restore() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path().join("fs");
    tree(&r, 3, 40);
    let st = t.path().join("st");
    std::fs::create_dir_all(&st).unwrap();
    let mut s = state(&r, false).with_entries_files(&st, "m");
    drain(&mut s, rescan(RescanReason::Seed));
    let cp = s.checkpoint(&0).unwrap();
    let mut again = state(&r, false).with_entries_files(&st, "m");
    again.restore(Some(cp), Vec::new()).await.unwrap();
    assert_eq!((again.len(), differences(&again, &r)), (123, (vec![], vec![])));
}

/// A batch whose entries file fails is not delivered: the error names the file.
#[test]
fn a_batch_whose_entries_file_fails_is_an_error_naming_it() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path().join("fs");
    tree(&r, 1, 3);
    let file = t.path().join("m.entries.sqlite");
    let mut s = state(&r, true).with_entries_on_disk(&file, 1).unwrap();
    drain(&mut s, rescan(RescanReason::Seed));
    std::fs::write(r.join("d0/f0"), b"changed").unwrap();
    s.entries.break_for_tests();
    let e = s.apply_events(vec![LocalEvent::Changed("d0/f0".into())]).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("m.entries.sqlite"), "{e}");
}

/// A rescan publishes a file in one part; its directory's mode changes before the next: the
/// directory's own event (applied after the emit) publishes what is below it again, judged
/// with the new mode.
#[test]
fn a_file_a_rescan_published_before_its_directory_changed_is_published_again() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::create_dir_all(r.join("d")).unwrap();
    for f in ["d/f", "d/g"] {
        std::fs::write(r.join(f), b"1").unwrap();
    }
    let mut s = crate::state::tests::posix_state(r, false).with_emit_limit(1);
    drain(&mut s, rescan(RescanReason::Seed));
    std::fs::write(r.join("d/f"), b"22").unwrap();
    let e = s.apply_events(rescan(RescanReason::Overflow)).unwrap();
    assert_eq!(e.chunk.len(), 1);
    std::fs::set_permissions(r.join("d"), std::fs::Permissions::from_mode(0o700)).unwrap();
    while s.more() {
        s.apply_events(Vec::new()).unwrap();
    }
    let (updates, _) = drain(&mut s, vec![LocalEvent::Changed("d".into())]);
    assert_eq!((updates, s.counts.reevaluated), (2, 2), "{:?}", s.counts);
}

/// A file reported below a directory that can be entered but not listed (mode 0311), in the
/// batch of a rescan of the root: the rescan's walk cannot find it, its event's compare does.
#[test]
fn a_reported_file_below_an_unlistable_directory_is_published_beside_a_rescan() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root (setfsuid)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::set_permissions(r, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(r.join("d")).unwrap();
    let mut s = state(r, true);
    drain(&mut s, rescan(RescanReason::Seed));
    std::fs::write(r.join("d/p"), b"new").unwrap();
    std::fs::set_permissions(r.join("d/p"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(r.join("d"), std::fs::Permissions::from_mode(0o311)).unwrap();
    // SAFETY: setfsuid has no memory preconditions and is per thread.
    unsafe { libc::setfsuid(65534) };
    let got = s.apply_events(vec![
        LocalEvent::Changed("d/p".into()),
        LocalEvent::Rescan(String::new(), RescanReason::Overflow),
    ]);
    // SAFETY: as above.
    unsafe { libc::setfsuid(0) };
    assert_eq!(got.unwrap().chunk.len(), 1);
    assert!(s.entries.contains_key("d/p"));
}

/// A deep tree made while monitored (a directory event per level, an event per file): each path
/// is compared a bounded number of times, not once per directory above it.
#[test]
fn a_deep_new_tree_is_compared_a_bounded_number_of_times() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    let mut s = state(r, true);
    drain(&mut s, rescan(RescanReason::Seed));
    let (mut dir, mut events) = (String::new(), Vec::new());
    for level in 0..16 {
        dir = crate::event::join(&dir, &format!("d{level}"));
        std::fs::create_dir(r.join(&dir)).unwrap();
        std::fs::write(r.join(format!("{dir}/f")), b"1").unwrap();
        events.push(LocalEvent::Directory(dir.clone()));
        events.push(LocalEvent::Changed(format!("{dir}/f")));
    }
    assert_eq!(drain(&mut s, events), (16, 0));
    assert_eq!(differences(&s, r), (vec![], vec![]));
    // 32 paths: each compared by its event, its held scan and its walk at most.
    assert!(s.counts.compared <= 3 * 32, "{:?}", s.counts);
}

/// A file compared (from its event) before its directory, whose directory is then replaced by
/// an empty one after a rescan's held side passed the file and before its walk lists the
/// directory: the file goes.
#[test]
fn a_file_compared_before_its_replaced_directory_goes() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    let mut s = state(r, true).with_emit_limit(1);
    drain(&mut s, rescan(RescanReason::Seed));
    std::fs::create_dir_all(r.join("p/x")).unwrap();
    for f in ["p/a", "p/b", "p/x/f"] {
        std::fs::write(r.join(f), b"1").unwrap();
    }
    drain(&mut s, vec![LocalEvent::Changed("p/x/f".into())]);
    assert!(s.entries.contains_key("p/x/f") && !s.entries.contains_key("p/x"));
    // The held side finds p/x/f as held; the walk finds p, then p's entries, one a part.
    s.apply_events(vec![LocalEvent::Rescan(String::new(), RescanReason::Overflow)]).unwrap();
    assert!(s.more() && !s.entries.contains_key("p/x"), "{:?}", s.entries.keys());
    std::fs::rename(r.join("p/x"), r.join("z")).unwrap();
    std::fs::create_dir(r.join("p/x")).unwrap();
    while s.more() {
        s.apply_events(Vec::new()).unwrap();
    }
    // Before the events of the move: the rescan itself left nothing behind.
    assert_eq!(differences(&s, r).0, Vec::<String>::new());
    drain(&mut s, vec![LocalEvent::Directory("p/x".into()), LocalEvent::Directory("z".into())]);
    assert_eq!(differences(&s, r), (vec![], vec![]));
}

/// One random change below `r`, and the events a kernel would report for it.
fn mutate(rng: &mut icicle_core::rng::Rng, r: &Path, events: &mut Vec<LocalEvent>) {
    let dir = |rng: &mut icicle_core::rng::Rng| ["", "a", "a/b", "c", "c/d/e"][rng.below(5) as usize].to_string();
    let (d, n) = (dir(rng), rng.below(6));
    let f = crate::event::join(&d, &format!("f{n}"));
    let s = crate::event::join(&d, &format!("s{n}"));
    // The directories a change makes on the way are reported too (as a kernel does).
    let made = |events: &mut Vec<LocalEvent>, d: &str| {
        let new: Vec<String> = d
            .match_indices('/')
            .map(|(i, _)| &d[..i])
            .chain([d])
            .filter(|p| !p.is_empty() && !r.join(p).exists())
            .map(String::from)
            .collect();
        let ok = std::fs::create_dir_all(r.join(d)).is_ok();
        events.extend(new.into_iter().map(LocalEvent::Directory));
        ok
    };
    let done = match rng.below(6) {
        0 | 1 => made(events, &d) && std::fs::write(r.join(&f), vec![b'x'; rng.below(9) as usize]).is_ok(),
        2 => std::fs::remove_file(r.join(&f)).is_ok(),
        3 => {
            if made(events, &s) && std::fs::write(r.join(format!("{s}/g")), b"1").is_ok() {
                events.push(LocalEvent::Changed(format!("{s}/g")));
            }
            false
        }
        4 => {
            // A directory moved to another name (what is below it moves with it).
            let to = crate::event::join(&dir(rng), &format!("m{}", rng.below(4)));
            if !to.starts_with(&format!("{d}/")) && !d.is_empty() && std::fs::rename(r.join(&d), r.join(&to)).is_ok() {
                events.push(LocalEvent::Directory(d.clone()));
                events.push(LocalEvent::Directory(to));
            }
            false
        }
        _ => {
            if std::fs::remove_dir_all(r.join(&s)).is_ok() {
                events.push(LocalEvent::Directory(s.clone()));
            }
            false
        }
    };
    if done {
        events.push(LocalEvent::Changed(f));
    }
}

/// Random trees that predate monitoring, changed at random between the parts of rescans
/// (overflow and restart), each change's events applied after the emit it raced: the index
/// equals the file system after every round, on either store, over 50 seeds.
#[test]
fn rescans_raced_by_random_changes_converge() {
    let first = std::env::var("ICICLE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| icicle_core::rng::Rng::new(std::process::id() as u64).next_u64());
    let mut parts = 0;
    for run in 0..50u64 {
        let seed = first.wrapping_add(run);
        let mut rng = icicle_core::rng::Rng::new(seed);
        let t = tempfile::tempdir().unwrap();
        let r = t.path().join("fs");
        for d in ["a/b", "c/d/e"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        for _ in 0..40 {
            mutate(&mut rng, &r, &mut Vec::new());
        }
        let mut s = state(&r, rng.below(2) == 0).with_emit_limit(1 + rng.below(5) as usize);
        if rng.below(2) == 0 {
            s = s.with_entries_on_disk(&t.path().join("e.sqlite"), 1).unwrap();
        }
        drain(&mut s, rescan(RescanReason::Seed));
        for round in 0..6 {
            // Changes whose events were lost (what the rescan is for).
            for _ in 0..1 + rng.below(8) {
                mutate(&mut rng, &r, &mut Vec::new());
            }
            let why = [RescanReason::Overflow, RescanReason::Restart][rng.below(2) as usize];
            let mut events = Vec::new();
            s.apply_events(rescan(why)).unwrap();
            while s.more() {
                for _ in 0..rng.below(3) {
                    mutate(&mut rng, &r, &mut events);
                }
                s.apply_events(Vec::new()).unwrap();
            }
            drain(&mut s, events);
            assert_eq!(differences(&s, &r), (vec![], vec![]), "seed {seed} (ICICLE_TEST_SEED replays) round {round}");
        }
        parts += s.counts.continued;
    }
    assert!(parts > 50, "rescans raced in {parts} later parts only (first seed {first})");
}
