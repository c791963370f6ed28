//! Snapshot workers: threads that pop splits from a shared queue, read them through their
//! source into borrowed records, check and classify each, and encode it into chunks sent to
//! the delivery task.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use tokio::sync::mpsc;

use icicle_core::access::{parent_dir, Acl, DirectoryTable, Perm};
use icicle_core::batch::{DocumentLimit, EntryBatch};
use icicle_core::config::{EmitMode, SnapshotSettings};
use icicle_core::error::IcicleError;
use icicle_core::record::{FileRecord, Reject};
use icicle_core::scope::Scope;
use icicle_core::traits::{RowSink, Source, Split};
use icicle_gmeta::{subject_for, PrimaryEncoder};

use super::cluster::Cluster;
use super::duplicates::Duplicates;
use super::manifest::{self, Change, ManifestWriter, PreviousManifest, Sighting};
use super::rejects::RejectLog;
use super::{Progress, RowProcessor, SnapshotJob, SnapshotSummary, CHUNK_BYTES};

#[derive(Default)]
pub(super) struct WorkQueue {
    pub(super) items: VecDeque<(usize, Split)>,
    pub(super) active: usize,
    /// Inputs (splits) planned or discovered, and finished.
    pub(super) planned: u64,
    pub(super) finished: u64,
}

pub(super) struct Shared {
    pub(super) queue: Mutex<WorkQueue>,
    pub(super) ready: Condvar,
    pub(super) cancel: AtomicBool,
    /// The other ranks of a distributed run: splits come from rank 0's queue instead.
    pub(super) cluster: Option<Arc<dyn Cluster>>,
}

impl Shared {
    pub(super) fn pop(&self) -> Option<(usize, Split)> {
        let mut q = self.queue.lock().ok()?;
        loop {
            if self.cancel.load(Ordering::Relaxed) {
                return None;
            }
            if let Some(item) = q.items.pop_front() {
                q.active += 1;
                return Some(item);
            }
            if q.active == 0 {
                return None;
            }
            q = self.ready.wait(q).ok()?;
        }
    }

    /// The first split of a worker.
    pub(super) fn first(&self) -> Option<(usize, Split)> {
        match &self.cluster {
            Some(c) => c.next_split(false, Vec::new()),
            None => self.pop(),
        }
    }

    /// The split after one of `source` that spawned `spawned`.
    pub(super) fn next(&self, spawned: Vec<Split>, source: usize) -> Option<(usize, Split)> {
        match &self.cluster {
            Some(_) if self.cancel.load(Ordering::Relaxed) => None,
            Some(c) => c.next_split(true, spawned.into_iter().map(|s| (source, s)).collect()),
            None => {
                self.done(spawned, source);
                self.pop()
            }
        }
    }

    fn done(&self, spawned: Vec<Split>, source: usize) {
        if let Ok(mut q) = self.queue.lock() {
            q.active -= 1;
            q.finished += 1;
            q.planned += spawned.len() as u64;
            for s in spawned {
                q.items.push_back((source, s));
            }
            let m = icicle_core::metrics::Metrics::global();
            m.set(&icicle_core::metrics::names::SNAPSHOT_INPUTS_DONE, &[], q.finished as f64);
            m.set(&icicle_core::metrics::names::SNAPSHOT_INPUTS_PLANNED, &[], q.planned as f64);
        }
        self.ready.notify_all();
    }
}

#[derive(Default, Clone, Copy)]
pub(super) struct WorkerCounts {
    pub(super) rows: u64,
    pub(super) records: u64,
    pub(super) directories: u64,
    pub(super) rejects: u64,
    pub(super) withdrawn: u64,
    pub(super) emitted: u64,
    pub(super) created: u64,
    pub(super) updated: u64,
    pub(super) unchanged: u64,
    pub(super) splits: u64,
}

