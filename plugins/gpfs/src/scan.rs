//! Structural scanning of flat, plain-ASCII JSON objects (what mmwatch sends): the `"` of a
//! message are found a 64-byte block at a time (16 or 32 bytes a compare), together with any
//! byte that needs the careful path (a backslash, a control byte, a non-ASCII byte). Walking
//! the quote positions then visits each key and string value without looking at their bytes
//! again.

/// The longest message the structural path takes (longer ones use the byte scanner); positions
/// fit in a `u16`.
pub const MAX_LEN: usize = 64 * 64;

/// The positions of every `"` in a message, found a 64-byte block at a time as the walk
/// reaches them (a walk that stops early never scans the rest). A block holding a backslash,
/// a control byte or a non-ASCII byte ends the walk: [`QuoteIndex::refused`] then says so.
/// `AVX2` compares 32 bytes at a time (the caller checked the CPU; see [`has_avx2`]).
pub struct QuoteIndex<'a, const AVX2: bool = false> {
    b: &'a [u8],
    /// Offset of the next block to scan.
    next: usize,
    /// Offset of the block `bits` came from, and its quotes not yet visited.
    base: usize,
    bits: u64,
    refused: bool,
}

impl<'a, const AVX2: bool> QuoteIndex<'a, AVX2> {
    /// An index over `b`; None if `b` is longer than [`MAX_LEN`] (or `AVX2` is asked for
    /// on a CPU without it).
    #[inline(always)]
    pub fn new(b: &'a [u8]) -> Option<QuoteIndex<'a, AVX2>> {
        (b.len() <= MAX_LEN && (!AVX2 || has_avx2())).then_some(QuoteIndex {
            b,
            next: 0,
            base: 0,
            bits: 0,
            refused: false,
        })
    }

    /// Whether a scanned block held a byte that needs the careful path. Every byte up to the
    /// last quote returned was scanned and is plain ASCII other than a backslash.
    pub fn refused(&self) -> bool {
        self.refused
    }

    /// The next quote position; None at the end of the message or at a refused block.
    #[inline(always)]
    pub fn next_quote(&mut self) -> Option<usize> {
        while self.bits == 0 {
            let at = self.next;
            if at >= self.b.len() {
                return None;
            }
            let (q, s) = match self.b.get(at..at + 64) {
                Some(chunk) => scan::<AVX2>(chunk.try_into().ok()?),
                None => {
                    // The tail, padded with spaces (neither quotes nor special).
                    let mut pad = [b' '; 64];
                    pad[..self.b.len() - at].copy_from_slice(&self.b[at..]);
                    scan::<AVX2>(&pad)
                }
            };
            if s {
                self.refused = true;
                self.next = self.b.len();
                return None;
            }
            self.base = at;
            self.next = at + 64;
            self.bits = q;
        }
        let p = self.base + self.bits.trailing_zeros() as usize;
        self.bits &= self.bits - 1;
        Some(p)
    }
}

/// Quote bits of one block and whether it holds a special byte, with the instruction set chosen.
#[inline(always)]
fn scan<const AVX2: bool>(chunk: &[u8; 64]) -> (u64, bool) {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        // SAFETY: `QuoteIndex::<true>::new` checked `has_avx2()`.
        return unsafe { block_avx2(chunk) };
    }
    block(chunk)
}

/// Quote bits of 64 bytes, and whether any of them is special (backslash, byte < 0x20,
/// byte >= 0x80).
#[cfg(target_arch = "x86_64")]
#[inline]
fn block(chunk: &[u8; 64]) -> (u64, bool) {
    use std::arch::x86_64::*;
    let mut quotes = 0u64;
    // SAFETY: SSE2 is part of the x86_64 baseline; every load reads 16 bytes inside `chunk`.
    unsafe {
        let quote = _mm_set1_epi8(b'"' as i8);
        let backslash = _mm_set1_epi8(b'\\' as i8);
        let space = _mm_set1_epi8(0x20);
        let mut special = _mm_setzero_si128();
        for k in 0..4 {
            let x = _mm_loadu_si128(chunk.as_ptr().add(16 * k) as *const __m128i);
            let q = _mm_movemask_epi8(_mm_cmpeq_epi8(x, quote)) as u16 as u64;
            // Signed: bytes below 0x20 and bytes from 0x80 up (negative) are both "less than
            // a space": control and non-ASCII bytes in one compare.
            special = _mm_or_si128(special, _mm_or_si128(_mm_cmpeq_epi8(x, backslash), _mm_cmplt_epi8(x, space)));
            quotes |= q << (16 * k);
        }
        (quotes, _mm_movemask_epi8(special) != 0)
    }
}

/// Whether this CPU has AVX2 and BMI1 (checked once by std, then cached).
#[inline]
pub fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("bmi1")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`block`] with two 32-byte compares a class.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_avx2(chunk: &[u8; 64]) -> (u64, bool) {
    use std::arch::x86_64::*;
    let quote = _mm256_set1_epi8(b'"' as i8);
    let backslash = _mm256_set1_epi8(b'\\' as i8);
    let space = _mm256_set1_epi8(0x20);
    let mut quotes = 0u64;
    let mut special = _mm256_setzero_si256();
    for k in 0..2 {
        // SAFETY: each load reads 32 bytes inside `chunk`.
        let x = unsafe { _mm256_loadu_si256(chunk.as_ptr().add(32 * k) as *const __m256i) };
        let q = _mm256_movemask_epi8(_mm256_cmpeq_epi8(x, quote)) as u32 as u64;
        // Signed compare: control bytes and non-ASCII bytes are both below a space.
        special =
            _mm256_or_si256(special, _mm256_or_si256(_mm256_cmpeq_epi8(x, backslash), _mm256_cmpgt_epi8(space, x)));
        quotes |= q << (32 * k);
    }
    (quotes, _mm256_movemask_epi8(special) != 0)
}

