//! The snapshot engine: worker threads read splits in parallel and encode primary records;
//! one async task assembles bounded documents and delivers them to every sink; the run is
//! acknowledged (manifest committed, sources told) only after every sink delivered.
//!
//! This file holds the run ([`run`]): planning, the delivery task and the finish, with the
//! hooks it takes ([`Progress`], [`RowProcessor`], [`PipelineFinisher`]). Beside it:
//! - `worker`: the threads that read, check, classify and encode;
//! - `dirpass`: the directory pre-pass of a run whose visibility follows directory permissions;
//! - [`rejects`]: the reject log;
//! - [`manifest`] (with `sighting`): what a versioned run delivered, for the next run to compare;
//! - `duplicates`: paths a versioned run reads more than once;
//! - `deletes`: what a versioned run deletes, and the deletion guard;
//! - `spool`: documents held on disk until the run's checks have passed;
//! - [`cluster`], `distributed`, `repeated`: a run across MPI ranks;
//! - [`pipelines`]: the counting and aggregate pipelines that run beside the read.

pub mod cluster;
mod deletes;
mod delivery;
mod dirpass;
mod distributed;
mod duplicates;
pub mod manifest;
pub mod pipelines;
pub mod rejects;
mod repeated;
mod sighting;
mod spool;
mod worker;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::mpsc;

use icicle_core::batch::{DocumentBatch, EntryBatch};
use icicle_core::config::SnapshotSettings;
use icicle_core::durable::StateLock;
use icicle_core::error::IcicleError;
use icicle_core::policy::RecordPolicy;
use icicle_core::record::FileRecord;
use icicle_core::scope::{UnknownScope, UnknownScopes};
use icicle_core::traits::{Source, Split};
use icicle_gmeta::{delete_batches, Batcher};

use cluster::Cluster;
pub use delivery::SinkDelivery;
use manifest::PreviousManifest;
use rejects::RejectLog;
use spool::Outbox;
use worker::{worker_count, Shared, WorkQueue};

/// Entries are handed from workers to the batcher in chunks of about this many bytes.
pub(super) const CHUNK_BYTES: usize = 256 << 10;

/// Progress reporting for snapshot runs (a terminal progress bar, log lines, or nothing).
pub trait Progress: Send + Sync {
    /// Total units planned (0 when unknown).
    fn start(&self, total: u64);
    /// Units completed.
    fn inc(&self, units: u64);
    /// The run is over.
    fn finish(&self);
    /// Sink `sink` begins or ends delivering a document (`done.busy`), with what it delivered
    /// so far: how a run whose reading is over tells that it is still delivering.
    fn delivery(&self, _sink: &str, _done: &SinkDelivery) {}
}

/// Progress that also keeps the metrics registry current: units done and planned, rate and
/// the estimated time left (`icicle_snapshot_*`), at most every quarter second.
pub struct MetricsProgress {
    inner: Arc<dyn Progress>,
    done: std::sync::atomic::AtomicU64,
    total: std::sync::atomic::AtomicU64,
    last_ms: std::sync::atomic::AtomicU64,
    started: Instant,
}

impl MetricsProgress {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn Progress>) -> MetricsProgress {
        use std::sync::atomic::AtomicU64;
        MetricsProgress {
            inner,
            done: AtomicU64::new(0),
            total: AtomicU64::new(0),
            last_ms: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    fn publish(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let (done, total) = (self.done.load(Relaxed) as f64, self.total.load(Relaxed) as f64);
        let secs = self.started.elapsed().as_secs_f64().max(1e-9);
        let m = icicle_core::metrics::Metrics::global();
        m.set(&icicle_core::metrics::names::SNAPSHOT_WORK_DONE_UNITS, &[], done);
        m.set(&icicle_core::metrics::names::SNAPSHOT_WORK_PLANNED_UNITS, &[], total);
        let eta = if done > 0.0 && total >= done { (total - done) * secs / done } else { -1.0 };
        m.set(&icicle_core::metrics::names::SNAPSHOT_ETA_SECONDS, &[], eta);
    }
}

impl Progress for MetricsProgress {
    fn start(&self, total: u64) {
        self.total.store(total, std::sync::atomic::Ordering::Relaxed);
        self.publish();
        self.inner.start(total);
    }

