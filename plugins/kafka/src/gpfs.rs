//! The `gpfs` change source: consumers read an `mmwatch` topic (explicit partitions or a
//! consumer group), each on its own task, into one queue; one task reduces the events over the
//! fileset's state, delivers the index operations, checkpoints the state, and only then
//! commits the consumed offsets — held back before any rename half still waiting for its pair.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use icicle_core::access::{lstat_dir, parent_dir, Acl, ChainCache};
use icicle_core::batch::EntryBatch;
use icicle_core::gmeta::{subject_for, PrimaryEncoder};
use icicle_core::record::{FileKind, FileRecord};
use icicle_core::registry::{BuildContext, ChangeSourceConfig};
use icicle_core::sent_ahead::SentAhead;
use icicle_core::traits::{ChangeSource, MonitorContext, OnGap, ReduceCounts, Reducer, StateStore};
use icicle_core::{ConfigError, IcicleError};
use icicle_plugins_gpfs::state::{load_checkpoint, path_key, MountWalker, NoWalk, Position, Walker};
use icicle_plugins_gpfs::{GpfsEvent, GpfsState, IgnoredEvents, Meta, Op, Ops};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::client::KafkaConnection;

/// `[sources.<id>] type = "gpfs"`.
#[derive(Deserialize, Debug, Clone)]
pub struct GpfsConfig {
    pub connection: KafkaConnection,
    /// The topic `mmwatch --sink-topic` writes (one per fileset).
    pub topic: String,
    /// The consumer group (offsets are committed under it).
    #[serde(default = "default_group")]
    pub group_id: String,
    /// Consumer tasks; in group mode they share the topic's partitions.
    #[serde(default = "default_consumers")]
    pub consumers: usize,
    /// Read exactly these partitions (round-robin over the consumers) instead of joining
    /// the group's assignment.
    #[serde(default)]
    pub partitions: Option<Vec<i32>>,
    /// Where to start when the group has no committed offset: `earliest` or `latest`.
    #[serde(default)]
    pub start: Start,
    /// The GPFS path prefix removed from event paths (e.g. `/gpfs/fs1`).
    #[serde(default)]
    pub fs_root: String,
    /// Prepended to record paths.
    #[serde(default)]
    pub path_prefix: String,
    /// Where the file system is mounted here: renamed directories are walked there so that
    /// descendants the state never saw move too (no other stat is taken).
    #[serde(default)]
    pub mount: Option<PathBuf>,
    /// A batch closes at this many events...
    #[serde(default = "default_batch")]
    pub batch_size: usize,
    /// ...or after this long without new events.
    #[serde(default = "default_quiet")]
    pub quiet_period_secs: f64,
    /// Batch boundaries an IN_MOVED_FROM waits for its IN_MOVED_TO before it counts as a
    /// move out of the fileset.
    #[serde(default = "default_pair_batches")]
    pub pair_batches: u32,
    /// Files the state keeps at most (0 = unbounded): the least recently touched are let go
    /// of at the end of a batch, their records kept, their paths remembered by hash.
    #[serde(default)]
    pub lru_capacity: usize,
    /// Where the state checkpoint is kept.
    pub state_dir: PathBuf,
    /// Where messages that cannot be parsed are kept (JSON lines with topic, partition and
    /// offset); default `<state_dir>/gpfs-<topic>.dead-letters.jsonl`.
    #[serde(default)]
    pub dead_letter: Option<PathBuf>,
    /// The snapshot's index (a `file` sink directory) the monitor starts from: objects that
    /// predate monitoring are known by path, so renaming a directory moves their records too.
    /// Read once, when there is no checkpoint yet.
    #[serde(default)]
    pub seed_index: Option<PathBuf>,
    /// Events dropped at ingestion (the parse stops at their `event` attribute; high volume,
    /// little information), from
    /// IN_ACCESS, IN_ATTRIB, IN_MODIFY, IN_CLOSE_WRITE. IN_OPEN, IN_CLOSE_NOWRITE,
    /// IN_MOVE_SELF, IN_IGNORED and IN_UNMOUNT are always dropped.
    #[serde(default)]
    pub filter: Vec<String>,
    /// A partition whose first message is past the group's committed offset lost messages
    /// (retention deleted them before they were read): `warn` (default) logs and counts them
    /// (`lost_messages`) and goes on; `fail` stops the monitor with the range.
    #[serde(default)]
    pub on_gap: OnGap,
}

