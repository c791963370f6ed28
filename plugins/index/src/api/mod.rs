//! The Globus Search HTTP API over an index directory (`icicle serve`): the subset the
//! project's `globus` sink and globus-sdk's `SearchClient` use, answered from the index for
//! the principals who ask. The service owns the index's one writer; an ingest or a delete is
//! committed to disk before it is answered, so the task it names is already `SUCCESS`.
//!
//! Endpoints (paths and shapes as Globus Search's reference gives them,
//! <https://docs.globus.org/api/search/reference/>, and as the testkit's emulator answers):
//! `POST /v1/index/<id>/ingest` (GMetaEntry and GMetaList), `POST
//! /v1/index/<id>/batch_delete_by_subject`, `POST /v1/index/<id>/delete_by_query`, `DELETE
//! /v1/index/<id>/subject` and `.../entry`, `GET /v1/task/<task_id>`, `GET
//! /v1/task_list/<id>`, `GET /v1/index/<id>/subject?subject=`, `GET
//! /v1/index/<id>/entry?subject=`, `GET` and `POST /v1/index/<id>/search`, `POST
//! /v1/index/<id>/scroll`, `GET /v1/index/<id>` and `GET /v1/index_list` (the one index: how
//! `icicle find --server` learns its id); and the web search page at `/` ([`page`]).
//!
//! Another server may put its own front before the service (the testkit's Globus Search
//! emulator does: Globus Auth, rate limits, injected failures, queued tasks): it decides who
//! asks and calls [`Service::respond`] for reads, and [`Service::check_write`], then
//! [`Service::apply`], with the [`tasks`] API for writes.

pub mod advanced;
pub mod answer;
pub mod auth;
pub mod fields;
pub mod http;
pub mod page;
pub mod request;
pub mod tasks;
pub mod write;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hyper::body::Incoming;
use hyper::header::AUTHORIZATION;
use hyper::Request;
use serde_json::{json, Value};
use tantivy::{IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument};

use self::auth::{Caller, PeerPolicy, Tokens};
use self::http::{error_response, json_body, json_response, parse_form, percent_decode, Resp};
use self::request::Search;
use self::tasks::{TaskState, Tasks};
use self::write::WriteKind;
use crate::schema::Fields;
use crate::search::Visibility;
use crate::store::{IndexError, Store};

/// A refusal or a failure, answered as a Search error document.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// Search's error code (`BadRequest.ValidationError`, `NotFound.NoSuchIndex`, ...).
    pub code: &'static str,
    /// What went wrong.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into() }
    }

    fn bad(message: String) -> ApiError {
        ApiError::new(400, "BadRequest.ValidationError", message)
    }
}

/// Where a request came from: TCP (a bearer token says who) or the Unix socket (the peer's
/// credentials say who).
#[derive(Debug, Clone, Copy)]
pub enum Origin {
    /// An HTTP connection over TCP.
    Tcp,
    /// A Unix-socket peer (`SO_PEERCRED`).
    Peer {
        /// The peer process's user id.
        uid: u32,
        /// The peer process's group id.
        gid: u32,
    },
}

/// What `icicle serve` is started with.
pub struct ServeConfig {
    /// The index directory (created when missing).
    pub dir: PathBuf,
    /// The index id clients name (`None`: the one kept in the directory, made on first start).
    pub index_id: Option<String>,
    /// Bearer tokens for HTTP.
    pub tokens: Tokens,
    /// How socket peers become principals.
    pub peers: PeerPolicy,
    /// Indexing buffer, bytes.
    pub memory_bytes: usize,
}

/// The service: the index, its writer, and the tasks it answered.
pub struct Service {
    index_id: String,
    dir: PathBuf,
    fields: Fields,
    reader: IndexReader,
    writer: Mutex<IndexWriter<TantivyDocument>>,
    tasks: Mutex<Tasks>,
    tokens: Tokens,
    peers: PeerPolicy,
}

