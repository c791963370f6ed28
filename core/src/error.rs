//! Error types. Every error carries a domain (whose fault) and a retry hint.

use std::path::PathBuf;

/// Whose fault an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Domain {
    /// Bad configuration or bad input supplied by the user.
    User,
    /// A remote service or the file system failed.
    External,
    /// A bug or an invariant violation inside icicle.
    Internal,
}

/// Whether retrying the failed operation may help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Retry {
    /// Retrying will fail the same way.
    NoRetry,
    /// Retry with exponential backoff.
    WithBackoff,
}

/// A configuration error; always names the key and, where known, the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A key that no component understands.
    #[error("unknown key `{key}` in {origin}")]
    UnknownKey { key: String, origin: String },
    /// A key whose value has the wrong type or is out of range.
    #[error("invalid value for `{key}` in {origin}: {reason}")]
    InvalidValue { key: String, origin: String, reason: String },
    /// A required key is absent.
    #[error("missing key `{key}` ({hint})")]
    MissingKey { key: String, hint: String },
    /// A `type` that no registered plugin provides.
    #[error("unknown {kind} type `{name}` for `{key}` in {origin} (available: {available})")]
    UnknownPlugin { kind: String, name: String, key: String, origin: String, available: String },
    /// The configuration could not be parsed at all.
    #[error("{0}")]
    Parse(String),
}

/// An error reading a source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The input could not be opened or read.
    #[error("{path}: {reason}")]
    Io { path: PathBuf, reason: String },
    /// A subprocess or remote system failed.
    #[error("{0}")]
    External(String),
}

/// An error delivering to a sink.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Local I/O failed (disk full, permission denied...).
    #[error("{sink}: {reason}")]
    Io { sink: String, reason: String },
    /// A remote service refused or failed the request.
    #[error("{sink}: {reason}")]
    Remote { sink: String, reason: String, retry: Retry },
}

/// The umbrella error used by runtimes. Its message includes the inner error's, which is
/// therefore not also its `source` (a chain printed with `{:#}` would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum IcicleError {
    #[error("configuration: {0}")]
    Config(ConfigError),
    #[error("source: {0}")]
    Source(SourceError),
    #[error("sink: {0}")]
    Sink(SinkError),
    #[error("{0}")]
    Internal(String),
}

impl From<ConfigError> for IcicleError {
    fn from(e: ConfigError) -> Self {
        IcicleError::Config(e)
    }
}

impl From<SourceError> for IcicleError {
    fn from(e: SourceError) -> Self {
        IcicleError::Source(e)
    }
}

impl From<SinkError> for IcicleError {
    fn from(e: SinkError) -> Self {
        IcicleError::Sink(e)
    }
}

impl IcicleError {
    /// Whose fault this error is.
    pub fn domain(&self) -> Domain {
        match self {
            IcicleError::Config(_) => Domain::User,
            IcicleError::Source(_) | IcicleError::Sink(_) => Domain::External,
            IcicleError::Internal(_) => Domain::Internal,
        }
    }

    /// Whether a retry may help.
    pub fn retry(&self) -> Retry {
        match self {
            IcicleError::Sink(SinkError::Remote { retry, .. }) => *retry,
            IcicleError::Source(SourceError::External(_)) => Retry::WithBackoff,
            _ => Retry::NoRetry,
        }
    }
}
