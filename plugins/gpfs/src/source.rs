//! The `gpfs` change source: `mmwatch` events from a Kafka topic (the transport is
//! `icicle-plugins-kafka`'s [`TopicStream`]) applied to the fileset's path and inode state,
//! run by the runtime's monitor driver. Offsets are committed only after delivery, held back
//! before any rename half still waiting for its pair.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use icicle_core::access::{lstat_dir, ChainCache};
use icicle_core::batch::EntryBatch;
use icicle_core::deadletter::DeadLetters;
use icicle_core::monitor::{
    reduce_apply, BatchCounts, ChangeSource, ChangeState, DriverSettings, Emit, Monitor, MonitorContext, OnGap,
};
use icicle_core::record::{FileKind, FileRecord};
use icicle_core::registry::{BuildContext, ComponentConfig};
use icicle_core::traits::{ReduceCounts, StateStore};
use icicle_core::{ConfigError, IcicleError};
use icicle_gmeta::{subject_for, Judge, PrimaryEncoder, Published};
use icicle_plugins_kafka::client::KafkaConnection;
use icicle_plugins_kafka::stream::{Offsets, Start, TopicCounts, TopicMessage, TopicSettings, TopicStream};
use serde::Deserialize;

use crate::state::{path_key, MountWalker, NoWalk, Walker};
use crate::{GpfsEvent, GpfsState, IgnoredEvents, Meta, Op, Ops, StorageId};

/// Event paths refused by the path check (for the sampled warning).
static UNPUBLISHABLE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `[sources.<id>] type = "gpfs"`.
#[derive(Deserialize, Debug, Clone)]
pub struct GpfsConfig {
    /// The brokers and how to authenticate to them.
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
    /// move out of the fileset (more than this many). With several partitions only batches
    /// that read its partition past it count, or more than 16 times this many batches in all.
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
    /// Start without `seed_index`: for a fileset that is empty when monitoring starts, or
    /// whose index is rebuilt anyway. Such a state cannot know which names the index holds,
    /// so it deletes names that may never have been indexed and re-sends objects it cannot
    /// tell unchanged: up to several times the minimal operations (docs/gpfs-monitor.md).
    /// One of `seed_index` and `unseeded` must be given.
    #[serde(default)]
    pub unseeded: bool,
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
fn default_batch() -> usize {
    1000
}
fn default_quiet() -> f64 {
    5.0
}
fn default_pair_batches() -> u32 {
    2
}

impl ComponentConfig for GpfsConfig {
    type Component = Arc<dyn ChangeSource>;

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        if self.topic.trim().is_empty() {
            return Err(ctx.invalid("topic", "give the mmwatch topic"));
        }
        if self.consumers == 0 {
            return Err(ctx.invalid("consumers", "must be at least 1"));
        }
        if self.batch_size == 0 {
            return Err(ctx.invalid("batch_size", "must be at least 1"));
        }
        if self.pair_batches == 0 {
            // A rename cut by a batch boundary would become a removal and a creation: the
            // contents of a moved directory would be lost without `mount`.
            return Err(ctx
                .invalid("pair_batches", "must be at least 1 (batch boundaries an IN_MOVED_FROM waits for its pair)"));
        }
        if self.partitions.as_ref().is_some_and(|p| p.is_empty() || p.iter().any(|&x| x < 0)) {
            return Err(ctx.invalid("partitions", "list partition numbers (0, 1, ...)"));
        }
        crate::event::filter_mask(&self.filter).map_err(|e| ctx.invalid("filter", e))?;
        match (&self.seed_index, self.unseeded) {
            (None, false) => {
                return Err(ctx.invalid(
                    "seed_index",
                    "give the snapshot of the fileset the monitor starts from (a `file` sink directory; \
                     configs/snapshot-gpfs-seed.toml takes one), or `unseeded = true` for a fileset that is empty \
                     or whose index is rebuilt anyway (several times the minimal operations)",
                ))
            }
            (Some(_), true) => {
                return Err(ctx.invalid("unseeded", "give `seed_index` or `unseeded = true`, not both"));
            }
            _ => {}
        }
        if self.lru_capacity > 0 && self.mount.is_none() {
            return Err(
                ctx.invalid("lru_capacity", "needs `mount`: evicted files below a renamed directory are found there")
            );
        }
        // Validate the connection (and read its secrets) now, so errors name the key.
        self.connection.client_config(ctx)?;
        Ok(())
    }

