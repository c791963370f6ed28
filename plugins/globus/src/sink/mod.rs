//! The `globus` sink: configuration, authentication, the retrying HTTP client and task waiting.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use icicle_core::batch::{delete_body, DocumentBatch, EntryBatch, GINGEST_HEAD, GINGEST_TAIL};
use icicle_core::deadletter::DeadLetters;
use icicle_core::error::SinkError;
use icicle_core::metrics::Metrics;
use icicle_core::registry::{BuildContext, ComponentConfig};
use icicle_core::secret::{self, Secret};
use icicle_core::traits::Sink;
use icicle_core::ConfigError;
use icicle_gmeta::{delete_batches, Batcher};
use reqwest::header::{HeaderMap, CONTENT_TYPE, RETRY_AFTER};
use reqwest::Method;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{describe, error_message};
pub use crate::error::{parse_retry_after, refresh_after, GlobusError, RetryPolicy};

/// Globus Search's HTTP request size limit ("10MB"), read as 10,000,000 bytes (the stricter
/// reading); larger batches are split into several requests.
pub const MAX_REQUEST_BYTES: usize = 10_000_000;

/// The default Globus Search API.
pub const DEFAULT_BASE_URL: &str = "https://search.api.globus.org";
/// The default Globus Auth token endpoint.
pub const DEFAULT_AUTH_URL: &str = "https://auth.globus.org/v2/oauth2/token";
/// The scope client credentials ask for.
pub const DEFAULT_SCOPE: &str = "urn:globus:auth:scope:search.api.globus.org:all";

mod config;
use config::check_token;
pub use config::GlobusSinkConfig;

/// How requests are authorized.
enum Auth {
    /// A bearer token given by the operator.
    Static(Secret),
    /// Globus Auth client credentials, with the current access token and when to refresh it.
    Client { client_id: String, secret: Secret, auth_url: String, scope: String, token: Option<(Secret, Instant)> },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Static(_) => f.write_str("StaticToken(***)"),
            Auth::Client { client_id, auth_url, scope, token, .. } => f
                .debug_struct("ClientCredentials")
                .field("client_id", client_id)
                .field("auth_url", auth_url)
                .field("scope", scope)
                .field("has_token", &token.is_some())
                .finish_non_exhaustive(),
        }
    }
}

/// `application/x-www-form-urlencoded` encoding of one value.
fn form_encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => out.push(b as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Counters of one sink, logged when it closes.
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    requests: u64,
    retries: u64,
    tasks: u64,
    token_fetches: u64,
    /// Tasks submitted (waited for or not).
    submitted: u64,
}

/// Task ids the summary names: the most recent this many.
const FACT_TASK_IDS: usize = 20;

/// The runtime Globus Search sink.
pub struct GlobusSink {
    id: String,
    index_id: String,
    base_url: String,
    client: reqwest::Client,
    auth: Auth,
    retry: RetryPolicy,
    wait_for_tasks: bool,
    task_poll: Duration,
    task_timeout: Duration,
    rng: icicle_core::rng::Rng,
    receipt: Option<Value>,
    stats: Stats,
    task_retries: u32,
    max_dead_letters: u32,
    /// Entries and subjects that failed on their own.
    dead: DeadLetters,
    /// Subjects kept as dead letters.
    dead_lettered: Vec<String>,
    /// Paces requests to `max_requests_per_s`.
    pace: Option<governor::DefaultDirectRateLimiter>,
    /// The most recent task ids, for the summary.
    recent_tasks: std::collections::VecDeque<String>,
}

impl std::fmt::Debug for GlobusSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobusSink")
            .field("id", &self.id)
            .field("index_id", &self.index_id)
            .field("base_url", &self.base_url)
            .field("auth", &self.auth)
            .field("retry", &self.retry)
            .field("wait_for_tasks", &self.wait_for_tasks)
            .field("task_poll", &self.task_poll)
            .field("task_timeout", &self.task_timeout)
            .finish_non_exhaustive()
    }
}

impl GlobusSink {
    /// The sink's component id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Requests sent, retries made, tasks waited for and tokens fetched so far.
    pub fn counts(&self) -> (u64, u64, u64, u64) {
        (self.stats.requests, self.stats.retries, self.stats.tasks, self.stats.token_fetches)
    }

    fn next_rand(&mut self) -> f64 {
        self.rng.f64()
    }

    fn sink_error(&self, e: GlobusError) -> SinkError {
        SinkError::Remote { sink: self.id.clone(), reason: self.redact(e.to_string()), retry: e.retry_hint() }
    }

