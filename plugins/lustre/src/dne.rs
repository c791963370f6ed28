//! One namespace over several MDTs (Lustre DNE) read as one changelog.
//!
//! Each MDT logs the operations it runs in a changelog of its own, with indexes of its own,
//! and a record names no MDT; one operation is logged once, and its FIDs may name objects on
//! other MDTs (docs/lustre-monitor.md, "Several MDTs of one file system", from lustre-release
//! `lustre/mdd/mdd_dir.c`, `lustre/lmv/lmv_obd.c`). The directory tree needs one order over
//! all of them: a rename logged on one MDT moves entries whose records are on another.
//!
//! [`MergedChangelog`] reads every MDT and numbers their records in one sequence, which the
//! stream and the resolver's read-ahead read as if it were one MDT's changelog. The order is
//! the records' own times (`cr_time`, each server's clock; a time earlier than the MDT's
//! previous record counts as that one's), then the MDT, then its index; so each MDT's records
//! keep their order. The MDTs are read in rounds, one after another, while they go on
//! logging, so a record read from one MDT may be newer than one another MDT logs just after
//! it was read (two renames of one directory, on two MDTs, read in the wrong order, leave
//! the records below its first name behind). So a record is numbered only once every MDT
//! was read again after the read that returned it: whatever is older was written before
//! that and is in hand (with the servers' clocks in step; each is its own), and none past
//! where an MDT whose read stopped at its size limit stopped. A read whose first round finds
//! records reads every MDT once more, so it numbers everything logged before it began;
//! records read in its last round wait for the next read. The numbering is in memory only: the checkpoint keeps, for the
//! sequence number it was taken at, each MDT's index and time ([`MdtPosition`]), and a
//! restart numbers on from there (records after it were not applied, so any numbering of
//! them will do). Clearing the sequence up to N clears each MDT up to its last record at or
//! before N.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::changelog::leading_index;
pub use crate::lfs::ChangelogText;
use crate::lfs::{Lfs, SharedChangelog};

/// Where one MDT's changelog stands at a sequence number.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdtPosition {
    /// The MDT device, e.g. `fs0-MDT0001`.
    pub mdt: String,
    /// Its index of the last record at or before the sequence number (0: none yet).
    pub index: u64,
    /// That record's time, nanoseconds since the epoch (the order's key).
    pub time: u64,
}

/// Where [`MergedChangelog`] reads each MDT's changelog and clears it: `lfs` ([`Lfs`], one
/// MDT at a time), or a test's stand-in.
pub trait ChangelogSource: Send + std::fmt::Debug {
    /// MDT `mdt`'s records from `start` on, at most `max` lines, none past `end`.
    fn changelog(&self, mdt: &str, start: u64, end: Option<u64>, max: u64) -> Result<ChangelogText, String>;
    /// Clear MDT `mdt`'s records up to `endrec` for `user`.
    fn clear(&self, mdt: &str, user: &str, endrec: u64) -> Result<(), String>;
}

impl ChangelogSource for Lfs {
    fn changelog(&self, mdt: &str, start: u64, end: Option<u64>, max: u64) -> Result<ChangelogText, String> {
        Lfs::changelog(self, mdt, start, end, max)
    }
    fn clear(&self, mdt: &str, user: &str, endrec: u64) -> Result<(), String> {
        Lfs::clear(self, mdt, user, endrec)
    }
}

impl<T: ChangelogSource + Sync> ChangelogSource for std::sync::Arc<T> {
    fn changelog(&self, mdt: &str, start: u64, end: Option<u64>, max: u64) -> Result<ChangelogText, String> {
        T::changelog(self, mdt, start, end, max)
    }
    fn clear(&self, mdt: &str, user: &str, endrec: u64) -> Result<(), String> {
        T::clear(self, mdt, user, endrec)
    }
}

/// A record read and not numbered yet, or numbered and not cleared.
#[derive(Debug)]
struct Line {
    key: u64,
    index: u64,
    /// The line after its index (from the space on).
    rest: String,
}

