//! How a monitor batches, and the files its state keeps in its state directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How a monitor batches and where it keeps its files: `<stem>.checkpoint.json` (the state,
/// replaced atomically after every delivered batch), `<stem>.sent-ahead` (keys of the paths
/// updated since that checkpoint) and `<stem>.lock` (one run per state).
#[derive(Debug, Clone)]
pub struct DriverSettings {
    /// A batch closes at this many events...
    pub batch_size: usize,
    /// ...or once nothing new came for this long (at once when draining).
    pub quiet: Duration,
    /// The directory of the state files.
    pub state_dir: PathBuf,
    /// The state files' common name.
    pub stem: String,
    /// The stream, as logs name it (`MDT fs0-MDT0000`, `topic fset1`).
    pub what: String,
}

impl DriverSettings {
    /// Settings whose files live in `state_dir` under `stem`; a batch closes at `batch_size`
    /// events or after `quiet_period_secs` without a new one.
    pub fn in_state_dir(
        batch_size: usize,
        quiet_period_secs: f64,
        state_dir: &Path,
        stem: &str,
        what: String,
    ) -> DriverSettings {
        DriverSettings {
            batch_size,
            quiet: crate::time::secs(quiet_period_secs),
            state_dir: state_dir.to_path_buf(),
            stem: stem.to_string(),
            what,
        }
    }

    /// The state checkpoint.
    pub fn checkpoint_file(&self) -> PathBuf {
        self.state_dir.join(format!("{}.checkpoint.json", self.stem))
    }

    /// The sent-ahead journal.
    pub fn sent_ahead_file(&self) -> PathBuf {
        self.state_dir.join(format!("{}.sent-ahead", self.stem))
    }

    /// The lock taken while a run holds the state.
    pub fn lock_file(&self) -> PathBuf {
        self.state_dir.join(format!("{}.lock", self.stem))
    }
}
