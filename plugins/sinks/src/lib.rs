//! Basic sinks: `file` (one GIngest JSON document per batch, ready for `globus search ingest`),
//! `stdout` (JSON lines) and `blackhole` (counts only, for benchmarks).

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use icicle_core::batch::{delete_body, DocumentBatch, EntryBatch, GINGEST_HEAD, GINGEST_TAIL};
use icicle_core::registry::{build_component, BuildContext, ComponentConfig, PluginDescriptor, PluginKind};
use icicle_core::{ConfigError, Sink, SinkError};
use serde::Deserialize;

/// `[sinks.<id>] type = "file"`.
#[derive(Debug, Deserialize)]
pub struct FileSinkConfig {
    /// Output directory (created if missing).
    pub dir: PathBuf,
    /// fsync each document before acknowledging it (default true).
    #[serde(default = "yes")]
    pub fsync: bool,
}

fn yes() -> bool {
    true
}

/// The index a file sink's directory describes: its documents applied in sequence order
/// (ingests upsert by path, deletes remove by subject), as `path -> GMetaEntry content`.
pub fn read_index(dir: &std::path::Path) -> Result<std::collections::BTreeMap<String, serde_json::Value>, String> {
    let mut docs: Vec<(u64, std::path::PathBuf)> = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let seq = name.strip_prefix("ingest-").or_else(|| name.strip_prefix("delete-")).and_then(|r| r.strip_suffix(".json")).and_then(|n| n.parse().ok());
        if let Some(seq) = seq {
            docs.push((seq, e.path()));
        }
    }
    docs.sort();
    let mut index = std::collections::BTreeMap::new();
    let mut subject_path: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for (_, f) in docs {
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&f).map_err(|e| format!("{}: {e}", f.display()))?).map_err(|e| format!("{}: {e}", f.display()))?;
        if let Some(subjects) = doc["subjects"].as_array() {
            for s in subjects.iter().filter_map(|s| s.as_str()) {
                if let Some(p) = subject_path.remove(s) {
                    index.remove(&p);
                }
            }
        } else if let Some(entries) = doc["ingest_data"]["gmeta"].as_array() {
            for e in entries {
                let (Some(subject), Some(path)) = (e["subject"].as_str(), e["content"]["path"].as_str()) else {
                    return Err(format!("{}: an entry without subject or path", f.display()));
                };
                subject_path.insert(subject.to_string(), path.to_string());
                index.insert(path.to_string(), e["content"].clone());
            }
        } else {
            return Err(format!("{}: neither a GIngest nor a delete document", f.display()));
        }
    }
    Ok(index)
}

/// Writes `ingest-NNNNNN.json` (GIngest GMetaList) and `delete-NNNNNN.json`
/// (`batch_delete_by_subject` body) files, each written to a temporary name and renamed.
/// Both share one sequence number: apply them in that order.
pub struct FileSink {
    name: String,
    dir: PathBuf,
    fsync: bool,
    /// One sequence for ingest and delete documents, so their order is kept.
    seq: u64,
}

impl FileSink {
    /// A file sink writing into `dir`. Numbering continues after documents already there,
    /// so a later run never overwrites documents an ingester has not consumed yet.
    pub fn new(name: &str, dir: PathBuf, fsync: bool) -> FileSink {
        let highest = |prefix: &str| -> u64 {
            std::fs::read_dir(&dir)
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .filter_map(|e| {
                            let n = e.file_name().to_string_lossy().into_owned();
                            n.strip_prefix(prefix)?.strip_suffix(".json")?.parse::<u64>().ok()
                        })
                        .max()
                        .unwrap_or(0)
                })
                .unwrap_or(0)
        };
        let seq = highest("ingest-").max(highest("delete-"));
        FileSink { name: name.to_string(), dir, fsync, seq }
    }

    fn write(&self, file: &str, body: impl FnOnce(&mut std::io::BufWriter<&std::fs::File>) -> std::io::Result<()>) -> Result<(), SinkError> {
        let err = |e: std::io::Error| SinkError::Io { sink: self.name.clone(), reason: format!("{}: {e}", self.dir.join(file).display()) };
        // The directory is fsync'ed once, at close.
        icicle_core::durable::stage(&self.dir.join(file), self.fsync, body).and_then(|staged| staged.commit(false)).map_err(err)
    }
}

