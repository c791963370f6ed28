//! Where records start in `lfs changelog` output.
//!
//! `lfs changelog` prints each record as one line, its names (and jobid, xattr name) written
//! as the file system holds them (`%.*s`, lustre-release `lustre/utils/lfs.c`,
//! `lfs_changelog()`). A name may hold a newline, so one record can print as several lines,
//! and a name can hold text shaped like a record of its own (`\n9999999 01CREAT ...`). Only
//! the indexes tell records apart: `lfs` prints them strictly increasing, and the first line
//! it prints starts a record.
//!
//! A line that starts with an index and a space starts a record when its index is past the
//! last start's. Any other line is part of the record before, unless it is the real next
//! record and the starts it undercuts were forged inside that record: then it is within one
//! record's length of that record, and asking `lfs` for the record at its index (`lfs
//! changelog MDT J`, its first line) settles it. The same check settles the line a read stops
//! at (past its count or its end) and, at the end of the output, the last start. What stays
//! undecidable is a forged line whose index falls in a real gap between two records' indexes,
//! followed by the real record after the gap.
//!
//! Checks are cached (one answer covers every index up to the record it names) and bounded
//! per read ([`Checks`]): past the bound a read stops at the next record it can check, as at
//! the end of its count, and the next read goes on from there.

/// The longest output line a real record can print, with margin: names take at most
/// `2 * NAME_MAX + 2` bytes (`CR_MAXSIZE`, `lustre/include/uapi/linux/lustre/lustre_user.h`)
/// and the fixed fields (index, type, times, flags, FIDs, uid/gid, NID, open mode, xattr
/// name, jobid) well under 1 KiB.
pub(crate) const MAX_RECORD_BYTES: usize = 4096;

/// Lines a read takes past its count to finish the record it is in (a real record prints at
/// most `2 * NAME_MAX + 2` newlines in its names).
const LINES_TO_FINISH_A_RECORD: u64 = 1024;

/// Checks with `lfs` one read may make before it stops at the next record it can check.
pub(crate) const CHECKS_PER_READ: u32 = 64;

/// Checks with `lfs` a read may make to stop at the next record once it made its
/// [`CHECKS_PER_READ`]: the lines of one record (at most `2 * NAME_MAX + 2` bytes of names)
/// need fewer.
const CHECKS_TO_STOP: u32 = 1024;

/// Why a check gave no answer.
#[derive(Debug)]
pub(crate) enum CheckError {
    /// `lfs` failed.
    Lfs(String),
    /// The read made its [`CHECKS_PER_READ`]: it stops at the next record it can check (the
    /// check is asked again, from what is left for that).
    OverBudget,
}

/// Answers whether the real record `j` prints `line` first.
pub(crate) type Verify<'a> = dyn FnMut(u64, &[u8]) -> Result<bool, CheckError> + 'a;

/// A record's index and first line, as `lfs` printed it.
type FirstRecord = (u64, Vec<u8>);

/// One read's checks with `lfs`: each answer of `lfs changelog MDT J` (the first record at or
/// after J) kept, and a bound on how many are asked.
#[derive(Debug)]
pub(crate) struct Checks {
    /// (J, the first record at or after J; None: there was none).
    answers: Vec<(u64, Option<FirstRecord>)>,
    left: u32,
    /// The read is stopping: `left` is what [`CHECKS_TO_STOP`] left.
    stopping: bool,
}

impl Checks {
    /// At most `budget` questions to `lfs`.
    pub fn new(budget: u32) -> Checks {
        Checks { answers: Vec::new(), left: budget, stopping: false }
    }

