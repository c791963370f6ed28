//! The reconciliation on a real directory, without kernel events (no privileges needed).

use std::sync::Arc;

use icicle_core::policy::{RecordPolicy, VisibleTo};

use icicle_core::monitor::ChangeState;

use super::*;

fn state(root: &Path, seed_emit: bool) -> LocalState {
    let policy = RecordPolicy { visible_to: vec![VisibleTo::Public], version: "t".into(), ..Default::default() };
    LocalState::new(root.to_path_buf(), String::new(), PrimaryEncoder::new(Arc::new(policy)), seed_emit)
}

fn seed() -> Vec<LocalEvent> {
    vec![LocalEvent::Rescan(String::new(), RescanReason::Seed)]
}

fn changed(p: &str) -> LocalEvent {
    LocalEvent::Changed(p.to_string())
}

#[test]
fn the_seed_publishes_files_not_directories_and_events_are_idempotent() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("a/b")).unwrap();
    std::fs::write(t.path().join("a/b/f"), b"1").unwrap();
    std::fs::write(t.path().join("g"), b"2").unwrap();
    let mut s = state(t.path(), true);
    let e = s.apply_events(seed()).unwrap();
    assert_eq!((e.chunk.len(), e.deletes.len()), (2, 0));
    // The same paths again: nothing changed, nothing sent.
    let e = s.apply_events(vec![changed("a/b/f"), changed("g"), changed("a")]).unwrap();
    assert_eq!((e.chunk.len(), e.deletes.len()), (0, 0));
    assert_eq!(s.counts.unchanged, 3);
}

#[test]
fn a_directory_rename_deletes_the_old_names_and_publishes_the_new() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("a/b/c")).unwrap();
    std::fs::write(t.path().join("a/b/c/f"), b"1").unwrap();
    std::fs::write(t.path().join("a/x"), b"1").unwrap();
    let mut s = state(t.path(), true);
    s.apply_events(seed()).unwrap();
    std::fs::rename(t.path().join("a"), t.path().join("z")).unwrap();
    let e = s.apply_events(vec![changed("a"), changed("z")]).unwrap();
    let mut d = e.deletes.clone();
    d.sort();
    assert_eq!(d, vec!["/a/b/c/f", "/a/x"]);
    assert_eq!(e.chunk.len(), 2);
    assert!(s.entries.contains_key("z/b/c/f") && !s.entries.contains_key("a"));
}

/// Paths carried over a restart (journaled, not in the checkpoint) are compared once each,
/// however many there are.
#[tokio::test]
async fn many_carried_paths_are_compared_once_each() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("fs");
    std::fs::create_dir_all(&root).unwrap();
    let journal = t.path().join("fresh.json");
    let mut s = state(&root, true).with_journal(journal.clone());
    s.apply_events(seed()).unwrap();
    let cp = s.checkpoint(&0).unwrap();
    let lines: String = (0..2000).map(|i| format!("\"gone{i}\"\n")).collect();
    std::fs::write(&journal, lines).unwrap();
    let mut r = state(&root, true).with_journal(journal);
    r.restore(Some(cp), Vec::new()).await.unwrap();
    let e = r.apply_events(vec![LocalEvent::Rescan(String::new(), RescanReason::Restart)]).unwrap();
    assert_eq!((e.deletes.len(), r.counts.compared), (2000, 2000));
}

/// A first run killed after delivering part of its seed (no checkpoint yet): the next start
/// compares what the journal says it published, so what was deleted meanwhile is deleted and
/// what changed is published again, whether its seed publishes or not.
#[tokio::test]
async fn the_journal_of_a_run_killed_before_its_first_checkpoint_is_compared() {
    for seed_emit in [true, false] {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("fs");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("kept"), b"changed since").unwrap();
        std::fs::write(root.join("other"), b"1").unwrap();
        let journal = t.path().join("fresh.json");
        std::fs::write(&journal, "\"gone\"\n\"kept\"\n").unwrap();
        let mut s = state(&root, seed_emit).with_journal(journal);
        s.restore(None, Vec::new()).await.unwrap();
        assert!(!s.restored);
        let e = s.apply_events(seed()).unwrap();
        assert_eq!(e.deletes, ["/gone"], "seed_emit {seed_emit}");
        assert_eq!(e.chunk.len(), if seed_emit { 2 } else { 1 }, "seed_emit {seed_emit}");
    }
}

