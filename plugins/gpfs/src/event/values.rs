//! Decoding one attribute's value as read from a message: integers, times, permissions, text.

/// One attribute's value as read (borrowed from the message where possible).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Field<'a> {
    /// The message has no such attribute.
    Absent,
    /// JSON `null`.
    Null,
    /// A number, as written in the message.
    Num(&'a str),
    /// A number from the full parser.
    NumOwned(String),
    /// A string, unescaped.
    Str(std::borrow::Cow<'a, str>),
    /// Any other value (`true`, `false`, an array or object), as JSON text.
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

/// A number's text: a JSON number, or a string holding one.
pub(super) fn number_text<'b>(v: &'b Field<'_>) -> Option<&'b str> {
    match v {
        Field::Num(n) => Some(n),
        Field::NumOwned(n) => Some(n),
        Field::Str(s) => Some(s.trim()),
        _ => None,
    }
}

/// An unsigned integer given as a JSON number or a decimal string.
pub(super) fn uint(v: &Field<'_>, what: &str) -> Result<Option<u64>, String> {
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
pub(super) fn time(v: &Field<'_>, what: &str) -> Result<i64, String> {
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

/// `permissions`: an octal string (`"0644"`, a full `st_mode` such as `"100644"`, or Storage
/// Scale's `gpfs_mode_t` such as `"200100644"`) or a number (taken as the mode's value); only
/// the `st_mode` bits are kept ([`super::ST_MODE_BITS`]).
pub(super) fn permissions(v: &Field<'_>) -> Result<Option<u32>, String> {
    match v {
        Field::Absent | Field::Null => Ok(None),
        Field::Num(_) | Field::NumOwned(_) => {
            let n = number_text(v).unwrap_or("");
            n.parse::<u32>()
                .map(|m| Some(m & super::ST_MODE_BITS))
                .map_err(|_| format!("permissions `{n}` out of range"))
        }
        Field::Str(s) => {
            let t = s.trim();
            let t = t.strip_prefix("0o").unwrap_or(t);
            u32::from_str_radix(t, 8)
                .map(|m| Some(m & super::ST_MODE_BITS))
                .map_err(|_| format!("permissions `{s}` are not octal"))
        }
        Field::Other(o) => Err(format!("permissions are {o}")),
    }
}

/// A string value (None for any other).
pub(super) fn text(v: Field<'_>) -> Option<std::borrow::Cow<'_, str>> {
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
pub(super) fn iso_time(s: &str) -> Option<i64> {
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
