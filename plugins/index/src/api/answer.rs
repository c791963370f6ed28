//! Answering searches, scrolls and subject lookups from one searcher, for the principals who
//! ask: visibility is a clause of every query, so results, `total` and facet counts never
//! include a record the caller may not see. Results are read one page at a time (top-k on
//! fast fields, stored entries only for the page); facets are the engine's aggregations.

use std::collections::BTreeMap;
use std::ops::Bound;

use serde_json::{json, Value};
use tantivy::aggregation::agg_req::Aggregations;
use tantivy::aggregation::agg_result::AggregationResults;
use tantivy::aggregation::{AggContextParams, AggregationCollector};
use tantivy::collector::sort_key::{SortByErasedType, SortByStaticFastValue, SortByString};
use tantivy::collector::{Count, SortKeyComputer, TopDocs};
use tantivy::query::{BooleanQuery, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::{IndexRecordOption, Value as _};
use tantivy::{DocAddress, Order, Searcher, TantivyDocument, Term};

use super::fields::{format_date, restrict, Kind};
use super::request::{hex, Facet, FacetKind, Search, MAX_BUCKETS};
use super::ApiError;
use crate::schema::Fields;
use crate::search::{query as filter_query, Filter, Visibility};

fn engine(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(500, "InternalError", format!("the index: {e}"))
}

/// `parts` all required.
fn all(parts: Vec<Box<dyn Query>>) -> Box<dyn Query> {
    Box::new(BooleanQuery::new(parts.into_iter().map(|q| (Occur::Must, q)).collect()))
}

/// The clause that keeps only what `who` may see.
fn visible(f: &Fields, who: &Visibility) -> Result<Box<dyn Query>, ApiError> {
    filter_query(f, &Filter::default(), who).map_err(engine)
}

/// The stored GMetaEntry of a document.
fn entry(searcher: &Searcher, f: &Fields, addr: DocAddress) -> Result<Value, ApiError> {
    let doc: TantivyDocument = searcher.doc(addr).map_err(engine)?;
    let bytes = doc.get_first(f.entry).and_then(|v| v.as_bytes()).unwrap_or_default();
    serde_json::from_slice(bytes).map_err(engine)
}

/// A GMetaResult of one stored entry (`legacy`: the 2017-09-01 shape with `content` lists).
pub fn gmeta_result(e: &Value, legacy: bool) -> Value {
    let (subject, content) = (&e["subject"], &e["content"]);
    if legacy {
        return json!({"@datatype": "GMetaResult", "@version": "2017-09-01", "subject": subject, "content": [content]});
    }
    json!({"@datatype": "GMetaResult", "@version": "2019-08-27", "subject": subject,
           "entries": [{"content": content, "entry_id": e.get("id").cloned().unwrap_or(Value::Null), "matched_principal_sets": []}]})
}

/// One page of `q` in the order `key` gives.
fn top<C>(searcher: &Searcher, q: &dyn Query, key: C, offset: usize, limit: usize) -> Result<Vec<DocAddress>, ApiError>
where
    C: SortKeyComputer + Send + 'static,
    C::SortKey: 'static + Clone + Send + Sync + std::fmt::Debug,
{
    let top = TopDocs::with_limit(limit).and_offset(offset).order_by(key);
    Ok(searcher.search(q, &top).map_err(engine)?.into_iter().map(|(_, a)| a).collect())
}

/// One page of `q` in the order of `key` (ties by subject).
fn page<C>(
    searcher: &Searcher,
    q: &dyn Query,
    key: C,
    order: Order,
    offset: usize,
    limit: usize,
) -> Result<Vec<DocAddress>, ApiError>
where
    C: SortKeyComputer + Send + Sync + 'static,
    C::SortKey: 'static + Clone + Send + Sync + std::fmt::Debug,
    (C, Order): SortKeyComputer,
    <(C, Order) as SortKeyComputer>::SortKey: 'static + Clone + Send + Sync + std::fmt::Debug,
    ((C, Order), (SortByString, Order)): SortKeyComputer + Send + 'static,
    <((C, Order), (SortByString, Order)) as SortKeyComputer>::SortKey: 'static + Clone + Send + Sync + std::fmt::Debug,
{
    top(searcher, q, ((key, order), (SortByString::for_field("subject"), Order::Asc)), offset, limit)
}

fn order(desc: bool) -> Order {
    if desc {
        Order::Desc
    } else {
        Order::Asc
    }
}

/// The addresses of one page of `q`, sorted as asked: one key by its typed fast field, two or
/// three by their values as the engine reads any fast field.
fn addresses(searcher: &Searcher, q: &dyn Query, s: &Search) -> Result<Vec<DocAddress>, ApiError> {
    if s.limit == 0 {
        return Ok(Vec::new());
    }
    let (offset, limit) = (s.offset, s.limit);
    let subject = || (SortByString::for_field("subject"), Order::Asc);
    let erased = |(t, desc): &(super::fields::Target, bool)| (SortByErasedType::for_field(t.name), order(*desc));
    match s.sort.as_slice() {
        [] => {
            let top = TopDocs::with_limit(limit).and_offset(offset).order_by_string_fast_field("subject", Order::Asc);
            Ok(searcher.search(q, &top).map_err(engine)?.into_iter().map(|(_, a)| a).collect())
        }
        [(t, desc)] => match t.kind {
            Kind::Text => page(searcher, q, SortByString::for_field(t.name), order(*desc), offset, limit),
            Kind::U64 => {
                page(searcher, q, SortByStaticFastValue::<u64>::for_field(t.name), order(*desc), offset, limit)
            }
            Kind::Time => {
                page(searcher, q, SortByStaticFastValue::<i64>::for_field(t.name), order(*desc), offset, limit)
            }
        },
        // Nested pairs: tantivy's 4-tuple sort key ignores its elements' orders.
        [a, b] => top(searcher, q, (erased(a), (erased(b), subject())), offset, limit),
        [a, b, c] => top(searcher, q, (erased(a), (erased(b), (erased(c), subject()))), offset, limit),
        _ => Err(ApiError::new(400, "BadRequest.ValidationError", "too many sort keys")),
    }
}

/// Answer a search (a GSearchResult).
pub fn search(searcher: &Searcher, f: &Fields, s: &Search, who: &Visibility) -> Result<Value, ApiError> {
    let base = all(vec![s.query.box_clone(), visible(f, who)?]);
    let results: Box<dyn Query> = match &s.post_filters {
        Some(p) => all(vec![base.box_clone(), p.box_clone()]),
        None => base.box_clone(),
    };
    let total = searcher.search(&results, &Count).map_err(engine)?;
    let mut gmeta = Vec::new();
    for a in addresses(searcher, &results, s)? {
        gmeta.push(gmeta_result(&entry(searcher, f, a)?, s.legacy));
    }
    let mut out = json!({"@datatype": "GSearchResult", "@version": "2017-09-01", "count": gmeta.len(), "offset": s.offset, "total": total,
                         "has_next_page": s.offset + gmeta.len() < total, "gmeta": gmeta});
    if !s.facets.is_empty() {
        let facets = s.facets.iter().map(|x| facet(searcher, f, base.as_ref(), x)).collect::<Result<Vec<_>, _>>()?;
        out["facet_results"] = Value::Array(facets);
    }
    Ok(out)
}

/// Answer a scroll (a GScrollResult): subjects after the marker, in subject order.
pub fn scroll(searcher: &Searcher, f: &Fields, s: &Search, who: &Visibility) -> Result<Value, ApiError> {
    let base = all(vec![s.query.box_clone(), visible(f, who)?]);
    let total = searcher.search(&base, &Count).map_err(engine)?;
    let after: Box<dyn Query> = match &s.marker {
        Some(m) => all(vec![
            base,
            Box::new(RangeQuery::new(Bound::Excluded(Term::from_field_text(f.subject, m)), Bound::Unbounded)),
        ]),
        None => base,
    };
    let top = TopDocs::with_limit(s.limit + 1).order_by_string_fast_field("subject", Order::Asc);
    let found = searcher.search(&after, &top).map_err(engine)?;
    let has_next = found.len() > s.limit;
    let mut gmeta = Vec::new();
    let mut last = None;
    for (subject, a) in found.into_iter().take(s.limit) {
        gmeta.push(gmeta_result(&entry(searcher, f, a)?, false));
        last = subject;
    }
    let marker = if has_next { last.map(|l| Value::String(hex(&l))).unwrap_or(Value::Null) } else { Value::Null };
    Ok(
        json!({"@datatype": "GSearchResult", "@version": "2017-09-01", "count": gmeta.len(), "offset": 0, "total": total,
              "has_next_page": has_next, "marker": marker, "gmeta": gmeta}),
    )
}

/// The stored entry of `subject`, if `who` may see it.
pub fn subject(searcher: &Searcher, f: &Fields, subject: &str, who: &Visibility) -> Result<Option<Value>, ApiError> {
    let q = all(vec![
        Box::new(TermQuery::new(Term::from_field_text(f.subject, subject), IndexRecordOption::Basic)),
        visible(f, who)?,
    ]);
    let top = TopDocs::with_limit(1).order_by_string_fast_field("subject", Order::Asc);
    match searcher.search(&q, &top).map_err(engine)?.first() {
        Some((_, a)) => Ok(Some(entry(searcher, f, *a)?)),
        None => Ok(None),
    }
}

/// Up to `limit` stored entries (GMetaEntry documents, `visible_to` included) after the subject
/// `after`, in subject order, whoever may see them: a tool's or a test's view of the whole
/// index, never an answer of the API.
pub fn stored_entries(
    searcher: &Searcher,
    f: &Fields,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<Value>, ApiError> {
    let q: Box<dyn Query> = match after {
        Some(m) => Box::new(RangeQuery::new(Bound::Excluded(Term::from_field_text(f.subject, m)), Bound::Unbounded)),
        None => Box::new(tantivy::query::AllQuery),
    };
    let top = TopDocs::with_limit(limit).order_by_string_fast_field("subject", Order::Asc);
    searcher.search(&q, &top).map_err(engine)?.into_iter().map(|(_, a)| entry(searcher, f, a)).collect()
}

/// How many records `who` may see.
pub fn visible_count(searcher: &Searcher, f: &Fields, who: &Visibility) -> Result<u64, ApiError> {
    Ok(searcher.search(&visible(f, who)?, &Count).map_err(engine)? as u64)
}

/// Run one aggregation named `f` over `q`; its buckets as (key, count).
fn buckets(searcher: &Searcher, q: &dyn Query, agg: Value) -> Result<Vec<(Value, u64)>, ApiError> {
    let aggs: Aggregations = serde_json::from_value(json!({ "f": agg })).map_err(engine)?;
    let collector = AggregationCollector::from_aggs(aggs, AggContextParams::default());
    let res: AggregationResults = searcher
        .search(q, &collector)
        .map_err(|e| ApiError::new(400, "BadRequest.ValidationError", format!("the facet: {e}")))?;
    let v = serde_json::to_value(&res).map_err(engine)?;
    let list = v["f"]["buckets"].as_array().cloned().unwrap_or_default();
    Ok(list.into_iter().map(|b| (b["key"].clone(), b["doc_count"].as_u64().unwrap_or(0))).collect())
}

/// Bucket values in order: numbers as numbers, anything else as text.
fn by_value(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        _ => a.as_str().unwrap_or_default().cmp(b.as_str().unwrap_or_default()),
    }
}

/// A whole number as a JSON integer.
fn num(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        json!(x as i64)
    } else {
        json!(x)
    }
}

