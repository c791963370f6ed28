//! Content fields as the index holds them: which `content.*` field a filter, a sort, a facet or
//! an advanced query names, and its values as the engine's terms. Only indexed fields are
//! searchable (a request naming another is refused with the list), so every filter is a
//! query the engine answers from its indexes, never a scan of stored records.

use std::ops::Bound;

use serde_json::Value;
use tantivy::query::{BooleanQuery, EmptyQuery, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::Term;

use crate::schema::Fields;

/// The fields a request may filter, sort or facet on.
pub const SEARCHABLE: &str = "path, name, type, kind, id, uid, gid, size (size.total), file_count, atime, ctime, mtime (and raw.atime, raw.ctime, raw.mtime), storage.fid, storage.project_id, storage.fileset, storage.pool, storage.stripe_count, storage.osts, and icicle's own ancestor (a directory the record is below) and parent (the directory holding it)";

/// What a field's values are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Exact strings.
    Text,
    /// Whole numbers.
    U64,
    /// Seconds since the epoch; a date string or a number of seconds in requests.
    Time,
}

/// A content field of the index.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The engine's field.
    pub field: Field,
    /// Its name in the schema (fast-field lookups).
    pub name: &'static str,
    /// What its values are.
    pub kind: Kind,
    /// The records that carry it under this name: `file` (primary) or `aggregate`.
    pub record: Option<&'static str>,
}

impl Target {
    /// Whether the field has per-document values to sort and facet on (the others are only
    /// searched).
    pub fn fast(&self) -> bool {
        !matches!(self.name, "name" | "ancestor" | "parent" | "fid" | "ost")
    }
}

/// The index field of the content field `name`, or why there is none.
pub fn target(f: &Fields, name: &str) -> Result<Target, String> {
    let name = name.strip_prefix("content.").unwrap_or(name);
    let t = |field, n, kind, record| Ok(Target { field, name: n, kind, record });
    match name {
        "path" => t(f.path, "path", Kind::Text, None),
        "name" => t(f.name, "name", Kind::Text, None),
        "type" => t(f.kind, "kind", Kind::Text, Some("file")),
        "kind" => t(f.kind, "kind", Kind::Text, Some("aggregate")),
        "id" => t(f.id, "id", Kind::Text, None),
        "ancestor" => t(f.path, "ancestor", Kind::Text, None),
        "parent" => t(f.parent, "parent", Kind::Text, None),
        "uid" => t(f.uid, "uid", Kind::U64, None),
        "gid" => t(f.gid, "gid", Kind::U64, None),
        "size" => t(f.size, "size", Kind::U64, None),
        "size.total" => t(f.size, "size", Kind::U64, Some("aggregate")),
        "file_count" => t(f.files, "files", Kind::U64, Some("aggregate")),
        "atime" | "raw.atime" => t(f.atime, "atime", Kind::Time, Some("file")),
        "ctime" | "raw.ctime" => t(f.ctime, "ctime", Kind::Time, Some("file")),
        "mtime" | "raw.mtime" => t(f.mtime, "mtime", Kind::Time, Some("file")),
        "storage.fid" => t(f.fid, "fid", Kind::Text, Some("file")),
        "storage.project_id" => t(f.project_id, "project_id", Kind::U64, Some("file")),
        "storage.fileset" => t(f.fileset, "fileset", Kind::Text, Some("file")),
        "storage.pool" => t(f.pool, "pool", Kind::Text, Some("file")),
        "storage.stripe_count" => t(f.stripe_count, "stripe_count", Kind::U64, Some("file")),
        "storage.osts" => t(f.ost, "ost", Kind::U64, Some("file")),
        other => Err(format!("`{other}` is not a field icicle serve indexes; searchable fields: {SEARCHABLE}")),
    }
}

fn term_query(term: Term) -> Box<dyn Query> {
    Box::new(TermQuery::new(term, IndexRecordOption::Basic))
}

/// `q` restricted to the records that carry the field under its name.
pub fn restrict(f: &Fields, t: &Target, q: Box<dyn Query>) -> Box<dyn Query> {
    match t.record {
        None => q,
        Some(r) => Box::new(BooleanQuery::new(vec![
            (Occur::Must, q),
            (Occur::Must, term_query(Term::from_field_text(f.record, r))),
        ])),
    }
}

