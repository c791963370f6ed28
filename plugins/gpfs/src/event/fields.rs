//! Finding the attributes icicle reads in a message: the structural walks by quote position,
//! the byte scanner for any flat object, and the full parser for the rest.

use serde_json::Value;

use super::kind::{filter_bit, EventKind};
use super::values::Field;
use crate::scan::{tag, tag_at, QuoteIndex};

/// How many attributes icicle reads.
pub(super) const N_KEYS: usize = 13;

/// The attributes icicle reads, in WF_JSON's names.
pub(super) const KEYS: [&str; N_KEYS] = [
    "inode",
    "path",
    "event",
    "cookie",
    "fileSize",
    "ownerUserId",
    "ownerGroupId",
    "permissions",
    "atime",
    "ctime",
    "mtime",
    "fileSetID",
    "poolName",
];

/// Slots of [`KEYS`].
pub(super) const INODE: usize = 0;
pub(super) const PATH: usize = 1;
pub(super) const EVENT: usize = 2;
pub(super) const COOKIE: usize = 3;
pub(super) const FILE_SIZE: usize = 4;
pub(super) const OWNER_USER_ID: usize = 5;
pub(super) const OWNER_GROUP_ID: usize = 6;
pub(super) const PERMISSIONS: usize = 7;
pub(super) const ATIME: usize = 8;
pub(super) const CTIME: usize = 9;
pub(super) const MTIME: usize = 10;
pub(super) const FILESET_ID: usize = 11;
pub(super) const POOL_NAME: usize = 12;

/// The slot of the key `b[start..end]`: its first eight bytes pick a bucket (the multiplier
/// gives each of the names its own), and the whole [`tag`] must match.
#[inline(always)]
fn slot_of(b: &[u8], start: usize, end: usize) -> Option<usize> {
    const MUL: u64 = 0xf28c_105d_1fb1_7c23;
    const fn bucket(t: u128) -> usize {
        ((t as u64).wrapping_mul(MUL) >> 59) as usize
    }
    const TABLE: [(u128, u8); 32] = {
        let mut t = [(u128::MAX, 0u8); 32];
        let mut k = 0;
        while k < KEYS.len() {
            let tg = tag(KEYS[k].as_bytes());
            let h = bucket(tg);
            assert!(t[h].0 == u128::MAX, "two names share a bucket");
            t[h] = (tg, k as u8);
            k += 1;
        }
        t
    };
    let tg = tag_at(b, start, end)?;
    let (want, slot) = TABLE[bucket(tg)];
    (want == tg).then_some(slot as usize)
}

/// What a structural walk found.
#[derive(Debug, PartialEq)]
pub(super) enum Walk {
    /// The whole message is a flat object of plain ASCII without escapes; where each
    /// attribute icicle reads sits.
    Whole([Span; N_KEYS]),
    /// The `event` attribute names an event icicle ignores: the walk stopped there.
    Ignored,
    /// The `event` attribute names an event the ingestion filter drops: the walk stopped there.
    Filtered,
}

/// Whether a walk stops at an `event` value (without its quotes): 1 for an event icicle
/// ignores, 2 for one in the ingestion filter `mask` ([`filter_mask`](super::kind::filter_mask)),
/// 0 to read on. (`FILTER` false compiles the filter out.)
#[inline(always)]
fn stop_at_event<const FILTER: bool>(value: &[u8], mask: u32) -> u8 {
    match EventKind::of_value(value) {
        // A directory's own modify/attrib/access/close events: directories have no records.
        Some((EventKind::Ignored, _)) | Some((EventKind::Modified, true)) => 1,
        // A directory's IN_ATTRIB is never filtered: its permissions decide who sees what is
        // below it.
        Some((EventKind::Modified, _)) if FILTER && mask != 0 && filter_bit(value) & mask != 0 => 2,
        _ => 0,
    }
}

/// The walk a non-zero [`stop_at_event`] ends with.
#[cold]
fn stopped(stop: u8) -> Walk {
    if stop == 1 {
        Walk::Ignored
    } else {
        Walk::Filtered
    }
}