    fn inc(&self, units: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.done.fetch_add(units, Relaxed);
        let now = self.started.elapsed().as_millis() as u64;
        let last = self.last_ms.load(Relaxed);
        if now >= last + 250 && self.last_ms.compare_exchange(last, now, Relaxed, Relaxed).is_ok() {
            self.publish();
        }
        self.inner.inc(units);
    }

    fn finish(&self) {
        self.publish();
        self.inner.finish();
    }

    fn delivery(&self, sink: &str, done: &SinkDelivery) {
        self.inner.delivery(sink, done);
    }
}

/// Progress that reports nothing.
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _: u64) {}
    fn inc(&self, _: u64) {}
    fn finish(&self) {}
}

/// Extra per-row work run by each worker next to the primary records (counting, aggregates).
pub trait RowProcessor: Send {
    /// See one file or link record.
    fn record(&mut self, rec: &FileRecord<'_>);
    /// Called once when the worker is done.
    fn finish(self: Box<Self>);
}

/// Makes one [`RowProcessor`] per worker.
pub trait RowProcessorFactory: Send + Sync {
    /// The processor of worker thread number `worker` (from 0).
    fn make(&self, worker: usize) -> Box<dyn RowProcessor>;
}

/// A pipeline that produces its output once every row has been seen (counting, aggregate).
/// Versioned runs remember the subjects of its entries and delete those that disappear.
pub trait PipelineFinisher: Send + Sync {
    /// The pipeline's name in the summary.
    fn name(&self) -> &'static str;
    /// Produce entries to deliver (GMetaEntry JSON) and a report for the summary.
    fn finish(&self, policy: &Arc<RecordPolicy>) -> Result<(Vec<Vec<u8>>, serde_json::Value), String>;
    /// In a distributed run, before [`PipelineFinisher::finish`] (collective, every rank):
    /// move partial state so that each principal's is on one rank.
    fn distribute(&self, _cluster: &dyn Cluster) -> Result<(), String> {
        Ok(())
    }
    /// Entries for the sinks reserved to this pipeline ([`SnapshotJob::count_sinks`]), made
    /// after [`PipelineFinisher::finish`]; delivered once the run's own deliveries succeeded.
    fn side_entries(&self, _policy: &Arc<RecordPolicy>) -> Vec<Vec<u8>> {
        Vec::new()
    }
}

/// Everything a snapshot run needs.
pub struct SnapshotJob {
    /// The sources to read, by name; their splits are planned and read in parallel.
    pub sources: icicle_core::traits::NamedSources,
    /// The sinks every document is delivered to, by name.
    pub sinks: icicle_core::traits::NamedSinks,
    /// The sinks of `[counting] sinks`: they receive the pipelines' side entries (the
    /// per-shard counts) and nothing else.
    pub count_sinks: icicle_core::traits::NamedSinks,
    /// Who may see each record, and the snapshot version written into it.
    pub policy: Arc<RecordPolicy>,
    /// The `[snapshot]` settings: workers, document size, thresholds, `state_dir`, emit mode.
    pub settings: SnapshotSettings,
    /// Where progress in units of work (the splits' weights) is reported.
    pub progress: Arc<dyn Progress>,
    /// Extra per-row work, one processor per worker from each factory.
    pub processors: Vec<Arc<dyn RowProcessorFactory>>,
    /// Run after all rows were read; their entries are delivered after the primary records.
    pub finishers: Vec<Arc<dyn PipelineFinisher>>,
    /// Whether primary records are produced at all.
    pub primary: bool,
    /// The other ranks when the run is spread over several processes (MPI): rank 0 plans and
    /// hands out splits, each rank delivers what it read, the pipelines shuffle by principal.
    pub cluster: Option<Arc<dyn Cluster>>,
}

/// The outcome of a snapshot run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SnapshotSummary {
    /// Rows read: records + directories + rejects.
    pub rows: u64,
    /// File and link records read that passed the checks and were not withdrawn.
    pub records: u64,
    /// Directory rows read (not indexed as records).
    pub directories: u64,
    /// Rows and whole inputs set aside in the reject log (see `rejects_file`).
    pub rejects: u64,
    /// Entries the sinks set aside in their dead-letter files (refused on their own).
    pub dead_lettered: u64,
    /// Records not indexed because no mapped principal may see them (a versioned run deletes
    /// what an earlier run indexed of them).
    pub withdrawn: u64,
    /// Records sent to the sinks.
    pub emitted: u64,
    /// Splits the workers read.
    pub splits: u64,
    /// Ingest documents sent or held for the sinks (primary records, then pipeline entries).
    pub batches: u64,
    /// Size of those documents in bytes.
    pub bytes: u64,
    /// Delete documents delivered.
    pub delete_batches: u64,
    /// Wall-clock duration of the run in seconds.
    pub seconds: f64,
    /// `rows` per second of the run.
    pub rows_per_s: f64,
    /// Whether the run is versioned (has a `state_dir`); the counts below are 0 when not.
    pub versioned: bool,
    /// Records whose path the previous run did not hold.
    pub created: u64,
    /// Records whose content changed since the previous run.
    pub updated: u64,
    /// Records whose content is as the previous run indexed it.
    pub unchanged: u64,
    /// Subjects of the previous run that are gone, sent as deletes.
    pub deleted: u64,
    /// Deletes withheld because the input covering them could not be read.
    pub deletes_withheld: u64,
    /// Of the rejects, whole inputs (files, databases, directories) that could not be read.
    pub unreadable_inputs: u64,
    /// Whether rejects exceeded the configured threshold.
    pub reject_threshold_exceeded: bool,
    /// Where the rejects were written (`None` when there were none).
    pub rejects_file: Option<PathBuf>,
    /// Aggregate records delivered.
    pub aggregate_records: u64,
    /// Aggregate subjects of the last delivered run that are gone, sent as deletes.
    pub aggregates_deleted: u64,
    /// Aggregate deletes withheld because an input could not be read.
    pub aggregate_deletes_withheld: u64,
    /// What each sink delivered (documents, entries, bytes, seconds, dead letters) and its own
    /// facts under `sink` (Globus: requests, retries, tasks and their ids), by sink name.
    pub sinks: std::collections::BTreeMap<String, serde_json::Value>,
    /// Reports of the counting and aggregate pipelines.
    pub pipelines: std::collections::BTreeMap<String, serde_json::Value>,
    /// What could not be read (at most 50 lines, broadest first): the previous run's
    /// subjects there were carried over, not deleted.
    pub unknown_scopes: Vec<UnknownScope>,
    /// How many distinct scopes were unknown.
    pub unknown_scope_count: u64,
    /// Documents a versioned run held back and never delivered because a check failed.
    pub batches_withheld: u64,
    /// Why the deletion guard stopped the run (nothing delivered or deleted, manifest kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delete_guard: Option<String>,
    /// Versioned runs in a row, this one included, that withheld deletes (0: this one did not).
    pub withheld_runs: u32,
    /// Why the run fails for withholding deletes too long (`snapshot.max_withheld_runs`):
    /// delivered and committed, exit code 5.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub withheld_too_long: Option<String>,
}

