//! Where records start in `lfs changelog` output.
//!
//! `lfs changelog` prints each record as one line ending in its names, written `%.*s` as the
//! file system holds them (lustre-release `lustre/utils/lfs.c`, `lfs_changelog()`). A name
//! may hold a newline, so one record can print as several lines, and a name can hold text
//! shaped like a record of its own (`\n9999999 01CREAT ...`). Only the indexes tell records
//! apart: `lfs` prints them strictly increasing, and the first line it prints starts a record.
//!
//! A line that starts with an index and a space starts a record when its index is past the
//! last start's. A line whose index is not (it cannot be a real record after those starts),
//! and a line without an index, is part of a name,
//! unless it is the real next record and the starts it undercuts were forged inside the
//! record before: then it is within one record's length of that record, and asking `lfs`
//! for the record at its index (`lfs changelog MDT J`, one line) settles it. The same check
//! settles the line a read stops at (past its count or its end) and, at the end of the
//! output, the last start. What stays undecidable is a forged line whose index falls in a
//! real gap between two records' indexes, followed by the real record after the gap.
//!
//! A line that would continue a record whose text holds no name yet (no `p=[FID] `) is no
//! part of a name: it is passed on alone, and the parser rejects it (a dead letter).

/// The longest output line a real record can print, with margin: names take at most
/// `2 * NAME_MAX + 2` bytes (`CR_MAXSIZE`, `lustre/include/uapi/linux/lustre/lustre_user.h`)
/// and the fixed fields (index, type, times, flags, FIDs, uid/gid, NID, open mode, xattr
/// name, jobid) well under 1 KiB.
pub(crate) const MAX_RECORD_BYTES: usize = 4096;

/// Lines a read takes past its count to finish the record it is in (a real record prints at
/// most `2 * NAME_MAX + 2` newlines in its names).
const LINES_TO_FINISH_A_RECORD: u64 = 1024;

/// Asks `lfs` whether its record `j` prints `line` first (`lfs changelog MDT J`).
pub(crate) type Verify<'a> = dyn FnMut(u64, &[u8]) -> Result<bool, String> + 'a;

/// One record's start in the read's buffer.
#[derive(Debug)]
struct Start {
    /// Offset of its first byte.
    at: usize,
    index: u64,
    /// Whether `lfs` printed a record with this index and first line on its own.
    verified: bool,
    /// A line that is no record and no part of a name (its index is the start's before it).
    junk: bool,
}

/// What [`Splitter::push`] did with a line.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// The line belongs to the read (a record's start or part of a name).
    Line,
    /// The line is a real record past what the read asked for: not taken.
    Next,
}

/// `lfs changelog` output split into records as it is read.
#[derive(Debug, Default)]
pub(crate) struct Splitter {
    /// Every line taken, each followed by `\n`.
    buf: Vec<u8>,
    /// Lines before the first record-shaped one: each passed on alone (the parser rejects them).
    loose: Vec<std::ops::Range<usize>>,
    starts: Vec<Start>,
    /// Lines taken.
    pub lines: u64,
}

impl Splitter {
    /// Take one line (without its `\n`). `stop` says whether a record starting here would be
    /// past what the read asked for; `verify(j, line)` asks `lfs` whether its record `j` prints
    /// `line` first.
    pub fn push(&mut self, line: &[u8], stop: impl Fn(u64) -> bool, verify: &mut Verify<'_>) -> Result<Taken, String> {
        let Some(j) = record_index(line) else {
            self.append(line, Unit::Continuation);
            return Ok(Taken::Line);
        };
        let Some(last) = self.starts.last() else {
            if stop(j) {
                return Ok(Taken::Next);
            }
            self.append(line, Unit::Start(j, true));
            return Ok(Taken::Line);
        };
        if j > last.index {
            if !stop(j) {
                self.append(line, Unit::Start(j, false));
                return Ok(Taken::Line);
            }
            if verify(j, line)? {
                return Ok(Taken::Next);
            }
            self.append(line, Unit::Continuation);
            return Ok(Taken::Line);
        }
        // Not past the last start: part of a name, or the real next record after starts
        // forged inside the record before them.
        let p = self.starts.partition_point(|s| s.index < j);
        let undercut_verified = self.starts[p..].iter().any(|s| s.verified && !s.junk);
        let from_record = if p == 0 { usize::MAX } else { self.buf.len() - self.starts[p - 1].at };
        if undercut_verified || from_record > MAX_RECORD_BYTES || !verify(j, line)? {
            self.append(line, Unit::Continuation);
            return Ok(Taken::Line);
        }
        self.starts.truncate(p);
        if stop(j) {
            return Ok(Taken::Next);
        }
        self.append(line, Unit::Start(j, true));
        Ok(Taken::Line)
    }

