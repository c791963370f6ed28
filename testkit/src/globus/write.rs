//! Write requests: ingest and the deletes, each validated and answered with a task id.

use std::collections::HashMap;

use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::{Method, Request};
use serde_json::{json, Value};

use super::admin::index_bytes;
use super::auth::allows;
use super::entry::{gingest, NewEntry};
use super::http::{bad_query, body, error, is_json, json_response, no_index, query_param, Resp};
use super::query::Query;
use super::state::{enqueue, Grant, Shared};
use super::task::Op;

/// The 413 of an ingest that would take its index past its size (1 MB for a trial index): the
/// index as it will be once its queued ingests and this one are applied (an entry that replaces
/// one counts once; deletes still queued are not counted).
fn over_quota(shared: &Shared, index: &str, entries: &[NewEntry]) -> Option<Resp> {
    let st = shared.lock();
    let (meta, ix) = (st.meta.get(index)?, st.indexes.get(index)?);
    let size = |e: &super::entry::Entry| serde_json::to_vec(&e.content).map_or(0, |v| v.len() as u64);
    let mut replaced: HashMap<(&str, Option<&str>), u64> = HashMap::new();
    let mut held = index_bytes(ix);
    // Tasks not yet applied (waiting or taken), in the order received.
    let queued = st.order.iter().filter_map(|id| st.tasks.get(id)).filter(|t| t.index_id == index);
    let queued = queued.filter_map(|t| match &t.op {
        Some(Op::Ingest(es)) => Some(es.as_slice()),
        _ => None,
    });
    for e in queued.flatten().chain(entries) {
        let key = (e.subject.as_str(), e.entry.entry_id.as_deref());
        let before = *replaced.entry(key).or_insert_with(|| {
            ix.get(&e.subject).and_then(|v| v.iter().find(|x| x.entry_id.as_deref() == key.1)).map_or(0, size)
        });
        held = held - before + size(&e.entry);
        replaced.insert(key, size(&e.entry));
    }
    (held > meta.max_bytes()).then(|| {
        error(
            413,
            "RequestTooLarge.IndexSizeLimit",
            format!(
                "the index would hold {held} bytes and may hold {} ({} MB{})",
                meta.max_bytes(),
                meta.max_bytes() >> 20,
                if meta.trial { ", a trial index" } else { "" }
            ),
            Value::Null,
        )
    })
}

/// A write request (`what`: `ingest`, `batch_delete_by_subject`, `delete_by_query`,
/// `delete_subject` or `delete_entry`): checked, then enqueued as a task.
pub(super) async fn write_request(
    shared: &Shared,
    req: Request<Incoming>,
    index: &str,
    grant: &Grant,
    what: &str,
) -> Resp {
    if !allows(grant, true) {
        return error(403, "Forbidden.Generic", "the token's scope does not allow writing to the index", Value::Null);
    }
    if !shared.lock().indexes.contains_key(index) {
        return no_index(index);
    }
    if let Some(status) = shared.lock().meta.get(index).map(|m| m.status).filter(|s| *s != "open") {
        return error(
            409,
            "Conflict.IncompatibleIndexStatus",
            format!("Index status ({status}) did not match required status for this operation: open"),
            Value::Null,
        );
    }
    let subject_param = query_param(&req, "subject");
    let entry_id_param = query_param(&req, "entry_id").filter(|id| !id.is_empty());
    let json_ct = is_json(req.headers().get(CONTENT_TYPE));
    let is_post = req.method() == Method::POST;
    let bytes = match body(req).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    {
        let mut st = shared.lock();
        st.counters.writes += 1;
        if shared.opts.fail_every.is_some_and(|k| k > 0 && st.counters.writes.is_multiple_of(k)) {
            st.counters.injected_failures += 1;
            return error(503, "ServiceUnavailable", "injected transient failure (--fail-every)", Value::Null);
        }
    }
    if is_post && !json_ct {
        return error(
            415,
            "BadRequest.UnsupportedMediaType",
            "Content-Type: application/json is required",
            Value::Null,
        );
    }
    let parse = || {
        serde_json::from_slice::<Value>(&bytes).map_err(|e| {
            Box::new(error(400, "BadRequest.InvalidJSON", format!("the body is not JSON: {e}"), Value::Null))
        })
    };
    match what {
        "ingest" => {
            let doc = match parse() {
                Ok(d) => d,
                Err(r) => return *r,
            };
            let entries = match gingest(&doc) {
                Ok(e) => e,
                Err(r) => return *r,
            };
            if let Some(e) =
                entries.iter().find(|e| shared.opts.refuse_subjects.iter().any(|s| e.subject.contains(s.as_str())))
            {
                return error(
                    400,
                    "BadRequest.ValidationError",
                    format!("injected refusal of subject {}", e.subject),
                    Value::Null,
                );
            }
            if let Some(r) = over_quota(shared, index, &entries) {
                return r;
            }
            let n = entries.len();
            let task_id = enqueue(shared, index, Op::Ingest(entries));
            json_response(
                200,
                &json!({"acknowledged": true, "task_id": task_id, "success": true, "num_documents_ingested": n}),
            )
        }
        "batch_delete_by_subject" => {
            let doc = match parse() {
                Ok(d) => d,
                Err(r) => return *r,
            };
            let subjects: Option<Vec<String>> = doc
                .get("subjects")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().map(|s| s.as_str().map(str::to_string)).collect());
            let Some(subjects) = subjects else {
                return error(400, "BadRequest.ValidationError", "`subjects` must be a list of strings", Value::Null);
            };
            let task_id = enqueue(shared, index, Op::Delete(subjects));
            json_response(200, &json!({"task_id": task_id}))
        }
        "delete_by_query" => {
            let doc = match parse() {
                Ok(d) => d,
                Err(r) => return *r,
            };
            let q = match Query::from_json(&doc, true) {
                Ok(q) => q,
                Err(m) => return bad_query(m),
            };
            let task_id = enqueue(shared, index, Op::DeleteByQuery(Box::new(q)));
            json_response(200, &json!({"task_id": task_id}))
        }
        _ => {
            let Some(subject) = subject_param else {
                return error(
                    400,
                    "BadRequest.ValidationError",
                    "the `subject` query parameter is required",
                    Value::Null,
                );
            };
            let op = if what == "delete_entry" {
                Op::DeleteEntry(subject, entry_id_param)
            } else {
                Op::Delete(vec![subject])
            };
            let task_id = enqueue(shared, index, op);
            json_response(200, &json!({"task_id": task_id}))
        }
    }
}