/// An I/O failure of the run itself (state files, threads), with what was being done.
fn io(what: &str, e: std::io::Error) -> IcicleError {
    IcicleError::Internal(format!("{what}: {e}"))
}

/// Run a snapshot job to completion.
pub async fn run(mut job: SnapshotJob) -> Result<SnapshotSummary, IcicleError> {
    let started = Instant::now();
    job.progress = Arc::new(MetricsProgress::new(job.progress.clone()));
    job.sinks = delivery::count(std::mem::take(&mut job.sinks), &job.progress);
    job.count_sinks = delivery::count(std::mem::take(&mut job.count_sinks), &job.progress);
    let settings = job.settings.clone();
    let (previous, _state_lock) = open_previous(&settings, job.primary, job.cluster.as_deref())?;
    let shared = Arc::new(Shared {
        queue: Mutex::new(WorkQueue::default()),
        ready: std::sync::Condvar::new(),
        cancel: Default::default(),
        cluster: job.cluster.clone(),
    });
    let rejects = Arc::new(RejectLog::default());
    let total = plan(&job, &settings, &shared).await?;
    let planning_rejects = rejects.count();
    job.progress.start(total);

    let (tx, rx) = mpsc::channel::<EntryBatch>(16);
    // A rank reads with one thread (more ranks per node instead).
    let nworkers = if job.cluster.is_some() { 1 } else { worker_count(&settings) };
    let duplicates = Arc::new(duplicates::Duplicates::default());
    let handles = worker::spawn(&job, &settings, nworkers, &shared, &previous, &rejects, &duplicates, tx)?;

    // A versioned run holds its documents until its checks have passed, so one that fails
    // them delivers nothing.
    let outbox = match (&settings.state_dir, &previous, &job.cluster) {
        (Some(dir), Some(_), Some(c)) => {
            Outbox::held(&dir.join(format!("spool-rank-{}", c.rank()))).map_err(|e| io("creating the spool", e))?
        }
        (Some(dir), Some(_), None) => Outbox::held(dir).map_err(|e| io("creating the spool", e))?,
        _ => Outbox::direct(),
    };
    let mut out = Documents {
        outbox,
        batcher: Batcher::within(settings.document_limit()),
        full: Vec::new(),
        oversized: Vec::new(),
    };
    let mut summary = SnapshotSummary { versioned: previous.is_some(), ..Default::default() };
    let delivery = out.primary(rx, &mut job.sinks, &settings, &mut summary).await;
    if delivery.is_err() {
        shared.cancel.store(true, Ordering::Relaxed);
        shared.ready.notify_all();
    }
    let (io_errors, keys) = worker::join(handles, &mut summary);
    delivery?;
    if let Some(e) = io_errors.into_iter().next() {
        return Err(IcicleError::Internal(e));
    }
    if !out.oversized.is_empty() {
        return Err(IcicleError::Internal(format!(
            "{} entries larger than a document reached the batcher",
            out.oversized.len()
        )));
    }
    summary.rows += planning_rejects;
    summary.rejects += planning_rejects;
    let pipeline_subjects = out.pipelines(&mut job, previous.is_some(), &mut summary).await?;
    match (job.cluster.clone(), &settings.state_dir, previous.as_deref()) {
        (Some(c), Some(dir), Some(prev)) => {
            // Paths read more than once become rejects here, before the reject ceiling.
            let rows = repeated::RankRows {
                dir,
                part: distributed::worker_part(c.rank()),
                inputs: &duplicates,
                rejects: &rejects,
            };
            let send = distributed::classify(c.as_ref(), prev, &keys, &rows, settings.emit, &mut summary)?;
            distributed::check_rejects(c.as_ref(), &settings, &rejects, &mut summary)?;
            distributed::finish(
                &mut job,
                c.as_ref(),
                dir,
                prev,
                &rejects,
                out.outbox,
                &pipeline_subjects,
                &send,
                &mut summary,
            )
            .await?;
        }
        _ => {
            let left_out = match (previous.as_deref(), Arc::into_inner(duplicates)) {
                (Some(prev), Some(d)) => d.resolve(prev, settings.emit, &rejects, &mut summary),
                _ => Default::default(),
            };
            check_rejects(&settings, &rejects, &mut summary);
            let held = Held { outbox: out.outbox, left_out };
            finish(
                &mut job,
                &settings,
                previous.as_deref(),
                &rejects,
                held,
                &pipeline_subjects,
                nworkers,
                &mut summary,
            )
            .await?;
        }
    }
    deliver_side(&mut job, &settings, &mut summary).await?;
    job.progress.finish();
    summary.dead_lettered = job.sinks.iter().map(|(_, k)| k.dead_lettered().len() as u64).sum();
    summary.sinks = delivery::facts(&job.sinks);
    summary.sinks.extend(delivery::facts(&job.count_sinks));

    if summary.rejects > 0 {
        let path = settings
            .rejects_file
            .clone()
            .unwrap_or_else(|| settings.state_dir.clone().unwrap_or_else(|| PathBuf::from(".")).join("rejects.jsonl"));
        rejects.write(&path).map_err(|e| io(&format!("writing {}", path.display()), e))?;
        summary.rejects_file = Some(path);
    }
    summary.seconds = started.elapsed().as_secs_f64();
    summary.rows_per_s = if summary.seconds > 0.0 { summary.rows as f64 / summary.seconds } else { 0.0 };
    Ok(summary)
}

