//! The snapshot engine's own tests: runs with test sources and sinks.

use super::*;
use async_trait::async_trait;
use icicle_core::config::SnapshotSettings;
use icicle_core::policy::{PrincipalMap, VisibleTo};
use icicle_core::record::FileKind;
use icicle_core::traits::{RowSink, Sink, Split};
use icicle_core::SinkError;
use std::sync::mpsc as std_mpsc;

/// Emits one record, then waits until the sink has delivered it before finishing:
/// only the flush timer can deliver a partial document while the source is still open.
struct SlowSource {
    delivered: Mutex<std_mpsc::Receiver<()>>,
}

#[async_trait]
impl Source for SlowSource {
    async fn plan(&self) -> Result<Vec<Split>, icicle_core::SourceError> {
        Ok(vec![Split::whole("slow".into(), 1)])
    }
    fn read(&self, _split: &Split, out: &mut dyn RowSink) -> Result<(), icicle_core::SourceError> {
        let rec = FileRecord {
            path: "/a",
            kind: FileKind::File,
            attrs: icicle_core::Attrs {
                mode: 0o100644,
                uid: 1,
                gid: 1,
                size: 1,
                atime: 0,
                ctime: 0,
                mtime: 0,
                inode: 0,
            },
            storage: None,
        };
        out.record(&rec);
        // The worker hands its chunk over when the split ends; emulate a streaming
        // source by ending this split and blocking the next one.
        out.spawn(Split::whole("wait".into(), 0));
        Ok(())
    }
}

struct WaitingSource {
    inner: SlowSource,
}

#[async_trait]
impl Source for WaitingSource {
    async fn plan(&self) -> Result<Vec<Split>, icicle_core::SourceError> {
        self.inner.plan().await
    }
    fn read(&self, split: &Split, out: &mut dyn RowSink) -> Result<(), icicle_core::SourceError> {
        if split.name == "wait" {
            let rx = self.inner.delivered.lock().map_err(|_| icicle_core::SourceError::External("poisoned".into()))?;
            rx.recv_timeout(std::time::Duration::from_secs(120))
                .map_err(|_| icicle_core::SourceError::External("the timer never flushed".into()))?;
            return Ok(());
        }
        self.inner.read(split, out)
    }
}

struct SignallingSink {
    tx: std_mpsc::Sender<()>,
    seen: Arc<Mutex<Vec<usize>>>,
}

#[async_trait]
impl Sink for SignallingSink {
    async fn deliver(&mut self, batch: &DocumentBatch) -> Result<(), SinkError> {
        self.seen.lock().map_err(|_| SinkError::Io { sink: "t".into(), reason: "poisoned".into() })?.push(batch.len());
        let _ = self.tx.send(());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn partial_documents_are_flushed_by_the_timer() {
    let (tx, rx) = std_mpsc::channel();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let job = SnapshotJob {
        sources: vec![(
            "flush-timer".into(),
            Arc::new(WaitingSource { inner: SlowSource { delivered: Mutex::new(rx) } }),
        )],
        sinks: vec![("k".into(), Box::new(SignallingSink { tx, seen: seen.clone() }))],
        count_sinks: Vec::new(),
        policy: Arc::new(RecordPolicy {
            visible_to: vec![VisibleTo::Public],
            fallback: vec![],
            principals: Arc::new(PrincipalMap::default()),
            version: "t".into(),
            ..Default::default()
        }),
        settings: SnapshotSettings { workers: 1, flush_interval_secs: 0.05, ..Default::default() },
        progress: Arc::new(NoProgress),
        processors: vec![],
        finishers: vec![],
        primary: true,
        cluster: None,
    };
    let summary = run(job).await.unwrap();
    // Delivered while the source was still running (otherwise `read` would have failed
    // with a reject), and nothing was lost or duplicated.
    assert_eq!(summary.rejects, 0);
    assert_eq!(summary.emitted, 1);
    assert_eq!(*seen.lock().unwrap(), vec![1]);
    // The dashboard's overview counts a snapshot's rows in and records out.
    let m = icicle_core::metrics::Metrics::global().snapshot();
    assert_eq!(m.get("icicle_records_in_total", &[("component", "flush-timer")]), Some(1.0));
    assert_eq!(m.get("icicle_records_out_total", &[("component", "flush-timer"), ("op", "update")]), Some(1.0));
}

/// One record; counts its acknowledgements.
struct AckCounting {
    acks: Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait]
impl Source for AckCounting {
    async fn plan(&self) -> Result<Vec<Split>, icicle_core::SourceError> {
        Ok(vec![Split::whole("one".into(), 1)])
    }
    fn read(&self, _split: &Split, out: &mut dyn RowSink) -> Result<(), icicle_core::SourceError> {
        out.record(&FileRecord {
            path: "/a",
            kind: FileKind::File,
            attrs: icicle_core::Attrs {
                mode: 0o100644,
                uid: 1,
                gid: 1,
                size: 1,
                atime: 0,
                ctime: 0,
                mtime: 0,
                inode: 0,
            },
            storage: None,
        });
        Ok(())
    }
    async fn acknowledge(&self) -> Result<(), icicle_core::SourceError> {
        self.acks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// Fails every delivery, or none.
struct MaybeFailing(bool);

#[async_trait]
impl Sink for MaybeFailing {
    async fn deliver(&mut self, _batch: &DocumentBatch) -> Result<(), SinkError> {
        if self.0 {
            return Err(SinkError::Io { sink: "t".into(), reason: "disk full".into() });
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn sources_are_acknowledged_only_after_every_sink_delivered() {
    for fail in [true, false] {
        let acks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let job = SnapshotJob {
            sources: vec![("s".into(), Arc::new(AckCounting { acks: acks.clone() }))],
            sinks: vec![("ok".into(), Box::new(MaybeFailing(false))), ("k".into(), Box::new(MaybeFailing(fail)))],
            count_sinks: Vec::new(),
            policy: Arc::new(RecordPolicy {
                visible_to: vec![VisibleTo::Public],
                version: "t".into(),
                ..Default::default()
            }),
            settings: SnapshotSettings { workers: 1, ..Default::default() },
            progress: Arc::new(NoProgress),
            processors: vec![],
            finishers: vec![],
            primary: true,
            cluster: None,
        };
        let result = run(job).await;
        assert_eq!(result.is_err(), fail);
        assert_eq!(acks.load(std::sync::atomic::Ordering::SeqCst), usize::from(!fail), "failing sink: {fail}");
    }
}
