//! The event kinds a `WF_JSON` `event` value names, and the ingestion filter's event names.

use crate::scan::{tag, tag_of};

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
    /// The `event` token a producer writes for this kind (one of those it stands for).
    pub fn token(self) -> &'static str {
        match self {
            EventKind::Created => "IN_CREATE",
            EventKind::Removed => "IN_DELETE",
            EventKind::MovedFrom => "IN_MOVED_FROM",
            EventKind::MovedTo => "IN_MOVED_TO",
            EventKind::Modified => "IN_MODIFY",
            EventKind::DirAttrib => "IN_ATTRIB",
            EventKind::Ignored => "IN_OPEN",
        }
    }

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
    pub(super) fn of_value(v: &[u8]) -> Option<(EventKind, bool)> {
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

/// The ingestion-filter bit of an event name (0 for names that cannot be filtered).
pub(super) fn filter_bit(name: &[u8]) -> u32 {
    FILTERABLE_EVENTS.iter().position(|f| f.as_bytes() == name).map_or(0, |i| 1 << i)
}

/// The mask of filter names, for [`GpfsEvent::parse_filtered`](super::GpfsEvent::parse_filtered);
/// an error names one that cannot be filtered.
pub fn filter_mask(names: &[String]) -> Result<u32, String> {
    names.iter().try_fold(0, |m, n| match filter_bit(n.as_bytes()) {
        0 => Err(format!("`{n}` cannot be filtered (one of {})", FILTERABLE_EVENTS.join(", "))),
        b => Ok(m | b),
    })
}
