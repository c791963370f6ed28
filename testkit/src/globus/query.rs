//! Search requests: GSearchRequest and query-parameter parsing, the query string, GFilters,
//! and which entries a query matches.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::config::{MAX_QUERY_CHARS, MAX_SEARCH_RESULTS};
use super::entry::Entry;
use super::facets::{parse_facet, Facet};
use super::values::{content_words, leaves, parse_date, value_eq, words, Num};

/// One end of a range filter.
#[derive(Debug, Clone)]
pub(super) enum Bound {
    Open,
    Num(Num),
    Date(i64),
    Str(String),
}

impl Bound {
    pub(super) fn of(v: Option<&Value>) -> Result<Bound, String> {
        match v {
            Some(Value::String(s)) if s == "*" => Ok(Bound::Open),
            Some(Value::String(s)) => Ok(parse_date(s)
                .map(Bound::Date)
                .or_else(|| Num::parse(s).map(Bound::Num))
                .unwrap_or_else(|| Bound::Str(s.clone()))),
            Some(v @ Value::Number(_)) => Num::of(v).map(Bound::Num).ok_or_else(|| format!("bad range bound {v}")),
            Some(v) => Err(format!("a range bound is a number, a string or \"*\", not {v}")),
            None => Err("a range needs `from` and `to` (\"*\" for open)".into()),
        }
    }

    /// How `v` compares with this bound, if they are comparable.
    pub(super) fn compare(&self, v: &Value) -> Option<Ordering> {
        match (self, v) {
            (Bound::Num(b), Value::Number(_)) => Num::of(v).map(|n| n.cmp(*b)),
            (Bound::Date(b), Value::String(s)) => parse_date(s).map(|d| d.cmp(b)),
            (Bound::Str(b), Value::String(s)) => Some(s.as_str().cmp(b.as_str())),
            _ => None,
        }
    }
}

/// A GFilter.
#[derive(Debug, Clone)]
pub(super) enum Filter {
    Any(String, Vec<Value>),
    All(String, Vec<Value>),
    Range(String, Vec<(Bound, Bound)>),
}

impl Filter {
    fn parse(v: &Value) -> Result<Filter, String> {
        let Some(o) = v.as_object() else { return Err(format!("a GFilter is an object, not {v}")) };
        for k in o.keys() {
            if !matches!(k.as_str(), "type" | "field_name" | "values" | "@datatype" | "@version") {
                return Err(format!("unknown GFilter field `{k}`"));
            }
        }
        let Some(field) = o.get("field_name").and_then(Value::as_str).filter(|f| !f.is_empty()) else {
            return Err("a GFilter needs a `field_name` string".into());
        };
        let Some(values) = o.get("values").and_then(Value::as_array).filter(|a| !a.is_empty()) else {
            return Err(format!("the filter on `{field}` needs a non-empty `values` list"));
        };
        let field = field.to_string();
        match o.get("type").map(|t| t.as_str()) {
            None | Some(Some("match_all")) => Ok(Filter::All(field, values.clone())),
            Some(Some("match_any")) => Ok(Filter::Any(field, values.clone())),
            Some(Some("range")) => {
                let ranges = values.iter().map(|r| match r.as_object() {
                    Some(r) => {
                        if let Some(k) = r.keys().find(|k| *k != "from" && *k != "to") {
                            return Err(format!("unknown range field `{k}`"));
                        }
                        Ok((Bound::of(r.get("from"))?, Bound::of(r.get("to"))?))
                    }
                    None => Err(format!("a range is {{\"from\", \"to\"}}, not {r}")),
                });
                Ok(Filter::Range(field, ranges.collect::<Result<_, _>>()?))
            }
            Some(t) => Err(format!(
                "the emulator implements filter types match_all, match_any and range, not {}",
                t.map_or("a non-string".to_string(), |t| format!("`{t}`"))
            )),
        }
    }

    /// Whether `content` satisfies the filter.
    pub(super) fn holds(&self, content: &Value) -> bool {
        match self {
            Filter::Any(f, want) => {
                let got = leaves(content, f);
                want.iter().any(|w| got.iter().any(|g| value_eq(g, w)))
            }
            Filter::All(f, want) => {
                let got = leaves(content, f);
                want.iter().all(|w| got.iter().any(|g| value_eq(g, w)))
            }
            Filter::Range(f, ranges) => leaves(content, f).iter().any(|v| {
                ranges.iter().any(|(from, to)| {
                    let lo = matches!(from, Bound::Open) || from.compare(v).is_some_and(Ordering::is_ge);
                    let hi = matches!(to, Bound::Open) || to.compare(v).is_some_and(Ordering::is_le);
                    lo && hi
                })
            }),
        }
    }
}