    fn probe(&self, ctx: &BuildContext<'_>) -> Result<Option<String>, ConfigError> {
        self.connection.probe_topic(&self.topic, |k, r| ctx.invalid(k, r)).map(Some)
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn ChangeSource>, ConfigError> {
        self.validate(ctx)?;
        let path = self
            .dead_letter
            .clone()
            .unwrap_or_else(|| self.state_dir.join(format!("gpfs-{}.dead-letters.jsonl", self.topic)));
        Ok(Arc::new(GpfsSource { cfg: Arc::new(self), dead: Arc::new(Mutex::new(DeadLetters::new(path))) }))
    }
}

/// Counters of one GPFS monitor run.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct GpfsRunCounts {
    /// Messages read from the topic.
    pub messages: u64,
    /// Dropped by the ingestion filter.
    pub filtered: u64,
    /// Messages between the committed offset and the first one read (deleted unread).
    pub lost_messages: u64,
    /// Messages that could not be parsed, and event paths that may not be published.
    pub rejects: u64,
    /// Records withdrawn (sent as deletes): no mapped principal may see the file as it is now.
    pub withdrawn: u64,
    /// Messages kept in the dead-letter file (they could not be parsed).
    pub dead_letters: u64,
    /// Paths outside `fs_root` (not indexed).
    pub outside_root: u64,
    /// Records sent (upserts).
    pub updates: u64,
    /// Deletes sent.
    pub deletes: u64,
    /// Batches applied.
    pub batches: u64,
    /// Offset commits that succeeded (one per consumer and acknowledgement).
    pub commits: u64,
    /// From the first message received to the end (excludes connecting and joining the group).
    pub reading_seconds: f64,
    /// What the reducer did (ignored events dropped).
    pub reduce: ReduceCounts,
    /// What the state did with the events.
    pub state: crate::state::GpfsCounts,
    /// What walks of the mount left out.
    pub walks: crate::state::WalkLeftOut,
    /// Paths the state knows at the end of the run.
    pub objects: usize,
    /// Next offset to read, per partition, as committed.
    pub committed: Offsets,
}

/// The `gpfs` change source.
pub struct GpfsSource {
    cfg: Arc<GpfsConfig>,
    /// Messages that could not be parsed, kept before their offsets are committed (shared by
    /// the runs of a restarted source, so a message read again is kept once).
    dead: Arc<Mutex<DeadLetters>>,
}

impl GpfsSource {
    /// Know every object of the snapshot's index; the fileset and pool its records carry
    /// (an `mmapplypolicy` snapshot that shows them) are kept by inode in `kept`.
    fn seed(
        cfg: &GpfsConfig,
        state: &mut GpfsState,
        kept: &mut lru::LruCache<u64, StorageId>,
        dir: &std::path::Path,
    ) -> Result<(), IcicleError> {
        let index = icicle_gmeta::replay::read_index(dir).map_err(|e| external(format!("seed_index: {e}")))?;
        let prefix = cfg.path_prefix.trim_end_matches('/');
        let root = cfg.fs_root.trim_end_matches('/');
        for (path, c) in &index {
            let Some(rel) = path.strip_prefix(prefix) else { continue };
            let r = icicle_gmeta::replay::RecordedMeta::of(c);
            // The inode (from sources that have one) joins a file's hard links.
            let meta = Meta {
                inode: r.inode.unwrap_or(0),
                mode: r.mode.unwrap_or(0o100644),
                uid: r.uid.unwrap_or(0),
                gid: r.gid.unwrap_or(0),
                size: r.size.unwrap_or(0),
                atime: r.atime.unwrap_or(0),
                ctime: r.ctime.unwrap_or(0),
                mtime: r.mtime.unwrap_or(0),
            };
            state.seed(&format!("{root}{rel}"), meta);
            let st = &c["storage"];
            let id = StorageId::of(st["fileset"].as_str(), st["pool"].as_str());
            if meta.inode != 0 && !id.is_none() && kept.len() < STORAGE_KEPT {
                kept.put(meta.inode, id);
            }
        }
        tracing::info!(message = "seeded from the snapshot index", objects = index.len(), dir = %dir.display());
        Ok(())
    }
}

