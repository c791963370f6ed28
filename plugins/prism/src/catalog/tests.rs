use super::*;

fn st(mode: u32, size: u64) -> StatFields {
    StatFields {
        dev: 2049,
        ino: 77,
        mode,
        nlink: 1,
        uid: 1000,
        gid: 100,
        size,
        blksize: 4096,
        blocks: size.div_ceil(512),
        atime: 1,
        mtime: 2,
        ctime: 3,
        rdev: 0,
    }
}

fn sample() -> Vec<CatalogEntry> {
    const M: u64 = 1 << 20;
    let pfl = [
        LayoutComponent { start: 0, end: 4 * M, stripe_size: M, osts: vec![113] },
        LayoutComponent { start: 4 * M, end: u64::MAX, stripe_size: M, osts: vec![167, 204] },
    ];
    vec![
        CatalogEntry::new("/scratch/a file", st(0o100644, 6 * M + 1), Some(st(0o100644, 6 * M + 1)), Some(&pfl)),
        CatalogEntry::new("/scratch/dir", st(0o040755, 4096), Some(st(0o040755, 4096)), None),
        CatalogEntry::new("/scratch/dangling", st(0o120777, 7), None, None),
    ]
}

#[test]
fn entries_are_written_in_the_swiftload_format_and_read_back() {
    let mut text = String::new();
    for e in sample() {
        e.write_to(&mut text).unwrap();
    }
    let expected = "lstat\n/scratch/a file\nst_dev:2049; st_ino:77; st_mode:100644; st_nlink:1; st_uid:1000; st_gid:100; st_rdev:0; st_size:6291457; st_blksize:4096; st_blocks:12289; st_atime:1; st_mtime:2; st_ctime:3\nstat\n/scratch/a file\nst_dev:2049; st_ino:77; st_mode:100644; st_nlink:1; st_uid:1000; st_gid:100; st_rdev:0; st_size:6291457; st_blksize:4096; st_blocks:12289; st_atime:1; st_mtime:2; st_ctime:3\nlayout\n/scratch/a file 113 0 4194304 1048576 1048576 6291457\n/scratch/a file 167 4194304 6291457 2097152 1048576 6291457\n/scratch/a file 204 5242880 6291457 2097152 1048576 6291457\nend\n";
    assert!(text.starts_with(expected), "{text}");
    assert!(text.contains("lstat\n/scratch/dir\n") && text.contains("layout\nNone\nend\n"));
    assert!(text.contains("stat\nNone\nlayout\nNone\nend\n"));
    let cat = Catalog::parse(Path::new("c.txt"), text.as_bytes());
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    assert_eq!(cat.entries, sample());
    let l = cat.entries[0].object_layout().unwrap();
    assert_eq!(l.components.len(), 2);
    assert_eq!(l.components[1].osts, vec![167, 204]);
    assert_eq!(crate::tasks::tasks_of(0, &l).unwrap(), cat.entries[0].tasks(0));
    assert!(cat.entries[1].object_layout().is_none());
}

#[test]
fn bad_entries_name_file_line_and_reason_and_reading_goes_on() {
    let good = sample()[0].to_text().unwrap();
    let mut text = String::new();
    text.push_str(&good); // lines 1-11
    text.push_str("garbage\n"); // 12
    text.push_str("lstat\n/x\nst_mode:zz; st_size:1\nstat\nNone\nlayout\nNone\nend\n"); // 13-20, bad mode on 15
    text.push_str(&good.replace("113 0 4194304", "113 0 4194304 9")); // 21-31: 7 numbers -> path mismatch on 28
    text.push_str("lstat\n/y\nst_mode:100644; st_size:1\nstat\nNone\nlayout\n/y 1 0 1 0 1 1\nend\n"); // 32-39, interval 0 on 38
    text.push_str(&sample()[1].to_text().unwrap()); // 40-48 good
    text.push_str("lstat\n/z\nst_mode:100644; st_size:1\nstat\n"); // truncated
    let cat = Catalog::parse(Path::new("/cat/c1.txt"), text.as_bytes());
    let got: Vec<String> = cat.rejects.iter().map(|r| r.to_string()).collect();
    assert_eq!(
        got,
        vec![
            "/cat/c1.txt:12: expected `lstat` or `gone`, found `garbage`",
            "/cat/c1.txt:15: stat field `st_mode`: `zz`: invalid digit found in string",
            "/cat/c1.txt:28: layout line names `/scratch/a file 113`, not the entry's path",
            "/cat/c1.txt:38: interval 0 is not a multiple of stripe size 1",
            "/cat/c1.txt:52: truncated entry: end of file where a path or `None` was expected",
        ]
    );
    assert_eq!(cat.entries.len(), 2);
    assert_eq!(cat.entries[1].path, "/scratch/dir");
    // Not UTF-8 and random bytes: rejects, never a panic.
    let cat = Catalog::parse(Path::new("b"), b"lstat\n/\xff\xfe\nend\n");
    assert_eq!(cat.rejects.len(), 1);
    assert!(cat.rejects[0].reason.contains("not UTF-8"), "{:?}", cat.rejects);
    let mut rng = icicle_core::rng::Rng::new(7);
    for _ in 0..500 {
        let mut b = good.clone().into_bytes();
        for _ in 0..rng.range(1..6) {
            let i = rng.below(b.len() as u64) as usize;
            b[i] = rng.next_u64() as u8;
        }
        let _ = Catalog::parse(Path::new("fuzz"), &b);
    }
}