/// A checkpoint with inline entries written by an older release (flat rows, no ACL digest).
#[tokio::test]
async fn inline_entries_of_an_older_release_restore() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("f"), b"1").unwrap();
    let cp = format!(r#"{{"root":"{}","entries":[["f",1,1,0,0,false,420,0,0]]}}"#, t.path().display());
    let mut s = state(t.path(), true);
    s.restore(Some(cp.into_bytes()), Vec::new()).await.unwrap();
    assert_eq!(s.entries.get("f").unwrap().ino, 1);
    let e = s.apply_events(vec![LocalEvent::Rescan(String::new(), RescanReason::Restart)]).unwrap();
    assert_eq!(e.chunk.len(), 1, "its print differs from the file's: published again");
}

#[test]
fn a_new_link_updates_the_other_names() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("f"), b"1").unwrap();
    let mut s = state(t.path(), true);
    s.apply_events(seed()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::hard_link(t.path().join("f"), t.path().join("g")).unwrap();
    // Only the new name is reported; the old one's ctime changed too.
    let e = s.apply_events(vec![changed("g")]).unwrap();
    assert_eq!(e.chunk.len(), 2);
    std::fs::remove_file(t.path().join("g")).unwrap();
    let e = s.apply_events(vec![changed("g")]).unwrap();
    assert_eq!((e.chunk.len(), e.deletes.len()), (1, 1));
}

#[test]
fn a_quiet_seed_learns_without_publishing() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("f"), b"1").unwrap();
    let mut s = state(t.path(), false);
    let e = s.apply_events(seed()).unwrap();
    assert_eq!(e.chunk.len(), 0);
    std::fs::remove_file(t.path().join("f")).unwrap();
    let e = s.apply_events(vec![changed("f")]).unwrap();
    assert_eq!(e.deletes, vec!["/f"]);
}

#[tokio::test]
async fn a_restart_compares_the_checkpoint_and_the_fresh_paths() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("fs");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("old"), b"1").unwrap();
    std::fs::write(root.join("same"), b"1").unwrap();
    let journal = t.path().join("fresh.json");
    let mut s = state(&root, true).with_journal(journal.clone());
    s.apply_events(seed()).unwrap();
    let cp = s.checkpoint(&0).unwrap();
    // Published after the checkpoint, then the process died before checkpointing again.
    std::fs::write(root.join("new"), b"1").unwrap();
    s.apply_events(vec![changed("new")]).unwrap();
    std::fs::remove_file(root.join("new")).unwrap();
    std::fs::remove_file(root.join("old")).unwrap();
    let mut r = state(&root, true).with_journal(journal);
    r.restore(Some(cp), Vec::new()).await.unwrap();
    assert!(r.restored);
    let e = r.apply_events(vec![LocalEvent::Rescan(String::new(), RescanReason::Restart)]).unwrap();
    let mut d = e.deletes.clone();
    d.sort();
    assert_eq!(d, vec!["/new", "/old"]);
    assert_eq!(e.chunk.len(), 0, "`same` is unchanged");
}

/// A state judging visibility along the directories (owners, `urn:admin`, everyone public).
pub(super) fn posix_state(root: &Path, seed_emit: bool) -> LocalState {
    let policy = RecordPolicy {
        visible_to: vec![VisibleTo::Public],
        access: Some(icicle_core::access::AccessPolicy::Posix),
        everyone: Some("public".into()),
        admins: vec!["urn:admin".into()],
        version: "t".into(),
        ..Default::default()
    };
    LocalState::new(root.to_path_buf(), String::new(), PrimaryEncoder::new(Arc::new(policy)), seed_emit)
        .with_posix(true)
}