pub(super) struct Worker {
    encoder: PrimaryEncoder,
    primary: bool,
    /// Every entry must fit a document of its own.
    limit: DocumentLimit,
    chunk: EntryBatch,
    tx: mpsc::Sender<EntryBatch>,
    rejects: Arc<RejectLog>,
    progress: Arc<dyn Progress>,
    previous: Option<Arc<PreviousManifest>>,
    manifest: Option<ManifestWriter>,
    emit: EmitMode,
    processors: Vec<Box<dyn RowProcessor>>,
    counts: WorkerCounts,
    spawned: Vec<Split>,
    input: String,
    io_error: Option<String>,
    /// Directory permissions decide visibility (the policy's table is filled and read).
    dirs: Option<Arc<DirectoryTable>>,
    /// The last parent directory looked up in `dirs`, and its chain.
    last_parent: Option<(String, Option<Arc<[Perm]>>)>,
    /// Across ranks, a versioned run classifies later, on the rank owning each path: every
    /// record's path hash, fingerprints, whether its entry was encoded and where it was read,
    /// in order.
    keys: Option<Vec<RecordKey>>,
    /// A versioned run: the inputs by number, to say where a row was read (in one process
    /// also where each path was first read, to find paths read twice); with the number of the
    /// current input (once a row of it names its offset).
    duplicates: Option<Arc<Duplicates>>,
    input_number: Option<u32>,
    /// The byte offset of the row being recorded, when its source names it.
    offset: Option<u64>,
}

/// A record of a versioned run across ranks, classified on the rank owning its path.
pub(super) struct RecordKey {
    /// The path's hash.
    pub(super) hash: u128,
    /// Its fingerprint in the previous manifest's scheme and in this release's.
    pub(super) was: u64,
    pub(super) now: u64,
    /// Whether its entry was encoded (held for delivery).
    pub(super) encoded: bool,
    /// Where it was read (inputs numbered by this rank's [`Duplicates`]).
    pub(super) at: Sighting,
}

impl Worker {
    /// The chain of directories above `path` from the table, cached for its siblings.
    fn chain_of(&mut self, path: &str) -> Option<Arc<[Perm]>> {
        let table = self.dirs.as_ref()?;
        let parent = parent_dir(path);
        if let Some((p, c)) = &self.last_parent {
            if p == parent {
                return c.clone();
            }
        }
        let c = table.chain(parent);
        self.last_parent = Some((parent.to_string(), c.clone()));
        c
    }

    pub(super) fn send_chunk(&mut self) {
        if self.chunk.is_empty() {
            return;
        }
        let chunk = std::mem::replace(&mut self.chunk, EntryBatch::with_capacity(CHUNK_BYTES + 4096));
        // A closed channel means the run is being cancelled; the records are not acknowledged.
        let _ = self.tx.blocking_send(chunk);
    }

    /// A row nobody mapped may see (or for whom it is unknown): not indexed, and, read in
    /// full, not carried over either, so a versioned run deletes what an earlier one indexed.
    fn withdraw(&mut self, rec: &FileRecord<'_>, reason: String) {
        static LOGGED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        self.counts.withdrawn += 1;
        self.counts.records -= 1;
        if let Some(n) = icicle_core::log_sample::count_to_log(&LOGGED) {
            tracing::warn!(message = "not indexed: no mapped principal may see it (the first 20 are logged, then one in 10,000)", input = %self.input, path = %rec.path, reason = %reason, seen = n);
        }
    }

    /// Where the current row was read: its input and byte offset when the source names it.
    fn sighting(&mut self) -> Sighting {
        match (self.offset, &self.duplicates) {
            (Some(offset), Some(d)) => {
                let input = *self.input_number.get_or_insert_with(|| d.input(&self.input));
                Sighting::new(input, offset, true)
            }
            _ => Sighting::ELSEWHERE,
        }
    }

    /// Classify a record of a versioned run in one process; `None` when its path was read
    /// before in this run (a reject, resolved when every row is read).
    fn classify(&mut self, rec: &FileRecord<'_>, hash: u128, was: u64, now: u64) -> Option<Change> {
        let prev = self.previous.clone()?;
        if self.duplicates.is_none() {
            return Some(prev.classify_both(hash, was, now));
        }
        let at = self.sighting();
        match prev.classify_at(hash, was, now, at) {
            Ok(change) => Some(change),
            Err(first) => {
                if let Some(d) = &self.duplicates {
                    d.found(hash, rec.path, first, at);
                }
                self.counts.rejects += 1;
                self.counts.records -= 1;
                None
            }
        }
    }