/// A GFacetResult over `base` (the matching records the caller may see).
fn facet(searcher: &Searcher, f: &Fields, base: &dyn Query, x: &Facet) -> Result<Value, ApiError> {
    let t = &x.target;
    let q = restrict(f, t, base.box_clone());
    let bucket = |value: Value, count: u64| json!({"@datatype": "GBucket", "@version": "2017-09-01", "value": value, "count": count});
    let out: Vec<Value> = match &x.kind {
        FacetKind::Terms(size) => {
            let got =
                buckets(searcher, &q, json!({"terms": {"field": t.name, "size": 65_000, "segment_size": 65_000}}))?;
            let mut list: Vec<(Value, u64)> = got
                .into_iter()
                .map(|(k, n)| match (t.kind, k.as_f64()) {
                    (Kind::U64, Some(v)) => (num(v), n),
                    (Kind::Time, Some(v)) => (Value::String(format_date((v * 1000.0) as i64)), n),
                    _ => (k, n),
                })
                .collect();
            list.sort_by(|(a, x), (b, y)| y.cmp(x).then_with(|| by_value(a, b)));
            list.truncate(*size);
            list.into_iter().map(|(v, n)| bucket(v, n)).collect()
        }
        FacetKind::Numeric { low, high, size } => {
            let width = (high - low) / *size as f64;
            let got = buckets(
                searcher,
                &q,
                json!({"histogram": {"field": t.name, "interval": width, "offset": low.rem_euclid(width), "min_doc_count": 1, "hard_bounds": {"min": low, "max": high}}}),
            )?;
            let mut counts = vec![0u64; *size];
            for (k, n) in got {
                let Some(k) = k.as_f64().filter(|k| *k < *high) else { continue };
                let i = ((k - low) / width).round();
                if i >= 0.0 && (i as usize) < *size {
                    counts[i as usize] += n;
                }
            }
            counts.into_iter().enumerate().map(|(i, n)| bucket(num(low + i as f64 * width), n)).collect()
        }
        FacetKind::Date(interval) => dates(searcher, &q, t.name, interval, x)?
            .into_iter()
            .map(|(ms, n)| bucket(Value::String(format_date(ms)), n))
            .collect(),
    };
    Ok(json!({"@datatype": "GFacetResult", "@version": "2017-09-01", "name": x.name, "buckets": out}))
}

