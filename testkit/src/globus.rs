//! A Globus Search emulator (`icicle-testkit globus-search`) and a small client for reading it
//! back. A real HTTP/1.1 server (hyper, keep-alive) that answers like the Search API of
//! formats.md §5: GIngest ingest (GMetaEntry and GMetaList), `batch_delete_by_subject`,
//! subject deletes, tasks run in the order received by a background worker (PENDING →
//! PROGRESS → SUCCESS or FAILED), `GET /v1/task/<id>`, `GET /v1/task_list/<index>`,
//! `GET /v1/index/<id>/subject`, `POST /v1/index/<id>/scroll`, and Globus Auth's client
//! credentials token endpoint. It enforces the documented limits (10 MB requests, 500-byte
//! subjects, 100 `visible_to` principals, 10 entries per subject, `Content-Type:
//! application/json`), a token-bucket rate limit answering 429 with `Retry-After`, and can
//! inject transient 503s and FAILED tasks.
//!
//! Choices where the spec is silent: errors are `{"code","message","status","error_data"}`;
//! every authenticated caller is treated as the index's owner, so `bypass_visible_to` is
//! allowed (in the scroll body, or as a query parameter of `GET .../subject`); otherwise
//! results show entries visible to `public` or to the caller's identity
//! (`urn:globus:auth:identity:<client_id>` for client-credentials tokens). Endpoints under
//! `/_emulator/` (no authentication, no rate limit) serve tests: `stats`, `dump/<index>`
//! (entries with `visible_to`) and `expire_tokens`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

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
/// The full-access Search scope (client-credentials tokens get it unless they ask for less).
pub const SCOPE_ALL: &str = "urn:globus:auth:scope:search.api.globus.org:all";
const SCOPE_INGEST: &str = "urn:globus:auth:scope:search.api.globus.org:ingest";
const SCOPE_SEARCH: &str = "urn:globus:auth:scope:search.api.globus.org:search";

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
            task_delay: Duration::ZERO,
            token_lifetime: Duration::from_secs(172_800),
        }
    }
}

/// One stored entry.
#[derive(Debug, Clone)]
struct Entry {
    entry_id: Option<String>,
    visible_to: Vec<String>,
    content: Value,
}

/// A validated entry of an ingest request.
#[derive(Debug, Clone)]
struct NewEntry {
    subject: String,
    entry: Entry,
}

#[derive(Debug, Clone)]
enum Op {
    Ingest(Vec<NewEntry>),
    Delete(Vec<String>),
}

#[derive(Debug, Clone)]
struct Task {
    task_id: String,
    index_id: String,
    state: &'static str,
    message: Option<String>,
    creation_date: String,
    completion_date: Option<String>,
    op: Option<Op>,
    fail: bool,
}

impl Task {
    fn to_json(&self) -> Value {
        let desc = match self.state {
            "PENDING" => "Task pending",
            "PROGRESS" => "Task in progress",
            "SUCCESS" => "Task succeeded",
            _ => "Task failed",
        };
        json!({
            "task_id": self.task_id, "state": self.state, "state_description": desc, "index_id": self.index_id,
            "message": self.message, "creation_date": self.creation_date, "completion_date": self.completion_date,
            "additional_details": null,
        })
    }
}

/// What an access token allows.
#[derive(Debug, Clone)]
struct Grant {
    expires: Option<Instant>,
    scopes: Vec<String>,
    identity: Option<String>,
}

#[derive(Default)]
struct Counters {
    requests: u64,
    rate_limited: u64,
    injected_failures: u64,
    unauthorized: u64,
    writes: u64,
    tasks_created: u64,
    tasks_failed: u64,
    tokens_issued: u64,
}

struct State {
    indexes: HashMap<String, BTreeMap<String, Vec<Entry>>>,
    tasks: HashMap<String, Task>,
    /// Task ids in the order received.
    order: Vec<String>,
    queue: VecDeque<String>,
    issued: HashMap<String, Grant>,
    bucket: f64,
    refilled: Instant,
    counters: Counters,
    rng: u64,
}

