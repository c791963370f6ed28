use super::*;
use icicle_core::traits::Reducer;

fn ev(kind: EventKind, path: &str, inode: u64, dir: bool, cookie: u64, size: u64) -> GpfsEvent {
    GpfsEvent {
        kind,
        path: path.into(),
        meta: Meta { inode, mode: if dir { 0o040755 } else { 0o100644 }, size, ..Default::default() },
        cookie,
        storage: crate::event::StorageId::NONE,
    }
}

fn run(s: &mut GpfsState, evs: &[GpfsEvent]) -> Vec<(String, Option<u64>)> {
    let mut ops = Ops::default();
    let mut batch: Vec<(GpfsEvent, Position)> =
        evs.iter().enumerate().map(|(i, e)| (e.clone(), (0, i as i64))).collect();
    IgnoredEvents.reduce(&mut batch);
    s.begin_batch();
    for e in &batch {
        s.apply(e, &mut NoWalk, &mut ops);
    }
    s.end_batch(&mut NoWalk, &mut ops);
    let mut v: Vec<(String, Option<u64>)> = ops
        .into_iter()
        .map(|(p, o)| (p.to_string(), if let Op::Update(m) = o { Some(m.size) } else { None }))
        .collect();
    v.sort();
    v
}

use EventKind::*;

#[test]
fn create_then_remove_in_one_batch_is_nothing_and_modifications_coalesce() {
    let mut s = GpfsState::new(1);
    let got = run(
        &mut s,
        &[
            ev(Created, "/g/a", 1, false, 0, 0),
            ev(Modified, "/g/a", 1, false, 0, 5),
            ev(Removed, "/g/a", 1, false, 0, 0),
            ev(Created, "/g/b", 2, false, 0, 0),
            ev(Modified, "/g/b", 2, false, 0, 9),
        ],
    );
    assert_eq!(got, vec![("/g/b".into(), Some(9))]);
    assert_eq!((s.counts.cancelled, s.counts.coalesced), (1, 2));
    // Removed in the next batch: a delete.
    assert_eq!(run(&mut s, &[ev(Removed, "/g/b", 2, false, 0, 0)]), vec![("/g/b".into(), None)]);
    // An indexed name removed, reused and removed again in one batch: still a delete.
    run(&mut s, &[ev(Created, "/g/c", 3, false, 0, 0)]);
    assert_eq!(
        run(
            &mut s,
            &[
                ev(Removed, "/g/c", 3, false, 0, 0),
                ev(Created, "/g/c", 4, false, 0, 0),
                ev(Removed, "/g/c", 4, false, 0, 0)
            ]
        ),
        vec![("/g/c".into(), None)]
    );
}

#[test]
fn a_replay_never_cancels_a_creation_a_stopped_run_may_have_delivered() {
    // A run delivered the create of /g/x and was killed before committing; the replay's
    // batch also holds the removal.
    let mut s = GpfsState::new(1);
    s.maybe_delivered([path_key("/g/x")]);
    let got = run(
        &mut s,
        &[
            ev(Created, "/g/x", 1, false, 0, 0),
            ev(Removed, "/g/x", 1, false, 0, 0),
            ev(Created, "/g/y", 2, false, 0, 0),
            ev(Removed, "/g/y", 2, false, 0, 0),
        ],
    );
    assert_eq!(got, vec![("/g/x".into(), None)], "the delivered one is deleted, the other still cancels");
}

#[test]
fn preexisting_objects_are_deleted_and_renamed() {
    let mut s = GpfsState::new(1);
    let got = run(
        &mut s,
        &[
            ev(Removed, "/g/old", 5, false, 0, 0),
            ev(MovedFrom, "/g/x", 6, false, 42, 3),
            ev(MovedTo, "/g/y", 6, false, 42, 3),
        ],
    );
    assert_eq!(got, vec![("/g/old".into(), None), ("/g/x".into(), None), ("/g/y".into(), Some(3))]);
}

