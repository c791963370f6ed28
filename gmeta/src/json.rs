//! JSON text written by hand on the hot path: strings and integers.

/// Append `s` as a JSON string literal.
pub fn push_json_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // Most strings need no escape: the clean prefix is found 16 bytes at a time and copied once.
    let clean = clean_prefix(bytes);
    out.extend_from_slice(&bytes[..clean]);
    if clean == bytes.len() {
        out.push(b'"');
        return;
    }
    let mut start = clean;
    for (i, &b) in bytes.iter().enumerate().skip(clean) {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// How many bytes at the start of `b` need no JSON escape (not `"`, `\\` or a control byte),
/// 16 bytes a compare (the last block overlaps the one before; a short string is padded).
#[inline]
pub(crate) fn clean_prefix(b: &[u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        let n = b.len();
        // SAFETY: SSE2 is part of the x86_64 baseline; every load reads 16 bytes inside `b`
        // or inside `pad`.
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            // Unsigned "below 0x20": max(x, 0x1f) == 0x1f.
            let low = _mm_set1_epi8(0x1f);
            let bad = |p: *const u8| {
                let x = _mm_loadu_si128(p as *const __m128i);
                let m = _mm_or_si128(
                    _mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash)),
                    _mm_cmpeq_epi8(_mm_max_epu8(x, low), low),
                );
                _mm_movemask_epi8(m) as u32
            };
            if n < 16 {
                let mut pad = [b'a'; 16];
                pad[..n].copy_from_slice(b);
                let m = bad(pad.as_ptr());
                return if m != 0 { m.trailing_zeros() as usize } else { n };
            }
            let mut i = 0;
            while i + 16 <= n {
                let m = bad(b.as_ptr().add(i));
                if m != 0 {
                    return i + m.trailing_zeros() as usize;
                }
                i += 16;
            }
            if i < n {
                // The last 16 bytes; bits for bytes before `i` were already clean.
                let m = bad(b.as_ptr().add(n - 16)) >> (i - (n - 16));
                if m != 0 {
                    return i + m.trailing_zeros() as usize;
                }
            }
            n
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        b.iter().position(|&c| c < 0x20 || c == b'"' || c == b'\\').unwrap_or(b.len())
    }
}

/// Append the decimal text of `v`.
pub(crate) fn push_int(out: &mut Vec<u8>, v: impl itoa::Integer) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(v).as_bytes());
}

/// `"00"` to `"99"`.
const DIGITS2: &[u8; 200] =
    b"0001020304050607080910111213141516171819202122232425262728293031323334353637383940414243444546474849\
5051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";

/// Append the decimal text of `v` (what [`push_int`] appends), written in place: the hot
/// path's numbers without a copy through a buffer.
#[inline]
pub(crate) fn push_u64(out: &mut Vec<u8>, v: u64) {
    let n = v.checked_ilog10().map_or(1, |l| l as usize + 1);
    out.reserve(n);
    let start = out.len();
    // SAFETY: `reserve` made room for `n` more bytes; the loop writes each of the `n` bytes
    // after `start` exactly once (from the last digit back, `n` being the digit count)
    // before the length is set to cover them.
    unsafe {
        let p = out.as_mut_ptr().add(start);
        let (mut v, mut i) = (v, n);
        while v >= 100 {
            let r = (v % 100) as usize * 2;
            v /= 100;
            i -= 2;
            *p.add(i) = DIGITS2[r];
            *p.add(i + 1) = DIGITS2[r + 1];
        }
        if v >= 10 {
            let r = v as usize * 2;
            *p.add(i - 2) = DIGITS2[r];
            *p.add(i - 1) = DIGITS2[r + 1];
        } else {
            *p.add(i - 1) = b'0' + v as u8;
        }
        out.set_len(start + n);
    }
}

/// [`push_u64`] for a signed value.
#[inline]
pub(crate) fn push_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    push_u64(out, v.unsigned_abs());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_in_place_are_itoas() {
        let mut rng = icicle_core::rng::Rng::new(0x1_70a);
        let mut values: Vec<i64> = vec![0, 1, -1, 9, 10, 99, 100, 101, 999, 1000, i64::MAX, i64::MIN, i64::MIN + 1];
        for p in 0..19 {
            let t = 10i64.pow(p);
            values.extend([t - 1, t, t + 1, -t, 1 - t]);
        }
        values.extend((0..100_000).map(|_| (rng.next_u64() >> (rng.next_u64() % 64)) as i64));
        for v in values {
            let (mut want, mut got) = (b"x".to_vec(), b"x".to_vec());
            push_int(&mut want, v);
            push_i64(&mut got, v);
            assert_eq!(got, want, "{v}");
            let u = v as u64;
            let (mut want, mut got) = (Vec::new(), Vec::new());
            push_int(&mut want, u);
            push_u64(&mut got, u);
            assert_eq!(got, want, "{u}");
        }
    }
}
