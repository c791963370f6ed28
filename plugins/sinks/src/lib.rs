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
    /// Make documents durable (fsync) before anything delivered is acknowledged (default
    /// true). A document appears under its name only once it is durable.
    #[serde(default = "yes")]
    pub fsync: bool,
    /// With `fsync`, documents are made durable in groups: when this many bytes wait, and
    /// whenever the runtime is about to acknowledge (default 256 MiB).
    #[serde(default = "group_bytes")]
    pub sync_group_bytes: u64,
}

fn yes() -> bool {
    true
}

fn group_bytes() -> u64 {
    256 << 20
}

/// Writes `ingest-NNNNNN.json` (GIngest GMetaList) and `delete-NNNNNN.json`
/// (`batch_delete_by_subject` body) files, each written to a temporary name and renamed.
/// Both share one sequence number: apply them in that order.
///
/// With `fsync`, documents wait under their temporary names until a group is made durable
/// ([`Sink::sync`], or `sync_group_bytes` waiting): each is fsync'ed, renamed in sequence
/// order, then the directory is fsync'ed. Writing back a group at once, rather than one
/// document at a time, lets the kernel write back in the background meanwhile.
pub struct FileSink {
    name: String,
    dir: PathBuf,
    fsync: bool,
    group_bytes: u64,
    /// One sequence for ingest and delete documents, so their order is kept.
    seq: u64,
    /// Documents written and not yet durable, in sequence order, with their sizes.
    pending: Vec<(icicle_core::durable::Staged, u64)>,
    pending_bytes: u64,
    /// When the oldest waiting document was written.
    oldest: Option<std::time::Instant>,
    /// A group that could not be made durable: its documents are gone, and so is every later
    /// call's `Ok` (nothing after them may be acknowledged).
    failed: Option<String>,
    /// Held while the sink lives, from its first delivery: one sink per directory.
    lock: Option<Option<std::fs::File>>,
}

/// A waiting document is made durable at the next delivery after this long, so a slow source
/// still shows its documents as it goes.
const SYNC_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

impl FileSink {
    /// A file sink writing into `dir`. Numbering continues after documents already there,
    /// so a later run never overwrites documents an ingester has not consumed yet.
    pub fn new(name: &str, dir: PathBuf, fsync: bool) -> FileSink {
        FileSink::grouped(name, dir, fsync, group_bytes())
    }

    /// [`FileSink::new`], making documents durable when `group_bytes` wait.
    pub fn grouped(name: &str, dir: PathBuf, fsync: bool, group_bytes: u64) -> FileSink {
        let seq = highest_sequence(&dir);
        FileSink {
            name: name.to_string(),
            dir,
            fsync,
            group_bytes,
            seq,
            pending: Vec::new(),
            pending_bytes: 0,
            oldest: None,
            failed: None,
            lock: None,
        }
    }

    fn io_error(&self, what: &std::path::Path, e: std::io::Error) -> SinkError {
        SinkError::Io { sink: self.name.clone(), reason: format!("{}: {e}", what.display()) }
    }

    fn write(
        &mut self,
        file: &str,
        bytes: u64,
        body: impl FnOnce(&mut std::io::BufWriter<&std::fs::File>) -> std::io::Result<()>,
    ) -> Result<(), SinkError> {
        self.check()?;
        if self.lock.is_none() {
            // The directory appears with the first document (nothing delivered, no directory).
            let lock = lock_dir(&self.dir).map_err(|reason| SinkError::Io { sink: self.name.clone(), reason })?;
            if lock.is_some() {
                remove_unsynced(&self.dir);
            }
            self.lock = Some(lock);
        }
        let path = self.dir.join(file);
        let staged = icicle_core::durable::stage(&path, false, body).map_err(|e| self.io_error(&path, e))?;
        if !self.fsync {
            return staged.commit(false).map_err(|e| self.io_error(&path, e));
        }
        self.pending.push((staged, bytes));
        self.pending_bytes += bytes;
        let oldest = *self.oldest.get_or_insert_with(std::time::Instant::now);
        if self.pending_bytes >= self.group_bytes || oldest.elapsed() >= SYNC_AFTER {
            self.make_durable()?;
        }
        Ok(())
    }

