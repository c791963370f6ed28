//! Who may call and how often: bearer tokens and scopes, the client-credentials token
//! endpoint, and the rate limit.

use std::time::Instant;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::Request;
use serde_json::{json, Value};

use icicle_plugins_index::api::auth::Caller;
use icicle_plugins_index::Visibility;

use super::config::{SCOPE_ALL, SCOPE_INGEST, SCOPE_SEARCH};
use super::http::{base64_decode, body, error, json_response, oauth_error, parse_form, Refusal, Resp};
use super::state::{Grant, Shared};

/// The caller's grant, or the 401 to answer; without an `Authorization` header, queries
/// (`anonymous_ok`) run as an anonymous caller who sees public entries only.
pub(super) fn authorize(shared: &Shared, req: &Request<Incoming>, anonymous_ok: bool) -> Result<Grant, Refusal> {
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

/// Whether the grant's scopes allow writing (ingest) or reading (search).
pub(super) fn allows(g: &Grant, write: bool) -> bool {
    g.scopes.iter().any(|s| s == SCOPE_ALL || s == if write { SCOPE_INGEST } else { SCOPE_SEARCH })
}

/// The caller the product answers for a grant: `public` and the grant's identity; every
/// authenticated caller counts as the index's owner, so it may use `bypass_visible_to`.
pub(super) fn caller(g: &Grant) -> Caller {
    let mut p = vec!["public".to_string()];
    p.extend(g.identity.clone());
    Caller {
        visibility: Visibility::Principals(p),
        writer: allows(g, true),
        authenticated: !g.anonymous,
        bypass: !g.anonymous,
    }
}

/// The 403 of a grant whose scopes do not allow searching.
pub(super) fn cannot_search() -> Resp {
    error(403, "Forbidden.Generic", "the token's scope does not allow searching the index", Value::Null)
}

/// Take one request from the bucket, or the 429 to answer.
pub(super) fn rate_limit(shared: &Shared) -> Result<(), Refusal> {
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

/// Globus Auth's token endpoint: an access token for the confidential client's credentials.
pub(super) async fn token_endpoint(shared: &Shared, req: Request<Incoming>) -> Resp {
    let Some((id, secret)) = shared.opts.client.clone() else { return oauth_error(401, "invalid_client") };
    let basic = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|h| h.strip_prefix("Basic ").or_else(|| h.strip_prefix("basic ")))
        .and_then(base64_decode);
    let form_ct = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
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
        Grant {
            expires: Some(Instant::now() + lifetime),
            scopes,
            identity: Some(format!("urn:globus:auth:identity:{id}")),
            anonymous: false,
        },
    );
    json_response(
        200,
        &json!({"access_token": token, "expires_in": lifetime.as_secs(), "token_type": "Bearer", "scope": scope, "resource_server": "search.api.globus.org", "other_tokens": []}),
    )
}
