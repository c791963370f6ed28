//! A small client reading an emulator (or Search itself) back through the public API.

use std::collections::BTreeMap;
use std::time::Duration;

use hyper::header::CONTENT_TYPE;
use serde_json::{json, Value};

/// Why a [`Client`] call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No HTTP answer.
    #[error("{0}")]
    Http(String),
    /// An error status.
    #[error("HTTP {status}: {body}")]
    Status {
        /// The status.
        status: u16,
        /// The body.
        body: String,
    },
    /// An answer that is not the documented JSON.
    #[error("unexpected answer: {0}")]
    Shape(String),
}

/// Reads an emulator (or Search itself) back through the public API shapes, waiting out
/// 429 and 503 answers.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

/// Percent-encode a query parameter value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

impl Client {
    /// A client for the API at `base` (e.g. [`Emulator::url`]) with a bearer token.
    pub fn new(base: &str, token: &str) -> Client {
        Client {
            base: base.trim_end_matches('/').to_string(),
            token: Some(token.to_string()),
            http: reqwest::Client::new(),
        }
    }

    /// A client that sends no `Authorization` header (queries of public data).
    pub fn anonymous(base: &str) -> Client {
        Client { base: base.trim_end_matches('/').to_string(), token: None, http: reqwest::Client::new() }
    }

    fn auth(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        let req = self
            .http
            .post(format!("{}{path}", self.base))
            .header(CONTENT_TYPE.as_str(), "application/json")
            .body(body.to_string());
        self.send(self.auth(req)).await
    }

    fn task_id(v: Value) -> Result<String, ClientError> {
        v["task_id"].as_str().map(str::to_string).ok_or_else(|| ClientError::Shape(v.to_string()))
    }

    /// `POST /v1/index/<id>/search` with a GSearchRequest: the GSearchResult.
    pub async fn search(&self, index: &str, request: &Value) -> Result<Value, ClientError> {
        self.post(&format!("/v1/index/{index}/search"), request).await
    }

    /// `GET /v1/index/<id>/search` with query parameters: the GSearchResult.
    pub async fn search_get(&self, index: &str, params: &[(&str, &str)]) -> Result<Value, ClientError> {
        let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
        self.get(&format!("/v1/index/{index}/search?{}", query.join("&"))).await
    }

    /// `POST /v1/index/<id>/ingest` of a GIngest document: the task id.
    pub async fn ingest(&self, index: &str, doc: &Value) -> Result<String, ClientError> {
        self.ingest_text(index, &doc.to_string()).await
    }

    /// [`Client::ingest`] of a document given as JSON text, sent as it is.
    pub async fn ingest_text(&self, index: &str, text: &str) -> Result<String, ClientError> {
        let req = self
            .http
            .post(format!("{}/v1/index/{index}/ingest", self.base))
            .header(CONTENT_TYPE.as_str(), "application/json")
            .body(text.to_string());
        Self::task_id(self.send(self.auth(req)).await?)
    }

    /// `POST /v1/index/<id>/delete_by_query`: the task id.
    pub async fn delete_by_query(&self, index: &str, request: &Value) -> Result<String, ClientError> {
        Self::task_id(self.post(&format!("/v1/index/{index}/delete_by_query"), request).await?)
    }

    /// `DELETE /v1/index/<id>/entry?subject=...[&entry_id=...]`: the task id.
    pub async fn delete_entry(
        &self,
        index: &str,
        subject: &str,
        entry_id: Option<&str>,
    ) -> Result<String, ClientError> {
        let id = entry_id.map(|i| format!("&entry_id={}", encode(i))).unwrap_or_default();
        let req = self.http.delete(format!("{}/v1/index/{index}/entry?subject={}{id}", self.base, encode(subject)));
        Self::task_id(self.send(self.auth(req)).await?)
    }