/// [`scan_spans`] for what mmwatch sends: compact (no spaces), string and number values only.
/// None as soon as the message is anything else (the caller then tries [`scan_spans`], unless
/// `quotes` was refused).
#[inline(always)]
pub(super) fn scan_compact<const AVX2: bool, const FILTER: bool>(
    b: &[u8],
    quotes: &mut QuoteIndex<'_, AVX2>,
    mask: u32,
) -> Option<Walk> {
    let mut spans = [Span::default(); N_KEYS];
    let n = b.len();
    if n < 2 || b[0] != b'{' || b[n - 1] != b'}' {
        return None;
    }
    // `i`: where the next key's opening quote must be.
    let mut i = 1usize;
    loop {
        if quotes.next_quote()? != i {
            return None;
        }
        let ke = quotes.next_quote()?;
        if b.get(ke + 1) != Some(&b':') {
            return None;
        }
        let vs = ke + 2;
        let (span, after) = if b.get(vs) == Some(&b'"') {
            if quotes.next_quote()? != vs {
                return None;
            }
            let ve = quotes.next_quote()?;
            (Span { start: (vs + 1) as u16, end: ve as u16, kind: SpanKind::Str }, ve + 1)
        } else {
            let mut j = vs;
            while j < n && matches!(b[j], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                j += 1;
            }
            if j == vs {
                return None;
            }
            (Span { start: vs as u16, end: j as u16, kind: SpanKind::Num }, j)
        };
        if let Some(k) = slot_of(b, i + 1, ke) {
            if k == EVENT && span.kind == SpanKind::Str {
                let stop = stop_at_event::<FILTER>(&b[vs + 1..after - 1], mask);
                if stop != 0 {
                    return Some(stopped(stop));
                }
            }
            spans[k] = span;
        }
        match b.get(after) {
            Some(b',') => i = after + 1,
            Some(b'}') if after == n - 1 => return Some(Walk::Whole(spans)),
            _ => return None,
        }
    }
}

/// Walk a flat object of plain ASCII without escapes by its quote positions, noting where
/// each attribute icicle reads sits, and stopping at an ignored event's `event` (the rest of
/// such a message is not looked at). None when the message needs the byte scanner.
#[inline(always)]
pub(super) fn scan_spans<const AVX2: bool, const FILTER: bool>(
    b: &[u8],
    mut quotes: QuoteIndex<'_, AVX2>,
    mask: u32,
) -> Option<Walk> {
    let mut spans = [Span::default(); N_KEYS];
    // Control bytes were refused, so the only whitespace left is the space.
    let skip = |i: &mut usize| {
        while b.get(*i) == Some(&b' ') {
            *i += 1;
        }
    };
    let mut i = 0usize;
    skip(&mut i);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    skip(&mut i);
    if b.get(i) == Some(&b'}') {
        i += 1;
        skip(&mut i);
        return (i == b.len()).then_some(Walk::Whole(spans));
    }
    loop {
        // A key: the next two quotes, the first exactly here.
        if quotes.next_quote()? != i {
            return None;
        }
        let ke = quotes.next_quote()?;
        let slot = slot_of(b, i + 1, ke);
        // `":` directly (compact JSON), else with spaces around the colon.
        i = ke + 1;
        if b.get(i) == Some(&b':') {
            i += 1;
        } else {
            skip(&mut i);
            if b.get(i) != Some(&b':') {
                return None;
            }
            i += 1;
        }
        skip(&mut i);
        let start = i;
        let kind = match *b.get(i)? {
            b'"' => {
                if quotes.next_quote()? != i {
                    return None;
                }
                i = quotes.next_quote()? + 1;
                SpanKind::Str
            }
            b'-' | b'0'..=b'9' => {
                while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                    i += 1;
                }
                SpanKind::Num
            }
            b'n' if b[i..].starts_with(b"null") => {
                i += 4;
                SpanKind::Null
            }
            b't' if b[i..].starts_with(b"true") => {
                i += 4;
                SpanKind::True
            }
            b'f' if b[i..].starts_with(b"false") => {
                i += 5;
                SpanKind::False
            }
            _ => return None,
        };
        if let Some(k) = slot {
            if k == EVENT && kind == SpanKind::Str {
                let stop = stop_at_event::<FILTER>(&b[start + 1..i - 1], mask);
                if stop != 0 {
                    return Some(stopped(stop));
                }
            }
            // Strings without their quotes. MAX_LEN keeps positions within u16.
            spans[k] = match kind {
                SpanKind::Str => Span { start: (start + 1) as u16, end: (i - 1) as u16, kind },
                _ => Span { start: start as u16, end: i as u16, kind },
            };
        }
        // `,"` directly, else spaces around the comma, or the closing brace.
        match b.get(i..i + 2) {
            Some(b",\"") => i += 1,
            _ => {
                skip(&mut i);
                match b.get(i)? {
                    b',' => {
                        i += 1;
                        skip(&mut i);
                    }
                    b'}' => {
                        i += 1;
                        skip(&mut i);
                        return (i == b.len()).then_some(Walk::Whole(spans));
                    }
                    _ => return None,
                }
            }
        }
    }
}

