//! The monitor driver: one loop for every change stream. Restore the state from its
//! checkpoint; then read into a batch until it is full or
//! the stream is quiet; apply it to the state (reduce, apply, encode); write the sent-ahead
//! journal; deliver to every sink; checkpoint the state durably; only then acknowledge
//! upstream. A stop signal delivers and acknowledges the batch in hand, then returns the report.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use icicle_core::durable::StateLock;
use icicle_core::metrics::{record_batch, BatchReport};
use icicle_core::sent_ahead::SentAhead;
use icicle_core::stream::{ChangeState, ChangeStream, Emit, Polled};
use icicle_core::traits::MonitorContext;
use icicle_core::IcicleError;

/// How a driver batches and where it keeps its files.
pub struct DriverSettings {
    /// A batch closes at this many events...
    pub batch_size: usize,
    /// ...or once nothing new came for this long (at once when draining).
    pub quiet: Duration,
    /// The state checkpoint, replaced atomically after every delivered batch.
    pub state_file: PathBuf,
    /// Keys of the paths updated since the last checkpoint.
    pub sent_ahead: SentAhead,
    /// The stream, as logs name it (`MDT fs0-MDT0000`, `topic fset1`).
    pub what: String,
    /// `<stem>.lock`, taken at restore and held while the settings live: one monitor per state.
    lock_file: PathBuf,
    lock: std::sync::Mutex<Option<StateLock>>,
}

impl DriverSettings {
    /// Settings whose files live in `state_dir`: `<stem>.checkpoint.json` and
    /// `<stem>.sent-ahead`; a batch closes at `batch_size` events or `quiet_period_secs`.
    pub fn in_state_dir(batch_size: usize, quiet_period_secs: f64, state_dir: &std::path::Path, stem: &str, what: String) -> DriverSettings {
        DriverSettings {
            batch_size,
            quiet: icicle_core::time::secs(quiet_period_secs),
            state_file: state_dir.join(format!("{stem}.checkpoint.json")),
            sent_ahead: SentAhead::new(state_dir.join(format!("{stem}.sent-ahead"))),
            what,
            lock_file: state_dir.join(format!("{stem}.lock")),
            lock: Default::default(),
        }
    }
}

/// Restore `state` from the checkpoint and the sent-ahead journal that `settings` name (a
/// missing checkpoint is a first start; an unreadable one an error); returns the position the
/// stream resumes after, when the state's checkpoint holds one. Sources call it before they
/// open their stream, so that slow restores (a seed snapshot) keep no consumer waiting.
pub async fn restore<T: ChangeState>(state: &mut T, settings: &DriverSettings) -> Result<Option<T::Position>, IcicleError> {
    if let Ok(mut held) = settings.lock.lock() {
        if held.is_none() {
            let lock = StateLock::acquire(&settings.lock_file).map_err(|e| IcicleError::Internal(format!("{}: {e}", settings.what)))?;
            *held = Some(lock);
        }
    }
    let file = &settings.state_file;
    let checkpoint = match std::fs::read(file) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(IcicleError::Internal(format!("reading the checkpoint {}: {e}", file.display()))),
    };
    state.restore(checkpoint, settings.sent_ahead.read()).await
}

/// Run `stream` through `state` until it is drained (`ctx.drain`) or a stop signal; returns
/// the state's final report.
pub async fn drive<S, T>(stream: &mut S, state: &mut T, ctx: &MonitorContext, settings: &DriverSettings) -> Result<serde_json::Value, IcicleError>
where
    S: ChangeStream,
    T: ChangeState<Event = S::Event, Position = S::Position>,
{
    let mut d = Driver { stream, state, ctx, settings };
    let batch_size = settings.batch_size.max(1);
    let mut pending: Vec<S::Event> = Vec::with_capacity(batch_size);
    let mut stop = ctx.stop.clone();
    let mut last_new = Instant::now();
    loop {
        if *stop.borrow() {
            let rest = std::mem::take(&mut pending);
            if !rest.is_empty() || d.stream.position(&[], true).is_some() {
                d.process(rest, true).await?;
            }
            tracing::info!(message = "stopped by a signal after delivering and acknowledging what was read", stream = %settings.what);
            return Ok(d.state.report());
        }
        let wait = (ctx.drain || !pending.is_empty()).then_some(settings.quiet.max(Duration::from_millis(10)));
        let polled = d.stream.poll(&mut pending, wait, &mut stop).await?;
        if polled == Polled::New {
            last_new = Instant::now();
        }
        while pending.len() >= batch_size {
            let batch: Vec<S::Event> = pending.drain(..batch_size).collect();
            let rest_empty = pending.is_empty();
            d.process(batch, rest_empty).await?;
        }
        let quiet_over = ctx.drain || polled == Polled::End || last_new.elapsed() >= settings.quiet;
        if polled != Polled::New && quiet_over && (!pending.is_empty() || d.stream.position(&[], true).is_some()) {
            d.process(std::mem::take(&mut pending), true).await?;
        }
        if polled == Polled::End && pending.is_empty() {
            break;
        }
    }
    // Drained: what only the end of the stream decides.
    if let Some(emit) = d.state.finish().await? {
        d.deliver(emit).await?;
        // Past what the state held back for the halves it just settled.
        let to = d.stream.read_position().unwrap_or_default();
        d.checkpoint_and_truncate(Some(to)).await?;
    }
    Ok(d.state.report())
}