/// The previous manifest of a versioned run (a primary run with `state_dir`), after locking
/// the state (`snapshot.lock`, held while the run lasts) and starting this run's manifest.
/// Across ranks rank 0 locks and starts the manifest, and each rank loads its share.
fn open_previous(
    settings: &SnapshotSettings,
    primary: bool,
    cluster: Option<&dyn Cluster>,
) -> Result<(Option<Arc<PreviousManifest>>, Option<StateLock>), IcicleError> {
    let Some(dir) = settings.state_dir.as_ref().filter(|_| primary) else { return Ok((None, None)) };
    let mut lock = None;
    if cluster.is_none_or(|c| c.rank() == 0) {
        std::fs::create_dir_all(dir).map_err(|e| io(&format!("creating {}", dir.display()), e))?;
        lock = Some(StateLock::acquire(&dir.join("snapshot.lock")).map_err(|e| io("locking the state directory", e))?);
        manifest::begin(dir).map_err(|e| io("starting the manifest", e))?;
    }
    let share = match cluster {
        Some(c) => {
            c.all_sum(&[])
                .map_err(|e| IcicleError::Internal(format!("waiting for rank 0 to start the manifest: {e}")))?;
            Some((c.rank(), c.size()))
        }
        None => None,
    };
    Ok((
        Some(Arc::new(PreviousManifest::load_share(dir, share).map_err(|e| io("loading the previous manifest", e))?)),
        lock,
    ))
}