fn default_group() -> String {
    "icicle-gpfs".into()
}
fn default_consumers() -> usize {
    1
}
/// Where a consumer group without a committed offset starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    /// The oldest message the topic keeps.
    #[default]
    Earliest,
    /// Only messages produced from now on.
    Latest,
}

impl Start {
    /// librdkafka's `auto.offset.reset` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Start::Earliest => "earliest",
            Start::Latest => "latest",
        }
    }
}
fn default_batch() -> usize {
    1000
}
fn default_quiet() -> f64 {
    5.0
}
fn default_pair_batches() -> u32 {
    2
}

impl ChangeSourceConfig for GpfsConfig {
    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn ChangeSource>, ConfigError> {
        if self.topic.trim().is_empty() {
            return Err(ctx.invalid("topic", "give the mmwatch topic"));
        }
        if self.consumers == 0 {
            return Err(ctx.invalid("consumers", "must be at least 1"));
        }
        if self.batch_size == 0 {
            return Err(ctx.invalid("batch_size", "must be at least 1"));
        }
        if self.partitions.as_ref().is_some_and(|p| p.is_empty() || p.iter().any(|&x| x < 0)) {
            return Err(ctx.invalid("partitions", "list partition numbers (0, 1, ...)"));
        }
        icicle_plugins_gpfs::event::filter_mask(&self.filter).map_err(|e| ctx.invalid("filter", e))?;
        if self.lru_capacity > 0 && self.mount.is_none() {
            return Err(ctx.invalid("lru_capacity", "needs `mount`: evicted files below a renamed directory are found there"));
        }
        // Validate the connection (and read its secrets) now, so errors name the key.
        self.connection.client_config(ctx)?;
        let path = self.dead_letter.clone().unwrap_or_else(|| self.state_dir.join(format!("gpfs-{}.dead-letters.jsonl", self.topic)));
        Ok(Arc::new(GpfsSource { cfg: self, dead: std::sync::Mutex::new(icicle_core::deadletter::DeadLetters::new(path)) }))
    }
}

/// Counters of one GPFS monitor run.
#[derive(Debug, Default, serde::Serialize)]
pub struct GpfsRunCounts {
    pub messages: u64,
    /// Dropped by the ingestion filter.
    pub filtered: u64,
    /// Messages between the committed offset and the first one read (deleted unread).
    pub lost_messages: u64,
    pub rejects: u64,
    /// Messages kept in the dead-letter file (they could not be parsed).
    pub dead_letters: u64,
    pub outside_root: u64,
    pub updates: u64,
    pub deletes: u64,
    pub batches: u64,
    pub commits: u64,
    /// From the first message received to the end (excludes connecting and joining the group).
    pub reading_seconds: f64,
    /// What the reducer did (ignored events dropped).
    pub reduce: ReduceCounts,
    pub state: icicle_plugins_gpfs::state::GpfsCounts,
    pub objects: usize,
    /// Next offset to read, per partition, as committed.
    pub committed: BTreeMap<i32, i64>,
}

/// Client callbacks: reaching the end of a partition is news for `--drain`, not an error;
/// librdkafka's statistics give the consumer lag per partition.
pub struct QuietEof {
    component: String,
}

