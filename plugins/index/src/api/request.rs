//! Search requests as Globus Search defines them — the GSearchRequest of `POST .../search`
//! (<https://docs.globus.org/api/search/reference/post_query/>), the query parameters of
//! `GET .../search` (<https://docs.globus.org/api/search/reference/get_query/>) and the
//! GScrollRequest of `POST .../scroll`
//! (<https://docs.globus.org/api/search/reference/scroll_query/>) — parsed into the engine's
//! query, facets, sort and window.

use std::collections::HashMap;

use serde_json::Value;
use tantivy::query::{BooleanQuery, Occur, Query};

use super::advanced::{advanced, simple};
use super::fields::{equals, range, restrict, target, End, Kind, Target};
use crate::schema::Fields;

/// Search's window: `offset + limit` at most this (the scroll API reads further).
pub const MAX_SEARCH_RESULTS: u64 = 10_000;
/// The most results of one scroll page.
pub const MAX_SCROLL_LIMIT: u64 = 10_000;
/// The most buckets a facet may have.
pub const MAX_BUCKETS: usize = 1000;

/// What a facet counts.
#[derive(Debug, Clone)]
pub enum FacetKind {
    /// The most frequent values (at most this many).
    Terms(usize),
    /// Dates per calendar interval (`year` … `second`), UTC.
    Date(String),
    /// `size` equal buckets over `low` ≤ x < `high`.
    Numeric {
        /// `histogram_range.low`: where the first bucket starts.
        low: f64,
        /// `histogram_range.high`: where the last bucket ends.
        high: f64,
        /// The number of buckets.
        size: usize,
    },
}

/// A GFacet.
#[derive(Debug, Clone)]
pub struct Facet {
    /// The name its result carries.
    pub name: String,
    /// The index field it counts.
    pub target: Target,
    /// What it counts.
    pub kind: FacetKind,
}

/// A parsed search (or scroll) request.
pub struct Search {
    /// `q` and `filters`, all required (visibility is added when it is answered).
    pub query: Box<dyn Query>,
    /// `post_facet_filters`: results must also match them; facets are counted before.
    pub post_filters: Option<Box<dyn Query>>,
    /// `facets`.
    pub facets: Vec<Facet>,
    /// The sort fields in order, each with whether it is descending (ties, and unsorted
    /// results, go by subject).
    pub sort: Vec<(Target, bool)>,
    /// The first result returned.
    pub offset: usize,
    /// The most results returned.
    pub limit: usize,
    /// `bypass_visible_to`.
    pub bypass: bool,
    /// `result_format_version = "2017-09-01"`: results carry `content` lists.
    pub legacy: bool,
    /// A scroll's marker: the last subject of the previous page.
    pub marker: Option<String>,
}

/// A JSON flag: `true`, or the strings clients send for it.
fn truthy(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

fn count(v: Option<&Value>, what: &str, default: u64) -> Result<u64, String> {
    match v {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .ok_or_else(|| format!("`{what}` must be a non-negative integer, not {v}")),
    }
}

/// A GFilter as a query.
fn filter(f: &Fields, v: &Value) -> Result<Box<dyn Query>, String> {
    let Some(o) = v.as_object() else { return Err(format!("a GFilter is an object, not {v}")) };
    if let Some(k) =
        o.keys().find(|k| !matches!(k.as_str(), "type" | "field_name" | "values" | "@datatype" | "@version"))
    {
        return Err(format!("unknown GFilter field `{k}`"));
    }
    let Some(name) = o.get("field_name").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
        return Err("a GFilter needs a `field_name` string".into());
    };
    let Some(values) = o.get("values").and_then(Value::as_array).filter(|a| !a.is_empty()) else {
        return Err(format!("the filter on `{name}` needs a non-empty `values` list"));
    };
    let t = target(f, name)?;
    let (occur, parts) = match o.get("type").map(Value::as_str) {
        None | Some(Some("match_all")) => {
            (Occur::Must, values.iter().map(|v| equals(&t, v)).collect::<Result<Vec<_>, _>>()?)
        }
        Some(Some("match_any")) => {
            (Occur::Should, values.iter().map(|v| equals(&t, v)).collect::<Result<Vec<_>, _>>()?)
        }
        Some(Some("range")) => {
            let mut parts = Vec::new();
            for r in values {
                let Some(r) = r.as_object() else { return Err(format!("a range is {{\"from\", \"to\"}}, not {r}")) };
                if let Some(k) = r.keys().find(|k| *k != "from" && *k != "to") {
                    return Err(format!("unknown range field `{k}`"));
                }
                if r.get("from").is_none() || r.get("to").is_none() {
                    return Err("a range needs `from` and `to` (\"*\" for open)".into());
                }
                parts.push(range(&t, &End::of(r.get("from")), &End::of(r.get("to")))?);
            }
            (Occur::Should, parts)
        }
        Some(other) => {
            return Err(format!(
                "filter types are match_all, match_any and range, not {}",
                other.map_or("a non-string".to_string(), |t| format!("`{t}`"))
            ))
        }
    };
    let q: Box<dyn Query> = Box::new(BooleanQuery::new(parts.into_iter().map(|q| (occur, q)).collect()));
    Ok(restrict(f, &t, q))
}

