//! Ingest with per-record isolation. A document Search refuses (HTTP 400), or whose task ends
//! FAILED again after `task_retries` new tries, is cut in halves and sent again, down to the
//! one entry that causes it; that entry goes to the dead-letter file (written durably before
//! the delivery returns) and the rest is published. More dead letters than
//! `max_dead_letters` in one delivery mean something systematic: the delivery fails instead;
//! `max_dead_letters = 0` turns isolation off (a refused document fails the delivery).

use std::time::Instant;

use icicle_core::batch::EntryBatch;

use super::{entry_batch, GlobusSink};
use crate::error::GlobusError;

/// A document still to publish, how many times its task ended FAILED, and which document of
/// the delivery it came from.
type Pending = (EntryBatch, u32, usize);

/// What isolation has found so far in one delivery.
struct Isolation {
    /// Entries of each original document, and how many of them were refused on their own.
    entries: Vec<usize>,
    refused: Vec<usize>,
    letters: u32,
    /// The last refusal, for the message when isolation gives up.
    last: String,
}

impl GlobusSink {
    /// Publish `docs`; returns the task ids of what was published (accepted, and `SUCCESS`
    /// when waiting for tasks). Isolated entries are dead-lettered.
    pub(super) async fn ingest_isolating(&mut self, docs: Vec<EntryBatch>) -> Result<Vec<String>, GlobusError> {
        let mut iso = Isolation { entries: docs.iter().map(EntryBatch::len).collect(), refused: vec![0; docs.len()], letters: 0, last: String::new() };
        let mut pending: Vec<Pending> = docs.into_iter().enumerate().map(|(i, d)| (d, 0, i)).collect();
        let mut published = Vec::new();
        while !pending.is_empty() {
            let mut next = Vec::new();
            let mut submitted = Vec::new();
            for (doc, failures, origin) in pending {
                let at = Instant::now();
                match self.submit_ingest(&doc).await {
                    Ok(task) => submitted.push((task, at, doc, failures, origin)),
                    Err(e) if e.is_refusal() && self.max_dead_letters > 0 => self.isolate(doc, origin, &e, &mut next, &mut iso)?,
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
                        tracing::warn!(sink = %self.id, error = %self.redact(e.to_string()), entries = doc.len(), "Globus task FAILED; sending its document again");
                        next.push((doc, failures + 1, origin));
                    }
                    Err(e @ GlobusError::TaskFailed { .. }) if self.max_dead_letters > 0 => self.isolate(doc, origin, &e, &mut next, &mut iso)?,
                    Err(e) => return Err(e),
                }
            }
            // Halving that leaves more refused pieces than letters allowed is no longer
            // looking for a few bad entries: stop before sending the whole delivery again.
            // Each refused piece is cut in two, so `k` bad entries leave up to `2k` halves.
            if next.iter().filter(|(_, failures, _)| *failures == 0).count() > 2 * self.max_dead_letters as usize {
                return Err(GlobusError::Batch(format!(
                    "more than {} pieces of one delivery refused (max_dead_letters): something refuses them all; the last: {}",
                    self.max_dead_letters, iso.last
                )));
            }
            pending = next;
        }
        Ok(published)
    }

    /// Cut a refused document in halves (into `next`), or dead-letter its one entry. When
    /// every entry of a document of several is refused, nothing in it is at fault: the
    /// delivery fails instead.
    fn isolate(&mut self, doc: EntryBatch, origin: usize, e: &GlobusError, next: &mut Vec<Pending>, iso: &mut Isolation) -> Result<(), GlobusError> {
        iso.last = self.redact(e.to_string());
        let entries: Vec<&[u8]> = doc.entries().collect();
        if entries.len() > 1 {
            let half = entries.len() / 2;
            next.push((entry_batch(entries[..half].iter().copied()), 0, origin));
            next.push((entry_batch(entries[half..].iter().copied()), 0, origin));
            return Ok(());
        }
        let Some(entry) = entries.first() else { return Ok(()) };
        iso.refused[origin] += 1;
        if iso.entries[origin] > 1 && iso.refused[origin] == iso.entries[origin] {
            return Err(GlobusError::Batch(format!(
                "every entry of a document of {} was refused: not a bad record; the last: {}",
                iso.entries[origin],
                self.redact(e.to_string())
            )));
        }
        iso.letters += 1;
        if iso.letters > self.max_dead_letters {
            return Err(GlobusError::Batch(format!(
                "more than {} entries of one delivery refused (max_dead_letters); the last: {}",
                self.max_dead_letters,
                self.redact(e.to_string())
            )));
        }
        let subject = serde_json::from_slice::<serde_json::Value>(entry).ok().and_then(|v| v["subject"].as_str().map(String::from)).unwrap_or_default();
        // A letter is kept once (a delivery sent again, an earlier run's letter), but the
        // subject is marked to resend every time it is refused: the next run sends it again.
        let reason = self.redact(e.to_string());
        if self.dead.first_time(&subject, entry) {
            self.dead
                .write(&self.id, &subject, entry, &reason)
                .map_err(|io| GlobusError::Batch(format!("writing the dead-letter file {}: {io}", self.dead.path().display())))?;
        }
        if !self.dead_lettered.contains(&subject) {
            self.dead_lettered.push(subject.clone());
        }
        tracing::warn!(sink = %self.id, subject, reason, file = %self.dead.path().display(), "Globus Search refused one entry; kept as a dead letter");
        Ok(())
    }

    /// POST one GIngest document; its task id once accepted.
    async fn submit_ingest(&mut self, doc: &EntryBatch) -> Result<String, GlobusError> {
        let mut body = Vec::with_capacity(doc.document_bytes());
        doc.write_gingest(&mut body).map_err(|e| GlobusError::Batch(e.to_string()))?;
        self.submit("ingest", "ingest", &body, doc.len()).await
    }
}
