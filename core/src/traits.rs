//! The six component traits. Data flows source → reducer → state → sink;
//! acknowledgements flow back from sinks to sources.

use std::any::Any;
use std::path::PathBuf;

use async_trait::async_trait;

use crate::batch::DocumentBatch;
use crate::error::{SinkError, SourceError};
use crate::record::{FileRecord, Reject};

/// One independently readable unit of a source: a file, a byte range of a file, one
/// `db.db`, one directory, one MDT, one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// Human-readable name used in rejects and progress (usually a path).
    pub name: String,
    /// The file or directory this split reads.
    pub path: PathBuf,
    /// Byte range `[start, end)` within `path`, for splittable text inputs.
    pub range: Option<(u64, u64)>,
    /// Progress units this split accounts for (bytes for text inputs, 1 for a database).
    pub weight: u64,
    /// What this split covers, when known (a GUFI directory's entries, a walked subtree).
    /// If the split cannot be read, deletes there are withheld; `None` (a listing file, a
    /// byte range, an object) withholds every delete of the run.
    pub scope: Option<crate::scope::Scope>,
    /// The version of the input the plan saw, when a reader elsewhere (another MPI rank) must
    /// read that one or fail: an S3 object's size and ETag.
    pub version: Option<String>,
}

impl Split {
    /// A whole-file (or whole-directory) split.
    pub fn whole(path: PathBuf, weight: u64) -> Split {
        Split { name: path.display().to_string(), path, range: None, weight, scope: None, version: None }
    }
}