struct Shared {
    opts: Options,
    state: Mutex<State>,
    wake: tokio::sync::Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545F4914F6CDD1D)
    }

    fn uuid(&mut self) -> String {
        let (a, b) = (self.rand(), self.rand());
        let hex = format!("{a:016x}{b:016x}");
        format!("{}-{}-4{}-{}{}-{}", &hex[0..8], &hex[8..12], &hex[13..16], ["8", "9", "a", "b"][(b & 3) as usize], &hex[17..20], &hex[20..32])
    }

    fn token(&mut self) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        (0..48).map(|_| A[(self.rand() % A.len() as u64) as usize] as char).collect()
    }
}

/// `YYYY-MM-DDTHH:MM:SS.ffffff`, as Search writes task dates.
fn now_date() -> String {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (y, m, day) = icicle_core::time::civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!("{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:06}", s / 3600, s / 60 % 60, s % 60, d.subsec_micros())
}

type Resp = Response<Full<Bytes>>;
/// A refusal, answered as is (boxed: responses are large).
type Refusal = Box<Resp>;

fn json_response(status: u16, v: &Value) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// A Search error: `{"code","message","status","error_data"}`.
fn error(status: u16, code: &str, message: impl Into<String>, data: Value) -> Resp {
    json_response(status, &json!({"code": code, "message": message.into(), "status": status, "error_data": data}))
}

/// An OAuth2 token-endpoint error.
fn oauth_error(status: u16, err: &str) -> Resp {
    json_response(status, &json!({"error": err}))
}

fn percent_decode(s: &str, plus_is_space: bool) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let h = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// `a=b&c=d` decoded.
fn parse_form(s: &str) -> HashMap<String, String> {
    s.split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Some((percent_decode(k, true)?, percent_decode(v, true)?))
        })
        .collect()
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.trim().bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Hex of a string (scroll markers).
fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect();
    String::from_utf8(bytes?).ok()
}

