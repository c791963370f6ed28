//! Tests of the TSV/CSV layouts and the listing source.

use super::*;

fn parse_with(l: &Layout, line: &str) -> Result<icicle_core::record::OwnedFileRecord, String> {
    let mut s = Scratch::default();
    l.parse(line.as_bytes(), &mut s).map(|r| r.to_owned_record())
}

#[test]
fn icicle9_rows() {
    let l = Layout::preset(Preset::Icicle9);
    let r = parse_with(&l, r#"f,33188,1000,100,42,1,2,3,"/a/b,c ""q"".txt""#).unwrap();
    assert_eq!(r.path, "/a/b,c \"q\".txt");
    assert_eq!(
        (r.kind, r.attrs.mode, r.attrs.uid, r.attrs.gid, r.attrs.size, r.attrs.atime, r.attrs.ctime, r.attrs.mtime),
        (FileKind::File, 0o100644, 1000, 100, 42, 1, 2, 3)
    );
    let r = parse_with(&l, "l,41471,0,0,7,1,2,3,/x/link").unwrap();
    assert_eq!((r.kind, r.attrs.inode), (FileKind::Link, 0));
    assert!(parse_with(&l, "f,33188,1000,100,42,1,2").unwrap_err().contains("expected 9 fields"));
    assert!(parse_with(&l, "f,33188,-1,100,42,1,2,3,/p").unwrap_err().contains("uid"));
    assert!(parse_with(&l, "x,33188,1,100,42,1,2,3,/p").unwrap_err().contains("type"));
    assert!(parse_with(&l, "f,33188,1,100,42,1,2,3,").unwrap_err().contains("empty path"));
}

#[test]
fn pwalk_and_ne2scan_rows() {
    let l = Layout::preset(Preset::Pwalk);
    let r = parse_with(&l, r#"12,11,1,"/home/u/a,b.txt","txt",1000,100,42,2049,8,1,"100644",10,30,20,-1,-1"#).unwrap();
    assert_eq!(
        (r.path.as_str(), r.attrs.mode, r.attrs.size, r.attrs.atime, r.attrs.mtime, r.attrs.ctime, r.attrs.inode),
        ("/home/u/a,b.txt", 0o100644, 42, 10, 30, 20, 12)
    );
    let r = parse_with(&l, r#"11,2,0,"/home/u","",1000,100,4096,2049,8,3,"40755",10,30,20,2,4096"#).unwrap();
    assert_eq!(r.kind, FileKind::Dir);
    let l = Layout::preset(Preset::Ne2scan);
    let r = parse_with(&l, "10|20|30|1000|100|120777|5|77|/p/a|b link").unwrap();
    assert_eq!(
        (r.path.as_str(), r.kind, r.attrs.atime, r.attrs.ctime, r.attrs.mtime, r.attrs.size, r.attrs.inode),
        ("/p/a|b link", FileKind::Link, 10, 20, 30, 5, 77)
    );
    assert!(parse_with(&l, "10|20|30|1000|100|120777|5|-7|/p/x").unwrap_err().contains("inode: `-7` is negative"));
    assert!(parse_with(&l, "10|20|30|1000|100|120777|5||/p/x").unwrap_err().contains("inode"));
}

#[test]
fn lester_ost_objects_and_fids_become_storage_attributes() {
    // Rows of testkit/corpus/listings/lester.corpus (cases ne2scan-default-header-footer and
    // ne2scan-show-fid): OST objects last stripe first, an empty field without objects.
    let l = Layout::preset(Preset::Ne2scan);
    let r = parse_with(
        &l,
        "1388734512|1388648160|1388648100|10234|10234|100644|0|2883721|1:3b2d4f,0:3b2c11|/ROOT/proj/run42/out.h5",
    )
    .unwrap();
    let st = r.storage.unwrap();
    assert_eq!((st.osts, st.stripe_count, st.fid), (vec![0, 1], Some(2), None));
    let r = parse_with(&l, "1|2|3|10234|10234|100644|0|2883725||/ROOT/proj/run42/empty.lock").unwrap();
    assert_eq!(r.storage, None);
    let r = parse_with(&l, "1|2|3|10511|10500|100640|0|2884102|3:1a2b3c|0x200000401:0x1c:0x0|/ROOT/proj/data/a.dat")
        .unwrap();
    let st = r.storage.unwrap();
    assert_eq!((st.osts, st.fid.as_deref()), (vec![3], Some("[0x200000401:0x1c:0x0]")));
    let r = parse_with(&l, "1|2|3|10511|10500|100640|0|2884103||0x200000401:0x1d:0x0|/ROOT/proj/data/b.dat").unwrap();
    assert_eq!(r.storage.unwrap().fid.as_deref(), Some("[0x200000401:0x1d:0x0]"));
    // A composite layout's `UNKNOWN LOV` names no OSTs.
    let r = parse_with(&l, "1|2|3|1|1|100640|0|2884104|UNKNOWN LOV bd60bd0|/ROOT/c.dat").unwrap();
    assert_eq!(r.storage, None);
}

#[test]
fn rows_skipped_by_the_directory_pass_are_never_directories() {
    let mut rng = icicle_core::rng::Rng::new(0xd1c5);
    let cols =
        Columns { kind: None, mode: 0, uid: 1, gid: 2, size: 3, atime: 4, ctime: 5, mtime: 6, path: 7, inode: None };
    let layouts = [
        Layout::preset(Preset::Icicle9),
        Layout::preset(Preset::Ne2scan),
        Layout::preset(Preset::Pwalk),
        Layout::custom(b'|', cols.clone(), ModeFormat::Symbolic, true, false, false),
        Layout::custom(b'\t', cols, ModeFormat::Decimal, true, true, false),
    ];
    let tokens = [
        "d",
        "f",
        "l",
        "D",
        "x",
        "16877",
        "33188",
        "40755",
        "100644",
        "drwxr-xr-x",
        "-rw-r--r--",
        "1000",
        "-1",
        "",
        "\"",
        "/a/b",
        "/a,\"b\"",
    ];
    let mut skipped = 0;
    for _ in 0..20_000 {
        let l = &layouts[rng.below(layouts.len() as u64) as usize];
        let n = rng.below(20) as usize;
        let line: Vec<u8> = (0..n)
            .flat_map(|i| {
                let t = tokens[rng.below(tokens.len() as u64) as usize].as_bytes().to_vec();
                if i > 0 {
                    [vec![l.delim], t].concat()
                } else {
                    t
                }
            })
            .collect();
        let mut s = Scratch::default();
        if l.surely_not_directory(&line) {
            skipped += 1;
            let parsed = l.parse(&line, &mut s);
            assert!(!matches!(parsed, Ok(ref r) if r.kind == FileKind::Dir), "{}", String::from_utf8_lossy(&line));
        }
    }
    assert!(skipped > 1000, "{skipped}");
    let l = Layout::preset(Preset::Icicle9);
    assert!(!l.surely_not_directory(b"d,16877,1,1,4096,1,2,3,/a"));
    assert!(l.surely_not_directory(b"f,33188,1,1,4096,1,2,3,/a"));
    let l = Layout::preset(Preset::Ne2scan);
    assert!(!l.surely_not_directory(b"1|2|3|1000|100|40755|4096|7|/a"));
    assert!(l.surely_not_directory(b"1|2|3|1000|100|100644|4096|7|/a"));
}

#[test]
fn prefix_rewrite() {
    let mut l = Layout::preset(Preset::Icicle9);
    l.strip_prefix = "/snap/2016".into();
    l.path_prefix = "/projectb".into();
    assert_eq!(parse_with(&l, "f,33188,1,1,1,1,1,1,/snap/2016/x").unwrap().path, "/projectb/x");
    assert_eq!(parse_with(&l, "f,33188,1,1,1,1,1,1,/other/x").unwrap().path, "/other/x");
}

#[test]
fn drift_is_one_error_at_the_first_row() {
    let tmp = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let pwalk = Layout::preset(Preset::Pwalk);
    let row = "12,11,1,\"/home/u/a\",\"\",1000,100,42,2049,8,1,\"100644\",10,30,20,-1,-1\n";
    assert!(pwalk.check_first_row(&write("ok.csv", &format!("{PWALK_HEADER}\n{row}"))).is_ok());
    assert!(pwalk.check_first_row(&write("bare.csv", row)).is_ok(), "the header is optional");
    let other = "inode,parent-inode,depth,\"filename\",UID,GID,st_size\n";
    let e = pwalk.check_first_row(&write("hdr.csv", &format!("{other}{row}"))).unwrap_err().to_string();
    assert!(e.contains("line 1: the file does not match the pwalk preset: the header is not pwalk's"), "{e}");
    let e = pwalk.check_first_row(&write("cols.csv", "12,11,1,\"/home/u/a\",1000\n")).unwrap_err().to_string();
    assert!(e.contains("line 1") && e.contains("expected 17 fields"), "{e}");
    let ne = Layout::preset(Preset::Ne2scan);
    assert!(ne.check_first_row(&write("ne.txt", "# fslist\n10|20|30|1000|100|100644|5|77|/p/a\n")).is_ok());
    let e = ne.check_first_row(&write("ne2.txt", "# fslist\n10|20|30|1000|100|5|77|/p/a\n")).unwrap_err().to_string();
    assert!(e.contains("line 2: the file does not match the ne2scan preset"), "{e}");
    assert!(ne.check_first_row(&write("empty.txt", "")).is_ok(), "an empty file has no rows to check");
}

#[derive(Default)]
struct Count {
    records: u64,
    rejects: u64,
}

impl RowSink for Count {
    fn record(&mut self, _: &FileRecord<'_>) {
        self.records += 1;
    }
    fn directory(&mut self, _: &FileRecord<'_>) {}
    fn reject(&mut self, _: Reject) {
        self.rejects += 1;
    }
    fn progress(&mut self, _: u64) {}
    fn spawn(&mut self, _: Split) {}
}

#[test]
fn an_input_truncated_after_planning_is_an_error_for_its_splits() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("in.csv");
    let rows: String = (0..2000).map(|i| format!("f,33188,1,1,{i},1,2,3,/d/f{i}\n")).collect();
    std::fs::write(&f, &rows).unwrap();
    let splits = byte_splits(std::slice::from_ref(&f), 4096).unwrap();
    assert!(splits.len() > 4);
    // The producer rewrites the listing while the run reads it.
    std::fs::OpenOptions::new().write(true).open(&f).unwrap().set_len(rows.len() as u64 / 2).unwrap();
    let source = TsvSource::new(vec![f.clone()], Layout::preset(Preset::Icicle9), 4096);
    let (mut ok, mut failed) = (Count::default(), 0);
    for s in &splits {
        match source.read(s, &mut ok) {
            Ok(()) => {}
            Err(e) => {
                assert!(e.to_string().contains("truncated while being read"), "{e}");
                failed += 1;
            }
        }
    }
    assert!(failed >= splits.len() / 2 - 1, "{failed} of {} splits", splits.len());
    assert!(ok.records > 0 && ok.records < 2000, "{}", ok.records);
    // A file smaller than a split is checked against its planned length too.
    let small = tmp.path().join("small.csv");
    std::fs::write(&small, "f,33188,1,1,1,1,2,3,/d/a\nf,33188,1,1,1,1,2,3,/d/b\n").unwrap();
    let whole = byte_splits(std::slice::from_ref(&small), 1 << 20).unwrap();
    assert_eq!((whole.len(), whole[0].range), (1, None));
    std::fs::OpenOptions::new().write(true).open(&small).unwrap().set_len(40).unwrap();
    let e = source.read(&whole[0], &mut Count::default()).unwrap_err().to_string();
    assert!(e.contains("shorter than when it was planned"), "{e}");
}
