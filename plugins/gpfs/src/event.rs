//! IBM Storage Scale clustered watch folder (`mmwatch`) events, `WF_JSON` (formats.md §4.2):
//! one JSON object per Kafka message. `event` may carry `IN_ISDIR` as a second token.

use serde_json::Value;

use crate::scan::{tag, tag_at, tag_of, QuoteIndex};

/// What an event means for the index (Icicle's mapping, formats.md §4.3, plus move halves).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// IN_CREATE.
    Created,
    /// IN_DELETE, IN_DELETE_SELF.
    Removed,
    /// IN_MOVED_FROM: the old name of a rename (paired with IN_MOVED_TO by cookie).
    MovedFrom,
    /// IN_MOVED_TO: the new name of a rename.
    MovedTo,
    /// IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE, IN_ACCESS.
    Modified,
    /// A directory's IN_ATTRIB: its permissions or owner may have changed (what is below it
    /// may be visible to others now).
    DirAttrib,
    /// IN_OPEN, IN_CLOSE_NOWRITE, IN_MOVE_SELF, IN_IGNORED, IN_UNMOUNT: nothing to index.
    Ignored,
}

impl EventKind {
    /// The common tokens, as integer compares (None for the rest).
    #[inline]
    fn from_common_token(t: &[u8]) -> Option<EventKind> {
        const T_CREATE: u128 = tag(b"CREATE");
        const T_DELETE: u128 = tag(b"DELETE");
        const T_MODIFY: u128 = tag(b"MODIFY");
        const T_ATTRIB: u128 = tag(b"ATTRIB");
        const T_MOVED_FROM: u128 = tag(b"MOVED_FROM");
        const T_MOVED_TO: u128 = tag(b"MOVED_TO");
        const T_CLOSE_WRITE: u128 = tag(b"CLOSE_WRITE");
        const T_ACCESS: u128 = tag(b"ACCESS");
        const T_DELETE_SELF: u128 = tag(b"DELETE_SELF");
        const T_OPEN: u128 = tag(b"OPEN");
        const T_CLOSE_NOWRITE: u128 = tag(b"CLOSE_NOWRITE");
        const T_MOVE_SELF: u128 = tag(b"MOVE_SELF");
        const T_IGNORED: u128 = tag(b"IGNORED");
        const T_UNMOUNT: u128 = tag(b"UNMOUNT");
        match tag_of(t.strip_prefix(b"IN_")?)? {
            T_CREATE => Some(EventKind::Created),
            T_DELETE | T_DELETE_SELF => Some(EventKind::Removed),
            T_MODIFY | T_ATTRIB | T_CLOSE_WRITE | T_ACCESS => Some(EventKind::Modified),
            T_MOVED_FROM => Some(EventKind::MovedFrom),
            T_MOVED_TO => Some(EventKind::MovedTo),
            T_OPEN | T_CLOSE_NOWRITE | T_MOVE_SELF | T_IGNORED | T_UNMOUNT => Some(EventKind::Ignored),
            _ => None,
        }
    }

    /// The kind for an `event` token.
    pub fn from_token(t: &str) -> Option<EventKind> {
        EventKind::from_common_token(t.as_bytes())
    }

    /// The kind of an `event` value of the usual shape (one token, then ` IN_ISDIR` or not).
    #[inline]
    fn of_value(v: &[u8]) -> Option<(EventKind, bool)> {
        match v.strip_suffix(b" IN_ISDIR") {
            Some(b"IN_ATTRIB") => Some((EventKind::DirAttrib, true)),
            Some(t) => Some((EventKind::from_common_token(t)?, true)),
            None => Some((EventKind::from_common_token(v)?, false)),
        }
    }
}

/// Event names an ingestion filter may drop: the ones that only modify an object (dropping
/// creates, removals or moves would corrupt the state).
pub const FILTERABLE_EVENTS: [&str; 4] = ["IN_ACCESS", "IN_ATTRIB", "IN_MODIFY", "IN_CLOSE_WRITE"];

/// An object's metadata as the event reports it (no stat is taken); `mode` is the full
/// `st_mode` (type bits from `permissions` when present, else from `IN_ISDIR`).
pub use icicle_core::record::Attrs as Meta;

/// One parsed watch-folder event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpfsEvent {
    pub kind: EventKind,
    /// The path as reported (absolute, on the GPFS mount); shared with the state that keeps it.
    pub path: std::sync::Arc<str>,
    pub meta: Meta,
    /// Pairs IN_MOVED_FROM with IN_MOVED_TO (0 when absent).
    pub cookie: u64,
}

/// One attribute's value as read (borrowed from the message where possible).
#[derive(Debug, Clone, PartialEq)]
enum Field<'a> {
    Absent,
    Null,
    Num(&'a str),
    /// A number from the full parser.
    NumOwned(String),
    Str(std::borrow::Cow<'a, str>),
    Other(String),
}

impl std::fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Field::Absent => f.write_str("absent"),
            Field::Null => f.write_str("null"),
            Field::Num(n) => f.write_str(n),
            Field::NumOwned(n) => f.write_str(n),
            Field::Str(s) => f.write_str(s),
            Field::Other(o) => f.write_str(o),
        }
    }
}

/// The attributes icicle reads, in WF_JSON's names.
const KEYS: [&str; 11] = ["inode", "path", "event", "cookie", "fileSize", "ownerUserId", "ownerGroupId", "permissions", "atime", "ctime", "mtime"];

/// Slots of [`KEYS`].
const INODE: usize = 0;
const PATH: usize = 1;
const EVENT: usize = 2;
const COOKIE: usize = 3;
const FILE_SIZE: usize = 4;
const OWNER_USER_ID: usize = 5;
const OWNER_GROUP_ID: usize = 6;
const PERMISSIONS: usize = 7;
const ATIME: usize = 8;
const CTIME: usize = 9;
const MTIME: usize = 10;