fn is_json(req_ct: Option<&HeaderValue>) -> bool {
    req_ct.and_then(|v| v.to_str().ok()).map(|v| v.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json")).unwrap_or(false)
}

/// Validate one GMetaEntry of an ingest document.
fn entry(v: &Value, at: &str) -> Result<NewEntry, Refusal> {
    let bad = |m: String| Err(Box::new(error(400, "BadRequest.ValidationError", m, json!({"location": at}))));
    let Some(o) = v.as_object() else { return bad(format!("{at}: a GMetaEntry must be an object")) };
    for k in o.keys() {
        if !matches!(k.as_str(), "subject" | "visible_to" | "content" | "id" | "@datatype" | "@version") {
            return bad(format!("{at}: unknown GMetaEntry field `{k}`"));
        }
    }
    let Some(subject) = o.get("subject").and_then(Value::as_str) else { return bad(format!("{at}: `subject` must be a string")) };
    if subject.is_empty() {
        return bad(format!("{at}: `subject` must not be empty"));
    }
    if subject.len() > MAX_SUBJECT_BYTES {
        return bad(format!("{at}: subject is {} bytes, over the {MAX_SUBJECT_BYTES}-byte limit", subject.len()));
    }
    let Some(vis) = o.get("visible_to").and_then(Value::as_array) else { return bad(format!("{at}: `visible_to` must be a list")) };
    if vis.is_empty() {
        return bad(format!("{at}: `visible_to` must not be empty"));
    }
    if vis.len() > MAX_VISIBLE_TO {
        return bad(format!("{at}: `visible_to` has {} principals, over the limit of {MAX_VISIBLE_TO}", vis.len()));
    }
    let mut visible_to = Vec::with_capacity(vis.len());
    for p in vis {
        match p.as_str() {
            Some(s) if s == "public" || s.starts_with("urn:globus:") => visible_to.push(s.to_string()),
            _ => return bad(format!("{at}: `visible_to` entries are \"public\" or principal URNs, not {p}")),
        }
    }
    let Some(content) = o.get("content").filter(|c| c.is_object()) else { return bad(format!("{at}: `content` must be an object")) };
    let entry_id = match o.get("id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return bad(format!("{at}: `id` must be a string or null")),
    };
    Ok(NewEntry { subject: subject.to_string(), entry: Entry { entry_id, visible_to, content: content.clone() } })
}

/// Validate a GIngest document into its entries.
fn gingest(doc: &Value) -> Result<Vec<NewEntry>, Refusal> {
    let bad = |m: &str| Err(Box::new(error(400, "BadRequest.ValidationError", m, Value::Null)));
    let Some(o) = doc.as_object() else { return bad("a GIngest document must be an object") };
    if let Some(dt) = o.get("@datatype") {
        if dt != "GIngest" {
            return bad("`@datatype` of an ingest document must be \"GIngest\"");
        }
    }
    let Some(data) = o.get("ingest_data") else { return bad("`ingest_data` is required") };
    let entries = match o.get("ingest_type").and_then(Value::as_str) {
        Some("GMetaEntry") => vec![entry(data, "ingest_data")?],
        Some("GMetaList") => {
            if let Some(dt) = data.get("@datatype") {
                if dt != "GMetaList" {
                    return bad("`ingest_data.@datatype` must be \"GMetaList\"");
                }
            }
            let Some(list) = data.get("gmeta").and_then(Value::as_array) else { return bad("`ingest_data.gmeta` must be a list of GMetaEntry") };
            let mut out = Vec::with_capacity(list.len());
            for (i, e) in list.iter().enumerate() {
                out.push(entry(e, &format!("ingest_data.gmeta[{i}]"))?);
            }
            out
        }
        _ => return bad("`ingest_type` must be \"GMetaEntry\" or \"GMetaList\""),
    };
    let mut per_subject: HashMap<&str, Vec<Option<&str>>> = HashMap::new();
    for e in &entries {
        let ids = per_subject.entry(&e.subject).or_default();
        if !ids.contains(&e.entry.entry_id.as_deref()) {
            ids.push(e.entry.entry_id.as_deref());
        }
        if ids.len() > MAX_ENTRIES_PER_SUBJECT {
            return Err(Box::new(error(400, "BadRequest.ValidationError", format!("subject `{}` has more than {MAX_ENTRIES_PER_SUBJECT} entries", e.subject), Value::Null)));
        }
    }
    Ok(entries)
}

/// Apply a task's operation to its index; `Err` is why the task fails.
fn apply(index: &mut BTreeMap<String, Vec<Entry>>, op: &Op) -> Result<(), String> {
    match op {
        Op::Ingest(entries) => {
            // Check the entries-per-subject limit before changing anything.
            let mut after: HashMap<&str, Vec<Option<&str>>> = HashMap::new();
            for e in entries {
                let ids = after.entry(&e.subject).or_insert_with(|| index.get(&e.subject).map(|v| v.iter().map(|x| x.entry_id.as_deref()).collect()).unwrap_or_default());
                if !ids.contains(&e.entry.entry_id.as_deref()) {
                    ids.push(e.entry.entry_id.as_deref());
                }
                if ids.len() > MAX_ENTRIES_PER_SUBJECT {
                    return Err(format!("subject `{}` would have more than {MAX_ENTRIES_PER_SUBJECT} entries", e.subject));
                }
            }
            for e in entries {
                let slot = index.entry(e.subject.clone()).or_default();
                match slot.iter_mut().find(|x| x.entry_id == e.entry.entry_id) {
                    Some(x) => *x = e.entry.clone(),
                    None => slot.push(e.entry.clone()),
                }
            }
        }
        Op::Delete(subjects) => {
            for s in subjects {
                index.remove(s);
            }
        }
    }
    Ok(())
}

/// The task worker: applies tasks one at a time, in the order received.
async fn worker(shared: Arc<Shared>) {
    loop {
        let next = {
            let mut st = shared.lock();
            let id = st.queue.pop_front();
            if let Some(t) = id.as_ref().and_then(|id| st.tasks.get_mut(id)) {
                t.state = "PROGRESS";
            }
            id
        };
        let Some(id) = next else {
            shared.wake.notified().await;
            continue;
        };
        if !shared.opts.task_delay.is_zero() {
            tokio::time::sleep(shared.opts.task_delay).await;
        }
        let mut st = shared.lock();
        let st = &mut *st;
        let Some(task) = st.tasks.get_mut(&id) else { continue };
        let result = if task.fail {
            Err(format!("injected failure (--fail-task-every {})", shared.opts.fail_task_every.unwrap_or(0)))
        } else {
            match (task.op.take(), st.indexes.get_mut(&task.index_id)) {
                (Some(op), Some(index)) => apply(index, &op),
                _ => Err("the index no longer exists".into()),
            }
        };
        task.completion_date = Some(now_date());
        match result {
            Ok(()) => task.state = "SUCCESS",
            Err(m) => {
                task.state = "FAILED";
                task.message = Some(m);
                st.counters.tasks_failed += 1;
            }
        }
    }
}

/// The caller's grant, or the 401 to answer.
fn authorize(shared: &Shared, req: &Request<Incoming>) -> Result<Grant, Refusal> {
    let unauthorized = |m: &str| {
        shared.lock().counters.unauthorized += 1;
        let mut r = error(401, "AuthenticationFailed", m, Value::Null);
        r.headers_mut().insert("www-authenticate", HeaderValue::from_static("Bearer"));
        Box::new(r)
    };
    let Some(h) = req.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok()) else { return Err(unauthorized("an Authorization: Bearer header is required")) };
    let Some((scheme, token)) = h.split_once(' ') else { return Err(unauthorized("malformed Authorization header")) };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(unauthorized("the Authorization header must carry a Bearer token"));
    }
    let token = token.trim();
    if shared.opts.tokens.iter().any(|t| t == token) {
        return Ok(Grant { expires: None, scopes: vec![SCOPE_ALL.into()], identity: None });
    }
    let grant = shared.lock().issued.get(token).cloned();
    match grant {
        Some(g) if g.expires.is_none_or(|e| Instant::now() < e) => Ok(g),
        Some(_) => Err(unauthorized("the access token has expired")),
        None => Err(unauthorized("the access token is not valid")),
    }
}

