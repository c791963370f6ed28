use super::*;
use std::collections::HashMap;

struct MapResolver {
    paths: HashMap<Fid, String>,
    dirs: Vec<String>,
    calls: u64,
}

impl Resolver for MapResolver {
    /// A file with several links maps to its paths joined by newlines.
    fn fid2path(&mut self, fid: &Fid) -> Option<String> {
        self.fid2path_all(fid).into_iter().next()
    }
    fn fid2path_all(&mut self, fid: &Fid) -> Vec<String> {
        self.calls += 1;
        self.paths.get(fid).map(|p| p.lines().map(String::from).collect()).unwrap_or_default()
    }
    fn is_dir(&mut self, path: &str) -> bool {
        self.dirs.iter().any(|d| d == path)
    }
    fn walk(&mut self, path: &str) -> Vec<String> {
        if path == "/new" {
            vec!["f1".into(), "sub/f2".into()]
        } else {
            vec![]
        }
    }
}

fn fid(o: u32) -> Fid {
    Fid { seq: 0x200000401, oid: o, ver: 0 }
}

fn line(s: &str) -> ChangelogRecord {
    ChangelogRecord::parse(s).unwrap()
}

#[test]
fn new_objects_need_no_fid2path_and_old_ones_resolve_once() {
    let mut r = MapResolver {
        paths: HashMap::from([(fid(2), "/old".to_string()), (fid(9), "/old/f".to_string())]),
        dirs: vec!["/old".into()],
        calls: 0,
    };
    let mut t = DirectoryTree::new(0);
    let mut ops = Ops::default();
    t.apply(
        &line("1 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x3:0x0] p=[0x200000007:0x1:0x0] d"),
        &mut r,
        &mut ops,
    );
    t.apply(
        &line("2 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x4:0x0] p=[0x200000401:0x3:0x0] a b"),
        &mut r,
        &mut ops,
    );
    assert_eq!(r.calls, 0);
    t.apply(
        &line("3 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000401:0x2:0x0] x"),
        &mut r,
        &mut ops,
    );
    t.apply(
        &line("4 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x6:0x0] p=[0x200000401:0x2:0x0] y"),
        &mut r,
        &mut ops,
    );
    assert_eq!(r.calls, 1, "the old parent is resolved once and cached");
    t.apply(&line("5 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x9:0x0]"), &mut r, &mut ops);
    t.apply(
        &line("6 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x9:0x0] p=[0x200000401:0x2:0x0] f"),
        &mut r,
        &mut ops,
    );
    let mut got: Vec<(String, PathOp)> = ops.into_iter().collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("/d/a b".into(), PathOp::Update),
            ("/old/f".into(), PathOp::Delete),
            ("/old/x".into(), PathOp::Update),
            ("/old/y".into(), PathOp::Update)
        ]
    );
}

/// The file system ahead of the records: nothing is where `fid2path` said any more.
struct MovedOn {
    paths: HashMap<Fid, String>,
    walked: HashMap<String, Vec<String>>,
}

impl Resolver for MovedOn {
    fn fid2path(&mut self, fid: &Fid) -> Option<String> {
        self.paths.get(fid).cloned()
    }
    fn is_dir(&mut self, _path: &str) -> bool {
        false
    }
    fn kind(&mut self, _path: &str) -> Option<bool> {
        None
    }
    fn walk(&mut self, path: &str) -> Vec<String> {
        self.walked.get(path).cloned().unwrap_or_default()
    }
}