#[test]
fn a_directory_mode_change_republishes_what_is_below_under_posix_visibility() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("d/e")).unwrap();
    std::fs::write(t.path().join("d/e/f"), b"1").unwrap();
    std::fs::write(t.path().join("d/g"), b"1").unwrap();
    let mut s = posix_state(t.path(), true);
    let e = s.apply_events(seed()).unwrap();
    assert_eq!(e.chunk.len(), 2);
    std::fs::set_permissions(t.path().join("d"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let e = s.apply_events(vec![changed("d")]).unwrap();
    assert_eq!(e.chunk.len(), 2, "both files below are judged again: {:?}", s.counts);
    assert_eq!(s.counts.reevaluated, 2);
}

/// Two directories on one path change mode in one batch: each file below is published once.
#[test]
fn a_file_below_two_changed_directories_is_published_once() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("d/e")).unwrap();
    std::fs::write(t.path().join("d/e/f"), b"1").unwrap();
    std::fs::write(t.path().join("d/g"), b"1").unwrap();
    let mut s = posix_state(t.path(), false);
    s.apply_events(seed()).unwrap();
    std::fs::set_permissions(t.path().join("d"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::fs::set_permissions(t.path().join("d/e"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let e = s.apply_events(vec![changed("d"), changed("d/e")]).unwrap();
    assert_eq!(e.chunk.len(), 2, "{:?}", s.counts);
}

/// A directory whose mode changes between two parts of one emit, after a file below it was
/// published in the first part: the file is published again, judged with the new mode (its
/// directory's own event, in a later batch, finds the entry already up to date).
#[test]
fn a_file_published_before_its_directory_changed_mid_emit_is_published_again() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::create_dir_all(r.join("d")).unwrap();
    std::fs::write(r.join("d/f"), b"1").unwrap();
    std::fs::write(r.join("d/g"), b"1").unwrap();
    let mut s = posix_state(r, false).with_emit_limit(1);
    s.apply_events(seed()).unwrap();
    std::fs::write(r.join("d/f"), b"22").unwrap();
    let e = s.apply_events(vec![changed("d/f"), changed("d")]).unwrap();
    assert_eq!(e.chunk.len(), 1);
    assert!(s.more());
    std::fs::set_permissions(r.join("d"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut later = 0;
    while s.more() {
        later += s.apply_events(Vec::new()).unwrap().chunk.len();
    }
    assert_eq!((later, s.counts.reevaluated), (2, 2), "d/f and d/g: {:?}", s.counts);
}

/// Give `path` an access ACL naming user 4321 (`None`: remove it).
fn set_acl(path: &Path, user_bits: Option<u16>) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let name = c"system.posix_acl_access";
    let Some(bits) = user_bits else {
        // SAFETY: both strings are NUL-terminated.
        assert_eq!(unsafe { libc::removexattr(c.as_ptr(), name.as_ptr()) }, 0, "{}", std::io::Error::last_os_error());
        return;
    };
    let mut x = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in
        [(1u16, 7u16, u32::MAX), (2, bits, 4321), (4, 5, u32::MAX), (0x10, 7, u32::MAX), (0x20, 5, u32::MAX)]
    {
        x.extend(tag.to_le_bytes());
        x.extend(perm.to_le_bytes());
        x.extend(id.to_le_bytes());
    }
    // SAFETY: both strings are NUL-terminated; x is a valid buffer of its length.
    let r = unsafe { libc::setxattr(c.as_ptr(), name.as_ptr(), x.as_ptr().cast(), x.len(), 0) };
    assert_eq!(r, 0, "setxattr {}: {}", path.display(), std::io::Error::last_os_error());
}

/// An ACL-only change of a directory (its mode and owners unchanged) republishes what is below
/// it; a change of what it holds does not; an ACL that was there at a checkpoint and is
/// removed while the monitor is down is noticed after the restart.
#[tokio::test]
async fn a_directory_acl_change_republishes_what_is_below_under_posix_visibility() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::create_dir_all(r.join("d/e")).unwrap();
    std::fs::write(r.join("d/e/f"), b"1").unwrap();
    std::fs::write(r.join("d/g"), b"1").unwrap();
    std::fs::write(r.join("h"), b"1").unwrap();
    let mut s = posix_state(r, false);
    s.apply_events(seed()).unwrap();
    set_acl(&r.join("d"), Some(5));
    let e = s.apply_events(vec![changed("d")]).unwrap();
    assert_eq!((e.chunk.len(), s.counts.reevaluated), (2, 2), "{:?}", s.counts);
    std::fs::write(r.join("d/new"), b"1").unwrap();
    let e = s.apply_events(vec![changed("d"), changed("d/new")]).unwrap();
    assert_eq!((e.chunk.len(), s.counts.reevaluated), (1, 2), "only the new file: {:?}", s.counts);
    set_acl(&r.join("d"), Some(0));
    let e = s.apply_events(vec![changed("d")]).unwrap();
    assert_eq!((e.chunk.len(), s.counts.reevaluated), (3, 5), "{:?}", s.counts);
    let cp = s.checkpoint(&0).unwrap();
    set_acl(&r.join("d"), None);
    let mut again = posix_state(r, false);
    again.restore(Some(cp), Vec::new()).await.unwrap();
    let e = again.apply_events(vec![LocalEvent::Rescan(String::new(), RescanReason::Restart)]).unwrap();
    assert_eq!((e.chunk.len(), again.counts.reevaluated), (3, 3), "{:?}", again.counts);
}

/// The root is no entry: a change of its own mode republishes everything, at once and after
/// a restart.
#[tokio::test]
async fn a_change_of_the_root_s_mode_republishes_everything_under_posix_visibility() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let r = t.path().join("root");
    std::fs::create_dir_all(r.join("d")).unwrap();
    std::fs::write(r.join("d/f"), b"1").unwrap();
    std::fs::write(r.join("g"), b"1").unwrap();
    let mut s = posix_state(&r, false);
    s.apply_events(seed()).unwrap();
    let e = s.apply_events(vec![changed("")]).unwrap();
    assert_eq!(e.chunk.len(), 0, "unchanged");
    std::fs::set_permissions(&r, std::fs::Permissions::from_mode(0o700)).unwrap();
    let e = s.apply_events(vec![changed("")]).unwrap();
    assert_eq!((e.chunk.len(), s.counts.reevaluated), (2, 2), "{:?}", s.counts);
    let cp = s.checkpoint(&0).unwrap();
    std::fs::set_permissions(&r, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut again = posix_state(&r, false);
    again.restore(Some(cp), Vec::new()).await.unwrap();
    let e = again.apply_events(vec![LocalEvent::Rescan(String::new(), RescanReason::Restart)]).unwrap();
    assert_eq!((e.chunk.len(), again.counts.reevaluated), (2, 2), "{:?}", again.counts);
}

fn directory(p: &str) -> LocalEvent {
    LocalEvent::Directory(p.to_string())
}

/// fanotify merges a change into an earlier queued event on the same file (same directory
/// handle and name): reported before its directory's move, it names the old path. The move's
/// arrival event compares the new place whole, although a walk already put it in the index.
#[test]
fn a_change_reported_under_a_directory_s_old_name_is_found_at_its_new_one() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::create_dir_all(r.join("a/d")).unwrap();
    std::fs::write(r.join("a/d/f"), vec![b'x'; 100]).unwrap();
    let mut s = state(r, true);
    s.apply_events(seed()).unwrap();
    std::fs::create_dir(r.join("new")).unwrap();
    std::fs::rename(r.join("a/d"), r.join("new/d")).unwrap();
    std::fs::File::options().write(true).open(r.join("new/d/f")).unwrap().set_len(87).unwrap();
    // The mkdir's emit walks `new` (the move has happened by then); the file's other name is
    // compared as another name of its inode.
    let e = s.apply_events(vec![directory("new")]).unwrap();
    assert_eq!(s.entries.get("new/d/f").unwrap().size, 87);
    assert_eq!(e.deletes, vec!["/a/d/f".to_string()]);
    // Truncated again, merged into the queued event that names `a/d/f`; then the move.
    std::fs::File::options().write(true).open(r.join("new/d/f")).unwrap().set_len(74).unwrap();
    let e = s.apply_events(vec![changed("a/d/f"), directory("a/d"), directory("new/d")]).unwrap();
    assert_eq!(s.entries.get("new/d/f").unwrap().size, 74);
    assert_eq!((e.chunk.len(), e.deletes.len()), (1, 0));
}

/// A directory that left and came back (the same inode at the same name) had what is below it
/// changed under another name: the index's entries below it are compared again.
#[test]
fn a_directory_back_at_its_name_has_its_entries_compared() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::create_dir_all(r.join("a/n")).unwrap();
    std::fs::write(r.join("a/n/c"), b"1").unwrap();
    std::fs::write(r.join("a/n/k"), b"1").unwrap();
    let mut s = state(r, true);
    s.apply_events(seed()).unwrap();
    std::fs::rename(r.join("a/n"), r.join("a/m")).unwrap();
    std::fs::remove_file(r.join("a/m/c")).unwrap();
    std::fs::rename(r.join("a/m"), r.join("a/n")).unwrap();
    let e = s
        .apply_events(vec![directory("a/n"), directory("a/m"), changed("a/m/c"), directory("a/m"), directory("a/n")])
        .unwrap();
    assert_eq!((e.chunk.len(), e.deletes), (0, vec!["/a/n/c".to_string()]));
    assert!(s.entries.contains_key("a/n/k") && !s.entries.contains_key("a/n/c"));
}