fn allows(g: &Grant, write: bool) -> bool {
    g.scopes.iter().any(|s| s == SCOPE_ALL || s == if write { SCOPE_INGEST } else { SCOPE_SEARCH })
}

/// Take one request from the bucket, or the 429 to answer.
fn rate_limit(shared: &Shared) -> Result<(), Refusal> {
    let Some(rate) = shared.opts.rate_limit.filter(|r| *r > 0.0) else { return Ok(()) };
    let burst = shared.opts.burst.unwrap_or(rate).max(1.0);
    let mut st = shared.lock();
    let now = Instant::now();
    st.bucket = (st.bucket + now.duration_since(st.refilled).as_secs_f64() * rate).min(burst);
    st.refilled = now;
    if st.bucket >= 1.0 {
        st.bucket -= 1.0;
        return Ok(());
    }
    st.counters.rate_limited += 1;
    let wait = ((1.0 - st.bucket) / rate).ceil().max(1.0) as u64;
    let mut r = error(429, "TooManyRequests", format!("over the limit of {rate} requests per second"), Value::Null);
    r.headers_mut().insert("retry-after", HeaderValue::from(wait));
    Err(Box::new(r))
}

/// Read a request body of at most [`MAX_REQUEST_BYTES`].
async fn body(req: Request<Incoming>) -> Result<Bytes, Refusal> {
    let too_large = || Box::new(error(413, "RequestTooLarge", format!("requests are limited to {MAX_REQUEST_BYTES} bytes"), Value::Null));
    if req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok()).is_some_and(|n| n > MAX_REQUEST_BYTES) {
        return Err(too_large());
    }
    match Limited::new(req.into_body(), MAX_REQUEST_BYTES).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(Box::new(error(400, "BadRequest", format!("cannot read the request body: {e}"), Value::Null))),
    }
}

fn query_param(req: &Request<Incoming>, name: &str) -> Option<String> {
    req.uri().query().and_then(|q| parse_form(q).remove(name))
}

/// Enqueue a task for `index`, returning its id.
fn enqueue(shared: &Shared, index: &str, op: Op) -> String {
    let mut st = shared.lock();
    st.counters.tasks_created += 1;
    let n = st.counters.tasks_created;
    let fail = shared.opts.fail_task_every.is_some_and(|k| k > 0 && n.is_multiple_of(k));
    let task_id = st.uuid();
    st.tasks.insert(
        task_id.clone(),
        Task { task_id: task_id.clone(), index_id: index.to_string(), state: "PENDING", message: None, creation_date: now_date(), completion_date: None, op: Some(op), fail },
    );
    st.order.push(task_id.clone());
    st.queue.push_back(task_id.clone());
    drop(st);
    shared.wake.notify_one();
    task_id
}