    /// Reject a row that a source read: its path is carried over.
    fn reject_here(&mut self, rec: &FileRecord<'_>, reason: String) {
        self.counts.rejects += 1;
        self.counts.records -= 1;
        // Even a path that fails the checks may name a subject an earlier version indexed.
        let scope = Some(Scope::Exact(rec.path.to_string()));
        self.rejects.push(Reject::row(&self.input, format!("{:?}: {reason}", rec.path), scope));
    }
}

impl RowSink for Worker {
    fn record(&mut self, rec: &FileRecord<'_>) {
        self.record_with_acl(rec, None)
    }

    fn record_at(&mut self, rec: &FileRecord<'_>, offset: u64) {
        self.offset = Some(offset);
        self.record_with_acl(rec, None);
        self.offset = None;
    }

    fn wants_acls(&self) -> bool {
        self.dirs.is_some()
    }

    fn record_with_acl(&mut self, rec: &FileRecord<'_>, acl: Option<Acl>) {
        // Paths are normalised once, here, for every source (a producer's trailing or
        // repeated slashes): only a path that fails the check can need it.
        let checked = rec.check();
        if checked.is_err() {
            if let std::borrow::Cow::Owned(path) = icicle_core::name::normalise(rec.path) {
                let rec = FileRecord { path: &path, ..*rec };
                return self.normalised_record(&rec, acl, rec.check());
            }
        }
        self.normalised_record(rec, acl, checked)
    }

    fn directory(&mut self, rec: &FileRecord<'_>) {
        self.directory_with_acl(rec, None)
    }

    fn directory_with_acl(&mut self, rec: &FileRecord<'_>, acl: Option<Acl>) {
        let checked = rec.check();
        if checked.is_err() {
            if let std::borrow::Cow::Owned(path) = icicle_core::name::normalise(rec.path) {
                let rec = FileRecord { path: &path, ..*rec };
                return self.normalised_directory(&rec, acl, rec.check());
            }
        }
        self.normalised_directory(rec, acl, checked)
    }

    fn reject(&mut self, reject: Reject) {
        self.counts.rows += 1;
        self.counts.rejects += 1;
        self.rejects.push(reject);
    }

    fn progress(&mut self, units: u64) {
        self.progress.inc(units);
    }

    fn spawn(&mut self, split: Split) {
        self.spawned.push(split);
    }

    fn flush(&mut self) {
        self.send_chunk();
    }
}

