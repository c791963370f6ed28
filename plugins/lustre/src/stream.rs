//! One MDT's changelog as a [`ChangeStream`]: `lfs changelog` from the next index on,
//! `read_size` records a read (the changelog may start anywhere: [`crate::lfs`]), parsed where
//! they wait for their batch; gaps (records purged unread) are reported with their bounds,
//! lines that cannot be parsed kept as dead letters; `lfs changelog_clear` acknowledges.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use icicle_core::deadletter::DeadLetters;
use icicle_core::monitor::OnGap;
use icicle_core::monitor::{ChangeStream, Polled};
use icicle_core::IcicleError;

use crate::changelog::{leading_index, ChangelogRecord, RecordType};
use crate::config::{LustreConfig, MonitorCounts};
use crate::resolve::{with_retries, Lfs};

/// Reads one MDT's changelog and clears what was delivered.
pub struct ChangelogStream {
    pub cfg: Arc<LustreConfig>,
    pub lfs: Lfs,
    /// The component id (metrics labels).
    pub name: String,
    pub drain: bool,
    /// What reading and clearing counted (records, filtered, rejected, lost, clears).
    counts: MonitorCounts,
    filter: HashSet<String>,
    filter_bits: u32,
    /// The next index to ask for.
    next: u64,
    /// The index the next record must have; unknown until the first read when starting from
    /// nothing (records before a new user registered are not ours to miss).
    expect: Option<u64>,
    /// The highest index read, delivered or not.
    covered: Option<u64>,
    /// The last index cleared.
    cleared: u64,
    dead: DeadLetters,
}

fn internal(e: impl std::fmt::Display) -> IcicleError {
    IcicleError::Internal(e.to_string())
}

impl ChangelogStream {
    /// The stream after index `cleared` (0: nothing cleared yet), read through `lfs` (with
    /// several MDTs, their merged sequence: [`crate::dne`]).
    pub fn new(cfg: Arc<LustreConfig>, lfs: Lfs, name: String, drain: bool, cleared: u64) -> ChangelogStream {
        let filter: HashSet<String> = cfg.filter.iter().cloned().collect();
        let filter_bits =
            cfg.filter.iter().filter_map(|t| RecordType::from_name(t)).map(|t| t.bit()).fold(0, |a, b| a | b);
        // `startrec` is refused with `mdts` (an MDT's index, not the merged sequence's).
        let next = cfg.startrec.max(if cleared > 0 { cleared + 1 } else { 0 });
        let dead = DeadLetters::new(
            cfg.dead_letter.clone().unwrap_or_else(|| cfg.state_dir.join(format!("{}.dead-letters.jsonl", cfg.mdt))),
        );
        let labels = [("component", name.as_str()), ("mdt", cfg.mdt.as_str())];
        icicle_core::metrics::Metrics::global().set(
            &icicle_core::metrics::names::CHANGELOG_CLEARED,
            &labels,
            cleared as f64,
        );
        ChangelogStream {
            cfg,
            lfs,
            name,
            drain,
            counts: MonitorCounts { cleared_index: cleared, ..Default::default() },
            filter,
            filter_bits,
            next,
            expect: (next > 0).then_some(next),
            covered: None,
            cleared,
            dead,
        }
    }

    /// Record `i` was read: report the records missing before it (a gap) and expect `i + 1`.
    fn advance_expected(&mut self, i: u64, counts: &mut MonitorCounts) -> Result<(), IcicleError> {
        if let Some(e) = self.expect.filter(|e| i > *e) {
            self.on_gap(&self.cfg.mdt, e, i - 1, counts)?;
        }
        self.expect = Some(self.expect.map_or(i.saturating_add(1), |e| e.max(i.saturating_add(1))));
        Ok(())
    }

    /// Record `i` is read: what may be acknowledged and what is asked for next move past it.
    fn cover(&mut self, i: u64) {
        self.covered = Some(self.covered.map_or(i, |c| c.max(i)));
        self.next = self.next.max(i.saturating_add(1));
    }