#[async_trait]
impl Sink for FileSink {
    async fn deliver(&mut self, batch: &DocumentBatch) -> Result<(), SinkError> {
        match batch {
            DocumentBatch::Ingest(entries) => {
                self.seq += 1;
                let name = format!("ingest-{:06}.json", self.seq);
                self.write(&name, |w| write_gingest_vectored(w, entries))
            }
            DocumentBatch::Delete(subjects) => {
                self.seq += 1;
                let name = format!("delete-{:06}.json", self.seq);
                let body = delete_body(subjects);
                self.write(&name, |w| w.write_all(&body))
            }
        }
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        if self.fsync && self.dir.is_dir() {
            if let Ok(d) = std::fs::File::open(&self.dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

/// The bytes [`EntryBatch::write_gingest`] writes, handed to the kernel straight from the
/// batch (`writev` of the envelope, the entries and the commas between them) instead of being
/// copied through the writer's buffer first: a document is megabytes.
fn write_gingest_vectored(w: &mut std::io::BufWriter<&std::fs::File>, entries: &EntryBatch) -> std::io::Result<()> {
    use std::io::IoSlice;
    /// Slices per `writev` (the kernel's `IOV_MAX`).
    const SLICES: usize = 1024;
    w.flush()?;
    let mut file: &std::fs::File = w.get_ref();
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(SLICES);
    slices.push(IoSlice::new(GINGEST_HEAD));
    for (i, e) in entries.entries().enumerate() {
        if slices.len() + 2 > SLICES {
            write_all_vectored(&mut file, &mut slices)?;
        }
        if i > 0 {
            slices.push(IoSlice::new(b","));
        }
        slices.push(IoSlice::new(e));
    }
    slices.push(IoSlice::new(GINGEST_TAIL));
    write_all_vectored(&mut file, &mut slices)
}

/// Write every byte of `slices` (emptied after), retrying short and interrupted writes.
fn write_all_vectored(file: &mut &std::fs::File, slices: &mut Vec<std::io::IoSlice<'_>>) -> std::io::Result<()> {
    let mut rest = &mut slices[..];
    std::io::IoSlice::advance_slices(&mut rest, 0);
    while !rest.is_empty() {
        match file.write_vectored(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => std::io::IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    slices.clear();
    Ok(())
}

impl ComponentConfig for FileSinkConfig {
    type Component = Box<dyn Sink>;

    fn build(self, ctx: &BuildContext<'_>) -> Result<Box<dyn Sink>, ConfigError> {
        if self.dir.exists() && !self.dir.is_dir() {
            return Err(ctx.invalid("dir", format!("{} exists and is not a directory", self.dir.display())));
        }
        Ok(Box::new(FileSink::new(&ctx.id, self.dir, self.fsync)))
    }
}

/// `[sinks.<id>] type = "stdout"`.
#[derive(Debug, Deserialize)]
pub struct StdoutSinkConfig {}

/// Prints one JSON line per entry (the GMetaEntry) and per deleted subject
/// (`{"delete":"<subject>"}`).
pub struct StdoutSink;

#[async_trait]
impl Sink for StdoutSink {
    async fn deliver(&mut self, batch: &DocumentBatch) -> Result<(), SinkError> {
        let stdout = std::io::stdout();
        let mut w = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
        let err = |e: std::io::Error| SinkError::Io { sink: "stdout".into(), reason: e.to_string() };
        match batch {
            DocumentBatch::Ingest(entries) => {
                for e in entries.entries() {
                    w.write_all(e).map_err(err)?;
                    w.write_all(b"\n").map_err(err)?;
                }
            }
            DocumentBatch::Delete(subjects) => {
                for s in subjects {
                    serde_json::to_writer(&mut w, &serde_json::json!({ "delete": s })).map_err(|e| err(e.into()))?;
                    w.write_all(b"\n").map_err(err)?;
                }
            }
        }
        w.flush().map_err(err)
    }
}

impl ComponentConfig for StdoutSinkConfig {
    type Component = Box<dyn Sink>;

    fn build(self, _ctx: &BuildContext<'_>) -> Result<Box<dyn Sink>, ConfigError> {
        Ok(Box::new(StdoutSink))
    }
}

/// `[sinks.<id>] type = "blackhole"`.
#[derive(Debug, Deserialize)]
pub struct BlackholeSinkConfig {}

/// What a blackhole sink counted.
#[derive(Debug, Default)]
pub struct BlackholeCounts {
    pub batches: AtomicU64,
    pub entries: AtomicU64,
    pub deletes: AtomicU64,
    pub bytes: AtomicU64,
}

/// Counts documents, entries and bytes, and drops them.
#[derive(Default)]
pub struct BlackholeSink {
    pub counts: Arc<BlackholeCounts>,
}

#[async_trait]
impl Sink for BlackholeSink {
    async fn deliver(&mut self, batch: &DocumentBatch) -> Result<(), SinkError> {
        self.counts.batches.fetch_add(1, Ordering::Relaxed);
        self.counts.bytes.fetch_add(batch.document_bytes() as u64, Ordering::Relaxed);
        match batch {
            DocumentBatch::Ingest(e) => self.counts.entries.fetch_add(e.len() as u64, Ordering::Relaxed),
            DocumentBatch::Delete(s) => self.counts.deletes.fetch_add(s.len() as u64, Ordering::Relaxed),
        };
        Ok(())
    }
}

impl ComponentConfig for BlackholeSinkConfig {
    type Component = Box<dyn Sink>;

    fn build(self, _ctx: &BuildContext<'_>) -> Result<Box<dyn Sink>, ConfigError> {
        Ok(Box::new(BlackholeSink::default()))
    }
}

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Sink,
        name: "file",
        description: "one GIngest JSON document per batch (and delete bodies), ready for `globus search ingest`",
        example: "[sinks.out]\ntype = \"file\"\ndir = \"out/\"\nfsync = true\n",
        build: build_component::<FileSinkConfig>,
    }
}

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Sink,
        name: "stdout",
        description: "one JSON line per GMetaEntry and per deleted subject",
        example: "[sinks.print]\ntype = \"stdout\"\n",
        build: build_component::<StdoutSinkConfig>,
    }
}

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Sink,
        name: "blackhole",
        description: "counts documents, entries and bytes and drops them (benchmarks)",
        example: "[sinks.null]\ntype = \"blackhole\"\n",
        build: build_component::<BlackholeSinkConfig>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_written_as_write_gingest_writes_them() {
        let dir = tempfile::tempdir().unwrap();
        // Empty, one entry, and more entries than one `writev` takes.
        for n in [0usize, 1, 2, 511, 512, 513, 3000] {
            let mut batch = EntryBatch::default();
            for i in 0..n {
                batch.push(format!("{{\"subject\":\"/f{i}\",\"n\":{}}}", "x".repeat(i % 7)).as_bytes());
            }
            let mut want = Vec::new();
            batch.write_gingest(&mut want).unwrap();
            let path = dir.path().join(format!("d{n}.json"));
            icicle_core::durable::stage(&path, false, |w| write_gingest_vectored(w, &batch)).unwrap().commit(false).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), want, "{n} entries");
        }
    }
}
