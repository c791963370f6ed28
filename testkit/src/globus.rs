//! A Globus Search emulator (`icicle-testkit globus-search`) and a small client for reading it
//! back. A real HTTP/1.1 server (hyper, keep-alive) that answers like the Search API of
//! formats.md §5: GIngest ingest (GMetaEntry and GMetaList), `batch_delete_by_subject`,
//! subject, entry and `delete_by_query` deletes, tasks run in the order received by a
//! background worker (PENDING → PROGRESS → SUCCESS or FAILED), `GET /v1/task/<id>`,
//! `GET /v1/task_list/<index>`, `GET /v1/index/<id>/subject`, `POST /v1/index/<id>/scroll`,
//! `GET` and `POST /v1/index/<id>/search` (a subset, see Search below), and Globus
//! Auth's client credentials token endpoint. It enforces the documented limits (10 MB
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
//! quotes or `field:value` (`advanced: true` is answered 400). `filters` and
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

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
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
const MAX_FACET_CHARS: usize = 10_000;
/// Most buckets a histogram facet may produce.
const MAX_BUCKETS: usize = 10_000;
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
    /// The dotted key paths of its content.
    fields: BTreeSet<String>,
}

#[derive(Debug, Clone)]
enum Op {
    Ingest(Vec<NewEntry>),
    Delete(Vec<String>),
    /// Delete one entry: (subject, entry id).
    DeleteEntry(String, Option<String>),
    /// Delete every entry matching `q` and `filters`, whoever may see it.
    DeleteByQuery(Box<Query>),
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
    /// No `Authorization` header (queries of public data only).
    anonymous: bool,
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
    /// Every field an index has held (like a mapping, never forgotten).
    fields: HashMap<String, BTreeSet<String>>,
    tasks: HashMap<String, Task>,
    /// Task ids in the order received.
    order: Vec<String>,
    queue: VecDeque<String>,
    issued: HashMap<String, Grant>,
    bucket: f64,
    refilled: Instant,
    counters: Counters,
    rng: icicle_core::rng::Rng,
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
        self.rng.next_u64()
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
    let mut fields = BTreeSet::new();
    if let Err(m) = content_fields(content, "", 1, &mut fields) {
        return bad(format!("{at}: {m}"));
    }
    if fields.len() > MAX_FIELDS_PER_INDEX {
        return bad(format!("{at}: the entry has {} fields, over the limit of {MAX_FIELDS_PER_INDEX} per index", fields.len()));
    }
    let size = serde_json::to_vec(v).map_or(usize::MAX, |b| b.len());
    if size > MAX_ENTRY_BYTES {
        return bad(format!("{at}: the entry is {size} bytes as JSON, over the {MAX_ENTRY_BYTES}-byte limit"));
    }
    Ok(NewEntry { subject: subject.to_string(), entry: Entry { entry_id, visible_to, content: content.clone() }, fields })
}

/// Collect the dotted key paths of `v` (lists are transparent), checking depth and string length.
fn content_fields(v: &Value, prefix: &str, depth: usize, out: &mut BTreeSet<String>) -> Result<(), String> {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                if depth > MAX_FIELD_DEPTH {
                    return Err(format!("field `{path}` is nested {depth} levels deep, over the limit of {MAX_FIELD_DEPTH}"));
                }
                content_fields(x, &path, depth + 1, out)?;
                out.insert(path);
            }
        }
        Value::Array(a) => {
            for x in a {
                content_fields(x, prefix, depth, out)?;
            }
        }
        Value::String(s) if s.len() > MAX_FIELD_BYTES => {
            return Err(format!("field `{prefix}` is {} bytes long, over the {MAX_FIELD_BYTES}-byte limit", s.len()))
        }
        _ => {}
    }
    Ok(())
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
            return Err(Box::new(error(
                400,
                "BadRequest.ValidationError",
                format!("subject `{}` has more than {MAX_ENTRIES_PER_SUBJECT} entries", e.subject),
                Value::Null,
            )));
        }
    }
    let fields: BTreeSet<&String> = entries.iter().flat_map(|e| &e.fields).collect();
    if fields.len() > MAX_FIELDS_PER_INDEX {
        return bad(&format!("the request has {} distinct fields, over the limit of {MAX_FIELDS_PER_INDEX} per index", fields.len()));
    }
    Ok(entries)
}

