//! Publishing with per-record isolation, for ingest and delete documents alike. A document
//! whose task ends FAILED is sent again, up to `task_retries` times; a document that still
//! fails (or an ingest document Search refuses, HTTP 400) is cut in halves and sent again,
//! down to the one entry or subject that causes it. That entry or subject goes to the
//! dead-letter file (written durably before the delivery returns) and the rest is published.
//! More dead letters than `max_dead_letters` in one delivery, or every entry of a document
//! failing on its own, mean something systematic: the delivery fails instead.
//! `max_dead_letters = 0` turns isolation off (a refused document or a task that fails
//! after its retries fails the delivery). A refused delete is never isolated: the delivery
//! fails.

use std::time::Instant;

use icicle_core::batch::{delete_body, EntryBatch};

use super::{entry_batch, GlobusSink};
use crate::error::GlobusError;

/// A failed document cut for isolation.
enum Split {
    /// Its two halves, to send again.
    Halves(Doc, Doc),
    /// Its one item: the subject, and the bytes its dead letter keeps (the entry, or the
    /// `batch_delete_by_subject` body that deletes it).
    One(String, Vec<u8>),
    /// Nothing in it.
    Empty,
}

/// One document of a delivery.
pub(super) enum Doc {
    /// Entries to ingest.
    Ingest(EntryBatch),
    /// Subjects to delete.
    Delete(Vec<String>),
}

impl Doc {
    /// Entries or subjects in it.
    fn len(&self) -> usize {
        match self {
            Doc::Ingest(d) => d.len(),
            Doc::Delete(s) => s.len(),
        }
    }

    /// What one item of it is called in messages.
    fn noun(&self) -> &'static str {
        match self {
            Doc::Ingest(_) => "entry",
            Doc::Delete(_) => "subject",
        }
    }

    /// Its two halves, or its one item.
    fn split(self) -> Split {
        match self {
            Doc::Ingest(d) => {
                let entries: Vec<&[u8]> = d.entries().collect();
                if entries.len() > 1 {
                    let half = entries.len() / 2;
                    return Split::Halves(
                        Doc::Ingest(entry_batch(entries[..half].iter().copied())),
                        Doc::Ingest(entry_batch(entries[half..].iter().copied())),
                    );
                }
                let Some(entry) = entries.first() else { return Split::Empty };
                let subject = serde_json::from_slice::<serde_json::Value>(entry)
                    .ok()
                    .and_then(|v| v["subject"].as_str().map(String::from))
                    .unwrap_or_default();
                Split::One(subject, entry.to_vec())
            }
            Doc::Delete(mut subjects) => {
                if subjects.len() > 1 {
                    let rest = subjects.split_off(subjects.len() / 2);
                    return Split::Halves(Doc::Delete(subjects), Doc::Delete(rest));
                }
                let Some(subject) = subjects.pop() else { return Split::Empty };
                let body = delete_body(std::slice::from_ref(&subject));
                Split::One(subject, body)
            }
        }
    }
}

/// A document still to publish, how many times its task ended FAILED, and which document of
/// the delivery it came from.
type Pending = (Doc, u32, usize);

/// What isolation has found so far in one delivery.
struct Isolation {
    /// Items of each original document, and how many of them failed on their own.
    items: Vec<usize>,
    failed: Vec<usize>,
    letters: u32,
    /// The last failure, for the message when isolation gives up, and whether it was a
    /// FAILED task (the service's trouble) rather than a refusal.
    last: String,
    last_was_task: bool,
}

impl Isolation {
    /// The error that ends isolation: a refusal cannot be helped by a later delivery, a task
    /// that keeps failing may.
    fn give_up(&self, message: String) -> GlobusError {
        if self.last_was_task {
            GlobusError::TasksFailing(message)
        } else {
            GlobusError::Batch(message)
        }
    }
}

