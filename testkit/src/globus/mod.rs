//! A Globus Search emulator (`icicle-testkit globus-search`) and a small client for reading it
//! back: `icicle serve`'s Search API with what Globus's cloud adds in front of it.
//!
//! Each index is the product's [`Service`] (plugins/index `api`) over a directory of its own
//! (a temporary directory unless [`Options::dir`] says where). What tests are answered from
//! that service is the product's code: ingest and delete checks, `GET` and `POST` search
//! (query strings, the advanced syntax, filters, facets, sort, paging), scroll,
//! `GET .../subject` and `.../entry`, `delete_by_query`, `DELETE .../subject` and `.../entry`,
//! the Task documents and `GET /v1/task_list/<index>`.
//!
//! The emulator adds only what the cloud service has and `icicle serve` has not:
//!
//! - Globus Auth: static tokens, the client-credentials token endpoint (`POST /v2/oauth2/token`),
//!   scopes and expiry; every `/v1` request needs a token except queries, which without one see
//!   `public` entries only. A caller is answered for `public` and its identity
//!   (`urn:globus:auth:identity:<client_id>` for client credentials; static tokens have none),
//!   and every authenticated caller is the index's owner, so it may use `bypass_visible_to`.
//! - Tasks run later: a write is checked at once (the product's checks, then the cloud's), then
//!   queued; one worker applies the queue in the order received through the product
//!   (`PENDING`, `PROGRESS` for `task_delay`, then `SUCCESS` or `FAILED`).
//! - The cloud's limits the product does not have: string values ≤ 32 KB, keys nested ≤ 20,
//!   entries ≤ 10 MB as compact JSON, ≤ 1000 fields a request, and an index that has ever held
//!   1000 fields fails the task that adds more (an Elasticsearch mapping, never forgotten).
//! - Index administration: trial indexes (1 MB of content, at most 3), index documents, delete
//!   and reopen (writes answer 409 while `delete_pending`), roles; the size quota (413).
//! - Faults: a token-bucket rate limit (429 with `Retry-After`), every Nth write answered 503
//!   without being applied, every Nth task (or those naming given subjects) `FAILED` without
//!   being applied, ingests naming given subjects refused (400).
//! - `/_emulator/` endpoints for tests (no authentication, no rate limit): `stats`,
//!   `dump/<index>` (the stored entries with `visible_to`) and `expire_tokens`.
//!
//! Errors are the product's `{"code","message","status","error_data"}` documents.
//!
//! # Layout
//!
//! `config` holds the limits and [`Options`]; `http` the wire helpers the product lacks;
//! `limits` the cloud's content limits; `state` the indexes, the queue and the task worker;
//! `auth`, `admin` and `write` the emulator's own handlers; `server` the routing and the
//! listener; `client` reads it all back.
//!
//! [`Service`]: icicle_plugins_index::api::Service

mod admin;
mod auth;
mod client;
mod config;
mod http;
mod limits;
mod server;
mod state;
mod write;

pub use client::{block_on, Client, ClientError};
pub use config::{
    Options, MAX_ENTRY_BYTES, MAX_FIELDS_PER_INDEX, MAX_FIELD_BYTES, MAX_FIELD_DEPTH, MAX_QUERY_CHARS,
    MAX_REQUEST_BYTES, MAX_SCROLL_LIMIT, MAX_SEARCH_RESULTS, MAX_SUBJECT_BYTES, MAX_VISIBLE_TO, SCOPE_ALL,
};
pub use server::{serve, Emulator};

#[cfg(test)]
mod tests;
