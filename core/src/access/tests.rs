use super::*;

fn p(mode: u32, uid: u32, gid: u32) -> Perm {
    Perm::new(mode, uid, gid)
}

/// An ACL larger than the first read's buffer (200 named users: 1,636 bytes) reads whole.
#[test]
fn an_acl_of_many_entries_reads_whole() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let mut entries: Vec<(u16, u16, u32)> = vec![(0x01, 6, u32::MAX)];
    entries.extend((0..200).map(|u| (0x02, (u % 8) as u16, 1000 + u)));
    entries.extend([(0x04, 4, u32::MAX), (0x10, 7, u32::MAX), (0x20, 4, u32::MAX)]);
    let mut xattr = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in &entries {
        xattr.extend_from_slice(&tag.to_le_bytes());
        xattr.extend_from_slice(&perm.to_le_bytes());
        xattr.extend_from_slice(&id.to_le_bytes());
    }
    let c = std::ffi::CString::new(f.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: NUL-terminated strings and a buffer of the length passed.
    let r = unsafe {
        libc::setxattr(c.as_ptr(), c"system.posix_acl_access".as_ptr(), xattr.as_ptr().cast(), xattr.len(), 0)
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        assert!(std::env::var_os("CI").is_none(), "CI's temporary directory must take ACLs: {e}");
        eprintln!("skipped: no ACLs here: {e}");
        return;
    }
    let acl = Acl::read(&f).expect("the ACL reads");
    assert_eq!(acl.users.len(), 200);
    assert_eq!(acl.users[199], (1199, 7));
    assert_eq!(acl.mask, Some(7));
}

#[test]
fn a_home_directory_hides_what_is_in_it() {
    let root = p(0o755, 0, 0);
    let home = p(0o755, 0, 0);
    let alice = p(0o700, 1000, 100);
    let dirs = [root, home, alice];
    let (open, private) = (p(0o644, 1000, 100), p(0o600, 1000, 100));
    for policy in [AccessPolicy::Posix, AccessPolicy::PosixRead] {
        assert!(can_see(policy, &dirs, &open, &Asker::User { uid: 1000, groups: &[100] }));
        assert!(!can_see(policy, &dirs, &open, &Asker::Group(100)), "{policy:?}: alice's group is kept out by 0700");
        assert!(!can_see(policy, &dirs, &open, &Asker::Everyone));
        assert!(!can_see(policy, &dirs, &private, &Asker::User { uid: 1001, groups: &[100] }));
        assert!(can_see(policy, &dirs, &private, &Asker::User { uid: 0, groups: &[] }));
    }
}

#[test]
fn a_private_file_in_a_group_project_is_not_public() {
    let dirs = [p(0o755, 0, 0), p(0o750, 1000, 200)];
    let file = p(0o600, 1000, 200);
    for policy in [AccessPolicy::Posix, AccessPolicy::PosixRead] {
        assert!(!can_see(policy, &dirs, &file, &Asker::Everyone), "{policy:?}");
    }
    // The group may list it, but not read it.
    assert!(can_see(AccessPolicy::Posix, &dirs, &file, &Asker::Group(200)));
    assert!(!can_see(AccessPolicy::PosixRead, &dirs, &file, &Asker::Group(200)));
}

#[test]
fn owner_bits_apply_to_the_owner_even_when_narrower() {
    let dirs = [p(0o755, 0, 0), p(0o077, 1000, 100)];
    let file = p(0o644, 1000, 100);
    assert!(!can_see(AccessPolicy::Posix, &dirs, &file, &Asker::User { uid: 1000, groups: &[100] }));
    assert!(can_see(AccessPolicy::Posix, &dirs, &file, &Asker::User { uid: 1001, groups: &[100] }));
}

#[test]
fn the_table_judges_from_its_top_down_and_knows_no_gaps() {
    let t = DirectoryTable::default();
    t.insert("/fs/home", p(0o755, 0, 0));
    t.insert("/fs/home/alice", p(0o700, 1000, 100));
    t.insert("/fs/home/alice/a/b", p(0o755, 1000, 100));
    assert_eq!(t.chain("/fs/home/alice").as_deref(), Some(&[p(0o755, 0, 0), p(0o700, 1000, 100)][..]));
    assert_eq!(t.chain("/fs/home").as_deref(), Some(&[p(0o755, 0, 0)][..]));
    assert!(t.chain("/fs").is_none(), "above the top");
    assert!(t.chain("/fs/home/bob").is_none(), "unknown parent");
    assert!(t.chain("/fs/home/alice/a/b").is_none(), "a gap (/fs/home/alice/a)");
    t.insert("/", p(0o755, 0, 0));
    assert!(t.chain("/fs/home").is_none(), "the top is now `/`, and /fs is unknown");
}

#[test]
fn chains_are_built_from_the_top_and_cached() {
    let mut c = ChainCache::new("/gpfs/fs1/");
    let mut calls = 0;
    let mut look = |d: &str| {
        calls += 1;
        (d != "/gpfs/fs1/gone").then_some(p(0o755, d.len() as u32, 0))
    };
    assert_eq!(c.chain("/gpfs/fs1/a/b", &mut look).map(|v| v.len()), Some(3));
    assert_eq!(c.chain("/gpfs/fs1/a", &mut look).map(|v| v.len()), Some(2));
    assert!(c.chain("/gpfs/other", &mut look).is_none());
    assert!(c.chain("/gpfs/fs1/gone/x", &mut look).is_none());
    assert_eq!(calls, 4, "each directory looked up once");
}

