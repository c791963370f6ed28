//! Writes: a GIngest document (<https://docs.globus.org/api/search/reference/ingest/>), a
//! subject list (<https://docs.globus.org/api/search/reference/batch_delete_by_subject/>), a
//! query whose matches are deleted
//! (<https://docs.globus.org/api/search/reference/delete_by_query/>), or one subject or entry
//! (`DELETE .../subject`, `DELETE .../entry`). A write is checked whole first ([`Write`]), then
//! applied through the index's one writer and committed ([`Service::apply`]): a failed commit
//! leaves nothing half-applied. `icicle serve` does both before it answers; the testkit's
//! emulator checks at once and applies later, in the order received.

use std::collections::HashMap;

use serde_json::{json, Value};
use tantivy::query::Query;

use super::request::delete_query;
use super::{ApiError, Service};
use crate::schema::{document, Parsed};

/// Search's limit on a subject's length.
pub const MAX_SUBJECT_BYTES: usize = 500;
/// Search's limit on `visible_to` principals.
pub const MAX_VISIBLE_TO: usize = 100;

/// What a write request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// `POST .../ingest`.
    Ingest,
    /// `POST .../batch_delete_by_subject`.
    DeleteBySubject,
    /// `POST .../delete_by_query`.
    DeleteByQuery,
    /// `DELETE .../subject?subject=`.
    DeleteSubject,
    /// `DELETE .../entry?subject=[&entry_id=]`.
    DeleteEntry,
}

impl WriteKind {
    /// The write that `method` on `/v1/index/<id>/<what>` asks, if it is one.
    pub fn route(method: &str, what: &str) -> Option<WriteKind> {
        match (method, what) {
            ("POST", "ingest") => Some(WriteKind::Ingest),
            ("POST", "batch_delete_by_subject") => Some(WriteKind::DeleteBySubject),
            ("POST", "delete_by_query") => Some(WriteKind::DeleteByQuery),
            ("DELETE", "subject") => Some(WriteKind::DeleteSubject),
            ("DELETE", "entry") => Some(WriteKind::DeleteEntry),
            _ => None,
        }
    }

    /// Whether its request carries a JSON body (the `DELETE`s name their subject in the URL).
    pub fn has_body(self) -> bool {
        !matches!(self, WriteKind::DeleteSubject | WriteKind::DeleteEntry)
    }

    /// The task type Search reports for it.
    pub fn task_type(self) -> &'static str {
        match self {
            WriteKind::Ingest => "INGEST",
            WriteKind::DeleteBySubject | WriteKind::DeleteSubject => "DELETE_BY_SUBJECT",
            WriteKind::DeleteByQuery => "DELETE_BY_QUERY",
            WriteKind::DeleteEntry => "DELETE_ENTRY",
        }
    }

    /// The answer to the request, naming its task (`n`: the entries of an ingest).
    pub fn answer(self, task_id: &str, n: usize) -> Value {
        match self {
            WriteKind::Ingest => {
                json!({"acknowledged": true, "task_id": task_id, "success": true, "num_documents_ingested": n})
            }
            _ => json!({"task_id": task_id}),
        }
    }
}

/// What a checked write does to the index.
enum Op {
    Upsert(Vec<Parsed>),
    Delete(Vec<String>),
    Query(Box<dyn Query>),
    /// An entry the index cannot hold (an entry id other than null): nothing to delete.
    Nothing,
}

/// A write request checked whole against the index's rules, not yet applied.
pub struct Write {
    kind: WriteKind,
    op: Op,
}

impl Write {
    /// What the request asked.
    pub fn kind(&self) -> WriteKind {
        self.kind
    }

    /// The entries of an ingest, or the subjects a delete names (none for a query).
    pub fn len(&self) -> usize {
        match &self.op {
            Op::Upsert(docs) => docs.len(),
            Op::Delete(s) => s.len(),
            Op::Query(_) | Op::Nothing => 0,
        }
    }

