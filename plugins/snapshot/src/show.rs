//! The SHOW part of an `mmapplypolicy` LIST line: the text between `InodeNumber GenNumber
//! SnapId` and ` -- `, laid out however the policy's `SHOW(...)` clause printed it.
//!
//! Three layouts are read, each seen in public policies (docs/formats-read.md):
//! - values separated by spaces, in the clause's order (`SHOW(VARCHAR(USER_ID) || ' ' ||
//!   ...)`: gpfsug-tools `policy/offlineusage.md`, NERSC's `list.allfiles`);
//! - values separated by another delimiter (`SHOW('|' || varchar(file_size) || '|' || ...)`:
//!   KIT lsdf-checksum `scaleadpt/filelist/policy.go`);
//! - `key=value` pairs in any order (IBM's own "Policy rules: Examples and tips" idiom,
//!   `SHOW('x1=' || varchar(...) || ' x2=' || ...)`; NCAR hpc-usage-queries' scans).
//!
//! A time is integer epoch seconds or an SQL timestamp as `VARCHAR(ACCESS_TIME)` prints it,
//! `YYYY-MM-DD HH:MM:SS[.ffffff]` (a space inside it: two tokens when split on spaces), read
//! as UTC (KIT lsdf-checksum 4618b34: "The policy documentation says that all times are given
//! in UTC").

use std::collections::BTreeMap;

use crate::fields::parse_i64;

/// Which SHOW value holds each attribute.
#[derive(Debug, Clone)]
pub enum ShowLayout {
    /// Values in order, split on runs of spaces or on `delimiter`: the position of each
    /// attribute and how many values there are.
    Positional {
        /// The position of each attribute among the values, in [`ATTRIBUTES`] order, then of
        /// each [`OPTIONAL`] one the policy shows.
        at: [Option<usize>; 9],
        /// How many values a line's SHOW text holds.
        count: usize,
        /// The byte between values; `None`: runs of spaces.
        delimiter: Option<u8>,
    },
    /// `key=value` pairs: the key of each attribute.
    Keyed {
        /// The key the policy prints for each attribute, in [`ATTRIBUTES`] order, then for
        /// each [`OPTIONAL`] one it shows.
        keys: [Option<String>; 9],
    },
}

/// The attributes in [`ShowLayout`] order.
pub const ATTRIBUTES: [&str; 7] = ["size", "uid", "gid", "mode", "atime", "ctime", "mtime"];

/// Attributes a policy may show besides: `FILESET_NAME` and `POOL_NAME` (IBM "File
/// attributes in SQL expressions").
pub const OPTIONAL: [&str; 2] = ["fileset", "pool"];

/// The values of one line's SHOW text, in [`ATTRIBUTES`] then [`OPTIONAL`] order (an optional
/// one the policy does not show is empty).
pub type ShowValues<'a> = [&'a [u8]; 9];

/// [`ATTRIBUTES`] then [`OPTIONAL`].
fn all_attributes() -> impl Iterator<Item = (usize, &'static str, bool)> {
    ATTRIBUTES
        .iter()
        .map(|a| (*a, true))
        .chain(OPTIONAL.iter().map(|a| (*a, false)))
        .enumerate()
        .map(|(i, (a, r))| (i, a, r))
}

impl ShowLayout {
    /// Positional values named in order (`-` or any other name is skipped).
    pub fn positional(names: &[String], delimiter: Option<u8>) -> Result<ShowLayout, String> {
        let mut at = [None; 9];
        for (slot, n, required) in all_attributes() {
            at[slot] = names.iter().position(|x| x == n);
            if required && at[slot].is_none() {
                return Err(format!("`show` lacks `{n}`"));
            }
        }
        Ok(ShowLayout::Positional { at, count: names.len(), delimiter })
    }

    /// `key=value` pairs: `keys` maps each attribute to the key the policy prints.
    pub fn keyed(keys: &BTreeMap<String, String>) -> Result<ShowLayout, String> {
        if let Some(k) = keys.keys().find(|k| !ATTRIBUTES.contains(&k.as_str()) && !OPTIONAL.contains(&k.as_str())) {
            return Err(format!("`{k}` is not one of {}, {}", ATTRIBUTES.join(", "), OPTIONAL.join(", ")));
        }
        let mut out: [Option<String>; 9] = Default::default();
        for (slot, a, required) in all_attributes() {
            let Some(k) = keys.get(a) else {
                if required {
                    return Err(format!("lacks `{a}`"));
                }
                continue;
            };
            if k.is_empty() || k.contains(|c: char| c.is_whitespace() || c == '=') {
                return Err(format!("`{a}`: `{k}` is not a key (no spaces, no `=`)"));
            }
            out[slot] = Some(k.clone());
        }
        Ok(ShowLayout::Keyed { keys: out })
    }