/// A number from JSON or from a string.
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok().filter(|x| x.is_finite()),
        _ => None,
    }
}

/// A time value as seconds: a number of seconds, or a date in a format Search detects.
fn seconds(v: &Value) -> Option<f64> {
    match v {
        Value::String(s) => parse_date(s).map(|ms| ms as f64 / 1000.0).or_else(|| number(v)),
        _ => number(v),
    }
}

/// The query for "the field equals `v`" (nothing matches a value the field cannot hold).
pub fn equals(t: &Target, v: &Value) -> Result<Box<dyn Query>, String> {
    if t.name == "ancestor" {
        return match v {
            Value::String(dir) => Ok(crate::search::below(t.field, dir)),
            other => Err(format!("`ancestor` takes a directory, not {other}")),
        };
    }
    let term = match t.kind {
        Kind::Text => match v {
            Value::String(s) => Some(Term::from_field_text(t.field, s)),
            Value::Number(n) => Some(Term::from_field_text(t.field, &n.to_string())),
            other => return Err(format!("`{}` takes strings, not {other}", t.name)),
        },
        Kind::U64 => {
            let x = number(v).ok_or_else(|| format!("`{}` takes numbers, not {v}", t.name))?;
            (x >= 0.0 && x.fract() == 0.0 && x < u64::MAX as f64).then(|| Term::from_field_u64(t.field, x as u64))
        }
        Kind::Time => {
            let x = seconds(v).ok_or_else(|| format!("`{}` takes dates or seconds, not {v}", t.name))?;
            (x.fract() == 0.0).then(|| Term::from_field_i64(t.field, x as i64))
        }
    };
    Ok(term.map_or_else(|| Box::new(EmptyQuery) as Box<dyn Query>, term_query))
}

/// One end of a range: `"*"` (open) or a value.
#[derive(Debug, Clone)]
pub enum End {
    /// Unbounded.
    Open,
    /// This value, with it (`true`) or without it.
    At(Value, bool),
}

impl End {
    /// A range end from a request (`"*"` or absent is open).
    pub fn of(v: Option<&Value>) -> End {
        match v {
            None | Some(Value::Null) => End::Open,
            Some(Value::String(s)) if s == "*" => End::Open,
            Some(v) => End::At(v.clone(), true),
        }
    }
}

/// The query for `from ≤ x ≤ to` (ends as given) over the field.
pub fn range(t: &Target, from: &End, to: &End) -> Result<Box<dyn Query>, String> {
    if t.kind == Kind::Text {
        let end = |e: &End| match e {
            End::Open => Bound::Unbounded,
            End::At(Value::String(s), with) => bound(Term::from_field_text(t.field, s), *with),
            End::At(v, with) => bound(Term::from_field_text(t.field, &v.to_string()), *with),
        };
        return Ok(Box::new(RangeQuery::new(end(from), end(to))));
    }
    let value = |v: &Value| match t.kind {
        Kind::Time => seconds(v).ok_or_else(|| format!("`{}` ranges take dates or seconds, not {v}", t.name)),
        _ => number(v).ok_or_else(|| format!("`{}` ranges take numbers, not {v}", t.name)),
    };
    // Whole numbers only in the index: a lower end rounds up, an upper end down.
    let lo = match from {
        End::Open => None,
        End::At(v, with) => {
            let x = value(v)?;
            Some(if *with || x.fract() != 0.0 { x.ceil() } else { x + 1.0 })
        }
    };
    let hi = match to {
        End::Open => None,
        End::At(v, with) => {
            let x = value(v)?;
            Some(if *with || x.fract() != 0.0 { x.floor() } else { x - 1.0 })
        }
    };
    if let (Some(a), Some(b)) = (lo, hi) {
        if a > b {
            return Ok(Box::new(EmptyQuery));
        }
    }
    let q: Box<dyn Query> = match t.kind {
        Kind::U64 => {
            if hi.is_some_and(|h| h < 0.0) {
                return Ok(Box::new(EmptyQuery));
            }
            let b = |x: Option<f64>| {
                x.map_or(Bound::Unbounded, |x| Bound::Included(Term::from_field_u64(t.field, x.max(0.0) as u64)))
            };
            Box::new(RangeQuery::new(b(lo), b(hi)))
        }
        _ => {
            let b = |x: Option<f64>| {
                x.map_or(Bound::Unbounded, |x| Bound::Included(Term::from_field_i64(t.field, x as i64)))
            };
            Box::new(RangeQuery::new(b(lo), b(hi)))
        }
    };
    Ok(q)
}