/// A rescan larger than the emit limit comes out in parts, each within the limit, the state
/// asking for more until the rescan is done; deletes count against the limit too.
#[test]
fn a_rescan_larger_than_one_emit_is_delivered_in_parts() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    for d in ["a", "b/c"] {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    for i in 0..25 {
        std::fs::write(r.join(if i % 2 == 0 { "a" } else { "b/c" }).join(format!("f{i}")), b"1").unwrap();
    }
    let mut s = state(r, true).with_emit_limit(10);
    let mut sizes = vec![s.apply_events(seed()).unwrap().chunk.len()];
    while s.more() {
        sizes.push(s.apply_events(Vec::new()).unwrap().chunk.len());
    }
    assert_eq!(sizes, [10, 10, 5]);
    assert_eq!(s.entries.rows().iter().filter(|(_, p)| !p.dir).count(), 25);
    for i in 0..12 {
        std::fs::remove_file(r.join(if i % 2 == 0 { "a" } else { "b/c" }).join(format!("f{i}"))).unwrap();
    }
    let mut deletes =
        vec![s.apply_events(vec![LocalEvent::Rescan(String::new(), RescanReason::Overflow)]).unwrap().deletes.len()];
    while s.more() {
        deletes.push(s.apply_events(Vec::new()).unwrap().deletes.len());
    }
    assert_eq!(deletes, [10, 2]);
    assert!(!s.more());
}