/// What a value found by the structural path is.
#[derive(Clone, Copy, Default, PartialEq, Debug)]
pub(super) enum SpanKind {
    /// The message has no such attribute.
    #[default]
    Absent,
    /// A string (the span leaves out its quotes).
    Str,
    /// A number.
    Num,
    /// `null`.
    Null,
    /// `true`.
    True,
    /// `false`.
    False,
}

/// Where a value sits in the message (the structural path keeps positions, not values).
#[derive(Clone, Copy, Default, PartialEq, Debug)]
pub(super) struct Span {
    /// Where the value starts (after a string's opening quote).
    pub(super) start: u16,
    /// Where the value ends (at a string's closing quote).
    pub(super) end: u16,
    /// What the value is.
    pub(super) kind: SpanKind,
}

/// The attributes of one message.
pub(super) enum Fields<'a> {
    /// Found by the structural path: positions in the message.
    Spans(&'a str, [Span; N_KEYS]),
    /// Found by the byte scanner or the full parser.
    Values(Box<[Option<Field<'a>>; N_KEYS]>),
}

impl Default for Fields<'_> {
    fn default() -> Self {
        Fields::Values(Default::default())
    }
}

impl<'a> Fields<'a> {
    /// The value in `slot` ([`Field::Absent`] when the message has none).
    pub(super) fn get(&self, slot: usize) -> Field<'a> {
        match self {
            Fields::Spans(text, spans) => {
                let sp = spans[slot];
                let s = text.get(sp.start as usize..sp.end as usize).unwrap_or("");
                match sp.kind {
                    SpanKind::Absent => Field::Absent,
                    SpanKind::Str => Field::Str(std::borrow::Cow::Borrowed(s)),
                    SpanKind::Num => Field::Num(s),
                    SpanKind::Null => Field::Null,
                    SpanKind::True => Field::Other("true".into()),
                    SpanKind::False => Field::Other("false".into()),
                }
            }
            Fields::Values(v) => v[slot].clone().unwrap_or(Field::Absent),
        }
    }

    /// The fastest path: a flat object of plain ASCII without escapes (`quotes` indexes
    /// `text`), walked by its quote positions. None when the message needs the byte scanner.
    #[cfg(test)]
    pub(super) fn scan_structural(text: &'a str) -> Option<Fields<'a>> {
        match scan_spans::<false, false>(text.as_bytes(), QuoteIndex::<false>::new(text.as_bytes())?, 0)? {
            Walk::Whole(spans) => Some(Fields::Spans(text, spans)),
            Walk::Ignored | Walk::Filtered => None,
        }
    }

    /// Record the value in `slot` (only kept when values, not positions, are held).
    fn set(&mut self, slot: usize, v: Field<'a>) {
        if let Fields::Values(values) = self {
            values[slot] = Some(v);
        }
    }

    /// The fast path: a flat JSON object scanned in place. None when the message needs the
    /// full parser (nested values, escaped keys, malformed JSON).
    pub(super) fn scan(bytes: &'a [u8]) -> Option<Fields<'a>> {
        // Plain ASCII without escapes: valid UTF-8 without a separate check.
        if let Some(Walk::Whole(spans)) = scan_spans::<false, false>(bytes, QuoteIndex::<false>::new(bytes)?, 0) {
            // SAFETY: a whole walk saw every byte: plain ASCII, which is valid UTF-8.
            let text = unsafe { std::str::from_utf8_unchecked(bytes) };
            return Some(Fields::Spans(text, spans));
        }
        Fields::scan_bytes(bytes)
    }

    /// The byte scanner: any flat object (escapes, any whitespace, non-ASCII text).
    pub(super) fn scan_bytes(bytes: &'a [u8]) -> Option<Fields<'a>> {
        // One UTF-8 check for the whole message; every slice below starts and ends at an ASCII
        // byte, so it is a valid &str.
        let text = std::str::from_utf8(bytes).ok()?;
        let b = text.as_bytes();
        let mut f = Fields::default();
        let mut i = 0usize;
        let ws = |i: &mut usize| {
            while *i < b.len() && b[*i].is_ascii_whitespace() {
                *i += 1;
            }
        };
        ws(&mut i);
        if b.get(i) != Some(&b'{') {
            return None;
        }
        i += 1;
        ws(&mut i);
        if b.get(i) == Some(&b'}') {
            return Some(f);
        }
        loop {
            ws(&mut i);
            if b.get(i) != Some(&b'"') {
                return None;
            }
            let ks = i + 1;
            let ke = ks + b[ks..].iter().position(|&c| c == b'"' || c == b'\\')?;
            if b[ke] != b'"' {
                return None;
            }
            let slot = slot_of(b, ks, ke);
            i = ke + 1;
            ws(&mut i);
            if b.get(i) != Some(&b':') {
                return None;
            }
            i += 1;
            ws(&mut i);
            let v = match *b.get(i)? {
                b'"' => {
                    let s = i + 1;
                    let mut j = s;
                    let mut escaped = false;
                    loop {
                        j = find_special(b, j)?;
                        match b[j] {
                            b'"' => break,
                            b'\\' => {
                                escaped = true;
                                j += 2;
                            }
                            _ => return None,
                        }
                    }
                    i = j + 1;
                    match slot {
                        None => match continue_after_value(b, &mut i)? {
                            true => continue,
                            false => return Some(f),
                        },
                        Some(_) if escaped => {
                            Field::Str(std::borrow::Cow::Owned(serde_json::from_str::<String>(&text[s - 1..=j]).ok()?))
                        }
                        Some(_) => Field::Str(std::borrow::Cow::Borrowed(&text[s..j])),
                    }
                }
                b'-' | b'0'..=b'9' => {
                    let s = i;
                    while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                        i += 1;
                    }
                    Field::Num(&text[s..i])
                }
                b'n' if b[i..].starts_with(b"null") => {
                    i += 4;
                    Field::Null
                }
                b't' if b[i..].starts_with(b"true") => {
                    i += 4;
                    Field::Other("true".into())
                }
                b'f' if b[i..].starts_with(b"false") => {
                    i += 5;
                    Field::Other("false".into())
                }
                _ => return None,
            };
            if let Some(k) = slot {
                f.set(k, v);
            }
            match continue_after_value(b, &mut i)? {
                true => continue,
                false => return Some(f),
            }
        }
    }

    /// The slow path: any JSON, through serde_json (its errors name what is wrong).
    pub(super) fn parse(bytes: &'a [u8]) -> Result<Fields<'a>, String> {
        if let Some(f) = Fields::scan(bytes) {
            return Ok(f);
        }
        if let Err(e) = std::str::from_utf8(bytes) {
            // JSON is UTF-8; how Storage Scale writes a name that is not is documented nowhere
            // (docs/formats-read.md), so such a message is kept whole, not guessed at.
            return Err(format!(
                "not a WF_JSON object: not UTF-8 at byte {} (a file name that is not UTF-8?)",
                e.valid_up_to()
            ));
        }
        let v: serde_json::Map<String, Value> =
            serde_json::from_slice(bytes).map_err(|e| format!("not a WF_JSON object: {e}"))?;
        let mut f = Fields::default();
        for (slot, k) in KEYS.iter().enumerate() {
            if let Some(x) = v.get(*k) {
                let field = match x {
                    Value::Null => Field::Null,
                    Value::Number(n) => Field::NumOwned(n.to_string()),
                    Value::String(s) => Field::Str(std::borrow::Cow::Owned(s.clone())),
                    other => Field::Other(other.to_string()),
                };
                f.set(slot, field);
            }
        }
        Ok(f)
    }
}

/// The first `"`, `\\` or control byte at or after `from`: eight bytes at a time (SWAR).
/// The lowest flagged byte of each word is exact (borrows only ever flag bytes above it).
#[inline]
pub(super) fn find_special(b: &[u8], from: usize) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut i = from;
    while i + 8 <= b.len() {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        let x = u64::from_le_bytes(w);
        let q = x ^ (LO * b'"' as u64);
        let bs = x ^ (LO * b'\\' as u64);
        let m =
            (q.wrapping_sub(LO) & !q & HI) | (bs.wrapping_sub(LO) & !bs & HI) | (x.wrapping_sub(LO * 0x20) & !x & HI);
        if m != 0 {
            return Some(i + (m.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    // `from` may lie past the end (a message cut right after a quote).
    b.get(i..)?.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20).map(|k| i + k)
}

/// After a value: `,` (true: another member follows) or the closing `}` at the end (false);
/// None when anything else follows.
fn continue_after_value(b: &[u8], i: &mut usize) -> Option<bool> {
    while *i < b.len() && b[*i].is_ascii_whitespace() {
        *i += 1;
    }
    match b.get(*i) {
        Some(b',') => {
            *i += 1;
            Some(true)
        }
        Some(b'}') => {
            *i += 1;
            while *i < b.len() && b[*i].is_ascii_whitespace() {
                *i += 1;
            }
            (*i == b.len()).then_some(false)
        }
        _ => None,
    }
}