fn bound(t: Term, with: bool) -> Bound<Term> {
    if with {
        Bound::Included(t)
    } else {
        Bound::Excluded(t)
    }
}

/// Milliseconds since the epoch of a date in a format Search detects as a date: `yyyy-MM-dd`,
/// `yyyy-MM-dd HH:mm:ss`, `yyyy/MM/dd HH:mm:ss Z`, `yyyy-MM-ddTHH:mm:ss[.SSS]` with `Z`, an
/// offset (`+00:00` or `+0000`) or none (UTC).
pub fn parse_date(s: &str) -> Option<i64> {
    let b = s.trim().as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let t = b.get(from..from + len)?;
        t.iter().all(u8::is_ascii_digit).then(|| t.iter().fold(0i64, |a, d| a * 10 + i64::from(d - b'0')))
    };
    let sep = *b.get(4)?;
    if !(sep == b'-' || sep == b'/') || b.get(7) != Some(&sep) {
        return None;
    }
    let (y, m, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let day_ms = icicle_core::time::days_from_civil(y, m as u32, d as u32) * 86_400_000;
    if b.len() == 10 {
        return Some(day_ms);
    }
    if !matches!(b[10], b'T' | b' ') || b.get(13) != Some(&b':') || b.get(16) != Some(&b':') {
        return None;
    }
    let (h, mi, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let mut at = 19;
    let mut ms = 0;
    if b.get(at) == Some(&b'.') {
        let digits = b[at + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        let frac = num(at + 1, digits.min(3))?;
        ms = frac * 10i64.pow(3 - digits.min(3) as u32);
        at += 1 + digits;
    }
    // `yyyy/MM/dd HH:mm:ss Z` puts a space before the zone.
    if sep == b'/' && b.get(at) == Some(&b' ') {
        at += 1;
    }
    let offset_ms = match b.get(at..) {
        None | Some([]) | Some([b'Z']) => 0,
        Some([sign @ (b'+' | b'-'), ..]) => {
            // `+05:00` or `+0500`.
            let colon = usize::from(b.get(at + 3) == Some(&b':'));
            if b.len() != at + 5 + colon {
                return None;
            }
            let (oh, om) = (num(at + 1, 2)?, num(at + 3 + colon, 2)?);
            let o = (oh * 60 + om) * 60_000;
            if *sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    Some(day_ms + ((h * 60 + mi) * 60 + sec) * 1000 + ms - offset_ms)
}

/// `ms` as `yyyy-MM-ddTHH:mm:ss.SSSZ`, as Search writes dates in facet buckets.
pub fn format_date(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = icicle_core::time::civil_from_days(days);
    let s = rem / 1000;
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z", s / 3600, s / 60 % 60, s % 60, rem % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_in_the_formats_search_detects() {
        assert_eq!(parse_date("1970-01-02"), Some(86_400_000));
        assert_eq!(parse_date("1970-01-01T00:00:01Z"), Some(1000));
        assert_eq!(parse_date("1970-01-01T01:00:01+01:00"), Some(1000));
        assert_eq!(parse_date("1970-01-01 00:00:01.5"), Some(1500));
        assert_eq!(parse_date("2023-08-29T01:32:46+00:00"), Some(1_693_272_766_000));
        assert_eq!(parse_date("1970/01/01 01:00:01 +0100"), Some(1000));
        assert_eq!(parse_date("1970-01-01T00:00:01-0000"), Some(1000));
        assert_eq!(parse_date("1970-01-01T00:00:01+01"), None);
        assert_eq!(parse_date("12"), None);
        assert_eq!(format_date(1_693_272_766_000), "2023-08-29T01:32:46.000Z");
    }

    #[test]
    fn fields_outside_the_index_are_named_with_the_list() {
        let (_, f) = Fields::schema();
        assert_eq!(target(&f, "content.uid").unwrap().kind, Kind::U64);
        assert_eq!(target(&f, "type").unwrap().record, Some("file"));
        assert!(target(&f, "raw.inode").unwrap_err().contains("searchable fields"));
    }
}
