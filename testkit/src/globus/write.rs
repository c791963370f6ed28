//! Write requests (ingest and the deletes): what the cloud adds in front of the product's
//! checks — the scope, the index's status, injected 503s and refusals, the cloud's content
//! limits and the trial quota — then the product's [`Service::check_write`], and the write
//! queued as a task that the worker applies later.
//!
//! [`Service::check_write`]: icicle_plugins_index::api::Service::check_write

use std::collections::HashMap;

use hyper::body::Incoming;
use hyper::Request;
use icicle_plugins_index::api::write::{Write, WriteKind};
use serde_json::Value;

use super::auth::allows;
use super::http::{error, error_response, json_body, json_response, no_index, parse_form, Resp};
use super::limits::{self, Content};
use super::state::{enqueue, Grant, Shared};

/// The 413 of an ingest that would take its index past its size (1 MB for a trial index): the
/// index as it will be once its queued ingests and this one are applied (an entry that replaces
/// one counts once; deletes still queued are not counted).
fn over_quota(shared: &Shared, index: &str, content: &Content) -> Option<Resp> {
    let st = shared.lock();
    let ix = st.indexes.get(index)?;
    let mut held = ix.held();
    let mut now: HashMap<&str, u64> = HashMap::new();
    let queued = st.queue.iter().filter(|q| q.index == index).filter_map(|q| q.content.as_ref());
    for (subject, bytes) in queued.chain([content]).flat_map(|c| &c.sizes) {
        let before = *now.entry(subject).or_insert_with(|| ix.sizes.get(subject).copied().unwrap_or(0));
        held = held - before + bytes;
        now.insert(subject, *bytes);
    }
    let max = ix.meta.max_bytes();
    (held > max).then(|| {
        let trial = if ix.meta.trial { ", a trial index" } else { "" };
        error(
            413,
            "RequestTooLarge.IndexSizeLimit",
            format!("the index would hold {held} bytes and may hold {max} ({} MB{trial})", max >> 20),
            Value::Null,
        )
    })
}

/// A write request: checked, then enqueued as a task.
pub(super) async fn write_request(
    shared: &Shared,
    req: Request<Incoming>,
    index: &str,
    grant: &Grant,
    kind: WriteKind,
) -> Resp {
    if !allows(grant, true) {
        return error(403, "Forbidden.Generic", "the token's scope does not allow writing to the index", Value::Null);
    }
    let svc = {
        let st = shared.lock();
        match st.indexes.get(index) {
            None => return no_index(index),
            Some(ix) if ix.meta.status != "open" => {
                return error(
                    409,
                    "Conflict.IncompatibleIndexStatus",
                    format!("Index status ({}) did not match required status for this operation: open", ix.meta.status),
                    Value::Null,
                )
            }
            Some(ix) => ix.svc.clone(),
        }
    };
    let params = req.uri().query().map(parse_form).unwrap_or_default();
    let body = if kind.has_body() { Some(json_body(req).await) } else { None };
    {
        let mut st = shared.lock();
        st.counters.writes += 1;
        if shared.opts.fail_every.is_some_and(|k| k > 0 && st.counters.writes.is_multiple_of(k)) {
            st.counters.injected_failures += 1;
            return error(503, "ServiceUnavailable", "injected transient failure (--fail-every)", Value::Null);
        }
    }
    let body = match body {
        Some(Err(e)) => return error_response(&e),
        Some(Ok(v)) => v,
        None => Value::Null,
    };
    // The product's checks: the shape of each entry, what the index can hold.
    let checked = tokio::task::spawn_blocking(move || {
        let w = svc.check_write(kind, &body, &params);
        (w, body)
    })
    .await;
    let (write, body) = match checked {
        Ok((Ok(w), body)) => (w, body),
        Ok((Err(e), _)) => return error_response(&e),
        Err(e) => return error(500, "InternalError", format!("the request's thread: {e}"), Value::Null),
    };
    let content = match cloud_checks(shared, index, kind, &write, &body) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let n = write.len();
    match enqueue(shared, index, write, content) {
        Ok(task_id) => json_response(200, &kind.answer(&task_id, n)),
        Err(e) => error_response(&e),
    }
}

/// What the cloud refuses of an ingest the product accepts: injected refusals, its content
/// limits and the index's size; an ingest's content otherwise.
fn cloud_checks(
    shared: &Shared,
    index: &str,
    kind: WriteKind,
    write: &Write,
    body: &Value,
) -> Result<Option<Content>, Box<Resp>> {
    if kind != WriteKind::Ingest {
        return Ok(None);
    }
    let refused =
        write.subjects().into_iter().find(|s| shared.opts.refuse_subjects.iter().any(|r| s.contains(r.as_str())));
    if let Some(s) = refused {
        let m = format!("injected refusal of subject {s}");
        return Err(Box::new(error(400, "BadRequest.ValidationError", m, Value::Null)));
    }
    let content =
        limits::check(body).map_err(|m| Box::new(error(400, "BadRequest.ValidationError", m, Value::Null)))?;
    if let Some(r) = over_quota(shared, index, &content) {
        return Err(Box::new(r));
    }
    Ok(Some(content))
}
