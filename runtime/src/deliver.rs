//! Delivery to every configured sink: one document to each in turn, then every sink is told
//! every receipt; a monitor's emit as bounded documents of entries, then of deleted subjects.

use icicle_core::batch::{DocumentBatch, EntryBatch};
use icicle_gmeta::{delete_batches, Batcher};

/// Deliver one document to every sink in turn, recording per-sink batches, entries, bytes,
/// errors and latency; then call [`Sink::delivered`](icicle_core::traits::Sink::delivered) on every sink with all
/// sinks' receipts. `Ok` means every sink has it; it is durable after [`sync_all`].
pub async fn deliver_all(
    sinks: &mut icicle_core::traits::NamedSinks,
    batch: &DocumentBatch,
) -> Result<(), icicle_core::error::SinkError> {
    let m = icicle_core::metrics::Metrics::global();
    let (entries, bytes) = match batch {
        DocumentBatch::Ingest(b) => (b.len(), b.document_bytes()),
        DocumentBatch::Delete(s) => (s.len(), s.iter().map(|x| x.len() + 3).sum()),
    };
    let kind = match batch {
        DocumentBatch::Ingest(_) => "ingest",
        DocumentBatch::Delete(_) => "delete",
    };
    for (name, s) in sinks.iter_mut() {
        let t = std::time::Instant::now();
        let labels: [(&'static str, &str); 2] = [("sink", name), ("kind", kind)];
        if let Err(e) = s.deliver(batch).await {
            m.add(&icicle_core::metrics::names::SINK_ERRORS_TOTAL, &labels, 1.0);
            return Err(e);
        }
        m.add(&icicle_core::metrics::names::SINK_BATCHES_TOTAL, &labels, 1.0);
        m.add(&icicle_core::metrics::names::SINK_ENTRIES_TOTAL, &labels, entries as f64);
        m.add(&icicle_core::metrics::names::SINK_BYTES_TOTAL, &labels, bytes as f64);
        let took = t.elapsed().as_secs_f64();
        m.set(&icicle_core::metrics::names::SINK_LAST_DELIVERY_SECONDS, &[("sink", name)], took);
        m.observe(&icicle_core::metrics::names::SINK_DELIVERY_DURATION_SECONDS, &[("sink", name)], took);
    }
    // Every sink has the batch: tell each of them, with every sink's receipt (audit trails).
    let receipts: Vec<(String, serde_json::Value)> =
        sinks.iter().filter_map(|(name, s)| s.receipt().map(|r| (name.clone(), r))).collect();
    for (name, s) in sinks.iter_mut() {
        if let Err(e) = s.delivered(batch, &receipts).await {
            let labels: [(&'static str, &str); 2] = [("sink", name), ("kind", kind)];
            m.add(&icicle_core::metrics::names::SINK_ERRORS_TOTAL, &labels, 1.0);
            return Err(e);
        }
    }
    Ok(())
}

/// Make everything delivered to every sink durable ([`Sink::sync`](icicle_core::traits::Sink::sync)),
/// before anything is acknowledged.
pub async fn sync_all(sinks: &mut icicle_core::traits::NamedSinks) -> Result<(), icicle_core::error::SinkError> {
    for (name, s) in sinks.iter_mut() {
        if let Err(e) = s.sync().await {
            icicle_core::metrics::Metrics::global().add(
                &icicle_core::metrics::names::SINK_ERRORS_TOTAL,
                &[("sink", name), ("kind", "sync")],
                1.0,
            );
            return Err(e);
        }
    }
    Ok(())
}

/// Deliver one emit of a stream monitor to every sink: the entries as GIngest documents within
/// `limit`, then the deleted subjects. `Ok` means every sink delivered everything durably.
pub async fn deliver_emit(
    sinks: &mut icicle_core::traits::NamedSinks,
    chunk: &EntryBatch,
    deletes: Vec<String>,
    limit: icicle_core::batch::DocumentLimit,
) -> Result<(), icicle_core::error::SinkError> {
    let mut batcher = Batcher::within(limit);
    let (mut full, mut oversized) = (Vec::new(), Vec::new());
    batcher.push_chunk(chunk, &mut full, &mut oversized);
    full.extend(batcher.flush());
    for entry in oversized {
        // Alone it exceeds the document limit: delivered in a document of its own.
        let mut b = EntryBatch::default();
        b.push(&entry);
        full.push(b);
    }
    for doc in full {
        deliver_all(sinks, &DocumentBatch::Ingest(doc)).await?;
    }
    for subjects in delete_batches(deletes, limit) {
        deliver_all(sinks, &DocumentBatch::Delete(subjects)).await?;
    }
    sync_all(sinks).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every call of `delivered`: the receipts it was given.
    type Seen = std::sync::Arc<std::sync::Mutex<Vec<Vec<(String, serde_json::Value)>>>>;

    /// A sink that reports a receipt and records what `delivered` was given.
    struct Recording {
        receipt: Option<serde_json::Value>,
        seen: Seen,
        fail_delivered: bool,
    }

    #[async_trait::async_trait]
    impl icicle_core::traits::Sink for Recording {
        async fn deliver(&mut self, _batch: &DocumentBatch) -> Result<(), icicle_core::error::SinkError> {
            Ok(())
        }
        fn receipt(&self) -> Option<serde_json::Value> {
            self.receipt.clone()
        }
        async fn delivered(
            &mut self,
            _batch: &DocumentBatch,
            receipts: &[(String, serde_json::Value)],
        ) -> Result<(), icicle_core::error::SinkError> {
            self.seen.lock().unwrap().push(receipts.to_vec());
            if self.fail_delivered {
                return Err(icicle_core::error::SinkError::Io { sink: "b".into(), reason: "audit failed".into() });
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn every_sink_is_told_every_receipt_after_all_delivered() {
        let seen: Seen = Default::default();
        let mk = |receipt: Option<serde_json::Value>, fail| -> Box<dyn icicle_core::traits::Sink> {
            Box::new(Recording { receipt, seen: seen.clone(), fail_delivered: fail })
        };
        let mut sinks: icicle_core::traits::NamedSinks = vec![
            ("a".into(), mk(Some(serde_json::json!({"task_ids": ["t1"]})), false)),
            ("b".into(), mk(None, false)),
            ("c".into(), mk(Some(serde_json::json!({"offsets": [1]})), false)),
        ];
        deliver_all(&mut sinks, &DocumentBatch::Delete(vec!["/x".into()])).await.unwrap();
        let seen_now = seen.lock().unwrap().clone();
        assert_eq!(seen_now.len(), 3);
        let want = vec![
            ("a".to_string(), serde_json::json!({"task_ids": ["t1"]})),
            ("c".to_string(), serde_json::json!({"offsets": [1]})),
        ];
        assert!(seen_now.iter().all(|r| r == &want), "{seen_now:?}");
        // A failing `delivered` fails the delivery.
        let mut sinks: icicle_core::traits::NamedSinks =
            vec![("a".into(), mk(None, false)), ("b".into(), mk(None, true))];
        let e = deliver_all(&mut sinks, &DocumentBatch::Delete(vec!["/x".into()])).await.unwrap_err();
        assert!(e.to_string().contains("audit failed"), "{e}");
    }

    #[tokio::test]
    async fn a_monitor_emit_is_durable_and_in_place_when_delivered() {
        let dir = tempfile::tempdir().unwrap();
        // A group far larger than the emit: only the sync at the end of the emit puts it in place.
        let sink = icicle_plugins_sinks::FileSink::grouped("f", dir.path().to_path_buf(), true, 1 << 30);
        let mut sinks: icicle_core::traits::NamedSinks = vec![("f".into(), Box::new(sink))];
        let mut chunk = EntryBatch::default();
        for p in ["/a", "/b"] {
            chunk.push(format!("{{\"subject\":\"{p}\",\"content\":{{\"path\":\"{p}\"}}}}").as_bytes());
        }
        deliver_emit(&mut sinks, &chunk, vec!["/a".into()], icicle_core::batch::DocumentLimit::compact(10 << 20))
            .await
            .unwrap();
        let index = icicle_gmeta::replay::read_index(dir.path()).unwrap();
        assert_eq!(index.keys().collect::<Vec<_>>(), ["/b"]);
    }
}