    /// How many values a positional layout expects (for messages).
    pub fn describe(&self) -> String {
        match self {
            ShowLayout::Positional { count, .. } => format!("{count} SHOW values"),
            ShowLayout::Keyed { keys } => {
                format!("SHOW pairs {}", keys.iter().flatten().map(|k| format!("{k}=")).collect::<Vec<_>>().join(" "))
            }
        }
    }

    /// The attribute values in `show`; `spans` is scratch.
    pub fn values<'a>(&self, show: &'a [u8], spans: &mut Vec<(usize, usize)>) -> Result<ShowValues<'a>, String> {
        match self {
            ShowLayout::Positional { at, count, delimiter } => {
                split_values(show, *delimiter, spans);
                if spans.len() != *count {
                    return Err(format!("expected {count} SHOW values before ` -- `, found {}", spans.len()));
                }
                Ok(at.map(|i| i.map_or(&[][..], |i| &show[spans[i].0..spans[i].1])))
            }
            ShowLayout::Keyed { keys } => keyed_values(show, keys),
        }
    }
}

/// Whether `b` is `YYYY-MM-DD`.
fn is_date(b: &[u8]) -> bool {
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter().enumerate().all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

/// Whether `b` starts `HH:MM:SS`.
fn is_clock(b: &[u8]) -> bool {
    b.len() >= 8 && b[2] == b':' && b[5] == b':' && [0, 1, 3, 4, 6, 7].iter().all(|&i| b[i].is_ascii_digit())
}

/// The values of `show` split on `delimiter` (empty pieces at either end dropped: `|4|x|`) or
/// on runs of spaces, a date followed by a clock kept as one timestamp.
fn split_values(show: &[u8], delimiter: Option<u8>, spans: &mut Vec<(usize, usize)>) {
    spans.clear();
    match delimiter {
        Some(d) => {
            let mut pos = 0;
            for part in show.split(|&c| c == d) {
                spans.push((pos, pos + part.len()));
                pos += part.len() + 1;
            }
            let trim = |s: &(usize, usize)| show[s.0..s.1].iter().all(u8::is_ascii_whitespace);
            if spans.first().is_some_and(trim) {
                spans.remove(0);
            }
            if spans.last().is_some_and(trim) {
                spans.pop();
            }
        }
        None => {
            let mut i = 0;
            while i < show.len() {
                while i < show.len() && show[i].is_ascii_whitespace() {
                    i += 1;
                }
                let s = i;
                while i < show.len() && !show[i].is_ascii_whitespace() {
                    i += 1;
                }
                if i == s {
                    break;
                }
                let merged = spans.last().filter(|p| is_date(&show[p.0..p.1]) && is_clock(&show[s..i])).map(|p| p.0);
                match merged {
                    Some(start) => {
                        spans.pop();
                        spans.push((start, i));
                    }
                    None => spans.push((s, i)),
                }
            }
        }
    }
}

/// The values of `key=value` pairs: each value runs to the next ` key=` of any word, or to the
/// end (an SQL timestamp keeps its space).
fn keyed_values<'a>(show: &'a [u8], keys: &[Option<String>; 9]) -> Result<ShowValues<'a>, String> {
    // Where each `word=` starts (at the start or after a space).
    let mut starts = Vec::new();
    let mut i = 0;
    while i < show.len() {
        let token_start = i == 0 || show[i - 1] == b' ';
        if token_start && show[i] != b' ' {
            let eq = show[i..].iter().take_while(|&&c| c != b' ').position(|&c| c == b'=');
            if let Some(e) = eq.filter(|e| *e > 0) {
                starts.push((i, i + e));
            }
        }
        i += 1;
    }
    let mut out: ShowValues<'a> = [&[]; 9];
    for (slot, key) in keys.iter().enumerate() {
        let Some(key) = key else { continue };
        let Some(k) = starts.iter().position(|&(s, e)| &show[s..e] == key.as_bytes()) else {
            if slot >= ATTRIBUTES.len() {
                continue;
            }
            return Err(format!("no `{key}=` in the SHOW text"));
        };
        let (_, e) = starts[k];
        let end = starts.get(k + 1).map_or(show.len(), |&(s, _)| s);
        out[slot] = trim(&show[e + 1..end]);
    }
    Ok(out)
}

