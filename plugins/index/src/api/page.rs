//! The web search page at `/` of `icicle serve`: an HTML page, its script, its stylesheet and
//! its icon, all built into the binary (`include_str!`; nothing from a CDN). The page calls
//! the same-origin Search API (`POST /v1/index/<id>/search`) with the bearer token the user
//! pastes, if any; the server answers it, as every request, for that caller's principals.
//!
//! Every asset is answered with its content type, `X-Content-Type-Options: nosniff` and a
//! Content-Security-Policy that allows only this origin's script, style, images and API
//! (no inline script or style, no frames, no forms posted elsewhere).

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use hyper::{Response, StatusCode};

use super::http::Resp;

/// The policy every asset is served with.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                       base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const INDEX_HTML: &str = include_str!("../../assets/index.html");
const APP_JS: &str = include_str!("../../assets/app.js");
const APP_CSS: &str = include_str!("../../assets/app.css");
const ICON_SVG: &str = include_str!("../../assets/icon.svg");

/// The placeholder in `index.html` the index id replaces.
const INDEX_ID_MARK: &str = "{{INDEX_ID}}";

/// `s` safe inside an HTML attribute value.
fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The body and content type of the asset at `path`, if it is one (the page names its index
/// id so its script knows where to search).
pub fn asset(path: &str, index_id: &str) -> Option<(String, &'static str)> {
    match path {
        "/" | "/index.html" => {
            Some((INDEX_HTML.replace(INDEX_ID_MARK, &html_escape(index_id)), "text/html; charset=utf-8"))
        }
        "/assets/app.js" => Some((APP_JS.to_string(), "text/javascript; charset=utf-8")),
        "/assets/app.css" => Some((APP_CSS.to_string(), "text/css; charset=utf-8")),
        "/assets/icon.svg" => Some((ICON_SVG.to_string(), "image/svg+xml")),
        _ => None,
    }
}

/// The response for an asset: its body (none for `HEAD`) and the headers every asset has.
pub fn response(body: String, content_type: &'static str, head: bool) -> Resp {
    let body = if head { Bytes::new() } else { Bytes::from(body) };
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = StatusCode::OK;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_its_index_escaped_and_assets_have_their_types() {
        let (html, ct) = asset("/", "a\"<b>").unwrap();
        assert!(html.contains("content=\"a&quot;&lt;b&gt;\"") && !html.contains(INDEX_ID_MARK), "{html}");
        assert_eq!(ct, "text/html; charset=utf-8");
        assert_eq!(asset("/assets/app.js", "x").unwrap().1, "text/javascript; charset=utf-8");
        assert_eq!(asset("/assets/app.css", "x").unwrap().1, "text/css; charset=utf-8");
        assert!(asset("/assets/other.js", "x").is_none());
        let r = response(String::from("x"), "text/css; charset=utf-8", false);
        assert_eq!(r.headers().get(CONTENT_SECURITY_POLICY).unwrap(), CSP);
        // No asset needs inline script or style, or anything from elsewhere.
        for (name, text) in [("index.html", INDEX_HTML), ("app.js", APP_JS)] {
            let text = text.replace("http://www.w3.org/2000/svg", "");
            assert!(!text.contains("http://") && !text.contains("https://"), "{name} names another origin");
            assert!(!text.contains("style=") && !text.contains("onclick"), "{name} has inline style or handlers");
        }
    }
}