/// Plan every source's splits into the work queue (after the directory pre-pass when
/// visibility follows directory permissions); returns their total weight.
async fn plan(job: &SnapshotJob, settings: &SnapshotSettings, shared: &Shared) -> Result<u64, IcicleError> {
    let mut total = 0u64;
    // Under a cluster rank 0's plan is the run's; the others plan too (a source may keep what
    // its plan found, as the s3 source keeps object sizes and ETags) and take splits from it.
    if shared.cluster.as_ref().is_some_and(|c| c.rank() != 0) {
        for (name, src) in &job.sources {
            src.plan().await.map_err(|e| {
                IcicleError::Internal(format!("source `{name}` could not be planned (nothing was delivered): {e}"))
            })?;
        }
        if job.policy.access.is_some() {
            prepass(job, settings, shared, None).await?;
        }
        return Ok(0);
    }
    let mut planned = Vec::new();
    for (i, (name, src)) in job.sources.iter().enumerate() {
        match src.plan().await {
            Ok(splits) => {
                total += splits.iter().map(|s| s.weight).sum::<u64>();
                planned.extend(splits.into_iter().map(|s| (i, s)));
            }
            Err(e) => {
                tracing::error!(message = "source could not be planned", source = %name, error = %e);
                return Err(IcicleError::Internal(format!(
                    "source `{name}` could not be planned (nothing was delivered): {e}"
                )));
            }
        }
    }
    if let Some(c) = &shared.cluster {
        spread(&job.sources, &mut planned, c.size());
    }
    if job.policy.access.is_some() {
        prepass(job, settings, shared, Some(planned.clone())).await?;
    }
    if let Some(c) = &shared.cluster {
        c.seed(planned);
        return Ok(total);
    }
    if let Ok(mut q) = shared.queue.lock() {
        q.planned += planned.len() as u64;
        icicle_core::metrics::Metrics::global().set(
            &icicle_core::metrics::names::SNAPSHOT_INPUTS_PLANNED,
            &[],
            q.planned as f64,
        );
        q.items.extend(planned);
    }
    Ok(total)
}

/// The pipelines' side entries (the per-shard counts) to the sinks reserved to them, once
/// the run's own deliveries and commit succeeded and its checks passed; then those sinks close.
async fn deliver_side(
    job: &mut SnapshotJob,
    settings: &SnapshotSettings,
    summary: &mut SnapshotSummary,
) -> Result<(), IcicleError> {
    if job.count_sinks.is_empty() {
        return Ok(());
    }
    if !summary.reject_threshold_exceeded && summary.delete_guard.is_none() {
        let mut chunk = EntryBatch::default();
        let mut n = 0u64;
        for f in &job.finishers {
            for e in f.side_entries(&job.policy) {
                chunk.push(&e);
                n += 1;
            }
        }
        crate::deliver::deliver_emit(&mut job.count_sinks, &chunk, Vec::new(), settings.document_limit()).await?;
        if let Some(serde_json::Value::Object(c)) = summary.pipelines.get_mut("counting") {
            // The counts sent, the end marker aside.
            c.insert("messages".into(), n.saturating_sub(1).into());
        }
    }
    for (_, sink) in job.count_sinks.iter_mut() {
        sink.close().await?;
    }
    Ok(())
}

