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

/// `[sinks.<id>] type = "globus"`. Holds only where secrets come from, never a secret.
#[derive(Debug, Clone, Deserialize)]
pub struct GlobusSinkConfig {
    /// The Globus Search index (a UUID).
    pub index_id: String,
    /// The Search API (default `https://search.api.globus.org`).
    #[serde(default = "default_base_url")]
    pub base_url: String,
    /// A static bearer token from this environment variable...
    #[serde(default)]
    pub token_env: Option<String>,
    /// ...or from this file (first line).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Or client credentials: the confidential client's id...
    #[serde(default)]
    pub client_id: Option<String>,
    /// ...and its secret from this environment variable...
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// ...or from this file (first line).
    #[serde(default)]
    pub client_secret_file: Option<PathBuf>,
    /// The Globus Auth token endpoint.
    #[serde(default = "default_auth_url")]
    pub auth_url: String,
    /// The scope requested with client credentials.
    #[serde(default = "default_scope")]
    pub scope: String,
    /// Retries of one request (connection errors, 429, 5xx) before the delivery fails.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// The first backoff, doubled on every retry...
    #[serde(default = "default_retry_initial_ms")]
    pub retry_initial_ms: u64,
    /// ...up to this.
    #[serde(default = "default_retry_max_ms")]
    pub retry_max_ms: u64,
    /// Timeout of one HTTP request.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: f64,
    /// Return from a delivery only once its tasks are `SUCCESS` (acknowledge only after publication).
    #[serde(default = "yes")]
    pub wait_for_tasks: bool,
    /// Interval between task polls.
    #[serde(default = "default_task_poll_ms")]
    pub task_poll_ms: u64,
    /// A task not finished after this long fails the delivery.
    #[serde(default = "default_task_timeout_secs")]
    pub task_timeout_secs: f64,
    /// A document (ingest or delete) whose task ends FAILED is sent again this many times
    /// before it is cut in halves to find the entry or subject that fails it.
    #[serde(default = "default_task_retries")]
    pub task_retries: u32,
    /// Where entries Search refuses, and entries and deletes whose tasks keep failing, on their
    /// own go (JSON lines with the reason; a delete's `raw` is its `batch_delete_by_subject`
    /// body); default `<sink id>.dead-letters.jsonl` in the working directory.
    #[serde(default)]
    pub dead_letter_file: Option<PathBuf>,
    /// More dead letters than this in one delivery fail it (something systematic); 0 turns
    /// isolation off (a refused document, or a task still FAILED after `task_retries`, fails
    /// the delivery).
    #[serde(default = "default_max_dead_letters")]
    pub max_dead_letters: u32,
    /// At most this many requests a second to the Search API (a token bucket, no burst); under
    /// `icicle-mpi` each rank gets an equal share. Default: no limit (429s are retried).
    #[serde(default)]
    pub max_requests_per_s: Option<f64>,
}

fn default_task_retries() -> u32 {
    2
}

fn default_max_dead_letters() -> u32 {
    100
}

fn default_base_url() -> String {
    DEFAULT_BASE_URL.into()
}
fn default_auth_url() -> String {
    DEFAULT_AUTH_URL.into()
}
fn default_scope() -> String {
    DEFAULT_SCOPE.into()
}
fn default_max_retries() -> u32 {
    8
}
fn default_retry_initial_ms() -> u64 {
    500
}
fn default_retry_max_ms() -> u64 {
    30_000
}
fn default_timeout_secs() -> f64 {
    60.0
}
fn yes() -> bool {
    true
}
fn default_task_poll_ms() -> u64 {
    500
}
fn default_task_timeout_secs() -> f64 {
    600.0
}

impl GlobusSinkConfig {
    /// A configuration for `index_id` with every default and no authentication chosen yet.
    pub fn new(index_id: &str) -> GlobusSinkConfig {
        GlobusSinkConfig {
            index_id: index_id.into(),
            base_url: default_base_url(),
            token_env: None,
            token_file: None,
            client_id: None,
            client_secret_env: None,
            client_secret_file: None,
            auth_url: default_auth_url(),
            scope: default_scope(),
            max_retries: default_max_retries(),
            retry_initial_ms: default_retry_initial_ms(),
            retry_max_ms: default_retry_max_ms(),
            timeout_secs: default_timeout_secs(),
            wait_for_tasks: true,
            task_poll_ms: default_task_poll_ms(),
            task_timeout_secs: default_task_timeout_secs(),
            task_retries: default_task_retries(),
            dead_letter_file: None,
            max_dead_letters: default_max_dead_letters(),
            max_requests_per_s: None,
        }
    }

