use super::*;
use EventKind::*;

fn ev(kind: EventKind, path: &str, inode: u64, dir: bool, cookie: u64) -> (GpfsEvent, Position) {
    (
        GpfsEvent {
            kind,
            path: path.into(),
            meta: Meta { inode, mode: if dir { 0o040755 } else { 0o100644 }, ctime: 7, ..Default::default() },
            cookie,
            storage: crate::event::StorageId::NONE,
        },
        (0, 0),
    )
}

fn apply(s: &mut GpfsState, evs: &[(GpfsEvent, Position)]) -> Vec<(String, bool)> {
    let mut ops = Ops::default();
    s.begin_batch();
    for e in evs {
        s.apply(e, &mut NoWalk, &mut ops);
    }
    s.end_batch(&mut NoWalk, &mut ops);
    let mut v: Vec<(String, bool)> =
        ops.into_iter().map(|(p, o)| (p.to_string(), matches!(o, Op::Update(_)))).collect();
    v.sort();
    v
}

#[test]
fn a_seeded_file_moves_with_a_directory_the_state_never_saw() {
    let mut s = GpfsState::new(1);
    s.seed("/g/a/sub/f", Meta { inode: 9, mode: 0o100644, ..Default::default() });
    let got = apply(&mut s, &[ev(MovedFrom, "/g/a", 2, true, 1), ev(MovedTo, "/g/b", 2, true, 1)]);
    assert_eq!(got, vec![("/g/a/sub/f".into(), false), ("/g/b/sub/f".into(), true)]);
    // A rename onto a free name of a seeded state is new to the index: removed in the same
    // batch, it produces nothing.
    let got = apply(
        &mut s,
        &[ev(MovedFrom, "/g/b/sub/f", 9, false, 2), ev(MovedTo, "/g/c", 9, false, 2), ev(Removed, "/g/c", 9, false, 0)],
    );
    assert_eq!(got, vec![("/g/b/sub/f".into(), false)]);
}

#[test]
fn an_unseeded_state_deletes_the_names_a_file_had_before_a_directory_rename() {
    let mut s = GpfsState::new(1);
    apply(&mut s, &[ev(MovedFrom, "/g/a", 2, true, 1), ev(MovedTo, "/g/b", 2, true, 1)]);
    // A file the state never saw (from before monitoring), gone before a walk could find it.
    // Its new name was never sent, so only the old one can be in the index.
    assert_eq!(apply(&mut s, &[ev(Removed, "/g/b/f", 9, false, 0)]), vec![("/g/a/f".into(), false)]);
    // One seen only now, through a modification: its old name goes too.
    assert_eq!(
        apply(&mut s, &[ev(Modified, "/g/b/h", 10, false, 0)]),
        vec![("/g/a/h".into(), false), ("/g/b/h".into(), true)]
    );
}