    /// Records `first..=last` of `mdt` were purged before they were read.
    fn on_gap(&self, mdt: &str, first: u64, last: u64, counts: &mut MonitorCounts) -> Result<(), IcicleError> {
        let cfg = &self.cfg;
        let n = (last - first).saturating_add(1);
        counts.lost_records = counts.lost_records.saturating_add(n);
        if counts.lost_ranges.len() < crate::config::LOST_RANGES_KEPT {
            counts.lost_ranges.push([first, last]);
        }
        let labels = [("component", self.name.as_str()), ("mdt", cfg.mdt.as_str())];
        icicle_core::metrics::Metrics::global().set_counter(
            &icicle_core::metrics::names::CHANGELOG_LOST_RECORDS_TOTAL,
            &labels,
            counts.lost_records as f64,
        );
        let why = format!(
            "changelog records {first}..={last} of {mdt} were purged before they were read (another changelog user cleared them, or user {} was deregistered): \
             the index misses their changes until a snapshot run re-indexes the file system",
            cfg.user
        );
        if cfg.on_gap == OnGap::Fail {
            return Err(IcicleError::Source(icicle_core::SourceError::External(format!(
                "{why}; stopping (on_gap = \"fail\")"
            ))));
        }
        tracing::error!(message = "lost changelog records", mdt = %mdt, first, last, records = n, detail = %why);
        Ok(())
    }

    /// Keep an unparsable line; failing to keep it stops the monitor (nothing past it is
    /// acknowledged). Returns whether the line was new (not kept before).
    fn dead_letter(
        &mut self,
        position: &str,
        line: &str,
        reason: &str,
        counts: &mut MonitorCounts,
    ) -> Result<bool, IcicleError> {
        // A line not yet acknowledged is read again by the next poll: kept once.
        if !self.dead.first_time(position, line.as_bytes()) {
            return Ok(false);
        }
        self.dead.write(&self.cfg.mdt, position, line.as_bytes(), reason).map_err(|e| {
            internal(format!("{}: writing the dead-letter file {}: {e}", self.cfg.mdt, self.dead.path().display()))
        })?;
        counts.dead_letters += 1;
        Ok(true)
    }

    /// Take one read's records from `next` on, and keep the lines before the first record as
    /// dead letters; returns how many were new.
    fn take_all(
        &mut self,
        got: &crate::lfs::ChangelogText,
        next: u64,
        out: &mut Vec<ChangelogRecord>,
        counts: &mut MonitorCounts,
    ) -> Result<u64, IcicleError> {
        let mut new = self.take_lines(&got.text, next..=u64::MAX, out, counts)?;
        for line in &got.rejected {
            new += u64::from(self.dead_letter(
                "-",
                line,
                "no changelog record: a line before the first record lfs printed",
                counts,
            )?);
        }
        Ok(new)
    }

    /// Parse one range's text into `out`; returns how many lines were new (a parsed record,
    /// or a line kept for the first time: after a restart an unparsable record not yet
    /// acknowledged is read again and kept once).
    fn take_lines(
        &mut self,
        text: &str,
        asked: std::ops::RangeInclusive<u64>,
        out: &mut Vec<ChangelogRecord>,
        counts: &mut MonitorCounts,
    ) -> Result<u64, IcicleError> {
        let mut got = 0u64;
        for line in crate::changelog::lines(text).filter(|l| !l.trim().is_empty()) {
            // A line outside the range asked for is no record of ours: kept as a dead
            // letter, it moves nothing.
            let Some(i) = leading_index(line).filter(|i| asked.contains(i)) else {
                let reason = format!("not a changelog record from {} on", asked.start());
                got += u64::from(self.dead_letter("-", line, &reason, counts)?);
                continue;
            };
            if crate::changelog::line_type_bit(line.as_bytes()) & self.filter_bits != 0 {
                got += 1;
                self.advance_expected(i, counts)?;
                counts.records += 1;
                counts.filtered += 1;
                self.cover(i);
                continue;
            }
            // Parsed where it will wait for its batch.
            out.push(ChangelogRecord::empty());
            let last = out.len() - 1;
            match ChangelogRecord::parse_into(line, &mut out[last]) {
                Ok(()) => {
                    // Only a parsed record moves what may be acknowledged; an unparsable
                    // one is acknowledged with a later one.
                    got += 1;
                    self.advance_expected(i, counts)?;
                    self.cover(i);
                    counts.records += 1;
                    let filtered = match &out[last].kind {
                        RecordType::Unknown(_, name) => {
                            counts.unknown_types += 1;
                            self.filter.contains(name.as_str())
                        }
                        k => k.bit() & self.filter_bits != 0,
                    };
                    if filtered {
                        counts.filtered += 1;
                        out.pop();
                    }
                }
                Err(e) => {
                    out.pop();
                    // The record in sequence is not a gap; one further ahead moves nothing. It is
                    // not read again, but acknowledged only with a later one.
                    if self.expect == Some(i) {
                        self.expect = Some(i.saturating_add(1));
                    }
                    self.next = self.next.max(i.saturating_add(1));
                    if self.dead_letter(&i.to_string(), line, &e, counts)? {
                        got += 1;
                        counts.rejects += 1;
                        tracing::warn!(message = "rejected changelog record", mdt = %self.cfg.mdt, line = %line.escape_debug(), reason = %e);
                    }
                }
            }
        }
        Ok(got)
    }
}

