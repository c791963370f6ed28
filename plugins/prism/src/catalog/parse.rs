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

impl<'a> Lines<'a> {
    /// The next line (1-based number, text or a UTF-8 error).
    pub(super) fn next_line(&mut self) -> Option<(usize, Result<&'a str, String>)> {
        if self.pos >= self.bytes.len() {
            return None;
        }
        let rest = &self.bytes[self.pos..];
        let len = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        let mut raw = &rest[..len];
        self.pos += (len + 1).min(rest.len());
        self.line += 1;
        if let [head @ .., b'\r'] = raw {
            raw = head;
        }
        Some((self.line, std::str::from_utf8(raw).map_err(|e| format!("line is not UTF-8 ({e})"))))
    }

    pub(super) fn peek_line(&self) -> Option<&'a [u8]> {
        if self.pos >= self.bytes.len() {
            return None;
        }
        let rest = &self.bytes[self.pos..];
        let len = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        match &rest[..len] {
            [head @ .., b'\r'] => Some(head),
            l => Some(l),
        }
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
        if let Some(l) = self.peek_line().filter(|l| starts_record(l)) {
            let kw = String::from_utf8_lossy(l);
            return Err((self.line + 1, format!("truncated entry: a new entry (`{kw}`) where {what} was expected")));
        }
        match self.next_line() {
            None => Err((self.line, format!("truncated entry: end of file where {what} was expected"))),
            Some((n, Err(e))) => Err((n, e)),
            Some((n, Ok(l))) => Ok((n, l)),
        }
    }

    pub(super) fn keyword(&mut self, kw: &str) -> Result<(), (usize, String)> {
        let (n, l) = self.need(&format!("`{kw}`"))?;
        if l == kw {
            Ok(())
        } else {
            Err((n, format!("expected `{kw}`, found `{}`", clip(l))))
        }
    }
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
        return Err(format!("stripe count {} (interval / stripe size) is over {MAX_STRIPE_COUNT}", interval / stripe_size));
    }
    // A stripe that starts past the end of a small file has its end clamped to the size.
    if start > end && end != file_size {
        return Err(format!("start {start} is past end {end}"));
    }
    if end > file_size {
        return Err(format!("end {end} is past the file size {file_size}"));
    }
    Ok(LayoutLine { ost, start, end, interval, stripe_size, file_size })
}