    /// `Err` once a group could not be made durable.
    fn check(&self) -> Result<(), SinkError> {
        match &self.failed {
            Some(reason) => Err(SinkError::Io {
                sink: self.name.clone(),
                reason: format!("an earlier group of documents was lost: {reason}"),
            }),
            None => Ok(()),
        }
    }

    /// fsync every waiting document, rename them into place in order, fsync the directory.
    /// On any failure the waiting documents are removed (nothing acknowledged them) and the
    /// sink fails from then on.
    fn make_durable(&mut self) -> Result<(), SinkError> {
        self.check()?;
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut result = Ok(());
        for (staged, _) in &self.pending {
            let tmp = staged.temporary();
            if let Err(e) = std::fs::File::open(tmp).and_then(|f| f.sync_all()) {
                result = Err(self.io_error(tmp, e));
                break;
            }
        }
        let pending = std::mem::take(&mut self.pending);
        (self.pending_bytes, self.oldest) = (0, None);
        let mut left = pending.into_iter();
        if result.is_ok() {
            for (staged, _) in left.by_ref() {
                let tmp = staged.temporary().to_path_buf();
                if let Err(e) = staged.commit(false) {
                    result = Err(self.io_error(&tmp, e));
                    break;
                }
            }
        }
        if result.is_ok() {
            result = std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(|e| self.io_error(&self.dir, e));
        }
        if let Err(e) = &result {
            for (staged, _) in left {
                let _ = std::fs::remove_file(staged.temporary());
            }
            self.failed = Some(e.to_string());
        }
        result
    }
}

impl Drop for FileSink {
    /// Documents still waiting were never acknowledged: removed, not left hidden.
    fn drop(&mut self) {
        for (staged, _) in self.pending.drain(..) {
            let _ = std::fs::remove_file(staged.temporary());
        }
    }
}

/// An exclusive lock on `dir/.file-sink.lock` (creating `dir`). Another sink holding it is an
/// error (both would number documents from the same sequence and overwrite each other's);
/// a lock that cannot be taken at all (a file system without locks) is `None`, with a warning.
fn lock_dir(dir: &std::path::Path) -> Result<Option<std::fs::File>, String> {
    let path = dir.join(".file-sink.lock");
    let file = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path));
    match file.map(|f| f.try_lock().map(|()| f)) {
        Ok(Ok(f)) => Ok(Some(f)),
        Ok(Err(std::fs::TryLockError::WouldBlock)) => {
            Err(format!("{}: another file sink (another process, or another sink naming this directory) writes here; documents would collide", dir.display()))
        }
        Ok(Err(std::fs::TryLockError::Error(e))) => {
            tracing::warn!(message = "could not lock the file sink's directory", path = %path.display(), error = %e);
            Ok(None)
        }
        Err(e) => {
            tracing::warn!(message = "could not lock the file sink's directory", path = %path.display(), error = %e);
            Ok(None)
        }
    }
}

/// A document's sequence number from its file name (`ingest-N.json`, `delete-N.json`), and
/// whether it is still waiting under its temporary name (`.ingest-N.json.tmp`).
fn document_sequence(name: &str) -> Option<(u64, bool)> {
    let (name, waiting) = match name.strip_prefix('.').and_then(|r| r.strip_suffix(".tmp")) {
        Some(n) => (n, true),
        None => (name, false),
    };
    let rest = name.strip_prefix("ingest-").or_else(|| name.strip_prefix("delete-"))?;
    Some((rest.strip_suffix(".json")?.parse().ok()?, waiting))
}

/// The highest sequence number of the documents in `dir`, waiting ones included.
fn highest_sequence(dir: &std::path::Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| document_sequence(&e.file_name().to_string_lossy()).map(|(n, _)| n))
        .max()
        .unwrap_or(0)
}

#[async_trait]
impl Sink for FileSink {
    async fn deliver(&mut self, batch: &DocumentBatch) -> Result<(), SinkError> {
        match batch {
            DocumentBatch::Ingest(entries) => {
                self.seq += 1;
                let name = format!("ingest-{:06}.json", self.seq);
                self.write(&name, entries.document_bytes() as u64, |w| write_gingest_vectored(w, entries))
            }
            DocumentBatch::Delete(subjects) => {
                self.seq += 1;
                let name = format!("delete-{:06}.json", self.seq);
                let body = delete_body(subjects);
                self.write(&name, body.len() as u64, |w| w.write_all(&body))
            }
        }
    }

