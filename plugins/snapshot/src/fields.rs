//! Small, fast field parsers shared by the text sources.

/// Parse a decimal integer (optional leading `-`), with a reason on failure.
pub fn parse_i64(b: &[u8], what: &str) -> Result<i64, String> {
    let (neg, digits) = match b.first() {
        Some(b'-') => (true, &b[1..]),
        Some(b'+') => (false, &b[1..]),
        _ => (false, b),
    };
    let not_integer = || format!("{what}: `{}` is not an integer", String::from_utf8_lossy(b));
    if digits.is_empty() || digits.len() > 19 {
        return Err(not_integer());
    }
    let mut v: i64 = 0;
    if digits.len() <= 18 {
        // At most 18 digits cannot overflow: no check per digit.
        for &c in digits {
            let d = c.wrapping_sub(b'0');
            if d > 9 {
                return Err(not_integer());
            }
            v = v * 10 + d as i64;
        }
        return Ok(if neg { -v } else { v });
    }
    for &c in digits {
        if !c.is_ascii_digit() {
            return Err(not_integer());
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add((c - b'0') as i64))
            .ok_or_else(|| format!("{what}: `{}` is out of range", String::from_utf8_lossy(b)))?;
    }
    Ok(if neg { -v } else { v })
}

/// Parse a non-negative integer that fits `u32`.
pub fn parse_u32(b: &[u8], what: &str) -> Result<u32, String> {
    let v = parse_i64(b, what)?;
    u32::try_from(v).map_err(|_| format!("{what}: `{v}` is out of range"))
}

/// Parse a non-negative integer.
pub fn parse_u64(b: &[u8], what: &str) -> Result<u64, String> {
    let v = parse_i64(b, what)?;
    u64::try_from(v).map_err(|_| format!("{what}: `{v}` is negative"))
}

/// Parse an inode number: the full `u64` range (no sign).
pub fn parse_inode(b: &[u8], what: &str) -> Result<u64, String> {
    let bad = |why: &str| format!("{what}: `{}` {why}", String::from_utf8_lossy(b));
    if b.first() == Some(&b'-') {
        return Err(bad("is negative"));
    }
    if b.is_empty() || b.len() > 20 {
        return Err(bad("is not an integer"));
    }
    let mut v: u64 = 0;
    for &c in b {
        if !c.is_ascii_digit() {
            return Err(bad("is not an integer"));
        }
        v = v.checked_mul(10).and_then(|v| v.checked_add((c - b'0') as u64)).ok_or_else(|| bad("is out of range"))?;
    }
    Ok(v)
}

/// Parse an octal integer (`0644`, `100644`, `0o100644`).
pub fn parse_octal(b: &[u8], what: &str) -> Result<u32, String> {
    let s = std::str::from_utf8(b).map_err(|_| format!("{what}: not UTF-8"))?;
    let s = s.trim_start_matches("0o");
    u32::from_str_radix(if s.is_empty() { "0" } else { s }, 8)
        .map_err(|_| format!("{what}: `{s}` is not an octal mode"))
}

/// Write `path` into `out`, replacing a leading `strip` with `prefix` (when either is set).
pub fn rewrite_prefix(path: &str, strip: &str, prefix: &str, out: &mut String) {
    out.clear();
    match path.strip_prefix(strip) {
        Some(rest) if !strip.is_empty() || !prefix.is_empty() => {
            out.push_str(prefix);
            out.push_str(rest);
        }
        _ => out.push_str(path),
    }
}