/// Apply a task's operation to its index; `Err` is why the task fails.
fn apply(index: &mut BTreeMap<String, Vec<Entry>>, fields: &mut BTreeSet<String>, op: &Op) -> Result<(), String> {
    match op {
        Op::Ingest(entries) => {
            let new: BTreeSet<&String> = entries.iter().flat_map(|e| &e.fields).filter(|f| !fields.contains(*f)).collect();
            if fields.len() + new.len() > MAX_FIELDS_PER_INDEX {
                return Err(format!(
                    "Limit of total fields [{MAX_FIELDS_PER_INDEX}] has been exceeded: the index has {} fields and the task adds {}",
                    fields.len(),
                    new.len()
                ));
            }
            // Check the entries-per-subject limit before changing anything.
            let mut after: HashMap<&str, Vec<Option<&str>>> = HashMap::new();
            for e in entries {
                let ids = after
                    .entry(&e.subject)
                    .or_insert_with(|| index.get(&e.subject).map(|v| v.iter().map(|x| x.entry_id.as_deref()).collect()).unwrap_or_default());
                if !ids.contains(&e.entry.entry_id.as_deref()) {
                    ids.push(e.entry.entry_id.as_deref());
                }
                if ids.len() > MAX_ENTRIES_PER_SUBJECT {
                    return Err(format!("subject `{}` would have more than {MAX_ENTRIES_PER_SUBJECT} entries", e.subject));
                }
            }
            let new: Vec<String> = new.into_iter().cloned().collect();
            fields.extend(new);
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
        Op::DeleteEntry(subject, id) => {
            if let Some(es) = index.get_mut(subject) {
                es.retain(|e| e.entry_id != *id);
                if es.is_empty() {
                    index.remove(subject);
                }
            }
        }
        Op::DeleteByQuery(q) => {
            index.retain(|_, es| {
                es.retain(|e| !q.matches(e, &q.filters));
                !es.is_empty()
            });
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
            match (task.op.take(), st.indexes.get_mut(&task.index_id), st.fields.get_mut(&task.index_id)) {
                (Some(op), Some(index), Some(fields)) => apply(index, fields, &op),
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

/// The caller's grant, or the 401 to answer; without an `Authorization` header, queries
/// (`anonymous_ok`) run as an anonymous caller who sees public entries only.
fn authorize(shared: &Shared, req: &Request<Incoming>, anonymous_ok: bool) -> Result<Grant, Refusal> {
    let unauthorized = |m: &str| {
        shared.lock().counters.unauthorized += 1;
        let mut r = error(401, "AuthenticationFailed", m, Value::Null);
        r.headers_mut().insert("www-authenticate", HeaderValue::from_static("Bearer"));
        Box::new(r)
    };
    if anonymous_ok && req.headers().get(AUTHORIZATION).is_none() {
        return Ok(Grant { expires: None, scopes: vec![SCOPE_SEARCH.into()], identity: None, anonymous: true });
    }
    let Some(h) = req.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return Err(unauthorized("an Authorization: Bearer header is required"));
    };
    let Some((scheme, token)) = h.split_once(' ') else { return Err(unauthorized("malformed Authorization header")) };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(unauthorized("the Authorization header must carry a Bearer token"));
    }
    let token = token.trim();
    if shared.opts.tokens.iter().any(|t| t == token) {
        return Ok(Grant { expires: None, scopes: vec![SCOPE_ALL.into()], identity: None, anonymous: false });
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

/// A read request's JSON body: 415 without a JSON content type, 400 when it is not JSON.
async fn json_body(req: Request<Incoming>) -> Result<Value, Refusal> {
    let json_ct = is_json(req.headers().get(CONTENT_TYPE));
    let bytes = body(req).await?;
    if !json_ct {
        return Err(Box::new(error(415, "BadRequest.UnsupportedMediaType", "Content-Type: application/json is required", Value::Null)));
    }
    serde_json::from_slice::<Value>(&bytes).map_err(|_| Box::new(error(400, "BadRequest.InvalidJSON", "the body is not JSON", Value::Null)))
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
        Task {
            task_id: task_id.clone(),
            index_id: index.to_string(),
            state: "PENDING",
            message: None,
            creation_date: now_date(),
            completion_date: None,
            op: Some(op),
            fail,
        },
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
    let entry_id_param = query_param(&req, "entry_id").filter(|id| !id.is_empty());
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
    let parse = || {
        serde_json::from_slice::<Value>(&bytes).map_err(|e| Box::new(error(400, "BadRequest.InvalidJSON", format!("the body is not JSON: {e}"), Value::Null)))
    };
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
            let subjects: Option<Vec<String>> =
                doc.get("subjects").and_then(Value::as_array).and_then(|a| a.iter().map(|s| s.as_str().map(str::to_string)).collect());
            let Some(subjects) = subjects else { return error(400, "BadRequest.ValidationError", "`subjects` must be a list of strings", Value::Null) };
            let task_id = enqueue(shared, index, Op::Delete(subjects));
            json_response(200, &json!({"task_id": task_id}))
        }
        "delete_by_query" => {
            let doc = match parse() {
                Ok(d) => d,
                Err(r) => return *r,
            };
            let q = match Query::from_json(&doc, true) {
                Ok(q) => q,
                Err(m) => return bad_query(m),
            };
            let task_id = enqueue(shared, index, Op::DeleteByQuery(Box::new(q)));
            json_response(200, &json!({"task_id": task_id}))
        }
        _ => {
            let Some(subject) = subject_param else {
                return error(400, "BadRequest.ValidationError", "the `subject` query parameter is required", Value::Null);
            };
            let op = if what == "delete_entry" { Op::DeleteEntry(subject, entry_id_param) } else { Op::Delete(vec![subject]) };
            let task_id = enqueue(shared, index, op);
            json_response(200, &json!({"task_id": task_id}))
        }
    }
}

async fn token_endpoint(shared: &Shared, req: Request<Incoming>) -> Resp {
    let Some((id, secret)) = shared.opts.client.clone() else { return oauth_error(401, "invalid_client") };
    let basic = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|h| h.strip_prefix("Basic ").or_else(|| h.strip_prefix("basic ")))
        .and_then(base64_decode);
    let form_ct = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let bytes = match body(req).await {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let ok_client = basic
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.split_once(':').map(|(a, b)| (a.to_string(), b.to_string())))
        .is_some_and(|(a, b)| a == id && b == secret);
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
    st.issued.insert(
        token.clone(),
        Grant { expires: Some(Instant::now() + lifetime), scopes, identity: Some(format!("urn:globus:auth:identity:{id}")), anonymous: false },
    );
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
                .map(|(s, es)| {
                    (s.clone(), Value::Array(es.iter().map(|e| json!({"entry_id": e.entry_id, "visible_to": e.visible_to, "content": e.content})).collect()))
                })
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
    let query_route =
        matches!((method.as_str(), &p[1..]), ("GET" | "POST", ["index", _, "search"]) | ("POST", ["index", _, "scroll"]) | ("GET", ["index", _, "subject"]));
    let grant = match authorize(&shared, &req, query_route) {
        Ok(g) => g,
        Err(r) => return *r,
    };
    match (method.as_str(), &p[1..]) {
        ("POST", ["index", index, what @ ("ingest" | "batch_delete_by_subject" | "delete_by_query")]) => {
            let (index, what) = (index.to_string(), what.to_string());
            write_request(&shared, req, &index, &grant, &what).await
        }
        ("DELETE", ["index", index, what @ ("subject" | "entry")]) => {
            let (index, what) = (index.to_string(), format!("delete_{what}"));
            write_request(&shared, req, &index, &grant, &what).await
        }
        ("GET", ["index", index, "search"]) => {
            if !allows(&grant, false) {
                return error(403, "Forbidden.Generic", "the token's scope does not allow searching", Value::Null);
            }
            let params = req.uri().query().map(parse_form).unwrap_or_default();
            match Query::from_params(&params) {
                Ok(q) => search(&shared, index, &q, &grant),
                Err(m) => bad_query(m),
            }
        }
        ("POST", ["index", index, "search"]) => {
            if !allows(&grant, false) {
                return error(403, "Forbidden.Generic", "the token's scope does not allow searching", Value::Null);
            }
            let index = index.to_string();
            let doc = match json_body(req).await {
                Ok(d) => d,
                Err(r) => return *r,
            };
            match Query::from_json(&doc, false) {
                Ok(q) => search(&shared, &index, &q, &grant),
                Err(m) => bad_query(m),
            }
        }
        ("GET", ["index", index, "subject"]) => {
            if !allows(&grant, false) {
                return error(403, "Forbidden.Generic", "the token's scope does not allow searching", Value::Null);
            }
            let Some(subject) = query_param(&req, "subject") else {
                return error(400, "BadRequest.ValidationError", "the `subject` query parameter is required", Value::Null);
            };
            let bypass = query_param(&req, "bypass_visible_to").is_some_and(|v| v == "true");
            if bypass && grant.anonymous {
                return no_bypass();
            }
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
            let q = match json_body(req).await {
                Ok(d) => d,
                Err(r) => return *r,
            };
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
        (_, ["index", _, "ingest" | "batch_delete_by_subject" | "delete_by_query" | "subject" | "entry" | "scroll" | "search"])
        | (_, ["task" | "task_list", _]) => error(405, "MethodNotAllowed", format!("{method} is not allowed here"), Value::Null),
        _ => error(404, "NotFound.Generic", format!("no such resource: {}", p.join("/")), Value::Null),
    }
}

fn no_bypass() -> Resp {
    error(403, "Forbidden.Generic", "bypass_visible_to needs an authenticated index admin", Value::Null)
}

fn bad_query(m: String) -> Resp {
    error(400, "BadRequest.ValidationError", m, Value::Null)
}

/// A number from JSON, exact for integers.
#[derive(Debug, Clone, Copy)]
enum Num {
    I(i128),
    F(f64),
}

impl Num {
    fn of(v: &Value) -> Option<Num> {
        match v {
            Value::Number(n) => n.as_i64().map(|i| Num::I(i.into())).or_else(|| n.as_u64().map(|u| Num::I(u.into()))).or_else(|| n.as_f64().map(Num::F)),
            _ => None,
        }
    }

    fn parse(s: &str) -> Option<Num> {
        s.parse::<i128>().ok().map(Num::I).or_else(|| s.parse::<f64>().ok().filter(|f| f.is_finite()).map(Num::F))
    }

    fn f(self) -> f64 {
        match self {
            Num::I(i) => i as f64,
            Num::F(f) => f,
        }
    }

    fn cmp(self, o: Num) -> Ordering {
        match (self, o) {
            (Num::I(a), Num::I(b)) => a.cmp(&b),
            _ => self.f().total_cmp(&o.f()),
        }
    }

    fn json(self) -> Value {
        match self {
            Num::I(i) => i64::try_from(i).map(Value::from).unwrap_or_else(|_| json!(i as f64)),
            Num::F(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => json!(f as i64),
            Num::F(f) => json!(f),
        }
    }
}

/// Milliseconds since the epoch of a date string in a format Search detects as a date.
fn parse_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let t = b.get(from..from + len)?;
        t.iter().all(u8::is_ascii_digit).then(|| t.iter().fold(0i64, |a, d| a * 10 + i64::from(d - b'0')))
    };
    let sep = *b.get(4)?;
    if !(sep == b'-' || sep == b'/') || b.get(7) != Some(&sep) {
        return None;
    }
    let (y, m, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&m) || d < 1 || d > days_in[(m - 1) as usize] {
        return None;
    }
    let day_ms = icicle_core::time::days_from_civil(y, m as u32, d as u32) * 86_400_000;
    if b.len() == 10 {
        return (sep == b'-').then_some(day_ms);
    }
    let t = b[10];
    if !(t == b'T' || (t == b' ')) || (t == b'T' && sep == b'/') || b.get(13) != Some(&b':') || b.get(16) != Some(&b':') {
        return None;
    }
    let (h, mi, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut ms = day_ms + ((h * 60 + mi) * 60 + sec) * 1000;
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let frac: String = s[start..i].chars().chain("000".chars()).take(3).collect();
        ms += frac.parse::<i64>().ok()?;
    }
    let zone = &s[i..];
    let zone = if sep == b'/' { zone.strip_prefix(' ')? } else { zone };
    let offset_min = match zone.as_bytes() {
        [] if sep == b'-' && t == b' ' => 0,
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, rest @ ..] => {
            let mm = match rest {
                [b':', m1, m2] | [m1, m2] => [*m1, *m2],
                _ => return None,
            };
            let hh = [*h1, *h2];
            if !hh.iter().chain(mm.iter()).all(u8::is_ascii_digit) {
                return None;
            }
            let v = i64::from(hh[0] - b'0') * 600 + i64::from(hh[1] - b'0') * 60 + i64::from(mm[0] - b'0') * 10 + i64::from(mm[1] - b'0');
            if *sign == b'-' {
                -v
            } else {
                v
            }
        }
        _ => return None,
    };
    Some(ms - offset_min * 60_000)
}

/// `yyyy-MM-ddTHH:mm:ss.SSSZ` of milliseconds since the epoch.
fn format_date(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = icicle_core::time::civil_from_days(days);
    let s = rem / 1000;
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z", s / 3600, s / 60 % 60, s % 60, rem % 1000)
}

/// The values at a dotted path of `content` (lists at any level are searched element by element).
fn leaves<'a>(content: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut cur = vec![content];
    for key in path.split('.') {
        let mut next = Vec::new();
        for v in cur {
            let mut push = |x: &'a Value| match x {
                Value::Array(a) => next.extend(a.iter()),
                x => next.push(x),
            };
            match v {
                Value::Object(o) => {
                    if let Some(x) = o.get(key) {
                        push(x);
                    }
                }
                Value::Array(a) => {
                    for x in a.iter().filter_map(|x| x.get(key)) {
                        push(x);
                    }
                }
                _ => {}
            }
        }
        cur = next;
    }
    cur.into_iter().flat_map(|v| if let Value::Array(a) = v { a.iter().collect() } else { vec![v] }).filter(|v| !v.is_null() && !v.is_object()).collect()
}