#[test]
fn a_truncated_entry_is_one_reject_and_the_next_entry_parses() {
    let good = sample()[0].to_text().unwrap();
    // Cut short in its stat, in its layout lines, and before its `end`.
    for cut in [
        "lstat\n/z\nst_mode:100644; st_size:1\nstat\n",
        "lstat\n/z\nst_mode:100644; st_size:1\nstat\nNone\nlayout\n/z 1 0 1 1 1 1\n",
        "lstat\n/z\n",
    ] {
        let text = format!("{cut}{good}");
        let cat = Catalog::parse(Path::new("t"), text.as_bytes());
        let at = cut.lines().count() + 1;
        assert_eq!(cat.rejects.len(), 1, "{:?}", cat.rejects);
        assert_eq!(cat.rejects[0].line, at, "{:?}", cat.rejects);
        assert!(cat.rejects[0].reason.starts_with("truncated entry: a new entry (`lstat`)"), "{:?}", cat.rejects);
        assert_eq!(cat.entries, vec![sample()[0].clone()]);
    }
}

#[test]
fn a_crlf_catalog_parses() {
    let mut text = String::new();
    for e in sample() {
        e.write_to(&mut text).unwrap();
    }
    let crlf = text.replace('\n', "\r\n");
    let cat = Catalog::parse(Path::new("w"), crlf.as_bytes());
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    assert_eq!(cat.entries, sample());
    // A bad CRLF entry still resynchronises at the next `end`.
    let bad = format!("lstat\r\n/x\r\nst_mode:zz\r\nstat\r\nNone\r\nlayout\r\nNone\r\nend\r\n{crlf}");
    let cat = Catalog::parse(Path::new("w"), bad.as_bytes());
    assert_eq!(cat.rejects.len(), 1, "{:?}", cat.rejects);
    assert_eq!(cat.entries, sample());
}

#[test]
fn layout_lines_past_the_file_size_or_with_absurd_stripes_are_rejected() {
    let entry = |line: &str| format!("lstat\n/d/f\nst_mode:100644; st_size:10\nstat\nNone\nlayout\n{line}\nend\n");
    let mut text = String::new();
    text.push_str(&entry("/d/f 5 0 18446744073709551615 1 1 10")); // 1-8, line 7
    text.push_str(&entry("/d/f 5 4 2 1 1 10")); // 9-16, line 15
    text.push_str(&entry("/d/f 5 0 10 8589934592 8589934592 10")); // 17-24, line 23
    text.push_str(&entry("/d/f 5 0 10 18446744073709551615 1 10")); // 25-32, line 31
    text.push_str(&entry("/d/f 5 0 10 2 1 10\n/d/f 6 1 10 2 1 10")); // 33-41 good
    let cat = Catalog::parse(Path::new("c"), text.as_bytes());
    let got: Vec<String> = cat.rejects.iter().map(|r| r.to_string()).collect();
    assert_eq!(
        got,
        vec![
            "c:7: end 18446744073709551615 is past the file size 10",
            "c:15: start 4 is past end 2",
            "c:23: stripe size 8589934592 is over 4294967296",
            "c:31: stripe count 18446744073709551615 (interval / stripe size) is over 65536",
        ]
    );
    assert_eq!(cat.entries.len(), 1);
    let l = cat.entries[0].object_layout().unwrap();
    assert_eq!(crate::tasks::tasks_of(0, &l).unwrap().iter().map(crate::tasks::task_bytes).sum::<u64>(), 10);
    // Offsets near 2^64: rebuilding the layout must not overflow.
    let max = u64::MAX;
    let lines = format!("/d/f 1 {} {max} 8 4 {max}\n/d/f 2 {} {max} 8 4 {max}", max - 1, max - 1);
    let cat = Catalog::parse(Path::new("c"), entry(&lines).as_bytes());
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    assert_eq!(cat.entries[0].object_layout().unwrap().components.len(), 2);
}

