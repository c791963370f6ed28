//! What a run's sinks did: each sink is wrapped so that its deliveries are counted for the
//! summary (documents, entries, bytes, time spent) and reported to [`Progress`] as they
//! begin and end, so that a run whose reading is over but whose delivery is not says so.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use icicle_core::batch::DocumentBatch;
use icicle_core::error::SinkError;
use icicle_core::traits::{NamedSinks, Sink};
use serde_json::Value;

use super::Progress;

/// One sink's deliveries so far, as [`Progress::delivery`] reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SinkDelivery {
    /// Documents delivered (ingest and delete).
    pub documents: u64,
    /// Of them, delete documents.
    pub delete_documents: u64,
    /// Entries and subjects in them.
    pub entries: u64,
    /// Their size in bytes.
    pub bytes: u64,
    /// Seconds spent in deliveries.
    pub seconds: f64,
    /// Whether a document is being delivered now.
    pub busy: bool,
}

/// A sink counted for the summary and reported to the progress.
struct Counted {
    name: String,
    inner: Box<dyn Sink>,
    progress: Arc<dyn Progress>,
    done: SinkDelivery,
}

#[async_trait]
impl Sink for Counted {
    async fn deliver(&mut self, batch: &DocumentBatch) -> Result<(), SinkError> {
        let started = Instant::now();
        self.done.busy = true;
        self.progress.delivery(&self.name, &self.done);
        let r = self.inner.deliver(batch).await;
        self.done.busy = false;
        self.done.seconds += started.elapsed().as_secs_f64();
        if r.is_ok() {
            self.done.documents += 1;
            match batch {
                DocumentBatch::Ingest(b) => {
                    self.done.entries += b.len() as u64;
                    self.done.bytes += b.document_bytes() as u64;
                }
                DocumentBatch::Delete(s) => {
                    self.done.delete_documents += 1;
                    self.done.entries += s.len() as u64;
                }
            }
        }
        self.progress.delivery(&self.name, &self.done);
        r
    }

    async fn sync(&mut self) -> Result<(), SinkError> {
        self.inner.sync().await
    }

    fn receipt(&self) -> Option<Value> {
        self.inner.receipt()
    }

    fn dead_lettered(&self) -> &[String] {
        self.inner.dead_lettered()
    }

    /// The counts, the dead letters and the sink's own facts under `sink`.
    fn facts(&self) -> Option<Value> {
        let d = &self.done;
        let mut v = serde_json::json!({
            "documents": d.documents,
            "delete_documents": d.delete_documents,
            "entries": d.entries,
            "bytes": d.bytes,
            "seconds": (d.seconds * 1000.0).round() / 1000.0,
            "dead_lettered": self.inner.dead_lettered().len(),
        });
        if let (Some(own), Some(obj)) = (self.inner.facts(), v.as_object_mut()) {
            obj.insert("sink".into(), own);
        }
        Some(v)
    }

    async fn delivered(&mut self, batch: &DocumentBatch, receipts: &[(String, Value)]) -> Result<(), SinkError> {
        self.inner.delivered(batch, receipts).await
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.progress.delivery(&self.name, &self.done);
        self.inner.close().await
    }
}

/// Wrap every sink of `sinks` so that its deliveries are counted and reported to `progress`.
pub(super) fn count(sinks: NamedSinks, progress: &Arc<dyn Progress>) -> NamedSinks {
    sinks
        .into_iter()
        .map(|(name, inner)| {
            let counted: Box<dyn Sink> = Box::new(Counted {
                name: name.clone(),
                inner,
                progress: progress.clone(),
                done: SinkDelivery::default(),
            });
            (name, counted)
        })
        .collect()
}

/// Each sink's facts, by name.
pub(super) fn facts(sinks: &NamedSinks) -> std::collections::BTreeMap<String, Value> {
    sinks.iter().filter_map(|(name, s)| s.facts().map(|f| (name.clone(), f))).collect()
}