/// Counts per calendar `interval` (bucket start in ms), gaps between the first and the last
/// filled with zeros; day and coarser intervals fold day buckets.
fn dates(
    searcher: &Searcher,
    q: &dyn Query,
    field: &str,
    interval: &str,
    x: &Facet,
) -> Result<Vec<(i64, u64)>, ApiError> {
    let secs = match interval {
        "second" => 1,
        "minute" => 60,
        "hour" => 3600,
        _ => 86_400,
    };
    let got = buckets(searcher, q, json!({"histogram": {"field": field, "interval": secs, "min_doc_count": 1}}))?;
    let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
    for (k, n) in got {
        if let Some(k) = k.as_f64() {
            *counts.entry(bucket_start(k as i64 * 1000, interval)).or_default() += n;
        }
    }
    let mut out = Vec::new();
    if let (Some((&first, _)), Some((&last, _))) = (counts.first_key_value(), counts.last_key_value()) {
        let mut at = first;
        while at <= last {
            if out.len() >= MAX_BUCKETS {
                return Err(ApiError::new(
                    400,
                    "BadRequest.ValidationError",
                    format!("the facet `{}` would have more than {MAX_BUCKETS} buckets", x.name),
                ));
            }
            out.push((at, counts.get(&at).copied().unwrap_or(0)));
            at = next_bucket(at, interval);
        }
    }
    Ok(out)
}

/// The start (ms) of the calendar `interval` holding `ms`, UTC; weeks start on Monday.
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
        // 1970-01-01 was a Thursday.
        "week" => (days - (days + 3).rem_euclid(7)) * 86_400_000,
        "month" => day(y, m),
        "quarter" => day(y, (m - 1) / 3 * 3 + 1),
        _ => day(y, 1),
    }
}

/// The bucket after the one starting at `start`.
fn next_bucket(start: i64, interval: &str) -> i64 {
    let (y, m, _) = icicle_core::time::civil_from_days(start.div_euclid(86_400_000));
    let months = |n: u32| {
        let k = m - 1 + n;
        icicle_core::time::days_from_civil(y + i64::from(k / 12), k % 12 + 1, 1) * 86_400_000
    };
    match interval {
        "second" => start + 1000,
        "minute" => start + 60_000,
        "hour" => start + 3_600_000,
        "day" => start + 86_400_000,
        "week" => start + 7 * 86_400_000,
        "month" => months(1),
        "quarter" => months(3),
        _ => months(12),
    }
}