    /// At the end of the output: the last start, unless it is the first, is checked with
    /// `lfs` (no later record can undercut a forged one).
    pub fn finish(&mut self, verify: &mut Verify<'_>) -> Result<(), String> {
        while self.starts.len() >= 2 {
            let last = self.starts.len() - 1;
            if self.starts[last].verified || self.starts[last].junk {
                break;
            }
            let (at, index) = (self.starts[last].at, self.starts[last].index);
            let first_line = self.buf[at..].split(|&b| b == b'\n').next().unwrap_or_default().to_vec();
            if verify(index, &first_line)? {
                self.starts[last].verified = true;
            } else {
                self.starts.pop();
            }
        }
        Ok(())
    }

    /// Drop the last record (the read stopped inside it); the others are whole.
    pub fn drop_last(&mut self) {
        if self.starts.len() >= 2 {
            if let Some(s) = self.starts.pop() {
                self.buf.truncate(s.at);
            }
        }
    }

    /// Records, one per line: each escaped ([`icicle_core::name::escape`]), so a newline in
    /// a name reads `\x0a`; and their count.
    pub fn into_text(self) -> (String, u64) {
        let mut out = String::with_capacity(self.buf.len() + 16);
        let mut n = 0;
        let mut emit = |r: std::ops::Range<usize>, out: &mut String| {
            let body = &self.buf[r];
            icicle_core::name::escape_into(body.strip_suffix(b"\n").unwrap_or(body), out);
            out.push('\n');
            n += 1;
        };
        for r in &self.loose {
            emit(r.clone(), &mut out);
        }
        for (k, s) in self.starts.iter().enumerate() {
            let end = self.starts.get(k + 1).map_or(self.buf.len(), |t| t.at);
            emit(s.at..end, &mut out);
        }
        (out, n)
    }

    fn append(&mut self, line: &[u8], unit: Unit) {
        let at = self.buf.len();
        let unit = match (unit, self.starts.last()) {
            (Unit::Continuation, None) => {
                self.loose.push(at..at + line.len() + 1);
                Unit::Continuation
            }
            (Unit::Continuation, Some(last)) if !holds_a_name(&self.buf[last.at..]) => Unit::Junk(last.index),
            (u, _) => u,
        };
        match unit {
            Unit::Start(index, verified) => self.starts.push(Start { at, index, verified, junk: false }),
            Unit::Junk(index) => self.starts.push(Start { at, index, verified: false, junk: true }),
            Unit::Continuation => {}
        }
        self.buf.extend_from_slice(line);
        self.buf.push(b'\n');
        self.lines += 1;
    }
}

/// What a line taken is.
enum Unit {
    /// A record's first line: its index, and whether `lfs` printed it on its own.
    Start(u64, bool),
    /// Part of the last record's names.
    Continuation,
    /// Neither (the index of the record before it).
    Junk(u64),
}

/// Whether a record's text so far has a name under way: a parent FID and the space before a
/// name (`p=[FID] `, `lfs_changelog()`; a rename's second name follows `sp=[FID] `).
fn holds_a_name(record: &[u8]) -> bool {
    let Some(p) = memchr::memmem::find(record, b" p=[") else { return false };
    memchr::memmem::find(&record[p..], b"] ").is_some()
}

/// A read's records and how it ended.
#[derive(Debug)]
pub(crate) struct Records {
    pub split: Splitter,
    /// It stopped at its count: the changelog may go on.
    pub more: bool,
    /// The output ended (the last start is still to be checked, [`Splitter::finish`]).
    pub eof: bool,
}

/// Split lines from `next_line` (which appends one line with its `\n` and returns its length,
/// 0 at the end) into records: none past `end`, and after `max` lines only the rest of the
/// record they end in.
pub(crate) fn read_records(
    next_line: &mut dyn FnMut(&mut Vec<u8>) -> std::io::Result<usize>,
    end: Option<u64>,
    max: u64,
    verify: &mut Verify<'_>,
) -> Result<Records, String> {
    let mut split = Splitter::default();
    let mut line = Vec::with_capacity(256);
    let past_end = |j: u64| end.is_some_and(|e| j > e);
    loop {
        line.clear();
        if next_line(&mut line).map_err(|e| e.to_string())? == 0 {
            return Ok(Records { split, more: false, eof: true });
        }
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        let taken = split.lines;
        match split.push(body, |j| taken >= max || past_end(j), verify)? {
            Taken::Next => {
                let more = !record_index(body).is_some_and(past_end);
                return Ok(Records { split, more, eof: false });
            }
            Taken::Line if split.lines >= max.saturating_add(LINES_TO_FINISH_A_RECORD) => {
                split.drop_last();
                return Ok(Records { split, more: true, eof: false });
            }
            Taken::Line => {}
        }
    }
}

/// The index a line starts with, as a record's does (`"%llu "` in `lfs_changelog()`): a
/// candidate record, whatever follows (the parser judges the rest).
pub(crate) fn record_index(line: &[u8]) -> Option<u64> {
    let sp = line.iter().position(|&b| b == b' ')?;
    let digits = &line[..sp];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
#[path = "lfs_records_tests.rs"]
mod tests;