impl rdkafka::ClientContext for QuietEof {
    fn stats(&self, stats: rdkafka::Statistics) {
        let m = icicle_core::metrics::Metrics::global();
        for (topic, t) in &stats.topics {
            for (p, part) in &t.partitions {
                if *p < 0 || part.consumer_lag < 0 {
                    continue;
                }
                let ps = p.to_string();
                m.set(
                    "icicle_kafka_lag",
                    "Messages between the consumer's position and the partition's end.",
                    &[("component", &self.component), ("topic", topic), ("partition", &ps)],
                    part.consumer_lag as f64,
                );
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let eof = matches!(error, KafkaError::PartitionEOF(_)) || error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF);
        if !eof {
            tracing::warn!(message = "librdkafka", error = %error, reason);
        }
    }
}

impl rdkafka::consumer::ConsumerContext for QuietEof {}

enum Msg {
    Event { consumer: usize, partition: i32, offset: i64, payload: Vec<u8> },
    Eof { partition: i32 },
    Failed(String),
}

/// The `gpfs` change source.
pub struct GpfsSource {
    cfg: GpfsConfig,
    /// Messages that could not be parsed: kept before their offsets are committed.
    dead: std::sync::Mutex<icicle_core::deadletter::DeadLetters>,
}

impl GpfsSource {
    fn state_file(&self) -> PathBuf {
        self.cfg.state_dir.join(format!("gpfs-{}.checkpoint.json", self.cfg.topic))
    }

    /// Keys of the paths updated since the last checkpoint, written before each delivery.
    fn sent_ahead(&self) -> SentAhead {
        SentAhead::new(self.cfg.state_dir.join(format!("gpfs-{}.sent-ahead", self.cfg.topic)))
    }

    fn consumer(&self, eof: bool, component: &str) -> Result<StreamConsumer<QuietEof>, IcicleError> {
        let mut cc = self
            .cfg
            .connection
            .client_config_with(|k, r| ConfigError::InvalidValue { key: format!("connection.{k}"), origin: "the gpfs source".into(), reason: r })
            .map_err(IcicleError::Config)?;
        cc.set("group.id", &self.cfg.group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", self.cfg.start.as_str())
            .set("enable.partition.eof", if eof { "true" } else { "false" });
        // Defaults that can be overridden in `connection.properties`: a short session so a
        // killed consumer's partitions move on quickly (and groups form fast), and fetches
        // that return as soon as a little data is there.
        for (k, v) in [("session.timeout.ms", "6000"), ("heartbeat.interval.ms", "1000"), ("fetch.wait.max.ms", "100"), ("statistics.interval.ms", "1000")] {
            if cc.get(k).is_none() {
                cc.set(k, v);
            }
        }
        cc.create_with_context(QuietEof { component: component.to_string() }).map_err(|e| external(format!("cannot create a Kafka consumer: {e}")))
    }

    /// Know every object of the snapshot's index.
    fn seed(&self, state: &mut GpfsState, dir: &std::path::Path) -> Result<(), IcicleError> {
        let index = icicle_plugins_sinks::read_index(dir).map_err(|e| external(format!("seed_index: {e}")))?;
        let prefix = self.cfg.path_prefix.trim_end_matches('/');
        let root = self.cfg.fs_root.trim_end_matches('/');
        for (path, c) in &index {
            let Some(rel) = path.strip_prefix(prefix) else { continue };
            let int = |k: &str| c["raw"][k].as_i64().unwrap_or(0);
            let mode = c["raw"]["mode"].as_u64().and_then(|m| u32::from_str_radix(&m.to_string(), 8).ok()).unwrap_or(0o100644);
            // The inode (from sources that have one) joins a file's hard links.
            let meta = Meta {
                inode: c["raw"]["inode"].as_u64().unwrap_or(0),
                mode,
                uid: c["uid"].as_u64().unwrap_or(0) as u32,
                gid: c["gid"].as_u64().unwrap_or(0) as u32,
                size: c["size"].as_u64().unwrap_or(0),
                atime: int("atime"),
                ctime: int("ctime"),
                mtime: int("mtime"),
            };
            state.seed(&format!("{root}{rel}"), meta);
        }
        tracing::info!(message = "seeded from the snapshot index", objects = index.len(), dir = %dir.display());
        Ok(())
    }

    /// The index path of GPFS path `p`, or None when it is outside `fs_root`.
    fn index_path(&self, p: &str) -> Option<String> {
        let root = self.cfg.fs_root.trim_end_matches('/');
        let rel = p.strip_prefix(root)?;
        if !(rel.is_empty() || rel.starts_with('/')) {
            return None;
        }
        let rel = if rel.is_empty() { "/" } else { rel };
        Some(format!("{}{}", self.cfg.path_prefix.trim_end_matches('/'), rel))
    }
}

fn external(reason: String) -> IcicleError {
    IcicleError::Source(icicle_core::SourceError::External(reason))
}

/// The record for `meta` at index path `path`.
pub fn record_for<'a>(path: &'a str, m: &Meta) -> FileRecord<'a> {
    FileRecord {
        path,
        kind: FileKind::from_mode(m.mode),
        mode: m.mode,
        uid: m.uid,
        gid: m.gid,
        size: m.size,
        atime: m.atime,
        ctime: m.ctime,
        mtime: m.mtime,
        inode: m.inode,
    }
}

