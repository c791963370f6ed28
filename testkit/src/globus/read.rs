//! Read requests: search (GET and POST), subject lookup, scroll, and the task endpoints.

use std::cmp::Ordering;

use hyper::body::Incoming;
use hyper::Request;
use serde_json::{json, Value};

use super::auth::allows;
use super::config::MAX_SCROLL_LIMIT;
use super::entry::Entry;
use super::facets::facet_result;
use super::http::{
    bad_query, error, hex, json_body, json_response, no_bypass, no_index, parse_form, query_param, unhex, Resp,
};
use super::query::{truthy, Query};
use super::state::{Grant, Shared};
use super::task::Task;
use super::values::{leaves, SortVal};

/// The entries of `subject` the caller may see, as a GMetaResult.
fn gmeta_result(subject: &str, entries: &[Entry], grant: &Grant, bypass: bool) -> Option<Value> {
    let visible: Vec<Value> = entries
        .iter()
        .filter(|e| bypass || e.visible_to.iter().any(|p| p == "public" || Some(p) == grant.identity.as_ref()))
        .map(|e| json!({"content": e.content, "entry_id": e.entry_id, "matched_principal_sets": []}))
        .collect();
    (!visible.is_empty())
        .then(|| json!({"@datatype": "GMetaResult", "@version": "2019-08-27", "subject": subject, "entries": visible}))
}

/// A matching subject and its matching entries.
type Hit<'a> = (&'a String, Vec<&'a Entry>);

/// Answer a search of `index`.
fn search(shared: &Shared, index: &str, q: &Query, grant: &Grant) -> Resp {
    if q.bypass && grant.anonymous {
        return no_bypass();
    }
    let st = shared.lock();
    let Some(ix) = st.indexes.get(index) else { return no_index(index) };
    let visible =
        |e: &&Entry| q.bypass || e.visible_to.iter().any(|p| p == "public" || Some(p) == grant.identity.as_ref());
    let hits: Vec<Hit> = ix
        .iter()
        .filter_map(|(s, es)| {
            let m: Vec<&Entry> = es.iter().filter(visible).filter(|e| q.matches(e, &q.filters)).collect();
            (!m.is_empty()).then_some((s, m))
        })
        .collect();
    let mut facet_results = Vec::new();
    if !q.facets.is_empty() {
        let all: Vec<&Entry> = hits.iter().flat_map(|(_, es)| es.iter().copied()).collect();
        for f in &q.facets {
            match facet_result(f, &all) {
                Ok(v) => facet_results.push(v),
                Err(m) => return bad_query(m),
            }
        }
    }
    let mut hits: Vec<Hit> = hits
        .into_iter()
        .filter_map(|(s, es)| {
            let m: Vec<&Entry> =
                es.into_iter().filter(|e| q.post_filters.iter().all(|f| f.holds(&e.content))).collect();
            (!m.is_empty()).then_some((s, m))
        })
        .collect();
    if !q.sort.is_empty() {
        let key = |es: &[&Entry]| -> Vec<Option<SortVal>> {
            q.sort
                .iter()
                .map(|(field, desc)| {
                    let vals = es.iter().flat_map(|e| leaves(&e.content, field)).filter_map(SortVal::of);
                    if *desc {
                        vals.max_by(|a, b| a.cmp(b))
                    } else {
                        vals.min_by(|a, b| a.cmp(b))
                    }
                })
                .collect()
        };
        let mut keyed: Vec<(Vec<Option<SortVal>>, Hit)> = hits.into_iter().map(|h| (key(&h.1), h)).collect();
        keyed.sort_by(|(ka, (sa, _)), (kb, (sb, _))| {
            for ((a, b), (_, desc)) in ka.iter().zip(kb).zip(&q.sort) {
                let o = match (a, b) {
                    (Some(a), Some(b)) if *desc => b.cmp(a),
                    (Some(a), Some(b)) => a.cmp(b),
                    (Some(_), None) => Ordering::Less,
                    (None, Some(_)) => Ordering::Greater,
                    (None, None) => Ordering::Equal,
                };
                if o.is_ne() {
                    return o;
                }
            }
            sa.cmp(sb)
        });
        hits = keyed.into_iter().map(|(_, h)| h).collect();
    }
    let total = hits.len();
    let page: Vec<Value> = hits
        .into_iter()
        .skip(q.offset)
        .take(q.limit)
        .map(|(s, es)| {
            if q.legacy_results {
                let content: Vec<&Value> = es.iter().map(|e| &e.content).collect();
                return json!({"@datatype": "GMetaResult", "@version": "2017-09-01", "subject": s, "content": content});
            }
            let entries: Vec<Value> = es
                .iter()
                .map(|e| json!({"content": e.content, "entry_id": e.entry_id, "matched_principal_sets": []}))
                .collect();
            json!({"@datatype": "GMetaResult", "@version": "2019-08-27", "subject": s, "entries": entries})
        })
        .collect();
    let mut out = json!({"@datatype": "GSearchResult", "@version": "2017-09-01", "count": page.len(), "offset": q.offset, "total": total,
                         "has_next_page": q.offset + page.len() < total, "gmeta": page});
    if !q.facets.is_empty() {
        out["facet_results"] = Value::Array(facet_results);
    }
    json_response(200, &out)
}