fn filters(f: &Fields, v: Option<&Value>, what: &str) -> Result<Vec<Box<dyn Query>>, String> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(|x| filter(f, x)).collect(),
        Some(_) => Err(format!("`{what}` must be a list of GFilter")),
    }
}

/// A GFacet.
fn facet(f: &Fields, v: &Value) -> Result<Facet, String> {
    let Some(o) = v.as_object() else { return Err(format!("a GFacet is an object, not {v}")) };
    if let Some(k) = o.keys().find(|k| {
        !matches!(
            k.as_str(),
            "name" | "field_name" | "type" | "size" | "date_interval" | "histogram_range" | "@datatype" | "@version"
        )
    }) {
        return Err(format!("unknown GFacet field `{k}`"));
    }
    let Some(field) = o.get("field_name").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
        return Err("a GFacet needs a `field_name` string".into());
    };
    let name = o.get("name").and_then(Value::as_str).unwrap_or(field).to_string();
    let size = match o.get("size") {
        None | Some(Value::Null) => 10,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_BUCKETS as u64).contains(&n) => n as usize,
            _ => return Err(format!("the facet `{name}`: `size` must be 1..{MAX_BUCKETS}")),
        },
    };
    let t = target(f, field)?;
    if !t.fast() {
        return Err(format!("the facet `{name}`: `{field}` cannot be faceted on"));
    }
    let kind = match o.get("type").map(Value::as_str) {
        None | Some(Some("terms")) => FacetKind::Terms(size),
        Some(Some("date_histogram")) if t.kind != Kind::Time => {
            return Err(format!("the facet `{name}`: `{field}` is not a date"))
        }
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
        Some(Some("numeric_histogram")) if t.kind == Kind::Text => {
            return Err(format!("the facet `{name}`: `{field}` is not a number"))
        }
        Some(Some("numeric_histogram")) => {
            let r = o.get("histogram_range");
            match (
                r.and_then(|r| r.get("low")).and_then(Value::as_f64),
                r.and_then(|r| r.get("high")).and_then(Value::as_f64),
            ) {
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
                "facet types are terms, date_histogram and numeric_histogram, not {}",
                t.unwrap_or("a non-string")
            ))
        }
    };
    Ok(Facet { name, target: t, kind })
}

/// The most sort keys a request may give.
pub const MAX_SORT_KEYS: usize = 3;

/// The GSort list: up to [`MAX_SORT_KEYS`] fields, each ascending or descending (ties go by
/// subject).
fn sort(f: &Fields, v: Option<&Value>) -> Result<Vec<(Target, bool)>, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(Vec::new()) };
    let Some(list) = v.as_array() else { return Err("`sort` must be a list of GSort".into()) };
    if list.len() > MAX_SORT_KEYS {
        return Err(format!("icicle serve sorts by at most {MAX_SORT_KEYS} fields (ties go by subject)"));
    }
    let mut keys = Vec::with_capacity(list.len());
    for g in list {
        let Some(field) = g.get("field_name").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
            return Err("a GSort needs a `field_name` string".into());
        };
        let desc = match g.get("order").map(Value::as_str) {
            None | Some(Some("asc")) => false,
            Some(Some("desc")) => true,
            _ => return Err(format!("the sort on `{field}`: `order` is \"asc\" or \"desc\"")),
        };
        let t = target(f, field)?;
        if !t.fast() {
            return Err(format!("`{field}` cannot be sorted on; sort on `path`"));
        }
        keys.push((t, desc));
    }
    Ok(keys)
}

fn and(mut parts: Vec<Box<dyn Query>>) -> Option<Box<dyn Query>> {
    match parts.len() {
        0 => None,
        1 => parts.pop(),
        _ => Some(Box::new(BooleanQuery::new(parts.into_iter().map(|q| (Occur::Must, q)).collect()))),
    }
}

