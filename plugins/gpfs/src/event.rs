//! IBM Storage Scale clustered watch folder (`mmwatch`) events, `WF_JSON` (formats.md §4.2):
//! one JSON object per Kafka message. `event` may carry `IN_ISDIR` as a second token.

use serde::Deserialize;
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    inode: Option<Value>,
    path: Option<String>,
    event: Option<String>,
    #[serde(default)]
    cookie: Option<Value>,
    #[serde(default)]
    file_size: Option<Value>,
    #[serde(default)]
    owner_user_id: Option<Value>,
    #[serde(default)]
    owner_group_id: Option<Value>,
    #[serde(default)]
    permissions: Option<Value>,
    #[serde(default)]
    atime: Option<Value>,
    #[serde(default)]
    ctime: Option<Value>,
    #[serde(default)]
    mtime: Option<Value>,
}

/// An unsigned integer given as a JSON number or a decimal string.
fn uint(v: &Option<Value>, what: &str) -> Result<Option<u64>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| format!("{what} `{n}` is not a non-negative integer")),
        Some(Value::String(s)) => s.trim().parse().map(Some).map_err(|_| format!("{what} `{s}` is not a non-negative integer")),
        Some(other) => Err(format!("{what} is {other}, not an integer")),
    }
}

/// A time: epoch seconds (integer, fractional, or as a string) or an ISO 8601 / `YYYY-MM-DD
/// HH:MM:SS` text in UTC ("The time in UTC format").
fn time(v: &Option<Value>, what: &str) -> Result<i64, String> {
    let bad = |s: &dyn std::fmt::Display| format!("{what} `{s}` is not a time");
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().filter(|f| f.is_finite()).map(|f| f.floor() as i64)).ok_or_else(|| bad(n)),
        Some(Value::String(s)) => {
            let t = s.trim();
            if let Ok(i) = t.parse::<i64>() {
                return Ok(i);
            }
            if let Ok(f) = t.parse::<f64>() {
                if f.is_finite() {
                    return Ok(f.floor() as i64);
                }
            }
            let t = t.strip_suffix(" UTC").unwrap_or(t);
            icicle_core::time::parse_iso8601(t).ok_or_else(|| bad(s))
        }
        Some(other) => Err(bad(other)),
    }
}

/// `permissions`: an octal string (`"0644"`, or a full `st_mode` such as `"100644"`) or a number
/// (taken as the mode's value).
fn permissions(v: &Option<Value>) -> Result<Option<u32>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_u64().and_then(|m| u32::try_from(m).ok()).map(Some).ok_or_else(|| format!("permissions `{n}` out of range")),
        Some(Value::String(s)) => {
            let t = s.trim();
            let t = t.strip_prefix("0o").unwrap_or(t);
            u32::from_str_radix(t, 8).map(Some).map_err(|_| format!("permissions `{s}` are not octal"))
        }
        Some(other) => Err(format!("permissions are {other}")),
    }
}

impl GpfsEvent {
    /// Parse one message value. Events Icicle drops (IN_OPEN, ...) parse as `Ignored`.
    pub fn parse(bytes: &[u8]) -> Result<GpfsEvent, String> {
        let raw: Raw = serde_json::from_slice(bytes).map_err(|e| format!("not a WF_JSON object: {e}"))?;
        let event = raw.event.as_deref().ok_or("missing `event`")?;
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
        let path = raw.path.ok_or("missing `path`")?;
        if !path.starts_with('/') {
            return Err(format!("path `{path}` is not absolute"));
        }
        let inode = uint(&raw.inode, "inode")?.ok_or("missing `inode`")?;
        let perm = permissions(&raw.permissions)?;
        let mode = match perm {
            Some(m) if m & 0o170000 != 0 => m,
            Some(m) => m | if is_dir { 0o040000 } else { 0o100000 },
            None => if is_dir { 0o040755 } else { 0o100644 },
        };
        let id = |v: &Option<Value>, what: &str| -> Result<u32, String> {
            uint(v, what)?.map_or(Ok(0), |n| u32::try_from(n).map_err(|_| format!("{what} `{n}` out of range")))
        };
        let meta = Meta {
            inode,
            mode,
            uid: id(&raw.owner_user_id, "ownerUserId")?,
            gid: id(&raw.owner_group_id, "ownerGroupId")?,
            size: uint(&raw.file_size, "fileSize")?.unwrap_or(0),
            atime: time(&raw.atime, "atime")?,
            ctime: time(&raw.ctime, "ctime")?,
            mtime: time(&raw.mtime, "mtime")?,
        };
        Ok(GpfsEvent { kind, path, meta, cookie: uint(&raw.cookie, "cookie")?.unwrap_or(0) })
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
