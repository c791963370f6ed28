//! IBM Storage Scale clustered watch folder (`mmwatch`) events, `WF_JSON` (formats.md §4.2):
//! one JSON object per Kafka message. `event` may carry `IN_ISDIR` as a second token.

mod fields;
mod kind;
mod storage;
mod values;

use crate::scan::QuoteIndex;
use fields::{
    scan_compact, scan_spans, Fields, Span, SpanKind, Walk, ATIME, COOKIE, CTIME, EVENT, FILESET_ID, FILE_SIZE, INODE,
    KEYS, MTIME, N_KEYS, OWNER_GROUP_ID, OWNER_USER_ID, PATH, PERMISSIONS, POOL_NAME,
};
use kind::filter_bit;
pub use kind::{filter_mask, EventKind, FILTERABLE_EVENTS};
use values::{iso_time, number_text, permissions, text, time, uint};

/// An object's metadata as the event reports it (no stat is taken); `mode` is the full
/// `st_mode` (type bits from `permissions` when present, else from `IN_ISDIR`).
pub use icicle_core::record::Attrs as Meta;
pub use storage::StorageId;

/// One parsed watch-folder event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpfsEvent {
    /// What the event means for the index.
    pub kind: EventKind,
    /// The path as reported (absolute, on the GPFS mount); shared with the state that keeps it.
    pub path: std::sync::Arc<str>,
    /// The object's metadata as the event reports it.
    pub meta: Meta,
    /// Pairs IN_MOVED_FROM with IN_MOVED_TO (0 when absent).
    pub cookie: u64,
    /// The fileset (`fileSetID`) and storage pool (`poolName`) the event names, when it names
    /// either; shared by the events that name the same ones.
    pub storage: StorageId,
}

impl GpfsEvent {
    /// An event icicle ignores (IN_OPEN, ...): it carries nothing else (its path is empty, its
    /// metadata zero), and the structural path does not read its message past `event`.
    pub fn ignored() -> GpfsEvent {
        static EMPTY: std::sync::OnceLock<std::sync::Arc<str>> = std::sync::OnceLock::new();
        GpfsEvent {
            kind: EventKind::Ignored,
            path: EMPTY.get_or_init(|| "".into()).clone(),
            meta: Meta::default(),
            cookie: 0,
            storage: StorageId::NONE,
        }
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
        let r = if mask == 0 {
            GpfsEvent::parse_structural::<false, false>(bytes, 0)
        } else {
            GpfsEvent::parse_structural::<false, true>(bytes, mask)
        };
        if let Some(r) = r {
            return r;
        }
        GpfsEvent::parse_slow(bytes, mask)
    }

    /// The structural parser's answer (`None`: it hands the message to the slow path) and the
    /// slow path's, for the fuzz harness that checks they agree.
    pub fn parse_both_ways(bytes: &[u8], mask: u32) -> (Option<Result<GpfsEvent, String>>, Result<GpfsEvent, String>) {
        let fast = if mask == 0 {
            GpfsEvent::parse_structural::<false, false>(bytes, 0)
        } else {
            GpfsEvent::parse_structural::<false, true>(bytes, mask)
        };
        (fast, GpfsEvent::parse_slow(bytes, mask))
    }