/// Decode RFC 3986 percent escapes (`%2F` → `/`), as mmapplypolicy's `ESCAPE '%'` writes.
pub fn percent_decode(b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            match (b.get(i + 1).and_then(|&c| hex(c)), b.get(i + 2).and_then(|&c| hex(c))) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                }
                _ => {
                    let end = (i + 3).min(b.len());
                    return Err(format!(
                        "undecodable escape `{}` at byte {i} of the path",
                        String::from_utf8_lossy(&b[i..end])
                    ));
                }
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// Bit `i` set for every `i` below 64 where `line[i] == delim`: the delimiters of a row's
/// short leading fields in one pass, 16 bytes a compare.
pub fn delimiter_mask(line: &[u8], delim: u8) -> u64 {
    let mut window = [!delim; 64];
    let n = line.len().min(64);
    window[..n].copy_from_slice(&line[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of the x86_64 baseline; the four loads read `window`'s 64 bytes.
        unsafe {
            let d = _mm_set1_epi8(delim as i8);
            let mut mask = 0u64;
            for k in 0..4 {
                let x = _mm_loadu_si128(window.as_ptr().add(16 * k) as *const __m128i);
                mask |= (_mm_movemask_epi8(_mm_cmpeq_epi8(x, d)) as u16 as u64) << (16 * k);
            }
            mask
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        window.iter().enumerate().fold(0u64, |m, (i, &b)| m | (u64::from(b == delim) << i))
    }
}

/// Where a field's bytes are: a range of the line, or of the scratch buffer (unquoted copies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// Bytes `start..end` of the line.
    Line(usize, usize),
    /// Bytes `start..end` of the scratch buffer (an unquoted copy).
    Scratch(usize, usize),
}

impl Field {
    /// The field's bytes.
    pub fn get<'a>(self, line: &'a [u8], scratch: &'a [u8]) -> &'a [u8] {
        match self {
            Field::Line(s, e) => &line[s..e],
            Field::Scratch(s, e) => &scratch[s..e],
        }
    }
}

/// Split a delimited line into fields honouring `"`-quoting (`""` is a literal quote).
pub fn split_quoted(line: &[u8], delim: u8, out: &mut Vec<Field>, scratch: &mut Vec<u8>) -> Result<(), String> {
    split_with(line, delim, out, scratch, |line, j| match line.get(j) {
        Some(b'"') if line.get(j + 1) == Some(&b'"') => Quoted::Byte(b'"', 2),
        Some(b'"') => Quoted::End,
        Some(&c) => Quoted::Byte(c, 1),
        None => Quoted::Unterminated,
    })
}

/// Split a delimited line into fields as pwalk before 2.6.7 quoted them: inside `"`-quotes a
/// backslash escapes the next character (`\"`, `\,`, `\\`; pwalk 2.6.3–2.6.6 escaped all
/// three, earlier ones only `"`).
pub fn split_backslash_quoted(
    line: &[u8],
    delim: u8,
    out: &mut Vec<Field>,
    scratch: &mut Vec<u8>,
) -> Result<(), String> {
    split_with(line, delim, out, scratch, |line, j| match line.get(j) {
        Some(b'\\') if j + 1 < line.len() => Quoted::Byte(line[j + 1], 2),
        Some(b'"') => Quoted::End,
        Some(&c) => Quoted::Byte(c, 1),
        None => Quoted::Unterminated,
    })
}

/// What a quoted field holds at a byte.
enum Quoted {
    /// This byte of the value, and how many bytes of the line it took.
    Byte(u8, usize),
    /// The closing quote.
    End,
    Unterminated,
}

/// Split a delimited line into fields; inside `"`-quotes, `quoted(line, j)` reads the byte at
/// `j`.
fn split_with(
    line: &[u8],
    delim: u8,
    out: &mut Vec<Field>,
    scratch: &mut Vec<u8>,
    quoted: impl Fn(&[u8], usize) -> Quoted,
) -> Result<(), String> {
    let mut i = 0;
    loop {
        if line.get(i) == Some(&b'"') {
            let start = scratch.len();
            let mut j = i + 1;
            loop {
                match quoted(line, j) {
                    Quoted::Byte(c, n) => {
                        scratch.push(c);
                        j += n;
                    }
                    Quoted::End => {
                        j += 1;
                        break;
                    }
                    Quoted::Unterminated => return Err("unterminated quoted field".into()),
                }
            }
            out.push(Field::Scratch(start, scratch.len()));
            match line.get(j) {
                None => return Ok(()),
                Some(&c) if c == delim => i = j + 1,
                Some(_) => return Err(format!("unexpected character after a closing quote at byte {j}")),
            }
        } else {
            match memchr::memchr(delim, &line[i..]) {
                Some(k) => {
                    out.push(Field::Line(i, i + k));
                    i += k + 1;
                }
                None => {
                    out.push(Field::Line(i, line.len()));
                    return Ok(());
                }
            }
        }
    }
}

/// The field `line[s..e]`, unquoted into `scratch` when it is `"`-quoted.
pub fn unquote(line: &[u8], s: usize, e: usize, scratch: &mut Vec<u8>) -> Result<Field, String> {
    let field = &line[s..e];
    if field.first() != Some(&b'"') {
        return Ok(Field::Line(s, e));
    }
    if field.len() < 2 || field.last() != Some(&b'"') {
        return Err("unterminated quoted field".into());
    }
    let inner = &field[1..field.len() - 1];
    let start = scratch.len();
    let mut i = 0;
    while i < inner.len() {
        if inner[i] == b'"' {
            if inner.get(i + 1) != Some(&b'"') {
                return Err("stray quote inside a quoted field".into());
            }
            i += 1;
        }
        scratch.push(inner[i]);
        i += 1;
    }
    Ok(Field::Scratch(start, scratch.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers() {
        assert_eq!(parse_i64(b"-12", "x").unwrap(), -12);
        assert!(parse_i64(b"1x", "x").is_err());
        assert!(parse_i64(b"", "x").is_err());
        assert!(parse_i64(b"99999999999999999999", "x").is_err());
        assert_eq!(parse_i64(b"999999999999999999", "x").unwrap(), 999_999_999_999_999_999);
        assert_eq!(parse_i64(b"-9223372036854775807", "x").unwrap(), -i64::MAX);
        assert!(parse_i64(b"9223372036854775808", "x").unwrap_err().contains("out of range"));
        assert!(parse_i64(b"12:4", "x").unwrap_err().contains("not an integer"));
        assert!(parse_i64(b"-", "x").unwrap_err().contains("not an integer"));
        assert!(parse_u32(b"-1", "uid").is_err());
        assert_eq!(parse_octal(b"0100644", "m").unwrap(), 0o100644);
        assert_eq!(parse_inode(b"18446744073709551615", "inode").unwrap(), u64::MAX);
        assert!(parse_inode(b"18446744073709551616", "inode").unwrap_err().contains("out of range"));
        assert!(parse_inode(b"-5", "inode").unwrap_err().contains("negative"));
        assert!(parse_inode(b"12a", "inode").unwrap_err().contains("not an integer"));
        assert!(parse_inode(b"", "inode").is_err());
    }

    #[test]
    fn delimiter_masks() {
        let mut rng = icicle_core::rng::Rng::new(0xde11);
        for len in 0..150 {
            for delim in [b',', b'|', 0u8, 0xffu8] {
                let line: Vec<u8> = (0..len).map(|_| [delim, b'a', b'1', 0, 0xff][rng.below(5) as usize]).collect();
                let want = line.iter().take(64).enumerate().fold(0u64, |m, (i, &b)| m | (u64::from(b == delim) << i));
                assert_eq!(delimiter_mask(&line, delim), want, "{len} {delim}");
            }
        }
    }

    #[test]
    fn percent() {
        assert_eq!(percent_decode(b"%2Fa%20b%25").unwrap(), b"/a b%");
        assert!(percent_decode(b"a%zz").unwrap_err().contains("`%zz`"));
        assert!(percent_decode(b"a%2").is_err());
    }

    #[test]
    fn quoted_fields() {
        let (mut v, mut sc) = (Vec::new(), Vec::new());
        let line = br#"1,"a,b","c""d",,e"#;
        split_quoted(line, b',', &mut v, &mut sc).unwrap();
        let s: Vec<&[u8]> = v.iter().map(|f| f.get(line, &sc)).collect();
        assert_eq!(s, vec![&b"1"[..], b"a,b", b"c\"d", b"", b"e"]);
        assert!(split_quoted(br#"1,"abc"#, b',', &mut v, &mut sc).is_err());
        let q = br#""a,""b""#;
        let f = unquote(q, 0, q.len(), &mut sc).unwrap();
        assert_eq!(f.get(q, &sc), b"a,\"b");
        assert!(unquote(br#""a"b""#, 0, 5, &mut sc).is_err());
    }
}