/// The index path of GPFS path `p`, or None when it is outside `fs_root`.
fn index_path(cfg: &GpfsConfig, p: &str) -> Option<String> {
    let root = cfg.fs_root.trim_end_matches('/');
    let rel = p.strip_prefix(root)?;
    if !(rel.is_empty() || rel.starts_with('/')) {
        return None;
    }
    let rel = if rel.is_empty() { "/" } else { rel };
    Some(format!("{}{}", cfg.path_prefix.trim_end_matches('/'), rel))
}

/// `Err` when index path `ip` is the fileset root itself: it is no file to publish or delete.
fn not_the_root(ip: &str, cfg: &GpfsConfig) -> Result<(), String> {
    let root = cfg.path_prefix.trim_end_matches('/');
    if ip == "/" || ip.trim_end_matches('/') == root {
        return Err(format!("{ip:?} is the fileset root"));
    }
    Ok(())
}

fn external(reason: String) -> IcicleError {
    IcicleError::Source(icicle_core::SourceError::External(reason))
}

/// The record for `meta` at index path `path`.
pub fn record_for<'a>(path: &'a str, m: &Meta) -> FileRecord<'a> {
    FileRecord { path, kind: FileKind::from_mode(m.mode), attrs: *m, storage: None }
}

#[async_trait]
impl Monitor for GpfsSource {
    type Stream = TopicStream;
    type State = GpfsEngine;

    fn settings(&self, _ctx: &MonitorContext) -> DriverSettings {
        let cfg = &self.cfg;
        DriverSettings::in_state_dir(
            cfg.batch_size,
            cfg.quiet_period_secs,
            &cfg.state_dir,
            &format!("gpfs-{}", cfg.topic),
            format!("topic {}", cfg.topic),
        )
    }

    fn state(&self, ctx: &MonitorContext, settings: &DriverSettings) -> Result<GpfsEngine, IcicleError> {
        let cfg = &self.cfg;
        let walker: Box<dyn Walker + Send> = match &cfg.mount {
            Some(m) => Box::new(MountWalker::new(m.clone(), cfg.fs_root.clone())),
            None => Box::new(NoWalk),
        };
        Ok(GpfsEngine {
            cfg: cfg.clone(),
            state: GpfsState::new(cfg.pair_batches),
            walker,
            enc: PrimaryEncoder::new(ctx.policy.clone()),
            posix: ctx.policy.access.is_some(),
            component: ctx.name.clone(),
            dead: self.dead.clone(),
            counts: GpfsRunCounts::default(),
            checkpoint_file: settings.checkpoint_file(),
            partitions: 1,
            seen: Default::default(),
            storage: lru::LruCache::unbounded(),
        })
    }

    /// Joins the consumer group (or takes its partitions) after the state is restored, so a
    /// slow restore (a seed snapshot) keeps no consumer waiting; offsets are Kafka's.
    async fn open(
        &self,
        ctx: &MonitorContext,
        engine: &mut GpfsEngine,
        _resume: Option<Offsets>,
    ) -> Result<TopicStream, IcicleError> {
        let cfg = &self.cfg;
        let settings = TopicSettings {
            connection: cfg.connection.clone(),
            topic: cfg.topic.clone(),
            group_id: cfg.group_id.clone(),
            consumers: cfg.consumers,
            partitions: cfg.partitions.clone(),
            start: cfg.start,
            on_gap: cfg.on_gap,
            what: "fileset",
        };
        let stream = TopicStream::connect(settings, &ctx.name, ctx.drain).await?;
        engine.partitions_read(stream.partition_count());
        Ok(stream)
    }
}

