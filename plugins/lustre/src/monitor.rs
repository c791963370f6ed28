//! The `lustre` change source: the changelog stream ([`crate::stream`]) and the directory-tree
//! state ([`crate::apply`]) of one MDT, or of every MDT of a namespace ([`crate::dne`]),
//! which the runtime's monitor driver runs.

use std::sync::Arc;

use async_trait::async_trait;
use icicle_core::monitor::{ChangeSource, DriverSettings, Monitor, MonitorContext};
use icicle_core::registry::{BuildContext, ComponentConfig};
use icicle_core::{ConfigError, IcicleError};
use icicle_gmeta::PrimaryEncoder;

use crate::apply::TreeState;
use crate::resolve::{Lfs, Lookahead};
use crate::stream::ChangelogStream;
use crate::tree::DirectoryTree;

pub use crate::config::{LustreConfig, MonitorCounts, Resolution};

/// The `lustre` change source.
pub struct LustreSource {
    cfg: Arc<LustreConfig>,
}

#[async_trait]
impl Monitor for LustreSource {
    type Stream = ChangelogStream;
    type State = TreeState;

    fn settings(&self, _ctx: &MonitorContext) -> DriverSettings {
        let cfg = &self.cfg;
        DriverSettings::in_state_dir(
            cfg.batch_size,
            cfg.quiet_period_secs,
            &cfg.state_dir,
            &cfg.mdt,
            format!("MDT {}", cfg.mdt),
        )
    }

    fn state(&self, ctx: &MonitorContext, _settings: &DriverSettings) -> Result<TreeState, IcicleError> {
        let cfg = &self.cfg;
        let fsm = (cfg.resolution != Resolution::Tree).then(|| {
            lru::LruCache::new(
                std::num::NonZeroUsize::new(cfg.fsmonitor_cache.max(1)).unwrap_or(std::num::NonZeroUsize::MIN),
            )
        });
        let mut lfs = Lfs::new(cfg.lfs.clone());
        let mut dne = None;
        if !cfg.mdts.is_empty() {
            let merged =
                Arc::new(std::sync::Mutex::new(crate::dne::MergedChangelog::new(Box::new(lfs.clone()), &cfg.mdts)));
            lfs.merged = Some(merged.clone());
            dne = Some(merged);
        }
        Ok(TreeState {
            cfg: cfg.clone(),
            lfs,
            dne,
            tree: DirectoryTree::new(cfg.lru_capacity),
            lookahead: Lookahead::new(0),
            fsm,
            enc: PrimaryEncoder::new(ctx.policy.clone()),
            posix: ctx.policy.access.is_some(),
            counts: MonitorCounts::default(),
            replaying: false,
            // Grown as files are read, to `layout_cache` entries.
            layouts: (cfg.layout || cfg.project).then(lru::LruCache::unbounded),
        })
    }

    /// Reads from the index after the last one cleared (the checkpoint's).
    async fn open(
        &self,
        ctx: &MonitorContext,
        state: &mut TreeState,
        cleared: Option<u64>,
    ) -> Result<ChangelogStream, IcicleError> {
        // The stream reads through the state's `lfs`: with several MDTs, one numbering.
        Ok(ChangelogStream::new(self.cfg.clone(), state.lfs.clone(), ctx.name.clone(), ctx.drain, cleared.unwrap_or(0)))
    }
}

impl ComponentConfig for LustreConfig {
    type Component = Arc<dyn ChangeSource>;

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        match (self.mdt.is_empty(), self.mdts.is_empty()) {
            (true, true) => return Err(ctx.invalid("mdt", "give the MDT device (`fs0-MDT0000`), or `mdts`")),
            (_, false) if self.mdts.iter().any(|m| m.trim().is_empty()) => {
                return Err(ctx.invalid("mdts", "name each MDT device (`fs0-MDT0001`)"));
            }
            (_, false) if (1..self.mdts.len()).any(|i| self.mdts[..i].contains(&self.mdts[i])) => {
                return Err(ctx.invalid("mdts", "names an MDT twice"));
            }
            (_, false) if self.startrec > 0 => {
                return Err(
                    ctx.invalid("startrec", "is one MDT's index: with `mdts` each MDT starts at its first record")
                );
            }
            (_, false) if self.resolution != Resolution::Tree => {
                return Err(
                    ctx.invalid("mdts", "several MDTs are read into the directory tree (`resolution = \"tree\"`)")
                );
            }
            _ => {}
        }
        if self.lfs.is_empty() {
            return Err(ctx.invalid("lfs", "give the lfs command"));
        }
        if self.batch_size == 0 {
            return Err(ctx.invalid("batch_size", "must be at least 1"));
        }
        for t in &self.filter {
            if crate::changelog::RecordType::from_name(t).is_none() {
                return Err(ctx.invalid("filter", format!("`{t}` is not a changelog record type")));
            }
        }
        Ok(())
    }

    fn build(mut self, ctx: &BuildContext<'_>) -> Result<Arc<dyn ChangeSource>, ConfigError> {
        self.validate(ctx)?;
        if self.mdt.is_empty() && !self.mdts.is_empty() {
            self.mdt = format!("{}-MDTs", self.fsname);
        }
        Ok(Arc::new(LustreSource { cfg: Arc::new(self) }))
    }
}