    /// Whether the real record `j` prints `line` first; `first_line(J)` asks `lfs` for the
    /// first line it prints from J on.
    pub fn check(
        &mut self,
        j: u64,
        line: &[u8],
        first_line: &mut dyn FnMut(u64) -> Result<Option<Vec<u8>>, String>,
    ) -> Result<bool, CheckError> {
        // lfs reads START with strtoll: no real index is past i64::MAX.
        if j > i64::MAX as u64 {
            return Ok(false);
        }
        let known = self.answers.iter().find(|(from, first)| *from <= j && first.as_ref().is_none_or(|(k, _)| j <= *k));
        if let Some((_, first)) = known {
            return Ok(first.as_ref().is_some_and(|(k, l)| *k == j && l == line));
        }
        if self.left == 0 {
            if self.stopping {
                return Err(CheckError::Lfs(format!(
                    "more than {CHECKS_TO_STOP} checks of one record's lines (a name forging records)"
                )));
            }
            self.stopping = true;
            self.left = CHECKS_TO_STOP;
            return Err(CheckError::OverBudget);
        }
        self.left -= 1;
        let first = first_line(j).map_err(CheckError::Lfs)?.and_then(|l| Some((record_index(&l)?, l)));
        let real = first.as_ref().is_some_and(|(k, l)| *k == j && l == line);
        self.answers.push((j, first));
        Ok(real)
    }
}

/// One record's start in the read's buffer.
#[derive(Debug)]
struct Start {
    /// Offset of its first byte.
    at: usize,
    index: u64,
    /// Whether `lfs` printed a record with this index and first line on its own.
    verified: bool,
}

/// What [`Splitter::push`] did with a line.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// The line belongs to the read (a record's start or part of one).
    Line,
    /// The line is a real record past what the read asked for: not taken.
    Next,
}

/// `lfs changelog` output split into records as it is read.
#[derive(Debug, Default)]
pub(crate) struct Splitter {
    /// Every line taken, each followed by `\n`.
    buf: Vec<u8>,
    /// Lines before the first that starts with an index: no record's (`lfs` prints none).
    loose: Vec<std::ops::Range<usize>>,
    starts: Vec<Start>,
    /// Lines taken.
    pub lines: u64,
}

impl Splitter {
    /// Take one line (without its `\n`). `stop` says whether a record starting here would be
    /// past what the read asked for.
    pub fn push(
        &mut self,
        line: &[u8],
        stop: impl Fn(u64) -> bool,
        verify: &mut Verify<'_>,
    ) -> Result<Taken, CheckError> {
        let Some(j) = record_index(line) else {
            self.append(line, None);
            return Ok(Taken::Line);
        };
        let Some(last) = self.starts.last() else {
            if stop(j) {
                return Ok(Taken::Next);
            }
            self.append(line, Some((j, true)));
            return Ok(Taken::Line);
        };
        if j > last.index {
            if !stop(j) {
                self.append(line, Some((j, false)));
                return Ok(Taken::Line);
            }
            if verify(j, line)? {
                return Ok(Taken::Next);
            }
            self.append(line, None);
            return Ok(Taken::Line);
        }
        // Not past the last start: part of a name, or the real next record after starts
        // forged inside the record before them.
        let p = self.starts.partition_point(|s| s.index < j);
        let undercut_verified = self.starts[p..].iter().any(|s| s.verified);
        let from_record = if p == 0 { usize::MAX } else { self.buf.len() - self.starts[p - 1].at };
        if undercut_verified || from_record > MAX_RECORD_BYTES || !verify(j, line)? {
            self.append(line, None);
            return Ok(Taken::Line);
        }
        self.starts.truncate(p);
        if stop(j) {
            return Ok(Taken::Next);
        }
        self.append(line, Some((j, true)));
        Ok(Taken::Line)
    }

    /// At the end of the output: the last start, unless it is the first, is checked with
    /// `lfs` (no later record can undercut a forged one); a forged one joins the record before.
    /// Out of checks, it goes on with what is left to stop ([`CheckError::OverBudget`]).
    pub fn finish(&mut self, verify: &mut Verify<'_>) -> Result<(), String> {
        match self.finish_once(verify) {
            Err(CheckError::OverBudget) => self.finish_once(verify),
            other => other,
        }
        .map_err(|e| match e {
            CheckError::Lfs(e) => e,
            CheckError::OverBudget => "a check asked for more checks".into(),
        })
    }