/// Whether a stored value equals a filter value (numbers as numbers, dates as instants).
fn value_eq(field: &Value, want: &Value) -> bool {
    match (field, want) {
        (Value::Number(_), Value::Number(_)) => Num::of(field).zip(Num::of(want)).is_some_and(|(a, b)| a.cmp(b).is_eq()),
        (Value::Number(_), Value::String(w)) => Num::of(field).zip(Num::parse(w)).is_some_and(|(a, b)| a.cmp(b).is_eq()),
        (Value::String(f), Value::String(w)) => f == w || parse_date(f).zip(parse_date(w)).is_some_and(|(a, b)| a == b),
        (Value::String(f), Value::Number(n)) => Num::of(want).zip(Num::parse(f)).is_some_and(|(a, b)| a.cmp(b).is_eq()) || *f == n.to_string(),
        (Value::String(f), Value::Bool(w)) => f == if *w { "true" } else { "false" },
        (Value::Bool(f), Value::Bool(w)) => f == w,
        (Value::Bool(f), Value::String(w)) => w == if *f { "true" } else { "false" },
        _ => false,
    }
}

/// One end of a range filter.
#[derive(Debug, Clone)]
enum Bound {
    Open,
    Num(Num),
    Date(i64),
    Str(String),
}

impl Bound {
    fn of(v: Option<&Value>) -> Result<Bound, String> {
        match v {
            Some(Value::String(s)) if s == "*" => Ok(Bound::Open),
            Some(Value::String(s)) => Ok(parse_date(s).map(Bound::Date).or_else(|| Num::parse(s).map(Bound::Num)).unwrap_or_else(|| Bound::Str(s.clone()))),
            Some(v @ Value::Number(_)) => Num::of(v).map(Bound::Num).ok_or_else(|| format!("bad range bound {v}")),
            Some(v) => Err(format!("a range bound is a number, a string or \"*\", not {v}")),
            None => Err("a range needs `from` and `to` (\"*\" for open)".into()),
        }
    }

