//! The HTTP/1.1 server: routing requests to the emulator's own handlers (Globus Auth, index
//! administration, writes, `/_emulator/`) or, for reads, to the product's service of the
//! index, the accept loop, and an emulator on a thread of its own for tests.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request};
use icicle_plugins_index::api::http::percent_decode;
use icicle_plugins_index::api::write::WriteKind;
use serde_json::{json, Value};

use super::admin::{admin, is_admin_route};
use super::auth::{allows, authorize, caller, cannot_search, rate_limit, token_endpoint};
use super::config::Options;
use super::http::{error, json_response, no_index, no_resource, Resp};
use super::state::{worker, Grant, Shared};
use super::write::write_request;

/// Answer one request: Globus Auth's token endpoint, the `/_emulator/` endpoints or the `/v1` API.
async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Resp {
    let path: Vec<String> =
        req.uri().path().trim_matches('/').split('/').map(|s| percent_decode(s, false).unwrap_or_default()).collect();
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    let method = req.method().clone();
    match (method.as_str(), p.as_slice()) {
        ("POST", ["v2", "oauth2", "token"]) => token_endpoint(&shared, req).await,
        (_, ["v1", api @ ..]) => v1(&shared, req, &method, api, &p).await,
        (m, ["_emulator", what @ ..]) => match emulator_endpoint(&shared, m, what) {
            Some(r) => r,
            None => no_resource(req.uri().path()),
        },
        _ => no_resource(req.uri().path()),
    }
}

/// The `/_emulator/` endpoints for tests (no authentication, no rate limit); `None`: no such endpoint.
fn emulator_endpoint(shared: &Shared, method: &str, what: &[&str]) -> Option<Resp> {
    match (method, what) {
        ("GET", ["stats"]) => {
            let st = shared.lock();
            let c = &st.counters;
            Some(json_response(
                200,
                &json!({"requests": c.requests, "rate_limited": c.rate_limited, "injected_failures": c.injected_failures, "unauthorized": c.unauthorized,
                        "writes": c.writes, "tasks_created": c.tasks_created, "tasks_failed": c.tasks_failed, "tokens_issued": c.tokens_issued,
                        "tasks_pending": st.queue.len()}),
            ))
        }
        ("POST", ["expire_tokens"]) => {
            let mut st = shared.lock();
            let n = st.issued.len();
            st.issued.clear();
            Some(json_response(200, &json!({"expired": n})))
        }
        ("GET", ["dump", index]) => Some(dump(shared, index)),
        _ => None,
    }
}

/// `/_emulator/dump/<index>`: every entry the index's service stores, with its `visible_to`.
fn dump(shared: &Shared, index: &str) -> Resp {
    let Some(svc) = shared.service(index) else { return no_index(index) };
    let mut subjects = serde_json::Map::new();
    let mut after: Option<String> = None;
    loop {
        let page = match svc.stored_entries(after.as_deref(), 1000) {
            Ok(p) => p,
            Err(e) => return error(e.status, e.code, e.message, Value::Null),
        };
        for e in &page {
            let entry = json!({"entry_id": e.get("id").cloned().unwrap_or(Value::Null), "visible_to": e["visible_to"], "content": e["content"]});
            subjects.insert(e["subject"].as_str().unwrap_or_default().to_string(), json!([entry]));
        }
        match page.last() {
            Some(e) if page.len() == 1000 => after = e["subject"].as_str().map(str::to_string),
            _ => break,
        }
    }
    json_response(200, &json!({"index_id": index, "subjects": subjects}))
}

/// A `/v1` request (`api`: the path after `v1`; `full`: all of it): counted, rate-limited,
/// authorized, then routed to its handler.
async fn v1(shared: &Shared, req: Request<Incoming>, method: &Method, api: &[&str], full: &[&str]) -> Resp {
    shared.lock().counters.requests += 1;
    if let Err(r) = rate_limit(shared) {
        return *r;
    }
    let query_route = matches!(
        (method.as_str(), api),
        ("GET" | "POST", ["index", _, "search"])
            | ("POST", ["index", _, "scroll"])
            | ("GET", ["index", _, "subject" | "entry"])
    );
    let grant = match authorize(shared, &req, query_route) {
        Ok(g) => g,
        Err(r) => return *r,
    };
    if is_admin_route(method.as_str(), api) {
        return admin(shared, req, method.as_str(), api, &grant).await;
    }
    if let ["index", index, what] = api {
        if let Some(kind) = WriteKind::route(method.as_str(), what) {
            return write_request(shared, req, index, &grant, kind).await;
        }
    }
    if query_route && !allows(&grant, false) {
        return cannot_search();
    }
    match api {
        ["index", index, ..] => match shared.service(index) {
            Some(svc) => svc.respond(req, caller(&grant)).await,
            None => no_index(index),
        },
        ["task", task_id] => task(shared, req, task_id, &grant).await,
        ["task_list", index] => match shared.service(index) {
            Some(svc) => svc.respond(req, caller(&grant)).await,
            None => no_index(index),
        },
        _ => no_resource(&full.join("/")),
    }
}

/// `/v1/task/<id>`: answered by the service of the index the task writes to.
async fn task(shared: &Shared, req: Request<Incoming>, task_id: &str, grant: &Grant) -> Resp {
    let svcs: Vec<_> = shared.lock().indexes.values().map(|ix| ix.svc.clone()).collect();
    match svcs.iter().find(|s| s.has_task(task_id)).or(svcs.first()) {
        Some(svc) => svc.clone().respond(req, caller(grant)).await,
        None => error(404, "NotFound.Generic", format!("There is no task with id {task_id}"), Value::Null),
    }
}

/// Serve on `listener` until `shutdown` resolves; the indexes are made first.
pub async fn serve(
    listener: tokio::net::TcpListener,
    opts: Options,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    run(listener, Arc::new(Shared::new(opts)?), shutdown).await;
    Ok(())
}

/// Serve `shared` on `listener` until `shutdown` resolves.
async fn run(listener: tokio::net::TcpListener, shared: Arc<Shared>, shutdown: impl std::future::Future<Output = ()>) {
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
        let shared = Arc::new(Shared::new(opts)?);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let thread = std::thread::Builder::new().name("globus-emulator".into()).spawn(move || {
            rt.block_on(async move {
                match tokio::net::TcpListener::from_std(std_listener) {
                    Ok(l) => {
                        run(l, shared, async {
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
