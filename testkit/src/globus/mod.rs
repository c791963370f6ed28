//! A Globus Search emulator (`icicle-testkit globus-search`) and a small client for reading it
//! back. A real HTTP/1.1 server (hyper, keep-alive) that answers like the Search API of
//! formats.md §5: GIngest ingest (GMetaEntry and GMetaList), `batch_delete_by_subject`,
//! subject, entry and `delete_by_query` deletes, tasks run in the order received by a
//! background worker (PENDING → PROGRESS → SUCCESS or FAILED), `GET /v1/task/<id>`,
//! `GET /v1/task_list/<index>`, `GET /v1/index/<id>/subject`, `POST /v1/index/<id>/scroll`,
//! `GET` and `POST /v1/index/<id>/search` (a subset, see Search below), `GET .../entry`,
//! index administration and roles (trial indexes of 1 MB), and Globus Auth's client
//! credentials token endpoint. It enforces the documented limits (10 MB
//! requests, 500-byte subjects, 100 `visible_to` principals, 10 entries per subject, 10 MB
//! entries, 32 KB fields, 20 levels of nesting, 1000 fields per index, 256-character queries,
//! `offset + limit` ≤ 10,000, `Content-Type: application/json`), a token-bucket rate limit
//! answering 429 with `Retry-After`, and can inject transient 503s and FAILED tasks.
//!
//! Choices where the spec is silent: errors are `{"code","message","status","error_data"}`,
//! limit violations 400 `BadRequest.ValidationError` (a request that breaks no limit alone but
//! would take its index past 1000 fields is accepted and its task FAILS, applying nothing, as
//! an Elasticsearch mapping limit would); every authenticated caller is treated as the index's
//! owner, so `bypass_visible_to` is allowed; otherwise results show entries visible to `public`
//! or to the caller's identity (`urn:globus:auth:identity:<client_id>` for client-credentials
//! tokens; static tokens and anonymous queries have none, so they see `public` entries only).
//! Endpoints under `/_emulator/` (no authentication, no rate limit) serve tests: `stats`,
//! `dump/<index>` (entries with `visible_to`) and `expire_tokens`.
//!
//! # Search
//!
//! `q` is `*` (everything) or whitespace-separated terms, all required: a term matches an
//! entry when each of its letter/digit runs (case-insensitive) is a word of some string,
//! number or boolean in `content`; a trailing `*` makes the last run a prefix. No operators,
//! quotes or `field:value` unless `advanced: true` (a subset of the advanced syntax: see
//! `advanced.rs`). `filters` and
//! `post_facet_filters` (all must hold) are `match_any`, `match_all` and `range` on a dotted
//! `field_name` into `content` (lists are searched element by element); range bounds are
//! inclusive, `"*"` is open, numbers compare with numbers and dates (the formats Search
//! detects: `yyyy-MM-dd`, `yyyy-MM-dd HH:mm:ss`, `yyyy/MM/dd HH:mm:ss Z`,
//! `yyyy-MM-ddTHH:mm:ss[.SSS]Z`) with dates. `facets`: `terms` (`size`, default 10; count
//! desc, then value), `date_histogram` (`date_interval` `year` … `second`, UTC) and
//! `numeric_histogram` (`histogram_range` cut into `size` equal buckets, `low` ≤ x < `high`);
//! they count matching entries before `post_facet_filters`. `sort` by fields (`asc` takes an
//! entry's smallest value, `desc` its largest, missing last); ties, and unsorted results, go by
//! subject. Strings over 10,000 characters are left out of facets and sort as missing.
//!
//! # Layout
//!
//! `config` holds the limits and [`Options`]; `http` the wire helpers; `values`, `entry`,
//! `facets`, `query` and `task` the stored data and its semantics; `state` the shared state
//! and the task worker; `auth`, `write` and `read` the request handlers; `server` the routing
//! and the listener; `client` reads it all back. Each module uses only those listed before it.

mod admin;
mod advanced;
mod auth;
mod client;
mod config;
mod entry;
mod facets;
mod http;
mod query;
mod read;
mod server;
mod state;
mod task;
mod values;
mod write;

pub use client::{block_on, Client, ClientError};
pub use config::{
    Options, MAX_ENTRIES_PER_SUBJECT, MAX_ENTRY_BYTES, MAX_FIELDS_PER_INDEX, MAX_FIELD_BYTES, MAX_FIELD_DEPTH,
    MAX_QUERY_CHARS, MAX_REQUEST_BYTES, MAX_SCROLL_LIMIT, MAX_SEARCH_RESULTS, MAX_SUBJECT_BYTES, MAX_VISIBLE_TO,
    SCOPE_ALL,
};
pub use server::{serve, Emulator};

#[cfg(test)]
mod tests;
