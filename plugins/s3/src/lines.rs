//! Lines of one byte range of an object, fed as the downloaded chunks arrive. A range owns
//! the lines that start inside it, exactly as [`icicle_core::text::for_each_line`] cuts a
//! local file: a range `[start, end)` with `start > 0` is fetched from `start - 1` (to see
//! whether a line begins at `start`), skips the partial line it begins in, and finishes the
//! last line it starts even when that line runs past `end`.

use icicle_core::text::{for_each_line, MAX_LINE_BYTES};

/// One range's line cutter. Memory is one chunk plus the longest line.
#[derive(Debug)]
pub struct RangeLines {
    end: u64,
    /// Object offset of `buf[0]`.
    base: u64,
    buf: Vec<u8>,
    /// Still discarding the line the range begins inside.
    skipping: bool,
    done: bool,
    /// The 1-based number of the next line, when the range starts at the object's start.
    line: Option<u64>,
}

impl RangeLines {
    /// Lines starting in `[start, end)`; bytes are fed from [`RangeLines::fetch_from`].
    pub fn new(start: u64, end: u64) -> RangeLines {
        RangeLines {
            end,
            base: start.saturating_sub(1),
            buf: Vec::new(),
            skipping: start > 0,
            done: start >= end,
            line: (start == 0).then_some(1),
        }
    }

    /// Where the bytes must begin: `start - 1` (or 0).
    pub fn fetch_from(start: u64) -> u64 {
        start.saturating_sub(1)
    }

    /// Every line this range owns has been handed out: stop fetching.
    pub fn done(&self) -> bool {
        self.done
    }

    /// Where a line longer than [`MAX_LINE_BYTES`] begins, once that much of it is held (an
    /// object without newlines is no listing, and must not be read into memory whole).
    pub fn overlong(&self) -> Option<u64> {
        (self.buf.len() > MAX_LINE_BYTES).then_some(self.base)
    }

    /// Object offset up to which bytes have been consumed (lines before it are handed out).
    pub fn consumed(&self) -> u64 {
        self.base
    }

    /// Feed the next bytes of the object; `f(line, offset, line_number)` gets every complete
    /// line that starts in the range (without `\n` / `\r\n`), in order.
    pub fn push(&mut self, chunk: &[u8], f: &mut impl FnMut(&[u8], u64, Option<u64>)) {
        if self.done {
            return;
        }
        let mut chunk = chunk;
        if self.skipping {
            match memchr::memchr(b'\n', chunk) {
                Some(i) => {
                    self.base += i as u64 + 1;
                    chunk = &chunk[i + 1..];
                    self.skipping = false;
                }
                None => {
                    self.base += chunk.len() as u64;
                    if self.base >= self.end {
                        self.done = true;
                    }
                    return;
                }
            }
            if self.base >= self.end {
                self.done = true;
                return;
            }
        }
        // Complete lines end at the last newline; keep the rest for the next chunk.
        let Some(last_nl) = memchr::memrchr(b'\n', chunk) else {
            self.buf.extend_from_slice(chunk);
            return;
        };
        if self.buf.is_empty() {
            self.emit(&chunk[..=last_nl], f);
        } else {
            self.buf.extend_from_slice(&chunk[..=last_nl]);
            let whole = std::mem::take(&mut self.buf);
            self.emit(&whole, f);
            self.buf = whole;
            self.buf.clear();
        }
        if !self.done {
            self.buf.extend_from_slice(&chunk[last_nl + 1..]);
        }
    }

    /// The object ended: where its last line begins when that line has no newline and
    /// belongs to this range (the object was cut short: the line is not handed out).
    /// Returns its offset and, when the range began the object, its line number.
    pub fn unterminated(&self) -> Option<(u64, Option<u64>)> {
        (!self.done && !self.skipping && !self.buf.is_empty()).then_some((self.base, self.line))
    }