#[test]
fn directory_renames_move_known_descendants_and_pairs_split_across_batches() {
    let mut s = GpfsState::new(1);
    run(
        &mut s,
        &[
            ev(Created, "/g/d", 1, true, 0, 0),
            ev(Created, "/g/d/f", 2, false, 0, 1),
            ev(Created, "/g/d/e", 3, true, 0, 0),
            ev(Created, "/g/d/e/h", 4, false, 0, 2),
        ],
    );
    assert_eq!(run(&mut s, &[ev(MovedFrom, "/g/d", 1, true, 7, 0)]), vec![]);
    assert_eq!(s.pending().len(), 1);
    let got = run(&mut s, &[ev(MovedTo, "/g/n", 1, true, 7, 0)]);
    assert_eq!(
        got,
        vec![
            ("/g/d/e/h".into(), None),
            ("/g/d/f".into(), None),
            ("/g/n/e/h".into(), Some(2)),
            ("/g/n/f".into(), Some(1))
        ]
    );
    assert_eq!(s.counts.moved_descendants, 3);
}

#[test]
fn an_unpaired_half_is_a_move_out_of_the_fileset() {
    let mut s = GpfsState::new(1);
    run(&mut s, &[ev(Created, "/g/f", 1, false, 0, 0)]);
    assert_eq!(run(&mut s, &[ev(MovedFrom, "/g/f", 1, false, 9, 0)]), vec![]);
    assert_eq!(run(&mut s, &[]), vec![("/g/f".into(), None)]);
    assert_eq!(s.counts.moved_out, 1);
}

#[test]
fn a_directory_moved_in_without_a_mount_to_walk_is_counted() {
    let mut s = GpfsState::new(1);
    assert_eq!(run(&mut s, &[ev(MovedTo, "/g/in", 4, true, 11, 0)]), vec![]);
    assert_eq!((s.counts.unpaired_moves, s.counts.moved_in_unwalked), (1, 1));
    // A file moved in is its own record: nothing is missing.
    assert_eq!(run(&mut s, &[ev(MovedTo, "/g/f", 5, false, 12, 3)]), vec![("/g/f".into(), Some(3))]);
    assert_eq!(s.counts.moved_in_unwalked, 1);
}

#[test]
fn hard_links_share_metadata_and_checkpoints_restore() {
    let mut s = GpfsState::new(1);
    run(&mut s, &[ev(Created, "/g/a", 1, false, 0, 1), ev(Created, "/g/b", 1, false, 0, 1)]);
    assert_eq!(
        run(&mut s, &[ev(Modified, "/g/a", 1, false, 0, 8)]),
        vec![("/g/a".into(), Some(8)), ("/g/b".into(), Some(8))]
    );
    let mut r = GpfsState::restore(serde_json::from_slice(&serde_json::to_vec(&s.checkpoint()).unwrap()).unwrap(), 1);
    assert_eq!(r.len(), 2);
    assert_eq!(
        run(&mut r, &[ev(Created, "/g/a", 1, false, 0, 1), ev(Removed, "/g/a", 1, false, 0, 0)]),
        vec![("/g/a".into(), None), ("/g/b".into(), Some(1))],
        "a replayed create of a known object is not new (its other name is refreshed)"
    );
}

#[test]
fn an_event_the_mount_already_showed_still_reaches_the_other_names() {
    let mut s = GpfsState::new(1);
    run(&mut s, &[ev(Created, "/g/a", 1, false, 0, 1), ev(Created, "/g/b", 1, false, 0, 1)]);
    // A walk of the mount (newer than the events) gives /g/a its metadata first.
    s.know("/g/a", Meta { inode: 1, mode: 0o100644, size: 8, ..Default::default() });
    assert_eq!(
        run(&mut s, &[ev(Modified, "/g/a", 1, false, 0, 8)]),
        vec![("/g/b".into(), Some(8))],
        "the event changes nothing at /g/a, but /g/b shares its inode"
    );
    assert_eq!(run(&mut s, &[ev(Modified, "/g/a", 1, false, 0, 8)]), vec![]);
}

