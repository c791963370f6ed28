//! HTTP plumbing: JSON responses and Search errors, URL, form and base64 decoding, and
//! request bodies within the size limit.

use std::collections::HashMap;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use serde_json::{json, Value};

use super::config::MAX_REQUEST_BYTES;

/// A response with its whole body.
pub(super) type Resp = Response<Full<Bytes>>;
/// A refusal, answered as is (boxed: responses are large).
pub(super) type Refusal = Box<Resp>;

/// `v` as a JSON response with `status`.
pub(super) fn json_response(status: u16, v: &Value) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// A Search error: `{"code","message","status","error_data"}`.
pub(super) fn error(status: u16, code: &str, message: impl Into<String>, data: Value) -> Resp {
    json_response(status, &json!({"code": code, "message": message.into(), "status": status, "error_data": data}))
}

/// An OAuth2 token-endpoint error.
pub(super) fn oauth_error(status: u16, err: &str) -> Resp {
    json_response(status, &json!({"error": err}))
}

/// `%XX` (and, in forms, `+`) decoded; `None` when malformed or not UTF-8.
pub(super) fn percent_decode(s: &str, plus_is_space: bool) -> Option<String> {
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
pub(super) fn parse_form(s: &str) -> HashMap<String, String> {
    s.split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Some((percent_decode(k, true)?, percent_decode(v, true)?))
        })
        .collect()
}

/// Standard base64 decoded (padding optional).
pub(super) fn base64_decode(s: &str) -> Option<Vec<u8>> {
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
pub(super) fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The string of a [`hex`] marker.
pub(super) fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect();
    String::from_utf8(bytes?).ok()
}

/// Whether a `Content-Type` is `application/json` (parameters ignored).
pub(super) fn is_json(req_ct: Option<&HeaderValue>) -> bool {
    req_ct
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json"))
        .unwrap_or(false)
}

/// Read a request body of at most [`MAX_REQUEST_BYTES`].
pub(super) async fn body(req: Request<Incoming>) -> Result<Bytes, Refusal> {
    let too_large = || {
        Box::new(error(
            413,
            "RequestTooLarge",
            format!("requests are limited to {MAX_REQUEST_BYTES} bytes"),
            Value::Null,
        ))
    };
    if req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| n > MAX_REQUEST_BYTES)
    {
        return Err(too_large());
    }
    match Limited::new(req.into_body(), MAX_REQUEST_BYTES).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(Box::new(error(400, "BadRequest", format!("cannot read the request body: {e}"), Value::Null))),
    }
}

/// A read request's JSON body: 415 without a JSON content type, 400 when it is not JSON.
pub(super) async fn json_body(req: Request<Incoming>) -> Result<Value, Refusal> {
    let json_ct = is_json(req.headers().get(CONTENT_TYPE));
    let bytes = body(req).await?;
    if !json_ct {
        return Err(Box::new(error(
            415,
            "BadRequest.UnsupportedMediaType",
            "Content-Type: application/json is required",
            Value::Null,
        )));
    }
    serde_json::from_slice::<Value>(&bytes)
        .map_err(|_| Box::new(error(400, "BadRequest.InvalidJSON", "the body is not JSON", Value::Null)))
}

/// A decoded query parameter of the request URI.
pub(super) fn query_param(req: &Request<Incoming>, name: &str) -> Option<String> {
    req.uri().query().and_then(|q| parse_form(q).remove(name))
}

/// The 404 of an index that does not exist.
pub(super) fn no_index(index: &str) -> Resp {
    error(404, "NotFound.NoSuchIndex", format!("There is no search index named \"{index}\""), Value::Null)
}

/// The 403 of `bypass_visible_to` asked for without authentication.
pub(super) fn no_bypass() -> Resp {
    error(403, "Forbidden.Generic", "bypass_visible_to needs an authenticated index admin", Value::Null)
}

/// The 400 of a query that does not parse.
pub(super) fn bad_query(m: String) -> Resp {
    error(400, "BadRequest.ValidationError", m, Value::Null)
}

/// The 404 of a path the emulator does not serve.
pub(super) fn no_resource(path: &str) -> Resp {
    error(404, "NotFound.Generic", format!("no such resource: {path}"), Value::Null)
}
