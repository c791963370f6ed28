//! Facets of a search: GFacet requests and the GFacetResults counted over matching entries.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde_json::{json, Value};

use super::config::{MAX_BUCKETS, MAX_FACET_CHARS};
use super::entry::Entry;
use super::values::{format_date, leaves, parse_date, Num, SortVal};

/// What a facet counts.
#[derive(Debug, Clone)]
enum FacetKind {
    /// The most frequent values (at most this many buckets).
    Terms(usize),
    /// Dates per calendar interval (`year` … `second`).
    Date(String),
    /// `size` equal buckets over `low` ≤ x < `high`.
    Numeric { low: f64, high: f64, size: usize },
}

/// A GFacet of a search request.
#[derive(Debug, Clone)]
pub(super) struct Facet {
    /// The name its result carries.
    name: String,
    /// The dotted path into `content`.
    field: String,
    /// What it counts.
    kind: FacetKind,
}

/// Parse a GFacet.
pub(super) fn parse_facet(v: &Value) -> Result<Facet, String> {
    let Some(o) = v.as_object() else { return Err(format!("a GFacet is an object, not {v}")) };
    for k in o.keys() {
        if !matches!(
            k.as_str(),
            "name" | "field_name" | "type" | "size" | "date_interval" | "histogram_range" | "@datatype" | "@version"
        ) {
            return Err(format!("unknown GFacet field `{k}`"));
        }
    }
    let Some(field) = o.get("field_name").and_then(Value::as_str).filter(|f| !f.is_empty()) else {
        return Err("a GFacet needs a `field_name` string".into());
    };
    let name = match o.get("name") {
        None | Some(Value::Null) => field.to_string(),
        Some(Value::String(n)) => n.clone(),
        Some(_) => return Err("a GFacet `name` is a string".into()),
    };
    let size = match o.get("size") {
        None | Some(Value::Null) => 10,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_BUCKETS as u64).contains(&n) => n as usize,
            _ => return Err(format!("the facet `{name}`: `size` must be 1..{MAX_BUCKETS}")),
        },
    };
    let kind = match o.get("type").map(|t| t.as_str()) {
        None | Some(Some("terms")) => FacetKind::Terms(size),
        Some(Some("date_histogram")) => match o.get("date_interval").and_then(Value::as_str) {
            Some(i @ ("year" | "quarter" | "month" | "week" | "day" | "hour" | "minute" | "second")) => {
                FacetKind::Date(i.to_string())
            }
            _ => {
                return Err(format!(
                "the facet `{name}`: `date_interval` must be year, quarter, month, week, day, hour, minute or second"
            ))
            }
        },
        Some(Some("numeric_histogram")) => {
            let r = o.get("histogram_range");
            let (low, high) = (
                r.and_then(|r| r.get("low")).and_then(Value::as_f64),
                r.and_then(|r| r.get("high")).and_then(Value::as_f64),
            );
            match (low, high) {
                (Some(low), Some(high)) if low < high => FacetKind::Numeric { low, high, size },
                _ => {
                    return Err(format!(
                        "the facet `{name}`: `histogram_range` must be {{\"low\", \"high\"}} numbers with low < high"
                    ))
                }
            }
        }
        Some(t) => {
            return Err(format!(
                "the emulator implements facet types terms, date_histogram and numeric_histogram, not {}",
                t.unwrap_or("a non-string")
            ))
        }
    };
    Ok(Facet { name, field: field.to_string(), kind })
}

/// Bucket start (ms) of `ms` for a calendar `interval`, UTC.
fn bucket_start(ms: i64, interval: &str) -> i64 {
    let unit = |u: i64| ms.div_euclid(u) * u;
    let days = ms.div_euclid(86_400_000);
    let (y, m, _) = icicle_core::time::civil_from_days(days);
    let day = |y: i64, m: u32| icicle_core::time::days_from_civil(y, m, 1) * 86_400_000;
    match interval {
        "second" => unit(1000),
        "minute" => unit(60_000),
        "hour" => unit(3_600_000),
        "day" => unit(86_400_000),
        // 1970-01-01 was a Thursday; weeks start on Monday.
        "week" => (days - (days + 3).rem_euclid(7)) * 86_400_000,
        "month" => day(y, m),
        "quarter" => day(y, (m - 1) / 3 * 3 + 1),
        _ => day(y, 1),
    }
}

