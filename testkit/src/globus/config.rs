//! The documented limits and scopes of the Search API, and the emulator's options. The limits
//! `icicle serve` also enforces are its own (re-exported here); those of Globus's cloud alone
//! (field length, nesting, entry size, fields per index) are the emulator's.

use std::path::PathBuf;
use std::time::Duration;

pub use icicle_plugins_index::api::advanced::MAX_QUERY_CHARS;
pub use icicle_plugins_index::api::http::MAX_REQUEST_BYTES;
pub use icicle_plugins_index::api::request::{MAX_SCROLL_LIMIT, MAX_SEARCH_RESULTS};
pub use icicle_plugins_index::api::write::{MAX_SUBJECT_BYTES, MAX_VISIBLE_TO};

/// Largest entry as compact JSON ("10MB" after expansion, read as 10,000,000 bytes).
pub const MAX_ENTRY_BYTES: usize = 10_000_000;
/// Largest string value in an entry ("32KB", read as 32,000 bytes like 10MB above).
pub const MAX_FIELD_BYTES: usize = 32_000;
/// Most distinct fields (dotted key paths, objects included) an index may ever hold.
pub const MAX_FIELDS_PER_INDEX: usize = 1000;
/// Deepest key in `content` (a top-level key is at depth 1).
pub const MAX_FIELD_DEPTH: usize = 20;
/// The full-access Search scope (client-credentials tokens get it unless they ask for less).
pub const SCOPE_ALL: &str = "urn:globus:auth:scope:search.api.globus.org:all";
/// The ingest-only Search scope.
pub(super) const SCOPE_INGEST: &str = "urn:globus:auth:scope:search.api.globus.org:ingest";
/// The search-only Search scope.
pub(super) const SCOPE_SEARCH: &str = "urn:globus:auth:scope:search.api.globus.org:search";

/// How the emulator behaves.
#[derive(Debug, Clone)]
pub struct Options {
    /// Index ids that exist (anything else is 404).
    pub indexes: Vec<String>,
    /// Static bearer tokens accepted with full access.
    pub tokens: Vec<String>,
    /// A confidential client allowed to use client credentials: (client id, secret).
    pub client: Option<(String, String)>,
    /// Requests per second the `/v1` API accepts (token bucket); `None`: unlimited.
    pub rate_limit: Option<f64>,
    /// Bucket size (requests that may burst above the rate); default: one second's worth.
    pub burst: Option<f64>,
    /// Answer every Nth write request (ingest, deletes) with 503 without applying it.
    pub fail_every: Option<u64>,
    /// Let every Nth task end FAILED without applying it.
    pub fail_task_every: Option<u64>,
    /// Refuse (400, a validation error) every ingest holding an entry whose subject contains
    /// one of these: a record Search will never take.
    pub refuse_subjects: Vec<String>,
    /// Let every task holding an entry, or deleting a subject, that contains one of these end
    /// FAILED.
    pub fail_task_subjects: Vec<String>,
    /// How long a task stays in PROGRESS before it is applied.
    pub task_delay: Duration,
    /// `expires_in` of issued access tokens.
    pub token_lifetime: Duration,
    /// Where the indexes' directories are made (`None`: a temporary directory, removed when
    /// the emulator stops).
    pub dir: Option<PathBuf>,
}

impl Options {
    /// One index, one static token, no limits or failures.
    pub fn new(index: &str, token: &str) -> Options {
        Options {
            indexes: vec![index.to_string()],
            tokens: vec![token.to_string()],
            client: None,
            rate_limit: None,
            burst: None,
            fail_every: None,
            fail_task_every: None,
            refuse_subjects: Vec::new(),
            fail_task_subjects: Vec::new(),
            task_delay: Duration::ZERO,
            token_lifetime: Duration::from_secs(172_800),
            dir: None,
        }
    }
}