fn no_index(index: &str) -> Resp {
    error(404, "NotFound.NoSuchIndex", format!("There is no search index named \"{index}\""), Value::Null)
}

/// The entries of `subject` the caller may see, as a GMetaResult.
fn gmeta_result(subject: &str, entries: &[Entry], grant: &Grant, bypass: bool) -> Option<Value> {
    let visible: Vec<Value> = entries
        .iter()
        .filter(|e| bypass || e.visible_to.iter().any(|p| p == "public" || Some(p) == grant.identity.as_ref()))
        .map(|e| json!({"content": e.content, "entry_id": e.entry_id, "matched_principal_sets": []}))
        .collect();
    (!visible.is_empty()).then(|| json!({"@datatype": "GMetaResult", "@version": "2019-08-27", "subject": subject, "entries": visible}))
}

async fn write_request(shared: &Shared, req: Request<Incoming>, index: &str, grant: &Grant, what: &str) -> Resp {
    if !allows(grant, true) {
        return error(403, "Forbidden.Generic", "the token's scope does not allow writing to the index", Value::Null);
    }
    if !shared.lock().indexes.contains_key(index) {
        return no_index(index);
    }
    let subject_param = query_param(&req, "subject");
    let json_ct = is_json(req.headers().get(CONTENT_TYPE));
    let is_post = req.method() == Method::POST;
    let bytes = match body(req).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    {
        let mut st = shared.lock();
        st.counters.writes += 1;
        if shared.opts.fail_every.is_some_and(|k| k > 0 && st.counters.writes.is_multiple_of(k)) {
            st.counters.injected_failures += 1;
            return error(503, "ServiceUnavailable", "injected transient failure (--fail-every)", Value::Null);
        }
    }
    if is_post && !json_ct {
        return error(415, "BadRequest.UnsupportedMediaType", "Content-Type: application/json is required", Value::Null);
    }
    let parse = || serde_json::from_slice::<Value>(&bytes).map_err(|e| Box::new(error(400, "BadRequest.InvalidJSON", format!("the body is not JSON: {e}"), Value::Null)));
    match what {
        "ingest" => {
            let doc = match parse() {
                Ok(d) => d,
                Err(r) => return *r,
            };
            let entries = match gingest(&doc) {
                Ok(e) => e,
                Err(r) => return *r,
            };
            let n = entries.len();
            let task_id = enqueue(shared, index, Op::Ingest(entries));
            json_response(200, &json!({"acknowledged": true, "task_id": task_id, "success": true, "num_documents_ingested": n}))
        }
        "batch_delete_by_subject" => {
            let doc = match parse() {
                Ok(d) => d,
                Err(r) => return *r,
            };
            let subjects: Option<Vec<String>> = doc.get("subjects").and_then(Value::as_array).and_then(|a| a.iter().map(|s| s.as_str().map(str::to_string)).collect());
            let Some(subjects) = subjects else { return error(400, "BadRequest.ValidationError", "`subjects` must be a list of strings", Value::Null) };
            let task_id = enqueue(shared, index, Op::Delete(subjects));
            json_response(200, &json!({"task_id": task_id}))
        }
        _ => {
            let Some(subject) = subject_param else { return error(400, "BadRequest.ValidationError", "the `subject` query parameter is required", Value::Null) };
            let task_id = enqueue(shared, index, Op::Delete(vec![subject]));
            json_response(200, &json!({"task_id": task_id}))
        }
    }
}