#[test]
fn a_directory_first_seen_as_a_parent_is_a_directory_even_when_it_has_moved_on() {
    // /old3 predates monitoring; by the time a creation in it is applied, the file system
    // has renamed it already, so nothing is at the path `fid2path` gives.
    let mut r = MovedOn { paths: HashMap::from([(fid(4), "/old3".to_string())]), walked: HashMap::new() };
    let mut t = DirectoryTree::new(0);
    let mut ops = Ops::default();
    t.apply(
        &line("1 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x6d:0x0] p=[0x200000401:0x4:0x0] m file"),
        &mut r,
        &mut ops,
    );
    assert_eq!(ops.keys().collect::<Vec<_>>(), vec!["/old3/m file"]);
    ops.clear();
    t.begin_batch();
    // Its rename is a directory rename: what is below moves with it.
    r.paths.insert(fid(4), "/rdir".into());
    r.walked.insert("/rdir".into(), vec!["m file".into(), "pre 17.dat".into()]);
    t.apply(
        &line("2 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] rdir s=[0x200000401:0x4:0x0] sp=[0x200000007:0x1:0x0] old3"),
        &mut r,
        &mut ops,
    );
    let mut got: Vec<(String, PathOp)> = ops.into_iter().collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("/old3/m file".into(), PathOp::Delete),
            ("/old3/pre 17.dat".into(), PathOp::Delete),
            ("/rdir/m file".into(), PathOp::Update),
            ("/rdir/pre 17.dat".into(), PathOp::Update)
        ]
    );
}

/// The file system ahead of the records: a file from before monitoring whose only name
/// now is a hard link a later record makes.
struct LinkedLater;

impl Resolver for LinkedLater {
    fn fid2path(&mut self, f: &Fid) -> Option<String> {
        (*f == fid(0x1e)).then(|| "/w1/hard 63".to_string())
    }
    fn is_dir(&mut self, path: &str) -> bool {
        path == "/w1"
    }
    fn walk(&mut self, _path: &str) -> Vec<String> {
        Vec::new()
    }
    fn future_namings(&mut self, after: u64, name: &str) -> Vec<crate::lookahead::FutureNaming> {
        let link = crate::lookahead::FutureNaming { index: 329, parent: Some(fid(0x39)), link_of: Some(fid(0x1e)) };
        if after < 329 && name == "hard 63" {
            vec![link]
        } else {
            Vec::new()
        }
    }
    fn path2fid(&mut self, path: &str) -> Option<Fid> {
        (path == "/w1").then(|| fid(0x39))
    }
}

#[test]
fn a_name_only_a_later_link_makes_is_not_updated_before_that_link() {
    let mut r = LinkedLater;
    let mut t = DirectoryTree::new(0);
    let mut ops = Ops::default();
    // A change to the file at record 4: its names then are gone, its name now comes at 329.
    t.apply(&line("4 14SATTR 00:00:00.000000000 2026.01.01 0x64 t=[0x200000401:0x1e:0x0]"), &mut r, &mut ops);
    assert!(ops.is_empty(), "{ops:?}");
    t.apply(
        &line("61 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x39:0x0] p=[0x200000007:0x1:0x0] w1"),
        &mut r,
        &mut ops,
    );
    t.apply(
        &line(
            "329 03HLINK 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x1e:0x0] p=[0x200000401:0x39:0x0] hard 63",
        ),
        &mut r,
        &mut ops,
    );
    assert_eq!(ops.into_iter().collect::<Vec<_>>(), vec![("/w1/hard 63".to_string(), PathOp::Update)]);
}

#[test]
fn renaming_a_name_the_tree_never_saw_keeps_the_name_it_knows() {
    // A file from before monitoring, resolved when `fid2path` showed one name (its other
    // name is removed later, so the answer no longer listed it).
    let mut r = MapResolver {
        paths: HashMap::from([(fid(0xb), "/d/link".to_string()), (fid(6), "/x".to_string())]),
        dirs: vec!["/x".into(), "/d".into()],
        calls: 0,
    };
    let mut t = DirectoryTree::new(0);
    let mut ops = Ops::default();
    t.apply(&line("81 14SATTR 00:00:00.000000000 2026.01.01 0x14 t=[0x200000401:0xb:0x0]"), &mut r, &mut ops);
    assert_eq!(ops.keys().collect::<Vec<_>>(), vec!["/d/link"]);
    ops.clear();
    t.begin_batch();
    // Its other name is renamed: both names now.
    r.paths.insert(fid(0xb), "/d/link\n/x/moved".into());
    t.apply(
        &line(
            "159 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000401:0x6:0x0] moved s=[0x200000401:0xb:0x0] sp=[0x200000401:0x6:0x0] orig",
        ),
        &mut r,
        &mut ops,
    );
    ops.clear();
    t.begin_batch();
    t.apply(&line("375 14SATTR 00:00:00.000000000 2026.01.01 0x14 t=[0x200000401:0xb:0x0]"), &mut r, &mut ops);
    let mut got: Vec<&String> = ops.keys().collect();
    got.sort();
    assert_eq!(got, vec!["/d/link", "/x/moved"], "a change reaches every name");
}