    /// Validate, read the secret, and make the sink `id`. Errors name the key (through
    /// `invalid`, which gets the key relative to the section and a reason) and never the secret.
    pub fn connect_with(
        self,
        id: &str,
        invalid: impl Fn(&str, String) -> ConfigError,
    ) -> Result<GlobusSink, ConfigError> {
        if !is_uuid(&self.index_id) {
            return Err(invalid(
                "index_id",
                format!(
                    "`{}` is not a Globus Search index id (a UUID such as 4d7d1e0a-6b4e-4d1c-9f3a-2c1e5b7a9d00)",
                    self.index_id
                ),
            ));
        }
        let base_url = check_url(&self.base_url).map_err(|e| invalid("base_url", e))?;
        let auth = match (&self.token_env, &self.token_file, &self.client_id) {
            (Some(_), Some(_), _) => return Err(invalid("token_env", "give either token_env or token_file, not both".into())),
            (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
                return Err(invalid("client_id", "give either a static token (token_env / token_file) or client credentials (client_id), not both".into()))
            }
            (Some(var), None, None) => {
                let token = secret::from_env(var).map_err(|e| invalid("token_env", e))?;
                let shown = if secret::looks_like_env_name(var) { var.as_str() } else { secret::REDACTED };
                check_token(token.expose()).map_err(|why| invalid("token_env", format!("the token in environment variable `{shown}` {why}")))?;
                Auth::Static(token)
            }
            (None, Some(f), None) => {
                let token = secret::from_file(f).map_err(|e| invalid("token_file", e))?;
                check_token(token.expose()).map_err(|why| invalid("token_file", format!("the token in `{}` {why}", f.display())))?;
                Auth::Static(token)
            }
            (None, None, Some(client_id)) => {
                if client_id.trim().is_empty() {
                    return Err(invalid("client_id", "must not be empty".into()));
                }
                let secret = match (&self.client_secret_env, &self.client_secret_file) {
                    (Some(_), Some(_)) => return Err(invalid("client_secret_env", "give either client_secret_env or client_secret_file, not both".into())),
                    (Some(var), None) => secret::from_env(var).map_err(|e| invalid("client_secret_env", e))?,
                    (None, Some(f)) => secret::from_file(f).map_err(|e| invalid("client_secret_file", e))?,
                    (None, None) => return Err(invalid("client_secret_env", "client credentials need client_secret_env or client_secret_file".into())),
                };
                let auth_url = check_url(&self.auth_url).map_err(|e| invalid("auth_url", e))?;
                if self.scope.trim().is_empty() {
                    return Err(invalid("scope", "must not be empty".into()));
                }
                Auth::Client { client_id: client_id.clone(), secret, auth_url, scope: self.scope.clone(), token: None }
            }
            (None, None, None) => {
                return Err(invalid(
                    "token_env",
                    "give a static token (token_env or token_file) or client credentials (client_id with client_secret_env or client_secret_file)".into(),
                ))
            }
        };
        if !matches!(auth, Auth::Client { .. })
            && (self.client_secret_env.is_some() || self.client_secret_file.is_some())
        {
            return Err(invalid("client_secret_env", "a client secret needs client_id".into()));
        }
        if self.retry_initial_ms == 0 {
            return Err(invalid("retry_initial_ms", "must be positive".into()));
        }
        if self.retry_max_ms < self.retry_initial_ms {
            return Err(invalid("retry_max_ms", "must be at least retry_initial_ms".into()));
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.timeout_secs) {
            return Err(invalid("timeout_secs", "must be positive".into()));
        }
        if self.task_poll_ms == 0 {
            return Err(invalid("task_poll_ms", "must be positive".into()));
        }
        if !positive(self.task_timeout_secs) {
            return Err(invalid("task_timeout_secs", "must be positive".into()));
        }
        let pace = match self.max_requests_per_s {
            None => None,
            Some(r) if positive(r) && r <= 1e6 => {
                // A rate so low its period is no duration (1e-30) is refused, not a panic.
                let period = Duration::try_from_secs_f64(1.0 / r)
                    .map_err(|_| invalid("max_requests_per_s", format!("{r}: too low")))?;
                Some(governor::RateLimiter::direct(
                    governor::Quota::with_period(period)
                        .ok_or_else(|| invalid("max_requests_per_s", "too high".into()))?,
                ))
            }
            Some(r) => return Err(invalid("max_requests_per_s", format!("{r}: must be positive and at most 1000000"))),
        };
        let client = reqwest::Client::builder()
            .timeout(icicle_core::time::secs(self.timeout_secs))
            .user_agent(concat!("icicle/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| invalid("base_url", format!("cannot create an HTTP client: {e}")))?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            ^ u64::from(std::process::id()).rotate_left(32);
        let m = Metrics::global();
        for reason in ["rate_limited", "server_error", "connection"] {
            m.add(&icicle_core::metrics::names::GLOBUS_RETRIES_TOTAL, &[("sink", id), ("reason", reason)], 0.0);
        }
        m.add(&icicle_core::metrics::names::DEAD_LETTERS_TOTAL, &[("source", id)], 0.0);
        Ok(GlobusSink {
            id: id.to_string(),
            index_id: self.index_id,
            base_url,
            client,
            auth,
            retry: RetryPolicy {
                max_retries: self.max_retries,
                initial: Duration::from_millis(self.retry_initial_ms),
                max: Duration::from_millis(self.retry_max_ms),
            },
            wait_for_tasks: self.wait_for_tasks,
            task_poll: Duration::from_millis(self.task_poll_ms),
            task_timeout: icicle_core::time::secs(self.task_timeout_secs),
            rng: icicle_core::rng::Rng::new(seed),
            receipt: None,
            stats: Stats::default(),
            task_retries: self.task_retries,
            max_dead_letters: self.max_dead_letters,
            dead: DeadLetters::new(
                self.dead_letter_file.unwrap_or_else(|| PathBuf::from(format!("{id}.dead-letters.jsonl"))),
            ),
            dead_lettered: Vec::new(),
            pace,
        })
    }
}

impl ComponentConfig for GlobusSinkConfig {
    type Component = Box<dyn Sink>;

    fn build(self, ctx: &BuildContext<'_>) -> Result<Box<dyn Sink>, ConfigError> {
        Ok(Box::new(self.connect_with(&ctx.id, |key, reason| ctx.invalid(key, reason))?))
    }
}

/// `Ok` when `token` can be sent as a bearer token; otherwise why not, without the token.
fn check_token(token: &str) -> Result<(), &'static str> {
    match reqwest::header::HeaderValue::try_from(format!("Bearer {token}")) {
        Ok(_) => Ok(()),
        Err(_) => Err("holds a newline or another control character: not a bearer token an HTTP request can carry (the token is not shown)"),
    }
}

/// Whether `s` is a UUID in its canonical 8-4-4-4-12 hexadecimal form.
fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| if matches!(i, 8 | 13 | 18 | 23) { c == '-' } else { c.is_ascii_hexdigit() })
}

/// An `http(s)://host...` URL without credentials, without its trailing `/`.
fn check_url(url: &str) -> Result<String, String> {
    let u = reqwest::Url::parse(url).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    if u.scheme() != "https" && u.scheme() != "http" {
        return Err(format!("`{url}`: only http and https URLs"));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err("credentials do not belong in the URL (use token_env, token_file or client credentials)".into());
    }
    Ok(url.trim_end_matches('/').to_string())
}

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
}

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
        self.receipt = Some(serde_json::json!({"task_ids": task_ids, "index_id": self.index_id}));
        Ok(())
    }

    fn receipt(&self) -> Option<Value> {
        self.receipt.clone()
    }

    fn dead_lettered(&self) -> &[String] {
        &self.dead_lettered
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
