//! Error types. Every error carries a domain (whose fault) and a retry hint.

use std::path::PathBuf;

/// An error and its sources, `: `-separated, on one line (what a log line or a summary shows
/// of an error from a client library).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

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
    #[error("unknown key `{key}` in {origin}{}", crate::suggest::did_you_mean(.suggestion.as_deref()))]
    UnknownKey {
        /// The dotted key as written, e.g. `snapshot.worker`.
        key: String,
        /// Where the key was set: `file <path>`, another layer's name, or `the configuration`.
        origin: String,
        /// The known key nearest to it, when one is near.
        suggestion: Option<String>,
    },
    /// A key whose value has the wrong type or is out of range.
    #[error("invalid value for `{key}` in {origin}: {reason}")]
    InvalidValue {
        /// The dotted key.
        key: String,
        /// Where the key was set: `file <path>`, another layer's name, or `the configuration`.
        origin: String,
        /// What is wrong with the value.
        reason: String,
    },
    /// A required key is absent.
    #[error("missing key `{key}` ({hint})")]
    MissingKey {
        /// The dotted key that is absent.
        key: String,
        /// What to configure.
        hint: String,
    },
    /// A `type` that no registered plugin provides.
    #[error("unknown {kind} type `{name}` for `{key}` in {origin}{} (available: {available})", crate::suggest::did_you_mean(crate::suggest::nearest(.name, .available.split(", "))))]
    UnknownPlugin {
        /// The plugin kind, e.g. `source` or `sink`.
        kind: String,
        /// The `type` given.
        name: String,
        /// The dotted key of the `type`, e.g. `sinks.out.type`.
        key: String,
        /// Where the key was set: `file <path>`, another layer's name, or `the configuration`.
        origin: String,
        /// The registered types of that kind, comma-separated.
        available: String,
    },
    /// The configuration could not be parsed at all.
    #[error("{0}")]
    Parse(String),
}

/// An error reading a source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The input could not be opened or read.
    #[error("{path}: {reason}")]
    Io {
        /// The file or directory that failed.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A subprocess or remote system failed.
    #[error("{0}")]
    External(String),
}

/// An error delivering to a sink.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Local I/O failed (disk full, permission denied...).
    #[error("{sink}: {reason}")]
    Io {
        /// The sink's name.
        sink: String,
        /// What went wrong.
        reason: String,
    },
    /// A remote service refused or failed the request.
    #[error("{sink}: {reason}")]
    Remote {
        /// The sink's name.
        sink: String,
        /// What the service said or why the request failed.
        reason: String,
        /// Whether sending again may succeed.
        retry: Retry,
    },
}

/// The umbrella error used by runtimes. Its message includes the inner error's, which is
/// therefore not also its `source` (a chain printed with `{:#}` would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum IcicleError {
    /// The configuration is invalid.
    #[error("configuration: {0}")]
    Config(ConfigError),
    /// A source failed to read.
    #[error("source: {0}")]
    Source(SourceError),
    /// A sink failed to deliver.
    #[error("sink: {0}")]
    Sink(SinkError),
    /// Anything else: a runtime step failed (a task, a checkpoint, the spool...) or an invariant broke.
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