#[test]
fn directory_renames_move_every_descendant() {
    let mut r =
        MapResolver { paths: HashMap::from([(fid(3), "/new".to_string())]), dirs: vec!["/new".into()], calls: 0 };
    let mut t = DirectoryTree::new(0);
    let mut ops = Ops::default();
    t.apply(
        &line("1 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x3:0x0] p=[0x200000007:0x1:0x0] old"),
        &mut r,
        &mut ops,
    );
    t.apply(
        &line("2 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x4:0x0] p=[0x200000401:0x3:0x0] sub"),
        &mut r,
        &mut ops,
    );
    t.apply(
        &line("3 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000401:0x4:0x0] f2"),
        &mut r,
        &mut ops,
    );
    // Emitted: the next batch begins.
    ops.clear();
    t.begin_batch();
    t.apply(
        &line("4 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] new s=[0x200000401:0x3:0x0] sp=[0x200000007:0x1:0x0] old"),
        &mut r,
        &mut ops,
    );
    let mut got: Vec<(String, PathOp)> = ops.into_iter().collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("/new/f1".into(), PathOp::Update),
            ("/new/sub/f2".into(), PathOp::Update),
            ("/old/f1".into(), PathOp::Delete),
            ("/old/sub/f2".into(), PathOp::Delete)
        ]
    );
    // Known descendants now have their new paths without any lookup (the one call
    // located the renamed directory to walk it).
    assert_eq!(t.path(fid(5), &mut r).as_deref(), Some("/new/sub/f2"));
    assert_eq!(r.calls, 1);
}

#[test]
fn created_and_removed_between_emits_produces_nothing() {
    let mut r = MapResolver { paths: HashMap::new(), dirs: vec![], calls: 0 };
    let mut t = DirectoryTree::new(0);
    let mut ops = Ops::default();
    t.apply(
        &line("1 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"),
        &mut r,
        &mut ops,
    );
    t.apply(
        &line("2 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] b s=[0x200000401:0x5:0x0] sp=[0x200000007:0x1:0x0] a"),
        &mut r,
        &mut ops,
    );
    t.apply(
        &line("3 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] b"),
        &mut r,
        &mut ops,
    );
    assert!(ops.is_empty(), "{ops:?}");
    // Across an emit, the delete is needed.
    t.apply(
        &line("4 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x6:0x0] p=[0x200000007:0x1:0x0] c"),
        &mut r,
        &mut ops,
    );
    ops.clear();
    t.begin_batch();
    t.apply(
        &line("5 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x6:0x0] p=[0x200000007:0x1:0x0] c"),
        &mut r,
        &mut ops,
    );
    assert_eq!(ops.into_iter().collect::<Vec<_>>(), vec![("/c".to_string(), PathOp::Delete)]);
}

#[test]
fn a_name_deleted_then_reused_and_deleted_again_in_one_batch_is_deleted() {
    let mut r = MapResolver { paths: HashMap::new(), dirs: vec![], calls: 0 };
    let mut t = DirectoryTree::new(0);
    let mut ops = Ops::default();
    t.apply(
        &line("1 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"),
        &mut r,
        &mut ops,
    );
    ops.clear();
    t.begin_batch();
    // The index holds /a; in one batch it is removed, a new /a is made, then removed.
    t.apply(
        &line("2 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"),
        &mut r,
        &mut ops,
    );
    t.apply(
        &line("3 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x6:0x0] p=[0x200000007:0x1:0x0] a"),
        &mut r,
        &mut ops,
    );
    t.apply(
        &line("4 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x6:0x0] p=[0x200000007:0x1:0x0] a"),
        &mut r,
        &mut ops,
    );
    assert_eq!(ops.into_iter().collect::<Vec<_>>(), vec![("/a".to_string(), PathOp::Delete)]);
}

