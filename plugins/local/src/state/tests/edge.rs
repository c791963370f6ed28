//! The reconciliation on a real directory, at its edges: many names of one inode, paths
//! reported before a name became a directory, directories that could not be listed.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use icicle_core::policy::{RecordPolicy, VisibleTo};

use super::*;

fn state(root: &Path) -> LocalState {
    let policy = RecordPolicy { visible_to: vec![VisibleTo::Public], version: "t".into(), ..Default::default() };
    LocalState::new(root.to_path_buf(), String::new(), PrimaryEncoder::new(Arc::new(policy)), true)
}

fn changed(p: &str) -> LocalEvent {
    LocalEvent::Changed(p.to_string())
}

fn seeded(root: &Path) -> LocalState {
    let mut s = state(root);
    s.apply_events(vec![LocalEvent::Rescan(String::new(), RescanReason::Seed)]).unwrap();
    s
}

#[test]
fn one_change_seen_through_many_hard_links_compares_each_name_a_bounded_number_of_times() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    const LINKS: usize = 300;
    for i in 0..LINKS {
        std::fs::hard_link(&f, t.path().join(format!("l{i}"))).unwrap();
    }
    let mut s = seeded(t.path());
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = s.counts.compared;
    // Every name reported (as a rescan or a burst of events would).
    let events: Vec<LocalEvent> =
        std::iter::once(changed("f")).chain((0..LINKS).map(|i| changed(&format!("l{i}")))).collect();
    let e = s.apply_events(events).unwrap();
    assert_eq!(e.chunk.len(), LINKS + 1, "every name published once");
    let compared = s.counts.compared - before;
    assert!(
        compared <= 3 * (LINKS as u64 + 1),
        "{compared} compares for {} names (each queued again per name compared before: quadratic)",
        LINKS + 1
    );
}

#[test]
fn a_file_reported_before_its_path_became_a_directory_is_found_by_the_walk() {
    // The index holds file `a`, directory `d` and `d/b`; then `echo >> d/b; rm a; mv d a`.
    // The write's event names `a/b` (its directory's handle resolves to where `d` is now)
    // and comes first: compared then, `a` is still a file in the state, so `a/b` reads as not
    // there; the walk of the new directory `a` must compare it again.
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("a"), b"file").unwrap();
    std::fs::create_dir(t.path().join("d")).unwrap();
    std::fs::write(t.path().join("d/b"), b"1").unwrap();
    let mut s = seeded(t.path());
    std::fs::write(t.path().join("d/b"), b"12").unwrap();
    std::fs::remove_file(t.path().join("a")).unwrap();
    std::fs::rename(t.path().join("d"), t.path().join("a")).unwrap();
    let e = s
        .apply_events(vec![changed("a/b"), LocalEvent::Directory("a".into()), LocalEvent::Directory("d".into())])
        .unwrap();
    assert!(s.entries.contains_key("a/b"), "{:?}", s.entries.keys());
    let mut deletes = e.deletes.clone();
    deletes.sort();
    assert_eq!(deletes, vec!["/a", "/d/b"]);
    assert_eq!(e.chunk.len(), 1, "a/b published");
}

/// Runs `f` with this thread's file-system uid set to `nobody` (permissions as a real user).
fn as_nobody<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: setfsuid changes only this thread's file-system uid; restored below.
    let before = unsafe { libc::setfsuid(65534) };
    let out = f();
    // SAFETY: as above; this restores the uid it returned.
    unsafe { libc::setfsuid(before as libc::uid_t) };
    out
}

