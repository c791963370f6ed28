//! The wire: JSON responses and Search's error documents, request bodies within Search's size
//! limit, URL decoding, and the bounded accept loops (TCP and Unix socket) that hand each
//! connection to the service. Bounded as the metrics server is (core/src/metrics/server.rs): at
//! most [`MAX_CONNECTIONS`] at once (the rest wait in the kernel's backlog), a request head
//! within [`HEAD_TIMEOUT`], a connection kept at most [`CONNECTION_LIFETIME`] (then closed
//! after its current request), and accept errors back off up to [`ACCEPT_BACKOFF_MAX`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Semaphore};

use super::{ApiError, Origin, Service};

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send a request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection stays open (kept alive between requests); then it is closed once
/// its current request is answered.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);
/// How long a request in progress may still take when the connection or the server closes.
pub const GRACE: Duration = Duration::from_secs(300);
/// The longest pause after a failed accept (they double from 10 ms).
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Search's request size limit (<https://docs.globus.org/api/search/limits/>).
pub const MAX_REQUEST_BYTES: usize = 10_000_000;

/// A response with its whole body.
pub type Resp = Response<Full<Bytes>>;

/// `v` as a JSON response with `status`.
pub fn json_response(status: u16, v: &Value) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// A Search error document: `{"code","message","status","error_data"}`
/// (<https://docs.globus.org/api/search/errors/>); a 401 says how to authenticate.
pub fn error_response(e: &ApiError) -> Resp {
    let mut r =
        json_response(e.status, &json!({"code": e.code, "message": e.message, "status": e.status, "error_data": null}));
    if e.status == 401 {
        r.headers_mut().insert("www-authenticate", HeaderValue::from_static("Bearer"));
    }
    r
}

/// `%XX` (and, in forms, `+`) decoded; `None` when malformed or not UTF-8.
pub fn percent_decode(s: &str, plus_is_space: bool) -> Option<String> {
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

/// `a=b&c=d` decoded (malformed pairs dropped).
pub fn parse_form(s: &str) -> HashMap<String, String> {
    s.split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Some((percent_decode(k, true)?, percent_decode(v, true)?))
        })
        .collect()
}

/// A request's JSON body of at most [`MAX_REQUEST_BYTES`]: 413 when larger, 415 without a JSON
/// content type, 400 when it is not JSON.
pub async fn json_body(req: Request<Incoming>) -> Result<Value, ApiError> {
    let too_large =
        || ApiError::new(413, "RequestTooLarge", format!("requests are limited to {MAX_REQUEST_BYTES} bytes"));
    let json_ct = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json"));
    if req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| n > MAX_REQUEST_BYTES)
    {
        return Err(too_large());
    }
    let bytes = match Limited::new(req.into_body(), MAX_REQUEST_BYTES).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
        Err(e) => return Err(ApiError::new(400, "BadRequest", format!("cannot read the request body: {e}"))),
    };
    if !json_ct {
        return Err(ApiError::new(
            415,
            "BadRequest.UnsupportedMediaType",
            "Content-Type: application/json is required",
        ));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::new(400, "BadRequest.InvalidJSON", format!("the body is not JSON: {e}")))
}

/// Serve one connection until it ends, its lifetime is over or the server stops (then after
/// the request in progress, within [`GRACE`]).
async fn connection<IO>(io: IO, svc: Arc<Service>, origin: Origin, mut stop: watch::Receiver<bool>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let svc = svc.clone();
        async move { Ok::<_, Infallible>(svc.handle(req, &origin).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .keep_alive(true)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = tokio::time::sleep(CONNECTION_LIFETIME) => {}
        _ = stop.wait_for(|s| *s) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(GRACE, conn).await;
}

/// Accept connections with `accept` until `stop` turns true, each served by `svc`; then wait
/// for the connections in progress to end.
pub async fn accept_loop<IO, A, F>(
    what: &'static str,
    mut accept: A,
    svc: Arc<Service>,
    mut stop: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    A: FnMut() -> F,
    F: Future<Output = std::io::Result<(IO, Origin)>>,
{
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut backoff = Duration::ZERO;
    loop {
        // A slot first: while all are taken, new connections stay in the backlog.
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => match s { Ok(s) => s, Err(_) => break },
            _ = stop.wait_for(|s| *s) => break,
        };
        let accepted = tokio::select! {
            a = accept() => a,
            _ = stop.wait_for(|s| *s) => break,
        };
        match accepted {
            Ok((io, origin)) => {
                backoff = Duration::ZERO;
                let (svc, stop) = (svc.clone(), stop.clone());
                tokio::spawn(async move {
                    let _slot = slot;
                    connection(io, svc, origin, stop).await;
                });
            }
            Err(e) => {
                drop(slot);
                backoff = (backoff * 2).clamp(Duration::from_millis(10), ACCEPT_BACKOFF_MAX);
                tracing::warn!(listener = what, error = %e, backoff_ms = backoff.as_millis() as u64, "icicle serve cannot accept a connection; pausing");
                tokio::time::sleep(backoff).await;
            }
        }
    }
    // Every slot back: every connection has ended.
    let _ = slots.acquire_many(MAX_CONNECTIONS as u32).await;
}