fn trim(b: &[u8]) -> &[u8] {
    let s = b.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(b.len());
    let e = b.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(s, |e| e + 1);
    &b[s..e]
}

/// A SHOW time: integer epoch seconds, or an SQL timestamp `YYYY-MM-DD HH:MM:SS[.ffffff]`
/// (UTC).
pub fn parse_time(b: &[u8], what: &str) -> Result<i64, String> {
    if b.len() >= 19 && is_date(&b[..10]) {
        let s = std::str::from_utf8(b).map_err(|_| format!("{what}: not a time"))?;
        return icicle_core::time::parse_iso8601(s).ok_or_else(|| format!("{what}: `{s}` is not a time"));
    }
    parse_i64(b, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn positional_values_keep_timestamps_whole() {
        let l = ShowLayout::positional(&names("size - uid gid mode atime ctime mtime"), None).unwrap();
        let mut sp = Vec::new();
        let show = b"4 x 1000 100 -rw-r--r-- 2018-05-22 23:01:39.727768 1527030099 2018-05-22 23:01:39";
        let v = l.values(show, &mut sp).unwrap();
        assert_eq!(v[4], b"2018-05-22 23:01:39.727768");
        assert_eq!(parse_time(v[4], "atime").unwrap(), parse_time(b"1527030099", "t").unwrap());
        assert_eq!(v[6], b"2018-05-22 23:01:39");
        let kit = ShowLayout::positional(&names("size mtime uid gid mode atime ctime"), Some(b'|')).unwrap();
        let v = kit.values(b" |4|2018-05-22 23:01:39.727768|1|2|-rw-r--r--|5|6|", &mut sp).unwrap();
        assert_eq!((v[0], v[6]), (&b"4"[..], &b"2018-05-22 23:01:39.727768"[..]));
    }

    #[test]
    fn keyed_values_in_any_order() {
        let keys: BTreeMap<String, String> = [
            ("size", "s"),
            ("uid", "u"),
            ("gid", "g"),
            ("mode", "p"),
            ("atime", "ac"),
            ("ctime", "mt"),
            ("mtime", "mt"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let l = ShowLayout::keyed(&keys).unwrap();
        let show = b"s=1024 a=8 u=1000 g=1000 m=FAu p=-rw-r--r-- ac=2025-12-01 10:00:00 mt=2026-01-15 10:00:00 cr=2026-01-15 10:00:00 nl=1";
        let v = l.values(show, &mut Vec::new()).unwrap();
        assert_eq!(
            v,
            [
                &b"1024"[..],
                b"1000",
                b"1000",
                b"-rw-r--r--",
                b"2025-12-01 10:00:00",
                b"2026-01-15 10:00:00",
                b"2026-01-15 10:00:00",
                b"",
                b""
            ]
        );
        assert!(l.values(b"s=1 u=2", &mut Vec::new()).unwrap_err().contains("no `g=`"));
        assert!(ShowLayout::keyed(&BTreeMap::new()).unwrap_err().contains("lacks `size`"));
        // FILESET_NAME and POOL_NAME shown too: read when there, none when a line lacks them.
        let mut with = keys.clone();
        with.extend([("fileset".to_string(), "fs".to_string()), ("pool".to_string(), "pl".to_string())]);
        let l = ShowLayout::keyed(&with).unwrap();
        let v = l.values(b"s=1 u=2 g=3 p=-rw-r--r-- ac=4 mt=5 fs=proj1 pl=data", &mut Vec::new()).unwrap();
        assert_eq!((v[7], v[8]), (&b"proj1"[..], &b"data"[..]));
        let v = l.values(b"s=1 u=2 g=3 p=-rw-r--r-- ac=4 mt=5", &mut Vec::new()).unwrap();
        assert_eq!((v[7], v[8]), (&b""[..], &b""[..]));
        let p = ShowLayout::positional(&names("uid gid fileset size mode atime ctime mtime pool"), None).unwrap();
        let v = p.values(b"1 2 root 3 -rw-r--r-- 4 5 6 system", &mut Vec::new()).unwrap();
        assert_eq!((v[7], v[8]), (&b"root"[..], &b"system"[..]));
    }
}