/// A removed tree larger than the emit limit is deleted over several emits, none above the
/// limit; so is one a file replaced, which is published once nothing is left below it.
#[test]
fn a_removed_tree_is_deleted_in_parts() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    let tree = |top: &str| {
        for d in 0..3 {
            std::fs::create_dir_all(r.join(format!("{top}/d{d}/e"))).unwrap();
            for i in 0..10 {
                std::fs::write(r.join(format!("{top}/d{d}/e/f{i}")), b"1").unwrap();
            }
        }
    };
    tree("gone");
    tree("replaced");
    std::fs::write(r.join("kept"), b"1").unwrap();
    let mut s = state(r, true).with_emit_limit(7);
    s.apply_events(seed()).unwrap();
    while s.more() {
        s.apply_events(Vec::new()).unwrap();
    }
    std::fs::remove_dir_all(r.join("gone")).unwrap();
    std::fs::remove_dir_all(r.join("replaced")).unwrap();
    std::fs::write(r.join("replaced"), b"now a file").unwrap();
    let mut parts = vec![s.apply_events(vec![changed("gone"), changed("replaced")]).unwrap()];
    while s.more() {
        parts.push(s.apply_events(Vec::new()).unwrap());
    }
    let sizes: Vec<(usize, usize)> = parts.iter().map(|e| (e.chunk.len(), e.deletes.len())).collect();
    assert!(sizes.iter().all(|(c, d)| c + d <= 7), "{sizes:?}");
    let deletes: usize = sizes.iter().map(|(_, d)| d).sum();
    assert_eq!(deletes, 60, "{sizes:?}");
    assert_eq!(parts.last().map(|e| e.chunk.len()), Some(1), "the file is published last: {sizes:?}");
    let keys = s.entries.keys();
    let held: Vec<&str> = keys.iter().map(|k| &**k).collect();
    assert_eq!(held, ["kept", "replaced"]);
}