    async fn sync(&mut self) -> Result<(), SinkError> {
        self.make_durable()
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.sync().await
    }
}

/// Remove documents a sink that stopped before making them durable left under their
/// temporary names (nothing acknowledged them; the run that resumes sends them again).
fn remove_unsynced(dir: &std::path::Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if document_sequence(&e.file_name().to_string_lossy()).is_some_and(|(_, waiting)| waiting) {
            if let Err(err) = std::fs::remove_file(e.path()) {
                tracing::warn!(message = "could not remove an unsynced document", path = %e.path().display(), error = %err);
            }
        }
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

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        if self.dir.exists() && !self.dir.is_dir() {
            return Err(ctx.invalid("dir", format!("{} exists and is not a directory", self.dir.display())));
        }
        if self.sync_group_bytes == 0 {
            return Err(ctx.invalid("sync_group_bytes", "must be at least 1"));
        }
        Ok(())
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Box<dyn Sink>, ConfigError> {
        self.validate(ctx)?;
        Ok(Box::new(FileSink::grouped(&ctx.id, self.dir, self.fsync, self.sync_group_bytes)))
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

    fn build(self, ctx: &BuildContext<'_>) -> Result<Box<dyn Sink>, ConfigError> {
        self.validate(ctx)?;
        Ok(Box::new(StdoutSink))
    }
}

/// `[sinks.<id>] type = "blackhole"`.
#[derive(Debug, Deserialize)]
pub struct BlackholeSinkConfig {}

/// What a blackhole sink counted.
#[derive(Debug, Default)]
pub struct BlackholeCounts {
    /// Documents delivered (ingest and delete).
    pub batches: AtomicU64,
    /// Entries in the ingest documents.
    pub entries: AtomicU64,
    /// Subjects in the delete documents.
    pub deletes: AtomicU64,
    /// Bytes of every document as it would be sent.
    pub bytes: AtomicU64,
}

/// Counts documents, entries and bytes, and drops them.
#[derive(Default)]
pub struct BlackholeSink {
    /// What it has counted.
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

    fn build(self, ctx: &BuildContext<'_>) -> Result<Box<dyn Sink>, ConfigError> {
        self.validate(ctx)?;
        Ok(Box::new(BlackholeSink::default()))
    }
}

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Sink,
        name: "file",
        description: "one GIngest JSON document per batch (and delete bodies), ready for `globus search ingest`",
        example: "[sinks.out]\ntype = \"file\"\ndir = \"out/\"\nfsync = true\nsync_group_bytes = 268435456\n",
        build: build_component::<FileSinkConfig>, check: icicle_core::registry::check_component::<FileSinkConfig>,
    }
}

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Sink,
        name: "stdout",
        description: "one JSON line per GMetaEntry and per deleted subject",
        example: "[sinks.print]\ntype = \"stdout\"\n",
        build: build_component::<StdoutSinkConfig>, check: icicle_core::registry::check_component::<StdoutSinkConfig>,
    }
}

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Sink,
        name: "blackhole",
        description: "counts documents, entries and bytes and drops them (benchmarks)",
        example: "[sinks.null]\ntype = \"blackhole\"\n",
        build: build_component::<BlackholeSinkConfig>, check: icicle_core::registry::check_component::<BlackholeSinkConfig>,
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
            icicle_core::durable::stage(&path, false, |w| write_gingest_vectored(w, &batch))
                .unwrap()
                .commit(false)
                .unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), want, "{n} entries");
        }
    }

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".file-sink.lock")
            .collect();
        v.sort();
        v
    }

    fn doc(n: usize) -> DocumentBatch {
        let mut b = EntryBatch::default();
        for i in 0..n {
            b.push(format!("{{\"subject\":\"/f{i}\",\"content\":{{\"path\":\"/f{i}\"}}}}").as_bytes());
        }
        DocumentBatch::Ingest(b)
    }

    #[tokio::test]
    async fn a_second_file_sink_on_one_directory_fails_instead_of_colliding() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = FileSink::grouped("a", dir.path().to_path_buf(), false, 1 << 20);
        first.deliver(&doc(1)).await.unwrap();
        let mut second = FileSink::grouped("b", dir.path().to_path_buf(), false, 1 << 20);
        let e = second.deliver(&doc(1)).await.unwrap_err().to_string();
        assert!(e.contains("another file sink") && e.contains(&dir.path().display().to_string()), "{e}");
        assert_eq!(names(dir.path()), ["ingest-000001.json"]);
        drop(first);
        let mut third = FileSink::grouped("c", dir.path().to_path_buf(), false, 1 << 20);
        third.deliver(&doc(1)).await.unwrap();
        assert_eq!(names(dir.path()), ["ingest-000001.json", "ingest-000002.json"]);
    }

    #[tokio::test]
    async fn documents_appear_in_order_only_once_a_group_is_durable() {
        let dir = tempfile::tempdir().unwrap();
        // A document left under its temporary name by a sink that died is not ours to keep.
        std::fs::write(dir.path().join(".ingest-000001.json.tmp"), b"torn").unwrap();
        std::fs::write(dir.path().join("other.tmp"), b"not ours").unwrap();
        let mut sink = FileSink::grouped("f", dir.path().to_path_buf(), true, 1 << 20);
        // Numbered after it, and it is removed at the first delivery.
        sink.deliver(&doc(3)).await.unwrap();
        sink.deliver(&DocumentBatch::Delete(vec!["/f1".into()])).await.unwrap();
        // Waiting, under temporary names: an ingester sees nothing yet.
        assert_eq!(names(dir.path()), [".delete-000003.json.tmp", ".ingest-000002.json.tmp", "other.tmp"]);
        sink.sync().await.unwrap();
        assert_eq!(names(dir.path()), ["delete-000003.json", "ingest-000002.json", "other.tmp"]);
        let index = icicle_gmeta::replay::read_index(dir.path()).unwrap();
        assert_eq!(index.keys().collect::<Vec<_>>(), ["/f0", "/f2"], "applied in order");
        // Past the group size a delivery makes the group durable by itself (one sink at a
        // time writes a directory).
        drop(sink);
        let mut small = FileSink::grouped("f", dir.path().to_path_buf(), true, 10);
        small.deliver(&doc(2)).await.unwrap();
        assert!(names(dir.path()).contains(&"ingest-000004.json".to_string()));
        // Without fsync every document is in place at once.
        drop(small);
        let mut plain = FileSink::grouped("f", dir.path().to_path_buf(), false, 1 << 20);
        plain.deliver(&doc(1)).await.unwrap();
        assert!(names(dir.path()).contains(&"ingest-000005.json".to_string()));
        plain.close().await.unwrap();
        assert!(!names(dir.path()).iter().any(|n| n.ends_with(".json.tmp")));
    }

    #[tokio::test]
    async fn a_group_that_cannot_be_made_durable_fails_the_sink_and_leaves_nothing_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = FileSink::grouped("f", dir.path().to_path_buf(), true, 1 << 20);
        sink.deliver(&doc(1)).await.unwrap();
        sink.deliver(&doc(2)).await.unwrap();
        // Something else removes a waiting document.
        std::fs::remove_file(dir.path().join(".ingest-000001.json.tmp")).unwrap();
        let e = sink.sync().await.unwrap_err().to_string();
        assert!(e.contains(".ingest-000001.json.tmp"), "{e}");
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
        // Nothing after a lost group may be acknowledged.
        assert!(sink.sync().await.is_err());
        assert!(sink.deliver(&doc(1)).await.unwrap_err().to_string().contains("lost"));
        // A sink dropped with documents waiting removes them.
        drop(sink);
        let mut sink = FileSink::grouped("f", dir.path().to_path_buf(), true, 1 << 20);
        sink.deliver(&doc(1)).await.unwrap();
        assert_eq!(names(dir.path()), [".ingest-000001.json.tmp"]);
        // A second sink on the same directory numbers after the waiting document and leaves it.
        let second = FileSink::grouped("g", dir.path().to_path_buf(), true, 1 << 20);
        assert_eq!((second.seq, names(dir.path()).len()), (1, 1));
        drop(second);
        drop(sink);
        assert!(names(dir.path()).is_empty());
    }
}