    /// Messages the structural path does not take, filtered by the `event` value they parsed
    /// to (its first token other than `IN_ISDIR`, as [`GpfsEvent::from_fields`] reads it).
    fn parse_slow(bytes: &[u8], mask: u32) -> Result<GpfsEvent, String> {
        let fields = Fields::parse(bytes)?;
        let ev = GpfsEvent::from_fields(&fields)?;
        // A directory's IN_ATTRIB is never filtered (its permissions decide visibility).
        if mask != 0 && ev.kind == EventKind::Modified {
            let name = text(fields.get(EVENT));
            let first = name.as_deref().and_then(|e| {
                e.split(|c: char| c.is_whitespace() || c == '|' || c == ',').find(|t| !t.is_empty() && *t != "IN_ISDIR")
            });
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
    fn parse_structural<const AVX2: bool, const FILTER: bool>(
        bytes: &[u8],
        mask: u32,
    ) -> Option<Result<GpfsEvent, String>> {
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
    fn from_spans(text: &str, spans: &[Span; N_KEYS]) -> Option<GpfsEvent> {
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
        // DEL is the one control character JSON leaves unescaped: the general path escapes it.
        if path.first() != Some(&b'/') || memchr::memchr(0x7f, path).is_some() {
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
                Some(
                    p.iter().try_fold(0u32, |v, &c| matches!(c, b'0'..=b'7').then(|| v * 8 + (c - b'0') as u32))?
                        & ST_MODE_BITS,
                )
            }
            _ => return None,
        };
        // The type bits of `permissions` may say directory where `event` does not: the slow
        // path tells a directory's IN_ATTRIB from its other changes.
        let perm_dir = perm.is_some_and(|m| m & 0o170000 == 0o040000);
        if perm_dir && !is_dir && kind == EventKind::Modified {
            return None;
        }
        let is_dir = is_dir || perm_dir;
        let mode = full_mode(perm, is_dir);
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
        let text_at = |k: usize| match spans[k].kind {
            SpanKind::Str | SpanKind::Num => Some(string_at(k)),
            _ => None,
        };
        Some(GpfsEvent {
            kind,
            path: icicle_core::name::normalise(string_at(PATH)).into(),
            meta,
            cookie: uint(COOKIE)?,
            storage: StorageId::of(
                text_at(FILESET_ID),
                (spans[POOL_NAME].kind == SpanKind::Str).then(|| string_at(POOL_NAME)),
            ),
        })
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
        let attrib = || event.split(|c: char| c.is_whitespace() || c == '|' || c == ',').any(|t| t == "IN_ATTRIB");
        // A directory modified (an entry added, read, written): nothing to index.
        if kind == EventKind::Ignored || (kind == EventKind::Modified && is_dir && !attrib()) {
            return Ok(GpfsEvent::ignored());
        }
        let perm = permissions(&raw.get(PERMISSIONS))?;
        // Storage Scale's `permissions` carry the type bits (`200040777` is a directory).
        is_dir |= perm.is_some_and(|m| m & 0o170000 == 0o040000);
        if kind == EventKind::Modified && is_dir {
            if !attrib() {
                return Ok(GpfsEvent::ignored());
            }
            kind = EventKind::DirAttrib;
        }
        let path = text(raw.get(PATH)).ok_or("missing `path`")?;
        let path: &str = &path;
        if !path.starts_with('/') {
            return Err(format!("path `{path}` is not absolute"));
        }
        // Control characters and backslashes are written as every source writes them; then
        // trailing and repeated slashes go (a real delete of a file may end in `/`).
        let escaped = icicle_core::name::escape_str(path);
        let path = icicle_core::name::normalise(&escaped);
        let inode = uint(&raw.get(INODE), "inode")?.ok_or("missing `inode`")?;
        let mode = full_mode(perm, is_dir);
        let id = |slot: usize| -> Result<u32, String> {
            let key = KEYS[slot];
            uint(&raw.get(slot), key)?
                .map_or(Ok(0), |n| u32::try_from(n).map_err(|_| format!("{key} `{n}` out of range")))
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
        let fileset = raw.get(FILESET_ID);
        let pool = text(raw.get(POOL_NAME));
        Ok(GpfsEvent {
            kind,
            path: (*path).into(),
            meta,
            cookie: uint(&raw.get(COOKIE), "cookie")?.unwrap_or(0),
            storage: StorageId::of(number_text(&fileset), pool.as_deref()),
        })
    }

    /// Render as a WF_JSON message (what the testkit produces; keys as IBM's records spell
    /// them, `testkit/corpus/gpfs/events.corpus` case `ibm-wf-close-nowrite`).
    pub fn to_json(&self) -> String {
        let ev = self.kind.token();
        let event = if self.meta.is_dir() { format!("{ev} IN_ISDIR") } else { ev.to_string() };
        let storage = self.storage.get();
        serde_json::json!({
            "WF_JSON": "0.0.1", "wd": 1, "cookie": self.cookie.to_string(), "mask": "0x0", "event": event, "path": &*self.path,
            "clusterName": "icicle-testkit", "nodeName": "node1", "nfsClientIp": "", "fsName": "fs1",
            "inode": self.meta.inode.to_string(), "fileSetID": storage.as_ref().and_then(|s| s.fileset.as_deref()).unwrap_or("0"),
            "linkCount": "1", "openFlags": "0", "poolName": storage.as_ref().and_then(|s| s.pool.as_deref()).unwrap_or("system"),
            "fileSize": self.meta.size.to_string(), "ownerUserId": self.meta.uid.to_string(), "ownerGroupId": self.meta.gid.to_string(),
            "atime": icicle_core::time::iso8601(self.meta.atime), "ctime": icicle_core::time::iso8601(self.meta.ctime),
            "mtime": icicle_core::time::iso8601(self.meta.mtime), "eventTime": icicle_core::time::iso8601(icicle_core::time::now_epoch()),
            "clientUserId": "0", "clientGroupId": "0", "permissions": format!("{:o}", self.meta.mode),
        })
        .to_string()
    }
}

/// The bits of `permissions` that are `st_mode`: Storage Scale writes its own `gpfs_mode_t`
/// in octal (`200100644`), and "gpfs_mode_t may include gpfs specific values including
/// 0x02000000. To have a gpfs_mode_t be equivalent to a mode_t mask that value out" (IBM
/// `gpfs.h`, Storage Scale 5.0.x headers).
pub(crate) const ST_MODE_BITS: u32 = 0o177777;

/// The full `st_mode` of an event: `permissions` with its type bits (added from `IN_ISDIR` when
/// it has none), or the usual defaults when the event has no permissions.
#[inline]
fn full_mode(perm: Option<u32>, is_dir: bool) -> u32 {
    match perm {
        Some(m) if m & 0o170000 != 0 => m,
        Some(m) => m | if is_dir { 0o040000 } else { 0o100000 },
        None if is_dir => 0o040755,
        None => 0o100644,
    }
}

#[cfg(test)]
mod tests;
