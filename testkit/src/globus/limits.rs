//! The limits of Globus's cloud service that `icicle serve` does not have, checked over an
//! ingest document the product has already accepted: string values within 32 KB, keys nested
//! at most 20 deep, entries within 10 MB as compact JSON, at most 1000 fields a request (and,
//! when the task is applied, a thousand an index ever held, like an Elasticsearch mapping).
//! Also what the trial quota counts: each entry's content bytes.

use std::collections::BTreeSet;

use serde_json::Value;

use super::config::{MAX_ENTRY_BYTES, MAX_FIELDS_PER_INDEX, MAX_FIELD_BYTES, MAX_FIELD_DEPTH};

/// What an accepted ingest brings to its index.
#[derive(Debug, Default)]
pub(super) struct Content {
    /// Each entry's subject and content bytes (compact JSON of `content`).
    pub(super) sizes: Vec<(String, u64)>,
    /// The dotted key paths of every entry's content.
    pub(super) fields: BTreeSet<String>,
}

/// The GMetaEntry documents of a GIngest document (its shape already checked).
fn entries(doc: &Value) -> Vec<&Value> {
    let data = &doc["ingest_data"];
    match data.get("gmeta").and_then(Value::as_array) {
        Some(list) if doc["ingest_type"] == "GMetaList" => list.iter().collect(),
        _ => vec![data],
    }
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

/// Check the cloud's limits over an accepted GIngest document; what it brings, or why it is
/// refused (a 400 `BadRequest.ValidationError`).
pub(super) fn check(doc: &Value) -> Result<Content, String> {
    let mut out = Content::default();
    for (i, e) in entries(doc).into_iter().enumerate() {
        let at = format!("entry {i}");
        let mut fields = BTreeSet::new();
        content_fields(&e["content"], "", 1, &mut fields).map_err(|m| format!("{at}: {m}"))?;
        if fields.len() > MAX_FIELDS_PER_INDEX {
            return Err(format!(
                "{at}: the entry has {} fields, over the limit of {MAX_FIELDS_PER_INDEX} per index",
                fields.len()
            ));
        }
        let size = serde_json::to_vec(e).map_or(usize::MAX, |b| b.len());
        if size > MAX_ENTRY_BYTES {
            return Err(format!("{at}: the entry is {size} bytes as JSON, over the {MAX_ENTRY_BYTES}-byte limit"));
        }
        let subject = e["subject"].as_str().unwrap_or_default().to_string();
        out.sizes.push((subject, content_bytes(&e["content"])));
        out.fields.extend(fields);
    }
    if out.fields.len() > MAX_FIELDS_PER_INDEX {
        return Err(format!(
            "the request has {} distinct fields, over the limit of {MAX_FIELDS_PER_INDEX} per index",
            out.fields.len()
        ));
    }
    Ok(out)
}

/// Bytes of one entry's content as the quota counts them (compact JSON).
pub(super) fn content_bytes(content: &Value) -> u64 {
    serde_json::to_vec(content).map_or(0, |v| v.len() as u64)
}

/// Why a task adding `new` fields to an index holding `held` fails, if it does.
pub(super) fn over_fields(held: &BTreeSet<String>, new: &BTreeSet<String>) -> Option<String> {
    let added = new.difference(held).count();
    (held.len() + added > MAX_FIELDS_PER_INDEX).then(|| {
        format!(
            "Limit of total fields [{MAX_FIELDS_PER_INDEX}] has been exceeded: the index has {} fields and the task adds {added}",
            held.len()
        )
    })
}
