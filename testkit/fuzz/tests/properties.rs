//! The fuzz harnesses as bounded properties of the normal test suite: each runs on its seeds
//! and on random mutations of them (byte edits, inserted delimiters, quotes, newlines and
//! multi-byte characters, truncation, splices). proptest picks a new seed every run and
//! prints the failing input, shrunk; `PROPTEST_CASES` raises the count (default 1,500).

use icicle_fuzz_harness::{seeds, TARGETS};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// One edit of an input.
#[derive(Debug, Clone)]
enum Edit {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
    Splice(usize, usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let token = prop_oneof![
        Just(b",".to_vec()),
        Just(b"|".to_vec()),
        Just(b"\t".to_vec()),
        Just(b"\"".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"''".to_vec()),
        Just(b"%".to_vec()),
        Just(b"\\".to_vec()),
        Just(b" -- ".to_vec()),
        Just(b"/../".to_vec()),
        Just(b"\0".to_vec()),
        Just("é".as_bytes().to_vec()),
        Just("日本".as_bytes().to_vec()),
        Just(vec![0xff, 0xfe]),
        Just(b"99999999999999999999".to_vec()),
        Just(b"-1".to_vec()),
        Just(b"1e300".to_vec()),
        Just(b"{\"event\":".to_vec()),
        Just(b"[0x200000007:0x1:0x0]".to_vec()),
        prop::collection::vec(any::<u8>(), 1..8),
    ];
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Flip(i, b)),
        (any::<usize>(), token).prop_map(|(i, t)| Edit::Insert(i, t)),
        (any::<usize>(), 1usize..16).prop_map(|(i, n)| Edit::Delete(i, n)),
        any::<usize>().prop_map(Edit::Truncate),
        (any::<usize>(), any::<usize>(), 1usize..64).prop_map(|(a, b, n)| Edit::Splice(a, b, n)),
    ]
}

fn apply(mut v: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let len = v.len().max(1);
        match e {
            Edit::Flip(i, b) if !v.is_empty() => {
                let i = i % v.len();
                v[i] = *b;
            }
            Edit::Insert(i, t) => {
                let i = i % (v.len() + 1);
                v.splice(i..i, t.iter().copied());
            }
            Edit::Delete(i, n) if !v.is_empty() => {
                let i = i % v.len();
                let end = (i + n).min(v.len());
                v.drain(i..end);
            }
            Edit::Truncate(i) => v.truncate(i % len),
            Edit::Splice(a, b, n) if !v.is_empty() => {
                let (a, b) = (a % v.len(), b % v.len());
                let piece: Vec<u8> = v[a..(a + n).min(v.len())].to_vec();
                v.splice(b..b, piece);
            }
            _ => {}
        }
    }
    v
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(1_500)
}

fn property(name: &str) {
    let harness = TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f).expect("a harness");
    let seeds = seeds(name);
    assert!(!seeds.is_empty(), "{name}: no seeds");
    for s in &seeds {
        harness(s);
    }
    // The committed corpus, findings of earlier fuzzing included (`regression-*`).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds").join(name);
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        harness(&std::fs::read(e.unwrap().path()).unwrap());
    }
    let mut runner = TestRunner::new(Config { cases: cases(), failure_persistence: None, ..Config::default() });
    let strategy = (0..seeds.len(), prop::collection::vec(edit(), 0..12), prop::collection::vec(any::<u8>(), 0..64));
    runner
        .run(&strategy, |(i, edits, noise)| {
            harness(&apply(seeds[i].clone(), &edits));
            // And bytes unlike any seed.
            harness(&noise);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
}

#[test]
fn tsv_rows_are_records_directories_rejects_or_skipped() {
    property("tsv");
}

#[test]
fn mmapplypolicy_rows_are_records_directories_or_rejects() {
    property("mmapplypolicy");
}

#[test]
fn gufi_rows_decode_or_reject() {
    property("gufi_row");
}

#[test]
fn gufi_databases_read_from_their_pages_or_go_to_sqlite() {
    property("gufi_db");
}

#[test]
fn lustre_changelog_lines_parse_or_reject() {
    property("lustre_changelog");
}

#[test]
fn gpfs_events_parse_the_same_both_ways() {
    property("gpfs_event");
}

#[test]
fn times_parse_or_reject() {
    property("time");
}

#[test]
fn names_escape_losslessly() {
    property("name");
}

#[test]
fn prism_catalogs_parse_or_reject() {
    property("prism_catalog");
}

/// `ICICLE_WRITE_FUZZ_CORPUS=DIR cargo test -p icicle-fuzz-harness --test properties` writes
/// the seeds as the cargo-fuzz seed corpus (`fuzz/seeds/<name>/seed-N`).
#[test]
fn seeds_are_valid_and_can_be_written_as_the_corpus() {
    for (name, _) in TARGETS {
        assert!(!seeds(name).is_empty(), "{name}");
    }
    // Seeds that are meant to parse do.
    for line in String::from_utf8(seeds("lustre_changelog")[0].clone()).unwrap().lines() {
        icicle_plugins_lustre::changelog::ChangelogRecord::parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    // The GUFI seed is read from its pages: four rows and the directory's own.
    let rows = icicle_plugins_snapshot::gufi::read_pages(seeds("gufi_db")[0].clone()).unwrap();
    assert_eq!(rows.len(), 5, "{rows:?}");
    assert_eq!(rows[1], Ok("/d/it's".to_string()));
    assert!(rows[3].is_err(), "uid -1: {rows:?}");
    for ev in seeds("gpfs_event") {
        icicle_plugins_gpfs::GpfsEvent::parse(&ev).unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(&ev)));
    }
    let Some(dir) = std::env::var_os("ICICLE_WRITE_FUZZ_CORPUS") else {
        return;
    };
    for (name, _) in TARGETS {
        let d = std::path::Path::new(&dir).join(name);
        std::fs::create_dir_all(&d).unwrap();
        for (i, s) in seeds(name).iter().enumerate() {
            std::fs::write(d.join(format!("seed-{i}")), s).unwrap();
        }
    }
}