    /// Remove any secret that a remote message might have echoed: this sink's own, and any
    /// `key=value` whose key names a secret.
    fn redact(&self, s: String) -> String {
        let s = match &self.auth {
            Auth::Static(t) => secret::scrub(s, &[t]),
            Auth::Client { secret: client_secret, token: Some((t, _)), .. } => secret::scrub(s, &[client_secret, t]),
            Auth::Client { secret: client_secret, token: None, .. } => secret::scrub(s, &[client_secret]),
        };
        secret::redact_text(&s)
    }

    /// The documents a batch becomes: at most [`MAX_REQUEST_BYTES`] each.
    fn requests(batch: &DocumentBatch) -> Result<Vec<Doc>, GlobusError> {
        let mut out = Vec::new();
        match batch {
            DocumentBatch::Ingest(entries) if entries.document_bytes() <= MAX_REQUEST_BYTES => {
                out.push(Doc::Ingest(entries.clone()))
            }
            DocumentBatch::Ingest(entries) => {
                let mut batcher = Batcher::new(MAX_REQUEST_BYTES);
                let (mut full, mut oversized) = (Vec::new(), Vec::new());
                batcher.push_chunk(entries, &mut full, &mut oversized);
                full.extend(batcher.flush());
                if let Some(big) = oversized.first() {
                    return Err(GlobusError::Batch(format!(
                        "an entry of {} bytes does not fit Globus Search's {MAX_REQUEST_BYTES}-byte request limit",
                        big.len() + GINGEST_HEAD.len() + GINGEST_TAIL.len()
                    )));
                }
                out.extend(full.into_iter().map(Doc::Ingest));
            }
            DocumentBatch::Delete(subjects) => {
                if delete_body(subjects).len() <= MAX_REQUEST_BYTES {
                    out.push(Doc::Delete(subjects.clone()));
                } else {
                    let parts =
                        delete_batches(subjects.clone(), icicle_core::batch::DocumentLimit::compact(MAX_REQUEST_BYTES));
                    out.extend(parts.into_iter().map(Doc::Delete));
                }
            }
        }
        Ok(out)
    }

    /// The bearer token, fetching one with client credentials when there is none or it is
    /// about to expire.
    async fn bearer(&mut self) -> Result<String, GlobusError> {
        let (client_id, secret, auth_url, scope) = match &self.auth {
            Auth::Static(t) => return Ok(t.expose().to_string()),
            Auth::Client { token: Some((t, refresh_at)), .. } if Instant::now() < *refresh_at => {
                return Ok(t.expose().to_string())
            }
            Auth::Client { client_id, secret, auth_url, scope, .. } => {
                (client_id.clone(), secret.clone(), auth_url.clone(), scope.clone())
            }
        };
        let what = format!("token request to {auth_url} for client {client_id}");
        let body = format!("grant_type=client_credentials&scope={}", form_encode(&scope));
        self.stats.token_fetches += 1;
        Metrics::global().add(&icicle_core::metrics::names::GLOBUS_TOKEN_FETCHES_TOTAL, &[("sink", &self.id)], 1.0);
        let resp = self
            .client
            .post(&auth_url)
            .basic_auth(&client_id, Some(secret.expose()))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| request_error(&what, &e))?;
        let status = resp.status().as_u16();
        let retry_after = resp.headers().get(RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(parse_retry_after);
        let bytes = crate::error::read_body(resp, &what).await?;
        if !(200..300).contains(&status) {
            let (code, message) = error_message(&bytes);
            // Transient trouble at Globus Auth is retried; a refused client is a configuration
            // error, never a 401 to fetch another token for.
            if status == 429 || status >= 500 {
                return Err(GlobusError::Status { what, status, code, message, retry_after });
            }
            return Err(GlobusError::TokenRefused { what, status, message });
        }
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| GlobusError::Protocol { what: what.clone(), reason: e.to_string() })?;
        let token = v
            .get("access_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| GlobusError::Protocol { what: what.clone(), reason: "no access_token".into() })?
            .to_string();
        let expires_in =
            v.get("expires_in").and_then(Value::as_f64).filter(|s| s.is_finite() && *s >= 0.0).unwrap_or(3600.0);
        let refresh_at = Instant::now() + refresh_after(expires_in);
        tracing::debug!(sink = %self.id, expires_in, "fetched a Globus access token");
        if let Auth::Client { token: slot, .. } = &mut self.auth {
            *slot = Some((Secret::new(token.clone()), refresh_at));
        }
        Ok(token)
    }

    fn invalidate_token(&mut self) {
        if let Auth::Client { token, .. } = &mut self.auth {
            *token = None;
        }
    }