async fn token_endpoint(shared: &Shared, req: Request<Incoming>) -> Resp {
    let Some((id, secret)) = shared.opts.client.clone() else { return oauth_error(401, "invalid_client") };
    let basic = req.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|h| h.strip_prefix("Basic ").or_else(|| h.strip_prefix("basic "))).and_then(base64_decode);
    let form_ct = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let bytes = match body(req).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let ok_client = basic.and_then(|b| String::from_utf8(b).ok()).and_then(|s| s.split_once(':').map(|(a, b)| (a.to_string(), b.to_string()))).is_some_and(|(a, b)| a == id && b == secret);
    if !ok_client {
        return oauth_error(401, "invalid_client");
    }
    if !form_ct {
        return oauth_error(400, "invalid_request");
    }
    let form = parse_form(&String::from_utf8_lossy(&bytes));
    if form.get("grant_type").map(String::as_str) != Some("client_credentials") {
        return oauth_error(400, "unsupported_grant_type");
    }
    let scope = form.get("scope").cloned().unwrap_or_else(|| SCOPE_ALL.to_string());
    let scopes: Vec<String> = scope.split_whitespace().map(str::to_string).collect();
    if scopes.is_empty() || !scopes.iter().all(|s| s == SCOPE_ALL || s == SCOPE_INGEST || s == SCOPE_SEARCH) {
        return oauth_error(400, "invalid_scope");
    }
    let lifetime = shared.opts.token_lifetime;
    let mut st = shared.lock();
    let token = st.token();
    st.counters.tokens_issued += 1;
    st.issued.insert(token.clone(), Grant { expires: Some(Instant::now() + lifetime), scopes, identity: Some(format!("urn:globus:auth:identity:{id}")) });
    json_response(
        200,
        &json!({"access_token": token, "expires_in": lifetime.as_secs(), "token_type": "Bearer", "scope": scope, "resource_server": "search.api.globus.org", "other_tokens": []}),
    )
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Resp {
    let path: Vec<String> = req.uri().path().trim_matches('/').split('/').map(|s| percent_decode(s, false).unwrap_or_default()).collect();
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    let method = req.method().clone();
    match (method.as_str(), p.as_slice()) {
        ("POST", ["v2", "oauth2", "token"]) => return token_endpoint(&shared, req).await,
        ("GET", ["_emulator", "stats"]) => {
            let st = shared.lock();
            let c = &st.counters;
            return json_response(
                200,
                &json!({"requests": c.requests, "rate_limited": c.rate_limited, "injected_failures": c.injected_failures, "unauthorized": c.unauthorized,
                        "writes": c.writes, "tasks_created": c.tasks_created, "tasks_failed": c.tasks_failed, "tokens_issued": c.tokens_issued,
                        "tasks_pending": st.queue.len()}),
            );
        }
        ("POST", ["_emulator", "expire_tokens"]) => {
            let mut st = shared.lock();
            let n = st.issued.len();
            st.issued.clear();
            return json_response(200, &json!({"expired": n}));
        }
        ("GET", ["_emulator", "dump", index]) => {
            let st = shared.lock();
            let Some(ix) = st.indexes.get(*index) else { return no_index(index) };
            let subjects: serde_json::Map<String, Value> = ix
                .iter()
                .map(|(s, es)| (s.clone(), Value::Array(es.iter().map(|e| json!({"entry_id": e.entry_id, "visible_to": e.visible_to, "content": e.content})).collect())))
                .collect();
            return json_response(200, &json!({"index_id": index, "subjects": subjects}));
        }
        (_, ["v1", ..]) => {}
        _ => return error(404, "NotFound.Generic", format!("no such resource: {}", req.uri().path()), Value::Null),
    }
    shared.lock().counters.requests += 1;
    if let Err(r) = rate_limit(&shared) {
        return *r;
    }
    let grant = match authorize(&shared, &req) {
        Ok(g) => g,
        Err(r) => return *r,
    };
    match (method.as_str(), &p[1..]) {
        ("POST", ["index", index, what @ ("ingest" | "batch_delete_by_subject")]) => {
            let (index, what) = (index.to_string(), what.to_string());
            write_request(&shared, req, &index, &grant, &what).await
        }
        ("DELETE", ["index", index, "subject"]) => {
            let index = index.to_string();
            write_request(&shared, req, &index, &grant, "delete_subject").await
        }
        ("GET", ["index", index, "subject"]) => {
            if !allows(&grant, false) {
                return error(403, "Forbidden.Generic", "the token's scope does not allow searching", Value::Null);
            }
            let Some(subject) = query_param(&req, "subject") else { return error(400, "BadRequest.ValidationError", "the `subject` query parameter is required", Value::Null) };
            let bypass = query_param(&req, "bypass_visible_to").is_some_and(|v| v == "true");
            let st = shared.lock();
            let Some(ix) = st.indexes.get(*index) else { return no_index(index) };
            match ix.get(&subject).and_then(|es| gmeta_result(&subject, es, &grant, bypass)) {
                Some(v) => json_response(200, &v),
                None => error(404, "NotFound.Generic", format!("No subject named \"{subject}\" is visible in index {index}"), Value::Null),
            }
        }
        ("POST", ["index", index, "scroll"]) => {
            if !allows(&grant, false) {
                return error(403, "Forbidden.Generic", "the token's scope does not allow searching", Value::Null);
            }
            let index = index.to_string();
            let json_ct = is_json(req.headers().get(CONTENT_TYPE));
            let bytes = match body(req).await {
                Ok(b) => b,
                Err(r) => return *r,
            };
            if !json_ct {
                return error(415, "BadRequest.UnsupportedMediaType", "Content-Type: application/json is required", Value::Null);
            }
            let Ok(q) = serde_json::from_slice::<Value>(&bytes) else { return error(400, "BadRequest.InvalidJSON", "the body is not JSON", Value::Null) };
            scroll(&shared, &index, &q, &grant)
        }
        ("GET", ["task", task_id]) => {
            let st = shared.lock();
            match st.tasks.get(*task_id) {
                Some(t) => json_response(200, &t.to_json()),
                None => error(404, "NotFound.Generic", format!("There is no task with id {task_id}"), Value::Null),
            }
        }
        ("GET", ["task_list", index]) => {
            let st = shared.lock();
            if !st.indexes.contains_key(*index) {
                return no_index(index);
            }
            let tasks: Vec<Value> = st.order.iter().filter_map(|id| st.tasks.get(id)).filter(|t| t.index_id == *index).map(Task::to_json).collect();
            json_response(200, &json!({"tasks": tasks}))
        }
        (_, ["index", _, "ingest" | "batch_delete_by_subject" | "subject" | "scroll"]) | (_, ["task" | "task_list", _]) => {
            error(405, "MethodNotAllowed", format!("{method} is not allowed here"), Value::Null)
        }
        _ => error(404, "NotFound.Generic", format!("no such resource: {}", p.join("/")), Value::Null),
    }
}