/// Quote bits of 64 bytes, and whether any of them is special.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn block(chunk: &[u8; 64]) -> (u64, bool) {
    let (mut quotes, mut special) = (0u64, false);
    for (k, &c) in chunk.iter().enumerate() {
        quotes |= ((c == b'"') as u64) << k;
        special |= c == b'\\' || c < 0x20 || c >= 0x80;
    }
    (quotes, special)
}

/// A short byte string (at most 15 bytes) as one number, its length in the top byte, so that
/// matching against known names is a few integer compares.
#[inline]
pub const fn tag(s: &[u8]) -> u128 {
    let mut v = (s.len() as u128) << 120;
    let mut i = 0;
    while i < s.len() && i < 15 {
        v |= (s[i] as u128) << (8 * i);
        i += 1;
    }
    v
}

/// [`tag`] of `s`, or None if `s` is longer than 15 bytes. Built from overlapping word loads
/// (no copy through memory, which would stall on store forwarding).
#[inline]
pub fn tag_of(s: &[u8]) -> Option<u128> {
    let n = s.len();
    let word = |k: usize| -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[k..k + 8]);
        u64::from_le_bytes(w)
    };
    let half = |k: usize| -> u64 {
        let mut w = [0u8; 4];
        w.copy_from_slice(&s[k..k + 4]);
        u32::from_le_bytes(w) as u64
    };
    let (lo, hi) = match n {
        16.. => return None,
        8 => (word(0), 0),
        9..=15 => (word(0), word(n - 8) >> (8 * (16 - n))),
        4..=7 => (half(0) | ((half(n - 4) >> (8 * (8 - n))) << 32), 0),
        _ => (s.iter().rev().fold(0u64, |v, &c| (v << 8) | c as u64), 0),
    };
    Some(lo as u128 | (hi as u128) << 64 | (n as u128) << 120)
}

/// [`tag_of`] of `b[start..end]`, with one 16-byte load when the message has that many bytes
/// from `start` on.
#[inline(always)]
pub fn tag_at(b: &[u8], start: usize, end: usize) -> Option<u128> {
    let n = end.checked_sub(start)?;
    if n > 15 {
        return None;
    }
    match b.get(start..start + 16) {
        Some(w) => {
            let mut a = [0u8; 16];
            a.copy_from_slice(w);
            let v = u128::from_le_bytes(a) & ((1u128 << (8 * n)) - 1);
            Some(v | (n as u128) << 120)
        }
        None => tag_of(b.get(start..end)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_found_and_special_bytes_refused() {
        let mut rng = icicle_core::rng::Rng::new(0x9e37_79b9_7f4a_7c15);
        for _ in 0..5_000 {
            let x = rng.next_u64();
            let len = (x % 300) as usize;
            let alphabet: &[u8] = if x & 1 == 0 { b"ab\"{}: ,0" } else { b"ab\"\\\x01\xc3:" };
            let b: Vec<u8> = (0..len).map(|k| alphabet[((x >> (k % 57)) as usize + k) % alphabet.len()]).collect();
            let expect_special = b.iter().any(|&c| c == b'\\' || !(0x20..0x80).contains(&c));
            let want: Vec<usize> = b.iter().enumerate().filter(|(_, &c)| c == b'"').map(|(i, _)| i).collect();
            let mut q = QuoteIndex::<false>::new(&b).expect("short enough");
            let got: Vec<usize> = std::iter::from_fn(|| q.next_quote()).collect();
            assert_eq!(q.refused(), expect_special, "{b:?}");
            if !expect_special {
                assert_eq!(got, want);
            } else {
                // Every quote returned before the refusal is a real one, in order.
                assert_eq!(got[..], want[..got.len()]);
            }
            if has_avx2() {
                let mut q = QuoteIndex::<true>::new(&b).expect("short enough");
                let got2: Vec<usize> = std::iter::from_fn(|| q.next_quote()).collect();
                assert_eq!((got2, q.refused()), (got, expect_special));
            }
        }
        assert!(QuoteIndex::<false>::new(&vec![b'a'; MAX_LEN + 1]).is_none());
    }

    #[test]
    fn tags_tell_names_and_lengths_apart() {
        assert_eq!(tag_of(b"inode"), Some(tag(b"inode")));
        assert_ne!(tag_of(b"inode\0"), Some(tag(b"inode")));
        assert_ne!(tag_of(b"inod"), Some(tag(b"inode")));
        assert_eq!(tag_of(b"0123456789abcdef"), None);
        assert_eq!(tag_of(b""), Some(tag(b"")));
        let text = b"0123456789abcdefghij";
        for start in 0..text.len() {
            for end in start..=text.len() {
                let want = (end - start <= 15).then(|| tag(&text[start..end]));
                assert_eq!(tag_of(&text[start..end]), want, "{start}..{end}");
                assert_eq!(tag_at(text, start, end), want, "{start}..{end}");
            }
        }
    }
}