fn query_string(f: &Fields, q: &str, adv: bool) -> Result<Box<dyn Query>, String> {
    if adv {
        advanced(f, q)
    } else {
        simple(f, q)
    }
}

impl Search {
    fn window(&mut self, offset: u64, limit: u64) -> Result<(), String> {
        if limit > MAX_SEARCH_RESULTS || offset > MAX_SEARCH_RESULTS || offset + limit > MAX_SEARCH_RESULTS {
            return Err(format!("offset ({offset}) + limit ({limit}) must be at most {MAX_SEARCH_RESULTS}; use the scroll API for more results"));
        }
        (self.offset, self.limit) = (offset as usize, limit as usize);
        Ok(())
    }

    fn of(query: Box<dyn Query>) -> Search {
        Search {
            query,
            post_filters: None,
            facets: Vec::new(),
            sort: Vec::new(),
            offset: 0,
            limit: 10,
            bypass: false,
            legacy: false,
            marker: None,
        }
    }

    /// The query parameters of `GET .../search`.
    pub fn from_params(f: &Fields, p: &HashMap<String, String>) -> Result<Search, String> {
        if let Some(k) =
            p.keys().find(|k| !matches!(k.as_str(), "q" | "offset" | "limit" | "advanced" | "bypass_visible_to"))
        {
            return Err(format!("unknown query parameter `{k}`"));
        }
        let Some(q) = p.get("q") else { return Err("the `q` query parameter is required".into()) };
        let yes = |k: &str| p.get(k).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let mut s = Search::of(query_string(f, q, yes("advanced"))?);
        s.bypass = yes("bypass_visible_to");
        let num = |k: &str, d| count(p.get(k).map(|s| Value::String(s.clone())).as_ref(), k, d);
        s.window(num("offset", 0)?, num("limit", 10)?)?;
        Ok(s)
    }

    /// A GSearchRequest.
    pub fn from_json(f: &Fields, doc: &Value) -> Result<Search, String> {
        let Some(o) = doc.as_object() else { return Err("the request must be a JSON object".into()) };
        let known = [
            "q",
            "advanced",
            "filters",
            "@version",
            "@datatype",
            "limit",
            "offset",
            "bypass_visible_to",
            "result_format_version",
            "facets",
            "post_facet_filters",
            "sort",
            "boosts",
            "query_template",
            "filter_principal_sets",
        ];
        if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(format!("unknown field `{k}`"));
        }
        if o.get("query_template").is_some_and(|t| !t.is_null()) {
            return Err("icicle serve has no query templates".into());
        }
        if o.get("filter_principal_sets").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
            return Err("icicle serve does not implement filter_principal_sets".into());
        }
        let legacy = match o.get("result_format_version").map(Value::as_str) {
            None | Some(Some("2019-08-27")) => false,
            Some(Some("2017-09-01")) => true,
            Some(_) => return Err("result_format_version is \"2019-08-27\" or \"2017-09-01\"".into()),
        };
        let mut parts = filters(f, o.get("filters"), "filters")?;
        match o.get("q") {
            None | Some(Value::Null) if parts.is_empty() => {
                return Err("a GSearchRequest needs `q` or `filters`".into())
            }
            None | Some(Value::Null) => {}
            Some(Value::String(q)) => parts.insert(0, query_string(f, q, truthy(o.get("advanced")))?),
            Some(_) => return Err("`q` must be a string".into()),
        }
        let mut s = Search::of(and(parts).unwrap_or_else(|| Box::new(tantivy::query::AllQuery)));
        s.post_filters = and(filters(f, o.get("post_facet_filters"), "post_facet_filters")?);
        s.legacy = legacy;
        s.bypass = truthy(o.get("bypass_visible_to"));
        if let Some(list) = o.get("facets").filter(|v| !v.is_null()) {
            let Some(list) = list.as_array() else { return Err("`facets` must be a list of GFacet".into()) };
            s.facets = list.iter().map(|x| facet(f, x)).collect::<Result<_, _>>()?;
        }
        s.sort = sort(f, o.get("sort"))?;
        s.window(count(o.get("offset"), "offset", 0)?, count(o.get("limit"), "limit", 10)?)?;
        Ok(s)
    }

    /// A GScrollRequest (`q`, `advanced`, `filters`, `limit`, `marker`, `bypass_visible_to`).
    pub fn from_scroll(f: &Fields, doc: &Value) -> Result<Search, String> {
        let Some(o) = doc.as_object() else { return Err("a scroll request is a JSON object".into()) };
        if let Some(k) = o.keys().find(|k| {
            !matches!(
                k.as_str(),
                "q" | "advanced" | "filters" | "limit" | "marker" | "bypass_visible_to" | "@datatype" | "@version"
            )
        }) {
            return Err(format!("unknown scroll field `{k}`"));
        }
        let mut parts = filters(f, o.get("filters"), "filters")?;
        if let Some(q) = o.get("q").filter(|q| !q.is_null()) {
            let Some(q) = q.as_str() else { return Err("`q` must be a string".into()) };
            parts.insert(0, query_string(f, q, truthy(o.get("advanced")))?);
        }
        let mut s = Search::of(and(parts).unwrap_or_else(|| Box::new(tantivy::query::AllQuery)));
        s.bypass = truthy(o.get("bypass_visible_to"));
        s.limit = match count(o.get("limit"), "limit", 10)? {
            n @ 1..=MAX_SCROLL_LIMIT => n as usize,
            _ => return Err(format!("`limit` must be 1..{MAX_SCROLL_LIMIT}")),
        };
        s.marker = match o.get("marker") {
            None | Some(Value::Null) => None,
            Some(Value::String(m)) => Some(unhex(m).ok_or("invalid `marker`")?),
            Some(_) => return Err("invalid `marker`".into()),
        };
        Ok(s)
    }
}