/// The fileset's state and what applying events to it needs.
pub struct GpfsEngine {
    cfg: Arc<GpfsConfig>,
    state: GpfsState,
    walker: Box<dyn Walker + Send>,
    enc: PrimaryEncoder,
    /// Visibility follows directory permissions.
    posix: bool,
    component: String,
    dead: Arc<Mutex<DeadLetters>>,
    counts: GpfsRunCounts,
    /// Where the driver keeps the checkpoint (for messages).
    checkpoint_file: PathBuf,
    /// How many partitions the stream reads: from two on, events are in no order across
    /// them, and the state checks its operations against the mount.
    partitions: usize,
    /// The partitions events came from (a topic can gain partitions while it is read).
    seen: std::collections::BTreeSet<i32>,
    /// The fileset and pool the last event naming each inode gave (a record sent when no
    /// event of its file is in the batch, as after a directory rename, keeps them).
    storage: lru::LruCache<u64, StorageId>,
}

/// Files whose fileset and pool are kept between batches (the cache grows to this, about
/// 40 bytes a file, and lets the least recently named go).
const STORAGE_KEPT: usize = 1 << 20;

impl GpfsEngine {
    /// Parse a batch of messages; what cannot be parsed is kept as a dead letter.
    fn parse(&mut self, batch: &[TopicMessage]) -> Result<Vec<(GpfsEvent, crate::state::Position)>, IcicleError> {
        let mut events = Vec::with_capacity(batch.len());
        // Validated when the config was built.
        let mask = crate::event::filter_mask(&self.cfg.filter).unwrap_or(0);
        for TopicMessage { partition, offset, payload } in batch {
            match GpfsEvent::parse_filtered(payload, mask) {
                Ok(ev) if ev.is_filtered() => self.counts.filtered += 1,
                Ok(ev) => events.push((ev, (*partition, *offset))),
                Err(reason) => {
                    self.counts.rejects += 1;
                    tracing::warn!(message = "rejected event", topic = %self.cfg.topic, partition, offset, reason = %reason.escape_debug());
                    // On disk before the batch's offsets are committed; a message read again
                    // after a restart is kept once.
                    let position = format!("{}/{partition}@{offset}", self.cfg.topic);
                    let mut dead = self
                        .dead
                        .lock()
                        .map_err(|_| IcicleError::Internal("the dead-letter file's lock is poisoned".into()))?;
                    if dead.first_time(&position, payload) {
                        dead.write(&self.component, &position, payload, &reason).map_err(|e| {
                            external(format!("writing the dead-letter file {}: {e}", dead.path().display()))
                        })?;
                        self.counts.dead_letters += 1;
                    }
                }
            }
        }
        Ok(events)
    }

    /// The stream reads `n` partitions (the topic's at connect, or more seen since): from two
    /// on, the state checks its operations against the mount (warnings say what may go stale
    /// without one, or with a state that does not know every file).
    pub fn partitions_read(&mut self, n: usize) {
        self.partitions = n;
        self.state.verify = n > 1;
        if n > 1 && self.walker.sees_files() && (!self.state.complete || self.cfg.lru_capacity > 0) {
            tracing::warn!(
                topic = %self.cfg.topic,
                partitions = n,
                "the topic has several partitions and the state is not seeded (`seed_index`) or is bounded \
                 (`lru_capacity`): files from before monitoring that it does not know can keep records \
                 under old names (docs/gpfs-monitor.md, \"Several partitions\")"
            );
        }
        if n > 1 && !self.walker.sees_files() {
            tracing::warn!(
                topic = %self.cfg.topic,
                partitions = n,
                "the topic has several partitions and there is no `mount`: an event read late from one \
                 partition can name a path a rename already changed, and its record goes stale; set `mount` \
                 (docs/gpfs-monitor.md, \"Several partitions\")"
            );
        }
    }