/// `arrives` (a new directory event) brings `unlisted` (relative; with a file `f` in it) that a
/// monitor running as `nobody` cannot list (mode 0311); after `chmod 755` an attribute event
/// names it, and its file is published then.
fn unlisted_directory_is_walked_when_compared_again(arrives: &str, unlisted: &str) {
    // SAFETY: geteuid takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to ask as another user");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut s = seeded(t.path());
    let d = t.path().join(unlisted);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("f"), b"1").unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o311)).unwrap();
    let e = as_nobody(|| s.apply_events(vec![LocalEvent::Directory(arrives.into())]).unwrap());
    assert_eq!(e.chunk.len(), 0);
    assert!(!s.entries.contains_key(format!("{unlisted}/f").as_str()));
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = as_nobody(|| s.apply_events(vec![changed(unlisted)]).unwrap());
    assert!(s.entries.contains_key(format!("{unlisted}/f").as_str()), "{:?}", s.entries.keys());
    assert_eq!(e.chunk.len(), 1);
}

#[test]
fn a_directory_that_could_not_be_listed_is_walked_when_compared_again() {
    // `mkdir d; ...; chmod 311 d`: a monitor that may not read it finds it empty.
    unlisted_directory_is_walked_when_compared_again("d", "d");
}

#[test]
fn a_subdirectory_a_walk_could_not_list_is_walked_when_compared_again() {
    // The walk of `x` lists `y` but cannot list it; `y` itself is compared later in the emit.
    unlisted_directory_is_walked_when_compared_again("x", "x/y");
}

/// A posix state whose only mapped principal is uid 1001 (no admins, no root, nobody for
/// "everyone"): a file may become one nobody mapped may see.
fn private_state(root: &Path) -> LocalState {
    let mut map = icicle_core::policy::PrincipalMap::default();
    map.insert_user(1001, "urn:u1001".into());
    let policy = RecordPolicy {
        visible_to: vec![VisibleTo::Public],
        access: Some(icicle_core::access::AccessPolicy::Posix),
        principals: Arc::new(map),
        version: "t".into(),
        ..Default::default()
    };
    LocalState::new(root.to_path_buf(), String::new(), PrimaryEncoder::new(Arc::new(policy)), true).with_posix(true)
}

/// A file of two names that nobody mapped may see any more after its directory's mode
/// changes, then changes again: each name is withdrawn, and compared a bounded number of
/// times, not forever.
#[test]
fn a_file_nobody_may_see_any_more_is_withdrawn_under_every_name_once() {
    use std::os::unix::fs::{chown, PermissionsExt};
    let t = tempfile::tempdir().unwrap();
    let r = t.path().join("fs");
    std::fs::create_dir_all(r.join("d")).unwrap();
    std::fs::set_permissions(&r, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(r.join("d"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(r.join("d/f"), b"x").unwrap();
    std::fs::hard_link(r.join("d/f"), r.join("d/g")).unwrap();
    chown(r.join("d/f"), Some(1001), Some(2003)).unwrap();
    std::fs::set_permissions(r.join("d/f"), std::fs::Permissions::from_mode(0o060)).unwrap();
    let mut s = private_state(&r);
    let e = s.apply_events(vec![LocalEvent::Rescan(String::new(), RescanReason::Seed)]).unwrap();
    assert_eq!((e.chunk.len(), e.deletes.len()), (2, 0), "uid 1001 may see both names: {:?}", s.counts);
    std::fs::set_permissions(r.join("d"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let e = s.apply_events(vec![changed("d")]).unwrap();
    let mut gone = e.deletes.clone();
    gone.sort();
    assert_eq!((e.chunk.len(), gone), (0, vec!["/d/f".to_string(), "/d/g".to_string()]), "{:?}", s.counts);
    for mode in [0o700, 0o770] {
        std::fs::set_permissions(r.join("d"), std::fs::Permissions::from_mode(mode)).unwrap();
        let before = s.counts.compared;
        let e = s.apply_events(vec![changed("d"), changed("d/f"), changed("d/g")]).unwrap();
        assert!(e.chunk.is_empty(), "nobody may see either name");
        assert!(s.counts.compared - before <= 6, "each name compared a bounded number of times: {:?}", s.counts);
    }
}
