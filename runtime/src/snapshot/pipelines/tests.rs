use super::*;

#[test]
fn prefixes_and_depths() {
    assert_eq!(dir_prefix("/a/b/c/f.txt", 0).as_deref(), Some("/"));
    assert_eq!(dir_prefix("/a/b/c/f.txt", 2).as_deref(), Some("/a/b"));
    assert_eq!(dir_prefix("/a/b/c/f.txt", 3).as_deref(), Some("/a/b/c"));
    assert_eq!(dir_prefix("/a/b/c/f.txt", 4), None);
    assert_eq!(parent_depth("/a/b/c/f.txt"), 3);
    assert_eq!(parent_depth("/f.txt"), 0);
}

#[test]
fn shard_is_crc32_of_the_csv_line() {
    let rec = FileRecord {
        path: "/a,b/c",
        kind: FileKind::File,
        attrs: icicle_core::Attrs { mode: 33188, uid: 1, gid: 2, size: 3, atime: 4, ctime: 5, mtime: 6, inode: 0 },
        storage: None,
    };
    let line = "f,33188,1,2,3,4,5,6,\"/a,b/c\"";
    assert_eq!(shard_of(&rec), crc32fast::hash(line.as_bytes()) as usize % 64);
}