/// Deletes among a batch's operations.
fn deletes(ops: &[(String, Option<u64>)]) -> Vec<&str> {
    ops.iter().filter(|(_, o)| o.is_none()).map(|(p, _)| p.as_str()).collect()
}

#[test]
fn a_waiting_half_read_again_after_a_restart_is_one_half() {
    let mut s = GpfsState::new(1);
    run(&mut s, &[ev(Created, "/g/a", 5, false, 0, 1)]);
    // Saved while waiting; commits were held back at it, so the restart reads it again.
    run(&mut s, &[ev(MovedFrom, "/g/a", 5, false, 7, 1)]);
    let mut s = GpfsState::restore(s.checkpoint(), 1);
    let got = run(
        &mut s,
        &[
            ev(MovedFrom, "/g/a", 5, false, 7, 1),
            ev(MovedTo, "/g/a~", 5, false, 7, 1),
            ev(Created, "/g/a", 6, false, 0, 2),
        ],
    );
    assert_eq!(got, vec![("/g/a".into(), Some(2)), ("/g/a~".into(), Some(1))]);
    for _ in 0..3 {
        assert_eq!(run(&mut s, &[]), vec![], "no second half expires onto the new /g/a");
    }
    assert_eq!(s.counts.replayed_halves, 1);
}

#[test]
fn a_name_moved_out_and_made_again_keeps_the_newcomer() {
    let mut s = GpfsState::new(1);
    run(
        &mut s,
        &[
            ev(Created, "/g/job", 1, false, 0, 1),
            ev(Created, "/g/d", 10, true, 0, 0),
            ev(Created, "/g/d/old", 11, false, 0, 1),
        ],
    );
    // Both moved out of the fileset; a new file and a new directory take their names.
    run(&mut s, &[ev(MovedFrom, "/g/job", 1, false, 3, 1), ev(MovedFrom, "/g/d", 10, true, 4, 0)]);
    let got = run(
        &mut s,
        &[
            ev(Created, "/g/job", 2, false, 0, 9),
            ev(Created, "/g/d", 20, true, 0, 0),
            ev(Created, "/g/d/new", 21, false, 0, 4),
        ],
    );
    let mut all = got.clone();
    for _ in 0..3 {
        all.extend(run(&mut s, &[]));
    }
    assert_eq!(deletes(&all), vec!["/g/d/old"], "{all:?}");
    assert!(
        s.objects.contains_key("/g/job") && s.objects.contains_key("/g/d/new") && !s.objects.contains_key("/g/d/old")
    );
    assert_eq!(s.counts.moved_out, 2);
}

#[test]
fn a_directory_rename_replayed_over_a_newer_state_moves_nothing_newer() {
    // The checkpoint already holds the rename d -> e, then a new d with g in it.
    let mut s = GpfsState::new(1);
    run(
        &mut s,
        &[
            ev(Created, "/g/e", 10, true, 0, 0),
            ev(Created, "/g/e/f", 11, false, 0, 1),
            ev(Created, "/g/d", 20, true, 0, 0),
            ev(Created, "/g/d/g", 21, false, 0, 1),
        ],
    );
    let got = run(&mut s, &[ev(MovedFrom, "/g/d", 10, true, 3, 0), ev(MovedTo, "/g/e", 10, true, 3, 0)]);
    assert!(deletes(&got).is_empty() && !got.iter().any(|(p, _)| p == "/g/e/g"), "{got:?}");
    assert!(s.objects.contains_key("/g/d/g") && s.objects.contains_key("/g/e/f") && !s.objects.contains_key("/g/e/g"));
}

/// A mount to walk that shows nothing new.
struct EmptyMount;

impl Walker for EmptyMount {
    fn walk(&mut self, _dir: &str) -> Vec<(String, Meta)> {
        Vec::new()
    }
}

