//! Reading catalog text: records split by their first line, each parsed with the line number
//! of every problem.

use super::*;

pub(super) enum Record {
    Entry(CatalogEntry),
    Gone(CatalogGone),
}

/// Whether a line starts a record (`lstat` or `gone`).
pub(super) fn starts_record(l: &[u8]) -> bool {
    l == b"lstat" || l == b"gone"
}

pub(super) fn clip(s: &str) -> String {
    let mut end = s.len().min(60);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    if end < s.len() {
        format!("{}...", &s[..end])
    } else {
        s.to_string()
    }
}

pub(super) struct Lines<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) pos: usize,
    pub(super) line: usize,
}

/// The index of the first newline in `b` (eight bytes at a time).
pub(super) fn find_newline(b: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut words = b.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let x = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]) ^ (LO * u64::from(b'\n'));
        if x.wrapping_sub(LO) & !x & HI != 0 {
            return w.iter().position(|&c| c == b'\n').map(|i| at + i);
        }
        at += 8;
    }
    words.remainder().iter().position(|&c| c == b'\n').map(|i| at + i)
}

impl<'a> Lines<'a> {
    /// The line at the current position (without its `\r\n` or `\n`) and the bytes it spans.
    fn current(&self) -> Option<(&'a [u8], usize)> {
        let rest = self.bytes.get(self.pos..).filter(|r| !r.is_empty())?;
        let (raw, used) = match find_newline(rest) {
            Some(len) => (&rest[..len], len + 1),
            None => (rest, rest.len()),
        };
        match raw {
            [head @ .., b'\r'] => Some((head, used)),
            l => Some((l, used)),
        }
    }

    fn take(&mut self, raw: &'a [u8], used: usize) -> (usize, Result<&'a str, String>) {
        self.pos += used;
        self.line += 1;
        (self.line, std::str::from_utf8(raw).map_err(|e| format!("line is not UTF-8 ({e})")))
    }

    /// The next line (1-based number, text or a UTF-8 error).
    pub(super) fn next_line(&mut self) -> Option<(usize, Result<&'a str, String>)> {
        let (raw, used) = self.current()?;
        Some(self.take(raw, used))
    }

    pub(super) fn peek_line(&self) -> Option<&'a [u8]> {
        self.current().map(|(l, _)| l)
    }

    pub(super) fn skip_to_entry(&mut self) {
        while let Some(l) = self.peek_line() {
            if starts_record(l) {
                return;
            }
            let _ = self.next_line();
            if l == b"end" {
                return;
            }
        }
    }

    /// The next line of this entry; a line `lstat` or `gone` starts the next record (this
    /// one was cut short) and is left for it.
    pub(super) fn need(&mut self, what: &str) -> Result<(usize, &'a str), (usize, String)> {
        self.need_lazy(&|| what.to_string())
    }

    fn need_lazy(&mut self, what: &dyn Fn() -> String) -> Result<(usize, &'a str), (usize, String)> {
        let Some((raw, used)) = self.current() else {
            return Err((self.line, format!("truncated entry: end of file where {} was expected", what())));
        };
        if starts_record(raw) {
            let kw = String::from_utf8_lossy(raw);
            return Err((
                self.line + 1,
                format!("truncated entry: a new entry (`{kw}`) where {} was expected", what()),
            ));
        }
        match self.take(raw, used) {
            (n, Err(e)) => Err((n, e)),
            (n, Ok(l)) => Ok((n, l)),
        }
    }

    pub(super) fn keyword(&mut self, kw: &str) -> Result<(), (usize, String)> {
        let (n, l) = self.need_lazy(&|| format!("`{kw}`"))?;
        if l == kw {
            Ok(())
        } else {
            Err((n, format!("expected `{kw}`, found `{}`", clip(l))))
        }
    }
}

/// The stat fields of a line exactly as [`StatFields`]' writer formats it (`st_dev:N; ...`,
/// all thirteen in order); `None` for anything else, which the general parser then reads.
pub(super) fn parse_stat_canonical(line: &str) -> Option<StatFields> {
    fn field<'a>(rest: &mut &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
        let r = rest.strip_prefix(key)?;
        let len = r.iter().position(|&c| c == b';').unwrap_or(r.len());
        let (v, tail) = r.split_at(len);
        *rest = tail.strip_prefix(b"; ").unwrap_or(tail);
        (!v.is_empty()).then_some(v)
    }
    fn num(v: &[u8], radix: u64) -> Option<u64> {
        // `-` alone is no number (the empty field is refused by `field`).
        if v.is_empty() {
            return None;
        }
        v.iter().try_fold(0u64, |acc, &c| {
            let d = u64::from(c.wrapping_sub(b'0'));
            (d < radix).then_some(())?;
            acc.checked_mul(radix)?.checked_add(d)
        })
    }
    fn signed(v: &[u8]) -> Option<i64> {
        match v.strip_prefix(b"-") {
            Some(m) => num(m, 10).and_then(|n| 0i64.checked_sub_unsigned(n)),
            None => num(v, 10).and_then(|n| i64::try_from(n).ok()),
        }
    }
    let mut r = line.as_bytes();
    let mut u = |key: &[u8]| field(&mut r, key).and_then(|v| num(v, 10));
    let (dev, ino) = (u(b"st_dev:")?, u(b"st_ino:")?);
    let mode = field(&mut r, b"st_mode:").and_then(|v| num(v, 8)).and_then(|m| u32::try_from(m).ok())?;
    let mut u = |key: &[u8]| field(&mut r, key).and_then(|v| num(v, 10));
    let nlink = u(b"st_nlink:")?;
    let uid = u32::try_from(u(b"st_uid:")?).ok()?;
    let gid = u32::try_from(u(b"st_gid:")?).ok()?;
    let (rdev, size, blksize, blocks) = (u(b"st_rdev:")?, u(b"st_size:")?, u(b"st_blksize:")?, u(b"st_blocks:")?);
    let mut t = |key: &[u8]| field(&mut r, key).and_then(signed);
    let (atime, mtime, ctime) = (t(b"st_atime:")?, t(b"st_mtime:")?, t(b"st_ctime:")?);
    r.is_empty().then_some(StatFields {
        dev,
        ino,
        mode,
        nlink,
        uid,
        gid,
        rdev,
        size,
        blksize,
        blocks,
        atime,
        mtime,
        ctime,
    })
}