/// A file an event reports is compared (and indexed) before anything compares its directory;
/// when that directory is then gone, what the index holds below its name goes, although the
/// index never held the name itself. A name that turns into a file drops what was below it.
#[test]
fn a_gone_name_drops_what_is_below_it_even_if_never_compared() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    let mut s = state(r, true);
    s.apply_events(seed()).unwrap();
    std::fs::create_dir_all(r.join("x/y")).unwrap();
    std::fs::write(r.join("x/y/f"), b"1").unwrap();
    s.apply_events(vec![changed("x/y/f")]).unwrap();
    assert!(s.entries.contains_key("x/y/f") && !s.entries.contains_key("x"));
    std::fs::rename(r.join("x"), r.join("z")).unwrap();
    let e = s.apply_events(vec![directory("x")]).unwrap();
    assert_eq!(e.deletes, vec!["/x/y/f".to_string()]);
    std::fs::create_dir_all(r.join("w/v")).unwrap();
    std::fs::write(r.join("w/v/g"), b"1").unwrap();
    s.apply_events(vec![changed("w/v/g")]).unwrap();
    std::fs::remove_dir_all(r.join("w")).unwrap();
    std::fs::write(r.join("w"), b"now a file").unwrap();
    let e = s.apply_events(vec![changed("w")]).unwrap();
    assert_eq!((e.chunk.len(), e.deletes), (1, vec!["/w/v/g".to_string()]));
}

/// A directory replaced by a symlink to it (`mv a a.old; ln -s a.old a`): `lstat` of `a/f`
/// would follow the link; nothing below `a` stays in the state to be published again later.
#[test]
fn nothing_is_reached_through_a_symlink_that_replaced_a_directory() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::create_dir_all(r.join("a/b")).unwrap();
    std::fs::write(r.join("a/f"), b"1").unwrap();
    std::fs::write(r.join("a/b/g"), b"1").unwrap();
    let mut s = state(r, true);
    s.apply_events(seed()).unwrap();
    std::fs::rename(r.join("a"), r.join("a.old")).unwrap();
    std::os::unix::fs::symlink("a.old", r.join("a")).unwrap();
    let e = s.apply_events(vec![LocalEvent::Rescan(String::new(), RescanReason::Restart)]).unwrap();
    let mut d = e.deletes.clone();
    d.sort();
    assert_eq!(d, vec!["/a/b/g", "/a/f"]);
    let keys = s.entries.keys();
    let mut held: Vec<&str> = keys.iter().map(|k| &**k).collect();
    held.sort();
    assert_eq!(held, vec!["a", "a.old", "a.old/b", "a.old/b/g", "a.old/f"]);
    // A change to the file reaches its other name only if it has one: none here.
    std::fs::write(r.join("a.old/f"), b"22").unwrap();
    let e = s.apply_events(vec![changed("a.old/f"), changed("a/f"), changed("a/b/g")]).unwrap();
    assert_eq!((e.chunk.len(), e.deletes.len()), (1, 0));
    assert!(!s.entries.contains_key("a/f"));
}