impl GlobusSink {
    /// Publish `docs` (all ingest or all delete); returns the task ids of what was published
    /// (accepted, and `SUCCESS` when waiting for tasks). Isolated entries and subjects are
    /// dead-lettered.
    pub(super) async fn publish_isolating(&mut self, docs: Vec<Doc>) -> Result<Vec<String>, GlobusError> {
        let mut iso = Isolation {
            items: docs.iter().map(Doc::len).collect(),
            failed: vec![0; docs.len()],
            letters: 0,
            last: String::new(),
            last_was_task: false,
        };
        let mut pending: Vec<Pending> = docs.into_iter().enumerate().map(|(i, d)| (d, 0, i)).collect();
        let mut published = Vec::new();
        while !pending.is_empty() {
            let mut next = Vec::new();
            let mut submitted = Vec::new();
            for (doc, failures, origin) in pending {
                let at = Instant::now();
                match self.submit_doc(&doc).await {
                    Ok(task) => submitted.push((task, at, doc, failures, origin)),
                    Err(e) if e.is_refusal() && self.max_dead_letters > 0 && matches!(doc, Doc::Ingest(_)) => {
                        self.isolate(doc, origin, &e, &mut next, &mut iso)?
                    }
                    Err(e) => return Err(e),
                }
            }
            for (task, at, doc, failures, origin) in submitted {
                if !self.wait_for_tasks {
                    published.push(task);
                    continue;
                }
                match self.wait_task(&task, at).await {
                    Ok(()) => published.push(task),
                    Err(e @ GlobusError::TaskFailed { .. }) if failures < self.task_retries => {
                        tracing::warn!(sink = %self.id, error = %self.redact(e.to_string()), items = doc.len(), kind = doc.noun(), "Globus task FAILED; sending its document again");
                        next.push((doc, failures + 1, origin));
                    }
                    Err(e @ GlobusError::TaskFailed { .. }) if self.max_dead_letters > 0 => {
                        self.isolate(doc, origin, &e, &mut next, &mut iso)?
                    }
                    Err(e) => return Err(e),
                }
            }
            // Halving that leaves more failed pieces than letters allowed is no longer
            // looking for a few bad items: stop before sending the whole delivery again.
            // Each failed piece is cut in two, so `k` bad items leave up to `2k` halves.
            if next.iter().filter(|(_, failures, _)| *failures == 0).count() > 2 * self.max_dead_letters as usize {
                let (verb, does) = if iso.last_was_task { ("failed", "fails") } else { ("refused", "refuses") };
                return Err(iso.give_up(format!(
                    "more than {} pieces of one delivery {verb} (max_dead_letters): something {does} them all; the last: {}",
                    self.max_dead_letters, iso.last
                )));
            }
            pending = next;
        }
        Ok(published)
    }

    /// Cut a failed document in halves (into `next`), or dead-letter its one item. When
    /// every item of a document of several fails on its own, nothing in it is at fault: the
    /// delivery fails instead.
    fn isolate(
        &mut self,
        doc: Doc,
        origin: usize,
        e: &GlobusError,
        next: &mut Vec<Pending>,
        iso: &mut Isolation,
    ) -> Result<(), GlobusError> {
        iso.last = self.redact(e.to_string());
        iso.last_was_task = matches!(e, GlobusError::TaskFailed { .. });
        let (noun, delete) = (doc.noun(), matches!(doc, Doc::Delete(_)));
        let (subject, raw) = match doc.split() {
            Split::Halves(a, b) => {
                next.push((a, 0, origin));
                next.push((b, 0, origin));
                return Ok(());
            }
            Split::Empty => return Ok(()),
            Split::One(subject, raw) => (subject, raw),
        };
        let (how, verb) =
            if iso.last_was_task { ("ended in a FAILED task", "failed") } else { ("was refused", "refused") };
        iso.failed[origin] += 1;
        if iso.items[origin] > 1 && iso.failed[origin] == iso.items[origin] {
            return Err(iso.give_up(format!(
                "every {noun} of a document of {} {how}: not a bad record; the last: {}",
                iso.items[origin], iso.last
            )));
        }
        iso.letters += 1;
        if iso.letters > self.max_dead_letters {
            let plural = if delete { "subjects" } else { "entries" };
            return Err(iso.give_up(format!(
                "more than {} {plural} of one delivery {verb} (max_dead_letters); the last: {}",
                self.max_dead_letters, iso.last
            )));
        }
        // A letter is kept once (a delivery sent again, an earlier run's letter), but the
        // subject is marked to resend every time it fails: the next run sends it again.
        let reason = if delete { format!("delete not applied: {}", iso.last) } else { iso.last.clone() };
        if self.dead.first_time(&subject, &raw) {
            self.dead.write(&self.id, &subject, &raw, &reason).map_err(|io| {
                GlobusError::Batch(format!("writing the dead-letter file {}: {io}", self.dead.path().display()))
            })?;
        }
        if !self.dead_lettered.contains(&subject) {
            self.dead_lettered.push(subject.clone());
        }
        if iso.last_was_task {
            tracing::warn!(sink = %self.id, subject, reason, file = %self.dead.path().display(), "a Globus task kept failing for one {noun}; kept as a dead letter");
        } else {
            tracing::warn!(sink = %self.id, subject, reason, file = %self.dead.path().display(), "Globus Search refused one entry; kept as a dead letter");
        }
        Ok(())
    }

    /// POST one document; its task id once accepted.
    async fn submit_doc(&mut self, doc: &Doc) -> Result<String, GlobusError> {
        match doc {
            Doc::Ingest(d) => {
                let mut body = Vec::with_capacity(d.document_bytes());
                d.write_gingest(&mut body).map_err(|e| GlobusError::Batch(e.to_string()))?;
                self.submit("ingest", "ingest", &body, d.len()).await
            }
            Doc::Delete(subjects) => {
                self.submit("delete", "batch_delete_by_subject", &delete_body(subjects), subjects.len()).await
            }
        }
    }
}
