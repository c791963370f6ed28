//! Tasks: what a write request asks of its index, how Search reports it, and applying it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::config::{MAX_ENTRIES_PER_SUBJECT, MAX_FIELDS_PER_INDEX};
use super::entry::{Entry, NewEntry};
use super::query::Query;

/// What a task does to its index.
#[derive(Debug, Clone)]
pub(super) enum Op {
    /// Add or replace entries.
    Ingest(Vec<NewEntry>),
    /// Delete every entry of these subjects.
    Delete(Vec<String>),
    /// Delete one entry: (subject, entry id).
    DeleteEntry(String, Option<String>),
    /// Delete every entry matching `q` and `filters`, whoever may see it.
    DeleteByQuery(Box<Query>),
}

/// A write request's task, as `GET /v1/task/<id>` shows it.
#[derive(Debug, Clone)]
pub(super) struct Task {
    /// Its id (a UUID).
    pub(super) task_id: String,
    /// The index it writes to.
    pub(super) index_id: String,
    /// PENDING, PROGRESS, SUCCESS or FAILED.
    pub(super) state: &'static str,
    /// Why it failed.
    pub(super) message: Option<String>,
    /// When it was received.
    pub(super) creation_date: String,
    /// When it finished.
    pub(super) completion_date: Option<String>,
    /// The operation, taken when it is applied.
    pub(super) op: Option<Op>,
    /// End FAILED without applying anything (an injected failure).
    pub(super) fail: bool,
    /// What kind of write it is, as Search names it (`INGEST`, `DELETE_BY_SUBJECT`, ...).
    pub(super) task_type: &'static str,
}

impl Op {
    /// The task type Search reports for this operation.
    pub(super) fn task_type(&self) -> &'static str {
        match self {
            Op::Ingest(_) => "INGEST",
            Op::Delete(_) => "DELETE_BY_SUBJECT",
            Op::DeleteEntry(..) => "DELETE_ENTRY",
            Op::DeleteByQuery(_) => "DELETE_BY_QUERY",
        }
    }
}

impl Task {
    /// The Task document.
    pub(super) fn to_json(&self) -> Value {
        let desc = match self.state {
            "PENDING" => "Task pending",
            "PROGRESS" => "Task in progress",
            "SUCCESS" => "Task succeeded",
            _ => "Task failed",
        };
        json!({
            "task_id": self.task_id, "task_type": self.task_type, "state": self.state, "state_description": desc, "index_id": self.index_id,
            "message": self.message, "creation_date": self.creation_date, "completion_date": self.completion_date,
            "additional_details": null,
        })
    }
}

/// `YYYY-MM-DDTHH:MM:SS.ffffff`, as Search writes task dates.
pub(super) fn now_date() -> String {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (y, m, day) = icicle_core::time::civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!("{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:06}", s / 3600, s / 60 % 60, s % 60, d.subsec_micros())
}

/// Apply a task's operation to its index; `Err` is why the task fails.
pub(super) fn apply(
    index: &mut BTreeMap<String, Vec<Entry>>,
    fields: &mut BTreeSet<String>,
    op: &Op,
) -> Result<(), String> {
    match op {
        Op::Ingest(entries) => {
            let new: BTreeSet<&String> =
                entries.iter().flat_map(|e| &e.fields).filter(|f| !fields.contains(*f)).collect();
            if fields.len() + new.len() > MAX_FIELDS_PER_INDEX {
                return Err(format!(
                    "Limit of total fields [{MAX_FIELDS_PER_INDEX}] has been exceeded: the index has {} fields and the task adds {}",
                    fields.len(),
                    new.len()
                ));
            }
            // Check the entries-per-subject limit before changing anything.
            let mut after: HashMap<&str, Vec<Option<&str>>> = HashMap::new();
            for e in entries {
                let ids = after.entry(&e.subject).or_insert_with(|| {
                    index.get(&e.subject).map(|v| v.iter().map(|x| x.entry_id.as_deref()).collect()).unwrap_or_default()
                });
                if !ids.contains(&e.entry.entry_id.as_deref()) {
                    ids.push(e.entry.entry_id.as_deref());
                }
                if ids.len() > MAX_ENTRIES_PER_SUBJECT {
                    return Err(format!(
                        "subject `{}` would have more than {MAX_ENTRIES_PER_SUBJECT} entries",
                        e.subject
                    ));
                }
            }
            let new: Vec<String> = new.into_iter().cloned().collect();
            fields.extend(new);
            for e in entries {
                let slot = index.entry(e.subject.clone()).or_default();
                match slot.iter_mut().find(|x| x.entry_id == e.entry.entry_id) {
                    Some(x) => *x = e.entry.clone(),
                    None => slot.push(e.entry.clone()),
                }
            }
        }
        Op::Delete(subjects) => {
            for s in subjects {
                index.remove(s);
            }
        }
        Op::DeleteEntry(subject, id) => {
            if let Some(es) = index.get_mut(subject) {
                es.retain(|e| e.entry_id != *id);
                if es.is_empty() {
                    index.remove(subject);
                }
            }
        }
        Op::DeleteByQuery(q) => {
            index.retain(|_, es| {
                es.retain(|e| !q.matches(e, &q.filters));
                !es.is_empty()
            });
        }
    }
    Ok(())
}
