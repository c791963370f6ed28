//! IBM Storage Scale clustered watch folder (`mmwatch`) events, `WF_JSON` (formats.md §4.2):
//! one JSON object per Kafka message. `event` may carry `IN_ISDIR` as a second token.

use serde_json::Value;

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
    /// IN_OPEN, IN_CLOSE_NOWRITE, IN_MOVE_SELF, IN_IGNORED, IN_UNMOUNT: nothing to index.
    Ignored,
}

impl EventKind {
    /// The kind for an `event` token.
    pub fn from_token(t: &str) -> Option<EventKind> {
        Some(match t {
            "IN_CREATE" => EventKind::Created,
            "IN_DELETE" | "IN_DELETE_SELF" => EventKind::Removed,
            "IN_MOVED_FROM" => EventKind::MovedFrom,
            "IN_MOVED_TO" => EventKind::MovedTo,
            "IN_MODIFY" | "IN_ATTRIB" | "IN_CLOSE_WRITE" | "IN_ACCESS" => EventKind::Modified,
            "IN_OPEN" | "IN_CLOSE_NOWRITE" | "IN_MOVE_SELF" | "IN_IGNORED" | "IN_UNMOUNT" => EventKind::Ignored,
            _ => return None,
        })
    }
}

/// An object's metadata as the event reports it (no stat is taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Meta {
    pub inode: u64,
    /// Full `st_mode` (type bits from `permissions` when present, else from `IN_ISDIR`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime: i64,
    pub ctime: i64,
    pub mtime: i64,
}

impl Meta {
    /// Whether the object is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode & 0o170000 == 0o040000
    }
}

/// One parsed watch-folder event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpfsEvent {
    pub kind: EventKind,
    /// The path as reported (absolute, on the GPFS mount).
    pub path: String,
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

#[derive(Default)]
struct Fields<'a>([Option<Field<'a>>; 11]);