#[async_trait]
impl ChangeStream for ChangelogStream {
    type Event = ChangelogRecord;
    type Position = u64;
    type Counts = MonitorCounts;

    async fn poll(
        &mut self,
        out: &mut Vec<ChangelogRecord>,
        _wait: Option<Duration>,
        stop: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<Polled, IcicleError> {
        let (mdt, read) = (self.cfg.mdt.clone(), self.cfg.read_size.max(1));
        let (next, lfs) = (self.next, &self.lfs);
        // From `next` on, wherever the changelog goes on: records purged below it are a gap.
        let got = with_retries("changelog", &mdt, self.cfg.lfs_retries, || lfs.changelog(&mdt, next, None, read))
            .await
            .map_err(|e| IcicleError::Source(icicle_core::SourceError::External(e)))?;
        // The counters are taken out while the lines are read, and put back even on an error.
        let mut counts = std::mem::take(&mut self.counts);
        // Several MDTs: lines no record's and gaps are each MDT's, found where the sequence
        // was read (by this poll or by the tree's read-ahead).
        let merged = self.lfs.merged.as_ref().map(|m| {
            let mut m = m.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            (m.take_rejected(), m.take_lost())
        });
        let (rejected, lost) = merged.unwrap_or_default();
        let got = crate::lfs::ChangelogText { rejected: [got.rejected, rejected].concat(), ..got };
        let mut taken = self.take_all(&got, next, out, &mut counts);
        for (mdt, first, last) in lost {
            if taken.is_ok() {
                if let Err(e) = self.on_gap(&mdt, first, last, &mut counts) {
                    taken = Err(e);
                }
            }
        }
        self.counts = counts;
        let got = taken?;
        if let Some(c) = self.covered {
            let labels = [("component", self.name.as_str()), ("mdt", mdt.as_str())];
            let m = icicle_core::metrics::Metrics::global();
            m.set(&icicle_core::metrics::names::CHANGELOG_INDEX, &labels, c as f64);
            m.set(&icicle_core::metrics::names::CHANGELOG_LAG, &labels, c.saturating_sub(self.cleared) as f64);
        }
        if got > 0 {
            return Ok(Polled::New);
        }
        if self.drain {
            return Ok(Polled::End);
        }
        tokio::select! {
            _ = tokio::time::sleep(icicle_core::time::secs(self.cfg.poll_interval_secs.max(0.01))) => {}
            _ = stop.changed() => {}
        }
        Ok(Polled::Idle)
    }

    fn position(&self, batch: &[ChangelogRecord], rest_empty: bool) -> Option<u64> {
        let upto = if rest_empty { self.covered.unwrap_or(0) } else { batch.last().map_or(0, |r| r.index) };
        (upto > self.cleared).then_some(upto)
    }

    fn counts(&self) -> MonitorCounts {
        self.counts.clone()
    }

    async fn truncate(&mut self, to: &u64) -> Result<(), IcicleError> {
        let (to, mdt, user, lfs) = (*to, &self.cfg.mdt, &self.cfg.user, &self.lfs);
        with_retries("changelog_clear", mdt, self.cfg.lfs_retries, || lfs.clear(mdt, user, to))
            .await
            .map_err(|e| IcicleError::Source(icicle_core::SourceError::External(e)))?;
        self.cleared = to;
        self.counts.cleared_index = to;
        self.counts.clears += 1;
        let labels = [("component", self.name.as_str()), ("mdt", mdt.as_str())];
        let m = icicle_core::metrics::Metrics::global();
        // The lag moves first, so no reader sees the new position beside the old lag.
        if let Some(c) = self.covered {
            m.set(&icicle_core::metrics::names::CHANGELOG_LAG, &labels, c.saturating_sub(to) as f64);
        }
        m.set(&icicle_core::metrics::names::CHANGELOG_CLEARED, &labels, to as f64);
        Ok(())
    }
}