/// A random UUID (version 4).
pub fn uuid4() -> String {
    let mut b = [0u8; 16];
    // SAFETY: `b` is 16 writable bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 16 {
        // Without the kernel's randomness, the time and the pid are unique enough for a task id.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        b = (t ^ (u128::from(std::process::id()) << 64)).to_le_bytes();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// The index id: given, else the one in `dir/serve-index-id`, else a new one kept there.
fn index_id(dir: &Path, given: Option<String>) -> Result<String, IndexError> {
    if let Some(id) = given {
        return Ok(id);
    }
    let file = dir.join("serve-index-id");
    match std::fs::read_to_string(&file) {
        Ok(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        _ => {
            let id = uuid4();
            icicle_core::durable::write_atomic(&file, format!("{id}\n").as_bytes())
                .map_err(|e| IndexError::engine(dir, format!("writing {}: {e}", file.display())))?;
            Ok(id)
        }
    }
}

impl Service {
    /// Open (or create) the index and take its writer: [`IndexError::Busy`] when another
    /// process writes to it.
    pub fn open(cfg: ServeConfig) -> Result<Service, IndexError> {
        let store = Store::open_or_create(&cfg.dir)?;
        let writer = store.writer(1, cfg.memory_bytes)?;
        let reader = store
            .index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| IndexError::engine(&cfg.dir, e))?;
        let index_id = index_id(&cfg.dir, cfg.index_id)?;
        Ok(Service {
            index_id,
            dir: cfg.dir,
            fields: store.fields,
            reader,
            writer: Mutex::new(writer),
            tasks: Mutex::default(),
            tokens: cfg.tokens,
            peers: cfg.peers,
        })
    }

    /// The index id clients name.
    pub fn index_id(&self) -> &str {
        &self.index_id
    }

    /// Who asks: a Unix-socket peer by its credentials; over TCP, the bearer token (none:
    /// `public` only; one that is not in the tokens file: 401).
    fn caller(&self, req: &Request<Incoming>, origin: &Origin) -> Result<Caller, ApiError> {
        if let Origin::Peer { uid, gid } = origin {
            return Ok(self.peers.caller(*uid, *gid));
        }
        let Some(h) = req.headers().get(AUTHORIZATION) else { return Ok(Caller::anonymous()) };
        let unauthorized = |m: &str| ApiError::new(401, "AuthenticationFailed", m);
        let h = h.to_str().map_err(|_| unauthorized("malformed Authorization header"))?;
        let Some((scheme, token)) = h.split_once(' ') else {
            return Err(unauthorized("malformed Authorization header"));
        };
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(unauthorized("the Authorization header must carry a Bearer token"));
        }
        match self.tokens.grant(token.trim()) {
            Some(g) => Ok(Caller::token(g)),
            None => Err(unauthorized("the access token is not valid")),
        }
    }

    /// Answer one request: the web page's assets (`GET /` and `/assets/...`), else the API
    /// for the caller the origin and the Authorization header name.
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>, origin: &Origin) -> Resp {
        let head = req.method() == hyper::Method::HEAD;
        if head || req.method() == hyper::Method::GET {
            if let Some((body, content_type)) = page::asset(req.uri().path(), &self.index_id) {
                return page::response(body, content_type, head);
            }
        }
        match self.caller(&req, origin) {
            Ok(caller) => self.respond(req, caller).await,
            Err(e) => error_response(&e),
        }
    }

    /// Answer one API request (`/v1/...`) for `caller`, whoever decided who that is.
    pub async fn respond(self: Arc<Self>, req: Request<Incoming>, caller: Caller) -> Resp {
        match self.route(req, caller).await {
            Ok(v) => json_response(200, &v),
            Err(e) => error_response(&e),
        }
    }

    async fn route(self: Arc<Self>, req: Request<Incoming>, caller: Caller) -> Result<Value, ApiError> {
        let path: Vec<String> = req
            .uri()
            .path()
            .trim_matches('/')
            .split('/')
            .map(|s| percent_decode(s, false).unwrap_or_default())
            .collect();
        let p: Vec<&str> = path.iter().map(String::as_str).collect();
        let params = req.uri().query().map(parse_form).unwrap_or_default();
        let method = req.method().as_str().to_string();
        let index_ok = |id: &str| {
            if id == self.index_id {
                Ok(())
            } else {
                Err(ApiError::new(404, "NotFound.NoSuchIndex", format!("There is no search index named \"{id}\"")))
            }
        };
        if let ["v1", "index", id, what] = p.as_slice() {
            if let Some(kind) = WriteKind::route(&method, what) {
                index_ok(id)?;
                self.may_write(&caller)?;
                let body = if kind.has_body() { json_body(req).await? } else { Value::Null };
                return self
                    .blocking(move |me| {
                        let write = me.check_write(kind, &body, &params)?;
                        let n = write.len();
                        me.apply(write)?;
                        Ok(kind.answer(&me.open_task(kind.task_type(), TaskState::Success)?, n))
                    })
                    .await;
            }
        }
        match (method.as_str(), p.as_slice()) {
            ("GET", ["v1", "task", task_id]) => {
                let tasks = self.tasks.lock().map_err(|_| poisoned())?;
                tasks.get(task_id).cloned().ok_or_else(|| {
                    ApiError::new(404, "NotFound.Generic", format!("There is no task with id {task_id}"))
                })
            }
            ("GET", ["v1", "task_list", id]) => {
                index_ok(id)?;
                let tasks = self.tasks.lock().map_err(|_| poisoned())?;
                Ok(json!({"tasks": tasks.list()}))
            }
            ("GET", ["v1", "index", id, "subject" | "entry"]) => {
                index_ok(id)?;
                self.blocking(move |me| me.get_subject(&params, &caller)).await
            }
            ("GET", ["v1", "index", id, "search"]) => {
                index_ok(id)?;
                self.blocking(move |me| {
                    let s = Search::from_params(&me.fields, &params).map_err(ApiError::bad)?;
                    me.run(&s, &caller, false)
                })
                .await
            }
            ("POST", ["v1", "index", id, what @ ("search" | "scroll")]) => {
                index_ok(id)?;
                let doc = json_body(req).await?;
                let scroll = *what == "scroll";
                self.blocking(move |me| {
                    let s = if scroll {
                        Search::from_scroll(&me.fields, &doc)
                    } else {
                        Search::from_json(&me.fields, &doc)
                    }
                    .map_err(ApiError::bad)?;
                    me.run(&s, &caller, scroll)
                })
                .await
            }
            ("GET", ["v1", "index", id]) => {
                index_ok(id)?;
                self.blocking(move |me| me.info(&caller)).await
            }
            ("GET", ["v1", "index_list"]) => {
                let info = self.blocking(move |me| me.info(&caller)).await?;
                Ok(json!({"index_list": [info]}))
            }
            (
                _,
                ["v1", "index", _, "ingest" | "batch_delete_by_subject" | "delete_by_query" | "subject" | "entry" | "scroll" | "search"],
            )
            | (_, ["v1", "task" | "task_list", _]) => {
                Err(ApiError::new(405, "MethodNotAllowed", format!("{method} is not allowed here")))
            }
            _ => Err(ApiError::new(404, "NotFound.Generic", format!("no such resource: {}", req.uri().path()))),
        }
    }

    /// Run `f` on a blocking thread (the engine reads disk and burns CPU).
    async fn blocking(
        self: &Arc<Self>,
        f: impl FnOnce(&Service) -> Result<Value, ApiError> + Send + 'static,
    ) -> Result<Value, ApiError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || f(&me))
            .await
            .map_err(|e| ApiError::new(500, "InternalError", format!("the request's thread: {e}")))?
    }

    fn searcher(&self) -> Searcher {
        self.reader.searcher()
    }

    /// A 401 for callers without credentials, a 403 for those who may not write.
    fn may_write(&self, caller: &Caller) -> Result<(), ApiError> {
        match (caller.writer, caller.authenticated) {
            (true, _) => Ok(()),
            (false, false) => Err(ApiError::new(
                401,
                "AuthenticationFailed",
                "writing to the index needs a bearer token marked `writer` in the tokens file",
            )),
            (false, true) => Err(ApiError::new(
                403,
                "Forbidden.Generic",
                "this caller may not write to the index (its token is not marked `writer`)",
            )),
        }
    }

    /// `bypass_visible_to` is for callers allowed it (those who see every record anyway, such
    /// as root over the socket); they then see every record.
    fn visibility(&self, caller: &Caller, bypass: bool) -> Result<Visibility, ApiError> {
        match (bypass, caller.bypass) {
            (false, _) => Ok(caller.visibility.clone()),
            (true, true) => Ok(Visibility::All),
            (true, false) => Err(ApiError::new(
                403,
                "Forbidden.Generic",
                "bypass_visible_to is only for callers who may see every record",
            )),
        }
    }

    fn run(&self, s: &Search, caller: &Caller, scroll: bool) -> Result<Value, ApiError> {
        let who = self.visibility(caller, s.bypass)?;
        let searcher = self.searcher();
        if scroll {
            answer::scroll(&searcher, &self.fields, s, &who)
        } else {
            answer::search(&searcher, &self.fields, s, &who)
        }
    }

    /// `GET .../subject` and `GET .../entry` (one entry a subject: `entry_id` is null).
    fn get_subject(&self, params: &HashMap<String, String>, caller: &Caller) -> Result<Value, ApiError> {
        let Some(subject) = params.get("subject") else {
            return Err(ApiError::bad("the `subject` query parameter is required".into()));
        };
        let bypass = params.get("bypass_visible_to").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let who = self.visibility(caller, bypass)?;
        let not_found = || {
            ApiError::new(
                404,
                "NotFound.Generic",
                format!("No subject named \"{subject}\" is visible in index {}", self.index_id),
            )
        };
        if params.get("entry_id").is_some_and(|id| !id.is_empty()) {
            return Err(not_found());
        }
        let e = answer::subject(&self.searcher(), &self.fields, subject, &who)?.ok_or_else(not_found)?;
        Ok(answer::gmeta_result(&e, false))
    }

    /// Up to `limit` stored entries after the subject `after`, in subject order, whoever may
    /// see them (for tools and tests; no endpoint answers it).
    pub fn stored_entries(&self, after: Option<&str>, limit: usize) -> Result<Vec<Value>, ApiError> {
        answer::stored_entries(&self.searcher(), &self.fields, after, limit)
    }

    /// `GET /v1/index/<id>`: the index (records counted as the caller may see them; size on
    /// disk as a whole).
    pub fn info(&self, caller: &Caller) -> Result<Value, ApiError> {
        let n = answer::visible_count(&self.searcher(), &self.fields, &caller.visibility)?;
        let bytes: u64 = std::fs::read_dir(&self.dir)
            .map(|rd| rd.filter_map(|e| e.ok()?.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum())
            .unwrap_or(0);
        let name = self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(json!({
            "@datatype": "GSearchIndex", "@version": "2017-09-01", "id": self.index_id, "display_name": name,
            "description": format!("icicle index {}", self.dir.display()), "creation_date": null, "is_trial": false, "subscription_id": null,
            "max_size_in_mb": null, "size_in_mb": bytes >> 20, "size_in_bytes": bytes, "num_subjects": n, "num_entries": n, "status": "open",
            "permissions": if caller.writer { vec!["writer"] } else { Vec::<&str>::new() },
        }))
    }
}

fn poisoned() -> ApiError {
    ApiError::new(500, "InternalError", "a request failed while holding the server's state")
}

#[cfg(test)]
mod tests;