    /// How `v` compares with this bound, if they are comparable.
    fn cmp(&self, v: &Value) -> Option<Ordering> {
        match (self, v) {
            (Bound::Num(b), Value::Number(_)) => Num::of(v).map(|n| n.cmp(*b)),
            (Bound::Date(b), Value::String(s)) => parse_date(s).map(|d| d.cmp(b)),
            (Bound::Str(b), Value::String(s)) => Some(s.as_str().cmp(b.as_str())),
            _ => None,
        }
    }
}

/// A GFilter.
#[derive(Debug, Clone)]
enum Filter {
    Any(String, Vec<Value>),
    All(String, Vec<Value>),
    Range(String, Vec<(Bound, Bound)>),
}

impl Filter {
    fn parse(v: &Value) -> Result<Filter, String> {
        let Some(o) = v.as_object() else { return Err(format!("a GFilter is an object, not {v}")) };
        for k in o.keys() {
            if !matches!(k.as_str(), "type" | "field_name" | "values" | "@datatype" | "@version") {
                return Err(format!("unknown GFilter field `{k}`"));
            }
        }
        let Some(field) = o.get("field_name").and_then(Value::as_str).filter(|f| !f.is_empty()) else {
            return Err("a GFilter needs a `field_name` string".into());
        };
        let Some(values) = o.get("values").and_then(Value::as_array).filter(|a| !a.is_empty()) else {
            return Err(format!("the filter on `{field}` needs a non-empty `values` list"));
        };
        let field = field.to_string();
        match o.get("type").map(|t| t.as_str()) {
            None | Some(Some("match_all")) => Ok(Filter::All(field, values.clone())),
            Some(Some("match_any")) => Ok(Filter::Any(field, values.clone())),
            Some(Some("range")) => {
                let ranges = values.iter().map(|r| match r.as_object() {
                    Some(r) => {
                        if let Some(k) = r.keys().find(|k| *k != "from" && *k != "to") {
                            return Err(format!("unknown range field `{k}`"));
                        }
                        Ok((Bound::of(r.get("from"))?, Bound::of(r.get("to"))?))
                    }
                    None => Err(format!("a range is {{\"from\", \"to\"}}, not {r}")),
                });
                Ok(Filter::Range(field, ranges.collect::<Result<_, _>>()?))
            }
            Some(t) => Err(format!(
                "the emulator implements filter types match_all, match_any and range, not {}",
                t.map_or("a non-string".to_string(), |t| format!("`{t}`"))
            )),
        }
    }

