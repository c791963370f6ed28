//! HTTP plumbing the product's (`icicle_plugins_index::api::http`) does not give: Search errors
//! with `error_data`, OAuth2 errors and bodies, base64 (Basic auth) and raw request bodies.

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::CONTENT_LENGTH;
use hyper::Request;
use serde_json::{json, Value};

pub(super) use icicle_plugins_index::api::http::{error_response, json_body, json_response, parse_form, Resp};

use super::config::MAX_REQUEST_BYTES;

/// A refusal, answered as is (boxed: responses are large).
pub(super) type Refusal = Box<Resp>;

/// A Search error: `{"code","message","status","error_data"}`.
pub(super) fn error(status: u16, code: &str, message: impl Into<String>, data: Value) -> Resp {
    json_response(status, &json!({"code": code, "message": message.into(), "status": status, "error_data": data}))
}

/// An OAuth2 token-endpoint error.
pub(super) fn oauth_error(status: u16, err: &str) -> Resp {
    json_response(status, &json!({"error": err}))
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

/// Read a request body of at most [`MAX_REQUEST_BYTES`] (the token endpoint's form).
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

/// The 404 of an index that does not exist.
pub(super) fn no_index(index: &str) -> Resp {
    error(404, "NotFound.NoSuchIndex", format!("There is no search index named \"{index}\""), Value::Null)
}

/// The 404 of a path the emulator does not serve.
pub(super) fn no_resource(path: &str) -> Resp {
    error(404, "NotFound.Generic", format!("no such resource: {path}"), Value::Null)
}
