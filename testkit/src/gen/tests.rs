//! Generated file systems: deterministic for a seed, and shaped like real ones.

use super::*;

#[test]
fn same_seed_same_fs() {
    let a = GenFs::generate(&GenSpec::new(5_000, 7)).records();
    let b = GenFs::generate(&GenSpec::new(5_000, 7)).records();
    assert_eq!(a, b);
    assert_eq!(a.len(), 5_000);
    let c = GenFs::generate(&GenSpec::new(5_000, 8)).records();
    assert_ne!(a, c);
}

#[test]
fn realistic_shape() {
    let fs = GenFs::generate(&GenSpec::new(20_000, 1));
    let recs = fs.records();
    let zero = recs.iter().filter(|r| r.attrs.size == 0 && r.kind == FileKind::File).count();
    let links = recs.iter().filter(|r| r.kind == FileKind::Link).count();
    let long = recs.iter().filter(|r| r.path.len() > 500).count();
    let future = recs.iter().filter(|r| r.attrs.mtime > NOW_REF).count();
    assert!(zero > 200 && zero < 1500, "{zero}");
    assert!(links > 300 && links < 1000, "{links}");
    assert!(long > 0, "no long paths");
    assert!(future > 20, "{future}");
    let uniq: std::collections::HashSet<_> = recs.iter().map(|r| &r.path).collect();
    assert_eq!(uniq.len(), recs.len(), "paths must be unique");
    let inodes: std::collections::HashSet<u64> =
        recs.iter().map(|r| r.attrs.inode).chain(fs.dirs.iter().map(|d| d.attrs.inode)).collect();
    assert_eq!(inodes.len(), recs.len() + fs.dirs.len(), "inodes must be unique (no hard links)");
    assert!(!inodes.contains(&0));
    let width = fs.files.len() as f64 / fs.dirs.len() as f64;
    assert!((10.0..=25.0).contains(&width), "{width}");
}