#[test]
fn evicted_entries_are_resolved_again() {
    let mut r = MapResolver { paths: HashMap::from([(fid(3), "/d".to_string())]), dirs: vec!["/d".into()], calls: 0 };
    let mut t = DirectoryTree::new(1);
    let mut ops = Ops::default();
    t.apply(
        &line("1 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x3:0x0] p=[0x200000007:0x1:0x0] d"),
        &mut r,
        &mut ops,
    );
    for i in 4..8 {
        t.apply(&line(&format!("{i} 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x{i:x}:0x0] p=[0x200000401:0x3:0x0] f{i}")), &mut r, &mut ops);
    }
    assert!(t.len() <= 1);
    assert!(t.counts.evictions > 0);
    let paths: Vec<String> = ops.keys().cloned().collect();
    assert_eq!(paths, vec!["/d/f4", "/d/f5", "/d/f6", "/d/f7"]);
    assert!(r.calls > 0);
}

fn sorted(ops: &mut Ops) -> Vec<(String, PathOp)> {
    let mut got: Vec<(String, PathOp)> = ops.drain(..).collect();
    got.sort();
    got
}

#[test]
fn every_hard_link_of_a_file_is_updated_renamed_and_removed_by_name() {
    let mut r = MapResolver { paths: HashMap::new(), dirs: vec![], calls: 0 };
    for cap in [0, 2] {
        let mut t = DirectoryTree::new(cap);
        let mut ops = Ops::default();
        let up = |p: &str| (p.to_string(), PathOp::Update);
        let del = |p: &str| (p.to_string(), PathOp::Delete);
        t.apply(
            &line("1 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"),
            &mut r,
            &mut ops,
        );
        t.apply(
            &line("2 03HLINK 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] b"),
            &mut r,
            &mut ops,
        );
        assert_eq!(sorted(&mut ops), vec![up("/a"), up("/b")]);
        t.begin_batch();
        // A later write reaches every name.
        t.apply(&line("3 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0]"), &mut r, &mut ops);
        assert_eq!(sorted(&mut ops), vec![up("/a"), up("/b")], "cap {cap}");
        t.begin_batch();
        // One name renamed: that name moves, the other stays (and shows the new ctime).
        t.apply(
            &line("4 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] c s=[0x200000401:0x5:0x0] sp=[0x200000007:0x1:0x0] b"),
            &mut r,
            &mut ops,
        );
        assert_eq!(sorted(&mut ops), vec![up("/a"), del("/b"), up("/c")]);
        t.begin_batch();
        t.apply(&line("5 13TRUNC 00:00:00.000000000 2026.01.01 0xe t=[0x200000401:0x5:0x0]"), &mut r, &mut ops);
        assert_eq!(sorted(&mut ops), vec![up("/a"), up("/c")]);
        t.begin_batch();
        // The node's own name removed (not the last link): the other name carries on.
        t.apply(
            &line("6 06UNLNK 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"),
            &mut r,
            &mut ops,
        );
        assert_eq!(sorted(&mut ops), vec![del("/a"), up("/c")]);
        t.begin_batch();
        t.apply(&line("7 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0]"), &mut r, &mut ops);
        assert_eq!(sorted(&mut ops), vec![up("/c")]);
        t.begin_batch();
        t.apply(
            &line("8 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] c"),
            &mut r,
            &mut ops,
        );
        assert_eq!(sorted(&mut ops), vec![del("/c")]);
        assert!(t.links.is_empty());
        assert_eq!(r.calls, 0, "names made while monitoring need no fid2path");
    }
}

