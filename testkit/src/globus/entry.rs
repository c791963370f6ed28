//! The stored entries of an index, and the validation of GIngest documents into them
//! against the documented limits.

use std::collections::{BTreeSet, HashMap};

use serde_json::{json, Value};

use super::config::{
    MAX_ENTRIES_PER_SUBJECT, MAX_ENTRY_BYTES, MAX_FIELDS_PER_INDEX, MAX_FIELD_BYTES, MAX_FIELD_DEPTH,
    MAX_SUBJECT_BYTES, MAX_VISIBLE_TO,
};
use super::http::{error, Refusal};

/// One stored entry.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    /// Its id under the subject (`None`: the default entry).
    pub(super) entry_id: Option<String>,
    /// Who may see it: `public` or principal URNs.
    pub(super) visible_to: Vec<String>,
    /// The JSON object indexed.
    pub(super) content: Value,
}

/// A validated entry of an ingest request.
#[derive(Debug, Clone)]
pub(super) struct NewEntry {
    /// The subject it is stored under.
    pub(super) subject: String,
    /// The entry stored.
    pub(super) entry: Entry,
    /// The dotted key paths of its content.
    pub(super) fields: BTreeSet<String>,
}

/// Validate one GMetaEntry of an ingest document.
fn entry(v: &Value, at: &str) -> Result<NewEntry, Refusal> {
    let bad = |m: String| Err(Box::new(error(400, "BadRequest.ValidationError", m, json!({"location": at}))));
    let Some(o) = v.as_object() else { return bad(format!("{at}: a GMetaEntry must be an object")) };
    for k in o.keys() {
        if !matches!(k.as_str(), "subject" | "visible_to" | "content" | "id" | "@datatype" | "@version") {
            return bad(format!("{at}: unknown GMetaEntry field `{k}`"));
        }
    }
    let Some(subject) = o.get("subject").and_then(Value::as_str) else {
        return bad(format!("{at}: `subject` must be a string"));
    };
    if subject.is_empty() {
        return bad(format!("{at}: `subject` must not be empty"));
    }
    if subject.len() > MAX_SUBJECT_BYTES {
        return bad(format!("{at}: subject is {} bytes, over the {MAX_SUBJECT_BYTES}-byte limit", subject.len()));
    }
    let Some(vis) = o.get("visible_to").and_then(Value::as_array) else {
        return bad(format!("{at}: `visible_to` must be a list"));
    };
    if vis.is_empty() {
        return bad(format!("{at}: `visible_to` must not be empty"));
    }
    if vis.len() > MAX_VISIBLE_TO {
        return bad(format!("{at}: `visible_to` has {} principals, over the limit of {MAX_VISIBLE_TO}", vis.len()));
    }
    let mut visible_to = Vec::with_capacity(vis.len());
    for p in vis {
        match p.as_str() {
            Some(s) if s == "public" || s.starts_with("urn:globus:") => visible_to.push(s.to_string()),
            _ => return bad(format!("{at}: `visible_to` entries are \"public\" or principal URNs, not {p}")),
        }
    }
    let Some(content) = o.get("content").filter(|c| c.is_object()) else {
        return bad(format!("{at}: `content` must be an object"));
    };
    let entry_id = match o.get("id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return bad(format!("{at}: `id` must be a string or null")),
    };
    let mut fields = BTreeSet::new();
    if let Err(m) = content_fields(content, "", 1, &mut fields) {
        return bad(format!("{at}: {m}"));
    }
    if fields.len() > MAX_FIELDS_PER_INDEX {
        return bad(format!(
            "{at}: the entry has {} fields, over the limit of {MAX_FIELDS_PER_INDEX} per index",
            fields.len()
        ));
    }
    let size = serde_json::to_vec(v).map_or(usize::MAX, |b| b.len());
    if size > MAX_ENTRY_BYTES {
        return bad(format!("{at}: the entry is {size} bytes as JSON, over the {MAX_ENTRY_BYTES}-byte limit"));
    }
    Ok(NewEntry {
        subject: subject.to_string(),
        entry: Entry { entry_id, visible_to, content: content.clone() },
        fields,
    })
}

/// Collect the dotted key paths of `v` (lists are transparent), checking depth and string length.
fn content_fields(v: &Value, prefix: &str, depth: usize, out: &mut BTreeSet<String>) -> Result<(), String> {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                if depth > MAX_FIELD_DEPTH {
                    return Err(format!(
                        "field `{path}` is nested {depth} levels deep, over the limit of {MAX_FIELD_DEPTH}"
                    ));
                }
                content_fields(x, &path, depth + 1, out)?;
                out.insert(path);
            }
        }
        Value::Array(a) => {
            for x in a {
                content_fields(x, prefix, depth, out)?;
            }
        }
        Value::String(s) if s.len() > MAX_FIELD_BYTES => {
            return Err(format!("field `{prefix}` is {} bytes long, over the {MAX_FIELD_BYTES}-byte limit", s.len()))
        }
        _ => {}
    }
    Ok(())
}

/// Validate a GIngest document into its entries.
pub(super) fn gingest(doc: &Value) -> Result<Vec<NewEntry>, Refusal> {
    let bad = |m: &str| Err(Box::new(error(400, "BadRequest.ValidationError", m, Value::Null)));
    let Some(o) = doc.as_object() else { return bad("a GIngest document must be an object") };
    if let Some(dt) = o.get("@datatype") {
        if dt != "GIngest" {
            return bad("`@datatype` of an ingest document must be \"GIngest\"");
        }
    }
    let Some(data) = o.get("ingest_data") else { return bad("`ingest_data` is required") };
    let entries = match o.get("ingest_type").and_then(Value::as_str) {
        Some("GMetaEntry") => vec![entry(data, "ingest_data")?],
        Some("GMetaList") => {
            if let Some(dt) = data.get("@datatype") {
                if dt != "GMetaList" {
                    return bad("`ingest_data.@datatype` must be \"GMetaList\"");
                }
            }
            let Some(list) = data.get("gmeta").and_then(Value::as_array) else {
                return bad("`ingest_data.gmeta` must be a list of GMetaEntry");
            };
            let mut out = Vec::with_capacity(list.len());
            for (i, e) in list.iter().enumerate() {
                out.push(entry(e, &format!("ingest_data.gmeta[{i}]"))?);
            }
            out
        }
        _ => return bad("`ingest_type` must be \"GMetaEntry\" or \"GMetaList\""),
    };
    let mut per_subject: HashMap<&str, Vec<Option<&str>>> = HashMap::new();
    for e in &entries {
        let ids = per_subject.entry(&e.subject).or_default();
        if !ids.contains(&e.entry.entry_id.as_deref()) {
            ids.push(e.entry.entry_id.as_deref());
        }
        if ids.len() > MAX_ENTRIES_PER_SUBJECT {
            return Err(Box::new(error(
                400,
                "BadRequest.ValidationError",
                format!("subject `{}` has more than {MAX_ENTRIES_PER_SUBJECT} entries", e.subject),
                Value::Null,
            )));
        }
    }
    let fields: BTreeSet<&String> = entries.iter().flat_map(|e| &e.fields).collect();
    if fields.len() > MAX_FIELDS_PER_INDEX {
        return bad(&format!(
            "the request has {} distinct fields, over the limit of {MAX_FIELDS_PER_INDEX} per index",
            fields.len()
        ));
    }
    Ok(entries)
}