/// Splits per reader a run across ranks aims at, so a small input still reaches every rank.
const SPLITS_PER_RANK: usize = 4;
/// The smallest piece a split is cut into to reach every rank.
const SMALLEST_PIECE: u64 = 64 << 10;

/// Across `ranks` ranks, when the plan has fewer than [`SPLITS_PER_RANK`] splits per rank, cut
/// the splits that can be cut ([`Source::divide`]) into pieces of the total weight over that
/// many (at least [`SMALLEST_PIECE`] bytes): `split_bytes` is an upper bound.
fn spread(sources: &icicle_core::traits::NamedSources, planned: &mut Vec<(usize, Split)>, ranks: usize) {
    let want = ranks.saturating_mul(SPLITS_PER_RANK);
    if ranks < 2 || planned.len() >= want {
        return;
    }
    let total: u64 = planned.iter().map(|(_, s)| s.weight).sum();
    let piece = (total / want as u64).max(SMALLEST_PIECE);
    let before = planned.len();
    let mut out = Vec::with_capacity(want);
    for (i, s) in planned.drain(..) {
        match (s.weight > piece).then(|| sources[i].1.divide(&s, piece)).flatten() {
            Some(parts) => out.extend(parts.into_iter().map(|p| (i, p))),
            None => out.push((i, s)),
        }
    }
    if out.len() > before {
        tracing::info!(
            message = "splits cut smaller to reach every rank",
            ranks,
            planned = before,
            splits = out.len(),
            piece_bytes = piece
        );
    }
    *planned = out;
}

/// Visibility follows directory permissions: read the directory rows of `planned` (rank 0's
/// plan; `None` on the other ranks) before any file is judged; across ranks every rank ends
/// with every rank's directories.
async fn prepass(
    job: &SnapshotJob,
    settings: &SnapshotSettings,
    shared: &Shared,
    planned: Option<Vec<(usize, Split)>>,
) -> Result<(), IcicleError> {
    let sources: Vec<Arc<dyn Source>> = job.sources.iter().map(|(_, s)| s.clone()).collect();
    let (table, n, cluster) = (job.policy.dirs.clone(), worker_count(settings), shared.cluster.clone());
    let c = tokio::task::spawn_blocking(move || match cluster {
        Some(c) => dirpass::collect_directories_across(c.as_ref(), &sources, planned, &table),
        None => Ok(dirpass::collect_directories(&sources, planned.unwrap_or_default(), &table, n, false)),
    })
    .await
    .map_err(|e| IcicleError::Internal(format!("the directory pre-pass: {e}")))?
    .map_err(|e| IcicleError::Internal(format!("the directory pre-pass across ranks: {e}")))?;
    if c.splits > 0 && shared.cluster.as_ref().is_none_or(|c| c.rank() == 0) {
        let all_unknown = job.policy.dirs.is_unplaced();
        tracing::info!(
            message = "directory permissions read",
            splits = c.splits,
            directories = job.policy.dirs.len(),
            unreadable = c.failed,
            all_unknown
        );
    }
    Ok(())
}

/// Documents on their way to the sinks.
struct Documents {
    outbox: Outbox,
    batcher: Batcher,
    full: Vec<EntryBatch>,
    oversized: Vec<Vec<u8>>,
}

impl Documents {
    /// Send the full documents, counting them.
    async fn send_full(
        &mut self,
        sinks: &mut icicle_core::traits::NamedSinks,
        summary: &mut SnapshotSummary,
    ) -> Result<(), IcicleError> {
        for doc in self.full.drain(..) {
            summary.batches += 1;
            summary.bytes += doc.document_bytes() as u64;
            self.outbox.send(sinks, doc).await?;
        }
        Ok(())
    }

