//! A client of a running `icicle serve`: the questions `icicle find` and `icicle du` ask,
//! sent as Search API scrolls, over HTTP with a bearer token or over the server's Unix socket
//! (where the server answers for the peer's own uid and groups). What a caller may see is the
//! server's decision; the client only narrows what comes back.

use std::path::PathBuf;
use std::time::Duration;

use std::ops::Bound;

use serde_json::{json, Value};

use crate::search::{glob_to_regex, Filter, Record, Span};
use crate::store::IndexError;

/// Where the server listens.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// An `http://host:port` address (a bearer token says who asks).
    Http(String),
    /// A Unix socket (the peer's credentials say who asks).
    Socket(PathBuf),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Http(u) => f.write_str(u),
            Endpoint::Socket(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// Why a question to the server got no answer.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The server could not be reached, or the exchange broke off.
    #[error("{at}: {reason}")]
    Connect {
        /// The endpoint.
        at: String,
        /// The transport's error.
        reason: String,
    },
    /// The server refused the request.
    #[error("{at}: {status} {code}: {message}")]
    Refused {
        /// The endpoint.
        at: String,
        /// The HTTP status.
        status: u16,
        /// The Search API error code.
        code: String,
        /// The server's message.
        message: String,
    },
    /// The answer is not what the Search API answers.
    #[error("{at}: an answer that is not the Search API's: {reason}")]
    Answer {
        /// The endpoint.
        at: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Results a scroll page asks for (the server's page limit is larger).
const PAGE: usize = 1000;

/// A connection to one server and its index.
pub struct Remote {
    client: reqwest::Client,
    at: Endpoint,
    base: String,
    token: Option<String>,
    index_id: String,
}

impl Remote {
    /// Connect to `at` (a token only over HTTP) and learn its index's id (`index_id` if given,
    /// else the one index `GET /v1/index_list` names).
    pub async fn connect(at: Endpoint, token: Option<String>, index_id: Option<String>) -> Result<Remote, RemoteError> {
        let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
        let (builder, base) = match &at {
            Endpoint::Http(u) => (builder, u.trim_end_matches('/').to_string()),
            Endpoint::Socket(p) => (builder.unix_socket(p.clone()), "http://localhost".to_string()),
        };
        let client = builder.build().map_err(|e| RemoteError::Connect { at: at.to_string(), reason: e.to_string() })?;
        let mut r = Remote { client, at, base, token, index_id: index_id.unwrap_or_default() };
        if r.index_id.is_empty() {
            let list = r.call(reqwest::Method::GET, "/v1/index_list", None).await?;
            r.index_id = list["index_list"][0]["id"]
                .as_str()
                .ok_or_else(|| r.answer("`index_list` names no index"))?
                .to_string();
        }
        Ok(r)
    }

    /// Where the server listens.
    pub fn endpoint(&self) -> &Endpoint {
        &self.at
    }

    /// The index's id.
    pub fn index_id(&self) -> &str {
        &self.index_id
    }

    fn answer(&self, reason: &str) -> RemoteError {
        RemoteError::Answer { at: self.at.to_string(), reason: reason.to_string() }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Result<Value, RemoteError> {
        let at = || self.at.to_string();
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.header(reqwest::header::CONTENT_TYPE, "application/json").body(b.to_string());
        }
        let resp =
            req.send().await.map_err(|e| RemoteError::Connect { at: at(), reason: icicle_core::error::chain(&e) })?;
        let status = resp.status().as_u16();
        let bytes =
            resp.bytes().await.map_err(|e| RemoteError::Connect { at: at(), reason: icicle_core::error::chain(&e) })?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| self.answer(&format!("HTTP {status}, {e}")))?;
        if status != 200 {
            let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            return Err(RemoteError::Refused { at: at(), status, code: text("code"), message: text("message") });
        }
        Ok(v)
    }

    /// How many records match `filters` (Search API GFilters, all of which must hold).
    pub async fn count(&self, filters: &[Value]) -> Result<u64, RemoteError> {
        let body = json!({"q": "*", "limit": 0, "filters": filters});
        let v = self.call(reqwest::Method::POST, &format!("/v1/index/{}/search", self.index_id), Some(&body)).await?;
        v["total"].as_u64().ok_or_else(|| self.answer("a search answer without `total`"))
    }

    /// Every record matching `filters`, scrolled in subject order: each result's subject and
    /// content handed to `each`; returns how many.
    pub async fn scroll(&self, filters: &[Value], mut each: impl FnMut(&str, &Value)) -> Result<u64, RemoteError> {
        let path = format!("/v1/index/{}/scroll", self.index_id);
        let mut marker = Value::Null;
        let mut n = 0;
        loop {
            let mut body = json!({"q": "*", "limit": PAGE, "filters": filters});
            if !marker.is_null() {
                body["marker"] = marker.clone();
            }
            let v = self.call(reqwest::Method::POST, &path, Some(&body)).await?;
            let gmeta = v["gmeta"].as_array().ok_or_else(|| self.answer("a scroll answer without `gmeta`"))?;
            for r in gmeta {
                let subject = r["subject"].as_str().unwrap_or_default();
                each(subject, &r["entries"][0]["content"]);
                n += 1;
            }
            marker = v["marker"].clone();
            if v["has_next_page"] != Value::Bool(true) || marker.is_null() {
                return Ok(n);
            }
        }
    }
}

/// A [`Filter`] as a server is asked it: the GFilters it answers, and the shell patterns,
/// which the Search API has no filter for, matched here on what comes back.
pub struct RemoteFilter {
    /// The GFilters, all of which must hold.
    pub filters: Vec<Value>,
    name: Option<regex::Regex>,
    path: Option<regex::Regex>,
}

impl RemoteFilter {
    /// The request for `f`.
    pub fn of(f: &Filter) -> Result<RemoteFilter, IndexError> {
        let mut filters = Vec::new();
        let aggregate = f.record == Some(Record::Aggregate);
        match (&f.kind, f.record) {
            (Some(k), _) => filters.push(match_any(if aggregate { "kind" } else { "type" }, k.as_str())),
            (None, Some(Record::File)) => {
                filters.push(json!({"type": "match_any", "field_name": "type", "values": ["file", "link"]}))
            }
            (None, Some(Record::Aggregate)) => {
                filters.push(json!({"type": "match_any", "field_name": "kind", "values": ["user", "group", "dir"]}))
            }
            (None, None) => {}
        }
        let texts = [
            ("ancestor", &f.under),
            ("parent", &f.parent),
            ("path", &f.path),
            ("id", &f.id),
            ("storage.pool", &f.pool),
            ("storage.fileset", &f.fileset),
            ("storage.fid", &f.fid),
        ];
        for (field, v) in texts {
            if let Some(v) = v {
                filters.push(match_any(field, v.as_str()));
            }
        }
        for (field, v) in
            [("uid", f.uid), ("gid", f.gid), ("storage.osts", f.ost), ("storage.project_id", f.project_id)]
        {
            if let Some(v) = v {
                filters.push(match_any(field, v));
            }
        }
        let unsigned = |s: &Span<u64>| inclusive(s, |x| x.checked_add(1), |x| x.checked_sub(1));
        let signed = |s: &Span<i64>| inclusive(s, |x| x.checked_add(1), |x| x.checked_sub(1));
        filters.extend(unsigned(&f.size).map(|(a, b)| range(if aggregate { "size.total" } else { "size" }, a, b)));
        filters.extend(unsigned(&f.stripe_count).map(|(a, b)| range("storage.stripe_count", a, b)));
        for (field, span) in [("atime", &f.atime), ("ctime", &f.ctime), ("mtime", &f.mtime)] {
            filters.extend(signed(span).map(|(a, b)| range(field, a, b)));
        }
        let re = |g: &Option<String>| -> Result<Option<regex::Regex>, IndexError> {
            g.as_deref()
                .map(|g| {
                    regex::Regex::new(&format!("^(?s:{})$", glob_to_regex(g)?))
                        .map_err(|e| IndexError::Query(format!("pattern {g:?}: {e}")))
                })
                .transpose()
        };
        Ok(RemoteFilter { filters, name: re(&f.name_glob)?, path: re(&f.path_glob)? })
    }

    /// Whether a record at `path` matches the patterns too.
    pub fn accepts(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        self.name.as_ref().is_none_or(|r| r.is_match(name)) && self.path.as_ref().is_none_or(|r| r.is_match(path))
    }

    /// Whether every part is the server's to answer.
    pub fn whole(&self) -> bool {
        self.name.is_none() && self.path.is_none()
    }
}

/// A span as inclusive ends (`None` when it holds every value; an empty span as `[1, 0]`).
fn inclusive<T: Copy + Into<Value>>(
    s: &Span<T>,
    up: impl Fn(T) -> Option<T>,
    down: impl Fn(T) -> Option<T>,
) -> Option<(Option<Value>, Option<Value>)> {
    if matches!((&s.lo, &s.hi), (Bound::Unbounded, Bound::Unbounded)) {
        return None;
    }
    let empty = Some((Some(Value::from(1)), Some(Value::from(0))));
    let lo = match s.lo {
        Bound::Unbounded => None,
        Bound::Included(x) => Some(x.into()),
        Bound::Excluded(x) => match up(x) {
            Some(y) => Some(y.into()),
            None => return empty,
        },
    };
    let hi = match s.hi {
        Bound::Unbounded => None,
        Bound::Included(x) => Some(x.into()),
        Bound::Excluded(x) => match down(x) {
            Some(y) => Some(y.into()),
            None => return empty,
        },
    };
    Some((lo, hi))
}

impl Remote {
    /// How many records match `f` for the caller.
    pub async fn count_matching(&self, f: &RemoteFilter) -> Result<u64, RemoteError> {
        if f.whole() {
            return self.count(&f.filters).await;
        }
        let mut n = 0;
        self.scroll(&f.filters, |subject, content| n += u64::from(f.accepts(path_of(subject, content)))).await?;
        Ok(n)
    }

    /// The records matching `f` for the caller, in path order (the first `limit` when given),
    /// each as a GMetaEntry (`subject` and `content`) handed to `each`; returns how many.
    pub async fn entries(
        &self,
        f: &RemoteFilter,
        limit: Option<usize>,
        mut each: impl FnMut(&[u8]),
    ) -> Result<u64, RemoteError> {
        let mut found: Vec<(String, Vec<u8>)> = Vec::new();
        self.scroll(&f.filters, |subject, content| {
            let path = path_of(subject, content);
            if f.accepts(path) {
                let entry = json!({"subject": subject, "content": content});
                found.push((path.to_string(), serde_json::to_vec(&entry).unwrap_or_default()));
            }
        })
        .await?;
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found.truncate(limit.unwrap_or(usize::MAX));
        for (_, e) in &found {
            each(e);
        }
        Ok(found.len() as u64)
    }
}

/// A result's path: its content's `path`, else (a user or group aggregate) its subject.
fn path_of<'a>(subject: &'a str, content: &'a Value) -> &'a str {
    content["path"].as_str().unwrap_or(subject)
}

/// `match_any` of one value.
pub fn match_any(field: &str, value: impl Into<Value>) -> Value {
    json!({"type": "match_any", "field_name": field, "values": [value.into()]})
}

/// `range` with inclusive ends (`None` open).
pub fn range(field: &str, from: Option<Value>, to: Option<Value>) -> Value {
    let end = |v: Option<Value>| v.unwrap_or_else(|| Value::String("*".into()));
    json!({"type": "range", "field_name": field, "values": [{"from": end(from), "to": end(to)}]})
}