impl Worker {
    /// [`RowSink::record_with_acl`] of a normalised path.
    fn normalised_record(&mut self, rec: &FileRecord<'_>, acl: Option<Acl>, checked: Result<(), String>) {
        self.counts.rows += 1;
        self.counts.records += 1;
        if let Err(e) = checked {
            return self.reject_here(rec, e);
        }
        for p in &mut self.processors {
            p.record(rec);
        }
        if !self.primary {
            return;
        }
        let chain = self.chain_of(rec.path);
        let vis = match self.encoder.visible_to_in(rec, acl.map(Arc::new), chain.as_ref()) {
            Ok(v) => v,
            Err(e) => return self.withdraw(rec, e),
        };
        if self.keys.is_some() && self.manifest.is_some() {
            let hash = manifest::path_hash(rec.path);
            // Classified by the owning rank against the previous manifest's scheme.
            let (was, now) = self
                .previous
                .as_ref()
                .map_or_else(|| (0, manifest::fingerprint(rec, &vis)), |p| p.fingerprints(rec, &vis));
            let at = self.sighting();
            self.keys.get_or_insert_with(Vec::new).push(RecordKey { hash, was, now, encoded: false, at });
            if let Some(Err(e)) =
                self.manifest.as_mut().map(|m| m.push(hash, now, &subject_for(rec.path), Some(rec.path)))
            {
                self.io_error.get_or_insert(format!("writing the manifest: {e}"));
            }
        } else if let (Some(prev), Some(_)) = (&self.previous, &self.manifest) {
            let hash = manifest::path_hash(rec.path);
            let (was, fp) = prev.fingerprints(rec, &vis);
            let Some(change) = self.classify(rec, hash, was, fp) else { return };
            match change {
                Change::Created => self.counts.created += 1,
                Change::Updated => self.counts.updated += 1,
                Change::Unchanged => self.counts.unchanged += 1,
            }
            if let Some(m) = &mut self.manifest {
                if let Err(e) = m.push(hash, fp, &subject_for(rec.path), Some(rec.path)) {
                    self.io_error.get_or_insert(format!("writing the manifest: {e}"));
                }
            }
            if change == Change::Unchanged && self.emit == EmitMode::Changed {
                return;
            }
        }
        let buf = self.chunk.buffer();
        let before = buf.len();
        self.encoder.encode_with(rec, &vis, buf);
        if icicle_gmeta::entry_fits(&self.limit, &buf[before..]) {
            self.chunk.commit();
            self.counts.emitted += 1;
            if let Some(k) = self.keys.as_mut().and_then(|k| k.last_mut()) {
                k.encoded = true;
            }
        } else {
            self.chunk.rollback();
            self.reject_here(rec, "entry exceeds the maximum document size".into());
        }
        if self.chunk.content_bytes() >= CHUNK_BYTES {
            self.send_chunk();
        }
    }

    /// [`RowSink::directory_with_acl`] of a normalised path.
    fn normalised_directory(&mut self, rec: &FileRecord<'_>, acl: Option<Acl>, checked: Result<(), String>) {
        self.counts.rows += 1;
        self.counts.directories += 1;
        if let Err(e) = checked {
            self.counts.directories -= 1;
            self.counts.records += 1;
            return self.reject_here(rec, e);
        }
        if let Some(t) = &self.dirs {
            t.insert(
                rec.path,
                Perm { mode: rec.attrs.mode, uid: rec.attrs.uid, gid: rec.attrs.gid, acl: acl.map(Arc::new) },
            );
        }
    }
}

pub(super) fn worker_count(settings: &SnapshotSettings) -> usize {
    if settings.workers > 0 {
        settings.workers
    } else {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
    }
}

/// What a worker thread returns: its counts, the first I/O error it met, and the record keys
/// of a versioned run across ranks.
pub(super) type WorkerResult = (WorkerCounts, Option<String>, Vec<RecordKey>);