#[test]
fn a_hard_linked_file_from_before_monitoring_has_every_name_from_fid2path() {
    let mut r = MapResolver { paths: HashMap::from([(fid(9), "/d/x\n/e/y".to_string())]), dirs: vec![], calls: 0 };
    let mut t = DirectoryTree::new(0);
    let mut ops = Ops::default();
    t.apply(&line("1 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x9:0x0]"), &mut r, &mut ops);
    assert_eq!(sorted(&mut ops), vec![("/d/x".to_string(), PathOp::Update), ("/e/y".to_string(), PathOp::Update)]);
    assert_eq!(r.calls, 1);
    // A rename over one of its names (not its last link): that name is gone, the
    // other one's ctime changed.
    t.begin_batch();
    t.apply(
        &line("2 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0xa:0x0] p=[0x200000007:0x1:0x0] tmp"),
        &mut r,
        &mut ops,
    );
    r.paths.insert(fid(4), "/e".into());
    r.dirs.push("/e".into());
    ops.clear();
    t.begin_batch();
    t.apply(&line("3 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x9:0x0] p=[0x200000401:0x4:0x0] y s=[0x200000401:0xa:0x0] sp=[0x200000007:0x1:0x0] tmp"), &mut r, &mut ops);
    assert_eq!(
        sorted(&mut ops),
        vec![
            ("/d/x".to_string(), PathOp::Update),
            ("/e/y".to_string(), PathOp::Update),
            ("/tmp".to_string(), PathOp::Delete)
        ]
    );
    t.begin_batch();
    t.apply(&line("4 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x9:0x0]"), &mut r, &mut ops);
    assert_eq!(sorted(&mut ops), vec![("/d/x".to_string(), PathOp::Update)], "/e/y is another file now");
}

#[test]
fn hard_links_survive_a_checkpoint() {
    let mut r = MapResolver { paths: HashMap::new(), dirs: vec![], calls: 0 };
    let mut t = DirectoryTree::new(0);
    let mut ops = Ops::default();
    t.apply(
        &line("1 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"),
        &mut r,
        &mut ops,
    );
    t.apply(
        &line("2 03HLINK 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] b"),
        &mut r,
        &mut ops,
    );
    let mut t =
        DirectoryTree::restore(serde_json::from_str(&serde_json::to_string(&t.checkpoint(2)).unwrap()).unwrap(), 0);
    ops.clear();
    t.apply(&line("3 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0]"), &mut r, &mut ops);
    assert_eq!(sorted(&mut ops), vec![("/a".to_string(), PathOp::Update), ("/b".to_string(), PathOp::Update)]);
}

#[test]
fn a_link_resolved_again_after_eviction_is_not_held_twice() {
    // fid2path lists /b first: after the node is evicted, /b becomes the node's name,
    // and the link entry for b must not stay beside it.
    let mut r = MapResolver { paths: HashMap::from([(fid(5), "/b\n/a".to_string())]), dirs: vec![], calls: 0 };
    let mut t = DirectoryTree::new(1);
    let mut ops = Ops::default();
    t.apply(
        &line("1 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"),
        &mut r,
        &mut ops,
    );
    t.apply(
        &line("2 03HLINK 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] b"),
        &mut r,
        &mut ops,
    );
    // Another object evicts the file's node.
    t.apply(
        &line("3 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x6:0x0] p=[0x200000007:0x1:0x0] c"),
        &mut r,
        &mut ops,
    );
    ops.clear();
    t.begin_batch();
    t.apply(&line("4 11CLOSE 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0]"), &mut r, &mut ops);
    assert_eq!(sorted(&mut ops), vec![("/a".to_string(), PathOp::Update), ("/b".to_string(), PathOp::Update)]);
    t.begin_batch();
    r.paths.insert(fid(5), "/a".into());
    t.apply(
        &line("5 06UNLNK 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] b"),
        &mut r,
        &mut ops,
    );
    assert_eq!(sorted(&mut ops), vec![("/a".to_string(), PathOp::Update), ("/b".to_string(), PathOp::Delete)]);
}

/// Everything the records name is gone by the time they are read: `fid2path` finds nothing,
/// and only the records still to come (read ahead) tell where objects were.
struct AllGone {
    ahead: crate::lookahead::Lookahead,
}

impl AllGone {
    fn new(lines: &[&str]) -> AllGone {
        let mut ahead = crate::lookahead::Lookahead::new(0);
        ahead.keep_leavings(true);
        ahead.push_text(&lines.join("\n"), None);
        AllGone { ahead }
    }
}