#[derive(Debug)]
struct Mdt {
    name: String,
    /// The last index read (0: none).
    read: u64,
    /// The index the next record must have (unknown until the first read from nothing).
    expect: Option<u64>,
    /// The key of the last record read.
    last_key: u64,
    /// Read and not numbered, in order.
    pending: VecDeque<Line>,
    /// The last read stopped at its size limit: the changelog may hold more.
    more: bool,
    /// Where it stood at the sequence number before the first numbered record kept.
    base: MdtPosition,
}

/// Several MDTs' changelogs as one; see the module documentation.
#[derive(Debug)]
pub struct MergedChangelog {
    raw: Box<dyn ChangelogSource>,
    mdts: Vec<Mdt>,
    /// Numbered records not cleared, from sequence number `first` on: (MDT, record).
    lines: VecDeque<(usize, Line)>,
    first: u64,
    /// Lines no record's, from any MDT (returned with the next read).
    rejected: Vec<String>,
    /// Records purged before they were read: (MDT, first, last).
    lost: Vec<(String, u64, u64)>,
}

/// A record line's time (`INDEX TYPE HH:MM:SS.NNNNNNNNN YYYY.MM.DD ...`, lustre-release
/// `lustre/utils/lfs.c`, `lfs_changelog()`) in nanoseconds since the epoch.
pub fn time_key(line: &str) -> Option<u64> {
    let mut fields = line.split(' ').filter(|f| !f.is_empty()).skip(2);
    let (clock, date) = (fields.next()?, fields.next()?);
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, s) = (t.next()??, t.next()??, t.next()??);
    let mut d = date.split('.');
    let (y, mo, day) = (d.next()?.parse::<i64>().ok()?, d.next()?.parse::<u32>().ok()?, d.next()?.parse::<u32>().ok()?);
    let clock_ok = h < 24 && m < 60 && s < 61;
    let date_ok = (1970..=2500).contains(&y) && (1..=12).contains(&mo) && (1..=31).contains(&day);
    if !clock_ok || !date_ok || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let days = u64::try_from(icicle_core::time::days_from_civil(y, mo, day)).ok()?;
    let nanos: u64 = frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32);
    (days * 86_400 + h * 3600 + m * 60 + s).checked_mul(1_000_000_000)?.checked_add(nanos)
}

impl MergedChangelog {
    /// The MDTs `names`, read through `raw` (an [`Lfs`] without a merged changelog), from
    /// their first retained records, numbered from 1.
    pub fn new(raw: Box<dyn ChangelogSource>, names: &[String]) -> MergedChangelog {
        let mdts = names
            .iter()
            .map(|n| Mdt {
                name: n.clone(),
                read: 0,
                expect: None,
                last_key: 0,
                pending: VecDeque::new(),
                more: true,
                base: MdtPosition { mdt: n.clone(), ..MdtPosition::default() },
            })
            .collect();
        MergedChangelog { raw, mdts, lines: VecDeque::new(), first: 1, rejected: Vec::new(), lost: Vec::new() }
    }

    /// Go on after sequence number `at`, where the MDTs stood at `positions` (a checkpoint's).
    /// An MDT the positions do not name starts from its first retained record.
    pub fn restore(&mut self, at: u64, positions: &[MdtPosition]) {
        for m in &mut self.mdts {
            let p = positions.iter().find(|p| p.mdt == m.name).cloned();
            let p = p.unwrap_or_else(|| MdtPosition { mdt: m.name.clone(), ..MdtPosition::default() });
            m.read = p.index;
            m.expect = (p.index > 0).then(|| p.index.saturating_add(1));
            m.last_key = p.time;
            m.pending.clear();
            m.more = true;
            m.base = p;
        }
        self.lines.clear();
        self.first = at.saturating_add(1);
    }