#[test]
fn latest_keeps_one_entry_per_path_and_records_convert() {
    let a = CatalogEntry::new("/p", st(0o100644, 5), Some(st(0o100644, 5)), Some(&[]));
    let mut newer = st(0o100644, 9);
    newer.ctime = 10;
    let b = CatalogEntry::new("/p", newer, Some(newer), Some(&[]));
    let cat = Catalog { entries: vec![b.clone(), a.clone()], files: 1, ..Catalog::default() };
    assert_eq!(cat.latest(), vec![&b]);
    // Same ctime (whole seconds): the larger size wins whatever the read order, then the
    // later mtime.
    let mut bigger = st(0o100644, 7);
    bigger.mtime = 1;
    let c = CatalogEntry::new("/p", bigger, Some(bigger), Some(&[]));
    for entries in [vec![c.clone(), a.clone()], vec![a.clone(), c.clone()]] {
        assert_eq!(Catalog { entries, files: 1, ..Catalog::default() }.latest(), vec![&c]);
    }
    let mut later = st(0o100644, 5);
    later.mtime = 9;
    let d = CatalogEntry::new("/p", later, Some(later), Some(&[]));
    for entries in [vec![d.clone(), a.clone()], vec![a.clone(), d.clone()]] {
        assert_eq!(Catalog { entries, files: 1, ..Catalog::default() }.latest(), vec![&d]);
    }

    let rec = FileRecord {
        path: "/scratch/r",
        kind: FileKind::File,
        attrs: icicle_core::Attrs {
            mode: 0o100600,
            uid: 5,
            gid: 6,
            size: 3000,
            atime: 1,
            ctime: 2,
            mtime: 3,
            inode: 0,
        },
        storage: None,
    };
    let comps = [LayoutComponent { start: 0, end: u64::MAX, stripe_size: 1024, osts: vec![204, 113] }];
    let e = CatalogEntry::from_record(&rec, Some(&comps));
    let text = e.to_text().unwrap();
    assert!(text.contains("/scratch/r 204 0 3000 2048 1024 3000\n/scratch/r 113 1024 3000 2048 1024 3000\n"), "{text}");
    assert_eq!(Catalog::parse(Path::new("r"), text.as_bytes()).entries, vec![e]);
    let link = FileRecord {
        kind: FileKind::Link,
        attrs: icicle_core::Attrs { mode: 0o120777, ..icicle_core::Attrs::default() },
        ..rec
    };
    let e = CatalogEntry::from_record(&link, Some(&comps));
    assert!(e.stat.is_none() && e.layout.is_none());
    assert!(matches!(CatalogEntry { path: "a\nb".into(), ..e }.to_text(), Err(CatalogError::Unrepresentable(_))));
}

