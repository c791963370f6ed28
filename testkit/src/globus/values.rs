//! Values inside entries: numbers, the dates Search detects, dotted-path lookups, equality
//! with filter values, words for the query string, and sort order.

use std::cmp::Ordering;
use std::collections::HashSet;

use serde_json::{json, Value};

use super::config::MAX_FACET_CHARS;

/// A number from JSON, exact for integers.
#[derive(Debug, Clone, Copy)]
pub(super) enum Num {
    I(i128),
    F(f64),
}

impl Num {
    /// A JSON number; `None` for anything else.
    pub(super) fn of(v: &Value) -> Option<Num> {
        match v {
            Value::Number(n) => n
                .as_i64()
                .map(|i| Num::I(i.into()))
                .or_else(|| n.as_u64().map(|u| Num::I(u.into())))
                .or_else(|| n.as_f64().map(Num::F)),
            _ => None,
        }
    }

    /// A number written as a string.
    pub(super) fn parse(s: &str) -> Option<Num> {
        s.parse::<i128>().ok().map(Num::I).or_else(|| s.parse::<f64>().ok().filter(|f| f.is_finite()).map(Num::F))
    }

    /// As a float.
    pub(super) fn f(self) -> f64 {
        match self {
            Num::I(i) => i as f64,
            Num::F(f) => f,
        }
    }

    /// Integers compare exactly, anything else as floats.
    pub(super) fn cmp(self, o: Num) -> Ordering {
        match (self, o) {
            (Num::I(a), Num::I(b)) => a.cmp(&b),
            _ => self.f().total_cmp(&o.f()),
        }
    }

    /// As JSON, whole floats written as integers.
    pub(super) fn json(self) -> Value {
        match self {
            Num::I(i) => i64::try_from(i).map(Value::from).unwrap_or_else(|_| json!(i as f64)),
            Num::F(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => json!(f as i64),
            Num::F(f) => json!(f),
        }
    }
}

/// Milliseconds since the epoch of a date string in a format Search detects as a date.
pub(super) fn parse_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let t = b.get(from..from + len)?;
        t.iter().all(u8::is_ascii_digit).then(|| t.iter().fold(0i64, |a, d| a * 10 + i64::from(d - b'0')))
    };
    let sep = *b.get(4)?;
    if !(sep == b'-' || sep == b'/') || b.get(7) != Some(&sep) {
        return None;
    }
    let (y, m, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&m) || d < 1 || d > days_in[(m - 1) as usize] {
        return None;
    }
    let day_ms = icicle_core::time::days_from_civil(y, m as u32, d as u32) * 86_400_000;
    if b.len() == 10 {
        return (sep == b'-').then_some(day_ms);
    }
    let t = b[10];
    if !(t == b'T' || (t == b' ')) || (t == b'T' && sep == b'/') || b.get(13) != Some(&b':') || b.get(16) != Some(&b':')
    {
        return None;
    }
    let (h, mi, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut ms = day_ms + ((h * 60 + mi) * 60 + sec) * 1000;
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let frac: String = s[start..i].chars().chain("000".chars()).take(3).collect();
        ms += frac.parse::<i64>().ok()?;
    }
    let zone = &s[i..];
    let zone = if sep == b'/' { zone.strip_prefix(' ')? } else { zone };
    let offset_min = match zone.as_bytes() {
        [] if sep == b'-' && t == b' ' => 0,
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, rest @ ..] => {
            let mm = match rest {
                [b':', m1, m2] | [m1, m2] => [*m1, *m2],
                _ => return None,
            };
            let hh = [*h1, *h2];
            if !hh.iter().chain(mm.iter()).all(u8::is_ascii_digit) {
                return None;
            }
            let v = i64::from(hh[0] - b'0') * 600
                + i64::from(hh[1] - b'0') * 60
                + i64::from(mm[0] - b'0') * 10
                + i64::from(mm[1] - b'0');
            if *sign == b'-' {
                -v
            } else {
                v
            }
        }
        _ => return None,
    };
    Some(ms - offset_min * 60_000)
}

/// `yyyy-MM-ddTHH:mm:ss.SSSZ` of milliseconds since the epoch.
pub(super) fn format_date(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = icicle_core::time::civil_from_days(days);
    let s = rem / 1000;
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z", s / 3600, s / 60 % 60, s % 60, rem % 1000)
}