    fn finish_once(&mut self, verify: &mut Verify<'_>) -> Result<(), CheckError> {
        while self.starts.len() >= 2 {
            let last = self.starts.len() - 1;
            if self.starts[last].verified {
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
    /// a name reads `\x0a`; and the lines that are no record's (before the first record).
    pub fn into_text(self) -> (String, Vec<String>) {
        let mut out = String::with_capacity(self.buf.len() + 16);
        for (k, s) in self.starts.iter().enumerate() {
            let end = self.starts.get(k + 1).map_or(self.buf.len(), |t| t.at);
            let body = &self.buf[s.at..end];
            icicle_core::name::escape_into(body.strip_suffix(b"\n").unwrap_or(body), &mut out);
            out.push('\n');
        }
        let loose =
            self.loose.iter().map(|r| icicle_core::name::escape(&self.buf[r.start..r.end - 1]).into_owned()).collect();
        (out, loose)
    }

    fn append(&mut self, line: &[u8], start: Option<(u64, bool)>) {
        let at = self.buf.len();
        self.buf.extend_from_slice(line);
        self.buf.push(b'\n');
        self.lines += 1;
        match start {
            Some((index, verified)) => self.starts.push(Start { at, index, verified }),
            None if self.starts.is_empty() => self.loose.push(at..self.buf.len()),
            None => {}
        }
    }
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
/// 0 at the end) into records: none past `end`, and after `max` lines (or
/// [`CHECKS_PER_READ`] checks) only the rest of the record they end in.
pub(crate) fn read_records(
    next_line: &mut dyn FnMut(&mut Vec<u8>) -> std::io::Result<usize>,
    end: Option<u64>,
    max: u64,
    verify: &mut Verify<'_>,
) -> Result<Records, String> {
    let mut split = Splitter::default();
    let mut line = Vec::with_capacity(256);
    let past_end = |j: u64| end.is_some_and(|e| j > e);
    let mut stopping = false;
    loop {
        line.clear();
        if next_line(&mut line).map_err(|e| e.to_string())? == 0 {
            return Ok(Records { split, more: false, eof: true });
        }
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        let taken = split.lines;
        let mut pushed = split.push(body, |j| stopping || taken >= max || past_end(j), verify);
        if matches!(pushed, Err(CheckError::OverBudget)) {
            // Out of checks: stop at the next record that can be checked, this line first.
            stopping = true;
            pushed = split.push(body, |_| true, verify);
        }
        match pushed {
            Ok(Taken::Next) => {
                let more = !record_index(body).is_some_and(past_end);
                return Ok(Records { split, more, eof: false });
            }
            Ok(Taken::Line) if split.lines >= max.saturating_add(LINES_TO_FINISH_A_RECORD) => {
                split.drop_last();
                return Ok(Records { split, more: true, eof: false });
            }
            Ok(Taken::Line) => {}
            Err(CheckError::OverBudget) => return Err("a check asked for more checks".into()),
            Err(CheckError::Lfs(e)) => return Err(e),
        }
    }
}

/// `output` read as one `lfs changelog` read would read it, `lfs changelog MDT J` answered
/// from `output` itself (its first line from the first line whose index is at least J): the
/// records and the lines before them (each escaped), and whether the read stopped early. For
/// the fuzz harness.
pub fn split_output(output: &[u8], end: Option<u64>, max: u64) -> Result<(Vec<String>, Vec<String>, bool), String> {
    let mut at = 0;
    let mut next_line = |buf: &mut Vec<u8>| -> std::io::Result<usize> {
        let rest = &output[at..];
        let n = memchr::memchr(b'\n', rest).map_or(rest.len(), |p| p + 1);
        buf.extend_from_slice(&rest[..n]);
        at += n;
        Ok(n)
    };
    let mut first_line = |from: u64| -> Result<Option<Vec<u8>>, String> {
        let line = output.split(|&b| b == b'\n').find(|l| record_index(l).is_some_and(|i| i >= from));
        Ok(line.map(<[u8]>::to_vec))
    };
    let mut checks = Checks::new(CHECKS_PER_READ);
    let mut verify = |j: u64, line: &[u8]| checks.check(j, line, &mut first_line);
    let got = read_records(&mut next_line, end, max, &mut verify)?;
    let mut split = got.split;
    if got.eof {
        split.finish(&mut verify)?;
    }
    let (text, loose) = split.into_text();
    Ok((text.lines().map(str::to_string).collect(), loose, got.more))
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
mod tests;