    /// Whether it names no entry or subject.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The subjects of an ingest's entries, or those a delete names.
    pub fn subjects(&self) -> Vec<&str> {
        match &self.op {
            Op::Upsert(docs) => docs.iter().map(|p| p.subject.as_str()).collect(),
            Op::Delete(s) => s.iter().map(String::as_str).collect(),
            Op::Query(_) | Op::Nothing => Vec::new(),
        }
    }
}

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
        Some("") | None => return bad("`subject` must be a non-empty string".into()),
        Some(sub) if sub.len() > MAX_SUBJECT_BYTES => {
            return bad(format!("`subject` is {} bytes, over the {MAX_SUBJECT_BYTES}-byte limit", sub.len()))
        }
        Some(_) => {}
    }
    let Some(vis) = o.get("visible_to").and_then(Value::as_array).filter(|v| !v.is_empty()) else {
        return bad("`visible_to` must be a non-empty list of principals".into());
    };
    if vis.len() > MAX_VISIBLE_TO {
        return bad(format!("`visible_to` has {} principals, over the limit of {MAX_VISIBLE_TO}", vis.len()));
    }
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
    /// Check a write request whole: `body` is its JSON document (`Value::Null` for the
    /// `DELETE`s), `params` its query parameters. Nothing is applied.
    pub fn check_write(
        &self,
        kind: WriteKind,
        body: &Value,
        params: &HashMap<String, String>,
    ) -> Result<Write, ApiError> {
        let subject = || {
            params
                .get("subject")
                .cloned()
                .ok_or_else(|| ApiError::bad("the `subject` query parameter is required".into()))
        };
        let op = match kind {
            WriteKind::Ingest => Op::Upsert(gingest(self, body)?),
            WriteKind::DeleteBySubject => {
                let subjects: Option<Vec<String>> = body
                    .get("subjects")
                    .and_then(Value::as_array)
                    .and_then(|a| a.iter().map(|s| s.as_str().map(str::to_string)).collect());
                Op::Delete(subjects.ok_or_else(|| ApiError::bad("`subjects` must be a list of strings".into()))?)
            }
            WriteKind::DeleteByQuery => Op::Query(delete_query(&self.fields, body).map_err(ApiError::bad)?),
            WriteKind::DeleteSubject => Op::Delete(vec![subject()?]),
            WriteKind::DeleteEntry => {
                let s = subject()?;
                // Every entry here has a null id: one named otherwise is not there.
                match params.get("entry_id").filter(|id| !id.is_empty()) {
                    Some(_) => Op::Nothing,
                    None => Op::Delete(vec![s]),
                }
            }
        };
        Ok(Write { kind, op })
    }

    /// Apply a checked write and commit it (durable once this returns `Ok`).
    pub fn apply(&self, write: Write) -> Result<(), ApiError> {
        let failed = |e: &dyn std::fmt::Display| {
            ApiError::new(500, "InternalError", format!("the index could not be written (nothing was applied): {e}"))
        };
        let kind = write.kind;
        let n = write.len();
        let mut w = self.writer.lock().map_err(|_| super::poisoned())?;
        // Under the writer's lock, the last commit (another write's may not be loaded yet): an
        // upsert must see every subject the index holds, or it leaves an old document beside it.
        self.reader.reload().map_err(|e| failed(&e))?;
        let committed = self.reader.searcher();
        let mut upserts = crate::upsert::Upserts::default();
        let applied: Result<(), tantivy::TantivyError> = (|| {
            match write.op {
                Op::Upsert(docs) => {
                    for p in docs {
                        upserts.upsert(&w, &committed, self.fields.subject, p)?;
                    }
                }
                Op::Delete(subjects) => {
                    for s in subjects {
                        upserts.delete(&w, self.fields.subject, &s);
                    }
                }
                Op::Query(q) => {
                    w.delete_query(q)?;
                }
                Op::Nothing => return Ok(()),
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
        tracing::debug!(task_type = kind.task_type(), n, "icicle serve committed a write");
        Ok(())
    }
}
