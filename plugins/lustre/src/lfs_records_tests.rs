use super::*;
use icicle_core::rng::{test_seed, Rng};

/// A changelog as `lfs` holds it: (index, the record's printed bytes, newlines and all).
type Changelog = Vec<(u64, Vec<u8>)>;

fn record(i: u64, name: &[u8]) -> Vec<u8> {
    let mut r = format!("{i} 01CREAT 02:10:01.749034600 2026.03.16 0x0 t=[0x200000401:0x{i:x}:0x0] p=[0x200000007:0x1:0x0] ").into_bytes();
    r.extend_from_slice(name);
    r
}

/// A line a name can hold that reads like a record.
fn forged(f: u64) -> String {
    format!("{f} 01CREAT 02:10:01.000000001 2026.03.16 0x0 t=[0x200000401:0x1:0x0] p=[0x200000007:0x1:0x0] evil")
}

/// What `lfs changelog MDT START` prints.
fn output(log: &Changelog, start: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for (_, r) in log.iter().filter(|(i, _)| *i >= start) {
        out.extend_from_slice(r);
        out.push(b'\n');
    }
    out
}

/// One read, as [`crate::lfs::Lfs::changelog`] makes it; also counts the checks with `lfs`.
fn read(log: &Changelog, start: u64, end: Option<u64>, max: u64) -> (Vec<String>, bool, u64) {
    let out = output(log, start);
    let mut at = 0;
    let mut next_line = |buf: &mut Vec<u8>| -> std::io::Result<usize> {
        let rest = &out[at..];
        let n = rest.iter().position(|&b| b == b'\n').map_or(rest.len(), |p| p + 1);
        buf.extend_from_slice(&rest[..n]);
        at += n;
        Ok(n)
    };
    let mut checks = 0;
    let mut verify = |j: u64, line: &[u8]| -> Result<bool, String> {
        checks += 1;
        let first = log.iter().find(|(i, _)| *i >= j).map(|(_, r)| r.split(|&b| b == b'\n').next().unwrap_or_default());
        Ok(first == Some(line))
    };
    let got = read_records(&mut next_line, end, max, &mut verify).unwrap();
    let mut split = got.split;
    if got.eof {
        split.finish(&mut verify).unwrap();
    }
    let (text, n) = split.into_text();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    assert_eq!(lines.len() as u64, n);
    (lines, got.more, checks)
}

fn escaped(log: &Changelog, range: std::ops::RangeInclusive<u64>) -> Vec<String> {
    log.iter().filter(|(i, _)| range.contains(i)).map(|(_, r)| icicle_core::name::escape(r).into_owned()).collect()
}

/// Read from `start` on as the stream does, `max` lines a read.
fn read_all(log: &Changelog, start: u64, end: Option<u64>, max: u64) -> Vec<String> {
    let (mut next, mut all) = (start, Vec::new());
    for _ in 0..10_000 {
        let (got, more, _) = read(log, next, end, max);
        if let Some(last) = got.last().and_then(|l| record_index(l.as_bytes())) {
            next = last + 1;
        }
        all.extend(got);
        if !more {
            return all;
        }
    }
    panic!("no end reading from {start}");
}

#[test]
fn a_name_with_a_newline_stays_in_its_record() {
    let log: Changelog = vec![(7, record(7, b"a\nb")), (8, record(8, b"c\n\nd")), (9, record(9, b"e"))];
    let (got, more, checks) = read(&log, 0, None, 100);
    assert_eq!(got, escaped(&log, 0..=u64::MAX));
    assert!(got[0].ends_with(" a\\x0ab"), "{got:?}");
    assert!(!more);
    // The last start is checked once: no later record could undercut it.
    assert_eq!(checks, 1);
}

#[test]
fn a_forged_record_at_the_end_of_the_output_is_part_of_its_name() {
    let name = format!("x\n{}", forged(u64::MAX));
    let log: Changelog = vec![(7, record(7, b"a")), (8, record(8, name.as_bytes()))];
    let (got, _, _) = read(&log, 0, None, 100);
    assert_eq!(got, escaped(&log, 0..=u64::MAX), "a forged index would stall the stream at 2^64-1");
}

