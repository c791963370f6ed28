//! File names as the file system holds them (bytes) and as the index holds them (text).
//!
//! POSIX names are bytes: anything but `/` and NUL. Subjects, content and every path inside
//! icicle are UTF-8 text, so each source and monitor turns a name's bytes into text the same
//! way, losslessly, and turns the text back into bytes whenever it touches the file system:
//!
//! - valid UTF-8 without control characters is kept as it is (nearly every name);
//! - a byte that is not part of valid UTF-8, and each byte of a control character (C0 but
//!   tab, DEL, C1), is written `\xhh` (two lowercase hex digits): `caf\xe9.txt` for the
//!   Latin-1 name `café.txt`;
//! - a backslash that would otherwise read as the start of such an escape (one followed by
//!   another backslash, by `x` and two lowercase hex digits, or by an escaped byte) is doubled.
//!
//! [`unescape`] inverts [`escape`] exactly, so a delete a monitor sends for a name finds the
//! record a snapshot indexed under the same name. [`normalise`] is the one place paths lose
//! trailing and repeated slashes, and [`leaf`] the one place a name given as a path (Amazon
//! FSx for Lustre's changelog names) becomes a name.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Whether `b` is its own text: valid UTF-8 with no byte [`escape`] would change.
#[inline]
pub fn is_plain(b: &[u8]) -> bool {
    std::str::from_utf8(b).is_ok_and(is_plain_str)
}

/// Whether no byte of `b` can start what [`escape`] changes: a C0 control (tab included,
/// for speed), DEL, a backslash, or 0xC2 (the lead byte of every C1 control); eight bytes at
/// a time. Almost every path passes; `false` means only "look closer".
#[inline]
fn no_suspect_byte(b: &[u8]) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let equal = |x: u64, c: u8| {
        let y = x ^ (LO * u64::from(c));
        y.wrapping_sub(LO) & !y & HI
    };
    let mut flags = 0u64;
    let mut chunks = b.chunks_exact(8);
    for chunk in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let x = u64::from_le_bytes(w);
        flags |= (x.wrapping_sub(LO * 0x20) & !x & HI) | equal(x, 0x7f) | equal(x, b'\\') | equal(x, 0xc2);
    }
    flags == 0 && chunks.remainder().iter().all(|&c| c >= 0x20 && c != 0x7f && c != b'\\' && c != 0xc2)
}

/// Whether the text `s` (from a source that yields UTF-8) needs no escape.
#[inline]
pub fn is_plain_str(s: &str) -> bool {
    let b = s.as_bytes();
    if no_suspect_byte(b) {
        return true;
    }
    for (i, c) in s.char_indices() {
        if is_control(c) {
            return false;
        }
        if c == '\\' && backslash_doubles(b, i + 1) {
            return false;
        }
    }
    true
}

/// A character [`escape`] writes as `\xhh` bytes: C0 controls but tab, DEL, C1 controls.
#[inline]
fn is_control(c: char) -> bool {
    c.is_control() && c != '\t'
}

/// Whether a literal backslash followed by `rest` (the original bytes from `at`) must be
/// doubled: what follows would read as an escape.
#[inline]
fn backslash_doubles(b: &[u8], at: usize) -> bool {
    match b.get(at) {
        None => false,
        Some(b'\\') => true,
        Some(b'x') => {
            matches!((b.get(at + 1), b.get(at + 2)), (Some(h), Some(l)) if is_lower_hex(*h) && is_lower_hex(*l))
        }
        Some(&c) if c < 0x80 => c < 0x20 && c != b'\t' || c == 0x7f,
        // A non-ASCII byte: escaped when it starts no valid character or a C1 control.
        Some(_) => escaped_at(b, at),
    }
}

/// Whether the non-ASCII byte at `at` is escaped: not the start of a valid UTF-8 character,
/// or the start of a C1 control.
fn escaped_at(b: &[u8], at: usize) -> bool {
    let end = (at + 4).min(b.len());
    match std::str::from_utf8(&b[at..end]) {
        Ok(s) => s.chars().next().is_none_or(is_control),
        Err(e) if e.valid_up_to() > 0 => {
            std::str::from_utf8(&b[at..at + e.valid_up_to()]).ok().and_then(|s| s.chars().next()).is_none_or(is_control)
        }
        Err(_) => true,
    }
}

#[inline]
fn is_lower_hex(c: u8) -> bool {
    c.is_ascii_digit() || (b'a'..=b'f').contains(&c)
}

fn push_escaped_byte(out: &mut String, c: u8) {
    out.push('\\');
    out.push('x');
    out.push(HEX[(c >> 4) as usize] as char);
    out.push(HEX[(c & 15) as usize] as char);
}

/// The text of a name or path given as bytes (borrowed when nothing needs an escape).
pub fn escape(b: &[u8]) -> Cow<'_, str> {
    if let Some(s) = std::str::from_utf8(b).ok().filter(|s| is_plain_str(s)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(b.len() + 8);
    escape_into(b, &mut out);
    Cow::Owned(out)
}

