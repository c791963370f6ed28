//! The two halves of a monitor: a [`ChangeStream`] (reading and acknowledging upstream:
//! `lfs changelog` and `changelog_clear`, Kafka fetches and offset commits) and a
//! [`ChangeState`] (the plugin's rules and namespace state: reduce, apply, encode, checkpoint).

use std::time::Duration;

use async_trait::async_trait;

use crate::batch::EntryBatch;
use crate::error::IcicleError;

/// What one [`ChangeStream::poll`] brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polled {
    /// Something new was read (events, or records acknowledged without one, e.g. filtered).
    New,
    /// Nothing new yet.
    Idle,
    /// Draining, and the stream has nothing more to give.
    End,
}

/// A stream of changes read in batches and acknowledged (truncated) at a position.
#[async_trait]
pub trait ChangeStream: Send {
    /// One record as the state applies it (parsed, or raw when the state parses it).
    type Event: Send;
    /// How far an acknowledgement reaches (a changelog index; next offsets per partition);
    /// the default reaches nothing new.
    type Position: Send + Default;
    /// What the stream counts (records read, filtered, lost; messages and commits), which the
    /// state's batch counts and final report take in.
    type Counts: Send;
    /// Append what can be read now to `out`, in stream order, waiting at most `wait` (`None`:
    /// until something comes) when nothing is there; returns early when `stop` changes.
    async fn poll(
        &mut self,
        out: &mut Vec<Self::Event>,
        wait: Option<Duration>,
        stop: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<Polled, IcicleError>;
    /// The position that acknowledging `batch` reaches; `rest_empty`: no read event waits
    /// after it, so everything read is covered (filtered records too). `None`: nothing new.
    fn position(&self, batch: &[Self::Event], rest_empty: bool) -> Option<Self::Position>;
    /// The position that acknowledging everything read so far reaches (at the end of a
    /// drain, once the state holds nothing back); by default that of an empty batch with
    /// nothing after it.
    fn read_position(&self) -> Option<Self::Position> {
        self.position(&[], true)
    }
    /// Acknowledge upstream everything up to `to`: its batches are delivered and checkpointed.
    async fn truncate(&mut self, to: &Self::Position) -> Result<(), IcicleError>;
    /// Its counters as they are now.
    fn counts(&self) -> Self::Counts;
}

/// One batch's index operations, encoded.
#[derive(Default)]
pub struct Emit {
    /// The updates, as primary records.
    pub chunk: EntryBatch,
    /// The deletes, as subjects.
    pub deletes: Vec<String>,
    /// Keys of paths updated for the first time since the last checkpoint: written to the
    /// sent-ahead journal before delivery, so a replay after a kill knows the index may hold them.
    pub sent: Vec<u64>,
}

/// What the batch metrics report, after a batch.
pub struct BatchCounts {
    /// Records read so far.
    pub records_in: u64,
    /// Records dropped by filters so far.
    pub filtered: u64,
    /// Records rejected so far.
    pub rejects: u64,
    /// The state's outcome counters (coalesced, cancelled, renames, ...).
    pub outcomes: Vec<(&'static str, u64)>,
    /// Updates emitted so far.
    pub updates: u64,
    /// Deletes emitted so far.
    pub deletes: u64,
    /// Batches applied so far.
    pub batches: u64,
    /// Objects the state holds.
    pub state_entries: usize,
    /// The state's approximate heap bytes.
    pub state_bytes: usize,
    /// Other state gauges (evictions, fid2path calls, pending moves, ...).
    pub state_counts: Vec<(&'static str, u64)>,
}

/// A monitor's rules and state: turns batches of a stream's events into index operations.
#[async_trait]
pub trait ChangeState: Send {
    /// The stream's event type.
    type Event: Send;
    /// The stream's position type.
    type Position: Send + Sync;
    /// The final report's type (printed as JSON by `icicle monitor`).
    type Report: serde::Serialize;
    /// The stream's counters ([`ChangeStream::Counts`]).
    type StreamCounts;
    /// Take up the last checkpoint (the bytes [`ChangeState::checkpoint`] wrote; `None`: the
    /// first start) and the keys of the sent-ahead journal (paths a delivery after that
    /// checkpoint may have indexed). Returns the position the checkpoint reached when the
    /// stream resumes after it (a changelog index), `None` when the stream keeps its own
    /// (committed offsets) or there was no checkpoint.
    async fn restore(
        &mut self,
        checkpoint: Option<Vec<u8>>,
        sent_ahead: Vec<u64>,
    ) -> Result<Option<Self::Position>, IcicleError>;
    /// Reduce `batch` (the plugin's [`crate::Reducer`]), apply it to the state (its
    /// [`crate::StateStore`], usually through [`super::reduce_apply`]) and encode the
    /// operations it implies.
    async fn apply(&mut self, batch: Vec<Self::Event>) -> Result<Emit, IcicleError>;
    /// The stream was drained: operations only its end decides (rename halves never paired).
    /// After them the state is checkpointed and the stream truncated at its position.
    async fn finish(&mut self) -> Result<Option<Emit>, IcicleError> {
        Ok(None)
    }
    /// Work left over from the last [`ChangeState::apply`] (a rescan larger than one emit):
    /// the driver applies an empty batch again, delivering each emit, before it checkpoints
    /// and reads on.
    fn more(&self) -> bool {
        false
    }
    /// Move `to` back before anything the state still waits on (a rename half whose pair
    /// may come after a restart must be read again).
    fn hold_back(&self, _to: &mut Self::Position) {}
    /// The state as of `at`, serialized for the checkpoint file.
    fn checkpoint(&self, at: &Self::Position) -> Result<Vec<u8>, IcicleError>;
    /// Counters for the batch metrics.
    fn batch_counts(&self, stream: &Self::StreamCounts) -> BatchCounts;
    /// The final report of the run: the plugin's own counters.
    fn report(&self, stream: &Self::StreamCounts) -> Self::Report;
}