#[test]
fn a_directory_attrib_with_the_same_mode_is_judged_again_where_acls_are_read() {
    // `setfacl -x u:bob /g/d` changes no mode bits; with the mount (where ACLs are read) what
    // is below the directory is published again, without it nothing could change.
    for (mount, republished) in [(false, 0), (true, 1)] {
        let mut s = GpfsState::new(1);
        s.dir_attributes = true;
        run(&mut s, &[ev(Created, "/g/d", 1, true, 0, 0), ev(Created, "/g/d/f", 2, false, 0, 3)]);
        let mut ops = Ops::default();
        s.begin_batch();
        let attrib = (ev(DirAttrib, "/g/d", 1, true, 0, 0), (0, 9));
        if mount {
            s.apply(&attrib, &mut EmptyMount, &mut ops);
        } else {
            s.apply(&attrib, &mut NoWalk, &mut ops);
        }
        assert_eq!(s.counts.reevaluated, republished, "mount {mount}");
        assert_eq!(ops.len() as u64, republished);
    }
}

#[test]
fn an_unseeded_state_knows_every_name_in_a_directory_created_during_the_run() {
    let mut s = GpfsState::new(1);
    run(&mut s, &[ev(Created, "/g/d", 10, true, 0, 0), ev(Created, "/g/a", 1, false, 0, 0)]);
    // In /g/d (created during the run), a rename target removed in its batch was never
    // indexed: nothing to send. In /g (from before the run) it may have held an indexed file.
    let moved_and_removed = |dir: &str, inode: u64, cookie: u64| {
        [
            ev(MovedFrom, &format!("{dir}/a"), inode, false, cookie, 0),
            ev(MovedTo, &format!("{dir}/b"), inode, false, cookie, 0),
            ev(Removed, &format!("{dir}/b"), inode, false, 0, 0),
        ]
    };
    let mut evs = vec![ev(Created, "/g/d/a", 2, false, 0, 0)];
    evs.extend(moved_and_removed("/g/d", 2, 7));
    assert_eq!(run(&mut s, &evs), vec![]);
    assert_eq!(run(&mut s, &moved_and_removed("/g", 1, 8)), vec![("/g/a".into(), None), ("/g/b".into(), None)]);
    // The mark moves with the directory's rename, and is in the checkpoint.
    run(&mut s, &[ev(MovedFrom, "/g/d", 10, true, 9, 0), ev(MovedTo, "/g/e", 10, true, 9, 0)]);
    let mut s = GpfsState::restore(s.checkpoint(), 1);
    let mut evs = vec![ev(Created, "/g/e/a", 3, false, 0, 0)];
    evs.extend(moved_and_removed("/g/e", 3, 10));
    assert_eq!(run(&mut s, &evs), vec![]);
    // Not with a bound on the files kept.
    let mut s = GpfsState::new(1);
    s.set_lru_capacity(100);
    run(&mut s, &[ev(Created, "/g/d", 10, true, 0, 0)]);
    let mut evs = vec![ev(Created, "/g/d/a", 2, false, 0, 0)];
    evs.extend(moved_and_removed("/g/d", 2, 7));
    assert_eq!(run(&mut s, &evs), vec![("/g/d/b".into(), None)]);
}

#[test]
fn a_move_read_before_its_first_half_updates_the_files_other_names() {
    // A file with two names from the snapshot; one name moves. Read from another partition,
    // the IN_MOVED_TO comes first and pairs with nothing: the other name still gets the
    // metadata the move gave the inode (its ctime), and the old name goes once its half waits
    // out its batches.
    let mut s = GpfsState::new(1);
    s.seed("/g/a", Meta { inode: 7, mode: 0o100644, size: 1, ..Default::default() });
    s.seed("/g/d/b", Meta { inode: 7, mode: 0o100644, size: 1, ..Default::default() });
    let got = run(&mut s, &[ev(MovedTo, "/g/c", 7, false, 5, 3), ev(MovedFrom, "/g/d/b", 7, false, 5, 3)]);
    assert!(got.contains(&("/g/a".into(), Some(3))), "{got:?}");
    assert!(got.contains(&("/g/c".into(), Some(3))), "{got:?}");
}