    fn holds(&self, content: &Value) -> bool {
        match self {
            Filter::Any(f, want) => {
                let got = leaves(content, f);
                want.iter().any(|w| got.iter().any(|g| value_eq(g, w)))
            }
            Filter::All(f, want) => {
                let got = leaves(content, f);
                want.iter().all(|w| got.iter().any(|g| value_eq(g, w)))
            }
            Filter::Range(f, ranges) => leaves(content, f).iter().any(|v| {
                ranges.iter().any(|(from, to)| {
                    let lo = matches!(from, Bound::Open) || from.cmp(v).is_some_and(Ordering::is_ge);
                    let hi = matches!(to, Bound::Open) || to.cmp(v).is_some_and(Ordering::is_le);
                    lo && hi
                })
            }),
        }
    }
}

/// A query term: its lower-cased letter/digit runs, the last one a prefix when it ended in `*`.
#[derive(Debug, Clone)]
struct Term {
    words: Vec<String>,
    prefix: bool,
}

fn words(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase)
}

/// The words of every string, number and boolean in `v`.
fn content_words(v: &Value, out: &mut HashSet<String>) {
    match v {
        Value::String(s) => out.extend(words(s)),
        Value::Number(_) | Value::Bool(_) => out.extend(words(&v.to_string())),
        Value::Array(a) => a.iter().for_each(|x| content_words(x, out)),
        Value::Object(o) => o.values().for_each(|x| content_words(x, out)),
        Value::Null => {}
    }
}

#[derive(Debug, Clone)]
enum FacetKind {
    Terms(usize),
    Date(String),
    Numeric { low: f64, high: f64, size: usize },
}

#[derive(Debug, Clone)]
struct Facet {
    name: String,
    field: String,
    kind: FacetKind,
}

/// A sortable value: numbers, then dates, then strings, then booleans.
#[derive(Debug, Clone)]
enum SortVal {
    Num(Num),
    Date(i64),
    Str(String),
    Bool(bool),
}

impl SortVal {
    fn of(v: &Value) -> Option<SortVal> {
        match v {
            Value::Number(_) => Num::of(v).map(SortVal::Num),
            Value::String(s) if s.chars().count() > MAX_FACET_CHARS => None,
            Value::String(s) => Some(parse_date(s).map_or_else(|| SortVal::Str(s.clone()), SortVal::Date)),
            Value::Bool(b) => Some(SortVal::Bool(*b)),
            _ => None,
        }
    }

    fn rank(&self) -> u8 {
        match self {
            SortVal::Num(_) => 0,
            SortVal::Date(_) => 1,
            SortVal::Str(_) => 2,
            SortVal::Bool(_) => 3,
        }
    }

    fn cmp(&self, o: &SortVal) -> Ordering {
        match (self, o) {
            (SortVal::Num(a), SortVal::Num(b)) => a.cmp(*b),
            (SortVal::Date(a), SortVal::Date(b)) => a.cmp(b),
            (SortVal::Str(a), SortVal::Str(b)) => a.cmp(b),
            (SortVal::Bool(a), SortVal::Bool(b)) => a.cmp(b),
            _ => self.rank().cmp(&o.rank()),
        }
    }
}

/// A parsed GSearchRequest (or the restricted one of `delete_by_query`).
#[derive(Debug, Clone, Default)]
struct Query {
    /// Every term must match; none: everything.
    terms: Vec<Term>,
    filters: Vec<Filter>,
    post_filters: Vec<Filter>,
    facets: Vec<Facet>,
    /// (field, descending).
    sort: Vec<(String, bool)>,
    offset: usize,
    limit: usize,
    bypass: bool,
}

fn parse_terms(q: &str) -> Result<Vec<Term>, String> {
    if q.chars().count() > MAX_QUERY_CHARS {
        return Err(format!("the query string is {} characters long, over the limit of {MAX_QUERY_CHARS}", q.chars().count()));
    }
    Ok(q.split_whitespace().filter(|t| t.chars().any(char::is_alphanumeric)).map(|t| Term { words: words(t).collect(), prefix: t.ends_with('*') }).collect())
}

fn parse_filters(v: Option<&Value>, what: &str) -> Result<Vec<Filter>, String> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(Filter::parse).collect(),
        Some(_) => Err(format!("`{what}` must be a list of GFilter")),
    }
}

fn parse_facet(v: &Value) -> Result<Facet, String> {
    let Some(o) = v.as_object() else { return Err(format!("a GFacet is an object, not {v}")) };
    for k in o.keys() {
        if !matches!(k.as_str(), "name" | "field_name" | "type" | "size" | "date_interval" | "histogram_range" | "@datatype" | "@version") {
            return Err(format!("unknown GFacet field `{k}`"));
        }
    }
    let Some(field) = o.get("field_name").and_then(Value::as_str).filter(|f| !f.is_empty()) else { return Err("a GFacet needs a `field_name` string".into()) };
    let name = match o.get("name") {
        None | Some(Value::Null) => field.to_string(),
        Some(Value::String(n)) => n.clone(),
        Some(_) => return Err("a GFacet `name` is a string".into()),
    };
    let size = match o.get("size") {
        None | Some(Value::Null) => 10,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_BUCKETS as u64).contains(&n) => n as usize,
            _ => return Err(format!("the facet `{name}`: `size` must be 1..{MAX_BUCKETS}")),
        },
    };
    let kind = match o.get("type").map(|t| t.as_str()) {
        None | Some(Some("terms")) => FacetKind::Terms(size),
        Some(Some("date_histogram")) => match o.get("date_interval").and_then(Value::as_str) {
            Some(i @ ("year" | "quarter" | "month" | "week" | "day" | "hour" | "minute" | "second")) => FacetKind::Date(i.to_string()),
            _ => return Err(format!("the facet `{name}`: `date_interval` must be year, quarter, month, week, day, hour, minute or second")),
        },
        Some(Some("numeric_histogram")) => {
            let r = o.get("histogram_range");
            let (low, high) = (r.and_then(|r| r.get("low")).and_then(Value::as_f64), r.and_then(|r| r.get("high")).and_then(Value::as_f64));
            match (low, high) {
                (Some(low), Some(high)) if low < high => FacetKind::Numeric { low, high, size },
                _ => return Err(format!("the facet `{name}`: `histogram_range` must be {{\"low\", \"high\"}} numbers with low < high")),
            }
        }
        Some(t) => return Err(format!("the emulator implements facet types terms, date_histogram and numeric_histogram, not {}", t.unwrap_or("a non-string"))),
    };
    Ok(Facet { name, field: field.to_string(), kind })
}