    /// Read every MDT once more and number what may be numbered; returns whether a record
    /// was read.
    fn round(&mut self, chunk: u64) -> Result<bool, String> {
        // Every record older than one read before this round was written before this round
        // began, so each MDT's read in this round has it (clocks in step).
        let read_before = self.mdts.iter().map(|m| m.last_key).max().unwrap_or(0);
        let mut read_new = false;
        for m in &mut self.mdts {
            let start = if m.read == 0 { 0 } else { m.read.saturating_add(1) };
            let got = self.raw.changelog(&m.name, start, None, chunk)?;
            self.rejected.extend(got.rejected);
            m.more = got.more;
            for line in got.text.split('\n').filter(|l| !l.is_empty()) {
                let Some(i) = leading_index(line) else {
                    self.rejected.push(line.to_string());
                    continue;
                };
                if m.read > 0 && i <= m.read {
                    continue;
                }
                if let Some(e) = m.expect.filter(|e| i > *e) {
                    self.lost.push((m.name.clone(), e, i - 1));
                }
                m.expect = Some(i.saturating_add(1));
                m.read = i;
                m.last_key = time_key(line).unwrap_or(0).max(m.last_key);
                let rest = line.find(' ').map_or("", |at| &line[at..]).to_string();
                m.pending.push_back(Line { key: m.last_key, index: i, rest });
                read_new = true;
            }
        }
        // Records read before this round, none past where an MDT with more to read stopped;
        // after a round that read nothing, everything read.
        let stopped = self.mdts.iter().filter(|m| m.more).map(|m| m.last_key).min().unwrap_or(u64::MAX);
        let bound = if read_new { read_before.min(stopped) } else { stopped };
        loop {
            let next = (0..self.mdts.len())
                .filter_map(|n| self.mdts[n].pending.front().map(|l| (l.key, n)))
                .filter(|(key, _)| *key <= bound)
                .min();
            let Some((_, n)) = next else { break };
            if let Some(line) = self.mdts[n].pending.pop_front() {
                self.lines.push_back((n, line));
            }
        }
        Ok(read_new)
    }

    /// Sequence numbers from `start` on (or the first kept), at most `max` records, none past
    /// `end`: the text the `lfs changelog` of one MDT would give, each line numbered.
    pub fn read(&mut self, start: u64, end: Option<u64>, max: u64) -> Result<ChangelogText, String> {
        let start = start.max(self.first);
        let max = max.max(1);
        // Two rounds number everything written before the call (the second reads every MDT
        // after the first read it); more rounds while an MDT holds more than a read gives.
        let mut rounds = 0;
        loop {
            let numbered = (self.first + self.lines.len() as u64).saturating_sub(start);
            let full = self.mdts.iter().any(|m| m.more);
            if numbered >= max || (rounds >= 2 && !full) {
                break;
            }
            let read_new = self.round(max)?;
            rounds += 1;
            if !read_new && !self.mdts.iter().any(|m| m.more) {
                break;
            }
        }
        let skip = (start - self.first) as usize;
        let mut text = String::new();
        let mut taken = 0u64;
        for (k, (_, line)) in self.lines.iter().enumerate().skip(skip) {
            let seq = self.first + k as u64;
            if taken >= max || end.is_some_and(|e| seq > e) {
                break;
            }
            text.push_str(&seq.to_string());
            text.push_str(&line.rest);
            text.push('\n');
            taken += 1;
        }
        // Records held back after two rounds came after the call began: not more. Held back
        // otherwise (the call stopped at `max`), they may be older: more.
        let held = rounds < 2 && self.mdts.iter().any(|m| !m.pending.is_empty());
        let more = held || self.mdts.iter().any(|m| m.more) || (skip as u64 + taken) < self.lines.len() as u64;
        // Lines no record's are the stream's to keep (`take_rejected`), whoever read them.
        Ok(ChangelogText { text, more, rejected: Vec::new() })
    }