fn scroll(shared: &Shared, index: &str, q: &Value, grant: &Grant) -> Resp {
    if q.get("q").and_then(Value::as_str) != Some("*") {
        return error(400, "BadRequest.ValidationError", "the emulator answers only q = \"*\"", Value::Null);
    }
    let limit = match q.get("limit") {
        None | Some(Value::Null) => 10,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_SCROLL_LIMIT).contains(&n) => n,
            _ => return error(400, "BadRequest.ValidationError", format!("`limit` must be 1..{MAX_SCROLL_LIMIT}"), Value::Null),
        },
    } as usize;
    let after = match q.get("marker") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => match unhex(m) {
            Some(s) => Some(s),
            None => return error(400, "BadRequest.ValidationError", "invalid `marker`", Value::Null),
        },
        Some(_) => return error(400, "BadRequest.ValidationError", "invalid `marker`", Value::Null),
    };
    let bypass = q.get("bypass_visible_to").and_then(Value::as_bool).unwrap_or(false);
    let st = shared.lock();
    let Some(ix) = st.indexes.get(index) else { return no_index(index) };
    let visible = |(s, es): (&String, &Vec<Entry>)| gmeta_result(s, es, grant, bypass).map(|v| (s.clone(), v));
    let total = ix.iter().filter_map(visible).count();
    let range = match &after {
        Some(a) => ix.range::<String, _>((std::ops::Bound::Excluded(a.clone()), std::ops::Bound::Unbounded)),
        None => ix.range::<String, _>(..),
    };
    let mut page: Vec<(String, Value)> = range.filter_map(visible).take(limit + 1).collect();
    let has_next = page.len() > limit;
    page.truncate(limit);
    let marker = if has_next { page.last().map(|(s, _)| Value::String(hex(s))).unwrap_or(Value::Null) } else { Value::Null };
    json_response(
        200,
        &json!({"@datatype": "GSearchResult", "@version": "2017-09-01", "count": page.len(), "offset": 0, "total": total,
                "has_next_page": has_next, "marker": marker, "gmeta": page.into_iter().map(|(_, v)| v).collect::<Vec<_>>()}),
    )
}

