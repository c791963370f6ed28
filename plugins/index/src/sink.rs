//! `[sinks.<id>] type = "index"`: keeps every upsert and delete in the embedded index. An
//! entry replaces the document of its subject; a delete removes it. What was delivered is
//! committed (durable, and what readers see) at [`Sink::sync`] and [`Sink::close`]: the
//! runtime acknowledges nothing before. When a running `icicle serve` holds the directory's
//! writer, the sink publishes through serve's socket instead ([`crate::served`]).

use std::path::PathBuf;

use async_trait::async_trait;
use serde::Deserialize;
use tantivy::{IndexWriter, TantivyDocument};

use icicle_core::batch::DocumentBatch;
use icicle_core::error::{ConfigError, SinkError};
use icicle_core::registry::{BuildContext, ComponentConfig};
use icicle_core::traits::Sink;

use crate::schema::{document, Fields};
use crate::served::ServedIndexSink;
use crate::store::{IndexError, Store};
use crate::upsert::Upserts;

/// The configuration of an `index` sink.
#[derive(Debug, Deserialize)]
pub struct IndexSinkConfig {
    /// The index directory (created, mode 0700, when missing).
    pub dir: PathBuf,
    /// Memory for the indexing buffer, MiB (at least 15 a thread).
    #[serde(default = "default_memory_mb")]
    pub memory_mb: usize,
    /// Indexing threads.
    #[serde(default = "default_threads")]
    pub threads: usize,
}

fn default_memory_mb() -> usize {
    128
}

/// Two: on 200,000 records a second indexing thread cut the wall time by a third
/// (docs/performance.md); each takes its share of `memory_mb`.
fn default_threads() -> usize {
    2
}

/// The sink: the index's writer, held while the run lasts.
pub struct IndexSink {
    id: String,
    dir: PathBuf,
    fields: Fields,
    /// `None` only while a commit runs on a blocking thread.
    writer: Option<IndexWriter<TantivyDocument>>,
    /// Operations delivered since the last commit.
    uncommitted: u64,
    /// The last commit, to know which subjects an upsert replaces.
    reader: tantivy::IndexReader,
    upserts: Upserts,
}

impl IndexSink {
    /// Open (or create) the index in `dir` and take its writer.
    pub fn open(id: &str, dir: PathBuf, threads: usize, memory_bytes: usize) -> Result<IndexSink, IndexError> {
        let store = Store::open_or_create(&dir)?;
        let writer = store.writer(threads, memory_bytes)?;
        let reader = store
            .index
            .reader_builder()
            .reload_policy(tantivy::ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| IndexError::engine(&dir, e))?;
        Ok(IndexSink {
            id: id.to_string(),
            dir,
            fields: store.fields,
            writer: Some(writer),
            uncommitted: 0,
            reader,
            upserts: Upserts::default(),
        })
    }

    fn io(&self, reason: impl std::fmt::Display) -> SinkError {
        SinkError::Io { sink: self.id.clone(), reason: format!("index {}: {reason}", self.dir.display()) }
    }

    /// Commit what was delivered (on a blocking thread: it waits for indexing and fsync).
    async fn commit(&mut self) -> Result<(), SinkError> {
        if self.uncommitted == 0 {
            return Ok(());
        }
        let mut writer = self.writer.take().ok_or_else(|| self.io("the writer was lost by an earlier failure"))?;
        let (writer, result) = tokio::task::spawn_blocking(move || {
            let r = writer.commit();
            (writer, r)
        })
        .await
        .map_err(|e| self.io(format!("the commit's thread: {e}")))?;
        self.writer = Some(writer);
        result.map_err(|e| self.io(format!("commit: {e}")))?;
        self.uncommitted = 0;
        self.upserts.committed();
        self.reader.reload().map_err(|e| self.io(format!("reading the commit: {e}")))?;
        Ok(())
    }
}

#[async_trait]
impl Sink for IndexSink {
    async fn deliver(&mut self, batch: &DocumentBatch) -> Result<(), SinkError> {
        let writer = self.writer.as_ref().ok_or_else(|| self.io("the writer was lost by an earlier failure"))?;
        let committed = self.reader.searcher();
        match batch {
            DocumentBatch::Ingest(entries) => {
                for (i, e) in entries.entries().enumerate() {
                    let parsed =
                        document(&self.fields, e).map_err(|r| self.io(format!("entry {i} of the batch: {r}")))?;
                    self.upserts.upsert(writer, &committed, self.fields.subject, parsed).map_err(|e| self.io(e))?;
                }
                self.uncommitted += entries.len() as u64;
            }
            DocumentBatch::Delete(subjects) => {
                for s in subjects {
                    self.upserts.delete(writer, self.fields.subject, s);
                }
                self.uncommitted += subjects.len() as u64;
            }
        }
        Ok(())
    }

    async fn sync(&mut self) -> Result<(), SinkError> {
        self.commit().await
    }

    fn receipt(&self) -> Option<serde_json::Value> {
        None
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.commit().await
    }
}

impl ComponentConfig for IndexSinkConfig {
    type Component = Box<dyn Sink>;

    /// Opening the index (created when missing, its writer lock taken) is left to `build`.
    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        if self.threads == 0 || self.threads > 8 {
            return Err(ctx.invalid("threads", "must be 1 to 8"));
        }
        if self.memory_mb < 15 * self.threads {
            return Err(ctx.invalid(
                "memory_mb",
                format!("at least 15 a thread ({} for {} threads)", 15 * self.threads, self.threads),
            ));
        }
        Ok(())
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Box<dyn Sink>, ConfigError> {
        self.validate(ctx)?;
        match IndexSink::open(&ctx.id, self.dir.clone(), self.threads, self.memory_mb << 20) {
            Ok(s) => Ok(Box::new(s)),
            Err(busy @ IndexError::Busy { .. }) => match crate::served::serve_socket(&self.dir) {
                // An `icicle serve` owns the index: publish through it.
                Some(socket) => {
                    tracing::info!(sink = %ctx.id, dir = %self.dir.display(), socket = %socket.display(),
                        "an icicle serve owns this index: publishing through its socket");
                    let s = ServedIndexSink::new(&ctx.id, socket).map_err(|e| ctx.invalid("dir", e))?;
                    Ok(Box::new(s))
                }
                None => Err(ctx.invalid("dir", busy.to_string())),
            },
            Err(e) => Err(ctx.invalid("dir", e.to_string())),
        }
    }
}