impl Resolver for AllGone {
    fn fid2path(&mut self, _fid: &Fid) -> Option<String> {
        None
    }
    fn is_dir(&mut self, _path: &str) -> bool {
        false
    }
    fn walk(&mut self, _path: &str) -> Vec<String> {
        Vec::new()
    }
    fn future_place(&mut self, after: u64, fid: &Fid) -> Option<FuturePlace> {
        self.ahead.place_of(fid, after)
    }
    fn dir_by_later_records(&mut self, after: u64, fid: &Fid) -> bool {
        self.ahead.is_dir(fid, after)
    }
    fn renamed_over_later(&mut self, after: u64, fid: &Fid) -> Option<Fid> {
        self.ahead.renamed_over_by(fid, after)
    }
}

fn apply_all(lines: &[&str], lru: usize) -> (Vec<(String, PathOp)>, TreeCounts) {
    let mut r = AllGone::new(lines);
    let mut t = DirectoryTree::new(lru);
    t.begin_batch();
    let mut ops = Ops::default();
    for l in lines {
        t.apply(&line(l), &mut r, &mut ops);
    }
    let mut got: Vec<(String, PathOp)> = ops.into_iter().collect();
    got.sort();
    (got, t.counts)
}

#[test]
fn a_removed_tree_that_predates_monitoring_is_deleted_though_fid2path_finds_none_of_it() {
    // /old/sub/f and /old/g predate monitoring; `rm -r /old` ran before the records were read.
    let (got, counts) = apply_all(
        &[
            "1 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x9:0x0] p=[0x200000401:0x3:0x0] f",
            "2 07RMDIR 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x3:0x0] p=[0x200000401:0x2:0x0] sub",
            "3 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0xa:0x0] p=[0x200000401:0x2:0x0] g",
            "4 07RMDIR 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x2:0x0] p=[0x200000007:0x1:0x0] old",
        ],
        0,
    );
    assert_eq!(got, vec![("/old/g".into(), PathOp::Delete), ("/old/sub/f".into(), PathOp::Delete)]);
    assert_eq!((counts.unresolved, counts.placed_by_later_records), (0, 2));
}

#[test]
fn a_directory_that_predates_monitoring_renamed_then_removed_is_a_directory_rename() {
    // `mv /old /new; rm /new/f; rmdir /new`, all before the records were read: the rename is
    // a directory's (a later RMDIR removes it), so the unlink under the new name deletes the
    // name the index holds.
    for lru in [0, 1] {
        let (got, counts) = apply_all(
            &[
                "1 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] new s=[0x200000401:0x2:0x0] sp=[0x200000007:0x1:0x0] old",
                "2 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x9:0x0] p=[0x200000401:0x2:0x0] f",
                "3 07RMDIR 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x2:0x0] p=[0x200000007:0x1:0x0] new",
            ],
            lru,
        );
        assert_eq!(got, vec![("/old/f".into(), PathOp::Delete)], "lru {lru}");
        assert_eq!(counts.unresolved, 0);
    }
}

/// Objects by FID, directories by path, and the changelog's end.
struct Positioned {
    paths: HashMap<Fid, String>,
    dirs: Vec<String>,
    end: u64,
}

impl Resolver for Positioned {
    fn fid2path(&mut self, fid: &Fid) -> Option<String> {
        self.paths.get(fid).cloned()
    }
    fn is_dir(&mut self, path: &str) -> bool {
        self.dirs.iter().any(|d| d == path)
    }
    fn walk(&mut self, _path: &str) -> Vec<String> {
        Vec::new()
    }
    fn read_position(&mut self) -> u64 {
        self.end
    }
}

const RENAME_D_TO_E: &str =
    "1 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] E s=[0x200000401:0x2:0x0] sp=[0x200000007:0x1:0x0] D";