/// Start `nworkers` worker threads reading splits from `shared` and sending chunks on `tx`.
#[allow(clippy::too_many_arguments)]
pub(super) fn spawn(
    job: &SnapshotJob,
    settings: &SnapshotSettings,
    nworkers: usize,
    shared: &Arc<Shared>,
    previous: &Option<Arc<PreviousManifest>>,
    rejects: &Arc<RejectLog>,
    duplicates: &Arc<Duplicates>,
    tx: mpsc::Sender<EntryBatch>,
) -> Result<Vec<std::thread::JoinHandle<WorkerResult>>, IcicleError> {
    let mut handles = Vec::new();
    for w in 0..nworkers {
        // Across ranks every rank writes its own parts into the shared manifest directory.
        let part = shared.cluster.as_ref().map_or(w, |c| super::distributed::worker_part(c.rank()) + w);
        let manifest_writer = match (&settings.state_dir, &previous) {
            (Some(dir), Some(_)) => {
                Some(ManifestWriter::create(dir, part).map_err(|e| super::io("creating the manifest", e))?)
            }
            _ => None,
        };
        let mut worker = Worker {
            encoder: PrimaryEncoder::new(job.policy.clone()),
            primary: job.primary,
            limit: settings.document_limit(),
            chunk: EntryBatch::with_capacity(CHUNK_BYTES + 4096),
            tx: tx.clone(),
            rejects: rejects.clone(),
            progress: job.progress.clone(),
            previous: previous.clone(),
            manifest: manifest_writer,
            emit: settings.emit,
            processors: job.processors.iter().map(|f| f.make(w)).collect(),
            counts: WorkerCounts::default(),
            spawned: Vec::new(),
            input: String::new(),
            io_error: None,
            dirs: job.policy.access.map(|_| job.policy.dirs.clone()),
            last_parent: None,
            keys: (shared.cluster.is_some() && previous.is_some()).then(Vec::new),
            duplicates: previous.is_some().then(|| duplicates.clone()),
            input_number: None,
            offset: None,
        };
        let shared = shared.clone();
        let sources: Vec<Arc<dyn Source>> = job.sources.iter().map(|(_, s)| s.clone()).collect();
        let source_names: Vec<String> = job.sources.iter().map(|(n, _)| n.clone()).collect();
        let handle = std::thread::Builder::new()
            .name(format!("icicle-worker-{w}"))
            .spawn(move || {
                let mut next = shared.first();
                while let Some((si, split)) = next {
                    worker.input = split.name.clone();
                    worker.input_number = None;
                    worker.counts.splits += 1;
                    let (rows_before, emitted_before) = (worker.counts.rows, worker.counts.emitted);
                    if let Err(e) = sources[si].read(&split, &mut worker) {
                        let scope = Some(split.scope.clone().unwrap_or(Scope::All));
                        worker.reject(Reject::whole(&split.name, e.to_string(), scope));
                    }
                    // Hand over what this split produced, so that a slow or streaming source
                    // never holds records back from the flush timer.
                    worker.send_chunk();
                    let m = icicle_core::metrics::Metrics::global();
                    let (rows, emitted) =
                        ((worker.counts.rows - rows_before) as f64, (worker.counts.emitted - emitted_before) as f64);
                    m.add(&icicle_core::metrics::names::SNAPSHOT_ROWS_TOTAL, &[("source", &source_names[si])], rows);
                    // The overview's in and out, as a monitor's are counted.
                    m.add(&icicle_core::metrics::names::RECORDS_IN_TOTAL, &[("component", &source_names[si])], rows);
                    m.add(
                        &icicle_core::metrics::names::RECORDS_OUT_TOTAL,
                        &[("component", &source_names[si]), ("op", "update")],
                        emitted,
                    );
                    let spawned = std::mem::take(&mut worker.spawned);
                    next = shared.next(spawned, si);
                }
                worker.send_chunk();
                let mut io_error = worker.io_error.take();
                if let Some(m) = worker.manifest.take() {
                    if let Err(e) = m.finish() {
                        io_error.get_or_insert(format!("writing the manifest: {e}"));
                    }
                }
                for p in worker.processors.drain(..) {
                    p.finish();
                }
                (worker.counts, io_error, worker.keys.take().unwrap_or_default())
            })
            .map_err(|e| super::io("starting a worker", e))?;
        handles.push(handle);
    }
    Ok(handles)
}

/// Wait for every worker; add their counts to `summary`; returns their I/O errors and the
/// record keys of a versioned run across ranks.
pub(super) fn join(
    handles: Vec<std::thread::JoinHandle<WorkerResult>>,
    summary: &mut SnapshotSummary,
) -> (Vec<String>, Vec<RecordKey>) {
    let mut io_errors = Vec::new();
    let mut keys = Vec::new();
    for h in handles {
        match h.join() {
            Ok((c, e, k)) => {
                keys.extend(k);
                summary.rows += c.rows;
                summary.records += c.records;
                summary.directories += c.directories;
                summary.rejects += c.rejects;
                summary.withdrawn += c.withdrawn;
                summary.emitted += c.emitted;
                summary.created += c.created;
                summary.updated += c.updated;
                summary.unchanged += c.unchanged;
                summary.splits += c.splits;
                io_errors.extend(e);
            }
            Err(_) => io_errors.push("a worker thread panicked".to_string()),
        }
    }
    (io_errors, keys)
}
