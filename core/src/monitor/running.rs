//! A change-source plugin ([`Monitor`]), its object-safe face ([`ChangeSource`]) and an
//! opened stream and state behind one object ([`RunningMonitor`]).

use std::time::Duration;

use async_trait::async_trait;

use super::context::MonitorContext;
use super::settings::DriverSettings;
use super::stream::{BatchCounts, ChangeState, ChangeStream, Emit, Polled};
use crate::error::IcicleError;

/// What a change-source plugin supplies: its settings, a fresh state, and its stream opened
/// after the state was restored. The runtime runs the rest (see [`ChangeSource`]).
#[async_trait]
pub trait Monitor: Send + Sync + 'static {
    /// The stream it reads and acknowledges.
    type Stream: ChangeStream + 'static;
    /// Its rules and namespace state, over the stream's events and positions.
    type State: ChangeState<
            Event = <Self::Stream as ChangeStream>::Event,
            Position = <Self::Stream as ChangeStream>::Position,
            StreamCounts = <Self::Stream as ChangeStream>::Counts,
        > + 'static;

    /// How it batches and where its state files live.
    fn settings(&self, ctx: &MonitorContext) -> DriverSettings;
    /// A fresh state, before the runtime restores it from the checkpoint.
    fn state(&self, ctx: &MonitorContext, settings: &DriverSettings) -> Result<Self::State, IcicleError>;
    /// Open the stream once `state` is restored; `resume` is the position its checkpoint
    /// reached, when the state keeps one (a changelog index).
    async fn open(
        &self,
        ctx: &MonitorContext,
        state: &mut Self::State,
        resume: Option<<Self::Stream as ChangeStream>::Position>,
    ) -> Result<Self::Stream, IcicleError>;
}

/// The checkpoint and sent-ahead keys the runtime read for a monitor (see
/// [`ChangeState::restore`]).
#[derive(Debug, Default)]
pub struct Restored {
    /// The last checkpoint's bytes; `None` on a first start.
    pub checkpoint: Option<Vec<u8>>,
    /// Keys of the paths a delivery after that checkpoint may have indexed.
    pub sent_ahead: Vec<u64>,
}

/// A configured change source as the registry builds it and the runtime holds it. Every
/// [`Monitor`] is one.
#[async_trait]
pub trait ChangeSource: Send + Sync {
    /// How it batches and where its state files live.
    fn settings(&self, ctx: &MonitorContext) -> DriverSettings;
    /// Build the state, restore it from `restored`, and open the stream.
    async fn open(
        &self,
        ctx: &MonitorContext,
        settings: &DriverSettings,
        restored: Restored,
    ) -> Result<Box<dyn RunningMonitor>, IcicleError>;
}

#[async_trait]
impl<M: Monitor> ChangeSource for M {
    fn settings(&self, ctx: &MonitorContext) -> DriverSettings {
        Monitor::settings(self, ctx)
    }

    async fn open(
        &self,
        ctx: &MonitorContext,
        settings: &DriverSettings,
        restored: Restored,
    ) -> Result<Box<dyn RunningMonitor>, IcicleError> {
        let mut state = self.state(ctx, settings)?;
        let resume = state.restore(restored.checkpoint, restored.sent_ahead).await?;
        let stream = Monitor::open(self, ctx, &mut state, resume).await?;
        Ok(Box::new(Running { stream, state, pending: Vec::new(), noted: None }))
    }
}

