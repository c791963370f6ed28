//! The monitor job: one task per configured change source, each run by the driver and
//! restarted on failure as `[monitor]` says (by the error's domain and retry hint); signals
//! ask every source to stop after its batch; the sinks are closed at the end.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use icicle_core::config::{LoadedConfig, MonitorSettings, OnSourceFailure};
use icicle_core::error::{ConfigError, IcicleError};
use icicle_core::monitor::{ChangeSource, MonitorContext};
use icicle_core::traits::NamedSinks;

/// Builds the configured sinks afresh (for a restart).
type SinkFactory = Arc<dyn Fn() -> Result<NamedSinks, ConfigError> + Send + Sync>;

/// Every configured change source, its sinks, and how to run them.
pub struct MonitorJob {
    monitors: Vec<(String, Arc<dyn ChangeSource>)>,
    sinks: Arc<tokio::sync::Mutex<NamedSinks>>,
    new_sinks: SinkFactory,
    policy: Arc<icicle_core::policy::RecordPolicy>,
    document_limit: icicle_core::batch::DocumentLimit,
    settings: MonitorSettings,
    drain: bool,
    until_idle: Option<Duration>,
}

/// One source's final report: its own counters and the restarts it took.
#[derive(Debug, serde::Serialize)]
pub struct MonitorReport {
    /// Restarts after a failure.
    pub restarts: u32,
    /// The source's own counters.
    #[serde(flatten)]
    pub source: serde_json::Value,
}

/// Compose the monitor job from `cfg`: every change source and every sink. `drain`: stop once
/// every stream is exhausted and acknowledged; `until_idle`: stop after this long without an
/// event (for streams with no end of their own).
pub fn monitor_job(cfg: &LoadedConfig, drain: bool, until_idle: Option<Duration>) -> Result<MonitorJob, ConfigError> {
    let mut c = crate::compose::build_all(cfg)?;
    // The counting pipeline's sinks take counts only, never a monitor's records.
    c.sinks.retain(|(id, _)| !cfg.app.counting.sinks.contains(id));
    if c.monitors.is_empty() {
        return Err(ConfigError::Parse(
            "no streaming source configured (e.g. [sources.mdt0] type = \"lustre\")".into(),
        ));
    }
    if c.sinks.is_empty() {
        return Err(ConfigError::Parse("no sink configured".into()));
    }
    let factory_cfg = Arc::new(cfg.clone());
    Ok(MonitorJob {
        monitors: c.monitors,
        sinks: Arc::new(tokio::sync::Mutex::new(c.sinks)),
        new_sinks: Arc::new(move || crate::compose::build_sinks(&factory_cfg)),
        policy: Arc::new(crate::compose::record_policy(cfg)?),
        document_limit: cfg.app.snapshot.document_limit(),
        settings: cfg.app.monitor.clone(),
        drain: drain || until_idle.is_some(),
        until_idle,
    })
}