    /// Pack the workers' chunks into documents and send them; a partial document goes after
    /// `flush_interval_secs` without filling.
    async fn primary(
        &mut self,
        mut rx: mpsc::Receiver<EntryBatch>,
        sinks: &mut icicle_core::traits::NamedSinks,
        settings: &SnapshotSettings,
        summary: &mut SnapshotSummary,
    ) -> Result<(), IcicleError> {
        let flush_after = icicle_core::time::secs(settings.flush_interval_secs.max(0.05));
        let mut ticker = tokio::time::interval(flush_after / 4);
        let mut pending_since: Option<Instant> = None;
        loop {
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(chunk) => {
                        self.batcher.push_chunk(&chunk, &mut self.full, &mut self.oversized);
                        if self.batcher.has_pending() && pending_since.is_none() {
                            pending_since = Some(Instant::now());
                        }
                        if !self.full.is_empty() {
                            self.send_full(sinks, summary).await?;
                            pending_since = self.batcher.has_pending().then(Instant::now);
                        }
                    }
                    None => break,
                },
                _ = ticker.tick() => {
                    if pending_since.is_some_and(|t| t.elapsed() >= flush_after) {
                        self.full.extend(self.batcher.flush());
                        self.send_full(sinks, summary).await?;
                        pending_since = None;
                    }
                }
            }
        }
        self.full.extend(self.batcher.flush());
        self.send_full(sinks, summary).await
    }

    /// The counting and aggregate outputs, after the primary records; returns each
    /// pipeline's subjects (for a versioned run's deletes).
    async fn pipelines(
        &mut self,
        job: &mut SnapshotJob,
        versioned: bool,
        summary: &mut SnapshotSummary,
    ) -> Result<Vec<(&'static str, Vec<String>)>, IcicleError> {
        let mut pipeline_subjects = Vec::new();
        for f in &job.finishers {
            if let Some(c) = &job.cluster {
                f.distribute(c.as_ref())
                    .map_err(|e| IcicleError::Internal(format!("{} pipeline across ranks: {e}", f.name())))?;
            }
            let (entries, report) =
                f.finish(&job.policy).map_err(|e| IcicleError::Internal(format!("{} pipeline: {e}", f.name())))?;
            summary.pipelines.insert(f.name().to_string(), report);
            if versioned {
                let subjects = entries.iter().map(|e| deletes::entry_subject(e)).collect::<Result<Vec<_>, _>>();
                let subjects = subjects.map_err(|e| {
                    IcicleError::Internal(format!("{} pipeline: an entry without a subject: {e}", f.name()))
                })?;
                pipeline_subjects.push((f.name(), subjects));
            }
            let mut chunk = EntryBatch::default();
            for e in &entries {
                chunk.push(e);
            }
            summary.aggregate_records += entries.len() as u64;
            self.batcher.push_chunk(&chunk, &mut self.full, &mut self.oversized);
            self.full.extend(self.batcher.flush());
            self.send_full(&mut job.sinks, summary).await?;
        }
        Ok(pipeline_subjects)
    }
}

/// Reject threshold: rows that could not be parsed (format drift), not inputs that could not
/// be read (their scopes are carried over).
fn check_rejects(settings: &SnapshotSettings, rejects: &RejectLog, summary: &mut SnapshotSummary) {
    summary.unreadable_inputs = rejects.unreadable_inputs();
    let row_rejects = summary.rejects.saturating_sub(summary.unreadable_inputs);
    let ratio = if summary.rows > 0 { row_rejects as f64 / summary.rows as f64 } else { 0.0 };
    summary.reject_threshold_exceeded = settings.max_rejects.is_some_and(|m| summary.rejects > m)
        || settings.max_reject_ratio.is_some_and(|r| ratio > r);
}

/// A versioned run's documents held for delivery, and what of them is left out.
struct Held {
    outbox: Outbox,
    left_out: duplicates::LeftOut,
}