fn parse_count(v: Option<&Value>, what: &str, default: u64) -> Result<u64, String> {
    match v {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok())).ok_or_else(|| format!("`{what}` must be a non-negative integer, not {v}")),
    }
}

impl Query {
    /// Validate offset and limit against Search's window of 10,000 results.
    fn window(&mut self, offset: u64, limit: u64) -> Result<(), String> {
        if limit > MAX_SEARCH_RESULTS || offset > MAX_SEARCH_RESULTS || offset + limit > MAX_SEARCH_RESULTS {
            return Err(format!("offset ({offset}) + limit ({limit}) must be at most {MAX_SEARCH_RESULTS}; use the scroll API for more results"));
        }
        (self.offset, self.limit) = (offset as usize, limit as usize);
        Ok(())
    }

    /// The query parameters of `GET .../search`.
    fn from_params(p: &HashMap<String, String>) -> Result<Query, String> {
        for k in p.keys() {
            if !matches!(k.as_str(), "q" | "offset" | "limit" | "advanced" | "bypass_visible_to" | "query_template") {
                return Err(format!("unknown query parameter `{k}`"));
            }
        }
        let Some(q) = p.get("q") else { return Err("the `q` query parameter is required".into()) };
        let yes = |k: &str| p.get(k).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if yes("advanced") {
            return Err("the emulator does not implement the advanced query syntax".into());
        }
        if p.contains_key("query_template") {
            return Err("the emulator has no query templates".into());
        }
        let mut query = Query { terms: parse_terms(q)?, bypass: yes("bypass_visible_to"), ..Query::default() };
        let num = |k: &str, d| parse_count(p.get(k).map(|s| Value::String(s.clone())).as_ref(), k, d);
        query.window(num("offset", 0)?, num("limit", 10)?)?;
        Ok(query)
    }

    /// A GSearchRequest; `delete` allows only what `delete_by_query` takes.
    fn from_json(doc: &Value, delete: bool) -> Result<Query, String> {
        let Some(o) = doc.as_object() else { return Err("the request must be a JSON object".into()) };
        for k in o.keys() {
            let ok = match k.as_str() {
                "q" | "advanced" | "filters" | "@version" | "@datatype" => true,
                "limit"
                | "offset"
                | "query_template"
                | "bypass_visible_to"
                | "result_format_version"
                | "filter_principal_sets"
                | "facets"
                | "post_facet_filters"
                | "boosts"
                | "sort" => !delete,
                _ => false,
            };
            if !ok {
                return Err(format!("unknown or not allowed field `{k}`{}", if delete { " (delete_by_query takes q, advanced and filters)" } else { "" }));
            }
        }
        if o.get("@datatype").is_some_and(|d| d != "GSearchRequest") {
            return Err("`@datatype` must be \"GSearchRequest\"".into());
        }
        if o.get("advanced").and_then(Value::as_bool).unwrap_or(false) {
            return Err("the emulator does not implement the advanced query syntax".into());
        }
        if o.get("query_template").is_some_and(|t| !t.is_null()) {
            return Err("the emulator has no query templates".into());
        }
        match o.get("result_format_version").map(|v| v.as_str()) {
            None | Some(Some("2019-08-27")) => {}
            Some(_) => return Err("the emulator answers result_format_version \"2019-08-27\" only".into()),
        }
        if o.get("filter_principal_sets").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
            return Err("the emulator does not implement filter_principal_sets".into());
        }
        let mut query = Query {
            filters: parse_filters(o.get("filters"), "filters")?,
            post_filters: parse_filters(o.get("post_facet_filters"), "post_facet_filters")?,
            ..Query::default()
        };
        match o.get("q") {
            None | Some(Value::Null) if query.filters.is_empty() => return Err("a GSearchRequest needs `q` or `filters`".into()),
            None | Some(Value::Null) => {}
            Some(Value::String(q)) => query.terms = parse_terms(q)?,
            Some(_) => return Err("`q` must be a string".into()),
        }
        query.bypass = o.get("bypass_visible_to").and_then(Value::as_bool).unwrap_or(false);
        if let Some(f) = o.get("facets").filter(|f| !f.is_null()) {
            let Some(list) = f.as_array() else { return Err("`facets` must be a list of GFacet".into()) };
            query.facets = list.iter().map(parse_facet).collect::<Result<_, _>>()?;
        }
        if let Some(b) = o.get("boosts").filter(|b| !b.is_null()) {
            if !b.is_array() {
                return Err("`boosts` must be a list".into());
            }
        }
        if let Some(s) = o.get("sort").filter(|s| !s.is_null()) {
            let Some(list) = s.as_array() else { return Err("`sort` must be a list of GSort".into()) };
            for g in list {
                let Some(field) = g.get("field_name").and_then(Value::as_str).filter(|f| !f.is_empty()) else {
                    return Err("a GSort needs a `field_name` string".into());
                };
                let desc = match g.get("order").map(|o| o.as_str()) {
                    None | Some(Some("asc")) => false,
                    Some(Some("desc")) => true,
                    _ => return Err(format!("the sort on `{field}`: `order` is \"asc\" or \"desc\"")),
                };
                query.sort.push((field.to_string(), desc));
            }
        }
        query.window(parse_count(o.get("offset"), "offset", 0)?, parse_count(o.get("limit"), "limit", 10)?)?;
        Ok(query)
    }

    /// Whether `e` matches the query string and `filters`.
    fn matches(&self, e: &Entry, filters: &[Filter]) -> bool {
        if !filters.iter().all(|f| f.holds(&e.content)) {
            return false;
        }
        if self.terms.is_empty() {
            return true;
        }
        let mut w = HashSet::new();
        content_words(&e.content, &mut w);
        self.terms.iter().all(|t| {
            t.words
                .iter()
                .enumerate()
                .all(|(i, x)| if t.prefix && i + 1 == t.words.len() { w.iter().any(|y| y.starts_with(x.as_str())) } else { w.contains(x) })
        })
    }
}