/// Answer a scroll of `index`: subjects after `marker`, in subject order, whose entries match
/// `q` and `filters`.
fn scroll(shared: &Shared, index: &str, q: &Value, grant: &Grant) -> Resp {
    let Some(o) = q.as_object() else { return bad_query("a scroll request is a JSON object".into()) };
    if let Some(k) = o.keys().find(|k| {
        !matches!(
            k.as_str(),
            "q" | "advanced" | "filters" | "limit" | "marker" | "bypass_visible_to" | "@datatype" | "@version"
        )
    }) {
        return bad_query(format!("unknown scroll field `{k}`"));
    }
    let matching = json!({"q": o.get("q").cloned().unwrap_or(Value::Null), "advanced": o.get("advanced").cloned().unwrap_or(Value::Bool(false)), "filters": o.get("filters").cloned().unwrap_or(Value::Null)});
    let query = match Query::from_json(&matching, true) {
        Ok(query) => query,
        Err(m) => return bad_query(m),
    };
    let limit = match q.get("limit") {
        None | Some(Value::Null) => 10,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_SCROLL_LIMIT).contains(&n) => n,
            _ => {
                return error(
                    400,
                    "BadRequest.ValidationError",
                    format!("`limit` must be 1..{MAX_SCROLL_LIMIT}"),
                    Value::Null,
                )
            }
        },
    } as usize;
    let after = match q.get("marker") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => match unhex(m) {
            Some(s) => Some(s),
            None => return error(400, "BadRequest.ValidationError", "invalid `marker`", Value::Null),
        },
        Some(_) => return error(400, "BadRequest.ValidationError", "invalid `marker`", Value::Null),
    };
    let bypass = truthy(q.get("bypass_visible_to"));
    if bypass && grant.anonymous {
        return no_bypass();
    }
    let st = shared.lock();
    let Some(ix) = st.indexes.get(index) else { return no_index(index) };
    let visible = |(s, es): (&String, &Vec<Entry>)| {
        let matched: Vec<Entry> = es.iter().filter(|e| query.matches(e, &query.filters)).cloned().collect();
        gmeta_result(s, &matched, grant, bypass).map(|v| (s.clone(), v))
    };
    let total = ix.iter().filter_map(visible).count();
    let range = match &after {
        Some(a) => ix.range::<String, _>((std::ops::Bound::Excluded(a.clone()), std::ops::Bound::Unbounded)),
        None => ix.range::<String, _>(..),
    };
    let mut page: Vec<(String, Value)> = range.filter_map(visible).take(limit + 1).collect();
    let has_next = page.len() > limit;
    page.truncate(limit);
    let marker =
        if has_next { page.last().map(|(s, _)| Value::String(hex(s))).unwrap_or(Value::Null) } else { Value::Null };
    json_response(
        200,
        &json!({"@datatype": "GSearchResult", "@version": "2017-09-01", "count": page.len(), "offset": 0, "total": total,
                "has_next_page": has_next, "marker": marker, "gmeta": page.into_iter().map(|(_, v)| v).collect::<Vec<_>>()}),
    )
}

/// The 403 of a token whose scope does not allow searching.
fn cannot_search() -> Resp {
    error(403, "Forbidden.Generic", "the token's scope does not allow searching", Value::Null)
}