    /// Each MDT's place at sequence number `at` (at least the first kept less one).
    pub fn positions(&self, at: u64) -> Vec<MdtPosition> {
        let mut pos: Vec<MdtPosition> = self.mdts.iter().map(|m| m.base.clone()).collect();
        for (k, (n, line)) in self.lines.iter().enumerate() {
            if self.first + k as u64 > at {
                break;
            }
            pos[*n].index = line.index;
            pos[*n].time = line.key;
        }
        pos
    }

    /// Clear the sequence up to `to`: each MDT up to its last record at or before it
    /// (`lfs changelog_clear MDT USER INDEX`, only where that moved).
    pub fn clear(&mut self, user: &str, to: u64) -> Result<(), String> {
        let pos = self.positions(to);
        for (m, p) in self.mdts.iter_mut().zip(pos) {
            if p.index > m.base.index {
                self.raw.clear(&m.name, user, p.index)?;
            }
            m.base = p;
        }
        while self.first <= to && !self.lines.is_empty() {
            self.lines.pop_front();
            self.first += 1;
        }
        self.first = self.first.max(to.saturating_add(1));
        Ok(())
    }

    /// Records purged before they were read since the last call: (MDT, first, last).
    pub fn take_lost(&mut self) -> Vec<(String, u64, u64)> {
        std::mem::take(&mut self.lost)
    }

    /// Lines no record's read from any MDT since the last call.
    pub fn take_rejected(&mut self) -> Vec<String> {
        std::mem::take(&mut self.rejected)
    }
}