/// Run every source of `job` until each is drained or `stop` turns true; the first source to
/// fail (after its restarts) stops the job with its name and cause, the others cancelled
/// (nothing they had not delivered is acknowledged). Returns each source's report.
pub async fn run(
    job: MonitorJob,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<BTreeMap<String, MonitorReport>, IcicleError> {
    let mut tasks = tokio::task::JoinSet::new();
    for (name, source) in job.monitors {
        let ctx = MonitorContext {
            sinks: job.sinks.clone(),
            policy: job.policy.clone(),
            document_limit: job.document_limit,
            drain: job.drain,
            until_idle: job.until_idle,
            name: name.clone(),
            stop: stop.clone(),
        };
        let settings = job.settings.clone();
        let new_sinks = job.new_sinks.clone();
        tasks.spawn(async move {
            let r = run_with_restarts(source, ctx, &settings, new_sinks).await;
            (name, r)
        });
    }
    let mut reports = BTreeMap::new();
    while let Some(done) = tasks.join_next().await {
        let (name, r) = done.map_err(|e| IcicleError::Internal(format!("a monitor task: {e}")))?;
        let r = r.map_err(|e| IcicleError::Internal(format!("source `{name}` failed: {e}")))?;
        reports.insert(name, r);
    }
    let mut sinks = job.sinks.lock().await;
    for (_, sink) in sinks.iter_mut() {
        sink.close().await?;
    }
    Ok(reports)
}

/// Run one source; with `on_failure = "restart"`, a failed run starts again from its
/// checkpoint, with every sink built afresh, after a delay that doubles up to
/// `restart_max_secs` (a stop signal ends the wait), until `max_restarts` is used up.
async fn run_with_restarts(
    source: Arc<dyn ChangeSource>,
    ctx: MonitorContext,
    settings: &MonitorSettings,
    new_sinks: SinkFactory,
) -> Result<MonitorReport, IcicleError> {
    let restart = settings.on_failure == OnSourceFailure::Restart;
    let mut delay = settings.restart_initial_secs.max(0.0);
    let mut restarts = 0u32;
    loop {
        let mut stop = ctx.stop.clone();
        let err = match super::driver::run(source.as_ref(), &ctx).await {
            Ok(report) => return Ok(MonitorReport { restarts, source: report }),
            Err(e) => e,
        };
        let exhausted = settings.max_restarts != 0 && restarts >= settings.max_restarts;
        // The error's own word: a configuration error, or a sink's refusal that retrying
        // cannot change (an index that does not exist), fails the same way after a restart.
        let hopeless = err.domain() == icicle_core::Domain::User
            || (matches!(err, IcicleError::Sink(_)) && err.retry() == icicle_core::Retry::NoRetry);
        if restart && hopeless && !*stop.borrow() {
            tracing::error!(message = "source failed; not restarted: retrying cannot help", source = %ctx.name, error = %err, domain = ?err.domain());
            return Err(IcicleError::Internal(format!("{err} (not restarted: retrying cannot help)")));
        }
        if !restart || exhausted || *stop.borrow() {
            if restarts > 0 {
                return Err(IcicleError::Internal(format!("{err} (after {restarts} restarts)")));
            }
            return Err(err);
        }
        restarts += 1;
        tracing::error!(message = "source failed; restarting", source = %ctx.name, error = %err, restart = restarts, delay_secs = delay);
        icicle_core::metrics::Metrics::global().set_counter(
            &icicle_core::metrics::names::SOURCE_RESTARTS_TOTAL,
            &[("component", ctx.name.as_str())],
            restarts as f64,
        );
        tokio::select! {
            _ = tokio::time::sleep(icicle_core::time::secs(delay)) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
        delay = (delay * 2.0).clamp(0.0, settings.restart_max_secs.max(0.0));
        replace_sinks(&ctx, &new_sinks).await?;
    }
}

/// Swap the shared sinks for new ones. Every other monitor delivers and syncs under the same
/// lock, so nothing it delivered is lost; what this one delivered since its checkpoint is
/// read and delivered again. The old sinks are dropped off the runtime (a producer's drop
/// may wait for its queue).
async fn replace_sinks(ctx: &MonitorContext, new_sinks: &SinkFactory) -> Result<(), IcicleError> {
    let fresh = new_sinks().map_err(|e| IcicleError::Internal(format!("building the sinks again: {e}")))?;
    let old = std::mem::replace(&mut *ctx.sinks.lock().await, fresh);
    tokio::task::spawn_blocking(move || drop(old));
    tracing::info!(message = "sinks built afresh for the restart", source = %ctx.name);
    Ok(())
}

/// On SIGTERM, SIGINT or SIGHUP, ask the monitors to stop after their current batch (they
/// deliver, checkpoint and acknowledge it, then report); a second signal ends the process at
/// once. Call from within the tokio runtime.
pub fn stop_on_signals(stop: Arc<tokio::sync::watch::Sender<bool>>) -> std::io::Result<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    // The terminal went away (SSH dropped, tmux killed): stop as cleanly as on SIGTERM.
    let mut hup = signal(SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        for n in 0.. {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
                _ = hup.recv() => {}
            }
            // The stop first, then the word: after a hangup stderr may be a dead terminal, and
            // a failed write must not keep the monitor from stopping.
            if n > 0 {
                let _ = writeln!(
                    std::io::stderr(),
                    "icicle: second signal, stopping now (what was not acknowledged is read again next time)"
                );
                std::process::exit(130);
            }
            let _ = stop.send(true);
            icicle_core::service::stopping("stopping after the current batch");
            let _ = writeln!(
                std::io::stderr(),
                "icicle: stopping after the current batch (send the signal again to stop now)"
            );
        }
    }))
}