pub(super) fn parse_entry(lines: &mut Lines<'_>) -> Result<CatalogEntry, (usize, String)> {
    let (n, path) = lines.need("a path")?;
    if path.is_empty() {
        return Err((n, "empty path".into()));
    }
    let (n, fields) = lines.need("the lstat fields")?;
    let lstat = StatFields::parse(fields).map_err(|e| (n, e))?;
    lines.keyword("stat")?;
    let (n, l) = lines.need("a path or `None`")?;
    let stat = if l == "None" {
        None
    } else {
        if l != path {
            return Err((n, format!("stat path `{}` is not the entry's path", clip(l))));
        }
        let (n, fields) = lines.need("the stat fields")?;
        Some(StatFields::parse(fields).map_err(|e| (n, e))?)
    };
    lines.keyword("layout")?;
    let mut layout: Option<Vec<LayoutLine>> = Some(Vec::new());
    let mut first = true;
    loop {
        let (n, l) = lines.need("a layout line or `end`")?;
        if l == "end" {
            break;
        }
        if first && l == "None" {
            layout = None;
            lines.keyword("end")?;
            break;
        }
        first = false;
        let line = parse_layout_line(path, l).map_err(|e| (n, e))?;
        if let Some(v) = layout.as_mut() {
            v.push(line);
        }
    }
    let entry = CatalogEntry { path: path.to_string(), lstat, stat, layout };
    Ok(entry)
}

pub(super) fn parse_gone(lines: &mut Lines<'_>) -> Result<CatalogGone, (usize, String)> {
    let (n, path) = lines.need("a path")?;
    if path.is_empty() {
        return Err((n, "empty path".into()));
    }
    let (n, fields) = lines.need("the lstat fields")?;
    let stat = StatFields::parse(fields).map_err(|e| (n, e))?;
    lines.keyword("end")?;
    Ok(CatalogGone { path: path.to_string(), stat })
}

/// The largest stripe size a layout line may have (Lustre's limit is just under 4 GiB).
pub const MAX_STRIPE_SIZE: u64 = 1 << 32;

/// The largest stripe count a layout line may imply (Lustre's limit is 2,000).
pub const MAX_STRIPE_COUNT: u64 = 65_536;

pub(super) fn parse_layout_line(path: &str, l: &str) -> Result<LayoutLine, String> {
    // The path may hold spaces: the six numbers are the last six fields.
    let mut it = l.rsplitn(7, ' ');
    let mut nums = [0u64; 6];
    for (k, slot) in nums.iter_mut().rev().enumerate() {
        let tok = it.next().ok_or_else(|| format!("layout line has {k} of 6 numbers"))?;
        *slot = tok.parse().map_err(|e| format!("layout field `{}`: {e}", clip(tok)))?;
    }
    let p = it.next().ok_or("layout line has no path")?;
    if p != path {
        return Err(format!("layout line names `{}`, not the entry's path", clip(p)));
    }
    let [ost, start, end, interval, stripe_size, file_size] = nums;
    let ost = u32::try_from(ost).map_err(|_| format!("OST index {ost} out of range"))?;
    let line = LayoutLine { ost, start, end, interval, stripe_size, file_size };
    check_line(&line)?;
    Ok(line)
}

/// The rules every layout line obeys (the text reader's, the compact writer's and reader's).
pub(super) fn check_line(l: &LayoutLine) -> Result<(), String> {
    let LayoutLine { start, end, interval, stripe_size, file_size, .. } = *l;
    if stripe_size == 0 {
        return Err("layout line has stripe size 0".into());
    }
    if stripe_size > MAX_STRIPE_SIZE {
        return Err(format!("stripe size {stripe_size} is over {MAX_STRIPE_SIZE}"));
    }
    if interval == 0 || interval % stripe_size != 0 {
        return Err(format!("interval {interval} is not a multiple of stripe size {stripe_size}"));
    }
    if interval / stripe_size > MAX_STRIPE_COUNT {
        return Err(format!(
            "stripe count {} (interval / stripe size) is over {MAX_STRIPE_COUNT}",
            interval / stripe_size
        ));
    }
    // A stripe that starts past the end of a small file has its end clamped to the size.
    if start > end && end != file_size {
        return Err(format!("start {start} is past end {end}"));
    }
    if end > file_size {
        return Err(format!("end {end} is past the file size {file_size}"));
    }
    Ok(())
}