    /// The object ended: hand out its last line if it has no newline (as `for_each_line` cuts
    /// a local file; the source reports such a line instead, [`RangeLines::unterminated`]).
    #[cfg(test)]
    fn finish(&mut self, f: &mut impl FnMut(&[u8], u64, Option<u64>)) {
        if !self.done && !self.skipping && !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            self.emit(&rest, f);
        }
        self.done = true;
    }

    /// Hand out the lines of `data` (which starts at `self.base` and ends after a newline,
    /// or at the object's end), then advance past it.
    fn emit(&mut self, data: &[u8], f: &mut impl FnMut(&[u8], u64, Option<u64>)) {
        let (base, end) = (self.base, self.end);
        let mut line = self.line;
        let mut stop = false;
        for_each_line(data, None, |l, off| {
            if stop || base + off >= end {
                stop = true;
                return;
            }
            f(l, base + off, line);
            line = line.map(|n| n + 1);
        });
        self.line = line;
        self.base += data.len() as u64;
        if stop || self.base >= self.end {
            self.done = true;
            self.buf.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text() -> Vec<u8> {
        let mut t = Vec::new();
        for i in 0..400 {
            let line = match i % 11 {
                0 => String::new(),
                3 => format!("crlf {i}\r"),
                7 => format!("long {i} {}", "y".repeat(300)),
                _ => format!("line {i} {}", "x".repeat(i % 23)),
            };
            t.extend_from_slice(line.as_bytes());
            t.push(b'\n');
        }
        t.extend_from_slice(b"last line without newline");
        t
    }

    /// Read `[start, end)` of `data` the way the source does: from `start - 1` in chunks of
    /// `chunk` bytes, continuing past `end` only until the range is done.
    fn read_range(data: &[u8], start: u64, end: u64, chunk: usize) -> Vec<(u64, Vec<u8>, Option<u64>)> {
        let mut got = Vec::new();
        let mut r = RangeLines::new(start, end);
        let mut pos = RangeLines::fetch_from(start) as usize;
        let mut f = |l: &[u8], off: u64, n: Option<u64>| got.push((off, l.to_vec(), n));
        while !r.done() && pos < data.len() {
            let stop = (pos + chunk).min(data.len());
            r.push(&data[pos..stop], &mut f);
            pos = stop;
        }
        if !r.done() {
            r.finish(&mut f);
        }
        got
    }

    #[test]
    fn ranges_cut_lines_exactly_like_local_files() {
        let data = text();
        let mut whole = Vec::new();
        for_each_line(&data, None, |l, off| whole.push((off, l.to_vec())));
        let numbered: Vec<_> =
            whole.iter().enumerate().map(|(i, (o, l))| (*o, l.clone(), Some(i as u64 + 1))).collect();
        for chunk in [1usize, 2, 7, 64, 4096, 1 << 20] {
            assert_eq!(read_range(&data, 0, data.len() as u64, chunk), numbered, "chunk {chunk}");
            for split in [1u64, 5, 37, 301, 1000, 5000] {
                let mut seen = Vec::new();
                let mut s = 0u64;
                while s < data.len() as u64 {
                    let e = (s + split).min(data.len() as u64);
                    let mut part = Vec::new();
                    for_each_line(&data, Some((s, e)), |l, off| part.push((off, l.to_vec())));
                    let got = read_range(&data, s, e, chunk);
                    assert_eq!(
                        got.iter().map(|(o, l, _)| (*o, l.clone())).collect::<Vec<_>>(),
                        part,
                        "split {split} range {s}..{e} chunk {chunk}"
                    );
                    assert!(got.iter().all(|(_, _, n)| n.is_some() == (s == 0)));
                    seen.extend(got.into_iter().map(|(o, l, _)| (o, l)));
                    s = e;
                }
                assert_eq!(seen, whole, "split {split} chunk {chunk}");
            }
        }
    }

    #[test]
    fn a_line_longer_than_the_bound_is_reported_before_it_is_held_whole() {
        let mut r = RangeLines::new(0, u64::MAX);
        let chunk = vec![b'x'; 1 << 20];
        let mut pushed = 0usize;
        while r.overlong().is_none() {
            r.push(&chunk, &mut |_, _, _| panic!("no line ends"));
            pushed += chunk.len();
            assert!(pushed <= MAX_LINE_BYTES + chunk.len(), "held {pushed} bytes");
        }
        assert_eq!(r.overlong(), Some(0));
        // CR-only line ends are no newlines either.
        let mut r = RangeLines::new(0, u64::MAX);
        let cr: Vec<u8> = b"a\rb\r".iter().copied().cycle().take(MAX_LINE_BYTES + 2).collect();
        r.push(&cr, &mut |_, _, _| panic!("no line ends"));
        assert_eq!(r.overlong(), Some(0));
    }

    #[test]
    fn stops_once_the_next_line_starts_past_the_range() {
        let data = b"aaaa\nbbbb\ncccc\n";
        let mut r = RangeLines::new(0, 5);
        let mut got = Vec::new();
        r.push(data, &mut |l, o, n| got.push((l.to_vec(), o, n)));
        assert!(r.done());
        assert_eq!(got, vec![(b"aaaa".to_vec(), 0, Some(1))]);
        // A range inside one long line owns nothing.
        let mut r = RangeLines::new(6, 8);
        r.push(&data[5..8], &mut |_, _, _| panic!("no line starts in 6..8"));
        assert!(r.done());
    }
}