/// A query term: its lower-cased letter/digit runs, the last one a prefix when it ended in `*`.
#[derive(Debug, Clone)]
struct Term {
    words: Vec<String>,
    prefix: bool,
}

/// A parsed GSearchRequest (or the restricted one of `delete_by_query`).
#[derive(Debug, Clone, Default)]
pub(super) struct Query {
    /// Every term must match; none: everything.
    terms: Vec<Term>,
    /// `filters`: all must hold.
    pub(super) filters: Vec<Filter>,
    /// `post_facet_filters`: all must hold, applied after counting facets.
    pub(super) post_filters: Vec<Filter>,
    /// `facets`.
    pub(super) facets: Vec<Facet>,
    /// (field, descending).
    pub(super) sort: Vec<(String, bool)>,
    /// The first result returned.
    pub(super) offset: usize,
    /// The most results returned.
    pub(super) limit: usize,
    /// `bypass_visible_to`.
    pub(super) bypass: bool,
    /// `result_format_version = "2017-09-01"`: results carry `content` lists, not entries.
    pub(super) legacy_results: bool,
    /// `advanced: true`: `q` in the advanced syntax (then `terms` is empty).
    advanced: Option<super::advanced::Expr>,
}

fn parse_terms(q: &str) -> Result<Vec<Term>, String> {
    if q.chars().count() > MAX_QUERY_CHARS {
        return Err(format!(
            "the query string is {} characters long, over the limit of {MAX_QUERY_CHARS}",
            q.chars().count()
        ));
    }
    Ok(q.split_whitespace()
        .filter(|t| t.chars().any(char::is_alphanumeric))
        .map(|t| Term { words: words(t).collect(), prefix: t.ends_with('*') })
        .collect())
}

fn parse_filters(v: Option<&Value>, what: &str) -> Result<Vec<Filter>, String> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(Filter::parse).collect(),
        Some(_) => Err(format!("`{what}` must be a list of GFilter")),
    }
}