/// The bucket after the one starting at `start`.
fn next_bucket(start: i64, interval: &str) -> i64 {
    let (y, m, _) = icicle_core::time::civil_from_days(start.div_euclid(86_400_000));
    let add_months = |n: u32| {
        let k = m - 1 + n;
        icicle_core::time::days_from_civil(y + i64::from(k / 12), k % 12 + 1, 1) * 86_400_000
    };
    match interval {
        "second" => start + 1000,
        "minute" => start + 60_000,
        "hour" => start + 3_600_000,
        "day" => start + 86_400_000,
        "week" => start + 7 * 86_400_000,
        "month" => add_months(1),
        "quarter" => add_months(3),
        _ => add_months(12),
    }
}

/// A GFacetResult over `entries`.
pub(super) fn facet_result(f: &Facet, entries: &[&Entry]) -> Result<Value, String> {
    let bucket = |value: Value, count: u64| json!({"@datatype": "GBucket", "@version": "2017-09-01", "value": value, "count": count});
    let facetable = |v: &&Value| !matches!(v, Value::String(s) if s.chars().count() > MAX_FACET_CHARS);
    let buckets: Vec<Value> = match &f.kind {
        FacetKind::Terms(size) => {
            let mut counts: BTreeMap<String, (Value, u64)> = BTreeMap::new();
            for e in entries {
                let mut seen = HashSet::new();
                for v in leaves(&e.content, &f.field).into_iter().filter(facetable) {
                    let key = match Num::of(v) {
                        Some(n) => n.json().to_string(),
                        None => v.to_string(),
                    };
                    if seen.insert(key.clone()) {
                        counts.entry(key).or_insert_with(|| (v.clone(), 0)).1 += 1;
                    }
                }
            }
            let mut list: Vec<(Value, u64)> = counts.into_values().collect();
            list.sort_by(|(a, x), (b, y)| {
                y.cmp(x).then_with(|| SortVal::of(a).zip(SortVal::of(b)).map_or(Ordering::Equal, |(a, b)| a.cmp(&b)))
            });
            list.truncate(*size);
            list.into_iter().map(|(v, n)| bucket(v, n)).collect()
        }
        FacetKind::Date(interval) => {
            let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
            for e in entries {
                let starts: BTreeSet<i64> = leaves(&e.content, &f.field)
                    .into_iter()
                    .filter_map(|v| v.as_str().and_then(parse_date))
                    .map(|ms| bucket_start(ms, interval))
                    .collect();
                for s in starts {
                    *counts.entry(s).or_default() += 1;
                }
            }
            let mut out = Vec::new();
            if let (Some((&first, _)), Some((&last, _))) = (counts.first_key_value(), counts.last_key_value()) {
                let mut at = first;
                while at <= last {
                    if out.len() >= MAX_BUCKETS {
                        return Err(format!("the facet `{}` would have more than {MAX_BUCKETS} buckets", f.name));
                    }
                    out.push(bucket(Value::String(format_date(at)), counts.get(&at).copied().unwrap_or(0)));
                    at = next_bucket(at, interval);
                }
            }
            out
        }
        FacetKind::Numeric { low, high, size } => {
            let width = (high - low) / *size as f64;
            let mut counts = vec![0u64; *size];
            for e in entries {
                let idx: BTreeSet<usize> = leaves(&e.content, &f.field)
                    .into_iter()
                    .filter_map(|v| Num::of(v).map(Num::f))
                    .filter(|x| *low <= *x && *x < *high)
                    .map(|x| (((x - low) / width) as usize).min(size - 1))
                    .collect();
                for i in idx {
                    counts[i] += 1;
                }
            }
            counts.into_iter().enumerate().map(|(i, n)| bucket(Num::F(low + i as f64 * width).json(), n)).collect()
        }
    };
    Ok(json!({"@datatype": "GFacetResult", "@version": "2017-09-01", "name": f.name, "buckets": buckets}))
}