#[test]
fn a_logged_rename_is_forgotten_once_every_record_its_walk_could_miss_is_applied() {
    let mut r = Positioned { paths: HashMap::from([(fid(2), "/E".to_string())]), dirs: vec!["/E".into()], end: 3 };
    let mut t = DirectoryTree::new(0);
    let mut ops = Ops::default();
    t.begin_batch();
    t.apply(&line(RENAME_D_TO_E), &mut r, &mut ops);
    // Record 3 was written before the walk: it may remove what the walk missed.
    t.apply(
        &line("2 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] a"),
        &mut r,
        &mut ops,
    );
    t.begin_batch();
    assert_eq!(t.checkpoint(2).renames.len(), 1);
    ops.clear();
    t.apply(
        &line("3 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x9:0x0] p=[0x200000401:0x2:0x0] x"),
        &mut r,
        &mut ops,
    );
    assert_eq!(ops.keys().collect::<Vec<_>>(), vec!["/D/x"]);
    t.begin_batch();
    let cp = t.checkpoint(3);
    assert!(cp.renames.is_empty() && cp.renames_until.is_empty() && cp.walked.is_empty());
}

#[test]
fn an_evicted_file_keeps_when_it_got_its_name_so_its_delete_is_not_translated_past_it() {
    // `mv D E` (logged), then x created in E; x is evicted (a tree of one entry) before its
    // unlink: the index holds /E/x, never /D/x.
    let mut r =
        Positioned { paths: HashMap::from([(fid(2), "/E".to_string())]), dirs: vec!["/E".into()], end: u64::MAX };
    let mut t = DirectoryTree::new(1);
    let mut ops = Ops::default();
    t.begin_batch();
    t.apply(&line(RENAME_D_TO_E), &mut r, &mut ops);
    t.apply(
        &line("2 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x9:0x0] p=[0x200000401:0x2:0x0] x"),
        &mut r,
        &mut ops,
    );
    t.apply(
        &line("3 01CREAT 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0xa:0x0] p=[0x200000007:0x1:0x0] y"),
        &mut r,
        &mut ops,
    );
    assert!(t.counts.evictions >= 2);
    t.begin_batch();
    ops.clear();
    t.apply(
        &line("4 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x9:0x0] p=[0x200000401:0x2:0x0] x"),
        &mut r,
        &mut ops,
    );
    assert_eq!(ops.into_iter().collect::<Vec<_>>(), vec![("/E/x".to_string(), PathOp::Delete)]);
}

#[test]
fn a_rename_stays_logged_while_a_later_one_under_it_needs_it() {
    // /A/sub/y predates monitoring. `mv A B` (its walk misses sub, moved out already), `mv
    // B/sub Z`, then `rm Z/y` after the first rename's walk: the unlink translates through
    // both renames, so the first stays logged as long as the second.
    let mut r = Positioned {
        paths: HashMap::from([(fid(2), "/B".to_string()), (fid(3), "/Z".to_string())]),
        dirs: vec!["/B".into(), "/Z".into()],
        end: 11,
    };
    let mut t = DirectoryTree::new(0);
    let mut ops = Ops::default();
    t.begin_batch();
    t.apply(
        &line("10 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] B s=[0x200000401:0x2:0x0] sp=[0x200000007:0x1:0x0] A"),
        &mut r,
        &mut ops,
    );
    t.begin_batch();
    r.end = 12;
    t.apply(
        &line("11 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] Z s=[0x200000401:0x3:0x0] sp=[0x200000401:0x2:0x0] sub"),
        &mut r,
        &mut ops,
    );
    t.begin_batch();
    ops.clear();
    t.apply(
        &line("12 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x9:0x0] p=[0x200000401:0x3:0x0] y"),
        &mut r,
        &mut ops,
    );
    assert_eq!(ops.into_iter().collect::<Vec<_>>(), vec![("/A/sub/y".to_string(), PathOp::Delete)]);
}

#[test]
fn a_gone_directory_renamed_over_later_is_a_directory_like_what_replaced_it() {
    // `mv old new; rm new/f; mv x new; rmdir new` before the records are read: no RMDIR of
    // the first directory, but a directory (removed later) was renamed over it.
    let (got, _) = apply_all(
        &[
            "1 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] new s=[0x200000401:0x2:0x0] sp=[0x200000007:0x1:0x0] old",
            "2 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x9:0x0] p=[0x200000401:0x2:0x0] f",
            "3 08RENME 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x2:0x0] p=[0x200000007:0x1:0x0] new s=[0x200000401:0x5:0x0] sp=[0x200000007:0x1:0x0] x",
            "4 07RMDIR 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] new",
        ],
        0,
    );
    assert!(got.contains(&("/old/f".to_string(), PathOp::Delete)), "{got:?}");
    assert!(!got.iter().any(|(p, _)| p == "/new/f"), "{got:?}");
}