/// Where a source hands what it read. Implemented by the runtime, one per worker thread.
pub trait RowSink {
    /// A file or link record (directories go to [`RowSink::directory`]).
    fn record(&mut self, rec: &FileRecord<'_>);
    /// [`RowSink::record`] of the row at byte `offset` of its input (a text source's), so a
    /// path read twice can be named by both its lines.
    fn record_at(&mut self, rec: &FileRecord<'_>, _offset: u64) {
        self.record(rec)
    }
    /// A directory row: counted, never a primary record.
    fn directory(&mut self, rec: &FileRecord<'_>);
    /// A row that could not be turned into a record.
    fn reject(&mut self, reject: Reject);
    /// Progress in the split's weight units.
    fn progress(&mut self, units: u64);
    /// Schedule more work discovered while reading (e.g. subdirectories in a walk).
    fn spawn(&mut self, split: Split);
    /// Hand over buffered records now; a streaming source calls this before it blocks.
    fn flush(&mut self) {}
    /// Whether visibility follows permissions (a source that can read POSIX ACLs should).
    fn wants_acls(&self) -> bool {
        false
    }
    /// [`RowSink::record`] with the file's POSIX access ACL.
    fn record_with_acl(&mut self, rec: &FileRecord<'_>, _acl: Option<crate::access::Acl>) {
        self.record(rec)
    }
    /// [`RowSink::directory`] with the directory's POSIX access ACL.
    fn directory_with_acl(&mut self, rec: &FileRecord<'_>, _acl: Option<crate::access::Acl>) {
        self.directory(rec)
    }
}

/// A source of metadata: snapshot readers today, event streams in the monitor.
#[async_trait]
pub trait Source: Send + Sync {
    /// Discover the splits to read. May do I/O (list files, stat sizes).
    async fn plan(&self) -> Result<Vec<Split>, SourceError>;

    /// Read one split, on a worker thread (blocking and CPU-bound work are fine here).
    /// Bad rows are `out.reject`ed and reading continues; an `Err` means the whole split
    /// could not be read and is itself reported as a reject by the runtime.
    fn read(&self, split: &Split, out: &mut dyn RowSink) -> Result<(), SourceError>;

    /// Everything this run read was durably delivered by every sink and the manifest (if any)
    /// committed: a source that consumes its input (a queue, a spool) may release it now.
    /// Never called after a failed run.
    async fn acknowledge(&self) -> Result<(), SourceError> {
        Ok(())
    }

    /// Whether every directory's row is read before anything below it (a walk): a run whose
    /// visibility follows directory permissions then needs no directory pre-pass.
    fn parents_first(&self) -> bool {
        false
    }

    /// Cut `split` into byte ranges of about `bytes` each, as planning with a smaller
    /// `split_bytes` would have (a small input spread over many MPI ranks); `None` when this
    /// source's splits cannot be cut (a database, a directory).
    fn divide(&self, _split: &Split, _bytes: u64) -> Option<Vec<Split>> {
        None
    }

    /// Read only `split`'s directory rows (the pre-pass of a run whose visibility follows
    /// directory permissions); the default reads the whole split.
    fn read_directories(&self, split: &Split, out: &mut dyn RowSink) -> Result<(), SourceError> {
        self.read(split, out)
    }
}

/// Sources by component id.
pub type NamedSources = Vec<(String, std::sync::Arc<dyn Source>)>;
/// Sinks by component id.
pub type NamedSinks = Vec<(String, Box<dyn Sink>)>;

/// What a reduction did to one batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReduceCounts {
    /// Events in.
    pub input: u64,
    /// Events kept.
    pub passed: u64,
    /// Events folded into a later one for the same object.
    pub coalesced: u64,
    /// Events dropped because the object was created and removed within the batch.
    pub cancelled: u64,
    /// Events that mean nothing for the index.
    pub ignored: u64,
}

impl ReduceCounts {
    /// Add another batch's counts.
    pub fn add(&mut self, o: &ReduceCounts) {
        self.input += o.input;
        self.passed += o.passed;
        self.coalesced += o.coalesced;
        self.cancelled += o.cancelled;
        self.ignored += o.ignored;
    }
}

/// A stateful, rule-driven stream operator: reduces one batch of a stream's own events in
/// place (coalescing, cancellation, rename override), keeping stream order. Lustre's rule
/// table works on changelog records, GPFS's on watch-folder events.
pub trait Reducer: Send {
    /// The stream's event type.
    type Event;
    /// Reduce `batch` to a minimal equivalent batch.
    fn reduce(&mut self, batch: &mut Vec<Self::Event>) -> ReduceCounts;
}

/// Holds a monitored namespace (a FID directory tree, a path map) and turns reduced events
/// into pending index operations on paths, emitted together at the end of a batch.
pub trait StateStore: Send {
    /// The stream's event type.
    type Event;
    /// What applying needs from outside the state (`fid2path` and the mount for Lustre, a
    /// directory walker for GPFS).
    type Env<'e>: ?Sized;
    /// Pending operations by path (last one per path wins), in first-touched order.
    type Ops: Default;
    /// A batch (one emit) begins.
    fn begin_batch(&mut self);
    /// Apply one reduced event, adding the index operations it implies to `ops`.
    fn apply(&mut self, event: &Self::Event, env: &mut Self::Env<'_>, ops: &mut Self::Ops);
    /// The batch ends: operations that only its end decides (unpaired rename halves, checks
    /// against the file system as it is now).
    fn end_batch(&mut self, _env: &mut Self::Env<'_>, _ops: &mut Self::Ops) {}
    /// Objects held.
    fn len(&self) -> usize;
    /// Whether nothing is held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Approximate heap bytes held.
    fn approx_bytes(&self) -> usize;
}

/// Why two sketches could not be merged, or a value could not be inserted.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SketchError {
    /// A sketch of another type was merged in.
    #[error("cannot merge a `{theirs}` sketch into a `{ours}` sketch")]
    WrongType {
        /// The receiving sketch's type name.
        ours: String,
        /// The other sketch's type name.
        theirs: String,
    },
    /// A sketch of the same type but other parameters (`k`, `alpha`...) was merged in; says which.
    #[error("cannot merge sketches with different configurations: {0}")]
    MismatchedConfig(String),
    /// An insert or merge would take the sketch past its memory cap.
    #[error("sketch would exceed its memory cap of {cap} bytes")]
    MemoryCap {
        /// The cap, in bytes.
        cap: usize,
    },
    /// Serialized bytes are truncated or malformed, or a sketch's lock was poisoned.
    #[error("cannot decode sketch: {0}")]
    Decode(String),
    /// A NaN was inserted.
    #[error("cannot insert {0}: not a number")]
    NotANumber(f64),
}

/// A mergeable quantile summary.
pub trait Sketch: Send + Sync {
    /// The plugin type name (`ddsketch`, `kll`, ...).
    fn kind(&self) -> &'static str;
    /// Add one value.
    fn insert(&mut self, value: f64) -> Result<(), SketchError>;
    /// Fold another sketch of the same type and configuration into this one.
    fn merge(&mut self, other: &dyn Sketch) -> Result<(), SketchError>;
    /// The estimated `q`-quantile, `q` in `[0, 1]`; `None` when empty.
    fn quantile(&self, q: f64) -> Option<f64>;
    /// Values inserted (merged ones included).
    fn count(&self) -> u64;
    /// The smallest value inserted; `None` when empty.
    fn min(&self) -> Option<f64>;
    /// The largest value inserted; `None` when empty.
    fn max(&self) -> Option<f64>;
    /// The sum of the values inserted (0 when empty).
    fn sum(&self) -> f64;
    /// Serialize to bytes.
    fn to_bytes(&self) -> Vec<u8>;
    /// Approximate heap size in bytes.
    fn memory_bytes(&self) -> usize;
    /// For downcasting in `merge`.
    fn as_any(&self) -> &dyn Any;
}

/// Makes empty sketches of one type and configuration, and decodes serialized ones.
pub trait SketchFactory: Send + Sync {
    /// The plugin type name.
    fn kind(&self) -> &'static str;
    /// A short description of the configuration (`alpha=0.01`).
    fn describe(&self) -> String;
    /// A new, empty sketch.
    fn create(&self) -> Box<dyn Sketch>;
    /// A new, empty sketch whose randomness (if it has any) starts from `seed`: the same seed
    /// and the same values give the same sketch. Sketches without randomness ignore the seed.
    fn create_seeded(&self, seed: u64) -> Box<dyn Sketch> {
        let _ = seed;
        self.create()
    }
    /// Decode bytes produced by [`Sketch::to_bytes`].
    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn Sketch>, SketchError>;
}

/// A delivery target for index documents.
#[async_trait]
pub trait Sink: Send {
    /// Deliver one batch. `Ok` means accepted, in order; it is durable once [`Sink::sync`]
    /// (or [`Sink::close`]) has returned `Ok`.
    async fn deliver(&mut self, batch: &DocumentBatch) -> Result<(), SinkError>;
    /// Make every batch delivered so far durable. The runtime calls it before it acknowledges
    /// anything delivered (a monitor's position, a manifest commit); a sink that is durable
    /// at `deliver` has nothing to do.
    async fn sync(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
    /// What the last successful [`Sink::deliver`] produced that an audit trail should record
    /// (Globus: `{"task_ids": [...], "index_id": ...}`; Kafka: `{"topic": ..., "offsets": [...]}`).
    /// `None` when there is nothing worth recording.
    fn receipt(&self) -> Option<serde_json::Value> {
        None
    }
    /// The subjects of the entries this sink set aside so far (refused on their own, kept in a
    /// dead-letter file) instead of failing a delivery; `Ok` from `deliver` covers them. A
    /// versioned snapshot sends them again on its next run.
    fn dead_lettered(&self) -> &[String] {
        &[]
    }
    /// What this sink did so far, for a run's summary (Globus: requests, retries, tasks and
    /// their ids). `None` when it has nothing of its own to tell.
    fn facts(&self) -> Option<serde_json::Value> {
        None
    }
    /// Called once every sink has delivered `batch`, with every sink's receipt (sink id,
    /// receipt). An `Err` fails the delivery: nothing is acknowledged upstream.
    async fn delivered(
        &mut self,
        _batch: &DocumentBatch,
        _receipts: &[(String, serde_json::Value)],
    ) -> Result<(), SinkError> {
        Ok(())
    }
    /// Make everything delivered durable (as [`Sink::sync`]) and release resources at the end
    /// of a run.
    async fn close(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// One component of a file's layout: the byte extent it covers and how it is striped
/// (a plain Lustre layout is one component `[0, EOF)`; a PFL layout has several).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct LayoutComponent {
    /// First byte of the extent.
    pub start: u64,
    /// End of the extent (exclusive); `u64::MAX` for "to end of file".
    pub end: u64,
    /// Stripe size in bytes (never 0 in a valid layout).
    pub stripe_size: u64,
    /// OST indices in stripe order (the stripe count is their number). Real indices, sparse
    /// (e.g. 113, 204): nothing may assume they are `0..n`.
    pub osts: Vec<u32>,
}

/// Where a file's data lives: its stripe layout over object storage targets.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObjectLayout {
    /// The file's path.
    pub path: String,
    /// The file's size in bytes.
    pub size: u64,
    /// Components in file order (instantiated ones only: a component without OST objects
    /// holds no data yet and ends the list).
    pub components: Vec<LayoutComponent>,
}

impl ObjectLayout {
    /// A plain (single-component) layout: `osts` striped with `stripe_size` over the whole file.
    pub fn plain(path: impl Into<String>, size: u64, stripe_size: u64, osts: Vec<u32>) -> ObjectLayout {
        ObjectLayout {
            path: path.into(),
            size,
            components: vec![LayoutComponent { start: 0, end: u64::MAX, stripe_size, osts }],
        }
    }
}

/// The bytes of one file that live on one OST within one layout component: the chunks
/// `[off, min(off + stripe_size, end))` for `off = start, start + interval, ... < end`
/// (the SwiftLoad catalog's layout line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ObjectTask {
    /// Index of the file in the `objects` slice given to [`Placement::place`].
    pub object: usize,
    /// The OST holding these chunks.
    pub ost: u32,
    /// Offset of the first chunk.
    pub start: u64,
    /// End (exclusive) of the component's extent clamped to the file size.
    pub end: u64,
    /// Distance between consecutive chunks (stripe count x stripe size).
    pub interval: u64,
    /// Chunk length (the stripe size).
    pub stripe_size: u64,
}

/// Binds I/O processes to objects so that no storage target is oversubscribed.
pub trait Placement: Send + Sync {
    /// The policy's name (`object`, `file`).
    fn name(&self) -> &str;
    /// Assign the data of `objects` to `processes` ranks: for each rank, the tasks it reads,
    /// in order. Every byte of every object is in exactly one task of one rank.
    fn place(&self, objects: &[ObjectLayout], processes: usize) -> Vec<Vec<ObjectTask>>;
}