#[test]
fn a_principal_is_shown_only_what_each_of_its_members_could_see() {
    let file = p(0o644, 1000, 100);
    // `/proj` 0705 root:students: others may list it, students may not; `public` holds
    // students too, and a user of unknown groups may be one.
    let dirs = [p(0o755, 0, 0), p(0o705, 0, 200)];
    for policy in [AccessPolicy::Posix, AccessPolicy::PosixRead] {
        assert!(can_see(policy, &dirs, &file, &Asker::User { uid: 1001, groups: &[300] }), "{policy:?}");
        assert!(!can_see(policy, &dirs, &file, &Asker::User { uid: 1001, groups: &[200] }));
        assert!(!can_see(policy, &dirs, &file, &Asker::Everyone));
        assert!(!can_see(policy, &dirs, &file, &Asker::Identity(1001)));
        assert!(!can_see(policy, &dirs, &file, &Asker::Group(300)), "a member of 300 may be a student");
        assert!(!can_see(policy, &dirs, &file, &Asker::Group(200)));
    }
    // A named user refused by an ACL, others allowed: neither `public` nor a group (she may
    // be in it) is granted; she is not either; another user of unknown groups is.
    let acl = Acl {
        user_obj: 7,
        users: vec![(1002, 0)],
        group_obj: 5,
        groups: vec![],
        mask: Some(5),
        other: 5,
        unreadable: false,
    };
    let proj = Perm { mode: 0o755, uid: 0, gid: 300, acl: Some(std::sync::Arc::new(acl)) };
    let dirs = [p(0o755, 0, 0), proj];
    assert!(!can_see(AccessPolicy::Posix, &dirs, &file, &Asker::Everyone));
    assert!(!can_see(AccessPolicy::Posix, &dirs, &file, &Asker::Group(300)));
    assert!(!can_see(AccessPolicy::Posix, &dirs, &file, &Asker::Identity(1002)));
    assert!(can_see(AccessPolicy::Posix, &dirs, &file, &Asker::Identity(1001)));
    // An owner refused by its own bits is one of the group's members and of everyone.
    let dirs = [p(0o755, 0, 0), p(0o075, 1000, 300)];
    assert!(!can_see(AccessPolicy::Posix, &dirs, &file, &Asker::Group(300)));
    assert!(!can_see(AccessPolicy::Posix, &dirs, &file, &Asker::Everyone));
    // An ACL that could not be read grants nobody but the owner, whatever the mode says.
    let hidden = Perm {
        mode: 0o755,
        uid: 1000,
        gid: 300,
        acl: Some(std::sync::Arc::new(Acl { unreadable: true, ..Acl::default() })),
    };
    let dirs = [p(0o755, 0, 0), hidden];
    assert!(can_see(AccessPolicy::Posix, &dirs, &file, &Asker::Identity(1000)));
    for who in [Asker::Everyone, Asker::Group(300), Asker::Identity(1001), Asker::User { uid: 1001, groups: &[300] }] {
        assert!(!can_see(AccessPolicy::Posix, &dirs, &file, &who), "{who:?}");
    }
    // Where every class allows, every principal sees.
    let dirs = [p(0o755, 0, 0), p(0o755, 1000, 300)];
    for who in [Asker::Everyone, Asker::Group(300), Asker::Group(400), Asker::Identity(1000), Asker::Identity(1001)] {
        assert!(can_see(AccessPolicy::Posix, &dirs, &file, &who), "{who:?}");
    }
}

#[test]
fn a_missing_directory_row_makes_chains_unknown_not_shorter() {
    // /home/alice (0700) has no row: the top is where the files are, not the shallowest
    // row, so /home/alice/a's chain is unknown rather than judged from `a` alone.
    let t = DirectoryTable::default();
    t.insert("/home", p(0o755, 0, 0));
    t.insert("/home/alice/a", p(0o755, 1000, 100));
    t.note_below("/home/alice/a/f");
    assert!(t.chain("/home/alice/a").is_none());
    let shard = DirectoryTable::default();
    shard.insert("/home/alice/a", p(0o755, 1000, 100));
    shard.note_below("/home/alice/a/f");
    assert_eq!(shard.chain("/home/alice/a").map(|c| c.len()), Some(1), "a shard's own top is judged from itself");
    // A directory row that could not be read counts for the top.
    shard.note_unknown("/home/alice");
    assert!(shard.chain("/home/alice/a").is_none());
    // Directories known only as files' parents are among the paths (a statistic over a
    // subtree that holds them has an unknown chain), once each.
    let t = DirectoryTable::default();
    t.insert("/home", p(0o755, 0, 0));
    t.note_below("/home/alice/a");
    t.note_below("/home/alice/b");
    assert_eq!(t.paths(), vec!["/home".to_string(), "/home/alice".into()]);
    assert!(t.chain("/home/alice").is_none());
    // Rows lost where no path places them: no chain is known, however complete.
    assert!(t.chain("/home").is_some() && !t.is_unplaced());
    t.note_unplaced();
    assert!(t.chain("/home").is_none() && t.is_unplaced());
}