#[test]
fn a_directory_permission_change_folded_into_an_earlier_record_is_still_republished() {
    // `touch -m d; setfacl -x u:bob d` in one batch: the rule table keeps the MTIME and drops
    // the XATTR; the directory's path must still be updated (what is below it judged again).
    let mut r = Positioned { paths: HashMap::new(), dirs: vec!["/d".into()], end: u64::MAX };
    let mut t = DirectoryTree::new(0);
    t.dir_attributes = true;
    let mut ops = Ops::default();
    t.begin_batch();
    t.apply(
        &line("1 02MKDIR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x3:0x0] p=[0x200000007:0x1:0x0] d"),
        &mut r,
        &mut ops,
    );
    t.begin_batch();
    ops.clear();
    let mut batch = vec![
        line("2 17MTIME 00:00:00.000000000 2026.01.01 0x7 t=[0x200000401:0x3:0x0]"),
        line("3 15XATTR 00:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x3:0x0]"),
    ];
    icicle_core::traits::Reducer::reduce(&mut crate::reducer::RuleTable, &mut batch);
    assert_eq!(batch.len(), 1, "the rule table folds the XATTR into the MTIME");
    for rec in &batch {
        t.apply(rec, &mut r, &mut ops);
    }
    assert_eq!(ops.into_iter().collect::<Vec<_>>(), vec![("/d".to_string(), PathOp::Update)]);
}

/// Objects by FID and what a walk of each directory finds, as the file system is now.
struct WalkNow {
    paths: HashMap<Fid, String>,
    walks: HashMap<String, Vec<String>>,
}

impl Resolver for WalkNow {
    fn fid2path(&mut self, fid: &Fid) -> Option<String> {
        self.paths.get(fid).cloned()
    }
    fn is_dir(&mut self, path: &str) -> bool {
        self.walks.contains_key(path)
    }
    fn walk(&mut self, path: &str) -> Vec<String> {
        self.walks.get(path).cloned().unwrap_or_default()
    }
    fn read_position(&mut self) -> u64 {
        u64::MAX
    }
}

#[test]
fn a_name_sent_ahead_of_a_rename_in_a_later_batch_is_deleted_there() {
    // /A/x predates monitoring. `mv A B` is read while the file system already shows `mv B C`
    // (a later batch's record): its walk sends /C/x. In that later batch, `mv B C` and then
    // `rm C/x`: the index holds /C/x, though the batch's own rename produced that name.
    let mut r = WalkNow {
        paths: HashMap::from([(fid(2), "/C".to_string())]),
        walks: HashMap::from([("/C".to_string(), vec!["x".to_string()])]),
    };
    let mut t = DirectoryTree::new(0);
    let mut ops = Ops::default();
    t.begin_batch();
    t.apply(
        &line("1 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] B s=[0x200000401:0x2:0x0] sp=[0x200000007:0x1:0x0] A"),
        &mut r,
        &mut ops,
    );
    assert_eq!(sorted(&mut ops), vec![("/A/x".into(), PathOp::Delete), ("/C/x".into(), PathOp::Update)]);
    t.indexed("/C/x");
    // x is gone by the time the next batch is read.
    r.walks.insert("/C".into(), Vec::new());
    t.begin_batch();
    ops.clear();
    t.apply(
        &line("2 08RENME 00:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] C s=[0x200000401:0x2:0x0] sp=[0x200000007:0x1:0x0] B"),
        &mut r,
        &mut ops,
    );
    t.apply(
        &line("3 06UNLNK 00:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x9:0x0] p=[0x200000401:0x2:0x0] x"),
        &mut r,
        &mut ops,
    );
    let got = sorted(&mut ops);
    assert_eq!(got, vec![("/C/x".into(), PathOp::Delete)], "the name sent, and no name never sent");
}
