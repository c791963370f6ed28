//! Writes: a GIngest document (<https://docs.globus.org/api/search/reference/ingest/>) or a
//! subject list (<https://docs.globus.org/api/search/reference/batch_delete_by_subject/>)
//! checked whole, applied through the index's one writer and committed before the answer: the
//! task it names is `SUCCESS` (a failed commit answers 500 and leaves nothing half-applied).

use serde_json::{json, Value};

use super::{ApiError, Service};
use crate::schema::{document, Parsed};

/// Search's limit on a subject's length.
const MAX_SUBJECT_BYTES: usize = 500;
/// Search's limit on `visible_to` principals.
const MAX_VISIBLE_TO: usize = 100;

/// One GMetaEntry checked as Search checks it, as a document of the index.
fn entry(s: &Service, v: &Value, at: &str) -> Result<Parsed, ApiError> {
    let bad = |m: String| Err(ApiError::bad(format!("{at}: {m}")));
    let Some(o) = v.as_object() else { return bad("a GMetaEntry must be an object".into()) };
    if let Some(k) =
        o.keys().find(|k| !matches!(k.as_str(), "subject" | "visible_to" | "content" | "id" | "@datatype" | "@version"))
    {
        return bad(format!("unknown GMetaEntry field `{k}`"));
    }
    match o.get("subject").and_then(Value::as_str) {
        Some(sub) if !sub.is_empty() && sub.len() <= MAX_SUBJECT_BYTES => {}
        _ => return bad(format!("`subject` must be a string of 1 to {MAX_SUBJECT_BYTES} bytes")),
    }
    let Some(vis) =
        o.get("visible_to").and_then(Value::as_array).filter(|v| !v.is_empty() && v.len() <= MAX_VISIBLE_TO)
    else {
        return bad(format!("`visible_to` must be a list of 1 to {MAX_VISIBLE_TO} principals"));
    };
    if let Some(p) = vis.iter().find(|p| !p.as_str().is_some_and(|p| p == "public" || p.starts_with("urn:"))) {
        return bad(format!("`visible_to` entries are \"public\" or principal URNs, not {p}"));
    }
    if !o.get("content").is_some_and(Value::is_object) {
        return bad("`content` must be an object".into());
    }
    if o.get("id").is_some_and(|id| !id.is_null()) {
        return bad("icicle serve keeps one entry a subject: `id` must be null or absent".into());
    }
    let bytes = serde_json::to_vec(v).map_err(|e| ApiError::bad(format!("{at}: {e}")))?;
    document(&s.fields, &bytes).map_err(|m| ApiError::bad(format!("{at}: {m}")))
}

/// The entries of a GIngest document.
fn gingest(s: &Service, doc: &Value) -> Result<Vec<Parsed>, ApiError> {
    let bad = |m: &str| Err(ApiError::bad(m.to_string()));
    let Some(o) = doc.as_object() else { return bad("a GIngest document must be an object") };
    if o.get("@datatype").is_some_and(|d| d != "GIngest") {
        return bad("`@datatype` of an ingest document must be \"GIngest\"");
    }
    let Some(data) = o.get("ingest_data") else { return bad("`ingest_data` is required") };
    match o.get("ingest_type").and_then(Value::as_str) {
        Some("GMetaEntry") => Ok(vec![entry(s, data, "ingest_data")?]),
        Some("GMetaList") => {
            if data.get("@datatype").is_some_and(|d| d != "GMetaList") {
                return bad("`ingest_data.@datatype` must be \"GMetaList\"");
            }
            let Some(list) = data.get("gmeta").and_then(Value::as_array) else {
                return bad("`ingest_data.gmeta` must be a list of GMetaEntry");
            };
            list.iter().enumerate().map(|(i, e)| entry(s, e, &format!("ingest_data.gmeta[{i}]"))).collect()
        }
        _ => bad("`ingest_type` must be \"GMetaEntry\" or \"GMetaList\""),
    }
}

impl Service {
    /// Apply an `ingest` or a `batch_delete_by_subject` and commit it; the answer names its task.
    pub(super) fn write(&self, what: &str, body: &Value) -> Result<Value, ApiError> {
        enum Op {
            Ingest(Vec<Parsed>),
            Delete(Vec<String>),
        }
        let op = if what == "ingest" {
            Op::Ingest(gingest(self, body)?)
        } else {
            let subjects: Option<Vec<String>> = body
                .get("subjects")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().map(|s| s.as_str().map(str::to_string)).collect());
            Op::Delete(subjects.ok_or_else(|| ApiError::bad("`subjects` must be a list of strings".into()))?)
        };
        let failed = |e: &dyn std::fmt::Display| {
            ApiError::new(500, "InternalError", format!("the index could not be written (nothing was applied): {e}"))
        };
        let mut w = self.writer.lock().map_err(|_| super::poisoned())?;
        let n = match &op {
            Op::Ingest(docs) => docs.len(),
            Op::Delete(subjects) => subjects.len(),
        };
        // Under the writer's lock, the last commit (another write's may not be loaded yet): an
        // upsert must see every subject the index holds, or it leaves an old document beside it.
        self.reader.reload().map_err(|e| failed(&e))?;
        let committed = self.reader.searcher();
        let mut upserts = crate::upsert::Upserts::default();
        let applied: Result<(), tantivy::TantivyError> = (|| {
            match op {
                Op::Ingest(docs) => {
                    for p in docs {
                        upserts.upsert(&w, &committed, self.fields.subject, p)?;
                    }
                }
                Op::Delete(subjects) => {
                    for s in subjects {
                        upserts.delete(&w, self.fields.subject, &s);
                    }
                }
            }
            w.commit()?;
            Ok(())
        })();
        if let Err(e) = applied {
            let _ = w.rollback();
            return Err(failed(&e));
        }
        drop(w);
        // Committed: durable whatever follows; a reader that cannot reload shows it later.
        if let Err(e) = self.reader.reload() {
            tracing::warn!(error = %e, "icicle serve: the reader did not reload after a commit");
        }
        tracing::debug!(what, n, "icicle serve committed a write");
        if what == "ingest" {
            let task_id = self.task("INGEST", "SUCCESS", None)?;
            Ok(json!({"acknowledged": true, "task_id": task_id, "success": true, "num_documents_ingested": n}))
        } else {
            let task_id = self.task("DELETE_BY_SUBJECT", "SUCCESS", None)?;
            Ok(json!({"task_id": task_id}))
        }
    }
}