/// The query of a `delete_by_query` request: `q` (with `advanced`) and `filters`, all required;
/// nothing else is taken.
pub fn delete_query(f: &Fields, doc: &Value) -> Result<Box<dyn Query>, String> {
    let Some(o) = doc.as_object() else { return Err("a delete_by_query request is a JSON object".into()) };
    if let Some(k) = o.keys().find(|k| !matches!(k.as_str(), "q" | "advanced" | "filters" | "@datatype" | "@version")) {
        return Err(format!("unknown delete_by_query field `{k}` (it takes q, advanced and filters)"));
    }
    let mut parts = filters(f, o.get("filters"), "filters")?;
    match o.get("q") {
        None | Some(Value::Null) if parts.is_empty() => return Err("a delete_by_query needs `q` or `filters`".into()),
        None | Some(Value::Null) => {}
        Some(Value::String(q)) => parts.insert(0, query_string(f, q, truthy(o.get("advanced")))?),
        Some(_) => return Err("`q` must be a string".into()),
    }
    Ok(and(parts).unwrap_or_else(|| Box::new(tantivy::query::AllQuery)))
}

/// Hex of a string (scroll markers).
pub fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The string of a [`hex`] marker.
pub fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_parse_or_say_why_not() {
        let (_, f) = Fields::schema();
        let s = Search::from_json(
            &f,
            &json!({"q": "*", "limit": 5, "offset": 2, "filters": [{"type": "range", "field_name": "size", "values": [{"from": 10, "to": "*"}]},
                   {"type": "match_any", "field_name": "content.uid", "values": [1, "2"]}],
                   "facets": [{"field_name": "type"}, {"type": "numeric_histogram", "field_name": "size", "size": 4, "histogram_range": {"low": 0, "high": 100}}],
                   "sort": [{"field_name": "size", "order": "desc"}]}),
        )
        .unwrap();
        assert_eq!((s.offset, s.limit, s.facets.len(), s.sort.first().map(|x| x.1)), (2, 5, 2, Some(true)));
        for (bad, why) in [
            (json!({"q": "*", "limit": 10_001}), "10000"),
            (
                json!({"filters": [{"type": "range", "field_name": "raw.inode", "values": [{"from": 1, "to": 2}]}]}),
                "searchable fields",
            ),
            (json!({"q": "*", "filters": [{"type": "geo", "field_name": "uid", "values": [1]}]}), "filter types"),
            (json!({"limit": 1}), "needs `q`"),
            (
                json!({"q": "*", "sort": [{"field_name": "size"}, {"field_name": "uid"}, {"field_name": "gid"}, {"field_name": "mtime"}]}),
                "at most 3",
            ),
        ] {
            let e = Search::from_json(&f, &bad).err().unwrap_or_default();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert_eq!(unhex(&hex("/a/ü")).as_deref(), Some("/a/ü"));
        assert_eq!(
            Search::from_scroll(&f, &json!({"q": "*", "limit": 2, "marker": hex("/a")})).unwrap().marker.as_deref(),
            Some("/a")
        );
    }
}