/// `GET /v1/index/<id>/search`: a search given by query parameters.
pub(super) fn search_get(shared: &Shared, req: &Request<Incoming>, index: &str, grant: &Grant) -> Resp {
    if !allows(grant, false) {
        return cannot_search();
    }
    let params = req.uri().query().map(parse_form).unwrap_or_default();
    match Query::from_params(&params) {
        Ok(q) => search(shared, index, &q, grant),
        Err(m) => bad_query(m),
    }
}

/// `POST /v1/index/<id>/search`: a search given by a GSearchRequest.
pub(super) async fn search_post(shared: &Shared, req: Request<Incoming>, index: &str, grant: &Grant) -> Resp {
    if !allows(grant, false) {
        return cannot_search();
    }
    let doc = match json_body(req).await {
        Ok(d) => d,
        Err(r) => return *r,
    };
    match Query::from_json(&doc, false) {
        Ok(q) => search(shared, index, &q, grant),
        Err(m) => bad_query(m),
    }
}

/// `GET /v1/index/<id>/subject?subject=...`: the subject's entries the caller may see.
pub(super) fn subject(shared: &Shared, req: &Request<Incoming>, index: &str, grant: &Grant) -> Resp {
    if !allows(grant, false) {
        return cannot_search();
    }
    let Some(subject) = query_param(req, "subject") else {
        return error(400, "BadRequest.ValidationError", "the `subject` query parameter is required", Value::Null);
    };
    let bypass = query_param(req, "bypass_visible_to").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if bypass && grant.anonymous {
        return no_bypass();
    }
    let st = shared.lock();
    let Some(ix) = st.indexes.get(index) else { return no_index(index) };
    match ix.get(&subject).and_then(|es| gmeta_result(&subject, es, grant, bypass)) {
        Some(v) => json_response(200, &v),
        None => error(
            404,
            "NotFound.Generic",
            format!("No subject named \"{subject}\" is visible in index {index}"),
            Value::Null,
        ),
    }
}

/// `GET /v1/index/<id>/entry?subject=...[&entry_id=...]`: one entry the caller may see.
pub(super) fn entry(shared: &Shared, req: &Request<Incoming>, index: &str, grant: &Grant) -> Resp {
    if !allows(grant, false) {
        return cannot_search();
    }
    let Some(subject) = query_param(req, "subject") else {
        return error(400, "BadRequest.ValidationError", "the `subject` query parameter is required", Value::Null);
    };
    let entry_id = query_param(req, "entry_id").filter(|id| !id.is_empty());
    let bypass = query_param(req, "bypass_visible_to").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if bypass && grant.anonymous {
        return no_bypass();
    }
    let st = shared.lock();
    let Some(ix) = st.indexes.get(index) else { return no_index(index) };
    let one: Vec<Entry> = ix.get(&subject).into_iter().flatten().filter(|e| e.entry_id == entry_id).cloned().collect();
    match gmeta_result(&subject, &one, grant, bypass) {
        Some(v) => json_response(200, &v),
        None => error(
            404,
            "NotFound.Generic",
            format!("No entry {entry_id:?} of subject \"{subject}\" is visible in index {index}"),
            Value::Null,
        ),
    }
}

/// `POST /v1/index/<id>/scroll`: one page of the subjects the caller may see.
pub(super) async fn scroll_request(shared: &Shared, req: Request<Incoming>, index: &str, grant: &Grant) -> Resp {
    if !allows(grant, false) {
        return cannot_search();
    }
    let q = match json_body(req).await {
        Ok(d) => d,
        Err(r) => return *r,
    };
    scroll(shared, index, &q, grant)
}

/// `GET /v1/task/<id>`: the Task.
pub(super) fn task(shared: &Shared, task_id: &str) -> Resp {
    let st = shared.lock();
    match st.tasks.get(task_id) {
        Some(t) => json_response(200, &t.to_json()),
        None => error(404, "NotFound.Generic", format!("There is no task with id {task_id}"), Value::Null),
    }
}

/// `GET /v1/task_list/<index>`: the index's tasks in the order received.
pub(super) fn task_list(shared: &Shared, index: &str) -> Resp {
    let st = shared.lock();
    if !st.indexes.contains_key(index) {
        return no_index(index);
    }
    let tasks: Vec<Value> =
        st.order.iter().filter_map(|id| st.tasks.get(id)).filter(|t| t.index_id == index).map(Task::to_json).collect();
    json_response(200, &json!({"tasks": tasks}))
}