#[async_trait]
impl ChangeSource for GpfsSource {
    async fn run(&self, ctx: MonitorContext) -> Result<serde_json::Value, IcicleError> {
        let cfg = &self.cfg;
        std::fs::create_dir_all(&cfg.state_dir).map_err(|e| external(format!("{}: {e}", cfg.state_dir.display())))?;
        let mut state = match load_checkpoint(&self.state_file()).map_err(external)? {
            Some(cp) => GpfsState::restore(cp, cfg.pair_batches),
            None => {
                let mut s = GpfsState::new(cfg.pair_batches);
                if let Some(dir) = &cfg.seed_index {
                    self.seed(&mut s, dir)?;
                }
                s
            }
        };
        state.dir_attributes = ctx.policy.access.is_some();
        state.set_lru_capacity(cfg.lru_capacity);
        state.maybe_delivered(self.sent_ahead().read());
        let mut walker: Box<dyn Walker + Send> = match &cfg.mount {
            Some(m) => Box::new(MountWalker { mount: m.clone(), fs_root: cfg.fs_root.clone() }),
            None => Box::new(NoWalk),
        };
        let mut counts = GpfsRunCounts::default();

        // The consumers, each on its own task, into one queue.
        let (tx, mut rx) = mpsc::channel::<Msg>(8192);
        let mut consumers: Vec<Arc<StreamConsumer<QuietEof>>> = Vec::new();
        for i in 0..cfg.consumers {
            let c = Arc::new(self.consumer(ctx.drain, &ctx.name)?);
            match &cfg.partitions {
                Some(parts) => {
                    let mut tpl = TopicPartitionList::new();
                    for &p in parts.iter().filter(|&&p| p as usize % cfg.consumers == i) {
                        tpl.add_partition_offset(&cfg.topic, p, Offset::Stored).map_err(|e| external(e.to_string()))?;
                    }
                    if tpl.count() == 0 {
                        continue;
                    }
                    c.assign(&tpl).map_err(|e| external(format!("assigning partitions of `{}`: {e}", cfg.topic)))?;
                }
                None => c.subscribe(&[&cfg.topic]).map_err(|e| external(format!("subscribing to `{}`: {e}", cfg.topic)))?,
            }
            consumers.push(c.clone());
            let tx = tx.clone();
            let idx = consumers.len() - 1;
            tokio::spawn(async move {
                loop {
                    let msg = match c.recv().await {
                        Ok(m) => Msg::Event { consumer: idx, partition: m.partition(), offset: m.offset(), payload: m.payload().unwrap_or_default().to_vec() },
                        Err(KafkaError::PartitionEOF(p)) => Msg::Eof { partition: p },
                        Err(e) => Msg::Failed(e.to_string()),
                    };
                    if tx.send(msg).await.is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        // The partitions to see the end of (drain).
        let all_partitions: HashSet<i32> = match &cfg.partitions {
            Some(p) => p.iter().copied().collect(),
            None => {
                let c = consumers[0].clone();
                let topic = cfg.topic.clone();
                let md = tokio::task::spawn_blocking(move || c.fetch_metadata(Some(&topic), Duration::from_secs(30)))
                    .await
                    .map_err(|e| external(e.to_string()))?
                    .map_err(|e| external(format!("metadata of `{}`: {e}", cfg.topic)))?;
                md.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())).collect()
            }
        };
        let mut at_end: HashSet<i32> = HashSet::new();
        let mut owner: HashMap<i32, usize> = HashMap::new();
        let mut batch: Vec<(Position, Vec<u8>)> = Vec::with_capacity(cfg.batch_size);
        let mut enc = PrimaryEncoder::new(ctx.policy.clone());
        let quiet = Duration::from_secs_f64(cfg.quiet_period_secs.max(0.0));
        let mut failures = 0u32;
        let mut first: Option<std::time::Instant> = None;
        // Partitions whose first message of this run was checked against the committed offset.
        let mut checked: HashSet<i32> = HashSet::new();
        let mut stop = ctx.stop.clone();
        let mut stopped = false;
        loop {
            if *stop.borrow() {
                // A signal: deliver and commit what was read; unpaired halves wait for the
                // next run (their pair may still come).
                if !batch.is_empty() {
                    self.process(std::mem::take(&mut batch), &mut state, walker.as_mut(), &consumers, &owner, &ctx, &mut enc, &mut counts).await?;
                }
                tracing::info!(message = "stopped by a signal after delivering and committing what was read", topic = %cfg.topic);
                stopped = true;
                break;
            }
            let got = if batch.is_empty() && !ctx.drain {
                tokio::select! {
                    m = rx.recv() => m,
                    _ = stop.changed() => continue,
                }
            } else {
                match tokio::time::timeout(quiet.max(Duration::from_millis(10)), rx.recv()).await {
                    Ok(m) => m,
                    Err(_) => {
                        if !batch.is_empty() {
                            self.process(std::mem::take(&mut batch), &mut state, walker.as_mut(), &consumers, &owner, &ctx, &mut enc, &mut counts).await?;
                        }
                        if ctx.drain && all_partitions.iter().all(|p| at_end.contains(p)) {
                            break;
                        }
                        continue;
                    }
                }
            };
            icicle_core::metrics::Metrics::global().set(
                "icicle_queue_depth",
                "Events waiting between the consumers and the reducer.",
                &[("component", &ctx.name)],
                rx.len() as f64,
            );
            match got {
                Some(Msg::Event { consumer, partition, offset, payload }) => {
                    first.get_or_insert_with(std::time::Instant::now);
                    if checked.insert(partition) {
                        self.check_gap(&consumers[consumer], partition, offset, &ctx, &mut counts).await?;
                    }
                    at_end.remove(&partition);
                    owner.insert(partition, consumer);
                    counts.messages += 1;
                    batch.push(((partition, offset), payload));
                    if batch.len() >= cfg.batch_size {
                        self.process(std::mem::take(&mut batch), &mut state, walker.as_mut(), &consumers, &owner, &ctx, &mut enc, &mut counts).await?;
                    }
                }
                Some(Msg::Eof { partition }) => {
                    at_end.insert(partition);
                }
                Some(Msg::Failed(e)) => {
                    failures += 1;
                    tracing::warn!(message = "Kafka consumer error", topic = %cfg.topic, error = %e);
                    if failures > 100 {
                        return Err(external(format!("reading `{}`: {e}", cfg.topic)));
                    }
                }
                None => break,
            }
        }
        // End of a drained stream: halves still waiting were moved out of the fileset.
        if !stopped && !state.pending().is_empty() {
            let mut ops = Ops::default();
            state.begin_batch();
            state.finish(&mut ops);
            self.emit(ops, &state, &ctx, &mut enc, &mut counts).await?;
            self.checkpoint(&state)?;
            self.commit(&[], &consumers, &owner, &state, &mut counts)?;
        }
        counts.state = state.counts;
        counts.objects = state.len();
        counts.reading_seconds = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
        serde_json::to_value(&counts).map_err(|e| IcicleError::Internal(e.to_string()))
    }
}

/// Offsets lost unread. A committed offset below the low watermark no longer exists, so the
/// consumer was reset (to `start`): everything from it to the first offset read was skipped
/// (with `start = "latest"`, kept messages too). Otherwise skipped offsets are transaction
/// markers or aborted records, and nothing is lost.
fn lost_range(committed: i64, low_watermark: i64, first_read: i64) -> Option<(i64, i64)> {
    (committed >= 0 && low_watermark > committed && first_read > committed).then(|| (committed, first_read - 1))
}

impl GpfsSource {
    /// The first message of `partition` read in this run is at `offset`: if the group's
    /// committed offset is below it and below the partition's first kept offset (the low
    /// watermark), the messages between were never read (see [`lost_range`]).
    async fn check_gap(
        &self,
        consumer: &Arc<StreamConsumer<QuietEof>>,
        partition: i32,
        offset: i64,
        ctx: &MonitorContext,
        counts: &mut GpfsRunCounts,
    ) -> Result<(), IcicleError> {
        let cfg = &self.cfg;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&cfg.topic, partition);
        let c = consumer.clone();
        let committed = tokio::task::spawn_blocking(move || c.committed_offsets(tpl, Duration::from_secs(30))).await.map_err(|e| external(e.to_string()))?;
        let committed = match committed {
            Ok(tpl) => tpl.find_partition(&cfg.topic, partition).and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            }),
            Err(e) => {
                tracing::warn!(message = "cannot read the committed offset; no gap check", topic = %cfg.topic, partition, error = %e);
                None
            }
        };
        let Some(c) = committed.filter(|c| offset > *c) else { return Ok(()) };
        // Skipped offsets can also be transaction markers or aborted records: only a committed
        // offset below the low watermark means messages were lost.
        let (c2, topic) = (consumer.clone(), cfg.topic.clone());
        let low = match tokio::task::spawn_blocking(move || c2.fetch_watermarks(&topic, partition, Duration::from_secs(30)))
            .await
            .map_err(|e| external(e.to_string()))?
        {
            Ok((low, _)) => low,
            Err(e) => {
                tracing::warn!(message = "cannot read the partition's watermarks; no gap check", topic = %cfg.topic, partition, error = %e);
                return Ok(());
            }
        };
        let Some((first, last)) = lost_range(c, low, offset) else { return Ok(()) };
        let n = (last - first + 1) as u64;
        counts.lost_messages += n;
        icicle_core::metrics::Metrics::global().set(
            "icicle_gpfs_lost_messages",
            "Messages deleted before the monitor read them (committed offset to first read).",
            &[("component", ctx.name.as_str())],
            counts.lost_messages as f64,
        );
        let why = format!(
            "offsets {first}..={last} of `{}` partition {partition} were never read: the committed offset {first} was no longer in the topic \
             (retention deleted messages up to {low}) and the consumer started at `{}` instead; \
             the index misses their changes until a snapshot run re-indexes the fileset",
            cfg.topic,
            cfg.start.as_str()
        );
        if cfg.on_gap == OnGap::Fail {
            return Err(external(format!("{why}; stopping (on_gap = \"fail\")")));
        }
        tracing::error!(message = "lost watch-folder events", topic = %cfg.topic, partition, first, last, messages = n, detail = %why);
        Ok(())
    }

    /// Reduce, apply and deliver one batch; checkpoint; then commit its offsets.
    #[allow(clippy::too_many_arguments)]
    async fn process(
        &self,
        batch: Vec<(Position, Vec<u8>)>,
        state: &mut GpfsState,
        walker: &mut (dyn Walker + Send),
        consumers: &[Arc<StreamConsumer<QuietEof>>],
        owner: &HashMap<i32, usize>,
        ctx: &MonitorContext,
        enc: &mut PrimaryEncoder,
        counts: &mut GpfsRunCounts,
    ) -> Result<(), IcicleError> {
        let started = std::time::Instant::now();
        let mut events = Vec::with_capacity(batch.len());
        // Validated when the config was built.
        let mask = icicle_plugins_gpfs::event::filter_mask(&self.cfg.filter).unwrap_or(0);
        for ((partition, offset), payload) in &batch {
            match GpfsEvent::parse_filtered(payload, mask) {
                Ok(ev) if ev.is_filtered() => counts.filtered += 1,
                Ok(ev) => events.push((ev, (*partition, *offset))),
                Err(reason) => {
                    counts.rejects += 1;
                    tracing::warn!(message = "rejected event", topic = %self.cfg.topic, partition, offset, reason = %reason.escape_debug());
                    // On disk before the batch's offsets are committed; a message read again
                    // after a restart is kept once.
                    let mut dead = self.dead.lock().map_err(|_| IcicleError::Internal("the dead-letter file's lock is poisoned".into()))?;
                    let position = format!("{}/{partition}@{offset}", self.cfg.topic);
                    if dead.first_time(&position, payload) {
                        dead.write(&ctx.name, &position, payload, &reason)
                            .map_err(|e| external(format!("writing the dead-letter file {}: {e}", dead.path().display())))?;
                        counts.dead_letters += 1;
                    }
                }
            }
        }
        counts.reduce.add(&IgnoredEvents.reduce(&mut events));
        let mut ops = Ops::default();
        state.begin_batch();
        for ev in &events {
            state.apply(ev, walker, &mut ops);
        }
        state.end_batch(&mut ops);
        self.emit(ops, state, ctx, enc, counts).await?;
        // The state first: a replay over a newer state is harmless, the reverse is not.
        self.checkpoint(state)?;
        let positions: Vec<Position> = batch.iter().map(|b| b.0).collect();
        self.commit(&positions, consumers, owner, state, counts)?;
        counts.batches += 1;
        let c = &state.counts;
        icicle_core::metrics::record_batch(&icicle_core::metrics::BatchReport {
            component: &ctx.name,
            records_in: counts.messages,
            filtered: counts.reduce.ignored + counts.filtered,
            rejects: counts.rejects,
            outcomes: &[
                ("coalesced", c.coalesced),
                ("cancelled", c.cancelled),
                ("renames", c.renames),
                ("directory_renames", c.directory_renames),
                ("moved_out", c.moved_out),
                ("unpaired_moves", c.unpaired_moves),
            ],
            updates: counts.updates,
            deletes: counts.deletes,
            batches: counts.batches,
            batch_size: batch.len(),
            batch_seconds: started.elapsed().as_secs_f64(),
            state_entries: state.len(),
            state_bytes: state.approx_bytes(),
            state_counts: &[("moved_descendants", c.moved_descendants), ("pending_moves", state.pending().len() as u64)],
        });
        let m = icicle_core::metrics::Metrics::global();
        for (p, o) in &counts.committed {
            let ps = p.to_string();
            m.set(
                "icicle_kafka_committed_offset",
                "Next offset to read, as committed, per partition.",
                &[("component", &ctx.name), ("topic", &self.cfg.topic), ("partition", &ps)],
                *o as f64,
            );
        }
        Ok(())
    }

    fn checkpoint(&self, state: &GpfsState) -> Result<(), IcicleError> {
        let f = self.state_file();
        let tmp = f.with_extension("tmp");
        let bytes = serde_json::to_vec(&state.checkpoint()).map_err(|e| IcicleError::Internal(e.to_string()))?;
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut w = std::fs::File::create(&tmp)?;
            w.write_all(&bytes)?;
            w.sync_all()?;
            std::fs::rename(&tmp, &f)
        };
        write().map_err(|e| external(format!("checkpoint {}: {e}", f.display())))?;
        self.sent_ahead().clear();
        Ok(())
    }

    /// Commit, per partition, the offset after the last event processed — or the offset of
    /// the oldest rename half still waiting, which must be read again after a restart.
    fn commit(
        &self,
        positions: &[Position],
        consumers: &[Arc<StreamConsumer<QuietEof>>],
        owner: &HashMap<i32, usize>,
        state: &GpfsState,
        counts: &mut GpfsRunCounts,
    ) -> Result<(), IcicleError> {
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for &(p, o) in positions {
            let e = next.entry(p).or_insert(o + 1);
            *e = (*e).max(o + 1);
        }
        for m in state.pending() {
            let (p, o) = m.position;
            let e = next.entry(p).or_insert(o);
            *e = (*e).min(o);
        }
        let mut by_consumer: BTreeMap<usize, TopicPartitionList> = BTreeMap::new();
        for (&p, &o) in &next {
            if counts.committed.get(&p).is_some_and(|&c| c >= o) {
                continue;
            }
            let Some(&c) = owner.get(&p) else { continue };
            by_consumer.entry(c).or_default().add_partition_offset(&self.cfg.topic, p, Offset::Offset(o)).map_err(|e| external(e.to_string()))?;
        }
        for (c, tpl) in by_consumer {
            match consumers[c].commit(&tpl, CommitMode::Sync) {
                Ok(()) => {
                    counts.commits += 1;
                    for e in tpl.elements() {
                        if let Offset::Offset(o) = e.offset() {
                            counts.committed.insert(e.partition(), o);
                        }
                    }
                }
                // A rebalance moved the partition: its events will be read again (upserts
                // and deletes are idempotent), nothing is lost.
                Err(e) => tracing::warn!(message = "offset commit failed", topic = %self.cfg.topic, error = %e),
            }
        }
        Ok(())
    }

    /// Encode and deliver one batch's operations.
    /// When visibility follows directory permissions, each record is judged along its
    /// directories from the fileset root: as the mount shows them now (with `mount`: ACLs
    /// too), else as the events reported them, else unknown.
    async fn emit(&self, ops: Ops, state: &GpfsState, ctx: &MonitorContext, enc: &mut PrimaryEncoder, counts: &mut GpfsRunCounts) -> Result<(), IcicleError> {
        let mut chunk = EntryBatch::default();
        let mut deletes = Vec::new();
        let posix = ctx.policy.access.is_some();
        let mut updated = Vec::new();
        let mut chains = ChainCache::new(&self.cfg.fs_root);
        let root = self.cfg.fs_root.trim_end_matches('/');
        // The mount first: it shows ACLs, which events do not carry.
        let on_mount = |p: &str| Some(self.cfg.mount.as_ref()?.join(p.strip_prefix(root)?.trim_start_matches('/')));
        let mut lookup = |d: &str| on_mount(d).and_then(|m| lstat_dir(&m)).or_else(|| state.dir_perm(d));
        for (path, op) in ops {
            let Some(ip) = self.index_path(&path) else {
                counts.outside_root += 1;
                continue;
            };
            match op {
                Op::Delete => deletes.push(subject_for(&ip).into_owned()),
                Op::Update(m) => {
                    updated.push(path_key(&path));
                    let dirs = if posix { chains.chain(parent_dir(&path), &mut lookup) } else { None };
                    let acl = if posix { on_mount(&path).and_then(|m| Acl::read(&m)).map(Arc::new) } else { None };
                    match chunk.encode_in(enc, &record_for(&ip, &m), acl, dirs.as_ref()) {
                        Ok(()) => counts.updates += 1,
                        Err(e) => {
                            counts.rejects += 1;
                            tracing::warn!(message = "update not encodable", path = %ip, error = %e);
                        }
                    }
                }
            }
        }
        counts.deletes += deletes.len() as u64;
        if chunk.is_empty() && deletes.is_empty() {
            return Ok(());
        }
        if !updated.is_empty() {
            let j = self.sent_ahead();
            j.append(&updated).map_err(|e| external(format!("writing {}: {e}", j.path().display())))?;
        }
        let mut sinks = ctx.sinks.lock().await;
        icicle_core::batch::deliver_emit(&mut sinks, &chunk, deletes, ctx.max_batch_bytes).await?;
        Ok(())
    }
}

#[cfg(test)]
mod gap_tests {
    #[test]
    fn only_offsets_below_the_low_watermark_are_lost() {
        // Retention deleted 10..=39; the first message read is 40.
        assert_eq!(super::lost_range(10, 40, 40), Some((10, 39)));
        // ... and with `start = "latest"` the reset also skipped the kept 40..=99.
        assert_eq!(super::lost_range(10, 40, 100), Some((10, 99)));
        // Skipped offsets that still exist (transaction markers, aborted records): nothing lost.
        assert_eq!(super::lost_range(10, 0, 40), None);
        assert_eq!(super::lost_range(10, 10, 12), None);
        // Reading from the committed offset: nothing lost.
        assert_eq!(super::lost_range(10, 5, 10), None);
        assert_eq!(super::lost_range(-1, 40, 40), None);
    }
}
