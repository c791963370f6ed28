//! Byte-level scanning of changelog text: lines (CRLF too), the type of a line without parsing
//! it, numbers, FIDs, and the positions of spaces in a line (names may contain spaces).

use super::{Fid, NAMES};

/// The type bit of a changelog line (its second token) without parsing the rest; 0 when the
/// type is unknown or the line is malformed. Lets filtered types skip the full parse.
pub fn line_type_bit(line: &[u8]) -> u32 {
    let Some(sp) = find_byte(line, b' ') else { return 0 };
    let ty = &line[sp + 1..];
    if ty.len() < 3 || !ty[0].is_ascii_digit() || !ty[1].is_ascii_digit() {
        return 0;
    }
    let n = ((ty[0] - b'0') * 10 + (ty[1] - b'0')) as usize;
    // The name, then a space or the end of the line.
    match NAMES.get(n) {
        Some(name)
            if ty.get(2..2 + name.len()) == Some(name.as_bytes())
                && matches!(ty.get(2 + name.len()), Some(b' ') | None) =>
        {
            1 << n
        }
        _ => 0,
    }
}

/// Position of the first `c` in `b`, eight bytes at a time (tokens here are short: memchr's
/// setup costs more than it saves). The lowest flagged byte of a word is exact.
#[inline]
pub(super) fn find_byte(b: &[u8], c: u8) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let pattern = LO * c as u64;
    let mut i = 0;
    while i + 8 <= b.len() {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        let x = u64::from_le_bytes(w) ^ pattern;
        let m = x.wrapping_sub(LO) & !x & HI;
        if m != 0 {
            return Some(i + (m.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    b[i..].iter().position(|&x| x == c).map(|k| i + k)
}

/// Hex digit values; 0xFF for anything else.
pub(super) const HEX: [u8; 256] = {
    let mut t = [0xFFu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// A decimal number (digits only, no sign), without overflow.
#[inline]
pub(super) fn dec(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s.len() == 20 {
        return s.iter().try_fold(0u64, |v, &c| {
            if c.is_ascii_digit() {
                v.checked_mul(10)?.checked_add((c - b'0') as u64)
            } else {
                None
            }
        });
    }
    // Nineteen digits always fit.
    let mut v = 0u64;
    for &c in s {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + d as u64;
    }
    Some(v)
}

/// The value of the hex digits at the start of `b` and how many there are (stops at the
/// first other byte; a count over 16 means the value overflowed).
#[inline(always)]
pub(super) fn hex_run(b: &[u8]) -> (u64, usize) {
    let mut v = 0u64;
    let mut n = 0;
    for &c in b {
        let d = HEX[c as usize];
        if d > 15 {
            break;
        }
        v = (v << 4) | d as u64;
        n += 1;
    }
    (v, n)
}

/// A hex number with an optional `0x`, at most 16 digits.
#[inline]
pub(super) fn hex(s: &[u8]) -> Option<u64> {
    let h = s.strip_prefix(b"0x").unwrap_or(s);
    let (v, n) = hex_run(h);
    (n == h.len() && (1..=16).contains(&n)).then_some(v)
}

/// A bracketed FID at the start of `b` and the length it took (through `]`), in one pass.
#[inline(always)]
pub(super) fn bracketed_fid(b: &[u8]) -> Option<(Fid, usize)> {
    if b.first() != Some(&b'[') {
        return None;
    }
    let mut parts = [0u64; 3];
    let mut i = 1usize;
    for (k, part) in parts.iter_mut().enumerate() {
        if b.get(i..i + 2) == Some(b"0x") {
            i += 2;
        }
        let (v, n) = hex_run(b.get(i..)?);
        let sep = if k == 2 { b']' } else { b':' };
        if n == 0 || n > 16 || b.get(i + n) != Some(&sep) {
            return None;
        }
        *part = v;
        i += n + 1;
    }
    if parts[1] > u32::MAX as u64 || parts[2] > u32::MAX as u64 {
        return None;
    }
    Some((Fid { seq: parts[0], oid: parts[1] as u32, ver: parts[2] as u32 }, i))
}

/// Why the `what` FID at the start of `s` did not parse.
#[cold]
pub(super) fn fid_error(s: &str, what: &str) -> String {
    let end = find_byte(s.as_bytes(), b']').map_or(s.len(), |e| e + 1);
    Fid::parse(s.get(..end).unwrap_or(s)).err().unwrap_or_else(|| format!("{what} is not a bracketed FID"))
}

/// The spaces of a line, found 64 bytes at a time (one block's positions kept as a bit mask),
/// so that each token end is a bit scan rather than a byte search.
pub(super) struct Spaces<'a> {
    b: &'a [u8],
    /// The block `mask` describes (`usize::MAX` before the first).
    block: usize,
    mask: u64,
}

impl<'a> Spaces<'a> {
    pub(super) fn new(b: &'a [u8]) -> Spaces<'a> {
        Spaces { b, block: usize::MAX, mask: 0 }
    }

    /// The first space at or after `pos`, or the line's length.
    #[inline(always)]
    pub(super) fn next(&mut self, pos: usize) -> usize {
        let mut k = pos >> 6;
        let mut from = pos & 63;
        while k << 6 < self.b.len() {
            if k != self.block {
                self.block = k;
                self.mask = byte_mask(self.b, k << 6, b' ');
            }
            let m = self.mask & (u64::MAX << from);
            if m != 0 {
                return (k << 6) + m.trailing_zeros() as usize;
            }
            k += 1;
            from = 0;
        }
        self.b.len()
    }

    /// The next run of non-spaces from `pos` (after any spaces): its start and end.
    #[inline(always)]
    pub(super) fn token(&mut self, mut pos: usize) -> (usize, usize) {
        while self.b.get(pos) == Some(&b' ') {
            pos += 1;
        }
        (pos, self.next(pos))
    }
}

/// One bit per byte `c` among the (up to) 64 bytes of `b` from `at`.
#[inline(always)]
pub(super) fn byte_mask(b: &[u8], at: usize, c: u8) -> u64 {
    let mut block = [0u8; 64];
    let chunk: &[u8] = match b.get(at..at + 64) {
        Some(c) => c,
        None => {
            let tail = &b[at..];
            block[..tail.len()].copy_from_slice(tail);
            &block
        }
    };
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        let mut mask = 0u64;
        // SAFETY: SSE2 is part of the x86_64 baseline; each load reads 16 of `chunk`'s 64 bytes.
        unsafe {
            let want = _mm_set1_epi8(c as i8);
            for k in 0..4 {
                let x = _mm_loadu_si128(chunk.as_ptr().add(16 * k) as *const __m128i);
                mask |= (_mm_movemask_epi8(_mm_cmpeq_epi8(x, want)) as u16 as u64) << (16 * k);
            }
        }
        mask
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        chunk.iter().enumerate().fold(0u64, |m, (k, &x)| m | (((x == c) as u64) << k))
    }
}

/// `line[start..end]` where both ends sit next to ASCII bytes (or at an end of the line).
#[inline(always)]
pub(super) fn cut(line: &str, start: usize, end: usize) -> &str {
    let b = &line.as_bytes()[start..end];
    debug_assert!(line.is_char_boundary(start) && line.is_char_boundary(end));
    // SAFETY: `line` is UTF-8 and every caller cuts at a position that follows or precedes an
    // ASCII delimiter (a space, `=`, `]`, a digit) or at an end of the line: a char boundary.
    unsafe { std::str::from_utf8_unchecked(b) }
}

/// The lines of `text` (without their newline or a `\r` before it), the newlines found 64
/// bytes at a time.
pub fn lines(text: &str) -> Lines<'_> {
    let mask = if text.is_empty() { 0 } else { byte_mask(text.as_bytes(), 0, b'\n') };
    Lines { text, pos: 0, base: 0, mask }
}

/// Iterator of [`lines`].
pub struct Lines<'a> {
    text: &'a str,
    /// Where the next line starts.
    pos: usize,
    /// The block whose newlines at or after `pos` are the bits of `mask`.
    base: usize,
    mask: u64,
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        let len = self.text.len();
        if self.pos >= len {
            return None;
        }
        let end = loop {
            if self.mask != 0 {
                let nl = self.base + self.mask.trailing_zeros() as usize;
                self.mask &= self.mask - 1;
                break nl;
            }
            self.base += 64;
            if self.base >= len {
                break len;
            }
            self.mask = byte_mask(self.text.as_bytes(), self.base, b'\n');
        };
        let line = cut(self.text, self.pos, end);
        self.pos = end + 1;
        Some(line.strip_suffix('\r').unwrap_or(line))
    }
}

/// The RENME lines of `text`, found by one substring scan over the whole text (the rename
/// lookahead reads far more records than it keeps).
pub fn rename_lines(text: &str) -> impl Iterator<Item = &str> {
    let b = text.as_bytes();
    memchr::memmem::find_iter(b, b" 08RENME ").map(move |at| {
        let start = memchr::memrchr(b'\n', &b[..at]).map_or(0, |i| i + 1);
        let end = memchr::memchr(b'\n', &b[at..]).map_or(b.len(), |i| at + i);
        &text[start..end]
    })
}

/// The index a changelog line starts with, if it starts with one.
pub fn leading_index(line: &str) -> Option<u64> {
    line.split_whitespace().next()?.parse().ok()
}