/// A path that cannot be read (its directory closed to this process) is not gone: the index
/// keeps what it holds, and the compare is counted as unreadable. Once the directory changes
/// (opened again), the path is compared again: removed meanwhile, it is deleted then.
#[test]
fn a_path_that_cannot_be_read_keeps_what_the_index_holds() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::set_permissions(r, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(r.join("a")).unwrap();
    std::fs::write(r.join("a/f"), b"1").unwrap();
    std::fs::write(r.join("a/g"), b"1").unwrap();
    let mut s = state(r, true);
    s.apply_events(seed()).unwrap();
    std::fs::set_permissions(r.join("a"), std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::remove_file(r.join("a/g")).unwrap();
    // As root, file-system checks as `nobody` on this thread (root passes any mode).
    // SAFETY: geteuid and setfsuid have no memory preconditions; setfsuid is per thread.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        // SAFETY: setfsuid takes a plain uid and changes only this thread's file-system uid
        // (restored below).
        unsafe { libc::setfsuid(65534) };
    }
    let e =
        s.apply_events(vec![changed("a/f"), changed("a/g"), LocalEvent::Rescan(String::new(), RescanReason::Overflow)]);
    if root {
        // SAFETY: as above.
        unsafe { libc::setfsuid(0) };
    }
    let e = e.unwrap();
    assert_eq!((e.chunk.len(), e.deletes.len()), (0, 0));
    assert!(s.entries.contains_key("a/f") && s.entries.contains_key("a/g"));
    // Each twice (their events, then the rescan's compare of what is held), and `a` once:
    // the rescan could not list it.
    assert_eq!(s.counts.unreadable, 5);
    std::fs::set_permissions(r.join("a"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = s.apply_events(vec![changed("a")]).unwrap();
    assert_eq!((e.chunk.len(), e.deletes), (0, vec!["/a/g".to_string()]));
}

/// A first run killed before its first checkpoint journaled `x/y` (published while `x` was a
/// directory) and `x` (published after it became a file); `x` is a directory holding `y` again.
/// Placeholders say nothing of what is there: `x/y` is published, not taken as gone.
#[tokio::test]
async fn a_placeholder_above_a_path_does_not_make_it_gone() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("fs");
    std::fs::create_dir_all(root.join("x")).unwrap();
    std::fs::write(root.join("x/y"), b"1").unwrap();
    let journal = t.path().join("fresh.json");
    std::fs::write(&journal, "\"x/y\"\n\"x\"\n").unwrap();
    let mut s = state(&root, false).with_journal(journal);
    s.restore(None, Vec::new()).await.unwrap();
    let e = s.apply_events(seed()).unwrap();
    assert_eq!((e.chunk.len(), e.deletes), (1, vec!["/x".to_string()]));
    assert!(s.entries.get("x/y").is_some_and(|p| p.ino != 0) && s.entries.get("x").is_some_and(|p| p.dir));
}

/// Files published below the root, then the root's own mode changed before its compare in the
/// same part: they are queued again.
#[test]
fn a_file_judged_before_the_root_changed_in_the_same_part_is_queued_again() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::set_permissions(r, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(r.join("f"), b"1").unwrap();
    let mut s = posix_state(r, false);
    s.apply_events(seed()).unwrap();
    std::fs::write(r.join("f"), b"22").unwrap();
    let (mut w, mut chunk, mut deletes) = (Work::new(), EntryBatch::default(), Vec::new());
    s.compare(&Name::from("f"), &mut chunk, &mut deletes, &mut w);
    std::fs::set_permissions(r, std::fs::Permissions::from_mode(0o700)).unwrap();
    s.compare(&Name::from(""), &mut chunk, &mut deletes, &mut w);
    let queued: Vec<&str> = w.queue.iter().map(|n| &**n).collect();
    assert_eq!(queued, ["f"]);
}

/// A directory read with two different accesses in one part judged nothing as it is now.
#[test]
fn a_directory_read_twice_differently_in_a_part_judged_nothing() {
    use icicle_core::access::Perm;
    let mut w = Work::new();
    let map = &mut w.judged_with;
    crate::state::work::judging_with(map, "/d", &Perm::new(0o40755, 1, 1));
    crate::state::work::judging_with(map, "/e", &Perm::new(0o40700, 1, 1));
    crate::state::work::judging_with(map, "/d", &Perm::new(0o40700, 1, 1));
    assert!(!w.judged_as("/d", (0o40700, 1, 1, 0)));
    assert!(w.judged_as("/e", (0o40700, 1, 1, 0)));
    assert!(!w.judged_as("/e", (0o40755, 1, 1, 0)));
    assert!(w.judged_as("/never", (0, 0, 0, 0)));
}

/// A sink applies a part's updates before its deletes: a delete that a later update of the
/// same subject undid in the part is dropped; one that came after the update stays.
#[test]
fn a_delete_undone_later_in_the_same_part_is_dropped() {
    let mut w = Work::new();
    let mut deletes = Vec::new();
    let subject = |p: &str| format!("/{p}");
    let delete = |w: &mut Work, p: &str, deletes: &mut Vec<String>| w.delete(&Name::from(p), subject(p), deletes);
    delete(&mut w, "a", &mut deletes);
    w.published(&Name::from("a"));
    delete(&mut w, "b", &mut deletes);
    w.published(&Name::from("c"));
    w.published(&Name::from("d"));
    delete(&mut w, "d", &mut deletes);
    delete(&mut w, "e", &mut deletes);
    w.published(&Name::from("e"));
    delete(&mut w, "e", &mut deletes);
    w.settle(&mut deletes, subject);
    assert_eq!(deletes, vec!["/b", "/d", "/e", "/e"]);
    delete(&mut w, "a", &mut deletes);
    w.settle(&mut deletes, subject);
    assert_eq!(deletes, vec!["/b", "/d", "/e", "/e", "/a"], "a new part starts afresh");
}

/// An emit delivered in parts that starts new generations of the entries files, stopped before
/// its checkpoint: the restart restores from the last checkpoint, whose files are still there.
#[tokio::test]
async fn a_stop_between_parts_that_started_generations_restarts_from_the_checkpoint() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("fs");
    std::fs::create_dir_all(root.join("many")).unwrap();
    std::fs::write(root.join("old"), b"1").unwrap();
    let files = |root: &Path| state(root, true).with_entries_files(&t.path().join("st"), "m").with_emit_limit(2_500);
    std::fs::create_dir_all(t.path().join("st")).unwrap();
    let mut s = files(&root);
    s.apply_events(seed()).unwrap();
    let cp = s.checkpoint(&0).unwrap();
    for i in 0..13_000 {
        std::fs::write(root.join(format!("many/f{i}")), b"").unwrap();
    }
    s.apply_events(vec![directory("many")]).unwrap();
    for _ in 0..4 {
        assert!(s.more());
        s.apply_events(Vec::new()).unwrap();
    }
    assert!(s.more(), "stopped between two parts");
    let mut r = files(&root);
    r.restore(Some(cp), Vec::new()).await.unwrap();
    assert_eq!(r.len(), 2, "the root's entries as checkpointed: many/ and old");
}

