//! The `gufi` source reads each `db.db` from its pages, and through SQLite whatever that
//! reader does not expect: both must give the same rows, attributes and rejects, in the same
//! order, on generated indexes (plain and rolled up) with the shapes real indexes take
//! (values spilling onto overflow pages, b-trees several levels deep on small pages, rows
//! written before a column was added, bad values) and the ones the page reader leaves to
//! SQLite (a write-ahead log, files cut short, one at a page boundary). Seeds are random per run and printed;
//! `ICICLE_TEST_SEED=N` replays one.

use std::path::Path;

use icicle_core::rng::Rng;
use icicle_testkit::compliance::{read_all, source, Read};
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};

/// Every `db.db` under `index` but the index parent's, in path order.
fn databases(index: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![index.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "db.db") && d != index {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Give the index's databases the shapes above, picked by `r`.
fn shape(index: &Path, r: &mut Rng) {
    // SQLite opens no path of 512 bytes or more: the deep databases stay as written.
    let dbs: Vec<_> = databases(index).into_iter().filter(|d| d.as_os_str().len() < 500).collect();
    let pick = |r: &mut Rng| dbs[r.below(dbs.len() as u64) as usize].clone();
    let sql = |db: &Path, batch: &str| {
        let conn = rusqlite::Connection::open(db).unwrap();
        if let Err(e) = conn.execute_batch(batch) {
            panic!("{}: {e}: {batch}", db.display());
        }
    };
    // Long link names and xattr lists: payloads past a page, chains of overflow pages.
    for _ in 0..3 {
        let len = 1_000 + r.below(20_000);
        sql(
            &pick(r),
            &format!(
                "UPDATE entries SET linkname = '{}', xattr_names = zeroblob({len}) WHERE rowid IN (SELECT rowid FROM entries LIMIT 2);",
                "l".repeat(len as usize)
            ),
        );
    }
    // Many rows on 512-byte pages: interior pages two or three levels deep.
    let db = pick(r);
    let rows = 200 + r.below(2_000);
    sql(
        &db,
        &format!(
            "PRAGMA page_size = 512; VACUUM;
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows})
             INSERT INTO entries(name, type, inode, mode, uid, gid, size, atime, mtime, ctime)
               SELECT 'many' || i, 'f', i, 33188, 1000 + i % 7, 100, i * 1000, 1, 2, 3 FROM n;"
        ),
    );
    // A column added after rows were written (shorter records), and rows after it.
    sql(
        &pick(r),
        "ALTER TABLE entries ADD COLUMN later INT64;
         INSERT INTO entries(name, type, inode, mode, uid, gid, size, atime, mtime, ctime, later)
           VALUES ('after', 'f', '77', 33188, 1, 2, 3, 4, 5, 6, 9);",
    );
    // Bad values: each a reject naming its row, the same whichever way it is read (this
    // database is left whole below, so that its rejects are counted).
    let bad = pick(r);
    let pick = |r: &mut Rng| loop {
        let d = pick(r);
        if d != bad || dbs.len() < 2 {
            break d;
        }
    };
    sql(
        &bad,
        "INSERT INTO entries(name, type, inode, mode, uid, gid, size, atime, mtime, ctime) VALUES
           ('nosize', 'f', '1', 33188, 1, 2, NULL, 4, 5, 6), ('textsize', 'f', '2', 33188, 1, 2, '12', 4, 5, 6),
           ('realsize', 'f', '3', 33188, 1, 2, 2.0, 4, 5, 6), ('huge', 'f', '4', 33188, 1, 2, 1e300, 4, 5, 6),
           ('neg', 'f', '-5', 33188, 1, 2, 3, 4, 5, 6), ('kind', 'x', '6', 33188, 1, 2, 3, 4, 5, 6),
           ('it''''s', 'f', '7', 33188, 1, 2, 3, 4, 5, 6), (NULL, 'f', '8', 33188, 1, 2, 3, 4, 5, 6),
           (x'ff41', 'f', '9', 33188, 1, 2, 3, 4, 5, 6), ('big', 'f', '10', 33188, -1, 2, 3, 4, 5, 6);",
    );
    // A summary without the directory's own row.
    if r.below(2) == 0 {
        sql(&pick(r), "UPDATE summary SET isroot = 0;");
    }
    // Left to SQLite: a write-ahead log (the header says so).
    sql(&pick(r), "PRAGMA journal_mode = WAL; INSERT INTO entries(name, type, mode, uid, gid, size, atime, mtime, ctime) VALUES ('wal', 'f', 33188, 1, 2, 3, 4, 5, 6);");
    // A file cut short (not a whole number of pages): what SQLite makes of it, both ways.
    let damaged = pick(r);
    let mut bytes = std::fs::read(&damaged).unwrap();
    bytes.truncate(bytes.len() - 1 - r.below(400) as usize);
    std::fs::write(&damaged, bytes).unwrap();
    // One cut at a page boundary: the header's page count no longer matches the file.
    let cut = pick(r);
    let mut bytes = std::fs::read(&cut).unwrap();
    let page = u16::from_be_bytes([bytes[16], bytes[17]]) as usize;
    if bytes.len() > page {
        bytes.truncate(bytes.len() - page);
        std::fs::write(&cut, bytes).unwrap();
    }
}

fn read(index: &Path, direct: bool) -> Read {
    let body = format!("type = \"gufi\"\nindex = \"{}\"\ndirect = {direct}\n", index.display());
    read_all(source(&body).unwrap().as_ref()).unwrap()
}

#[test]
fn pages_and_sqlite_read_the_same() {
    let first = icicle_core::rng::test_seed();
    for seed in first..first + 6 {
        let tmp = tempfile::tempdir().unwrap();
        let mut r = Rng::new(seed);
        let fs = GenFs::generate(&GenSpec::new(300 + r.below(900), seed));
        let index = tmp.path().join("gufi");
        gen::write(&fs, Format::Gufi, &index, 1_000, r.below(2) == 0).unwrap();
        shape(&index, &mut r);
        let (pages, sqlite) = (read(&index, true), read(&index, false));
        // The databases cut short lose their rows (both ways); the rest are read.
        assert!(pages.records.len() * 2 >= fs.files.len(), "seed {seed}: {} records", pages.records.len());
        assert_eq!(pages.rows, sqlite.rows, "seed {seed}: rows");
        assert_eq!(pages.directories, sqlite.directories, "seed {seed}");
        let rejects = |r: &Read| r.rejects.iter().map(|j| format!("{j:?}")).collect::<Vec<_>>();
        assert_eq!(rejects(&pages), rejects(&sqlite), "seed {seed}: rejects");
        // Six bad rows ('12' and 2.0 are integers once stored in an INT64 column).
        assert!(pages.rejects.len() >= 6, "seed {seed}: {:?}", pages.rejects);
        // Every database but the write-ahead one and the two cut short is read from its pages.
        let dbs = databases(&index);
        let refused: Vec<String> = dbs
            .iter()
            .filter_map(|db| {
                icicle_plugins_snapshot::gufi::read_pages(std::fs::read(db).unwrap())
                    .err()
                    .map(|e| format!("{}: {e}", db.display()))
            })
            .collect();
        assert!(refused.len() <= 3, "seed {seed}: {refused:#?}");
    }
}