/// Serve on `listener` until `shutdown` resolves.
pub async fn serve(listener: tokio::net::TcpListener, opts: Options, shutdown: impl std::future::Future<Output = ()>) {
    let seed = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(7) ^ u64::from(std::process::id()) << 40;
    let state = State {
        indexes: opts.indexes.iter().map(|i| (i.clone(), BTreeMap::new())).collect(),
        tasks: HashMap::new(),
        order: Vec::new(),
        queue: VecDeque::new(),
        issued: HashMap::new(),
        bucket: opts.burst.or(opts.rate_limit).unwrap_or(0.0).max(1.0),
        refilled: Instant::now(),
        counters: Counters::default(),
        rng: seed | 1,
    };
    let shared = Arc::new(Shared { opts, state: Mutex::new(state), wake: tokio::sync::Notify::new() });
    let w = tokio::spawn(worker(shared.clone()));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(handle(shared, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().keep_alive(true).serve_connection(hyper_util::rt::TokioIo::new(stream), svc).await;
                });
            }
        }
    }
    w.abort();
}

/// An emulator running on a thread of its own (for tests); stops when dropped.
pub struct Emulator {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Emulator {
    /// Start on 127.0.0.1 on a free port.
    pub fn start(opts: Options) -> std::io::Result<Emulator> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let thread = std::thread::Builder::new().name("globus-emulator".into()).spawn(move || {
            rt.block_on(async move {
                match tokio::net::TcpListener::from_std(std_listener) {
                    Ok(l) => {
                        serve(l, opts, async {
                            let _ = rx.await;
                        })
                        .await
                    }
                    Err(e) => eprintln!("globus emulator: {e}"),
                }
            })
        })?;
        Ok(Emulator { addr, stop: Some(tx), thread: Some(thread) })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, the `base_url` (and `auth_url` host) to give the sink.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

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
    token: String,
    http: reqwest::Client,
}

impl Client {
    /// A client for the API at `base` (e.g. [`Emulator::url`]) with a bearer token.
    pub fn new(base: &str, token: &str) -> Client {
        Client { base: base.trim_end_matches('/').to_string(), token: token.to_string(), http: reqwest::Client::new() }
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
                let wait = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.1);
                tokio::time::sleep(Duration::from_secs_f64(wait.clamp(0.01, 60.0))).await;
                continue;
            }
            return Self::json(r).await;
        }
        Self::json(req.send().await.map_err(|e| ClientError::Http(e.to_string()))?).await
    }

    async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.send(self.http.get(format!("{}{path}", self.base)).bearer_auth(&self.token)).await
    }

    /// Every subject of `index` and its content, read with `POST /v1/index/<id>/scroll`
    /// (`q = "*"`, pages of 1000, following `marker` while `has_next_page`). A subject with
    /// several entries maps to the content of its entry with a null id (else the first).
    pub async fn scroll_all(&self, index: &str) -> Result<BTreeMap<String, Value>, ClientError> {
        let mut out = BTreeMap::new();
        let mut marker = Value::Null;
        loop {
            let body = json!({"q": "*", "limit": 1000, "marker": marker, "bypass_visible_to": true});
            let req = self.http.post(format!("{}/v1/index/{index}/scroll", self.base)).bearer_auth(&self.token).header(CONTENT_TYPE.as_str(), "application/json").body(body.to_string());
            let page = self.send(req).await?;
            let gmeta = page["gmeta"].as_array().ok_or_else(|| ClientError::Shape(format!("no gmeta in {page}")))?;
            for g in gmeta {
                let subject = g["subject"].as_str().ok_or_else(|| ClientError::Shape(g.to_string()))?;
                let entries = g["entries"].as_array().ok_or_else(|| ClientError::Shape(g.to_string()))?;
                let e = entries.iter().find(|e| e["entry_id"].is_null()).or(entries.first()).ok_or_else(|| ClientError::Shape(g.to_string()))?;
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
        let enc: String = subject.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect();
        match self.get(&format!("/v1/index/{index}/subject?subject={enc}&bypass_visible_to=true")).await {
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
        let r = self.http.post(format!("{}/_emulator/expire_tokens", self.base)).send().await.map_err(|e| ClientError::Http(e.to_string()))?;
        Self::json(r).await.map(|_| ())
    }
}

/// Run a future to completion on a fresh current-thread runtime (for synchronous tests).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime").block_on(f)
}

#[cfg(test)]
mod tests;