    /// Encode one batch's operations.
    /// When visibility follows directory permissions, each record is judged along its
    /// directories from the fileset root: as the mount shows them now (with `mount`: ACLs
    /// too), else as the events reported them, else unknown.
    fn emit(&mut self, ops: Ops) -> Emit {
        let (cfg, state, enc, counts, posix) = (&*self.cfg, &self.state, &mut self.enc, &mut self.counts, self.posix);
        let kept = &mut self.storage;
        let mut chunk = EntryBatch::default();
        let mut deletes = Vec::new();
        let mut updated = Vec::new();
        let mut chains = ChainCache::new(&cfg.fs_root);
        let root = cfg.fs_root.trim_end_matches('/');
        // The mount first: it shows ACLs, which events do not carry.
        let on_mount = |p: &str| Some(icicle_core::name::on(cfg.mount.as_ref()?, p.strip_prefix(root)?));
        let mut lookup = |d: &str| on_mount(d).and_then(|m| lstat_dir(&m)).or_else(|| state.dir_perm(d));
        for (path, op) in ops {
            let Some(ip) = index_path(cfg, &path) else {
                counts.outside_root += 1;
                continue;
            };
            // The row checks every published record passes, before anything is stat'ed or
            // sent: no `..`, NUL or control character, and not the fileset root as a file.
            if let Err(e) = icicle_core::record::check_path(&ip).and_then(|()| not_the_root(&ip, cfg)) {
                counts.rejects += 1;
                if let Some(n) = icicle_core::log_sample::count_to_log(&UNPUBLISHABLE) {
                    tracing::warn!(message = "event path refused (the first 20 are logged, then one in 10,000)", path = %path, error = %e, seen = n);
                }
                continue;
            }
            match op {
                Op::Delete => deletes.push(subject_for(&ip).into_owned()),
                Op::Update(m) => {
                    updated.push(path_key(&path));
                    let file = if posix { on_mount(&path) } else { None };
                    let judge = posix.then(|| Judge {
                        chains: &mut chains,
                        path: &path,
                        lookup: &mut lookup,
                        acl_at: file.as_deref(),
                    });
                    let storage = kept.get(&m.inode).filter(|_| m.inode != 0).and_then(|id| id.get());
                    let rec = FileRecord { storage: storage.as_deref(), ..record_for(&ip, &m) };
                    match enc.publish(&mut chunk, &mut deletes, &rec, judge) {
                        Published::Sent => counts.updates += 1,
                        // Nobody mapped may see it as it is now: withdrawn.
                        Published::Withdrawn => counts.withdrawn += 1,
                    }
                }
            }
        }
        counts.deletes += deletes.len() as u64;
        Emit { chunk, deletes, sent: updated }
    }
}

#[async_trait]
impl ChangeState for GpfsEngine {
    type Event = TopicMessage;
    type Position = Offsets;
    type Report = GpfsRunCounts;
    type StreamCounts = TopicCounts;

    /// The path and inode state of the last checkpoint, or on a first start the seed snapshot
    /// (`seed_index`) when there is one. Offsets are Kafka's committed ones: no position.
    async fn restore(
        &mut self,
        checkpoint: Option<Vec<u8>>,
        sent_ahead: Vec<u64>,
    ) -> Result<Option<Offsets>, IcicleError> {
        let cfg = self.cfg.clone();
        self.state = match checkpoint {
            Some(bytes) => {
                let cp = serde_json::from_slice(&bytes)
                    .map_err(|e| external(format!("{}: {e}", self.checkpoint_file.display())))?;
                GpfsState::restore(cp, cfg.pair_batches)
            }
            None => {
                let mut s = GpfsState::new(cfg.pair_batches);
                match &cfg.seed_index {
                    Some(dir) => GpfsSource::seed(&cfg, &mut s, &mut self.storage, dir)?,
                    None => tracing::info!(
                        topic = %cfg.topic,
                        "unseeded: the monitor cannot know which names the index holds and may send several \
                         times the operations needed (start from a snapshot of the fileset: docs/gpfs-monitor.md)"
                    ),
                }
                s
            }
        };
        self.state.dir_attributes = self.posix;
        // Known once the stream is open (after a restart, from the run before).
        self.state.verify = self.partitions > 1;
        self.state.set_lru_capacity(cfg.lru_capacity);
        self.state.maybe_delivered(sent_ahead);
        Ok(None)
    }

