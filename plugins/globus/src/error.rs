//! What can go wrong talking to Globus, which failures are retried, and how long to wait.

use std::time::Duration;

use icicle_core::error::Retry;
use serde_json::Value;

/// Backoff for transient failures.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries before giving up.
    pub max_retries: u32,
    /// The first backoff.
    pub initial: Duration,
    /// The largest backoff (a longer `Retry-After` is still honoured).
    pub max: Duration,
}

impl RetryPolicy {
    /// The wait before retry number `attempt` (0-based): `initial * 2^attempt` capped at `max`,
    /// of which the upper half is random (`rand` in `[0, 1)`), and never less than the
    /// server's `Retry-After`.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>, rand: f64) -> Duration {
        let exp = self.initial.saturating_mul(1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX)).min(self.max);
        let jittered = exp / 2 + exp.mul_f64(rand.clamp(0.0, 1.0) / 2.0);
        retry_after.map_or(jittered, |r| r.max(jittered))
    }
}

/// How long an access token valid for `expires_in` seconds is used: until a tenth of its
/// lifetime (at most a minute) is left.
pub fn refresh_after(expires_in: f64) -> Duration {
    let margin = (expires_in / 10.0).min(60.0);
    Duration::from_secs_f64((expires_in - margin).clamp(0.0, 1e9))
}

/// Parse a `Retry-After` header given in seconds (an HTTP date is not used by Globus).
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let s: f64 = v.trim().parse().ok()?;
    (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s.min(3600.0)))
}

/// What went wrong talking to Globus. Never carries a secret.
#[derive(Debug, thiserror::Error)]
pub enum GlobusError {
    /// The service answered with an error status.
    #[error("{what}: HTTP {status}{}: {message}", code.as_deref().map(|c| format!(" {c}")).unwrap_or_default())]
    Status {
        /// The request (`ingest into index ...`).
        what: String,
        /// The HTTP status.
        status: u16,
        /// Globus's error code, when the body had one.
        code: Option<String>,
        /// The service's message.
        message: String,
        /// The `Retry-After` the service asked for.
        retry_after: Option<Duration>,
    },
    /// The request did not get an answer (connection refused or reset, timeout).
    #[error("{what}: {reason}")]
    Connection {
        /// The request.
        what: String,
        /// Why.
        reason: String,
    },
    /// The answer was not what the API documents.
    #[error("{what}: unexpected answer: {reason}")]
    Protocol {
        /// The request.
        what: String,
        /// What was wrong with it.
        reason: String,
    },
    /// Globus Auth refused the client credentials.
    #[error("{what}: HTTP {status}: {message}")]
    TokenRefused {
        /// The token request.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The service's message.
        message: String,
    },
    /// A task ended `FAILED`.
    #[error("task {task_id} on index {index_id} FAILED: {message}")]
    TaskFailed {
        /// The task.
        task_id: String,
        /// Its index.
        index_id: String,
        /// The task's message or state description.
        message: String,
    },
    /// A task did not finish in time.
    #[error("task {task_id} on index {index_id} still {state} after {secs:.0} s")]
    TaskTimeout {
        /// The task.
        task_id: String,
        /// Its index.
        index_id: String,
        /// Its last state.
        state: String,
        /// How long it was waited for.
        secs: f64,
    },
    /// A transient failure outlasted every retry.
    #[error("gave up after {retries} retries: {last}")]
    GaveUp {
        /// Retries made.
        retries: u32,
        /// The last failure.
        last: Box<GlobusError>,
    },
    /// A batch could not be turned into requests, or what it holds was refused.
    #[error("{0}")]
    Batch(String),
    /// Tasks kept ending FAILED in a way isolation cannot pin on a few records (every entry
    /// of a document, or more pieces than `max_dead_letters`): the service's trouble, which
    /// a later delivery may not meet.
    #[error("{0}")]
    TasksFailing(String),
    /// The request could not be built here (a token no HTTP header can carry, a URL the
    /// client refuses): nothing was sent, and sending again fails the same way.
    #[error("{what}: cannot build the request: {reason}")]
    Request {
        /// The request.
        what: String,
        /// Why (never the token).
        reason: String,
    },
}

impl GlobusError {
    /// Whether retrying the same request may help (connection errors, 429, 5xx).
    pub fn is_transient(&self) -> bool {
        match self {
            GlobusError::Connection { .. } => true,
            GlobusError::Status { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }

    /// Whether the service refused the request for what it holds (HTTP 400): sending it
    /// again unchanged fails the same way.
    pub fn is_refusal(&self) -> bool {
        matches!(self, GlobusError::Status { status: 400, .. })
    }

    /// Whether the service refused the credentials.
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, GlobusError::Status { status: 401, .. })
    }

    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            GlobusError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub(crate) fn reason_label(&self) -> &'static str {
        match self {
            GlobusError::Status { status: 429, .. } => "rate_limited",
            GlobusError::Status { .. } => "server_error",
            _ => "connection",
        }
    }

    /// Whether retrying the whole delivery later may help: after transient failures, tasks
    /// that ended FAILED or did not finish (the service's trouble: the same document may
    /// succeed), but not after a refusal, bad credentials or a request that cannot be built.
    pub(crate) fn retry_hint(&self) -> Retry {
        match self {
            GlobusError::GaveUp { .. }
            | GlobusError::Connection { .. }
            | GlobusError::TaskTimeout { .. }
            | GlobusError::TaskFailed { .. }
            | GlobusError::TasksFailing(_) => Retry::WithBackoff,
            e if e.is_transient() => Retry::WithBackoff,
            _ => Retry::NoRetry,
        }
    }
}

/// The error message in a Globus (`{"code","message",...}`) or OAuth (`{"error",
/// "error_description"}`) error body, or the start of the body.
pub(crate) fn error_message(body: &[u8]) -> (Option<String>, String) {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        if let Some(m) = s("message") {
            return (s("code"), m);
        }
        if let Some(e) = s("error") {
            return (None, s("error_description").map(|d| format!("{e}: {d}")).unwrap_or(e));
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return (None, "(no message)".into());
    }
    (None, text.chars().take(300).collect())
}

/// `what` plus the error's sources.
pub(crate) fn describe(e: &reqwest::Error) -> String {
    icicle_core::error::chain(e)
}

/// Response bodies are read up to this (Globus answers are small; an endpoint or proxy that
/// sends more is not answering, and must not run the process out of memory).
pub(crate) const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// The body of `resp` (the answer to `what`), at most [`MAX_RESPONSE_BYTES`].
pub(crate) async fn read_body(mut resp: reqwest::Response, what: &str) -> Result<Vec<u8>, GlobusError> {
    let mut out = Vec::new();
    while let Some(chunk) =
        resp.chunk().await.map_err(|e| GlobusError::Connection { what: what.to_string(), reason: describe(&e) })?
    {
        if out.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(GlobusError::Protocol {
                what: what.to_string(),
                reason: format!("an answer of more than {} MiB: not a Globus response", MAX_RESPONSE_BYTES >> 20),
            });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// At most the first 200 characters of `text`, for an error message.
pub(crate) fn excerpt(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}