/// [`escape`] for text a source read as UTF-8 (control characters and backslashes may still
/// need an escape).
pub fn escape_str(s: &str) -> Cow<'_, str> {
    if is_plain_str(s) {
        Cow::Borrowed(s)
    } else {
        let mut out = String::with_capacity(s.len() + 8);
        escape_into(s.as_bytes(), &mut out);
        Cow::Owned(out)
    }
}

/// Append the text of `b` to `out`.
pub fn escape_into(b: &[u8], out: &mut String) {
    let mut i = 0;
    while i < b.len() {
        let (valid, bad) = match std::str::from_utf8(&b[i..]) {
            Ok(s) => (s, 0),
            Err(e) => {
                // Valid up to here; then `error_len` bytes (or the rest) that start no character.
                let s = std::str::from_utf8(&b[i..i + e.valid_up_to()]).unwrap_or("");
                (s, e.error_len().unwrap_or(b.len() - i - e.valid_up_to()))
            }
        };
        for (k, c) in valid.char_indices() {
            if is_control(c) {
                let mut buf = [0u8; 4];
                for &byte in c.encode_utf8(&mut buf).as_bytes() {
                    push_escaped_byte(out, byte);
                }
            } else {
                out.push(c);
                if c == '\\' && backslash_doubles(b, i + k + 1) {
                    out.push('\\');
                }
            }
        }
        i += valid.len();
        for &byte in &b[i..i + bad] {
            push_escaped_byte(out, byte);
        }
        i += bad;
    }
}

/// The bytes a text written by [`escape`] stands for (borrowed when it holds no escape).
pub fn unescape(s: &str) -> Cow<'_, [u8]> {
    let b = s.as_bytes();
    if memchr::memchr(b'\\', b).is_none() {
        return Cow::Borrowed(b);
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            match (b.get(i + 1), b.get(i + 2), b.get(i + 3)) {
                (Some(b'\\'), _, _) => {
                    out.push(b'\\');
                    i += 2;
                    continue;
                }
                (Some(b'x'), Some(&h), Some(&l)) if is_lower_hex(h) && is_lower_hex(l) => {
                    let v = |c: u8| if c.is_ascii_digit() { c - b'0' } else { c - b'a' + 10 };
                    out.push(v(h) << 4 | v(l));
                    i += 4;
                    continue;
                }
                _ => {}
            }
        }
        out.push(b[i]);
        i += 1;
    }
    Cow::Owned(out)
}

/// How many bytes the file system holds for a name written by [`escape`].
pub fn byte_len(s: &str) -> usize {
    if memchr::memchr(b'\\', s.as_bytes()).is_none() {
        s.len()
    } else {
        unescape(s).len()
    }
}

/// The file-system path of an index path (`/` + escaped components) below `root`.
pub fn on(root: &Path, path: &str) -> PathBuf {
    let rel = path.trim_start_matches('/');
    match unescape(rel) {
        Cow::Borrowed(b) => root.join(OsStr::from_bytes(b)),
        Cow::Owned(b) => root.join(OsStr::from_bytes(&b)),
    }
}

/// The file-system path an index path stands for.
pub fn to_os(path: &str) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(&unescape(path)))
}

/// The text of a file-system path.
pub fn from_os(path: &Path) -> Cow<'_, str> {
    escape(path.as_os_str().as_bytes())
}

/// A path without trailing or repeated slashes (`/` stays `/`): producers write directory
/// paths with a trailing slash (Storage Scale events) or join names with an extra one.
pub fn normalise(path: &str) -> Cow<'_, str> {
    let b = path.as_bytes();
    let clean = (b.len() <= 1 || b.last() != Some(&b'/')) && !has_double_slash(b);
    if clean {
        return Cow::Borrowed(path);
    }
    let mut out = String::with_capacity(path.len());
    for part in path.split('/').filter(|p| !p.is_empty()) {
        out.push('/');
        out.push_str(part);
    }
    if out.is_empty() && path.starts_with('/') {
        out.push('/');
    } else if !path.starts_with('/') && out.starts_with('/') {
        out.remove(0);
    }
    Cow::Owned(out)
}

/// Whether `b` holds `//`, eight bytes at a time (almost every path is checked by the word
/// pass alone; a word that may hold one gets the exact scan).
fn has_double_slash(b: &[u8]) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    let slashes = |x: u64| {
        let y = x ^ (LO * u64::from(b'/'));
        y.wrapping_sub(LO) & !y & 0x8080_8080_8080_8080
    };
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(w)
    };
    let (mut i, mut maybe) = (0, 0u64);
    while i + 9 <= b.len() {
        maybe |= slashes(word(i)) & slashes(word(i + 1));
        i += 8;
    }
    // The words covered every pair starting before `i`.
    let from = if maybe == 0 { i } else { 0 };
    b[from..].windows(2).any(|w| w == b"//")
}