/// A JSON flag: `true`, or the strings clients send for it (`"true"`, `"True"`).
pub(super) fn truthy(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

fn parse_count(v: Option<&Value>, what: &str, default: u64) -> Result<u64, String> {
    match v {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .ok_or_else(|| format!("`{what}` must be a non-negative integer, not {v}")),
    }
}

impl Query {
    /// Validate offset and limit against Search's window of 10,000 results.
    fn window(&mut self, offset: u64, limit: u64) -> Result<(), String> {
        if limit > MAX_SEARCH_RESULTS || offset > MAX_SEARCH_RESULTS || offset + limit > MAX_SEARCH_RESULTS {
            return Err(format!("offset ({offset}) + limit ({limit}) must be at most {MAX_SEARCH_RESULTS}; use the scroll API for more results"));
        }
        (self.offset, self.limit) = (offset as usize, limit as usize);
        Ok(())
    }

    /// The query parameters of `GET .../search`.
    pub(super) fn from_params(p: &HashMap<String, String>) -> Result<Query, String> {
        for k in p.keys() {
            if !matches!(k.as_str(), "q" | "offset" | "limit" | "advanced" | "bypass_visible_to" | "query_template") {
                return Err(format!("unknown query parameter `{k}`"));
            }
        }
        let Some(q) = p.get("q") else { return Err("the `q` query parameter is required".into()) };
        let yes = |k: &str| p.get(k).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if p.contains_key("query_template") {
            return Err("the emulator has no query templates".into());
        }
        let mut query = Query { bypass: yes("bypass_visible_to"), ..Query::default() };
        query.set_q(q, yes("advanced"))?;
        let num = |k: &str, d| parse_count(p.get(k).map(|s| Value::String(s.clone())).as_ref(), k, d);
        query.window(num("offset", 0)?, num("limit", 10)?)?;
        Ok(query)
    }

    /// A GSearchRequest; `delete` allows only what `delete_by_query` takes.
    pub(super) fn from_json(doc: &Value, delete: bool) -> Result<Query, String> {
        let Some(o) = doc.as_object() else { return Err("the request must be a JSON object".into()) };
        for k in o.keys() {
            let ok = match k.as_str() {
                "q" | "advanced" | "filters" | "@version" | "@datatype" => true,
                "limit"
                | "offset"
                | "query_template"
                | "bypass_visible_to"
                | "result_format_version"
                | "filter_principal_sets"
                | "facets"
                | "post_facet_filters"
                | "boosts"
                | "sort" => !delete,
                _ => false,
            };
            if !ok {
                return Err(format!(
                    "unknown or not allowed field `{k}`{}",
                    if delete { " (delete_by_query takes q, advanced and filters)" } else { "" }
                ));
            }
        }
        if o.get("@datatype").is_some_and(|d| d != "GSearchRequest") {
            return Err("`@datatype` must be \"GSearchRequest\"".into());
        }
        if o.get("query_template").is_some_and(|t| !t.is_null()) {
            return Err("the emulator has no query templates".into());
        }
        let legacy_results = match o.get("result_format_version").map(|v| v.as_str()) {
            None | Some(Some("2019-08-27")) => false,
            Some(Some("2017-09-01")) => true,
            Some(_) => return Err("result_format_version is \"2019-08-27\" or \"2017-09-01\"".into()),
        };
        if o.get("filter_principal_sets").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
            return Err("the emulator does not implement filter_principal_sets".into());
        }
        let mut query = Query {
            legacy_results,
            filters: parse_filters(o.get("filters"), "filters")?,
            post_filters: parse_filters(o.get("post_facet_filters"), "post_facet_filters")?,
            ..Query::default()
        };
        match o.get("q") {
            None | Some(Value::Null) if query.filters.is_empty() => {
                return Err("a GSearchRequest needs `q` or `filters`".into())
            }
            None | Some(Value::Null) => {}
            Some(Value::String(q)) => query.set_q(q, truthy(o.get("advanced")))?,
            Some(_) => return Err("`q` must be a string".into()),
        }
        query.bypass = truthy(o.get("bypass_visible_to"));
        if let Some(f) = o.get("facets").filter(|f| !f.is_null()) {
            let Some(list) = f.as_array() else { return Err("`facets` must be a list of GFacet".into()) };
            query.facets = list.iter().map(parse_facet).collect::<Result<_, _>>()?;
        }
        if let Some(b) = o.get("boosts").filter(|b| !b.is_null()) {
            if !b.is_array() {
                return Err("`boosts` must be a list".into());
            }
        }
        if let Some(s) = o.get("sort").filter(|s| !s.is_null()) {
            let Some(list) = s.as_array() else { return Err("`sort` must be a list of GSort".into()) };
            for g in list {
                let Some(field) = g.get("field_name").and_then(Value::as_str).filter(|f| !f.is_empty()) else {
                    return Err("a GSort needs a `field_name` string".into());
                };
                let desc = match g.get("order").map(|o| o.as_str()) {
                    None | Some(Some("asc")) => false,
                    Some(Some("desc")) => true,
                    _ => return Err(format!("the sort on `{field}`: `order` is \"asc\" or \"desc\"")),
                };
                query.sort.push((field.to_string(), desc));
            }
        }
        query.window(parse_count(o.get("offset"), "offset", 0)?, parse_count(o.get("limit"), "limit", 10)?)?;
        Ok(query)
    }

    /// Take `q`, in the advanced syntax when `advanced`.
    fn set_q(&mut self, q: &str, advanced: bool) -> Result<(), String> {
        if advanced {
            if q.chars().count() > MAX_QUERY_CHARS {
                return Err(format!(
                    "the query string is {} characters long, over the limit of {MAX_QUERY_CHARS}",
                    q.chars().count()
                ));
            }
            self.advanced = Some(super::advanced::parse(q)?);
        } else {
            self.terms = parse_terms(q)?;
        }
        Ok(())
    }

    /// Whether `e` matches the query string and `filters`.
    pub(super) fn matches(&self, e: &Entry, filters: &[Filter]) -> bool {
        if !filters.iter().all(|f| f.holds(&e.content)) {
            return false;
        }
        if let Some(x) = &self.advanced {
            return x.holds(&e.content);
        }
        if self.terms.is_empty() {
            return true;
        }
        let mut w = HashSet::new();
        content_words(&e.content, &mut w);
        self.terms.iter().all(|t| {
            t.words.iter().enumerate().all(|(i, x)| {
                if t.prefix && i + 1 == t.words.len() {
                    w.iter().any(|y| y.starts_with(x.as_str()))
                } else {
                    w.contains(x)
                }
            })
        })
    }
}