/// Bucket start (ms) of `ms` for a calendar `interval`, UTC.
fn bucket_start(ms: i64, interval: &str) -> i64 {
    let unit = |u: i64| ms.div_euclid(u) * u;
    let days = ms.div_euclid(86_400_000);
    let (y, m, _) = icicle_core::time::civil_from_days(days);
    let day = |y: i64, m: u32| icicle_core::time::days_from_civil(y, m, 1) * 86_400_000;
    match interval {
        "second" => unit(1000),
        "minute" => unit(60_000),
        "hour" => unit(3_600_000),
        "day" => unit(86_400_000),
        // 1970-01-01 was a Thursday; weeks start on Monday.
        "week" => (days - (days + 3).rem_euclid(7)) * 86_400_000,
        "month" => day(y, m),
        "quarter" => day(y, (m - 1) / 3 * 3 + 1),
        _ => day(y, 1),
    }
}

/// The bucket after the one starting at `start`.
fn next_bucket(start: i64, interval: &str) -> i64 {
    let (y, m, _) = icicle_core::time::civil_from_days(start.div_euclid(86_400_000));
    let add_months = |n: u32| {
        let k = m - 1 + n;
        icicle_core::time::days_from_civil(y + i64::from(k / 12), k % 12 + 1, 1) * 86_400_000
    };
    match interval {
        "second" => start + 1000,
        "minute" => start + 60_000,
        "hour" => start + 3_600_000,
        "day" => start + 86_400_000,
        "week" => start + 7 * 86_400_000,
        "month" => add_months(1),
        "quarter" => add_months(3),
        _ => add_months(12),
    }
}

/// A GFacetResult over `entries`.
fn facet_result(f: &Facet, entries: &[&Entry]) -> Result<Value, String> {
    let bucket = |value: Value, count: u64| json!({"@datatype": "GBucket", "@version": "2017-09-01", "value": value, "count": count});
    let facetable = |v: &&Value| !matches!(v, Value::String(s) if s.chars().count() > MAX_FACET_CHARS);
    let buckets: Vec<Value> = match &f.kind {
        FacetKind::Terms(size) => {
            let mut counts: BTreeMap<String, (Value, u64)> = BTreeMap::new();
            for e in entries {
                let mut seen = HashSet::new();
                for v in leaves(&e.content, &f.field).into_iter().filter(facetable) {
                    let key = match Num::of(v) {
                        Some(n) => n.json().to_string(),
                        None => v.to_string(),
                    };
                    if seen.insert(key.clone()) {
                        counts.entry(key).or_insert_with(|| (v.clone(), 0)).1 += 1;
                    }
                }
            }
            let mut list: Vec<(Value, u64)> = counts.into_values().collect();
            list.sort_by(|(a, x), (b, y)| y.cmp(x).then_with(|| SortVal::of(a).zip(SortVal::of(b)).map_or(Ordering::Equal, |(a, b)| a.cmp(&b))));
            list.truncate(*size);
            list.into_iter().map(|(v, n)| bucket(v, n)).collect()
        }
        FacetKind::Date(interval) => {
            let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
            for e in entries {
                let starts: BTreeSet<i64> =
                    leaves(&e.content, &f.field).into_iter().filter_map(|v| v.as_str().and_then(parse_date)).map(|ms| bucket_start(ms, interval)).collect();
                for s in starts {
                    *counts.entry(s).or_default() += 1;
                }
            }
            let mut out = Vec::new();
            if let (Some((&first, _)), Some((&last, _))) = (counts.first_key_value(), counts.last_key_value()) {
                let mut at = first;
                while at <= last {
                    if out.len() >= MAX_BUCKETS {
                        return Err(format!("the facet `{}` would have more than {MAX_BUCKETS} buckets", f.name));
                    }
                    out.push(bucket(Value::String(format_date(at)), counts.get(&at).copied().unwrap_or(0)));
                    at = next_bucket(at, interval);
                }
            }
            out
        }
        FacetKind::Numeric { low, high, size } => {
            let width = (high - low) / *size as f64;
            let mut counts = vec![0u64; *size];
            for e in entries {
                let idx: BTreeSet<usize> = leaves(&e.content, &f.field)
                    .into_iter()
                    .filter_map(|v| Num::of(v).map(Num::f))
                    .filter(|x| *low <= *x && *x < *high)
                    .map(|x| (((x - low) / width) as usize).min(size - 1))
                    .collect();
                for i in idx {
                    counts[i] += 1;
                }
            }
            counts.into_iter().enumerate().map(|(i, n)| bucket(Num::F(low + i as f64 * width).json(), n)).collect()
        }
    };
    Ok(json!({"@datatype": "GFacetResult", "@version": "2017-09-01", "name": f.name, "buckets": buckets}))
}