/// A file published in a part, then its directory's mode changed before the directory's own
/// compare in the same part: the file is queued again (it was judged with the old mode); a
/// file published after the change is not.
#[test]
fn a_file_judged_before_its_directory_changed_in_the_same_part_is_queued_again() {
    use std::os::unix::fs::PermissionsExt;
    for change_between in [true, false] {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("d")).unwrap();
        std::fs::write(r.join("d/f"), b"1").unwrap();
        let mut s = posix_state(r, false);
        s.apply_events(seed()).unwrap();
        std::fs::write(r.join("d/f"), b"22").unwrap();
        if !change_between {
            std::fs::set_permissions(r.join("d"), std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let (mut w, mut chunk, mut deletes) = (Work::new(), EntryBatch::default(), Vec::new());
        s.compare(&Name::from("d/f"), &mut chunk, &mut deletes, &mut w);
        assert_eq!(chunk.len(), 1);
        if change_between {
            std::fs::set_permissions(r.join("d"), std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        s.compare(&Name::from("d"), &mut chunk, &mut deletes, &mut w);
        let queued: Vec<&str> = w.queue.iter().map(|n| &**n).collect();
        let want: &[&str] = if change_between { &["d/f"] } else { &[] };
        assert_eq!(queued, want, "changed between: {change_between}");
    }
}

/// Paths the root's own mode kept from being read, held or not, are compared again when the
/// root's mode changes (posix visibility watches the root's access).
#[test]
fn paths_the_root_kept_unreadable_are_compared_again_when_it_changes() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root (setfsuid)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let r = t.path().join("fs");
    std::fs::create_dir_all(&r).unwrap();
    std::fs::write(r.join("f"), b"1").unwrap();
    std::fs::write(r.join("g"), b"1").unwrap();
    let mut s = posix_state(&r, false);
    s.apply_events(seed()).unwrap();
    std::fs::set_permissions(&r, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::remove_file(r.join("g")).unwrap();
    std::fs::write(r.join("h"), b"new").unwrap();
    let as_nobody = |s: &mut LocalState, events: Vec<LocalEvent>| {
        // SAFETY: setfsuid has no memory preconditions and is per thread.
        unsafe { libc::setfsuid(65534) };
        let e = s.apply_events(events);
        // SAFETY: as above.
        unsafe { libc::setfsuid(0) };
        e.unwrap()
    };
    let e = as_nobody(&mut s, vec![changed(""), changed("f"), changed("g"), changed("h")]);
    assert_eq!((e.chunk.len(), e.deletes.len()), (0, 0));
    assert!(s.counts.unreadable >= 2, "{:?}", s.counts);
    std::fs::set_permissions(&r, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = as_nobody(&mut s, vec![changed("")]);
    assert_eq!(e.deletes, vec!["/g".to_string()]);
    // `h`, created while the root was closed, was never held: only its compare again finds it.
    assert_eq!(e.chunk.len(), 2, "f republished, h new");
    assert!(!s.entries.contains_key("g") && s.entries.contains_key("f") && s.entries.contains_key("h"));
}

mod edge;