#[test]
fn the_real_next_record_undercuts_records_forged_before_it() {
    let name = format!("x\n{}\n{}", forged(9), forged(1 << 40));
    let log: Changelog = vec![(7, record(7, b"a")), (8, record(8, name.as_bytes())), (9, record(9, b"b")), (10, record(10, b"c"))];
    assert_eq!(read(&log, 0, None, 100).0, escaped(&log, 0..=u64::MAX));
    // A forged copy of an earlier index is part of a name without asking lfs.
    let name = format!("x\n{}", forged(7));
    let log: Changelog = vec![(7, record(7, b"a")), (8, record(8, name.as_bytes())), (9, record(9, b"b"))];
    let (got, _, checks) = read(&log, 0, None, 100);
    assert_eq!(got, escaped(&log, 0..=u64::MAX));
    assert_eq!(checks, 1);
}

#[test]
fn a_read_stops_at_its_count_after_the_record_it_is_in() {
    let name = format!("x\n{}\ny", forged(12));
    let log: Changelog = (10..20).map(|i| (i, record(i, if i == 11 { name.as_bytes() } else { b"f" }))).collect();
    // Two lines are records 10 and the first line of 11; the read takes all of 11.
    let (got, more, _) = read(&log, 0, None, 2);
    assert_eq!(got, escaped(&log, 10..=11));
    assert!(more);
    let (got, more, _) = read(&log, 12, Some(14), 100);
    assert_eq!(got, escaped(&log, 12..=14));
    assert!(!more);
}

#[test]
fn a_line_that_cannot_be_part_of_a_name_is_passed_on_alone() {
    // A CLOSE prints no name: what follows it is no name's, so it is passed to the parser.
    let close = b"8 11CLOSE 02:10:01.749034600 2026.03.16 0x242 t=[0x200000401:0x8:0x0] ef=0xf u=0:0 nid=0@lo".to_vec();
    let log: Changelog = vec![(7, record(7, b"a\nb")), (8, close.clone()), (0, b"garbage".to_vec()), (9, record(9, b"c"))];
    let (got, _, _) = read(&log, 0, None, 100);
    let esc = |r: &[u8]| icicle_core::name::escape(r).into_owned();
    assert_eq!(got, vec![esc(&record(7, b"a\nb")), esc(&close), "garbage".to_string(), esc(&record(9, b"c"))]);
}

#[test]
fn a_line_that_is_no_record_before_the_first_is_passed_on_alone() {
    let log: Changelog = vec![(0, b"garbage".to_vec()), (7, record(7, b"a"))];
    let (got, _, _) = read(&log, 0, None, 100);
    assert_eq!(got, vec!["garbage".to_string(), icicle_core::name::escape(&record(7, b"a")).into_owned()]);
}

/// Random changelogs whose names forge records anywhere but in a real gap right after their
/// own record (the one shape no reader of `lfs` output can tell apart), read in random
/// counts and ranges: every read gives exactly the real records.
#[test]
fn random_changelogs_with_forged_names_read_back_exactly() {
    let base = test_seed();
    for seed in base..base + 300 {
        let mut rng = Rng::new(seed);
        let mut indexes = vec![1 + rng.below(1 << 36)];
        for _ in 0..rng.below(40) {
            let step = if rng.below(10) == 0 { 2 + rng.below(5) } else { 1 };
            indexes.push(indexes[indexes.len() - 1] + step);
        }
        let mut log = Changelog::new();
        for (k, &i) in indexes.iter().enumerate() {
            let after = indexes.get(k + 1).copied().unwrap_or(u64::MAX);
            let mut name = format!("f{i}");
            for _ in 0..rng.below(3) {
                let f = match rng.below(7) {
                    0 => i,
                    1 => after,
                    2 => after.saturating_add(rng.below(3)),
                    3 => u64::MAX,
                    4 => indexes[0],
                    5 => i.saturating_sub(rng.below(4)),
                    _ => indexes[rng.below(indexes.len() as u64) as usize],
                };
                if f > i && f < after {
                    continue;
                }
                name.push('\n');
                name.push_str(&forged(f));
                if rng.below(2) == 0 {
                    name.push_str("\nplain");
                }
            }
            log.push((i, record(i, name.as_bytes())));
        }
        let max = 1 + rng.below(12);
        let start = indexes[0].saturating_sub(rng.below(3));
        assert_eq!(read_all(&log, start, None, max), escaped(&log, 0..=u64::MAX), "seed {seed}: whole changelog, {max} lines a read");
        let (lo, hi) = (indexes[rng.below(indexes.len() as u64) as usize], indexes[rng.below(indexes.len() as u64) as usize]);
        let (lo, hi) = (lo.min(hi), lo.max(hi));
        assert_eq!(read_all(&log, lo, Some(hi), max), escaped(&log, lo..=hi), "seed {seed}: {lo}..={hi}, {max} lines a read");
    }
}