#[test]
fn gone_records_supersede_the_entries_of_their_file_before_them_and_older_ones_elsewhere() {
    let at = |path: &str, ino: u64, ctime: i64, size: u64| {
        let mut f = st(0o100644, size);
        (f.ino, f.ctime) = (ino, ctime);
        CatalogEntry::new(path, f, Some(f), Some(&[]))
    };
    let gone = |e: &CatalogEntry| CatalogGone { path: e.path.clone(), stat: e.lstat };
    // tmp written, renamed over /d/f (whose old file, inode 1, goes too), then renamed back
    // and forth within one second: in one file the order decides.
    let (f_old, tmp, f_new) = (at("/d/f", 1, 5, 100), at("/d/tmp", 2, 5, 7), at("/d/f", 2, 5, 7));
    let (tmp_back, f_back) = (at("/d/tmp", 2, 5, 7), at("/d/f", 2, 5, 7));
    let mut text = String::new();
    for r in [
        f_old.to_text(),
        tmp.to_text(),
        gone(&f_old).to_text(),
        gone(&tmp).to_text(),
        f_new.to_text(),
        gone(&f_new).to_text(),
        tmp_back.to_text(),
        gone(&tmp_back).to_text(),
        f_back.to_text(),
    ] {
        text.push_str(&r.unwrap());
    }
    assert!(text.contains("end\ngone\n/d/f\nst_dev:2049; st_ino:1; st_mode:100644; "), "{text}");
    let cat = Catalog::parse(Path::new("c"), text.as_bytes());
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    assert_eq!((cat.entries.clone(), cat.superseded, cat.gone.len()), (vec![f_back.clone()], 4, 4));
    assert_eq!(cat.latest(), vec![&f_back]);

    // Across files: an entry no later than the record goes, whichever file is read first; a
    // later entry (the path written again afterwards) and another file's other inode stay.
    let tmp_dir = tempfile::tempdir().unwrap();
    let later = at("/d/f", 1, 6, 50);
    let other = at("/d/g", 1, 5, 9);
    std::fs::write(
        tmp_dir.path().join("catalog.h.1.txt"),
        [gone(&f_old).to_text().unwrap(), gone(&tmp).to_text().unwrap(), f_new.to_text().unwrap()].concat(),
    )
    .unwrap();
    std::fs::write(
        tmp_dir.path().join("catalog.h.2.txt"),
        [f_old.to_text().unwrap(), tmp.to_text().unwrap(), other.to_text().unwrap()].concat(),
    )
    .unwrap();
    std::fs::write(tmp_dir.path().join("catalog.h.3.txt"), later.to_text().unwrap()).unwrap();
    let cat = Catalog::read_dir(tmp_dir.path()).unwrap();
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    assert_eq!((cat.entries.clone(), cat.superseded), (vec![f_new.clone(), other.clone(), later.clone()], 2));
    assert_eq!(cat.latest(), vec![&later, &other]);
    let mut one = Catalog::read_file(&tmp_dir.path().join("catalog.h.2.txt")).unwrap();
    one.extend(Catalog::read_file(&tmp_dir.path().join("catalog.h.1.txt")).unwrap());
    assert_eq!((one.entries, one.superseded), (vec![other, f_new], 2));

    // Bad or cut-short records are rejects like bad entries; the next record still parses.
    let good = f_old.to_text().unwrap();
    let text = format!(
        "gone\n/d/f\nst_mode:zz; st_size:1\nend\ngone\n/d/f\n{good}lstat\n/x\n{}",
        gone(&f_old).to_text().unwrap()
    );
    let cat = Catalog::parse(Path::new("b"), text.as_bytes());
    let got: Vec<String> = cat.rejects.iter().map(|r| r.to_string()).collect();
    assert_eq!(
        got,
        vec![
            "b:3: stat field `st_mode`: `zz`: invalid digit found in string",
            "b:7: truncated entry: a new entry (`lstat`) where the lstat fields was expected",
            "b:17: truncated entry: a new entry (`gone`) where the lstat fields was expected",
        ]
    );
    assert_eq!((cat.entries.len(), cat.gone.len(), cat.superseded), (0, 1, 1));
    assert!(matches!(
        CatalogGone { path: "a\nb".into(), stat: f_old.lstat }.to_text(),
        Err(CatalogError::Unrepresentable(_))
    ));
}

#[test]
fn read_dir_merges_per_process_files_in_name_order() {
    let tmp = tempfile::tempdir().unwrap();
    let s = sample();
    std::fs::write(tmp.path().join("catalog.h.2.txt"), s[1].to_text().unwrap()).unwrap();
    std::fs::write(tmp.path().join("catalog.h.1.txt"), s[0].to_text().unwrap()).unwrap();
    std::fs::write(tmp.path().join(".hidden"), "junk").unwrap();
    let cat = Catalog::read_dir(tmp.path()).unwrap();
    assert_eq!(cat.files, 2);
    assert_eq!(cat.entries, vec![s[0].clone(), s[1].clone()]);
    let err = Catalog::read_dir(&tmp.path().join("missing")).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
}
