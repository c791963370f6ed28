use super::*;

#[test]
fn lines_split_like_the_standard_library() {
    let mut rng = icicle_core::rng::Rng::new(0x9e37_79b9_7f4a_7c15);
    for _ in 0..5_000 {
        let x = rng.next_u64();
        let len = (x % 300) as usize;
        let text: String = (0..len)
            .map(|k| ["a", "\n", "\r", "é", " ", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"][((x >> (k % 59)) as usize + k) % 6])
            .collect();
        let want: Vec<&str> = text
            .split_inclusive('\n')
            .map(|l| l.strip_suffix('\n').unwrap_or(l))
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .collect();
        assert_eq!(lines(&text).collect::<Vec<_>>(), want, "{text:?}");
    }
}

#[test]
fn the_space_index_finds_every_space() {
    let mut rng = icicle_core::rng::Rng::new(0x2545_f491_4f6c_dd1d);
    for _ in 0..5_000 {
        let x = rng.next_u64();
        let len = (x % 300) as usize;
        let b: Vec<u8> =
            (0..len).map(|k| [b'a', b' ', b' ', 0xc3, b'=', 0x00][((x >> (k % 59)) as usize + k) % 6]).collect();
        let mut spaces = Spaces::new(&b);
        // Positions asked for in increasing order, and now and then going back.
        for pos in (0..=len).step_by(1 + (x % 7) as usize).chain([0, len / 2]) {
            let want = b[pos.min(len)..].iter().position(|&c| c == b' ').map_or(len, |k| pos + k);
            assert_eq!(spaces.next(pos), want, "{b:?} from {pos}");
        }
    }
}

#[test]
fn generated_records_round_trip() {
    let mut rng = icicle_core::rng::Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut next = || rng.next_u64();
    let words = [
        "a",
        "file",
        "f 1",
        "dir  two",
        "ünïcode näme",
        "x=1",
        "s=[",
        "tail ",
        " lead",
        "long_name_that_crosses_the_sixty_four_byte_block_boundary_of_a_line",
    ];
    let fid =
        |r: u64| Fid { seq: 0x2_0000_0000 + (r & 0xfff), oid: (r >> 12) as u32 & 0xfffff, ver: (r >> 40) as u32 & 3 };
    for _ in 0..20_000 {
        let r = next();
        let kind = RecordType::from_parts(
            [1u32, 2, 6, 8, 11, 14, 17][(r % 7) as usize],
            ["CREAT", "MKDIR", "UNLNK", "RENME", "CLOSE", "SATTR", "MTIME"][(r % 7) as usize],
        );
        let renme = kind == RecordType::Renme;
        let has_name = renme || matches!(kind, RecordType::Creat | RecordType::Mkdir | RecordType::Unlnk);
        let rec = ChangelogRecord {
            index: next() >> (next() % 64),
            kind,
            time: RecordTime::from("02:10:01.138251424 2026.03.16"),
            flags: (r >> 8) as u32 & 0x3ff,
            target: fid(next()),
            jobid: (r & 2 != 0).then(|| format!("job.{}", r % 1000).into()),
            extra_flags: (r & 4 != 0).then_some(0xf),
            uid_gid: (r & 12 == 12).then_some(((r >> 20) as u32 & 0xffff, (r >> 36) as u32 & 0xffff)),
            nid: (r & 12 == 12).then(|| "172.31.39.56@tcp".into()),
            open_mode: None,
            xattr: None,
            parent: has_name.then(|| fid(next())),
            name: has_name.then(|| words[(next() % words.len() as u64) as usize].into()),
            source: renme.then(|| fid(next())),
            source_parent: renme.then(|| fid(next())),
            source_name: renme.then(|| words[(next() % words.len() as u64) as usize].into()),
        };
        // A name may not end in a space (`lfs changelog` prints none there) or hold ` s=[`.
        if rec.name.as_deref().is_some_and(|n| n.ends_with(' ') || n.contains(" s=[")) {
            continue;
        }
        let line = rec.to_line();
        assert_eq!(ChangelogRecord::parse(&line).as_ref(), Ok(&rec), "{line}");
    }
}

#[test]
fn the_word_search_finds_the_first_byte() {
    let mut rng = icicle_core::rng::Rng::new(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20_000 {
        let x = rng.next_u64();
        let len = (x % 40) as usize;
        let b: Vec<u8> = (0..len)
            .map(|k| [b'a', b' ', 0x20 ^ 0x80, 0x1f, 0x21, 0xff, 0x00, b'0'][((x >> (k % 60)) % 8) as usize])
            .collect();
        for c in [b' ', b']', 0x00, 0xff] {
            assert_eq!(find_byte(&b, c), b.iter().position(|&y| y == c), "{b:?} {c}");
        }
    }
}

const REAL: &[&str] = &[
        "1 01CREAT 04:24:09.779203918 2024.08.20 0x0 t=[0x2000013a1:0x1:0x0] j=cp.0 ef=0xf u=0:0 nid=0@lo p=[0x200000007:0x1:0x0] testfile",
        "3 01CREAT 04:27:54.551053189 2024.08.20 0x0 t=[0x2000013a1:0x4:0x0] j=cp.0 ef=0xf u=0:0 nid=0@lo p=[0x2000013a1:0x3:0x0] file with spaces",
        "1 14SATTR 02:10:01.138251424 2026.03.16 0x44 t=[0x200000007:0x1:0x0] ef=0xf u=0:0 nid=172.31.39.56@tcp",
        "5 10OPEN  02:10:01.749071801 2026.03.16 0x24a t=[0x200000401:0x1:0x0] ef=0xf u=0:0 nid=172.31.39.56@tcp m=-w- p=[0x200000007:0x1:0x0]",
        "6 11CLOSE 02:10:01.750006074 2026.03.16 0x242 t=[0x200000401:0x1:0x0] ef=0xf u=0:0 nid=172.31.39.56@tcp",
        "16 08RENME 02:52:19.805772855 2026.03.16 0x0 t=[0:0x0:0x0] ef=0xf u=1000:1000 nid=172.31.39.56@tcp p=[0x200000401:0x2:0x0] file1_renamed.txt s=[0x200000401:0x3:0x0] sp=[0x200000401:0x2:0x0] file1.txt",
        "17 06UNLNK 02:52:19.807645282 2026.03.16 0x1 t=[0x200000401:0x4:0x0] ef=0xf u=1000:1000 nid=172.31.39.56@tcp p=[0x200000401:0x2:0x0] file2.txt",
        "327302 17MTIME 12:47:48.653207857 2016.03.24 0x7 t=[0x200000402:0xd9fe:0x0] j=touch.0",
    ];

#[test]
fn real_lines_parse_and_round_trip() {
    for line in REAL {
        let r = ChangelogRecord::parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(&r.to_line(), line);
        assert_eq!(line_type_bit(line.as_bytes()), r.kind.bit(), "{line}");
    }
    for (line, bit) in
        [("1 10OPENX 0", 0), ("1 10OPEN", 1 << 10), ("1 10OPE 0", 0), ("1 99OPEN 0", 0), ("1 1OPEN 0", 0), ("12", 0)]
    {
        assert_eq!(line_type_bit(line.as_bytes()), bit, "{line}");
    }
    let r = ChangelogRecord::parse(REAL[1]).unwrap();
    assert_eq!(r.name.as_deref(), Some("file with spaces"));
    assert_eq!(r.jobid.as_deref(), Some("cp.0"));
    let r = ChangelogRecord::parse(REAL[5]).unwrap();
    assert_eq!(r.kind, RecordType::Renme);
    assert!(r.target.is_zero());
    assert_eq!(r.name.as_deref(), Some("file1_renamed.txt"));
    assert_eq!(r.source, Some(Fid { seq: 0x200000401, oid: 3, ver: 0 }));
    assert_eq!(r.source_name.as_deref(), Some("file1.txt"));
    let r = ChangelogRecord::parse(REAL[3]).unwrap();
    assert_eq!((r.kind.clone(), r.open_mode.as_deref(), r.flags), (RecordType::Open, Some("-w-"), 0x24a));
}

#[test]
fn names_with_spaces_in_renames_and_unknown_types() {
    let line = "9 08RENME 01:00:00.000000001 2026.01.01 0x1 t=[0x2:0x9:0x0] p=[0x2:0x1:0x0] new name s=[0x2:0x5:0x0] sp=[0x2:0x1:0x0] old  name";
    let r = ChangelogRecord::parse(line).unwrap();
    assert_eq!((r.name.as_deref(), r.source_name.as_deref()), (Some("new name"), Some("old  name")));
    let r = ChangelogRecord::parse("10 26NEWTY 01:00:00.000000001 2026.01.01 0x0 t=[0x2:0x9:0x0]").unwrap();
    assert_eq!(r.kind, RecordType::Unknown(26, "NEWTY".into()));
}

#[test]
fn malformed_lines_give_reasons() {
    for (line, why) in [
        ("", "missing record index"),
        ("x 01CREAT", "not a number"),
        ("1 CREAT 01:00:00.1 2026.01.01 0x0 t=[0x2:0x1:0x0]", "NNNAME"),
        ("1 01CREAT 01:00:00.1 2026.01.01 0x0", "missing t="),
        ("1 01CREAT 01:00:00.1 2026.01.01 0x0 t=[0x2:zz:0x0]", "bad object id"),
        ("1 08RENME 01:00:00.1 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x2:0x1:0x0] a", "RENME without"),
    ] {
        let e = ChangelogRecord::parse(line).unwrap_err();
        assert!(e.contains(why), "{line}: {e}");
    }
}

#[test]
fn a_jobid_with_spaces_runs_to_the_next_key() {
    let r = ChangelogRecord::parse(
        "12 01CREAT 10:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] j=VM Thread.0 ef=0xf u=0:0 nid=0@lo p=[0x200000007:0x1:0x0] f g",
    )
    .unwrap();
    assert_eq!((r.jobid.as_deref(), r.uid_gid, r.name.as_deref()), (Some("VM Thread.0"), Some((0, 0)), Some("f g")));
    assert!(r.parent.is_some());
    let r = ChangelogRecord::parse(
        "13 01CREAT 10:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] j=a b p=[0x200000007:0x1:0x0] f",
    )
    .unwrap();
    assert_eq!((r.jobid.as_deref(), r.name.as_deref()), (Some("a b"), Some("f")));
}

#[test]
fn only_a_rename_splits_its_names_and_only_at_whole_source_fields() {
    let odd = "x s=[0x1:0x1:0x0] sp=[0x1:0x1:0x0] y";
    let r = ChangelogRecord::parse(&format!(
        "14 01CREAT 10:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0] {odd}"
    ))
    .unwrap();
    assert_eq!((r.name.as_deref(), r.source), (Some(odd), None));
    let r = ChangelogRecord::parse(
        "15 08RENME 10:00:00.000000000 2026.01.01 0x0 t=[0:0x0:0x0] p=[0x200000007:0x1:0x0] a s=[b c s=[0x200000401:0x6:0x0] sp=[0x200000007:0x2:0x0] old name",
    )
    .unwrap();
    assert_eq!((r.name.as_deref(), r.source_name.as_deref()), (Some("a s=[b c"), Some("old name")));
    assert_eq!(r.source.map(|f| f.oid), Some(6));
}

#[test]
fn a_namespace_record_without_a_directory_or_a_name_is_an_error() {
    let e = ChangelogRecord::parse("16 01CREAT 10:00:00.000000000 2026.01.01 0x0 t=[0x200000401:0x5:0x0] j=cp.0")
        .unwrap_err();
    assert!(e.contains("CREAT without p="), "{e}");
    let e = ChangelogRecord::parse(
        "17 06UNLNK 10:00:00.000000000 2026.01.01 0x1 t=[0x200000401:0x5:0x0] p=[0x200000007:0x1:0x0]",
    )
    .unwrap_err();
    assert!(e.contains("UNLNK without a name"), "{e}");
    // Other records need neither.
    assert!(ChangelogRecord::parse(
        "18 11CLOSE 10:00:00.000000000 2026.01.01 0x42 t=[0x200000401:0x5:0x0] j=cp.0 ef=0xf u=0:0 nid=0@lo m=-w-"
    )
    .is_ok());
}