impl<'a> Fields<'a> {
    fn get(&self, key: &str) -> &Field<'a> {
        const ABSENT: Field<'static> = Field::Absent;
        KEYS.iter().position(|k| *k == key).and_then(|i| self.0[i].as_ref()).unwrap_or(&ABSENT)
    }

    fn set(&mut self, key: &[u8], v: Field<'a>) {
        if let Some(i) = KEYS.iter().position(|k| k.as_bytes() == key) {
            self.0[i] = Some(v);
        }
    }

    /// The fast path: a flat JSON object scanned in place. None when the message needs the
    /// full parser (nested values, escaped keys, malformed JSON).
    fn scan(bytes: &'a [u8]) -> Option<Fields<'a>> {
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
            let slot = match &b[ks..ke] {
                b"inode" => Some(0),
                b"path" => Some(1),
                b"event" => Some(2),
                b"cookie" => Some(3),
                b"fileSize" => Some(4),
                b"ownerUserId" => Some(5),
                b"ownerGroupId" => Some(6),
                b"permissions" => Some(7),
                b"atime" => Some(8),
                b"ctime" => Some(9),
                b"mtime" => Some(10),
                _ => None,
            };
            debug_assert!(slot.is_none_or(|k| KEYS[k].as_bytes() == &b[ks..ke]));
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
                f.0[k] = Some(v);
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
        for k in KEYS {
            if let Some(x) = v.get(k) {
                let field = match x {
                    Value::Null => Field::Null,
                    Value::Number(n) => Field::NumOwned(n.to_string()),
                    Value::String(s) => Field::Str(std::borrow::Cow::Owned(s.clone())),
                    other => Field::Other(other.to_string()),
                };
                f.set(k.as_bytes(), field);
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
    b[i..].iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20).map(|k| i + k)
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

fn text<'b>(v: &'b Field<'_>) -> Option<&'b str> {
    match v {
        Field::Str(s) => Some(s),
        _ => None,
    }
}

impl GpfsEvent {
    /// Parse one message value. Events Icicle drops (IN_OPEN, ...) parse as `Ignored`.
    pub fn parse(bytes: &[u8]) -> Result<GpfsEvent, String> {
        let raw = Fields::parse(bytes)?;
        let event = text(raw.get("event")).ok_or("missing `event`")?;
        let mut kind = None;
        let mut is_dir = false;
        for tok in event.split(|c: char| c.is_whitespace() || c == '|' || c == ',').filter(|t| !t.is_empty()) {
            if tok == "IN_ISDIR" {
                is_dir = true;
            } else if kind.is_none() {
                kind = Some(EventKind::from_token(tok).ok_or_else(|| format!("unknown event `{tok}`"))?);
            }
        }
        let kind = kind.ok_or_else(|| format!("event `{event}` names no event type"))?;
        let path = text(raw.get("path")).ok_or("missing `path`")?;
        if !path.starts_with('/') {
            return Err(format!("path `{path}` is not absolute"));
        }
        let inode = uint(raw.get("inode"), "inode")?.ok_or("missing `inode`")?;
        let perm = permissions(raw.get("permissions"))?;
        let mode = match perm {
            Some(m) if m & 0o170000 != 0 => m,
            Some(m) => m | if is_dir { 0o040000 } else { 0o100000 },
            None => if is_dir { 0o040755 } else { 0o100644 },
        };
        let id = |key: &str| -> Result<u32, String> {
            uint(raw.get(key), key)?.map_or(Ok(0), |n| u32::try_from(n).map_err(|_| format!("{key} `{n}` out of range")))
        };
        // The three times are often the same text: parse each distinct one once.
        let atime = time(raw.get("atime"), "atime")?;
        let ctime = if raw.get("ctime") == raw.get("atime") { atime } else { time(raw.get("ctime"), "ctime")? };
        let mtime = if raw.get("mtime") == raw.get("ctime") { ctime } else { time(raw.get("mtime"), "mtime")? };
        let meta = Meta {
            inode,
            mode,
            uid: id("ownerUserId")?,
            gid: id("ownerGroupId")?,
            size: uint(raw.get("fileSize"), "fileSize")?.unwrap_or(0),
            atime,
            ctime,
            mtime,
        };
        Ok(GpfsEvent { kind, path: path.to_string(), meta, cookie: uint(raw.get("cookie"), "cookie")?.unwrap_or(0) })
    }

    /// Render as a WF_JSON message (what the testkit produces).
    pub fn to_json(&self) -> String {
        let ev = match self.kind {
            EventKind::Created => "IN_CREATE",
            EventKind::Removed => "IN_DELETE",
            EventKind::MovedFrom => "IN_MOVED_FROM",
            EventKind::MovedTo => "IN_MOVED_TO",
            EventKind::Modified => "IN_MODIFY",
            EventKind::Ignored => "IN_OPEN",
        };
        let event = if self.meta.is_dir() { format!("{ev} IN_ISDIR") } else { ev.to_string() };
        serde_json::json!({
            "WF_JSON": "0.0.1", "wd": 1, "cookie": self.cookie.to_string(), "mask": "0x0", "event": event, "path": self.path,
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
        assert_eq!(e.meta, Meta { inode: 12345, mode: 0o100644, uid: 1000, gid: 1000, size: 1024, atime: 1_700_000_000, ctime: 1_700_000_001, mtime: 1_700_000_002 });
        let d = GpfsEvent::parse(br#"{"inode": "7", "path": "/gpfs/fs1/d", "event": "IN_CREATE IN_ISDIR", "cookie": "0"}"#).unwrap();
        assert!(d.meta.is_dir());
        let m = GpfsEvent::parse(br#"{"inode": 7, "path": "/gpfs/fs1/d", "event": "IN_MOVED_TO IN_ISDIR", "cookie": 99, "mtime": "2024-03-16T02:10:01Z"}"#).unwrap();
        assert_eq!((m.kind, m.cookie, m.meta.mtime), (EventKind::MovedTo, 99, 1_710_555_001));
        assert_eq!(GpfsEvent::parse(br#"{"inode": 7, "path": "/x", "event": "IN_OPEN"}"#).unwrap().kind, EventKind::Ignored);
    }

    #[test]
    fn round_trip_through_the_testkit_rendering() {
        let e = GpfsEvent { kind: EventKind::MovedFrom, path: "/g/a b".into(), meta: Meta { inode: 9, mode: 0o120777, uid: 1, gid: 2, size: 3, atime: 4, ctime: 5, mtime: 6 }, cookie: 77 };
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
        assert_eq!((a.path.as_str(), a.cookie, a.meta.mode, a.meta.atime, a.meta.mtime), ("/g/a \"b\"", 5, 0o40755, 1, 4));
    }

    #[test]
    fn the_word_scanner_finds_the_first_special_byte() {
        let slow = |b: &[u8], from: usize| b[from..].iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20).map(|k| from + k);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
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
}