/// A matching subject and its matching entries.
type Hit<'a> = (&'a String, Vec<&'a Entry>);

/// Answer a search of `index`.
fn search(shared: &Shared, index: &str, q: &Query, grant: &Grant) -> Resp {
    if q.bypass && grant.anonymous {
        return no_bypass();
    }
    let st = shared.lock();
    let Some(ix) = st.indexes.get(index) else { return no_index(index) };
    let visible = |e: &&Entry| q.bypass || e.visible_to.iter().any(|p| p == "public" || Some(p) == grant.identity.as_ref());
    let hits: Vec<Hit> = ix
        .iter()
        .filter_map(|(s, es)| {
            let m: Vec<&Entry> = es.iter().filter(visible).filter(|e| q.matches(e, &q.filters)).collect();
            (!m.is_empty()).then_some((s, m))
        })
        .collect();
    let mut facet_results = Vec::new();
    if !q.facets.is_empty() {
        let all: Vec<&Entry> = hits.iter().flat_map(|(_, es)| es.iter().copied()).collect();
        for f in &q.facets {
            match facet_result(f, &all) {
                Ok(v) => facet_results.push(v),
                Err(m) => return bad_query(m),
            }
        }
    }
    let mut hits: Vec<Hit> = hits
        .into_iter()
        .filter_map(|(s, es)| {
            let m: Vec<&Entry> = es.into_iter().filter(|e| q.post_filters.iter().all(|f| f.holds(&e.content))).collect();
            (!m.is_empty()).then_some((s, m))
        })
        .collect();
    if !q.sort.is_empty() {
        let key = |es: &[&Entry]| -> Vec<Option<SortVal>> {
            q.sort
                .iter()
                .map(|(field, desc)| {
                    let vals = es.iter().flat_map(|e| leaves(&e.content, field)).filter_map(SortVal::of);
                    if *desc {
                        vals.max_by(|a, b| a.cmp(b))
                    } else {
                        vals.min_by(|a, b| a.cmp(b))
                    }
                })
                .collect()
        };
        let mut keyed: Vec<(Vec<Option<SortVal>>, Hit)> = hits.into_iter().map(|h| (key(&h.1), h)).collect();
        keyed.sort_by(|(ka, (sa, _)), (kb, (sb, _))| {
            for ((a, b), (_, desc)) in ka.iter().zip(kb).zip(&q.sort) {
                let o = match (a, b) {
                    (Some(a), Some(b)) if *desc => b.cmp(a),
                    (Some(a), Some(b)) => a.cmp(b),
                    (Some(_), None) => Ordering::Less,
                    (None, Some(_)) => Ordering::Greater,
                    (None, None) => Ordering::Equal,
                };
                if o.is_ne() {
                    return o;
                }
            }
            sa.cmp(sb)
        });
        hits = keyed.into_iter().map(|(_, h)| h).collect();
    }
    let total = hits.len();
    let page: Vec<Value> = hits
        .into_iter()
        .skip(q.offset)
        .take(q.limit)
        .map(|(s, es)| {
            let entries: Vec<Value> = es.iter().map(|e| json!({"content": e.content, "entry_id": e.entry_id, "matched_principal_sets": []})).collect();
            json!({"@datatype": "GMetaResult", "@version": "2019-08-27", "subject": s, "entries": entries})
        })
        .collect();
    let mut out = json!({"@datatype": "GSearchResult", "@version": "2017-09-01", "count": page.len(), "offset": q.offset, "total": total,
                         "has_next_page": q.offset + page.len() < total, "gmeta": page});
    if !q.facets.is_empty() {
        out["facet_results"] = Value::Array(facet_results);
    }
    json_response(200, &out)
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
    if bypass && grant.anonymous {
        return no_bypass();
    }
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
        fields: opts.indexes.iter().map(|i| (i.clone(), BTreeSet::new())).collect(),
        tasks: HashMap::new(),
        order: Vec::new(),
        queue: VecDeque::new(),
        issued: HashMap::new(),
        bucket: opts.burst.or(opts.rate_limit).unwrap_or(0.0).max(1.0),
        refilled: Instant::now(),
        counters: Counters::default(),
        rng: icicle_core::rng::Rng::new(seed),
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
    token: Option<String>,
    http: reqwest::Client,
}

/// Percent-encode a query parameter value.
fn encode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

impl Client {
    /// A client for the API at `base` (e.g. [`Emulator::url`]) with a bearer token.
    pub fn new(base: &str, token: &str) -> Client {
        Client { base: base.trim_end_matches('/').to_string(), token: Some(token.to_string()), http: reqwest::Client::new() }
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
        let req = self.http.post(format!("{}{path}", self.base)).header(CONTENT_TYPE.as_str(), "application/json").body(body.to_string());
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
        let req = self.http.post(format!("{}/v1/index/{index}/ingest", self.base)).header(CONTENT_TYPE.as_str(), "application/json").body(text.to_string());
        Self::task_id(self.send(self.auth(req)).await?)
    }

    /// `POST /v1/index/<id>/delete_by_query`: the task id.
    pub async fn delete_by_query(&self, index: &str, request: &Value) -> Result<String, ClientError> {
        Self::task_id(self.post(&format!("/v1/index/{index}/delete_by_query"), request).await?)
    }

    /// `DELETE /v1/index/<id>/entry?subject=...[&entry_id=...]`: the task id.
    pub async fn delete_entry(&self, index: &str, subject: &str, entry_id: Option<&str>) -> Result<String, ClientError> {
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
                let wait = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.1);
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
