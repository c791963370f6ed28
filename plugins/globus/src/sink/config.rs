//! The `globus` sink's configuration: where the index, the token and the retry policy come
//! from, checked by `icicle config check` and when the sink is built.

use super::*;

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

    /// How requests are authorized: a static token from `token_env` or `token_file`, or client
    /// credentials; errors name the key, never the secret.
    fn auth(&self, invalid: &impl Fn(&str, String) -> ConfigError) -> Result<Auth, ConfigError> {
        Ok(match (&self.token_env, &self.token_file, &self.client_id) {
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
        })
    }

    /// Check every value and read the secret (nothing else is touched): the Search API's URL,
    /// the authorization and the request rate's quota. Errors as for
    /// [`GlobusSinkConfig::connect_with`].
    fn checked(
        &self,
        invalid: &impl Fn(&str, String) -> ConfigError,
    ) -> Result<(String, Auth, Option<governor::Quota>), ConfigError> {
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
        let auth = self.auth(invalid)?;
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
        let quota = match self.max_requests_per_s {
            None => None,
            Some(r) if positive(r) && r <= 1e6 => {
                // A rate so low its period is no duration (1e-30) is refused, not a panic.
                let period = Duration::try_from_secs_f64(1.0 / r)
                    .map_err(|_| invalid("max_requests_per_s", format!("{r}: too low")))?;
                Some(
                    governor::Quota::with_period(period)
                        .ok_or_else(|| invalid("max_requests_per_s", "too high".into()))?,
                )
            }
            Some(r) => return Err(invalid("max_requests_per_s", format!("{r}: must be positive and at most 1000000"))),
        };
        Ok((base_url, auth, quota))
    }

    /// Validate, read the secret, and make the sink `id`. Errors name the key (through
    /// `invalid`, which gets the key relative to the section and a reason) and never the secret.
    pub fn connect_with(
        self,
        id: &str,
        invalid: impl Fn(&str, String) -> ConfigError,
    ) -> Result<GlobusSink, ConfigError> {
        let (base_url, auth, quota) = self.checked(&invalid)?;
        let pace = quota.map(governor::RateLimiter::direct);
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
            recent_tasks: std::collections::VecDeque::new(),
            pace,
        })
    }
}

impl ComponentConfig for GlobusSinkConfig {
    type Component = Box<dyn Sink>;

    /// Reads the token or the client secret (`token_env`, `token_file`, `client_secret_env`,
    /// `client_secret_file`): a missing one fails the check, as it would fail the run.
    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        self.checked(&|key, reason| ctx.invalid(key, reason)).map(|_| ())
    }

    /// One `GET /v1/index/{index_id}` with the configured credentials.
    fn probe(&self, ctx: &BuildContext<'_>) -> Result<Option<String>, ConfigError> {
        let mut sink = self.clone().connect_with(&ctx.id, |key, reason| ctx.invalid(key, reason))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ctx.invalid("base_url", format!("cannot start a runtime: {e}")))?;
        rt.block_on(sink.index_info()).map(Some).map_err(|e| ctx.invalid("index_id", e.to_string()))
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Box<dyn Sink>, ConfigError> {
        self.validate(ctx)?;
        Ok(Box::new(self.connect_with(&ctx.id, |key, reason| ctx.invalid(key, reason))?))
    }
}

/// `Ok` when `token` can be sent as a bearer token; otherwise why not, without the token.
pub(super) fn check_token(token: &str) -> Result<(), &'static str> {
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
