//! `[sources.<id>] type = "fanotify"` and `type = "inotify"`: one configuration, two backends.

use std::path::PathBuf;

use icicle_core::registry::BuildContext;
use icicle_core::ConfigError;
use serde::Deserialize;

/// Updates and deletes at most in one emit, by default (a larger rescan is delivered in parts).
pub const DEFAULT_EMIT_LIMIT: usize = 10_000;

/// Which kernel interface reports the changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// A fanotify filesystem mark (needs CAP_SYS_ADMIN).
    Fanotify,
    /// An inotify watch on every directory under the root.
    Inotify,
}

/// The settings both backends share.
#[derive(Debug, Clone, Deserialize)]
pub struct LocalConfig {
    /// The directory watched; events outside it are dropped.
    pub root: PathBuf,
    /// Record paths = prefix + path below the root (default: the root itself, as the walk
    /// source names them).
    #[serde(default)]
    pub path_prefix: Option<String>,
    /// Where the checkpoint (what the index holds) is kept.
    pub state_dir: PathBuf,
    /// A batch closes at this many events...
    #[serde(default = "default_batch")]
    pub batch_size: usize,
    /// ...or after this long without new events.
    #[serde(default = "default_quiet")]
    pub quiet_period_secs: f64,
    /// `fanotify` only: use inotify when fanotify is not permitted (EPERM) or not supported.
    #[serde(default = "default_true")]
    pub fallback: bool,
    /// Publish what the seed walk finds at the first start (`false`: the index already holds
    /// it, e.g. from a snapshot, and the walk only learns it).
    #[serde(default = "default_true")]
    pub seed_emit: bool,
    /// `fanotify`: directory handles whose paths are kept (least recently used evicted; a
    /// handle not kept is resolved again with `open_by_handle_at`).
    #[serde(default = "default_lru_capacity")]
    pub lru_capacity: usize,
    /// Updates and deletes at most per emit: a larger rescan (the seed walk of a big root) or
    /// removed tree is delivered in parts of this size, so memory stays bounded.
    #[serde(default = "default_max_emit_records")]
    pub max_emit_records: usize,
    /// Keep what the index holds in a SQLite file in `state_dir` with this many MiB of its
    /// pages in memory, instead of every entry in memory (unset: in memory).
    #[serde(default)]
    pub entries_cache_mb: Option<usize>,
    /// When the root itself is gone (moved away, removed, unmounted): `fail` (the default:
    /// nothing is deleted or acknowledged, the source stops with the reason, and a restart
    /// waits for it) or `delete` (what the index holds there is deleted).
    #[serde(default)]
    pub when_root_gone: WhenRootGone,
}

/// What the local monitor does when its root is gone ([`LocalConfig::when_root_gone`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WhenRootGone {
    /// Stop with the reason; nothing deleted.
    #[default]
    Fail,
    /// Delete what the index holds below it.
    Delete,
}

fn default_batch() -> usize {
    1000
}
fn default_quiet() -> f64 {
    1.0
}
fn default_max_emit_records() -> usize {
    DEFAULT_EMIT_LIMIT
}
fn default_lru_capacity() -> usize {
    crate::kernel::fanotify_events::DEFAULT_LRU_CAPACITY
}
fn default_true() -> bool {
    true
}

/// `path` as the file system will resolve it, though it may not exist yet: each existing
/// prefix through `canonicalize` (symlinks, `..` after a symlink), the rest lexically.
fn resolved(path: &std::path::Path) -> PathBuf {
    use std::path::Component;
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut at = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                at = std::fs::canonicalize(&at).unwrap_or(at);
                at.pop();
            }
            Component::CurDir => {}
            c => at.push(c),
        }
    }
    // The nearest existing ancestor resolved, the rest appended.
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&at) {
            return rest.iter().rev().fold(real, |p, c: &std::ffi::OsString| p.join(c));
        }
        match (at.parent().map(std::path::Path::to_path_buf), at.file_name().map(|n| n.to_os_string())) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                at = parent;
            }
            _ => return rest.iter().rev().fold(at, |p, c| p.join(c)),
        }
    }
}

/// `type = "fanotify"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct FanotifyConfig(pub LocalConfig);

/// `type = "inotify"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct InotifyConfig(pub LocalConfig);

impl LocalConfig {
    /// Check the values that need nothing outside the process (the `validate` of `fanotify`
    /// and `inotify`): the root, which may not exist where a configuration is checked, is
    /// left to [`LocalConfig::checked`].
    pub(crate) fn check_values(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        match &self.path_prefix {
            Some(p) if !p.starts_with('/') => return Err(ctx.invalid("path_prefix", "must be an absolute path")),
            _ => {}
        }
        if self.batch_size == 0 {
            return Err(ctx.invalid("batch_size", "must be at least 1"));
        }
        if self.max_emit_records == 0 {
            return Err(ctx.invalid("max_emit_records", "must be at least 1"));
        }
        if self.entries_cache_mb == Some(0) {
            return Err(
                ctx.invalid("entries_cache_mb", "must be at least 1 (leave it out to keep the entries in memory)")
            );
        }
        if self.lru_capacity == 0 {
            return Err(ctx.invalid("lru_capacity", "must be at least 1"));
        }
        if !(0.0..=86_400.0).contains(&self.quiet_period_secs) {
            return Err(ctx.invalid("quiet_period_secs", "must be a number of seconds from 0 to 86400"));
        }
        Ok(())
    }

    /// Resolve the root (it must be a directory) and check the state directory is outside
    /// it; after [`LocalConfig::check_values`].
    pub(crate) fn checked(mut self, ctx: &BuildContext<'_>) -> Result<LocalConfig, ConfigError> {
        let root = std::fs::canonicalize(&self.root)
            .map_err(|e| ctx.invalid("root", format!("{}: {e}", self.root.display())))?;
        if !root.is_dir() {
            return Err(ctx.invalid("root", format!("{} is not a directory", root.display())));
        }
        // The monitor's own writes there would be events under the root: batches without end.
        if resolved(&self.state_dir).starts_with(&root) {
            return Err(ctx.invalid(
                "state_dir",
                format!(
                    "{} is inside the root {}: the monitor's own writes would be changes to watch",
                    self.state_dir.display(),
                    root.display()
                ),
            ));
        }
        self.root = root;
        Ok(self)
    }

    /// The prefix records carry, without a trailing `/`.
    pub fn prefix(&self) -> String {
        let p = self.path_prefix.clone().unwrap_or_else(|| icicle_core::name::from_os(&self.root).into_owned());
        p.trim_end_matches('/').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::resolved;

    #[test]
    fn a_state_dir_resolves_as_the_file_system_will() {
        let t = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir_all(base.join("data/fs")).unwrap();
        std::os::unix::fs::symlink(base.join("data/fs"), base.join("link")).unwrap();
        assert_eq!(resolved(&base.join("link/new/state")), base.join("data/fs/new/state"));
        assert_eq!(resolved(&base.join("data/fs/missing/../../state")), base.join("data/state"));
        assert_eq!(resolved(&base.join("x/../data/fs/s")), base.join("data/fs/s"));
        assert_eq!(
            resolved(&base.join("link/../s")),
            base.join("data/s"),
            "`..` after a symlink goes up from its target"
        );
    }
}