/// An opened monitor, its event and position types hidden: the events read wait in it, and it
/// notes the position that acknowledging the last batch taken reaches. The runtime's driver
/// calls it once per step of a batch.
#[async_trait]
pub trait RunningMonitor: Send {
    /// Read what can be read now into the waiting events (see [`ChangeStream::poll`]).
    async fn poll(
        &mut self,
        wait: Option<Duration>,
        stop: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<Polled, IcicleError>;
    /// Events read and not yet taken.
    fn waiting(&self) -> usize;
    /// Whether acknowledging now would reach further upstream (records read and filtered).
    fn unacknowledged(&self) -> bool;
    /// Take the first `n` waiting events (all of them when `None`) as the next batch, note
    /// the position acknowledging it reaches, and apply it; `None` when the batch is empty.
    async fn apply_next(&mut self, n: Option<usize>) -> Result<Option<Emit>, IcicleError>;
    /// Whether the last apply left work for more emits (see [`ChangeState::more`]).
    fn more(&self) -> bool;
    /// The next part of the last apply's work.
    async fn apply_more(&mut self) -> Result<Emit, IcicleError>;
    /// The stream was drained: what only its end decides; notes the position of everything
    /// read when there is something.
    async fn finish(&mut self) -> Result<Option<Emit>, IcicleError>;
    /// The checkpoint of the state at the noted position, moved back before what the state
    /// still waits on; `None` when nothing is noted.
    fn checkpoint(&mut self) -> Result<Option<Vec<u8>>, IcicleError>;
    /// Acknowledge upstream up to the noted position (delivered and checkpointed).
    async fn acknowledge(&mut self) -> Result<(), IcicleError>;
    /// Counters for the batch metrics.
    fn batch_counts(&self) -> BatchCounts;
    /// The final report, as JSON.
    fn report(&self) -> Result<serde_json::Value, IcicleError>;
}

/// A stream and its state, opened.
struct Running<S: ChangeStream, T> {
    stream: S,
    state: T,
    pending: Vec<S::Event>,
    noted: Option<S::Position>,
}

#[async_trait]
impl<S, T> RunningMonitor for Running<S, T>
where
    S: ChangeStream,
    T: ChangeState<Event = S::Event, Position = S::Position, StreamCounts = S::Counts>,
{
    async fn poll(
        &mut self,
        wait: Option<Duration>,
        stop: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<Polled, IcicleError> {
        self.stream.poll(&mut self.pending, wait, stop).await
    }

    fn waiting(&self) -> usize {
        self.pending.len()
    }

    fn unacknowledged(&self) -> bool {
        self.stream.position(&[], true).is_some()
    }

    async fn apply_next(&mut self, n: Option<usize>) -> Result<Option<Emit>, IcicleError> {
        let n = n.unwrap_or(self.pending.len()).min(self.pending.len());
        let batch: Vec<S::Event> = self.pending.drain(..n).collect();
        self.noted = self.stream.position(&batch, self.pending.is_empty());
        if batch.is_empty() {
            return Ok(None);
        }
        self.state.apply(batch).await.map(Some)
    }

    fn more(&self) -> bool {
        self.state.more()
    }

    async fn apply_more(&mut self) -> Result<Emit, IcicleError> {
        self.state.apply(Vec::new()).await
    }

    async fn finish(&mut self) -> Result<Option<Emit>, IcicleError> {
        let emit = self.state.finish().await?;
        if emit.is_some() {
            // Past what the state held back for the halves it just settled.
            self.noted = Some(self.stream.read_position().unwrap_or_default());
        }
        Ok(emit)
    }

    fn checkpoint(&mut self) -> Result<Option<Vec<u8>>, IcicleError> {
        let Some(to) = self.noted.as_mut() else { return Ok(None) };
        self.state.hold_back(to);
        self.state.checkpoint(to).map(Some)
    }

    async fn acknowledge(&mut self) -> Result<(), IcicleError> {
        match self.noted.take() {
            Some(to) => self.stream.truncate(&to).await,
            None => Ok(()),
        }
    }

    fn batch_counts(&self) -> BatchCounts {
        self.state.batch_counts(&self.stream.counts())
    }

    fn report(&self) -> Result<serde_json::Value, IcicleError> {
        serde_json::to_value(self.state.report(&self.stream.counts()))
            .map_err(|e| IcicleError::Internal(format!("encoding the report: {e}")))
    }
}