/// The slot of the key `b[start..end]`: its first eight bytes pick a bucket (the multiplier
/// gives each of the eleven names its own), and the whole [`tag`] must match.
#[inline(always)]
fn slot_of(b: &[u8], start: usize, end: usize) -> Option<usize> {
    const MUL: u64 = 0x63ca_828d_d5f4_b3b3;
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
enum Walk {
    /// The whole message is a flat object of plain ASCII without escapes; where each
    /// attribute icicle reads sits.
    Whole([Span; 11]),
    /// The `event` attribute names an event icicle ignores: the walk stopped there.
    Ignored,
    /// The `event` attribute names an event the ingestion filter drops: the walk stopped there.
    Filtered,
}

/// Whether a walk stops at an `event` value (without its quotes): 1 for an event icicle
/// ignores, 2 for one in the ingestion filter `mask` ([`filter_mask`]), 0 to read on.
/// (`FILTER` false compiles the filter out.)
#[inline(always)]
fn stop_at_event<const FILTER: bool>(value: &[u8], mask: u32) -> u8 {
    match EventKind::of_value(value) {
        // A directory's own modify/attrib/access/close events: directories have no records.
        Some((EventKind::Ignored, _)) | Some((EventKind::Modified, true)) => 1,
        Some((EventKind::Modified | EventKind::DirAttrib, _))
            if FILTER && mask != 0 && filter_bit(value.strip_suffix(b" IN_ISDIR").unwrap_or(value)) & mask != 0 =>
        {
            2
        }
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

/// The ingestion-filter bit of an event name (0 for names that cannot be filtered).
fn filter_bit(name: &[u8]) -> u32 {
    FILTERABLE_EVENTS.iter().position(|f| f.as_bytes() == name).map_or(0, |i| 1 << i)
}

/// The mask of filter names, for [`GpfsEvent::parse_filtered`]; an error names one that
/// cannot be filtered.
pub fn filter_mask(names: &[String]) -> Result<u32, String> {
    names.iter().try_fold(0, |m, n| match filter_bit(n.as_bytes()) {
        0 => Err(format!("`{n}` cannot be filtered (one of {})", FILTERABLE_EVENTS.join(", "))),
        b => Ok(m | b),
    })
}

/// [`scan_spans`] for what mmwatch sends: compact (no spaces), string and number values only.
/// None as soon as the message is anything else (the caller then tries [`scan_spans`], unless
/// `quotes` was refused).
#[inline(always)]
fn scan_compact<const AVX2: bool, const FILTER: bool>(b: &[u8], quotes: &mut QuoteIndex<'_, AVX2>, mask: u32) -> Option<Walk> {
    let mut spans = [Span::default(); 11];
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
fn scan_spans<const AVX2: bool, const FILTER: bool>(b: &[u8], mut quotes: QuoteIndex<'_, AVX2>, mask: u32) -> Option<Walk> {
    let mut spans = [Span::default(); 11];
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
enum SpanKind {
    #[default]
    Absent,
    Str,
    Num,
    Null,
    True,
    False,
}

/// Where a value sits in the message (the structural path keeps positions, not values).
#[derive(Clone, Copy, Default, PartialEq, Debug)]
struct Span {
    start: u16,
    end: u16,
    kind: SpanKind,
}

/// The attributes of one message.
enum Fields<'a> {
    /// Found by the structural path: positions in the message.
    Spans(&'a str, [Span; 11]),
    /// Found by the byte scanner or the full parser.
    Values(Box<[Option<Field<'a>>; 11]>),
}

impl Default for Fields<'_> {
    fn default() -> Self {
        Fields::Values(Default::default())
    }
}

impl<'a> Fields<'a> {
    fn get(&self, slot: usize) -> Field<'a> {
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
    fn scan_structural(text: &'a str) -> Option<Fields<'a>> {
        match scan_spans::<false, false>(text.as_bytes(), QuoteIndex::<false>::new(text.as_bytes())?, 0)? {
            Walk::Whole(spans) => Some(Fields::Spans(text, spans)),
            Walk::Ignored | Walk::Filtered => None,
        }
    }

    fn set(&mut self, slot: usize, v: Field<'a>) {
        if let Fields::Values(values) = self {
            values[slot] = Some(v);
        }
    }

    /// The fast path: a flat JSON object scanned in place. None when the message needs the
    /// full parser (nested values, escaped keys, malformed JSON).
    fn scan(bytes: &'a [u8]) -> Option<Fields<'a>> {
        // Plain ASCII without escapes: valid UTF-8 without a separate check.
        if let Some(Walk::Whole(spans)) = scan_spans::<false, false>(bytes, QuoteIndex::<false>::new(bytes)?, 0) {
            // SAFETY: a whole walk saw every byte: plain ASCII, which is valid UTF-8.
            let text = unsafe { std::str::from_utf8_unchecked(bytes) };
            return Some(Fields::Spans(text, spans));
        }
        Fields::scan_bytes(bytes)
    }

    /// The byte scanner: any flat object (escapes, any whitespace, non-ASCII text).
    fn scan_bytes(bytes: &'a [u8]) -> Option<Fields<'a>> {
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
                        Some(_) if escaped => Field::Str(std::borrow::Cow::Owned(serde_json::from_str::<String>(&text[s - 1..=j]).ok()?)),
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
    fn parse(bytes: &'a [u8]) -> Result<Fields<'a>, String> {
        if let Some(f) = Fields::scan(bytes) {
            return Ok(f);
        }
        let v: serde_json::Map<String, Value> = serde_json::from_slice(bytes).map_err(|e| format!("not a WF_JSON object: {e}"))?;
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
fn find_special(b: &[u8], from: usize) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut i = from;
    while i + 8 <= b.len() {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        let x = u64::from_le_bytes(w);
        let q = x ^ (LO * b'"' as u64);
        let bs = x ^ (LO * b'\\' as u64);
        let m = (q.wrapping_sub(LO) & !q & HI) | (bs.wrapping_sub(LO) & !bs & HI) | (x.wrapping_sub(LO * 0x20) & !x & HI);
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

/// A number's text: a JSON number, or a string holding one.
fn number_text<'b>(v: &'b Field<'_>) -> Option<&'b str> {
    match v {
        Field::Num(n) => Some(n),
        Field::NumOwned(n) => Some(n),
        Field::Str(s) => Some(s.trim()),
        _ => None,
    }
}

/// An unsigned integer given as a JSON number or a decimal string.
fn uint(v: &Field<'_>, what: &str) -> Result<Option<u64>, String> {
    match v {
        Field::Absent | Field::Null => Ok(None),
        Field::Other(o) => Err(format!("{what} is {o}, not an integer")),
        _ => {
            let t = number_text(v).unwrap_or("");
            t.parse().map(Some).map_err(|_| format!("{what} `{t}` is not a non-negative integer"))
        }
    }
}

/// A time: epoch seconds (integer, fractional, or as a string) or an ISO 8601 / `YYYY-MM-DD
/// HH:MM:SS` text in UTC ("The time in UTC format").
fn time(v: &Field<'_>, what: &str) -> Result<i64, String> {
    let t = match v {
        Field::Absent | Field::Null => return Ok(0),
        Field::Other(o) => return Err(format!("{what} `{o}` is not a time")),
        _ => number_text(v).unwrap_or(""),
    };
    // Text that looks like a date is a date; anything else a number of seconds.
    if t.len() >= 19 && t.as_bytes()[4] == b'-' {
        let iso = t.strip_suffix(" UTC").unwrap_or(t);
        return icicle_core::time::parse_iso8601(iso).ok_or_else(|| format!("{what} `{t}` is not a time"));
    }
    if let Ok(i) = t.parse::<i64>() {
        return Ok(i);
    }
    match t.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(f.floor() as i64),
        _ => Err(format!("{what} `{t}` is not a time")),
    }
}

/// `permissions`: an octal string (`"0644"`, or a full `st_mode` such as `"100644"`) or a number
/// (taken as the mode's value).
fn permissions(v: &Field<'_>) -> Result<Option<u32>, String> {
    match v {
        Field::Absent | Field::Null => Ok(None),
        Field::Num(_) | Field::NumOwned(_) => {
            let n = number_text(v).unwrap_or("");
            n.parse::<u32>().map(Some).map_err(|_| format!("permissions `{n}` out of range"))
        }
        Field::Str(s) => {
            let t = s.trim();
            let t = t.strip_prefix("0o").unwrap_or(t);
            u32::from_str_radix(t, 8).map(Some).map_err(|_| format!("permissions `{s}` are not octal"))
        }
        Field::Other(o) => Err(format!("permissions are {o}")),
    }
}

fn text(v: Field<'_>) -> Option<std::borrow::Cow<'_, str>> {
    match v {
        Field::Str(s) => Some(s),
        _ => None,
    }
}

/// The last ISO time parsed on this thread, as text (up to 32 bytes) and seconds.
#[derive(Clone, Copy)]
struct LastTime {
    len: usize,
    text: [u8; 32],
    secs: Option<i64>,
}

thread_local! {
    static LAST_TIME: std::cell::Cell<LastTime> = const { std::cell::Cell::new(LastTime { len: usize::MAX, text: [0; 32], secs: None }) };
}

/// [`icicle_core::time::parse_iso8601`], remembering the last answer: a burst of events
/// usually carries the same second.
#[inline]
fn iso_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    LAST_TIME.with(|last| {
        let l = last.get();
        if l.len == b.len() && l.text.get(..b.len()) == Some(b) {
            return l.secs;
        }
        let secs = icicle_core::time::parse_iso8601(s);
        if b.len() <= 32 {
            let mut text = [0u8; 32];
            text[..b.len()].copy_from_slice(b);
            last.set(LastTime { len: b.len(), text, secs });
        }
        secs
    })
}

impl GpfsEvent {
    /// An event icicle ignores (IN_OPEN, ...): it carries nothing else (its path is empty, its
    /// metadata zero), and the structural path does not read its message past `event`.
    pub fn ignored() -> GpfsEvent {
        static EMPTY: std::sync::OnceLock<std::sync::Arc<str>> = std::sync::OnceLock::new();
        GpfsEvent { kind: EventKind::Ignored, path: EMPTY.get_or_init(|| "".into()).clone(), meta: Meta::default(), cookie: 0 }
    }

    /// An event the ingestion filter dropped: like [`GpfsEvent::ignored`], marked so that
    /// [`GpfsEvent::is_filtered`] tells it apart.
    pub fn filtered() -> GpfsEvent {
        GpfsEvent { cookie: u64::MAX, ..GpfsEvent::ignored() }
    }

    /// Whether this is [`GpfsEvent::filtered`].
    pub fn is_filtered(&self) -> bool {
        self.kind == EventKind::Ignored && self.cookie == u64::MAX
    }

    /// Parse one message value. Events Icicle drops (IN_OPEN, ...) parse as `Ignored`
    /// ([`GpfsEvent::ignored`]).
    pub fn parse(bytes: &[u8]) -> Result<GpfsEvent, String> {
        GpfsEvent::parse_filtered(bytes, 0)
    }

    /// [`GpfsEvent::parse`], with the events in the ingestion filter `mask` ([`filter_mask`])
    /// dropped as [`GpfsEvent::filtered`] (the structural path stops at their `event`).
    pub fn parse_filtered(bytes: &[u8], mask: u32) -> Result<GpfsEvent, String> {
        #[cfg(target_arch = "x86_64")]
        if crate::scan::has_avx2() {
            // SAFETY: the CPU has AVX2 and BMI1.
            if let Some(r) = unsafe { GpfsEvent::parse_structural_avx2(bytes, mask) } {
                return r;
            }
            return GpfsEvent::parse_slow(bytes, mask);
        }
        let r = if mask == 0 { GpfsEvent::parse_structural::<false, false>(bytes, 0) } else { GpfsEvent::parse_structural::<false, true>(bytes, mask) };
        if let Some(r) = r {
            return r;
        }
        GpfsEvent::parse_slow(bytes, mask)
    }

    /// The structural parser's answer (`None`: it hands the message to the slow path) and the
    /// slow path's, for the fuzz harness that checks they agree.
    pub fn parse_both_ways(bytes: &[u8], mask: u32) -> (Option<Result<GpfsEvent, String>>, Result<GpfsEvent, String>) {
        let fast = if mask == 0 { GpfsEvent::parse_structural::<false, false>(bytes, 0) } else { GpfsEvent::parse_structural::<false, true>(bytes, mask) };
        (fast, GpfsEvent::parse_slow(bytes, mask))
    }

    /// Messages the structural path does not take, filtered by the `event` value they parsed
    /// to (its first token other than `IN_ISDIR`, as [`GpfsEvent::from_fields`] reads it).
    fn parse_slow(bytes: &[u8], mask: u32) -> Result<GpfsEvent, String> {
        let fields = Fields::parse(bytes)?;
        let ev = GpfsEvent::from_fields(&fields)?;
        if mask != 0 && matches!(ev.kind, EventKind::Modified | EventKind::DirAttrib) {
            let name = text(fields.get(EVENT));
            let first = name.as_deref().and_then(|e| e.split(|c: char| c.is_whitespace() || c == '|' || c == ',').find(|t| !t.is_empty() && *t != "IN_ISDIR"));
            if first.is_some_and(|t| filter_bit(t.as_bytes()) & mask != 0) {
                return Ok(GpfsEvent::filtered());
            }
        }
        Ok(ev)
    }

    /// [`GpfsEvent::parse_structural`] compiled for AVX2 and BMI1 (wider compares, `tzcnt`).
    ///
    /// # Safety
    /// The CPU must have AVX2 and BMI1.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi1")]
    unsafe fn parse_structural_avx2(bytes: &[u8], mask: u32) -> Option<Result<GpfsEvent, String>> {
        if mask == 0 {
            GpfsEvent::parse_structural::<true, false>(bytes, 0)
        } else {
            GpfsEvent::parse_structural::<true, true>(bytes, mask)
        }
    }

    /// The structural path, when the message is plain ASCII without escapes; None otherwise.
    #[inline(always)]
    fn parse_structural<const AVX2: bool, const FILTER: bool>(bytes: &[u8], mask: u32) -> Option<Result<GpfsEvent, String>> {
        let mut quotes = QuoteIndex::<AVX2>::new(bytes)?;
        let walk = match scan_compact::<AVX2, FILTER>(bytes, &mut quotes, mask) {
            Some(w) => w,
            None if quotes.refused() => return None,
            None => scan_spans::<AVX2, FILTER>(bytes, QuoteIndex::<AVX2>::new(bytes)?, mask)?,
        };
        let spans = match walk {
            Walk::Whole(spans) => spans,
            Walk::Ignored => return Some(Ok(GpfsEvent::ignored())),
            Walk::Filtered => return Some(Ok(GpfsEvent::filtered())),
        };
        // SAFETY: a whole walk saw every byte: plain ASCII, which is valid UTF-8.
        let text = unsafe { std::str::from_utf8_unchecked(bytes) };
        Some(match GpfsEvent::from_spans(text, &spans) {
            Some(ev) => Ok(ev),
            None => GpfsEvent::from_fields(&Fields::Spans(text, spans)),
        })
    }

    /// The usual message, converted straight from its bytes: decimal digits, octal
    /// permissions, `YYYY-MM-DDTHH:MM:SS` times, one event token with an optional `IN_ISDIR`.
    /// None for anything else, which [`GpfsEvent::from_fields`] handles (and explains).
    #[inline(always)]
    fn from_spans(text: &str, spans: &[Span; 11]) -> Option<GpfsEvent> {
        let string_at = |k: usize| -> &str {
            let sp = spans[k];
            text.get(sp.start as usize..sp.end as usize).unwrap_or("")
        };
        let bytes = |k: usize| string_at(k).as_bytes();
        let string = |k: usize| (spans[k].kind == SpanKind::Str).then(|| bytes(k));
        let digits = |s: &[u8]| -> Option<u64> {
            if s.is_empty() || s.len() > 19 {
                return None;
            }
            s.iter().try_fold(0u64, |v, &c| c.is_ascii_digit().then(|| v * 10 + (c - b'0') as u64))
        };
        // An absent attribute is 0; a number or a string of digits is its value.
        let uint = |k: usize| -> Option<u64> {
            match spans[k].kind {
                SpanKind::Absent => Some(0),
                SpanKind::Str | SpanKind::Num => digits(bytes(k)),
                _ => None,
            }
        };
        let time = |k: usize| -> Option<i64> {
            match spans[k].kind {
                SpanKind::Absent => Some(0),
                SpanKind::Str if bytes(k).len() >= 19 && bytes(k)[4] == b'-' => iso_time(string_at(k)),
                SpanKind::Str | SpanKind::Num => digits(bytes(k)).and_then(|v| i64::try_from(v).ok()),
                _ => None,
            }
        };
        let (kind, is_dir) = EventKind::of_value(string(EVENT)?)?;
        if kind == EventKind::Ignored || (kind == EventKind::Modified && is_dir) {
            return Some(GpfsEvent::ignored());
        }
        let path = string(PATH)?;
        if path.first() != Some(&b'/') {
            return None;
        }
        let inode = match spans[INODE].kind {
            SpanKind::Str | SpanKind::Num => digits(bytes(INODE))?,
            _ => return None,
        };
        let perm = match spans[PERMISSIONS].kind {
            SpanKind::Absent => None,
            SpanKind::Str => {
                let p = bytes(PERMISSIONS);
                if p.is_empty() || p.len() > 10 {
                    return None;
                }
                Some(p.iter().try_fold(0u32, |v, &c| matches!(c, b'0'..=b'7').then(|| v * 8 + (c - b'0') as u32))?)
            }
            _ => return None,
        };
        let mode = match perm {
            Some(m) if m & 0o170000 != 0 => m,
            Some(m) => m | if is_dir { 0o040000 } else { 0o100000 },
            None => {
                if is_dir {
                    0o040755
                } else {
                    0o100644
                }
            }
        };
        let same = |x: usize, y: usize| spans[x].kind == spans[y].kind && bytes(x) == bytes(y);
        let atime = time(ATIME)?;
        let ctime = if same(CTIME, ATIME) { atime } else { time(CTIME)? };
        let mtime = if same(MTIME, CTIME) { ctime } else { time(MTIME)? };
        let meta = Meta {
            inode,
            mode,
            uid: u32::try_from(uint(OWNER_USER_ID)?).ok()?,
            gid: u32::try_from(uint(OWNER_GROUP_ID)?).ok()?,
            size: uint(FILE_SIZE)?,
            atime,
            ctime,
            mtime,
        };
        Some(GpfsEvent { kind, path: string_at(PATH).into(), meta, cookie: uint(COOKIE)? })
    }

    /// Convert attributes however they were found; errors say what is wrong.
    fn from_fields(raw: &Fields<'_>) -> Result<GpfsEvent, String> {
        let event = text(raw.get(EVENT)).ok_or("missing `event`")?;
        let event: &str = &event;
        let mut kind = None;
        let mut is_dir = false;
        // The usual shapes: one token, or one token and ` IN_ISDIR`.
        let (first, dir_suffix) = match event.strip_suffix(" IN_ISDIR") {
            Some(f) => (f, true),
            None => (event, false),
        };
        if !first.contains([' ', '\t', '|', ',', '\n', '\r']) {
            if let Some(k) = EventKind::from_token(first) {
                kind = Some(k);
                is_dir = dir_suffix;
            }
        }
        if kind.is_none() {
            for tok in event.split(|c: char| c.is_whitespace() || c == '|' || c == ',').filter(|t| !t.is_empty()) {
                if tok == "IN_ISDIR" {
                    is_dir = true;
                } else if kind.is_none() {
                    kind = Some(EventKind::from_token(tok).ok_or_else(|| format!("unknown event `{tok}`"))?);
                }
            }
        }
        let mut kind = kind.ok_or_else(|| format!("event `{event}` names no event type"))?;
        if kind == EventKind::Modified && is_dir && event.split(|c: char| c.is_whitespace() || c == '|' || c == ',').any(|t| t == "IN_ATTRIB") {
            kind = EventKind::DirAttrib;
        }
        // A directory modified (an entry added, read, written): nothing to index.
        if kind == EventKind::Ignored || (kind == EventKind::Modified && is_dir) {
            return Ok(GpfsEvent::ignored());
        }
        let path = text(raw.get(PATH)).ok_or("missing `path`")?;
        let path: &str = &path;
        if !path.starts_with('/') {
            return Err(format!("path `{path}` is not absolute"));
        }
        let inode = uint(&raw.get(INODE), "inode")?.ok_or("missing `inode`")?;
        let perm = permissions(&raw.get(PERMISSIONS))?;
        let mode = match perm {
            Some(m) if m & 0o170000 != 0 => m,
            Some(m) => m | if is_dir { 0o040000 } else { 0o100000 },
            None => {
                if is_dir {
                    0o040755
                } else {
                    0o100644
                }
            }
        };
        let id = |slot: usize| -> Result<u32, String> {
            let key = KEYS[slot];
            uint(&raw.get(slot), key)?.map_or(Ok(0), |n| u32::try_from(n).map_err(|_| format!("{key} `{n}` out of range")))
        };
        // The three times are often the same text: parse each distinct one once.
        let atime = time(&raw.get(ATIME), "atime")?;
        let ctime = if raw.get(CTIME) == raw.get(ATIME) { atime } else { time(&raw.get(CTIME), "ctime")? };
        let mtime = if raw.get(MTIME) == raw.get(CTIME) { ctime } else { time(&raw.get(MTIME), "mtime")? };
        let meta = Meta {
            inode,
            mode,
            uid: id(OWNER_USER_ID)?,
            gid: id(OWNER_GROUP_ID)?,
            size: uint(&raw.get(FILE_SIZE), "fileSize")?.unwrap_or(0),
            atime,
            ctime,
            mtime,
        };
        Ok(GpfsEvent { kind, path: path.into(), meta, cookie: uint(&raw.get(COOKIE), "cookie")?.unwrap_or(0) })
    }

    /// Render as a WF_JSON message (what the testkit produces).
    pub fn to_json(&self) -> String {
        let ev = match self.kind {
            EventKind::Created => "IN_CREATE",
            EventKind::Removed => "IN_DELETE",
            EventKind::MovedFrom => "IN_MOVED_FROM",
            EventKind::MovedTo => "IN_MOVED_TO",
            EventKind::Modified => "IN_MODIFY",
            EventKind::DirAttrib => "IN_ATTRIB",
            EventKind::Ignored => "IN_OPEN",
        };
        let event = if self.meta.is_dir() { format!("{ev} IN_ISDIR") } else { ev.to_string() };
        serde_json::json!({
            "WF_JSON": "0.0.1", "wd": 1, "cookie": self.cookie.to_string(), "mask": "0x0", "event": event, "path": &*self.path,
            "clusterName": "icicle-testkit", "nodeName": "node1", "nfsClientIp": "", "fsName": "fs1",
            "inode": self.meta.inode.to_string(), "filesetID": "0", "linkCount": "1", "openFlags": "0", "poolName": "system",
            "fileSize": self.meta.size.to_string(), "ownerUserId": self.meta.uid.to_string(), "ownerGroupId": self.meta.gid.to_string(),
            "atime": icicle_core::time::iso8601(self.meta.atime), "ctime": icicle_core::time::iso8601(self.meta.ctime),
            "mtime": icicle_core::time::iso8601(self.meta.mtime), "eventTime": icicle_core::time::iso8601(icicle_core::time::now_epoch()),
            "clientUserId": "0", "clientGroupId": "0", "permissions": format!("{:o}", self.meta.mode),
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn icicles_synthetic_message_and_directory_flag() {
        let e = GpfsEvent::parse(br#"{"inode": 12345, "path": "/gpfs/fs1/file.txt", "event": "IN_CREATE", "fileSize": 1024, "atime": 1700000000, "ctime": 1700000001, "mtime": 1700000002, "ownerUserId": 1000, "ownerGroupId": 1000, "permissions": "0644"}"#).unwrap();
        assert_eq!(e.kind, EventKind::Created);
        assert_eq!(
            e.meta,
            Meta { inode: 12345, mode: 0o100644, uid: 1000, gid: 1000, size: 1024, atime: 1_700_000_000, ctime: 1_700_000_001, mtime: 1_700_000_002 }
        );
        let d = GpfsEvent::parse(br#"{"inode": "7", "path": "/gpfs/fs1/d", "event": "IN_CREATE IN_ISDIR", "cookie": "0"}"#).unwrap();
        assert!(d.meta.is_dir());
        let m = GpfsEvent::parse(br#"{"inode": 7, "path": "/gpfs/fs1/d", "event": "IN_MOVED_TO IN_ISDIR", "cookie": 99, "mtime": "2024-03-16T02:10:01Z"}"#)
            .unwrap();
        assert_eq!((m.kind, m.cookie, m.meta.mtime), (EventKind::MovedTo, 99, 1_710_555_001));
        assert_eq!(GpfsEvent::parse(br#"{"inode": 7, "path": "/x", "event": "IN_OPEN"}"#), Ok(GpfsEvent::ignored()));
        // An ignored event's message is not read past its `event`, on every path.
        for msg in [
            &br#"{"event": "IN_CLOSE_NOWRITE", "inode": "x", "path": 1, "#[..],
            br#"{"event": "IN_OPEN IN_ISDIR", "inode": -1}"#,
            br#"{"event": "IN_ACCESS\u0020", "inode": 1}"#,
        ] {
            let want = if msg.windows(9).any(|w| w == b"IN_ACCESS") { Err(()) } else { Ok(GpfsEvent::ignored()) };
            assert_eq!(GpfsEvent::parse(msg).map_err(|_| ()), want, "{}", String::from_utf8_lossy(msg));
        }
    }

    #[test]
    fn round_trip_through_the_testkit_rendering() {
        let e = GpfsEvent {
            kind: EventKind::MovedFrom,
            path: "/g/a b".into(),
            meta: Meta { inode: 9, mode: 0o120777, uid: 1, gid: 2, size: 3, atime: 4, ctime: 5, mtime: 6 },
            cookie: 77,
        };
        assert_eq!(GpfsEvent::parse(e.to_json().as_bytes()).unwrap(), e);
    }

    #[test]
    fn the_in_place_scanner_and_the_full_parser_agree() {
        let flat = r#"{"inode": "12", "path": "/g/a \"b\"", "event": "IN_MOVED_TO IN_ISDIR", "cookie": 5, "fileSize": 7, "ownerUserId": "1", "ownerGroupId": 2, "permissions": 16877, "atime": 1.5, "ctime": "3", "mtime": "1970-01-01 00:00:04 UTC", "linkCount": true, "x": null}"#;
        assert!(Fields::scan(flat.as_bytes()).is_some());
        let nested = flat.replacen('{', r#"{"acls": {"a": [1, 2]}, "#, 1);
        assert!(Fields::scan(nested.as_bytes()).is_none());
        let (a, b) = (GpfsEvent::parse(flat.as_bytes()).unwrap(), GpfsEvent::parse(nested.as_bytes()).unwrap());
        assert_eq!(a, b);
        assert_eq!((&*a.path, a.cookie, a.meta.mode, a.meta.atime, a.meta.mtime), ("/g/a \"b\"", 5, 0o40755, 1, 4));
    }

    #[test]
    fn the_structural_scanner_agrees_with_the_byte_scanner() {
        let base = GpfsEvent {
            kind: EventKind::MovedTo,
            path: "/g/d/a b.txt".into(),
            meta: Meta { inode: 9, mode: 0o100640, uid: 1, gid: 2, size: 3, atime: 4, ctime: 5, mtime: 6 },
            cookie: 77,
        };
        let compact = base.to_json();
        let spaced = compact.replace("\",\"", "\", \"").replace("\":", "\": ").replacen('{', "{ ", 1).replace('}', " }");
        let numbers = r#"{"wd": 1, "inode": 12, "path": "/g/x", "event": "IN_CREATE IN_ISDIR", "fileSize": 5, "w": -0.5e3, "x": null, "y": true, "z": false, "atime": 17}"#;
        for msg in [compact.as_str(), spaced.as_str(), numbers, "{}", " { } "] {
            let fast = Fields::scan_structural(msg).unwrap_or_else(|| panic!("structural path refused {msg}"));
            let slow = Fields::scan_bytes(msg.as_bytes()).expect("byte scanner");
            let all = |f: &Fields<'_>| (0..KEYS.len()).map(|k| f.get(k).to_string()).collect::<Vec<_>>();
            assert_eq!(all(&fast), all(&slow), "{msg}");
        }
        assert_eq!(GpfsEvent::parse(spaced.as_bytes()).unwrap(), base);
        // The compact walk takes the compact message, leaves the spaced ones to the general walk.
        let walk = |msg: &str| scan_spans::<false, false>(msg.as_bytes(), QuoteIndex::<false>::new(msg.as_bytes()).expect("short"), 0);
        let compact_walk = |msg: &str| scan_compact::<false, false>(msg.as_bytes(), &mut QuoteIndex::<false>::new(msg.as_bytes()).expect("short"), 0);
        assert_eq!(compact_walk(&compact), walk(&compact));
        assert!(compact_walk(&compact).is_some());
        for msg in
            [spaced.as_str(), numbers, " { } ", r#"{"a":"b"} "#, r#"{"a":"b",}"#, r#"{"a":"b""c":1}"#, r#"{"a":tru}"#, r#"{"a":null}"#, r#"{"a":{"b":1}}"#]
        {
            assert_eq!(compact_walk(msg), None, "{msg}");
        }
        // Refused by the structural path, taken by the others: trailing bytes, nesting, bad separators.
        for msg in [r#"{"a": "b"} x"#, r#"{"a": {"b": 1}}"#, r#"{"a" "b"}"#, r#"{"a": "b",}"#, r#"{"a": "b" "c": 1}"#, r#"{"a": tru}"#] {
            assert!(Fields::scan_structural(msg).is_none(), "{msg}");
        }
        assert!(GpfsEvent::parse(numbers.as_bytes()).unwrap().meta.is_dir());
    }

    #[test]
    fn the_direct_conversion_agrees_with_the_general_one() {
        let events = [
            "IN_CREATE",
            "IN_CREATE IN_ISDIR",
            "IN_DELETE",
            "IN_MOVED_FROM",
            "IN_MOVED_TO IN_ISDIR",
            "IN_MODIFY",
            "IN_ATTRIB",
            "IN_CLOSE_WRITE",
            "IN_OPEN",
            "IN_ACCESS",
            "IN_CLOSE_NOWRITE",
            "IN_DELETE_SELF",
            "IN_ISDIR IN_CREATE",
            "IN_CREATE|IN_ISDIR",
            "IN_BOGUS",
        ];
        let numbers = ["\"0\"", "\"12\"", "7", "\" 7\"", "-1", "1.5", "\"99999999999999999999\"", "\"4294967296\"", "null", "true", "\"x\""];
        let times = [
            "\"2026-11-30T03:12:19+00:00\"",
            "\"2026-11-30T03:12:19Z\"",
            "\"2026-11-30 03:12:19 UTC\"",
            "\"2026-11-30T03:12:19+02:00\"",
            "\"2026-13-30T03:12:19+00:00\"",
            "1700000000",
            "\"1700000000\"",
            "1.5",
            "\"soon\"",
        ];
        let perms = ["\"100644\"", "\"644\"", "\"40755\"", "\"0o644\"", "\"9\"", "420", "\"\""];
        let mut rng = icicle_core::rng::Rng::new(0x2545_f491_4f6c_dd1d);
        let (mut fast, mut ignored) = (0, 0);
        for _ in 0..20_000 {
            let x = rng.next_u64();
            // Usually a usual value (the first two of each list), else any.
            let pick = |list: &[&'static str], shift: u32| {
                let r = x.rotate_right(shift);
                list[(r >> 2) as usize % if r & 3 != 0 { 2 } else { list.len() }]
            };
            let mut members = vec![
                format!("\"event\":\"{}\"", pick(&events, 0)),
                format!("\"path\":\"{}\"", if x >> 50 & 7 == 0 { "rel/a" } else { "/gpfs/fs1/d/f" }),
                format!("\"inode\":{}", pick(&numbers, 5)),
                format!("\"cookie\":{}", pick(&numbers, 9)),
                format!("\"fileSize\":{}", pick(&numbers, 13)),
                format!("\"ownerUserId\":{}", pick(&numbers, 17)),
                format!("\"permissions\":{}", pick(&perms, 21)),
                format!("\"atime\":{}", pick(&times, 25)),
                format!("\"ctime\":{}", pick(&times, 29)),
                format!("\"mtime\":{}", pick(&times, 33)),
                "\"wd\":1".to_string(),
            ];
            // Now and then an attribute is missing.
            let mut k = 0;
            members.retain(|_| {
                k += 1;
                !(x >> (k * 5)).is_multiple_of(11)
            });
            let msg = format!("{{{}}}", members.join(","));
            let Some(walk) = scan_spans::<false, false>(msg.as_bytes(), QuoteIndex::<false>::new(msg.as_bytes()).expect("short"), 0) else { continue };
            // The compact walk (these messages are compact) finds the same, unless a value is
            // a literal, which it leaves to the general walk.
            let mut quotes = QuoteIndex::<false>::new(msg.as_bytes()).expect("short");
            let compact = scan_compact::<false, false>(msg.as_bytes(), &mut quotes, 0);
            if [":null", ":true", ":false"].iter().any(|l| msg.contains(l)) {
                assert!(compact.is_none() || compact.as_ref() == Some(&walk), "{msg}");
            } else {
                assert_eq!(compact.as_ref(), Some(&walk), "{msg}");
            }
            let spans = match walk {
                Walk::Whole(spans) => spans,
                Walk::Ignored => {
                    // The general path agrees that there is nothing more to read.
                    assert_eq!(GpfsEvent::from_fields(&Fields::parse(msg.as_bytes()).expect("flat")), Ok(GpfsEvent::ignored()), "{msg}");
                    ignored += 1;
                    continue;
                }
                Walk::Filtered => unreachable!("no filter in this test"),
            };
            let general = GpfsEvent::from_fields(&Fields::Spans(&msg, spans));
            if let Some(direct) = GpfsEvent::from_spans(&msg, &spans) {
                fast += 1;
                assert_eq!(Ok(direct), general, "{msg}");
            }
        }
        assert!(fast > 1_000, "the direct path took only {fast} messages");
        assert!(ignored > 100, "only {ignored} ignored events");
    }

    #[test]
    fn the_word_scanner_finds_the_first_special_byte() {
        let slow = |b: &[u8], from: usize| b[from..].iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20).map(|k| from + k);
        let mut rng = icicle_core::rng::Rng::new(0x2545_f491_4f6c_dd1d);
        for _ in 0..20_000 {
            let x = rng.next_u64();
            let len = (x % 40) as usize;
            let b: Vec<u8> = (0..len).map(|k| [b'a', b'"', b'\\', 0x1f, 0x20, 0x7f, 0x80, 0xff, b'#', b'!'][((x >> (k % 60)) % 10) as usize]).collect();
            let from = if len == 0 { 0 } else { (x >> 7) as usize % len };
            assert_eq!(find_special(&b, from), slow(&b, from), "{b:?} from {from}");
        }
    }

    #[test]
    fn malformed_messages_give_reasons() {
        for (msg, why) in [
            (&b"not json"[..], "not a WF_JSON object"),
            (br#"{"path": "/a", "event": "IN_CREATE"}"#, "missing `inode`"),
            (br#"{"inode": 1, "event": "IN_CREATE"}"#, "missing `path`"),
            (br#"{"inode": 1, "path": "/a"}"#, "missing `event`"),
            (br#"{"inode": 1, "path": "/a", "event": "IN_BOGUS"}"#, "unknown event `IN_BOGUS`"),
            (br#"{"inode": -1, "path": "/a", "event": "IN_CREATE"}"#, "inode"),
            (br#"{"inode": 1, "path": "/a", "event": "IN_CREATE", "mtime": "yesterday"}"#, "mtime `yesterday` is not a time"),
            (br#"{"inode": 1, "path": "a", "event": "IN_CREATE"}"#, "not absolute"),
        ] {
            let e = GpfsEvent::parse(msg).unwrap_err();
            assert!(e.contains(why), "{}: {e}", String::from_utf8_lossy(msg));
        }
    }

    #[test]
    fn the_ingestion_filter_drops_its_events_on_every_path() {
        let mask = filter_mask(&["IN_ACCESS".to_string()]).unwrap();
        let compact = br#"{"inode":"7","event":"IN_ACCESS","path":"/g/a","fileSize":"3"}"#;
        let spaced = br#"{"inode": 7, "event": "IN_ACCESS", "path": "/g/a", "fileSize": 3}"#;
        let escaped = br#"{"inode": 7, "event": "IN_ACCESS", "path": "/g/\u00e9", "fileSize": 3}"#;
        let nested = br#"{"inode": 7, "event": "IN_ACCESS", "path": "/g/d", "x": {"y": 1}}"#;
        for msg in [&compact[..], spaced, escaped, nested] {
            let text = String::from_utf8_lossy(msg);
            assert!(GpfsEvent::parse_filtered(msg, mask).unwrap().is_filtered(), "{text}");
            let kept = GpfsEvent::parse(msg).unwrap();
            assert_eq!(kept.kind, EventKind::Modified, "{text}");
            assert!(!kept.is_filtered());
            // Other events pass the filter; ignored ones stay ignored, not filtered.
            let modify = text.replace("IN_ACCESS", "IN_MODIFY");
            assert_eq!(GpfsEvent::parse_filtered(modify.as_bytes(), mask).unwrap().kind, EventKind::Modified, "{modify}");
            let open = text.replace("IN_ACCESS", "IN_OPEN");
            let ev = GpfsEvent::parse_filtered(open.as_bytes(), mask).unwrap();
            assert!(ev.kind == EventKind::Ignored && !ev.is_filtered(), "{open}");
        }
        // The slow path decides by the parsed `event` value, not a nested key.
        let nested_key = br#"{"x": {"event": "IN_ACCESS"}, "inode": 7, "event": "IN_MODIFY", "path": "/g/a"}"#;
        assert_eq!(GpfsEvent::parse_filtered(nested_key, mask).unwrap().kind, EventKind::Modified);
        let listed = br#"{"x": {}, "inode": 7, "event": "IN_ACCESS,IN_OPEN", "path": "/g/a"}"#;
        assert!(GpfsEvent::parse_filtered(listed, mask).unwrap().is_filtered());
        // A directory's own modify events carry nothing for the index, on every path; its
        // IN_ATTRIB carries its permissions (who may see what is below it).
        for msg in [
            &br#"{"inode":"8","event":"IN_MODIFY IN_ISDIR","path":"/g/d"}"#[..],
            br#"{"inode": 8, "event": "IN_ISDIR IN_CLOSE_WRITE", "path": "/g/d", "x": {}}"#,
        ] {
            assert_eq!(GpfsEvent::parse(msg).unwrap(), GpfsEvent::ignored(), "{}", String::from_utf8_lossy(msg));
        }
        let attrib_mask = filter_mask(&["IN_ATTRIB".to_string()]).unwrap();
        for msg in [
            &br#"{"inode":"8","event":"IN_ATTRIB IN_ISDIR","path":"/g/d","permissions":"40700"}"#[..],
            br#"{"inode": 8, "event": "IN_ISDIR IN_ATTRIB", "path": "/g/d", "permissions": "40700", "x": {}}"#,
        ] {
            let ev = GpfsEvent::parse(msg).unwrap();
            assert_eq!((ev.kind, ev.meta.mode), (EventKind::DirAttrib, 0o40700), "{}", String::from_utf8_lossy(msg));
            assert!(GpfsEvent::parse_filtered(msg, attrib_mask).unwrap().is_filtered(), "{}", String::from_utf8_lossy(msg));
        }
        assert!(filter_mask(&["IN_CREATE".to_string()]).unwrap_err().contains("IN_ACCESS, IN_ATTRIB, IN_MODIFY, IN_CLOSE_WRITE"));
        assert_eq!(filter_mask(&["IN_MODIFY".into(), "IN_CLOSE_WRITE".into()]).unwrap(), 4 | 8);
    }
}
