//! The `fanotify` and `inotify` change sources: open the backend (marks and watches first),
//! then the runtime's monitor driver runs the stream through the state.

use std::sync::Arc;

use async_trait::async_trait;
use icicle_core::monitor::{ChangeSource, DriverSettings, Monitor, MonitorContext};
use icicle_core::registry::{BuildContext, ComponentConfig};
use icicle_core::{ConfigError, IcicleError};
use icicle_gmeta::PrimaryEncoder;

use crate::config::{Backend, FanotifyConfig, InotifyConfig, LocalConfig};
use crate::event::RescanReason;
use crate::kernel::fanotify::Fanotify;
use crate::kernel::inotify_backend::InotifyWatch;
use crate::kernel::stream::{LocalStream, Reader};
use crate::state::LocalState;
use crate::LocalError;

/// A local file-system change source.
pub struct LocalSource {
    /// Its configuration.
    pub cfg: Arc<LocalConfig>,
    /// The backend asked for (`fanotify` falls back to inotify when not permitted).
    pub backend: Backend,
}

impl LocalSource {
    /// Open the backend: fanotify, or inotify when fanotify is refused and `fallback` is set.
    fn open_backend(&self) -> Result<(Reader, Backend, Vec<crate::event::LocalEvent>), LocalError> {
        let root = &self.cfg.root;
        let mut found = Vec::new();
        if self.backend == Backend::Fanotify {
            match Fanotify::open(root, self.cfg.lru_capacity) {
                Ok(f) => return Ok((Reader::Fanotify(Box::new(f)), Backend::Fanotify, found)),
                Err(LocalError::Io { what, source }) if self.cfg.fallback && fallback_errno(&source) => {
                    tracing::warn!(message = "fanotify not available; using inotify", root = %root.display(), call = %what, error = %source);
                }
                Err(e) => return Err(e),
            }
        }
        let w = InotifyWatch::open(root, &mut found)?;
        Ok((Reader::Inotify(Box::new(w)), Backend::Inotify, found))
    }
}

fn fallback_errno(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM)
            | Some(libc::EINVAL)
            | Some(libc::ENOSYS)
            | Some(libc::EOPNOTSUPP)
            | Some(libc::EXDEV)
            | Some(libc::ENODEV)
    )
}

#[async_trait]
impl Monitor for LocalSource {
    type Stream = LocalStream;
    type State = LocalState;

    fn settings(&self, ctx: &MonitorContext) -> DriverSettings {
        let cfg = &self.cfg;
        DriverSettings::in_state_dir(
            cfg.batch_size,
            cfg.quiet_period_secs,
            &cfg.state_dir,
            &ctx.name,
            format!("root {}", cfg.root.display()),
        )
    }

    fn state(&self, ctx: &MonitorContext, settings: &DriverSettings) -> Result<LocalState, IcicleError> {
        let cfg = &self.cfg;
        let stem = &settings.stem;
        let state =
            LocalState::new(cfg.root.clone(), cfg.prefix(), PrimaryEncoder::new(ctx.policy.clone()), cfg.seed_emit)
                .with_emit_limit(cfg.max_emit_records)
                .with_journal(cfg.state_dir.join(format!("{stem}.fresh-paths.json")))
                .with_entries_files(&cfg.state_dir, stem)
                .with_posix(ctx.policy.access.is_some())
                .with_when_root_gone(cfg.when_root_gone);
        Ok(match cfg.entries_cache_mb {
            Some(mb) => state.with_entries_on_disk(&cfg.state_dir.join(format!("{stem}.entries.sqlite")), mb)?,
            None => state,
        })
    }

    /// Marks and watches first, then the walk (the stream's first event): nothing between
    /// them is lost, and events for what the walk already saw are idempotent.
    async fn open(
        &self,
        ctx: &MonitorContext,
        state: &mut LocalState,
        _resume: Option<u64>,
    ) -> Result<LocalStream, IcicleError> {
        let cfg = &self.cfg;
        let (reader, backend, found) = self.open_backend()?;
        let why = if state.restored {
            tracing::info!(message = "restarted: fanotify and inotify keep no position, so the root is rescanned against the checkpoint", root = %cfg.root.display());
            RescanReason::Restart
        } else {
            RescanReason::Seed
        };
        tracing::info!(message = "watching", root = %cfg.root.display(), backend = ?backend);
        let idle =
            ctx.until_idle.or_else(|| ctx.drain.then(|| icicle_core::time::secs(cfg.quiet_period_secs.max(0.5))));
        state.opened = Some(backend);
        Ok(LocalStream::new(reader, why, found, idle))
    }
}

impl ComponentConfig for FanotifyConfig {
    type Component = Arc<dyn ChangeSource>;

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        self.0.check_values(ctx)
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn ChangeSource>, ConfigError> {
        self.validate(ctx)?;
        Ok(Arc::new(LocalSource { cfg: Arc::new(self.0.checked(ctx)?), backend: Backend::Fanotify }))
    }
}

impl ComponentConfig for InotifyConfig {
    type Component = Arc<dyn ChangeSource>;

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        self.0.check_values(ctx)
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn ChangeSource>, ConfigError> {
        self.validate(ctx)?;
        Ok(Arc::new(LocalSource { cfg: Arc::new(self.0.checked(ctx)?), backend: Backend::Inotify }))
    }
}