/// The values at a dotted path of `content` (lists at any level are searched element by element).
pub(super) fn leaves<'a>(content: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut cur = vec![content];
    for key in path.split('.') {
        let mut next = Vec::new();
        for v in cur {
            let mut push = |x: &'a Value| match x {
                Value::Array(a) => next.extend(a.iter()),
                x => next.push(x),
            };
            match v {
                Value::Object(o) => {
                    if let Some(x) = o.get(key) {
                        push(x);
                    }
                }
                Value::Array(a) => {
                    for x in a.iter().filter_map(|x| x.get(key)) {
                        push(x);
                    }
                }
                _ => {}
            }
        }
        cur = next;
    }
    cur.into_iter()
        .flat_map(|v| if let Value::Array(a) = v { a.iter().collect() } else { vec![v] })
        .filter(|v| !v.is_null() && !v.is_object())
        .collect()
}

/// Whether a stored value equals a filter value (numbers as numbers, dates as instants).
pub(super) fn value_eq(field: &Value, want: &Value) -> bool {
    match (field, want) {
        (Value::Number(_), Value::Number(_)) => {
            Num::of(field).zip(Num::of(want)).is_some_and(|(a, b)| a.cmp(b).is_eq())
        }
        (Value::Number(_), Value::String(w)) => {
            Num::of(field).zip(Num::parse(w)).is_some_and(|(a, b)| a.cmp(b).is_eq())
        }
        (Value::String(f), Value::String(w)) => f == w || parse_date(f).zip(parse_date(w)).is_some_and(|(a, b)| a == b),
        (Value::String(f), Value::Number(n)) => {
            Num::of(want).zip(Num::parse(f)).is_some_and(|(a, b)| a.cmp(b).is_eq()) || *f == n.to_string()
        }
        (Value::String(f), Value::Bool(w)) => f == if *w { "true" } else { "false" },
        (Value::Bool(f), Value::Bool(w)) => f == w,
        (Value::Bool(f), Value::String(w)) => w == if *f { "true" } else { "false" },
        _ => false,
    }
}

/// The lower-cased letter/digit runs of `s`.
pub(super) fn words(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase)
}

/// The words of every string, number and boolean in `v`.
pub(super) fn content_words(v: &Value, out: &mut HashSet<String>) {
    match v {
        Value::String(s) => out.extend(words(s)),
        Value::Number(_) | Value::Bool(_) => out.extend(words(&v.to_string())),
        Value::Array(a) => a.iter().for_each(|x| content_words(x, out)),
        Value::Object(o) => o.values().for_each(|x| content_words(x, out)),
        Value::Null => {}
    }
}

/// A sortable value: numbers, then dates, then strings, then booleans.
#[derive(Debug, Clone)]
pub(super) enum SortVal {
    Num(Num),
    Date(i64),
    Str(String),
    Bool(bool),
}

impl SortVal {
    /// The sortable value of a leaf; `None` for strings too long to sort.
    pub(super) fn of(v: &Value) -> Option<SortVal> {
        match v {
            Value::Number(_) => Num::of(v).map(SortVal::Num),
            Value::String(s) if s.chars().count() > MAX_FACET_CHARS => None,
            Value::String(s) => Some(parse_date(s).map_or_else(|| SortVal::Str(s.clone()), SortVal::Date)),
            Value::Bool(b) => Some(SortVal::Bool(*b)),
            _ => None,
        }
    }

    /// The order of the kinds of value.
    fn rank(&self) -> u8 {
        match self {
            SortVal::Num(_) => 0,
            SortVal::Date(_) => 1,
            SortVal::Str(_) => 2,
            SortVal::Bool(_) => 3,
        }
    }

    /// Values of one kind compare by value, of different kinds by kind.
    pub(super) fn cmp(&self, o: &SortVal) -> Ordering {
        match (self, o) {
            (SortVal::Num(a), SortVal::Num(b)) => a.cmp(*b),
            (SortVal::Date(a), SortVal::Date(b)) => a.cmp(b),
            (SortVal::Str(a), SortVal::Str(b)) => a.cmp(b),
            (SortVal::Bool(a), SortVal::Bool(b)) => a.cmp(b),
            _ => self.rank().cmp(&o.rank()),
        }
    }
}
