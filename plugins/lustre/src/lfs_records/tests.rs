use super::*;
use icicle_core::rng::{test_seed, Rng};

/// A changelog as `lfs` holds it: (index, the record's printed bytes, newlines and all).
type Changelog = Vec<(u64, Vec<u8>)>;

fn record(i: u64, name: &[u8]) -> Vec<u8> {
    let mut r =
        format!("{i} 01CREAT 02:10:01.749034600 2026.03.16 0x0 t=[0x200000401:0x{i:x}:0x0] p=[0x200000007:0x1:0x0] ")
            .into_bytes();
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

/// What one read gave.
struct Read {
    records: Vec<String>,
    loose: Vec<String>,
    more: bool,
    /// Questions asked of `lfs`.
    asked: u32,
}

/// One read, as [`crate::lfs::Lfs::changelog`] makes it, with at most `budget` checks.
fn read_with(log: &Changelog, start: u64, end: Option<u64>, max: u64, budget: u32) -> Read {
    let out = output(log, start);
    let mut at = 0;
    let mut next_line = |buf: &mut Vec<u8>| -> std::io::Result<usize> {
        let rest = &out[at..];
        let n = rest.iter().position(|&b| b == b'\n').map_or(rest.len(), |p| p + 1);
        buf.extend_from_slice(&rest[..n]);
        at += n;
        Ok(n)
    };
    let mut asked = 0;
    let mut first_line = |from: u64| -> Result<Option<Vec<u8>>, String> {
        asked += 1;
        Ok(log
            .iter()
            .find(|(i, _)| *i >= from)
            .map(|(_, r)| r.split(|&b| b == b'\n').next().unwrap_or_default().to_vec()))
    };
    let mut checks = Checks::new(budget);
    let mut verify = |j: u64, line: &[u8]| checks.check(j, line, &mut first_line);
    let got = read_records(&mut next_line, end, max, &mut verify).unwrap();
    let (mut split, more) = (got.split, got.more);
    if got.eof {
        split.finish(&mut verify).unwrap();
    }
    let (text, loose) = split.into_text();
    Read { records: text.lines().map(str::to_string).collect(), loose, more, asked }
}

/// [`read_with`] with the real budget.
fn read(log: &Changelog, start: u64, end: Option<u64>, max: u64) -> (Vec<String>, bool, u32) {
    let r = read_with(log, start, end, max, CHECKS_PER_READ);
    (r.records, r.more, r.asked)
}

fn escaped(log: &Changelog, range: std::ops::RangeInclusive<u64>) -> Vec<String> {
    log.iter().filter(|(i, _)| range.contains(i)).map(|(_, r)| icicle_core::name::escape(r).into_owned()).collect()
}

/// Read from `start` on as the stream does, `max` lines and `budget` checks a read.
fn read_all(log: &Changelog, start: u64, end: Option<u64>, max: u64, budget: u32) -> Vec<String> {
    let (mut next, mut all) = (start, Vec::new());
    for _ in 0..10_000 {
        let Read { records: got, more, .. } = read_with(log, next, end, max, budget);
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
    let log: Changelog =
        vec![(7, record(7, b"a")), (8, record(8, name.as_bytes())), (9, record(9, b"b")), (10, record(10, b"c"))];
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
fn a_newline_in_a_jobid_keeps_the_record_whole() {
    // A process named `a` newline `b` (prctl allows it): its jobid `%e.%u` spans two lines.
    let r8 = b"8 01CREAT 02:10:01.749034600 2026.03.16 0x0 t=[0x200000401:0x8:0x0] j=a\nb.0 ef=0xf u=0:0 nid=0@lo p=[0x200000007:0x1:0x0] f".to_vec();
    let log: Changelog = vec![(7, record(7, b"a")), (8, r8), (9, record(9, b"c"))];
    assert_eq!(read(&log, 0, None, 100).0, escaped(&log, 0..=u64::MAX));
}

#[test]
fn a_forged_record_before_more_lines_at_the_end_is_still_checked() {
    // `x`, newline, a line with a huge index that is no record, newline, `y`.
    let name = b"x\n18446744073709551614 x\ny";
    let log: Changelog = vec![(7, record(7, b"a")), (8, record(8, name))];
    assert_eq!(read(&log, 0, None, 100).0, escaped(&log, 0..=u64::MAX));
    let name = b"x\n9 x\ny";
    let log: Changelog = vec![(7, record(7, b"a")), (8, record(8, name))];
    assert_eq!(read(&log, 0, None, 100).0, escaped(&log, 0..=u64::MAX), "record 9 is no record yet");
}

#[test]
fn lines_before_the_first_record_are_apart_from_the_records() {
    let log: Changelog = vec![(0, b" +12 garbage".to_vec()), (7, record(7, b"a"))];
    let r = read_with(&log, 0, None, 100, CHECKS_PER_READ);
    assert_eq!((r.records, r.loose), (escaped(&log, 7..=7), vec![" +12 garbage".to_string()]));
}

#[test]
fn checks_are_cached_and_bounded_and_a_read_past_its_bound_stops_at_the_next_record() {
    // Record 8 names 40 lines that each claim to be record 8: one question answers all.
    let mut name = b"x".to_vec();
    for _ in 0..40 {
        name.extend_from_slice(format!("\n{}", forged(8)).as_bytes());
    }
    let log: Changelog = vec![(7, record(7, b"a")), (8, record(8, &name)), (9, record(9, b"b"))];
    let r = read_with(&log, 0, None, 100, CHECKS_PER_READ);
    assert_eq!(r.records, escaped(&log, 0..=u64::MAX));
    assert!(r.asked <= 2, "{} questions", r.asked);
    // Records each naming lines with other indexes run a read out of checks: it ends early,
    // and reading on gives every record exactly.
    let mut log: Changelog = (100..140).map(|i| (i, record(i, b"f"))).collect();
    for i in (101..140).step_by(2) {
        let name = format!("x\n{}\n{}", forged(i - 1), forged(i - 2));
        log[(i - 100) as usize] = (i, record(i, name.as_bytes()));
    }
    let r = read_with(&log, 0, None, 1000, 4);
    assert!(
        r.more && !r.records.is_empty() && r.records.len() < log.len(),
        "{} records, more {}",
        r.records.len(),
        r.more
    );
    assert_eq!(read_all(&log, 0, None, 1000, 4), escaped(&log, 0..=u64::MAX));
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
        let budget = [1, 3, CHECKS_PER_READ][rng.below(3) as usize];
        assert_eq!(
            read_all(&log, start, None, max, budget),
            escaped(&log, 0..=u64::MAX),
            "seed {seed}: whole changelog, {max} lines and {budget} checks a read"
        );
        let (lo, hi) =
            (indexes[rng.below(indexes.len() as u64) as usize], indexes[rng.below(indexes.len() as u64) as usize]);
        let (lo, hi) = (lo.min(hi), lo.max(hi));
        assert_eq!(
            read_all(&log, lo, Some(hi), max, budget),
            escaped(&log, lo..=hi),
            "seed {seed}: {lo}..={hi}, {max} lines and {budget} checks a read"
        );
    }
}
