//! How the Lustre property test reads a round's records: one MDT's changelog as the journal
//! holds it, or (DNE) every MDT's own changelog merged into one sequence by the monitor's
//! [`MergedChangelog`], each MDT read at a different moment while the workload goes on.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use icicle_plugins_lustre::changelog::{leading_index, ChangelogRecord};
use icicle_plugins_lustre::dne::{ChangelogSource, ChangelogText, MergedChangelog};
use icicle_testkit::gen::Rng;
use icicle_testkit::lustre::{mdt_journal, Workload};

/// Each MDT's changelog as written so far, shown up to a frontier in the order the records
/// were written that moves on by a few records at every read: a record written on one MDT
/// after another MDT was read is seen by the next read of its own.
#[derive(Debug)]
pub struct Frontier {
    state: Mutex<FrontierState>,
}

/// A record of one MDT's changelog: its position in the order written, its index, its line.
type Written = (u64, u64, String);

#[derive(Debug)]
struct FrontierState {
    /// Per MDT: its records.
    mdts: Vec<(String, Vec<Written>)>,
    shown: u64,
    written: u64,
    rng: Rng,
}

impl Frontier {
    fn lock(&self) -> std::sync::MutexGuard<'_, FrontierState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ChangelogSource for Frontier {
    fn changelog(&self, mdt: &str, start: u64, _end: Option<u64>, max: u64) -> Result<ChangelogText, String> {
        let mut s = self.lock();
        let step = s.rng.below(6);
        s.shown = (s.shown + step).min(s.written);
        let shown = s.shown;
        let lines = &s.mdts.iter().find(|(n, _)| n == mdt).ok_or(format!("no MDT {mdt}"))?.1;
        let visible: Vec<&Written> = lines.iter().filter(|(at, i, _)| *at < shown && *i >= start).collect();
        let text: String = visible.iter().take(max as usize).map(|(_, _, l)| format!("{l}\n")).collect();
        Ok(ChangelogText { text, more: visible.len() as u64 > max, rejected: Vec::new() })
    }

    fn clear(&self, _mdt: &str, _user: &str, _endrec: u64) -> Result<(), String> {
        Ok(())
    }
}

/// The records of one round and what the read-ahead sees.
pub struct Round {
    /// The records read this round, in the monitor's order.
    pub records: Vec<ChangelogRecord>,
    /// Every record read so far, one a line, numbered as the monitor numbers them.
    pub text: String,
    /// The last number read.
    pub last: u64,
}

/// One MDT's journal, or several merged.
pub enum Feed {
    One { journal: PathBuf, read: usize },
    Merged { journal: PathBuf, frontier: Arc<Frontier>, merged: Box<MergedChangelog>, text: String, next: u64 },
}

impl Feed {
    /// Read `journal` (with `mdts` > 1, its MDTs' changelogs next to it).
    pub fn new(journal: &Path, mdts: u32, seed: u64) -> Feed {
        if mdts <= 1 {
            return Feed::One { journal: journal.to_path_buf(), read: 0 };
        }
        let names: Vec<String> = (0..mdts).map(|n| format!("fs0-MDT{n:04x}")).collect();
        let frontier = Arc::new(Frontier {
            state: Mutex::new(FrontierState {
                mdts: names.iter().map(|n| (n.clone(), Vec::new())).collect(),
                shown: 0,
                written: 0,
                rng: Rng::new(seed ^ 0xf207),
            }),
        });
        let merged = Box::new(MergedChangelog::new(Box::new(frontier.clone()), &names));
        Feed::Merged { journal: journal.to_path_buf(), frontier, merged, text: String::new(), next: 1 }
    }

    /// Everything written since the last round, as the monitor reads it.
    pub fn round(&mut self, w: &Workload) -> Result<Round, String> {
        match self {
            Feed::One { journal, read } => {
                let text = std::fs::read_to_string(journal).map_err(|e| e.to_string())?;
                let lines: Vec<&str> = text.lines().collect();
                let records = lines[*read..].iter().map(|l| ChangelogRecord::parse(l)).collect::<Result<_, _>>()?;
                *read = lines.len();
                Ok(Round { records, text: text.clone(), last: w.ns.last_index.unwrap_or(0) })
            }
            Feed::Merged { journal, frontier, merged, text, next } => {
                let written = written_by_mdt(journal, w)?;
                {
                    let mut s = frontier.lock();
                    s.written = written.iter().map(|l| l.len() as u64).sum();
                    for (slot, lines) in s.mdts.iter_mut().zip(written) {
                        slot.1 = lines;
                    }
                }
                let mut records = Vec::new();
                loop {
                    let got = merged.read(*next, None, 50)?;
                    for line in got.text.lines() {
                        records.push(ChangelogRecord::parse(line)?);
                        text.push_str(line);
                        text.push('\n');
                        *next += 1;
                    }
                    // Everything written is shown, and a read found nothing left to number.
                    let s = frontier.lock();
                    if got.text.is_empty() && !got.more && s.shown == s.written {
                        break;
                    }
                }
                if std::env::var("ICICLE_PROPERTY_KEEP").is_ok() {
                    let _ = std::fs::create_dir_all("/tmp/property-keep");
                    let _ = std::fs::write("/tmp/property-keep/merged.txt", text.as_bytes());
                }
                Ok(Round { records, text: text.clone(), last: *next - 1 })
            }
        }
    }
}

/// Each MDT's changelog lines with their place in the order the workload wrote them (the
/// journal's), by the stand-in's rule for which MDT logs a record (striped directories' shards
/// included).
fn written_by_mdt(journal: &Path, w: &Workload) -> Result<Vec<Vec<Written>>, String> {
    let m = w.mdts.as_ref().ok_or("one MDT")?;
    let all = std::fs::read_to_string(journal).map_err(|e| e.to_string())?;
    let mut order: Vec<Vec<u64>> = vec![Vec::new(); m.count() as usize];
    for (at, line) in all.lines().enumerate() {
        let rec = ChangelogRecord::parse(line)?;
        order[m.logged_on(&rec) as usize].push(at as u64);
    }
    let mut out = Vec::new();
    for (n, at) in order.into_iter().enumerate() {
        let text = std::fs::read_to_string(mdt_journal(journal, n as u32)).map_err(|e| e.to_string())?;
        let lines: Vec<(u64, u64, String)> =
            text.lines().zip(at).map(|(l, at)| (at, leading_index(l).unwrap_or(0), l.to_string())).collect();
        out.push(lines);
    }
    Ok(out)
}