    /// Poll `GET /v1/task/<id>` until the task is `SUCCESS` or `FAILED`; the Task.
    pub async fn wait_task(&self, task_id: &str) -> Result<Value, ClientError> {
        loop {
            let t = self.task(task_id).await?;
            if t["state"] != "PENDING" && t["state"] != "PROGRESS" {
                return Ok(t);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A client whose token comes from client credentials at `base/v2/oauth2/token`.
    pub async fn with_client_credentials(base: &str, client_id: &str, secret: &str) -> Result<Client, ClientError> {
        let base = base.trim_end_matches('/');
        let r = reqwest::Client::new()
            .post(format!("{base}/v2/oauth2/token"))
            .basic_auth(client_id, Some(secret))
            .header(CONTENT_TYPE.as_str(), "application/x-www-form-urlencoded")
            .body("grant_type=client_credentials&scope=urn%3Aglobus%3Aauth%3Ascope%3Asearch.api.globus.org%3Aall")
            .send()
            .await
            .map_err(|e| ClientError::Http(e.to_string()))?;
        let v = Self::json(r).await?;
        let token = v["access_token"].as_str().ok_or_else(|| ClientError::Shape(v.to_string()))?;
        Ok(Client::new(base, token))
    }

    async fn json(r: reqwest::Response) -> Result<Value, ClientError> {
        let status = r.status().as_u16();
        let bytes = r.bytes().await.map_err(|e| ClientError::Http(e.to_string()))?;
        if !(200..300).contains(&status) {
            return Err(ClientError::Status { status, body: String::from_utf8_lossy(&bytes).into_owned() });
        }
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Shape(e.to_string()))
    }

    /// Send `req`, waiting out 429s (as long as `Retry-After` says) and 503s, up to 30 times.
    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Value, ClientError> {
        for _ in 0..30 {
            let Some(attempt) = req.try_clone() else { break };
            let r = attempt.send().await.map_err(|e| ClientError::Http(e.to_string()))?;
            let status = r.status().as_u16();
            if status == 429 || status == 503 {
                let wait = r
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.1);
                tokio::time::sleep(Duration::from_secs_f64(wait.clamp(0.01, 60.0))).await;
                continue;
            }
            return Self::json(r).await;
        }
        Self::json(req.send().await.map_err(|e| ClientError::Http(e.to_string()))?).await
    }

    async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.send(self.auth(self.http.get(format!("{}{path}", self.base)))).await
    }

    /// Every subject of `index` and its content, read with `POST /v1/index/<id>/scroll`
    /// (`q = "*"`, pages of 1000, following `marker` while `has_next_page`). A subject with
    /// several entries maps to the content of its entry with a null id (else the first).
    pub async fn scroll_all(&self, index: &str) -> Result<BTreeMap<String, Value>, ClientError> {
        let mut out = BTreeMap::new();
        let mut marker = Value::Null;
        loop {
            let body = json!({"q": "*", "limit": 1000, "marker": marker, "bypass_visible_to": true});
            let page = self.post(&format!("/v1/index/{index}/scroll"), &body).await?;
            let gmeta = page["gmeta"].as_array().ok_or_else(|| ClientError::Shape(format!("no gmeta in {page}")))?;
            for g in gmeta {
                let subject = g["subject"].as_str().ok_or_else(|| ClientError::Shape(g.to_string()))?;
                let entries = g["entries"].as_array().ok_or_else(|| ClientError::Shape(g.to_string()))?;
                let e = entries
                    .iter()
                    .find(|e| e["entry_id"].is_null())
                    .or(entries.first())
                    .ok_or_else(|| ClientError::Shape(g.to_string()))?;
                out.insert(subject.to_string(), e["content"].clone());
            }
            if page["has_next_page"] != true {
                return Ok(out);
            }
            marker = page["marker"].clone();
        }
    }

    /// `GET /v1/index/<id>/subject?subject=...` (with `bypass_visible_to`): the GMetaResult,
    /// or `None` on 404.
    pub async fn subject(&self, index: &str, subject: &str) -> Result<Option<Value>, ClientError> {
        match self.get(&format!("/v1/index/{index}/subject?subject={}&bypass_visible_to=true", encode(subject))).await {
            Ok(v) => Ok(Some(v)),
            Err(ClientError::Status { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `GET /v1/task/<id>`.
    pub async fn task(&self, task_id: &str) -> Result<Value, ClientError> {
        self.get(&format!("/v1/task/{task_id}")).await
    }

    /// `GET /v1/task_list/<index>`: the tasks.
    pub async fn task_list(&self, index: &str) -> Result<Vec<Value>, ClientError> {
        let v = self.get(&format!("/v1/task_list/{index}")).await?;
        v["tasks"].as_array().cloned().ok_or_else(|| ClientError::Shape(v.to_string()))
    }

    /// The emulator's counters (`/_emulator/stats`).
    pub async fn stats(&self) -> Result<Value, ClientError> {
        self.get("/_emulator/stats").await
    }

    /// Every entry of `index` with its `visible_to` (`/_emulator/dump/<index>`): subject →
    /// list of `{entry_id, visible_to, content}`.
    pub async fn dump(&self, index: &str) -> Result<BTreeMap<String, Value>, ClientError> {
        let v = self.get(&format!("/_emulator/dump/{index}")).await?;
        let m = v["subjects"].as_object().ok_or_else(|| ClientError::Shape(v.to_string()))?;
        Ok(m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    /// Expire every access token issued so far (`/_emulator/expire_tokens`).
    pub async fn expire_tokens(&self) -> Result<(), ClientError> {
        let r = self
            .http
            .post(format!("{}/_emulator/expire_tokens", self.base))
            .send()
            .await
            .map_err(|e| ClientError::Http(e.to_string()))?;
        Self::json(r).await.map(|_| ())
    }
}

/// Run a future to completion on a fresh current-thread runtime (for synchronous tests).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime").block_on(f)
}
