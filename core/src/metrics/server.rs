//! The `/metrics` and `/status` endpoints, served over HTTP/1.1 by hyper and bounded so that
//! nothing a client sends can exhaust the process that serves them: at most
//! [`MAX_CONNECTIONS`] are open at once (the rest wait in the kernel's listen backlog and hold
//! none of our file descriptors), a request head must arrive within [`HEAD_TIMEOUT`] and the
//! whole exchange end within [`CONNECTION_TIMEOUT`], one request per connection, and an accept
//! error (EMFILE under a low `ulimit -n`) backs off up to [`ACCEPT_BACKOFF_MAX`] instead of
//! spinning.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ACCEPT, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::{Metrics, OPENMETRICS, PROMETHEUS_TEXT};

/// Connections served at once; a scraper and a dashboard need one or two.
pub const MAX_CONNECTIONS: usize = 32;
/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may stay open, request and response together.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest pause after a failed accept (they double from 10 ms).
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Serve `/metrics` (OpenMetrics text when asked for, else the Prometheus 0.0.4 text) and
/// `/status` (a JSON snapshot) on `addr` until the process ends. Returns the bound address
/// (port 0 picks a free one).
pub async fn serve(addr: &str) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(accept_loop(listener));
    Ok(local)
}

async fn accept_loop(listener: TcpListener) {
    static ACCEPT_ERRORS: AtomicU64 = AtomicU64::new(0);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut backoff = Duration::ZERO;
    loop {
        // A slot first: while all are taken, new connections stay in the backlog.
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        match listener.accept().await {
            Ok((sock, _)) => {
                backoff = Duration::ZERO;
                tokio::spawn(async move {
                    let _slot = slot;
                    let _ = tokio::time::timeout(CONNECTION_TIMEOUT, serve_connection(sock)).await;
                });
            }
            Err(e) => {
                drop(slot);
                backoff = (backoff * 2).clamp(Duration::from_millis(10), ACCEPT_BACKOFF_MAX);
                Metrics::global().add(&crate::metrics::names::METRICS_ACCEPT_ERRORS_TOTAL, &[], 1.0);
                if let Some(n) = crate::log_sample::count_to_log(&ACCEPT_ERRORS) {
                    tracing::warn!(error = %e, n, backoff_ms = backoff.as_millis() as u64, "metrics server cannot accept a connection; pausing");
                }
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

async fn serve_connection(sock: TcpStream) {
    let svc = hyper::service::service_fn(|req: Request<Incoming>| async move { Ok::<_, Infallible>(respond(&req)) });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .keep_alive(false)
        .title_case_headers(true)
        .max_buf_size(16 * 1024)
        .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
        .await;
}

/// The response to one request: the query string does not change what is served.
fn respond<B>(req: &Request<B>) -> Response<Full<Bytes>> {
    let (method, path) = (req.method(), req.uri().path());
    let readable = method == Method::GET || method == Method::HEAD;
    // OpenMetrics when the scraper asks for it (Prometheus does), else the 0.0.4 text.
    let openmetrics = req
        .headers()
        .get_all(ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.contains("application/openmetrics-text")));
    let (status, ctype, body) = match path {
        "/metrics" | "/status" if !readable => {
            (StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET or HEAD only\n".to_string())
        }
        "/metrics" if openmetrics => (StatusCode::OK, OPENMETRICS, Metrics::global().openmetrics()),
        "/metrics" => (StatusCode::OK, PROMETHEUS_TEXT, Metrics::global().prometheus()),
        "/status" => (
            StatusCode::OK,
            "application/json",
            serde_json::to_string(&Metrics::global().snapshot()).unwrap_or_else(|_| "{}".into()),
        ),
        _ => (StatusCode::NOT_FOUND, "text/plain", "try /metrics or /status\n".to_string()),
    };
    // A HEAD's answer keeps the body's length in `Content-Length`; hyper sends no body.
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        resp.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, uri: &str, accept: Option<&str>) -> Request<()> {
        let mut b = Request::builder().method(method).uri(uri);
        if let Some(a) = accept {
            b = b.header(ACCEPT, a);
        }
        b.body(()).expect("a valid request")
    }

    #[test]
    fn paths_methods_and_content_types() {
        let r = respond(&request(Method::GET, "/metrics?x=1", None));
        assert_eq!((r.status(), r.headers()[CONTENT_TYPE].to_str().ok()), (StatusCode::OK, Some(PROMETHEUS_TEXT)));
        let r = respond(&request(Method::GET, "/metrics", Some("application/openmetrics-text; version=1.0.0")));
        assert_eq!(r.headers()[CONTENT_TYPE].to_str().ok(), Some(OPENMETRICS));
        let r = respond(&request(Method::GET, "/status", None));
        assert_eq!(r.headers()[CONTENT_TYPE].to_str().ok(), Some("application/json"));
        let r = respond(&request(Method::POST, "/status", None));
        assert_eq!((r.status(), r.headers()[ALLOW].to_str().ok()), (StatusCode::METHOD_NOT_ALLOWED, Some("GET, HEAD")));
        assert_eq!(respond(&request(Method::GET, "/", None)).status(), StatusCode::NOT_FOUND);
    }

    /// Over a real connection: a HEAD answers the length a GET's body has, and no body.
    #[test]
    fn head_answers_the_length_of_the_body_without_it() {
        use std::io::{Read, Write};
        // The server runs on the runtime's own thread while this one reads.
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("a runtime");
        let addr = rt.block_on(serve("127.0.0.1:0")).expect("bound");
        let ask = |method: &str| {
            let mut sock = std::net::TcpStream::connect(addr).expect("connect");
            sock.set_read_timeout(Some(Duration::from_secs(30))).expect("a timeout");
            // A path whose answer never changes (the metrics do, with other tests running).
            write!(sock, "{method} /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("send");
            let mut text = String::new();
            sock.read_to_string(&mut text).expect("the answer");
            text
        };
        let length = |text: &str| -> Option<usize> {
            text.lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(|v| v.trim().parse().ok()))?
        };
        let get = ask("GET");
        let head = ask("HEAD");
        let body = get.split("\r\n\r\n").nth(1).expect("a body");
        assert!(!body.is_empty());
        assert_eq!(length(&get), Some(body.len()), "{get}");
        assert_eq!(length(&head), Some(body.len()), "{head}");
        assert_eq!(head.split("\r\n\r\n").nth(1), Some(""), "{head}");
    }
}