    /// One attempt of a request to the Search API.
    async fn once(
        &mut self,
        what: &str,
        endpoint: &'static str,
        method: &Method,
        url: &str,
        body: Option<&[u8]>,
    ) -> Result<Value, GlobusError> {
        if let Some(p) = &self.pace {
            p.until_ready().await;
        }
        let token = self.bearer().await?;
        if check_token(&token).is_err() {
            return Err(GlobusError::Request {
                what: what.to_string(),
                reason: "the access token holds a newline or another control character (not shown)".into(),
            });
        }
        self.stats.requests += 1;
        Metrics::global().add(
            &icicle_core::metrics::names::GLOBUS_REQUESTS_TOTAL,
            &[("sink", &self.id), ("endpoint", endpoint)],
            1.0,
        );
        let mut req = self.client.request(method.clone(), url).bearer_auth(token);
        if let Some(b) = body {
            req = req.header(CONTENT_TYPE, "application/json").body(b.to_vec());
        }
        let resp = req.send().await.map_err(|e| request_error(what, &e))?;
        let status = resp.status().as_u16();
        let headers: HeaderMap = resp.headers().clone();
        let bytes = crate::error::read_body(resp, what).await?;
        if !(200..300).contains(&status) {
            let (code, message) = error_message(&bytes);
            let retry_after = headers.get(RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(parse_retry_after);
            return Err(GlobusError::Status { what: what.to_string(), status, code, message, retry_after });
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| GlobusError::Protocol { what: what.to_string(), reason: format!("not JSON: {e}") })
    }

    /// A request with retries: transient failures back off and retry up to `max_retries`
    /// times; a 401 with client credentials refetches the token once.
    async fn call(
        &mut self,
        what: &str,
        endpoint: &'static str,
        method: Method,
        url: &str,
        body: Option<&[u8]>,
    ) -> Result<Value, GlobusError> {
        let mut attempt = 0u32;
        let mut refreshed = false;
        loop {
            match self.once(what, endpoint, &method, url, body).await {
                Ok(v) => return Ok(v),
                Err(e) if e.is_unauthorized() && !refreshed && matches!(self.auth, Auth::Client { .. }) => {
                    refreshed = true;
                    tracing::info!(sink = %self.id, what, "401 from Globus Search: fetching a new access token");
                    self.invalidate_token();
                }
                Err(e) if e.is_transient() => {
                    if attempt >= self.retry.max_retries {
                        return Err(GlobusError::GaveUp { retries: attempt, last: Box::new(e) });
                    }
                    let r = self.next_rand();
                    let delay = self.retry.delay(attempt, e.retry_after(), r);
                    attempt += 1;
                    self.stats.retries += 1;
                    Metrics::global().add(
                        &icicle_core::metrics::names::GLOBUS_RETRIES_TOTAL,
                        &[("sink", &self.id), ("reason", e.reason_label())],
                        1.0,
                    );
                    tracing::warn!(sink = %self.id, error = %self.redact(e.to_string()), attempt, delay_ms = delay.as_millis() as u64, "Globus request failed, retrying");
                    tokio::time::sleep(delay).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Poll a task until it is `SUCCESS` (`Ok`), `FAILED` or too old (`Err`).
    async fn wait_task(&mut self, task_id: &str, submitted: Instant) -> Result<(), GlobusError> {
        let url = format!("{}/v1/task/{task_id}", self.base_url);
        let what = format!("task {task_id}");
        loop {
            let v = self.call(&what, "task", Method::GET, &url, None).await?;
            let state = v.get("state").and_then(Value::as_str).unwrap_or("").to_string();
            match state.as_str() {
                "SUCCESS" => {
                    self.stats.tasks += 1;
                    let m = Metrics::global();
                    m.add(&icicle_core::metrics::names::GLOBUS_TASKS_TOTAL, &[("sink", &self.id)], 1.0);
                    m.set(
                        &icicle_core::metrics::names::GLOBUS_LAST_TASK_SECONDS,
                        &[("sink", &self.id)],
                        submitted.elapsed().as_secs_f64(),
                    );
                    return Ok(());
                }
                "FAILED" => {
                    Metrics::global().add(
                        &icicle_core::metrics::names::GLOBUS_TASKS_FAILED_TOTAL,
                        &[("sink", &self.id)],
                        1.0,
                    );
                    let message = v
                        .get("message")
                        .and_then(Value::as_str)
                        .or_else(|| v.get("state_description").and_then(Value::as_str))
                        .unwrap_or("no message")
                        .to_string();
                    return Err(GlobusError::TaskFailed {
                        task_id: task_id.into(),
                        index_id: self.index_id.clone(),
                        message,
                    });
                }
                "PENDING" | "PROGRESS" => {}
                other => return Err(GlobusError::Protocol { what, reason: format!("unknown task state `{other}`") }),
            }
            if submitted.elapsed() >= self.task_timeout {
                return Err(GlobusError::TaskTimeout {
                    task_id: task_id.into(),
                    index_id: self.index_id.clone(),
                    state,
                    secs: submitted.elapsed().as_secs_f64(),
                });
            }
            tokio::time::sleep(self.task_poll).await;
        }
    }

    /// What `GET /v1/index/{index_id}` answers, in one attempt (a token fetched first when
    /// the sink has client credentials): `icicle config check --connect`.
    pub async fn index_info(&mut self) -> Result<String, GlobusError> {
        let url = format!("{}/v1/index/{}", self.base_url, self.index_id);
        let what = format!("index {} at {}", self.index_id, self.base_url);
        let v = self.once(&what, "index", &Method::GET, &url, None).await?;
        Ok(format!(
            "index {} at {} (`{}`, {})",
            self.index_id,
            self.base_url,
            v.get("display_name").and_then(Value::as_str).unwrap_or(""),
            v.get("status").and_then(Value::as_str).unwrap_or("no status")
        ))
    }

    /// Send a batch; returns the task ids once accepted (and, with `wait_for_tasks`, succeeded).
    async fn send_batch(&mut self, batch: &DocumentBatch) -> Result<Vec<String>, GlobusError> {
        let docs = Self::requests(batch)?;
        self.publish_isolating(docs).await
    }

    /// POST one request body to `path` of the index; its task id once accepted.
    async fn submit(
        &mut self,
        endpoint: &'static str,
        path: &str,
        body: &[u8],
        n: usize,
    ) -> Result<String, GlobusError> {
        let url = format!("{}/v1/index/{}/{path}", self.base_url, self.index_id);
        let what = format!(
            "{path} of {n} {} in index {}",
            if endpoint == "ingest" { "entries" } else { "subjects" },
            self.index_id
        );
        let v = self.call(&what, endpoint, Method::POST, &url, Some(body)).await?;
        let task_id = v.get("task_id").and_then(Value::as_str).unwrap_or("").to_string();
        if task_id.is_empty() || !task_id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(GlobusError::Protocol {
                what,
                reason: format!("no usable task_id in {}", crate::error::excerpt(&v.to_string())),
            });
        }
        tracing::debug!(sink = %self.id, task_id, endpoint, n, "Globus task submitted");
        Ok(task_id)
    }
}

mod isolate;
use isolate::Doc;

#[async_trait]
impl Sink for GlobusSink {
    async fn deliver(&mut self, batch: &DocumentBatch) -> Result<(), SinkError> {
        self.receipt = None;
        if batch.is_empty() {
            return Ok(());
        }
        let task_ids = self.send_batch(batch).await.map_err(|e| self.sink_error(e))?;
        self.stats.submitted += task_ids.len() as u64;
        for t in &task_ids {
            if self.recent_tasks.len() == FACT_TASK_IDS {
                self.recent_tasks.pop_front();
            }
            self.recent_tasks.push_back(t.clone());
        }
        self.receipt = Some(serde_json::json!({"task_ids": task_ids, "index_id": self.index_id}));
        Ok(())
    }

    fn receipt(&self) -> Option<Value> {
        self.receipt.clone()
    }

    fn dead_lettered(&self) -> &[String] {
        &self.dead_lettered
    }

    fn facts(&self) -> Option<Value> {
        let s = self.stats;
        Some(serde_json::json!({
            "index_id": self.index_id,
            "requests": s.requests,
            "retries": s.retries,
            "tasks_submitted": s.submitted,
            "tasks_succeeded": s.tasks,
            "waited_for_tasks": self.wait_for_tasks,
            "token_fetches": s.token_fetches,
            "last_task_ids": self.recent_tasks,
        }))
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        let s = self.stats;
        tracing::info!(sink = %self.id, index_id = %self.index_id, requests = s.requests, retries = s.retries, tasks = s.tasks, token_fetches = s.token_fetches, "Globus sink closed");
        Ok(())
    }
}

/// The error of a request that got no answer: [`GlobusError::Request`] when it could not
/// even be built (retrying cannot help), else [`GlobusError::Connection`].
fn request_error(what: &str, e: &reqwest::Error) -> GlobusError {
    if e.is_builder() {
        GlobusError::Request { what: what.to_string(), reason: describe(e) }
    } else {
        GlobusError::Connection { what: what.to_string(), reason: describe(e) }
    }
}

/// An [`EntryBatch`] from complete GMetaEntry JSON objects (tests, tools).
pub fn entry_batch<'a>(entries: impl IntoIterator<Item = &'a [u8]>) -> EntryBatch {
    let mut b = EntryBatch::default();
    for e in entries {
        b.push(e);
    }
    b
}

#[cfg(test)]
mod tests;