/// The name a producer gave as a path: its last component (`/cl8/b.txt` → `b.txt`). A name
/// never holds `/`, so one that does is a path, as Amazon FSx for Lustre prints the names of
/// UNLNK and RMDIR records and a rename's old name.
pub fn leaf(name: &str) -> &str {
    let t = name.trim_end_matches('/');
    match t.rfind('/') {
        Some(i) => &t[i + 1..],
        None => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn double_slashes_are_found_wherever_they_are() {
        let mut rng = Rng::new(crate::rng::test_seed());
        for _ in 0..20_000 {
            let n = rng.below(40) as usize;
            let b: Vec<u8> = (0..n).map(|_| [b'/', b'a', b'.', 0x2e ^ 0x01, 0x30][rng.below(5) as usize]).collect();
            assert_eq!(has_double_slash(&b), b.windows(2).any(|w| w == b"//"), "{b:?}");
        }
    }

    #[test]
    fn plain_names_are_their_own_text() {
        for n in
            ["a.txt", "with space", "tab\there", "é 漢字 🎉", "back\\slash", "trailing\\", "\\n", "x\\xZZ", "\\xAB"]
        {
            assert!(is_plain(n.as_bytes()), "{n}");
            assert_eq!(escape(n.as_bytes()), n);
            assert_eq!(unescape(n), n.as_bytes());
        }
    }

    #[test]
    fn documented_escapes() {
        assert_eq!(escape(b"caf\xe9.txt"), "caf\\xe9.txt");
        assert_eq!(escape(b"line\nbreak"), "line\\x0abreak");
        assert_eq!(escape(b"del\x7f"), "del\\x7f");
        assert_eq!(escape("c1\u{85}".as_bytes()), "c1\\xc2\\x85");
        assert_eq!(escape(b"a\\\\b"), "a\\\\\\b");
        assert_eq!(escape(b"a\\x41"), "a\\\\x41");
        assert_eq!(escape(b"a\\\xff"), "a\\\\\\xff");
        assert_eq!(escape(b"\xe2\x82"), "\\xe2\\x82");
        assert_eq!(unescape("caf\\xe9.txt"), &b"caf\xe9.txt"[..]);
        assert_eq!(escape_str("a\u{1b}[31m"), "a\\x1b[31m");
    }

    /// Bytes drawn to hit every branch: ASCII, backslashes, `x` and hex, controls, partial and
    /// complete multi-byte characters.
    fn random_name(rng: &mut Rng) -> Vec<u8> {
        const PARTS: [&[u8]; 16] = [
            b"a",
            b"\\",
            b"x",
            b"4",
            b"f",
            b"\xe9",
            b"\xc3\xa9",
            b"\xe2\x82",
            b"\xe2\x82\xac",
            b"\n",
            b"\t",
            b"\x7f",
            b"\xc2\x85",
            b"/",
            b"\xff",
            b"\xf0\x9f\x8e",
        ];
        (0..rng.below(12)).flat_map(|_| PARTS[rng.below(PARTS.len() as u64) as usize].to_vec()).collect()
    }

    #[test]
    fn escape_round_trips_and_is_one_to_one() {
        let seed = crate::rng::test_seed();
        let mut rng = Rng::new(seed);
        let mut seen = std::collections::HashMap::new();
        for _ in 0..200_000 {
            let b = random_name(&mut rng);
            let s = escape(&b).into_owned();
            assert_eq!(unescape(&s), &b[..], "seed {seed}: {b:?} -> {s:?}");
            assert!(!s.chars().any(is_control), "seed {seed}: {s:?}");
            assert_eq!(is_plain(&b), s.as_bytes() == &b[..], "seed {seed}: {b:?}");
            assert_eq!(byte_len(&s), b.len());
            if let Some(other) = seen.insert(s.clone(), b.clone()) {
                assert_eq!(other, b, "seed {seed}: two names share {s:?}");
            }
            // Joining with `/` commutes with the escape: paths can be built from names.
            let joined = [&b[..], b"/", &b[..]].concat();
            assert_eq!(escape(&joined), format!("{s}/{s}"), "seed {seed}: {b:?}");
        }
    }

    #[test]
    fn paths_are_normalised_once() {
        assert_eq!(normalise("/a/b/"), "/a/b");
        assert_eq!(normalise("/a//b///"), "/a/b");
        assert_eq!(normalise("/"), "/");
        assert_eq!(normalise("//"), "/");
        assert_eq!(normalise("/a/b"), "/a/b");
        assert_eq!(normalise("rel//x/"), "rel/x");
        assert_eq!(leaf("/cl8/b.txt"), "b.txt");
        assert_eq!(leaf("b.txt"), "b.txt");
        assert_eq!(leaf("/cl8/dir/"), "dir");
        assert_eq!(on(Path::new("/mnt"), "/d/caf\\xe9"), PathBuf::from(OsStr::from_bytes(b"/mnt/d/caf\xe9")));
    }
}
