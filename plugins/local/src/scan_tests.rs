//! Rescans a slice at a time: the work list holds what differs, not the tree.

use std::collections::BTreeSet;
use std::sync::Arc;

use icicle_core::policy::{RecordPolicy, VisibleTo};

use super::*;

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
    crate::walk::walk(root, "", &mut 0, false, &mut |rel, _| {
        out.insert(rel);
    });
    out
}

fn held(s: &LocalState) -> BTreeSet<String> {
    s.entries.keys().map(|k| k.to_string()).collect()
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