    async fn apply(&mut self, batch: Vec<TopicMessage>) -> Result<Emit, IcicleError> {
        self.seen.extend(batch.iter().map(|m| m.partition));
        if self.seen.len() > self.partitions {
            self.partitions_read(self.seen.len());
        }
        for m in &batch {
            self.state.read((m.partition, m.offset));
        }
        let mut events = self.parse(&batch)?;
        for (ev, _) in &events {
            if !ev.storage.is_none() && ev.meta.inode != 0 {
                self.storage.put(ev.meta.inode, ev.storage);
                if self.storage.len() > STORAGE_KEPT {
                    self.storage.pop_lru();
                }
            }
        }
        let mut ops = Ops::default();
        let reduced =
            reduce_apply(Some(&mut IgnoredEvents), &mut self.state, &mut events, self.walker.as_mut(), &mut ops);
        self.counts.reduce.add(&reduced);
        self.counts.batches += 1;
        Ok(self.emit(ops))
    }

    async fn finish(&mut self) -> Result<Option<Emit>, IcicleError> {
        // Halves still waiting at the end of a drained stream were moved out of the fileset.
        if self.state.pending().is_empty() {
            return Ok(None);
        }
        let mut ops = Ops::default();
        self.state.begin_batch();
        self.state.finish(self.walker.as_mut(), &mut ops);
        Ok(Some(self.emit(ops)))
    }

    fn hold_back(&self, to: &mut Offsets) {
        for m in self.state.pending() {
            let (p, o) = m.position;
            let e = to.entry(p).or_insert(o);
            *e = (*e).min(o);
        }
    }

    fn checkpoint(&self, _at: &Offsets) -> Result<Vec<u8>, IcicleError> {
        serde_json::to_vec(&self.state.checkpoint())
            .map_err(|e| IcicleError::Internal(format!("encoding the checkpoint: {e}")))
    }

    fn batch_counts(&self, topic: &TopicCounts) -> BatchCounts {
        let (counts, c) = (&self.counts, &self.state.counts);
        BatchCounts {
            records_in: topic.messages,
            filtered: counts.reduce.ignored + counts.filtered,
            rejects: counts.rejects,
            outcomes: vec![
                ("coalesced", c.coalesced),
                ("cancelled", c.cancelled),
                ("renames", c.renames),
                ("directory_renames", c.directory_renames),
                ("moved_out", c.moved_out),
                ("replayed_halves", c.replayed_halves),
                ("corrected_by_mount", c.corrected),
                ("newer_kept", c.newer_kept),
                ("unpaired_moves", c.unpaired_moves),
                ("late_deletes", c.late_deletes),
                ("late_pairs", c.late_pairs),
            ],
            updates: counts.updates,
            deletes: counts.deletes,
            batches: counts.batches,
            state_entries: self.state.len(),
            state_bytes: self.state.approx_bytes(),
            state_counts: vec![
                ("moved_descendants", c.moved_descendants),
                ("pending_moves", self.state.pending().len() as u64),
            ],
        }
    }

    fn report(&self, t: &TopicCounts) -> GpfsRunCounts {
        let mut c = self.counts.clone();
        c.messages = t.messages;
        c.lost_messages = t.lost_messages;
        c.commits = t.commits;
        c.committed = t.committed.clone();
        c.reading_seconds = t.first.map_or(0.0, |f| f.elapsed().as_secs_f64());
        c.state = self.state.counts;
        c.walks = self.walker.left_out();
        c.objects = self.state.len();
        c
    }
}