struct Driver<'a, S, T> {
    stream: &'a mut S,
    state: &'a mut T,
    ctx: &'a MonitorContext,
    settings: &'a DriverSettings,
}

impl<S, T> Driver<'_, S, T>
where
    S: ChangeStream,
    T: ChangeState<Event = S::Event, Position = S::Position>,
{
    /// Apply and deliver one batch, checkpoint, then acknowledge what it covers.
    async fn process(&mut self, batch: Vec<S::Event>, rest_empty: bool) -> Result<(), IcicleError> {
        let started = Instant::now();
        let size = batch.len();
        let to = self.stream.position(&batch, rest_empty);
        if !batch.is_empty() {
            let emit = self.state.apply(batch).await?;
            self.deliver(emit).await?;
            // A rescan larger than one emit is delivered in parts, then checkpointed once.
            while self.state.more() && !*self.ctx.stop.borrow() {
                let emit = self.state.apply(Vec::new()).await?;
                self.deliver(emit).await?;
            }
        }
        if self.state.more() {
            // Stopped between two parts of an emit: a checkpoint would record as done what the
            // state changed for parts never delivered (a directory's new permissions, whose
            // republish was still queued). The restart compares from the last checkpoint.
            tracing::info!(message = "stopped between two parts of an emit: not checkpointed; the restart compares from the last checkpoint", stream = %self.settings.what);
            return Ok(());
        }
        self.checkpoint_and_truncate(to).await?;
        let c = self.state.batch_counts();
        record_batch(&BatchReport {
            component: &self.ctx.name,
            records_in: c.records_in,
            filtered: c.filtered,
            rejects: c.rejects,
            outcomes: &c.outcomes,
            updates: c.updates,
            deletes: c.deletes,
            batches: c.batches,
            batch_size: size,
            batch_seconds: started.elapsed().as_secs_f64(),
            state_entries: c.state_entries,
            state_bytes: c.state_bytes,
            state_counts: &c.state_counts,
        });
        Ok(())
    }

    /// Journal what may reach the index, then deliver to every sink.
    async fn deliver(&mut self, emit: Emit) -> Result<(), IcicleError> {
        if emit.chunk.is_empty() && emit.deletes.is_empty() {
            return Ok(());
        }
        if !emit.sent.is_empty() {
            let j = &self.settings.sent_ahead;
            j.append(&emit.sent).map_err(|e| IcicleError::Internal(format!("writing {}: {e}", j.path().display())))?;
        }
        let mut sinks = self.ctx.sinks.lock().await;
        crate::deliver::deliver_emit(&mut sinks, &emit.chunk, emit.deletes, self.ctx.document_limit).await?;
        Ok(())
    }

    /// The state first (a replay over a newer state is harmless, the reverse is not), then
    /// the acknowledgement.
    async fn checkpoint_and_truncate(&mut self, to: Option<S::Position>) -> Result<(), IcicleError> {
        let Some(mut to) = to else { return Ok(()) };
        // Delivered, neither checkpointed nor acknowledged (for the tests that kill a monitor
        // exactly there).
        crate::fault::fault_point("monitor-delivered");
        self.state.hold_back(&mut to);
        let bytes = self.state.checkpoint(&to)?;
        let file = &self.settings.state_file;
        icicle_core::durable::write_atomic(file, &bytes).map_err(|e| IcicleError::Internal(format!("writing the checkpoint {}: {e}", file.display())))?;
        self.settings.sent_ahead.clear();
        self.stream.truncate(&to).await
    }
}
