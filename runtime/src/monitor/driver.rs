//! The monitor driver: one loop for every change source. Take the state's lock, read its
//! checkpoint and sent-ahead journal, and open the source; then read into a batch until it is
//! full or the stream is quiet; apply it (reduce, apply, encode); write the sent-ahead
//! journal; deliver to every sink; checkpoint the state durably; only then acknowledge
//! upstream. A stop signal delivers and acknowledges the batch in hand, then returns the report.

use std::time::{Duration, Instant};

use icicle_core::durable::StateLock;
use icicle_core::metrics::{record_batch, BatchReport};
use icicle_core::monitor::sent_ahead::SentAhead;
use icicle_core::monitor::{ChangeSource, DriverSettings, Emit, MonitorContext, Polled, Restored, RunningMonitor};
use icicle_core::IcicleError;

/// Run `source` until its stream is drained (`ctx.drain`) or a stop signal; returns its final
/// report. A missing checkpoint is a first start; an unreadable one an error.
pub async fn run(source: &dyn ChangeSource, ctx: &MonitorContext) -> Result<serde_json::Value, IcicleError> {
    let settings = source.settings(ctx);
    let internal = |what: String| IcicleError::Internal(format!("{}: {what}", settings.what));
    std::fs::create_dir_all(&settings.state_dir)
        .map_err(|e| internal(format!("creating {}: {e}", settings.state_dir.display())))?;
    // One run per state, for as long as this run lives.
    let _lock = StateLock::acquire(&settings.lock_file()).map_err(|e| internal(e.to_string()))?;
    let file = settings.checkpoint_file();
    let checkpoint = match std::fs::read(&file) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(IcicleError::Internal(format!("reading the checkpoint {}: {e}", file.display()))),
    };
    let sent_ahead = SentAhead::new(settings.sent_ahead_file());
    let restored = Restored { checkpoint, sent_ahead: sent_ahead.read() };
    let mut running = source.open(ctx, &settings, restored).await?;
    let mut d = Driver { m: running.as_mut(), ctx, settings: &settings, sent_ahead };
    d.drive().await?;
    running.report()
}

struct Driver<'a> {
    m: &'a mut dyn RunningMonitor,
    ctx: &'a MonitorContext,
    settings: &'a DriverSettings,
    sent_ahead: SentAhead,
}

impl Driver<'_> {
    /// Read, apply, deliver, checkpoint and acknowledge until drained or stopped.
    async fn drive(&mut self) -> Result<(), IcicleError> {
        let batch_size = self.settings.batch_size.max(1);
        let quiet = self.settings.quiet;
        let mut stop = self.ctx.stop.clone();
        let mut last_new = Instant::now();
        loop {
            if *stop.borrow() {
                if self.m.waiting() > 0 || self.m.unacknowledged() {
                    self.process(None).await?;
                }
                tracing::info!(message = "stopped by a signal after delivering and acknowledging what was read", stream = %self.settings.what);
                return Ok(());
            }
            let wait = (self.ctx.drain || self.m.waiting() > 0).then_some(quiet.max(Duration::from_millis(10)));
            let polled = self.m.poll(wait, &mut stop).await?;
            if polled == Polled::New {
                last_new = Instant::now();
            }
            while self.m.waiting() >= batch_size {
                self.process(Some(batch_size)).await?;
            }
            let quiet_over = self.ctx.drain || polled == Polled::End || last_new.elapsed() >= quiet;
            if polled != Polled::New && quiet_over && (self.m.waiting() > 0 || self.m.unacknowledged()) {
                self.process(None).await?;
            }
            if polled == Polled::End && self.m.waiting() == 0 {
                break;
            }
        }
        // Drained: what only the end of the stream decides.
        if let Some(emit) = self.m.finish().await? {
            self.deliver(emit).await?;
            self.checkpoint_and_acknowledge().await?;
        }
        Ok(())
    }

    /// Apply and deliver the next batch (`n` events, or all that wait), checkpoint, then
    /// acknowledge what it covers.
    async fn process(&mut self, n: Option<usize>) -> Result<(), IcicleError> {
        // In hand until checkpointed and acknowledged: what the service watchdog judges.
        let _busy = icicle_core::service::busy(&self.ctx.name);
        let started = Instant::now();
        let size = n.unwrap_or(self.m.waiting()).min(self.m.waiting());
        if let Some(emit) = self.m.apply_next(n).await? {
            self.deliver(emit).await?;
            // A rescan larger than one emit is delivered in parts, then checkpointed once.
            while self.m.more() && !*self.ctx.stop.borrow() {
                let emit = self.m.apply_more().await?;
                self.deliver(emit).await?;
            }
        }
        if self.m.more() {
            // Stopped between two parts of an emit: a checkpoint would record as done what the
            // state changed for parts never delivered (a directory's new permissions, whose
            // republish was still queued). The restart compares from the last checkpoint.
            tracing::info!(message = "stopped between two parts of an emit: not checkpointed; the restart compares from the last checkpoint", stream = %self.settings.what);
            return Ok(());
        }
        self.checkpoint_and_acknowledge().await?;
        let c = self.m.batch_counts();
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
            let j = &self.sent_ahead;
            j.append(&emit.sent).map_err(|e| IcicleError::Internal(format!("writing {}: {e}", j.path().display())))?;
        }
        let mut sinks = self.ctx.sinks.lock().await;
        crate::deliver::deliver_emit(&mut sinks, &emit.chunk, emit.deletes, self.ctx.document_limit).await?;
        Ok(())
    }

    /// The state first (a replay over a newer state is harmless, the reverse is not), then
    /// the acknowledgement.
    async fn checkpoint_and_acknowledge(&mut self) -> Result<(), IcicleError> {
        let Some(bytes) = self.m.checkpoint()? else { return Ok(()) };
        // Delivered, neither checkpointed nor acknowledged (for the tests that kill a monitor
        // exactly there).
        crate::fault::fault_point("monitor-delivered");
        let file = self.settings.checkpoint_file();
        icicle_core::durable::write_atomic(&file, &bytes)
            .map_err(|e| IcicleError::Internal(format!("writing the checkpoint {}: {e}", file.display())))?;
        self.sent_ahead.clear();
        self.m.acknowledge().await
    }
}
