//! The local monitor's errors.

use icicle_core::IcicleError;

/// What can go wrong while watching a local file system.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A system call failed (`what` names it and its object).
    #[error("{what}: {source}")]
    Io {
        /// The call and its object.
        what: String,
        /// The error the kernel gave.
        source: std::io::Error,
    },
    /// The checkpoint could not be written or read.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// The root is gone, and `when_root_gone = "fail"`.
    #[error("the root {0} is gone (moved away, removed or unmounted): nothing was deleted or acknowledged; put it back (a restart waits for it), or set when_root_gone = \"delete\" to empty the index there")]
    RootGone(String),
}

impl LocalError {
    /// An [`LocalError::Io`] from the last OS error.
    pub fn last_os(what: impl Into<String>) -> LocalError {
        // The error code first: building the message may allocate, and allocation may set errno.
        let source = std::io::Error::last_os_error();
        LocalError::Io { what: what.into(), source }
    }
}

impl From<LocalError> for IcicleError {
    fn from(e: LocalError) -> IcicleError {
        IcicleError::Internal(e.to_string())
    }
}
