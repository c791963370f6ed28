//! The documented limits and scopes of the Search API, and the emulator's options.

use std::time::Duration;

/// Globus Search's HTTP request size limit ("10MB"), read as 10,000,000 bytes.
pub const MAX_REQUEST_BYTES: usize = 10_000_000;
/// Largest subject, in UTF-8 bytes.
pub const MAX_SUBJECT_BYTES: usize = 500;
/// Most principals in one `visible_to`.
pub const MAX_VISIBLE_TO: usize = 100;
/// Most entries (distinct entry ids) under one subject.
pub const MAX_ENTRIES_PER_SUBJECT: usize = 10;
/// Largest scroll page.
pub const MAX_SCROLL_LIMIT: u64 = 10_000;
/// Largest `offset + limit` of a search ("at most 10,000 results"; use scroll for more).
pub const MAX_SEARCH_RESULTS: u64 = 10_000;
/// Largest entry as compact JSON ("10MB" after expansion, read as 10,000,000 bytes).
pub const MAX_ENTRY_BYTES: usize = 10_000_000;
/// Largest string value in an entry ("32KB", read as 32,000 bytes like 10MB above).
pub const MAX_FIELD_BYTES: usize = 32_000;
/// Most distinct fields (dotted key paths, objects included) an index may ever hold.
pub const MAX_FIELDS_PER_INDEX: usize = 1000;
/// Deepest key in `content` (a top-level key is at depth 1).
pub const MAX_FIELD_DEPTH: usize = 20;
/// Longest query string `q`, in characters.
pub const MAX_QUERY_CHARS: usize = 256;
/// Strings longer than this (characters) are left out of facets and sort as missing.
pub(super) const MAX_FACET_CHARS: usize = 10_000;
/// Most buckets a histogram facet may produce.
pub(super) const MAX_BUCKETS: usize = 10_000;
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
        }
    }
}
