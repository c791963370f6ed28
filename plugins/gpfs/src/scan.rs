//! Structural scanning of flat, plain-ASCII JSON objects (what mmwatch sends): every `"` of a
//! message is found up front, sixteen bytes at a time, together with any byte that needs the
//! careful path (a backslash, a control byte, a non-ASCII byte). Walking the quote positions
//! then visits each key and string value without looking at their bytes again.

/// The longest message the structural path takes (longer ones use the byte scanner).
pub const MAX_LEN: usize = 64 * 64;

/// The positions of every `"` in a message, one bit per byte.
pub struct QuoteIndex {
    masks: [u64; MAX_LEN / 64],
    words: usize,
    /// Current word and the bits of it not yet visited.
    at: usize,
    bits: u64,
}

impl QuoteIndex {
    /// Index `b`; None if it holds a backslash, a control byte or a non-ASCII byte, or is
    /// longer than [`MAX_LEN`]. A message that passes is valid UTF-8 and has no escapes.
    pub fn build(b: &[u8]) -> Option<QuoteIndex> {
        QuoteIndex::build_with::<false>(b)
    }

    /// [`QuoteIndex::build`], 32 bytes at a time with AVX2 when `AVX2` (the caller checked
    /// that the CPU has it; see [`has_avx2`]).
    #[inline(always)]
    pub fn build_with<const AVX2: bool>(b: &[u8]) -> Option<QuoteIndex> {
        if b.len() > MAX_LEN {
            return None;
        }
        let words = b.len().div_ceil(64);
        let mut masks = [0u64; MAX_LEN / 64];
        let mut special = 0u64;
        let full = b.len() / 64;
        let scan = |chunk: &[u8; 64]| {
            #[cfg(target_arch = "x86_64")]
            if AVX2 {
                // SAFETY: only called with AVX2 = true after `has_avx2()` said yes.
                return unsafe { block_avx2(chunk) };
            }
            block(chunk)
        };
        for (w, chunk) in b.chunks_exact(64).enumerate() {
            let (q, s) = scan(chunk.try_into().ok()?);
            masks[w] = q;
            special |= s;
        }
        if full < words {
            // The tail, padded with spaces (neither quotes nor special).
            let mut pad = [b' '; 64];
            pad[..b.len() - full * 64].copy_from_slice(&b[full * 64..]);
            let (q, s) = scan(&pad);
            masks[full] = q;
            special |= s;
        }
        if special != 0 {
            return None;
        }
        let bits = masks[0];
        Some(QuoteIndex { masks, words, at: 0, bits })
    }

    /// The next quote position.
    #[inline(always)]
    pub fn next_quote(&mut self) -> Option<usize> {
        while self.bits == 0 {
            self.at += 1;
            if self.at >= self.words {
                return None;
            }
            self.bits = self.masks[self.at];
        }
        let p = self.at * 64 + self.bits.trailing_zeros() as usize;
        self.bits &= self.bits - 1;
        Some(p)
    }
}

/// Quote bits and special bits (backslash, byte < 0x20, byte >= 0x80) of 64 bytes.
#[cfg(target_arch = "x86_64")]
#[inline]
fn block(chunk: &[u8; 64]) -> (u64, u64) {
    use std::arch::x86_64::*;
    let (mut quotes, mut special) = (0u64, 0u64);
    // SAFETY: SSE2 is part of the x86_64 baseline; every load reads 16 bytes inside `chunk`.
    unsafe {
        let quote = _mm_set1_epi8(b'"' as i8);
        let backslash = _mm_set1_epi8(b'\\' as i8);
        let space = _mm_set1_epi8(0x20);
        for k in 0..4 {
            let x = _mm_loadu_si128(chunk.as_ptr().add(16 * k) as *const __m128i);
            let q = _mm_movemask_epi8(_mm_cmpeq_epi8(x, quote)) as u16 as u64;
            // Signed: bytes below 0x20 and bytes from 0x80 up (negative) are both "less than
            // a space": control and non-ASCII bytes in one compare.
            let s = _mm_or_si128(_mm_cmpeq_epi8(x, backslash), _mm_cmplt_epi8(x, space));
            let s = _mm_movemask_epi8(s) as u16 as u64;
            quotes |= q << (16 * k);
            special |= s << (16 * k);
        }
    }
    (quotes, special)
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
unsafe fn block_avx2(chunk: &[u8; 64]) -> (u64, u64) {
    use std::arch::x86_64::*;
    let quote = _mm256_set1_epi8(b'"' as i8);
    let backslash = _mm256_set1_epi8(b'\\' as i8);
    let space = _mm256_set1_epi8(0x20);
    let (mut quotes, mut special) = (0u64, 0u64);
    for k in 0..2 {
        // SAFETY: each load reads 32 bytes inside `chunk`.
        let x = unsafe { _mm256_loadu_si256(chunk.as_ptr().add(32 * k) as *const __m256i) };
        let q = _mm256_movemask_epi8(_mm256_cmpeq_epi8(x, quote)) as u32 as u64;
        // Signed compare: control bytes and non-ASCII bytes are both below a space.
        let s = _mm256_or_si256(_mm256_cmpeq_epi8(x, backslash), _mm256_cmpgt_epi8(space, x));
        let s = _mm256_movemask_epi8(s) as u32 as u64;
        quotes |= q << (32 * k);
        special |= s << (32 * k);
    }
    (quotes, special)
}

/// Quote bits and special bits (backslash, byte < 0x20, byte >= 0x80) of 64 bytes.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn block(chunk: &[u8; 64]) -> (u64, u64) {
    let (mut quotes, mut special) = (0u64, 0u64);
    for (k, &c) in chunk.iter().enumerate() {
        quotes |= ((c == b'"') as u64) << k;
        special |= ((c == b'\\' || c < 0x20 || c >= 0x80) as u64) << k;
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
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 300) as usize;
            let alphabet: &[u8] = if x & 1 == 0 { b"ab\"{}: ,0" } else { b"ab\"\\\x01\xc3:" };
            let b: Vec<u8> = (0..len).map(|k| alphabet[((x >> (k % 57)) as usize + k) % alphabet.len()]).collect();
            let expect_special = b.iter().any(|&c| c == b'\\' || !(0x20..0x80).contains(&c));
            match QuoteIndex::build(&b) {
                None => {
                    assert!(expect_special, "{b:?}");
                    if has_avx2() {
                        assert!(QuoteIndex::build_with::<true>(&b).is_none());
                    }
                }
                Some(mut q) => {
                    assert!(!expect_special);
                    let mut got = Vec::new();
                    while let Some(p) = q.next_quote() {
                        got.push(p);
                    }
                    let want: Vec<usize> = b.iter().enumerate().filter(|(_, &c)| c == b'"').map(|(i, _)| i).collect();
                    assert_eq!(got, want);
                    if has_avx2() {
                        let mut q = QuoteIndex::build_with::<true>(&b).expect("the same verdict");
                        let got: Vec<usize> = std::iter::from_fn(|| q.next_quote()).collect();
                        assert_eq!(got, want);
                    }
                }
            }
        }
        assert!(QuoteIndex::build(&vec![b'a'; MAX_LEN + 1]).is_none());
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