/// Deletes, the held documents, the manifest commit and the acknowledgement: a versioned run
/// that failed its checks (reject threshold, deletion guard) delivers and deletes nothing.
#[allow(clippy::too_many_arguments)]
async fn finish(
    job: &mut SnapshotJob,
    settings: &SnapshotSettings,
    previous: Option<&PreviousManifest>,
    rejects: &RejectLog,
    held: Held,
    pipeline_subjects: &[(&'static str, Vec<String>)],
    nworkers: usize,
    summary: &mut SnapshotSummary,
) -> Result<(), IcicleError> {
    let scopes = rejects.scopes();
    let unknown = UnknownScopes::new(scopes.iter().map(|(s, _, _)| s));
    (summary.unknown_scopes, summary.unknown_scope_count) =
        icicle_core::scope::summarize(scopes.iter().map(|(s, i, r)| (s, i.as_str(), r.as_str())), 50);
    let mut commit = previous.is_some() && !summary.reject_threshold_exceeded;
    let mut deletes = Vec::new();
    let mut gone = Vec::new();
    let mut sealed = None;
    if let (Some(dir), Some(prev)) = (&settings.state_dir, previous) {
        if summary.reject_threshold_exceeded {
            tracing::warn!(
                message =
                    "reject threshold exceeded: nothing held is delivered, no deletes, the manifest is not committed"
            );
        } else {
            manifest::drop_new_lines(dir, &held.left_out.hashes, None)
                .map_err(|e| io("leaving paths read twice out of the manifest", e))?;
            let d = deletes::plan(dir, prev, &unknown, pipeline_subjects, nworkers + 1)
                .map_err(|e| io("planning the deletes", e))?;
            summary.deletes_withheld = d.withheld;
            summary.aggregate_deletes_withheld = d.aggregates_withheld;
            let withheld = d.withheld + d.aggregates_withheld > 0;
            summary.withheld_runs = deletes::count_withheld_run(dir, prev, withheld)
                .map_err(|e| io("counting the runs that withheld deletes", e))?;
            summary.withheld_too_long = deletes::withheld_too_long(settings, summary.withheld_runs);
            if let Some(why) = &summary.withheld_too_long {
                tracing::error!(message = "deletes withheld too long: this run is delivered, and fails", reason = %why);
            }
            summary.delete_guard =
                deletes::guard(settings, d.primary + d.aggregates, prev.len() as u64 + d.previous_aggregates);
            if let Some(why) = &summary.delete_guard {
                tracing::error!(message = "deletion guard: nothing delivered or deleted and the manifest is kept; rerun with --allow-mass-delete if this is intended", reason = %why);
                commit = false;
            } else {
                summary.deleted = d.primary;
                summary.aggregates_deleted = d.aggregates;
                deletes = d.subjects;
                gone = d.gone;
            }
        }
    }
    if summary.reject_threshold_exceeded || summary.delete_guard.is_some() {
        summary.batches_withheld = held.outbox.discard();
    } else {
        // Sealed before the first delivery: a crash from here on leaves the next run the list
        // of what this one may have indexed.
        if let (Some(dir), true) = (&settings.state_dir, commit) {
            sealed = Some(manifest::seal(dir).map_err(|e| io("sealing the manifest", e))?);
        }
        held.outbox.release_without(&mut job.sinks, settings.document_limit(), &held.left_out.subjects).await?;
    }
    crate::fault::fault_point("deletes-planned");
    for b in delete_batches(deletes, settings.document_limit()) {
        summary.delete_batches += 1;
        crate::deliver::deliver_all(&mut job.sinks, &DocumentBatch::Delete(b)).await?;
    }
    crate::fault::fault_point("deletes-delivered");
    for (_, sink) in job.sinks.iter_mut() {
        sink.close().await?;
    }
    if let (Some(dir), true) = (&settings.state_dir, commit) {
        let sealed =
            sealed.ok_or_else(|| IcicleError::Internal("committing a manifest that was never sealed".into()))?;
        let resend: Vec<&str> = job.sinks.iter().flat_map(|(_, k)| k.dead_lettered()).map(String::as_str).collect();
        manifest::mark_resend(&sealed, &resend)
            .map_err(|e| io("listing the dead-lettered subjects in the manifest", e))?;
        let dead: std::collections::HashSet<&str> = resend.iter().copied().collect();
        let owed: Vec<&manifest::Gone> = gone.iter().filter(|g| dead.contains(g.subject.as_str())).collect();
        manifest::keep_owed_deletes(&sealed, &owed)
            .map_err(|e| io("keeping the dead-lettered deletes in the manifest", e))?;
        manifest::commit(dir, &sealed).map_err(|e| io("committing the manifest", e))?;
    }
    for (name, src) in &job.sources {
        if let Err(e) = src.acknowledge().await {
            tracing::warn!(message = "source acknowledgement failed", source = %name, error = %e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