impl SharedChangelog for MergedChangelog {
    fn read(&mut self, start: u64, end: Option<u64>, max: u64) -> Result<ChangelogText, String> {
        MergedChangelog::read(self, start, end, max)
    }
    fn clear(&mut self, user: &str, to: u64) -> Result<(), String> {
        MergedChangelog::clear(self, user, to)
    }
    fn take_lost(&mut self) -> Vec<(String, u64, u64)> {
        MergedChangelog::take_lost(self)
    }
    fn take_rejected(&mut self) -> Vec<String> {
        MergedChangelog::take_rejected(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_times_order_to_the_nanosecond() {
        let a = time_key("7 01CREAT 02:39:24.958335669 2026.12.07 0x0 t=[0x1:0x2:0x0]").unwrap();
        let b = time_key("8 01CREAT 02:39:24.958335670 2026.12.07 0x0").unwrap();
        assert_eq!(b - a, 1);
        let midnight = time_key("9 02MKDIR 00:00:00.000000000 2026.12.08 0x0").unwrap();
        assert_eq!(midnight, (icicle_core::time::days_from_civil(2026, 12, 8) as u64) * 86_400 * 1_000_000_000);
        assert_eq!(time_key("9 02MKDIR 00:00:00.5 1970.01.01"), Some(500_000_000));
        for bad in [
            "9 02MKDIR",
            "9 02MKDIR 25-00-00 2026.12.08",
            "9 02MKDIR 00:00:00.1 2026.13.01",
            "1 01CREAT 99999999999999999:00:00 2026.01.01",
            "1 01CREAT 00:00:00.0 99999999999.01.01",
        ] {
            assert_eq!(time_key(bad), None, "{bad}");
        }
    }

    /// A fake `lfs` serving each MDT's changelog from the file of its name in `dir` (records
    /// from START on) and logging every `changelog_clear` to `dir/clears`.
    fn lfs_over(dir: &std::path::Path) -> Lfs {
        let script = format!(
            "d='{}'; case \"$1\" in changelog) awk -v s=\"$3\" '$1 >= s' \"$d/$2\";; \
             changelog_clear) echo \"$2 $3 $4\" >> \"$d/clears\";; esac",
            dir.display()
        );
        Lfs::new(vec!["sh".into(), "-c".into(), script, "lfs".into()])
    }

    fn record(index: u64, nanos: u64, name: &str) -> String {
        format!("{index} 01CREAT 10:00:00.{nanos:09} 2026.12.07 0x0 t=[0x200000401:0x{index:x}:0x0] p=[0x200000007:0x1:0x0] {name}\n")
    }

    fn names(text: &str) -> Vec<(u64, String)> {
        text.lines().map(|l| (leading_index(l).unwrap(), l.rsplit(' ').next().unwrap().to_string())).collect()
    }

    #[test]
    fn several_mdts_read_as_one_sequence_in_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let mdt0 = [record(100, 1, "a"), record(101, 3, "c"), record(102, 5, "e"), record(103, 9, "g")].concat();
        // MDT1's clock steps back at f: it counts as d's time, after d and before e.
        let mdt1 = [record(7, 2, "b"), record(8, 4, "d"), record(9, 0, "f")].concat();
        std::fs::write(dir.path().join("fs0-MDT0000"), mdt0).unwrap();
        std::fs::write(dir.path().join("fs0-MDT0001"), mdt1).unwrap();
        let mdts = ["fs0-MDT0000".to_string(), "fs0-MDT0001".to_string()];
        let mut m = MergedChangelog::new(Box::new(lfs_over(dir.path())), &mdts);
        // Two records a read: MDT0 may hold older ones than MDT1's after its first two.
        let got = m.read(0, None, 2).unwrap();
        assert_eq!(names(&got.text), [(1, "a".into()), (2, "b".into())]);
        assert!(got.more);
        let mut seq = names(&got.text);
        let mut next = 3;
        loop {
            let got = m.read(next, None, 2).unwrap();
            let n = names(&got.text);
            next += n.len() as u64;
            seq.extend(n);
            if !got.more {
                break;
            }
        }
        let order: String = seq.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(order, "abcdfeg");
        assert_eq!(seq.iter().map(|(i, _)| *i).collect::<Vec<_>>(), (1..=7).collect::<Vec<_>>());
        // A ranged read again, as the read-ahead makes: the same numbers.
        assert_eq!(names(&m.read(3, Some(4), 10).unwrap().text), [(3, "c".into()), (4, "d".into())]);
        // Up to 4 (d): MDT0 to c (101), MDT1 to d (8).
        let at4 = m.positions(4);
        assert_eq!((at4[0].index, at4[1].index), (101, 8));
        m.clear("cl1", 4).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("clears")).unwrap(),
            "fs0-MDT0000 cl1 101\nfs0-MDT0001 cl1 8\n"
        );
        // Up to 5 (f) moves MDT1 only.
        m.clear("cl1", 5).unwrap();
        let clears = std::fs::read_to_string(dir.path().join("clears")).unwrap();
        assert_eq!(clears.lines().last(), Some("fs0-MDT0001 cl1 9"));
        assert_eq!(clears.lines().count(), 3);
        // A restart from the checkpoint at 4 numbers what follows from 5 on, in the same order.
        let mut again = MergedChangelog::new(Box::new(lfs_over(dir.path())), &mdts);
        again.restore(4, &at4);
        let got = again.read(5, None, 10).unwrap();
        assert_eq!(names(&got.text), [(5, "f".into()), (6, "e".into()), (7, "g".into())]);
        assert!(again.take_lost().is_empty());
    }

    #[test]
    fn records_purged_on_one_mdt_are_reported_as_its_gap() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m0"), [record(105, 1, "x"), record(106, 2, "y")].concat()).unwrap();
        std::fs::write(dir.path().join("m1"), record(3, 3, "z")).unwrap();
        let mut m = MergedChangelog::new(Box::new(lfs_over(dir.path())), &["m0".to_string(), "m1".to_string()]);
        let at = vec![
            MdtPosition { mdt: "m0".into(), index: 100, time: 0 },
            MdtPosition { mdt: "m1".into(), index: 2, time: 0 },
        ];
        m.restore(40, &at);
        let got = m.read(41, None, 10).unwrap();
        assert_eq!(names(&got.text), [(41, "x".into()), (42, "y".into()), (43, "z".into())]);
        assert_eq!(m.take_lost(), [("m0".to_string(), 101, 104)]);
    }
}
